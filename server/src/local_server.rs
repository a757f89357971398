//! [`LocalServer`]: the embedded broker plus the state store (or the state store alone,
//! attached to an external broker), started and stopped as one thing.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use mqstate::protocol::hlc::{DEFAULT_MAX_DRIFT, WallClock};
use tokio::sync::mpsc;

use crate::broker::{BrokerSecurity, EmbeddedBroker, EmbeddedBrokerConfig};
use crate::error::ServerError;
use crate::persist::{PersistMode, Persistence};
use crate::security::{AccessControl, SecurityConfig};
use crate::statestore::dedup::DedupLimits;
use crate::statestore::handler::{DEFAULT_NODE_ID, HandlerConfig};
use crate::statestore::reconnect::StoreReconnect;
use crate::statestore::service::{
    DEFAULT_MAX_PACKET_SIZE, MQTT_MAX_PACKET_SIZE, Service, ServiceConfig,
};

/// The port `mqstate serve` listens on by default (the MQTT port).
pub const DEFAULT_PORT: u16 = 1883;

/// Which broker the state store attaches to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerChoice {
    /// Start the embedded broker on [`ServerConfig::bind`]:[`ServerConfig::port`].
    Embedded,
    /// Attach to an existing broker at this host and port (Mosquitto...).
    External {
        /// The broker's host name or IP address.
        host: String,
        /// The broker's port.
        port: u16,
    },
}

/// Settings of a [`LocalServer`]. `ServerConfig::default()` is an embedded broker on
/// 127.0.0.1 with a free port chosen by the OS.
#[derive(Clone)]
pub struct ServerConfig {
    /// The embedded broker or an external one.
    pub broker: BrokerChoice,
    /// Address the embedded broker listens on (default 127.0.0.1).
    pub bind: IpAddr,
    /// Port of the embedded broker (0: a free port; see [`LocalServer::port`]).
    pub port: u16,
    /// Key quota (`None`: unlimited).
    pub max_keys: Option<usize>,
    /// Largest MQTT packet, in bytes, for the embedded broker and the store's client (with an
    /// external broker, the broker's own limit applies instead).
    pub max_packet_size: u32,
    /// MQTT client id of the state store (default: unique per process and start).
    pub client_id: Option<String>,
    /// Bounds of the duplicate-request cache.
    pub dedup: DedupLimits,
    /// How far ahead of the server clock `__ts` / `__ft` may be (default 60 s).
    pub max_drift: Duration,
    /// Node id of the server's versions (default `StateStore`).
    pub node_id: String,
    /// A wall clock for the server's HLC (tests); the system clock if `None`.
    pub wall_clock: Option<Arc<dyn WallClock>>,
    /// How long to wait for the store's first connection and subscription (default 10 s).
    pub connect_timeout: Duration,
    /// The local IoT Hub to run beside the store (`None`, the default: no hub). See
    /// [`crate::iothub`] and [`LocalServer::iothub`].
    pub iothub: Option<crate::iothub::IotHubConfig>,
    /// The web dashboard, served by the IoT Hub's admin API server, or by a server of its own
    /// when `iothub` is off (see [`crate::dashboard::DashboardConfig::standalone_addr`]).
    pub dashboard: Option<crate::dashboard::DashboardConfig>,
    /// Keep keys (and the embedded broker's sessions, and the IoT Hub's registry, queues and
    /// feedback unless [`crate::iothub::IotHubConfig::data_dir`] names another directory) in
    /// this directory, so that they survive a restart or a crash (`None`: in memory only).
    /// See [`crate::persist`].
    pub data_dir: Option<std::path::PathBuf>,
    /// Which keys a data dir keeps: every key (default) or those SET with `persist`.
    pub persist_mode: PersistMode,
    /// TLS, authentication and authorization of the embedded broker (default: none; see
    /// [`crate::security`]). A non-loopback [`ServerConfig::bind`] needs TLS and
    /// authentication unless [`SecurityConfig::insecure`] is set.
    pub security: SecurityConfig,
    /// With an external broker: how the store connects to it (TLS, user name and password,
    /// K8S-SAT), as the core client's options; see [`ServerConfig::attach`]. Attach mode
    /// is the server's one use of the core's client layer (feature `client`, on by default).
    #[cfg(feature = "client")]
    pub attach: Option<mqstate::ConnectOptions>,
    /// How the store reconnects when it loses its broker (attach mode: a broker restart):
    /// promptly after every loss, at most [`crate::statestore::reconnect::DEFAULT_MAX_DELAY`] (500 ms)
    /// between attempts by default; see [`crate::statestore::reconnect`].
    pub reconnect: StoreReconnect,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("ServerConfig");
        d.field("broker", &self.broker)
            .field("bind", &self.bind)
            .field("port", &self.port)
            .field("max_keys", &self.max_keys)
            .field("max_packet_size", &self.max_packet_size)
            .field("client_id", &self.client_id)
            .field("dedup", &self.dedup)
            .field("max_drift", &self.max_drift)
            .field("node_id", &self.node_id)
            .field("wall_clock", &self.wall_clock.as_ref().map(|_| "custom"))
            .field("connect_timeout", &self.connect_timeout)
            .field("iothub", &self.iothub)
            .field("dashboard", &self.dashboard)
            .field("data_dir", &self.data_dir)
            .field("persist_mode", &self.persist_mode)
            .field("security", &self.security)
            .field("reconnect", &self.reconnect);
        #[cfg(feature = "client")]
        d.field("attach", &self.attach);
        d.finish()
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            broker: BrokerChoice::Embedded,
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            max_keys: None,
            max_packet_size: DEFAULT_MAX_PACKET_SIZE,
            client_id: None,
            dedup: DedupLimits::default(),
            max_drift: DEFAULT_MAX_DRIFT,
            node_id: DEFAULT_NODE_ID.to_owned(),
            wall_clock: None,
            connect_timeout: Duration::from_secs(10),
            iothub: None,
            dashboard: None,
            data_dir: None,
            persist_mode: PersistMode::All,
            security: SecurityConfig::default(),
            #[cfg(feature = "client")]
            attach: None,
            reconnect: StoreReconnect::default(),
        }
    }
}

impl ServerConfig {
    /// The embedded broker on 127.0.0.1 and a free port.
    pub fn embedded() -> Self {
        ServerConfig::default()
    }

    /// Attach to the external broker at `url` (`mqtt://host:port`, `tcp://host:port` or
    /// `host:port`; the port defaults to 1883).
    ///
    /// ```
    /// use mqstate_server::{BrokerChoice, ServerConfig};
    ///
    /// let c = ServerConfig::external("mqtt://127.0.0.1:18830").unwrap();
    /// assert_eq!(c.broker, BrokerChoice::External { host: "127.0.0.1".into(), port: 18830 });
    /// assert!(ServerConfig::external("http://x").is_err());
    /// ```
    pub fn external(url: &str) -> Result<Self, ServerError> {
        let (host, port) = parse_broker_url(url)?;
        Ok(ServerConfig {
            broker: BrokerChoice::External { host, port },
            ..ServerConfig::default()
        })
    }

    /// Attach to the external broker at `url`, read by the core client's
    /// [`mqstate::ConnectOptions::from_url`]: `mqtt://` or `mqtts://`, `user:password@`, and
    /// the query parameters `ca_file`, `cert_file`, `key_file`, `password_file`, `sat_file`.
    /// The options' other fields can be set before starting ([`ServerConfig::attach`] field).
    ///
    /// ```
    /// use mqstate_server::{BrokerChoice, ServerConfig};
    ///
    /// let c = ServerConfig::attach("mqtts://store@broker:8883?ca_file=/etc/ca.pem").unwrap();
    /// assert_eq!(c.broker, BrokerChoice::External { host: "broker".into(), port: 8883 });
    /// let o = c.attach.unwrap();
    /// assert_eq!(o.username.as_deref(), Some("store"));
    /// assert!(o.tls.is_some());
    /// ```
    #[cfg(feature = "client")]
    pub fn attach(url: &str) -> Result<Self, ServerError> {
        let options = mqstate::ConnectOptions::from_url(url)
            .map_err(|e| ServerError::config_caused(format!("broker URL {url:?}"), e))?;
        Ok(ServerConfig {
            broker: BrokerChoice::External {
                host: options.host.clone(),
                port: options.port,
            },
            attach: Some(options),
            ..ServerConfig::default()
        })
    }

    /// Sets the port (builder style).
    #[must_use]
    pub fn with_port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Sets the key quota (builder style).
    #[must_use]
    pub fn with_max_keys(mut self, max_keys: Option<usize>) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Sets the maximum packet size (builder style).
    #[must_use]
    pub fn with_max_packet_size(mut self, size: u32) -> Self {
        self.max_packet_size = size;
        self
    }

    /// Runs the local IoT Hub beside the store with these settings (builder style).
    #[must_use]
    pub fn with_iothub(mut self, iothub: crate::iothub::IotHubConfig) -> Self {
        self.iothub = Some(iothub);
        self
    }

    /// Keeps keys in `dir` (builder style); see [`ServerConfig::data_dir`].
    ///
    /// ```
    /// use mqstate_server::ServerConfig;
    /// use mqstate_server::persist::PersistMode;
    ///
    /// let c = ServerConfig::default().with_data_dir("/var/lib/mqstate", PersistMode::Requested);
    /// assert_eq!(c.persist_mode, PersistMode::Requested);
    /// ```
    #[must_use]
    pub fn with_data_dir(mut self, dir: impl Into<std::path::PathBuf>, mode: PersistMode) -> Self {
        self.data_dir = Some(dir.into());
        self.persist_mode = mode;
        self
    }

    /// Sets the wall clock of the server's HLC (builder style; for tests).
    #[must_use]
    pub fn with_wall_clock(mut self, clock: Arc<dyn WallClock>) -> Self {
        self.wall_clock = Some(clock);
        self
    }
}

/// Starts the IoT Hub, with the dashboard's routes on its admin API server when it is on.
/// `web`: the dashboard (with the store's monitor) when it is on, and the credentials the
/// admin API's server asks for.
async fn start_hub(
    hub_config: crate::iothub::IotHubConfig,
    web: (
        Option<(crate::dashboard::DashboardConfig, crate::dashboard::Monitor)>,
        Option<Arc<crate::web::auth::WebAuth>>,
    ),
    host: &str,
    port: u16,
) -> Result<crate::iothub::IotHubServer, crate::iothub::IotHubError> {
    let (dashboard, auth) = web;
    let broker = (host.to_owned(), port);
    crate::iothub::IotHubServer::start_with_routes(
        hub_config,
        move |hub| match dashboard {
            Some((dashboard, monitor)) => {
                crate::dashboard::routes::router(monitor, Some(hub), dashboard.edit, broker)
            }
            None => axum::Router::new(),
        },
        auth,
    )
    .await
}

/// Parses `mqtt://host:port`, `tcp://host:port` or `host:port` (`[v6]:port` for IPv6).
///
/// ```
/// use mqstate_server::parse_broker_url;
///
/// assert_eq!(parse_broker_url("mqtt://localhost").unwrap(), ("localhost".into(), 1883));
/// assert_eq!(parse_broker_url("[::1]:1884").unwrap(), ("::1".into(), 1884));
/// assert!(parse_broker_url("mqtts://h:8883").is_err());
/// ```
pub fn parse_broker_url(url: &str) -> Result<(String, u16), ServerError> {
    let bad = |why: &str| ServerError::config(format!("broker URL {url:?}: {why}"));
    let rest = if let Some((scheme, rest)) = url.split_once("://") {
        if !matches!(scheme, "mqtt" | "tcp") {
            return Err(bad("only mqtt:// (plain TCP) is supported"));
        }
        rest
    } else {
        url
    };
    let rest = rest.trim_end_matches('/');
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
        (host, after.strip_prefix(':'))
    } else {
        match rest.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        }
    };
    if host.is_empty() || host.contains('/') {
        return Err(bad("no host"));
    }
    let port = match port {
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| bad("the port is not a number from 1 to 65535"))?,
        None => DEFAULT_PORT,
    };
    Ok((host.to_owned(), port))
}

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
    pub async fn start_with(config: ServerConfig) -> Result<LocalServer, ServerError> {
        config.reconnect.check()?;
        // The dashboard observes the store through the store's own observer trait.
        let monitor = config.dashboard.map(|_| crate::dashboard::Monitor::new());
        let handler = HandlerConfig {
            max_keys: config.max_keys,
            node_id: config.node_id.clone(),
            max_drift: config.max_drift,
            wall_clock: config.wall_clock.clone(),
            complete_connection_events: matches!(config.broker, BrokerChoice::Embedded),
            observer: monitor
                .clone()
                .map(|m| Arc::new(m) as Arc<dyn crate::statestore::observer::StoreObserver>),
            scan_limits: crate::statestore::scan::limits_for_packet(
                usize::try_from(config.max_packet_size).unwrap_or(usize::MAX),
            ),
        };
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
        // The address of the web surfaces (the hub's admin API, which carries the dashboard,
        // or the dashboard's own server).
        let web_ip = match (&config.iothub, &config.dashboard) {
            (Some(hub), _) => {
                config.security.check_iothub_bind(hub)?;
                hub.admin_port.map(|_| hub.bind)
            }
            (None, Some(dashboard)) => {
                let ip = dashboard.standalone_addr.map_or(config.bind, |a| a.ip());
                config.security.check_dashboard_bind(ip)?;
                Some(ip)
            }
            (None, None) => None,
        };
        let mut store_credentials = None;
        let mut access_control = None;
        let (broker, events, host, port, embedded) = match &config.broker {
            BrokerChoice::Embedded => {
                let security = &config.security;
                security.check_bind(config.bind)?;
                let mut broker_security = BrokerSecurity {
                    max_subscriptions_per_client: security.max_subscriptions_per_client,
                    ..BrokerSecurity::default()
                };
                // With TLS, the plain listener stays on loopback (the store connects there).
                let plain_ip = match &security.tls {
                    Some(tls) => {
                        broker_security.tls =
                            Some((tls.clone(), SocketAddr::new(config.bind, tls.port)));
                        IpAddr::V4(Ipv4Addr::LOCALHOST)
                    }
                    None => config.bind,
                };
                if security.authenticates() {
                    let password = crate::security::random_secret("the store's password")?;
                    let access = AccessControl::load(security, &password).await?;
                    let access = Arc::new(access);
                    access_control = Some(Arc::clone(&access));
                    broker_security.access = Some(access);
                    store_credentials = Some((crate::security::STORE_USER.to_owned(), password));
                } else if security.rules_file.is_some() {
                    return Err(ServerError::config(
                        "a rule file needs authentication (a password file or a SAT file)",
                    ));
                }
                let (tx, rx) = mpsc::unbounded_channel();
                let broker_config = EmbeddedBrokerConfig {
                    bind: SocketAddr::new(plain_ip, config.port),
                    max_packet_size: usize::try_from(config.max_packet_size).unwrap_or(usize::MAX),
                };
                let sessions = persistence
                    .as_ref()
                    .map(Persistence::broker_dir)
                    .transpose()?;
                let broker = EmbeddedBroker::start_full(
                    &broker_config,
                    &broker_security,
                    tx,
                    Some(service_config.client_id.clone()),
                    sessions.as_deref(),
                )
                .await?;
                let addr = broker.local_addr();
                // The store connects over loopback when the broker listens on every address.
                let connect_ip = if addr.ip().is_unspecified() {
                    match addr.ip() {
                        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
                    }
                } else {
                    addr.ip()
                };
                (
                    Some(broker),
                    Some(rx),
                    connect_ip.to_string(),
                    addr.port(),
                    true,
                )
            }
            BrokerChoice::External { host, port } => (None, None, host.clone(), *port, false),
        };
        // Whoever may not read a key over MQTT must not read it over HTTP either.
        let web_auth = match web_ip {
            Some(ip) if config.security.authenticates() || !ip.is_loopback() => {
                let token = match &config.security.web_token_file {
                    Some(path) => crate::web::auth::token_from_file(path)?,
                    None => crate::security::random_secret("the web access token")?,
                };
                Some(Arc::new(crate::web::auth::WebAuth::new(
                    token,
                    access_control,
                )))
            }
            _ => None,
        };
        service_config.host.clone_from(&host);
        service_config.port = port;
        // With an external broker, its own limit applies (see ServiceConfig::max_packet_size).
        service_config.max_packet_size = if embedded {
            config.max_packet_size
        } else {
            MQTT_MAX_PACKET_SIZE
        };
        service_config.handler = handler;
        service_config.dedup = config.dedup;
        service_config.reconnect = config.reconnect;
        service_config.connect_timeout = config.connect_timeout;
        service_config.trust_broker_client_id = embedded;
        service_config.disconnector = broker.as_ref().map(EmbeddedBroker::disconnector);
        service_config.confine_response_topics = store_credentials.is_some();
        service_config.credentials = store_credentials;
        #[cfg(feature = "client")]
        if let (false, Some(attach)) = (embedded, &config.attach) {
            apply_attach_options(&mut service_config, attach)?;
        }
        let tls_port = broker
            .as_ref()
            .and_then(EmbeddedBroker::tls_local_addr)
            .map(|a| a.port());
        service_config.watch_mosquitto_log = !embedded;
        service_config.persistence = persistence;
        let service = match Service::start(service_config, events).await {
            Ok(s) => s,
            Err(e) => {
                if let Some(b) = broker {
                    b.shutdown().await;
                }
                return Err(e);
            }
        };
        let iothub = match config.iothub {
            Some(mut hub_config) => {
                // With a data dir, the hub keeps its state there too (`iothub.redb`).
                if hub_config.data_dir.is_none() {
                    hub_config.data_dir.clone_from(&config.data_dir);
                }
                let web = (config.dashboard.zip(monitor.clone()), web_auth.clone());
                match start_hub(hub_config, web, &host, port).await {
                    Ok(hub) => Some(hub),
                    Err(e) => {
                        service.shutdown().await;
                        if let Some(b) = broker {
                            b.shutdown().await;
                        }
                        return Err(e.into());
                    }
                }
            }
            None => None,
        };
        let dashboard = match (&iothub, config.dashboard, monitor) {
            (None, Some(dashboard), Some(monitor)) => {
                let addr = dashboard
                    .standalone_addr
                    .unwrap_or_else(|| SocketAddr::new(config.bind, 0));
                let router = crate::dashboard::routes::router(
                    monitor,
                    None,
                    dashboard.edit,
                    (host.clone(), port),
                );
                match crate::dashboard::DashboardServer::start(addr, router, web_auth.clone()).await
                {
                    Ok(server) => Some(server),
                    Err(e) => {
                        service.shutdown().await;
                        if let Some(b) = broker {
                            b.shutdown().await;
                        }
                        return Err(e);
                    }
                }
            }
            _ => None,
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
    /// ([`crate::web::auth`]).
    pub fn web_token(&self) -> Option<&str> {
        self.web_auth
            .as_deref()
            .map(crate::web::auth::WebAuth::token)
    }

    /// The port of the embedded broker's TLS listener, when [`SecurityConfig::tls`] is set.
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

/// The store's connection to an external broker from the core client's options: TLS (the
/// core builds the rustls configuration), user name and password (or password file), SAT.
#[cfg(feature = "client")]
fn apply_attach_options(
    service: &mut ServiceConfig,
    options: &mqstate::ConnectOptions,
) -> Result<(), ServerError> {
    let client = |e: mqstate::Error| ServerError::config_caused("attaching to the broker", e);
    if let Some(tls) = &options.tls {
        service.tls = Some(tls.client_config().map_err(client)?);
    }
    if let Some(user) = &options.username {
        let password = options.current_password().map_err(client)?;
        service.credentials = Some((user.clone(), password.unwrap_or_default()));
    }
    service.sat = options.current_sat().map_err(client)?;
    if let Some(id) = &options.client_id {
        service.client_id.clone_from(id);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
