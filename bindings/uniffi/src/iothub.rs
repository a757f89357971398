//! The IoT Hub device client (the core's `mqstate::iothub`): cloud-to-device messages with
//! completion, and device-to-cloud telemetry (`docs/iothub-device.md`).

use std::sync::Arc;
use std::time::Duration;

use mqstate::iothub as core;

use crate::errors::MqstateError;
use crate::runtime::run;

/// How to reach the hub beyond the connection string (every field optional).
#[derive(Debug, Clone, Default, uniffi::Record)]
pub struct DeviceOptions {
    /// Connect to this host instead of the connection string's `HostName` (a local hub).
    #[uniffi(default)]
    pub host: Option<String>,
    /// Port (default 8883).
    #[uniffi(default)]
    pub port: Option<u16>,
    /// False for plain TCP (the local hub's test port); default true.
    #[uniffi(default)]
    pub tls: Option<bool>,
    /// PEM file with the CA certificate(s) of the hub.
    #[uniffi(default)]
    pub ca_file: Option<String>,
    /// How long each SAS token is valid; the client reconnects with a new one before expiry.
    #[uniffi(default)]
    pub token_lifetime: Option<Duration>,
    /// Messages buffered before the hub is told to wait (default: the core's).
    #[uniffi(default)]
    pub receive_buffer: Option<u32>,
}

/// An application property: a name and a value (null for a name without a value).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct Property {
    /// The name.
    pub name: String,
    /// The value.
    pub value: Option<String>,
}

/// A device-to-cloud message.
#[derive(Debug, Clone, Default, uniffi::Record)]
pub struct Telemetry {
    /// The body.
    pub payload: Vec<u8>,
    /// `$.mid`.
    #[uniffi(default)]
    pub message_id: Option<String>,
    /// `$.cid`.
    #[uniffi(default)]
    pub correlation_id: Option<String>,
    /// `$.ct`.
    #[uniffi(default)]
    pub content_type: Option<String>,
    /// `$.ce`.
    #[uniffi(default)]
    pub content_encoding: Option<String>,
    /// Application properties, in order.
    #[uniffi(default)]
    pub properties: Vec<Property>,
}

/// Counters of a device client's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record)]
pub struct DeviceStats {
    /// Messages received (redeliveries included).
    pub received: u64,
    /// Of those, redeliveries.
    pub redelivered: u64,
    /// PUBACKs sent.
    pub acknowledged: u64,
    /// Completions that came after their connection was gone.
    pub stale_completions: u64,
    /// Connections made (the first included).
    pub connections: u64,
    /// Reconnections made to renew the SAS token.
    pub token_renewals: u64,
    /// Messages whose property bag could not be decoded.
    pub malformed: u64,
}

/// A cloud-to-device message; `complete()` acknowledges it (otherwise it is redelivered).
#[derive(Debug, uniffi::Object)]
pub struct C2dMessage {
    inner: core::C2dMessage,
}

#[uniffi::export]
impl C2dMessage {
    /// The body.
    pub fn payload(&self) -> Vec<u8> {
        self.inner.payload.to_vec()
    }
    /// `$.mid`.
    pub fn message_id(&self) -> Option<String> {
        self.inner.message_id.clone()
    }
    /// `$.cid`.
    pub fn correlation_id(&self) -> Option<String> {
        self.inner.correlation_id.clone()
    }
    /// `$.ct`.
    pub fn content_type(&self) -> Option<String> {
        self.inner.content_type.clone()
    }
    /// `$.ce`.
    pub fn content_encoding(&self) -> Option<String> {
        self.inner.content_encoding.clone()
    }
    /// `$.exp`.
    pub fn expiry_time(&self) -> Option<String> {
        self.inner.expiry_time.clone()
    }
    /// Application properties, in order.
    pub fn properties(&self) -> Vec<Property> {
        self.inner
            .properties
            .iter()
            .map(|(name, value)| Property {
                name: name.clone(),
                value: value.clone(),
            })
            .collect()
    }
    /// The MQTT topic it arrived on.
    pub fn topic(&self) -> String {
        self.inner.topic.clone()
    }
    /// True when this is a redelivery of a message not completed in time.
    pub fn is_redelivery(&self) -> bool {
        self.inner.is_redelivery()
    }
    /// Acknowledges the message (in arrival order, as the hub requires).
    pub fn complete(&self) -> Result<(), MqstateError> {
        Ok(self.inner.complete()?)
    }
    /// Not available over MQTT: always `NotSupported` (the core's rule).
    pub fn reject(&self) -> Result<(), MqstateError> {
        Ok(self.inner.reject()?)
    }
    /// Not available over MQTT: always `NotSupported` (the core's rule).
    pub fn abandon(&self) -> Result<(), MqstateError> {
        Ok(self.inner.abandon()?)
    }
}

/// An IoT Hub device client (MQTT).
#[derive(Debug, uniffi::Object)]
pub struct DeviceClient {
    inner: core::DeviceClient,
}

#[uniffi::export]
impl DeviceClient {
    /// Connects with a device connection string (`HostName=...;DeviceId=...;SharedAccessKey=...`).
    #[uniffi::constructor(default(options = None))]
    pub async fn connect(
        connection_string: String,
        options: Option<DeviceOptions>,
    ) -> Result<Arc<DeviceClient>, MqstateError> {
        let o = options.unwrap_or_default();
        let mut options = core::DeviceOptions::from_connection_string(&connection_string)?;
        if let Some(h) = o.host {
            options.connect_host = Some(h);
        }
        if let Some(p) = o.port {
            options.port = p;
        }
        if o.tls == Some(false) {
            options.tls = None;
        } else if let Some(ca) = o.ca_file {
            options.tls = Some(options.tls.take().unwrap_or_default().with_ca_file(ca));
        }
        if let Some(t) = o.token_lifetime {
            options.token_lifetime = t;
        }
        if let Some(n) = o.receive_buffer {
            options.receive_buffer = usize::try_from(n).unwrap_or(usize::MAX);
        }
        let inner = run(core::DeviceClient::connect(options)).await?;
        Ok(Arc::new(DeviceClient { inner }))
    }

    /// The device id.
    pub fn device_id(&self) -> String {
        self.inner.device_id().to_owned()
    }

    /// `connecting`, `connected`, `reconnecting` or `closed`.
    pub fn state(&self) -> String {
        self.inner.state().as_str().to_owned()
    }

    /// The next cloud-to-device message (waits for one); `Disconnected` once closed.
    pub async fn receive(&self) -> Result<Arc<C2dMessage>, MqstateError> {
        let client = self.inner.clone();
        let inner = run(async move { client.receive().await }).await?;
        Ok(Arc::new(C2dMessage { inner }))
    }

    /// A message already received, or null.
    pub fn try_receive(&self) -> Result<Option<Arc<C2dMessage>>, MqstateError> {
        Ok(self
            .inner
            .try_receive()?
            .map(|inner| Arc::new(C2dMessage { inner })))
    }

    /// Sends a device-to-cloud message; returns once the hub acknowledged it.
    pub async fn send_event(&self, event: Telemetry) -> Result<(), MqstateError> {
        let mut t = core::Telemetry::new(event.payload);
        t.message_id = event.message_id;
        t.correlation_id = event.correlation_id;
        t.content_type = event.content_type;
        t.content_encoding = event.content_encoding;
        t.properties = event
            .properties
            .into_iter()
            .map(|p| (p.name, p.value))
            .collect();
        let client = self.inner.clone();
        run(async move { client.send_event(t).await }).await
    }

    /// Counters of this client's life.
    pub fn stats(&self) -> DeviceStats {
        let s = self.inner.stats();
        DeviceStats {
            received: s.received,
            redelivered: s.redelivered,
            acknowledged: s.acknowledged,
            stale_completions: s.stale_completions,
            connections: s.connections,
            token_renewals: s.token_renewals,
            malformed: s.malformed,
        }
    }

    /// Closes the connection and waits for it; idempotent.
    pub async fn close(&self) -> Result<(), MqstateError> {
        let client = self.inner.clone();
        run(async move {
            client.close().await;
            Ok::<_, mqstate::Error>(())
        })
        .await
    }
}
