//! Security of the embedded broker: a TLS listener, authentication (a password file of
//! salted argon2 hashes, K8S-SAT tokens from a file of accepted tokens) and authorization
//! (each client confined to the request topic and its own `clients/{client id}/...` topics,
//! plus a rule file). See `docs/security.md` for the threat model.
//!
//! The `mqtt5` broker does the TLS (its own listener, optional client certificates) and calls
//! an [`mqtt5::broker::AuthProvider`] for every CONNECT, PUBLISH and SUBSCRIBE; this module
//! supplies that provider ([`AccessControl`]) and the files it reads.
//!
//! ```
//! use mqstate_server::security::SecurityConfig;
//!
//! // The default: no TLS, anonymous, unconfined (fine on loopback only).
//! let s = SecurityConfig::default();
//! assert!(!s.authenticates());
//! assert!(s.check_bind("127.0.0.1".parse().unwrap()).is_ok());
//! assert!(s.check_bind("0.0.0.0".parse().unwrap()).is_err());
//! ```

mod error;
mod passwd;
pub(crate) mod provider;
mod rules;
mod tokens;

use std::net::IpAddr;
use std::path::PathBuf;

pub use error::SecurityError;
#[cfg(unix)]
pub(crate) use passwd::is_loose;
pub use passwd::set_password;
pub(crate) use passwd::write_private_file;
pub(crate) use passwd::{hash_password, loose_permissions};
pub use provider::{AccessControl, STORE_USER};

/// The embedded broker's TLS listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// The server's certificate chain (PEM).
    pub cert: PathBuf,
    /// The server's private key (PEM).
    pub key: PathBuf,
    /// CA certificates (PEM) that client certificates must chain to; when set, a client
    /// without a valid certificate is refused during the TLS handshake.
    pub client_ca: Option<PathBuf>,
    /// Port of the TLS listener (0: a free port; see `LocalServer::tls_port`).
    pub port: u16,
}

/// The most subscriptions one client of the embedded broker may hold, by default.
pub const DEFAULT_MAX_SUBSCRIPTIONS: usize = 1_000;

/// How the embedded broker is secured. The default is open: no TLS, anonymous, unconfined,
/// with [`DEFAULT_MAX_SUBSCRIPTIONS`] subscriptions per client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityConfig {
    /// A TLS listener on the configured bind address; the plain listener then moves to
    /// 127.0.0.1 (the store itself connects there).
    pub tls: Option<TlsSettings>,
    /// `user:argon2-hash` lines (written by `mqstate passwd`); when set, clients must give a
    /// user name and password (or a K8S-SAT token).
    pub password_file: Option<PathBuf>,
    /// Accepted K8S-SAT tokens, one per line (optionally followed by a user name); when set,
    /// clients may authenticate with the `K8S-SAT` enhanced authentication method.
    pub sat_file: Option<PathBuf>,
    /// Extra permissions beyond the client's own topics (a rule file: docs/security.md).
    pub rules_file: Option<PathBuf>,
    /// Allow a non-loopback bind without TLS or without authentication.
    pub insecure: bool,
    /// Where the web surfaces' access token is kept (`--web-token-file`; created with a
    /// random token when missing). `None`: a new random token at each start
    /// (docs/security.md, "The web surfaces").
    pub web_token_file: Option<PathBuf>,
    /// The most subscriptions one client may hold (0: no limit). A SUBSCRIBE beyond it is
    /// refused with the reason code "quota exceeded" for each filter over the limit: every
    /// subscription costs the broker's router for every publish, so one client must not be
    /// able to slow every other (docs/security.md, "Limits").
    pub max_subscriptions_per_client: usize,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            tls: None,
            password_file: None,
            sat_file: None,
            rules_file: None,
            insecure: false,
            web_token_file: None,
            max_subscriptions_per_client: DEFAULT_MAX_SUBSCRIPTIONS,
        }
    }
}

impl SecurityConfig {
    /// Whether clients must authenticate (a password file or a SAT file is set). Clients are
    /// then also confined to their own topics.
    pub fn authenticates(&self) -> bool {
        self.password_file.is_some() || self.sat_file.is_some()
    }

    /// Refuses a non-loopback `bind` unless there is TLS and authentication, or `insecure`.
    pub fn check_bind(&self, bind: IpAddr) -> Result<(), SecurityError> {
        if bind.is_loopback() || self.insecure {
            return Ok(());
        }
        let mut missing = Vec::new();
        if self.tls.is_none() {
            missing.push("TLS (--tls-cert/--tls-key)");
        }
        if !self.authenticates() {
            missing.push("authentication (--password-file or --sat-file)");
        }
        if missing.is_empty() {
            return Ok(());
        }
        Err(SecurityError::config(format!(
            "refusing to listen on {bind} without {}: anyone on the network could read and \
             change every key and read other clients' responses; add them, or pass --insecure \
             to accept that",
            missing.join(" and ")
        )))
    }
}

/// A random secret, `what` it is for naming it in the error: 32 bytes from the OS, base64url
/// (the store's own password, the web surfaces' access token and session ids).
pub(crate) fn random_secret(what: &str) -> Result<String, SecurityError> {
    use base64::Engine as _;
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| SecurityError::NoRandomness {
            what: what.to_owned(),
        })?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

impl SecurityConfig {
    /// Refuses a local IoT Hub on a non-loopback address unless `insecure`: its admin API
    /// (and the dashboard on the same server) speak plain HTTP, so the access token they ask
    /// for there (`web::auth`), device keys and key values would cross the network
    /// unencrypted, even when the device endpoint has TLS.
    pub fn check_iothub_bind(
        &self,
        hub: &crate::iothub::IotHubConfig,
    ) -> Result<(), SecurityError> {
        if hub.bind.is_loopback() || self.insecure {
            return Ok(());
        }
        Err(SecurityError::config(format!(
            "refusing to run the local IoT Hub on {}: its admin API speaks plain HTTP, so its \
             access token, device keys and key values would cross the network unencrypted; \
             bind it to 127.0.0.1 (and publish it through a TLS reverse proxy), pass \
             --no-iothub, or pass --insecure to accept that (it still asks for the token)",
            hub.bind
        )))
    }

    /// Refuses the dashboard's own web server (the one it runs when the IoT Hub is off) on a
    /// non-loopback address unless `insecure`: it speaks plain HTTP, so its access token and
    /// every key and value would cross the network unencrypted. (With the hub on, the dashboard shares the admin API's server, which
    /// [`SecurityConfig::check_iothub_bind`] guards.)
    pub fn check_dashboard_bind(&self, ip: std::net::IpAddr) -> Result<(), SecurityError> {
        if ip.is_loopback() || self.insecure {
            return Ok(());
        }
        Err(SecurityError::config(format!(
            "refusing to serve the dashboard on {ip}: it speaks plain HTTP, so its access token \
             and every key and value would cross the network unencrypted; bind it to 127.0.0.1 \
             (--iothub-bind), pass --no-dashboard, or pass --insecure to accept that (it still \
             asks for the token)"
        )))
    }
}
