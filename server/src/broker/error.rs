//! The embedded broker's error, [`BrokerError`]: why it could not start or listen. Each
//! variant keeps the error of the `mqtt5` crate or of the socket that caused it.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::config_error::ConfigError;

/// Why the embedded broker (or its TLS listener) could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// The `mqtt5` broker refused to start (its address in use, its session dir locked...).
    #[error("cannot start on {bind}{}: {source}", sessions_note(.sessions))]
    Start {
        /// The address it was to listen on.
        bind: SocketAddr,
        /// The session dir (`--data-dir`), when there is one.
        sessions: Option<PathBuf>,
        /// The broker's own error.
        #[source]
        source: mqtt5::MqttError,
    },
    /// The broker started but reports no listening address.
    #[error("the broker has no listening address")]
    NoAddress,
    /// The broker did not report itself ready in time.
    #[error("the embedded broker did not become ready")]
    NotReady,
    /// The TLS listener could not bind its address.
    #[error("cannot listen for TLS clients on {addr}: {source}")]
    TlsListen {
        /// The address.
        addr: SocketAddr,
        /// The socket's error.
        #[source]
        source: std::io::Error,
    },
    /// The TLS settings cannot be used: a certificate, key or client CA file the TLS library
    /// could not load, or a combination it refused.
    #[error("invalid configuration: {0}")]
    Tls(#[source] ConfigError),
    /// The TLS listener's bound address could not be read.
    #[error("TLS listener address: {0}")]
    TlsAddress(#[source] std::io::Error),
}

fn sessions_note(sessions: &Option<PathBuf>) -> String {
    sessions
        .as_ref()
        .map(|d| format!(" (sessions in {})", d.display()))
        .unwrap_or_default()
}
