//! The one place where core errors become foreign exceptions.
//!
//! One variant per stable core kind ([`mqstate::ErrorKind::as_str`]); Kotlin sees the sealed
//! class `MqstateException` with one subclass per kind (`MqstateException.Timeout`, ...) and
//! Swift an `enum MqstateError`. `reason` is the core's message, verbatim. A service error
//! also carries `serviceKind` (the core's [`mqstate::ServiceError::kind_str`]) and
//! `serviceText` (the server's text).

use mqstate::{Error, ErrorKind};

/// An mqstate error, by the core's stable kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, uniffi::Error)]
pub enum MqstateError {
    /// The caller passed something the protocol cannot carry; nothing was sent.
    #[error("{reason}")]
    InvalidArgument {
        /// What happened.
        reason: String,
    },
    /// No response (or no connection) within the timeout.
    #[error("{reason}")]
    Timeout {
        /// What happened.
        reason: String,
    },
    /// The connection is down or was closed; the request was not sent.
    #[error("{reason}")]
    Disconnected {
        /// What happened.
        reason: String,
    },
    /// The state store answered with an error.
    #[error("{reason}")]
    Service {
        /// What happened.
        reason: String,
        /// The core's stable name of the service error (`fencing_token_less_than_current`...).
        service_kind: String,
        /// The server's text, verbatim.
        service_text: String,
    },
    /// A reply the protocol does not allow.
    #[error("{reason}")]
    UnexpectedPayload {
        /// What happened.
        reason: String,
    },
    /// A clock merge would exceed the maximum drift, or a version could not be parsed.
    #[error("{reason}")]
    ClockDrift {
        /// What happened.
        reason: String,
    },
    /// The connection could not be configured or established.
    #[error("{reason}")]
    Connection {
        /// What happened.
        reason: String,
    },
    /// An observation dropped notifications nobody read.
    #[error("{reason}")]
    Lagged {
        /// What happened.
        reason: String,
    },
    /// The server refused the credentials.
    #[error("{reason}")]
    Authentication {
        /// What happened.
        reason: String,
    },
    /// The operation does not exist for this protocol.
    #[error("{reason}")]
    NotSupported {
        /// What happened.
        reason: String,
    },
    /// A cloud-to-device message was settled after its lock was lost (its connection or link
    /// dropped, or the hub delivered it again): the hub delivers it again; settle that copy.
    #[error("{reason}")]
    LockLost {
        /// What happened.
        reason: String,
    },
}

impl From<Error> for MqstateError {
    fn from(error: Error) -> Self {
        let reason = error.to_string();
        if let Some(service) = error.service_error() {
            return MqstateError::Service {
                reason,
                service_kind: service.kind_str().to_owned(),
                service_text: service.text().to_owned(),
            };
        }
        match error.kind() {
            ErrorKind::InvalidArgument => MqstateError::InvalidArgument { reason },
            ErrorKind::Timeout => MqstateError::Timeout { reason },
            ErrorKind::Disconnected => MqstateError::Disconnected { reason },
            ErrorKind::UnexpectedPayload => MqstateError::UnexpectedPayload { reason },
            ErrorKind::ClockDrift => MqstateError::ClockDrift { reason },
            ErrorKind::Lagged => MqstateError::Lagged { reason },
            ErrorKind::Authentication => MqstateError::Authentication { reason },
            ErrorKind::NotSupported => MqstateError::NotSupported { reason },
            ErrorKind::LockLost => MqstateError::LockLost { reason },
            // `Connection`, and any kind a newer core adds before this crate maps it.
            _ => MqstateError::Connection { reason },
        }
    }
}

#[uniffi::export]
impl MqstateError {
    /// The core's stable kind name (`"timeout"`, `"service"`, ...), as every binding reports it.
    pub fn kind(&self) -> String {
        let kind = match self {
            MqstateError::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            MqstateError::Timeout { .. } => ErrorKind::Timeout,
            MqstateError::Disconnected { .. } => ErrorKind::Disconnected,
            MqstateError::Service { .. } => ErrorKind::Service,
            MqstateError::UnexpectedPayload { .. } => ErrorKind::UnexpectedPayload,
            MqstateError::ClockDrift { .. } => ErrorKind::ClockDrift,
            MqstateError::Connection { .. } => ErrorKind::Connection,
            MqstateError::Lagged { .. } => ErrorKind::Lagged,
            MqstateError::Authentication { .. } => ErrorKind::Authentication,
            MqstateError::NotSupported { .. } => ErrorKind::NotSupported,
            MqstateError::LockLost { .. } => ErrorKind::LockLost,
        };
        kind.as_str().to_owned()
    }

    /// The core's message (the same text as `reason`).
    pub fn describe(&self) -> String {
        self.to_string()
    }
}

/// An exception a foreign callback (a `Lock.edit` function) threw that is not an
/// `MqstateException`: reported as `InvalidArgument`, with the exception's text.
impl From<uniffi::UnexpectedUniFFICallbackError> for MqstateError {
    fn from(e: uniffi::UnexpectedUniFFICallbackError) -> Self {
        MqstateError::InvalidArgument {
            reason: format!("invalid argument: the edit function failed: {}", e.reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mqstate::ServiceError;

    #[test]
    fn kinds_are_the_core_kinds() {
        let e = MqstateError::from(Error::Timeout(std::time::Duration::from_secs(1)));
        assert_eq!(e.kind(), "timeout");
        let e = MqstateError::from(Error::Service(ServiceError::from_text(
            "the quota has been exceeded",
        )));
        assert_eq!(e.kind(), "service");
        match e {
            MqstateError::Service {
                service_kind,
                service_text,
                ..
            } => {
                assert_eq!(service_kind, "quota_exceeded");
                assert_eq!(service_text, "the quota has been exceeded");
            }
            other => panic!("not a service error: {other:?}"),
        }
        let lost = MqstateError::from(Error::LockLost("m".into()));
        assert!(matches!(lost, MqstateError::LockLost { .. }), "{lost:?}");
        assert_eq!(lost.kind(), "lock_lost");
        assert_eq!(lost.describe(), "lock lost: m");
        let invalid = MqstateError::from(Error::InvalidArgument("x".into()));
        assert_eq!(invalid.kind(), "invalid_argument");
        assert_eq!(invalid.describe(), "invalid argument: x");
    }
}
