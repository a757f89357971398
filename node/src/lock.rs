//! Leases, locks and leader election: thin wrappers of `mqstate::lock` (the protocol and
//! the renewal logic are the core's).

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use mqstate::lock::{
    LeaderElection, LeadershipEvent, LeadershipEvents, Lease, LeaseEvent, LeaseEvents, Lock,
    LockGuard,
};
use mqstate::{Client, Error};
use napi::Env;
use napi::bindgen_prelude::{Buffer, BufferSlice, Either, PromiseRaw, Uint8ArraySlice};
use napi_derive::napi;

use crate::client::{CancelToken, NativeClient, receiver};
use crate::error::js_error;
use crate::hlc::Hlc;
use crate::stream::Pull;
use crate::util::{bytes, millis, rejected, spawn};

/// A required duration in ms, greater than zero.
fn duration(name: &str, ms: f64) -> Result<std::time::Duration, Error> {
    match millis(name, Some(ms))? {
        Some(d) if !d.is_zero() => Ok(d),
        _ => Err(Error::InvalidArgument(format!(
            "{name} must be greater than zero, got {ms}"
        ))),
    }
}

fn fraction(value: Option<f64>) -> Result<f64, Error> {
    let f = value.unwrap_or(mqstate::lock::DEFAULT_RENEW_FRACTION);
    if f > 0.0 && f < 1.0 {
        Ok(f)
    } else {
        Err(Error::InvalidArgument(format!(
            "renewFraction must be between 0 and 1 (exclusive), got {f}"
        )))
    }
}

fn token(t: Option<mqstate::Hlc>) -> Option<Hlc> {
    t.map(Hlc::from)
}

fn buffer<'env>(env: &'env Env, b: Option<Bytes>) -> napi::Result<Option<BufferSlice<'env>>> {
    b.map(|b| BufferSlice::copy_from(env, &b)).transpose()
}

/// An event of a lease or of an election (`type` says which; the other fields as they apply).
#[napi(object, object_from_js = false)]
pub struct LockEvent<'a> {
    /// Lease: `acquired`, `renewed`, `lost`, `released`. Election: `elected`, `renewed`,
    /// `lost`, `resigned`, `newLeader`.
    #[napi(js_name = "type")]
    pub kind: &'static str,
    /// The fencing token (`acquired`, `renewed`, `elected`).
    pub token: Option<Hlc>,
    /// Why the lease or the leadership was lost (`lost`).
    pub reason: Option<String>,
    /// `newLeader`: the new leader, or null when nobody leads.
    pub leader: Option<Either<BufferSlice<'a>, napi::bindgen_prelude::Null>>,
}

impl std::fmt::Debug for LockEvent<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockEvent")
            .field("type", &self.kind)
            .field("token", &self.token)
            .field("reason", &self.reason)
            .finish_non_exhaustive()
    }
}

fn event(kind: &'static str) -> LockEvent<'static> {
    LockEvent {
        kind,
        token: None,
        reason: None,
        leader: None,
    }
}

fn lease_event(e: LeaseEvent) -> LockEvent<'static> {
    match e {
        LeaseEvent::Acquired(t) => LockEvent {
            token: Some(t.into()),
            ..event("acquired")
        },
        LeaseEvent::Renewed(t) => LockEvent {
            token: Some(t.into()),
            ..event("renewed")
        },
        LeaseEvent::Lost { reason } => LockEvent {
            reason: Some(reason),
            ..event("lost")
        },
        LeaseEvent::Released => event("released"),
        // A kind this binding does not know yet.
        _ => event("unknown"),
    }
}

fn leadership_event(env: &Env, e: LeadershipEvent) -> napi::Result<LockEvent<'_>> {
    Ok(match e {
        LeadershipEvent::Elected(t) => LockEvent {
            token: Some(t.into()),
            ..event("elected")
        },
        LeadershipEvent::Renewed(t) => LockEvent {
            token: Some(t.into()),
            ..event("renewed")
        },
        LeadershipEvent::Lost { reason } => LockEvent {
            reason: Some(reason),
            ..event("lost")
        },
        LeadershipEvent::Resigned => event("resigned"),
        LeadershipEvent::NewLeader(leader) => LockEvent {
            leader: Some(match buffer(env, leader)? {
                Some(b) => Either::A(b),
                None => Either::B(napi::bindgen_prelude::Null),
            }),
            ..event("newLeader")
        },
        _ => event("unknown"),
    })
}

/// A lease on a key: at most one holder at a time, for a ttl that the holder renews.
#[napi]
#[derive(Debug)]
pub struct NativeLease {
    lease: Lease,
    client: Client,
}

#[napi]
impl NativeLease {
    /// A lease on key `name` held as `holder` (`holder:sessionId` with a session id).
    #[napi(constructor)]
    pub fn new(
        client: &NativeClient,
        name: Either<String, Uint8ArraySlice<'_>>,
        holder: Either<String, Uint8ArraySlice<'_>>,
        session_id: Option<Either<String, Uint8ArraySlice<'_>>>,
    ) -> Self {
        let mut lease = Lease::new(&client.client, bytes(name), bytes(holder));
        if let Some(session) = session_id {
            lease = lease.with_session_id(bytes(session));
        }
        NativeLease {
            lease,
            client: client.client.clone(),
        }
    }

    /// The lease's key.
    #[napi(getter)]
    pub fn name(&self) -> Buffer {
        self.lease.name().to_vec().into()
    }

    /// The value written while holding the lease.
    #[napi(getter)]
    pub fn holder_value(&self) -> Buffer {
        self.lease.holder_value().to_vec().into()
    }

    /// The token of the last acquire or renewal while the lease is believed held, or null.
    #[napi(getter)]
    pub fn current_token(&self) -> Option<Hlc> {
        token(self.lease.current_token())
    }

    /// Tries once (`SET NEX PX`): the fencing token, or null when someone else holds it.
    #[napi(ts_return_type = "Promise<Hlc | null>")]
    pub fn acquire<'env>(
        &self,
        env: &'env Env,
        ttl_ms: f64,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, Option<Hlc>>> {
        let ttl = match duration("ttlMs", ttl_ms) {
            Ok(t) => t,
            Err(e) => return rejected(env, e),
        };
        let lease = self.lease.clone();
        spawn(
            env,
            receiver(cancel),
            async move { lease.acquire(ttl).await },
            |_, t| Ok(token(t)),
        )
    }

    /// Acquires, waiting up to `waitMs` for the holder to release or expire
    /// (`ERR_TIMEOUT` then).
    #[napi]
    pub fn acquire_wait<'env>(
        &self,
        env: &'env Env,
        ttl_ms: f64,
        wait_ms: f64,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, Hlc>> {
        let durations =
            duration("ttlMs", ttl_ms).and_then(|t| Ok((t, duration("timeoutMs", wait_ms)?)));
        let (ttl, wait) = match durations {
            Ok(d) => d,
            Err(e) => return rejected(env, e),
        };
        let lease = self.lease.clone();
        spawn(
            env,
            receiver(cancel),
            async move { lease.acquire_wait(ttl, wait).await },
            |_, t| Ok(Hlc::from(t)),
        )
    }

    /// Renews with the last ttl: the new token, or null if the lease was lost.
    #[napi(ts_return_type = "Promise<Hlc | null>")]
    pub fn renew<'env>(
        &self,
        env: &'env Env,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, Option<Hlc>>> {
        let lease = self.lease.clone();
        spawn(
            env,
            receiver(cancel),
            async move { lease.renew().await },
            |_, t| Ok(token(t)),
        )
    }

    /// Renews in the background every `fraction` x ttl until a renewal fails (a `lost`
    /// event), `stopRenewal()` or `release()`. Keeps no handle on Node's event loop.
    #[napi]
    pub fn auto_renew(&self, env: Env, fraction: Option<f64>) -> napi::Result<()> {
        let result = crate::lock::fraction(fraction).and_then(|f| {
            // The renewal task is spawned on the addon's runtime.
            napi::bindgen_prelude::within_runtime_if_available(|| self.lease.auto_renew(f))
        });
        result.map_err(|e| js_error(&env, &e, &[]))
    }

    /// Stops the automatic renewal (the lease stays held until its ttl passes).
    #[napi]
    pub fn stop_renewal(&self) {
        self.lease.stop_renewal();
    }

    /// Gives the lease up (`VDEL name holder`): true if this holder held it.
    #[napi]
    pub fn release<'env>(
        &self,
        env: &'env Env,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, bool>> {
        let lease = self.lease.clone();
        spawn(
            env,
            receiver(cancel),
            async move { lease.release().await },
            |_, b| Ok(b),
        )
    }

    /// Who holds the lease now, or null.
    #[napi(ts_return_type = "Promise<Buffer | null>")]
    pub fn holder<'env>(
        &self,
        env: &'env Env,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, Option<BufferSlice<'env>>>> {
        let lease = self.lease.clone();
        spawn(
            env,
            receiver(cancel),
            async move { lease.holder().await },
            buffer,
        )
    }

    /// The lease's events from now on.
    #[napi]
    pub fn events(&self) -> NativeLeaseEvents {
        NativeLeaseEvents {
            inner: Pull::new(self.lease.events(), &self.client),
        }
    }
}

/// The events of a lease.
#[napi]
#[derive(Debug)]
pub struct NativeLeaseEvents {
    inner: Arc<Pull<LeaseEvents>>,
}

#[napi]
impl NativeLeaseEvents {
    /// The next event; null once closed (or the client closed).
    #[napi(ts_return_type = "Promise<LockEvent | null>")]
    pub fn next<'env>(
        &self,
        env: &'env Env,
    ) -> napi::Result<PromiseRaw<'env, Option<LockEvent<'static>>>> {
        spawn(env, None, self.inner.clone().next(), |_, e| {
            Ok(e.map(lease_event))
        })
    }

    /// Ends the stream (a pending `next()` resolves with null). Idempotent.
    #[napi]
    pub fn close(&self) {
        self.inner.close();
    }
}

/// A lock: a lease used as a mutex.
#[napi]
#[derive(Debug)]
pub struct NativeLock {
    lock: Lock,
}

#[napi]
impl NativeLock {
    /// The lock `name`, taken as `holder` (`holder:sessionId` with a session id).
    #[napi(constructor)]
    pub fn new(
        client: &NativeClient,
        name: Either<String, Uint8ArraySlice<'_>>,
        holder: Either<String, Uint8ArraySlice<'_>>,
        session_id: Option<Either<String, Uint8ArraySlice<'_>>>,
    ) -> Self {
        let holder = match session_id {
            // The same `holder:session` form as Lease::with_session_id.
            Some(session) => {
                let mut h = bytes(holder).to_vec();
                h.push(b':');
                h.extend_from_slice(&bytes(session));
                Bytes::from(h)
            }
            None => bytes(holder),
        };
        NativeLock {
            lock: Lock::new(&client.client, bytes(name), holder),
        }
    }

    /// The lock's key.
    #[napi(getter)]
    pub fn name(&self) -> Buffer {
        self.lock.lease().name().to_vec().into()
    }

    /// The value written while holding the lock.
    #[napi(getter)]
    pub fn holder_value(&self) -> Buffer {
        self.lock.lease().holder_value().to_vec().into()
    }

    /// Takes the lock for `ttlMs`, waiting up to `timeoutMs` (`ERR_TIMEOUT` then).
    #[napi]
    pub fn lock<'env>(
        &self,
        env: &'env Env,
        ttl_ms: f64,
        timeout_ms: f64,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, NativeLockGuard>> {
        let durations =
            duration("ttlMs", ttl_ms).and_then(|t| Ok((t, duration("timeoutMs", timeout_ms)?)));
        let (ttl, wait) = match durations {
            Ok(d) => d,
            Err(e) => return rejected(env, e),
        };
        let lock = self.lock.clone();
        spawn(
            env,
            receiver(cancel),
            async move { lock.lock(ttl, wait).await },
            |_, guard| {
                Ok(NativeLockGuard {
                    token: guard.token().clone().into(),
                    guard: Arc::new(Mutex::new(Some(guard))),
                })
            },
        )
    }

    /// Who holds the lock now, or null.
    #[napi(ts_return_type = "Promise<Buffer | null>")]
    pub fn holder<'env>(
        &self,
        env: &'env Env,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, Option<BufferSlice<'env>>>> {
        let lease = self.lock.lease().clone();
        spawn(
            env,
            receiver(cancel),
            async move { lease.holder().await },
            buffer,
        )
    }
}

/// A held lock. Unlock it with `unlock()`; if it is dropped (garbage collected) instead, the
/// lock expires after its ttl.
#[napi]
#[derive(Debug)]
pub struct NativeLockGuard {
    token: Hlc,
    guard: Arc<Mutex<Option<LockGuard>>>,
}

#[napi]
impl NativeLockGuard {
    /// The fencing token to pass with every write the lock protects.
    #[napi(getter)]
    pub fn token(&self) -> Hlc {
        self.token.clone()
    }

    /// Releases the lock: true if it was still held by us (false after a first `unlock()`).
    #[napi]
    pub fn unlock<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, bool>> {
        let guard = self
            .guard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        spawn(
            env,
            None,
            async move {
                match guard {
                    Some(g) => g.unlock().await,
                    None => Ok(false),
                }
            },
            |_, b| Ok(b),
        )
    }
}

/// A candidate in a leader election.
#[napi]
#[derive(Debug)]
pub struct NativeLeaderElection {
    election: LeaderElection,
    client: Client,
}

#[napi]
impl NativeLeaderElection {
    /// Candidate `candidate` in election `election` (the key the leader holds); the term is
    /// renewed every `renewFraction` x term (default 0.5).
    #[napi(constructor)]
    pub fn new(
        env: Env,
        client: &NativeClient,
        election: Either<String, Uint8ArraySlice<'_>>,
        candidate: Either<String, Uint8ArraySlice<'_>>,
        renew_fraction: Option<f64>,
    ) -> napi::Result<Self> {
        let f = fraction(renew_fraction).map_err(|e| js_error(&env, &e, &[]))?;
        Ok(NativeLeaderElection {
            election: LeaderElection::new(&client.client, bytes(election), bytes(candidate))
                .with_renew_fraction(f),
            client: client.client.clone(),
        })
    }

    /// Campaigns until elected (the fencing token) or `timeoutMs` passes (`ERR_TIMEOUT`);
    /// the term is then renewed automatically until `resign()` or a loss.
    #[napi]
    pub fn campaign<'env>(
        &self,
        env: &'env Env,
        term_ms: f64,
        timeout_ms: f64,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, Hlc>> {
        let durations =
            duration("termMs", term_ms).and_then(|t| Ok((t, duration("timeoutMs", timeout_ms)?)));
        let (term, wait) = match durations {
            Ok(d) => d,
            Err(e) => return rejected(env, e),
        };
        let election = self.election.clone();
        spawn(
            env,
            receiver(cancel),
            async move { election.campaign(term, wait).await },
            |_, t| Ok(Hlc::from(t)),
        )
    }

    /// Tries once: the fencing token if elected, else null.
    #[napi(ts_return_type = "Promise<Hlc | null>")]
    pub fn try_campaign<'env>(
        &self,
        env: &'env Env,
        term_ms: f64,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, Option<Hlc>>> {
        let term = match duration("termMs", term_ms) {
            Ok(t) => t,
            Err(e) => return rejected(env, e),
        };
        let election = self.election.clone();
        spawn(
            env,
            receiver(cancel),
            async move { election.try_campaign(term).await },
            |_, t| Ok(token(t)),
        )
    }

    /// Steps down if leading: true if this candidate held the election key.
    #[napi]
    pub fn resign<'env>(
        &self,
        env: &'env Env,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, bool>> {
        let election = self.election.clone();
        spawn(
            env,
            receiver(cancel),
            async move { election.resign().await },
            |_, b| Ok(b),
        )
    }

    /// The current leader, or null.
    #[napi(ts_return_type = "Promise<Buffer | null>")]
    pub fn leader<'env>(
        &self,
        env: &'env Env,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, Option<BufferSlice<'env>>>> {
        let election = self.election.clone();
        spawn(
            env,
            receiver(cancel),
            async move { election.leader().await },
            buffer,
        )
    }

    /// True while this candidate believes it leads.
    #[napi(getter)]
    pub fn is_leader(&self) -> bool {
        self.election.is_leader()
    }

    /// The fencing token of the current term, while leading.
    #[napi(getter)]
    pub fn current_token(&self) -> Option<Hlc> {
        token(self.election.lease().current_token())
    }

    /// The leadership changes from now on (resolves once the election key is observed).
    #[napi]
    pub fn events<'env>(
        &self,
        env: &'env Env,
    ) -> napi::Result<PromiseRaw<'env, NativeLeadershipEvents>> {
        let (election, client) = (self.election.clone(), self.client.clone());
        spawn(
            env,
            None,
            async move { election.events().await },
            move |_, events| {
                Ok(NativeLeadershipEvents {
                    inner: Pull::new(events, &client),
                })
            },
        )
    }
}

/// The events of an election, for one candidate.
#[napi]
#[derive(Debug)]
pub struct NativeLeadershipEvents {
    inner: Arc<Pull<LeadershipEvents>>,
}

#[napi]
impl NativeLeadershipEvents {
    /// The next event; null once closed (or the client closed).
    #[napi(ts_return_type = "Promise<LockEvent | null>")]
    pub fn next<'env>(
        &self,
        env: &'env Env,
    ) -> napi::Result<PromiseRaw<'env, Option<LockEvent<'env>>>> {
        spawn(env, None, self.inner.clone().next(), |env, e| {
            e.map(|e| leadership_event(env, e)).transpose()
        })
    }

    /// Ends the stream (a pending `next()` resolves with null). Idempotent.
    #[napi]
    pub fn close(&self) {
        self.inner.close();
    }
}
