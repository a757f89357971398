//! `Client` (blocking; every call releases the GIL while it waits) and `AsyncClient`
//! (asyncio). Both wrap one `mqstate::Client` running on the library's runtime.

use std::time::Duration;

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use mqstate::{SetCondition, SetOptions};

use crate::aio::{self, Pending};
use crate::convert::{BytesOut, bytes_arg, duration_arg, owned_bytes_arg};
use crate::errors::{self, OrRaise};
use crate::observe::{AsyncObservation, Observation};
use crate::options::{Base, connect_options};
use crate::runtime::{call, wait};
use crate::scan::{AsyncScan, Scan};
use crate::types::{Hlc, SetOutcome, SetOutcomeOut, VdelOutcome, Versioned, VersionedOut};

/// The SET options from the keyword arguments; the core judges them (`nx` with `nex`, a zero
/// expiry).
fn set_options(
    py: Python<'_>,
    nx: bool,
    nex: bool,
    expiry: Option<&Bound<'_, PyAny>>,
    fencing_token: Option<&Bound<'_, Hlc>>,
    persist: bool,
) -> PyResult<SetOptions> {
    let mut options = SetOptions::default();
    if persist {
        options = options.persist();
    }
    options.condition = SetCondition::from_flags(nx, nex).or_raise(py)?;
    if let Some(expiry) = expiry {
        // A zero expiry is refused by the core (`invalid_argument`), as in every language.
        options = options.expiry(duration_arg(expiry, "expiry")?);
    }
    if let Some(token) = fencing_token {
        options = options.fencing_token(token.get().0.clone());
    }
    Ok(options)
}

fn token(fencing_token: Option<&Bound<'_, Hlc>>) -> Option<mqstate::Hlc> {
    fencing_token.map(|t| t.get().0.clone())
}

/// A per-handle request timeout from Python: positive seconds or a timedelta.
fn timeout_arg(py: Python<'_>, timeout: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let timeout = duration_arg(timeout, "timeout")?;
    if timeout.is_zero() {
        return Err(errors::invalid_argument(
            py,
            "timeout must be longer than zero",
        ));
    }
    Ok(timeout)
}

fn repr(kind: &str, client: &mqstate::Client) -> String {
    format!(
        "<mqstate.{kind} client_id={:?} state={} timeout={}s>",
        client.client_id(),
        client.state(),
        client.timeout().as_secs_f64()
    )
}

/// A blocking state store client. Thread-safe: one client may be shared by any number of
/// threads, whose requests are pipelined on one connection. Every call releases the GIL while
/// it waits.
#[pyclass(module = "mqstate", name = "Client", frozen)]
#[derive(Debug)]
pub(crate) struct Client {
    pub(crate) inner: mqstate::Client,
}

impl Client {
    fn connect(py: Python<'_>, options: mqstate::ConnectOptions) -> PyResult<Self> {
        let inner = call(py, mqstate::Client::connect(options))?;
        Ok(Client { inner })
    }
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (url = None, **options))]
    fn new(
        py: Python<'_>,
        url: Option<&str>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let options = connect_options(py, Base::UrlOrDefault, url, options)?;
        Client::connect(py, options)
    }

    /// Connects with the `AIO_*` environment variables (keyword arguments override them).
    #[staticmethod]
    #[pyo3(signature = (**options))]
    fn from_env(py: Python<'_>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let options = connect_options(py, Base::Environment, None, options)?;
        Client::connect(py, options)
    }

    #[getter]
    fn client_id(&self) -> &str {
        self.inner.client_id()
    }

    #[getter]
    fn state(&self) -> &'static str {
        self.inner.state().as_str()
    }

    #[getter]
    fn timeout(&self) -> f64 {
        self.inner.timeout().as_secs_f64()
    }

    fn with_timeout(&self, py: Python<'_>, timeout: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Client {
            inner: self.inner.with_timeout(timeout_arg(py, timeout)?),
        })
    }

    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = bytes_arg(key, "key")?;
        let got = call(py, self.inner.get(key))?;
        Ok(got.map(|v| PyBytes::new(py, &v.value)))
    }

    fn get_versioned<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, Versioned>>> {
        let key = bytes_arg(key, "key")?;
        let got = call(py, self.inner.get(key))?;
        got.map(|v| VersionedOut(v).into_pyobject(py)).transpose()
    }

    #[pyo3(signature = (key, value, *, nx = false, nex = false, expiry = None, fencing_token = None, persist = false))]
    #[allow(clippy::too_many_arguments)]
    fn set<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        nx: bool,
        nex: bool,
        expiry: Option<&Bound<'py, PyAny>>,
        fencing_token: Option<&Bound<'py, Hlc>>,
        persist: bool,
    ) -> PyResult<Bound<'py, SetOutcome>> {
        let options = set_options(py, nx, nex, expiry, fencing_token, persist)?;
        let key = bytes_arg(key, "key")?;
        let value = bytes_arg(value, "value")?;
        let outcome = call(py, self.inner.set(key, value, options))?;
        SetOutcomeOut(outcome).into_pyobject(py)
    }

    #[pyo3(signature = (key, *, fencing_token = None))]
    fn delete(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        fencing_token: Option<&Bound<'_, Hlc>>,
    ) -> PyResult<bool> {
        let key = bytes_arg(key, "key")?;
        let token = token(fencing_token);
        let n = call(py, self.inner.del(key, token.as_ref()))?;
        Ok(n > 0)
    }

    #[pyo3(signature = (key, value, *, fencing_token = None))]
    fn vdel(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        fencing_token: Option<&Bound<'_, Hlc>>,
    ) -> PyResult<VdelOutcome> {
        let key = bytes_arg(key, "key")?;
        let value = bytes_arg(value, "value")?;
        let token = token(fencing_token);
        let outcome = call(py, self.inner.vdel(key, value, token.as_ref()))?;
        Ok(outcome.into())
    }

    /// Lists the keys that match a glob pattern (`bytes` or `str`; Redis `MATCH` syntax: `*`,
    /// `?`, `[a-z]`, `[^...]`, `\` escapes): a `Scan`, iterated key by key or read with
    /// `next_page()`. Sends nothing yet; an empty pattern raises `InvalidArgument`.
    ///
    /// ```python
    /// for key in client.scan("line3/*"):
    ///     print(key)  # bytes
    /// ```
    fn scan(&self, py: Python<'_>, pattern: &Bound<'_, PyAny>) -> PyResult<Scan> {
        let pattern = bytes_arg(pattern, "pattern")?;
        let scan = self
            .inner
            .scan(pattern)
            .map_err(|e| errors::to_py(py, &e))?;
        Ok(Scan::new(scan))
    }

    fn observe(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Observation> {
        let key = bytes_arg(key, "key")?;
        let stream = call(py, self.inner.observe(key))?;
        Ok(Observation::new(stream))
    }

    fn unobserve(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = bytes_arg(key, "key")?;
        call(py, self.inner.unobserve(key))
    }

    /// Closes the connection (idempotent): waiting requests fail with `Disconnected`,
    /// observations end, later calls fail.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        wait(py, self.inner.close())
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc_info))]
    fn __exit__(&self, py: Python<'_>, _exc_info: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        repr("Client", &self.inner)
    }

    /// Requests waiting for a response (diagnostics and tests).
    fn _requests_in_flight(&self) -> usize {
        self.inner.requests_in_flight()
    }
}

/// An asyncio state store client: every method returns an awaitable that runs on the
/// library's own runtime; cancelling it (or the task awaiting it) cancels the request.
#[pyclass(module = "mqstate", name = "AsyncClient", frozen)]
#[derive(Debug)]
pub(crate) struct AsyncClient {
    pub(crate) inner: mqstate::Client,
}

fn connect_async(py: Python<'_>, options: mqstate::ConnectOptions) -> PyResult<Pending> {
    let future = aio::spawn(py, async move {
        mqstate::Client::connect(options)
            .await
            .map(|inner| AsyncClient { inner })
    })?;
    Ok(Pending::new(future))
}

#[pymethods]
impl AsyncClient {
    /// Connects: `client = await AsyncClient.connect(...)` or
    /// `async with AsyncClient.connect(...) as client:`.
    #[staticmethod]
    #[pyo3(signature = (url = None, **options))]
    fn connect(
        py: Python<'_>,
        url: Option<&str>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Pending> {
        let options = connect_options(py, Base::UrlOrDefault, url, options)?;
        connect_async(py, options)
    }

    /// Connects with the `AIO_*` environment variables (keyword arguments override them).
    #[staticmethod]
    #[pyo3(signature = (**options))]
    fn from_env(py: Python<'_>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Pending> {
        let options = connect_options(py, Base::Environment, None, options)?;
        connect_async(py, options)
    }

    #[getter]
    fn client_id(&self) -> &str {
        self.inner.client_id()
    }

    #[getter]
    fn state(&self) -> &'static str {
        self.inner.state().as_str()
    }

    #[getter]
    fn timeout(&self) -> f64 {
        self.inner.timeout().as_secs_f64()
    }

    fn with_timeout(&self, py: Python<'_>, timeout: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(AsyncClient {
            inner: self.inner.with_timeout(timeout_arg(py, timeout)?),
        })
    }

    fn get<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let key = owned_bytes_arg(key, "key")?;
        let client = self.inner.clone();
        aio::spawn(py, async move {
            client
                .get(key)
                .await
                .map(|got| got.map(|v| BytesOut(v.value)))
        })
    }

    fn get_versioned<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = owned_bytes_arg(key, "key")?;
        let client = self.inner.clone();
        aio::spawn(py, async move {
            client.get(key).await.map(|got| got.map(VersionedOut))
        })
    }

    #[pyo3(signature = (key, value, *, nx = false, nex = false, expiry = None, fencing_token = None, persist = false))]
    #[allow(clippy::too_many_arguments)]
    fn set<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        nx: bool,
        nex: bool,
        expiry: Option<&Bound<'py, PyAny>>,
        fencing_token: Option<&Bound<'py, Hlc>>,
        persist: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = set_options(py, nx, nex, expiry, fencing_token, persist)?;
        let key = owned_bytes_arg(key, "key")?;
        let value = owned_bytes_arg(value, "value")?;
        let client = self.inner.clone();
        aio::spawn(py, async move {
            client.set(key, value, options).await.map(SetOutcomeOut)
        })
    }

    #[pyo3(signature = (key, *, fencing_token = None))]
    fn delete<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        fencing_token: Option<&Bound<'py, Hlc>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = owned_bytes_arg(key, "key")?;
        let token = token(fencing_token);
        let client = self.inner.clone();
        aio::spawn(py, async move {
            client.del(key, token.as_ref()).await.map(|n| n > 0)
        })
    }

    #[pyo3(signature = (key, value, *, fencing_token = None))]
    fn vdel<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        fencing_token: Option<&Bound<'py, Hlc>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = owned_bytes_arg(key, "key")?;
        let value = owned_bytes_arg(value, "value")?;
        let token = token(fencing_token);
        let client = self.inner.clone();
        aio::spawn(py, async move {
            client
                .vdel(key, value, token.as_ref())
                .await
                .map(VdelOutcome::from)
        })
    }

    /// Lists the keys that match a glob pattern (`bytes` or `str`; Redis `MATCH` syntax): an
    /// `AsyncScan`, iterated with `async for` or read with `await scan.next_page()`. Not
    /// awaitable itself: it sends nothing yet; an empty pattern raises `InvalidArgument`.
    ///
    /// ```python
    /// async for key in client.scan("line3/*"):
    ///     print(key)  # bytes
    /// ```
    fn scan(&self, py: Python<'_>, pattern: &Bound<'_, PyAny>) -> PyResult<AsyncScan> {
        let pattern = bytes_arg(pattern, "pattern")?;
        let scan = self
            .inner
            .scan(pattern)
            .map_err(|e| errors::to_py(py, &e))?;
        Ok(AsyncScan::new(scan))
    }

    /// Observes a key: `changes = await client.observe(key)` or
    /// `async with client.observe(key) as changes:`.
    fn observe(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Pending> {
        let key: Bytes = owned_bytes_arg(key, "key")?;
        let client = self.inner.clone();
        let future = aio::spawn(py, async move {
            client.observe(key).await.map(AsyncObservation::new)
        })?;
        Ok(Pending::new(future))
    }

    fn unobserve<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = owned_bytes_arg(key, "key")?;
        let client = self.inner.clone();
        aio::spawn(py, async move { client.unobserve(key).await })
    }

    /// Closes the connection (idempotent): waiting requests fail with `Disconnected`,
    /// observations end, later calls fail.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.inner.clone();
        aio::spawn(py, async move {
            client.close().await;
            Ok(())
        })
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
        let client = self.inner.clone();
        aio::spawn(py, async move {
            client.close().await;
            Ok(false)
        })
    }

    fn __repr__(&self) -> String {
        repr("AsyncClient", &self.inner)
    }

    /// Requests waiting for a response (diagnostics and tests).
    fn _requests_in_flight(&self) -> usize {
        self.inner.requests_in_flight()
    }
}
