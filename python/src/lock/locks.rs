//! `Lock` and `AsyncLock`, and their guards (`LockGuard`, `AsyncLockGuard`).

use super::*;

/// The held core guard; dropping it releases the lock in the background.
#[derive(Debug)]
struct GuardSlot(Mutex<Option<core::LockGuard>>);

impl GuardSlot {
    fn take(&self) -> Option<core::LockGuard> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    fn held(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }
}

impl Drop for GuardSlot {
    fn drop(&mut self) {
        if let Some(guard) = self.take() {
            // The core guard releases on drop when a runtime is at hand: give it ours.
            let _context = runtime().enter();
            drop(guard);
        }
    }
}

/// A guard class: `LockGuard` (blocking, `with`) or `AsyncLockGuard` (asyncio, `async with`),
/// the same methods over [`Mode`]; `$extra` adds the context-manager methods of each.
macro_rules! guard_class {
    ($name:ident, $py_name:literal, $mode:ty, $doc:literal, { $($extra:tt)* }) => {
        #[doc = $doc]
        #[pyclass(module = "mqstate", name = $py_name, frozen)]
        #[derive(Debug)]
        pub(crate) struct $name {
            guard: GuardSlot,
            token: mqstate::Hlc,
        }

        impl $name {
            fn new(guard: core::LockGuard) -> Self {
                $name {
                    token: guard.token().clone(),
                    guard: GuardSlot(Mutex::new(Some(guard))),
                }
            }

            /// Releases (idempotent): whether the lock was still ours, or `False` when
            /// `exiting` (`__exit__` / `__aexit__` must not swallow the block's exception).
            fn release_with<'py>(
                &self,
                py: Python<'py>,
                exiting: bool,
            ) -> PyResult<Bound<'py, PyAny>> {
                let guard = self.guard.take();
                <$mode>::run(py, async move {
                    let released = match guard {
                        Some(guard) => guard.unlock().await?,
                        None => false,
                    };
                    Ok(released && !exiting)
                })
            }
        }

        #[pymethods]
        impl $name {
            #[getter]
            fn token(&self) -> Hlc {
                Hlc(self.token.clone())
            }

            /// Whether this guard has not been released yet.
            #[getter]
            fn held(&self) -> bool {
                self.guard.held()
            }

            /// Releases the lock (idempotent): true if it was still ours.
            fn release<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.release_with(py, false)
            }

            fn __repr__(&self) -> String {
                format!(
                    concat!("<mqstate.", $py_name, " token={}{}>"),
                    self.token,
                    if self.guard.held() { "" } else { " released" }
                )
            }

            $($extra)*
        }
    };
}

guard_class!(
    LockGuard,
    "LockGuard",
    Blocking,
    "A held lock (blocking): `token` fences the writes it protects; `release()` or the end of \
     its `with` block releases it (dropping it releases it in the background).",
    {
        fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
            slf
        }

        #[pyo3(signature = (*_exc_info))]
        fn __exit__<'py>(
            &self,
            py: Python<'py>,
            _exc_info: &Bound<'py, PyTuple>,
        ) -> PyResult<Bound<'py, PyAny>> {
            self.release_with(py, true)
        }
    }
);

guard_class!(
    AsyncLockGuard,
    "AsyncLockGuard",
    Asyncio,
    "A held lock (asyncio): like `LockGuard`, with `await release()` and `async with`.",
    {
        fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
            aio::ready(slf.py(), slf.clone())
        }

        #[pyo3(signature = (*_exc_info))]
        fn __aexit__<'py>(
            &self,
            py: Python<'py>,
            _exc_info: &Bound<'py, PyTuple>,
        ) -> PyResult<Bound<'py, PyAny>> {
            self.release_with(py, true)
        }
    }
);

fn new_lock(
    py: Python<'_>,
    client: &mqstate::Client,
    name: &Bound<'_, PyAny>,
    holder: &Bound<'_, PyAny>,
    session_id: Option<&Bound<'_, PyAny>>,
) -> PyResult<core::Lock> {
    let lock = core::Lock::new(
        client,
        bytes_arg(name, "name")?,
        bytes_arg(holder, "holder")?,
    )
    .or_raise(py)?;
    Ok(match session_id {
        Some(session) => lock.with_session_id(bytes_arg(session, "session_id")?),
        None => lock,
    })
}

/// A lock class: `Lock` (blocking, over `Client`) or `AsyncLock` (asyncio, over
/// `AsyncClient`), the same methods; `$extra` adds `acquire()`, whose guards differ.
macro_rules! lock_class {
    ($name:ident, $py_name:literal, $client:ty, $mode:ty, $doc:literal, { $($extra:tt)* }) => {
        #[doc = $doc]
        #[pyclass(module = "mqstate", name = $py_name, frozen)]
        #[derive(Debug)]
        pub(crate) struct $name {
            inner: core::Lock,
        }

        #[pymethods]
        impl $name {
            #[new]
            #[pyo3(signature = (client, name, holder, *, session_id = None))]
            fn new(
                client: &Bound<'_, $client>,
                name: &Bound<'_, PyAny>,
                holder: &Bound<'_, PyAny>,
                session_id: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Self> {
                Ok($name {
                    inner: new_lock(client.py(), &client.get().inner, name, holder, session_id)?,
                })
            }

            #[getter]
            fn name<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
                PyBytes::new(py, self.inner.lease().name())
            }

            /// Who holds the lock now (`None` if nobody).
            fn holder<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                let lock = self.inner.clone();
                <$mode>::run(py, async move {
                    lock.lease().holder().await.map(|h| h.map(BytesOut))
                })
            }

            /// A fenced read-modify-write under the lock (the core's `Lock::edit`): takes
            /// the lock (`ttl`, waiting up to `timeout`), reads `key`, calls `f(old)` (bytes,
            /// or None when the key does not exist), then writes what `f` returned (None
            /// deletes the key) with the lock's fencing token, and unlocks in every case.
            /// Returns the new value. An exception raised by `f` abandons the edit (nothing
            /// is written) and propagates; `mqstate.TimeoutError` if the lock was not had in
            /// time.
            fn edit<'py>(
                &self,
                py: Python<'py>,
                key: &Bound<'py, PyAny>,
                ttl: &Bound<'py, PyAny>,
                timeout: &Bound<'py, PyAny>,
                f: Py<PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let key = bytes_arg(key, "key")?.to_vec();
                let ttl = positive_duration_arg(ttl, "ttl")?;
                let timeout = positive_duration_arg(timeout, "timeout")?;
                let lock = self.inner.clone();
                let event_loop = <$mode>::event_loop(py)?;
                <$mode>::run_py(py, async move {
                    edit_with(lock, key, ttl, timeout, f, event_loop)
                        .await
                        .map(|v| v.map(BytesOut))
                        .map_err(|e| Python::attach(|py| e.into_py(py)))
                })
            }

            fn __repr__(&self) -> String {
                lease_repr($py_name, self.inner.lease())
            }

            $($extra)*
        }
    };
}

lock_class!(
    Lock,
    "Lock",
    Client,
    Blocking,
    "A lock (blocking): a lease used as a mutex between holders (give each concurrent user \
     its own `holder`). `with lock.acquire(ttl, timeout) as guard:` holds it for the block.",
    {
        /// Takes the lock for `ttl`, waiting up to `timeout` for it. Raises
        /// `mqstate.TimeoutError` (a built-in `TimeoutError`) if it could not be had in time.
        fn acquire(
            &self,
            py: Python<'_>,
            ttl: &Bound<'_, PyAny>,
            timeout: &Bound<'_, PyAny>,
        ) -> PyResult<LockGuard> {
            let ttl = positive_duration_arg(ttl, "ttl")?;
            let timeout = positive_duration_arg(timeout, "timeout")?;
            let guard = wait(py, self.inner.lock(ttl, timeout))?.or_raise(py)?;
            Ok(LockGuard::new(guard))
        }
    }
);

lock_class!(
    AsyncLock,
    "AsyncLock",
    AsyncClient,
    Asyncio,
    "A lock (asyncio): `async with lock.acquire(ttl, timeout) as guard:`.",
    {
        /// `guard = await lock.acquire(ttl, timeout)` or
        /// `async with lock.acquire(ttl, timeout) as guard:`; `mqstate.TimeoutError` if the
        /// lock could not be had in time.
        fn acquire(
            &self,
            py: Python<'_>,
            ttl: &Bound<'_, PyAny>,
            timeout: &Bound<'_, PyAny>,
        ) -> PyResult<Pending> {
            let ttl = positive_duration_arg(ttl, "ttl")?;
            let timeout = positive_duration_arg(timeout, "timeout")?;
            let lock = self.inner.clone();
            let future = aio::spawn(py, async move {
                Ok(AsyncLockGuard::new(lock.lock(ttl, timeout).await?))
            })?;
            Ok(Pending::new(future))
        }
    }
);
