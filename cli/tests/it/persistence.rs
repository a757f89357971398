//! `mqstate serve --data-dir` as a process, killed with SIGKILL and restarted on the same data
//! dir: acknowledged writes are back with their versions, keys that expired while it was down
//! are gone, fencing tokens still reject a stale writer, `--persist requested` keeps only keys
//! SET with `persist`, and a bad data dir is a clear error naming the file.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use mqstate::{Client, ConnectOptions, ErrorKind, ServiceError, SetOptions};
use mqstate_testing as testing;

use crate::support::Reaper;

/// A running `mqstate serve`; killed (SIGKILL) on drop.
struct Serve {
    child: Reaper,
    port: u16,
}

impl Serve {
    fn start(dir: &Path, extra: &[&str]) -> Serve {
        let port = testing::free_port().unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_mqstate"))
            .args([
                "serve",
                "--no-iothub",
                "--no-dashboard",
                "--port",
                &port.to_string(),
                "--data-dir",
            ])
            .arg(dir)
            .args(extra)
            .args(["--log", "warn"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start mqstate serve");
        Serve {
            child: Reaper(child),
            port,
        }
    }

    /// Connects, retrying while the server starts (generous: the machine may be loaded).
    async fn client(&self) -> Client {
        let url = format!("mqtt://127.0.0.1:{}", self.port);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(c) = Client::connect(ConnectOptions::from_url(&url).unwrap()).await {
                // Connected to the broker; wait until the store answers too.
                if c.get("probe").await.is_ok() {
                    return c.with_timeout(Duration::from_secs(20));
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "mqstate serve on port {} did not answer",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGKILL: no shutdown code runs.
    fn kill9(mut self) {
        self.child.0.kill().unwrap();
        self.child.0.wait().unwrap();
    }
}

fn service_error(e: &mqstate::Error) -> &ServiceError {
    assert_eq!(e.kind(), ErrorKind::Service, "{e}");
    e.service_error().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_and_restart_keeps_values_versions_deadlines_and_fences() {
    let tmp = tempfile::tempdir().unwrap();
    let serve = Serve::start(tmp.path(), &[]);
    let c = serve.client().await;

    let plain = c
        .set("plain", "v1", SetOptions::default().persist())
        .await
        .unwrap();
    let short = SetOptions::default().expiry(Duration::from_millis(1500));
    c.set("expiring", "soon", short).await.unwrap();
    let long = SetOptions::default().expiry(Duration::from_secs(3600));
    let long_version = c.set("long", "later", long).await.unwrap().version;
    // A lock-protected key: fenced first with t1, then with the newer t2.
    let t1 = c
        .set("lock", "a", SetOptions::default())
        .await
        .unwrap()
        .version;
    let opts = |t: &mqstate::Hlc| SetOptions::default().fencing_token(t.clone());
    c.set("protected", "x", opts(&t1)).await.unwrap();
    let t2 = c
        .set("lock", "b", SetOptions::default())
        .await
        .unwrap()
        .version;
    let last = c.set("protected", "y", opts(&t2)).await.unwrap().version;
    c.del("deleted-before-kill", None).await.unwrap();
    c.set("gone", "1", SetOptions::default()).await.unwrap();
    assert_eq!(c.del("gone", None).await.unwrap(), 1);
    c.close().await;

    serve.kill9();
    // "expiring" passes its deadline while the server is down.
    tokio::time::sleep(Duration::from_millis(2000)).await;

    let serve = Serve::start(tmp.path(), &[]);
    let c = serve.client().await;
    let got = c.get("plain").await.unwrap().unwrap();
    assert_eq!((&got.value[..], &got.version), (&b"v1"[..], &plain.version));
    assert!(c.get("expiring").await.unwrap().is_none());
    let got = c.get("long").await.unwrap().unwrap();
    assert_eq!(got.version, long_version);
    assert!(c.get("gone").await.unwrap().is_none());
    let got = c.get("protected").await.unwrap().unwrap();
    assert_eq!((&got.value[..], &got.version), (&b"y"[..], &last));

    // The fence survived: the stale writer (t1) and a writer without a token are refused.
    let stale = c.set("protected", "stale", opts(&t1)).await.unwrap_err();
    assert_eq!(
        service_error(&stale),
        &ServiceError::FencingTokenLowerVersion
    );
    let none = c
        .set("protected", "none", SetOptions::default())
        .await
        .unwrap_err();
    assert_eq!(service_error(&none), &ServiceError::FencingTokenRequired);
    assert_eq!(c.get("protected").await.unwrap().unwrap().version, last);
    // The current holder still writes, and the new version is above every stored one.
    let next = c.set("protected", "z", opts(&t2)).await.unwrap().version;
    assert!(next > last && next > long_version && next > plain.version);
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persist_requested_keeps_only_keys_set_with_persist() {
    let tmp = tempfile::tempdir().unwrap();
    let serve = Serve::start(tmp.path(), &["--persist", "requested"]);
    let c = serve.client().await;
    let kept = c
        .set("kept", "1", SetOptions::default().persist())
        .await
        .unwrap();
    c.set("memory-only", "1", SetOptions::default())
        .await
        .unwrap();
    // Persisted, then overwritten without persist: the key follows its last SET.
    c.set("demoted", "1", SetOptions::default().persist())
        .await
        .unwrap();
    c.set("demoted", "2", SetOptions::default()).await.unwrap();
    c.close().await;
    // The same through the command line: `mqstate set --persist` sends `aio-persistence`.
    let url = format!("mqtt://127.0.0.1:{}", serve.port);
    for (key, persist) in [("cli-kept", true), ("cli-memory-only", false)] {
        let mut set = Command::new(env!("CARGO_BIN_EXE_mqstate"));
        set.args(["set", key, "v", "--url", &url, "--timeout", "20s"]);
        if persist {
            set.arg("--persist");
        }
        let out = tokio::task::spawn_blocking(move || set.output())
            .await
            .unwrap()
            .unwrap();
        assert!(
            out.status.success(),
            "mqstate set {key}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "OK\n");
    }
    serve.kill9();

    let serve = Serve::start(tmp.path(), &["--persist", "requested"]);
    let c = serve.client().await;
    assert_eq!(c.get("kept").await.unwrap().unwrap().version, kept.version);
    assert!(c.get("memory-only").await.unwrap().is_none());
    assert!(c.get("demoted").await.unwrap().is_none());
    assert_eq!(&c.get("cli-kept").await.unwrap().unwrap().value[..], b"v");
    assert!(c.get("cli-memory-only").await.unwrap().is_none());
    c.close().await;
}

/// Runs `mqstate serve` expecting it to fail at start; returns its stderr.
fn start_fails(dir: &Path) -> String {
    let port = testing::free_port().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mqstate"))
        .args([
            "serve",
            "--no-iothub",
            "--no-dashboard",
            "--port",
            &port.to_string(),
            "--data-dir",
        ])
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run mqstate serve");
    assert!(!out.status.success(), "mqstate serve started on {dir:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_data_dir_is_a_clear_error_and_nothing_is_wiped() {
    let tmp = tempfile::tempdir().unwrap();

    // Locked by another running server.
    let dir = tmp.path().join("locked");
    let serve = Serve::start(&dir, &[]);
    let c = serve.client().await;
    c.set("k", "v", SetOptions::default()).await.unwrap();
    let err = start_fails(&dir);
    assert!(
        err.contains("store.redb") && err.contains("locked"),
        "{err}"
    );
    // The first server is unharmed.
    assert!(c.get("k").await.unwrap().is_some());
    c.close().await;
    drop(serve);

    // A damaged (or foreign) database file: refused, left byte for byte as it was.
    let dir = tmp.path().join("corrupt");
    std::fs::create_dir_all(&dir).unwrap();
    let garbage: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(dir.join("store.redb"), &garbage).unwrap();
    let err = start_fails(&dir);
    assert!(err.contains("store.redb"), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");
    assert_eq!(std::fs::read(dir.join("store.redb")).unwrap(), garbage);

    // Not a directory.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let err = start_fails(&file);
    assert!(
        err.contains("a-file") && err.contains("not a directory"),
        "{err}"
    );
}

/// A full disk, simulated with a file size limit (`ulimit -f`, SIGXFSZ ignored so that the
/// write fails with EFBIG instead of killing the process): writes fail with the
/// `persistence_failed` service error and change nothing; reads keep working; the server
/// stays up, and what was acknowledged before is there after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_writes_cleanly_and_reads_keep_working() {
    let tmp = tempfile::tempdir().unwrap();
    let port = testing::free_port().unwrap();
    let script = format!(
        "trap '' XFSZ; ulimit -f 2048; exec \"$0\" serve --no-iothub --no-dashboard --port {port} --log error --data-dir \"$1\""
    );
    let child = Command::new("bash")
        .args(["-c", &script, env!("CARGO_BIN_EXE_mqstate")])
        .arg(tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start mqstate serve under bash");
    let serve = Serve {
        child: Reaper(child),
        port,
    };
    let c = serve.client().await;
    let value = vec![b'x'; 64 * 1024];
    let mut acked = Vec::new();
    let mut refused = None;
    for i in 0..200 {
        let key = format!("big-{i}");
        match c.set(&key, &value, SetOptions::default()).await {
            Ok(o) => acked.push((key, o.version)),
            Err(e) => {
                refused = Some((key, e));
                break;
            }
        }
    }
    let (key, err) = refused.expect("the 2 MiB file size limit was never hit");
    assert_eq!(
        service_error(&err),
        &ServiceError::PersistenceFailed,
        "{err}"
    );
    assert!(!acked.is_empty());
    // Nothing of the refused write stayed, reads work, and small writes still fail cleanly.
    assert!(c.get(&key).await.unwrap().is_none());
    let (first, version) = &acked[0];
    assert_eq!(&c.get(first).await.unwrap().unwrap().version, version);
    c.close().await;
    serve.kill9();

    // Restarted with room: every acknowledged write is there.
    let serve = Serve::start(tmp.path(), &[]);
    let c = serve.client().await;
    for (key, version) in &acked {
        assert_eq!(
            &c.get(key).await.unwrap().unwrap().version,
            version,
            "{key}"
        );
    }
    assert!(c.get(&key).await.unwrap().is_none());
    c.set(&key, &value, SetOptions::default()).await.unwrap();
    c.close().await;
}

/// Connects with clean start off and returns the CONNACK's "session present".
async fn connect_session(port: u16, subscribe: Option<&str>) -> bool {
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::mqttbytes::v5::Packet;
    use rumqttc::v5::{AsyncClient, Event, MqttOptions};

    let mut options = MqttOptions::new("persistence-session-test", "127.0.0.1", port);
    options.set_clean_start(false);
    options.set_session_expiry_interval(Some(3600));
    let (client, mut eventloop) = AsyncClient::new(options, 16);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut present = None;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no CONNACK / SUBACK"
        );
        match tokio::time::timeout(Duration::from_secs(5), eventloop.poll()).await {
            Ok(Ok(Event::Incoming(Packet::ConnAck(ack)))) => {
                present = Some(ack.session_present);
                match subscribe {
                    Some(topic) => client.subscribe(topic, QoS::AtLeastOnce).await.unwrap(),
                    None => break,
                }
            }
            Ok(Ok(Event::Incoming(Packet::SubAck(_)))) => break,
            Ok(Ok(_)) => {}
            // Not up yet: retry.
            Ok(Err(_)) | Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    let _ = client.disconnect().await;
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while eventloop.poll().await.is_ok() {}
    })
    .await;
    present.unwrap()
}

/// The embedded broker keeps sessions in the data dir: a client with clean start off finds
/// its session after the server was killed and restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_sessions_survive_a_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let serve = Serve::start(tmp.path(), &[]);
    let port = serve.port;
    assert!(!connect_session(port, Some("persisted/topic")).await);
    // The broker commits session changes in the background: give it time before the kill.
    tokio::time::sleep(Duration::from_secs(2)).await;
    serve.kill9();
    let child = Command::new(env!("CARGO_BIN_EXE_mqstate"))
        .args([
            "serve",
            "--no-iothub",
            "--no-dashboard",
            "--port",
            &port.to_string(),
            "--log",
            "warn",
            "--data-dir",
        ])
        .arg(tmp.path())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let serve = Serve {
        child: Reaper(child),
        port,
    };
    assert!(connect_session(port, None).await, "the session was lost");
    drop(serve);
}
