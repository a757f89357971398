//! `mqstate lock NAME --ttl 10s -- CMD ARGS...`: runs a command while holding a lock.

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;
use mqstate::ErrorKind;
use mqstate::lock::{DEFAULT_RENEW_FRACTION, Lease};

use super::supervise::{self, Held};
use super::{key_arg, show_key};
use crate::connect::ConnectArgs;
use crate::duration::parse_duration;
use crate::exit::{Code, Failure, Outcome};
use crate::signals::Interrupts;

/// The flags of `mqstate lock`.
#[derive(Debug, Args)]
pub struct LockArgs {
    /// The lock's name (the key that holds it).
    pub name: OsString,

    /// Lease time; renewed automatically every half of it while the command runs.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    pub ttl: Duration,

    /// Wait up to this long for the lock (default: try once, exit code 3 if it is held).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub wait: Option<Duration>,

    /// The value written to the lock's key while held (default: this connection's client
    /// id, unique per run).
    #[arg(long, value_name = "ID")]
    pub holder: Option<String>,

    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,

    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// Runs `lock`: the command's exit status, 3 if the lock is held by someone else, 5 if
/// `--wait` ran out, 7 if the lock was lost while the command ran.
pub async fn run(args: LockArgs) -> Outcome {
    let name = key_arg(&args.name)?;
    if args.ttl < Duration::from_millis(100) {
        return Err(Failure::usage("--ttl must be at least 100ms"));
    }
    let mut interrupts = Interrupts::new()?;
    let client = args.connect.connect().await?;
    let holder = args
        .holder
        .clone()
        .unwrap_or_else(|| client.client_id().to_owned());
    let what = format!("lock {}", show_key(&name));
    let lease = Lease::new(&client, &name, holder).map_err(|e| Failure::from_error(&what, &e))?;
    let events = lease.events();
    let acquired = tokio::select! {
        acquired = acquire(&lease, args.ttl, args.wait, &what) => acquired,
        _ = interrupts.recv() => Err(Failure::new(Code::Interrupted, format!("{what}: interrupted while waiting"))),
    };
    let outcome = match acquired {
        Ok(token) => match lease.auto_renew(DEFAULT_RENEW_FRACTION) {
            Ok(()) => {
                let held = Held {
                    lease: &lease,
                    events,
                    token,
                    what,
                };
                supervise::run(&args.command, held, &mut interrupts).await
            }
            Err(e) => {
                let _ = lease.release().await;
                Err(Failure::from_error(&what, &e))
            }
        },
        Err(f) => Err(f),
    };
    client.close().await;
    outcome
}

async fn acquire(
    lease: &Lease,
    ttl: Duration,
    wait: Option<Duration>,
    what: &str,
) -> Result<mqstate::lock::FencingToken, Failure> {
    match wait {
        Some(wait) => lease.acquire_wait(ttl, wait).await.map_err(|e| {
            if e.kind() == ErrorKind::Timeout {
                Failure::new(
                    Code::Timeout,
                    format!(
                        "{what}: not acquired within {}",
                        humantime::format_duration(wait)
                    ),
                )
            } else {
                Failure::from_error(what, &e)
            }
        }),
        None => match lease.acquire(ttl).await {
            Ok(Some(token)) => Ok(token),
            Ok(None) => {
                let holder = lease.holder().await.ok().flatten();
                let by = holder
                    .map(|h| format!(" by {}", show_key(&h)))
                    .unwrap_or_default();
                Err(Failure::new(
                    Code::NotApplied,
                    format!("{what}: held{by} (use --wait to wait for it)"),
                ))
            }
            Err(e) => Err(Failure::from_error(what, &e)),
        },
    }
}
