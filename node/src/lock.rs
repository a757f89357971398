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
use tokio::sync::oneshot;

use crate::cancel::{CancelToken, receiver};
use crate::client::NativeClient;
use crate::error::js_error;
use crate::hlc::Hlc;
use crate::util::{bytes, millis, rejected, spawn};
use mqstate::stream::SharedStream;

/// A duration in ms from JavaScript (the core decides which values are allowed: a ttl or a
/// term of zero is refused there).
fn duration(name: &str, ms: f64) -> Result<std::time::Duration, Error> {
    Ok(millis(name, Some(ms))?.unwrap_or_default())
}

/// The core's event name in JavaScript's camelCase (`new_leader` -> `newLeader`).
fn camel(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
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
    pub kind: String,
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

fn lease_event(e: LeaseEvent) -> LockEvent<'static> {
    LockEvent {
        kind: camel(e.name()),
        token: e.token().cloned().map(Hlc::from),
        reason: match e {
            LeaseEvent::Lost { reason } => Some(reason),
            _ => None,
        },
        leader: None,
    }
}

fn leadership_event(env: &Env, e: LeadershipEvent) -> napi::Result<LockEvent<'_>> {
    let (kind, token) = (camel(e.name()), e.token().cloned().map(Hlc::from));
    let (reason, leader) = match e {
        LeadershipEvent::Lost { reason } => (Some(reason), None),
        LeadershipEvent::NewLeader(leader) => (
            None,
            Some(match buffer(env, leader)? {
                Some(b) => Either::A(b),
                None => Either::B(napi::bindgen_prelude::Null),
            }),
        ),
        _ => (None, None),
    };
    Ok(LockEvent {
        kind,
        token,
        reason,
        leader,
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
        env: Env,
        client: &NativeClient,
        name: Either<String, Uint8ArraySlice<'_>>,
        holder: Either<String, Uint8ArraySlice<'_>>,
        session_id: Option<Either<String, Uint8ArraySlice<'_>>>,
    ) -> napi::Result<Self> {
        let mut lease = Lease::new(&client.client, bytes(name), bytes(holder))
            .map_err(|e| js_error(&env, &e, &[]))?;
        if let Some(session) = session_id {
            lease = lease.with_session_id(bytes(session));
        }
        Ok(NativeLease {
            lease,
            client: client.client.clone(),
        })
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
        let f = fraction.unwrap_or(mqstate::lock::DEFAULT_RENEW_FRACTION);
        // The renewal task is spawned on the addon's runtime.
        napi::bindgen_prelude::within_runtime_if_available(|| self.lease.auto_renew(f))
            .map_err(|e| js_error(&env, &e, &[]))
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
            inner: SharedStream::new(self.lease.events(), self.client.state_changes()),
        }
    }
}

/// The events of a lease.
#[napi]
#[derive(Debug)]
pub struct NativeLeaseEvents {
    inner: Arc<SharedStream<LeaseEvents>>,
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
        env: Env,
        client: &NativeClient,
        name: Either<String, Uint8ArraySlice<'_>>,
        holder: Either<String, Uint8ArraySlice<'_>>,
        session_id: Option<Either<String, Uint8ArraySlice<'_>>>,
    ) -> napi::Result<Self> {
        let mut lock = Lock::new(&client.client, bytes(name), bytes(holder))
            .map_err(|e| js_error(&env, &e, &[]))?;
        if let Some(session) = session_id {
            lock = lock.with_session_id(bytes(session));
        }
        Ok(NativeLock { lock })
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

    /// Starts the core's fenced read-modify-write of `key` (`Lock::edit_async`): resolves
    /// once the lock is held and `key` read, with a `NativeEdit` whose `old` is the value and
    /// whose `finish(value)` / `abandon()` complete it (the lock is released in every case).
    #[napi]
    pub fn edit_start<'env>(
        &self,
        env: &'env Env,
        key: Either<String, Uint8ArraySlice<'_>>,
        ttl_ms: f64,
        timeout_ms: f64,
    ) -> napi::Result<PromiseRaw<'env, NativeEdit>> {
        let durations =
            duration("ttlMs", ttl_ms).and_then(|t| Ok((t, duration("timeoutMs", timeout_ms)?)));
        let (ttl, wait) = match durations {
            Ok(d) => d,
            Err(e) => return rejected(env, e),
        };
        let (key, lock) = (bytes(key), self.lock.clone());
        spawn(
            env,
            None,
            async move {
                let (old_tx, old_rx) = oneshot::channel::<Option<Bytes>>();
                let (reply_tx, reply_rx) = oneshot::channel::<Option<Bytes>>();
                let (done_tx, done_rx) = oneshot::channel();
                tokio::spawn(async move {
                    let result = lock
                        .edit_async(key, ttl, wait, |old| async move {
                            let _ = old_tx.send(old);
                            reply_rx.await.map_err(|_| abandoned())
                        })
                        .await;
                    let _ = done_tx.send(result);
                });
                match old_rx.await {
                    Ok(old) => Ok(NativeEdit {
                        old,
                        reply: Mutex::new(Some(reply_tx)),
                        done: Arc::new(tokio::sync::Mutex::new(Some(done_rx))),
                    }),
                    // The lock or the read failed: the task says why.
                    Err(_) => match done_rx.await {
                        Ok(Err(e)) => Err(e),
                        _ => Err(abandoned()),
                    },
                }
            },
            |_, edit| Ok(edit),
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

/// Why the JavaScript side abandoned an edit (its function threw or rejected): the core
/// then writes nothing and unlocks.
fn abandoned() -> Error {
    Error::InvalidArgument("the edit function failed: nothing was written".into())
}

/// Where the core's edit task reports how the edit ended (the value written, or why not).
type EditDone = oneshot::Receiver<Result<Option<Bytes>, Error>>;

/// A fenced read-modify-write in progress (`NativeLock.editStart`): the core's
/// `Lock::edit_async` runs in a task, holding the lock and waiting for the value the
/// JavaScript function computes from `old`; `finish(value)` or `abandon()` completes it.
#[napi]
#[derive(Debug)]
pub struct NativeEdit {
    old: Option<Bytes>,
    reply: Mutex<Option<oneshot::Sender<Option<Bytes>>>>,
    done: Arc<tokio::sync::Mutex<Option<EditDone>>>,
}

impl NativeEdit {
    /// Takes the reply channel (once): sending on it completes the edit, dropping it
    /// abandons it.
    fn take_reply(&self) -> Option<oneshot::Sender<Option<Bytes>>> {
        self.reply
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

#[napi]
impl NativeEdit {
    /// The key's value when the lock was taken, or null when there was no key.
    #[napi(getter, ts_return_type = "Buffer | null")]
    pub fn old<'env>(&self, env: &'env Env) -> napi::Result<Option<BufferSlice<'env>>> {
        buffer(env, self.old.clone())
    }

    /// Writes `value` (null deletes the key) with the lock's fencing token and unlocks;
    /// resolves with the value written.
    #[napi(ts_return_type = "Promise<Buffer | null>")]
    pub fn finish<'env>(
        &self,
        env: &'env Env,
        value: Option<Either<String, Uint8ArraySlice<'_>>>,
    ) -> napi::Result<PromiseRaw<'env, Option<BufferSlice<'env>>>> {
        if let Some(reply) = self.take_reply() {
            let _ = reply.send(value.map(bytes));
        }
        let done = self.done.clone();
        spawn(
            env,
            None,
            async move {
                let receiver = done.lock().await.take();
                match receiver {
                    Some(r) => r.await.unwrap_or_else(|_| Err(abandoned())),
                    None => Err(Error::InvalidArgument(
                        "this edit was completed already".into(),
                    )),
                }
            },
            buffer,
        )
    }

    /// Abandons the edit: nothing is written; resolves once the lock is released.
    #[napi]
    pub fn abandon<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        drop(self.take_reply());
        let done = self.done.clone();
        spawn(
            env,
            None,
            async move {
                if let Some(receiver) = done.lock().await.take() {
                    let _ = receiver.await;
                }
                Ok(())
            },
            |_, ()| Ok(()),
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
        let election = LeaderElection::new(&client.client, bytes(election), bytes(candidate))
            .and_then(|e| {
                e.with_renew_fraction(
                    renew_fraction.unwrap_or(mqstate::lock::DEFAULT_RENEW_FRACTION),
                )
            })
            .map_err(|e| js_error(&env, &e, &[]))?;
        Ok(NativeLeaderElection {
            election,
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
                    inner: SharedStream::new(events, client.state_changes()),
                })
            },
        )
    }
}

/// The events of an election, for one candidate.
#[napi]
#[derive(Debug)]
pub struct NativeLeadershipEvents {
    inner: Arc<SharedStream<LeadershipEvents>>,
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
