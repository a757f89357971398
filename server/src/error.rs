//! The server's error type, [`ServerError`]: what `LocalServer::start_with` and the other
//! entry points return. Each layer below has its own error (the broker's [`BrokerError`], the
//! store's [`ConnectError`], the data dir's [`PersistError`], the hub's [`IotHubError`]) and
//! is converted here once; every variant keeps its cause as [`std::error::Error::source`],
//! and its message (one line, what `mqstate serve` prints and the tests read) still names
//! the cause's text.

use crate::broker::BrokerError;
use crate::config_error::ConfigError;
use crate::iothub::IotHubError;
use crate::persist::PersistError;
use crate::security::SecurityError;
use crate::statestore::{ConnectError, StartError};
use crate::web::WebError;

/// Why the server could not start or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The embedded broker could not be started.
    #[error("embedded broker: {0}")]
    Broker(#[source] BrokerError),
    /// A setting is invalid (a malformed broker URL, an unreadable rule file...).
    #[error("invalid configuration: {0}")]
    Config(#[source] ConfigError),
    /// The state store could not connect to the broker or subscribe to the request topic.
    #[error("state store client: {0}")]
    Client(#[source] ConnectError),
    /// An I/O error (binding a port, starting a process...).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The local IoT Hub could not start.
    #[error("IoT Hub: {0}")]
    IotHub(#[source] IotHubError),
    /// The data dir (`--data-dir`) cannot be used: not writable, locked by another server,
    /// from an incompatible version, or damaged. The message names the file; nothing in the
    /// directory was changed.
    #[error("data dir: {0}")]
    DataDir(#[source] PersistError),
    /// A security setting could not be applied (no randomness from the OS for a secret).
    /// Refused settings are [`ServerError::Config`], unreadable files [`ServerError::Io`].
    #[error("{0}")]
    Security(#[source] SecurityError),
}

impl From<IotHubError> for ServerError {
    /// The hub's data dir errors are data dir errors, like the store's.
    fn from(e: IotHubError) -> Self {
        match e {
            IotHubError::DataDir(e) => ServerError::from(e),
            other => ServerError::IotHub(other),
        }
    }
}

impl From<PersistError> for ServerError {
    /// The data dir's errors (the store's and the hub's files alike).
    fn from(e: PersistError) -> Self {
        ServerError::DataDir(e)
    }
}

impl From<SecurityError> for ServerError {
    /// A refused setting is a configuration error, an unreadable file an I/O error, whichever
    /// layer found them.
    fn from(e: SecurityError) -> Self {
        match e {
            SecurityError::Config(e) => ServerError::Config(e),
            SecurityError::Io { context, source } => ServerError::Io { context, source },
            other => ServerError::Security(other),
        }
    }
}

impl From<WebError> for ServerError {
    fn from(e: WebError) -> Self {
        match e {
            WebError::Config(e) => ServerError::Config(e),
            WebError::Io { context, source } => ServerError::Io { context, source },
            WebError::Security(e) => ServerError::from(e),
        }
    }
}

impl From<BrokerError> for ServerError {
    /// Unusable TLS files are configuration errors, like every other refused setting.
    fn from(e: BrokerError) -> Self {
        match e {
            BrokerError::Tls(e) => ServerError::Config(e),
            other => ServerError::Broker(other),
        }
    }
}

impl From<ConnectError> for ServerError {
    fn from(e: ConnectError) -> Self {
        ServerError::Client(e)
    }
}

impl From<StartError> for ServerError {
    fn from(e: StartError) -> Self {
        match e {
            StartError::Config(e) => ServerError::Config(e),
            StartError::DataDir(e) => ServerError::DataDir(e),
            StartError::Connect(e) => ServerError::Client(e),
        }
    }
}

impl From<ConfigError> for ServerError {
    fn from(e: ConfigError) -> Self {
        ServerError::Config(e)
    }
}

impl ServerError {
    /// An I/O error, with what was being done (`context`) when it happened.
    ///
    /// ```
    /// let e = mqstate_server::ServerError::io("opening the log", std::io::ErrorKind::NotFound.into());
    /// assert!(e.to_string().contains("opening the log"));
    /// ```
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        ServerError::Io {
            context: context.into(),
            source,
        }
    }

    /// An invalid setting with no cause beyond `message` (an empty password, a bind address
    /// the security settings forbid...).
    pub fn config(message: impl Into<String>) -> Self {
        ServerError::Config(ConfigError::new(message))
    }

    /// An invalid setting found while doing `context` ("rule file x.acl"), because of `cause`
    /// (kept as the error's source).
    ///
    /// ```
    /// use std::error::Error as _;
    /// let e = mqstate_server::ServerError::config_caused("rule file a.acl", "line 3: no topic");
    /// assert_eq!(e.to_string(), "invalid configuration: rule file a.acl: line 3: no topic");
    /// assert!(e.source().and_then(|c| c.source()).is_some());
    /// ```
    pub fn config_caused(
        context: impl Into<String>,
        cause: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        ServerError::Config(ConfigError::caused(context, cause))
    }
}
