//! The client's value types: what a request returns ([`Versioned`], [`SetOutcome`],
//! [`VdelOutcome`]), what a SET takes ([`SetOptions`]) and the [`ConnectionState`]. They depend
//! on the protocol only, so every part of the client (connection, rpc, observations, the
//! blocking facade) uses them without depending on the [`Client`](super::Client) itself.

use std::fmt;
use std::time::Duration;

use crate::protocol::hlc::Hlc;
use crate::protocol::resp3::SetCondition;

/// The connection's state, observable with [`crate::Client::state_changes`].
///
/// ```
/// use mqstate::ConnectionState;
///
/// assert_eq!(ConnectionState::Reconnecting.as_str(), "reconnecting");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectionState {
    /// The first connection is being made.
    Connecting,
    /// Connected and subscribed: requests go out.
    Connected,
    /// The connection dropped; the client is reconnecting (requests wait, up to their timeout).
    Reconnecting,
    /// Closed by [`crate::Client::close`] (or the last handle was dropped). Final.
    Closed,
}

impl ConnectionState {
    /// A stable snake_case name, for bindings and logs.
    ///
    /// ```
    /// # use mqstate::ConnectionState;
    /// assert_eq!(ConnectionState::Connected.as_str(), "connected");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionState::Connecting => "connecting",
            ConnectionState::Connected => "connected",
            ConnectionState::Reconnecting => "reconnecting",
            ConnectionState::Closed => "closed",
        }
    }
}

impl fmt::Display for ConnectionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A value with its version (the HLC the server stamped it with).
///
/// ```
/// use mqstate::{Hlc, Versioned};
///
/// let v = Versioned { value: "on", version: Hlc::new(1, 0, "StateStore") };
/// assert_eq!(v.value, "on");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<T> {
    /// The value.
    pub value: T,
    /// Its version.
    pub version: Hlc,
}

/// Options of a SET: condition (NX / NEX), expiry, fencing token.
///
/// ```
/// use std::time::Duration;
/// use mqstate::{SetCondition, SetOptions};
///
/// let o = SetOptions::default().nx().expiry(Duration::from_millis(1500));
/// assert_eq!(o.condition, SetCondition::NotExists);
/// assert_eq!(o.expiry, Some(Duration::from_millis(1500)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SetOptions {
    /// Always, `NX` (only if absent) or `NEX` (only if absent or equal to the value).
    pub condition: SetCondition,
    /// Expire the key after this long (`PX`, whole milliseconds rounded up; zero is refused).
    pub expiry: Option<Duration>,
    /// A fencing token (`__ft`) for a key protected by a lock (docs/protocol.md section 5).
    pub fencing_token: Option<Hlc>,
    /// Ask the service to keep the key on disk: the request carries the user property
    /// `aio-persistence: true`, as the official Azure IoT Operations SDKs send it. On Azure IoT
    /// Operations the broker's state store persistence policy decides what that means; on
    /// `mqstate serve --data-dir DIR --persist requested` only such keys survive a restart.
    pub persist: bool,
}

impl SetOptions {
    /// Set only if the key does not exist (`NX`).
    ///
    /// ```
    /// # use mqstate::{SetCondition, SetOptions};
    /// assert_eq!(SetOptions::default().nx().condition, SetCondition::NotExists);
    /// ```
    #[must_use]
    pub fn nx(mut self) -> Self {
        self.condition = SetCondition::NotExists;
        self
    }

    /// Set only if the key does not exist or already holds this value (`NEX`).
    ///
    /// ```
    /// # use mqstate::{SetCondition, SetOptions};
    /// assert_eq!(SetOptions::default().nex().condition, SetCondition::NotExistsOrEqual);
    /// ```
    #[must_use]
    pub fn nex(mut self) -> Self {
        self.condition = SetCondition::NotExistsOrEqual;
        self
    }

    /// Expire the key after `expiry`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use mqstate::SetOptions;
    /// assert!(SetOptions::default().expiry(Duration::from_secs(1)).expiry.is_some());
    /// ```
    #[must_use]
    pub fn expiry(mut self, expiry: Duration) -> Self {
        self.expiry = Some(expiry);
        self
    }

    /// Send this fencing token.
    ///
    /// ```
    /// # use mqstate::{Hlc, SetOptions};
    /// let o = SetOptions::default().fencing_token(Hlc::new(1, 0, "StateStore"));
    /// assert!(o.fencing_token.is_some());
    /// ```
    #[must_use]
    pub fn fencing_token(mut self, token: Hlc) -> Self {
        self.fencing_token = Some(token);
        self
    }

    /// Ask the service to persist the key (sends `aio-persistence: true`).
    ///
    /// ```
    /// # use mqstate::SetOptions;
    /// assert!(SetOptions::default().persist().persist);
    /// ```
    #[must_use]
    pub fn persist(mut self) -> Self {
        self.persist = true;
        self
    }
}

/// The outcome of a SET.
///
/// ```
/// use mqstate::{Hlc, SetOutcome};
///
/// let o = SetOutcome { applied: false, version: Hlc::new(1, 0, "StateStore") };
/// assert!(!o.applied); // the NX / NEX condition failed
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetOutcome {
    /// False when the NX / NEX condition failed (`:-1`).
    pub applied: bool,
    /// The response's `__ts`: the key's new version when applied (for a lease, the fencing
    /// token).
    pub version: Hlc,
}

/// The outcome of a VDEL.
///
/// ```
/// use mqstate::VdelOutcome;
///
/// assert!(VdelOutcome::Deleted.deleted());
/// assert!(!VdelOutcome::ValueMismatch.deleted());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VdelOutcome {
    /// The key held the value and was deleted (`:1`).
    Deleted,
    /// There was no such key (`:0`).
    NotFound,
    /// The key holds another value and was kept (`:-1`).
    ValueMismatch,
}

impl VdelOutcome {
    /// True for [`VdelOutcome::Deleted`].
    ///
    /// ```
    /// # use mqstate::VdelOutcome;
    /// assert!(!VdelOutcome::NotFound.deleted());
    /// ```
    pub fn deleted(self) -> bool {
        self == VdelOutcome::Deleted
    }
}
