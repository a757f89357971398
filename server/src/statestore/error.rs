//! The store's own errors: [`ConnectError`], why its MQTT connection to the broker could not
//! be set up (it keeps the last connection error that rumqttc reported), and [`StartError`],
//! why the store could not start at all. `LocalServer` converts them once into
//! [`crate::ServerError`].

use std::time::Duration;

use crate::config_error::ConfigError;
use crate::persist::PersistError;

/// Why the store could not start: its settings, its data dir, or its connection.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// A setting is out of range (the reconnection delays).
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// The data dir's store file cannot be used.
    #[error("data dir: {0}")]
    DataDir(#[from] PersistError),
    /// No connection or subscription to the request topic in time.
    #[error(transparent)]
    Connect(#[from] ConnectError),
}

/// Why the state store could not start answering.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// No connection and subscription to the request topic within the connect timeout.
    #[error(
        "could not connect to the broker at {host}:{port} and subscribe within {timeout:?}{}",
        last_error_note(.last_error)
    )]
    Connect {
        /// The broker's host.
        host: String,
        /// The broker's port.
        port: u16,
        /// How long the store tried.
        timeout: Duration,
        /// The last error of the connection attempts, if there was one.
        #[source]
        last_error: Option<rumqttc::v5::ConnectionError>,
    },
}

fn last_error_note(error: &Option<rumqttc::v5::ConnectionError>) -> String {
    error
        .as_ref()
        .map(|e| format!(" (last error: {e})"))
        .unwrap_or_default()
}
