//! The IoT Hub device client (the core's `mqstate::iothub`): cloud-to-device messages with
//! completion, and device-to-cloud telemetry (`docs/iothub-device.md`).

use std::sync::Arc;
use std::time::Duration;

use mqstate::iothub as core;

use crate::errors::MqstateError;
use crate::runtime::run;

/// The settings laid over the connection string, every field optional (null: not given, the
/// connection string's or the core's default holds). The core merges and checks them
/// (`mqstate::iothub::DeviceSettings`): the same rules and messages as in every language.
#[derive(Debug, Clone, Default, uniffi::Record)]
pub struct DeviceOptions {
    /// Connect to this host instead of the connection string's `HostName` (a local hub).
    #[uniffi(default)]
    pub host: Option<String>,
    /// Port (default: the transport's, 8883 for MQTT, 5671 for AMQP, 443 for AMQP over
    /// WebSockets).
    #[uniffi(default)]
    pub port: Option<u16>,
    /// False for plain TCP (the local hub's test port); default true.
    #[uniffi(default)]
    pub tls: Option<bool>,
    /// PEM file with the CA certificate(s) of the hub.
    #[uniffi(default)]
    pub ca_file: Option<String>,
    /// How long each SAS token is valid; the client renews it before expiry.
    #[uniffi(default)]
    pub token_lifetime: Option<Duration>,
    /// Messages received and not settled before the client stops reading (default: the core's).
    #[uniffi(default)]
    pub receive_buffer: Option<u32>,
    /// `"mqtt"` (the default), `"amqp"` or `"amqp-ws"` (AMQP over WebSockets, port 443): the
    /// names the core parses.
    #[uniffi(default)]
    pub transport: Option<String>,
    /// PEM certificate (chain) of an X.509 device (its connection string says `x509=true`).
    #[uniffi(default)]
    pub cert_file: Option<String>,
    /// PEM private key of `cert_file`.
    #[uniffi(default)]
    pub key_file: Option<String>,
    /// MQTT keep-alive, or the AMQP idle timeout (default 60 s).
    #[uniffi(default)]
    pub keep_alive: Option<Duration>,
    /// How long a connection attempt may take (default 30 s).
    #[uniffi(default)]
    pub connect_timeout: Option<Duration>,
    /// How long sending an event waits for the hub (default 30 s).
    #[uniffi(default)]
    pub operation_timeout: Option<Duration>,
}

impl DeviceOptions {
    /// The core's options: these fields over `connection_string`, merged and checked by the
    /// core ([`core::DeviceSettings::resolve`]); this only converts types.
    fn resolve(self, connection_string: String) -> Result<core::DeviceOptions, mqstate::Error> {
        let mut s = core::DeviceSettings::new(connection_string);
        s.transport = self
            .transport
            .map(|t| t.parse::<core::Transport>())
            .transpose()?;
        s.host = self.host;
        s.port = self.port;
        s.tls = self.tls;
        s.ca_file = self.ca_file.map(Into::into);
        s.cert_file = self.cert_file.map(Into::into);
        s.key_file = self.key_file.map(Into::into);
        s.token_lifetime = self.token_lifetime;
        s.keep_alive = self.keep_alive;
        s.connect_timeout = self.connect_timeout;
        s.operation_timeout = self.operation_timeout;
        s.receive_buffer = self
            .receive_buffer
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        s.resolve()
    }
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
    /// Completions sent: PUBACKs (MQTT) or accepted dispositions (AMQP).
    pub acknowledged: u64,
    /// Rejections sent (AMQP only).
    pub rejected: u64,
    /// Abandons sent (AMQP only).
    pub abandoned: u64,
    /// Settlements that came too late (`LockLost`): their connection was gone, or the hub
    /// had delivered the message again.
    pub stale_completions: u64,
    /// Connections made (the first included).
    pub connections: u64,
    /// Reconnections made to renew the SAS token.
    pub token_renewals: u64,
    /// Messages whose property bag could not be decoded.
    pub malformed: u64,
}

/// A cloud-to-device message, settled once: `complete()`, or over AMQP `reject()` or
/// `abandon()` (otherwise it is delivered again).
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
    /// Over AMQP, how many times the hub delivered this message before (0 the first time, one
    /// more after each abandon or lost lock); null over MQTT, which does not carry it.
    pub fn delivery_count(&self) -> Option<u32> {
        self.inner.delivery_count()
    }
    /// Completes the message (over MQTT its PUBACK goes in arrival order, as the hub
    /// requires). `LockLost` when the connection it arrived on is gone (the hub delivers it
    /// again), `InvalidArgument` when it was already settled.
    pub fn complete(&self) -> Result<(), MqstateError> {
        Ok(self.inner.complete()?)
    }
    /// Rejects the message (AMQP): the hub dead-letters it (`Rejected` feedback). Over MQTT
    /// always `NotSupported`, and the message stays to be completed.
    pub fn reject(&self) -> Result<(), MqstateError> {
        Ok(self.inner.reject()?)
    }
    /// Abandons the message (AMQP): the hub delivers it again, its delivery count one
    /// higher. Over MQTT always `NotSupported`, and the message stays to be completed.
    pub fn abandon(&self) -> Result<(), MqstateError> {
        Ok(self.inner.abandon()?)
    }
}

/// An IoT Hub device client, over MQTT (the default) or AMQP (`DeviceOptions.transport`).
#[derive(Debug, uniffi::Object)]
pub struct DeviceClient {
    inner: core::DeviceClient,
}

#[uniffi::export]
impl DeviceClient {
    /// Connects with a device connection string (`HostName=...;DeviceId=...;SharedAccessKey=...`,
    /// or `x509=true` with `certFile` and `keyFile`); a mistake in the options is
    /// `InvalidArgument` with the core's message, before any connection is tried.
    #[uniffi::constructor(default(options = None))]
    pub async fn connect(
        connection_string: String,
        options: Option<DeviceOptions>,
    ) -> Result<Arc<DeviceClient>, MqstateError> {
        let options = options.unwrap_or_default().resolve(connection_string)?;
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
            rejected: s.rejected,
            abandoned: s.abandoned,
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
