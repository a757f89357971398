//! Exit codes and the one error type of the client subcommands.
//!
//! Every failure becomes a [`Failure`]: an exit code from the table below and one line for
//! stderr that names what failed. `main` prints it as `mqstate: <line>`; nothing else
//! reaches the user (no panic, no `Debug` dump).
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | miss: the key does not exist (`get`, `del`, `vdel`), no key matches (`keys`) |
//! | 2 | usage: bad arguments, bad URL, unreadable input file, unwritable stdout; something the transport does not offer (`iothub receive --settle reject` over MQTT) |
//! | 3 | not applied: `set --nx/--nex` condition failed, `vdel` value differs, lock held |
//! | 4 | connection: the broker could not be reached, refused us, or the link dropped |
//! | 5 | timeout: the broker sent no CONNACK, or the state store did not answer a request, within `--timeout`; or `--wait` ran out |
//! | 6 | service: the state store answered an error, or an answer broke the protocol |
//! | 7 | lost: `lock` / `elect` lost the lease while the command ran (it got SIGTERM) |
//! | 8 | refused: IoT Hub refused the device's credentials (`iothub receive`) |
//! | 130 | interrupted (Ctrl-C) before anything was done (`iothub receive`: before `--count` was reached) |
//!
//! `lock` and `elect` otherwise return their command's own exit code (128 + N when it was
//! killed by signal N, 126 / 127 when it could not be started).

use std::fmt;

use mqstate::ErrorKind;

/// One row of the exit-code table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// 0.
    Success,
    /// 1: the key does not exist (or, for `keys`, no key matches).
    Miss,
    /// 2: bad arguments (also clap's own code for a usage error).
    Usage,
    /// 3: a condition was not met (NX, NEX, VDEL mismatch, lock held by someone else).
    NotApplied,
    /// 4: the broker could not be reached, or the connection dropped.
    Connection,
    /// 5: no answer in time.
    Timeout,
    /// 6: the state store answered with an error, or with something the protocol forbids.
    Service,
    /// 7: the lock or the leadership was lost while the command ran.
    Lost,
    /// 8: the credentials were refused (IoT Hub device authentication).
    Refused,
    /// 130: interrupted by Ctrl-C.
    Interrupted,
    /// The exit status of the command that `lock` / `elect` ran.
    Child(u8),
}

impl Code {
    /// The process exit status.
    pub fn as_u8(self) -> u8 {
        match self {
            Code::Success => 0,
            Code::Miss => 1,
            Code::Usage => 2,
            Code::NotApplied => 3,
            Code::Connection => 4,
            Code::Timeout => 5,
            Code::Service => 6,
            Code::Lost => 7,
            Code::Refused => 8,
            Code::Interrupted => 130,
            Code::Child(status) => status,
        }
    }
}

/// A failed subcommand: its exit code and the one line that says what failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The exit code.
    pub code: Code,
    /// One line, without the `mqstate: ` prefix.
    pub message: String,
}

impl Failure {
    /// A failure with this code and message.
    pub fn new(code: Code, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: one_line(&message.into()),
        }
    }

    /// A usage failure (exit code 2).
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(Code::Usage, message)
    }

    /// A core error met while doing `what` ("get \"door\"", "connecting to ..."), with the
    /// exit code its kind maps to.
    pub fn from_error(what: &str, error: &mqstate::Error) -> Failure {
        Failure::new(code_of(error.kind()), format!("{what}: {error}"))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The exit code of a core error kind.
pub fn code_of(kind: ErrorKind) -> Code {
    match kind {
        // A settlement or setting the transport does not offer (reject over MQTT) is a
        // mistake in the arguments, like an invalid one.
        ErrorKind::InvalidArgument | ErrorKind::NotSupported => Code::Usage,
        ErrorKind::Authentication => Code::Refused,
        ErrorKind::Timeout => Code::Timeout,
        ErrorKind::Connection | ErrorKind::Disconnected => Code::Connection,
        ErrorKind::Service | ErrorKind::UnexpectedPayload | ErrorKind::ClockDrift => Code::Service,
        // Lagged is reported by `watch` and never ends a command; any kind added later to
        // the core is a failure of the service as far as a script can tell.
        _ => Code::Service,
    }
}

/// Errors must stay on one line: newlines (from a file name, a server text) become spaces.
fn one_line(message: &str) -> String {
    if message.contains(['\n', '\r']) {
        message.replace(['\n', '\r'], " ")
    } else {
        message.to_owned()
    }
}

/// What a subcommand returns.
pub type Outcome = Result<Code, Failure>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_stable() {
        let all = [
            Code::Success,
            Code::Miss,
            Code::Usage,
            Code::NotApplied,
            Code::Connection,
            Code::Timeout,
            Code::Service,
            Code::Lost,
            Code::Refused,
            Code::Interrupted,
        ];
        let numbers: Vec<u8> = all.iter().map(|c| c.as_u8()).collect();
        assert_eq!(numbers, [0, 1, 2, 3, 4, 5, 6, 7, 8, 130]);
    }

    #[test]
    fn core_errors_map_to_their_codes() {
        let timeout = mqstate::Error::Timeout(std::time::Duration::from_secs(1));
        assert_eq!(Failure::from_error("get", &timeout).code, Code::Timeout);
        let refused = mqstate::Error::Connection("refused".into());
        assert_eq!(Failure::from_error("x", &refused).code, Code::Connection);
        let bad = mqstate::Error::InvalidArgument("empty key".into());
        assert_eq!(Failure::from_error("x", &bad).code, Code::Usage);
        let refused = mqstate::Error::Authentication("bad key".into());
        assert_eq!(Failure::from_error("x", &refused).code, Code::Refused);
        let mqtt = mqstate::Error::NotSupported("reject over MQTT".into());
        assert_eq!(Failure::from_error("x", &mqtt).code, Code::Usage);
        let service = mqstate::Error::Service(mqstate::ServiceError::from_text("boom"));
        let f = Failure::from_error("set \"k\"", &service);
        assert_eq!(f.code, Code::Service);
        assert_eq!(f.message, "set \"k\": state store error: boom");
    }

    #[test]
    fn messages_are_one_line() {
        assert_eq!(Failure::usage("a\nb\r\nc").message, "a b  c");
    }
}
