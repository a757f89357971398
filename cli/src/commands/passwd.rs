//! `mqstate passwd FILE USER`: adds or replaces a user in a password file of salted argon2
//! hashes, for `mqstate serve --password-file FILE`. The password is read from stdin (its
//! first line), so that it appears in no process list or shell history.

use std::io::BufRead as _;
use std::path::PathBuf;

use clap::Args;

use crate::exit::{Code, Failure};

/// The arguments of `mqstate passwd`.
#[derive(Debug, Args)]
pub struct PasswdArgs {
    /// The password file (created if missing; other users' lines are kept).
    pub file: PathBuf,
    /// The user name (no ':' or spaces).
    pub user: String,
}

/// Reads the password from stdin and writes the entry.
pub fn run(args: &PasswdArgs) -> Result<Code, Failure> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| Failure::usage(format!("cannot read the password from stdin: {e}")))?;
    let password = line.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        return Err(Failure::usage(
            "no password on stdin (e.g. `printf '%s\\n' \"$PW\" | mqstate passwd FILE USER`)",
        ));
    }
    mqstate_server::security::set_password(&args.file, &args.user, password)
        .map_err(|e| Failure::usage(e.to_string()))?;
    eprintln!("mqstate: {} set in {}", args.user, args.file.display());
    Ok(Code::Success)
}
