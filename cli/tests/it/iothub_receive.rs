//! `mqstate iothub receive`, the device side on the command line, against a real `mqstate
//! serve` and its hub: messages sent with `mqstate iothub send ... --ack full`, feedback read
//! with `mqstate iothub feedback --once`. Over MQTT (plain TCP) and AMQP (TLS with the hub's
//! generated certificate, written out with --iothub-ca-out).

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use mqstate_testing as testing;
use serde_json::Value;

use crate::support::{Reaper, signal, wait_exit};

/// A running `mqstate serve` with its hub (MQTT devices on plain TCP, AMQP over TLS).
struct Hub {
    _serve: Reaper,
    _dir: tempfile::TempDir,
    url: String,
    mqtt_port: u16,
    amqp_port: u16,
    ca: PathBuf,
}

impl Hub {
    fn start() -> Hub {
        Hub::start_with(&[])
    }

    /// With more `serve` flags.
    fn start_with(extra: &[&str]) -> Hub {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("hub-ca.pem");
        let broker = testing::free_port().unwrap().to_string();
        let mqtt_port = testing::free_port().unwrap();
        let amqp_port = testing::free_port().unwrap();
        let admin = testing::free_port().unwrap();
        let serve = Reaper(
            Command::new(env!("CARGO_BIN_EXE_mqstate"))
                .args([
                    "serve",
                    "--port",
                    &broker,
                    "--log",
                    "warn",
                    "--no-dashboard",
                ])
                .args(["--iothub-port", &mqtt_port.to_string()])
                .args(["--iothub-admin-port", &admin.to_string()])
                .args(["--iothub-https-port", "0"])
                .args(["--iothub-amqp-port", &amqp_port.to_string()])
                .arg("--iothub-ca-out")
                .arg(&ca)
                .args(["--iothub-feedback-interval", "1s"])
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        let hub = Hub {
            _serve: serve,
            _dir: dir,
            url: format!("http://127.0.0.1:{admin}"),
            mqtt_port,
            amqp_port,
            ca,
        };
        let start = Instant::now();
        while !(hub.admin(&["device", "list"]).status.success() && hub.ca.exists()) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "serve did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        hub
    }

    fn admin(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_mqstate"))
            .arg("iothub")
            .args(args)
            .env("MQSTATE_IOTHUB_URL", &self.url)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.admin(args);
        assert!(
            out.status.success(),
            "mqstate iothub {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Registers a device and returns its connection string.
    fn add_device(&self, id: &str) -> String {
        self.ok(&["device", "add", id]);
        let token = json(&self.ok(&["device", "token", id]));
        token["connectionString"].as_str().unwrap().to_owned()
    }

    fn send(&self, device: &str, body: &str, message_id: &str) {
        self.ok(&[
            "send",
            device,
            body,
            "--message-id",
            message_id,
            "--ack",
            "full",
            "-P",
            "a=1",
            "-P",
            "n",
        ]);
    }

    /// The status code of the feedback record of `message_id` (reading batches until it comes).
    fn feedback(&self, message_id: &str) -> String {
        let start = Instant::now();
        loop {
            let batch = json(&self.ok(&["feedback", "--once", "--wait", "10s"]));
            for record in batch["records"].as_array().unwrap() {
                if record["originalMessageId"] == message_id {
                    return record["statusCode"].as_str().unwrap().to_owned();
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no feedback for {message_id}"
            );
        }
    }

    fn depth(&self, device: &str) -> u64 {
        json(&self.ok(&["queue", device]))["depth"]
            .as_u64()
            .unwrap()
    }

    /// `mqstate iothub receive` over MQTT (plain TCP) with `args`.
    fn receive_mqtt(&self, cs: &str, args: &[&str]) -> Output {
        let port = self.mqtt_port.to_string();
        receive(cs, &[&["--no-tls", "--port", &port], args].concat())
    }

    /// `mqstate iothub receive` over AMQP (TLS, trusting the hub's certificate) with `args`.
    fn receive_amqp(&self, cs: &str, args: &[&str]) -> Output {
        let port = self.amqp_port.to_string();
        let ca = self.ca.to_str().unwrap();
        receive(
            cs,
            &[
                &["--transport", "amqp", "--port", &port, "--ca-file", ca],
                args,
            ]
            .concat(),
        )
    }
}

fn receive_command(cs: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mqstate"));
    command
        .args(["iothub", "receive"])
        .args(args)
        .env("MQSTATE_DEVICE_CONNECTION_STRING", cs)
        .stdin(Stdio::null());
    command
}

fn receive(cs: &str, args: &[&str]) -> Output {
    receive_command(cs, &[args, &["--wait", "20s"]].concat())
        .output()
        .unwrap()
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(json)
        .collect()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn receive_over_mqtt_completes_and_cannot_reject() {
    let hub = Hub::start();
    let cs = hub.add_device("dev1");

    // Complete: one JSON line, Success feedback, the queue empty.
    hub.send("dev1", "hello", "m1");
    let out = hub.receive_mqtt(&cs, &["--count", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let got = lines(&out);
    assert_eq!(got.len(), 1, "{got:?}");
    let m = &got[0];
    assert_eq!(m["messageId"], "m1");
    assert_eq!(m["payload"], "hello");
    assert!(m.get("payloadBase64").is_none(), "{m}");
    assert_eq!(m["ack"], "full");
    assert_eq!(m["properties"], serde_json::json!({"a": "1", "n": null}));
    assert_eq!(
        m["deliveryCount"],
        Value::Null,
        "MQTT carries no delivery count"
    );
    assert_eq!(m["redelivered"], false);
    assert_eq!(m["settled"], "complete");
    assert_eq!(hub.feedback("m1"), "Success");
    assert_eq!(hub.depth("dev1"), 0);

    // Reject (and abandon) over MQTT: the core's not_supported error, exit code 2, nothing
    // printed, and the message stays in the queue for a later completion.
    hub.send("dev1", "keep me", "m2");
    for settle in ["reject", "abandon"] {
        let out = hub.receive_mqtt(&cs, &["--settle", settle, "--count", "1"]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let text = stderr(&out);
        assert!(
            text.starts_with(&format!(
                "mqstate: {settle} message \"m2\": not supported: "
            )),
            "{text}"
        );
        assert!(text.contains("connect over AMQP"), "{text}");
        assert!(text.contains("stays in the hub's queue"), "{text}");
        assert!(out.stdout.is_empty());
        assert_eq!(hub.depth("dev1"), 1, "the message is not lost");
    }
    let out = hub.receive_mqtt(&cs, &["--count", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(lines(&out)[0]["messageId"], "m2");
    assert_eq!(hub.feedback("m2"), "Success");

    // send-event: telemetry over MQTT and AMQP, read back with `mqstate iothub events`.
    let mqtt_port = hub.mqtt_port.to_string();
    let amqp_port = hub.amqp_port.to_string();
    let ca = hub.ca.to_str().unwrap().to_owned();
    for (flags, body) in [
        (vec!["--no-tls", "--port", &mqtt_port], "up over mqtt"),
        (
            vec![
                "--transport",
                "amqp",
                "--port",
                &amqp_port,
                "--ca-file",
                &ca,
            ],
            "up over amqp",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_mqstate"))
            .args(["iothub", "send-event"])
            .args(&flags)
            .args([body, "--message-id", "e1", "-P", "unit=celsius", "-P", "n"])
            .env("MQSTATE_DEVICE_CONNECTION_STRING", &cs)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let events = hub.ok(&["events", "dev1"]);
        let last = json(events.lines().last().unwrap());
        assert_eq!(last["body"], body, "{last}");
        assert_eq!(last["properties"]["unit"], "celsius", "{last}");
        assert_eq!(last["properties"]["n"], Value::Null, "{last}");
    }

    // --wait with nothing to receive: exit code 5.
    let out = receive_command(
        &cs,
        &[
            "--no-tls",
            "--port",
            &hub.mqtt_port.to_string(),
            "--wait",
            "500ms",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no message within 500ms"),
        "{}",
        stderr(&out)
    );

    // A wrong key: the hub refuses the device, exit code 8, over both transports.
    let wrong = format!(
        "{}SharedAccessKey=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        cs.split("SharedAccessKey=").next().unwrap()
    );
    for out in [hub.receive_mqtt(&wrong, &[]), hub.receive_amqp(&wrong, &[])] {
        assert_eq!(out.status.code(), Some(8), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("authentication failed"),
            "{}",
            stderr(&out)
        );
    }

    // Settings the core refuses are usage errors (2), before connecting.
    let out = receive_command(&cs, &["--no-tls", "--ca-file", "ca.pem"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("TLS is turned off"),
        "{}",
        stderr(&out)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_mqstate"))
        .args(["iothub", "receive"])
        .env_remove("MQSTATE_DEVICE_CONNECTION_STRING")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--connection-string"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn receive_over_amqp_rejects_and_abandons() {
    let hub = Hub::start();
    let cs = hub.add_device("dev1");

    // Reject: dead-lettered, Rejected feedback.
    hub.send("dev1", "bad", "r1");
    let out = hub.receive_amqp(&cs, &["--settle", "reject", "--count", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let got = lines(&out);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["messageId"], "r1");
    assert_eq!(got[0]["deliveryCount"], 0);
    assert_eq!(got[0]["settled"], "reject");
    assert_eq!(got[0]["properties"]["a"], "1");
    assert_eq!(hub.feedback("r1"), "Rejected");
    assert_eq!(hub.depth("dev1"), 0);

    // Abandon: delivered again with delivery count 1, then completed: Success feedback.
    hub.send("dev1", "later", "a1");
    let out = hub.receive_amqp(
        &cs,
        &[
            "--settle",
            "abandon",
            "--settle-redelivered",
            "complete",
            "--count",
            "2",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let got: Vec<_> = lines(&out)
        .iter()
        .map(|m| {
            (
                m["messageId"].clone(),
                m["deliveryCount"].clone(),
                m["redelivered"].clone(),
                m["settled"].clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("a1".into(), 0.into(), false.into(), "abandon".into()),
            ("a1".into(), 1.into(), true.into(), "complete".into()),
        ]
    );
    assert_eq!(hub.feedback("a1"), "Success");
    assert_eq!(hub.depth("dev1"), 0);

    // Ctrl-C closes cleanly: exit code 0 without --count, 130 before --count was reached.
    for (args, code) in [(&[][..], 0), (&["--count", "1"][..], 130)] {
        let port = hub.amqp_port.to_string();
        let mut child = receive_command(
            &cs,
            &[
                &["--transport", "amqp", "--port", &port, "--ca-file"][..],
                &[hub.ca.to_str().unwrap()],
                args,
            ]
            .concat(),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
        wait_connected(&hub, "dev1");
        signal(&child, "-INT");
        let status = wait_exit(&mut child, Duration::from_secs(20));
        assert_eq!(status.code(), Some(code), "{args:?}");
        wait_disconnected(&hub, "dev1");
    }
}

fn connection_state(hub: &Hub, device: &str) -> String {
    let listed = hub.ok(&["device", "list"]);
    listed
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{device}\t")))
        .and_then(|rest| rest.split('\t').next())
        .unwrap_or_default()
        .to_owned()
}

fn wait_connected(hub: &Hub, device: &str) {
    wait_state(hub, device, "Connected");
}

fn wait_disconnected(hub: &Hub, device: &str) {
    wait_state(hub, device, "Disconnected");
}

fn wait_state(hub: &Hub, device: &str, state: &str) {
    let start = Instant::now();
    while connection_state(hub, device) != state {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{device} not {state}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn receive_as_an_x509_device() {
    // A CA the hub trusts for certificateAuthority devices, and a device certificate it signs
    // (CN = the device id); the device endpoint on TLS with the hub's generated certificate.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "device CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "cam1");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &*ca).unwrap();
    let files = tempfile::tempdir().unwrap();
    let write = |name: &str, text: String| {
        let path = files.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let device_ca = write("device-ca.pem", ca.pem());
    let cert_file = write("cam1.pem", cert.pem());
    let key_file = write("cam1.key", key.serialize_pem());

    let hub = Hub::start_with(&["--iothub-tls", "--iothub-ca-file", &device_ca]);
    hub.ok(&["device", "add", "cam1", "--x509-ca"]);
    hub.send("cam1", "snap", "x1");
    let cs = "HostName=localhost;DeviceId=cam1;x509=true";
    let port = hub.mqtt_port.to_string();
    let ca_file = hub.ca.to_str().unwrap();
    let tls = [
        "--port",
        port.as_str(),
        "--ca-file",
        ca_file,
        "--cert-file",
        &cert_file,
        "--key-file",
        &key_file,
    ];
    let out = receive(cs, &[&tls[..], &["--count", "1"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(lines(&out)[0]["messageId"], "x1");
    assert_eq!(hub.feedback("x1"), "Success");

    // The certificate without its key: the core's settings refuse it before connecting.
    let out = receive(cs, &tls[..6]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("both cert_file and key_file"),
        "{}",
        stderr(&out)
    );
}
