//! The steps of [`LocalServer::start_with`](super::LocalServer::start_with), in the order it
//! takes them: where the web surfaces listen, the embedded broker with its security (TLS,
//! access control, the admission gate, the session dir), the credentials of the web
//! surfaces, the store's connection settings, then the IoT Hub or the dashboard's own server.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::config::{BrokerChoice, ServerConfig};
use crate::broker::{BrokerEvent, BrokerSecurity, EmbeddedBroker, EmbeddedBrokerConfig};
use crate::error::ServerError;
use crate::persist::Persistence;
use crate::security::AccessControl;
use crate::statestore::handler::HandlerConfig;
use crate::statestore::service::{MQTT_MAX_PACKET_SIZE, ServiceConfig};
use crate::web::auth::WebAuth;

/// The address of the web surfaces (the hub's admin API, which carries the dashboard, or the
/// dashboard's own server), checked against the security settings; `None`: none listens.
pub(super) fn web_ip(config: &ServerConfig) -> Result<Option<IpAddr>, ServerError> {
    Ok(match (&config.iothub, &config.dashboard) {
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
    })
}

/// The embedded broker, started, and what the store needs to connect to it.
pub(super) struct EmbeddedStart {
    pub(super) broker: EmbeddedBroker,
    /// Its connection events, for the store.
    pub(super) events: mpsc::UnboundedReceiver<BrokerEvent>,
    /// Where the store connects (loopback when the broker listens on every address).
    pub(super) host: String,
    pub(super) port: u16,
    /// The store's own user and password, when the broker authenticates.
    pub(super) credentials: Option<(String, String)>,
    /// The broker's access control, which the web surfaces' logins use too.
    pub(super) access_control: Option<Arc<AccessControl>>,
}

/// Starts the embedded broker with the security settings of `config`, its sessions in the
/// data dir when there is one, holding every client but `store_client_id` until the store
/// has subscribed.
pub(super) async fn embedded_broker(
    config: &ServerConfig,
    persistence: Option<&Persistence>,
    store_client_id: &str,
) -> Result<EmbeddedStart, ServerError> {
    let security = &config.security;
    security.check_bind(config.bind)?;
    let mut broker_security = BrokerSecurity {
        max_subscriptions_per_client: security.max_subscriptions_per_client,
        ..BrokerSecurity::default()
    };
    // With TLS, the plain listener stays on loopback (the store connects there).
    let plain_ip = match &security.tls {
        Some(tls) => {
            broker_security.tls = Some((tls.clone(), SocketAddr::new(config.bind, tls.port)));
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        }
        None => config.bind,
    };
    let mut credentials = None;
    let mut access_control = None;
    if security.authenticates() {
        let password = crate::security::random_secret("the store's password")?;
        let access = Arc::new(AccessControl::load(security, &password).await?);
        access_control = Some(Arc::clone(&access));
        broker_security.access = Some(access);
        credentials = Some((crate::security::STORE_USER.to_owned(), password));
    } else if security.rules_file.is_some() {
        return Err(ServerError::config(
            "a rule file needs authentication (a password file or a SAT file)",
        ));
    }
    let (tx, events) = mpsc::unbounded_channel();
    let broker_config = EmbeddedBrokerConfig {
        bind: SocketAddr::new(plain_ip, config.port),
        max_packet_size: usize::try_from(config.max_packet_size).unwrap_or(usize::MAX),
    };
    let sessions = persistence.map(Persistence::broker_dir).transpose()?;
    let broker = EmbeddedBroker::start_full(
        &broker_config,
        &broker_security,
        tx,
        Some(store_client_id.to_owned()),
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
    Ok(EmbeddedStart {
        broker,
        events,
        host: connect_ip.to_string(),
        port: addr.port(),
        credentials,
        access_control,
    })
}

/// The credentials the web surfaces ask for: when the broker authenticates its clients (whoever
/// may not read a key over MQTT must not read it over HTTP either) or they listen beyond
/// loopback.
pub(super) fn web_auth(
    config: &ServerConfig,
    web_ip: Option<IpAddr>,
    access_control: Option<Arc<AccessControl>>,
) -> Result<Option<Arc<WebAuth>>, ServerError> {
    match web_ip {
        Some(ip) if config.security.authenticates() || !ip.is_loopback() => {
            let token = match &config.security.web_token_file {
                Some(path) => crate::web::auth::token_from_file(path)?,
                None => crate::security::random_secret("the web access token")?,
            };
            Ok(Some(Arc::new(WebAuth::new(token, access_control))))
        }
        _ => Ok(None),
    }
}

/// Fills in the store's settings: its handler (with the dashboard's `monitor` as its
/// observer), the broker at `broker`, the embedded broker's trust and disconnector, the
/// store's credentials, and attach mode's TLS and credentials.
pub(super) fn configure_service(
    service_config: &mut ServiceConfig,
    config: &ServerConfig,
    monitor: Option<crate::dashboard::Monitor>,
    broker: (&str, u16),
    embedded: Option<&EmbeddedBroker>,
    store_credentials: Option<(String, String)>,
) -> Result<(), ServerError> {
    let is_embedded = matches!(config.broker, BrokerChoice::Embedded);
    service_config.handler = HandlerConfig {
        max_keys: config.max_keys,
        node_id: config.node_id.clone(),
        max_drift: config.max_drift,
        wall_clock: config.wall_clock.clone(),
        complete_connection_events: is_embedded,
        observer: monitor
            .map(|m| Arc::new(m) as Arc<dyn crate::statestore::observer::StoreObserver>),
        scan_limits: crate::statestore::scan::limits_for_packet(
            usize::try_from(config.max_packet_size).unwrap_or(usize::MAX),
        ),
    };
    service_config.host = broker.0.to_owned();
    service_config.port = broker.1;
    // With an external broker, its own limit applies (see ServiceConfig::max_packet_size).
    service_config.max_packet_size = if is_embedded {
        config.max_packet_size
    } else {
        MQTT_MAX_PACKET_SIZE
    };
    service_config.dedup = config.dedup;
    service_config.reconnect = config.reconnect;
    service_config.connect_timeout = config.connect_timeout;
    service_config.trust_broker_client_id = is_embedded;
    service_config.disconnector = embedded.map(EmbeddedBroker::disconnector);
    // Attach mode cannot: only the embedded broker's router is ours to add a subscription to
    // (docs/protocol.md section 6.1).
    service_config.implicit_notify = embedded
        .filter(|_| config.implicit_notify)
        .map(EmbeddedBroker::implicit_notify);
    service_config.confine_response_topics = store_credentials.is_some();
    service_config.credentials = store_credentials;
    #[cfg(feature = "client")]
    if let (false, Some(attach)) = (is_embedded, &config.attach) {
        apply_attach_options(service_config, attach)?;
    }
    service_config.watch_mosquitto_log = !is_embedded;
    Ok(())
}

/// Starts the web surfaces: the IoT Hub (`hub_config`; with the dashboard's routes on its
/// admin API server when the dashboard is on), or else the dashboard's own server.
pub(super) async fn web_surfaces(
    config: &ServerConfig,
    hub_config: Option<crate::iothub::IotHubConfig>,
    monitor: Option<crate::dashboard::Monitor>,
    web_auth: Option<Arc<WebAuth>>,
    broker: (&str, u16),
) -> Result<
    (
        Option<crate::iothub::IotHubServer>,
        Option<crate::dashboard::DashboardServer>,
    ),
    ServerError,
> {
    let (host, port) = broker;
    if let Some(mut hub_config) = hub_config {
        // With a data dir, the hub keeps its state there too (`iothub.redb`).
        if hub_config.data_dir.is_none() {
            hub_config.data_dir.clone_from(&config.data_dir);
        }
        let web = (config.dashboard.zip(monitor), web_auth);
        let hub = start_hub(hub_config, web, host, port).await?;
        return Ok((Some(hub), None));
    }
    let (Some(dashboard), Some(monitor)) = (config.dashboard, monitor) else {
        return Ok((None, None));
    };
    let addr = dashboard
        .standalone_addr
        .unwrap_or_else(|| SocketAddr::new(config.bind, 0));
    let router =
        crate::dashboard::routes::router(monitor, None, dashboard.edit, (host.to_owned(), port));
    let server = crate::dashboard::DashboardServer::start(addr, router, web_auth).await?;
    Ok((None, Some(server)))
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
