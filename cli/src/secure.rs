//! The security flags of `mqstate serve`: the embedded broker's TLS listener, its
//! authentication files and the rule file (see `docs/security.md`).

use std::path::PathBuf;

use clap::Args;
use mqstate_server::security::{DEFAULT_MAX_SUBSCRIPTIONS, SecurityConfig, TlsSettings};

/// The default port of the TLS listener (8883, the usual MQTT-over-TLS port, is the local
/// IoT Hub's device endpoint).
pub const DEFAULT_TLS_PORT: u16 = 8884;

/// Security flags of `mqstate serve`.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Security")]
pub struct SecurityArgs {
    /// TLS listener certificate chain (PEM; needs --tls-key). The TLS listener takes --bind
    /// and --tls-port; the plain listener (--port) then stays on 127.0.0.1.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        conflicts_with = "broker"
    )]
    pub tls_cert: Option<PathBuf>,

    /// Private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Require client certificates signed by this CA (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,

    /// Port of the TLS listener (0: any free port).
    #[arg(long, value_name = "PORT", default_value_t = DEFAULT_TLS_PORT, requires = "tls_cert")]
    pub tls_port: u16,

    /// Require a user name and password from this file of salted hashes (`mqstate passwd`
    /// writes it). Authenticated clients are confined to their own topics.
    #[arg(
        long = "password-file",
        id = "serve_password_file",
        value_name = "FILE",
        conflicts_with = "broker"
    )]
    pub password_file: Option<PathBuf>,

    /// Accept K8S-SAT enhanced authentication with the tokens listed in this file (one per
    /// line, optionally followed by a user name): a local stand-in for the cluster's token
    /// review.
    #[arg(
        long = "sat-file",
        id = "serve_sat_file",
        value_name = "FILE",
        conflicts_with = "broker"
    )]
    pub sat_file: Option<PathBuf>,

    /// Extra permissions beyond each client's own topics: lines of
    /// `user:NAME|client:PREFIX publish|subscribe|both FILTER` (needs authentication).
    #[arg(long, value_name = "FILE", conflicts_with = "broker")]
    pub rules_file: Option<PathBuf>,

    /// Allow --bind (or --iothub-bind) on a non-loopback address without TLS or without
    /// authentication: anyone who can reach the port can read and change every key.
    #[arg(long)]
    pub insecure: bool,

    /// Keep the access token of the dashboard and the IoT Hub admin API in this file (created,
    /// mode 0600, with a random token when missing) instead of a new one at each start. The
    /// token is asked for when authentication is on or they listen beyond loopback.
    #[arg(long, value_name = "FILE")]
    pub web_token_file: Option<PathBuf>,

    /// The most subscriptions one client may hold on the embedded broker; a SUBSCRIBE beyond
    /// it gets "quota exceeded" (0: no limit).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_SUBSCRIPTIONS)]
    pub max_subscriptions: usize,
}

impl SecurityArgs {
    /// The server's security settings for these flags.
    pub fn to_config(&self) -> SecurityConfig {
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsSettings {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca.clone(),
                port: self.tls_port,
            }),
            _ => None,
        };
        SecurityConfig {
            tls,
            password_file: self.password_file.clone(),
            sat_file: self.sat_file.clone(),
            rules_file: self.rules_file.clone(),
            insecure: self.insecure,
            web_token_file: self.web_token_file.clone(),
            max_subscriptions_per_client: self.max_subscriptions,
        }
    }
}
