//! The server's error type, [`ServerError`]: what `LocalServer::start_with` and the other
//! entry points return. Each layer below has its own error (the broker's [`BrokerError`], the
//! store's [`ConnectError`], the data dir's [`PersistError`], the hub's [`IotHubError`]) and
//! is converted here once; every variant keeps its cause as [`std::error::Error::source`],
//! and its message (one line, what `mqstate serve` prints and the tests read) still names
//! the cause's text.

use crate::broker::BrokerError;
use crate::iothub::IotHubError;
use crate::persist::PersistError;
use crate::statestore::ConnectError;

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

impl From<BrokerError> for ServerError {
    fn from(e: BrokerError) -> Self {
        ServerError::Broker(e)
    }
}

impl From<ConnectError> for ServerError {
    fn from(e: ConnectError) -> Self {
        ServerError::Client(e)
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

/// An invalid setting: what was wrong (or what was being read), and the error that said so
/// when there is one (a TLS file the TLS library rejected, a rule file's parse error...).
/// Displayed as `context: cause`.
#[derive(Debug)]
pub struct ConfigError {
    context: String,
    cause: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl ConfigError {
    /// An invalid setting, explained by `message` alone.
    pub fn new(message: impl Into<String>) -> Self {
        ConfigError {
            context: message.into(),
            cause: None,
        }
    }

    /// An invalid setting found while doing `context`, because of `cause`.
    pub fn caused(
        context: impl Into<String>,
        cause: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        ConfigError {
            context: context.into(),
            cause: Some(cause.into()),
        }
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.cause {
            Some(cause) => write!(f, "{}: {cause}", self.context),
            None => f.write_str(&self.context),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}
