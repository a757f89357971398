//! The `mqstate` command: `mqstate serve` runs a local state store; `get`, `set`, `del`,
//! `vdel`, `keys`, `watch`, `lock`, `elect` and `bench` use one (or any state store broker), and
//! `completions` prints shell completions.
//!
//! Every client subcommand shares the connection flags of [`connect::ConnectArgs`] and ends
//! with an exit code from [`exit::Code`]; a failure is one line on stderr.

mod commands;
mod connect;
mod duration;
mod exit;
mod iothub;
mod iothub_device;
mod iothub_message;
mod logging;
mod output;
mod secure;
mod serve;
mod signals;

use std::future::Future;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::commands::{bench, completions, del, elect, get, keys, lock, passwd, set, watch};
use crate::exit::{Code, Outcome};

/// The exit codes, shown at the end of `mqstate --help`.
const EXIT_CODES: &str = "\
Exit codes:
  0    success (lock, elect: the command's own exit status)
  1    miss: no such key (get, del, vdel), no key matches (keys)
  2    usage: bad arguments, bad URL, unreadable file, not supported (iothub receive
       --settle reject/abandon over MQTT)
  3    not applied: set --nx/--nex condition failed, vdel value differs, lock held
  4    connection: broker unreachable, refused, or dropped
  5    timeout: no CONNACK or no answer from the state store within --timeout, or --wait ran out
  6    service: the state store answered an error
  7    lost: lock / elect lost the lease while the command ran (it got SIGTERM)
  8    refused: IoT Hub refused the device's credentials (iothub receive)
  130  interrupted (Ctrl-C)

Connection: --url, else $MQSTATE_URL, else mqtt://127.0.0.1:1883 (--from-env: AIO_* variables).";

/// Tools for the MQTT5 state store protocol of Azure IoT Operations: a local server, and
/// commands to read, write, watch and lock keys.
#[derive(Debug, Parser)]
#[command(name = "mqstate", version, about, long_about = None, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a local state store: an embedded MQTT5 broker on 127.0.0.1:1883 plus the store
    /// (or, with --broker, the store alone attached to an existing broker).
    #[command(after_help = "Example:\n  mqstate serve --port 1883 --max-keys 10000")]
    Serve(Box<serve::ServeArgs>),

    /// Print a key's value (raw bytes to a pipe, escaped text to a terminal).
    #[command(
        after_help = "Examples:\n  mqstate get door\n  mqstate get --json door\n  mqstate get firmware.bin > firmware.bin"
    )]
    Get(get::GetArgs),

    /// Set a key's value (VALUE, `-` for stdin, or --file).
    #[command(
        allow_negative_numbers = true,
        after_help = "Examples:\n  mqstate set door open\n  mqstate set --nx --px 30s session/42 alice\n  mqstate set temperature -4.5\n  mqstate set firmware.bin - < firmware.bin"
    )]
    Set(set::SetArgs),

    /// Delete a key.
    #[command(after_help = "Example:\n  mqstate del door")]
    Del(del::DelArgs),

    /// Delete a key only if it holds VALUE.
    #[command(after_help = "Example:\n  mqstate vdel lock/nightly worker-1")]
    Vdel(del::VdelArgs),

    /// List the keys that match a glob, one a line (raw bytes to a pipe, escaped text to a
    /// terminal).
    ///
    /// The keys are printed as the pages of the listing arrive, in no promised order.
    /// PATTERN is a glob over the key's bytes (below); quote it, or the shell expands it. An
    /// empty pattern is a usage error; a malformed one (`k[`) is the state store's error.
    ///
    /// Raw output (stdout is a pipe or a file) is each key's bytes and a newline, so a key
    /// that contains a newline is ambiguous there: use --json for such keys.
    #[command(
        after_help = "Examples:\n  mqstate keys 'sensor/*'\n  mqstate keys --count 'line3/?/temperature'\n  mqstate keys --json 'config/*' | jq -r .\n\nExit code 1 when no key matches."
    )]
    Keys(keys::KeysArgs),

    /// Print every change of the keys, one line each, until Ctrl-C.
    #[command(
        after_help = "Examples:\n  mqstate watch door window\n  mqstate watch --json door | jq .value"
    )]
    Watch(watch::WatchArgs),

    /// Run a command while holding a lock, like flock (fencing token in
    /// $MQSTATE_FENCING_TOKEN).
    #[command(
        after_help = "Examples:\n  mqstate lock nightly --ttl 10s -- ./backup.sh\n  mqstate lock nightly --wait 1m -- sh -c 'echo token $MQSTATE_FENCING_TOKEN'"
    )]
    Lock(lock::LockArgs),

    /// Run a command only while this process is the elected leader.
    #[command(
        after_help = "Example:\n  mqstate elect pumps --candidate node-a --term 5s -- ./pump-controller"
    )]
    Elect(elect::ElectArgs),

    /// Measure SET / GET throughput and latency.
    #[command(
        after_help = "Examples:\n  mqstate bench --in-flight 64 --duration 10s\n  mqstate bench --ops get --value-size 1024 --json\n  mqstate bench --memory --keys 100000 --value-size 100 --in-flight 64"
    )]
    Bench(bench::BenchArgs),

    /// Print a shell completion script.
    #[command(
        after_help = "Example:\n  mqstate completions bash > ~/.local/share/bash-completion/completions/mqstate"
    )]
    Completions(completions::CompletionsArgs),

    /// Drive a running local IoT Hub (`mqstate serve`) through its HTTP admin API.
    #[command(
        after_help = "Examples:\n  mqstate iothub device add thermostat\n  mqstate iothub send thermostat '{\"setpoint\": 21}' --ack full\n  mqstate iothub feedback"
    )]
    Iothub(iothub::IotHubArgs),

    /// Add or replace a user in a password file of salted hashes (for serve
    /// --password-file); the password is read from stdin.
    #[command(
        after_help = "Example:\n  printf '%s\\n' \"$PW\" | mqstate passwd /etc/mqstate/passwd alice"
    )]
    Passwd(passwd::PasswdArgs),
}

/// Runs a client subcommand on a fresh runtime.
fn block_on(command: impl Future<Output = Outcome>) -> Outcome {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| exit::Failure::usage(format!("cannot start the runtime: {e}")))?
        .block_on(command)
}

/// A command-line error as one line: clap's message and its tips, without the usage block
/// (`--help` shows that).
fn usage_line(error: &clap::Error) -> String {
    let text = error.render().to_string();
    let mut line = String::new();
    for part in text.lines().map(str::trim) {
        if part.is_empty() || part.starts_with("Usage:") || part.starts_with("For more information")
        {
            continue;
        }
        let part = part.strip_prefix("error: ").unwrap_or(part);
        if !line.is_empty() {
            line.push_str(if part.starts_with("tip:") { "; " } else { " " });
        }
        line.push_str(part);
    }
    line.push_str(" (see --help)");
    line
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e)
            if e.use_stderr()
                && e.kind() != clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            eprintln!("mqstate: {}", usage_line(&e));
            return ExitCode::from(Code::Usage.as_u8());
        }
        // --help, --version (stdout, exit code 0); no subcommand at all (the help on stderr,
        // exit code 2).
        Err(e) => e.exit(),
    };
    let outcome = match cli.command {
        Command::Serve(args) => {
            // Unchanged behaviour: exit status 1 on any failure.
            return match serve::run(*args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("mqstate: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Iothub(iothub::IotHubArgs {
            command: iothub::IotHubCommand::Receive(args),
            ..
        }) => block_on(iothub_device::run_receive(*args)),
        Command::Iothub(iothub::IotHubArgs {
            command: iothub::IotHubCommand::SendEvent(args),
            ..
        }) => block_on(iothub_device::run_send_event(*args)),
        Command::Iothub(args) => {
            // Exit status 1 on any failure, like `serve`.
            let result = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the runtime: {e}"))
                .and_then(|rt| rt.block_on(iothub::run(args)));
            return match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("mqstate: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Completions(args) => {
            completions::run(&args, &mut Cli::command());
            Ok(Code::Success)
        }
        Command::Passwd(args) => passwd::run(&args),
        Command::Get(args) => block_on(get::run(args)),
        Command::Set(args) => block_on(set::run(args)),
        Command::Del(args) => block_on(del::run_del(args)),
        Command::Vdel(args) => block_on(del::run_vdel(args)),
        Command::Keys(args) => block_on(keys::run(args)),
        Command::Watch(args) => block_on(watch::run(args)),
        Command::Lock(args) => block_on(lock::run(args)),
        Command::Elect(args) => block_on(elect::run(args)),
        Command::Bench(args) => block_on(bench::run(args)),
    };
    match outcome {
        Ok(code) => ExitCode::from(code.as_u8()),
        Err(failure) => {
            eprintln!("mqstate: {failure}");
            ExitCode::from(failure.code.as_u8())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use mqstate_server::DEFAULT_MAX_PACKET_SIZE;
    use mqstate_server::persist::PersistMode;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_defaults_and_flags() {
        let cli = Cli::try_parse_from(["mqstate", "serve"]).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        assert_eq!(args.port, 1883);
        assert_eq!(args.bind.to_string(), "127.0.0.1");
        assert!(args.broker.is_none());
        assert_eq!(args.max_packet_size, DEFAULT_MAX_PACKET_SIZE);
        // Notifications without a subscription, as AIO (docs/protocol.md section 6.1).
        assert!(!args.no_implicit_notify);
        let cli = Cli::try_parse_from(["mqstate", "serve", "--no-implicit-notify"]).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        assert!(args.no_implicit_notify);

        let cli = Cli::try_parse_from([
            "mqstate",
            "serve",
            "--port",
            "0",
            "--bind",
            "0.0.0.0",
            "--max-keys",
            "10",
            "--max-packet-size",
            "2048",
            "--log",
            "debug",
        ])
        .unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        assert_eq!(
            (args.port, args.max_keys, args.max_packet_size),
            (0, Some(10), 2048)
        );
        assert!(Cli::try_parse_from(["mqstate", "serve", "--max-packet-size", "10"]).is_err());
        let cli = Cli::try_parse_from([
            "mqstate",
            "serve",
            "--data-dir",
            "/tmp/d",
            "--persist",
            "requested",
        ])
        .unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        assert_eq!(
            args.data_dir.as_deref(),
            Some(std::path::Path::new("/tmp/d"))
        );
        assert_eq!(args.persist, PersistMode::Requested);
        // --persist needs --data-dir; unknown modes are refused.
        assert!(Cli::try_parse_from(["mqstate", "serve", "--persist", "all"]).is_err());
        assert!(
            Cli::try_parse_from(["mqstate", "serve", "--data-dir", "d", "--persist", "x"]).is_err()
        );
        assert!(
            Cli::try_parse_from(["mqstate", "serve", "--broker", "mqtt://h:1", "--port", "5"])
                .is_err()
        );
    }

    fn parse(args: &[&str]) -> Result<Command, clap::Error> {
        Cli::try_parse_from(std::iter::once("mqstate").chain(args.iter().copied()))
            .map(|c| c.command)
    }

    #[test]
    fn client_subcommands_parse() {
        let Ok(Command::Set(set)) = parse(&["set", "t", "-4.5", "--px", "1m30s", "--nx"]) else {
            panic!("set did not parse")
        };
        assert_eq!(set.value.as_deref(), Some(std::ffi::OsStr::new("-4.5")));
        assert_eq!(set.px, Some(std::time::Duration::from_secs(90)));
        assert!(set.nx && !set.nex);
        assert!(parse(&["set", "k", "v", "--nx", "--nex"]).is_err());
        assert!(parse(&["set", "k", "v", "--file", "f"]).is_err());

        let Ok(Command::Lock(lock)) =
            parse(&["lock", "job", "--ttl", "5s", "--", "sh", "-c", "echo --ttl"])
        else {
            panic!("lock did not parse")
        };
        assert_eq!(lock.ttl, std::time::Duration::from_secs(5));
        assert_eq!(lock.command, ["sh", "-c", "echo --ttl"]);
        assert!(parse(&["lock", "job"]).is_err(), "a command is required");

        let Ok(Command::Watch(watch)) = parse(&["watch", "a", "b", "--json", "-p", "1999"]) else {
            panic!("watch did not parse")
        };
        assert_eq!(watch.keys.len(), 2);
        assert_eq!(watch.connect.port, Some(1999));
        assert!(parse(&["watch"]).is_err(), "a key is required");

        assert!(
            parse(&["get", "k", "--timeout", "10"]).is_err(),
            "a unit is required"
        );
        assert!(parse(&["get", "k", "--url", "u", "--from-env"]).is_err());
        assert!(
            parse(&["get", "k", "--cert", "c.pem"]).is_err(),
            "--cert needs --key"
        );
        assert!(parse(&["completions", "bash"]).is_ok());
    }

    #[test]
    fn usage_errors_are_one_line_with_their_tips() {
        let e = parse(&["set", "k", "v", "--px", "ten"]).unwrap_err();
        let line = usage_line(&e);
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.starts_with("invalid value 'ten' for '--px <DURATION>'"),
            "{line}"
        );
        let e = parse(&["get"]).unwrap_err();
        let line = usage_line(&e);
        assert!(line.contains("<KEY>") && !line.contains("Usage"), "{line}");
        let e = parse(&["set", "k", "--bogus"]).unwrap_err();
        assert!(usage_line(&e).contains("; tip: "), "{}", usage_line(&e));
    }
}
