//! Leases, locks and leader election with fencing tokens (docs/protocol.md section 5).
//!
//! Everything here is built on the public [`Client`] API: a lease is one key holding the
//! holder's name, acquired and renewed with `SET name holder NEX PX ttl` and released with
//! `VDEL name holder`. The version of the `+OK` reply is the **fencing token**: a write to
//! a protected key carries it as `__ft`, and the server refuses a write whose token is
//! older than the last one it saw for that key, so a holder that lost its lease without
//! knowing (a long pause, a partition) cannot overwrite the work of the next holder.
//!
//! - [`Lease`]: acquire / wait / renew (by hand or automatically) / release, with a stream
//!   of [`LeaseEvent`]s.
//! - [`Lock`]: a lease used as a mutex; [`Lock::edit`] is a fenced read-modify-write.
//! - [`LeaderElection`]: campaign, resign, the current leader, and [`LeadershipEvent`]s.
//! - [`blocking`]: the same for [`crate::blocking::Client`] users.
//!
//! ```no_run
//! use std::time::Duration;
//! use mqstate::lock::Lease;
//! use mqstate::{Client, ConnectOptions, SetOptions};
//!
//! # async fn demo() -> Result<(), mqstate::Error> {
//! let client = Client::connect(ConnectOptions::new("127.0.0.1", 1883)).await?;
//! let lease = Lease::new(&client, "pump-controller", "edge-node-7")?;
//! if let Some(token) = lease.acquire(Duration::from_secs(10)).await? {
//!     client
//!         .set("pump/speed", "1200", SetOptions::default().fencing_token(token))
//!         .await?;
//!     lease.release().await?;
//! }
//! # Ok(()) }
//! ```

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::observe::KeyObservation;
use crate::resp3::NotifyOperation;
use crate::{Client, Error, Hlc, SetOptions, VdelOutcome};

/// A fencing token: the version the server gave the lease's `+OK` reply.
pub type FencingToken = Hlc;

/// How many events a slow [`LeaseEvents`] reader may fall behind before older ones are
/// skipped (it is then told how many it missed).
const EVENT_BUFFER: usize = 64;

/// Default fraction of the ttl after which the automatic renewal renews.
pub const DEFAULT_RENEW_FRACTION: f64 = 0.5;

/// What happened to a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseEvent {
    /// The lease was acquired; the token protects writes from now on.
    Acquired(FencingToken),
    /// The lease was renewed; the new token is strictly greater than the previous one.
    Renewed(FencingToken),
    /// The lease is no longer held: a renewal failed (`reason` says how), or came back
    /// `:-1` because someone else holds it now. Automatic renewal has stopped.
    Lost {
        /// Why.
        reason: String,
    },
    /// [`Lease::release`] gave the lease up.
    Released,
}

impl LeaseEvent {
    /// The stable snake_case name of the event (`"acquired"`, `"renewed"`, `"lost"`,
    /// `"released"`), which every binding exposes; never renamed.
    ///
    /// ```
    /// use mqstate::lock::LeaseEvent;
    /// assert_eq!(LeaseEvent::Released.name(), "released");
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            LeaseEvent::Acquired(_) => "acquired",
            LeaseEvent::Renewed(_) => "renewed",
            LeaseEvent::Lost { .. } => "lost",
            LeaseEvent::Released => "released",
        }
    }

    /// The fencing token the event carries (`acquired`, `renewed`).
    pub fn token(&self) -> Option<&FencingToken> {
        match self {
            LeaseEvent::Acquired(t) | LeaseEvent::Renewed(t) => Some(t),
            _ => None,
        }
    }
}

/// Shared between a [`Lease`] and its renewal task.
struct LeaseState {
    token: Mutex<Option<FencingToken>>,
    ttl: Mutex<Option<Duration>>,
    renewal: Mutex<Option<JoinHandle<()>>>,
    events: broadcast::Sender<LeaseEvent>,
}

impl LeaseState {
    fn set_token(&self, token: Option<FencingToken>) {
        *self.token.lock().unwrap_or_else(PoisonError::into_inner) = token;
    }

    fn token(&self) -> Option<FencingToken> {
        self.token
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn ttl(&self) -> Option<Duration> {
        *self.ttl.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn emit(&self, event: LeaseEvent) {
        // No receiver is not an error: events are for whoever listens.
        let _ = self.events.send(event);
    }

    fn stop_renewal(&self) {
        if let Some(task) = self
            .renewal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
    }
}

impl Drop for LeaseState {
    fn drop(&mut self) {
        self.stop_renewal();
    }
}

/// A lease on a key: at most one holder at a time, for a time-to-live that the holder
/// renews. Cheap to clone; clones share the token and the renewal.
///
/// ```no_run
/// use std::time::Duration;
/// use mqstate::lock::{Lease, LeaseEvent};
///
/// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
/// let lease = Lease::new(&client, "batch-job", "worker-1")?.with_session_id("4f1c");
/// let token = lease.acquire_wait(Duration::from_secs(5), Duration::from_secs(30)).await?;
/// let mut events = lease.events();
/// lease.auto_renew(0.5)?;
/// while let Some(event) = events.recv().await {
///     if let LeaseEvent::Lost { reason } = event {
///         eprintln!("lost the lease: {reason}");
///         break;
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lease {
    client: Client,
    name: Bytes,
    holder: Bytes,
    state: Arc<LeaseState>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.name)
            .field("holder", &self.holder)
            .field("token", &self.state.token())
            .finish()
    }
}

impl Lease {
    /// A lease on key `name`, held as `holder` (bytes: any value the holder can recognise
    /// as its own). Nothing is sent until [`acquire`](Lease::acquire).
    ///
    /// An empty name or holder is an [`Error::InvalidArgument`] (the same in every language).
    ///
    /// ```no_run
    /// # fn demo(client: &mqstate::Client) -> Result<(), mqstate::Error> {
    /// let lease = mqstate::lock::Lease::new(client, "lock/printer", "host-a")?;
    /// assert_eq!(lease.holder_value(), "host-a");
    /// assert!(mqstate::lock::Lease::new(client, "", "host-a").is_err());
    /// # Ok(()) }
    /// ```
    pub fn new(
        client: &Client,
        name: impl AsRef<[u8]>,
        holder: impl AsRef<[u8]>,
    ) -> Result<Lease, Error> {
        Self::named(client, name.as_ref(), holder.as_ref(), "lease", "holder")
    }

    /// [`Lease::new`], with the words an error message uses for the name and the holder
    /// (a lock's holder, an election's candidate).
    fn named(
        client: &Client,
        name: &[u8],
        holder: &[u8],
        what: &str,
        holder_word: &str,
    ) -> Result<Lease, Error> {
        if name.is_empty() {
            return Err(Error::InvalidArgument(format!("the {what} name is empty")));
        }
        if holder.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "the {what} {holder_word} is empty"
            )));
        }
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        Ok(Lease {
            client: client.clone(),
            name: Bytes::copy_from_slice(name),
            holder: Bytes::copy_from_slice(holder),
            state: Arc::new(LeaseState {
                token: Mutex::new(None),
                ttl: Mutex::new(None),
                renewal: Mutex::new(None),
                events,
            }),
        })
    }

    /// Appends a session id to the holder (`holder:session`), as the Go and .NET SDKs do,
    /// so that two processes of the same holder name do not take each other's lease.
    ///
    /// ```no_run
    /// # fn demo(client: &mqstate::Client) -> Result<(), mqstate::Error> {
    /// let lease = mqstate::lock::Lease::new(client, "l", "host-a")?.with_session_id("1");
    /// assert_eq!(lease.holder_value(), "host-a:1");
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_session_id(mut self, session: impl AsRef<[u8]>) -> Lease {
        let mut holder = BytesMut::with_capacity(self.holder.len() + 1 + session.as_ref().len());
        holder.extend_from_slice(&self.holder);
        holder.extend_from_slice(b":");
        holder.extend_from_slice(session.as_ref());
        self.holder = holder.freeze();
        self
    }

    /// The lease's key.
    pub fn name(&self) -> &Bytes {
        &self.name
    }

    /// The value this lease writes when it holds the key.
    pub fn holder_value(&self) -> &Bytes {
        &self.holder
    }

    /// The token of the last successful acquire or renewal, while the lease is believed held.
    pub fn current_token(&self) -> Option<FencingToken> {
        self.state.token()
    }

    /// The lease's events from now on (acquired, renewed, lost, released).
    pub fn events(&self) -> LeaseEvents {
        LeaseEvents {
            rx: self.state.events.subscribe(),
        }
    }

    /// Tries once: `SET name holder NEX PX ttl`. `Some(token)` when the lease is held (newly
    /// or again: acquiring a lease one holds renews it), `None` when someone else holds it.
    ///
    /// ```no_run
    /// # async fn demo(lease: mqstate::lock::Lease) -> Result<(), mqstate::Error> {
    /// use std::time::Duration;
    /// match lease.acquire(Duration::from_secs(10)).await? {
    ///     Some(token) => println!("held, token {token}"),
    ///     None => println!("held by {:?}", lease.holder().await?),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, ttl: Duration) -> Result<Option<FencingToken>, Error> {
        if ttl.is_zero() {
            return Err(Error::InvalidArgument(
                "a lease needs a ttl greater than zero".into(),
            ));
        }
        let was_held = self.state.token().is_some();
        let token = self.set_nex(&self.client, ttl).await?;
        *self
            .state
            .ttl
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(ttl);
        self.state.set_token(token.clone());
        match &token {
            Some(t) if was_held => self.state.emit(LeaseEvent::Renewed(t.clone())),
            Some(t) => self.state.emit(LeaseEvent::Acquired(t.clone())),
            None => {}
        }
        Ok(token)
    }

    async fn set_nex(&self, client: &Client, ttl: Duration) -> Result<Option<FencingToken>, Error> {
        set_nex(client, &self.name, &self.holder, ttl).await
    }

    /// Acquires the lease, waiting up to `timeout` for the current holder to release it or
    /// for its lease to expire. It observes the key and retries when a DELETE notification
    /// arrives, so it wakes within a round trip of the release, without polling; as a
    /// safety net (a notification lost with a connection) it also retries after each `ttl`.
    /// Fails with [`Error::Timeout`] if the lease could not be had in time.
    ///
    /// ```no_run
    /// # async fn demo(lease: mqstate::lock::Lease) -> Result<(), mqstate::Error> {
    /// use std::time::Duration;
    /// let token = lease.acquire_wait(Duration::from_secs(10), Duration::from_secs(60)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_wait(
        &self,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<FencingToken, Error> {
        let deadline = Instant::now() + timeout;
        // Observe before the first try, so a release between the try and the wait is seen.
        let mut changes = self.client.observe(&self.name).await?;
        loop {
            if let Some(token) = self.acquire(ttl).await? {
                return Ok(token);
            }
            let retry_at = (Instant::now() + ttl).min(deadline);
            loop {
                let now = Instant::now();
                if now >= deadline {
                    return Err(Error::Timeout(timeout));
                }
                match tokio::time::timeout_at(retry_at, changes.recv()).await {
                    // The key is gone: try again at once.
                    Ok(Some(Ok(n))) if n.operation == NotifyOperation::Delete => break,
                    // Someone else (re)took it, or a lag report: keep waiting.
                    Ok(Some(_)) => continue,
                    // The observation ended (client closed): the next acquire says why.
                    Ok(None) => {
                        changes = self.client.observe(&self.name).await?;
                        break;
                    }
                    // The holder's ttl may have passed without a notification reaching us.
                    Err(_) => break,
                }
            }
        }
    }

    /// Renews the lease with the ttl of the last acquire: `Some(token)` (strictly greater
    /// than the previous one) while held; `None` if it was lost to someone else.
    ///
    /// ```no_run
    /// # async fn demo(lease: mqstate::lock::Lease) -> Result<(), mqstate::Error> {
    /// if lease.renew().await?.is_none() {
    ///     println!("lost it");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn renew(&self) -> Result<Option<FencingToken>, Error> {
        let ttl = self
            .state
            .ttl()
            .ok_or_else(|| Error::InvalidArgument("renew() needs a lease acquired first".into()))?;
        let token = self.set_nex(&self.client, ttl).await?;
        match &token {
            Some(t) => {
                self.state.set_token(token.clone());
                self.state.emit(LeaseEvent::Renewed(t.clone()));
            }
            None => {
                self.state.set_token(None);
                self.state.emit(LeaseEvent::Lost {
                    reason: "the lease is held by someone else".into(),
                });
            }
        }
        Ok(token)
    }

    /// Renews the lease in the background every `fraction` × ttl (0 < fraction < 1, for
    /// example [`DEFAULT_RENEW_FRACTION`]). The renewal stops, and a
    /// [`LeaseEvent::Lost`] is sent, as soon as one renewal fails or comes back `:-1`, or the
    /// key is deleted or set by someone else (it is observed meanwhile); each renewal waits
    /// at most until the lease would expire. Replaces an earlier renewal.
    ///
    /// ```no_run
    /// # async fn demo(lease: mqstate::lock::Lease) -> Result<(), mqstate::Error> {
    /// use std::time::Duration;
    /// lease.acquire(Duration::from_secs(6)).await?;
    /// lease.auto_renew(0.5)?; // renews every 3 s
    /// # Ok(()) }
    /// ```
    pub fn auto_renew(&self, fraction: f64) -> Result<(), Error> {
        check_renew_fraction(fraction)?;
        let ttl = self.state.ttl().ok_or_else(|| {
            Error::InvalidArgument("auto_renew() needs a lease acquired first".into())
        })?;
        let period = ttl.mul_f64(fraction);
        // A renewal that has not come back when the lease would have expired is a loss.
        let client = self
            .client
            .with_timeout(ttl.saturating_sub(period).max(Duration::from_millis(50)));
        let (name, holder) = (self.name.clone(), self.holder.clone());
        // The task holds only a weak link to the state, so dropping every Lease ends it.
        let state = Arc::downgrade(&self.state);
        let task = tokio::spawn(async move {
            // Watching the key tells at once when someone deletes or takes the lease, which
            // a NEX renewal alone would not (it would silently re-create a deleted key).
            let mut changes = client.observe(&name).await.ok();
            let mut next = Instant::now() + period;
            let reason = loop {
                let change = async {
                    match changes.as_mut() {
                        Some(c) => c.recv().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = tokio::time::sleep_until(next) => {}
                    change = change => match change {
                        Some(Ok(n)) => match n.operation {
                            NotifyOperation::Set(v) if v == holder => continue,
                            NotifyOperation::Set(_) => break "the lease was taken by another holder".to_owned(),
                            NotifyOperation::Delete => break "the lease key was deleted or expired".to_owned(),
                        },
                        Some(Err(_)) => continue,
                        None => { changes = None; continue; }
                    },
                }
                let Some(state) = state.upgrade() else { return };
                next = Instant::now() + period;
                match set_nex(&client, &name, &holder, ttl).await {
                    Ok(Some(token)) => {
                        state.set_token(Some(token.clone()));
                        state.emit(LeaseEvent::Renewed(token));
                    }
                    Ok(None) => break "the lease is held by someone else".to_owned(),
                    Err(e) => break format!("renewal failed: {e}"),
                }
            };
            if let Some(state) = state.upgrade() {
                state.set_token(None);
                state.emit(LeaseEvent::Lost { reason });
            }
        });
        let mut slot = self
            .state
            .renewal
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = slot.replace(task) {
            old.abort();
        }
        Ok(())
    }

    /// Stops the automatic renewal (the lease stays held until its ttl passes).
    pub fn stop_renewal(&self) {
        self.state.stop_renewal();
    }

    /// Gives the lease up: stops the renewal and sends `VDEL name holder`. True if this
    /// holder held it (the key was deleted).
    ///
    /// ```no_run
    /// # async fn demo(lease: mqstate::lock::Lease) -> Result<(), mqstate::Error> {
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(&self) -> Result<bool, Error> {
        self.state.stop_renewal();
        let outcome = self.client.vdel(&self.name, &self.holder, None).await?;
        let was_held = self.state.token().is_some();
        self.state.set_token(None);
        if was_held {
            self.state.emit(LeaseEvent::Released);
        }
        Ok(outcome == VdelOutcome::Deleted)
    }

    /// Who holds the lease now (a GET of the key), `None` if nobody.
    pub async fn holder(&self) -> Result<Option<Bytes>, Error> {
        Ok(self.client.get(&self.name).await?.map(|v| v.value))
    }

    /// Observes the lease's key: a SET notification carries the new holder, a DELETE says
    /// it was released or expired.
    pub async fn observe(&self) -> Result<KeyObservation, Error> {
        self.client.observe(&self.name).await
    }
}

/// The renewal fraction rule, one place for [`Lease::auto_renew`] and
/// [`LeaderElection::with_renew_fraction`]: strictly between 0 and 1 (NaN is refused).
fn check_renew_fraction(fraction: f64) -> Result<f64, Error> {
    if fraction > 0.0 && fraction < 1.0 {
        Ok(fraction)
    } else {
        Err(Error::InvalidArgument(format!(
            "the renewal fraction must be between 0 and 1 (exclusive), got {fraction}"
        )))
    }
}

/// Acquires or renews: `SET name holder NEX PX ttl`; the `+OK` reply's version is the token.
async fn set_nex(
    client: &Client,
    name: &[u8],
    holder: &[u8],
    ttl: Duration,
) -> Result<Option<FencingToken>, Error> {
    let outcome = client
        .set(name, holder, SetOptions::default().nex().expiry(ttl))
        .await?;
    Ok(outcome.applied.then_some(outcome.version))
}

/// A stream of [`LeaseEvent`]s ([`Lease::events`]).
#[derive(Debug)]
pub struct LeaseEvents {
    rx: broadcast::Receiver<LeaseEvent>,
}

impl LeaseEvents {
    /// The next event; `None` once every [`Lease`] clone is gone. A reader that fell more
    /// than 64 events behind skips the oldest ones.
    pub async fn recv(&mut self) -> Option<LeaseEvent> {
        loop {
            match self.rx.recv().await {
                Ok(event) => return Some(event),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// The next event if one is waiting.
    pub fn try_recv(&mut self) -> Option<LeaseEvent> {
        loop {
            match self.rx.try_recv() {
                Ok(event) => return Some(event),
                Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
                Err(_) => return None,
            }
        }
    }
}

/// A lock: a [`Lease`] used as a mutex, whose guard carries the fencing token.
///
/// Mutual exclusion is between **holders**: two users of the same holder value share the
/// lease (a NEX set with an equal value succeeds), so give every concurrent user (task,
/// process) its own holder, for example with [`Lease::with_session_id`].
///
/// ```no_run
/// use std::time::Duration;
/// use mqstate::lock::Lock;
///
/// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
/// let lock = Lock::new(&client, "lock/config", "service-a")?;
/// // Fenced read-modify-write of "config" under the lock.
/// lock.edit("config", Duration::from_secs(5), Duration::from_secs(10), |old| {
///     let n: u64 = old.and_then(|v| std::str::from_utf8(&v).ok()?.parse().ok()).unwrap_or(0);
///     Some((n + 1).to_string().into())
/// })
/// .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Lock {
    lease: Lease,
}

impl Lock {
    /// A lock named `name`, taken as `holder`. An empty name or holder is an
    /// [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # fn demo(client: &mqstate::Client) -> Result<(), mqstate::Error> {
    /// let lock = mqstate::lock::Lock::new(client, "lock/config", "service-a")?;
    /// assert_eq!(lock.lease().name(), "lock/config");
    /// # Ok(()) }
    /// ```
    pub fn new(
        client: &Client,
        name: impl AsRef<[u8]>,
        holder: impl AsRef<[u8]>,
    ) -> Result<Lock, Error> {
        Ok(Lock {
            lease: Lease::named(client, name.as_ref(), holder.as_ref(), "lock", "holder")?,
        })
    }

    /// Appends a session id to the holder (`holder:session`, see
    /// [`Lease::with_session_id`]), so that two processes with the same holder name exclude
    /// each other.
    ///
    /// ```no_run
    /// # fn demo(client: &mqstate::Client) -> Result<(), mqstate::Error> {
    /// let lock = mqstate::lock::Lock::new(client, "l", "host-a")?.with_session_id("7");
    /// assert_eq!(lock.lease().holder_value(), "host-a:7");
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_session_id(self, session: impl AsRef<[u8]>) -> Lock {
        Lock {
            lease: self.lease.with_session_id(session),
        }
    }

    /// The lease underneath.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Takes the lock for `ttl`, waiting up to `timeout` for it ([`Error::Timeout`] then).
    pub async fn lock(&self, ttl: Duration, timeout: Duration) -> Result<LockGuard, Error> {
        let token = self.lease.acquire_wait(ttl, timeout).await?;
        Ok(LockGuard {
            lease: self.lease.clone(),
            token,
            released: false,
        })
    }

    /// Under the lock: GET `key`, call `f` with its value, then SET the returned value (or
    /// DEL the key for `None`) with the lock's fencing token, and unlock. Returns what `f`
    /// returned. The lock is released even when the write fails.
    ///
    /// ```no_run
    /// # async fn demo(lock: mqstate::lock::Lock) -> Result<(), mqstate::Error> {
    /// use std::time::Duration;
    /// let new = lock
    ///     .edit("greeting", Duration::from_secs(5), Duration::from_secs(10), |old| {
    ///         old.map(|v| [&v[..], b"!"].concat().into())
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn edit<F>(
        &self,
        key: impl AsRef<[u8]>,
        ttl: Duration,
        timeout: Duration,
        f: F,
    ) -> Result<Option<Bytes>, Error>
    where
        F: FnOnce(Option<Bytes>) -> Option<Bytes>,
    {
        self.edit_async(key, ttl, timeout, |old| std::future::ready(Ok(f(old))))
            .await
    }

    /// [`Lock::edit`] with an async, fallible `f` (what the bindings use: a Python coroutine,
    /// a JavaScript function returning a Promise, a C callback). The lock is taken, `key`
    /// read, `f` awaited; if `f` fails nothing is written, the lock is released and `f`'s
    /// error returned. Errors of the client convert into `E`.
    ///
    /// ```no_run
    /// # async fn demo(lock: mqstate::lock::Lock) -> Result<(), mqstate::Error> {
    /// use std::time::Duration;
    /// let counter = lock
    ///     .edit_async("counter", Duration::from_secs(5), Duration::from_secs(10), |old| async move {
    ///         let n: u64 = match old {
    ///             Some(v) => std::str::from_utf8(&v)
    ///                 .ok()
    ///                 .and_then(|s| s.parse().ok())
    ///                 .ok_or_else(|| mqstate::Error::InvalidArgument("not a number".into()))?,
    ///             None => 0,
    ///         };
    ///         Ok::<_, mqstate::Error>(Some((n + 1).to_string().into()))
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn edit_async<F, Fut, E>(
        &self,
        key: impl AsRef<[u8]>,
        ttl: Duration,
        timeout: Duration,
        f: F,
    ) -> Result<Option<Bytes>, E>
    where
        F: FnOnce(Option<Bytes>) -> Fut,
        Fut: Future<Output = Result<Option<Bytes>, E>>,
        E: From<Error>,
    {
        let guard = self.lock(ttl, timeout).await?;
        let result = self.edit_locked(key.as_ref(), guard.token(), f).await;
        let unlocked = guard.unlock().await;
        let new = result?;
        unlocked?;
        Ok(new)
    }

    async fn edit_locked<F, Fut, E>(
        &self,
        key: &[u8],
        token: &FencingToken,
        f: F,
    ) -> Result<Option<Bytes>, E>
    where
        F: FnOnce(Option<Bytes>) -> Fut,
        Fut: Future<Output = Result<Option<Bytes>, E>>,
        E: From<Error>,
    {
        let client = &self.lease.client;
        let old = client.get(key).await?.map(|v| v.value);
        let new = f(old).await?;
        match &new {
            Some(value) => {
                client
                    .set(
                        key,
                        value,
                        SetOptions::default().fencing_token(token.clone()),
                    )
                    .await?;
            }
            None => {
                client.del(key, Some(token)).await?;
            }
        }
        Ok(new)
    }
}

/// A held [`Lock`]. [`unlock`](LockGuard::unlock) releases it; dropping it releases it on a
/// best-effort basis (in the background, when a tokio runtime is at hand), and otherwise the
/// lock expires after its ttl.
#[derive(Debug)]
pub struct LockGuard {
    lease: Lease,
    token: FencingToken,
    released: bool,
}

impl LockGuard {
    /// The fencing token to send with every write the lock protects.
    pub fn token(&self) -> &FencingToken {
        &self.token
    }

    /// Releases the lock. True if it was still held by us.
    pub async fn unlock(mut self) -> Result<bool, Error> {
        self.released = true;
        self.lease.release().await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let lease = self.lease.clone();
            handle.spawn(async move {
                let _ = lease.release().await;
            });
        }
    }
}

/// What a candidate learns about an election.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeadershipEvent {
    /// This candidate became the leader; the token fences its writes.
    Elected(FencingToken),
    /// This candidate's term was renewed.
    Renewed(FencingToken),
    /// This candidate is no longer the leader (renewal failed or was refused).
    Lost {
        /// Why.
        reason: String,
    },
    /// This candidate resigned.
    Resigned,
    /// Another candidate leads now (`Some(name)`), or nobody does (`None`).
    NewLeader(Option<Bytes>),
}

impl LeadershipEvent {
    /// The stable snake_case name of the event (`"elected"`, `"renewed"`, `"lost"`,
    /// `"resigned"`, `"new_leader"`), which every binding exposes (Node in camelCase:
    /// `newLeader`); never renamed.
    ///
    /// ```
    /// use mqstate::lock::LeadershipEvent;
    /// assert_eq!(LeadershipEvent::NewLeader(None).name(), "new_leader");
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            LeadershipEvent::Elected(_) => "elected",
            LeadershipEvent::Renewed(_) => "renewed",
            LeadershipEvent::Lost { .. } => "lost",
            LeadershipEvent::Resigned => "resigned",
            LeadershipEvent::NewLeader(_) => "new_leader",
        }
    }

    /// The fencing token the event carries (`elected`, `renewed`).
    pub fn token(&self) -> Option<&FencingToken> {
        match self {
            LeadershipEvent::Elected(t) | LeadershipEvent::Renewed(t) => Some(t),
            _ => None,
        }
    }
}

/// Leader election among candidates of one election: the leader holds the election's
/// lease and renews it automatically; the others wait on it.
///
/// ```no_run
/// use std::time::Duration;
/// use mqstate::lock::{LeaderElection, LeadershipEvent};
///
/// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
/// let election = LeaderElection::new(&client, "election/pumps", "node-b")?;
/// let mut events = election.events().await?;
/// let token = election.campaign(Duration::from_secs(5), Duration::from_secs(600)).await?;
/// println!("leading with token {token}");
/// while let Some(event) = events.recv().await {
///     if let LeadershipEvent::Lost { .. } = event {
///         break; // stop acting as the leader
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LeaderElection {
    lease: Lease,
    renew_fraction: f64,
}

impl LeaderElection {
    /// Candidate `candidate` in the election `election` (the key the leader holds). An empty
    /// election name or candidate is an [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # fn demo(client: &mqstate::Client) -> Result<(), mqstate::Error> {
    /// let election = mqstate::lock::LeaderElection::new(client, "election/pumps", "node-b")?;
    /// assert!(!election.is_leader());
    /// # Ok(()) }
    /// ```
    pub fn new(
        client: &Client,
        election: impl AsRef<[u8]>,
        candidate: impl AsRef<[u8]>,
    ) -> Result<LeaderElection, Error> {
        Ok(LeaderElection {
            lease: Lease::named(
                client,
                election.as_ref(),
                candidate.as_ref(),
                "election",
                "candidate",
            )?,
            renew_fraction: DEFAULT_RENEW_FRACTION,
        })
    }

    /// Renew the term every `fraction` × term instead of half of it; `fraction` must be
    /// strictly between 0 and 1 ([`Error::InvalidArgument`] otherwise).
    ///
    /// ```no_run
    /// # fn demo(client: &mqstate::Client) -> Result<(), mqstate::Error> {
    /// use mqstate::lock::LeaderElection;
    /// let e = LeaderElection::new(client, "election/pumps", "node-b")?.with_renew_fraction(0.3)?;
    /// assert!(LeaderElection::new(client, "e", "c")?.with_renew_fraction(1.0).is_err());
    /// # Ok(()) }
    /// ```
    pub fn with_renew_fraction(mut self, fraction: f64) -> Result<LeaderElection, Error> {
        self.renew_fraction = check_renew_fraction(fraction)?;
        Ok(self)
    }

    /// The lease underneath.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Campaigns until elected or `timeout` passes ([`Error::Timeout`]); once elected, the
    /// term is renewed automatically until [`resign`](LeaderElection::resign) or a loss.
    pub async fn campaign(&self, term: Duration, timeout: Duration) -> Result<FencingToken, Error> {
        let token = self.lease.acquire_wait(term, timeout).await?;
        self.lease.auto_renew(self.renew_fraction)?;
        Ok(token)
    }

    /// Tries once: `Some(token)` if elected (renewal then runs automatically).
    pub async fn try_campaign(&self, term: Duration) -> Result<Option<FencingToken>, Error> {
        let token = self.lease.acquire(term).await?;
        if token.is_some() {
            self.lease.auto_renew(self.renew_fraction)?;
        }
        Ok(token)
    }

    /// Steps down (if leading): stops renewing and releases the election key.
    pub async fn resign(&self) -> Result<bool, Error> {
        self.lease.release().await
    }

    /// The current leader, `None` if there is none.
    pub async fn leader(&self) -> Result<Option<Bytes>, Error> {
        self.lease.holder().await
    }

    /// True while this candidate believes it leads (it holds a token that has not been lost).
    pub fn is_leader(&self) -> bool {
        self.lease.current_token().is_some()
    }

    /// The leadership changes from now on: this candidate's own (elected, renewed, lost,
    /// resigned) and the election key's (another leader, or none).
    pub async fn events(&self) -> Result<LeadershipEvents, Error> {
        Ok(LeadershipEvents {
            own: self.lease.events(),
            key: self.lease.observe().await?,
            candidate: self.lease.holder.clone(),
        })
    }
}

/// A stream of [`LeadershipEvent`]s ([`LeaderElection::events`]).
#[derive(Debug)]
pub struct LeadershipEvents {
    own: LeaseEvents,
    key: KeyObservation,
    candidate: Bytes,
}

impl LeadershipEvents {
    /// The next event; `None` when the client is closed.
    pub async fn recv(&mut self) -> Option<LeadershipEvent> {
        loop {
            tokio::select! {
                event = self.own.recv() => {
                    return Some(match event? {
                        LeaseEvent::Acquired(t) => LeadershipEvent::Elected(t),
                        LeaseEvent::Renewed(t) => LeadershipEvent::Renewed(t),
                        LeaseEvent::Lost { reason } => LeadershipEvent::Lost { reason },
                        LeaseEvent::Released => LeadershipEvent::Resigned,
                    });
                }
                change = self.key.recv() => match change? {
                    // Our own SETs are reported through the lease events.
                    Ok(n) => match n.operation {
                        NotifyOperation::Set(holder) if holder == self.candidate => continue,
                        NotifyOperation::Set(holder) => return Some(LeadershipEvent::NewLeader(Some(holder))),
                        NotifyOperation::Delete => return Some(LeadershipEvent::NewLeader(None)),
                    },
                    // A lag report: the next notification tells the current state.
                    Err(_) => continue,
                },
            }
        }
    }
}

pub mod blocking {
    //! Leases, locks and leader election for [`crate::blocking::Client`]: the same types,
    //! with blocking methods that run on the client's own runtime.
    //!
    //! ```no_run
    //! use std::time::Duration;
    //! use mqstate::blocking::Client;
    //! use mqstate::lock::blocking::Lease;
    //!
    //! # fn demo() -> Result<(), mqstate::Error> {
    //! let client = Client::connect(mqstate::ConnectOptions::new("127.0.0.1", 1883))?;
    //! let lease = Lease::new(&client, "lock/printer", "host-a")?;
    //! if let Some(token) = lease.acquire(Duration::from_secs(5))? {
    //!     println!("held with token {token}");
    //!     lease.release()?;
    //! }
    //! # Ok(()) }
    //! ```

    use std::future::Future;
    use std::time::Duration;

    use bytes::Bytes;
    use tokio::runtime::Handle;

    use super::{FencingToken, LeadershipEvent, LeaseEvent};
    use crate::Error;

    fn runtime(client: &crate::blocking::Client) -> Result<Handle, Error> {
        client
            .runtime_handle()
            .ok_or_else(|| Error::Disconnected("the client has been closed".into()))
    }

    /// Runs a future on the client's runtime from a thread outside it.
    fn block_on<F: Future>(handle: &Handle, f: F) -> Result<F::Output, Error> {
        if Handle::try_current().is_ok() {
            return Err(Error::InvalidArgument(
                "blocking lock calls cannot run inside an async runtime; use mqstate::lock".into(),
            ));
        }
        Ok(handle.block_on(f))
    }

    /// Blocking [`super::Lease`].
    #[derive(Debug, Clone)]
    pub struct Lease {
        inner: super::Lease,
        handle: Handle,
    }

    impl Lease {
        /// See [`super::Lease::new`].
        pub fn new(
            client: &crate::blocking::Client,
            name: impl AsRef<[u8]>,
            holder: impl AsRef<[u8]>,
        ) -> Result<Lease, Error> {
            Ok(Lease {
                inner: super::Lease::new(client.as_async(), name, holder)?,
                handle: runtime(client)?,
            })
        }

        /// See [`super::Lease::with_session_id`].
        #[must_use]
        pub fn with_session_id(self, session: impl AsRef<[u8]>) -> Lease {
            Lease {
                inner: self.inner.with_session_id(session),
                handle: self.handle,
            }
        }

        /// The async lease underneath.
        pub fn as_async(&self) -> &super::Lease {
            &self.inner
        }

        /// See [`super::Lease::acquire`].
        pub fn acquire(&self, ttl: Duration) -> Result<Option<FencingToken>, Error> {
            block_on(&self.handle, self.inner.acquire(ttl))?
        }

        /// See [`super::Lease::acquire_wait`].
        pub fn acquire_wait(
            &self,
            ttl: Duration,
            timeout: Duration,
        ) -> Result<FencingToken, Error> {
            block_on(&self.handle, self.inner.acquire_wait(ttl, timeout))?
        }

        /// See [`super::Lease::renew`].
        pub fn renew(&self) -> Result<Option<FencingToken>, Error> {
            block_on(&self.handle, self.inner.renew())?
        }

        /// See [`super::Lease::auto_renew`].
        pub fn auto_renew(&self, fraction: f64) -> Result<(), Error> {
            let _guard = self.handle.enter();
            self.inner.auto_renew(fraction)
        }

        /// See [`super::Lease::release`].
        pub fn release(&self) -> Result<bool, Error> {
            block_on(&self.handle, self.inner.release())?
        }

        /// See [`super::Lease::holder`].
        pub fn holder(&self) -> Result<Option<Bytes>, Error> {
            block_on(&self.handle, self.inner.holder())?
        }

        /// See [`super::Lease::current_token`].
        pub fn current_token(&self) -> Option<FencingToken> {
            self.inner.current_token()
        }

        /// The next lease event, waiting up to `timeout` (`None` if none came).
        pub fn next_event(
            &self,
            events: &mut super::LeaseEvents,
            timeout: Duration,
        ) -> Result<Option<LeaseEvent>, Error> {
            Ok(
                block_on(&self.handle, tokio::time::timeout(timeout, events.recv()))?
                    .ok()
                    .flatten(),
            )
        }

        /// See [`super::Lease::events`].
        pub fn events(&self) -> super::LeaseEvents {
            self.inner.events()
        }
    }

    /// Blocking [`super::Lock`].
    #[derive(Debug, Clone)]
    pub struct Lock {
        inner: super::Lock,
        handle: Handle,
    }

    impl Lock {
        /// See [`super::Lock::new`].
        pub fn new(
            client: &crate::blocking::Client,
            name: impl AsRef<[u8]>,
            holder: impl AsRef<[u8]>,
        ) -> Result<Lock, Error> {
            Ok(Lock {
                inner: super::Lock::new(client.as_async(), name, holder)?,
                handle: runtime(client)?,
            })
        }

        /// See [`super::Lock::with_session_id`].
        #[must_use]
        pub fn with_session_id(self, session: impl AsRef<[u8]>) -> Lock {
            Lock {
                inner: self.inner.with_session_id(session),
                handle: self.handle,
            }
        }

        /// The async lock underneath.
        pub fn as_async(&self) -> &super::Lock {
            &self.inner
        }

        /// See [`super::Lock::lock`]; the guard's [`LockGuard::unlock`] blocks too.
        pub fn lock(&self, ttl: Duration, timeout: Duration) -> Result<LockGuard, Error> {
            let guard = block_on(&self.handle, self.inner.lock(ttl, timeout))??;
            Ok(LockGuard {
                inner: Some(guard),
                handle: self.handle.clone(),
            })
        }

        /// See [`super::Lock::edit`].
        pub fn edit<F>(
            &self,
            key: impl AsRef<[u8]>,
            ttl: Duration,
            timeout: Duration,
            f: F,
        ) -> Result<Option<Bytes>, Error>
        where
            F: FnOnce(Option<Bytes>) -> Option<Bytes>,
        {
            block_on(&self.handle, self.inner.edit(key, ttl, timeout, f))?
        }

        /// [`Lock::edit`] with a fallible `f` (for callbacks of other languages): if `f`
        /// fails, nothing is written, the lock is released and `f`'s error returned. See
        /// [`super::Lock::edit_async`].
        pub fn try_edit<F, E>(
            &self,
            key: impl AsRef<[u8]>,
            ttl: Duration,
            timeout: Duration,
            f: F,
        ) -> Result<Option<Bytes>, E>
        where
            F: FnOnce(Option<Bytes>) -> Result<Option<Bytes>, E>,
            E: From<Error>,
        {
            block_on(
                &self.handle,
                self.inner
                    .edit_async(key, ttl, timeout, |old| std::future::ready(f(old))),
            )?
        }
    }

    /// A held blocking [`Lock`]; dropping it releases the lock in the background.
    #[derive(Debug)]
    pub struct LockGuard {
        inner: Option<super::LockGuard>,
        handle: Handle,
    }

    impl LockGuard {
        /// The fencing token to send with every write the lock protects.
        pub fn token(&self) -> Option<&FencingToken> {
            self.inner.as_ref().map(super::LockGuard::token)
        }

        /// Releases the lock. True if it was still held by us.
        pub fn unlock(mut self) -> Result<bool, Error> {
            match self.inner.take() {
                Some(guard) => block_on(&self.handle, guard.unlock())?,
                None => Ok(false),
            }
        }
    }

    impl Drop for LockGuard {
        fn drop(&mut self) {
            if let Some(guard) = self.inner.take() {
                // The async guard's drop spawns the release; it needs the runtime entered.
                let _enter = self.handle.enter();
                drop(guard);
            }
        }
    }

    /// Blocking [`super::LeaderElection`].
    #[derive(Debug, Clone)]
    pub struct LeaderElection {
        inner: super::LeaderElection,
        handle: Handle,
    }

    impl LeaderElection {
        /// See [`super::LeaderElection::new`].
        pub fn new(
            client: &crate::blocking::Client,
            election: impl AsRef<[u8]>,
            candidate: impl AsRef<[u8]>,
        ) -> Result<LeaderElection, Error> {
            Ok(LeaderElection {
                inner: super::LeaderElection::new(client.as_async(), election, candidate)?,
                handle: runtime(client)?,
            })
        }

        /// See [`super::LeaderElection::with_renew_fraction`].
        pub fn with_renew_fraction(self, fraction: f64) -> Result<LeaderElection, Error> {
            Ok(LeaderElection {
                inner: self.inner.with_renew_fraction(fraction)?,
                handle: self.handle,
            })
        }

        /// See [`super::LeaderElection::campaign`].
        pub fn campaign(&self, term: Duration, timeout: Duration) -> Result<FencingToken, Error> {
            block_on(&self.handle, self.inner.campaign(term, timeout))?
        }

        /// See [`super::LeaderElection::try_campaign`].
        pub fn try_campaign(&self, term: Duration) -> Result<Option<FencingToken>, Error> {
            block_on(&self.handle, self.inner.try_campaign(term))?
        }

        /// See [`super::LeaderElection::resign`].
        pub fn resign(&self) -> Result<bool, Error> {
            block_on(&self.handle, self.inner.resign())?
        }

        /// See [`super::LeaderElection::leader`].
        pub fn leader(&self) -> Result<Option<Bytes>, Error> {
            block_on(&self.handle, self.inner.leader())?
        }

        /// See [`super::LeaderElection::is_leader`].
        pub fn is_leader(&self) -> bool {
            self.inner.is_leader()
        }

        /// The fencing token of the current term while this candidate leads (it grows with
        /// every renewal), `None` otherwise: the token a leader's protected writes carry.
        pub fn current_token(&self) -> Option<FencingToken> {
            self.inner.lease().current_token()
        }

        /// The async election this wraps (for its lease, or to use it from async code).
        pub fn as_async(&self) -> &super::LeaderElection {
            &self.inner
        }

        /// See [`super::LeaderElection::events`].
        pub fn events(&self) -> Result<super::LeadershipEvents, Error> {
            block_on(&self.handle, self.inner.events())?
        }

        /// The next leadership event, waiting up to `timeout` (`None` if none came).
        pub fn next_event(
            &self,
            events: &mut super::LeadershipEvents,
            timeout: Duration,
        ) -> Result<Option<LeadershipEvent>, Error> {
            Ok(
                block_on(&self.handle, tokio::time::timeout(timeout, events.recv()))?
                    .ok()
                    .flatten(),
            )
        }
    }
}
