//! `mqstate elect NAME --candidate ID -- CMD ARGS...`: runs a command only while this
//! process is the elected leader.

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;
use mqstate::ErrorKind;
use mqstate::lock::LeaderElection;

use super::supervise::{self, Held};
use super::{key_arg, show_key};
use crate::connect::ConnectArgs;
use crate::duration::parse_duration;
use crate::exit::{Code, Failure, Outcome};
use crate::signals::Interrupts;

/// Waiting "forever" for leadership: ten years (a deadline that far is still representable).
const FOREVER: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The flags of `mqstate elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The election's name (the key the leader holds).
    pub name: OsString,

    /// This candidate's name, written to the key while it leads (default: this
    /// connection's client id).
    #[arg(long, value_name = "ID")]
    pub candidate: Option<String>,

    /// Length of a term; renewed automatically every half of it while the command runs.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    pub term: Duration,

    /// Give up after waiting this long to be elected (exit code 5; default: wait forever).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub wait: Option<Duration>,

    /// The command and its arguments, run once elected.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,

    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// Runs `elect`: waits to be elected, runs the command, resigns when it exits and returns
/// its exit status; 7 if the leadership was lost while it ran.
pub async fn run(args: ElectArgs) -> Outcome {
    let name = key_arg(&args.name)?;
    if args.term < Duration::from_millis(100) {
        return Err(Failure::usage("--term must be at least 100ms"));
    }
    let mut interrupts = Interrupts::new()?;
    let client = args.connect.connect().await?;
    let candidate = args
        .candidate
        .clone()
        .unwrap_or_else(|| client.client_id().to_owned());
    let what = format!("elect {}", show_key(&name));
    let election = LeaderElection::new(&client, &name, candidate)
        .map_err(|e| Failure::from_error(&what, &e))?;
    let events = election.lease().events();
    let wait = args.wait.unwrap_or(FOREVER);
    let elected = tokio::select! {
        elected = election.campaign(args.term, wait) => elected.map_err(|e| {
            if e.kind() == ErrorKind::Timeout {
                Failure::new(Code::Timeout, format!("{what}: not elected within {}", humantime::format_duration(wait)))
            } else {
                Failure::from_error(&what, &e)
            }
        }),
        _ = interrupts.recv() => Err(Failure::new(Code::Interrupted, format!("{what}: interrupted while waiting to be elected"))),
    };
    let outcome = match elected {
        Ok(token) => {
            let held = Held {
                lease: election.lease(),
                events,
                token,
                what,
            };
            supervise::run(&args.command, held, &mut interrupts).await
        }
        Err(f) => Err(f),
    };
    client.close().await;
    outcome
}
