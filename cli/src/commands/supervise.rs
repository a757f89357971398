//! Runs a command while a lease is held, like `flock`: shared by `lock` and `elect`.
//!
//! The child gets the fencing token in `MQSTATE_FENCING_TOKEN`. When the child exits, the
//! lease is released and the child's exit status is returned. When the lease is lost (a
//! renewal failed, or someone deleted or took the key), the child gets SIGTERM (SIGKILL
//! after [`GRACE`]) and the command fails with exit code 7: the work it protects must stop,
//! since another holder may start at once.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use mqstate::lock::{FencingToken, Lease, LeaseEvent, LeaseEvents};
use tokio::process::{Child, Command};

use crate::exit::{Code, Failure, Outcome};
use crate::signals::{Interrupts, Stop};

/// The variable that carries the fencing token to the child.
pub const TOKEN_ENV: &str = "MQSTATE_FENCING_TOKEN";

/// How long a child may take to exit after SIGTERM before it gets SIGKILL.
pub const GRACE: Duration = Duration::from_secs(10);

/// A lease that is held, and what to call it in messages (`lock "nightly"`).
#[derive(Debug)]
pub struct Held<'a> {
    /// The lease (its automatic renewal already running).
    pub lease: &'a Lease,
    /// Its events, subscribed before it was acquired.
    pub events: LeaseEvents,
    /// The fencing token of the acquisition.
    pub token: FencingToken,
    /// `lock "name"` or `elect "name"`, for messages.
    pub what: String,
}

/// Runs `command` while `held` is held; see the module documentation.
pub async fn run(command: &[OsString], mut held: Held<'_>, interrupts: &mut Interrupts) -> Outcome {
    let Some((program, args)) = command.split_first() else {
        let _ = held.lease.release().await;
        return Err(Failure::usage("no command given after --"));
    };
    let spawned = Command::new(program)
        .args(args)
        .env(TOKEN_ENV, held.token.to_string())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            release(&held).await;
            let status = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Err(Failure::new(
                Code::Child(status),
                format!("{}: cannot run {:?}: {e}", held.what, program),
            ));
        }
    };
    let mut lost = None;
    let mut events_open = true;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            event = held.events.recv(), if events_open => match event {
                Some(LeaseEvent::Lost { reason }) => {
                    lost = Some(reason);
                    break terminate(&mut child).await;
                }
                Some(_) => {}
                // Every lease handle is gone (cannot happen while `held` borrows one): stop
                // listening rather than spin.
                None => events_open = false,
            },
            stop = interrupts.next() => {
                // Ctrl-C in a terminal reaches the child too (same process group); SIGTERM
                // sent to mqstate alone is passed on. Either way the lease is held until the
                // child is gone.
                if stop == Stop::Terminate {
                    signal(&child, libc::SIGTERM);
                }
            }
        }
    };
    let status = status.map_err(|e| {
        Failure::new(
            Code::Usage,
            format!("{}: waiting for the command: {e}", held.what),
        )
    })?;
    let code = exit_status(status);
    if let Some(reason) = lost {
        held.lease.stop_renewal();
        return Err(Failure::new(
            Code::Lost,
            format!(
                "{} lost while the command ran ({reason}); the command got SIGTERM and exited with status {code}",
                held.what
            ),
        ));
    }
    release(&held).await;
    Ok(Code::Child(code))
}

/// Releases the lease; a failure is only a warning (the lease then expires by its ttl).
async fn release(held: &Held<'_>) {
    if let Err(e) = held.lease.release().await {
        eprintln!(
            "mqstate: warning: {}: could not release ({e}); it expires after its ttl",
            held.what
        );
    }
}

/// SIGTERM, then SIGKILL if the child outlives [`GRACE`].
async fn terminate(child: &mut Child) -> std::io::Result<ExitStatus> {
    signal(child, libc::SIGTERM);
    match tokio::time::timeout(GRACE, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            child.start_kill()?;
            child.wait().await
        }
    }
}

/// Sends `sig` to the child if it has not been reaped yet.
fn signal(child: &Child, sig: libc::c_int) {
    if let Some(pid) = child.id().and_then(|p| libc::pid_t::try_from(p).ok()) {
        // SAFETY: kill(2) takes plain integers and has no memory effects; `pid` is our own
        // child, not yet reaped (tokio returns no id once it has been), so it cannot name
        // another process.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// The shell's convention: the exit code, or 128 + the signal that killed the child.
fn exit_status(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_follow_the_shell() {
        assert_eq!(exit_status(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_status(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_status(ExitStatus::from_raw(libc::SIGTERM)), 128 + 15);
    }
}
