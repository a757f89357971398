//! The client subcommands, one module each, and the little they share: keys and values
//! from the command line as bytes, and running a future with Ctrl-C handled.

pub mod bench;
pub mod bench_memory;
pub mod completions;
pub mod del;
pub mod elect;
pub mod get;
pub mod keys;
pub mod lock;
pub mod passwd;
pub mod set;
mod supervise;
pub mod watch;

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use crate::exit::Failure;
use crate::output;

/// A key or value argument as the bytes the user typed (keys may be any bytes the shell
/// can pass, not only UTF-8).
pub fn arg_bytes(arg: &OsStr) -> Vec<u8> {
    arg.as_bytes().to_vec()
}

/// A key as shown in messages: `"door"`, escaped.
pub fn show_key(key: &[u8]) -> String {
    format!("\"{}\"", output::escape(key))
}

/// A key argument, refusing an empty one up front (the protocol cannot carry it).
pub fn key_arg(arg: &OsString) -> Result<Vec<u8>, Failure> {
    if arg.is_empty() {
        return Err(Failure::usage("the key must not be empty"));
    }
    Ok(arg_bytes(arg))
}

/// Ends a command after a failed write to stdout: quietly when the reader went away.
pub fn stdout_failure(e: output::WriteError) -> Result<crate::exit::Code, Failure> {
    match e {
        output::WriteError::Closed => Ok(crate::exit::Code::Success),
        output::WriteError::Failed(message) => Err(Failure::usage(message)),
    }
}
