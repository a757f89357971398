//! Devices over AMQP on the local hub, with fe2o3-amqp as the device, doing what the Node
//! device SDK (`azure-iot-device-amqp`) does: put-token of the device's SAS token on `$cbs`,
//! a receiver link on `/devices/{id}/messages/devicebound` settled with accepted / rejected /
//! released, a sender link on `/devices/{id}/messages/events`, and the one-connection-per-device
//! rule across MQTT and AMQP.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::link::delivery::Delivery;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Body, Data, Message, MessageAnnotations, MessageId, Outcome, Properties,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Timestamp, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use mqstate_server::iothub::sas;
use mqstate_server::iothub::{
    Ack, C2dMessage, DeviceSpec, FeedbackStatus, IotHub, IotHubConfig, IotHubServer,
};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet};

use crate::common::hub::{amqp_tls, feedback, put_token_request};

const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const OTHER_KEY: &str = "AQECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const SOON: Duration = Duration::from_secs(20);

fn config() -> IotHubConfig {
    IotHubConfig {
        devices: vec![
            DeviceSpec::parse(&format!("dev1:{KEY}")).unwrap(),
            DeviceSpec::parse("dev2").unwrap(),
        ],
        max_delivery_count: 3,
        max_telemetry_size: 1024,
        ..IotHubConfig::default()
    }
}

async fn start(config: IotHubConfig) -> (IotHubServer, IotHub) {
    let server = IotHubServer::start(config).await.unwrap();
    let hub = server.hub();
    (server, hub)
}

struct Device {
    connection: ConnectionHandle<()>,
    session: SessionHandle<()>,
}

impl Device {
    /// Connects without SASL, as Node's rhea does.
    async fn connect(hub: &IotHub) -> Device {
        let tls = amqp_tls(hub).await;
        let mut connection = Connection::builder()
            .container_id("test-device")
            .hostname("localhost")
            .open_with_stream(tls)
            .await
            .unwrap();
        let session = Session::begin(&mut connection).await.unwrap();
        Device {
            connection,
            session,
        }
    }

    /// Connects and puts a valid token of `id`.
    async fn authenticated(hub: &IotHub, id: &str) -> Device {
        let mut device = Device::connect(hub).await;
        let token = hub.device_token(id, Duration::from_secs(3600)).unwrap();
        let (status, description) = device.put_token(&token).await;
        assert_eq!((status, description.as_str()), (200, "OK"));
        device
    }

    /// Puts `token` on `$cbs` with its `sr` as the audience (Node's `putToken(sr, token)`).
    async fn put_token(&mut self, token: &str) -> (i32, String) {
        let mut requests = Sender::attach(&mut self.session, "cbs-sender", "$cbs")
            .await
            .unwrap();
        let mut replies = Receiver::attach(&mut self.session, "cbs-receiver", "$cbs")
            .await
            .unwrap();
        let audience = sas::parse_token(token).unwrap().resource;
        let request = put_token_request(token, MessageId::String("put-1".into()), &audience);
        let outcome = requests.send(request).await.unwrap();
        assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
        let reply = tokio::time::timeout(SOON, replies.recv::<Body<Value>>())
            .await
            .expect("a put-token reply")
            .unwrap();
        replies.accept(&reply).await.unwrap();
        let app = &reply.message().application_properties.as_ref().unwrap().0;
        let Some(SimpleValue::Int(status)) = app.get("status-code") else {
            panic!("status-code must be an int: {app:?}");
        };
        let Some(SimpleValue::String(description)) = app.get("status-description") else {
            panic!("no status-description: {app:?}");
        };
        let (status, description) = (*status, description.clone());
        let _ = requests.close().await;
        let _ = replies.close().await;
        (status, description)
    }

    async fn c2d(&mut self, id: &str) -> Receiver {
        Receiver::attach(
            &mut self.session,
            format!("c2d-{}", fastrand_name()),
            format!("amqps://localhost/devices/{id}/messages/devicebound"),
        )
        .await
        .unwrap()
    }

    async fn d2c(&mut self, id: &str) -> Sender {
        Sender::attach(
            &mut self.session,
            format!("d2c-{}", fastrand_name()),
            format!("/devices/{id}/messages/events"),
        )
        .await
        .unwrap()
    }

    async fn close(mut self) {
        let _ = self.session.end().await;
        let _ = self.connection.close().await;
    }
}

fn fastrand_name() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

async fn next(link: &mut Receiver) -> Delivery<Body<Value>> {
    tokio::time::timeout(SOON, link.recv::<Body<Value>>())
        .await
        .expect("a C2D message")
        .unwrap()
}

/// Waits for the hub to detach `link` with an error; returns the error's debug form.
async fn receiver_detached(link: &mut Receiver) -> String {
    let e = tokio::time::timeout(SOON, link.recv::<Body<Value>>())
        .await
        .expect("the hub detaches the link")
        .unwrap_err();
    format!("{e:?}")
}

async fn sender_detached(link: &mut Sender) -> String {
    let e = tokio::time::timeout(SOON, link.on_detach())
        .await
        .expect("the hub detaches the link");
    format!("{e:?}")
}

fn delivery_count(d: &Delivery<Body<Value>>) -> u32 {
    d.message().header.as_ref().map_or(0, |h| h.delivery_count)
}

fn annotation<'a>(d: &'a Delivery<Body<Value>>, key: &str) -> Option<&'a Value> {
    let annotations: &MessageAnnotations = d.message().message_annotations.as_ref()?;
    annotations
        .0
        .iter()
        .find(|(k, _)| format!("{k:?}").contains(key))
        .map(|(_, v)| v)
}

fn body(d: &Delivery<Body<Value>>) -> Vec<u8> {
    match &d.message().body {
        Body::Data(sections) => sections.iter().flat_map(|s| s.0.to_vec()).collect(),
        other => panic!("expected data sections, got {other:?}"),
    }
}

#[tokio::test]
async fn receives_every_property_and_completes() {
    let (server, hub) = start(config()).await;
    let expiry = SystemTime::now() + Duration::from_secs(600);
    hub.send(
        "dev1",
        C2dMessage::new("{\"on\":true}")
            .message_id("m-1")
            .correlation_id("c-1")
            .user_id("svc")
            .content_type("application/json")
            .content_encoding("utf-8")
            .expires_at(expiry)
            .ack(Ack::Full)
            .property("color", Some("red"))
            .property("flag", None),
    )
    .unwrap();
    let mut device = Device::authenticated(&hub, "dev1").await;
    let mut c2d = device.c2d("dev1").await;
    let d = next(&mut c2d).await;
    let m = d.message();
    let p = m.properties.as_ref().unwrap();
    assert_eq!(p.message_id, Some(MessageId::String("m-1".into())));
    assert_eq!(p.correlation_id, Some(MessageId::String("c-1".into())));
    assert_eq!(p.user_id, Some(Binary::from(b"svc".to_vec())));
    assert_eq!(p.to.as_deref(), Some("/devices/dev1/messages/devicebound"));
    assert_eq!(p.content_type, Some(Symbol::from("application/json")));
    assert_eq!(p.content_encoding, Some(Symbol::from("utf-8")));
    let expiry_ms = expiry.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    assert_eq!(
        p.absolute_expiry_time,
        Some(Timestamp::from_milliseconds(expiry_ms))
    );
    let app = &m.application_properties.as_ref().unwrap().0;
    assert_eq!(
        app.get("iothub-ack"),
        Some(&SimpleValue::String("full".into()))
    );
    assert_eq!(app.get("color"), Some(&SimpleValue::String("red".into())));
    assert_eq!(app.get("flag"), Some(&SimpleValue::Null));
    assert_eq!(delivery_count(&d), 0);
    assert!(matches!(
        annotation(&d, "iothub-enqueuedtime"),
        Some(Value::Timestamp(_))
    ));
    assert!(matches!(
        annotation(&d, "x-opt-sequence-number"),
        Some(Value::Long(_))
    ));
    assert!(matches!(
        annotation(&d, "x-opt-lock-token"),
        Some(Value::Uuid(_))
    ));
    assert_eq!(body(&d), b"{\"on\":true}");
    c2d.accept(&d).await.unwrap();
    assert_eq!(feedback(&hub, "m-1").await, FeedbackStatus::Success);
    assert_eq!(hub.queue("dev1").unwrap().depth, 0);
    // The device shows as connected while its links are open.
    assert!(
        hub.devices()
            .iter()
            .any(|d| d.device_id == "dev1" && d.connection_state == "Connected")
    );
    let _ = c2d.close().await;
    device.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn reject_dead_letters_with_rejected_feedback() {
    let (server, hub) = start(config()).await;
    hub.send(
        "dev1",
        C2dMessage::new("x").message_id("r-1").ack(Ack::Full),
    )
    .unwrap();
    let mut device = Device::authenticated(&hub, "dev1").await;
    let mut c2d = device.c2d("dev1").await;
    let d = next(&mut c2d).await;
    c2d.reject(&d, None).await.unwrap();
    assert_eq!(feedback(&hub, "r-1").await, FeedbackStatus::Rejected);
    assert_eq!(hub.queue("dev1").unwrap().depth, 0);
    // Nothing comes again.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), c2d.recv::<Body<Value>>())
            .await
            .is_err()
    );
    device.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn abandon_delivers_again_until_the_max_delivery_count() {
    let (server, hub) = start(config()).await;
    hub.send(
        "dev1",
        C2dMessage::new("x").message_id("a-1").ack(Ack::Full),
    )
    .unwrap();
    let mut device = Device::authenticated(&hub, "dev1").await;
    let mut c2d = device.c2d("dev1").await;
    // Released (Node's `abandon`), then modified: each is delivered again, one more count.
    let d = next(&mut c2d).await;
    assert_eq!(delivery_count(&d), 0);
    c2d.release(&d).await.unwrap();
    let d = next(&mut c2d).await;
    assert_eq!(delivery_count(&d), 1);
    let modified = fe2o3_amqp::types::messaging::Modified {
        delivery_failed: Some(true),
        undeliverable_here: None,
        message_annotations: None,
    };
    c2d.modify(&d, modified).await.unwrap();
    let d = next(&mut c2d).await;
    assert_eq!(delivery_count(&d), 2);
    // The third abandon is past the max delivery count (3).
    c2d.release(&d).await.unwrap();
    assert_eq!(
        feedback(&hub, "a-1").await,
        FeedbackStatus::DeliveryCountExceeded
    );
    assert_eq!(hub.queue("dev1").unwrap().depth, 0);
    device.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn unsettled_messages_are_abandoned_when_the_link_closes() {
    let (server, hub) = start(config()).await;
    hub.send("dev1", C2dMessage::new("x").message_id("u-1"))
        .unwrap();
    let mut device = Device::authenticated(&hub, "dev1").await;
    let mut c2d = device.c2d("dev1").await;
    let d = next(&mut c2d).await;
    assert_eq!(delivery_count(&d), 0);
    let _ = c2d.close().await;
    // At once receivable again (not after the 60 s lock timeout), its delivery counted.
    let mut c2d = device.c2d("dev1").await;
    let d = next(&mut c2d).await;
    assert_eq!(delivery_count(&d), 1);
    c2d.accept(&d).await.unwrap();
    device.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn telemetry_with_properties() {
    let (server, hub) = start(config()).await;
    let mut device = Device::authenticated(&hub, "dev1").await;
    let mut d2c = device.d2c("dev1").await;
    let expiry_ms = 4_102_444_800_000i64; // 2100-01-01
    let message = Message::builder()
        .properties(
            Properties::builder()
                .to("/devices/dev1/messages/events")
                .message_id(String::from("t-1"))
                .correlation_id(String::from("tc-1"))
                .content_type(Symbol::from("application/json"))
                .content_encoding(Symbol::from("utf-8"))
                .absolute_expiry_time(Timestamp::from_milliseconds(expiry_ms))
                .build(),
        )
        .application_properties(
            ApplicationProperties::builder()
                .insert("temperature", SimpleValue::String("21.5".into()))
                .insert("n", SimpleValue::Int(7))
                .build(),
        )
        .data(Data(Binary::from(b"{\"t\":21.5}".to_vec())))
        .build();
    let outcome = d2c.send(message).await.unwrap();
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    let got = hub.telemetry("dev1", 0).unwrap();
    assert_eq!(got.len(), 1);
    let t = &got[0];
    assert_eq!(t.body.as_deref(), Some("{\"t\":21.5}"));
    let sys = |k: &str| t.system_properties.get(k).cloned().flatten();
    assert_eq!(sys("$.mid").as_deref(), Some("t-1"));
    assert_eq!(sys("$.cid").as_deref(), Some("tc-1"));
    assert_eq!(sys("$.ct").as_deref(), Some("application/json"));
    assert_eq!(sys("$.ce").as_deref(), Some("utf-8"));
    assert_eq!(
        sys("$.to").as_deref(),
        Some("/devices/dev1/messages/events")
    );
    assert_eq!(sys("$.exp").as_deref(), Some("2100-01-01T00:00:00.000Z"));
    assert_eq!(
        t.properties
            .get("temperature")
            .cloned()
            .flatten()
            .as_deref(),
        Some("21.5")
    );
    assert_eq!(
        t.properties.get("n").cloned().flatten().as_deref(),
        Some("7")
    );
    // Too large: rejected with the condition Node turns into MessageTooLargeError.
    let outcome = d2c
        .send(
            Message::builder()
                .data(Data(Binary::from(vec![b'x'; 2048])))
                .build(),
        )
        .await
        .unwrap();
    match outcome {
        Outcome::Rejected(r) => {
            let e = format!("{:?}", r.error);
            assert!(e.contains("MessageSizeExceeded"), "{e}");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(hub.telemetry("dev1", 0).unwrap().len(), 1);
    device.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn bad_device_tokens_are_refused() {
    let (server, hub) = start(config()).await;
    let host = hub.config().hostname.clone();
    let resource = sas::device_resource(&host, "dev1");
    let mut device = Device::connect(&hub).await;
    // No token: the device's links are refused.
    let mut c2d = device.c2d("dev1").await;
    let e = receiver_detached(&mut c2d).await;
    assert!(e.contains("UnauthorizedAccess"), "{e}");
    // A wrong key.
    let forged = sas::generate(
        &resource,
        OTHER_KEY,
        SystemTime::now() + Duration::from_secs(60),
    )
    .unwrap();
    let (status, description) = device.put_token(&forged).await;
    assert_eq!(status, 401, "{description}");
    assert!(description.contains("signature"), "{description}");
    // An expired token.
    let old = sas::generate(&resource, KEY, SystemTime::now() - Duration::from_secs(10)).unwrap();
    let (status, description) = device.put_token(&old).await;
    assert_eq!(status, 401, "{description}");
    assert!(description.contains("expired"), "{description}");
    let mut d2c = device.d2c("dev1").await;
    let e = sender_detached(&mut d2c).await;
    assert!(e.contains("UnauthorizedAccess"), "{e}");
    // dev1's token does not open dev2's links.
    let (status, _) = device
        .put_token(&hub.device_token("dev1", Duration::from_secs(60)).unwrap())
        .await;
    assert_eq!(status, 200);
    let mut other = device.c2d("dev2").await;
    let e = receiver_detached(&mut other).await;
    assert!(e.contains("UnauthorizedAccess"), "{e}");
    // The `device` policy (DeviceConnect), scoped to the device, opens them.
    let policy = hub.policy("device").unwrap();
    let token = mqstate::iothub::sas::token(
        &sas::device_resource(&host, "dev2"),
        &policy.primary_key,
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 60,
        Some("device"),
    )
    .unwrap();
    let (status, description) = device.put_token(&token).await;
    assert_eq!((status, description.as_str()), (200, "OK"));
    hub.send("dev2", C2dMessage::new("p")).unwrap();
    let mut c2d = device.c2d("dev2").await;
    let d = next(&mut c2d).await;
    c2d.accept(&d).await.unwrap();
    // Twin and method links need a token of their device, like its other links.
    for address in ["/devices/dev3/twin", "/devices/dev3/methods/devicebound"] {
        let mut link = Sender::attach(&mut device.session, format!("x-{address}"), address)
            .await
            .unwrap();
        let e = sender_detached(&mut link).await;
        assert!(e.contains("UnauthorizedAccess"), "{address}: {e}");
    }
    device.close().await;
    server.shutdown().await;
}

/// A twin link pair as Node's `AmqpTwinClient` attaches it: the same channel correlation id
/// on both links, settled sends.
async fn twin_links(device: &mut Device, id: &str, channel: &str) -> (Sender, Receiver) {
    let address = format!("/devices/{id}/twin");
    let properties = || {
        let mut fields = fe2o3_amqp::types::definitions::Fields::new();
        fields.insert(
            Symbol::from("com.microsoft:channel-correlation-id"),
            Value::String(format!("twin:{channel}")),
        );
        fields.insert(
            Symbol::from("com.microsoft:api-version"),
            Value::String("2020-09-30".into()),
        );
        fields
    };
    let requests = Sender::builder()
        .name(format!("twin-sender-{channel}"))
        .target(address.clone())
        .sender_settle_mode(SenderSettleMode::Settled)
        .properties(properties())
        .attach(&mut device.session)
        .await
        .unwrap();
    let answers = Receiver::builder()
        .name(format!("twin-receiver-{channel}"))
        .source(address)
        .sender_settle_mode(SenderSettleMode::Settled)
        .properties(properties())
        .attach(&mut device.session)
        .await
        .unwrap();
    (requests, answers)
}

/// A twin request as Node's `_sendTwinRequest` sends it.
fn twin_request(
    operation: &str,
    resource: Option<&str>,
    correlation_id: &str,
    body: &str,
) -> Message<Data> {
    let mut annotations = MessageAnnotations::builder()
        .insert(Symbol::from("operation"), Value::String(operation.into()));
    if let Some(resource) = resource {
        annotations = annotations.insert(Symbol::from("resource"), Value::String(resource.into()));
    }
    Message::builder()
        .properties(
            Properties::builder()
                .correlation_id(MessageId::String(correlation_id.into()))
                .build(),
        )
        .message_annotations(annotations.build())
        .data(Data(Binary::from(body.as_bytes().to_vec())))
        .build()
}

/// The answer's status annotation, correlation id and JSON body.
async fn twin_answer(answers: &mut Receiver) -> (Value, MessageId, serde_json::Value) {
    let d = next(answers).await;
    answers.accept(&d).await.unwrap();
    let status = annotation(&d, "status")
        .cloned()
        .expect("a status annotation");
    let correlation = d
        .message()
        .properties
        .as_ref()
        .and_then(|p| p.correlation_id.clone())
        .expect("a correlation id");
    let body: serde_json::Value = serde_json::from_slice(&body(&d)).unwrap();
    (status, correlation, body)
}

#[tokio::test]
async fn twin_requests_are_answered_403_and_the_connection_stays() {
    let (server, hub) = start(config()).await;
    let mut device = Device::authenticated(&hub, "dev1").await;
    let mut c2d = device.c2d("dev1").await;
    let mut d2c = device.d2c("dev1").await;
    let (mut requests, mut answers) = twin_links(&mut device, "dev1", "chan-1").await;
    // A second pair on the same connection gets its own answers.
    let (mut requests2, mut answers2) = twin_links(&mut device, "dev1", "chan-2").await;
    // GET: 403 with IoT Hub's error body, correlated to the request.
    requests
        .send(twin_request("GET", None, "get-1", " "))
        .await
        .unwrap();
    let (status, correlation, error) = twin_answer(&mut answers).await;
    assert_eq!(status, Value::Int(403));
    assert_eq!(correlation, MessageId::String("get-1".into()));
    assert_eq!(error["errorCode"], 403010, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("not supported by this local IoT Hub"),
        "{message}"
    );
    assert!(message.contains("get the twin"), "{message}");
    assert!(error["trackingId"].is_string(), "{error}");
    // PATCH of reported properties, on the second pair.
    requests2
        .send(twin_request(
            "PATCH",
            Some("/properties/reported"),
            "patch-1",
            r#"{"fw":"1.0"}"#,
        ))
        .await
        .unwrap();
    let (status, correlation, error) = twin_answer(&mut answers2).await;
    assert_eq!(status, Value::Int(403));
    assert_eq!(correlation, MessageId::String("patch-1".into()));
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("update reported properties"),
        "{error}"
    );
    // Nothing came on the first pair's answer link.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), answers.recv::<Body<Value>>())
            .await
            .is_err()
    );
    // Method links stay attached, and no request comes on them.
    let methods_out = Sender::attach(
        &mut device.session,
        "methods-sender",
        "/devices/dev1/methods/devicebound",
    )
    .await
    .unwrap();
    let mut methods_in = Receiver::attach(
        &mut device.session,
        "methods-receiver",
        "/devices/dev1/methods/devicebound",
    )
    .await
    .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), methods_in.recv::<Body<Value>>())
            .await
            .is_err()
    );
    // The device's C2D and telemetry links still work afterwards.
    hub.send("dev1", C2dMessage::new("after twin")).unwrap();
    let d = next(&mut c2d).await;
    assert_eq!(body(&d), b"after twin");
    c2d.accept(&d).await.unwrap();
    let outcome = d2c
        .send(
            Message::builder()
                .data(Data(Binary::from(b"t".to_vec())))
                .build(),
        )
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    assert_eq!(hub.telemetry("dev1", 0).unwrap().len(), 1);
    // The twin links detach cleanly, the others stay.
    requests.close().await.unwrap();
    answers.close().await.unwrap();
    methods_out.close().await.unwrap();
    methods_in.close().await.unwrap();
    requests2.close().await.unwrap();
    answers2.close().await.unwrap();
    hub.send("dev1", C2dMessage::new("after detach")).unwrap();
    let d = next(&mut c2d).await;
    assert_eq!(body(&d), b"after detach");
    c2d.accept(&d).await.unwrap();
    device.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn links_close_when_the_device_token_expires() {
    let (server, hub) = start(config()).await;
    let mut device = Device::connect(&hub).await;
    let (status, _) = device
        .put_token(&hub.device_token("dev1", Duration::from_secs(3)).unwrap())
        .await;
    assert_eq!(status, 200);
    let mut c2d = device.c2d("dev1").await;
    let e = receiver_detached(&mut c2d).await;
    assert!(
        e.contains("UnauthorizedAccess") && e.contains("expired"),
        "{e}"
    );
    device.close().await;
    server.shutdown().await;
}

/// An MQTT device connection; `closed` resolves when the hub closes it.
async fn mqtt(hub: &IotHub, id: &str) -> (AsyncClient, tokio::sync::oneshot::Receiver<String>) {
    let addr: SocketAddr = hub.endpoints().device_endpoint.unwrap();
    let mut options = MqttOptions::new(id, addr.ip().to_string(), addr.port());
    let token = hub.device_token(id, Duration::from_secs(3600)).unwrap();
    options.set_credentials(hub.device_username(id), token);
    options.set_keep_alive(Duration::from_secs(60));
    let (client, mut eventloop) = AsyncClient::new(options, 16);
    loop {
        match tokio::time::timeout(SOON, eventloop.poll())
            .await
            .expect("a CONNACK")
            .unwrap()
        {
            Event::Incoming(Packet::ConnAck(_)) => break,
            _ => continue,
        }
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        loop {
            if let Err(e) = eventloop.poll().await {
                let _ = tx.send(e.to_string());
                return;
            }
        }
    });
    (client, rx)
}

#[tokio::test]
async fn one_connection_per_device_across_mqtt_and_amqp() {
    let (server, hub) = start(config()).await;
    // MQTT first: the device's AMQP link closes it.
    let (_mqtt, closed) = mqtt(&hub, "dev1").await;
    let mut device = Device::authenticated(&hub, "dev1").await;
    let mut c2d = device.c2d("dev1").await;
    tokio::time::timeout(SOON, closed)
        .await
        .expect("the MQTT connection is closed")
        .unwrap();
    // The AMQP link is the device's connection now: it receives.
    hub.send("dev1", C2dMessage::new("over amqp")).unwrap();
    let d = next(&mut c2d).await;
    c2d.accept(&d).await.unwrap();
    // Another link of the same device on the same connection does not take over.
    let mut d2c = device.d2c("dev1").await;
    let outcome = d2c
        .send(
            Message::builder()
                .data(Data(Binary::from(b"t".to_vec())))
                .build(),
        )
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Accepted(_)));
    // MQTT again: the AMQP links are detached with amqp:link:stolen.
    let (_mqtt, closed) = mqtt(&hub, "dev1").await;
    let e = receiver_detached(&mut c2d).await;
    assert!(e.contains("Stolen"), "{e}");
    let e = sender_detached(&mut d2c).await;
    assert!(e.contains("Stolen"), "{e}");
    // The MQTT connection stays.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), closed)
            .await
            .is_err()
    );
    device.close().await;
    server.shutdown().await;
}
