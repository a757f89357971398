//! `LocalIotHub`: the local IoT Hub (`mqstate_server::iothub`) in this process, for the IoT Hub
//! tests.

use std::sync::{Arc, Mutex};

use mqstate::Error;
use napi::Env;
use napi::bindgen_prelude::{Either, PromiseRaw, Uint8ArraySlice};
use napi_derive::napi;

use mqstate_server::iothub::registry::DeviceUpdate;
use mqstate_server::iothub::x509::Authentication;

use crate::error::js_error;
use crate::iothub::{Property, nullable};
use crate::util::{bytes, millis, rejected, spawn};

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

/// Settings of a `LocalIotHub` beyond its lock timeout (all optional).
#[napi(object)]
#[derive(Debug, Default)]
pub struct HubStartOptions {
    /// Deliveries after which a message not completed is dead-lettered (1-100; IoT Hub: 10).
    pub max_delivery_count: Option<u32>,
    /// TLS on the MQTT device endpoint too (a certificate the hub generates: trust `caPem`;
    /// it is what X.509 devices need), instead of plain TCP.
    pub device_tls: Option<bool>,
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

/// A local IoT Hub in this process, for tests: an MQTT device endpoint on 127.0.0.1 (plain TCP
/// unless started with `deviceTls`), an AMQP endpoint over TLS (`amqpPort`, trusting
/// `caPem`). Feedback records are made at once (batches of one).
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
        options: Option<HubStartOptions>,
    ) -> napi::Result<PromiseRaw<'_, LocalIotHub>> {
        let options = options.unwrap_or_default();
        let mut config = mqstate_server::iothub::IotHubConfig {
            admin_port: None,
            feedback_batch_size: 1,
            ..Default::default()
        };
        match millis("lockTimeoutMs", lock_timeout_ms) {
            Ok(Some(t)) => config.lock_timeout = t,
            Ok(None) => {}
            Err(e) => return rejected(env, e),
        }
        if let Some(n) = options.max_delivery_count {
            config.max_delivery_count = n;
        }
        if options.device_tls == Some(true) {
            config.tls = mqstate_server::iothub::DeviceTls::SelfSigned;
        }
        spawn(
            env,
            None,
            async move {
                mqstate_server::iothub::IotHubServer::start(config)
                    .await
                    .map_err(|e| Error::connection(format!("the local IoT Hub did not start: {e}")))
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

    /// The MQTT device endpoint's port.
    #[napi(getter)]
    pub fn port(&self) -> u32 {
        self.hub
            .endpoints()
            .device_endpoint
            .map_or(0, |a| u32::from(a.port()))
    }

    /// The AMQP device endpoint's port (TLS: connect with `{ transport: 'amqp', port:
    /// hub.amqpPort, caFile }`, `caFile` holding `caPem`).
    #[napi(getter)]
    pub fn amqp_port(&self) -> u32 {
        self.hub
            .endpoints()
            .amqp_endpoint
            .map_or(0, |a| u32::from(a.port()))
    }

    /// The HTTPS port (TLS, trust `caPem`): IoT Hub's REST API and MQTT and AMQP over
    /// WebSockets (`{ transport: 'amqp-ws', port: hub.httpsPort, caFile }`).
    #[napi(getter)]
    pub fn https_port(&self) -> u32 {
        self.hub
            .endpoints()
            .https_endpoint
            .map_or(0, |a| u32::from(a.port()))
    }

    /// The PEM certificate the hub generated for its TLS endpoints (write it to a file for
    /// `caFile`), or null when it uses none.
    #[napi(getter)]
    pub fn ca_pem(&self) -> Option<String> {
        self.hub.ca_certificate_pem()
    }

    /// The status of the newest feedback record of `messageId` (`Success`, `Rejected`,
    /// `DeliveryCountExceeded`, `Expired`, `Purged`), or null while there is none.
    #[napi]
    pub fn feedback(&self, message_id: String) -> Option<String> {
        self.hub
            .recent_feedback()
            .into_iter()
            .rev()
            .find(|r| r.original_message_id.as_deref() == Some(message_id.as_str()))
            .map(|r| format!("{:?}", r.status_code))
    }

    /// How many of the device's recent messages were dead-lettered.
    #[napi]
    pub fn dead_lettered(&self, env: Env, device_id: String) -> napi::Result<u32> {
        self.finished(
            &env,
            &device_id,
            mqstate_server::iothub::MessageState::DeadLettered,
        )
    }

    /// Registers a self-signed X.509 device known by the SHA-1 or SHA-256 thumbprint of its
    /// certificate (hex, colons allowed, as `openssl x509 -noout -fingerprint -sha256` prints
    /// it); returns its connection string (`x509=true`, pointed at this hub like `addDevice`'s).
    /// It connects with `certFile` and `keyFile` to a hub started with `deviceTls`.
    #[napi(js_name = "addX509Device")]
    pub fn add_x509_device(
        &self,
        env: Env,
        device_id: String,
        thumbprint: String,
    ) -> napi::Result<String> {
        let r = Authentication::self_signed(Some(&thumbprint), None).and_then(|auth| {
            self.hub.create_device(
                &device_id,
                &DeviceUpdate {
                    authentication: Some(auth),
                    ..DeviceUpdate::default()
                },
            )
        });
        r.map(|_| {
            format!(
                "HostName={};DeviceId={device_id};x509=true;GatewayHostName=127.0.0.1",
                self.hub_name()
            )
        })
        .map_err(|e| js_error(&env, &hub_error(e), &[]))
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
        self.finished(
            &env,
            &device_id,
            mqstate_server::iothub::MessageState::Completed,
        )
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

impl LocalIotHub {
    /// How many of the device's recent messages ended in `state`.
    fn finished(
        &self,
        env: &Env,
        device_id: &str,
        state: mqstate_server::iothub::MessageState,
    ) -> napi::Result<u32> {
        self.hub
            .queue(device_id)
            .map(|q| q.finished.iter().filter(|m| m.state == state).count() as u32)
            .map_err(|e| js_error(env, &hub_error(e), &[]))
    }

    /// The hub's host name (what connection strings say).
    fn hub_name(&self) -> String {
        self.hub.info().hostname
    }
}
