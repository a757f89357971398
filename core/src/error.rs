//! One error type for the whole library, with a stable [`ErrorKind`] that every
//! binding maps to its own idiom (C status codes, Python exception classes, JS `code`).
//!
//! Service errors (the `-ERR text` replies of PROTOCOL.md section 3) are matched on
//! their exact texts; a text we do not know is kept verbatim in
//! [`ServiceError::Unknown`], so that a newer server never breaks an older client.

use std::fmt;
use std::time::Duration;

use crate::hlc::HlcError;
use crate::resp3::DecodeError;

/// Every error the library reports.
///
/// ```
/// use mqstate::{Error, ErrorKind, ServiceError};
///
/// let err = Error::Service(ServiceError::from_text("the quota has been exceeded"));
/// assert_eq!(err.kind(), ErrorKind::Service);
/// assert_eq!(err.to_string(), "state store error: the quota has been exceeded");
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The caller passed something the protocol cannot carry (an empty key, a zero expiry...).
    /// Nothing was sent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// No response arrived within the request's timeout.
    #[error("timed out after {0:?} waiting for the state store")]
    Timeout(Duration),
    /// The connection is down (or was closed) and the request was not, or could not be, sent.
    #[error("disconnected: {0}")]
    Disconnected(String),
    /// The state store answered `-ERR text`.
    #[error("state store error: {0}")]
    Service(ServiceError),
    /// The reply (or notification) was not one of the forms the protocol allows for it.
    #[error("unexpected payload: {0}")]
    UnexpectedPayload(#[from] DecodeError),
    /// A hybrid logical clock could not be parsed, or would move too far from the wall clock.
    #[error("{0}")]
    Hlc(#[from] HlcError),
    /// The connection could not be configured or established (bad URL, TLS files, refused...).
    #[error("connection error: {0}")]
    Connection(String),
    /// A response whose MQTT properties break the protocol (no `__stat`, a `__stat` other
    /// than 200, a missing `__ts` where the protocol requires one...); the message says which.
    /// Its kind is [`ErrorKind::UnexpectedPayload`].
    #[error("unexpected response: {0}")]
    UnexpectedResponse(String),
    /// An observation stream could not keep up: this many notifications were dropped because
    /// its buffer was full (the stream goes on; `get` the key to resynchronise).
    #[error("observation lagged: {0} notifications dropped because the stream's buffer was full")]
    Lagged(u64),
}

impl Error {
    /// The stable kind of this error, shared by every language binding.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::Timeout(_) => ErrorKind::Timeout,
            Error::Disconnected(_) => ErrorKind::Disconnected,
            Error::Service(_) => ErrorKind::Service,
            Error::UnexpectedPayload(_) => ErrorKind::UnexpectedPayload,
            Error::Hlc(HlcError::Malformed { .. }) => ErrorKind::UnexpectedPayload,
            Error::Hlc(_) => ErrorKind::ClockDrift,
            Error::Connection(_) => ErrorKind::Connection,
            Error::UnexpectedResponse(_) => ErrorKind::UnexpectedPayload,
            Error::Lagged(_) => ErrorKind::Lagged,
        }
    }

    /// The service error, when the state store answered `-ERR`.
    pub fn service_error(&self) -> Option<&ServiceError> {
        match self {
            Error::Service(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ServiceError> for Error {
    fn from(e: ServiceError) -> Self {
        Error::Service(e)
    }
}

/// The stable, small set of error kinds. The string form ([`ErrorKind::as_str`]) is what
/// bindings expose (`ERR_TIMEOUT` in JS is derived from `timeout`, and so on); never
/// rename a variant's string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// See [`Error::InvalidArgument`].
    InvalidArgument,
    /// See [`Error::Timeout`].
    Timeout,
    /// See [`Error::Disconnected`].
    Disconnected,
    /// See [`Error::Service`].
    Service,
    /// See [`Error::UnexpectedPayload`] (also a malformed HLC received from the network).
    UnexpectedPayload,
    /// A clock merge would exceed the maximum drift, or the HLC counter overflowed.
    ClockDrift,
    /// See [`Error::Connection`].
    Connection,
    /// See [`Error::Lagged`].
    Lagged,
}

impl ErrorKind {
    /// The stable snake_case name (`"invalid_argument"`, `"timeout"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Disconnected => "disconnected",
            ErrorKind::Service => "service",
            ErrorKind::UnexpectedPayload => "unexpected_payload",
            ErrorKind::ClockDrift => "clock_drift",
            ErrorKind::Connection => "connection",
            ErrorKind::Lagged => "lagged",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Defines [`ServiceError`] from one table, so that the text, the stable kind name and the
/// variant cannot drift apart.
macro_rules! service_errors {
    ($( $(#[$doc:meta])* $variant:ident = $kind:literal, $text:literal; )*) => {
        /// An error reported by the state store (`-ERR text`), matched on its exact text.
        ///
        /// ```
        /// use mqstate::ServiceError;
        ///
        /// let e = ServiceError::from_text("missing timestamp");
        /// assert_eq!(e, ServiceError::MissingTimestamp);
        /// assert_eq!(e.kind_str(), "missing_timestamp");
        ///
        /// // Texts a newer server may send are kept verbatim.
        /// let e = ServiceError::from_text("the moon is in the wrong phase");
        /// assert_eq!(e.text(), "the moon is in the wrong phase");
        /// assert_eq!(e.kind_str(), "unknown");
        /// ```
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ServiceError {
            $( $(#[$doc])* $variant, )*
            /// A text this version does not know, kept verbatim.
            Unknown(String),
        }

        impl ServiceError {
            /// Every known error, in table order (for tests and bindings).
            pub const KNOWN: &'static [ServiceError] = &[$(ServiceError::$variant),*];

            /// Matches the exact text of a `-ERR` reply (without the `ERR ` prefix).
            pub fn from_text(text: &str) -> Self {
                match text {
                    $( $text => ServiceError::$variant, )*
                    other => ServiceError::Unknown(other.to_owned()),
                }
            }

            /// The exact text the service sends for this error.
            pub fn text(&self) -> &str {
                match self {
                    $( ServiceError::$variant => $text, )*
                    ServiceError::Unknown(text) => text,
                }
            }

            /// A stable snake_case name for this error (`"unknown"` for unknown texts).
            pub fn kind_str(&self) -> &'static str {
                match self {
                    $( ServiceError::$variant => $kind, )*
                    ServiceError::Unknown(_) => "unknown",
                }
            }
        }
    };
}

service_errors! {
    /// `__ts` more than the allowed drift ahead of the server clock.
    TimestampSkew = "timestamp_skew",
        "the request timestamp is too far in the future; ensure that the client and broker system clocks are synchronized";
    /// The key is fenced and the request carried no `__ft`.
    FencingTokenRequired = "fencing_token_required",
        "a fencing token is required for this request";
    /// `__ft` more than the allowed drift ahead of the server clock.
    FencingTokenSkew = "fencing_token_skew",
        "the request fencing token timestamp is too far in the future; ensure that the client and broker system clocks are synchronized";
    /// `__ft` is older than the token protecting the key.
    FencingTokenLowerVersion = "fencing_token_lower_version",
        "the request fencing token is a lower version than the fencing token protecting the resource";
    /// The server's key quota is reached.
    QuotaExceeded = "quota_exceeded", "the quota has been exceeded";
    /// The payload is not a valid request.
    SyntaxError = "syntax_error", "syntax error";
    /// Authorization failure.
    NotAuthorized = "not_authorized", "not authorized";
    /// Unknown verb.
    UnknownCommand = "unknown_command", "unknown command";
    /// Wrong arity for the verb.
    WrongNumberOfArguments = "wrong_number_of_arguments", "wrong number of arguments";
    /// SET without `__ts`.
    MissingTimestamp = "missing_timestamp", "missing timestamp";
    /// `__ts` or `__ft` is not a valid HLC.
    MalformedTimestamp = "malformed_timestamp", "malformed timestamp";
    /// Empty key.
    KeyLengthZero = "key_length_zero", "the key length is zero";
    /// The server could not write the request to its disk (disk full, I/O error): nothing
    /// changed. Sent by `mqstate serve --data-dir`; the real service's text for this case is
    /// not documented.
    PersistenceFailed = "persistence_failed",
        "the request could not be persisted; the state store's disk is full or failing";
}

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

impl std::error::Error for ServiceError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_text_round_trips() {
        for e in ServiceError::KNOWN {
            assert_eq!(&ServiceError::from_text(e.text()), e);
            assert_ne!(e.kind_str(), "unknown");
        }
    }

    #[test]
    fn texts_are_matched_exactly() {
        // A near miss is not the known error: it is kept verbatim.
        let e = ServiceError::from_text("Syntax Error");
        assert_eq!(e, ServiceError::Unknown("Syntax Error".into()));
        assert_eq!(e.text(), "Syntax Error");
    }
}
