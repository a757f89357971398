//! `mqstate serve` security flags and `mqstate passwd` as processes: an open non-loopback
//! bind is refused with the reason, `passwd` writes an entry the server then accepts.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

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

/// `serve` warns when a password file can be read by others than its owner.
#[cfg(unix)]
#[test]
fn serve_warns_about_a_password_file_others_can_read() {
    use std::io::BufRead as _;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("passwd");
    std::fs::write(&file, "").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut child = mqstate()
        .args([
            "serve",
            "--port",
            "0",
            "--no-iothub",
            "--no-dashboard",
            "--password-file",
        ])
        .arg(&file)
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
    let mut warned = false;
    while let Ok(line) = rx.recv_timeout(std::time::Duration::from_secs(20)) {
        warned = line.contains("mode 644") && line.contains("chmod 600");
        let started = line.contains("listening");
        seen.push(line);
        if warned || started {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(warned, "{seen:#?}");
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
