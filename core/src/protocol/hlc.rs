//! Hybrid logical clocks (docs/protocol.md section 4): the [`Hlc`] value that versions every key
//! and the per-application [`HlcClock`] that produces and merges them.
//!
//! An HLC is written `{wallClockMs}:{counter}:{nodeId}`. Values are ordered by milliseconds,
//! then counter, then node id (byte-wise), which is the order the derived [`Ord`] gives.
//!
//! ```
//! use std::sync::Arc;
//! use mqstate::protocol::hlc::{Hlc, HlcClock, ManualClock};
//!
//! let wall = Arc::new(ManualClock::new(1_696_374_425_000));
//! let clock = HlcClock::with_wall_clock("CLIENT", wall.clone());
//!
//! // Before a send: the wall clock moved on, so the counter restarts at 0.
//! let ts = clock.send_update().unwrap();
//! assert_eq!(ts.to_string(), "001696374425000:00000:CLIENT");
//!
//! // A version received from the server is merged in; the clock moves past it.
//! let remote: Hlc = "001696374425000:00007:StateStore".parse().unwrap();
//! let merged = clock.merge(&remote).unwrap();
//! assert_eq!(merged.to_string(), "001696374425000:00008:CLIENT");
//! assert!(merged > remote);
//!
//! // A remote clock far in the future is refused (the default maximum drift is 60 s).
//! let future = Hlc::new(1_696_374_425_000 + 61_000, 0, "StateStore");
//! assert!(clock.merge(&future).is_err());
//! ```

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use super::errors::HlcError;
use super::errors::hlc_reason as reason;

/// The maximum drift [`HlcClock::new`] allows: the protocol requires clients' clocks to be
/// within one minute of the server's.
pub const DEFAULT_MAX_DRIFT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// The value
// ---------------------------------------------------------------------------------------------

/// The node id rule, one place for [`Hlc::try_new`] and the client id check of
/// `ConnectOptions` (the client id is the node id of the client's clock): no `:`.
///
/// ```
/// use mqstate::protocol::hlc::check_node_id;
///
/// assert!(check_node_id("line-3").is_ok());
/// assert!(check_node_id("line:3").is_err());
/// ```
pub fn check_node_id(node_id: &str) -> Result<(), HlcError> {
    if node_id.contains(':') {
        return Err(HlcError::InvalidNodeId {
            node_id: node_id.to_owned(),
        });
    }
    Ok(())
}

/// One hybrid-logical-clock value: the version of a key, the `__ts` of a request or response,
/// or a fencing token.
///
/// The derived order is the protocol's: milliseconds, then counter, then node id compared
/// byte-wise. Parsing accepts any zero padding; formatting pads the milliseconds to 15 digits
/// and the counter to 5, as the official clients do.
///
/// The node id may be empty (the official SDKs do not check it, and refusing a value they
/// accept would only break interoperability) and may hold any character except `:`, which
/// separates the parts. An `Hlc` built in code with a `:` in its node id formats to a string
/// that does not parse back.
///
/// ```
/// use mqstate::Hlc;
///
/// let a: Hlc = "1696374425000:0:CLIENT".parse().unwrap();
/// assert_eq!(a, Hlc::new(1_696_374_425_000, 0, "CLIENT"));
/// assert_eq!(a.to_string(), "001696374425000:00000:CLIENT");
///
/// let b: Hlc = "001696374425000:00001:A".parse().unwrap();
/// assert!(a < b); // the counter decides before the node id
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hlc {
    /// Wall-clock milliseconds since the Unix epoch (as the producing node saw them).
    pub ms: u64,
    /// Logical counter, ordering events within one millisecond.
    pub counter: u64,
    /// The node that produced the value (the client id, or `StateStore` for the service).
    pub node_id: String,
}

impl Hlc {
    /// Builds a value from trusted parts (the library's own clocks, parsed values). A node
    /// id with `:` is not checked here; values built from user input go through
    /// [`Hlc::try_new`], which refuses it.
    ///
    /// ```
    /// use mqstate::Hlc;
    ///
    /// let h = Hlc::new(12, 3, "node");
    /// assert_eq!((h.ms, h.counter, h.node_id.as_str()), (12, 3, "node"));
    /// ```
    pub fn new(ms: u64, counter: u64, node_id: impl Into<String>) -> Self {
        Hlc {
            ms,
            counter,
            node_id: node_id.into(),
        }
    }

    /// Builds a value from parts that come from a user (every binding's `Hlc` constructor):
    /// a node id containing `:` is refused with [`HlcError::InvalidNodeId`], since the
    /// value would not parse back. An empty node id is allowed (see [`Hlc`]).
    ///
    /// ```
    /// use mqstate::Hlc;
    ///
    /// assert_eq!(Hlc::try_new(12, 3, "node").unwrap(), Hlc::new(12, 3, "node"));
    /// let err = Hlc::try_new(12, 3, "a:b").unwrap_err();
    /// assert_eq!(err.kind_str(), "invalid_node_id");
    /// ```
    pub fn try_new(ms: u64, counter: u64, node_id: impl Into<String>) -> Result<Self, HlcError> {
        let node_id = node_id.into();
        check_node_id(&node_id)?;
        Ok(Hlc {
            ms,
            counter,
            node_id,
        })
    }

    /// Parses the string form from raw bytes (for bindings that receive a byte buffer);
    /// bytes that are not UTF-8 are [`HlcError::Malformed`].
    ///
    /// ```
    /// use mqstate::Hlc;
    ///
    /// assert_eq!(Hlc::parse_bytes(b"5:6:n").unwrap(), Hlc::new(5, 6, "n"));
    /// assert!(Hlc::parse_bytes(b"5:6:\xff").is_err());
    /// ```
    pub fn parse_bytes(bytes: &[u8]) -> Result<Self, HlcError> {
        match std::str::from_utf8(bytes) {
            Ok(s) => s.parse(),
            Err(_) => Err(HlcError::malformed(
                &String::from_utf8_lossy(bytes),
                reason::NOT_UTF8,
            )),
        }
    }
}

/// Parses an unsigned decimal of any width. `u64::from_str` is not used because it accepts a
/// leading `+`, which the protocol does not allow.
fn parse_u64(
    part: &str,
    input: &str,
    empty: &'static str,
    invalid: &'static str,
    too_large: &'static str,
) -> Result<u64, HlcError> {
    if part.is_empty() {
        return Err(HlcError::malformed(input, empty));
    }
    let mut value: u64 = 0;
    for b in part.bytes() {
        if !b.is_ascii_digit() {
            return Err(HlcError::malformed(input, invalid));
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or_else(|| HlcError::malformed(input, too_large))?;
    }
    Ok(value)
}

impl FromStr for Hlc {
    type Err = HlcError;

    /// Parses `{ms}:{counter}:{nodeId}` (docs/protocol.md section 4). See [`Hlc`] for what a node
    /// id may hold.
    ///
    /// ```
    /// use mqstate::Hlc;
    ///
    /// let h: Hlc = "001696374425000:00000:CLIENT".parse().unwrap();
    /// assert_eq!(h, Hlc::new(1_696_374_425_000, 0, "CLIENT"));
    /// assert!("1:2".parse::<Hlc>().is_err());
    /// assert!("1:2:a:b".parse::<Hlc>().is_err());
    /// assert!("-1:2:a".parse::<Hlc>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(HlcError::malformed(s, reason::EMPTY));
        }
        let mut parts = s.split(':');
        let (Some(ms), Some(counter), Some(node_id)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(HlcError::malformed(s, reason::TOO_FEW_PARTS));
        };
        if parts.next().is_some() {
            return Err(HlcError::malformed(s, reason::TOO_MANY_PARTS));
        }
        let ms = parse_u64(
            ms,
            s,
            reason::EMPTY_MS,
            reason::INVALID_MS,
            reason::MS_TOO_LARGE,
        )?;
        let counter = parse_u64(
            counter,
            s,
            reason::EMPTY_COUNTER,
            reason::INVALID_COUNTER,
            reason::COUNTER_TOO_LARGE,
        )?;
        Ok(Hlc::new(ms, counter, node_id))
    }
}

impl fmt::Display for Hlc {
    /// Writes the form the official clients send: milliseconds padded to 15 digits, counter to
    /// 5 (wider values are written in full).
    ///
    /// ```
    /// use mqstate::Hlc;
    ///
    /// assert_eq!(Hlc::new(7, 42, "n").to_string(), "000000000000007:00042:n");
    /// assert_eq!(
    ///     Hlc::new(u64::MAX, 123_456, "").to_string(),
    ///     "18446744073709551615:123456:"
    /// );
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_text(f, self.ms, self.counter, &self.node_id)
    }
}

/// The text form of a value (see `Display for Hlc`), in one place for the value and for
/// [`HlcClock::send_update_text`].
fn write_text(out: &mut impl fmt::Write, ms: u64, counter: u64, node_id: &str) -> fmt::Result {
    write!(out, "{ms:015}:{counter:05}:{node_id}")
}

// ---------------------------------------------------------------------------------------------
// Wall clocks
// ---------------------------------------------------------------------------------------------

/// A source of wall-clock time in Unix milliseconds. [`SystemClock`] in production;
/// [`ManualClock`] in tests, to move time at will.
///
/// ```
/// use mqstate::protocol::hlc::{ManualClock, WallClock};
///
/// fn age_ms(clock: &dyn WallClock, since: u64) -> u64 {
///     clock.now_ms().saturating_sub(since)
/// }
/// assert_eq!(age_ms(&ManualClock::new(1_500), 1_000), 500);
/// ```
pub trait WallClock: Send + Sync + fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system's real-time clock.
///
/// ```
/// use mqstate::protocol::hlc::{SystemClock, WallClock};
///
/// assert!(SystemClock.now_ms() > 1_600_000_000_000); // after September 2020
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl WallClock for SystemClock {
    /// Milliseconds since the Unix epoch; 0 if the system clock is set before 1970, and
    /// `u64::MAX` some 584 million years from now.
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A wall clock that only moves when told to, shared between a test and the clocks (or
/// servers and clients) under test through an `Arc`.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use mqstate::protocol::hlc::{HlcClock, ManualClock, WallClock};
///
/// let wall = Arc::new(ManualClock::new(1_000));
/// let clock = HlcClock::with_wall_clock("n", wall.clone());
/// wall.advance(Duration::from_secs(2));
/// assert_eq!(clock.now_ms(), 3_000);
/// wall.set(10);
/// assert_eq!(wall.now_ms(), 10);
/// ```
#[derive(Debug, Default)]
pub struct ManualClock {
    ms: AtomicU64,
}

impl ManualClock {
    /// A clock that reads `ms` until it is moved.
    ///
    /// ```
    /// use mqstate::protocol::hlc::{ManualClock, WallClock};
    ///
    /// assert_eq!(ManualClock::new(42).now_ms(), 42);
    /// ```
    pub fn new(ms: u64) -> Self {
        ManualClock {
            ms: AtomicU64::new(ms),
        }
    }

    /// Sets the time (it may go backwards, as a real clock corrected by NTP can).
    ///
    /// ```
    /// use mqstate::protocol::hlc::{ManualClock, WallClock};
    ///
    /// let wall = ManualClock::new(42);
    /// wall.set(7);
    /// assert_eq!(wall.now_ms(), 7);
    /// ```
    pub fn set(&self, ms: u64) {
        self.ms.store(ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `by` (whole milliseconds; saturates at `u64::MAX`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use mqstate::protocol::hlc::{ManualClock, WallClock};
    ///
    /// let wall = ManualClock::new(42);
    /// wall.advance(Duration::from_millis(8));
    /// assert_eq!(wall.now_ms(), 50);
    /// ```
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        // The closure always returns Some, so the update cannot fail.
        let _ = self
            .ms
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |ms| {
                Some(ms.saturating_add(by))
            });
    }
}

impl WallClock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.ms.load(Ordering::SeqCst)
    }
}

// ---------------------------------------------------------------------------------------------
// The application clock
// ---------------------------------------------------------------------------------------------

/// The mutable part of an [`HlcClock`]; the node id lives outside the lock so that
/// [`HlcClock::node_id`] can lend it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct State {
    ms: u64,
    counter: u64,
}

/// The one hybrid logical clock of an application (client or server), safe to share between
/// threads (`Arc<HlcClock>`).
///
/// [`send_update`](HlcClock::send_update) before every message sent,
/// [`merge`](HlcClock::merge) on every `__ts` received. Both refuse to move the clock more
/// than [`max_drift`](HlcClock::max_drift) ahead of the wall clock, and on any error leave the
/// clock as it was. The clock starts at `0:0:{node id}`.
///
/// ```
/// use std::sync::Arc;
/// use mqstate::protocol::hlc::{HlcClock, ManualClock};
///
/// let wall = Arc::new(ManualClock::new(1_000));
/// let clock = HlcClock::with_wall_clock("CLIENT", wall.clone());
/// let a = clock.send_update().unwrap();
/// let b = clock.send_update().unwrap(); // same millisecond: the counter moves
/// assert_eq!((a.ms, a.counter, b.ms, b.counter), (1_000, 0, 1_000, 1));
/// ```
#[derive(Debug)]
pub struct HlcClock {
    node_id: String,
    wall: Arc<dyn WallClock>,
    max_drift: Duration,
    state: Mutex<State>,
}

impl HlcClock {
    /// A clock on the system's wall clock, with the protocol's maximum drift of 60 s.
    ///
    /// The node id should not contain `:` (the values it produces would not parse back;
    /// see [`Hlc`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use mqstate::HlcClock;
    ///
    /// let clock = HlcClock::new("my-client");
    /// assert_eq!(clock.node_id(), "my-client");
    /// assert_eq!(clock.max_drift(), Duration::from_secs(60));
    /// let ts = clock.send_update().unwrap();
    /// assert_eq!(ts.node_id, "my-client");
    /// ```
    pub fn new(node_id: impl Into<String>) -> Self {
        Self::with_wall_clock(node_id, Arc::new(SystemClock))
    }

    /// A clock on the given wall clock (a [`ManualClock`] in tests), maximum drift 60 s.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use mqstate::protocol::hlc::{HlcClock, ManualClock};
    ///
    /// let clock = HlcClock::with_wall_clock("n", Arc::new(ManualClock::new(5)));
    /// assert_eq!(clock.send_update().unwrap().ms, 5);
    /// ```
    pub fn with_wall_clock(node_id: impl Into<String>, wall: Arc<dyn WallClock>) -> Self {
        HlcClock {
            node_id: node_id.into(),
            wall,
            max_drift: DEFAULT_MAX_DRIFT,
            state: Mutex::new(State { ms: 0, counter: 0 }),
        }
    }

    /// Sets how far ahead of the wall clock an HLC may be (builder style).
    ///
    /// ```
    /// use std::time::Duration;
    /// use mqstate::HlcClock;
    ///
    /// let clock = HlcClock::new("n").with_max_drift(Duration::from_secs(5));
    /// assert_eq!(clock.max_drift(), Duration::from_secs(5));
    /// ```
    #[must_use]
    pub fn with_max_drift(mut self, max_drift: Duration) -> Self {
        self.max_drift = max_drift;
        self
    }

    /// The node id written into every value this clock produces.
    ///
    /// ```
    /// use mqstate::HlcClock;
    ///
    /// assert_eq!(HlcClock::new("StateStore").node_id(), "StateStore");
    /// ```
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// How far ahead of the wall clock an HLC may be.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mqstate::HlcClock;
    ///
    /// assert_eq!(HlcClock::new("n").max_drift(), Duration::from_secs(60));
    /// ```
    pub fn max_drift(&self) -> Duration {
        self.max_drift
    }

    /// The wall clock's time, in Unix milliseconds.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use mqstate::protocol::hlc::{HlcClock, ManualClock};
    ///
    /// let clock = HlcClock::with_wall_clock("n", Arc::new(ManualClock::new(77)));
    /// assert_eq!(clock.now_ms(), 77);
    /// ```
    pub fn now_ms(&self) -> u64 {
        self.wall.now_ms()
    }

    /// The clock's current value (the last one produced or merged; `0:0:{node id}` at first),
    /// without moving it.
    ///
    /// ```
    /// use mqstate::{Hlc, HlcClock};
    ///
    /// let clock = HlcClock::new("n");
    /// assert_eq!(clock.current(), Hlc::new(0, 0, "n"));
    /// let ts = clock.send_update().unwrap();
    /// assert_eq!(clock.current(), ts);
    /// ```
    pub fn current(&self) -> Hlc {
        let state = *self.lock();
        self.value(state)
    }

    /// Checks that `remote` is at most [`max_drift`](HlcClock::max_drift) ahead of the wall
    /// clock (compared on milliseconds; a value behind the wall clock is always fine). The
    /// server uses it to refuse a `__ts` or `__ft` from the future.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use mqstate::protocol::hlc::{Hlc, HlcClock, HlcError, ManualClock};
    ///
    /// let clock = HlcClock::with_wall_clock("StateStore", Arc::new(ManualClock::new(100_000)));
    /// assert!(clock.check_not_too_far_ahead(&Hlc::new(160_000, 9, "c")).is_ok());
    /// assert!(clock.check_not_too_far_ahead(&Hlc::new(0, 0, "c")).is_ok());
    /// let err = clock.check_not_too_far_ahead(&Hlc::new(160_001, 0, "c")).unwrap_err();
    /// assert!(matches!(err, HlcError::Drift { .. }));
    /// ```
    pub fn check_not_too_far_ahead(&self, remote: &Hlc) -> Result<(), HlcError> {
        self.check_drift(remote.ms, self.wall.now_ms())
    }

    /// Moves the clock for a message about to be sent and returns the value to send as `__ts`:
    /// `(now, 0)` if the wall clock is past the clock's milliseconds, otherwise the counter
    /// plus one.
    ///
    /// Errors (the clock is left unchanged): [`HlcError::CounterOverflow`], and
    /// [`HlcError::Drift`] when the clock is already more than the maximum drift ahead of the
    /// wall clock (possible only if the wall clock went backwards after a merge).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use mqstate::protocol::hlc::{HlcClock, ManualClock};
    ///
    /// let wall = Arc::new(ManualClock::new(1_000));
    /// let clock = HlcClock::with_wall_clock("n", wall.clone());
    /// assert_eq!(clock.send_update().unwrap().to_string(), "000000000001000:00000:n");
    /// assert_eq!(clock.send_update().unwrap().to_string(), "000000000001000:00001:n");
    /// wall.advance(Duration::from_millis(1));
    /// assert_eq!(clock.send_update().unwrap().to_string(), "000000000001001:00000:n");
    /// ```
    pub fn send_update(&self) -> Result<Hlc, HlcError> {
        self.advance_for_send().map(|new| self.value(new))
    }

    /// [`HlcClock::send_update`], written as the request's `__ts` text in one allocation (a
    /// request's hot path: the value itself is not needed, and `to_string` would grow its
    /// buffer several times).
    #[cfg(feature = "client")]
    pub(crate) fn send_update_text(&self) -> Result<String, HlcError> {
        let new = self.advance_for_send()?;
        // Up to 20 digits each for milliseconds and counter, two colons.
        let mut text = String::with_capacity(42 + self.node_id.len());
        // Writing into a String cannot fail.
        let _ = write_text(&mut text, new.ms, new.counter, &self.node_id);
        Ok(text)
    }

    fn advance_for_send(&self) -> Result<State, HlcError> {
        let now = self.wall.now_ms();
        let new = {
            let mut state = self.lock();
            let new = if now > state.ms {
                State {
                    ms: now,
                    counter: 0,
                }
            } else {
                State {
                    ms: state.ms,
                    counter: state
                        .counter
                        .checked_add(1)
                        .ok_or(HlcError::CounterOverflow { ms: state.ms })?,
                }
            };
            self.check_drift(new.ms, now)?;
            *state = new;
            new
        };
        Ok(new)
    }

    /// Merges a received value (a response's or notification's `__ts`) into the clock, by
    /// the rules of the HLC paper (docs/protocol.md section 4), and returns the clock's new value.
    ///
    /// The milliseconds become the largest of the clock's, the remote's and the wall clock's;
    /// the counter becomes `max(both counters) + 1` if the clock and the remote share those
    /// milliseconds, the counter of whichever one has them plus one otherwise, and 0 if the
    /// wall clock is ahead of both. The result is therefore strictly greater than the previous
    /// value and than `remote` on (milliseconds, counter); its node id is this clock's.
    ///
    /// Errors (the clock is left unchanged): [`HlcError::Drift`] when the result would be
    /// more than the maximum drift ahead of the wall clock (a remote from the future), and
    /// [`HlcError::CounterOverflow`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use mqstate::protocol::hlc::{Hlc, HlcClock, ManualClock};
    ///
    /// let clock = HlcClock::with_wall_clock("n", Arc::new(ManualClock::new(1_000)));
    /// // The remote is ahead (but within the drift): take its milliseconds, its counter + 1.
    /// let merged = clock.merge(&Hlc::new(2_000, 4, "StateStore")).unwrap();
    /// assert_eq!(merged, Hlc::new(2_000, 5, "n"));
    /// // Same milliseconds on both sides: the larger counter + 1.
    /// let merged = clock.merge(&Hlc::new(2_000, 9, "StateStore")).unwrap();
    /// assert_eq!(merged, Hlc::new(2_000, 10, "n"));
    /// // The remote is behind: our own counter + 1.
    /// let merged = clock.merge(&Hlc::new(500, 0, "StateStore")).unwrap();
    /// assert_eq!(merged, Hlc::new(2_000, 11, "n"));
    /// ```
    pub fn merge(&self, remote: &Hlc) -> Result<Hlc, HlcError> {
        self.advance_past(remote).map(|new| self.value(new))
    }

    /// [`HlcClock::merge`] without building the new value (a response's hot path needs only
    /// the clock moved).
    #[cfg(feature = "client")]
    pub(crate) fn merge_only(&self, remote: &Hlc) -> Result<(), HlcError> {
        self.advance_past(remote).map(|_| ())
    }

    fn advance_past(&self, remote: &Hlc) -> Result<State, HlcError> {
        let now = self.wall.now_ms();
        let new = {
            let mut state = self.lock();
            let ms = state.ms.max(remote.ms).max(now);
            let counter = if ms == state.ms && ms == remote.ms {
                state.counter.max(remote.counter).checked_add(1)
            } else if ms == state.ms {
                state.counter.checked_add(1)
            } else if ms == remote.ms {
                remote.counter.checked_add(1)
            } else {
                Some(0)
            };
            // Drift first: a remote from the future is the more telling error of the two.
            self.check_drift(ms, now)?;
            let counter = counter.ok_or(HlcError::CounterOverflow { ms })?;
            let new = State { ms, counter };
            *state = new;
            new
        };
        Ok(new)
    }

    fn check_drift(&self, ms: u64, now: u64) -> Result<(), HlcError> {
        let ahead = Duration::from_millis(ms.saturating_sub(now));
        if ahead > self.max_drift {
            return Err(HlcError::Drift {
                ahead,
                max_drift: self.max_drift,
            });
        }
        Ok(())
    }

    /// Only arithmetic happens under the lock, so a poisoned lock still holds a consistent
    /// state and is used as is.
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn value(&self, state: State) -> Hlc {
        Hlc::new(state.ms, state.counter, self.node_id.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock_at(ms: u64) -> (Arc<ManualClock>, HlcClock) {
        let wall = Arc::new(ManualClock::new(ms));
        let clock = HlcClock::with_wall_clock("me", wall.clone());
        (wall, clock)
    }

    fn parse(s: &str) -> Result<Hlc, HlcError> {
        s.parse()
    }

    #[test]
    fn parses_the_protocol_example() {
        let h = parse("001696374425000:00000:CLIENT").unwrap();
        assert_eq!(h, Hlc::new(1_696_374_425_000, 0, "CLIENT"));
        assert_eq!(h.to_string(), "001696374425000:00000:CLIENT");
    }

    #[test]
    fn parses_any_width_and_the_extremes() {
        assert_eq!(parse("0:0:").unwrap(), Hlc::new(0, 0, ""));
        let wide = format!("{}1:{}2:n", "0".repeat(100), "0".repeat(100));
        assert_eq!(parse(&wide).unwrap(), Hlc::new(1, 2, "n"));
        let max = format!("{m}:{m}:n", m = u64::MAX);
        assert_eq!(parse(&max).unwrap(), Hlc::new(u64::MAX, u64::MAX, "n"));
    }

    #[test]
    fn node_id_may_hold_anything_but_a_colon() {
        assert_eq!(parse("1:2: a b ").unwrap().node_id, " a b ");
        assert_eq!(parse("1:2:é\u{0}").unwrap().node_id, "é\u{0}");
        assert_eq!(
            parse("1:2:a:b").unwrap_err().reason_code(),
            Some("too_many_parts")
        );
    }

    #[test]
    fn malformed_inputs_name_their_reason() {
        let cases = [
            ("", "empty"),
            ("1", "too_few_parts"),
            ("1:2", "too_few_parts"),
            ("1:2:3:4", "too_many_parts"),
            (":2:n", "empty_ms"),
            ("1::n", "empty_counter"),
            ("+1:2:n", "invalid_ms"),
            ("-1:2:n", "invalid_ms"),
            (" 1:2:n", "invalid_ms"),
            ("1 :2:n", "invalid_ms"),
            ("0x1:2:n", "invalid_ms"),
            ("1:+2:n", "invalid_counter"),
            ("1:2 :n", "invalid_counter"),
            ("١:2:n", "invalid_ms"), // Arabic-Indic digit one: not ASCII
            ("18446744073709551616:0:n", "ms_too_large"),
            ("0:18446744073709551616:n", "counter_too_large"),
            ("99999999999999999999999:0:n", "ms_too_large"),
        ];
        for (input, code) in cases {
            let err = parse(input).unwrap_err();
            assert_eq!(err.reason_code(), Some(code), "{input:?}: {err}");
            assert_eq!(err.kind_str(), "malformed");
            match &err {
                HlcError::Malformed { input: kept, .. } => assert_eq!(kept, input),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn malformed_message_escapes_and_truncates() {
        let err = parse("1:x\r\n:n").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("malformed HLC \"1:x\\r\\n:n\": {}", reason::INVALID_COUNTER)
        );
        let long = format!("1:2{}", ":".repeat(1000));
        let msg = parse(&long).unwrap_err().to_string();
        assert!(msg.len() < 300, "{msg}");
        assert!(msg.contains("...\": expected 3 parts"), "{msg}");
    }

    #[test]
    fn parse_bytes_rejects_non_utf8() {
        let err = Hlc::parse_bytes(b"1:2:\xff").unwrap_err();
        assert_eq!(err.reason_code(), Some("not_utf8"));
        assert!(err.to_string().contains("not valid UTF-8"), "{err}");
    }

    #[test]
    fn foreign_malformed_reason_is_other() {
        let err = HlcError::Malformed {
            input: "x".into(),
            reason: "made up elsewhere",
        };
        assert_eq!(err.reason_code(), Some("other"));
        assert_eq!(HlcError::CounterOverflow { ms: 1 }.reason_code(), None);
    }

    #[test]
    fn every_reason_code_is_distinct_snake_case() {
        let mut codes: Vec<_> = reason::CODES.iter().map(|&(_, c)| c).collect();
        for c in &codes {
            assert!(
                c.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{c}"
            );
        }
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), reason::CODES.len());
    }

    #[test]
    fn display_pads_but_never_truncates() {
        assert_eq!(Hlc::new(0, 0, "").to_string(), "000000000000000:00000:");
        assert_eq!(
            Hlc::new(1_234_567_890_123_456, 123_456, "x").to_string(),
            "1234567890123456:123456:x"
        );
    }

    #[test]
    fn order_is_ms_then_counter_then_node_bytes() {
        let a = Hlc::new(1, 9, "z");
        let b = Hlc::new(2, 0, "a");
        let c = Hlc::new(2, 1, "a");
        let d = Hlc::new(2, 1, "b");
        assert!(a < b && b < c && c < d);
        // Byte-wise, not locale or case-insensitive: 'Z' (0x5A) < 'a' (0x61) < 'é' (0xC3..).
        assert!(Hlc::new(0, 0, "Z") < Hlc::new(0, 0, "a"));
        assert!(Hlc::new(0, 0, "a") < Hlc::new(0, 0, "é"));
        assert!(Hlc::new(0, 0, "") < Hlc::new(0, 0, "a"));
    }

    #[test]
    fn send_update_follows_the_wall_clock() {
        let (wall, clock) = clock_at(1_000);
        assert_eq!(clock.current(), Hlc::new(0, 0, "me"));
        assert_eq!(clock.send_update().unwrap(), Hlc::new(1_000, 0, "me"));
        assert_eq!(clock.send_update().unwrap(), Hlc::new(1_000, 1, "me"));
        wall.set(999); // backwards: the clock keeps its milliseconds
        assert_eq!(clock.send_update().unwrap(), Hlc::new(1_000, 2, "me"));
        wall.set(1_001);
        assert_eq!(clock.send_update().unwrap(), Hlc::new(1_001, 0, "me"));
        assert_eq!(clock.current(), Hlc::new(1_001, 0, "me"));
    }

    #[test]
    #[cfg(feature = "client")]
    fn send_text_and_merge_only_move_the_clock_as_their_value_twins() {
        // Two clocks on one wall clock, one driven through the value methods, one through
        // the hot path's text and merge-only methods: same texts, same states throughout.
        let wall = Arc::new(ManualClock::new(1_000));
        let by_value = HlcClock::with_wall_clock("node-7", wall.clone());
        let by_text = HlcClock::with_wall_clock("node-7", wall.clone());
        let step = |remote: Option<Hlc>| {
            if let Some(remote) = remote {
                by_value.merge(&remote).unwrap();
                by_text.merge_only(&remote).unwrap();
            }
            let text = by_text.send_update_text().unwrap();
            assert_eq!(text, by_value.send_update().unwrap().to_string());
            assert_eq!(text.parse::<Hlc>().unwrap(), by_text.current());
            text
        };
        assert_eq!(step(None), "000000000001000:00000:node-7");
        assert_eq!(step(None), "000000000001000:00001:node-7");
        assert_eq!(
            step(Some(Hlc::new(1_200, 99_999, "StateStore"))),
            "000000000001200:100001:node-7"
        );
        wall.advance(Duration::from_millis(500));
        assert_eq!(step(None), "000000000001500:00000:node-7");
        // Errors leave both clocks alone.
        let future = Hlc::new(u64::MAX / 2, 0, "StateStore");
        assert!(by_value.merge(&future).is_err());
        assert!(by_text.merge_only(&future).is_err());
        assert_eq!(step(None), "000000000001500:00001:node-7");
    }

    #[test]
    fn merge_applies_each_rule_of_the_paper() {
        // Now ahead of both: counter 0.
        let (wall, clock) = clock_at(1_000);
        assert_eq!(
            clock.merge(&Hlc::new(500, 7, "r")).unwrap(),
            Hlc::new(1_000, 0, "me")
        );
        // All three equal: max(counters) + 1, either side larger.
        assert_eq!(
            clock.merge(&Hlc::new(1_000, 5, "r")).unwrap(),
            Hlc::new(1_000, 6, "me")
        );
        assert_eq!(
            clock.merge(&Hlc::new(1_000, 2, "r")).unwrap(),
            Hlc::new(1_000, 7, "me")
        );
        // Remote ahead: remote counter + 1.
        assert_eq!(
            clock.merge(&Hlc::new(3_000, 3, "r")).unwrap(),
            Hlc::new(3_000, 4, "me")
        );
        // Own ahead of remote and now: own counter + 1.
        wall.set(2_000);
        assert_eq!(
            clock.merge(&Hlc::new(2_500, 50, "r")).unwrap(),
            Hlc::new(3_000, 5, "me")
        );
        // Own and remote equal, now behind: max + 1.
        assert_eq!(
            clock.merge(&Hlc::new(3_000, 9, "r")).unwrap(),
            Hlc::new(3_000, 10, "me")
        );
        // Now ahead of both again.
        wall.set(4_000);
        assert_eq!(
            clock.merge(&Hlc::new(3_999, u64::MAX, "r")).unwrap(),
            Hlc::new(4_000, 0, "me")
        );
    }

    #[test]
    fn merge_refuses_a_remote_beyond_the_drift_and_keeps_the_clock() {
        let (_wall, clock) = clock_at(100_000);
        clock.send_update().unwrap();
        let before = clock.current();
        // Exactly the maximum drift ahead is allowed...
        let ok = clock.merge(&Hlc::new(160_000, 0, "r")).unwrap();
        assert_eq!(ok, Hlc::new(160_000, 1, "me"));
        // ...one millisecond more is not.
        let (_wall, clock) = clock_at(100_000);
        clock.send_update().unwrap();
        let err = clock.merge(&Hlc::new(160_001, 0, "r")).unwrap_err();
        assert_eq!(
            err,
            HlcError::Drift {
                ahead: Duration::from_millis(60_001),
                max_drift: DEFAULT_MAX_DRIFT
            }
        );
        assert_eq!(err.kind_str(), "drift");
        assert_eq!(
            err.to_string(),
            "clock drift: the HLC is 60.001s ahead of the wall clock, more than the allowed maximum drift of 60s"
        );
        assert_eq!(clock.current(), before);
    }

    #[test]
    fn send_update_refuses_when_merged_forward_and_the_wall_clock_went_back() {
        let (wall, clock) = clock_at(100_000);
        clock.merge(&Hlc::new(150_000, 0, "r")).unwrap();
        wall.set(80_000);
        let before = clock.current();
        let err = clock.send_update().unwrap_err();
        assert!(
            matches!(err, HlcError::Drift { ahead, .. } if ahead == Duration::from_secs(70)),
            "{err:?}"
        );
        assert_eq!(clock.current(), before);
        wall.set(90_000); // exactly 60 s behind the clock: allowed again
        assert_eq!(clock.send_update().unwrap(), Hlc::new(150_000, 2, "me"));
    }

    #[test]
    fn counter_overflow_is_an_error_and_keeps_the_clock() {
        let (_wall, clock) = clock_at(1_000);
        let top = Hlc::new(1_000, u64::MAX, "r");
        assert_eq!(
            clock.merge(&top).unwrap_err(),
            HlcError::CounterOverflow { ms: 1_000 }
        );
        assert_eq!(clock.current(), Hlc::new(0, 0, "me"));
        // Reach u64::MAX, then a send must overflow.
        clock.merge(&Hlc::new(1_000, u64::MAX - 1, "r")).unwrap();
        assert_eq!(clock.current().counter, u64::MAX);
        let err = clock.send_update().unwrap_err();
        assert_eq!(err, HlcError::CounterOverflow { ms: 1_000 });
        assert_eq!(err.kind_str(), "counter_overflow");
        assert!(err.to_string().contains("1000 ms"), "{err}");
        assert_eq!(clock.current().counter, u64::MAX);
    }

    #[test]
    fn max_drift_is_configurable_with_sub_millisecond_precision() {
        let wall = Arc::new(ManualClock::new(1_000));
        let clock =
            HlcClock::with_wall_clock("me", wall).with_max_drift(Duration::from_micros(1_500));
        assert!(
            clock
                .check_not_too_far_ahead(&Hlc::new(1_001, 0, "r"))
                .is_ok()
        );
        assert!(
            clock
                .check_not_too_far_ahead(&Hlc::new(1_002, 0, "r"))
                .is_err()
        );
        let zero = HlcClock::with_wall_clock("me", Arc::new(ManualClock::new(5)))
            .with_max_drift(Duration::ZERO);
        assert!(
            zero.check_not_too_far_ahead(&Hlc::new(5, u64::MAX, "r"))
                .is_ok()
        );
        assert!(zero.check_not_too_far_ahead(&Hlc::new(6, 0, "r")).is_err());
    }

    #[test]
    fn manual_clock_saturates() {
        let wall = ManualClock::new(u64::MAX - 1);
        wall.advance(Duration::from_secs(10));
        assert_eq!(wall.now_ms(), u64::MAX);
        wall.advance(Duration::MAX);
        assert_eq!(wall.now_ms(), u64::MAX);
    }

    #[test]
    fn concurrent_sends_are_unique_and_increasing_per_thread() {
        let wall = Arc::new(ManualClock::new(1_000));
        let clock = Arc::new(HlcClock::with_wall_clock("me", wall.clone()));
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let clock = clock.clone();
                let wall = wall.clone();
                std::thread::spawn(move || {
                    let mut seen = Vec::new();
                    for n in 0..1_000 {
                        if i == 0 && n % 100 == 0 {
                            wall.advance(Duration::from_millis(1));
                        }
                        seen.push(clock.send_update().unwrap());
                    }
                    seen
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in threads {
            let seen = t.join().unwrap();
            assert!(seen.windows(2).all(|w| w[0] < w[1]));
            all.extend(seen);
        }
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
    }

    #[test]
    fn a_poisoned_lock_does_not_stop_the_clock() {
        let (_wall, clock) = clock_at(1_000);
        let clock = Arc::new(clock);
        let c = clock.clone();
        let _ = std::thread::spawn(move || {
            let _guard = c.state.lock().unwrap();
            panic!("poison the lock");
        })
        .join();
        assert!(clock.state.is_poisoned());
        assert_eq!(clock.send_update().unwrap(), Hlc::new(1_000, 0, "me"));
    }
}
