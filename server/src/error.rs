//! The server's error type.

/// Why the server (or a test helper) could not start or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The embedded broker could not be started.
    #[error("embedded broker: {0}")]
    Broker(String),
    /// A setting is invalid (a malformed broker URL...).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The state store could not connect to the broker or subscribe to the request topic.
    #[error("state store client: {0}")]
    Client(String),
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
    IotHub(crate::iothub::IotHubError),
    /// The `mosquitto` binary is not installed (test helper).
    #[error(
        "the mosquitto binary was not found (looked for {looked_for}); install it with `apt-get install mosquitto`"
    )]
    MosquittoNotInstalled {
        /// Where it was looked for.
        looked_for: String,
    },
    /// The data dir (`--data-dir`) cannot be used: not writable, locked by another server,
    /// from an incompatible version, or damaged. The message names the file; nothing in the
    /// directory was changed.
    #[error("data dir: {0}")]
    DataDir(String),
    /// Mosquitto started but did not accept connections (test helper).
    #[error("mosquitto did not start: {0}")]
    MosquittoFailed(String),
}

impl From<crate::iothub::IotHubError> for ServerError {
    /// The hub's data dir errors are data dir errors, like the store's.
    fn from(e: crate::iothub::IotHubError) -> Self {
        match e {
            crate::iothub::IotHubError::DataDir(text) => ServerError::DataDir(text),
            other => ServerError::IotHub(other),
        }
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
}
