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

#[test]
fn serve_on_every_address_without_tls_or_auth_exits_with_the_reason() {
    let out = mqstate()
        .args([
            "serve",
            "--bind",
            "0.0.0.0",
            "--port",
            "0",
            "--no-iothub",
            "--no-dashboard",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("refusing to listen on 0.0.0.0"), "{stderr}");
    assert!(stderr.contains("--insecure"), "{stderr}");
}

#[test]
fn the_iothub_admin_api_on_every_address_is_refused() {
    let out = mqstate()
        .args([
            "serve",
            "--port",
            "0",
            "--iothub-bind",
            "0.0.0.0",
            "--iothub-port",
            "0",
            "--iothub-admin-port",
            "0",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("admin API has no authentication"),
        "{stderr}"
    );
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
