//! The store's own error, [`ConnectError`]: why its MQTT connection to the broker could not
//! be set up. It keeps the last connection error that rumqttc reported.

use std::time::Duration;

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
