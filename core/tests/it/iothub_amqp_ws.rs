//! The IoT Hub device client over AMQP over WebSockets (`Transport::AmqpWs`) against the local
//! IoT Hub's HTTPS port (`wss://.../$iothub/websocket`, subprotocol `AMQPWSB10`, then the same
//! AMQP connection as `iothub_amqp`, whose complete, reject and abandon tests run over both
//! transports): telemetry larger than a WebSocket message, a refused key, an endpoint that is
//! not a WebSocket one, and what the transport refuses before connecting (X.509, plain TCP).

use std::time::{Duration, Instant};

use mqstate::ErrorKind;
use mqstate::iothub::{DeviceClient, DeviceOptions, Telemetry, Transport};
use mqstate_server::iothub::IotHubConfig;

use crate::common::iothub::{CaFile, amqp_port, amqp_ws_options, hub, only_event};

/// Feedback right away, so that each test can read its records.
fn config() -> IotHubConfig {
    IotHubConfig {
        feedback_batch_size: 1,
        ..IotHubConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_arrives_with_its_properties() {
    let (_server, hub) = hub(config(), &["dev1"]).await;
    let ca = CaFile::of(&hub);
    let client = DeviceClient::connect(amqp_ws_options(&hub, "dev1", &ca))
        .await
        .unwrap();
    // Larger than one WebSocket message of a small write: the stream carries it whole.
    let body: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    client
        .send_event(
            Telemetry::new(body.clone())
                .message_id("tm 1")
                .property("place", "a/b&c=d é"),
        )
        .await
        .unwrap();
    let (got, t) = only_event(&hub, "dev1", "the disposition came after the hub kept it");
    assert_eq!(got, body);
    let sys = |k: &str| t.system_properties.get(k).cloned().flatten();
    assert_eq!(sys("$.mid").as_deref(), Some("tm 1"));
    assert_eq!(
        t.properties.get("place"),
        Some(&Some("a/b&c=d é".to_owned()))
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_is_an_authentication_error() {
    let (_server, hub) = hub(config(), &["dev1"]).await;
    let ca = CaFile::of(&hub);
    let good = amqp_ws_options(&hub, "dev1", &ca);
    let mut wrong = DeviceOptions::new(hub.config().hostname.clone(), "dev1", "d3Jvbmcga2V5")
        .with_transport(Transport::AmqpWs);
    assert_eq!(wrong.port, 443);
    wrong.connect_host = good.connect_host.clone();
    wrong.port = good.port;
    wrong.tls = good.tls.clone();
    let e = DeviceClient::connect(wrong).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Authentication, "{e}");
}

/// The hub's AMQP port speaks TLS with the same certificate but no HTTP: the upgrade fails as
/// soon as the AMQP endpoint answers, with a connection error that says where it went, not
/// after the connect timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_is_not_a_websocket_one_fails_at_once() {
    let (_server, hub) = hub(config(), &["dev1"]).await;
    let ca = CaFile::of(&hub);
    let mut options = amqp_ws_options(&hub, "dev1", &ca);
    options.port = amqp_port(&hub);
    options.connect_timeout = Duration::from_secs(20);
    let started = Instant::now();
    let e = DeviceClient::connect(options).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}: {e}",
        started.elapsed()
    );
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    let text = e.to_string();
    assert!(text.contains("WebSocket upgrade"), "{text}");
    assert!(text.contains("/$iothub/websocket"), "{text}");
}

/// X.509 and plain TCP are refused before connecting: the hub takes no client certificate on
/// its WebSocket endpoint (docs/security.md) and serves WebSockets over TLS only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x509_is_not_supported_and_plain_tcp_is_invalid() {
    let x509 = DeviceOptions::with_x509("localhost", "x1", "x1.pem", "x1.key")
        .with_transport(Transport::AmqpWs);
    let e = DeviceClient::connect(x509).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotSupported, "{e}");
    assert!(e.to_string().contains("X.509"), "{e}");

    let plain = DeviceOptions::new("localhost", "dev1", "c2VjcmV0")
        .with_transport(Transport::AmqpWs)
        .with_plain_tcp("127.0.0.1", 1);
    let e = DeviceClient::connect(plain).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("TLS"), "{e}");
}
