//! Requests re-sent after a reconnection, against a broker that loses what it acknowledged:
//! Mosquitto with `autosave_interval 1`, killed with SIGKILL while 64 requests are in flight
//! and restarted from its last snapshot on the same port. The snapshot restores the sessions
//! (so the client reconnects with "session present") but not the requests published after
//! it, which the broker had acknowledged. The local state store is attached to that
//! Mosquitto.
//!
//! Every request must be answered (none may wait for its timeout), and none may be applied
//! twice: each request writes a key of its own, half with NX (a second application would
//! answer "not applied"), half plain SETs (a second application would leave a later version
//! than the one answered); at the end every key holds the version its request was answered.
//!
//! Skipped (with a printed line) when Mosquitto is not installed, unless
//! `MQSTATE_REQUIRE_MOSQUITTO=1`.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::{WAIT, bounded, key, wait_state};
use mqstate::{Client, ConnectOptions, ConnectionState, Hlc, ReconnectPolicy, SetOptions};
use mqstate_server::{LocalServer, ServerConfig};
use mqstate_testing as testing;

/// The request timeout: the 10 s. Nothing may need it (the broker is back within a
/// second), so any timeout is a failure.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Kills per run.
const KILLS: usize = 3;

/// Concurrent writers, each with one request in flight at a time: 64 in flight.
const WRITERS: usize = 64;

/// Mosquitto with persistence and a snapshot every second, killed with SIGKILL and started
/// again on the same port from its snapshot. Killed (by pid) on drop.
struct SnapshottingMosquitto {
    binary: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    child: Child,
}

impl SnapshottingMosquitto {
    fn start() -> Result<Self, String> {
        let binary = testing::find_mosquitto().map_err(|e| e.to_string())?;
        let dir = tempfile::Builder::new()
            .prefix("mqstate-resend-")
            .tempdir()
            .unwrap();
        // Mosquitto started as root drops to the `mosquitto` user, which must write its
        // database here.
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let port = testing::free_port().unwrap();
        std::fs::write(
            dir.path().join("mosquitto.conf"),
            format!(
                "listener {port} 127.0.0.1\n\
                 allow_anonymous true\n\
                 set_tcp_nodelay true\n\
                 max_packet_size {}\n\
                 persistence true\n\
                 persistence_location {}/\n\
                 autosave_interval 1\n\
                 max_queued_messages 10000\n\
                 log_dest stderr\n\
                 log_dest topic\n\
                 log_type error\n\
                 log_type warning\n\
                 log_type notice\n",
                testing::MOSQUITTO_MAX_PACKET_SIZE,
                dir.path().display()
            ),
        )
        .unwrap();
        let child = spawn(&binary, dir.path())?;
        let mut m = SnapshottingMosquitto {
            binary,
            dir,
            port,
            child,
        };
        m.wait_ready()?;
        Ok(m)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("mosquitto exited with {status}: {}", self.log()));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err(format!("mosquitto not listening: {}", self.log()))
    }

    /// SIGKILL, then wait for the process to be gone.
    fn kill(&mut self) {
        let _ = Command::new("kill")
            .arg("-KILL")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }

    /// Starts it again from its snapshot on the same port (retrying while the port is not
    /// yet released); returns when it accepts connections.
    fn restart(&mut self) {
        let start = Instant::now();
        loop {
            self.child = spawn(&self.binary, self.dir.path()).unwrap();
            match self.wait_ready() {
                Ok(()) => return,
                Err(e) if start.elapsed() > Duration::from_secs(20) => panic!("{e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("mosquitto.log")).unwrap_or_default()
    }
}

fn spawn(binary: &Path, dir: &Path) -> Result<Child, String> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("mosquitto.log"))
        .map_err(|e| e.to_string())?;
    Command::new(binary)
        .arg("-c")
        .arg(dir.join("mosquitto.conf"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", binary.display()))
}

impl Drop for SnapshottingMosquitto {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// One request's record: its key, whether it was an NX SET, what it was answered, and when
/// it started and ended.
struct Done {
    key: String,
    nx: bool,
    applied: bool,
    version: Hlc,
    started: Instant,
    ended: Instant,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_lost_by_a_killed_mosquitto_are_resent_and_applied_once() {
    let mut mosquitto = match SnapshottingMosquitto::start() {
        Ok(m) => m,
        Err(e) if !testing::mosquitto_required() => {
            println!("SKIPPED requests_lost_by_a_killed_mosquitto: {e}");
            return;
        }
        Err(e) => panic!("cannot start Mosquitto: {e}"),
    };
    let port = mosquitto.port;
    let url = format!("mqtt://127.0.0.1:{port}");
    bounded("requests_lost_by_a_killed_mosquitto", async move {
        let store = LocalServer::start_with(ServerConfig::external(&url).unwrap())
            .await
            .unwrap();
        let options = || {
            ConnectOptions::new("127.0.0.1", port)
                .with_reconnect(ReconnectPolicy::new(
                    Duration::from_millis(20),
                    Duration::from_millis(200),
                ))
                .with_request_timeout(REQUEST_TIMEOUT)
        };
        let client = Client::connect(options()).await.unwrap();
        let checker = Client::connect(options()).await.unwrap();
        // Both clients' sessions in a snapshot, so the kill loses requests, not sessions.
        tokio::time::sleep(Duration::from_millis(1500)).await;

        let run = key("resend");
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let client = client.clone();
                let stop = stop.clone();
                let run = run.clone();
                tokio::spawn(async move {
                    let mut done = Vec::new();
                    let mut failures = Vec::new();
                    let mut n = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        // Half the writers NX, half plain SETs; every key written once.
                        let nx = w % 2 == 0;
                        let key = format!("{run}-{w}-{n}");
                        let options = if nx {
                            SetOptions::default().nx()
                        } else {
                            SetOptions::default()
                        };
                        let started = Instant::now();
                        match client.set(&key, key.as_bytes(), options).await {
                            Ok(outcome) => done.push(Done {
                                key,
                                nx,
                                applied: outcome.applied,
                                version: outcome.version,
                                started,
                                ended: Instant::now(),
                            }),
                            Err(e) => failures.push(format!(
                                "{key} after {:?}: {e} ({:?})",
                                started.elapsed(),
                                e.kind()
                            )),
                        }
                    }
                    (done, failures)
                })
            })
            .collect();

        let mut windows = Vec::new();
        for kill in 0..KILLS {
            // Mid-flight, at a different point of the snapshot period each time.
            let wait = 700 + 350 * kill as u64;
            tokio::time::sleep(Duration::from_millis(wait)).await;
            let (killed, restarted, m) = tokio::task::spawn_blocking(move || {
                let mut m = mosquitto;
                let killed = Instant::now();
                m.kill();
                m.restart();
                (killed, Instant::now(), m)
            })
            .await
            .unwrap();
            mosquitto = m;
            wait_state(&client, ConnectionState::Connected).await;
            windows.push((killed, restarted));
        }
        // Let the last restart's requests finish, then stop.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        stop.store(true, Ordering::Relaxed);
        let mut done = Vec::new();
        let mut failures = Vec::new();
        for w in writers {
            let (d, f) = tokio::time::timeout(WAIT, w).await.unwrap().unwrap();
            done.extend(d);
            failures.extend(f);
        }
        assert!(
            failures.is_empty(),
            "{} requests failed (none may need its timeout):\n{}\nMosquitto log:\n{}",
            failures.len(),
            failures.join("\n"),
            mosquitto.log()
        );

        // Applied once: every NX SET applied (its key was new), and every key holds the
        // version its request was answered with.
        let done = Arc::new(done);
        let checks: Vec<_> = (0..WRITERS)
            .map(|part| {
                let (checker, done) = (checker.clone(), done.clone());
                tokio::spawn(async move {
                    let mut twice = Vec::new();
                    for d in done.iter().skip(part).step_by(WRITERS) {
                        if d.nx && !d.applied {
                            twice.push(format!("{}: NX answered not applied", d.key));
                            continue;
                        }
                        match checker.get(&d.key).await.unwrap() {
                            Some(v) if v.version == d.version && v.value == d.key.as_bytes() => {}
                            other => twice.push(format!(
                                "{}: answered {} but stored {:?}",
                                d.key,
                                d.version,
                                other.map(|v| v.version)
                            )),
                        }
                    }
                    twice
                })
            })
            .collect();
        let mut twice = Vec::new();
        for check in checks {
            twice.extend(check.await.unwrap());
        }
        assert!(
            twice.is_empty(),
            "requests applied twice:\n{}",
            twice.join("\n")
        );

        // The figures: per kill, the requests in flight at the kill and how long after the
        // broker was back the last of them was answered.
        let resent = client.requests_resent();
        for (i, (killed, restarted)) in windows.iter().enumerate() {
            let caught: Vec<&Done> = done
                .iter()
                .filter(|d| d.started <= *killed && d.ended > *killed)
                .collect();
            let last = caught
                .iter()
                .map(|d| d.ended.duration_since(*killed))
                .max()
                .unwrap_or_default();
            println!(
                "kill {}: {} requests in flight at the kill, all answered; broker listening again {:?} after the kill, the last of them answered {:?} after the kill",
                i + 1,
                caught.len(),
                restarted.duration_since(*killed),
                last
            );
            assert!(!caught.is_empty(), "no request was in flight at kill {}", i + 1);
        }
        let nx = done.iter().filter(|d| d.nx).count();
        println!(
            "{} requests answered ({nx} NX SETs, {} SETs), {resent} re-sent after reconnections, none failed, none applied twice",
            done.len(),
            done.len() - nx
        );
        assert_eq!(client.requests_in_flight(), 0);
        client.close().await;
        checker.close().await;
        store.shutdown().await;
        drop(mosquitto);
    })
    .await;
}
