//! MQTT and AMQP over WebSockets on the hub's HTTPS port (`/$iothub/websocket`, subprotocols
//! `mqtt` and `AMQPWSB10`; and Service Bus's `/$servicebus/websocket/`), with raw clients over a tokio-tungstenite WebSocket: a device
//! authenticates with its SAS and completes a C2D message over each; a service sends over
//! AMQP/WS; a path or subprotocol the hub does not serve is refused at once with its status;
//! a silent or oversized peer is dropped; the hub's stop closes the WebSockets; what they do
//! is kept in the data dir as over TCP.

use std::time::{Duration, SystemTime};

use bytes::BytesMut;
use fe2o3_amqp::types::messaging::{Body, Message, MessageId, Outcome, Properties};
use fe2o3_amqp::types::primitives::{SimpleValue, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use mqstate_server::iothub::policies::service_token;
use mqstate_server::iothub::{
    Ack, AmqpLimits, C2dMessage, DeviceSpec, FeedbackStatus, IotHub, IotHubConfig, IotHubServer,
};
use rumqttc::mqttbytes::QoS;
use rumqttc::mqttbytes::v4::{Connect, ConnectReturnCode, Packet, PubAck, Subscribe};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite;

use crate::common::hub::{
    byte_stream, feedback, put_token_request, websocket, websocket_frames_with,
};

const SOON: Duration = Duration::from_secs(20);
/// The path and query the SDKs open.
const PATH: &str = "/$iothub/websocket?iothub-no-client-cert=true";

fn config() -> IotHubConfig {
    IotHubConfig {
        devices: vec![DeviceSpec::parse("dev1").unwrap()],
        max_telemetry_size: 1024,
        feedback_batch_size: 1,
        connect_timeout: Duration::from_secs(1),
        amqp_limits: AmqpLimits {
            auth_timeout: Duration::from_secs(1),
            ..AmqpLimits::default()
        },
        ..IotHubConfig::default()
    }
}

async fn start() -> (IotHubServer, IotHub) {
    let server = IotHubServer::start(config()).await.unwrap();
    let hub = server.hub();
    (server, hub)
}

/// MQTT 3.1.1 packets over a byte stream, with rumqttc's codec.
struct Mqtt<S> {
    stream: S,
    read: BytesMut,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Mqtt<S> {
    async fn send(&mut self, packet: Packet) {
        let mut bytes = BytesMut::new();
        packet.write(&mut bytes, usize::MAX).unwrap();
        self.stream.write_all(&bytes).await.unwrap();
        // A WebSocket sends its message on flush.
        self.stream.flush().await.unwrap();
    }

    async fn next(&mut self) -> Packet {
        tokio::time::timeout(SOON, async {
            loop {
                match Packet::read(&mut self.read, 1 << 20) {
                    Ok(p) => return p,
                    Err(rumqttc::mqttbytes::Error::InsufficientBytes(_)) => {}
                    Err(e) => panic!("{e:?}"),
                }
                let n = self.stream.read_buf(&mut self.read).await.unwrap();
                assert!(n > 0, "the hub closed the connection");
            }
        })
        .await
        .expect("a packet from the hub")
    }

    /// Reads until the hub closes the connection (an error counts as closed).
    async fn closed(&mut self) {
        let mut rest = Vec::new();
        tokio::time::timeout(SOON, self.stream.read_to_end(&mut rest))
            .await
            .expect("the hub closes the connection")
            .ok();
    }
}

/// Device `dev1` over MQTT/WS, connected with its SAS (clean session off) and subscribed to
/// its C2D messages.
async fn mqtt_device(
    hub: &IotHub,
) -> Mqtt<impl AsyncRead + AsyncWrite + std::fmt::Debug + Send + Unpin + 'static> {
    let stream = websocket(hub, PATH, Some("mqtt")).await.unwrap();
    let mut mqtt = Mqtt {
        stream,
        read: BytesMut::new(),
    };
    let mut connect = Connect::new("dev1");
    connect.clean_session = false;
    connect.set_login(
        hub.device_username("dev1"),
        hub.device_token("dev1", Duration::from_secs(600)).unwrap(),
    );
    mqtt.send(Packet::Connect(connect)).await;
    let Packet::ConnAck(ack) = mqtt.next().await else {
        panic!("no CONNACK")
    };
    assert_eq!(ack.code, ConnectReturnCode::Success);
    mqtt.send(Packet::Subscribe(Subscribe::new(
        "devices/dev1/messages/devicebound/#",
        QoS::AtLeastOnce,
    )))
    .await;
    mqtt
}

impl<S: AsyncRead + AsyncWrite + Unpin> Mqtt<S> {
    /// The next C2D message (the SUBACK may come first).
    async fn publish(&mut self) -> rumqttc::mqttbytes::v4::Publish {
        loop {
            match self.next().await {
                Packet::SubAck(_) => {}
                Packet::Publish(p) => return p,
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn mqtt_over_websocket_completes_a_message_and_closes_when_the_hub_stops() {
    let (server, hub) = start().await;
    hub.send(
        "dev1",
        C2dMessage::new("hello ws").message_id("m-1").ack(Ack::Full),
    )
    .unwrap();
    let mut mqtt = mqtt_device(&hub).await;
    let publish = mqtt.publish().await;
    assert_eq!(&publish.payload[..], b"hello ws");
    assert!(
        publish
            .topic
            .starts_with("devices/dev1/messages/devicebound/")
    );
    mqtt.send(Packet::PubAck(PubAck::new(publish.pkid))).await;
    assert_eq!(feedback(&hub, "m-1").await, FeedbackStatus::Success);
    assert_eq!(hub.queue("dev1").unwrap().depth, 0);
    // The hub's stop closes the WebSocket too (lifecycle as over TCP).
    server.shutdown().await;
    mqtt.closed().await;
}

#[tokio::test]
async fn amqp_over_websocket_serves_the_service_and_the_device() {
    let (server, hub) = start().await;
    // The service: put-token of a ServiceConnect policy, then a C2D message; on Service Bus's
    // path, where uamqp (Python's service SDK) opens its WebSocket.
    let stream = websocket(&hub, "/$servicebus/websocket/", Some("AMQPWSB10"))
        .await
        .unwrap();
    let mut service = Connection::builder()
        .container_id("ws-service")
        .hostname("localhost")
        .open_with_stream(stream)
        .await
        .unwrap();
    let mut session = Session::begin(&mut service).await.unwrap();
    let mut c2d = service_sender(&hub, &mut session).await;
    send(&mut c2d, "a-1", b"over amqp ws").await;
    assert_eq!(hub.queue("dev1").unwrap().depth, 1);
    let host = hub.config().hostname.clone();

    // The device: put-token of its SAS, receive, accept (completes).
    let stream = websocket(&hub, PATH, Some("AMQPWSB10")).await.unwrap();
    let mut device = Connection::builder()
        .container_id("ws-device")
        .hostname("localhost")
        .open_with_stream(stream)
        .await
        .unwrap();
    let mut device_session = Session::begin(&mut device).await.unwrap();
    let token = hub.device_token("dev1", Duration::from_secs(600)).unwrap();
    put_token(&mut device_session, &token, &format!("{host}/devices/dev1")).await;
    let mut receiver = Receiver::attach(
        &mut device_session,
        "c2d-receiver",
        "/devices/dev1/messages/devicebound",
    )
    .await
    .unwrap();
    let delivery = tokio::time::timeout(SOON, receiver.recv::<Body<Value>>())
        .await
        .expect("a C2D message")
        .unwrap();
    let Body::Data(sections) = &delivery.message().body else {
        panic!("data sections expected")
    };
    let body: Vec<u8> = sections.iter().flat_map(|s| s.0.to_vec()).collect();
    assert_eq!(body, b"over amqp ws");
    receiver.accept(&delivery).await.unwrap();
    assert_eq!(feedback(&hub, "a-1").await, FeedbackStatus::Success);
    assert_eq!(hub.queue("dev1").unwrap().depth, 0);
    let _ = receiver.close().await;
    let _ = c2d.close().await;
    let _ = device_session.end().await;
    let _ = session.end().await;
    let _ = device.close().await;
    let _ = service.close().await;
    server.shutdown().await;
}

/// The C2D sender link of a service session, after a put-token of the `service` policy.
async fn service_sender(
    hub: &IotHub,
    session: &mut fe2o3_amqp::session::SessionHandle<()>,
) -> Sender {
    let token = service_token(
        &hub.config().hostname,
        &hub.policy("service").unwrap(),
        SystemTime::now() + Duration::from_secs(600),
    )
    .unwrap();
    put_token(session, &token, "https://localhost").await;
    Sender::attach(session, "c2d", "/messages/devicebound")
        .await
        .unwrap()
}

/// Sends a C2D message to `dev1` asking for full feedback; asserts that the hub accepted it
/// (with a data dir: once it is on disk).
async fn send(c2d: &mut Sender, message_id: &str, body: &[u8]) {
    let message = Message::builder()
        .properties(
            Properties::builder()
                .message_id(MessageId::String(message_id.into()))
                .to("/devices/dev1/messages/devicebound")
                .build(),
        )
        .application_properties(
            fe2o3_amqp::types::messaging::ApplicationProperties::builder()
                .insert("iothub-ack", SimpleValue::String("full".into()))
                .build(),
        )
        .data(fe2o3_amqp::types::primitives::Binary::from(body.to_vec()))
        .build();
    let outcome = c2d.send(message).await.unwrap();
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
}

/// Puts `token` on `$cbs` and asserts that it was accepted.
async fn put_token(
    session: &mut fe2o3_amqp::session::SessionHandle<()>,
    token: &str,
    audience: &str,
) {
    let mut requests = Sender::attach(session, "cbs-sender", "$cbs").await.unwrap();
    let mut replies = Receiver::attach(session, "cbs-receiver", "$cbs")
        .await
        .unwrap();
    let request = put_token_request(token, MessageId::Ulong(7), audience);
    let outcome = requests.send(request).await.unwrap();
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    let reply = tokio::time::timeout(SOON, replies.recv::<Body<Value>>())
        .await
        .expect("a put-token reply")
        .unwrap();
    replies.accept(&reply).await.unwrap();
    let app = &reply.message().application_properties.as_ref().unwrap().0;
    assert_eq!(
        app.get("status-code"),
        Some(&SimpleValue::Int(200)),
        "{app:?}"
    );
    let _ = requests.close().await;
    let _ = replies.close().await;
}

/// The status of a refused upgrade.
fn refused_status<T>(result: Result<T, tungstenite::Error>) -> u16 {
    match result {
        Err(tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(e) => panic!("expected an HTTP refusal, got {e:?}"),
        Ok(_) => panic!("expected an HTTP refusal, got an upgrade"),
    }
}

#[tokio::test]
async fn an_unserved_subprotocol_or_path_is_refused_at_once() {
    let (server, hub) = start().await;
    let started = tokio::time::Instant::now();
    // A subprotocol the hub does not serve, none at all, and the AMQP binding's standard name
    // (IoT Hub's is AMQPWSB10): 400, no upgrade.
    for protocol in [Some("mqttv5"), None, Some("amqp")] {
        let status = refused_status(websocket(&hub, PATH, protocol).await);
        assert_eq!(status, 400, "{protocol:?}");
    }
    // Another path: IoT Hub's 404.
    let status = refused_status(websocket(&hub, "/$iothub/sockets", Some("mqtt")).await);
    assert_eq!(status, 404);
    // A plain GET of the path (no upgrade asked): a client error, not a hang.
    let https = crate::common::hub::Https::new(&hub);
    let reply = https
        .call(hyper::Method::GET, "/$iothub/websocket", &[], b"")
        .await;
    assert!(reply.status.is_client_error(), "{}", reply.status);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    server.shutdown().await;
}

#[tokio::test]
async fn silent_and_oversized_peers_are_dropped() {
    let (server, hub) = start().await;
    // MQTT/WS without a CONNECT: closed after the connect timeout (1 s here).
    let started = tokio::time::Instant::now();
    let mut silent = websocket(&hub, PATH, Some("mqtt")).await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(SOON, silent.read_to_end(&mut rest))
        .await
        .expect("the silent MQTT peer is dropped");
    assert!(started.elapsed() >= Duration::from_millis(900));
    // AMQP/WS without a put-token: closed after the auth timeout (1 s here).
    let started = tokio::time::Instant::now();
    let stream = websocket(&hub, PATH, Some("AMQPWSB10")).await.unwrap();
    let mut connection = Connection::builder()
        .container_id("ws-silent")
        .hostname("localhost")
        .open_with_stream(stream)
        .await
        .unwrap();
    let closed = tokio::time::timeout(SOON, connection.on_close())
        .await
        .expect("the unauthenticated AMQP peer is dropped");
    assert!(closed.is_err(), "closed with an error: {closed:?}");
    assert!(started.elapsed() >= Duration::from_millis(900));
    // One WebSocket message larger than the largest MQTT packet the hub takes (1 KiB of
    // telemetry here, with 64 KiB for the topic), in fragments each under that size and no
    // final one: refused as soon as it is too large, not buffered until the connect timeout
    // (without the bound, tungstenite's default is 64 MiB).
    use futures_util::{SinkExt, StreamExt};
    use tungstenite::protocol::frame::Frame;
    use tungstenite::protocol::frame::coding::{Data, OpCode};
    let mut big = crate::common::hub::websocket_frames(&hub, PATH, Some("mqtt"))
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let fragment = vec![0u8; 32 * 1024];
    let first = Frame::message(fragment.clone(), OpCode::Data(Data::Binary), false);
    let mut sent = big.send(tungstenite::Message::Frame(first)).await;
    for _ in 0..3 {
        if sent.is_err() {
            break;
        }
        let more = Frame::message(fragment.clone(), OpCode::Data(Data::Continue), false);
        sent = big.send(tungstenite::Message::Frame(more)).await;
    }
    let ended = tokio::time::timeout(SOON, async {
        while let Some(Ok(m)) = big.next().await {
            if m.is_close() {
                break;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the oversized peer is dropped");
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    server.shutdown().await;
}

#[tokio::test]
async fn what_websocket_clients_do_is_kept_across_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let durable = || IotHubConfig {
        data_dir: Some(tmp.path().to_owned()),
        ..config()
    };
    // A service sends over AMQP/WS (accepted once on disk); the device receives it over
    // MQTT/WS and stops before its PUBACK.
    let server = IotHubServer::start(durable()).await.unwrap();
    let hub = server.hub();
    let stream = websocket(&hub, PATH, Some("AMQPWSB10")).await.unwrap();
    let mut service = Connection::builder()
        .container_id("ws-service")
        .hostname("localhost")
        .open_with_stream(stream)
        .await
        .unwrap();
    let mut session = Session::begin(&mut service).await.unwrap();
    let mut c2d = service_sender(&hub, &mut session).await;
    send(&mut c2d, "d-1", b"kept").await;
    let mut mqtt = mqtt_device(&hub).await;
    assert_eq!(&mqtt.publish().await.payload[..], b"kept");
    let _ = c2d.close().await;
    let _ = session.end().await;
    let _ = service.close().await;
    server.shutdown().await;
    mqtt.closed().await;

    // After the restart the message is there, its delivery counted, and is delivered again;
    // its PUBACK over MQTT/WS completes it, and that is kept too.
    let server = IotHubServer::start(durable()).await.unwrap();
    let hub = server.hub();
    let queue = hub.queue("dev1").unwrap();
    assert_eq!(queue.depth, 1, "{queue:?}");
    assert_eq!(queue.messages[0].delivery_count, 1, "{queue:?}");
    let mut mqtt = mqtt_device(&hub).await;
    let publish = mqtt.publish().await;
    assert_eq!(&publish.payload[..], b"kept");
    mqtt.send(Packet::PubAck(PubAck::new(publish.pkid))).await;
    assert_eq!(feedback(&hub, "d-1").await, FeedbackStatus::Success);
    server.shutdown().await;
    let server = IotHubServer::start(durable()).await.unwrap();
    assert_eq!(server.hub().queue("dev1").unwrap().depth, 0);
    server.shutdown().await;
}

/// A client certificate is an ambient credential (a browser may present one on a page's
/// behalf), so the WebSocket path passes none to the device endpoints (docs/security.md,
/// "IoT Hub: X.509 devices"): an X.509 device's own valid certificate, which authenticates it
/// over HTTPS on the same port, does not over MQTT/WS; its CONNECT is refused.
#[tokio::test]
async fn a_valid_x509_certificate_does_not_authenticate_over_a_websocket() {
    use crate::iothub_x509::{https_receive, self_signed, sha256_hex};
    use mqstate_server::iothub::registry::DeviceUpdate;
    use mqstate_server::iothub::x509::Authentication;

    let (_server, hub) = start().await;
    let cert = self_signed("x1");
    hub.create_device(
        "x1",
        &DeviceUpdate {
            authentication: Some(
                Authentication::self_signed(Some(&sha256_hex(&cert.der)), None).unwrap(),
            ),
            ..DeviceUpdate::default()
        },
    )
    .unwrap();
    hub.send("x1", C2dMessage::new("for x1").message_id("x-1"))
        .unwrap();
    // The certificate is the device's: HTTPS on the same port takes it.
    let reply = https_receive(&hub, "x1", &cert).await;
    assert_eq!(
        reply.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&reply.body)
    );

    let pem = hub.ca_certificate_pem().unwrap();
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(
        mqstate_testing::tls::client_config_with_cert(&pem, &cert.cert, &cert.key),
    ));
    let socket = websocket_frames_with(&hub, tls, PATH, Some("mqtt"))
        .await
        .unwrap();
    let mut mqtt = Mqtt {
        stream: byte_stream(socket),
        read: BytesMut::new(),
    };
    let mut connect = Connect::new("x1");
    connect.set_login(hub.device_username("x1"), "");
    mqtt.send(Packet::Connect(connect)).await;
    let Packet::ConnAck(ack) = mqtt.next().await else {
        panic!("no CONNACK")
    };
    assert_eq!(ack.code, ConnectReturnCode::NotAuthorized);
    mqtt.closed().await;
}
