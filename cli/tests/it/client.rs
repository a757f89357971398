//! The client subcommands as a user runs them: the real `mqstate` binary (through
//! `assert_cmd`) against a real local state store on a free loopback port.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use assert_cmd::cargo::{cargo_bin, cargo_bin_cmd};
use mqstate::Hlc;
use mqstate_server::{LocalServer, ServerConfig};
use mqstate_testing::{Backend, TestStore, free_port};

use crate::support::{Reaper, signal, wait_exit};

/// Generous: the machine running the tests may be very busy.
const PATIENCE: Duration = Duration::from_secs(60);

/// A local state store (embedded broker) on its own runtime, for tests that run the binary.
struct Store {
    runtime: tokio::runtime::Runtime,
    store: Option<TestStore>,
    url: String,
}

impl Store {
    /// A store behind the embedded broker.
    fn start(test: &str) -> Store {
        Store::start_on(Backend::Embedded, test).unwrap()
    }

    /// A store behind `backend`; `None` when Mosquitto is missing and not required (the
    /// test is then skipped, as `mosquitto_or_skip` says).
    fn start_on(backend: Backend, test: &str) -> Option<Store> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let store = runtime.block_on(TestStore::start(backend, test))?;
        let url = format!("mqtt://{}:{}", store.host(), store.port());
        Some(Store {
            runtime,
            store: Some(store),
            url,
        })
    }

    /// `mqstate ARGS... --url URL` as an assert_cmd command (with no RUST_LOG, which would
    /// add log lines to stderr).
    fn cmd(&self, args: &[&str]) -> assert_cmd::Command {
        let mut cmd = cargo_bin_cmd!("mqstate");
        cmd.args(args)
            .env("MQSTATE_URL", &self.url)
            .env_remove("RUST_LOG")
            .timeout(PATIENCE);
        cmd
    }

    /// The same as a plain process (for commands that run alongside the test).
    fn spawn(&self, args: &[&str]) -> Child {
        Command::new(cargo_bin!("mqstate"))
            .args(args)
            .env("MQSTATE_URL", &self.url)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(store) = self.store.take() {
            self.runtime.block_on(store.shutdown());
        }
    }
}

/// Lines of a child's stdout (or stderr), read on a thread.
fn lines(output: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The next line that satisfies `want`, within [`PATIENCE`]; `poke` runs while waiting
/// (for example to make a change until the watcher reports one).
fn wait_line(
    rx: &mpsc::Receiver<String>,
    mut want: impl FnMut(&str) -> bool,
    mut poke: impl FnMut(),
) -> String {
    let start = Instant::now();
    loop {
        assert!(start.elapsed() < PATIENCE, "no matching line in time");
        poke();
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(line) if want(&line) => return line,
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the output ended"),
        }
    }
}

/// Makes changes with `change(1)`, `change(2)`, ... until the watch whose output is `rx`
/// prints a line that `want` accepts, and returns that line: a watch does not see the changes
/// made before it registered its keys, so a single change could be missed.
fn change_until_seen(
    rx: &mpsc::Receiver<String>,
    want: impl FnMut(&str) -> bool,
    mut change: impl FnMut(u32),
) -> String {
    let mut n = 0;
    wait_line(rx, want, || {
        n += 1;
        change(n);
    })
}

/// A failure is one line on stderr, `mqstate: ...`, never a panic or a Debug dump.
fn assert_one_line_error(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr).into_owned();
    assert_eq!(text.lines().count(), 1, "not one line: {text:?}");
    assert!(text.starts_with("mqstate: "), "{text:?}");
    assert!(
        !text.contains("panicked") && !text.contains("Error {"),
        "{text:?}"
    );
    text
}

fn exit_code(output: &std::process::Output) -> i32 {
    output.status.code().expect("exited, not killed")
}

#[test]
fn binary_values_go_through_stdin_and_come_back_byte_for_byte() {
    let store = Store::start("binary_values");
    let value: Vec<u8> = (0..=255u8).chain(*b"\r\n$3\r\n\0end").collect();
    store
        .cmd(&["set", "blob", "-"])
        .write_stdin(value.clone())
        .assert()
        .success()
        .stdout("OK\n");
    let out = store.cmd(&["get", "blob"]).output().unwrap();
    assert_eq!(exit_code(&out), 0);
    assert_eq!(
        out.stdout, value,
        "stdout is a pipe: the raw bytes, nothing added"
    );

    // From a file, and shown as hex.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("v.bin");
    std::fs::write(&file, b"\x00\xff\x10").unwrap();
    store
        .cmd(&["set", "small", "--file", file.to_str().unwrap()])
        .assert()
        .success();
    store
        .cmd(&["get", "--hex", "small"])
        .assert()
        .success()
        .stdout("00ff10\n");
    // JSON keeps binary values valid: null plus hex.
    let out = store.cmd(&["get", "--json", "small"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["value"], serde_json::Value::Null);
    assert_eq!(json["value_hex"], "00ff10");
    assert!(json["version"].as_str().unwrap().parse::<Hlc>().is_ok());
}

#[test]
fn set_get_del_vdel_and_their_exit_codes() {
    let store = Store::start("exit_codes");
    store.cmd(&["set", "door", "open"]).assert().success();
    let out = store.cmd(&["get", "--json", "door"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (json["key"].as_str(), json["value"].as_str()),
        (Some("door"), Some("open"))
    );

    // --nx twice: the second is not applied (exit code 3).
    store.cmd(&["set", "--nx", "once", "a"]).assert().code(0);
    let out = store.cmd(&["set", "--nx", "once", "b"]).output().unwrap();
    assert_eq!(exit_code(&out), 3);
    let err = assert_one_line_error(&out.stderr);
    assert!(err.contains("not set"), "{err}");
    store.cmd(&["get", "once"]).assert().stdout("a");
    // --nex with the same value applies, with another does not.
    store.cmd(&["set", "--nex", "once", "a"]).assert().code(0);
    store.cmd(&["set", "--nex", "once", "c"]).assert().code(3);

    // Misses: exit code 1.
    let out = store.cmd(&["get", "absent"]).output().unwrap();
    assert_eq!(exit_code(&out), 1);
    assert!(out.stdout.is_empty());
    assert!(assert_one_line_error(&out.stderr).contains("no such key"));
    store.cmd(&["del", "absent"]).assert().code(1);
    store.cmd(&["vdel", "absent", "x"]).assert().code(1);

    // VDEL: another value is not applied (3), the right one deletes.
    store.cmd(&["vdel", "door", "closed"]).assert().code(3);
    store
        .cmd(&["vdel", "door", "open"])
        .assert()
        .code(0)
        .stdout("OK\n");
    store.cmd(&["get", "door"]).assert().code(1);
    store.cmd(&["del", "once"]).assert().code(0);

    // Usage errors: exit code 2, one line too.
    let out = store
        .cmd(&["set", "k", "v", "--px", "ten"])
        .output()
        .unwrap();
    assert_eq!(exit_code(&out), 2);
    assert!(assert_one_line_error(&out.stderr).contains("--px"));
    let out = store.cmd(&["set", "k"]).output().unwrap();
    assert_eq!(exit_code(&out), 2);
    assert_one_line_error(&out.stderr);
    let out = store
        .cmd(&["set", "k", "v", "--fencing-token", "nope"])
        .output()
        .unwrap();
    assert_eq!(exit_code(&out), 2);
}

#[test]
fn px_expires_and_from_env_connects() {
    let store = Store::start("px_and_env");
    let port = store.url.rsplit(':').next().unwrap().to_owned();
    let mut cmd = cargo_bin_cmd!("mqstate");
    cmd.args(["set", "--from-env", "--px", "300ms", "short", "lived"])
        .env_remove("MQSTATE_URL")
        .env("AIO_BROKER_HOSTNAME", "127.0.0.1")
        .env("AIO_BROKER_TCP_PORT", &port)
        .env("AIO_MQTT_USE_TLS", "false")
        .timeout(PATIENCE)
        .assert()
        .success();
    let start = Instant::now();
    loop {
        let out = store.cmd(&["get", "short"]).output().unwrap();
        if exit_code(&out) == 1 {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "the key never expired");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn watch_prints_changes_and_the_expiry_delete_and_stops_on_ctrl_c() {
    watch_scenario(Backend::Embedded);
}

#[test]
fn watch_through_mosquitto() {
    watch_scenario(Backend::Mosquitto);
}

fn watch_scenario(backend: Backend) {
    let Some(store) = Store::start_on(backend, "watch") else {
        return;
    };
    let mut watch = Reaper(store.spawn(&["watch", "--json", "door", "temp"]));
    let rx = lines(watch.0.stdout.take().unwrap());

    // Changes made by another client; the first ones may come before the watch is
    // registered, so keep changing until one is seen.
    let first = change_until_seen(
        &rx,
        |l| l.contains("\"door\""),
        |n| {
            let value = format!("open-{n}");
            store.cmd(&["set", "door", &value]).assert().success();
        },
    );
    let json: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(json["op"], "SET");
    assert!(json["value"].as_str().unwrap().starts_with("open-"));
    assert_eq!(json["synthesized"], false);
    assert!(json["version"].as_str().unwrap().parse::<Hlc>().is_ok());
    assert!(json["time"].as_str().unwrap().ends_with('Z'));

    store.cmd(&["del", "door"]).assert().success();
    wait_line(
        &rx,
        |l| l.contains("\"door\"") && l.contains("\"DELETE\""),
        || {},
    );

    // A key set with --px: its SET, then a DELETE when it expires.
    store
        .cmd(&["set", "temp", "21.5", "--px", "500ms"])
        .assert()
        .success();
    let set = wait_line(&rx, |l| l.contains("\"temp\""), || {});
    assert!(set.contains("\"SET\"") && set.contains("21.5"), "{set}");
    let deleted = wait_line(&rx, |l| l.contains("\"temp\""), || {});
    assert!(deleted.contains("\"DELETE\""), "{deleted}");

    signal(&watch.0, "-INT");
    let status = wait_exit(&mut watch.0, PATIENCE);
    assert_eq!(status.code(), Some(0), "Ctrl-C ends watch cleanly");
    let mut stderr = String::new();
    watch
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `--log info` logs each lost connection with its cause and the delay before the next
/// attempt: here a second `watch` given the same client id takes the session over. (The
/// embedded broker's DISCONNECT 0x8E has no property length, which rumqttc 0.25 cannot read,
/// so the cause logged is the closed socket; a DISCONNECT rumqttc reads is named by its
/// reason code, see the core's `describe`.) Without `--log` (and no RUST_LOG), the second
/// watch prints only the usual one-line notices.
#[test]
fn watch_with_log_info_logs_each_lost_connection_and_the_delay() {
    let store = Store::start("watch_log");
    let mut first = Reaper(store.spawn(&["watch", "--log", "info", "--client-id", "twin", "door"]));
    let first_out = lines(first.0.stdout.take().unwrap());
    let first_err = lines(first.0.stderr.take().unwrap());
    // The first watch is connected once it prints a change (before that, the second one
    // would take over a session still connecting, and the first would fail to start).
    change_until_seen(
        &first_out,
        |l| l.contains(" door SET "),
        |n| {
            let value = format!("open-{n}");
            store.cmd(&["set", "door", &value]).assert().success();
        },
    );
    let mut second = Reaper(store.spawn(&["watch", "--client-id", "twin", "door"]));
    let lost = wait_line(&first_err, |l| l.contains("connection lost ("), || {});
    assert!(lost.contains(" INFO "), "{lost}");
    assert!(lost.contains("reconnecting in"), "{lost}");
    assert!(lost.ends_with("(attempt 1)"), "{lost}");

    signal(&first.0, "-INT");
    signal(&second.0, "-INT");
    assert_eq!(wait_exit(&mut first.0, PATIENCE).code(), Some(0));
    // The second may also have failed to start, if the first took the session back before
    // its subscription was acknowledged: either way it says so in `mqstate: ` lines only.
    wait_exit(&mut second.0, PATIENCE);
    let mut quiet = String::new();
    second
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut quiet)
        .unwrap();
    for line in quiet.lines() {
        assert!(
            line.starts_with("mqstate: "),
            "a log line without --log: {line}"
        );
    }
}

#[test]
fn a_malformed_log_filter_is_a_usage_error() {
    let store = Store::start("bad_log");
    let out = store
        .cmd(&["get", "door", "--log", "info,mqstate=nonsense"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("mqstate: --log \"info,mqstate=nonsense\""),
        "{stderr}"
    );
}

#[test]
fn watch_keeps_going_across_a_broker_restart() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let port = free_port().unwrap();
    let config = || ServerConfig::default().with_port(port);
    let server = runtime.block_on(LocalServer::start_with(config())).unwrap();
    let url = format!("mqtt://127.0.0.1:{port}");
    let mqstate = |args: &[&str]| {
        let mut cmd = cargo_bin_cmd!("mqstate");
        cmd.args(args).env("MQSTATE_URL", &url).timeout(PATIENCE);
        cmd
    };
    let mut watch = Reaper(
        Command::new(cargo_bin!("mqstate"))
            .args(["watch", "door"])
            .env("MQSTATE_URL", &url)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let rx = lines(watch.0.stdout.take().unwrap());
    change_until_seen(
        &rx,
        |l| l.contains(" door SET before-"),
        |n| {
            let value = format!("before-{n}");
            mqstate(&["set", "door", &value]).assert().success();
        },
    );

    runtime.block_on(server.shutdown());
    let server = runtime.block_on(LocalServer::start_with(config())).unwrap();
    // The new store is empty: once reconnected, the watch learns the key is gone (a
    // DELETE synthesized from the catch-up GET), then sees changes made after the restart.
    let gone = wait_line(&rx, |l| l.contains(" door DELETE"), || {});
    assert!(gone.ends_with("(synthesized after a reconnect)"), "{gone}");
    change_until_seen(
        &rx,
        |l| l.contains(" door SET after-"),
        |n| {
            let _ = mqstate(&["set", "door", &format!("after-{n}")]).output();
        },
    );
    assert!(
        watch.0.try_wait().unwrap().is_none(),
        "watch is still running"
    );
    signal(&watch.0, "-TERM");
    assert_eq!(wait_exit(&mut watch.0, PATIENCE).code(), Some(0));
    runtime.block_on(server.shutdown());
}

#[test]
fn lock_gives_the_command_a_token_returns_its_status_and_releases() {
    let store = Store::start("lock_token");
    let out = store
        .cmd(&[
            "lock",
            "job",
            "--ttl",
            "5s",
            "--",
            "sh",
            "-c",
            "echo $MQSTATE_FENCING_TOKEN",
        ])
        .output()
        .unwrap();
    assert_eq!(
        exit_code(&out),
        0,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout).unwrap();
    let token: Hlc = token.trim().parse().unwrap();
    assert_eq!(token.node_id, "StateStore");
    // Released after: nobody holds it.
    store.cmd(&["get", "job"]).assert().code(1);

    // The command's own exit status comes back.
    store
        .cmd(&["lock", "job", "--", "sh", "-c", "exit 42"])
        .assert()
        .code(42);
    store.cmd(&["get", "job"]).assert().code(1);
    // A command that does not exist: 127, and the lock is released.
    let out = store
        .cmd(&["lock", "job", "--", "/nonexistent/command"])
        .output()
        .unwrap();
    assert_eq!(exit_code(&out), 127);
    assert_one_line_error(&out.stderr);
    store.cmd(&["get", "job"]).assert().code(1);
    // The token protects writes: a fenced SET with it is accepted.
    let bin = cargo_bin!("mqstate").to_str().unwrap().to_owned();
    store
        .cmd(&[
            "lock",
            "job",
            "--",
            "sh",
            "-c",
            &format!("'{bin}' set counter 1 --fencing-token \"$MQSTATE_FENCING_TOKEN\""),
        ])
        .assert()
        .success()
        .stdout("OK\n");
    // A later holder's fenced write moves the key on; the old token is then refused by the
    // store: a service error, exit code 6, one line.
    store
        .cmd(&[
            "lock",
            "job",
            "--",
            "sh",
            "-c",
            &format!("'{bin}' set counter 2 --fencing-token \"$MQSTATE_FENCING_TOKEN\""),
        ])
        .assert()
        .success();
    let out = store
        .cmd(&["set", "counter", "3", "--fencing-token", &token.to_string()])
        .output()
        .unwrap();
    assert_eq!(exit_code(&out), 6);
    let err = assert_one_line_error(&out.stderr);
    assert!(err.contains("set \"counter\": state store error"), "{err}");
    store.cmd(&["get", "counter"]).assert().stdout("2");
}

#[test]
fn a_held_lock_is_not_applied_and_wait_times_out() {
    let store = Store::start("lock_held");
    let mut holder = Reaper(store.spawn(&["lock", "busy", "--ttl", "10s", "--", "sleep", "30"]));
    let start = Instant::now();
    while exit_code(&store.cmd(&["get", "busy"]).output().unwrap()) != 0 {
        assert!(start.elapsed() < PATIENCE, "the holder never took the lock");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = store.cmd(&["lock", "busy", "--", "true"]).output().unwrap();
    assert_eq!(exit_code(&out), 3);
    assert!(assert_one_line_error(&out.stderr).contains("held by"));
    let out = store
        .cmd(&["lock", "busy", "--wait", "500ms", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(exit_code(&out), 5);
    assert!(assert_one_line_error(&out.stderr).contains("not acquired within"));
    // An election on the same key: not elected in time.
    store
        .cmd(&["elect", "busy", "--wait", "500ms", "--", "true"])
        .assert()
        .code(5);
    let _ = holder.0.kill();
}

#[test]
fn two_concurrent_locks_never_overlap() {
    overlap_scenario(Backend::Embedded);
}

#[test]
fn two_concurrent_locks_never_overlap_through_mosquitto() {
    overlap_scenario(Backend::Mosquitto);
}

fn overlap_scenario(backend: Backend) {
    let Some(store) = Store::start_on(backend, "lock_overlap") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let marks = dir.path().join("marks");
    let script = format!(
        "echo start $$ >> '{0}'; sleep 0.3; echo end $$ >> '{0}'",
        marks.display()
    );
    let rounds = 3;
    let runners: Vec<Reaper> = (0..2)
        .map(|_| {
            let script = format!("for i in $(seq {rounds}); do '{}' lock shared --ttl 5s --wait 120s -- sh -c \"{}\" || exit 1; done", cargo_bin!("mqstate").display(), script.replace('"', "\\\"").replace('$', "\\$"));
            Reaper(
                Command::new("sh")
                    .args(["-c", &script])
                    .env("MQSTATE_URL", &store.url)
                    .stdout(Stdio::null())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    for mut runner in runners {
        assert!(wait_exit(&mut runner.0, Duration::from_secs(300)).success());
    }
    let text = std::fs::read_to_string(&marks).unwrap();
    let marks: Vec<(&str, &str)> = text.lines().map(|l| l.split_once(' ').unwrap()).collect();
    assert_eq!(marks.len(), 2 * 2 * rounds, "{text}");
    for pair in marks.chunks(2) {
        assert_eq!(pair[0].0, "start", "{text}");
        assert_eq!(pair[1].0, "end", "{text}");
        assert_eq!(pair[0].1, pair[1].1, "one holder at a time:\n{text}");
    }
}

#[test]
fn losing_the_lock_terminates_the_command() {
    lock_lost_scenario(Backend::Embedded);
}

#[test]
fn losing_the_lock_terminates_the_command_through_mosquitto() {
    lock_lost_scenario(Backend::Mosquitto);
}

fn lock_lost_scenario(backend: Backend) {
    let Some(store) = Store::start_on(backend, "lock_lost") else {
        return;
    };
    let mut lock = Reaper(store.spawn(&[
        "lock",
        "fragile",
        "--ttl",
        "10s",
        "--",
        "sh",
        "-c",
        "trap 'echo got-term; exit 9' TERM; echo started; while true; do sleep 0.1; done",
    ]));
    let rx = lines(lock.0.stdout.take().unwrap());
    wait_line(&rx, |l| l == "started", || {});
    // Someone deletes the lock key: the lease is lost.
    store.cmd(&["del", "fragile"]).assert().success();
    wait_line(&rx, |l| l == "got-term", || {});
    let status = wait_exit(&mut lock.0, PATIENCE);
    assert_eq!(status.code(), Some(7));
    let mut stderr = Vec::new();
    lock.0
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut stderr)
        .unwrap();
    let err = assert_one_line_error(&stderr);
    assert!(
        err.contains("lost") && err.contains("SIGTERM") && err.contains("status 9"),
        "{err}"
    );
}

#[test]
fn elect_runs_the_command_as_leader_then_resigns() {
    let store = Store::start("elect");
    let out = store
        .cmd(&[
            "elect",
            "leader",
            "--candidate",
            "node-a",
            "--term",
            "5s",
            "--",
            "sh",
            "-c",
            "echo leading with $MQSTATE_FENCING_TOKEN",
        ])
        .output()
        .unwrap();
    assert_eq!(
        exit_code(&out),
        0,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let token = text.trim().strip_prefix("leading with ").unwrap();
    assert!(token.parse::<Hlc>().is_ok(), "{text}");
    store.cmd(&["get", "leader"]).assert().code(1);
}

#[test]
fn bad_url_and_unreachable_broker_fail_fast_with_their_codes() {
    let out = cargo_bin_cmd!("mqstate")
        .args(["get", "k", "--url", "http://127.0.0.1:1883"])
        .timeout(PATIENCE)
        .output()
        .unwrap();
    assert_eq!(exit_code(&out), 2);
    assert!(assert_one_line_error(&out.stderr).contains("unsupported scheme"));

    // A port nobody listens on: connection refused, exit code 4, at once.
    let port = free_port().unwrap().to_string();
    let start = Instant::now();
    let out = cargo_bin_cmd!("mqstate")
        .args(["get", "k", "-p", &port, "--timeout", "2s"])
        .env_remove("MQSTATE_URL")
        .timeout(PATIENCE)
        .output()
        .unwrap();
    assert_eq!(exit_code(&out), 4);
    assert!(assert_one_line_error(&out.stderr).contains("connecting to 127.0.0.1:"));
    assert!(start.elapsed() < Duration::from_secs(30));

    // A port that accepts TCP but never answers MQTT: no CONNACK within --timeout is the
    // core's connect timeout (kind `timeout`, exit code 5), naming host, port and the limit.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port().to_string();
    let start = Instant::now();
    let out = cargo_bin_cmd!("mqstate")
        .args(["set", "k", "v", "-p", &port, "--timeout", "1s"])
        .env_remove("MQSTATE_URL")
        .timeout(PATIENCE)
        .output()
        .unwrap();
    assert_eq!(exit_code(&out), 5);
    println!("silent broker: {:?}", String::from_utf8_lossy(&out.stderr));
    let line = assert_one_line_error(&out.stderr);
    assert!(
        line.contains(&format!("127.0.0.1:{port}")) && line.contains("timed out"),
        "{line}"
    );
    assert!(start.elapsed() < Duration::from_secs(30));
}

#[test]
fn bench_prints_a_table_or_json() {
    let store = Store::start("bench");
    let out = store
        .cmd(&[
            "bench",
            "--duration",
            "300ms",
            "--in-flight",
            "4",
            "--keys",
            "20",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(
        exit_code(&out),
        0,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = json["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for (r, op) in results.iter().zip(["set", "get"]) {
        assert_eq!(r["op"], op);
        assert!(r["ops"].as_u64().unwrap() > 0);
        assert_eq!(r["errors"], 0);
        assert!(r["p99_ms"].as_f64().unwrap() >= r["p50_ms"].as_f64().unwrap());
    }
    let out = store
        .cmd(&[
            "bench",
            "--ops",
            "set",
            "--duration",
            "200ms",
            "--keys",
            "5",
        ])
        .output()
        .unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(rows[0].contains("ops/s") && rows[0].contains("p50") && rows[0].contains("p99"));
    assert!(rows[1].starts_with("set"));
    // The benchmark's keys are cleaned up.
    store.cmd(&["get", "mqstate-bench/0"]).assert().code(1);
}

/// `bench --memory` starts its own server, loads the keys in ten steps and churns them: the
/// report has every step and sample (the figures themselves are for reading, not asserted).
#[test]
fn bench_memory_reports_every_step_and_churn_sample() {
    let out = cargo_bin_cmd!("mqstate")
        .args([
            "bench",
            "--memory",
            "--keys",
            "200",
            "--value-size",
            "10",
            "--in-flight",
            "8",
            "--churn",
            "1s",
            "--json",
        ])
        .timeout(PATIENCE)
        .output()
        .unwrap();
    assert_eq!(
        exit_code(&out),
        0,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["keys"], 200);
    assert_eq!(json["data_bytes_per_key"], 22.0);
    let steps = json["steps"].as_array().unwrap();
    let keys: Vec<u64> = steps.iter().map(|s| s["keys"].as_u64().unwrap()).collect();
    assert_eq!(keys, (1..=10).map(|i| i * 20).collect::<Vec<u64>>());
    assert!(steps.iter().all(|s| s["rss"].as_u64().unwrap() > 0));
    assert_eq!(json["churn"].as_array().unwrap().len(), 10);
}

/// Sets `keys` (any bytes) to "v" through the Rust client, many requests in flight.
fn fill(store: &Store, keys: Vec<Vec<u8>>) {
    store.runtime.block_on(async {
        let options = mqstate::ConnectOptions::from_url(&store.url).unwrap();
        let client = mqstate::Client::connect(options).await.unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for key in keys {
            let client = client.clone();
            tasks.spawn(async move {
                let outcome = client
                    .set(key, "v", mqstate::SetOptions::default())
                    .await
                    .unwrap();
                assert!(outcome.applied);
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
        client.close().await;
    });
}

/// The lines of a raw listing (each key then `\n`), sorted: the order is not promised.
fn sorted_lines(stdout: &[u8]) -> Vec<Vec<u8>> {
    assert!(
        stdout.is_empty() || stdout.ends_with(b"\n"),
        "not newline-terminated: {stdout:?}"
    );
    let mut lines: Vec<Vec<u8>> = stdout.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    lines.pop(); // after the last newline
    lines.sort();
    lines
}

#[test]
fn keys_lists_matches_raw_json_and_count_with_their_exit_codes() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    let store = Store::start("keys");
    let binary: &[u8] = b"bin/\xff\x00a\nb";
    fill(
        &store,
        vec![
            b"fruit/apple".to_vec(),
            b"fruit/banana".to_vec(),
            b"fruit/cherry".to_vec(),
            b"fruity".to_vec(),
            b"veg/leek".to_vec(),
            binary.to_vec(),
        ],
    );

    // A prefix lists exactly its keys, one a line.
    let out = store.cmd(&["keys", "fruit/*"]).output().unwrap();
    assert_eq!(
        exit_code(&out),
        0,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty());
    assert_eq!(
        sorted_lines(&out.stdout),
        [&b"fruit/apple"[..], b"fruit/banana", b"fruit/cherry"]
    );
    let out = store.cmd(&["keys", "fruit?"]).output().unwrap();
    assert_eq!(out.stdout, b"fruity\n");

    // To a pipe, a binary key is its bytes exactly (NUL and newline included) and a newline;
    // a pattern may be any bytes too.
    let out = store.cmd(&["keys", "bin/*"]).output().unwrap();
    assert_eq!(exit_code(&out), 0);
    assert_eq!(out.stdout, [binary, b"\n"].concat());
    let out = store
        .cmd(&[])
        .arg("keys")
        .arg(OsStr::from_bytes(b"bin/\xff*"))
        .output()
        .unwrap();
    assert_eq!(out.stdout, [binary, b"\n"].concat());

    // --json: a JSON string a line; a key that is not UTF-8 as get --json shows it.
    let out = store.cmd(&["keys", "--json", "*"]).output().unwrap();
    assert_eq!(exit_code(&out), 0);
    let mut strings = Vec::new();
    let mut binaries = Vec::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        match serde_json::from_str::<serde_json::Value>(line).unwrap() {
            serde_json::Value::String(key) => strings.push(key),
            other => binaries.push(other),
        }
    }
    strings.sort();
    assert_eq!(
        strings,
        [
            "fruit/apple",
            "fruit/banana",
            "fruit/cherry",
            "fruity",
            "veg/leek"
        ]
    );
    assert_eq!(
        binaries,
        [serde_json::json!({"key": null, "key_hex": "62696e2fff00610a62"})]
    );

    // --count: the number only.
    store
        .cmd(&["keys", "--count", "fruit/*"])
        .assert()
        .code(0)
        .stdout("3\n");

    // No match: exit code 1 with one line on stderr; --count still prints 0.
    let out = store.cmd(&["keys", "nothing/*"]).output().unwrap();
    assert_eq!(exit_code(&out), 1);
    assert!(out.stdout.is_empty());
    assert!(assert_one_line_error(&out.stderr).contains("no key matches"));
    let out = store
        .cmd(&["keys", "--count", "nothing/*"])
        .output()
        .unwrap();
    assert_eq!((exit_code(&out), out.stdout.as_slice()), (1, &b"0\n"[..]));

    // A malformed glob: the state store's error (exit code 6), in its words.
    let out = store.cmd(&["keys", "k["]).output().unwrap();
    assert_eq!(exit_code(&out), 6);
    assert!(out.stdout.is_empty());
    let line = assert_one_line_error(&out.stderr);
    assert!(line.contains("no closing ']'"), "{line}");

    // --json and --count do not go together.
    store
        .cmd(&["keys", "--json", "--count", "*"])
        .assert()
        .code(2);
}

#[test]
fn keys_with_an_empty_pattern_is_a_usage_error_before_connecting() {
    // Nobody listens on the port: the pattern is refused before any connection is tried.
    let port = free_port().unwrap().to_string();
    let out = cargo_bin_cmd!("mqstate")
        .args(["keys", "", "-p", &port])
        .env_remove("MQSTATE_URL")
        .timeout(PATIENCE)
        .output()
        .unwrap();
    assert_eq!(exit_code(&out), 2);
    assert!(out.stdout.is_empty());
    assert!(assert_one_line_error(&out.stderr).contains("pattern must not be empty"));
    // And a real pattern then fails to connect (exit code 4), as every client command.
    let out = cargo_bin_cmd!("mqstate")
        .args(["keys", "*", "-p", &port, "--timeout", "2s"])
        .env_remove("MQSTATE_URL")
        .timeout(PATIENCE)
        .output()
        .unwrap();
    assert_eq!(exit_code(&out), 4);
}

#[test]
fn keys_lists_every_key_of_several_pages_exactly_once() {
    // 1,200 keys: three pages of at most 500 keys from the local server.
    let store = Store::start("keys_pages");
    let many: Vec<Vec<u8>> = (0..1200)
        .map(|i| format!("many/{i:04}").into_bytes())
        .collect();
    let mut all = many.clone();
    all.extend([b"manx".to_vec(), b"other/1".to_vec(), b"a".to_vec()]);
    fill(&store, all);

    let out = store.cmd(&["keys", "many/*"]).output().unwrap();
    assert_eq!(
        exit_code(&out),
        0,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(sorted_lines(&out.stdout), many, "each key once, no other");
    store
        .cmd(&["keys", "--count", "many/*"])
        .assert()
        .code(0)
        .stdout("1200\n");
    store
        .cmd(&["keys", "--count", "*"])
        .assert()
        .code(0)
        .stdout("1203\n");
    let out = store.cmd(&["keys", "--json", "man*"]).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1201);
    assert!(text.lines().any(|l| l == r#""many/0499""#));
    assert!(text.lines().any(|l| l == r#""many/0500""#));
}

#[test]
fn help_has_examples_exit_codes_and_completions() {
    let help = cargo_bin_cmd!("mqstate").arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(
        help.contains("Exit codes:") && help.contains("130"),
        "{help}"
    );
    for sub in [
        "serve",
        "get",
        "set",
        "del",
        "vdel",
        "keys",
        "watch",
        "lock",
        "elect",
        "bench",
        "completions",
    ] {
        let out = cargo_bin_cmd!("mqstate")
            .args([sub, "--help"])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.contains("Example"),
            "{sub} --help has no example:\n{text}"
        );
        assert!(text.contains(&format!("mqstate {sub}")), "{sub}:\n{text}");
    }
    let out = cargo_bin_cmd!("mqstate")
        .args(["get", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--url",
        "--host",
        "--port",
        "--ca-file",
        "--cert",
        "--key",
        "--username",
        "--password-file",
        "--sat-file",
        "--client-id",
        "--timeout",
        "--from-env",
    ] {
        assert!(text.contains(flag), "{flag} missing:\n{text}");
    }
    for shell in ["bash", "zsh", "fish"] {
        let out = cargo_bin_cmd!("mqstate")
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success());
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(
            script.contains("watch") && script.contains("fencing-token"),
            "{shell}"
        );
    }
    cargo_bin_cmd!("mqstate")
        .args(["completions", "tcsh"])
        .assert()
        .code(2);
}
