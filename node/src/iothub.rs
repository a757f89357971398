//! The IoT Hub device client (`mqstate::iothub`): `NativeDeviceClient` and `NativeC2dMessage`
//! (the test hub `LocalIotHub` is in `testing`). The TypeScript wrapper (`index.ts`) adds the
//! async iterator.

use mqstate::Error;
use std::path::PathBuf;

use mqstate::iothub::{C2dMessage, DeviceClient, DeviceOptions, DeviceSettings, Telemetry};
use napi::Env;
use napi::bindgen_prelude::{BufferSlice, Either, Null, PromiseRaw, Uint8ArraySlice};
use napi_derive::napi;

use crate::error::js_error;
use crate::util::{bytes, millis, rejected, spawn};

/// Where and how a device connects (all optional; the connection string says the rest). The
/// rules of the merge (which value wins, when TLS is on, what a certificate needs) are the
/// core's (`DeviceSettings::resolve`); a mistake rejects with `ERR_INVALID_ARGUMENT`.
#[napi(object)]
#[derive(Debug, Default)]
pub struct DeviceConnectOptions {
    /// `"mqtt"` (the default: messages can only be completed, acknowledged in arrival order),
    /// `"amqp"` (messages can be completed, rejected or abandoned, each on its own) or
    /// `"amqp-ws"` (AMQP over WebSockets on port 443); the names the core knows, in any case
    /// (another rejects with `ERR_INVALID_ARGUMENT`).
    #[napi(ts_type = "'mqtt' | 'amqp' | 'amqp-ws' | (string & {})")]
    pub transport: Option<String>,
    /// Host to connect to (default: the connection string's HostName).
    pub host: Option<String>,
    /// Port (default: the transport's, 8883 for MQTT, 5671 for AMQP).
    pub port: Option<u32>,
    /// TLS (default true); false for a local hub's plain TCP endpoint (not with a TLS file).
    pub tls: Option<bool>,
    /// PEM file of the CAs to trust instead of the system's.
    pub ca_file: Option<String>,
    /// PEM certificate (chain) of an X.509 device (connection string `x509=true`); needs
    /// `keyFile`.
    pub cert_file: Option<String>,
    /// PEM private key of `certFile`.
    pub key_file: Option<String>,
    /// Lifetime of each generated SAS token, in milliseconds (default one hour, at least 10 s).
    pub token_lifetime_ms: Option<f64>,
    /// MQTT keep-alive, or the AMQP idle timeout, in milliseconds (default 60 s).
    pub keep_alive_ms: Option<f64>,
    /// How long a connection attempt may take, in milliseconds (default 30 s).
    pub connect_timeout_ms: Option<f64>,
    /// How long sending an event waits for the hub, in milliseconds (default 30 s).
    pub operation_timeout_ms: Option<f64>,
    /// Messages received and not settled before the client stops reading (default 64).
    pub receive_buffer: Option<u32>,
}

/// An application property: `value` is `null` for a null property, `""` for an empty one.
#[napi(object)]
#[derive(Debug)]
pub struct Property {
    /// The name.
    pub name: String,
    /// The value, or null.
    pub value: Either<String, Null>,
}

/// The core options: fills a [`DeviceSettings`], whose `resolve` holds every rule of the merge
/// and all its checks; this converts JavaScript types only.
fn options(cs: &str, o: DeviceConnectOptions) -> Result<DeviceOptions, Error> {
    let mut s = DeviceSettings::new(cs);
    s.transport = o.transport.map(|t| t.parse()).transpose()?;
    s.host = o.host;
    s.port = o
        .port
        .map(|p| {
            u16::try_from(p)
                .map_err(|_| Error::InvalidArgument(format!("port {p} is out of range")))
        })
        .transpose()?;
    s.tls = o.tls;
    s.ca_file = o.ca_file.map(PathBuf::from);
    s.cert_file = o.cert_file.map(PathBuf::from);
    s.key_file = o.key_file.map(PathBuf::from);
    s.token_lifetime = millis("tokenLifetimeMs", o.token_lifetime_ms)?;
    s.keep_alive = millis("keepAliveMs", o.keep_alive_ms)?;
    s.connect_timeout = millis("connectTimeoutMs", o.connect_timeout_ms)?;
    s.operation_timeout = millis("operationTimeoutMs", o.operation_timeout_ms)?;
    s.receive_buffer = o.receive_buffer.map(|n| n as usize);
    s.resolve()
}

/// Counters of a device client's life.
#[napi(object)]
#[derive(Debug)]
pub struct DeviceStats {
    /// Messages received (redeliveries included).
    pub received: f64,
    /// Of those, recognised as redeliveries.
    pub redelivered: f64,
    /// Completions sent: PUBACKs (MQTT, released in arrival order) or accepted dispositions
    /// (AMQP).
    pub acknowledged: f64,
    /// Rejections sent (AMQP only).
    pub rejected: f64,
    /// Abandons sent (AMQP only).
    pub abandoned: f64,
    /// Settlements refused (`ERR_LOCK_LOST`) because the message's connection dropped or it
    /// was delivered again.
    pub stale_completions: f64,
    /// Connections made (the first included).
    pub connections: f64,
    /// Reconnections made to renew the SAS token.
    pub token_renewals: f64,
    /// Messages whose property bag could not be decoded.
    pub malformed: f64,
}

/// A device connection to IoT Hub (MQTT 3.1.1 or AMQP 1.0).
#[napi]
#[derive(Debug)]
pub struct NativeDeviceClient {
    inner: DeviceClient,
}

#[napi]
impl NativeDeviceClient {
    /// Connects; resolves once subscribed.
    #[napi]
    pub fn connect(
        env: &Env,
        connection_string: String,
        options: Option<DeviceConnectOptions>,
    ) -> napi::Result<PromiseRaw<'_, NativeDeviceClient>> {
        let options = match self::options(&connection_string, options.unwrap_or_default()) {
            Ok(o) => o,
            Err(e) => return rejected(env, e),
        };
        spawn(
            env,
            None,
            async move { DeviceClient::connect(options).await },
            |_, inner| Ok(NativeDeviceClient { inner }),
        )
    }

    /// The device id.
    #[napi(getter)]
    pub fn device_id(&self) -> String {
        self.inner.device_id().to_owned()
    }

    /// `connecting`, `connected`, `reconnecting` or `closed`.
    #[napi(getter)]
    pub fn state(&self) -> &'static str {
        self.inner.state().as_str()
    }

    /// The next message; with `timeoutMs`, resolves `null` when none came in time (a message
    /// arriving as the wait ends stays for the next call). Rejects with `ERR_DISCONNECTED`
    /// once the client is closed and its buffered messages were taken.
    #[napi]
    pub fn receive<'env>(
        &self,
        env: &'env Env,
        timeout_ms: Option<f64>,
    ) -> napi::Result<PromiseRaw<'env, Option<NativeC2dMessage>>> {
        let timeout = match millis("timeoutMs", timeout_ms) {
            Ok(t) => t,
            Err(e) => return rejected(env, e),
        };
        let client = self.inner.clone();
        spawn(
            env,
            None,
            async move {
                match timeout {
                    // The core's receive is cancel-safe: a message is taken from the buffer
                    // only by a receive that returns it.
                    Some(t) => match tokio::time::timeout(t, client.receive()).await {
                        Ok(m) => m.map(Some),
                        Err(_) => Ok(None),
                    },
                    None => client.receive().await.map(Some),
                }
            },
            |_, inner| Ok(inner.map(|inner| NativeC2dMessage { inner })),
        )
    }

    /// Counters of the client's life (received, redelivered, acknowledged...).
    #[napi(getter)]
    pub fn stats(&self) -> DeviceStats {
        let s = self.inner.stats();
        // Counts, exact as JavaScript numbers up to 2^53.
        let n = |v: u64| v as f64;
        DeviceStats {
            received: n(s.received),
            redelivered: n(s.redelivered),
            acknowledged: n(s.acknowledged),
            rejected: n(s.rejected),
            abandoned: n(s.abandoned),
            stale_completions: n(s.stale_completions),
            connections: n(s.connections),
            token_renewals: n(s.token_renewals),
            malformed: n(s.malformed),
        }
    }

    /// Sends telemetry and resolves on the hub's PUBACK.
    #[napi]
    pub fn send_event<'env>(
        &self,
        env: &'env Env,
        payload: Either<String, Uint8ArraySlice<'_>>,
        properties: Option<Vec<Property>>,
        message_id: Option<String>,
        content_type: Option<String>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let mut event = Telemetry::new(bytes(payload));
        event.message_id = message_id;
        event.content_type = content_type;
        for p in properties.unwrap_or_default() {
            let value = match p.value {
                Either::A(v) => Some(v),
                Either::B(_) => None,
            };
            event.properties.push((p.name, value));
        }
        let client = self.inner.clone();
        spawn(
            env,
            None,
            async move { client.send_event(event).await },
            |_, ()| Ok(()),
        )
    }

    /// Disconnects; uncompleted messages stay in the hub's queue.
    #[napi]
    pub fn close<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let client = self.inner.clone();
        spawn(
            env,
            None,
            async move {
                client.close().await;
                Ok(())
            },
            |_, ()| Ok(()),
        )
    }
}

/// A received cloud-to-device message.
#[napi]
#[derive(Debug)]
pub struct NativeC2dMessage {
    inner: C2dMessage,
}

pub(crate) fn nullable(v: &Option<String>) -> Either<String, Null> {
    match v {
        Some(s) => Either::A(s.clone()),
        None => Either::B(Null),
    }
}

#[napi]
impl NativeC2dMessage {
    /// The body.
    #[napi(getter)]
    pub fn payload<'env>(&self, env: &'env Env) -> napi::Result<BufferSlice<'env>> {
        BufferSlice::copy_from(env, &self.inner.payload)
    }
    /// `$.mid`.
    #[napi(getter)]
    pub fn message_id(&self) -> Either<String, Null> {
        nullable(&self.inner.message_id)
    }
    /// `$.cid`.
    #[napi(getter)]
    pub fn correlation_id(&self) -> Either<String, Null> {
        nullable(&self.inner.correlation_id)
    }
    /// `$.uid`.
    #[napi(getter)]
    pub fn user_id(&self) -> Either<String, Null> {
        nullable(&self.inner.user_id)
    }
    /// `$.to`.
    #[napi(getter)]
    pub fn to(&self) -> Either<String, Null> {
        nullable(&self.inner.to)
    }
    /// `$.exp`.
    #[napi(getter)]
    pub fn expiry_time(&self) -> Either<String, Null> {
        nullable(&self.inner.expiry_time)
    }
    /// `$.ct`.
    #[napi(getter)]
    pub fn content_type(&self) -> Either<String, Null> {
        nullable(&self.inner.content_type)
    }
    /// `$.ce`.
    #[napi(getter)]
    pub fn content_encoding(&self) -> Either<String, Null> {
        nullable(&self.inner.content_encoding)
    }
    /// `iothub-ack`.
    #[napi(getter)]
    pub fn ack(&self) -> Either<String, Null> {
        nullable(&self.inner.ack)
    }
    /// Application properties in order (null and empty values kept apart).
    #[napi(getter)]
    pub fn properties(&self) -> Vec<Property> {
        self.inner
            .properties
            .iter()
            .map(|(k, v)| Property {
                name: k.clone(),
                value: nullable(v),
            })
            .collect()
    }
    /// True when the message was delivered before.
    #[napi(getter)]
    pub fn is_redelivery(&self) -> bool {
        self.inner.is_redelivery()
    }
    /// Over AMQP, how many times the hub delivered the message before (0 the first time);
    /// null over MQTT.
    #[napi(getter)]
    pub fn delivery_count(&self) -> Option<u32> {
        self.inner.delivery_count()
    }
    /// Completes the message (over MQTT its PUBACK goes out in arrival order; over AMQP it is
    /// settled on its own). Throws `ERR_LOCK_LOST` when the hub gave the message up.
    #[napi]
    pub fn complete(&self, env: Env) -> napi::Result<()> {
        self.inner.complete().map_err(|e| js_error(&env, &e, &[]))
    }
    /// Rejects the message (AMQP: the hub dead-letters it, `Rejected` feedback); throws
    /// `ERR_NOT_SUPPORTED` over MQTT, `ERR_LOCK_LOST` when the hub gave the message up.
    #[napi]
    pub fn reject(&self, env: Env) -> napi::Result<()> {
        self.inner.reject().map_err(|e| js_error(&env, &e, &[]))
    }
    /// Abandons the message (AMQP: the hub delivers it again, or dead-letters it past its
    /// maximum delivery count); throws `ERR_NOT_SUPPORTED` over MQTT, `ERR_LOCK_LOST` when the
    /// hub gave the message up.
    #[napi]
    pub fn abandon(&self, env: Env) -> napi::Result<()> {
        self.inner.abandon().map_err(|e| js_error(&env, &e, &[]))
    }
}
