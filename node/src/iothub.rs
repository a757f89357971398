//! The IoT Hub device client (`mqstate::iothub`): `NativeDeviceClient`, `NativeC2dMessage` and
//! the test hub `LocalIotHub`. The TypeScript wrapper (`index.ts`) adds the async iterator.

use std::sync::{Arc, Mutex};

use mqstate::Error;
use mqstate::iothub::{C2dMessage, DeviceClient, DeviceOptions, Telemetry};
use napi::Env;
use napi::bindgen_prelude::{BufferSlice, Either, Null, PromiseRaw, Uint8ArraySlice};
use napi_derive::napi;

use crate::error::js_error;
use crate::util::{bytes, millis, rejected, spawn};

/// Where and how a device connects (all optional; the connection string says the rest).
#[napi(object)]
#[derive(Debug, Default)]
pub struct DeviceConnectOptions {
    /// Host to connect to (default: the connection string's HostName).
    pub host: Option<String>,
    /// Port (default 8883).
    pub port: Option<u32>,
    /// TLS (default true); false for a local hub's plain TCP endpoint.
    pub tls: Option<bool>,
    /// PEM file of the CA to trust.
    pub ca_file: Option<String>,
    /// Lifetime of each generated SAS token, in milliseconds (default one hour).
    pub token_lifetime_ms: Option<f64>,
    /// Messages open (received, not completed) before the client stops reading (default 64).
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

fn options(cs: &str, o: DeviceConnectOptions) -> Result<DeviceOptions, Error> {
    let mut options = DeviceOptions::from_connection_string(cs)?;
    if let Some(h) = o.host {
        options.connect_host = Some(h);
    }
    if let Some(p) = o.port {
        options.port = u16::try_from(p)
            .map_err(|_| Error::InvalidArgument(format!("port {p} is out of range")))?;
    }
    if o.tls == Some(false) {
        options.tls = None;
    } else if let Some(ca) = o.ca_file {
        options.tls = Some(options.tls.take().unwrap_or_default().with_ca_file(ca));
    }
    if let Some(t) = millis("tokenLifetimeMs", o.token_lifetime_ms)? {
        options.token_lifetime = t;
    }
    if let Some(n) = o.receive_buffer {
        options.receive_buffer = n as usize;
    }
    Ok(options)
}

/// Counters of a device client's life.
#[napi(object)]
#[derive(Debug)]
pub struct DeviceStats {
    /// Messages received (redeliveries included).
    pub received: f64,
    /// Of those, recognised as redeliveries.
    pub redelivered: f64,
    /// PUBACKs sent (completions released in arrival order).
    pub acknowledged: f64,
    /// Completions refused because the message's connection dropped or it was delivered again.
    pub stale_completions: f64,
    /// Connections made (the first included).
    pub connections: f64,
    /// Reconnections made to renew the SAS token.
    pub token_renewals: f64,
    /// Messages whose property bag could not be decoded.
    pub malformed: f64,
}

/// System properties of a C2D message sent by `LocalIotHub.send` (all optional).
#[napi(object)]
#[derive(Debug, Default)]
pub struct HubSendOptions {
    /// `$.cid`.
    pub correlation_id: Option<String>,
    /// `$.uid`.
    pub user_id: Option<String>,
    /// `$.ct`.
    pub content_type: Option<String>,
    /// `$.ce`.
    pub content_encoding: Option<String>,
    /// `iothub-ack`: `none`, `positive`, `negative` or `full`.
    pub ack: Option<String>,
}

/// A telemetry message as the hub received it.
#[napi(object)]
pub struct HubTelemetry {
    /// The body, byte for byte.
    pub body: napi::bindgen_prelude::Buffer,
    /// System properties (`$.mid`, `$.ct`...), sorted by name.
    pub system_properties: Vec<Property>,
    /// Application properties, sorted by name (`value: null` for a null property).
    pub properties: Vec<Property>,
}

impl std::fmt::Debug for HubTelemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubTelemetry")
            .field("body_len", &self.body.len())
            .field("system_properties", &self.system_properties)
            .field("properties", &self.properties)
            .finish()
    }
}

/// A device connection to IoT Hub (MQTT 3.1.1).
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

fn nullable(v: &Option<String>) -> Either<String, Null> {
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
    /// Completes the message (its PUBACK goes out in arrival order).
    #[napi]
    pub fn complete(&self, env: Env) -> napi::Result<()> {
        self.inner.complete().map_err(|e| js_error(&env, &e, &[]))
    }
    /// Always throws `ERR_NOT_SUPPORTED` (IoT Hub cannot reject over MQTT).
    #[napi]
    pub fn reject(&self, env: Env) -> napi::Result<()> {
        self.inner.reject().map_err(|e| js_error(&env, &e, &[]))
    }
    /// Always throws `ERR_NOT_SUPPORTED` (IoT Hub cannot abandon over MQTT).
    #[napi]
    pub fn abandon(&self, env: Env) -> napi::Result<()> {
        self.inner.abandon().map_err(|e| js_error(&env, &e, &[]))
    }
}

/// A local IoT Hub in this process, for tests (plain TCP device endpoint on 127.0.0.1).
#[napi]
#[derive(Debug)]
pub struct LocalIotHub {
    server: Arc<Mutex<Option<mqstate_server::iothub::IotHubServer>>>,
    hub: mqstate_server::iothub::IotHub,
}

fn hub_error(e: mqstate_server::iothub::IotHubError) -> Error {
    Error::InvalidArgument(e.to_string())
}

#[napi]
impl LocalIotHub {
    /// Starts a hub; `lockTimeoutMs` shortens the 60 s message lock.
    #[napi]
    pub fn start(
        env: &Env,
        lock_timeout_ms: Option<f64>,
    ) -> napi::Result<PromiseRaw<'_, LocalIotHub>> {
        let mut config = mqstate_server::iothub::IotHubConfig {
            admin_port: None,
            ..Default::default()
        };
        match millis("lockTimeoutMs", lock_timeout_ms) {
            Ok(Some(t)) => config.lock_timeout = t,
            Ok(None) => {}
            Err(e) => return rejected(env, e),
        }
        spawn(
            env,
            None,
            async move {
                mqstate_server::iothub::IotHubServer::start(config)
                    .await
                    .map_err(|e| Error::Connection(format!("the local IoT Hub did not start: {e}")))
            },
            |_, server| {
                let hub = server.hub();
                Ok(LocalIotHub {
                    server: Arc::new(Mutex::new(Some(server))),
                    hub,
                })
            },
        )
    }

    /// The device endpoint's port.
    #[napi(getter)]
    pub fn port(&self) -> u32 {
        self.hub
            .endpoints()
            .device_endpoint
            .map_or(0, |a| u32::from(a.port()))
    }

    /// Registers a device; returns its connection string (connect with `{ port, tls: false }`).
    #[napi]
    pub fn add_device(&self, env: Env, device_id: String) -> napi::Result<String> {
        let r = mqstate_server::iothub::DeviceSpec::parse(&device_id)
            .and_then(|spec| self.hub.add_device(&spec))
            .and_then(|_| self.hub.connection_string(&device_id))
            .map(|cs| format!("{cs};GatewayHostName=127.0.0.1"));
        r.map_err(|e| js_error(&env, &hub_error(e), &[]))
    }

    /// Sends a C2D message.
    #[napi]
    pub fn send(
        &self,
        env: Env,
        device_id: String,
        payload: Either<String, Uint8ArraySlice<'_>>,
        message_id: Option<String>,
        properties: Option<Vec<Property>>,
        options: Option<HubSendOptions>,
    ) -> napi::Result<()> {
        let o = options.unwrap_or_default();
        let mut m = mqstate_server::iothub::C2dMessage::new(bytes(payload));
        m.message_id = message_id;
        m.correlation_id = o.correlation_id;
        m.user_id = o.user_id;
        m.content_type = o.content_type;
        m.content_encoding = o.content_encoding;
        if let Some(ack) = o.ack {
            m.ack = mqstate_server::iothub::Ack::parse(&ack)
                .map_err(|e| js_error(&env, &hub_error(e), &[]))?;
        }
        for p in properties.unwrap_or_default() {
            let v = match &p.value {
                Either::A(v) => Some(v.as_str()),
                Either::B(_) => None,
            };
            m = m.property(p.name.clone(), v);
        }
        self.hub
            .send(&device_id, m)
            .map(|_| ())
            .map_err(|e| js_error(&env, &hub_error(e), &[]))
    }

    /// Messages Enqueued or Invisible in the device's queue.
    #[napi]
    pub fn queue_depth(&self, env: Env, device_id: String) -> napi::Result<u32> {
        self.hub
            .queue(&device_id)
            .map(|q| q.depth as u32)
            .map_err(|e| js_error(&env, &hub_error(e), &[]))
    }

    /// How many of the device's recent messages were Completed.
    #[napi]
    pub fn completed(&self, env: Env, device_id: String) -> napi::Result<u32> {
        self.hub
            .queue(&device_id)
            .map(|q| {
                q.finished
                    .iter()
                    .filter(|m| m.state == mqstate_server::iothub::MessageState::Completed)
                    .count() as u32
            })
            .map_err(|e| js_error(&env, &hub_error(e), &[]))
    }

    /// The telemetry the device sent (oldest first), bodies byte for byte.
    #[napi]
    pub fn telemetry(&self, env: Env, device_id: String) -> napi::Result<Vec<HubTelemetry>> {
        use base64::Engine;
        let got = self
            .hub
            .telemetry(&device_id, 0)
            .map_err(|e| js_error(&env, &hub_error(e), &[]))?;
        let pairs = |m: std::collections::BTreeMap<String, Option<String>>| {
            m.into_iter()
                .map(|(name, v)| Property {
                    name,
                    value: nullable(&v),
                })
                .collect()
        };
        got.into_iter()
            .map(|t| {
                let body = base64::engine::general_purpose::STANDARD
                    .decode(&t.body_base64)
                    .map_err(|e| js_error(&env, &Error::UnexpectedResponse(e.to_string()), &[]))?;
                Ok(HubTelemetry {
                    body: body.into(),
                    system_properties: pairs(t.system_properties),
                    properties: pairs(t.properties),
                })
            })
            .collect()
    }

    /// The bodies (UTF-8) of the telemetry the device sent.
    #[napi]
    pub fn telemetry_bodies(&self, env: Env, device_id: String) -> napi::Result<Vec<String>> {
        self.hub
            .telemetry(&device_id, 0)
            .map(|t| t.into_iter().map(|m| m.body.unwrap_or_default()).collect())
            .map_err(|e| js_error(&env, &hub_error(e), &[]))
    }

    /// Stops the hub (idempotent).
    #[napi]
    pub fn stop<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let server = self.server.lock().ok().and_then(|mut s| s.take());
        spawn(
            env,
            None,
            async move {
                if let Some(s) = server {
                    s.shutdown().await;
                }
                Ok(())
            },
            |_, ()| Ok(()),
        )
    }
}
