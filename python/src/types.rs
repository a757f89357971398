//! The value types: `Hlc`, `Versioned`, `SetOutcome`, `VdelOutcome`, `Notification`.

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

use crate::errors::{self, OrRaise};

/// A hybrid logical clock value: the version of a key, and a fencing token.
#[pyclass(module = "mqstate", name = "Hlc", frozen, eq, ord, hash)]
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Hlc(pub(crate) mqstate::Hlc);

#[pymethods]
impl Hlc {
    #[new]
    fn new(py: Python<'_>, ms: u64, counter: u64, node_id: String) -> PyResult<Self> {
        mqstate::Hlc::try_new(ms, counter, node_id)
            .map(Hlc)
            .map_err(mqstate::Error::from)
            .or_raise(py)
    }

    /// Parses `{ms}:{counter}:{node_id}`.
    #[staticmethod]
    fn parse(text: &Bound<'_, PyAny>) -> PyResult<Self> {
        let py = text.py();
        let raw = crate::convert::bytes_arg(text, "an HLC")?;
        mqstate::Hlc::parse_bytes(raw).map(Hlc).map_err(|e| {
            errors::exception(
                py,
                errors::MALFORMED_HLC,
                &e.to_string(),
                e.reason_code().unwrap_or("other"),
            )
        })
    }

    #[getter]
    fn ms(&self) -> u64 {
        self.0.ms
    }

    #[getter]
    fn counter(&self) -> u64 {
        self.0.counter
    }

    #[getter]
    fn node_id(&self) -> &str {
        &self.0.node_id
    }

    fn __str__(&self) -> String {
        self.0.to_string()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let node = PyString::new(py, &self.0.node_id).repr()?;
        Ok(format!(
            "Hlc(ms={}, counter={}, node_id={node})",
            self.0.ms, self.0.counter
        ))
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let h = &slf.get().0;
        (slf.get_type(), (h.ms, h.counter, h.node_id.clone())).into_pyobject(slf.py())
    }
}

pub(crate) fn hlc(py: Python<'_>, value: mqstate::Hlc) -> PyResult<Py<Hlc>> {
    Py::new(py, Hlc(value))
}

/// A value with its version.
#[pyclass(module = "mqstate", frozen)]
#[derive(Debug)]
pub(crate) struct Versioned {
    #[pyo3(get)]
    value: Py<PyBytes>,
    #[pyo3(get)]
    version: Py<Hlc>,
}

#[pymethods]
impl Versioned {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Versioned(value={}, version={})",
            self.value.bind(py).repr()?,
            self.version.bind(py).repr()?
        ))
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Ok(other) = other.cast::<Versioned>() else {
            return Ok(false);
        };
        let other = other.get();
        Ok(
            self.value.bind(py).as_bytes() == other.value.bind(py).as_bytes()
                && self.version.get() == other.version.get(),
        )
    }
}

/// A GET result on its way to Python.
#[derive(Debug)]
pub(crate) struct VersionedOut(pub(crate) mqstate::Versioned<Bytes>);

impl<'py> IntoPyObject<'py> for VersionedOut {
    type Target = Versioned;
    type Output = Bound<'py, Versioned>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        Bound::new(
            py,
            Versioned {
                value: PyBytes::new(py, &self.0.value).unbind(),
                version: hlc(py, self.0.version)?,
            },
        )
    }
}

/// The outcome of a SET: whether it was applied (false when the `nx` / `nex` condition
/// failed) and the version it answered with. True in a boolean context when applied.
#[pyclass(module = "mqstate", frozen)]
#[derive(Debug)]
pub(crate) struct SetOutcome {
    #[pyo3(get)]
    applied: bool,
    #[pyo3(get)]
    version: Py<Hlc>,
}

#[pymethods]
impl SetOutcome {
    fn __bool__(&self) -> bool {
        self.applied
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "SetOutcome(applied={}, version={})",
            if self.applied { "True" } else { "False" },
            self.version.bind(py).repr()?
        ))
    }
}

/// A SET result on its way to Python.
#[derive(Debug)]
pub(crate) struct SetOutcomeOut(pub(crate) mqstate::SetOutcome);

impl<'py> IntoPyObject<'py> for SetOutcomeOut {
    type Target = SetOutcome;
    type Output = Bound<'py, SetOutcome>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        Bound::new(
            py,
            SetOutcome {
                applied: self.0.applied,
                version: hlc(py, self.0.version)?,
            },
        )
    }
}

/// The outcome of a VDEL.
#[pyclass(module = "mqstate", frozen, eq, hash)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum VdelOutcome {
    /// The key held the value and was deleted.
    #[pyo3(name = "DELETED")]
    Deleted,
    /// There was no such key.
    #[pyo3(name = "NOT_FOUND")]
    NotFound,
    /// The key holds another value and was kept.
    #[pyo3(name = "VALUE_MISMATCH")]
    ValueMismatch,
}

#[pymethods]
impl VdelOutcome {
    /// True for `DELETED`.
    #[getter]
    fn deleted(&self) -> bool {
        *self == VdelOutcome::Deleted
    }
}

impl From<mqstate::VdelOutcome> for VdelOutcome {
    fn from(o: mqstate::VdelOutcome) -> Self {
        match o {
            mqstate::VdelOutcome::Deleted => VdelOutcome::Deleted,
            mqstate::VdelOutcome::NotFound => VdelOutcome::NotFound,
            mqstate::VdelOutcome::ValueMismatch => VdelOutcome::ValueMismatch,
        }
    }
}

/// A change of an observed key.
#[pyclass(module = "mqstate", frozen)]
#[derive(Debug)]
pub(crate) struct Notification {
    #[pyo3(get)]
    key: Py<PyBytes>,
    /// `"set"` or `"delete"`.
    #[pyo3(get)]
    operation: &'static str,
    #[pyo3(get)]
    value: Option<Py<PyBytes>>,
    #[pyo3(get)]
    version: Option<Py<Hlc>>,
    #[pyo3(get)]
    synthesized: bool,
}

#[pymethods]
impl Notification {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let value = match &self.value {
            Some(v) => v.bind(py).repr()?.to_string(),
            None => "None".to_owned(),
        };
        let version = match &self.version {
            Some(v) => v.bind(py).repr()?.to_string(),
            None => "None".to_owned(),
        };
        Ok(format!(
            "Notification(key={}, operation='{}', value={value}, version={version}, synthesized={})",
            self.key.bind(py).repr()?,
            self.operation,
            if self.synthesized { "True" } else { "False" }
        ))
    }
}

/// A notification on its way to Python.
#[derive(Debug)]
pub(crate) struct NotificationOut(pub(crate) mqstate::KeyNotification);

impl<'py> IntoPyObject<'py> for NotificationOut {
    type Target = Notification;
    type Output = Bound<'py, Notification>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        let n = self.0;
        let (operation, value) = match &n.operation {
            mqstate::NotifyOperation::Set(v) => ("set", Some(PyBytes::new(py, v).unbind())),
            mqstate::NotifyOperation::Delete => ("delete", None),
        };
        let version = match n.version {
            Some(v) => Some(hlc(py, v)?),
            None => None,
        };
        Bound::new(
            py,
            Notification {
                key: PyBytes::new(py, &n.key).unbind(),
                operation,
                value,
                version,
                synthesized: n.synthesized,
            },
        )
    }
}
