//! Arguments from Python (keys and values as `bytes` or `str`, durations) and results to
//! Python (values as `bytes`).

use std::time::Duration;

use bytes::Bytes;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFloat, PyInt, PyString};

use crate::errors;

/// The bytes of a key or value: `bytes` as they are, `str` as UTF-8. Borrowed from the Python
/// object (no copy); the object is immutable, so the slice may be read with the GIL released.
pub(crate) fn bytes_arg<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<&'a [u8]> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes());
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_str()?.as_bytes());
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be bytes or str, not {}",
        obj.get_type().name()?
    )))
}

/// [`bytes_arg`], copied into `Bytes` (for requests that outlive the call: asyncio).
pub(crate) fn owned_bytes_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Bytes> {
    bytes_arg(obj, what).map(Bytes::copy_from_slice)
}

/// A duration given as seconds (`int` or `float`) or as a `datetime.timedelta`; it must be
/// finite and not negative (zero is left to the caller to accept or refuse).
pub(crate) fn duration_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Duration> {
    let py = obj.py();
    let seconds: f64 = if obj.is_instance_of::<PyFloat>() || obj.is_instance_of::<PyInt>() {
        if obj.is_instance_of::<pyo3::types::PyBool>() {
            return Err(PyTypeError::new_err(format!(
                "{what} must be a number of seconds or a datetime.timedelta, not bool"
            )));
        }
        obj.extract()?
    } else if obj.hasattr("total_seconds")? {
        obj.call_method0("total_seconds")?.extract()?
    } else {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a number of seconds or a datetime.timedelta, not {}",
            obj.get_type().name()?
        )));
    };
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(errors::invalid_argument(
            py,
            format!("{what} must be a finite, non-negative number of seconds, not {seconds}"),
        ));
    }
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| errors::invalid_argument(py, format!("{what} of {seconds} s is too long")))
}

/// A value on its way to Python as `bytes`.
#[derive(Debug)]
pub(crate) struct BytesOut(pub(crate) Bytes);

impl<'py> IntoPyObject<'py> for BytesOut {
    type Target = PyBytes;
    type Output = Bound<'py, PyBytes>;
    type Error = std::convert::Infallible;

    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(PyBytes::new(py, &self.0))
    }
}

/// A duration that must be longer than zero (a ttl, a term, a timeout).
pub(crate) fn positive_duration_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Duration> {
    let duration = duration_arg(obj, what)?;
    if duration.is_zero() {
        return Err(errors::invalid_argument(
            obj.py(),
            format!("{what} must be longer than zero"),
        ));
    }
    Ok(duration)
}
