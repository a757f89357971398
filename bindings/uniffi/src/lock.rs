//! Leases, locks and leader election (the core's `mqstate::lock`), with their event streams.

use std::sync::Arc;
use std::time::Duration;

use mqstate::lock as core;
use tokio::sync::Mutex;

use crate::client::Client;
use crate::errors::MqstateError;
use crate::runtime::{run, runtime};
use crate::types::Hlc;
use mqstate::stream::SharedStream;

/// What happened to a lease.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Enum)]
pub enum LeaseEvent {
    /// The lease was acquired; the token protects writes from now on.
    Acquired {
        /// The fencing token.
        token: Hlc,
    },
    /// The lease was renewed; the new token is greater than the previous one.
    Renewed {
        /// The fencing token.
        token: Hlc,
    },
    /// The lease is no longer held; automatic renewal has stopped.
    Lost {
        /// Why.
        reason: String,
    },
    /// `release()` gave the lease up.
    Released,
    /// An event this binding does not know yet, by the core's stable name.
    Other {
        /// The core's name of the event.
        name: String,
    },
}

impl From<core::LeaseEvent> for LeaseEvent {
    fn from(e: core::LeaseEvent) -> Self {
        match e {
            core::LeaseEvent::Acquired(t) => LeaseEvent::Acquired { token: t.into() },
            core::LeaseEvent::Renewed(t) => LeaseEvent::Renewed { token: t.into() },
            core::LeaseEvent::Lost { reason } => LeaseEvent::Lost { reason },
            core::LeaseEvent::Released => LeaseEvent::Released,
            other => LeaseEvent::Other {
                name: other.name().to_owned(),
            },
        }
    }
}

/// What a candidate learns about an election.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Enum)]
pub enum LeadershipEvent {
    /// This candidate became the leader; the token fences its writes.
    Elected {
        /// The fencing token.
        token: Hlc,
    },
    /// This candidate's term was renewed.
    Renewed {
        /// The fencing token.
        token: Hlc,
    },
    /// This candidate is no longer the leader.
    Lost {
        /// Why.
        reason: String,
    },
    /// This candidate resigned.
    Resigned,
    /// Another candidate leads now, or nobody does (null).
    NewLeader {
        /// The leader's name.
        leader: Option<Vec<u8>>,
    },
    /// An event this binding does not know yet, by the core's stable name.
    Other {
        /// The core's name of the event.
        name: String,
    },
}

impl From<core::LeadershipEvent> for LeadershipEvent {
    fn from(e: core::LeadershipEvent) -> Self {
        match e {
            core::LeadershipEvent::Elected(t) => LeadershipEvent::Elected { token: t.into() },
            core::LeadershipEvent::Renewed(t) => LeadershipEvent::Renewed { token: t.into() },
            core::LeadershipEvent::Lost { reason } => LeadershipEvent::Lost { reason },
            core::LeadershipEvent::Resigned => LeadershipEvent::Resigned,
            core::LeadershipEvent::NewLeader(l) => LeadershipEvent::NewLeader {
                leader: l.map(|b| b.to_vec()),
            },
            other => LeadershipEvent::Other {
                name: other.name().to_owned(),
            },
        }
    }
}

/// The events of a lease (or a lock), read with `next()`.
#[derive(Debug, uniffi::Object)]
pub struct LeaseEvents {
    inner: Arc<SharedStream<core::LeaseEvents>>,
}

#[uniffi::export]
impl LeaseEvents {
    /// The next event; null once the stream has ended (closed, or the client closed).
    pub async fn next(&self) -> Result<Option<LeaseEvent>, MqstateError> {
        let pull = self.inner.clone();
        Ok(run(pull.next()).await?.map(LeaseEvent::from))
    }

    /// Ends the stream now; idempotent.
    pub fn close(&self) {
        self.inner.close();
    }
}

/// The events of an election, read with `next()`.
#[derive(Debug, uniffi::Object)]
pub struct LeadershipEvents {
    inner: Arc<SharedStream<core::LeadershipEvents>>,
}

#[uniffi::export]
impl LeadershipEvents {
    /// The next event; null once the stream has ended (closed, or the client closed).
    pub async fn next(&self) -> Result<Option<LeadershipEvent>, MqstateError> {
        let pull = self.inner.clone();
        Ok(run(pull.next()).await?.map(LeadershipEvent::from))
    }

    /// Ends the stream now; idempotent.
    pub fn close(&self) {
        self.inner.close();
    }
}

/// A lease: a key held by one holder at a time, with a fencing token that grows on every
/// acquisition and renewal.
#[derive(uniffi::Object)]
pub struct Lease {
    inner: Arc<core::Lease>,
    client: mqstate::Client,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("name", self.inner.name())
            .finish_non_exhaustive()
    }
}

#[uniffi::export]
impl Lease {
    /// A lease on `name`, held as `holder` (the core refuses empty names and holders).
    #[uniffi::constructor]
    pub fn new(
        client: &Client,
        name: Vec<u8>,
        holder: Vec<u8>,
    ) -> Result<Arc<Lease>, MqstateError> {
        let inner = core::Lease::new(&client.inner, name, holder)?;
        Ok(Arc::new(Lease {
            inner: Arc::new(inner),
            client: client.inner.clone(),
        }))
    }

    /// The lease key.
    pub fn name(&self) -> Vec<u8> {
        self.inner.name().to_vec()
    }

    /// The holder value this lease writes.
    pub fn holder_value(&self) -> Vec<u8> {
        self.inner.holder_value().to_vec()
    }

    /// The token of the current hold, if held.
    pub fn current_token(&self) -> Option<Hlc> {
        self.inner.current_token().map(Hlc::from)
    }

    /// The lease's events from now on.
    pub fn events(&self) -> Arc<LeaseEvents> {
        Arc::new(LeaseEvents {
            inner: SharedStream::new(self.inner.events(), self.client.state_changes()),
        })
    }

    /// Tries once: the fencing token if acquired, null if someone else holds it.
    pub async fn acquire(&self, ttl: Duration) -> Result<Option<Hlc>, MqstateError> {
        let lease = self.inner.clone();
        Ok(run(async move { lease.acquire(ttl).await })
            .await?
            .map(Hlc::from))
    }

    /// Waits (up to `timeout`) until acquired; `Timeout` otherwise.
    pub async fn acquire_wait(
        &self,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Hlc, MqstateError> {
        let lease = self.inner.clone();
        Ok(run(async move { lease.acquire_wait(ttl, timeout).await })
            .await?
            .into())
    }

    /// Renews the hold: the new token, or null if it was lost to someone else.
    pub async fn renew(&self) -> Result<Option<Hlc>, MqstateError> {
        let lease = self.inner.clone();
        Ok(run(async move { lease.renew().await })
            .await?
            .map(Hlc::from))
    }

    /// Renews automatically every `fraction` × ttl (0 < fraction < 1) until released or lost.
    pub async fn auto_renew(&self, fraction: f64) -> Result<(), MqstateError> {
        let lease = self.inner.clone();
        // On the runtime: the renewal task is spawned there.
        run(async move { lease.auto_renew(fraction) }).await
    }

    /// Stops automatic renewal (the lease stays held until its ttl).
    pub fn stop_renewal(&self) {
        self.inner.stop_renewal();
    }

    /// Releases the lease: true if it was still held by us.
    pub async fn release(&self) -> Result<bool, MqstateError> {
        let lease = self.inner.clone();
        run(async move { lease.release().await }).await
    }

    /// The current holder, null if none.
    pub async fn holder(&self) -> Result<Option<Vec<u8>>, MqstateError> {
        let lease = self.inner.clone();
        Ok(run(async move { lease.holder().await })
            .await?
            .map(|b| b.to_vec()))
    }
}

/// A mutual-exclusion lock on a key, built on a lease.
#[derive(uniffi::Object)]
pub struct Lock {
    inner: Arc<core::Lock>,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", self.inner.lease().name())
            .finish_non_exhaustive()
    }
}

#[uniffi::export]
impl Lock {
    /// A lock on `name`, taken as `holder`; with a `session`, as `holder:session`.
    #[uniffi::constructor(default(session = None))]
    pub fn new(
        client: &Client,
        name: Vec<u8>,
        holder: Vec<u8>,
        session: Option<Vec<u8>>,
    ) -> Result<Arc<Lock>, MqstateError> {
        let mut inner = core::Lock::new(&client.inner, name, holder)?;
        if let Some(session) = session {
            inner = inner.with_session_id(session);
        }
        Ok(Arc::new(Lock {
            inner: Arc::new(inner),
        }))
    }

    /// Waits (up to `timeout`) for the lock, held for `ttl` unless unlocked first.
    pub async fn lock(
        &self,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Arc<LockGuard>, MqstateError> {
        let lock = self.inner.clone();
        let guard = run(async move { lock.lock(ttl, timeout).await }).await?;
        Ok(Arc::new(LockGuard {
            token: guard.token().clone().into(),
            guard: Mutex::new(Some(guard)),
        }))
    }

    /// Under the lock: reads `key`, calls `editor` with its value, writes what it returns (or
    /// deletes the key for null) with the lock's fencing token, and unlocks. Returns what the
    /// editor returned. The lock is released even when the write fails.
    pub async fn edit(
        &self,
        key: Vec<u8>,
        ttl: Duration,
        timeout: Duration,
        editor: Arc<dyn Editor>,
    ) -> Result<Option<Vec<u8>>, MqstateError> {
        let lock = self.inner.clone();
        let written = run(async move {
            lock.edit_async(key, ttl, timeout, move |old| {
                std::future::ready(
                    editor
                        .edit(old.map(|b| b.to_vec()))
                        .map(|new| new.map(bytes::Bytes::from)),
                )
            })
            .await
        })
        .await?;
        Ok(written.map(|b| b.to_vec()))
    }
}

/// The function of `Lock.edit`: given the key's value (null: absent), returns the value to
/// write (null: delete the key). Throwing an `MqstateException` aborts the edit (nothing is
/// written, the lock is released) and `edit` throws it.
#[uniffi::export(with_foreign)]
pub trait Editor: Send + Sync {
    /// The new value for `old`.
    fn edit(&self, old: Option<Vec<u8>>) -> Result<Option<Vec<u8>>, MqstateError>;
}

/// A held lock: `unlock()` releases it (otherwise it expires after its ttl).
#[derive(Debug, uniffi::Object)]
pub struct LockGuard {
    token: Hlc,
    guard: Mutex<Option<core::LockGuard>>,
}

#[uniffi::export]
impl LockGuard {
    /// The fencing token to send with every write the lock protects.
    pub fn token(&self) -> Hlc {
        self.token.clone()
    }

    /// Releases the lock: true if it was still held by us; false when already unlocked.
    pub async fn unlock(&self) -> Result<bool, MqstateError> {
        let Some(guard) = self.guard.lock().await.take() else {
            return Ok(false);
        };
        run(async move { guard.unlock().await }).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // A guard dropped while held releases in the background, which needs the runtime.
        if let (Ok(rt), Some(guard)) = (runtime(), self.guard.get_mut().take()) {
            let _entered = rt.enter();
            drop(guard);
        }
    }
}

/// A leader election: one candidate leads at a time; terms renew automatically.
#[derive(uniffi::Object)]
pub struct LeaderElection {
    inner: Arc<core::LeaderElection>,
    client: mqstate::Client,
}

impl std::fmt::Debug for LeaderElection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElection")
            .field("name", self.inner.lease().name())
            .finish_non_exhaustive()
    }
}

#[uniffi::export]
impl LeaderElection {
    /// An election on key `election`, as `candidate`; terms renew every `renew_fraction` ×
    /// term (default: the core's, one half).
    #[uniffi::constructor(default(renew_fraction = None))]
    pub fn new(
        client: &Client,
        election: Vec<u8>,
        candidate: Vec<u8>,
        renew_fraction: Option<f64>,
    ) -> Result<Arc<LeaderElection>, MqstateError> {
        let mut inner = core::LeaderElection::new(&client.inner, election, candidate)?;
        if let Some(f) = renew_fraction {
            inner = inner.with_renew_fraction(f)?;
        }
        Ok(Arc::new(LeaderElection {
            inner: Arc::new(inner),
            client: client.inner.clone(),
        }))
    }

    /// Campaigns until elected or `timeout` passes (`Timeout`).
    pub async fn campaign(&self, term: Duration, timeout: Duration) -> Result<Hlc, MqstateError> {
        let e = self.inner.clone();
        Ok(run(async move { e.campaign(term, timeout).await })
            .await?
            .into())
    }

    /// Tries once: the token if elected, null otherwise.
    pub async fn try_campaign(&self, term: Duration) -> Result<Option<Hlc>, MqstateError> {
        let e = self.inner.clone();
        Ok(run(async move { e.try_campaign(term).await })
            .await?
            .map(Hlc::from))
    }

    /// Steps down: true if this candidate was leading.
    pub async fn resign(&self) -> Result<bool, MqstateError> {
        let e = self.inner.clone();
        run(async move { e.resign().await }).await
    }

    /// The current leader, null if none.
    pub async fn leader(&self) -> Result<Option<Vec<u8>>, MqstateError> {
        let e = self.inner.clone();
        Ok(run(async move { e.leader().await })
            .await?
            .map(|b| b.to_vec()))
    }

    /// Whether this candidate leads now.
    pub fn is_leader(&self) -> bool {
        self.inner.is_leader()
    }

    /// The election's events (this candidate's and other leaders').
    pub async fn events(&self) -> Result<Arc<LeadershipEvents>, MqstateError> {
        let e = self.inner.clone();
        let events = run(async move { e.events().await }).await?;
        Ok(Arc::new(LeadershipEvents {
            inner: SharedStream::new(events, self.client.state_changes()),
        }))
    }
}
