//! The IoT Hub device client authenticated by an X.509 certificate against the local IoT Hub
//! (mqstate-server's `iothub`, device TLS on): a connection string with `x509=true`, the
//! certificate and key as PEM files, no SAS token; a certificate that is not the device's is
//! refused as IoT Hub refuses it (MQTT: CONNACK 5; AMQP: the links detached with
//! `amqp:unauthorized-access`; an authentication error, not retried).

use std::time::Duration;

use mqstate::ErrorKind;
use mqstate::TlsOptions;
use mqstate::iothub::{DeviceAuth, DeviceClient, DeviceOptions, Transport};
use mqstate_server::iothub::registry::DeviceUpdate;
use mqstate_server::iothub::x509::Authentication;
use mqstate_server::iothub::{
    C2dMessage, DeviceTls, IotHub, IotHubConfig, IotHubServer, MessageState,
};

const WAIT: Duration = Duration::from_secs(30);

/// A self-signed certificate for `cn`, written to `dir` as `{cn}.pem` and `{cn}.key`; returns
/// the paths and the SHA-256 thumbprint (hex).
fn certificate(
    dir: &std::path::Path,
    name: &str,
    cn: &str,
) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    let cert = params.self_signed(&key).unwrap();
    let (cert_file, key_file) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let thumbprint = ring::digest::digest(&ring::digest::SHA256, cert.der())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    (cert_file, key_file, thumbprint)
}

fn options(
    hub: &IotHub,
    transport: Transport,
    dir: &std::path::Path,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> DeviceOptions {
    let ca = dir.join("hub-ca.pem");
    std::fs::write(&ca, hub.ca_certificate_pem().unwrap()).unwrap();
    let endpoints = hub.endpoints();
    let port = match transport {
        Transport::Mqtt => endpoints.device_endpoint,
        _ => endpoints.amqp_endpoint,
    }
    .unwrap()
    .port();
    // The connection string the SDKs take for an X.509 device.
    let options =
        DeviceOptions::from_connection_string("HostName=localhost;DeviceId=x1;x509=true").unwrap();
    assert_eq!(options.auth, DeviceAuth::X509);
    options.with_transport(transport).with_endpoint(
        "localhost",
        port,
        TlsOptions::default()
            .with_ca_file(ca)
            .with_client_cert(cert, key),
    )
}

/// Over MQTT and over AMQP (no SASL, no `$cbs`: the certificate authorizes the links), where
/// the device can also reject.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iothub_x509_device_client_receives_with_a_certificate_and_a_wrong_one_is_refused() {
    for transport in [Transport::Mqtt, Transport::Amqp] {
        receives_with_a_certificate_and_a_wrong_one_is_refused(transport).await;
    }
}

async fn receives_with_a_certificate_and_a_wrong_one_is_refused(transport: Transport) {
    let dir = tempfile::tempdir().unwrap();
    let server = IotHubServer::start(IotHubConfig {
        admin_port: None,
        amqp_port: Some(0),
        https_port: None,
        tls: DeviceTls::SelfSigned,
        ..IotHubConfig::default()
    })
    .await
    .unwrap();
    let hub = server.hub();
    let (cert, key, thumbprint) = certificate(dir.path(), "x1", "x1");
    hub.create_device(
        "x1",
        &DeviceUpdate {
            authentication: Some(Authentication::self_signed(Some(&thumbprint), None).unwrap()),
            ..DeviceUpdate::default()
        },
    )
    .unwrap();

    let client = DeviceClient::connect(options(&hub, transport, dir.path(), &cert, &key))
        .await
        .unwrap();
    hub.send("x1", C2dMessage::new("by certificate").message_id("m1"))
        .unwrap();
    let message = tokio::time::timeout(WAIT, client.receive())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&message.content().payload[..], b"by certificate");
    message.complete().unwrap();
    if transport == Transport::Amqp {
        hub.send("x1", C2dMessage::new("refused").message_id("m2"))
            .unwrap();
        let message = tokio::time::timeout(WAIT, client.receive())
            .await
            .unwrap()
            .unwrap();
        message.reject().unwrap();
        let start = std::time::Instant::now();
        while hub.queue("x1").unwrap().depth > 0 {
            assert!(
                start.elapsed() < WAIT,
                "the rejection never reached the hub"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let finished = hub.queue("x1").unwrap().finished;
        assert!(
            finished
                .iter()
                .any(|m| m.message_id.as_deref() == Some("m2")
                    && m.state == MessageState::DeadLettered),
            "{finished:?}"
        );
    }
    client.close().await;

    let (other, other_key, _) = certificate(dir.path(), "other", "x1");
    let e = DeviceClient::connect(options(&hub, transport, dir.path(), &other, &other_key))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Authentication, "{transport:?}: {e}");
    let why = match transport {
        Transport::Mqtt => "NotAuthorized",
        _ => "matches neither thumbprint of device",
    };
    assert!(e.to_string().contains(why), "{transport:?}: {e}");
    server.shutdown().await;
}
