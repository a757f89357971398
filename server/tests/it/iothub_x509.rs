//! X.509 devices on the local hub (docs/iothub.md, "X.509 devices"): registered through the
//! REST registry API as the service SDKs register them (`selfSigned` with a thumbprint,
//! `certificateAuthority`), then receiving cloud-to-device messages over MQTT, AMQP and HTTPS with
//! a TLS client certificate made by rcgen and no SAS token; a wrong certificate, none, or a
//! CA-signed one whose CN is not the device id, is refused with IoT Hub's error on each.

use std::sync::Arc;
use std::time::Duration;

use hyper::{Method, StatusCode};
use mqstate_server::iothub::policies::service_token;
use mqstate_server::iothub::{C2dMessage, DeviceTls, IotHub, IotHubConfig, IotHubServer};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rumqttc::{ConnectReturnCode, Event, MqttOptions, Packet, QoS};
use serde_json::json;

use crate::common::hub::{API, Https};

const WAIT: Duration = Duration::from_secs(10);

/// A certificate and its key, PEM.
pub(crate) struct Pem {
    pub(crate) cert: String,
    pub(crate) key: String,
    pub(crate) der: Vec<u8>,
}

fn leaf_params(cn: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params
}

pub(crate) fn self_signed(cn: &str) -> Pem {
    let key = KeyPair::generate().unwrap();
    let cert = leaf_params(cn).self_signed(&key).unwrap();
    Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
        der: cert.der().to_vec(),
    }
}

/// A self-signed certificate for `cn` that expired in 2021.
fn expired_self_signed(cn: &str) -> Pem {
    let key = KeyPair::generate().unwrap();
    let mut params = leaf_params(cn);
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let cert = params.self_signed(&key).unwrap();
    Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
        der: cert.der().to_vec(),
    }
}

/// A CA (its PEM) and a function that signs device certificates with it.
fn ca(name: &str) -> (String, impl Fn(&str) -> Pem) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key).unwrap();
    let issuer = Arc::new(Issuer::new(params, key));
    let sign = move |cn: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = leaf_params(cn).signed_by(&key, &*issuer).unwrap();
        Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    };
    (cert.pem(), sign)
}

pub(crate) fn sha256_hex(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn sha1_hex(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

async fn start(ca_file: Option<std::path::PathBuf>) -> (IotHubServer, IotHub) {
    let config = IotHubConfig {
        tls: DeviceTls::SelfSigned,
        admin_port: None,
        ca_file,
        ..IotHubConfig::default()
    };
    let server = IotHubServer::start(config).await.unwrap();
    let hub = server.hub();
    (server, hub)
}

/// `PUT /devices/{id}` with `body`, as the service SDKs send it.
async fn put_device(hub: &IotHub, id: &str, body: serde_json::Value) -> crate::common::hub::Reply {
    let owner = hub.policy("iothubowner").unwrap();
    let token = service_token(
        &hub.config().hostname,
        &owner,
        std::time::SystemTime::now() + Duration::from_secs(600),
    )
    .unwrap();
    Https::new(hub)
        .call(
            Method::PUT,
            &format!("/devices/{id}?{API}"),
            &[
                ("Authorization", &token),
                ("Content-Type", "application/json"),
            ],
            body.to_string().as_bytes(),
        )
        .await
}

/// Connects over MQTT with `cert` as the client certificate and no password; returns the
/// CONNACK's code and, when accepted, the event loop subscribed to C2D.
async fn mqtt(
    hub: &IotHub,
    id: &str,
    cert: &Pem,
) -> (ConnectReturnCode, Option<rumqttc::EventLoop>) {
    let addr = hub.endpoints().device_endpoint.unwrap();
    let pem = hub.ca_certificate_pem().unwrap();
    let config = mqstate_testing::tls::client_config_with_cert(&pem, &cert.cert, &cert.key);
    let mut options = MqttOptions::new(id, "localhost", addr.port());
    // The SDKs' user name for an X.509 device, and no password.
    options.set_credentials(hub.device_username(id), "");
    options.set_transport(rumqttc::Transport::tls_with_config(
        rumqttc::TlsConfiguration::Rustls(Arc::new(config)),
    ));
    let (client, mut events) = rumqttc::AsyncClient::new(options, 10);
    let code = tokio::time::timeout(WAIT, async {
        loop {
            match events.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(ack))) => return ack.code,
                Ok(_) => {}
                Err(rumqttc::ConnectionError::ConnectionRefused(code)) => return code,
                Err(e) => panic!("MQTT connection of {id} failed: {e}"),
            }
        }
    })
    .await
    .expect("a CONNACK");
    if code != ConnectReturnCode::Success {
        return (code, None);
    }
    client
        .subscribe(
            format!("devices/{id}/messages/devicebound/#"),
            QoS::AtLeastOnce,
        )
        .await
        .unwrap();
    // Kept alive by the event loop; the client handle may go.
    std::mem::forget(client);
    (code, Some(events))
}

async fn next_c2d(events: &mut rumqttc::EventLoop) -> Vec<u8> {
    tokio::time::timeout(WAIT, async {
        loop {
            if let Event::Incoming(Packet::Publish(p)) = events.poll().await.unwrap() {
                return p.payload.to_vec();
            }
        }
    })
    .await
    .expect("a C2D message")
}

/// An AMQP receiver link on the device's C2D address, over a connection that presents
/// `cert` and neither SASL nor a put-token (as the Node SDK's AMQP transport does for X.509).
async fn amqp_receiver(
    hub: &IotHub,
    id: &str,
    cert: &Pem,
) -> (
    fe2o3_amqp::connection::ConnectionHandle<()>,
    fe2o3_amqp::session::SessionHandle<()>,
    fe2o3_amqp::Receiver,
) {
    let addr = hub.endpoints().amqp_endpoint.unwrap();
    let pem = hub.ca_certificate_pem().unwrap();
    let config = mqstate_testing::tls::client_config_with_cert(&pem, &cert.cert, &cert.key);
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(mqstate_testing::tls::localhost(), tcp)
        .await
        .unwrap();
    let mut connection = fe2o3_amqp::Connection::builder()
        .container_id(format!("x509-{id}"))
        .hostname("localhost")
        .open_with_stream(tls)
        .await
        .unwrap();
    let mut session = fe2o3_amqp::Session::begin(&mut connection).await.unwrap();
    let receiver = fe2o3_amqp::Receiver::attach(
        &mut session,
        format!("c2d-{id}"),
        format!("amqps://localhost/devices/{id}/messages/devicebound"),
    )
    .await
    .unwrap();
    (connection, session, receiver)
}

/// The next message on `link`, or the error it was detached with.
async fn amqp_next(link: &mut fe2o3_amqp::Receiver) -> Result<Vec<u8>, String> {
    use fe2o3_amqp::types::messaging::Body;
    use fe2o3_amqp::types::primitives::Value;
    let delivery = tokio::time::timeout(WAIT, link.recv::<Body<Value>>())
        .await
        .expect("a message or a detach")
        .map_err(|e| format!("{e:?}"))?;
    link.accept(&delivery).await.unwrap();
    match delivery.body() {
        Body::Data(batch) => Ok(batch.iter().flat_map(|d| d.0.to_vec()).collect()),
        other => panic!("not a data body: {other:?}"),
    }
}

/// Receives over HTTPS without an Authorization header, presenting `cert`.
pub(crate) async fn https_receive(hub: &IotHub, id: &str, cert: &Pem) -> crate::common::hub::Reply {
    let pem = hub.ca_certificate_pem().unwrap();
    let config = mqstate_testing::tls::client_config_with_cert(&pem, &cert.cert, &cert.key);
    Https::with_config(hub, config)
        .call(
            Method::GET,
            &format!("/devices/{id}/messages/devicebound?{API}"),
            &[],
            b"",
        )
        .await
}

#[tokio::test]
async fn iothub_x509_self_signed_and_ca_signed_devices_receive_c2d_over_mqtt_amqp_and_https() {
    let dir = tempfile::tempdir().unwrap();
    let (ca_pem, sign) = ca("mqstate test CA");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca_pem).unwrap();
    let (server, hub) = start(Some(ca_file)).await;

    let own = self_signed("x1");
    let second = self_signed("x1-second");
    // Python's `create_device_with_x509`: type and both thumbprints (SHA-256 and SHA-1 here).
    let reply = put_device(
        &hub,
        "x1",
        json!({"deviceId": "x1", "status": "enabled", "authentication": {"type": "selfSigned",
            "x509Thumbprint": {"primaryThumbprint": sha256_hex(&own.der),
                "secondaryThumbprint": sha1_hex(&second.der)}}}),
    )
    .await;
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let device = reply.json();
    assert_eq!(device["authentication"]["type"], "selfSigned");
    assert_eq!(
        device["authentication"]["x509Thumbprint"]["primaryThumbprint"],
        sha256_hex(&own.der).to_ascii_uppercase()
    );
    assert!(device["authentication"]["symmetricKey"]["primaryKey"].is_null());
    // Node's `Registry.create` with only `x509Thumbprint`: self-signed too.
    let reply = put_device(
        &hub,
        "x1b",
        json!({"deviceId": "x1b", "authentication": {"x509Thumbprint": {"primaryThumbprint": sha1_hex(&own.der)}}}),
    )
    .await;
    assert_eq!(reply.json()["authentication"]["type"], "selfSigned");
    let reply = put_device(
        &hub,
        "x2",
        json!({"deviceId": "x2", "authentication": {"type": "certificateAuthority"}}),
    )
    .await;
    assert_eq!(
        reply.json()["authentication"]["type"],
        "certificateAuthority"
    );
    // A thumbprint that is no digest is IoT Hub's 400.
    let reply = put_device(
        &hub,
        "x3",
        json!({"deviceId": "x3", "authentication": {"type": "selfSigned", "x509Thumbprint": {"primaryThumbprint": "abc"}}}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);

    // The admin API's device list says how each authenticates.
    let kinds: Vec<(String, String)> = hub
        .devices()
        .into_iter()
        .map(|d| (d.device_id, d.authentication))
        .collect();
    assert!(
        kinds.contains(&("x1".into(), "selfSigned".into())),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&("x2".into(), "certificateAuthority".into())),
        "{kinds:?}"
    );

    // MQTT: by the primary thumbprint, by the secondary, and chained to the CA.
    let signed = sign("x2");
    for (id, cert) in [("x1", &own), ("x1", &second), ("x2", &signed)] {
        let (code, events) = mqtt(&hub, id, cert).await;
        assert_eq!(code, ConnectReturnCode::Success, "{id}");
        let mut events = events.unwrap();
        // Let the SUBACK in before sending.
        tokio::time::sleep(Duration::from_millis(200)).await;
        hub.send(id, C2dMessage::new(format!("to {id}")).message_id("m"))
            .unwrap();
        assert_eq!(next_c2d(&mut events).await, format!("to {id}").into_bytes());
        drop(events);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // AMQP: no SASL, no put-token; the certificate authorizes the device's links.
    for (id, cert) in [("x1", &own), ("x2", &signed)] {
        let (connection, session, mut link) = amqp_receiver(&hub, id, cert).await;
        hub.send(id, C2dMessage::new(format!("amqp to {id}")).message_id("a"))
            .unwrap();
        assert_eq!(
            amqp_next(&mut link).await.unwrap(),
            format!("amqp to {id}").into_bytes()
        );
        drop((link, session, connection));
    }

    // HTTPS: no Authorization header, the certificate is the credential.
    hub.send("x1", C2dMessage::new("over https").message_id("h1"))
        .unwrap();
    let reply = https_receive(&hub, "x1", &own).await;
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(&reply.body[..], b"over https");
    hub.send("x2", C2dMessage::new("ca over https").message_id("h2"))
        .unwrap();
    let reply = https_receive(&hub, "x2", &signed).await;
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(&reply.body[..], b"ca over https");
    server.shutdown().await;
}

#[tokio::test]
async fn iothub_x509_wrong_certificates_are_refused_on_mqtt_amqp_and_https() {
    let dir = tempfile::tempdir().unwrap();
    let (ca_pem, sign) = ca("mqstate test CA");
    let (_, other_ca_sign) = ca("another CA");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca_pem).unwrap();
    let (server, hub) = start(Some(ca_file)).await;
    let own = self_signed("x1");
    let expired = expired_self_signed("x1");
    // The expired certificate's thumbprint is registered: only its dates refuse it.
    put_device(
        &hub,
        "x1",
        json!({"authentication": {"type": "selfSigned", "x509Thumbprint": {
            "primaryThumbprint": sha256_hex(&own.der), "secondaryThumbprint": sha256_hex(&expired.der)}}}),
    )
    .await;
    put_device(
        &hub,
        "x2",
        json!({"authentication": {"type": "certificateAuthority"}}),
    )
    .await;

    let cases = [
        ("x1", self_signed("x1"), "another self-signed certificate"),
        (
            "x1",
            expired,
            "an expired certificate with a registered thumbprint",
        ),
        (
            "x2",
            sign("x3"),
            "a CA-signed certificate for another device id",
        ),
        (
            "x2",
            other_ca_sign("x2"),
            "a certificate of a CA the hub does not trust",
        ),
        (
            "x2",
            self_signed("x2"),
            "a self-signed certificate for a CA device",
        ),
    ];
    for (id, cert, what) in &cases {
        let (code, _) = mqtt(&hub, id, cert).await;
        assert_eq!(code, ConnectReturnCode::NotAuthorized, "MQTT, {what}");
        let (_connection, _session, mut link) = amqp_receiver(&hub, id, cert).await;
        let e = amqp_next(&mut link).await.unwrap_err();
        assert!(e.contains("UnauthorizedAccess"), "AMQP, {what}: {e}");
        let reply = https_receive(&hub, id, cert).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "HTTPS, {what}");
        assert_eq!(reply.error_code(), "IotHubUnauthorizedAccess", "{what}");
    }
    // No certificate and no token: refused too.
    let reply = Https::new(&hub)
        .call(
            Method::GET,
            &format!("/devices/x1/messages/devicebound?{API}"),
            &[],
            b"",
        )
        .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    // The device's own SAS keys do not authenticate an X.509 device.
    assert!(
        hub.device_token("x1", Duration::from_secs(60)).is_err() || {
            let token = hub.device_token("x1", Duration::from_secs(60)).unwrap();
            let reply = Https::new(&hub)
                .call(
                    Method::GET,
                    &format!("/devices/x1/messages/devicebound?{API}"),
                    &[("Authorization", &token)],
                    b"",
                )
                .await;
            reply.status == StatusCode::UNAUTHORIZED
        }
    );
    server.shutdown().await;
}

#[tokio::test]
async fn iothub_x509_devices_are_kept_in_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let config = || IotHubConfig {
        admin_port: None,
        amqp_port: None,
        data_dir: Some(dir.path().to_owned()),
        ..IotHubConfig::default()
    };
    let own = self_signed("x1");
    let server = IotHubServer::start(config()).await.unwrap();
    let hub = server.hub();
    let reply = put_device(
        &hub,
        "x1",
        json!({"authentication": {"type": "selfSigned", "x509Thumbprint": {"primaryThumbprint": sha256_hex(&own.der)}}}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    put_device(
        &hub,
        "x2",
        json!({"authentication": {"type": "certificateAuthority"}}),
    )
    .await;
    let before = (hub.device("x1").unwrap(), hub.device("x2").unwrap());
    server.shutdown().await;
    let server = IotHubServer::start(config()).await.unwrap();
    let hub = server.hub();
    assert_eq!(
        (hub.device("x1").unwrap(), hub.device("x2").unwrap()),
        before
    );
    assert_eq!(before.0.authentication.type_name(), "selfSigned");
    server.shutdown().await;
}
