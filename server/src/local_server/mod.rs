//! [`LocalServer`]: the embedded broker plus the state store (or the state store alone,
//! attached to an external broker), started and stopped as one thing. Its settings are in
//! `config` ([`ServerConfig`]); the steps of a start (the embedded broker with its security,
//! the store's connection, the web surfaces) in `start`.

mod config;
mod start;

pub use config::{BrokerChoice, DEFAULT_PORT, ServerConfig, parse_broker_url};

use std::net::SocketAddr;
use std::sync::Arc;

use crate::broker::EmbeddedBroker;
use crate::error::ServerError;
use crate::persist::Persistence;
use crate::statestore::service::{Service, ServiceConfig};

/// A running local state store: the embedded broker (unless attached to an external one) and
/// the state store client. Stop it with [`LocalServer::shutdown`]; dropping it stops it too
/// (without waiting).
///
/// ```no_run
/// # async fn demo() -> Result<(), mqstate_server::ServerError> {
/// use mqstate_server::LocalServer;
///
/// let server = LocalServer::start().await?; // 127.0.0.1, a free port
/// println!("connect to {}", server.url()); // mqtt://127.0.0.1:PORT
/// server.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LocalServer {
    host: String,
    port: u16,
    tls_port: Option<u16>,
    broker: Option<EmbeddedBroker>,
    service: Option<Service>,
    iothub: Option<crate::iothub::IotHubServer>,
    /// The dashboard's own server, when it runs without the hub.
    dashboard: Option<crate::dashboard::DashboardServer>,
    dashboard_on: bool,
    web_auth: Option<Arc<crate::web::auth::WebAuth>>,
}

impl LocalServer {
    /// Starts the embedded broker on 127.0.0.1 with a free port, and the state store.
    pub async fn start() -> Result<LocalServer, ServerError> {
        LocalServer::start_with(ServerConfig::default()).await
    }

    /// Starts with the given settings; returns once the store answers requests.
    pub async fn start_with(mut config: ServerConfig) -> Result<LocalServer, ServerError> {
        config.reconnect.check()?;
        // The dashboard observes the store through the store's own observer trait.
        let monitor = config.dashboard.map(|_| crate::dashboard::Monitor::new());
        let mut service_config = ServiceConfig::new(String::new(), 0);
        if let Some(id) = &config.client_id {
            service_config.client_id.clone_from(id);
        }
        // The data dir first: a locked, damaged or unwritable one stops the start before
        // anything listens.
        let persistence = match &config.data_dir {
            Some(dir) => Some(Persistence::open(dir, config.persist_mode)?),
            None => None,
        };
        let web_ip = start::web_ip(&config)?;
        let (started, host, port) = match &config.broker {
            BrokerChoice::Embedded => {
                let started = start::embedded_broker(
                    &config,
                    persistence.as_ref(),
                    &service_config.client_id,
                )
                .await?;
                let (host, port) = (started.host.clone(), started.port);
                (Some(started), host, port)
            }
            BrokerChoice::External { host, port } => (None, host.clone(), *port),
        };
        let (broker, events, store_credentials, access_control) = match started {
            Some(s) => (
                Some(s.broker),
                Some(s.events),
                s.credentials,
                s.access_control,
            ),
            None => (None, None, None, None),
        };
        // Whoever may not read a key over MQTT must not read it over HTTP either.
        let web_auth = start::web_auth(&config, web_ip, access_control)?;
        start::configure_service(
            &mut service_config,
            &config,
            monitor.clone(),
            (&host, port),
            broker.as_ref(),
            store_credentials,
        )?;
        let tls_port = broker
            .as_ref()
            .and_then(EmbeddedBroker::tls_local_addr)
            .map(|a| a.port());
        service_config.persistence = persistence;
        let service = match Service::start(service_config, events).await {
            Ok(s) => s,
            Err(e) => {
                if let Some(b) = broker {
                    b.shutdown().await;
                }
                return Err(e.into());
            }
        };
        let hub_config = config.iothub.take();
        let surfaces = start::web_surfaces(
            &config,
            hub_config,
            monitor,
            web_auth.clone(),
            (&host, port),
        )
        .await;
        let (iothub, dashboard) = match surfaces {
            Ok(surfaces) => surfaces,
            Err(e) => {
                service.shutdown().await;
                if let Some(b) = broker {
                    b.shutdown().await;
                }
                return Err(e);
            }
        };
        // Only now may clients connect to the embedded broker: the store is subscribed.
        if let Some(gate) = broker.as_ref().and_then(EmbeddedBroker::admission_gate) {
            gate.open();
        }
        tracing::info!(%host, port, "state store ready");
        Ok(LocalServer {
            host,
            port,
            tls_port,
            broker,
            service: Some(service),
            iothub,
            dashboard,
            dashboard_on: config.dashboard.is_some(),
            web_auth,
        })
    }

    /// Starts the server on the given runtime, from synchronous code (a test without
    /// `#[tokio::test]`, a Python binding...). Must not be called from inside that runtime's
    /// own worker threads.
    pub fn start_blocking(
        runtime: &tokio::runtime::Handle,
        config: ServerConfig,
    ) -> Result<LocalServer, ServerError> {
        runtime.block_on(LocalServer::start_with(config))
    }

    /// Stops the server from synchronous code (see [`LocalServer::start_blocking`]).
    pub fn shutdown_blocking(self, runtime: &tokio::runtime::Handle) {
        runtime.block_on(self.shutdown());
    }

    /// The host clients connect to (`127.0.0.1` for the default embedded broker).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The broker's actual port (the one the OS chose when the configured port was 0).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The access token the web surfaces (admin API, dashboard) ask for, when they ask for
    /// credentials: broker authentication is on, or they listen beyond loopback
    /// (`web::auth`).
    pub fn web_token(&self) -> Option<&str> {
        self.web_auth
            .as_deref()
            .map(crate::web::auth::WebAuth::token)
    }

    /// The port of the embedded broker's TLS listener, when [`SecurityConfig::tls`](crate::security::SecurityConfig::tls) is set.
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// `mqtt://host:port`.
    pub fn url(&self) -> String {
        if self.host.contains(':') {
            format!("mqtt://[{}]:{}", self.host, self.port)
        } else {
            format!("mqtt://{}:{}", self.host, self.port)
        }
    }

    /// Whether the broker is the embedded one.
    pub fn is_embedded(&self) -> bool {
        self.broker.is_some()
    }

    /// The local IoT Hub's service-side API, when [`ServerConfig::iothub`] was set.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use mqstate_server::iothub::{C2dMessage, DeviceSpec, IotHubConfig};
    /// use mqstate_server::{LocalServer, ServerConfig};
    ///
    /// let server =
    ///     LocalServer::start_with(ServerConfig::default().with_iothub(IotHubConfig::default()))
    ///         .await?;
    /// let hub = server.iothub().expect("configured");
    /// hub.add_device(&DeviceSpec::parse("dev1")?)?;
    /// hub.send("dev1", C2dMessage::new("hi").message_id("m1"))?;
    /// server.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn iothub(&self) -> Option<crate::iothub::IotHub> {
        self.iothub.as_ref().map(crate::iothub::IotHubServer::hub)
    }

    /// The address of the dashboard's HTTP server (the hub's admin API server, or its own
    /// when the hub is off), if the dashboard is on.
    pub fn dashboard_addr(&self) -> Option<SocketAddr> {
        match (&self.dashboard, &self.iothub) {
            (Some(d), _) => Some(d.local_addr()),
            (None, Some(hub)) if self.dashboard_on => hub.hub().endpoints().admin_endpoint,
            _ => None,
        }
    }

    /// Stops the dashboard and the IoT Hub (if any), the state store, then the embedded broker,
    /// and waits for them (a few seconds at most).
    pub async fn shutdown(mut self) {
        if let Some(dashboard) = self.dashboard.take() {
            dashboard.shutdown().await;
        }
        if let Some(hub) = self.iothub.take() {
            hub.shutdown().await;
        }
        if let Some(service) = self.service.take() {
            service.shutdown().await;
        }
        if let Some(broker) = self.broker.take() {
            broker.shutdown().await;
        }
        tracing::info!(port = self.port, "local state store stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn an_unreachable_external_broker_is_a_clear_error() {
        // A port nobody listens on: bound, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut config = ServerConfig::external(&format!("mqtt://127.0.0.1:{port}")).unwrap();
        config.connect_timeout = Duration::from_millis(500);
        let err = LocalServer::start_with(config).await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
        assert!(text.contains("last error"), "{text}");
    }

    #[tokio::test]
    async fn a_port_in_use_is_a_clear_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let err = LocalServer::start_with(ServerConfig::default().with_port(port))
            .await
            .unwrap_err();
        assert!(matches!(err, ServerError::Broker(_)), "{err}");
    }

    #[tokio::test]
    async fn start_stop_and_restart_on_the_same_port() {
        let server = LocalServer::start().await.unwrap();
        let port = server.port();
        assert_ne!(port, 0);
        assert_eq!(server.url(), format!("mqtt://127.0.0.1:{port}"));
        assert!(server.is_embedded());
        server.shutdown().await;
        let again = LocalServer::start_with(ServerConfig::default().with_port(port))
            .await
            .unwrap();
        assert_eq!(again.port(), port);
        drop(again);
    }

    #[test]
    fn blocking_start_and_stop() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let server =
            LocalServer::start_blocking(runtime.handle(), ServerConfig::default()).unwrap();
        assert_ne!(server.port(), 0);
        server.shutdown_blocking(runtime.handle());
    }

    #[test]
    fn broker_urls() {
        assert_eq!(
            parse_broker_url("tcp://10.0.0.1:1").unwrap(),
            ("10.0.0.1".to_owned(), 1)
        );
        assert_eq!(parse_broker_url("h:2/").unwrap(), ("h".to_owned(), 2));
        for bad in [
            "mqtt://",
            "mqtt://h:0",
            "mqtt://h:70000",
            "mqtt://h:x",
            "[::1",
            "ws://h",
        ] {
            assert!(parse_broker_url(bad).is_err(), "{bad}");
        }
    }
}
