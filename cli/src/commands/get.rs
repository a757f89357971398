//! `mqstate get KEY`: prints the value.

use std::ffi::OsString;
use std::io::IsTerminal;

use clap::Args;
use serde_json::{Map, Value};

use super::{key_arg, show_key, stdout_failure};
use crate::connect::ConnectArgs;
use crate::exit::{Code, Failure, Outcome};
use crate::output;

/// The flags of `mqstate get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// The key.
    pub key: OsString,

    /// Print the value in hex (two digits a byte) and a newline.
    #[arg(long, conflicts_with = "json")]
    pub hex: bool,

    /// Print {"key", "value", "version"} as one JSON line (binary values as "value_hex").
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// How the value is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// The bytes exactly, no newline (stdout is a pipe or a file).
    Raw,
    /// Escaped text and a newline (stdout is a terminal).
    Escaped,
    Hex,
    Json,
}

/// Runs `get`: exit code 1 (and a line on stderr) when the key does not exist.
pub async fn run(args: GetArgs) -> Outcome {
    let key = key_arg(&args.key)?;
    let format = if args.json {
        Format::Json
    } else if args.hex {
        Format::Hex
    } else if std::io::stdout().is_terminal() {
        Format::Escaped
    } else {
        Format::Raw
    };
    let client = args.connect.connect().await?;
    let result = client.get(&key).await;
    client.close().await;
    let what = format!("get {}", show_key(&key));
    let Some(found) = result.map_err(|e| Failure::from_error(&what, &e))? else {
        return Err(Failure::new(Code::Miss, format!("{what}: no such key")));
    };
    let printed = match format {
        Format::Raw => output::write_stdout(&found.value),
        Format::Escaped => output::write_line(&output::escape(&found.value)),
        Format::Hex => output::write_line(&output::hex(&found.value)),
        Format::Json => {
            let mut object = Map::new();
            output::put_bytes(&mut object, "key", &key);
            output::put_bytes(&mut object, "value", &found.value);
            object.insert("version".into(), Value::String(found.version.to_string()));
            output::write_line(&Value::Object(object).to_string())
        }
    };
    match printed {
        Ok(()) => Ok(Code::Success),
        Err(e) => stdout_failure(e),
    }
}
