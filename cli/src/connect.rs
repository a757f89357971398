//! The connection flags every client subcommand shares, and the one place that turns them
//! into the core's [`ConnectOptions`] and a connected [`Client`].
//!
//! Where the options start from, first match wins: `--from-env` (the `AIO_*` variables of
//! Azure IoT Operations), `--url`, the `MQSTATE_URL` variable, else `mqtt://127.0.0.1:1883`
//! (`mqstate serve`'s default). The other flags then override single fields.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use mqstate::{Client, ConnectOptions, TlsOptions};

use crate::duration::parse_duration;
use crate::exit::{Code, Failure};

/// The variable read as the broker URL when neither `--url` nor `--from-env` is given.
pub const URL_ENV: &str = "MQSTATE_URL";

/// How to reach the broker (shared by get, set, del, vdel, keys, watch, lock, elect and
/// bench).
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Connection")]
pub struct ConnectArgs {
    /// Broker URL: `mqtt://[user[:password]@]host[:port][?query]` or `mqtts://...` (TLS).
    /// Default: $MQSTATE_URL, else mqtt://127.0.0.1:1883.
    #[arg(long, value_name = "URL", conflicts_with = "from_env")]
    pub url: Option<String>,

    /// Broker host (overrides the URL's).
    #[arg(short = 'H', long, value_name = "HOST")]
    pub host: Option<String>,

    /// Broker port (overrides the URL's).
    #[arg(short = 'p', long, value_name = "PORT")]
    pub port: Option<u16>,

    /// Use TLS with the platform's trusted roots (implied by mqtts://, --ca-file, --cert).
    #[arg(long)]
    pub tls: bool,

    /// PEM file of the CA that signed the broker's certificate (turns TLS on).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,

    /// PEM client certificate chain for mutual TLS (needs --key; turns TLS on).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub cert: Option<PathBuf>,

    /// PEM private key of --cert.
    // Its id differs from its name: `key` is the positional KEY of get, set, ...
    #[arg(long = "key", id = "tls_key", value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,

    /// MQTT user name.
    #[arg(long, value_name = "NAME")]
    pub username: Option<String>,

    /// File holding the MQTT password (read at every connection).
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,

    /// Kubernetes service account token file (MQTT5 enhanced authentication K8S-SAT).
    #[arg(long, value_name = "FILE")]
    pub sat_file: Option<PathBuf>,

    /// MQTT client id (default: a random mqstate-... id).
    #[arg(long, value_name = "ID")]
    pub client_id: Option<String>,

    /// How long to wait for the connection and for each answer (e.g. 500ms, 10s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    pub timeout: Duration,

    /// Read the connection from the Azure IoT Operations variables (AIO_BROKER_HOSTNAME,
    /// AIO_BROKER_TCP_PORT, AIO_MQTT_USE_TLS, AIO_TLS_CA_FILE, AIO_SAT_FILE, ...).
    #[arg(long)]
    pub from_env: bool,

    /// Log the client's events to stderr at this level (error, warn, info, debug, trace) or
    /// with a full tracing filter; at info, each lost connection, its cause and the delay
    /// before reconnecting. Default: RUST_LOG, else nothing.
    #[arg(long, value_name = "LEVEL")]
    pub log: Option<String>,
}

impl ConnectArgs {
    /// The core's options for these flags; `url_env` is the value of `MQSTATE_URL`.
    /// A malformed URL or environment is a usage failure that says which.
    pub fn options(&self, url_env: Option<String>) -> Result<ConnectOptions, Failure> {
        let mut options = if self.from_env {
            ConnectOptions::from_env().map_err(|e| Failure::usage(format!("--from-env: {e}")))?
        } else if let Some(url) = &self.url {
            ConnectOptions::from_url(url).map_err(|e| Failure::usage(format!("--url: {e}")))?
        } else if let Some(url) = url_env.filter(|u| !u.is_empty()) {
            ConnectOptions::from_url(&url)
                .map_err(|e| Failure::usage(format!("${URL_ENV}: {e}")))?
        } else {
            ConnectOptions::default()
        };
        if let Some(host) = &self.host {
            options.host.clone_from(host);
        }
        if let Some(port) = self.port {
            options.port = port;
        }
        if self.tls || self.ca_file.is_some() || self.cert.is_some() {
            let tls = options.tls.get_or_insert_with(TlsOptions::default);
            if let Some(ca) = &self.ca_file {
                tls.ca_file = Some(ca.clone());
            }
            if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
                tls.client_cert_file = Some(cert.clone());
                tls.client_key_file = Some(key.clone());
            }
        }
        if let Some(user) = &self.username {
            options.username = Some(user.clone());
        }
        if let Some(file) = &self.password_file {
            options.password_file = Some(file.clone());
        }
        if let Some(file) = &self.sat_file {
            options.sat_file = Some(file.clone());
        }
        if let Some(id) = &self.client_id {
            options.client_id = Some(id.clone());
        }
        if self.timeout.is_zero() {
            return Err(Failure::usage("--timeout must be greater than zero"));
        }
        options.request_timeout = self.timeout;
        // The core wants at least a second for one connection attempt.
        options.connect_timeout = self.timeout.max(Duration::from_secs(1));
        Ok(options)
    }

    /// Connects with these flags (reading `MQSTATE_URL` from the environment). The first
    /// connection is bounded by `--timeout` (at least 1 s): exit code 4 when it is refused,
    /// 5 when nothing answers in time.
    pub async fn connect(&self) -> Result<Client, Failure> {
        crate::logging::init(self.log.as_deref(), None).map_err(Failure::usage)?;
        let options = self.options(std::env::var(URL_ENV).ok())?;
        let target = format!("{}:{}", options.host, options.port);
        // A margin over the core's own bound, which reports a slow CONNACK itself.
        let bound = options.connect_timeout + Duration::from_secs(1);
        match tokio::time::timeout(bound, Client::connect(options)).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(Failure::from_error(&format!("connecting to {target}"), &e)),
            Err(_) => Err(Failure::new(
                Code::Timeout,
                format!(
                    "connecting to {target}: no answer within {}",
                    humantime::format_duration(bound)
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> ConnectArgs {
        ConnectArgs {
            timeout: Duration::from_secs(10),
            ..ConnectArgs::default()
        }
    }

    #[test]
    fn default_is_the_local_server() {
        let o = args().options(None).unwrap();
        assert_eq!((o.host.as_str(), o.port), ("127.0.0.1", 1883));
        assert!(o.tls.is_none());
    }

    #[test]
    fn url_env_is_used_when_no_url_is_given() {
        let o = args()
            .options(Some("mqtt://broker.local:1999".into()))
            .unwrap();
        assert_eq!((o.host.as_str(), o.port), ("broker.local", 1999));
        let mut a = args();
        a.url = Some("mqtt://other:1".into());
        let o = a.options(Some("mqtt://broker.local:1999".into())).unwrap();
        assert_eq!((o.host.as_str(), o.port), ("other", 1));
    }

    #[test]
    fn flags_override_the_url() {
        let mut a = args();
        a.url = Some("mqtt://u@h:1?client_id=x".into());
        a.port = Some(2);
        a.ca_file = Some("ca.pem".into());
        a.client_id = Some("y".into());
        a.password_file = Some("pw".into());
        a.sat_file = Some("sat".into());
        a.timeout = Duration::from_millis(300);
        let o = a.options(None).unwrap();
        assert_eq!((o.host.as_str(), o.port), ("h", 2));
        assert_eq!(o.client_id.as_deref(), Some("y"));
        assert_eq!(o.username.as_deref(), Some("u"));
        assert_eq!(o.tls.and_then(|t| t.ca_file), Some(PathBuf::from("ca.pem")));
        assert_eq!(o.request_timeout, Duration::from_millis(300));
        assert_eq!(o.connect_timeout, Duration::from_secs(1));
        assert!(o.password_file.is_some() && o.sat_file.is_some());
    }

    #[test]
    fn a_bad_url_is_a_usage_error_naming_it() {
        let mut a = args();
        a.url = Some("http://h".into());
        let f = a.options(None).unwrap_err();
        assert_eq!(f.code, Code::Usage);
        assert!(f.message.starts_with("--url: "), "{}", f.message);
        let f = args().options(Some("nope".into())).unwrap_err();
        assert!(f.message.starts_with("$MQSTATE_URL: "), "{}", f.message);
    }
}
