//! `mqstate::Error` to Python exceptions. The exception classes and the one table from the
//! core's stable kind strings to them live in `mqstate/_errors.py`; this module only hands
//! each error's kind, message and details to that table's factory.

use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;

/// The binding's own kind for an HLC the caller gave that does not parse (`MalformedHlc`, an
/// `InvalidArgument`); not a core kind, because from the network it is an unexpected payload.
pub(crate) const MALFORMED_HLC: &str = "malformed_hlc";

static FACTORY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Builds the Python exception for `kind` (a core `ErrorKind::as_str()`, or one of the
/// binding's kinds above) through `mqstate._errors._from_native(kind, message, detail)`.
pub(crate) fn exception<'py>(
    py: Python<'py>,
    kind: &str,
    message: &str,
    detail: impl IntoPyObject<'py>,
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let factory = FACTORY.import(py, "mqstate._errors", "_from_native")?;
        let detail = detail.into_bound_py_any(py)?;
        let args = PyTuple::new(
            py,
            [
                kind.into_bound_py_any(py)?,
                message.into_bound_py_any(py)?,
                detail,
            ],
        )?;
        Ok(PyErr::from_value(factory.call1(args)?))
    };
    // Only a broken installation (no `mqstate._errors`) ends up here.
    build().unwrap_or_else(|e| PyRuntimeError::new_err(format!("{message} (and {e})")))
}

/// The exception for a core error.
pub(crate) fn to_py(py: Python<'_>, error: &mqstate::Error) -> PyErr {
    let message = error.to_string();
    let kind = error.kind().as_str();
    match error {
        mqstate::Error::Service(service) => {
            exception(py, kind, &message, (service.kind_str(), service.text()))
        }
        mqstate::Error::Lagged(missed) => exception(py, kind, &message, *missed),
        _ => exception(py, kind, &message, py.None()),
    }
}

/// `mqstate.InvalidArgument(message)`.
pub(crate) fn invalid_argument(py: Python<'_>, message: impl AsRef<str>) -> PyErr {
    exception(
        py,
        mqstate::ErrorKind::InvalidArgument.as_str(),
        message.as_ref(),
        py.None(),
    )
}

/// The `RuntimeError` for a Rust panic caught at the binding's edge, in the words every
/// binding uses ([`mqstate::protocol::errors::panic_report`]).
pub(crate) fn panicked(panic: &(dyn std::any::Any + Send)) -> PyErr {
    pyo3::exceptions::PyRuntimeError::new_err(mqstate::protocol::errors::panic_report(panic))
}

/// A core result on its way to Python: the error becomes an exception when it reaches Python
/// (for asyncio results that is on the event loop's side, with the GIL, never on a runtime
/// worker).
#[derive(Debug)]
pub(crate) struct Outcome<T>(pub(crate) Result<T, mqstate::Error>);

impl<'py, T> IntoPyObject<'py> for Outcome<T>
where
    T: IntoPyObject<'py>,
{
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        match self.0 {
            Ok(value) => value.into_bound_py_any(py),
            Err(error) => Err(to_py(py, &error)),
        }
    }
}

/// `?` for core results in blocking methods.
pub(crate) trait OrRaise<T> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> OrRaise<T> for Result<T, mqstate::Error> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, &e))
    }
}
