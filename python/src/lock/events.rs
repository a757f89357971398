//! Lease and leadership events, and their streams (`for` and `async for`).

use super::*;

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
            pub(super) fn new(source: $source) -> Self {
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
