//! [`WebError`]: why a web surface (the dashboard's own server, the web access token) could
//! not start. `LocalServer` converts it once into [`crate::ServerError`].

use crate::config_error::ConfigError;
use crate::security::SecurityError;

/// Why a web surface could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebError {
    /// A setting is refused (a web token file whose token is too short).
    #[error("invalid configuration: {0}")]
    Config(#[source] ConfigError),
    /// A file or a socket failed (the token file, the dashboard's listening address).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// No secret for a new token.
    #[error(transparent)]
    Security(#[from] SecurityError),
}

impl WebError {
    /// An I/O error while doing `context`.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        WebError::Io {
            context: context.into(),
            source,
        }
    }
}
