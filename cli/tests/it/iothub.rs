//! `mqstate serve` with its local IoT Hub as a process, driven by `mqstate iothub ...` (the
//! admin API over HTTP) on one side and rumqttc's MQTT 3.1.1 client as the device on the other.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use mqstate_testing as testing;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};

use crate::support::Reaper;

fn mqstate(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqstate"))
        .arg("iothub")
        .args(args)
        .env("MQSTATE_IOTHUB_URL", url)
        .stdin(Stdio::null())
        .output()
        .expect("run mqstate iothub")
}

fn ok(url: &str, args: &[&str]) -> String {
    let out = mqstate(url, args);
    assert!(
        out.status.success(),
        "mqstate iothub {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

// Multi-threaded: the test blocks on `mqstate` processes while rumqttc's event loop must keep
// running (to send the PUBACK).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_and_the_iothub_commands() {
    let broker = testing::free_port().unwrap().to_string();
    let devices = testing::free_port().unwrap();
    let admin = testing::free_port().unwrap();
    let _serve = Reaper(
        Command::new(env!("CARGO_BIN_EXE_mqstate"))
            .args(["serve", "--port", &broker, "--log", "warn"])
            .args(["--iothub-port", &devices.to_string()])
            .args(["--iothub-admin-port", &admin.to_string()])
            .args(["--iothub-https-port", "0", "--iothub-amqp-port", "0"])
            .args([
                "--iothub-device",
                "dev1",
                "--iothub-feedback-interval",
                "1s",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let url = format!("http://127.0.0.1:{admin}");
    let start = Instant::now();
    while !mqstate(&url, &["device", "list"]).status.success() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "serve did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let added = json(&ok(&url, &["device", "add", "dev2"]));
    assert_eq!(added["deviceId"], "dev2");
    let listed = ok(&url, &["device", "list"]);
    assert!(
        listed.starts_with("dev1\tDisconnected\tqueue=0"),
        "{listed}"
    );
    assert!(listed.contains("\ndev2\t"), "{listed}");

    // X.509 devices: self-signed by thumbprint (two: primary, secondary), or CA-signed.
    let thumbprint = "ab".repeat(32);
    let x1 = json(&ok(
        &url,
        &[
            "device",
            "add",
            "x1",
            "--x509-thumbprint",
            &thumbprint,
            "--x509-thumbprint",
            &"CD".repeat(20),
        ],
    ));
    assert_eq!(x1["authentication"]["type"], "selfSigned", "{x1}");
    assert_eq!(
        x1["authentication"]["primaryThumbprint"],
        thumbprint.to_uppercase(),
        "{x1}"
    );
    assert_eq!(
        x1["authentication"]["secondaryThumbprint"],
        "CD".repeat(20),
        "{x1}"
    );
    let x2 = json(&ok(&url, &["device", "add", "x2", "--x509-ca"]));
    assert_eq!(x2["authentication"]["type"], "certificateAuthority", "{x2}");
    let listed = ok(&url, &["device", "list"]);
    assert!(
        listed.contains("\nx1\tDisconnected\tqueue=0\tgeneration="),
        "{listed}"
    );
    assert!(listed.contains("auth=selfSigned"), "{listed}");
    assert!(listed.contains("auth=certificateAuthority"), "{listed}");
    for id in ["x1", "x2"] {
        assert_eq!(
            ok(&url, &["device", "remove", id]),
            format!("removed {id}\n")
        );
    }

    // The service connection strings of the shared access policies (iothubowner by default).
    let owner = ok(&url, &["connection-string"]);
    assert!(
        owner.starts_with("HostName=localhost;SharedAccessKeyName=iothubowner;SharedAccessKey="),
        "{owner}"
    );
    for policy in ["service", "device", "registryRead", "registryReadWrite"] {
        let text = ok(&url, &["connection-string", "--policy", policy]);
        assert!(
            text.contains(&format!(";SharedAccessKeyName={policy};SharedAccessKey=")),
            "{text}"
        );
        assert_ne!(text, owner);
    }

    let credentials = json(&ok(&url, &["device", "token", "dev2", "--ttl", "10m"]));
    let mut options = MqttOptions::new("dev2", "127.0.0.1", devices);
    options.set_credentials(
        credentials["username"].as_str().unwrap(),
        credentials["password"].as_str().unwrap(),
    );
    options.set_manual_acks(true);
    let (client, mut eventloop) = AsyncClient::new(options, 16);
    client
        .subscribe("devices/dev2/messages/devicebound/#", QoS::AtLeastOnce)
        .await
        .unwrap();
    let (tx, mut publishes) = tokio::sync::mpsc::unbounded_channel();
    let (sub_tx, mut subacks) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(event) = eventloop.poll().await {
            match event {
                Event::Incoming(Packet::Publish(p)) => drop(tx.send(p)),
                Event::Incoming(Packet::SubAck(_)) => drop(sub_tx.send(())),
                _ => {}
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(30), subacks.recv())
        .await
        .unwrap();

    let receipt = json(&ok(
        &url,
        &[
            "send",
            "dev2",
            "hello",
            "--message-id",
            "m1",
            "--ack",
            "full",
            "-P",
            "a=1",
            "-P",
            "n",
            "-P",
            "e=",
        ],
    ));
    assert_eq!(receipt["messageId"], "m1");
    let delivered = tokio::time::timeout(Duration::from_secs(30), publishes.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        delivered
            .topic
            .starts_with("devices/dev2/messages/devicebound/%24.mid=m1&")
    );
    assert!(
        delivered.topic.ends_with("&iothub-ack=full&a=1&e=&n"),
        "{}",
        delivered.topic
    );
    let queue = json(&ok(&url, &["queue", "dev2"]));
    assert_eq!(queue["messages"][0]["state"], "Invisible");
    client.ack(&delivered).await.unwrap();

    let batch = json(&ok(&url, &["feedback", "--once", "--wait", "30s"]));
    assert_eq!(
        batch["contentType"],
        "application/vnd.microsoft.iothub.feedback.json"
    );
    assert_eq!(batch["records"][0]["statusCode"], "Success");
    assert_eq!(batch["records"][0]["originalMessageId"], "m1");

    client
        .publish(
            "devices/dev2/messages/events/t=1",
            QoS::AtLeastOnce,
            false,
            "up",
        )
        .await
        .unwrap();
    let start = Instant::now();
    let events = loop {
        let out = ok(&url, &["events", "dev2"]);
        if !out.is_empty() {
            break out;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no telemetry");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(json(events.lines().next().unwrap())["body"], "up");

    ok(&url, &["send", "dev1", "x", "--message-id", "p1"]);
    assert_eq!(
        ok(&url, &["purge", "dev1"]),
        "purged 1 messages from dev1\n"
    );

    // Errors: a message and a non-zero exit, nothing changed.
    for (args, text) in [
        (vec!["send", "nobody", "x"], "\"nobody\" is not registered"),
        (
            vec!["send", "dev1", "x", "-P", "bad name=1"],
            "property name \"bad name\"",
        ),
        (
            vec!["send", "dev1", "x", "--ttl", "3days"],
            "at most 2 days",
        ),
        (vec!["device", "add", "dev1"], "already registered"),
        (
            vec!["device", "add", "x3", "--x509-thumbprint", "12"],
            "thumbprint",
        ),
        (
            vec![
                "device",
                "add",
                "x3",
                "--x509-thumbprint",
                "ab",
                "--x509-ca",
            ],
            "cannot be used with",
        ),
        (
            vec![
                "device",
                "add",
                "x3",
                "--x509-thumbprint",
                "a",
                "--x509-thumbprint",
                "b",
                "--x509-thumbprint",
                "c",
            ],
            "at most twice",
        ),
        (
            vec!["connection-string", "--policy", "nobody"],
            "no shared access policy named \"nobody\"",
        ),
    ] {
        let out = mqstate(&url, &args);
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(text), "{args:?}: {stderr}");
    }
    assert_eq!(json(&ok(&url, &["queue", "dev1"]))["depth"], 0);
    assert_eq!(ok(&url, &["device", "remove", "dev2"]), "removed dev2\n");
    let out = mqstate("http://127.0.0.1:1", &["device", "list"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect"));
}

/// With authentication on, `mqstate iothub` needs the access token: from
/// `--web-token-file` (created 0600 by `serve`) through `MQSTATE_WEB_TOKEN`.
#[test]
fn the_iothub_commands_need_the_token_when_serve_asks_for_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let passwd = dir.path().join("passwd");
    mqstate_server::security::set_password(&passwd, "alice", "pw").unwrap();
    let token_file = dir.path().join("web-token");
    let broker = testing::free_port().unwrap().to_string();
    let admin = testing::free_port().unwrap();
    let _serve = Reaper(
        Command::new(env!("CARGO_BIN_EXE_mqstate"))
            .args([
                "serve",
                "--port",
                &broker,
                "--log",
                "warn",
                "--iothub-port",
                "0",
            ])
            .args(["--iothub-admin-port", &admin.to_string()])
            .args(["--iothub-https-port", "0", "--iothub-amqp-port", "0"])
            .arg("--password-file")
            .arg(&passwd)
            .arg("--web-token-file")
            .arg(&token_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let url = format!("http://127.0.0.1:{admin}");
    let with_token = |token: &str| {
        Command::new(env!("CARGO_BIN_EXE_mqstate"))
            .args(["iothub", "device", "list"])
            .env("MQSTATE_IOTHUB_URL", &url)
            .env("MQSTATE_WEB_TOKEN", token)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let start = Instant::now();
    let token = loop {
        if let Ok(token) = std::fs::read_to_string(&token_file)
            && with_token(token.trim()).status.success()
        {
            break token.trim().to_owned();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "serve did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let refused = mqstate(&url, &["device", "list"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("credentials required"), "{stderr}");
    let wrong = with_token(&format!("{token}x"));
    assert!(!wrong.status.success());
}
