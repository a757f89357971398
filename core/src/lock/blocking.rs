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
    pub fn acquire_wait(&self, ttl: Duration, timeout: Duration) -> Result<FencingToken, Error> {
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
            // The timer is made inside the runtime (an async block): `timeout()` itself
            // needs the runtime's reactor, which a thread outside it does not have.
            block_on(&self.handle, async {
                tokio::time::timeout(timeout, events.recv()).await
            })?
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
            // The timer is made inside the runtime (an async block): `timeout()` itself
            // needs the runtime's reactor, which a thread outside it does not have.
            block_on(&self.handle, async {
                tokio::time::timeout(timeout, events.recv()).await
            })?
            .ok()
            .flatten(),
        )
    }
}
