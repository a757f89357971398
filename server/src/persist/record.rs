//! How one key is stored on disk: its value, version, fencing token and expiry deadline
//! (absolute, in Unix milliseconds, so that a key whose deadline passed while the server was
//! down is gone on restart).
//!
//! Layout (format 1), big-endian:
//!
//! ```text
//! flags: u8            bit 0: a deadline follows; bit 1: a fencing token follows
//! deadline: u64        Unix ms (if bit 0)
//! version: u16 len + HLC text
//! fencing token: u16 len + HLC text (if bit 1)
//! value: the rest
//! ```
//!
//! ```
//! use bytes::Bytes;
//! use mqstate::Hlc;
//! use mqstate_server::persist::record::{Record, decode, encode};
//!
//! let r = Record {
//!     value: Bytes::from_static(b"v"),
//!     version: Hlc::new(5, 1, "StateStore"),
//!     fencing_token: None,
//!     deadline_unix_ms: Some(1_700_000_000_000),
//! };
//! assert_eq!(decode(&encode(&r)).unwrap(), r);
//! assert!(decode(b"\x07").is_err());
//! ```

use bytes::Bytes;
use mqstate::Hlc;

const HAS_DEADLINE: u8 = 1;
const HAS_FENCING_TOKEN: u8 = 2;

/// One stored key, as on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The value.
    pub value: Bytes,
    /// The key's version.
    pub version: Hlc,
    /// The fencing token protecting the key.
    pub fencing_token: Option<Hlc>,
    /// When the key expires, in Unix milliseconds.
    pub deadline_unix_ms: Option<u64>,
}

/// Why a stored record cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed record: {0}")]
pub struct RecordError(String);

/// Encodes a record.
pub fn encode(record: &Record) -> Vec<u8> {
    let version = record.version.to_string();
    let token = record.fencing_token.as_ref().map(Hlc::to_string);
    let mut out = Vec::with_capacity(1 + 8 + 2 + version.len() + 40 + record.value.len());
    let mut flags = 0;
    if record.deadline_unix_ms.is_some() {
        flags |= HAS_DEADLINE;
    }
    if token.is_some() {
        flags |= HAS_FENCING_TOKEN;
    }
    out.push(flags);
    if let Some(deadline) = record.deadline_unix_ms {
        out.extend_from_slice(&deadline.to_be_bytes());
    }
    push_text(&mut out, &version);
    if let Some(token) = &token {
        push_text(&mut out, token);
    }
    out.extend_from_slice(&record.value);
    out
}

/// HLC texts are about 30 bytes; a node id longer than `u16::MAX` cannot come from the
/// protocol's parser, and would be cut (and then refused on reading) rather than panic.
fn push_text(out: &mut Vec<u8>, text: &str) {
    let len = u16::try_from(text.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(text.as_bytes().get(..usize::from(len)).unwrap_or_default());
}

/// Decodes a record, refusing anything malformed.
pub fn decode(bytes: &[u8]) -> Result<Record, RecordError> {
    let mut rest = bytes;
    let flags = take(&mut rest, 1, "flags")?.first().copied().unwrap_or(0);
    if flags & !(HAS_DEADLINE | HAS_FENCING_TOKEN) != 0 {
        return Err(RecordError(format!("unknown flags {flags:#04x}")));
    }
    let deadline_unix_ms = if flags & HAS_DEADLINE != 0 {
        let raw = take(&mut rest, 8, "deadline")?;
        let mut buf = [0u8; 8];
        buf.copy_from_slice(raw);
        Some(u64::from_be_bytes(buf))
    } else {
        None
    };
    let version = take_hlc(&mut rest, "version")?;
    let fencing_token = if flags & HAS_FENCING_TOKEN != 0 {
        Some(take_hlc(&mut rest, "fencing token")?)
    } else {
        None
    };
    Ok(Record {
        value: Bytes::copy_from_slice(rest),
        version,
        fencing_token,
        deadline_unix_ms,
    })
}

fn take<'a>(rest: &mut &'a [u8], n: usize, what: &str) -> Result<&'a [u8], RecordError> {
    if rest.len() < n {
        return Err(RecordError(format!(
            "truncated {what}: {n} bytes needed, {} left",
            rest.len()
        )));
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Ok(head)
}

fn take_hlc(rest: &mut &[u8], what: &str) -> Result<Hlc, RecordError> {
    let len = take(rest, 2, what)?;
    let len = usize::from(u16::from_be_bytes([
        len.first().copied().unwrap_or(0),
        len.get(1).copied().unwrap_or(0),
    ]));
    let text = take(rest, len, what)?;
    Hlc::parse_bytes(text).map_err(|e| RecordError(format!("{what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_shape() {
        for (token, deadline, value) in [
            (None, None, &b""[..]),
            (Some(Hlc::new(9, 2, "StateStore")), None, b"x"),
            (None, Some(1), b"\r\n\x00"),
            (Some(Hlc::new(1, 0, "a")), Some(u64::MAX), b"value"),
        ] {
            let r = Record {
                value: Bytes::copy_from_slice(value),
                version: Hlc::new(123, 4, "StateStore"),
                fencing_token: token,
                deadline_unix_ms: deadline,
            };
            assert_eq!(decode(&encode(&r)).unwrap(), r);
        }
    }

    #[test]
    fn malformed_records_are_errors_not_panics() {
        let good = encode(&Record {
            value: Bytes::from_static(b"v"),
            version: Hlc::new(1, 0, "StateStore"),
            fencing_token: Some(Hlc::new(1, 0, "StateStore")),
            deadline_unix_ms: Some(5),
        });
        // Every truncation before the value starts is refused.
        let value_start = good.len() - 1;
        for n in 0..value_start {
            assert!(decode(&good[..n]).is_err(), "{n}");
        }
        assert!(decode(b"\x80").unwrap_err().to_string().contains("flags"));
        assert!(decode(b"\x00\x00\x03abc").is_err());
    }
}
