//! `mqstate serve`: a local state store (an embedded MQTT5 broker plus the store, or the
//! store attached to an existing broker), until Ctrl-C.

use std::net::IpAddr;

use crate::duration::parse_duration;
use clap::Args;
use mqstate_server::persist::PersistMode;
use mqstate_server::statestore::reconnect::StoreReconnect;
use mqstate_server::{
    BrokerChoice, DEFAULT_MAX_PACKET_SIZE, DEFAULT_PORT, LocalServer, ServerConfig,
    parse_broker_url,
};

/// The flags of `mqstate serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Port of the embedded broker (0: any free port; the chosen one is logged).
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,

    /// Address the embedded broker listens on (0.0.0.0 to accept other machines).
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,

    /// Attach the store to this existing broker instead of starting the embedded one:
    /// mqtt://host:port, or mqtts://user@host:port?ca_file=CA.pem&password_file=PW
    /// (also cert_file, key_file, sat_file; the URL form of the client commands' --url). With Mosquitto, add `log_dest topic` to its
    /// configuration so that the store sees disconnects and drops their KEYNOTIFY
    /// registrations.
    #[arg(long, value_name = "URL", conflicts_with_all = ["port", "bind", "max_packet_size"])]
    pub broker: Option<String>,

    /// Longest wait between two attempts of the store to reconnect to its broker (with
    /// --broker: after a broker restart). After every loss the store tries again within 50 ms,
    /// doubling the wait up to this cap (with jitter), and never waits longer because of
    /// earlier losses; so it answers again within about this long of the broker being back.
    /// From 10ms to 1h. [default: 500ms]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub reconnect_max_delay: Option<std::time::Duration>,

    /// Key quota: a SET that would create more keys fails with "the quota has been exceeded"
    /// (default: no limit).
    #[arg(long, value_name = "N")]
    pub max_keys: Option<usize>,

    /// Largest MQTT packet in bytes, for the embedded broker and the store (bounds the size
    /// of keys and values; with --broker, that broker's own limit applies).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_PACKET_SIZE,
          value_parser = clap::value_parser!(u32).range(1024..))]
    pub max_packet_size: u32,

    /// Keep keys (and the embedded broker's sessions) in this directory so that they survive
    /// a restart or a crash; created if missing. A write that must persist is answered only
    /// once it is on disk. Without it, everything stays in memory.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<std::path::PathBuf>,

    /// Which keys --data-dir keeps: "all" (every key) or "requested" (only keys SET with
    /// persist, the `aio-persistence: true` user property).
    #[arg(long, value_name = "MODE", default_value = "all", requires = "data_dir",
          value_parser = clap::value_parser!(PersistMode))]
    pub persist: PersistMode,

    /// Log level (error, warn, info, debug, trace; the embedded broker's own logs stay at warn)
    /// or a full tracing filter such as "debug,mqtt5=info". Default: RUST_LOG, else info.
    #[arg(long, value_name = "LEVEL")]
    pub log: Option<String>,

    /// Deliver KEYNOTIFY notifications only to clients that subscribed to their notification
    /// topic. By default the embedded broker also delivers them to a client that has not, as
    /// Azure IoT Operations' broker does (the official Go SDK never subscribes); with --broker
    /// that broker's own subscriptions decide either way.
    #[arg(long)]
    pub no_implicit_notify: bool,

    #[command(flatten)]
    pub iothub: crate::iothub::ServeHubArgs,

    /// Do not serve the web dashboard (by default it is at http://127.0.0.1:8880/dashboard/,
    /// on the IoT Hub admin API's server; with --no-iothub it keeps that address on its own).
    #[arg(long)]
    pub no_dashboard: bool,

    /// Let the dashboard set and delete keys, send C2D messages and purge queues (it is
    /// read-only without this flag).
    #[arg(long, conflicts_with = "no_dashboard")]
    pub dashboard_edit: bool,

    #[command(flatten)]
    pub security: crate::secure::SecurityArgs,
}

/// The level used when neither --log nor RUST_LOG is given.
const DEFAULT_LOG: &str = "info";

pub async fn serve(args: ServeArgs) -> Result<(), String> {
    let mut config = ServerConfig::default()
        .with_port(args.port)
        .with_max_keys(args.max_keys)
        .with_max_packet_size(args.max_packet_size);
    config.bind = args.bind;
    config.implicit_notify = !args.no_implicit_notify;
    config.iothub = args.iothub.to_config();
    config.dashboard = (!args.no_dashboard).then_some(mqstate_server::dashboard::DashboardConfig {
        edit: args.dashboard_edit,
        // Without the hub, the dashboard keeps the admin API's address on its own server.
        standalone_addr: Some(std::net::SocketAddr::new(
            args.iothub.iothub_bind,
            args.iothub.iothub_admin_port,
        )),
    });
    if let Some(dir) = &args.data_dir {
        config = config.with_data_dir(dir, args.persist);
    }
    config.security = args.security.to_config();
    if let Some(max_delay) = args.reconnect_max_delay {
        config.reconnect = StoreReconnect::with_max_delay(max_delay)
            .map_err(|e| format!("--reconnect-max-delay: {e}"))?;
    }
    if let Some(url) = &args.broker {
        if url.starts_with("mqtt://") || url.starts_with("mqtts://") {
            // The core client's URL reader: TLS, credentials and their files.
            let attach = ServerConfig::attach(url).map_err(|e| e.to_string())?;
            config.broker = attach.broker;
            config.attach = attach.attach;
        } else {
            let (host, port) = parse_broker_url(url).map_err(|e| e.to_string())?;
            config.broker = BrokerChoice::External { host, port };
        }
    }
    let server = LocalServer::start_with(config)
        .await
        .map_err(|e| crate::iothub::explain_start_error(&e))?;
    if server.is_embedded() {
        tracing::info!(
            url = %server.url(),
            "mqstate serve: embedded MQTT5 broker and state store ready"
        );
        if let Some(port) = server.tls_port() {
            tracing::info!(port, "mqstate serve: TLS listener ready");
        }
    } else {
        tracing::info!(
            url = %server.url(),
            "mqstate serve: state store attached to the external broker"
        );
    }
    if let Some(hub) = server.iothub() {
        crate::iothub::announce(&hub, &args.iothub)?;
    }
    if let Some(addr) = server.dashboard_addr() {
        tracing::info!(
            url = %format!("http://{addr}/dashboard/"),
            edit = args.dashboard_edit,
            "mqstate serve: dashboard ready"
        );
    }
    if let Some(token) = server.web_token() {
        // Printed so that its operator can log in; whoever reads this log can too
        // (docs/security.md, "The web surfaces").
        tracing::info!(
            token,
            "mqstate serve: the dashboard and the admin API ask for credentials: this access \
             token (at /login, or 'Authorization: Bearer TOKEN'; MQSTATE_WEB_TOKEN for \
             `mqstate iothub`) or a user of the password file"
        );
    }
    if let Err(e) = tokio::signal::ctrl_c().await {
        tracing::error!(error = %e, "cannot wait for Ctrl-C; stopping");
    }
    tracing::info!("shutting down");
    server.shutdown().await;
    Ok(())
}

/// Runs `mqstate serve` to the end: logging, a runtime, the server until Ctrl-C.
pub fn run(args: ServeArgs) -> Result<(), String> {
    crate::logging::init(args.log.as_deref(), Some(DEFAULT_LOG))?;
    if args.data_dir.is_some() {
        // Before the runtime: no other thread exists yet that could be creating a file.
        keep_created_files_private();
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?
        .block_on(serve(args))
}

/// Adds 077 to the process's umask, so that every file and directory this server creates is
/// private to its user (like PostgreSQL's server). The store's and the hub's files in the
/// data dir are created 0600 whatever the umask, but the embedded broker's session storage
/// (`DATA_DIR/broker/`: queued, in-flight and retained messages) creates its files with the
/// umask's modes. Also affects `--iothub-ca-out` (then 0600).
fn keep_created_files_private() {
    // SAFETY: umask(2) takes and returns a plain integer, cannot fail and touches no memory.
    let inherited = unsafe { libc::umask(0o077) };
    let private = inherited | 0o077;
    // SAFETY: as above.
    unsafe { libc::umask(private) };
    if private != inherited {
        tracing::info!(
            "mqstate serve: umask {inherited:03o} -> {private:03o}: the files this server creates \
             are readable by its user only"
        );
    }
}
