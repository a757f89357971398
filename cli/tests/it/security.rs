//! `mqstate serve` security flags and `mqstate passwd` as processes: an open non-loopback
//! bind is refused with the reason, `passwd` writes an entry the server then accepts.

use std::io::Write as _;
use std::process::{Command, Stdio};

fn mqstate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mqstate"))
}

/// Runs `mqstate serve ARGS`, which must refuse to start: its stderr. A server that starts
/// instead fails the test (after 20 s) rather than hanging it.
fn serve_refused(args: &[&str]) -> String {
    let mut child = mqstate()
        .arg("serve")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`mqstate serve {}` started instead of refusing",
                args.join(" ")
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    stderr
}

#[test]
fn serve_on_every_address_without_tls_or_auth_exits_with_the_reason() {
    let stderr = serve_refused(&[
        "--bind",
        "0.0.0.0",
        "--port",
        "0",
        "--no-iothub",
        "--no-dashboard",
    ]);
    assert!(stderr.contains("refusing to listen on 0.0.0.0"), "{stderr}");
    assert!(stderr.contains("--insecure"), "{stderr}");
}

#[test]
fn the_iothub_admin_api_on_every_address_is_refused() {
    let stderr = serve_refused(&[
        "--port",
        "0",
        "--iothub-bind",
        "0.0.0.0",
        "--iothub-port",
        "0",
        "--iothub-admin-port",
        "0",
        "--iothub-https-port",
        "0",
        "--iothub-amqp-port",
        "0",
    ]);
    assert!(
        stderr.contains("refusing to run the local IoT Hub on 0.0.0.0"),
        "{stderr}"
    );
}

/// Without the hub the dashboard runs its own web server on `--iothub-bind`: beyond loopback
/// it would show every key and value to anyone, so it is refused as the hub is.
#[test]
fn the_dashboard_alone_on_every_address_is_refused() {
    let stderr = serve_refused(&[
        "--port",
        "0",
        "--no-iothub",
        "--iothub-bind",
        "0.0.0.0",
        "--iothub-admin-port",
        "0",
        "--iothub-https-port",
        "0",
        "--iothub-amqp-port",
        "0",
    ]);
    assert!(
        stderr.contains("refusing to serve the dashboard on 0.0.0.0"),
        "{stderr}"
    );
}

/// Runs `serve` (its arguments given) until each of `warnings` (the parts one stderr line
/// must hold) has been seen, or the server says it is ready, or 20 s pass without a line:
/// whether every warning was seen, and the lines read.
#[cfg(unix)]
fn serve_warns(serve: &mut Command, warnings: &[&[&str]]) -> (bool, Vec<String>) {
    use std::io::BufRead as _;
    let mut child = serve
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read in a thread: a server that never warns must fail the test, not hang it.
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut missing: Vec<&[&str]> = warnings.to_vec();
    while let Ok(line) = rx.recv_timeout(std::time::Duration::from_secs(20)) {
        missing.retain(|parts| !parts.iter().all(|p| line.contains(p)));
        // Logged once everything has started, the hub included.
        let started = line.contains("state store ready");
        seen.push(line);
        if missing.is_empty() || started {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    (missing.is_empty(), seen)
}

/// `serve` warns when a password file can be read by others than its owner.
#[cfg(unix)]
#[test]
fn serve_warns_about_a_password_file_others_can_read() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("passwd");
    std::fs::write(&file, "").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut serve = mqstate();
    serve
        .args([
            "serve",
            "--port",
            "0",
            "--no-iothub",
            "--no-dashboard",
            "--password-file",
        ])
        .arg(&file);
    let (warned, seen) = serve_warns(&mut serve, &[&["mode 644", "chmod 600"]]);
    assert!(warned, "{seen:#?}");
}

/// `serve` warns, as for a password file, about a data dir that already existed and that
/// others can read, and about an `--iothub-policies-file` (the keys of every policy, the
/// owner's included) that others can read, naming each and its mode.
#[cfg(unix)]
#[test]
fn serve_warns_about_a_data_dir_or_policies_file_others_can_read() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies_file = tmp.path().join("policies.json");
    let policies = mqstate_server::iothub::policies::Policies::generate().unwrap();
    let json = serde_json::to_string(&policies.iter().collect::<Vec<_>>()).unwrap();
    std::fs::write(&policies_file, json).unwrap();
    std::fs::set_permissions(&policies_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut serve = mqstate();
    serve
        .args(["serve", "--port", "0", "--no-dashboard"])
        .args(["--iothub-port", "0", "--iothub-admin-port", "0"])
        .args(["--iothub-https-port", "0", "--iothub-amqp-port", "0"])
        .arg("--data-dir")
        .arg(&data)
        .arg("--iothub-policies-file")
        .arg(&policies_file);
    let data_shown = data.display().to_string();
    let policies_shown = policies_file.display().to_string();
    let (warned, seen) = serve_warns(
        &mut serve,
        &[
            &[&data_shown, "mode 755", "chmod 700"],
            &[&policies_shown, "mode 644", "chmod 600"],
        ],
    );
    assert!(warned, "{seen:#?}");
}

/// Under umask 022, `serve --data-dir` with the hub keeps the data dir and everything in it
/// private once the store, the hub and the broker have written: every directory 0700, every
/// file 0600 (the store's and the hub's databases, the policies file, the broker's sessions
/// and retained messages).
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_dir_and_every_file_in_it_are_private_under_umask_022() {
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, Instant};

    use mqstate::{Client, ConnectOptions, SetOptions};
    use mqstate_server::iothub::admin::AdminClient;

    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let port = mqstate_testing::free_port().unwrap();
    let admin_port = mqstate_testing::free_port().unwrap();
    // The shell sets the umask, then becomes `mqstate serve` with the arguments that follow.
    let mut child = Command::new("sh")
        .args(["-c", "umask 022 && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_mqstate"))
        .args(["serve", "--no-dashboard", "--log", "warn"])
        .args(["--port", &port.to_string()])
        .args(["--iothub-port", "0", "--iothub-https-port", "0"])
        .args(["--iothub-amqp-port", "0"])
        .args(["--iothub-admin-port", &admin_port.to_string()])
        .arg("--data-dir")
        .arg(&data)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let admin = AdminClient::new(&format!("http://127.0.0.1:{admin_port}")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while admin.hub_info().await.is_err() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("mqstate serve did not start");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The hub writes a device and its keys; the store a key; the broker a retained message.
    admin.add_device("d", None).await.unwrap();
    let url = format!("mqtt://127.0.0.1:{port}");
    let client = Client::connect(ConnectOptions::from_url(&url).unwrap())
        .await
        .unwrap()
        .with_timeout(Duration::from_secs(20));
    client.set("k", "v", SetOptions::default()).await.unwrap();
    client.close().await;
    publish_retained(port).await;
    // The broker writes its files in the background.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut found = Vec::new();
    let mut loose = Vec::new();
    let mut dirs = vec![data.clone()];
    while let Some(dir) = dirs.pop() {
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        if mode != 0o700 {
            loose.push(format!("{} {mode:03o}", dir.display()));
        }
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                dirs.push(path);
                continue;
            }
            let mode = meta.permissions().mode() & 0o777;
            if mode != 0o600 {
                loose.push(format!("{} {mode:03o}", path.display()));
            }
            found.push(path.strip_prefix(&data).unwrap().display().to_string());
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    for name in ["store.redb", "iothub.redb", "iothub-policies.json"] {
        assert!(found.iter().any(|f| f == name), "{name} in {found:#?}");
    }
    assert!(
        found.iter().any(|f| f.starts_with("broker/retained/")),
        "a retained message in {found:#?}"
    );
    assert!(loose.is_empty(), "not private: {loose:#?}");
}

/// Publishes a retained QoS 1 message on the embedded broker (which stores it in its
/// session dir) and waits for its PUBACK.
#[cfg(unix)]
async fn publish_retained(port: u16) {
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::mqttbytes::v5::Packet;
    use rumqttc::v5::{AsyncClient, Event, MqttOptions};

    let (client, mut eventloop) =
        AsyncClient::new(MqttOptions::new("retainer", "127.0.0.1", port), 16);
    client
        .publish("retained/topic", QoS::AtLeastOnce, true, "secret")
        .await
        .unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(20), async {
        loop {
            if let Event::Incoming(Packet::PubAck(_)) = eventloop.poll().await.unwrap() {
                break;
            }
        }
    })
    .await
    .unwrap();
    let _ = client.disconnect().await;
}

#[test]
fn passwd_writes_a_salted_hash_and_refuses_an_empty_password() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("passwd");
    let mut child = mqstate()
        .args(["passwd"])
        .arg(&file)
        .arg("alice")
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"s3cret\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    let (user, hash) = text.trim_end().split_once(':').unwrap();
    assert_eq!(user, "alice");
    assert!(hash.starts_with("$argon2"), "{hash}");
    assert!(!text.contains("s3cret"));
    // The file holds password hashes: private to its owner from the start.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{mode:o}");
    }

    let out = mqstate()
        .args(["passwd"])
        .arg(&file)
        .arg("bob")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no password on stdin"));
}
