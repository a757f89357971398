//! `mqstate serve` as a process: it answers a raw MQTT5 request, then stops cleanly on SIGINT
//! (Ctrl-C). Once with the embedded broker, once attached to Mosquitto.

use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use mqstate::protocol::topics::{self, REQUEST_TOPIC};
use mqstate_testing as testing;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};

use crate::support::{Reaper, signal, wait_exit};

struct Serve(Reaper);

impl Serve {
    fn start(args: &[&str]) -> Serve {
        let child = Command::new(env!("CARGO_BIN_EXE_mqstate"))
            .arg("serve")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start mqstate serve");
        Serve(Reaper(child))
    }

    /// SIGINT, then the exit status (within 10 s).
    fn interrupt(&mut self) -> std::process::ExitStatus {
        signal(&self.0.0, "-INT");
        wait_exit(&mut self.0.0, Duration::from_secs(10))
    }
}

/// Sends `SET k v` then `GET k` until the server answers (it may still be starting).
async fn set_and_get(port: u16) {
    let id = "cli-test-client";
    let mut options = MqttOptions::new(id, "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(30));
    let (client, mut eventloop) = AsyncClient::new(options, 16);
    let response_topic = topics::response_topic(id);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut subscribed = false;
    let mut got = Vec::new();
    let mut sent = 0u32;
    let mut retry = tokio::time::interval(Duration::from_millis(300));
    while got.len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no answer from mqstate serve"
        );
        tokio::select! {
            _ = retry.tick(), if subscribed => {
                // Resend until answered: the store may subscribe after this client.
                let payloads: [&[u8]; 2] = [
                    b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n",
                    b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
                ];
                let payload = payloads[got.len()];
                sent += 1;
                let properties = PublishProperties {
                    response_topic: Some(response_topic.clone()),
                    correlation_data: Some(Bytes::from(sent.to_be_bytes().to_vec())),
                    user_properties: vec![(
                        "__ts".into(),
                        mqstate::Hlc::new(
                            std::time::SystemTime::now()
                                .duration_since(std::time::UNIX_EPOCH)
                                .unwrap()
                                .as_millis() as u64,
                            0,
                            id,
                        )
                        .to_string(),
                    )],
                    ..PublishProperties::default()
                };
                client
                    .publish_with_properties(REQUEST_TOPIC, QoS::AtLeastOnce, false, Bytes::from_static(payload), properties)
                    .await
                    .unwrap();
            }
            event = eventloop.poll() => match event {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    client.subscribe(response_topic.clone(), QoS::AtLeastOnce).await.unwrap();
                }
                Ok(Event::Incoming(Packet::SubAck(_))) => subscribed = true,
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let expected: &[u8] = if got.is_empty() { b"+OK\r\n" } else { b"$1\r\nv\r\n" };
                    if p.payload == expected {
                        got.push(p.payload);
                    }
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    let _ = client.disconnect().await;
}

#[tokio::test]
async fn serve_embedded_answers_and_stops_on_ctrl_c() {
    let port = testing::free_port().unwrap();
    let mut serve = Serve::start(&[
        "--port",
        &port.to_string(),
        "--max-keys",
        "100",
        "--log",
        "warn",
        "--iothub-port",
        "0",
        "--iothub-admin-port",
        "0",
        "--iothub-https-port",
        "0",
        "--iothub-amqp-port",
        "0",
    ]);
    set_and_get(port).await;
    let status = serve.interrupt();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn serve_attached_to_mosquitto() {
    let Some(mosquitto) = testing::mosquitto_or_skip("serve_attached_to_mosquitto") else {
        return;
    };
    let mut serve = Serve::start(&[
        "--broker",
        &mosquitto.url(),
        "--reconnect-max-delay",
        "250ms",
        "--log",
        "warn",
        "--iothub-port",
        "0",
        "--iothub-admin-port",
        "0",
        "--iothub-https-port",
        "0",
        "--iothub-amqp-port",
        "0",
    ]);
    set_and_get(mosquitto.port()).await;
    let status = serve.interrupt();
    assert!(status.success(), "{status}");
}

#[test]
fn serve_help_documents_every_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_mqstate"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--port",
        "--bind",
        "--broker",
        "--max-keys",
        "--max-packet-size",
        "--log",
        "--no-dashboard",
        "--dashboard-edit",
        "--reconnect-max-delay",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

#[test]
fn serve_refuses_a_bad_broker_url() {
    let out = Command::new(env!("CARGO_BIN_EXE_mqstate"))
        .args(["serve", "--broker", "http://nowhere"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("only mqtt://"), "{err}");
}

#[test]
fn serve_refuses_a_reconnect_max_delay_out_of_range() {
    for (value, expected) in [("1ms", "from 10ms to 1h"), ("soon", "500ms")] {
        let out = Command::new(env!("CARGO_BIN_EXE_mqstate"))
            .args(["serve", "--reconnect-max-delay", value, "--no-iothub"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{value} accepted");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains("reconnect-max-delay"), "{value}: {err}");
        assert!(err.contains(expected), "{value}: {err}");
    }
}
