//! The settings of a [`LocalServer`](crate::LocalServer)(super::LocalServer): [`ServerConfig`], the broker it
//! uses ([`BrokerChoice`]) and the broker URLs it reads.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use mqstate::protocol::hlc::{DEFAULT_MAX_DRIFT, WallClock};

use crate::error::ServerError;
use crate::persist::PersistMode;
use crate::security::SecurityConfig;
use crate::statestore::dedup::DedupLimits;
use crate::statestore::handler::DEFAULT_NODE_ID;
use crate::statestore::reconnect::StoreReconnect;
use crate::statestore::service::DEFAULT_MAX_PACKET_SIZE;

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

/// Settings of a [`LocalServer`](crate::LocalServer). `ServerConfig::default()` is an embedded broker on
/// 127.0.0.1 with a free port chosen by the OS.
#[derive(Clone)]
pub struct ServerConfig {
    /// The embedded broker or an external one.
    pub broker: BrokerChoice,
    /// Address the embedded broker listens on (default 127.0.0.1).
    pub bind: IpAddr,
    /// Port of the embedded broker (0: a free port; see [`LocalServer::port`](crate::LocalServer::port)).
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
    /// [`crate::iothub`] and [`LocalServer::iothub`](crate::LocalServer::iothub).
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
    /// Deliver a KEYNOTIFY client's notifications even when it has not subscribed to its
    /// notification topic, as Azure IoT Operations' broker does (default `true`; the
    /// embedded broker only: an external broker routes by its own subscriptions). The
    /// official Go SDK needs it: it never subscribes. See docs/protocol.md section 6.1.
    pub implicit_notify: bool,
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
            .field("reconnect", &self.reconnect)
            .field("implicit_notify", &self.implicit_notify);
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
            implicit_notify: true,
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
