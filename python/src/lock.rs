//! Leases, locks and leader election (`mqstate::lock`), blocking (`Lease`, `Lock`,
//! `LeaderElection`) and asyncio (`AsyncLease`, `AsyncLock`, `AsyncLeaderElection`), with
//! their event streams (`LeaseEvents`, `LeadershipEvents`, usable with `for` and
//! `async for`). Every rule (NEX sets, renewal, fencing tokens) lives in the core.

use std::sync::{Arc, Mutex, PoisonError};

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use mqstate::lock as core;

use crate::aio::{self, Pending};
use crate::client::{AsyncClient, Client};
use crate::convert::{BytesOut, bytes_arg, positive_duration_arg};
use crate::errors::{self, OrRaise};
use crate::observe::next_to_py;
use crate::runtime::{runtime, wait};
use crate::stream::StreamState;
use crate::types::{Hlc, hlc};

fn new_lease(
    py: Python<'_>,
    client: &mqstate::Client,
    name: &Bound<'_, PyAny>,
    holder: &Bound<'_, PyAny>,
    session_id: Option<&Bound<'_, PyAny>>,
) -> PyResult<core::Lease> {
    let lease = core::Lease::new(
        client,
        bytes_arg(name, "name")?,
        bytes_arg(holder, "holder")?,
    )
    .or_raise(py)?;
    Ok(match session_id {
        Some(session) => lease.with_session_id(bytes_arg(session, "session_id")?),
        None => lease,
    })
}

fn lease_repr(kind: &str, lease: &core::Lease) -> String {
    format!(
        "<mqstate.{kind} name={:?} holder={:?} token={}>",
        String::from_utf8_lossy(lease.name()),
        String::from_utf8_lossy(lease.holder_value()),
        lease
            .current_token()
            .map_or_else(|| "None".to_owned(), |t| t.to_string())
    )
}

// ----------------------------------------------------------------------------------------
// Events

/// What happened to a lease: `kind` is `"acquired"`, `"renewed"`, `"lost"` or `"released"`.
#[pyclass(module = "mqstate", frozen)]
#[derive(Debug)]
pub(crate) struct LeaseEvent {
    #[pyo3(get)]
    kind: &'static str,
    /// The new fencing token (`"acquired"`, `"renewed"`).
    #[pyo3(get)]
    token: Option<Py<Hlc>>,
    /// Why the lease was lost (`"lost"`).
    #[pyo3(get)]
    reason: Option<String>,
}

#[pymethods]
impl LeaseEvent {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        event_repr(
            py,
            "LeaseEvent",
            self.kind,
            self.token.as_ref(),
            self.reason.as_deref(),
            None,
        )
    }
}

fn lease_event<'py>(py: Python<'py>, event: core::LeaseEvent) -> PyResult<Bound<'py, PyAny>> {
    let kind = event.name();
    let token = event.token().cloned();
    let reason = match event {
        core::LeaseEvent::Lost { reason } => Some(reason),
        _ => None,
    };
    let token = token.map(|t| hlc(py, t)).transpose()?;
    Ok(Bound::new(
        py,
        LeaseEvent {
            kind,
            token,
            reason,
        },
    )?
    .into_any())
}

/// What a candidate learns about an election: `kind` is `"elected"`, `"renewed"`,
/// `"lost"`, `"resigned"` (this candidate) or `"new_leader"` (another one, or none).
#[pyclass(module = "mqstate", frozen)]
#[derive(Debug)]
pub(crate) struct LeadershipEvent {
    #[pyo3(get)]
    kind: &'static str,
    /// This candidate's new fencing token (`"elected"`, `"renewed"`).
    #[pyo3(get)]
    token: Option<Py<Hlc>>,
    /// Why the leadership was lost (`"lost"`).
    #[pyo3(get)]
    reason: Option<String>,
    /// The new leader (`"new_leader"`); `None` when nobody leads.
    #[pyo3(get)]
    leader: Option<Py<PyBytes>>,
}

#[pymethods]
impl LeadershipEvent {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        event_repr(
            py,
            "LeadershipEvent",
            self.kind,
            self.token.as_ref(),
            self.reason.as_deref(),
            self.leader.as_ref(),
        )
    }
}

fn leadership_event<'py>(
    py: Python<'py>,
    event: core::LeadershipEvent,
) -> PyResult<Bound<'py, PyAny>> {
    let kind = event.name();
    let token = event.token().cloned();
    let (reason, leader) = match event {
        core::LeadershipEvent::Lost { reason } => (Some(reason), None),
        core::LeadershipEvent::NewLeader(leader) => (None, leader),
        _ => (None, None),
    };
    let token = token.map(|t| hlc(py, t)).transpose()?;
    let leader = leader.map(|l| PyBytes::new(py, &l).unbind());
    Ok(Bound::new(
        py,
        LeadershipEvent {
            kind,
            token,
            reason,
            leader,
        },
    )?
    .into_any())
}

fn event_repr(
    py: Python<'_>,
    class: &str,
    kind: &str,
    token: Option<&Py<Hlc>>,
    reason: Option<&str>,
    leader: Option<&Py<PyBytes>>,
) -> PyResult<String> {
    let mut out = format!("{class}(kind={kind:?}");
    if let Some(token) = token {
        out.push_str(&format!(", token={}", token.bind(py).repr()?));
    }
    if let Some(reason) = reason {
        out.push_str(&format!(", reason={reason:?}"));
    }
    if let Some(leader) = leader {
        out.push_str(&format!(", leader={}", leader.bind(py).repr()?));
    }
    out.push(')');
    Ok(out)
}

/// An event stream usable both ways: `recv()` / `for` (blocking, GIL released) and
/// `async for` (asyncio). It ends on `close()`, at the end of its `with` / `async with`
/// block, or when the lease / election (and its client) is gone.
macro_rules! event_stream {
    ($name:ident, $py_name:literal, $source:ty, $event:ident, $convert:ident) => {
        #[pyclass(module = "mqstate", name = $py_name, frozen)]
        #[derive(Debug)]
        pub(crate) struct $name {
            state: Arc<StreamState<$source>>,
        }

        impl $name {
            fn new(source: $source) -> Self {
                $name {
                    state: StreamState::new(source),
                }
            }
        }

        #[pymethods]
        impl $name {
            /// The next event, or `None` once the stream has ended; with a timeout (seconds
            /// or a timedelta), raises `mqstate.TimeoutError` when none came in time.
            #[pyo3(signature = (timeout = None))]
            fn recv<'py>(
                &self,
                py: Python<'py>,
                timeout: Option<&Bound<'py, PyAny>>,
            ) -> PyResult<Option<Bound<'py, $event>>> {
                let timeout = timeout
                    .map(|t| crate::convert::duration_arg(t, "timeout"))
                    .transpose()?;
                let next = wait(py, self.state.clone().next(timeout))?;
                let out = next_to_py(py, next, false, $convert)?;
                if out.is_none() {
                    return Ok(None);
                }
                Ok(Some(out.cast_into::<$event>()?))
            }

            fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
                slf
            }

            fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, $event>>> {
                self.recv(py, None)
            }

            fn __aiter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
                slf
            }

            fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                aio::spawn_next(py, self.state.clone(), |py, next| {
                    next_to_py(py, next, true, $convert)
                })
            }

            /// Ends the stream (idempotent; returns at once).
            fn close(&self) {
                self.state.close();
            }

            fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
                slf
            }

            #[pyo3(signature = (*_exc_info))]
            fn __exit__(&self, _exc_info: &Bound<'_, PyTuple>) -> bool {
                self.state.close();
                false
            }

            fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
                aio::ready(slf.py(), slf.clone())
            }

            #[pyo3(signature = (*_exc_info))]
            fn __aexit__<'py>(
                &self,
                py: Python<'py>,
                _exc_info: &Bound<'py, PyTuple>,
            ) -> PyResult<Bound<'py, PyAny>> {
                self.state.close();
                aio::ready(py, false)
            }

            fn __repr__(&self) -> String {
                format!(
                    "<mqstate.{}{}>",
                    $py_name,
                    if self.state.is_closed() {
                        " closed"
                    } else {
                        ""
                    }
                )
            }
        }
    };
}

event_stream!(
    LeaseEvents,
    "LeaseEvents",
    core::LeaseEvents,
    LeaseEvent,
    lease_event
);
event_stream!(
    LeadershipEvents,
    "LeadershipEvents",
    core::LeadershipEvents,
    LeadershipEvent,
    leadership_event
);

// ----------------------------------------------------------------------------------------
// Leases

/// How a class of this module runs a core call: blocking (`wait`: on the library's runtime,
/// with the GIL released, the result converted) or asyncio (a `Call` of the running
/// loop). The blocking and asyncio twins are generated once, by [`lease_class!`], over this.
trait Mode {
    fn run<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
    where
        F: std::future::Future<Output = Result<T, mqstate::Error>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static;

    /// [`Mode::run`] for a future whose error is already a Python exception.
    fn run_py<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
    where
        F: std::future::Future<Output = PyResult<T>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static;

    /// The event loop on which an edit function's awaitable runs (`AsyncLock.edit`); `None`
    /// in the blocking classes, whose edit functions must return the value itself.
    fn event_loop(py: Python<'_>) -> PyResult<Option<Py<PyAny>>>;
}

/// The blocking classes (`Lease`, ...).
#[derive(Debug)]
struct Blocking;

impl Mode for Blocking {
    fn run<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
    where
        F: std::future::Future<Output = Result<T, mqstate::Error>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        wait(py, future)?.or_raise(py)?.into_bound_py_any(py)
    }

    fn run_py<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
    where
        F: std::future::Future<Output = PyResult<T>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        wait(py, future)??.into_bound_py_any(py)
    }

    fn event_loop(_py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(None)
    }
}

/// The asyncio classes (`AsyncLease`, ...).
#[derive(Debug)]
struct Asyncio;

impl Mode for Asyncio {
    fn run<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
    where
        F: std::future::Future<Output = Result<T, mqstate::Error>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        aio::spawn(py, future)
    }

    fn run_py<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
    where
        F: std::future::Future<Output = PyResult<T>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        aio::spawn_fallible(py, future)
    }

    fn event_loop(py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(Some(aio::running_loop(py)?.unbind()))
    }
}

/// A lease class: `Lease` (blocking, over `Client`) or `AsyncLease` (asyncio, over
/// `AsyncClient`), the same methods; `$extra` adds the context-manager methods of each.
macro_rules! lease_class {
    ($name:ident, $py_name:literal, $client:ty, $mode:ty, $doc:literal, { $($extra:tt)* }) => {
        #[doc = $doc]
        #[pyclass(module = "mqstate", name = $py_name, frozen)]
        #[derive(Debug)]
        pub(crate) struct $name {
            inner: core::Lease,
        }

        impl $name {
            /// Releases the lease if it is held (the end of a `with` / `async with` block).
            fn release_if_held<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.inner.stop_renewal();
                let lease = self.inner.clone();
                <$mode>::run(py, async move {
                    if lease.current_token().is_some() {
                        lease.release().await?;
                    }
                    Ok(false)
                })
            }
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
                    inner: new_lease(client.py(), &client.get().inner, name, holder, session_id)?,
                })
            }

            /// The lease's key.
            #[getter]
            fn name<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
                PyBytes::new(py, self.inner.name())
            }

            /// The value this lease writes when it holds the key (`holder`, or
            /// `holder:session_id`).
            #[getter]
            fn holder_value<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
                PyBytes::new(py, self.inner.holder_value())
            }

            /// The fencing token of the last acquire or renewal while the lease is believed
            /// held, else `None`.
            #[getter]
            fn token(&self) -> Option<Hlc> {
                self.inner.current_token().map(Hlc)
            }

            /// Renews the lease in the background every `fraction` × ttl; stops (with a
            /// `"lost"` event) at the first failure or when someone else takes the key.
            #[pyo3(signature = (fraction = 0.5))]
            fn auto_renew(&self, py: Python<'_>, fraction: f64) -> PyResult<()> {
                // The renewal task is spawned on the library's runtime.
                let _context = runtime().enter();
                self.inner.auto_renew(fraction).or_raise(py)
            }

            /// Stops the automatic renewal (the lease stays held until its ttl passes).
            fn stop_renewal(&self) {
                self.inner.stop_renewal();
            }

            /// The lease's events from now on (acquired, renewed, lost, released).
            fn events(&self) -> LeaseEvents {
                LeaseEvents::new(self.inner.events())
            }

            /// Tries once: the fencing token if the lease is held now (newly, or renewed),
            /// `None` if someone else holds it.
            fn acquire<'py>(
                &self,
                py: Python<'py>,
                ttl: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let ttl = positive_duration_arg(ttl, "ttl")?;
                let lease = self.inner.clone();
                <$mode>::run(py, async move { lease.acquire(ttl).await.map(|t| t.map(Hlc)) })
            }

            /// Acquires the lease, waiting up to `timeout` for the holder to release it or
            /// for its lease to expire (woken by a notification, not by polling); raises
            /// `mqstate.TimeoutError` if it could not be had in time.
            fn acquire_wait<'py>(
                &self,
                py: Python<'py>,
                ttl: &Bound<'py, PyAny>,
                timeout: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let ttl = positive_duration_arg(ttl, "ttl")?;
                let timeout = positive_duration_arg(timeout, "timeout")?;
                let lease = self.inner.clone();
                <$mode>::run(py, async move { lease.acquire_wait(ttl, timeout).await.map(Hlc) })
            }

            /// Renews with the ttl of the last acquire: the new token, or `None` if the lease
            /// was lost to someone else.
            fn renew<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                let lease = self.inner.clone();
                <$mode>::run(py, async move { lease.renew().await.map(|t| t.map(Hlc)) })
            }

            /// Gives the lease up (stops the renewal); true if this holder held it.
            fn release<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                let lease = self.inner.clone();
                <$mode>::run(py, async move { lease.release().await })
            }

            /// Who holds the lease now (`None` if nobody).
            fn holder<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                let lease = self.inner.clone();
                <$mode>::run(py, async move { lease.holder().await.map(|h| h.map(BytesOut)) })
            }

            fn __repr__(&self) -> String {
                lease_repr($py_name, &self.inner)
            }

            $($extra)*
        }
    };
}

lease_class!(
    Lease,
    "Lease",
    Client,
    Blocking,
    "A lease on a key (blocking): at most one holder at a time, for a time-to-live that the \
     holder renews. The token of each acquire or renewal fences writes (`fencing_token=`).",
    {
        fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
            slf
        }

        /// Releases the lease if it is held.
        #[pyo3(signature = (*_exc_info))]
        fn __exit__<'py>(
            &self,
            py: Python<'py>,
            _exc_info: &Bound<'py, PyTuple>,
        ) -> PyResult<Bound<'py, PyAny>> {
            self.release_if_held(py)
        }
    }
);

lease_class!(
    AsyncLease,
    "AsyncLease",
    AsyncClient,
    Asyncio,
    "A lease on a key (asyncio): the methods of `Lease`, as awaitables.",
    {
        fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
            aio::ready(slf.py(), slf.clone())
        }

        /// Releases the lease if it is held.
        #[pyo3(signature = (*_exc_info))]
        fn __aexit__<'py>(
            &self,
            py: Python<'py>,
            _exc_info: &Bound<'py, PyTuple>,
        ) -> PyResult<Bound<'py, PyAny>> {
            self.release_if_held(py)
        }
    }
);

// ----------------------------------------------------------------------------------------
// Locks

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

/// Why an edit failed: the store's error, or the exception `f` raised (re-raised as is).
#[derive(Debug)]
enum EditError {
    Store(mqstate::Error),
    Raised(PyErr),
}

impl From<mqstate::Error> for EditError {
    fn from(e: mqstate::Error) -> Self {
        EditError::Store(e)
    }
}

impl EditError {
    fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            EditError::Store(e) => errors::to_py(py, &e),
            EditError::Raised(e) => e,
        }
    }
}

/// The edit the core runs under the lock: `f(old)` (bytes or None) must return bytes, str
/// or None (delete), or, given an `event_loop` (`AsyncLock.edit`), an awaitable of one (a
/// coroutine function's result), awaited on that loop; an exception it raises abandons the
/// edit.
async fn edit_with(
    lock: core::Lock,
    key: Vec<u8>,
    ttl: std::time::Duration,
    timeout: std::time::Duration,
    f: Py<PyAny>,
    event_loop: Option<Py<PyAny>>,
) -> Result<Option<bytes::Bytes>, EditError> {
    lock.edit_async(key, ttl, timeout, |old| async move {
        let returned = Python::attach(|py| {
            let old = old.map(|v| PyBytes::new(py, &v));
            let returned = f.bind(py).call1((old,))?;
            if !is_awaitable(&returned)? {
                return Ok(Returned::Value(returned.unbind()));
            }
            match &event_loop {
                Some(event_loop) => Ok(Returned::Pending(schedule(event_loop.bind(py), returned)?)),
                None => {
                    // Never awaited: close a coroutine so that Python does not warn about it.
                    if returned.hasattr("close")? {
                        returned.call_method0("close")?;
                    }
                    Err(pyo3::exceptions::PyTypeError::new_err(
                        "Lock.edit takes a plain function, and f returned an awaitable: \
                         use AsyncLock.edit for a coroutine function",
                    ))
                }
            }
        })
        .map_err(EditError::Raised)?;
        let value = match returned {
            Returned::Value(value) => value,
            Returned::Pending(outcome) => outcome
                .await
                .map_err(|_| {
                    EditError::Raised(pyo3::exceptions::PyRuntimeError::new_err(
                        "the edit function's awaitable was dropped by its event loop",
                    ))
                })?
                .map_err(EditError::Raised)?,
        };
        Python::attach(|py| {
            let value = value.bind(py);
            if value.is_none() {
                return Ok(None);
            }
            let bytes = bytes_arg(value, "the value returned by f")?;
            Ok(Some(bytes::Bytes::copy_from_slice(bytes)))
        })
        .map_err(EditError::Raised)
    })
    .await
}

/// What the edit function returned: the value, or the outcome of its awaitable.
enum Returned {
    Value(Py<PyAny>),
    Pending(tokio::sync::oneshot::Receiver<PyResult<Py<PyAny>>>),
}

fn is_awaitable(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = value.py();
    py.import("inspect")?
        .call_method1("isawaitable", (value,))?
        .is_truthy()
}

/// The outcome of an edit function's awaitable, sent from the event loop's thread.
type Outcome = tokio::sync::oneshot::Sender<PyResult<Py<PyAny>>>;

/// Runs `awaitable` as a task of `event_loop` (started from this runtime thread, which is not
/// the loop's, with `call_soon_threadsafe`) and gives its outcome through a channel that the
/// core's edit awaits; the runtime thread never blocks on the loop.
fn schedule(
    event_loop: &Bound<'_, PyAny>,
    awaitable: Bound<'_, PyAny>,
) -> PyResult<tokio::sync::oneshot::Receiver<PyResult<Py<PyAny>>>> {
    let py = event_loop.py();
    let (tx, rx) = tokio::sync::oneshot::channel();
    // Shared by the start and done callbacks: whichever finishes first sends.
    let outcome: Arc<Mutex<Option<Outcome>>> = Arc::new(Mutex::new(Some(tx)));
    let send = move |outcome: &Mutex<Option<Outcome>>, result: PyResult<Py<PyAny>>| {
        if let Some(tx) = outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = tx.send(result);
        }
    };
    let awaitable = awaitable.unbind();
    let start = pyo3::types::PyCFunction::new_closure(py, None, None, move |args, _kwargs| {
        let py = args.py();
        let on_done = outcome.clone();
        let started = (|| -> PyResult<()> {
            let task = py
                .import("asyncio")?
                .call_method1("ensure_future", (awaitable.bind(py),))?;
            let done = pyo3::types::PyCFunction::new_closure(py, None, None, move |args, _| {
                let result = args
                    .get_item(0)
                    .and_then(|task| task.call_method0("result"))
                    .map(Bound::unbind);
                send(&on_done, result);
            })?;
            task.call_method1("add_done_callback", (done,))?;
            Ok(())
        })();
        if let Err(e) = started {
            send(&outcome, Err(e));
        }
    })?;
    event_loop.call_method1("call_soon_threadsafe", (start,))?;
    Ok(rx)
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

// ----------------------------------------------------------------------------------------
// Leader election

fn new_election(
    py: Python<'_>,
    client: &mqstate::Client,
    election: &Bound<'_, PyAny>,
    candidate: &Bound<'_, PyAny>,
    renew_fraction: f64,
) -> PyResult<core::LeaderElection> {
    core::LeaderElection::new(
        client,
        bytes_arg(election, "election")?,
        bytes_arg(candidate, "candidate")?,
    )
    .and_then(|e| e.with_renew_fraction(renew_fraction))
    .or_raise(py)
}

fn election_repr(kind: &str, election: &core::LeaderElection) -> String {
    format!(
        "<mqstate.{kind} election={:?} candidate={:?} leading={}>",
        String::from_utf8_lossy(election.lease().name()),
        String::from_utf8_lossy(election.lease().holder_value()),
        if election.is_leader() {
            "True"
        } else {
            "False"
        }
    )
}

/// An election class: `LeaderElection` (blocking, over `Client`) or `AsyncLeaderElection`
/// (asyncio, over `AsyncClient`), the same methods; `$extra` adds what differs (`events()`
/// and the context-manager methods).
macro_rules! election_class {
    ($name:ident, $py_name:literal, $client:ty, $mode:ty, $doc:literal, { $($extra:tt)* }) => {
        #[doc = $doc]
        #[pyclass(module = "mqstate", name = $py_name, frozen)]
        #[derive(Debug)]
        pub(crate) struct $name {
            inner: core::LeaderElection,
        }

        impl $name {
            /// Resigns if leading (the end of a `with` / `async with` block).
            fn resign_if_leading<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.inner.lease().stop_renewal();
                let election = self.inner.clone();
                <$mode>::run(py, async move {
                    if election.is_leader() {
                        election.resign().await?;
                    }
                    Ok(false)
                })
            }
        }

        #[pymethods]
        impl $name {
            #[new]
            #[pyo3(signature = (client, election, candidate, *, renew_fraction = 0.5))]
            fn new(
                py: Python<'_>,
                client: &Bound<'_, $client>,
                election: &Bound<'_, PyAny>,
                candidate: &Bound<'_, PyAny>,
                renew_fraction: f64,
            ) -> PyResult<Self> {
                Ok($name {
                    inner: new_election(py, &client.get().inner, election, candidate, renew_fraction)?,
                })
            }

            /// True while this candidate believes it leads.
            #[getter]
            fn is_leader(&self) -> bool {
                self.inner.is_leader()
            }

            /// This candidate's fencing token while it leads, else `None`.
            #[getter]
            fn token(&self) -> Option<Hlc> {
                self.inner.lease().current_token().map(Hlc)
            }

            /// Campaigns until elected (the token) or `timeout` passes
            /// (`mqstate.TimeoutError`); the term is then renewed automatically until
            /// `resign()` or a loss.
            fn campaign<'py>(
                &self,
                py: Python<'py>,
                term: &Bound<'py, PyAny>,
                timeout: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let term = positive_duration_arg(term, "term")?;
                let timeout = positive_duration_arg(timeout, "timeout")?;
                let election = self.inner.clone();
                <$mode>::run(py, async move { election.campaign(term, timeout).await.map(Hlc) })
            }

            /// Tries once: the token if elected, else `None`.
            fn try_campaign<'py>(
                &self,
                py: Python<'py>,
                term: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let term = positive_duration_arg(term, "term")?;
                let election = self.inner.clone();
                <$mode>::run(py, async move {
                    election.try_campaign(term).await.map(|t| t.map(Hlc))
                })
            }

            /// Steps down (stops renewing, releases the election key); true if this
            /// candidate led.
            fn resign<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                let election = self.inner.clone();
                <$mode>::run(py, async move { election.resign().await })
            }

            /// The current leader, `None` if there is none.
            fn leader<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                let election = self.inner.clone();
                <$mode>::run(py, async move { election.leader().await.map(|l| l.map(BytesOut)) })
            }

            fn __repr__(&self) -> String {
                election_repr($py_name, &self.inner)
            }

            $($extra)*
        }
    };
}

election_class!(
    LeaderElection,
    "LeaderElection",
    Client,
    Blocking,
    "Leader election (blocking): the leader holds the election's lease and renews it \
     automatically; the others wait for it.",
    {
        /// The leadership changes from now on: this candidate's own and other leaders.
        fn events(&self, py: Python<'_>) -> PyResult<LeadershipEvents> {
            let events = wait(py, self.inner.events())?.or_raise(py)?;
            Ok(LeadershipEvents::new(events))
        }

        fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
            slf
        }

        /// Resigns if leading.
        #[pyo3(signature = (*_exc_info))]
        fn __exit__<'py>(
            &self,
            py: Python<'py>,
            _exc_info: &Bound<'py, PyTuple>,
        ) -> PyResult<Bound<'py, PyAny>> {
            self.resign_if_leading(py)
        }
    }
);

election_class!(
    AsyncLeaderElection,
    "AsyncLeaderElection",
    AsyncClient,
    Asyncio,
    "Leader election (asyncio): the methods of `LeaderElection`, as awaitables.",
    {
        /// `events = await election.events()` or `async with election.events() as events:`.
        fn events(&self, py: Python<'_>) -> PyResult<Pending> {
            let election = self.inner.clone();
            let future = aio::spawn(py, async move {
                election.events().await.map(LeadershipEvents::new)
            })?;
            Ok(Pending::new(future))
        }

        fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
            aio::ready(slf.py(), slf.clone())
        }

        /// Resigns if leading.
        #[pyo3(signature = (*_exc_info))]
        fn __aexit__<'py>(
            &self,
            py: Python<'py>,
            _exc_info: &Bound<'py, PyTuple>,
        ) -> PyResult<Bound<'py, PyAny>> {
            self.resign_if_leading(py)
        }
    }
);
