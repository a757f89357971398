//! The hub's error type: one variant per way a request can be refused, each with a message
//! that names what was wrong, and a stable error code for the HTTP admin API. The data dir's
//! errors ([`PersistError`]) are kept as their source.

use std::sync::Arc;

use crate::persist::PersistError;

/// Why the hub refused a request (nothing was changed) or could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IotHubError {
    /// No device with this id is registered.
    #[error("device {0:?} is not registered")]
    DeviceNotFound(String),
    /// A device with this id is already registered.
    #[error("device {0:?} is already registered")]
    DeviceAlreadyExists(String),
    /// The device's cloud-to-device queue already holds the maximum number of messages.
    #[error("the queue of device {device:?} is full ({max} messages); the message was not sent")]
    QueueFull {
        /// The device.
        device: String,
        /// The queue's limit (50 on IoT Hub).
        max: usize,
    },
    /// The message body is larger than the hub accepts.
    #[error("the message body is {size} bytes, over the limit of {max} bytes")]
    PayloadTooLarge {
        /// Size of the body.
        size: usize,
        /// The limit (64 KiB for cloud-to-device messages on IoT Hub).
        max: usize,
    },
    /// A malformed argument: a device id, a key, a property name, a TTL, an ack mode...
    #[error("{0}")]
    InvalidArgument(String),
    /// A change conditioned on an ETag (`If-Match`) that is no longer the device's: someone
    /// changed it since it was read. Read it again, then retry.
    #[error("the ETag given (If-Match) is not the current ETag of device {0:?}; read it again")]
    PreconditionFailed(String),
    /// A feedback lock token that is unknown or whose lock has expired.
    #[error("feedback lock token {0:?} is unknown or its lock has expired")]
    FeedbackLockLost(String),
    /// A cloud-to-device lock token (AMQP delivery tag, HTTPS `ETag`) that does not lock a
    /// message of this device any more: unknown, already settled, or its lock timed out (the
    /// message is Enqueued again, or dead-lettered). Settle within the lock timeout.
    #[error(
        "lock token {lock_token:?} locks no message of device {device:?}: unknown, already settled, or its lock timed out"
    )]
    MessageLockLost {
        /// The device.
        device: String,
        /// The lock token given.
        lock_token: String,
    },
    /// A service request without valid credentials: no token, a malformed or expired one, an
    /// unknown shared access policy, a wrong key, or a policy without the right the request
    /// needs. The message says which.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// An invalid hub setting.
    #[error("invalid IoT Hub configuration: {0}")]
    Config(String),
    /// A listener could not be started, or a certificate file could not be read. The message
    /// names what failed and the cause's text; the cause itself, when there is one, is the
    /// error's source.
    #[error("{message}")]
    Io {
        /// What failed, and why.
        message: String,
        /// The error that said so.
        #[source]
        cause: Option<IoCause>,
    },
    /// The hub's file in the data dir (`iothub.redb`) cannot be used: locked by another
    /// server, from an incompatible version, damaged. The message names the file; nothing
    /// was changed. `mqstate serve` reports it as the store's data dir errors.
    #[error("data dir: {0}")]
    DataDir(#[source] PersistError),
    /// The change was made in memory but could not be written to the data dir (disk full,
    /// I/O error): it is not acknowledged. The hub writes it again with its next commit.
    #[error("the change could not be persisted ({0}); it was not acknowledged")]
    NotPersisted(String),
}

impl From<PersistError> for IotHubError {
    fn from(e: PersistError) -> Self {
        IotHubError::DataDir(e)
    }
}

impl IotHubError {
    /// A stable code for this error, used as `errorCode` by the HTTP admin API (IoT Hub's
    /// names where it has one).
    ///
    /// ```
    /// use mqstate_server::iothub::IotHubError;
    /// assert_eq!(IotHubError::DeviceNotFound("d".into()).code(), "DeviceNotFound");
    /// ```
    pub fn code(&self) -> &'static str {
        match self {
            IotHubError::DeviceNotFound(_) => "DeviceNotFound",
            IotHubError::DeviceAlreadyExists(_) => "DeviceAlreadyExists",
            IotHubError::QueueFull { .. } => "DeviceMaximumQueueDepthExceeded",
            IotHubError::PayloadTooLarge { .. } => "MessageTooLarge",
            IotHubError::InvalidArgument(_) => "ArgumentInvalid",
            IotHubError::FeedbackLockLost(_) => "FeedbackLockLost",
            IotHubError::MessageLockLost { .. } => "DeviceMessageLockLost",
            IotHubError::PreconditionFailed(_) => "PreconditionFailed",
            IotHubError::Unauthorized(_) => "IotHubUnauthorizedAccess",
            IotHubError::Config(_) => "InvalidConfiguration",
            IotHubError::Io { .. } => "IoError",
            IotHubError::DataDir(_) => "DataDirError",
            IotHubError::NotPersisted(_) => "PersistenceFailed",
        }
    }

    /// An I/O failure while doing `context`, because of `cause` (kept as the source).
    pub(crate) fn io(
        context: impl std::fmt::Display,
        cause: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        let cause = cause.into();
        IotHubError::Io {
            message: format!("{context}: {cause}"),
            cause: Some(IoCause(Arc::from(cause))),
        }
    }

    /// An I/O failure explained by `message` alone.
    pub(crate) fn io_message(message: impl Into<String>) -> Self {
        IotHubError::Io {
            message: message.into(),
            cause: None,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        IotHubError::InvalidArgument(message.into())
    }
}

/// The cause of an [`IotHubError::Io`]: an error shared (the hub's errors are cloned to every
/// waiter) and compared by what it says.
#[derive(Debug, Clone)]
pub struct IoCause(Arc<dyn std::error::Error + Send + Sync>);

impl std::fmt::Display for IoCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for IoCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for IoCause {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_string() == other.0.to_string()
    }
}

impl Eq for IoCause {}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn io_errors_keep_their_cause_and_say_the_same() {
        let cause = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = IotHubError::io("TLS key k.pem", cause);
        assert_eq!(e.to_string(), "TLS key k.pem: gone");
        assert_eq!(e.code(), "IoError");
        assert_eq!(e.source().map(ToString::to_string).as_deref(), Some("gone"));
        assert_eq!(e.clone(), e);
        let plain = IotHubError::io_message("no certificate in the file");
        assert!(plain.source().is_none());
    }
}
