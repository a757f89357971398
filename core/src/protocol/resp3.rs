//! The RESP3 payloads of the state store (docs/protocol.md sections 2, 3 and 6), in both
//! directions, so that the client and the local server share one codec.
//!
//! - Client side: `encode_*` writes a request into a [`BytesMut`]; `decode_*_reply`
//!   accepts exactly the reply forms the protocol allows for that command;
//!   [`decode_notification`] reads a KEYNOTIFY payload.
//! - Server side: [`decode_request`] turns a payload into a typed [`Request`];
//!   [`Reply::encode`], [`encode_notify_set`] and [`encode_notify_delete`] write the answers.
//!
//! Decoding never panics and never reads past its input. Every value it returns is a
//! [`Bytes`] slice of the received payload (no copy). Every malformed input is a
//! [`DecodeError`] that says what was expected and shows an escaped excerpt of what came.
//!
//! ```
//! use bytes::{Bytes, BytesMut};
//! use mqstate::protocol::resp3::{self, SetCondition, SetReply};
//!
//! let mut buf = BytesMut::new();
//! resp3::encode_set(&mut buf, b"k", b"v", SetCondition::NotExists, Some(1000));
//! assert_eq!(
//!     &buf[..],
//!     b"*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nPX\r\n$4\r\n1000\r\n"
//! );
//!
//! let reply = Bytes::from_static(b":-1\r\n");
//! assert_eq!(resp3::decode_set_reply(&reply).unwrap(), SetReply::NotApplied);
//! ```

use bytes::{BufMut, Bytes, BytesMut};

pub use super::errors::{DecodeError, DecodeErrorKind, escape_excerpt};
use crate::protocol::errors::{Error, ServiceError};

// ---------------------------------------------------------------------------------------------
// Encoding (requests, replies, notifications)
// ---------------------------------------------------------------------------------------------

/// The condition of a SET (docs/protocol.md section 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SetCondition {
    /// Always set.
    #[default]
    Always,
    /// `NX`: only if the key does not exist.
    NotExists,
    /// `NEX`: only if the key does not exist or its value equals the value being set
    /// (how a lease is acquired and renewed).
    NotExistsOrEqual,
}

impl SetCondition {
    /// The condition from the two flags every binding takes (`nx`, `nex`): at most one may
    /// be set. Both is an [`Error::InvalidArgument`] with the one message every language
    /// shows.
    ///
    /// ```
    /// use mqstate::SetCondition;
    ///
    /// assert_eq!(SetCondition::from_flags(false, false).unwrap(), SetCondition::Always);
    /// assert_eq!(SetCondition::from_flags(true, false).unwrap(), SetCondition::NotExists);
    /// assert_eq!(SetCondition::from_flags(false, true).unwrap(), SetCondition::NotExistsOrEqual);
    /// let err = SetCondition::from_flags(true, true).unwrap_err();
    /// assert_eq!(err.kind().as_str(), "invalid_argument");
    /// assert!(err.to_string().contains("nx and nex exclude each other"));
    /// ```
    pub fn from_flags(nx: bool, nex: bool) -> Result<SetCondition, Error> {
        match (nx, nex) {
            (true, true) => Err(Error::InvalidArgument(
                "nx and nex exclude each other (nx: only if absent; nex: only if absent or equal)"
                    .into(),
            )),
            (true, false) => Ok(SetCondition::NotExists),
            (false, true) => Ok(SetCondition::NotExistsOrEqual),
            (false, false) => Ok(SetCondition::Always),
        }
    }

    fn word(self) -> Option<&'static [u8]> {
        match self {
            SetCondition::Always => None,
            SetCondition::NotExists => Some(b"NX"),
            SetCondition::NotExistsOrEqual => Some(b"NEX"),
        }
    }
}

/// Longest decimal form of a u64 or i64 (with sign).
const MAX_DECIMAL: usize = 20;

/// The decimal digits of a number, on the stack, so that writing one never allocates.
struct Decimal {
    digits: [u8; MAX_DECIMAL],
    start: usize,
}

impl Decimal {
    fn new(n: u64) -> Self {
        let mut digits = [0u8; MAX_DECIMAL];
        let mut start = digits.len();
        let mut rest = n;
        for slot in digits.iter_mut().rev() {
            // `rest % 10` is below 10, so the cast cannot truncate.
            *slot = b'0' + (rest % 10) as u8;
            start -= 1;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        Decimal { digits, start }
    }

    fn as_bytes(&self) -> &[u8] {
        self.digits.get(self.start..).unwrap_or_default()
    }
}

/// Writes `n` in decimal without allocating.
fn put_decimal(buf: &mut BytesMut, n: u64) {
    buf.put_slice(Decimal::new(n).as_bytes());
}

fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |l| l as usize + 1)
}

fn put_header(buf: &mut BytesMut, prefix: u8, n: u64) {
    buf.put_u8(prefix);
    put_decimal(buf, n);
    buf.put_slice(b"\r\n");
}

fn put_bulk(buf: &mut BytesMut, data: &[u8]) {
    put_header(buf, b'$', data.len() as u64);
    buf.put_slice(data);
    buf.put_slice(b"\r\n");
}

/// Bytes taken by a bulk string of `len` bytes.
fn bulk_size(len: usize) -> usize {
    1 + decimal_len(len as u64) + 2 + len + 2
}

/// Writes an array of bulk strings, reserving the exact size first so that a request is
/// written with at most one allocation whatever its arguments.
fn put_array(buf: &mut BytesMut, parts: &[&[u8]]) {
    let size = 1
        + decimal_len(parts.len() as u64)
        + 2
        + parts.iter().map(|p| bulk_size(p.len())).sum::<usize>();
    buf.reserve(size);
    put_header(buf, b'*', parts.len() as u64);
    for part in parts {
        put_bulk(buf, part);
    }
}

/// `SET key value [NX|NEX] [PX ms]`.
///
/// An `expiry_ms` of `Some(0)` is written as is; the client rejects it before it gets here
/// (the server answers it with `syntax error`).
///
/// ```
/// # use bytes::BytesMut;
/// # use mqstate::protocol::resp3::{encode_set, SetCondition};
/// let mut buf = BytesMut::new();
/// encode_set(&mut buf, b"SETKEY2", b"VALUE5", SetCondition::Always, None);
/// assert_eq!(&buf[..], b"*3\r\n$3\r\nSET\r\n$7\r\nSETKEY2\r\n$6\r\nVALUE5\r\n");
/// ```
pub fn encode_set(
    buf: &mut BytesMut,
    key: &[u8],
    value: &[u8],
    condition: SetCondition,
    expiry_ms: Option<u64>,
) {
    let ms = expiry_ms.map(Decimal::new);
    let ms = ms.as_ref().map(Decimal::as_bytes);
    match (condition.word(), ms) {
        (None, None) => put_array(buf, &[b"SET", key, value]),
        (Some(word), None) => put_array(buf, &[b"SET", key, value, word]),
        (None, Some(ms)) => put_array(buf, &[b"SET", key, value, b"PX", ms]),
        (Some(word), Some(ms)) => put_array(buf, &[b"SET", key, value, word, b"PX", ms]),
    }
}

/// `GET key`.
pub fn encode_get(buf: &mut BytesMut, key: &[u8]) {
    put_array(buf, &[b"GET", key]);
}

/// `DEL key`.
pub fn encode_del(buf: &mut BytesMut, key: &[u8]) {
    put_array(buf, &[b"DEL", key]);
}

/// `VDEL key value`: delete only if the current value equals `value`.
pub fn encode_vdel(buf: &mut BytesMut, key: &[u8], value: &[u8]) {
    put_array(buf, &[b"VDEL", key, value]);
}

/// `KEYNOTIFY key` or, with `stop`, `KEYNOTIFY key STOP`.
///
/// ```
/// # use bytes::BytesMut;
/// # use mqstate::protocol::resp3::encode_keynotify;
/// let mut buf = BytesMut::new();
/// encode_keynotify(&mut buf, b"SOMEKEY", false);
/// assert_eq!(&buf[..], b"*2\r\n$9\r\nKEYNOTIFY\r\n$7\r\nSOMEKEY\r\n");
/// ```
pub fn encode_keynotify(buf: &mut BytesMut, key: &[u8], stop: bool) {
    if stop {
        put_array(buf, &[b"KEYNOTIFY", key, b"STOP"]);
    } else {
        put_array(buf, &[b"KEYNOTIFY", key]);
    }
}

/// `SCAN pattern` (the first page) or `SCAN pattern token` (the next ones), as the official
/// SDK sends it (docs/protocol.md, "Listing keys: SCAN"). The token is the opaque bytes the
/// previous page's reply carried.
///
/// ```
/// # use bytes::BytesMut;
/// # use mqstate::protocol::resp3::encode_scan;
/// let mut buf = BytesMut::new();
/// encode_scan(&mut buf, b"key*", None);
/// assert_eq!(&buf[..], b"*2\r\n$4\r\nSCAN\r\n$4\r\nkey*\r\n");
/// ```
pub fn encode_scan(buf: &mut BytesMut, pattern: &[u8], token: Option<&[u8]>) {
    match token {
        None => put_array(buf, &[b"SCAN", pattern]),
        Some(token) => put_array(buf, &[b"SCAN", pattern, token]),
    }
}

/// The notification sent to observers when a key is set: `NOTIFY SET VALUE v`.
pub fn encode_notify_set(buf: &mut BytesMut, value: &[u8]) {
    put_array(buf, &[b"NOTIFY", b"SET", b"VALUE", value]);
}

/// The notification sent to observers when a key is deleted or expires: `NOTIFY DELETE`.
pub fn encode_notify_delete(buf: &mut BytesMut) {
    put_array(buf, &[b"NOTIFY", b"DELETE"]);
}

// ---------------------------------------------------------------------------------------------
// Requests (server side decoding)
// ---------------------------------------------------------------------------------------------

/// A decoded request, as the server sees it. Keys and values are slices of the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `SET key value [NX|NEX] [PX ms]`.
    Set {
        /// The key (never empty once decoded).
        key: Bytes,
        /// The value (may be empty).
        value: Bytes,
        /// NX / NEX.
        condition: SetCondition,
        /// PX, in milliseconds (> 0).
        expiry_ms: Option<u64>,
    },
    /// `GET key`.
    Get {
        /// The key.
        key: Bytes,
    },
    /// `DEL key`.
    Del {
        /// The key.
        key: Bytes,
    },
    /// `VDEL key value`.
    Vdel {
        /// The key.
        key: Bytes,
        /// The value the key must hold to be deleted.
        value: Bytes,
    },
    /// `KEYNOTIFY key [STOP]`.
    KeyNotify {
        /// The key.
        key: Bytes,
        /// `STOP` was given.
        stop: bool,
    },
    /// `SCAN pattern [token]`.
    Scan {
        /// The glob pattern (never empty once decoded; see [`crate::protocol::glob`]).
        pattern: Bytes,
        /// The continuation token of the previous page (absent on the first page).
        token: Option<Bytes>,
    },
}

impl Request {
    /// The key the request is about (`None` for SCAN, which names a pattern).
    pub fn key(&self) -> Option<&Bytes> {
        match self {
            Request::Set { key, .. }
            | Request::Get { key }
            | Request::Del { key }
            | Request::Vdel { key, .. }
            | Request::KeyNotify { key, .. } => Some(key),
            Request::Scan { .. } => None,
        }
    }

    /// Writes the request the way clients send it (verbs and options in upper case).
    pub fn encode(&self, buf: &mut BytesMut) {
        match self {
            Request::Set {
                key,
                value,
                condition,
                expiry_ms,
            } => encode_set(buf, key, value, *condition, *expiry_ms),
            Request::Get { key } => encode_get(buf, key),
            Request::Del { key } => encode_del(buf, key),
            Request::Vdel { key, value } => encode_vdel(buf, key, value),
            Request::KeyNotify { key, stop } => encode_keynotify(buf, key, *stop),
            Request::Scan { pattern, token } => encode_scan(buf, pattern, token.as_deref()),
        }
    }
}

/// Why a request payload was refused; [`RequestError::service_error`] is the `-ERR` reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// Not a RESP3 array of bulk strings, or options that make no sense (`syntax error`).
    #[error("syntax error: {0}")]
    Malformed(DecodeError),
    /// Well-formed, but an option is unknown, repeated or out of range (`syntax error`).
    #[error("syntax error: {0}")]
    BadOption(String),
    /// The verb is not one of SET, GET, DEL, VDEL, KEYNOTIFY (`unknown command`).
    #[error("unknown command {0:?}")]
    UnknownCommand(String),
    /// The verb got the wrong number of arguments (`wrong number of arguments`).
    #[error("wrong number of arguments for {0}")]
    WrongNumberOfArguments(&'static str),
    /// The key is empty (`the key length is zero`).
    #[error("the key length is zero")]
    KeyLengthZero,
    /// A SCAN's pattern is empty.
    #[error("the scan pattern is empty")]
    PatternEmpty,
}

impl RequestError {
    /// The service error the server answers with.
    pub fn service_error(&self) -> ServiceError {
        match self {
            RequestError::Malformed(_) | RequestError::BadOption(_) => ServiceError::SyntaxError,
            RequestError::UnknownCommand(_) => ServiceError::UnknownCommand,
            RequestError::WrongNumberOfArguments(_) => ServiceError::WrongNumberOfArguments,
            RequestError::KeyLengthZero => ServiceError::KeyLengthZero,
            RequestError::PatternEmpty => ServiceError::Unknown(self.to_string()),
        }
    }
}

/// Decodes a request payload (server side). Verbs and options are accepted in any case.
///
/// ```
/// use bytes::Bytes;
/// use mqstate::protocol::resp3::{decode_request, Request, SetCondition};
///
/// let payload = Bytes::from_static(b"*5\r\n$3\r\nset\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\npx\r\n$2\r\n50\r\n");
/// assert_eq!(
///     decode_request(&payload).unwrap(),
///     Request::Set {
///         key: Bytes::from_static(b"k"),
///         value: Bytes::from_static(b"v"),
///         condition: SetCondition::Always,
///         expiry_ms: Some(50),
///     }
/// );
/// ```
pub fn decode_request(payload: &Bytes) -> Result<Request, RequestError> {
    let parts = decode_bulk_array(payload).map_err(RequestError::Malformed)?;
    let mut args = parts.into_iter();
    let Some(verb) = args.next() else {
        return Err(RequestError::BadOption("empty request".into()));
    };
    let rest: Vec<Bytes> = args.collect();
    let request = if verb.eq_ignore_ascii_case(b"SET") {
        decode_set(rest)?
    } else if verb.eq_ignore_ascii_case(b"GET") {
        let [key] = exact::<1>(rest, "GET")?;
        Request::Get { key }
    } else if verb.eq_ignore_ascii_case(b"DEL") {
        let [key] = exact::<1>(rest, "DEL")?;
        Request::Del { key }
    } else if verb.eq_ignore_ascii_case(b"VDEL") {
        let [key, value] = exact::<2>(rest, "VDEL")?;
        Request::Vdel { key, value }
    } else if verb.eq_ignore_ascii_case(b"KEYNOTIFY") {
        decode_keynotify(rest)?
    } else if verb.eq_ignore_ascii_case(b"SCAN") {
        decode_scan(rest)?
    } else {
        return Err(RequestError::UnknownCommand(escape_excerpt(&verb, 32)));
    };
    if request.key().is_some_and(Bytes::is_empty) {
        return Err(RequestError::KeyLengthZero);
    }
    Ok(request)
}

fn exact<const N: usize>(args: Vec<Bytes>, verb: &'static str) -> Result<[Bytes; N], RequestError> {
    args.try_into()
        .map_err(|_| RequestError::WrongNumberOfArguments(verb))
}

fn decode_set(args: Vec<Bytes>) -> Result<Request, RequestError> {
    if args.len() < 2 {
        return Err(RequestError::WrongNumberOfArguments("SET"));
    }
    let mut args = args.into_iter();
    let (Some(key), Some(value)) = (args.next(), args.next()) else {
        return Err(RequestError::WrongNumberOfArguments("SET"));
    };
    let mut condition = None;
    let mut expiry_ms = None;
    while let Some(option) = args.next() {
        if option.eq_ignore_ascii_case(b"NX") || option.eq_ignore_ascii_case(b"NEX") {
            if condition.is_some() {
                return Err(RequestError::BadOption("more than one condition".into()));
            }
            condition = Some(if option.len() == 2 {
                SetCondition::NotExists
            } else {
                SetCondition::NotExistsOrEqual
            });
        } else if option.eq_ignore_ascii_case(b"PX") {
            if expiry_ms.is_some() {
                return Err(RequestError::BadOption("PX given twice".into()));
            }
            let ms = args
                .next()
                .ok_or_else(|| RequestError::BadOption("PX without milliseconds".into()))?;
            expiry_ms = Some(parse_positive_ms(&ms)?);
        } else {
            return Err(RequestError::BadOption(format!(
                "unknown SET option \"{}\"",
                escape_excerpt(&option, 32)
            )));
        }
    }
    Ok(Request::Set {
        key,
        value,
        condition: condition.unwrap_or_default(),
        expiry_ms,
    })
}

fn parse_positive_ms(text: &[u8]) -> Result<u64, RequestError> {
    let bad = || {
        RequestError::BadOption(format!(
            "PX needs a whole number of milliseconds > 0, got \"{}\"",
            escape_excerpt(text, 32)
        ))
    };
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let ms = text.iter().try_fold(0u64, |acc, &d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    });
    match ms {
        Some(ms) if ms > 0 => Ok(ms),
        _ => Err(bad()),
    }
}

fn decode_scan(args: Vec<Bytes>) -> Result<Request, RequestError> {
    let mut it = args.into_iter();
    let (pattern, token) = match (it.next(), it.next(), it.next()) {
        (Some(pattern), token, None) => (pattern, token),
        _ => return Err(RequestError::WrongNumberOfArguments("SCAN")),
    };
    if pattern.is_empty() {
        return Err(RequestError::PatternEmpty);
    }
    Ok(Request::Scan { pattern, token })
}

fn decode_keynotify(args: Vec<Bytes>) -> Result<Request, RequestError> {
    let mut it = args.into_iter();
    match (it.next(), it.next(), it.next()) {
        (Some(key), None, None) => Ok(Request::KeyNotify { key, stop: false }),
        (Some(key), Some(stop), None) if stop.eq_ignore_ascii_case(b"STOP") => {
            Ok(Request::KeyNotify { key, stop: true })
        }
        (Some(_), Some(option), None) => Err(RequestError::BadOption(format!(
            "unknown KEYNOTIFY option \"{}\"",
            escape_excerpt(&option, 32)
        ))),
        _ => Err(RequestError::WrongNumberOfArguments("KEYNOTIFY")),
    }
}

// ---------------------------------------------------------------------------------------------
// Replies
// ---------------------------------------------------------------------------------------------

/// Any single RESP3 reply the state store sends (docs/protocol.md section 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+text` (the store only sends `+OK`).
    Simple(Bytes),
    /// `-text`; for the state store always `-ERR text`.
    Error(Bytes),
    /// `:n`.
    Integer(i64),
    /// `$n` followed by n bytes.
    Bulk(Bytes),
    /// `$-1`.
    Nil,
}

impl Reply {
    /// `+OK`.
    pub const OK: Reply = Reply::Simple(Bytes::from_static(b"OK"));

    /// The `-ERR text` reply for a service error.
    pub fn error(e: &ServiceError) -> Reply {
        let mut text = BytesMut::with_capacity(4 + e.text().len());
        text.put_slice(b"ERR ");
        text.put_slice(e.text().as_bytes());
        Reply::Error(text.freeze())
    }

    /// Writes the reply (server side).
    ///
    /// ```
    /// # use bytes::{Bytes, BytesMut};
    /// # use mqstate::protocol::resp3::Reply;
    /// let mut buf = BytesMut::new();
    /// Reply::Bulk(Bytes::from_static(b"v")).encode(&mut buf);
    /// Reply::Integer(-1).encode(&mut buf);
    /// assert_eq!(&buf[..], b"$1\r\nv\r\n:-1\r\n");
    /// ```
    pub fn encode(&self, buf: &mut BytesMut) {
        match self {
            Reply::Simple(text) | Reply::Error(text) => {
                buf.reserve(text.len() + 3);
                buf.put_u8(if matches!(self, Reply::Simple(_)) {
                    b'+'
                } else {
                    b'-'
                });
                buf.put_slice(text);
                buf.put_slice(b"\r\n");
            }
            Reply::Integer(n) => {
                buf.reserve(MAX_DECIMAL + 3);
                buf.put_u8(b':');
                if *n < 0 {
                    buf.put_u8(b'-');
                }
                put_decimal(buf, n.unsigned_abs());
                buf.put_slice(b"\r\n");
            }
            Reply::Bulk(data) => {
                buf.reserve(bulk_size(data.len()));
                put_bulk(buf, data);
            }
            Reply::Nil => buf.put_slice(b"$-1\r\n"),
        }
    }
}

/// Decodes one reply of any form; the per-command decoders below are what clients use.
pub fn decode_reply(payload: &Bytes) -> Result<Reply, DecodeError> {
    let mut cursor = Cursor::new(payload);
    let reply = cursor.reply()?;
    cursor.finish()?;
    Ok(reply)
}

/// The outcome of a SET.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SetReply {
    /// `+OK`.
    Applied,
    /// `:-1`: the NX / NEX condition failed.
    NotApplied,
}

/// The outcome of `KEYNOTIFY` / `KEYNOTIFY STOP`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyNotifyReply {
    /// `+OK`.
    Ok,
    /// `:0` to a STOP: the key was not observed.
    NotObserved,
}

/// Decodes a reply to SET: `+OK` or `:-1` (or `-ERR`).
pub fn decode_set_reply(payload: &Bytes) -> Result<SetReply, Error> {
    const EXPECTED: &str = "+OK or :-1 (SET reply)";
    match decode_reply(payload)? {
        r if r == Reply::OK => Ok(SetReply::Applied),
        Reply::Integer(-1) => Ok(SetReply::NotApplied),
        other => Err(unexpected(other, EXPECTED, payload)),
    }
}

/// Decodes a reply to GET: the value, or `None` for `$-1` (or `-ERR`).
///
/// ```
/// # use bytes::Bytes;
/// # use mqstate::protocol::resp3::decode_get_reply;
/// let payload = Bytes::from_static(b"$4\r\na\r\nb\r\n");
/// assert_eq!(decode_get_reply(&payload).unwrap().unwrap(), &b"a\r\nb"[..]);
/// assert_eq!(decode_get_reply(&Bytes::from_static(b"$-1\r\n")).unwrap(), None);
/// ```
pub fn decode_get_reply(payload: &Bytes) -> Result<Option<Bytes>, Error> {
    const EXPECTED: &str = "$n or $-1 (GET reply)";
    match decode_reply(payload)? {
        Reply::Bulk(value) => Ok(Some(value)),
        Reply::Nil => Ok(None),
        other => Err(unexpected(other, EXPECTED, payload)),
    }
}

/// Decodes a reply to DEL or VDEL: `:n` with n ≥ 0 (keys deleted), or `:-1` (VDEL value
/// mismatch), or `-ERR`.
pub fn decode_del_reply(payload: &Bytes) -> Result<i64, Error> {
    const EXPECTED: &str = ":n or :-1 (DEL/VDEL reply)";
    match decode_reply(payload)? {
        Reply::Integer(n) if n >= -1 => Ok(n),
        other => Err(unexpected(other, EXPECTED, payload)),
    }
}

/// Decodes a reply to KEYNOTIFY (`+OK`) or KEYNOTIFY STOP (`+OK` or `:0`), or `-ERR`.
pub fn decode_keynotify_reply(payload: &Bytes, stop: bool) -> Result<KeyNotifyReply, Error> {
    let expected = if stop {
        "+OK or :0 (KEYNOTIFY STOP reply)"
    } else {
        "+OK (KEYNOTIFY reply)"
    };
    match decode_reply(payload)? {
        r if r == Reply::OK => Ok(KeyNotifyReply::Ok),
        Reply::Integer(0) if stop => Ok(KeyNotifyReply::NotObserved),
        other => Err(unexpected(other, expected, payload)),
    }
}

/// One page of a SCAN reply: some keys (possibly none) and, unless this is the last page,
/// the token that asks for the next one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanPage {
    /// The keys of this page, in the server's order (the local server's is byte order).
    pub keys: Vec<Bytes>,
    /// The continuation token; `None` on the last page.
    pub token: Option<Bytes>,
}

impl ScanPage {
    /// Writes the reply (server side): `*1` then the keys for the last page, `*2` then the
    /// keys and the token otherwise.
    ///
    /// ```
    /// # use bytes::{Bytes, BytesMut};
    /// # use mqstate::protocol::resp3::ScanPage;
    /// let page = ScanPage { keys: vec![Bytes::from_static(b"k1")], token: None };
    /// let mut buf = BytesMut::new();
    /// page.encode(&mut buf);
    /// assert_eq!(&buf[..], b"*1\r\n*1\r\n$2\r\nk1\r\n");
    /// ```
    pub fn encode(&self, buf: &mut BytesMut) {
        buf.reserve(self.encoded_len());
        put_header(buf, b'*', if self.token.is_some() { 2 } else { 1 });
        put_header(buf, b'*', self.keys.len() as u64);
        for key in &self.keys {
            put_bulk(buf, key);
        }
        if let Some(token) = &self.token {
            put_bulk(buf, token);
        }
    }

    /// The exact size of [`ScanPage::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        4 + 1
            + decimal_len(self.keys.len() as u64)
            + 2
            + self.keys.iter().map(|k| bulk_size(k.len())).sum::<usize>()
            + self.token.as_ref().map_or(0, |t| bulk_size(t.len()))
    }
}

/// Decodes a reply to SCAN: `*1` (last page) or `*2` (more to come) around an array of
/// bulk-string keys and, with `*2`, a bulk-string token; or `-ERR`.
///
/// ```
/// # use bytes::Bytes;
/// # use mqstate::protocol::resp3::decode_scan_reply;
/// let payload = Bytes::from_static(b"*2\r\n*1\r\n$2\r\nk1\r\n$3\r\n\x00\xffx\r\n");
/// let page = decode_scan_reply(&payload).unwrap();
/// assert_eq!(page.keys, vec![Bytes::from_static(b"k1")]);
/// assert_eq!(page.token.as_deref(), Some(&b"\x00\xffx"[..]));
/// ```
pub fn decode_scan_reply(payload: &Bytes) -> Result<ScanPage, Error> {
    const OUTER: &str = "*1 or *2 (SCAN reply)";
    if payload.first() != Some(&b'*') {
        return match decode_reply(payload) {
            Ok(other) => Err(unexpected(other, OUTER, payload)),
            Err(e) => Err(e.into()),
        };
    }
    let mut cursor = Cursor::new(payload);
    cursor.pos = 1;
    let at = cursor.pos;
    let elements = cursor.length("the SCAN reply's element count")?;
    if !matches!(elements, Some(1 | 2)) {
        return Err(cursor
            .err(DecodeErrorKind::UnexpectedReply, OUTER, at)
            .into());
    }
    let keys = cursor.bulk_array()?;
    let token = if elements == Some(2) {
        let at = cursor.pos;
        if cursor.type_byte("the SCAN continuation token ($n)")? != b'$' {
            return Err(cursor
                .err(
                    DecodeErrorKind::UnexpectedType,
                    "the SCAN continuation token ($n)",
                    at,
                )
                .into());
        }
        let len_at = cursor.pos;
        let Some(n) = cursor.length("the SCAN continuation token's length")? else {
            return Err(cursor
                .err(
                    DecodeErrorKind::NegativeLength,
                    "the SCAN continuation token ($n)",
                    len_at,
                )
                .into());
        };
        Some(cursor.bulk_data(n, "the SCAN continuation token")?)
    } else {
        None
    };
    cursor.finish()?;
    Ok(ScanPage { keys, token })
}

/// Turns a reply the command does not accept into the right error: `-ERR` is a service
/// error whatever the command; anything else is an unexpected payload.
fn unexpected(reply: Reply, expected: &'static str, payload: &Bytes) -> Error {
    match reply {
        Reply::Error(text) => Error::Service(service_error_from_reply(&text)),
        _ => Error::UnexpectedPayload(DecodeError::new(
            DecodeErrorKind::UnexpectedReply,
            expected,
            0,
            payload,
        )),
    }
}

/// Maps the text of a `-` reply to a service error. The store prefixes its texts with
/// `ERR `; a reply without it is kept whole as an unknown error.
pub fn service_error_from_reply(text: &[u8]) -> ServiceError {
    let text = String::from_utf8_lossy(text);
    match text.strip_prefix("ERR ") {
        Some(rest) => ServiceError::from_text(rest),
        None => ServiceError::Unknown(text.into_owned()),
    }
}

// ---------------------------------------------------------------------------------------------
// Notifications
// ---------------------------------------------------------------------------------------------

/// What a KEYNOTIFY notification says happened to the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotifyOperation {
    /// `NOTIFY SET VALUE v`: the key now holds `v`.
    Set(Bytes),
    /// `NOTIFY DELETE` (or `NOTIFY DEL`, as the published text spells it): the key was
    /// deleted or expired.
    Delete,
}

/// Decodes a notification payload (words in any case; `DELETE` and `DEL` both accepted).
///
/// ```
/// # use bytes::Bytes;
/// # use mqstate::protocol::resp3::{decode_notification, NotifyOperation};
/// let payload = Bytes::from_static(b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n");
/// assert_eq!(decode_notification(&payload).unwrap(), NotifyOperation::Delete);
/// ```
pub fn decode_notification(payload: &Bytes) -> Result<NotifyOperation, DecodeError> {
    const EXPECTED: &str = "NOTIFY SET VALUE v or NOTIFY DELETE";
    let parts = decode_bulk_array(payload)?;
    let word = |i: usize, w: &[u8]| parts.get(i).is_some_and(|p| p.eq_ignore_ascii_case(w));
    let is_set = parts.len() == 4 && word(0, b"NOTIFY") && word(1, b"SET") && word(2, b"VALUE");
    let is_delete =
        parts.len() == 2 && word(0, b"NOTIFY") && (word(1, b"DELETE") || word(1, b"DEL"));
    match parts.get(3) {
        Some(value) if is_set => Ok(NotifyOperation::Set(value.clone())),
        _ if is_delete => Ok(NotifyOperation::Delete),
        _ => Err(DecodeError::new(
            DecodeErrorKind::UnknownNotification,
            EXPECTED,
            0,
            payload,
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// The reader
// ---------------------------------------------------------------------------------------------

/// Decodes a whole payload that must be one array of bulk strings (requests, notifications).
pub fn decode_bulk_array(payload: &Bytes) -> Result<Vec<Bytes>, DecodeError> {
    let mut cursor = Cursor::new(payload);
    let parts = cursor.bulk_array()?;
    cursor.finish()?;
    Ok(parts)
}

/// A position in a payload. Every read checks its bounds; nothing indexes blindly.
struct Cursor<'a> {
    payload: &'a Bytes,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(payload: &'a Bytes) -> Self {
        Cursor { payload, pos: 0 }
    }

    fn err(&self, kind: DecodeErrorKind, expected: &'static str, offset: usize) -> DecodeError {
        DecodeError::new(kind, expected, offset, self.payload)
    }

    fn remaining(&self) -> &'a [u8] {
        self.payload.get(self.pos..).unwrap_or_default()
    }

    /// Reads the type byte; `expected` names the element wanted here.
    fn type_byte(&mut self, expected: &'static str) -> Result<u8, DecodeError> {
        match self.remaining().first() {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None if self.payload.is_empty() => {
                Err(self.err(DecodeErrorKind::Empty, expected, self.pos))
            }
            None => Err(self.err(DecodeErrorKind::Truncated, expected, self.pos)),
        }
    }

    /// Reads up to the next CRLF and returns the line without it. A lone `\r` or `\n`
    /// inside a line is an error: RESP3 simple lines never contain them.
    fn line(&mut self, expected: &'static str) -> Result<&'a [u8], DecodeError> {
        let rest = self.remaining();
        let Some(end) = rest.iter().position(|&b| b == b'\r' || b == b'\n') else {
            return Err(self.err(DecodeErrorKind::MissingCrlf, expected, self.payload.len()));
        };
        if rest.get(end..end + 2) != Some(b"\r\n") {
            return Err(self.err(DecodeErrorKind::MissingCrlf, expected, self.pos + end));
        }
        let line = rest.get(..end).unwrap_or_default();
        self.pos += end + 2;
        Ok(line)
    }

    /// Reads a signed decimal integer line (`-` then digits, or digits).
    fn integer(&mut self, expected: &'static str) -> Result<i64, DecodeError> {
        let start = self.pos;
        let line = self.line(expected)?;
        let (negative, digits) = match line.split_first() {
            Some((b'-', digits)) => (true, digits),
            _ => (false, line),
        };
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return Err(self.err(DecodeErrorKind::InvalidInteger, expected, start));
        }
        let magnitude = digits.iter().try_fold(0i64, |acc, &d| {
            let d = i64::from(d - b'0');
            // Accumulating negatively reaches i64::MIN, which has no positive twin.
            if negative {
                acc.checked_mul(10)?.checked_sub(d)
            } else {
                acc.checked_mul(10)?.checked_add(d)
            }
        });
        magnitude.ok_or_else(|| self.err(DecodeErrorKind::IntegerOverflow, expected, start))
    }

    /// Reads a length: `-1` means null (returns `None`), other negatives are errors.
    fn length(&mut self, expected: &'static str) -> Result<Option<usize>, DecodeError> {
        let start = self.pos;
        match self.integer(expected)? {
            -1 => Ok(None),
            n if n < 0 => Err(self.err(DecodeErrorKind::NegativeLength, expected, start)),
            n => usize::try_from(n)
                .map(Some)
                .map_err(|_| self.err(DecodeErrorKind::IntegerOverflow, expected, start)),
        }
    }

    /// Reads `n` bytes of bulk data and its CRLF, as a zero-copy slice.
    fn bulk_data(&mut self, n: usize, expected: &'static str) -> Result<Bytes, DecodeError> {
        let start = self.pos;
        let end = start
            .checked_add(n)
            .filter(|&end| end <= self.payload.len())
            .ok_or_else(|| self.err(DecodeErrorKind::Truncated, expected, start))?;
        if self.payload.get(end..end + 2) != Some(b"\r\n") {
            return Err(self.err(DecodeErrorKind::MissingCrlf, expected, end));
        }
        self.pos = end + 2;
        Ok(self.payload.slice(start..end))
    }

    fn reply(&mut self) -> Result<Reply, DecodeError> {
        const EXPECTED: &str = "a reply (+, -, : or $)";
        let start = self.pos;
        match self.type_byte(EXPECTED)? {
            b'+' => Ok(Reply::Simple(self.line_bytes("a simple string")?)),
            b'-' => Ok(Reply::Error(self.line_bytes("an error text")?)),
            b':' => Ok(Reply::Integer(self.integer("an integer")?)),
            b'$' => match self.length("a bulk string length")? {
                None => Ok(Reply::Nil),
                Some(n) => Ok(Reply::Bulk(self.bulk_data(n, "bulk string data")?)),
            },
            _ => Err(self.err(DecodeErrorKind::UnexpectedType, EXPECTED, start)),
        }
    }

    fn line_bytes(&mut self, expected: &'static str) -> Result<Bytes, DecodeError> {
        let start = self.pos;
        let line = self.line(expected)?;
        Ok(self.payload.slice(start..start + line.len()))
    }

    fn bulk_array(&mut self) -> Result<Vec<Bytes>, DecodeError> {
        const ARRAY: &str = "an array of bulk strings (*n)";
        const ELEMENT: &str = "a bulk string ($n)";
        let start = self.pos;
        if self.type_byte(ARRAY)? != b'*' {
            return Err(self.err(DecodeErrorKind::UnexpectedType, ARRAY, start));
        }
        let count_at = self.pos;
        let Some(count) = self.length("an array length")? else {
            return Err(self.err(DecodeErrorKind::NegativeLength, "an array length", count_at));
        };
        // The smallest element (`$0\r\n\r\n`) takes 6 bytes: never trust a count for
        // the allocation, or a tiny payload claiming a huge arity could exhaust memory.
        let mut parts = Vec::with_capacity(count.min(self.remaining().len() / 6));
        for _ in 0..count {
            let at = self.pos;
            if self.type_byte(ELEMENT)? != b'$' {
                return Err(self.err(DecodeErrorKind::UnexpectedType, ELEMENT, at));
            }
            let len_at = self.pos;
            let Some(n) = self.length("a bulk string length")? else {
                return Err(self.err(DecodeErrorKind::NegativeLength, ELEMENT, len_at));
            };
            parts.push(self.bulk_data(n, "bulk string data")?);
        }
        Ok(parts)
    }

    fn finish(&self) -> Result<(), DecodeError> {
        if self.pos == self.payload.len() {
            Ok(())
        } else {
            Err(self.err(
                DecodeErrorKind::TrailingBytes,
                "the end of the payload",
                self.pos,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &'static [u8]) -> Bytes {
        Bytes::from_static(s)
    }

    #[test]
    fn values_are_slices_of_the_payload() {
        let payload = b(b"$3\r\nabc\r\n");
        let value = decode_get_reply(&payload).unwrap().unwrap();
        let base = payload.as_ptr() as usize;
        assert_eq!(value.as_ptr() as usize, base + 4);
    }

    #[test]
    fn integers_at_the_limits() {
        let min = b(b":-9223372036854775808\r\n");
        assert_eq!(decode_reply(&min).unwrap(), Reply::Integer(i64::MIN));
        let over = b(b":9223372036854775808\r\n");
        assert_eq!(
            decode_reply(&over).unwrap_err().kind(),
            DecodeErrorKind::IntegerOverflow
        );
        let mut buf = BytesMut::new();
        Reply::Integer(i64::MIN).encode(&mut buf);
        assert_eq!(&buf[..], b":-9223372036854775808\r\n");
    }

    #[test]
    fn huge_arity_does_not_allocate_up_front() {
        let err = decode_request(&b(b"*4294967295\r\n$1\r\nx\r\n")).unwrap_err();
        assert!(
            matches!(err, RequestError::Malformed(e) if e.kind() == DecodeErrorKind::Truncated)
        );
    }

    #[test]
    fn px_must_be_positive_decimal() {
        for px in [&b"0"[..], b"-5", b"1.5", b"", b"99999999999999999999999"] {
            let mut buf = BytesMut::new();
            put_array(&mut buf, &[b"SET", b"k", b"v", b"PX", px]);
            let err = decode_request(&buf.freeze()).unwrap_err();
            assert_eq!(err.service_error(), ServiceError::SyntaxError, "{px:?}");
        }
    }

    #[test]
    fn decimal_helpers_agree() {
        for n in [0u64, 9, 10, 99, 100, 12345, u64::MAX] {
            let mut buf = BytesMut::new();
            put_decimal(&mut buf, n);
            assert_eq!(buf.len(), decimal_len(n));
            assert_eq!(std::str::from_utf8(&buf).unwrap(), n.to_string());
        }
    }
}
