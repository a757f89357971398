//! `Observation` (an iterator) and `AsyncObservation` (an async iterator) of a key's changes.
//!
//! Both end when the observation is closed (`close()`, or the end of its `with` block), when
//! the client closes (or the end of the client's `with` block), or after `unobserve(key)`.
//! A gap (the buffer overflowed) raises `mqstate.Lagged`; iterating again carries on.

use std::sync::Arc;

use bytes::Bytes;
use pyo3::exceptions::PyStopAsyncIteration;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::aio;
use crate::errors;
use crate::runtime::wait;
use crate::stream::{Next, StreamState};
use crate::types::{Notification, NotificationOut};

/// The state behind an observation.
pub(crate) type ObservationState = StreamState<mqstate::KeyObservation>;

/// `Next` on its way to Python: a notification, an exception, or the end of the iteration
/// (`StopAsyncIteration` when `async_end`, else `None`).
pub(crate) fn next_to_py<'py, T>(
    py: Python<'py>,
    next: Next<T>,
    async_end: bool,
    item: impl FnOnce(Python<'py>, T) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    match next {
        Next::Item(value) => item(py, value),
        Next::TimedOut(t) => Err(errors::exception(
            py,
            mqstate::ErrorKind::Timeout.as_str(),
            &format!("nothing arrived within {t:?}"),
            py.None(),
        )),
        Next::End if async_end => Err(PyStopAsyncIteration::new_err(())),
        Next::End => Ok(py.None().into_bound(py)),
    }
}

fn notification<'py>(
    py: Python<'py>,
    item: Result<mqstate::KeyNotification, mqstate::Error>,
) -> PyResult<Bound<'py, PyAny>> {
    match item {
        Ok(n) => Ok(NotificationOut(n).into_pyobject(py)?.into_any()),
        Err(e) => Err(errors::to_py(py, &e)),
    }
}

/// The changes of one key, as a blocking iterator (from `Client.observe`).
#[pyclass(module = "mqstate", name = "Observation", frozen)]
#[derive(Debug)]
pub(crate) struct Observation {
    key: Bytes,
    state: Arc<ObservationState>,
}

impl Observation {
    pub(crate) fn new(stream: mqstate::KeyObservation) -> Self {
        Observation {
            key: stream.key().clone(),
            state: StreamState::new(stream),
        }
    }
}

#[pymethods]
impl Observation {
    #[getter]
    fn key<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.key)
    }

    /// The next change; `None` once the observation has ended. With a timeout (seconds or a
    /// timedelta), raises `mqstate.TimeoutError` when no change came in time.
    #[pyo3(signature = (timeout = None))]
    fn recv<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, Notification>>> {
        let timeout = timeout
            .map(|t| crate::convert::duration_arg(t, "timeout"))
            .transpose()?;
        let next = wait(py, self.state.clone().next(timeout))?;
        let out = next_to_py(py, next, false, notification)?;
        if out.is_none() {
            return Ok(None);
        }
        Ok(Some(out.cast_into::<Notification>()?))
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, Notification>>> {
        self.recv(py, None)
    }

    /// Ends the observation (idempotent).
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

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "<mqstate.Observation key={}{}>",
            PyBytes::new(py, &self.key).repr()?,
            if self.state.is_closed() {
                " closed"
            } else {
                ""
            }
        ))
    }
}

/// The changes of one key, as an async iterator (from `AsyncClient.observe`).
#[pyclass(module = "mqstate", name = "AsyncObservation", frozen)]
#[derive(Debug)]
pub(crate) struct AsyncObservation {
    key: Bytes,
    state: Arc<ObservationState>,
}

impl AsyncObservation {
    pub(crate) fn new(stream: mqstate::KeyObservation) -> Self {
        AsyncObservation {
            key: stream.key().clone(),
            state: StreamState::new(stream),
        }
    }
}

#[pymethods]
impl AsyncObservation {
    #[getter]
    fn key<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.key)
    }

    fn __aiter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        aio::spawn_next(py, self.state.clone(), |py, next| {
            next_to_py(py, next, true, notification)
        })
    }

    /// Ends the observation (idempotent; returns at once).
    fn close(&self) {
        self.state.close();
    }

    /// Ends the observation (the async-iterator protocol's name for `close`).
    fn aclose<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.state.close();
        aio::ready(py, py.None())
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

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "<mqstate.AsyncObservation key={}{}>",
            PyBytes::new(py, &self.key).repr()?,
            if self.state.is_closed() {
                " closed"
            } else {
                ""
            }
        ))
    }
}
