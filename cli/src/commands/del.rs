//! `mqstate del KEY` and `mqstate vdel KEY VALUE`.

use std::ffi::OsString;

use clap::Args;
use mqstate::{Hlc, VdelOutcome};

use super::set::parse_token;
use super::{arg_bytes, key_arg, show_key, stdout_failure};
use crate::connect::ConnectArgs;
use crate::exit::{Code, Failure, Outcome};
use crate::output;

/// The flags of `mqstate del`.
#[derive(Debug, Args)]
pub struct DelArgs {
    /// The key.
    pub key: OsString,

    /// Fencing token of the lock that protects the key.
    #[arg(long, value_name = "TOKEN", value_parser = parse_token)]
    pub fencing_token: Option<Hlc>,

    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// The flags of `mqstate vdel`.
#[derive(Debug, Args)]
pub struct VdelArgs {
    /// The key.
    pub key: OsString,

    /// Delete only if the key holds exactly this value.
    pub value: OsString,

    /// Fencing token of the lock that protects the key.
    #[arg(long, value_name = "TOKEN", value_parser = parse_token)]
    pub fencing_token: Option<Hlc>,

    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// Runs `del`: OK, or exit code 1 when there was no such key.
pub async fn run_del(args: DelArgs) -> Outcome {
    let key = key_arg(&args.key)?;
    let client = args.connect.connect().await?;
    let result = client.del(&key, args.fencing_token.as_ref()).await;
    client.close().await;
    let what = format!("del {}", show_key(&key));
    match result.map_err(|e| Failure::from_error(&what, &e))? {
        0 => Err(Failure::new(Code::Miss, format!("{what}: no such key"))),
        _ => output::write_line("OK").map_or_else(stdout_failure, |()| Ok(Code::Success)),
    }
}

/// Runs `vdel`: OK, exit code 1 when there was no such key, 3 when it holds another value.
pub async fn run_vdel(args: VdelArgs) -> Outcome {
    let key = key_arg(&args.key)?;
    let value = arg_bytes(&args.value);
    let client = args.connect.connect().await?;
    let result = client.vdel(&key, &value, args.fencing_token.as_ref()).await;
    client.close().await;
    let what = format!("vdel {}", show_key(&key));
    match result.map_err(|e| Failure::from_error(&what, &e))? {
        VdelOutcome::Deleted => {
            output::write_line("OK").map_or_else(stdout_failure, |()| Ok(Code::Success))
        }
        VdelOutcome::NotFound => Err(Failure::new(Code::Miss, format!("{what}: no such key"))),
        VdelOutcome::ValueMismatch => Err(Failure::new(
            Code::NotApplied,
            format!("{what}: not deleted: the key holds another value"),
        )),
    }
}
