//! How keys and values are shown: raw bytes for pipes, escaped text for terminals, hex, and
//! JSON fields that stay valid for binary values.

use std::io::{self, Write};

use serde_json::{Map, Value};

/// Bytes as one line of readable text: valid UTF-8 is kept except control characters and
/// backslashes, which are escaped like Rust string literals (`\n`, `\u{1b}`, `\\`); invalid
/// bytes become `\xNN`.
///
/// ```text
/// b"door"        -> door
/// b"a\nb"        -> a\nb
/// b"\xff\x00ok"  -> \xff\0ok
/// ```
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() || c == '\\' {
                out.extend(c.escape_debug());
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Lower-case hex, two digits a byte.
///
/// ```text
/// b"\x00\xffA" -> 00ff41
/// ```
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Adds `name` to a JSON object: the text when `bytes` is UTF-8, else `null` plus
/// `name_hex` with the bytes in hex, so that binary data survives JSON.
pub fn put_bytes(object: &mut Map<String, Value>, name: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => {
            object.insert(name.to_owned(), Value::String(text.to_owned()));
        }
        Err(_) => {
            object.insert(name.to_owned(), Value::Null);
            object.insert(format!("{name}_hex"), Value::String(hex(bytes)));
        }
    }
}

/// What a failed write to stdout means: a closed pipe (`| head`) ends the command quietly,
/// anything else is reported.
#[derive(Debug)]
pub enum WriteError {
    /// The reader went away.
    Closed,
    /// Another I/O error, as text.
    Failed(String),
}

/// Writes `bytes` to stdout and flushes (so a reader sees each line at once).
pub fn write_stdout(bytes: &[u8]) -> Result<(), WriteError> {
    let mut out = io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| match e.kind() {
            io::ErrorKind::BrokenPipe => WriteError::Closed,
            _ => WriteError::Failed(format!("writing to stdout: {e}")),
        })
}

/// Writes one line (text plus `\n`) to stdout.
pub fn write_line(line: &str) -> Result<(), WriteError> {
    let mut buf = Vec::with_capacity(line.len() + 1);
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
    write_stdout(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_a_terminal_would_misshow() {
        assert_eq!(escape(b"door open"), "door open");
        assert_eq!(escape("température".as_bytes()), "température");
        assert_eq!(escape(b"a\nb\tc\\"), "a\\nb\\tc\\\\");
        assert_eq!(escape(b"\xff\x00ok\x1b"), "\\xff\\0ok\\u{1b}");
    }

    #[test]
    fn hex_and_json_bytes() {
        assert_eq!(hex(b"\x00\xffA"), "00ff41");
        let mut o = Map::new();
        put_bytes(&mut o, "value", b"on");
        put_bytes(&mut o, "key", b"\xff");
        assert_eq!(
            Value::Object(o).to_string(),
            r#"{"key":null,"key_hex":"ff","value":"on"}"#
        );
    }
}
