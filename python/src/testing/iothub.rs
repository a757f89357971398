//! `mqstate.testing.LocalIotHub`: the local IoT Hub (`mqstate_server::iothub`) in-process, for
//! the IoT Hub tests (built with the `testing` feature only).

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::convert::{duration_arg, owned_bytes_arg};
use crate::errors;
use crate::runtime::{runtime, wait};

/// `mqstate.testing.LocalIotHub`: the local IoT Hub in-process (MQTT device endpoint on a free
/// loopback port, plain TCP; AMQP over TLS with a generated certificate), with the
/// service-side calls tests need.
#[pyclass(module = "mqstate.testing", name = "LocalIotHub", frozen)]
#[derive(Debug)]
pub(crate) struct LocalIotHub {
    server: Mutex<Option<mqstate_server::iothub::IotHubServer>>,
    hub: mqstate_server::iothub::IotHub,
    port: u16,
    amqp_port: u16,
}

fn hub_error(py: Python<'_>, e: mqstate_server::iothub::IotHubError) -> PyErr {
    errors::invalid_argument(py, e.to_string())
}

#[pymethods]
impl LocalIotHub {
    /// Starts a hub; `lock_timeout` (seconds) shortens the 60 s message lock,
    /// `max_delivery_count` lowers the 10 deliveries after which a message is dead-lettered,
    /// `device_tls` puts the MQTT device endpoint behind TLS too (with the certificate of
    /// [`LocalIotHub::ca_pem`]), as X.509 devices need. Feedback records are made at once
    /// (batches of one).
    #[new]
    #[pyo3(signature = (*, lock_timeout = None, max_delivery_count = None, device_tls = false))]
    fn new(
        py: Python<'_>,
        lock_timeout: Option<&Bound<'_, PyAny>>,
        max_delivery_count: Option<u32>,
        device_tls: bool,
    ) -> PyResult<Self> {
        let mut config = mqstate_server::iothub::IotHubConfig {
            admin_port: None,
            feedback_batch_size: 1,
            ..Default::default()
        };
        if device_tls {
            config.tls = mqstate_server::iothub::DeviceTls::SelfSigned;
        }
        if let Some(n) = max_delivery_count {
            config.max_delivery_count = n;
        }
        if let Some(t) = lock_timeout {
            config.lock_timeout = duration_arg(t, "lock_timeout")?;
        }
        let server = wait(py, async move {
            runtime()
                .spawn(mqstate_server::iothub::IotHubServer::start(config))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
        })?
        .map_err(|e| {
            errors::exception(
                py,
                "connection",
                &format!("the local IoT Hub did not start: {e}"),
                py.None(),
            )
        })?;
        let hub = server.hub();
        let port = hub.endpoints().device_endpoint.map_or(0, |a| a.port());
        let amqp_port = hub.endpoints().amqp_endpoint.map_or(0, |a| a.port());
        Ok(LocalIotHub {
            server: Mutex::new(Some(server)),
            hub,
            port,
            amqp_port,
        })
    }

    /// The device endpoint's port (plain TCP on 127.0.0.1).
    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    /// The AMQP endpoint's port (TLS on 127.0.0.1; trust [`LocalIotHub::ca_pem`]).
    #[getter]
    fn amqp_port(&self) -> u16 {
        self.amqp_port
    }

    /// The HTTPS port (TLS on 127.0.0.1, trust [`LocalIotHub::ca_pem`]): IoT Hub's REST API and
    /// MQTT and AMQP over WebSockets (`transport="amqp-ws"`).
    #[getter]
    fn https_port(&self) -> u16 {
        self.hub.endpoints().https_endpoint.map_or(0, |a| a.port())
    }

    /// The PEM certificate the hub generated for its TLS endpoints (write it to a file for
    /// `ca_file=`).
    #[getter]
    fn ca_pem(&self) -> Option<String> {
        self.hub.ca_certificate_pem()
    }

    /// The status of the newest feedback record of `message_id` (`"Success"`, `"Rejected"`,
    /// `"DeliveryCountExceeded"`, ...), or `None` while there is none.
    fn feedback(&self, message_id: &str) -> Option<String> {
        self.hub
            .recent_feedback()
            .into_iter()
            .rev()
            .find(|r| r.original_message_id.as_deref() == Some(message_id))
            .map(|r| format!("{:?}", r.status_code))
    }

    /// How many of the device's recent messages were dead-lettered.
    fn dead_lettered(&self, py: Python<'_>, device_id: &str) -> PyResult<usize> {
        self.hub
            .queue(device_id)
            .map(|q| {
                q.finished
                    .iter()
                    .filter(|m| m.state == mqstate_server::iothub::MessageState::DeadLettered)
                    .count()
            })
            .map_err(|e| hub_error(py, e))
    }

    /// Registers a device (with a generated key) and returns its connection string, pointed
    /// at this hub (`GatewayHostName=127.0.0.1`; connect with `port=hub.port, tls=False`).
    fn add_device(&self, py: Python<'_>, device_id: &str) -> PyResult<String> {
        let spec =
            mqstate_server::iothub::DeviceSpec::parse(device_id).map_err(|e| hub_error(py, e))?;
        self.hub.add_device(&spec).map_err(|e| hub_error(py, e))?;
        let cs = self
            .hub
            .connection_string(device_id)
            .map_err(|e| hub_error(py, e))?;
        Ok(format!("{cs};GatewayHostName=127.0.0.1"))
    }

    /// Registers a self-signed X.509 device known by the SHA-1 or SHA-256 `thumbprint` (hex)
    /// of its certificate, and returns its connection string (`x509=true`, pointed at this
    /// hub like [`LocalIotHub::add_device`]'s).
    fn add_x509_device(
        &self,
        py: Python<'_>,
        device_id: &str,
        thumbprint: &str,
    ) -> PyResult<String> {
        use mqstate_server::iothub::registry::DeviceUpdate;
        use mqstate_server::iothub::x509::Authentication;
        let authentication =
            Authentication::self_signed(Some(thumbprint), None).map_err(|e| hub_error(py, e))?;
        let update = DeviceUpdate {
            authentication: Some(authentication),
            ..DeviceUpdate::default()
        };
        self.hub
            .create_device(device_id, &update)
            .map_err(|e| hub_error(py, e))?;
        Ok(format!(
            "HostName={};DeviceId={device_id};x509=true;GatewayHostName=127.0.0.1",
            self.hub.config().hostname
        ))
    }

    /// Sends a C2D message; `properties` are (name, value) pairs (value `None` = null); `ack`
    /// is the feedback asked for (`"none"`, `"positive"`, `"negative"`, `"full"`).
    #[pyo3(signature = (device_id, payload, *, message_id = None, correlation_id = None, user_id = None, content_type = None, content_encoding = None, properties = None, ack = None))]
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        py: Python<'_>,
        device_id: &str,
        payload: &Bound<'_, PyAny>,
        message_id: Option<String>,
        correlation_id: Option<String>,
        user_id: Option<String>,
        content_type: Option<String>,
        content_encoding: Option<String>,
        properties: Option<Vec<(String, Option<String>)>>,
        ack: Option<String>,
    ) -> PyResult<()> {
        let mut m = mqstate_server::iothub::C2dMessage::new(owned_bytes_arg(payload, "payload")?);
        if let Some(ack) = ack {
            let ack = match ack.as_str() {
                "none" => mqstate_server::iothub::Ack::None,
                "positive" => mqstate_server::iothub::Ack::Positive,
                "negative" => mqstate_server::iothub::Ack::Negative,
                "full" => mqstate_server::iothub::Ack::Full,
                other => {
                    return Err(errors::invalid_argument(
                        py,
                        format!("ack {other:?}: none, positive, negative or full"),
                    ));
                }
            };
            m = m.ack(ack);
        }
        m.message_id = message_id;
        m.correlation_id = correlation_id;
        m.user_id = user_id;
        m.content_type = content_type;
        m.content_encoding = content_encoding;
        for (k, v) in properties.unwrap_or_default() {
            m = m.property(k, v.as_deref());
        }
        self.hub
            .send(device_id, m)
            .map(|_| ())
            .map_err(|e| hub_error(py, e))
    }

    /// Messages Enqueued or Invisible in the device's queue.
    fn queue_depth(&self, py: Python<'_>, device_id: &str) -> PyResult<usize> {
        self.hub
            .queue(device_id)
            .map(|q| q.depth)
            .map_err(|e| hub_error(py, e))
    }

    /// How many of the device's recent messages were Completed.
    fn completed(&self, py: Python<'_>, device_id: &str) -> PyResult<usize> {
        self.hub
            .queue(device_id)
            .map(|q| {
                q.finished
                    .iter()
                    .filter(|m| m.state == mqstate_server::iothub::MessageState::Completed)
                    .count()
            })
            .map_err(|e| hub_error(py, e))
    }

    /// The telemetry the device sent: a list of `(body, system_properties, properties)`.
    #[allow(clippy::type_complexity)]
    fn telemetry<'py>(
        &self,
        py: Python<'py>,
        device_id: &str,
    ) -> PyResult<
        Vec<(
            Bound<'py, PyBytes>,
            Vec<(String, Option<String>)>,
            Vec<(String, Option<String>)>,
        )>,
    > {
        use base64::Engine;
        let got = self
            .hub
            .telemetry(device_id, 0)
            .map_err(|e| hub_error(py, e))?;
        got.into_iter()
            .map(|t| {
                let body = base64::engine::general_purpose::STANDARD
                    .decode(&t.body_base64)
                    .map_err(|e| errors::invalid_argument(py, e.to_string()))?;
                Ok((
                    PyBytes::new(py, &body),
                    t.system_properties.into_iter().collect(),
                    t.properties.into_iter().collect(),
                ))
            })
            .collect()
    }

    /// Stops the hub (idempotent).
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        let server = self.server.lock().ok().and_then(|mut s| s.take());
        if let Some(server) = server {
            wait(py, async move {
                let _ = runtime().spawn(server.shutdown()).await;
            })?;
        }
        Ok(())
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc_info))]
    fn __exit__(&self, py: Python<'_>, _exc_info: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.stop(py)?;
        Ok(false)
    }
}
