//! [`Lock`]: a lease used as a mutex, whose [`LockGuard`] carries the fencing token, and the
//! fenced read-modify-write [`Lock::edit`] / [`Lock::edit_async`].

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;

use super::{FencingToken, Lease};
use crate::{Client, Error, SetOptions};

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
