//! `mqstate set KEY VALUE`: writes a value, with the protocol's conditions and expiry.

use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use mqstate::{Hlc, SetOptions};
use serde_json::{Map, Value};

use super::{arg_bytes, key_arg, show_key, stdout_failure};
use crate::connect::ConnectArgs;
use crate::duration::parse_duration;
use crate::exit::{Code, Failure, Outcome};
use crate::output;

/// The flags of `mqstate set`.
#[derive(Debug, Args)]
pub struct SetArgs {
    /// The key.
    pub key: OsString,

    /// The value; `-` reads it from stdin (all bytes, binary included).
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    pub value: Option<OsString>,

    /// Read the value from this file (all bytes).
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,

    /// Set only if the key does not exist (exit code 3 otherwise).
    #[arg(long, conflicts_with = "nex")]
    pub nx: bool,

    /// Set only if the key does not exist or already holds this value (exit code 3
    /// otherwise).
    #[arg(long)]
    pub nex: bool,

    /// Expire the key after this long (e.g. 500ms, 10s, 1h).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub px: Option<Duration>,

    /// Fencing token of the lock that protects the key (ms:counter:node, as printed by
    /// `mqstate lock` in $MQSTATE_FENCING_TOKEN).
    #[arg(long, value_name = "TOKEN", value_parser = parse_token)]
    pub fencing_token: Option<Hlc>,

    /// Ask the service to keep the key on disk (sends the `aio-persistence: true` user
    /// property; `mqstate serve --data-dir DIR --persist requested` keeps only such keys).
    #[arg(long)]
    pub persist: bool,

    /// Print {"applied", "version"} as one JSON line instead of OK.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// A fencing token on the command line.
pub fn parse_token(text: &str) -> Result<Hlc, String> {
    text.parse::<Hlc>()
        .map_err(|e| format!("{e} (expected ms:counter:node, e.g. 1732300000000:0:StateStore)"))
}

/// Runs `set`: prints OK, or exits with code 3 when NX / NEX was not met.
pub async fn run(args: SetArgs) -> Outcome {
    let key = key_arg(&args.key)?;
    let value = read_value(args.value.as_ref(), args.file.as_ref())?;
    let mut options = SetOptions::default();
    if args.nx {
        options = options.nx();
    }
    if args.nex {
        options = options.nex();
    }
    if let Some(px) = args.px {
        if px.is_zero() {
            return Err(Failure::usage("--px must be greater than zero"));
        }
        options = options.expiry(px);
    }
    if let Some(token) = args.fencing_token {
        options = options.fencing_token(token);
    }
    if args.persist {
        options = options.persist();
    }
    let client = args.connect.connect().await?;
    let result = client.set(&key, &value, options).await;
    client.close().await;
    let what = format!("set {}", show_key(&key));
    let outcome = result.map_err(|e| Failure::from_error(&what, &e))?;
    let printed = if args.json {
        let mut object = Map::new();
        output::put_bytes(&mut object, "key", &key);
        object.insert("applied".into(), Value::Bool(outcome.applied));
        object.insert("version".into(), Value::String(outcome.version.to_string()));
        output::write_line(&Value::Object(object).to_string())
    } else if outcome.applied {
        output::write_line("OK")
    } else {
        Ok(())
    };
    if let Err(e) = printed {
        return stdout_failure(e);
    }
    if outcome.applied {
        Ok(Code::Success)
    } else {
        let condition = if args.nx {
            "the key exists (--nx)"
        } else {
            "the key holds another value (--nex)"
        };
        Err(Failure::new(
            Code::NotApplied,
            format!("{what}: not set: {condition}"),
        ))
    }
}

/// The value: the argument, stdin for `-`, or the file.
fn read_value(value: Option<&OsString>, file: Option<&PathBuf>) -> Result<Vec<u8>, Failure> {
    match (value, file) {
        (Some(v), _) if v == "-" => {
            let mut buf = Vec::new();
            std::io::stdin()
                .lock()
                .read_to_end(&mut buf)
                .map_err(|e| Failure::usage(format!("reading the value from stdin: {e}")))?;
            Ok(buf)
        }
        (Some(v), _) => Ok(arg_bytes(v)),
        (None, Some(path)) => std::fs::read(path)
            .map_err(|e| Failure::usage(format!("reading --file {}: {e}", path.display()))),
        (None, None) => Err(Failure::usage("a VALUE or --file is required")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_or_say_what_is_expected() {
        let t = parse_token("1732300000000:3:StateStore").unwrap();
        assert_eq!(
            (t.ms, t.counter, t.node_id.as_str()),
            (1732300000000, 3, "StateStore")
        );
        assert!(
            parse_token("yesterday")
                .unwrap_err()
                .contains("ms:counter:node")
        );
    }

    #[test]
    fn a_missing_file_is_a_usage_error() {
        let f = read_value(None, Some(&PathBuf::from("/nonexistent/value.bin"))).unwrap_err();
        assert_eq!(f.code, Code::Usage);
        assert!(
            f.message.contains("/nonexistent/value.bin"),
            "{}",
            f.message
        );
    }
}
