//! `mqstate keys PATTERN`: lists the keys that match a glob, one a line, a page at a time.
//!
//! The listing is the core's [`mqstate::Scan`]: each page is printed as soon as it arrives
//! (nothing is collected first, so a large store starts printing at once and `| head` stops
//! it). How a key is printed follows `get`: raw bytes to a pipe, escaped text on a terminal,
//! and with `--json` a key that is not UTF-8 keeps its bytes in hex (see [`json_line`]).

use std::ffi::OsString;
use std::io::IsTerminal;

use clap::Args;
use serde_json::{Map, Value};

use super::{arg_bytes, show_key, stdout_failure};
use crate::connect::ConnectArgs;
use crate::exit::{Code, Failure, Outcome};
use crate::output;

/// The flags of `mqstate keys`.
#[derive(Debug, Args)]
pub struct KeysArgs {
    /// The glob: `*` any run of bytes, `?` one byte, `[abc]`, `[a-z]` and `[^...]` classes,
    /// `\` to take the next byte literally.
    pub pattern: OsString,

    /// One JSON value a line: the key as a JSON string, or {"key": null, "key_hex": "..."}
    /// when it is not UTF-8 (as `get --json` shows a binary key).
    #[arg(long, conflicts_with = "count")]
    pub json: bool,

    /// Print only the number of matching keys.
    #[arg(long)]
    pub count: bool,

    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// How each key is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// The bytes exactly and a newline (stdout is a pipe or a file).
    Raw,
    /// Escaped text and a newline (stdout is a terminal).
    Escaped,
    /// One JSON value a line.
    Json,
    /// Nothing per key; the number at the end.
    Count,
}

/// Runs `keys`: exit code 1 (and a line on stderr) when no key matches.
pub async fn run(args: KeysArgs) -> Outcome {
    let pattern = arg_bytes(&args.pattern);
    if pattern.is_empty() {
        return Err(Failure::usage(
            "the pattern must not be empty (`*` lists every key)",
        ));
    }
    let format = if args.count {
        Format::Count
    } else if args.json {
        Format::Json
    } else if std::io::stdout().is_terminal() {
        Format::Escaped
    } else {
        Format::Raw
    };
    let client = args.connect.connect().await?;
    let outcome = list(&client, &pattern, format).await;
    client.close().await;
    outcome
}

/// Asks for the pages one after another and prints each as it comes.
async fn list(client: &mqstate::Client, pattern: &[u8], format: Format) -> Outcome {
    let what = format!("keys {}", show_key(pattern));
    let mut scan = client
        .scan(pattern)
        .map_err(|e| Failure::from_error(&what, &e))?;
    let mut listed: u64 = 0;
    loop {
        let page = match scan.next_page().await {
            Ok(Some(page)) => page,
            Ok(None) => break,
            Err(e) => {
                let mut failure = Failure::from_error(&what, &e);
                if listed > 0 && format != Format::Count {
                    failure
                        .message
                        .push_str(&format!(" (after {listed} keys were printed)"));
                }
                return Err(failure);
            }
        };
        listed += page.len() as u64;
        if format == Format::Count || page.is_empty() {
            continue;
        }
        let mut text = Vec::new();
        for key in &page {
            render(&mut text, key, format);
        }
        if let Err(e) = output::write_stdout(&text) {
            return stdout_failure(e);
        }
    }
    if format == Format::Count
        && let Err(e) = output::write_line(&listed.to_string())
    {
        return stdout_failure(e);
    }
    if listed == 0 {
        return Err(Failure::new(Code::Miss, format!("{what}: no key matches")));
    }
    Ok(Code::Success)
}

/// Appends one key's line to `out`.
fn render(out: &mut Vec<u8>, key: &[u8], format: Format) {
    match format {
        Format::Raw => out.extend_from_slice(key),
        Format::Escaped => out.extend_from_slice(output::escape(key).as_bytes()),
        Format::Json => out.extend_from_slice(json_line(key).as_bytes()),
        Format::Count => return,
    }
    out.push(b'\n');
}

/// A key as one JSON value: a JSON string when the key is UTF-8, else the object `get
/// --json` uses for a binary key, `{"key":null,"key_hex":"..."}`, so that no byte is lost
/// and a UTF-8 key that looks like hex is never confused with a binary one.
fn json_line(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(text) => Value::String(text.to_owned()).to_string(),
        Err(_) => {
            let mut object = Map::new();
            output::put_bytes(&mut object, "key", key);
            Value::Object(object).to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(keys: &[&[u8]], format: Format) -> Vec<u8> {
        let mut out = Vec::new();
        for key in keys {
            render(&mut out, key, format);
        }
        out
    }

    #[test]
    fn raw_lines_are_the_bytes() {
        assert_eq!(
            lines(&[b"door", b"\xff\x00k"], Format::Raw),
            b"door\n\xff\x00k\n"
        );
    }

    #[test]
    fn escaped_lines_cannot_be_broken_by_a_key() {
        assert_eq!(
            lines(&[b"a\nb", b"\xffx", b"c\\d"], Format::Escaped),
            b"a\\nb\n\\xffx\nc\\\\d\n"
        );
    }

    #[test]
    fn json_lines_are_strings_or_hex_objects() {
        assert_eq!(json_line(b"door"), r#""door""#);
        assert_eq!(json_line(b"a\nb\"c"), r#""a\nb\"c""#);
        assert_eq!(json_line("é".as_bytes()), r#""é""#);
        assert_eq!(
            json_line(b"\xff\x00k"),
            r#"{"key":null,"key_hex":"ff006b"}"#
        );
        assert!(lines(&[b"x"], Format::Count).is_empty());
    }
}
