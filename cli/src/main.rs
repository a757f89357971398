//! The `mqstate` command: `mqstate serve` runs a local state store (an embedded MQTT5 broker
//! plus the store, or the store attached to an existing broker). More subcommands join later
//! (bench, get, set, ...).

use std::net::IpAddr;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use mqstate_server::persist::PersistMode;
use mqstate_server::{
    BrokerChoice, DEFAULT_MAX_PACKET_SIZE, DEFAULT_PORT, LocalServer, ServerConfig,
    parse_broker_url,
};
use tracing_subscriber::EnvFilter;

/// Tools for the MQTT5 state store protocol of Azure IoT Operations.
#[derive(Debug, Parser)]
#[command(name = "mqstate", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a local state store: an embedded MQTT5 broker on 127.0.0.1:1883 plus the store
    /// (or, with --broker, the store alone attached to an existing broker).
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Port of the embedded broker (0: any free port; the chosen one is logged).
    #[arg(long, default_value_t = DEFAULT_PORT)]
    port: u16,

    /// Address the embedded broker listens on (0.0.0.0 to accept other machines).
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,

    /// Attach the store to this existing broker instead of starting the embedded one
    /// (mqtt://host:port; plain TCP, anonymous). With Mosquitto, add `log_dest topic` to its
    /// configuration so that the store sees disconnects and drops their KEYNOTIFY
    /// registrations.
    #[arg(long, value_name = "URL", conflicts_with_all = ["port", "bind", "max_packet_size"])]
    broker: Option<String>,

    /// Key quota: a SET that would create more keys fails with "the quota has been exceeded"
    /// (default: no limit).
    #[arg(long, value_name = "N")]
    max_keys: Option<usize>,

    /// Largest MQTT packet in bytes, for the embedded broker and the store (bounds the size
    /// of keys and values; with --broker, that broker's own limit applies).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_PACKET_SIZE,
          value_parser = clap::value_parser!(u32).range(1024..))]
    max_packet_size: u32,

    /// Keep keys (and the embedded broker's sessions) in this directory so that they survive
    /// a restart or a crash; created if missing. A write that must persist is answered only
    /// once it is on disk. Without it, everything stays in memory.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<std::path::PathBuf>,

    /// Which keys --data-dir keeps: "all" (every key) or "requested" (only keys SET with
    /// persist, the `aio-persistence: true` user property).
    #[arg(long, value_name = "MODE", default_value = "all", requires = "data_dir",
          value_parser = clap::value_parser!(PersistMode))]
    persist: PersistMode,

    /// Log level (error, warn, info, debug, trace; the embedded broker's own logs stay at warn)
    /// or a full tracing filter such as "debug,mqtt5=info". Default: RUST_LOG, else info.
    #[arg(long, value_name = "LEVEL")]
    log: Option<String>,
}

/// The filter used when neither --log nor RUST_LOG is given.
const DEFAULT_LOG: &str = "info";

/// A bare level applies to mqstate; the embedded broker's own logs (one line per client
/// connection at info) stay at warn unless a full filter asks for them.
fn log_filter(spec: &str) -> String {
    if spec.contains('=') || spec.contains(',') {
        spec.to_owned()
    } else {
        format!("{spec},mqtt5=warn")
    }
}

fn init_logging(filter: Option<&str>) -> Result<(), String> {
    let filter = match filter {
        Some(f) => EnvFilter::try_new(log_filter(f)).map_err(|e| format!("--log {f:?}: {e}"))?,
        None => EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| EnvFilter::new(log_filter(DEFAULT_LOG))),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    Ok(())
}

async fn serve(args: ServeArgs) -> Result<(), String> {
    let mut config = ServerConfig::default()
        .with_port(args.port)
        .with_max_keys(args.max_keys)
        .with_max_packet_size(args.max_packet_size);
    config.bind = args.bind;
    if let Some(dir) = &args.data_dir {
        config = config.with_data_dir(dir, args.persist);
    }
    if let Some(url) = &args.broker {
        let (host, port) = parse_broker_url(url).map_err(|e| e.to_string())?;
        config.broker = BrokerChoice::External { host, port };
    }
    let server = LocalServer::start_with(config)
        .await
        .map_err(|e| e.to_string())?;
    if server.is_embedded() {
        tracing::info!(
            url = %server.url(),
            "mqstate serve: embedded MQTT5 broker and state store ready"
        );
    } else {
        tracing::info!(
            url = %server.url(),
            "mqstate serve: state store attached to the external broker"
        );
    }
    if let Err(e) = tokio::signal::ctrl_c().await {
        tracing::error!(error = %e, "cannot wait for Ctrl-C; stopping");
    }
    tracing::info!("shutting down");
    server.shutdown().await;
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => init_logging(args.log.as_deref()).and_then(|()| {
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the runtime: {e}"))?
                .block_on(serve(args))
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mqstate: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_defaults_and_flags() {
        let cli = Cli::try_parse_from(["mqstate", "serve"]).unwrap();
        let Command::Serve(args) = cli.command;
        assert_eq!(args.port, 1883);
        assert_eq!(args.bind.to_string(), "127.0.0.1");
        assert!(args.broker.is_none());
        assert_eq!(args.max_packet_size, DEFAULT_MAX_PACKET_SIZE);

        let cli = Cli::try_parse_from([
            "mqstate",
            "serve",
            "--port",
            "0",
            "--bind",
            "0.0.0.0",
            "--max-keys",
            "10",
            "--max-packet-size",
            "2048",
            "--log",
            "debug",
        ])
        .unwrap();
        let Command::Serve(args) = cli.command;
        assert_eq!(
            (args.port, args.max_keys, args.max_packet_size),
            (0, Some(10), 2048)
        );
        assert!(Cli::try_parse_from(["mqstate", "serve", "--max-packet-size", "10"]).is_err());
        let cli = Cli::try_parse_from([
            "mqstate",
            "serve",
            "--data-dir",
            "/tmp/d",
            "--persist",
            "requested",
        ])
        .unwrap();
        let Command::Serve(args) = cli.command;
        assert_eq!(
            args.data_dir.as_deref(),
            Some(std::path::Path::new("/tmp/d"))
        );
        assert_eq!(args.persist, PersistMode::Requested);
        // --persist needs --data-dir; unknown modes are refused.
        assert!(Cli::try_parse_from(["mqstate", "serve", "--persist", "all"]).is_err());
        assert!(
            Cli::try_parse_from(["mqstate", "serve", "--data-dir", "d", "--persist", "x"]).is_err()
        );
        assert!(
            Cli::try_parse_from(["mqstate", "serve", "--broker", "mqtt://h:1", "--port", "5"])
                .is_err()
        );
    }
}
