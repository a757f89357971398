//! One error type for the whole library, with a stable [`ErrorKind`] that every
//! binding maps to its own idiom (C status codes, Python exception classes, JS `code`).
//!
//! Every error type of the protocol lives here, next to the helper that escapes what a peer
//! sent ([`escape_excerpt`]), so that this module depends on nothing else of the protocol:
//! the codec ([`crate::protocol::resp3`]) and the clock ([`crate::protocol::hlc`]) use it, never the reverse.
//!
//! Service errors (the `-ERR text` replies of docs/protocol.md section 3) are matched on
//! their exact texts; a text we do not know is kept verbatim in
//! [`ServiceError::Unknown`], so that a newer server never breaks an older client.

use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

/// Every error the library reports.
///
/// ```
/// use mqstate::{Error, ErrorKind, ServiceError};
///
/// let err = Error::Service(ServiceError::from_text("the quota has been exceeded"));
/// assert_eq!(err.kind(), ErrorKind::Service);
/// assert_eq!(err.to_string(), "state store error: the quota has been exceeded");
/// ```
///
/// Its `Display` and `source` are written out (below) rather than derived, because a
/// [`Error::Connection`] keeps the I/O, TLS or MQTT error underneath it in an `Arc` (so that
/// the error stays `Clone`), and `source` must hand back that error itself, which a caller can
/// downcast, not the `Arc` around it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// The caller passed something the protocol cannot carry (an empty key, a zero expiry...).
    /// Nothing was sent.
    InvalidArgument(String),
    /// No response arrived within the request's timeout.
    Timeout(Duration),
    /// The first connection attempt did not complete (TCP, TLS and CONNACK) within the
    /// connect timeout ([`crate::ConnectOptions::connect_timeout`], at least 1 s). Its kind is
    /// [`ErrorKind::Timeout`].
    ConnectTimeout {
        /// The broker host.
        host: String,
        /// The broker port.
        port: u16,
        /// The connect timeout that passed.
        limit: Duration,
    },
    /// The connection is down (or was closed) and the request was not, or could not be, sent.
    Disconnected(String),
    /// The state store answered `-ERR text`.
    Service(ServiceError),
    /// The reply (or notification) was not one of the forms the protocol allows for it.
    UnexpectedPayload(DecodeError),
    /// A hybrid logical clock could not be parsed, or would move too far from the wall clock.
    Hlc(HlcError),
    /// The connection could not be configured or established (bad URL, TLS files, refused...).
    /// The I/O, TLS or MQTT error underneath, when there is one, is this error's
    /// [`source`](std::error::Error::source).
    Connection(ConnectionFailure),
    /// A response whose MQTT properties break the protocol (no `__stat`, a `__stat` other
    /// than 200, a missing `__ts` where the protocol requires one...); the message says which.
    /// Its kind is [`ErrorKind::UnexpectedPayload`].
    UnexpectedResponse(String),
    /// An observation stream could not keep up: this many notifications were dropped because
    /// its buffer was full (the stream goes on; `get` the key to resynchronise).
    Lagged(u64),
    /// The server refused the credentials (a bad key or SAS token, an expired token, an
    /// unknown device or a refused certificate); the message says which. Retrying with the
    /// same credentials cannot succeed.
    Authentication(String),
    /// The operation does not exist for this protocol (IoT Hub's `reject` and `abandon` over
    /// MQTT). Nothing was sent.
    NotSupported(String),
    /// An IoT Hub cloud-to-device message can no longer be settled (completed, rejected or
    /// abandoned): the lock the hub held for this client was lost, because the connection or
    /// link it arrived on closed, or the hub delivered the message again after its lock timed
    /// out. Nothing was sent; the hub delivers the message again (settle that copy).
    LockLost(String),
    /// A received message could not be decoded (a malformed IoT Hub property bag); the
    /// connection goes on. Its kind is [`ErrorKind::UnexpectedPayload`].
    MalformedMessage(String),
}

impl Error {
    /// The stable kind of this error, shared by every language binding.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::Timeout(_) | Error::ConnectTimeout { .. } => ErrorKind::Timeout,
            Error::Disconnected(_) => ErrorKind::Disconnected,
            Error::Service(_) => ErrorKind::Service,
            Error::UnexpectedPayload(_) => ErrorKind::UnexpectedPayload,
            Error::Hlc(HlcError::Malformed { .. }) => ErrorKind::UnexpectedPayload,
            Error::Hlc(HlcError::InvalidNodeId { .. }) => ErrorKind::InvalidArgument,
            Error::Hlc(_) => ErrorKind::ClockDrift,
            Error::Connection(_) => ErrorKind::Connection,
            Error::UnexpectedResponse(_) => ErrorKind::UnexpectedPayload,
            Error::Lagged(_) => ErrorKind::Lagged,
            Error::Authentication(_) => ErrorKind::Authentication,
            Error::NotSupported(_) => ErrorKind::NotSupported,
            Error::LockLost(_) => ErrorKind::LockLost,
            Error::MalformedMessage(_) => ErrorKind::UnexpectedPayload,
        }
    }

    /// The service error, when the state store answered `-ERR`.
    pub fn service_error(&self) -> Option<&ServiceError> {
        match self {
            Error::Service(e) => Some(e),
            _ => None,
        }
    }

    /// How many notifications a lagging observation lost ([`Error::Lagged`]), the count
    /// every binding exposes as a number (Python `Lagged.missed`, Node `err.missed`, C
    /// `mqstate_notification_missed`); `None` for every other error.
    ///
    /// ```
    /// use mqstate::Error;
    /// assert_eq!(Error::Lagged(7).missed(), Some(7));
    /// assert_eq!(Error::InvalidArgument("bad".into()).missed(), None);
    /// ```
    pub fn missed(&self) -> Option<u64> {
        match self {
            Error::Lagged(n) => Some(*n),
            _ => None,
        }
    }
}

/// What a binding reports when it catches a Rust panic at its edge (a bug of this library),
/// from the panic's payload: the same words in every language.
///
/// ```
/// let payload = std::panic::catch_unwind(|| panic!("boom")).unwrap_err();
/// assert_eq!(
///     mqstate::protocol::errors::panic_report(payload.as_ref()),
///     "mqstate: internal error (a Rust panic, a bug: please report it): boom"
/// );
/// ```
pub fn panic_report(payload: &(dyn std::any::Any + Send)) -> String {
    let text = if let Some(s) = payload.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.as_str()
    } else {
        "(no message)"
    };
    format!("mqstate: internal error (a Rust panic, a bug: please report it): {text}")
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::Timeout(d) => write!(f, "timed out after {d:?} waiting for the state store"),
            Error::ConnectTimeout { host, port, limit } => write!(
                f,
                "timed out after {limit:?} connecting to {host}:{port} (the connect timeout)"
            ),
            Error::Disconnected(m) => write!(f, "disconnected: {m}"),
            Error::Service(e) => write!(f, "state store error: {e}"),
            Error::UnexpectedPayload(e) => write!(f, "unexpected payload: {e}"),
            Error::Hlc(e) => write!(f, "{e}"),
            Error::Connection(e) => write!(f, "connection error: {e}"),
            Error::UnexpectedResponse(m) => write!(f, "unexpected response: {m}"),
            Error::Lagged(n) => write!(
                f,
                "observation lagged: {n} notifications dropped because the stream's buffer was full"
            ),
            Error::Authentication(m) => write!(f, "authentication failed: {m}"),
            Error::NotSupported(m) => write!(f, "not supported: {m}"),
            Error::LockLost(m) => write!(f, "lock lost: {m}"),
            Error::MalformedMessage(m) => write!(f, "malformed message: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::UnexpectedPayload(e) => Some(e),
            Error::Hlc(e) => Some(e),
            Error::Connection(e) => e.cause(),
            _ => None,
        }
    }
}

impl From<DecodeError> for Error {
    fn from(e: DecodeError) -> Self {
        Error::UnexpectedPayload(e)
    }
}

impl From<HlcError> for Error {
    fn from(e: HlcError) -> Self {
        Error::Hlc(e)
    }
}

impl Error {
    /// A connection error with no error underneath it (a refusal the broker explained, a
    /// runtime that stopped...).
    ///
    /// ```
    /// use mqstate::{Error, ErrorKind};
    ///
    /// let err = Error::connection("the connection task ended before connecting");
    /// assert_eq!(err.kind(), ErrorKind::Connection);
    /// assert_eq!(err.to_string(), "connection error: the connection task ended before connecting");
    /// ```
    pub fn connection(message: impl Into<String>) -> Self {
        Error::Connection(ConnectionFailure::new(message))
    }

    /// A connection error caused by `cause` (an I/O, TLS or MQTT error): `message` says what
    /// was being done, in the words every binding shows (it usually ends with the cause's own
    /// text), and `cause` stays reachable through [`std::error::Error::source`].
    ///
    /// ```
    /// use std::error::Error as _;
    /// use mqstate::Error;
    ///
    /// let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
    /// let err = Error::connection_caused_by(format!("CA file ca.pem: {io}"), io);
    /// assert_eq!(err.to_string(), "connection error: CA file ca.pem: no such file");
    /// let source = err.source().and_then(|s| s.downcast_ref::<std::io::Error>());
    /// assert_eq!(source.map(|e| e.kind()), Some(std::io::ErrorKind::NotFound));
    /// ```
    pub fn connection_caused_by(
        message: impl Into<String>,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Connection(ConnectionFailure::caused_by(message, cause))
    }
}

/// What an [`Error::Connection`] carries: the message (shown after `connection error: `) and
/// the error underneath it, when there is one. The cause sits in an `Arc` so that the error
/// stays `Clone` (one failed connection is reported to every waiting caller).
///
/// ```
/// use mqstate::protocol::errors::ConnectionFailure;
///
/// let failure = ConnectionFailure::new("refused");
/// assert_eq!(failure.message(), "refused");
/// assert!(failure.cause().is_none());
/// ```
#[derive(Debug, Clone)]
pub struct ConnectionFailure {
    message: String,
    cause: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

impl ConnectionFailure {
    /// A failure with no error underneath.
    pub fn new(message: impl Into<String>) -> Self {
        ConnectionFailure {
            message: message.into(),
            cause: None,
        }
    }

    /// A failure caused by `cause`.
    pub fn caused_by(
        message: impl Into<String>,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::caused_by_shared(message, Some(Arc::new(cause)))
    }

    /// A failure whose cause is already shared (the transport keeps one per failed poll),
    /// or none.
    pub fn caused_by_shared(
        message: impl Into<String>,
        cause: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        ConnectionFailure {
            message: message.into(),
            cause,
        }
    }

    /// The message, without the `connection error: ` prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The error underneath (an `std::io::Error`, a `rustls::Error`, a rumqttc connection
    /// error...), itself, ready to be downcast.
    pub fn cause(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.cause {
            Some(cause) => Some(&**cause),
            None => None,
        }
    }
}

/// A failure with no cause, from its message (`Error::Connection("refused".into())`).
impl From<String> for ConnectionFailure {
    fn from(message: String) -> Self {
        ConnectionFailure::new(message)
    }
}

/// A failure with no cause, from its message.
impl From<&str> for ConnectionFailure {
    fn from(message: &str) -> Self {
        ConnectionFailure::new(message)
    }
}

impl fmt::Display for ConnectionFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
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
    /// See [`Error::Authentication`].
    Authentication,
    /// See [`Error::NotSupported`].
    NotSupported,
    /// See [`Error::LockLost`].
    LockLost,
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
            ErrorKind::Authentication => "authentication",
            ErrorKind::NotSupported => "not_supported",
            ErrorKind::LockLost => "lock_lost",
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

// ---------------------------------------------------------------------------------------------
// Decoding errors of the RESP3 codec (re-exported by `resp3`)
// ---------------------------------------------------------------------------------------------

/// What exactly was wrong with a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// The payload has no bytes at all.
    Empty,
    /// An element of another type than the one allowed here (`+` where `$` was expected...).
    UnexpectedType,
    /// A length or integer that is not an optionally signed run of decimal digits.
    InvalidInteger,
    /// A negative length other than `-1` (or `-1` where no null is allowed).
    NegativeLength,
    /// A length or integer too large for 64 bits.
    IntegerOverflow,
    /// A length that runs past the end of the payload.
    Truncated,
    /// A line or a bulk string not terminated by `\r\n`.
    MissingCrlf,
    /// Bytes left over after a complete element.
    TrailingBytes,
    /// A well-formed reply that this command never gets (`+OK` to a GET, `:5` to a VDEL...).
    UnexpectedReply,
    /// A notification whose words are not `NOTIFY SET VALUE v` or `NOTIFY DELETE`.
    UnknownNotification,
}

impl DecodeErrorKind {
    /// Stable snake_case name, used by the shared test vectors and the bindings.
    pub fn as_str(self) -> &'static str {
        match self {
            DecodeErrorKind::Empty => "empty",
            DecodeErrorKind::UnexpectedType => "unexpected_type",
            DecodeErrorKind::InvalidInteger => "invalid_integer",
            DecodeErrorKind::NegativeLength => "negative_length",
            DecodeErrorKind::IntegerOverflow => "integer_overflow",
            DecodeErrorKind::Truncated => "truncated",
            DecodeErrorKind::MissingCrlf => "missing_crlf",
            DecodeErrorKind::TrailingBytes => "trailing_bytes",
            DecodeErrorKind::UnexpectedReply => "unexpected_reply",
            DecodeErrorKind::UnknownNotification => "unknown_notification",
        }
    }
}

impl fmt::Display for DecodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A payload that is not what the protocol allows at this point.
///
/// It keeps the whole payload (a cheap [`Bytes`] clone) so that callers can log or
/// report it, and its message names what was expected, the byte offset and an
/// escaped excerpt of what arrived.
///
/// ```
/// use bytes::Bytes;
/// use mqstate::protocol::resp3::{self, DecodeErrorKind};
///
/// let err = resp3::decode_reply(&Bytes::from_static(b"$5\r\nab\r\n")).unwrap_err();
/// assert_eq!(err.kind(), DecodeErrorKind::Truncated);
/// assert!(err.to_string().contains(r#""$5\r\nab\r\n""#));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    kind: DecodeErrorKind,
    expected: &'static str,
    offset: usize,
    payload: Bytes,
}

/// How many bytes of a bad payload an error message shows.
const PAYLOAD_EXCERPT_LEN: usize = 48;

impl DecodeError {
    pub(crate) fn new(
        kind: DecodeErrorKind,
        expected: &'static str,
        offset: usize,
        payload: &Bytes,
    ) -> Self {
        DecodeError {
            kind,
            expected,
            offset,
            payload: payload.clone(),
        }
    }

    /// What was wrong.
    pub fn kind(&self) -> DecodeErrorKind {
        self.kind
    }

    /// What the decoder expected to find.
    pub fn expected(&self) -> &'static str {
        self.expected
    }

    /// The byte offset in the payload where decoding failed.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The whole payload as received.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// A short, escaped excerpt of the payload, safe to print.
    pub fn excerpt(&self) -> String {
        escape_excerpt(&self.payload, PAYLOAD_EXCERPT_LEN)
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: expected {} at byte {} of {}, got \"{}\"",
            self.kind,
            self.expected,
            self.offset,
            self.payload.len(),
            self.excerpt()
        )
    }
}

impl std::error::Error for DecodeError {}

/// Escapes bytes for an error message: printable ASCII as is, `\r`, `\n`, `\t`, `\\`, `\"`
/// and `\xNN` for the rest, cut after `max` bytes with a trailing `...`.
pub fn escape_excerpt(bytes: &[u8], max: usize) -> String {
    let mut out = String::with_capacity(bytes.len().min(max) + 8);
    for &b in bytes.iter().take(max) {
        match b {
            b'\r' => out.push_str("\\r"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    if bytes.len() > max {
        out.push_str("...");
    }
    out
}

// ---------------------------------------------------------------------------------------------
// HLC errors (re-exported by `hlc`)
// ---------------------------------------------------------------------------------------------

/// How many bytes of a malformed HLC string an error message shows.
const HLC_EXCERPT_LEN: usize = 64;

/// The reasons a string is not an HLC, each with the stable code the shared test vectors use
/// (see [`HlcError::reason_code`]). Kept as one table so that a phrase cannot lose its code.
pub(crate) mod hlc_reason {
    pub(crate) const EMPTY: &str = "the string is empty";
    pub(crate) const NOT_UTF8: &str = "the bytes are not valid UTF-8";
    pub(crate) const TOO_FEW_PARTS: &str =
        "expected 3 parts separated by ':' (milliseconds:counter:node id), found fewer";
    pub(crate) const TOO_MANY_PARTS: &str = "expected 3 parts separated by ':' (milliseconds:counter:node id), found more; a node id cannot contain ':'";
    pub(crate) const EMPTY_MS: &str = "the milliseconds part is empty";
    pub(crate) const INVALID_MS: &str =
        "the milliseconds part is not only decimal digits (no sign, no spaces)";
    pub(crate) const MS_TOO_LARGE: &str = "the milliseconds part does not fit in 64 bits";
    pub(crate) const EMPTY_COUNTER: &str = "the counter part is empty";
    pub(crate) const INVALID_COUNTER: &str =
        "the counter part is not only decimal digits (no sign, no spaces)";
    pub(crate) const COUNTER_TOO_LARGE: &str = "the counter part does not fit in 64 bits";

    pub(crate) const CODES: &[(&str, &str)] = &[
        (EMPTY, "empty"),
        (NOT_UTF8, "not_utf8"),
        (TOO_FEW_PARTS, "too_few_parts"),
        (TOO_MANY_PARTS, "too_many_parts"),
        (EMPTY_MS, "empty_ms"),
        (INVALID_MS, "invalid_ms"),
        (MS_TOO_LARGE, "ms_too_large"),
        (EMPTY_COUNTER, "empty_counter"),
        (INVALID_COUNTER, "invalid_counter"),
        (COUNTER_TOO_LARGE, "counter_too_large"),
    ];
}

/// Why an HLC could not be parsed, or why a clock refused to move.
///
/// ```
/// use mqstate::protocol::hlc::{Hlc, HlcError};
///
/// let err = "12:+3:node".parse::<Hlc>().unwrap_err();
/// assert!(matches!(err, HlcError::Malformed { .. }));
/// assert_eq!(err.kind_str(), "malformed");
/// assert_eq!(err.reason_code(), Some("invalid_counter"));
/// assert_eq!(
///     err.to_string(),
///     "malformed HLC \"12:+3:node\": the counter part is not only decimal digits (no sign, no spaces)"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HlcError {
    /// The text is not `{ms}:{counter}:{nodeId}` with two unsigned 64-bit decimal integers.
    #[error("malformed HLC \"{}\": {reason}", escape_excerpt(.input.as_bytes(), HLC_EXCERPT_LEN))]
    Malformed {
        /// The text as received (the message shows an escaped, truncated excerpt of it).
        input: String,
        /// What was wrong, in words (its stable code is [`HlcError::reason_code`]).
        reason: &'static str,
    },
    /// An HLC is further ahead of the wall clock than the maximum drift allows: a remote
    /// value to merge or to check, or our own clock after an earlier merge when the wall clock
    /// went backwards.
    #[error(
        "clock drift: the HLC is {ahead:?} ahead of the wall clock, more than the allowed maximum drift of {max_drift:?}"
    )]
    Drift {
        /// How far ahead of the wall clock the HLC is (or would be).
        ahead: Duration,
        /// The maximum the clock allows.
        max_drift: Duration,
    },
    /// A node id that cannot be written into an HLC: it contains `:`, which separates the
    /// parts (the value would not parse back). Its kind is `invalid_argument`.
    #[error("invalid HLC node id {:?}: a node id cannot contain ':', which separates the parts of an HLC", escape_excerpt(.node_id.as_bytes(), HLC_EXCERPT_LEN))]
    InvalidNodeId {
        /// The node id that was refused.
        node_id: String,
    },
    /// The counter would pass `u64::MAX` within one millisecond.
    #[error(
        "HLC counter overflow at {ms} ms: the counter cannot go past {}",
        u64::MAX
    )]
    CounterOverflow {
        /// The millisecond value at which the counter ran out.
        ms: u64,
    },
}

impl HlcError {
    /// A stable snake_case name of the variant: `"malformed"`, `"drift"` or
    /// `"counter_overflow"` (used by the shared test vectors and the bindings).
    ///
    /// ```
    /// use mqstate::protocol::hlc::HlcError;
    ///
    /// assert_eq!(HlcError::CounterOverflow { ms: 5 }.kind_str(), "counter_overflow");
    /// ```
    pub fn kind_str(&self) -> &'static str {
        match self {
            HlcError::Malformed { .. } => "malformed",
            HlcError::Drift { .. } => "drift",
            HlcError::CounterOverflow { .. } => "counter_overflow",
            HlcError::InvalidNodeId { .. } => "invalid_node_id",
        }
    }

    /// For [`HlcError::Malformed`] errors made by this module, a stable snake_case code of the
    /// reason (`"too_few_parts"`, `"invalid_ms"`, `"counter_too_large"`, ...; the full list
    /// is in `tests/vectors/hlc.json`). `Some("other")` for a `Malformed` built elsewhere with
    /// its own reason, `None` for the other variants.
    ///
    /// ```
    /// use mqstate::protocol::hlc::Hlc;
    ///
    /// let err = Hlc::parse_bytes(b"1:2").unwrap_err();
    /// assert_eq!(err.reason_code(), Some("too_few_parts"));
    /// ```
    pub fn reason_code(&self) -> Option<&'static str> {
        match self {
            HlcError::Malformed { reason, .. } => Some(
                hlc_reason::CODES
                    .iter()
                    .find(|(phrase, _)| phrase == reason)
                    .map_or("other", |&(_, code)| code),
            ),
            _ => None,
        }
    }

    pub(crate) fn malformed(input: &str, reason: &'static str) -> Self {
        HlcError::Malformed {
            input: input.to_owned(),
            reason,
        }
    }
}

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
    fn a_connection_error_keeps_its_cause_as_its_source() {
        use std::error::Error as _;
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let err = Error::connection_caused_by(format!("password file p: {io}"), io);
        // What every binding shows and maps is unchanged...
        assert_eq!(err.kind(), ErrorKind::Connection);
        assert_eq!(err.to_string(), "connection error: password file p: denied");
        // ...and the error underneath is there, itself (not the Arc around it).
        let source = err
            .source()
            .and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(
            source.map(std::io::Error::kind),
            Some(std::io::ErrorKind::PermissionDenied)
        );
        // Clones share it.
        assert!(err.clone().source().is_some());
        // Without a cause there is no source.
        let bare: Error = Error::Connection("refused".into());
        assert_eq!(bare.to_string(), "connection error: refused");
        assert!(bare.source().is_none());
    }

    #[test]
    fn the_other_sources_are_unchanged() {
        use std::error::Error as _;
        let decode = DecodeError::new(
            DecodeErrorKind::Truncated,
            "a bulk string",
            0,
            &Bytes::from_static(b"$5\r\nab"),
        );
        let err = Error::from(decode.clone());
        let source = err.source().and_then(|s| s.downcast_ref::<DecodeError>());
        assert_eq!(source, Some(&decode));
        assert!(Error::Timeout(Duration::from_secs(1)).source().is_none());
        assert!(Error::InvalidArgument("x".into()).source().is_none());
    }

    #[test]
    fn texts_are_matched_exactly() {
        // A near miss is not the known error: it is kept verbatim.
        let e = ServiceError::from_text("Syntax Error");
        assert_eq!(e, ServiceError::Unknown("Syntax Error".into()));
        assert_eq!(e.text(), "Syntax Error");
    }
}
