//! `mqstate.iothub`: the IoT Hub device client (`DeviceClient`, `AsyncDeviceClient`,
//! `C2dMessage`) over the core's `mqstate::iothub`, over MQTT or AMQP (`transport=`). Options,
//! property bags, settlement (complete, reject, abandon) and errors all live in the core; this
//! module converts arguments and results.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::PyStopAsyncIteration;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use mqstate::iothub::{self as core, DeviceOptions, DeviceSettings, Telemetry};

use crate::aio;
use crate::call::Call;
use crate::convert::{duration_arg, owned_bytes_arg};
use crate::errors;
use crate::runtime::{call, runtime, wait};

/// How long one blocking wait lasts before checking for signals (Ctrl-C).
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// The keyword options of `DeviceClient` and `AsyncDeviceClient.connect`.
const OPTIONS: [&str; 12] = [
    "transport",
    "host",
    "port",
    "tls",
    "ca_file",
    "cert_file",
    "key_file",
    "token_lifetime",
    "receive_buffer",
    "keep_alive",
    "operation_timeout",
    "connect_timeout",
];

/// Builds the core options from a connection string and keyword overrides: this fills a
/// [`DeviceSettings`], whose `resolve` holds every rule of the merge.
fn options(
    py: Python<'_>,
    connection_string: &str,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<DeviceOptions> {
    let to_py = |e: mqstate::Error| errors::to_py(py, &e);
    let mut s = DeviceSettings::new(connection_string);
    for (key, value) in kwargs.into_iter().flat_map(|k| k.iter()) {
        let key: String = key.extract()?;
        // `None` is "not given", as the stubs' defaults say.
        if value.is_none() && OPTIONS.contains(&key.as_str()) {
            continue;
        }
        match key.as_str() {
            "transport" => s.transport = Some(value.extract::<String>()?.parse().map_err(to_py)?),
            "host" => s.host = Some(value.extract()?),
            "port" => s.port = Some(value.extract()?),
            "tls" => s.tls = Some(value.extract()?),
            "ca_file" => s.ca_file = Some(value.extract()?),
            "cert_file" => s.cert_file = Some(value.extract()?),
            "key_file" => s.key_file = Some(value.extract()?),
            "token_lifetime" => s.token_lifetime = Some(duration_arg(&value, "token_lifetime")?),
            "receive_buffer" => s.receive_buffer = Some(value.extract()?),
            "keep_alive" => s.keep_alive = Some(duration_arg(&value, "keep_alive")?),
            "operation_timeout" => {
                s.operation_timeout = Some(duration_arg(&value, "operation_timeout")?)
            }
            "connect_timeout" => s.connect_timeout = Some(duration_arg(&value, "connect_timeout")?),
            other => {
                return Err(errors::invalid_argument(
                    py,
                    format!("unknown option {other:?} ({})", OPTIONS.join(", ")),
                ));
            }
        }
    }
    s.resolve().map_err(to_py)
}

fn telemetry(
    payload: &Bound<'_, PyAny>,
    properties: Option<&Bound<'_, PyAny>>,
    message_id: Option<String>,
    correlation_id: Option<String>,
    content_type: Option<String>,
    content_encoding: Option<String>,
) -> PyResult<Telemetry> {
    let mut t = Telemetry::new(owned_bytes_arg(payload, "payload")?);
    t.message_id = message_id;
    t.correlation_id = correlation_id;
    t.content_type = content_type;
    t.content_encoding = content_encoding;
    if let Some(props) = properties {
        // A dict or a sequence of (name, value) pairs; `None` is a null value.
        let items = if let Ok(d) = props.cast::<PyDict>() {
            d.items().into_any()
        } else {
            props.clone()
        };
        for item in items.try_iter()? {
            let (name, value): (String, Option<String>) = item?.extract()?;
            t.properties.push((name, value));
        }
    }
    Ok(t)
}

/// A received cloud-to-device message. Complete it with `complete()`; until then it is not
/// acknowledged (see the README: completion is explicit and acknowledged in arrival order).
#[pyclass(module = "mqstate.iothub", name = "C2dMessage", frozen)]
#[derive(Debug)]
pub(crate) struct C2dMessage {
    inner: core::C2dMessage,
}

#[pymethods]
impl C2dMessage {
    #[getter]
    fn payload<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.payload)
    }
    #[getter]
    fn message_id(&self) -> Option<&str> {
        self.inner.message_id.as_deref()
    }
    #[getter]
    fn correlation_id(&self) -> Option<&str> {
        self.inner.correlation_id.as_deref()
    }
    #[getter]
    fn user_id(&self) -> Option<&str> {
        self.inner.user_id.as_deref()
    }
    #[getter]
    fn to(&self) -> Option<&str> {
        self.inner.to.as_deref()
    }
    #[getter]
    fn expiry_time(&self) -> Option<&str> {
        self.inner.expiry_time.as_deref()
    }
    #[getter]
    fn content_type(&self) -> Option<&str> {
        self.inner.content_type.as_deref()
    }
    #[getter]
    fn content_encoding(&self) -> Option<&str> {
        self.inner.content_encoding.as_deref()
    }
    #[getter]
    fn ack(&self) -> Option<&str> {
        self.inner.ack.as_deref()
    }
    /// Application properties in order: `(name, value)`, value `None` for a null property.
    #[getter]
    fn properties(&self) -> Vec<(String, Option<String>)> {
        self.inner.properties.clone()
    }
    /// Other `$.` system properties, in order.
    #[getter]
    fn other_system_properties(&self) -> Vec<(String, Option<String>)> {
        self.inner.other_system_properties.clone()
    }
    #[getter]
    fn topic(&self) -> &str {
        &self.inner.topic
    }
    /// True when the message was delivered before (at-least-once delivery).
    #[getter]
    fn is_redelivery(&self) -> bool {
        self.inner.is_redelivery()
    }
    /// Over AMQP, how many times the hub delivered the message before (0 the first time);
    /// `None` over MQTT.
    #[getter]
    fn delivery_count(&self) -> Option<u32> {
        self.inner.delivery_count()
    }
    /// Completes the message (over MQTT its PUBACK is sent in arrival order; over AMQP it is
    /// settled on its own).
    fn complete(&self, py: Python<'_>) -> PyResult<()> {
        self.inner.complete().map_err(|e| errors::to_py(py, &e))
    }
    /// Rejects the message (AMQP: dead-lettered); raises `mqstate.NotSupported` over MQTT.
    fn reject(&self, py: Python<'_>) -> PyResult<()> {
        self.inner.reject().map_err(|e| errors::to_py(py, &e))
    }
    /// Abandons the message (AMQP: delivered again); raises `mqstate.NotSupported` over MQTT.
    fn abandon(&self, py: Python<'_>) -> PyResult<()> {
        self.inner.abandon().map_err(|e| errors::to_py(py, &e))
    }
    fn __repr__(&self) -> String {
        format!(
            "<mqstate.iothub.C2dMessage message_id={:?} {} bytes{}>",
            self.inner.message_id,
            self.inner.payload.len(),
            if self.inner.is_redelivery() {
                " redelivery"
            } else {
                ""
            }
        )
    }
}

fn stats_dict<'py>(py: Python<'py>, s: core::DeviceStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("received", s.received)?;
    d.set_item("redelivered", s.redelivered)?;
    d.set_item("acknowledged", s.acknowledged)?;
    d.set_item("rejected", s.rejected)?;
    d.set_item("abandoned", s.abandoned)?;
    d.set_item("stale_completions", s.stale_completions)?;
    d.set_item("connections", s.connections)?;
    d.set_item("token_renewals", s.token_renewals)?;
    d.set_item("malformed", s.malformed)?;
    Ok(d)
}

/// The blocking device client: `DeviceClient(connection_string, **options)` connects.
#[pyclass(module = "mqstate.iothub", name = "DeviceClient", frozen)]
#[derive(Debug)]
pub(crate) struct DeviceClient {
    inner: core::DeviceClient,
}

#[pymethods]
impl DeviceClient {
    #[new]
    #[pyo3(signature = (connection_string, **options))]
    fn new(
        py: Python<'_>,
        connection_string: &str,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let options = self::options(py, connection_string, options)?;
        let inner = call(py, async move {
            runtime()
                .spawn(core::DeviceClient::connect(options))
                .await
                .map_err(|e| mqstate::Error::connection_caused_by(e.to_string(), e))
                .and_then(|r| r)
        })?;
        Ok(DeviceClient { inner })
    }

    #[getter]
    fn device_id(&self) -> &str {
        self.inner.device_id()
    }

    #[getter]
    fn state(&self) -> &'static str {
        self.inner.state().as_str()
    }

    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, self.inner.stats())
    }

    /// The next message; with a timeout (seconds or a timedelta) `None` when none came.
    /// Raises the reason the client stopped once it is closed and drained.
    #[pyo3(signature = (timeout = None))]
    fn receive(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<C2dMessage>> {
        let timeout = timeout.map(|t| duration_arg(t, "timeout")).transpose()?;
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            let slice = match deadline {
                Some(d) => d
                    .saturating_duration_since(std::time::Instant::now())
                    .min(WAIT_SLICE),
                None => WAIT_SLICE,
            };
            let inner = &self.inner;
            let got = py.detach(|| inner.receive_blocking(slice));
            match got {
                Ok(Some(m)) => return Ok(Some(C2dMessage { inner: m })),
                Ok(None) => {
                    if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                        return Ok(None);
                    }
                    py.check_signals()?;
                }
                Err(e) => return Err(errors::to_py(py, &e)),
            }
        }
    }

    /// An iterator over the messages: `for msg in client.messages(): ...; msg.complete()`.
    /// It ends when the client is closed.
    fn messages(slf: Bound<'_, Self>) -> Messages {
        Messages {
            client: slf.unbind(),
        }
    }

    /// Sends telemetry and waits for the hub's PUBACK. `properties`: a dict or (name, value)
    /// pairs; a `None` value is sent as a null property.
    #[pyo3(signature = (payload, properties = None, *, message_id = None, correlation_id = None, content_type = None, content_encoding = None))]
    #[allow(clippy::too_many_arguments)]
    fn send_event(
        &self,
        py: Python<'_>,
        payload: &Bound<'_, PyAny>,
        properties: Option<&Bound<'_, PyAny>>,
        message_id: Option<String>,
        correlation_id: Option<String>,
        content_type: Option<String>,
        content_encoding: Option<String>,
    ) -> PyResult<()> {
        let t = telemetry(
            payload,
            properties,
            message_id,
            correlation_id,
            content_type,
            content_encoding,
        )?;
        let client = self.inner.clone();
        call(py, async move { client.send_event(t).await })
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let client = self.inner.clone();
        wait(py, async move { client.close().await })
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
        format!(
            "<mqstate.iothub.DeviceClient device_id={:?} {}>",
            self.inner.device_id(),
            self.inner.state().as_str()
        )
    }
}

impl Drop for DeviceClient {
    fn drop(&mut self) {
        self.inner.close_nowait();
    }
}

/// The iterator of `DeviceClient.messages()`.
#[pyclass(module = "mqstate.iothub", name = "Messages", frozen)]
#[derive(Debug)]
pub(crate) struct Messages {
    client: Py<DeviceClient>,
}

#[pymethods]
impl Messages {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<C2dMessage>> {
        let client = self.client.bind(py).get();
        match client.receive(py, None) {
            Ok(m) => Ok(m),
            // The end of the iteration: the client was closed (a `Disconnected`); any other
            // reason it stopped (refused credentials...) is raised.
            Err(e)
                if client.inner.state() == mqstate::ConnectionState::Closed
                    && e.value(py)
                        .getattr("code")
                        .and_then(|c| c.extract::<String>())
                        .is_ok_and(|c| c == mqstate::ErrorKind::Disconnected.as_str()) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// Messages taken from the core by an asyncio `receive()` that was cancelled before it could
/// deliver them: handed to the next `receive()` first, so that none is lost (a lost message
/// would hold back every later acknowledgement).
type Stash = Arc<Mutex<VecDeque<core::C2dMessage>>>;

/// The asyncio device client: `client = await AsyncDeviceClient.connect(connection_string)`.
#[pyclass(module = "mqstate.iothub", name = "AsyncDeviceClient", frozen)]
#[derive(Debug)]
pub(crate) struct AsyncDeviceClient {
    inner: core::DeviceClient,
    stash: Stash,
}

#[pymethods]
impl AsyncDeviceClient {
    /// Connects: `await AsyncDeviceClient.connect(cs)` or `async with ... as client`.
    #[staticmethod]
    #[pyo3(signature = (connection_string, **options))]
    fn connect(
        py: Python<'_>,
        connection_string: &str,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<aio::Pending> {
        let options = self::options(py, connection_string, options)?;
        let future = aio::spawn(py, async move {
            core::DeviceClient::connect(options)
                .await
                .map(|inner| AsyncDeviceClient {
                    inner,
                    stash: Stash::default(),
                })
        })?;
        Ok(aio::Pending::new(future))
    }

    #[getter]
    fn device_id(&self) -> &str {
        self.inner.device_id()
    }

    #[getter]
    fn state(&self) -> &'static str {
        self.inner.state().as_str()
    }

    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, self.inner.stats())
    }

    /// The next message (awaitable).
    fn receive<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.next_message(py, false)
    }

    /// An async iterator over the messages (`async for msg in client.messages()`); it ends
    /// when the client is closed.
    fn messages(slf: Bound<'_, Self>) -> AsyncMessages {
        AsyncMessages {
            client: slf.unbind(),
        }
    }

    #[pyo3(signature = (payload, properties = None, *, message_id = None, correlation_id = None, content_type = None, content_encoding = None))]
    #[allow(clippy::too_many_arguments)]
    fn send_event<'py>(
        &self,
        py: Python<'py>,
        payload: &Bound<'py, PyAny>,
        properties: Option<&Bound<'py, PyAny>>,
        message_id: Option<String>,
        correlation_id: Option<String>,
        content_type: Option<String>,
        content_encoding: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let t = telemetry(
            payload,
            properties,
            message_id,
            correlation_id,
            content_type,
            content_encoding,
        )?;
        let client = self.inner.clone();
        aio::spawn(py, async move { client.send_event(t).await })
    }

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
}

impl AsyncDeviceClient {
    /// The next message as a `Call` (an asyncio future-like); `iteration` ends with
    /// `StopAsyncIteration` once the client is closed.
    fn next_message<'py>(&self, py: Python<'py>, iteration: bool) -> PyResult<Bound<'py, PyAny>> {
        let stashed = self.stash.lock().ok().and_then(|mut s| s.pop_front());
        let client = self.inner.clone();
        let stash = self.stash.clone();
        aio::spawn_with(
            py,
            async move {
                match stashed {
                    Some(m) => Ok(m),
                    None => client.receive().await,
                }
            },
            move |py, target, output| {
                let cancelled = target.get().is_done();
                let result = match output {
                    Ok(Ok(m)) if cancelled => {
                        if let Ok(mut s) = stash.lock() {
                            s.push_front(m);
                        }
                        return;
                    }
                    Ok(Ok(m)) => Bound::new(py, C2dMessage { inner: m }).map(Bound::into_any),
                    Ok(Err(e)) if iteration && e.kind() == mqstate::ErrorKind::Disconnected => {
                        Err(PyStopAsyncIteration::new_err(()))
                    }
                    Ok(Err(e)) => Err(errors::to_py(py, &e)),
                    Err(panic) => Err(errors::panicked(&*panic)),
                };
                Call::settle(target, result);
            },
        )
    }
}

/// The async iterator of `AsyncDeviceClient.messages()`.
#[pyclass(module = "mqstate.iothub", name = "AsyncMessages", frozen)]
#[derive(Debug)]
pub(crate) struct AsyncMessages {
    client: Py<AsyncDeviceClient>,
}

#[pymethods]
impl AsyncMessages {
    fn __aiter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.client.bind(py).get().next_message(py, true)
    }
}
