//! # A local IoT Hub for cloud-to-device messages
//!
//! Azure IoT Hub's cloud-to-device (C2D) messaging, on one machine: per-device queues with the
//! documented lifecycle (Enqueued, Invisible, Completed, Dead lettered), expiry, max delivery
//! count, feedback batches, and the MQTT 3.1.1 device endpoint real devices and SDKs connect to
//! (client id = device id, SAS token passwords, `devices/{id}/messages/devicebound/...`).
//!
//! - [`IotHubServer`]: starts the device endpoint, the HTTP admin API and the hub's timers;
//!   [`crate::LocalServer`] starts one next to the state store when
//!   [`crate::ServerConfig::iothub`] is set.
//! - [`IotHub`]: the service side in process (devices, send, queue, purge, feedback,
//!   telemetry). The same operations over HTTP+JSON: [`admin`], documented in `docs/iothub.md`.
//! - [`config`]: every limit, IoT Hub's value as default. [`queue`](self) and feedback
//!   batching are pure state machines, tested without waiting.
//! - [`sas`]: SAS tokens; [`properties`]: topic property bags; [`registry`]: devices.
//! - With [`IotHubConfig::data_dir`] (`mqstate serve --data-dir`), the registry, queues and
//!   feedback are kept in `DIR/iothub.redb` ([`HUB_FILE`]) and group-committed; the admin
//!   API acknowledges a change only once it is on disk ([`IotHub::persisted`]).
//! - The device endpoint reads and writes packets with rumqttc's MQTT 3.1.1 codec
//!   (`rumqttc::mqttbytes::v4`) and terminates each connection itself, so that the PUBACK
//!   of a delivery completes its message.
//! - The HTTPS port also serves MQTT and AMQP over WebSockets (`/$iothub/websocket`), handed to
//!   the same MQTT and AMQP connection handlers (`websocket.rs`, docs/iothub.md).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use mqstate_server::iothub::{C2dMessage, DeviceSpec, IotHubConfig, IotHubServer};
//!
//! let server = IotHubServer::start(IotHubConfig::default()).await?;
//! let hub = server.hub();
//! hub.add_device(&DeviceSpec::parse("dev1")?)?;
//! println!("devices connect to {:?}", hub.endpoints().device_endpoint);
//! hub.send("dev1", C2dMessage::new("hello").message_id("m1"))?;
//! server.shutdown().await;
//! # Ok(()) }
//! ```

pub mod admin;
pub(crate) mod amqp;
mod client_cert;
pub mod config;
pub(crate) mod domain;
pub(crate) mod https;
pub(crate) mod mqtt;
mod tls;
pub(crate) mod websocket;

// The domain's modules whose items the CLI, the bindings' test tooling and the tests name.
pub use domain::{message, policies, properties, registry, sas, time, x509};

use std::net::SocketAddr;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::{
    AmqpLimits, DEFAULT_ADMIN_PORT, DEFAULT_AMQP_PORT, DEFAULT_DEVICE_PORT, DEFAULT_HOSTNAME,
    DEFAULT_HTTPS_PORT, DeviceTls, IotHubConfig,
};
pub use domain::durable::{HUB_FILE, HUB_FORMAT};
pub use domain::error::{IoCause, IotHubError};
pub use domain::hub::{DeviceInfo, HubEndpoints, HubInfo, IotHub};
pub use domain::message::{
    Ack, C2dMessage, Expiry, FEEDBACK_CONTENT_TYPE, FeedbackBatch, FeedbackRecord, FeedbackStatus,
    MessageInfo, MessageState, QueueInfo, SendReceipt, TelemetryMessage,
};
pub use domain::queue::{LockedMessage, Settlement};
pub use domain::registry::{Device, DeviceSpec};

/// A running hub: its listeners and timer task. Stop it with [`IotHubServer::shutdown`];
/// dropping it stops it too (without waiting).
#[derive(Debug)]
pub struct IotHubServer {
    hub: IotHub,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl IotHubServer {
    /// Validates the configuration, registers its devices, binds the device endpoint (and the
    /// admin API unless `admin_port` is `None`) and starts serving.
    pub async fn start(config: IotHubConfig) -> Result<IotHubServer, IotHubError> {
        IotHubServer::start_with_routes(config, |_| axum::Router::new(), None).await
    }

    /// [`IotHubServer::start`], with more routes served by the admin API's HTTP server (the
    /// dashboard's): `extra` gets the hub and returns them. With `auth`, every route of that
    /// server asks for credentials (`web::auth`). The local server's own start, which serves the
    /// dashboard beside the admin API, is its one caller.
    pub(crate) async fn start_with_routes(
        config: IotHubConfig,
        extra: impl FnOnce(IotHub) -> axum::Router,
        auth: Option<std::sync::Arc<crate::web::auth::WebAuth>>,
    ) -> Result<IotHubServer, IotHubError> {
        let hub = IotHub::new(config)?;
        let config = hub.config().clone();
        if let Some(auth) = &auth {
            auth.accept_service_tokens(admin::service_token_check(hub.clone()));
        }
        // The HTTPS and AMQP endpoints always speak TLS; the device endpoint when asked to.
        let device_tls = config.tls != DeviceTls::None;
        let tls_setting = match &config.tls {
            DeviceTls::None if config.https_port.is_some() || config.amqp_port.is_some() => {
                DeviceTls::SelfSigned
            }
            other => other.clone(),
        };
        let (acceptor, ca_pem) = match tls::acceptor(&tls_setting, &config.hostname)? {
            Some((a, pem)) => (Some(a), pem),
            None => (None, None),
        };
        let ca_trust = match &config.ca_file {
            Some(path) => client_cert::CaTrust::from_file(path)?,
            None => client_cert::CaTrust::none(),
        };
        let device_listener = mqtt::bind(SocketAddr::new(config.bind, config.device_port)).await?;
        let device_addr = device_listener
            .local_addr()
            .map_err(|e| IotHubError::io("device endpoint address", e))?;
        let admin = listen(config.bind, config.admin_port, "the admin API").await?;
        let https = listen(config.bind, config.https_port, "the HTTPS REST API").await?;
        let amqp = listen(config.bind, config.amqp_port, "AMQP").await?;
        hub.set_endpoints(
            HubEndpoints {
                device_endpoint: Some(device_addr),
                tls: device_tls,
                admin_endpoint: admin.as_ref().map(|(_, a)| *a),
                https_endpoint: https.as_ref().map(|(_, a)| *a),
                amqp_endpoint: amqp.as_ref().map(|(_, a)| *a),
            },
            ca_pem,
        );
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = vec![
            tokio::spawn(hub.clone().run_timer(stop_rx.clone())),
            tokio::spawn(hub.clone().run_committer(stop_rx.clone())),
            tokio::spawn(mqtt::run(
                hub.clone(),
                device_listener,
                acceptor.clone().filter(|_| device_tls),
                ca_trust.clone(),
                stop_rx.clone(),
            )),
        ];
        if let (Some((listener, _)), Some(tls)) = (https, acceptor.clone()) {
            tasks.push(tokio::spawn(https::run(
                listener,
                tls,
                ca_trust.clone(),
                // MQTT and AMQP over WebSockets share the port, as on IoT Hub.
                https::service::router(hub.clone())
                    .merge(websocket::router(hub.clone(), stop_rx.clone())),
                stop_rx.clone(),
            )));
        }
        if let (Some((listener, _)), Some(tls)) = (amqp, acceptor) {
            tasks.push(tokio::spawn(amqp::run(
                hub.clone(),
                listener,
                tls,
                ca_trust.clone(),
                stop_rx.clone(),
            )));
        }
        if let Some((listener, addr)) = admin {
            // Host, Origin and Content-Type checks in front of every route (web_guard).
            let router = crate::web::guard::guard(
                extra(hub.clone()).merge(admin::router(hub.clone())),
                crate::web::guard::AllowedHosts::new([&config.hostname]),
                auth,
            );
            let mut stop_http = stop_rx.clone();
            tasks.push(tokio::spawn(async move {
                let shutdown = async move {
                    let _ = stop_http.changed().await;
                };
                if let Err(e) = crate::web::guard::serve(listener, router, shutdown).await {
                    tracing::error!(%addr, error = %e, "iothub: admin API stopped");
                }
            }));
        }
        let endpoints = hub.endpoints();
        let show = |a: Option<SocketAddr>| a.map_or_else(|| "off".to_owned(), |a| a.to_string());
        tracing::info!(
            devices = %device_addr,
            tls = endpoints.tls,
            admin = %show(endpoints.admin_endpoint),
            https = %show(endpoints.https_endpoint),
            amqp = %show(endpoints.amqp_endpoint),
            hostname = %config.hostname,
            "local IoT Hub ready"
        );
        Ok(IotHubServer { hub, stop, tasks })
    }

    /// The service-side API of this hub.
    pub fn hub(&self) -> IotHub {
        self.hub.clone()
    }

    /// Stops the listeners, closes device connections and waits for the tasks.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        for task in self.tasks.drain(..) {
            // Long-polling HTTP requests end with their wait; do not wait for them here.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), task).await;
        }
    }
}

/// Binds `port` on `bind` for `what`, or nothing when `port` is `None`.
async fn listen(
    bind: std::net::IpAddr,
    port: Option<u16>,
    what: &str,
) -> Result<Option<(tokio::net::TcpListener, SocketAddr)>, IotHubError> {
    let Some(port) = port else {
        return Ok(None);
    };
    let addr = SocketAddr::new(bind, port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| IotHubError::io(format_args!("cannot listen for {what} on {addr}"), e))?;
    let local = listener
        .local_addr()
        .map_err(|e| IotHubError::io(format_args!("{what} address"), e))?;
    Ok(Some((listener, local)))
}

impl Drop for IotHubServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
