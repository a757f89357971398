//! [`Lease`]: one key holding its holder's name for a ttl, acquired, renewed (by hand or
//! automatically) and released, with a stream of [`LeaseEvent`]s.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{FencingToken, check_renew_fraction, set_nex};
use crate::client::observe::KeyObservation;
use crate::protocol::resp3::NotifyOperation;
use crate::{Client, Error, VdelOutcome};

/// How many events a slow [`LeaseEvents`] reader may fall behind before older ones are
/// skipped (it is then told how many it missed).
const EVENT_BUFFER: usize = 64;

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
    pub(super) client: Client,
    name: Bytes,
    pub(super) holder: Bytes,
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
    pub(super) fn named(
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
    /// example [`crate::lock::DEFAULT_RENEW_FRACTION`]). The renewal stops, and a
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
