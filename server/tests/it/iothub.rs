//! The local IoT Hub from the outside: each test starts a hub on free loopback ports and
//! drives its device endpoint with rumqttc's MQTT 3.1.1 client (`AsyncClient`, manual acks,
//! so that a PUBACK is sent only when the test says so), and its service side in process or
//! over HTTP. Timeouts are shortened through `IotHubConfig`; every wait is generous.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use mqstate_server::iothub::admin::{AddDeviceRequest, AdminClient, AdminError, SendRequest};
use mqstate_server::iothub::{
    Ack, C2dMessage, DeviceSpec, DeviceTls, FEEDBACK_CONTENT_TYPE, FeedbackBatch, FeedbackStatus,
    IotHub, IotHubConfig, IotHubError, IotHubServer, LockedMessage, MessageState, Settlement, sas,
};
use mqstate_server::{LocalServer, ServerConfig};
use rumqttc::{
    AsyncClient, ConnectReturnCode, ConnectionError, Event, MqttOptions, Packet, Publish, QoS,
    SubscribeReasonCode,
};
use tokio::sync::{mpsc, watch};

/// Patience for anything that should happen "soon" on a loaded machine.
const SOON: Duration = Duration::from_secs(30);
const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn quick_config() -> IotHubConfig {
    IotHubConfig {
        feedback_batch_interval: Duration::from_secs(1),
        devices: vec![DeviceSpec::parse(&format!("dev1:{KEY}")).unwrap()],
        ..IotHubConfig::default()
    }
}

async fn start(config: IotHubConfig) -> (IotHubServer, IotHub, SocketAddr) {
    let server = IotHubServer::start(config).await.unwrap();
    let hub = server.hub();
    let addr = hub.endpoints().device_endpoint.unwrap();
    (server, hub, addr)
}

/// A device connected with rumqttc: publishes and SUBACKs arrive on channels; the event loop
/// stops at the first error (so rumqttc does not reconnect behind the test's back).
struct TestDevice {
    client: AsyncClient,
    publishes: mpsc::UnboundedReceiver<Publish>,
    subacks: mpsc::UnboundedReceiver<Vec<SubscribeReasonCode>>,
    closed: watch::Receiver<Option<String>>,
    session_present: bool,
}

fn options(addr: SocketAddr, id: &str, username: &str, password: &str, clean: bool) -> MqttOptions {
    let mut options = MqttOptions::new(id, addr.ip().to_string(), addr.port());
    options.set_credentials(username, password);
    options.set_clean_session(clean);
    options.set_manual_acks(true);
    options.set_keep_alive(Duration::from_secs(60));
    options.set_max_packet_size(256 * 1024, 256 * 1024);
    options
}

async fn connect_with(options: MqttOptions) -> Result<TestDevice, ConnectionError> {
    let (client, mut eventloop) = AsyncClient::new(options, 64);
    let session_present = loop {
        match tokio::time::timeout(SOON, eventloop.poll())
            .await
            .expect("no CONNACK")?
        {
            Event::Incoming(Packet::ConnAck(ack)) => break ack.session_present,
            _ => continue,
        }
    };
    let (pub_tx, publishes) = mpsc::unbounded_channel();
    let (sub_tx, subacks) = mpsc::unbounded_channel();
    let (closed_tx, closed) = watch::channel(None);
    tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let _ = pub_tx.send(p);
                }
                Ok(Event::Incoming(Packet::SubAck(s))) => {
                    let _ = sub_tx.send(s.return_codes);
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = closed_tx.send(Some(e.to_string()));
                    return;
                }
            }
        }
    });
    Ok(TestDevice {
        client,
        publishes,
        subacks,
        closed,
        session_present,
    })
}

async fn connect(hub: &IotHub, addr: SocketAddr, id: &str, clean: bool) -> TestDevice {
    let token = hub.device_token(id, Duration::from_secs(3600)).unwrap();
    connect_with(options(addr, id, &hub.device_username(id), &token, clean))
        .await
        .unwrap()
}

impl TestDevice {
    async fn subscribe(&mut self, filter: &str) -> Vec<SubscribeReasonCode> {
        self.client
            .subscribe(filter, QoS::AtLeastOnce)
            .await
            .unwrap();
        tokio::time::timeout(SOON, self.subacks.recv())
            .await
            .expect("no SUBACK")
            .unwrap()
    }

    async fn subscribe_c2d(&mut self, id: &str) {
        let codes = self
            .subscribe(&format!("devices/{id}/messages/devicebound/#"))
            .await;
        assert_eq!(codes, vec![SubscribeReasonCode::Success(QoS::AtLeastOnce)]);
    }

    async fn next(&mut self) -> Publish {
        tokio::time::timeout(SOON, self.publishes.recv())
            .await
            .expect("no C2D message arrived")
            .unwrap()
    }

    /// Nothing arrives for `quiet`.
    async fn expect_nothing(&mut self, quiet: Duration) {
        if let Ok(Some(p)) = tokio::time::timeout(quiet, self.publishes.recv()).await {
            panic!("unexpected delivery on {}", p.topic);
        }
    }

    async fn wait_closed(&mut self) -> String {
        let closed = tokio::time::timeout(SOON, self.closed.wait_for(Option::is_some))
            .await
            .expect("the hub did not close the connection")
            .unwrap();
        closed.clone().unwrap_or_default()
    }
}

fn refusal(result: Result<TestDevice, ConnectionError>) -> ConnectReturnCode {
    match result {
        Err(ConnectionError::ConnectionRefused(code)) => code,
        Err(e) => panic!("expected a refusal, got {e}"),
        Ok(_) => panic!("expected a refusal, the connection was accepted"),
    }
}

async fn feedback(hub: &IotHub) -> FeedbackBatch {
    let batch = hub.receive_feedback(SOON).await.expect("no feedback batch");
    hub.complete_feedback(&batch.lock_token).unwrap();
    batch
}

/// Records of every batch arriving within `window`.
async fn feedback_for(hub: &IotHub, window: Duration) -> Vec<(Option<String>, FeedbackStatus)> {
    let deadline = tokio::time::Instant::now() + window;
    let mut out = Vec::new();
    while let Some(batch) = hub
        .receive_feedback(deadline.saturating_duration_since(tokio::time::Instant::now()))
        .await
    {
        hub.complete_feedback(&batch.lock_token).unwrap();
        out.extend(
            batch
                .records
                .into_iter()
                .map(|r| (r.original_message_id, r.status_code)),
        );
    }
    out
}

async fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + SOON;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn sas_tokens_and_user_names_are_checked() {
    let (server, hub, addr) = start(quick_config()).await;
    let username = hub.device_username("dev1");
    let resource = sas::device_resource("localhost", "dev1");
    let in_an_hour = SystemTime::now() + Duration::from_secs(3600);

    let good = sas::generate(&resource, KEY, in_an_hour).unwrap();
    let device = connect_with(options(addr, "dev1", &username, &good, true))
        .await
        .unwrap();
    assert!(!device.session_present);
    drop(device);

    let other_key = "AQECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let wrong_key = sas::generate(&resource, other_key, in_an_hour).unwrap();
    let code = refusal(connect_with(options(addr, "dev1", &username, &wrong_key, true)).await);
    assert_eq!(code, ConnectReturnCode::NotAuthorized);

    let expired =
        sas::generate(&resource, KEY, SystemTime::now() - Duration::from_secs(10)).unwrap();
    let code = refusal(connect_with(options(addr, "dev1", &username, &expired, true)).await);
    assert_eq!(code, ConnectReturnCode::NotAuthorized);

    let other_device =
        sas::generate(&sas::device_resource("localhost", "dev2"), KEY, in_an_hour).unwrap();
    let code = refusal(connect_with(options(addr, "dev1", &username, &other_device, true)).await);
    assert_eq!(code, ConnectReturnCode::NotAuthorized);

    // A token of a shared access policy with DeviceConnect, for this device, connects (as on
    // IoT Hub); one of a policy without it, or for the whole hub, does not.
    let policy_token = |policy: &str, resource: &str| {
        let key = hub.policy(policy).unwrap().primary_key;
        format!(
            "{}&skn={policy}",
            sas::generate(resource, &key, in_an_hour).unwrap()
        )
    };
    let device = connect_with(options(
        addr,
        "dev1",
        &username,
        &policy_token("device", &resource),
        true,
    ))
    .await
    .unwrap();
    drop(device);
    for (policy, scope) in [("registryRead", resource.as_str()), ("device", "localhost")] {
        let token = policy_token(policy, scope);
        let code = refusal(connect_with(options(addr, "dev1", &username, &token, true)).await);
        assert_eq!(
            code,
            ConnectReturnCode::NotAuthorized,
            "{policy} for {scope}"
        );
    }

    for bad_username in [
        "otherhub.azure-devices.net/dev1/?api-version=2021-04-12",
        "localhost/dev2/?api-version=2021-04-12",
        "localhost/dev1/",
        "",
    ] {
        let code = refusal(connect_with(options(addr, "dev1", bad_username, &good, true)).await);
        assert_eq!(
            code,
            ConnectReturnCode::BadUserNamePassword,
            "{bad_username:?}"
        );
    }

    let code = refusal(
        connect_with(options(
            addr,
            "ghost",
            "localhost/ghost/?api-version=1",
            &good,
            true,
        ))
        .await,
    );
    assert_eq!(code, ConnectReturnCode::NotAuthorized);

    // The hub drops the connection when the token expires (se is in whole seconds).
    let short = sas::generate(&resource, KEY, SystemTime::now() + Duration::from_secs(3)).unwrap();
    let mut device = connect_with(options(addr, "dev1", &username, &short, true))
        .await
        .unwrap();
    device.wait_closed().await;
    server.shutdown().await;
}

#[tokio::test]
async fn the_51st_message_is_refused_and_bad_input_changes_nothing() {
    let (server, hub, _) = start(quick_config()).await;
    for i in 0..50 {
        hub.send("dev1", C2dMessage::new("x").message_id(format!("m{i}")))
            .unwrap();
    }
    let err = hub
        .send("dev1", C2dMessage::new("x").message_id("m50"))
        .unwrap_err();
    assert_eq!(
        err,
        IotHubError::QueueFull {
            device: "dev1".into(),
            max: 50
        }
    );
    assert!(err.to_string().contains("full (50 messages)"), "{err}");
    assert_eq!(hub.queue("dev1").unwrap().depth, 50);
    hub.purge("dev1").unwrap();

    let cases: Vec<(C2dMessage, &str)> = vec![
        (
            C2dMessage::new(vec![0u8; 64 * 1024 + 1]),
            "over the limit of 65536",
        ),
        (
            C2dMessage::new("x").ttl(Duration::ZERO),
            "TTL must be positive",
        ),
        (
            C2dMessage::new("x").ttl(Duration::from_secs(3 * 24 * 3600)),
            "at most 2 days",
        ),
        (
            C2dMessage::new("x").expires_at(SystemTime::now() - Duration::from_secs(5)),
            "in the past",
        ),
        (
            C2dMessage::new("x").property("bad name", Some("v")),
            "property name \"bad name\"",
        ),
        (
            C2dMessage::new("x").property("$.mid", Some("v")),
            "reserved for system properties",
        ),
        (
            C2dMessage::new("x").property("iothub-ack", Some("full")),
            "reserved for the hub",
        ),
        (C2dMessage::new("x").property("", Some("v")), "is empty"),
    ];
    for (message, text) in cases {
        let err = hub.send("dev1", message).unwrap_err();
        assert!(err.to_string().contains(text), "{err} should say {text:?}");
    }
    let err = hub.send("nobody", C2dMessage::new("x")).unwrap_err();
    assert_eq!(err, IotHubError::DeviceNotFound("nobody".into()));
    assert_eq!(
        hub.queue("dev1").unwrap().depth,
        0,
        "refused sends changed nothing"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn delivery_topic_puback_and_success_feedback() {
    let (server, hub, addr) = start(quick_config()).await;
    let mut device = connect(&hub, addr, "dev1", true).await;
    device.subscribe_c2d("dev1").await;

    let receipt = hub
        .send(
            "dev1",
            C2dMessage::new(r#"{"x":1}"#)
                .message_id("m 1")
                .correlation_id("c/1")
                .user_id("svc")
                .content_type("application/json")
                .content_encoding("utf-8")
                .property("flag", None)
                .property("empty", Some(""))
                .property("k", Some("a&b=c é"))
                .ack(Ack::Full),
        )
        .unwrap();
    let delivered = device.next().await;
    // Written out by hand: ':' is %3A in the expiry, '$' %24, '/' %2F, '&' %26, '=' %3D.
    let exp = receipt.expiry_time_utc.replace(':', "%3A");
    assert_eq!(
        delivered.topic,
        format!(
            "devices/dev1/messages/devicebound/%24.mid=m%201&%24.to=%2Fdevices%2Fdev1%2Fmessages%2Fdevicebound&%24.exp={exp}&%24.cid=c%2F1&%24.uid=svc&%24.ct=application%2Fjson&%24.ce=utf-8&iothub-ack=full&flag&empty=&k=a%26b%3Dc%20%C3%A9"
        )
    );
    assert_eq!(&delivered.payload[..], br#"{"x":1}"#);
    assert_eq!(delivered.qos, QoS::AtLeastOnce);
    let queue = hub.queue("dev1").unwrap();
    assert_eq!(queue.messages[0].state, MessageState::Invisible);
    assert_eq!(queue.messages[0].delivery_count, 1);

    device.client.ack(&delivered).await.unwrap();
    let batch = feedback(&hub).await;
    assert_eq!(batch.content_type, FEEDBACK_CONTENT_TYPE);
    assert_eq!(batch.user_id, "localhost");
    assert_eq!(batch.records.len(), 1);
    let record = &batch.records[0];
    assert_eq!(record.original_message_id.as_deref(), Some("m 1"));
    assert_eq!(record.status_code, FeedbackStatus::Success);
    assert_eq!(record.description, "Success");
    assert_eq!(record.device_id, "dev1");
    assert_eq!(
        record.device_generation_id,
        hub.device("dev1").unwrap().generation_id
    );
    let queue = hub.queue("dev1").unwrap();
    assert_eq!(queue.depth, 0);
    assert_eq!(queue.finished[0].state, MessageState::Completed);

    // positive: feedback on completion; none and negative: none.
    for (id, ack) in [
        ("p", Ack::Positive),
        ("n", Ack::None),
        ("neg", Ack::Negative),
    ] {
        hub.send("dev1", C2dMessage::new(id).message_id(id).ack(ack))
            .unwrap();
        let p = device.next().await;
        device.client.ack(&p).await.unwrap();
    }
    let records = feedback_for(&hub, Duration::from_secs(5)).await;
    assert_eq!(
        records,
        vec![(Some("p".to_owned()), FeedbackStatus::Success)]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn unacknowledged_messages_are_redelivered_then_dead_lettered() {
    let config = IotHubConfig {
        lock_timeout: Duration::from_secs(1),
        max_delivery_count: 2,
        ..quick_config()
    };
    let (server, hub, addr) = start(config).await;
    let mut device = connect(&hub, addr, "dev1", true).await;
    device.subscribe_c2d("dev1").await;
    hub.send(
        "dev1",
        C2dMessage::new("again").message_id("m1").ack(Ack::Negative),
    )
    .unwrap();
    let first = device.next().await;
    let second = device.next().await; // no PUBACK: back to Enqueued after the lock, sent again
    assert_eq!(first.topic, second.topic);
    assert_eq!(second.payload, first.payload);
    let batch = feedback(&hub).await;
    assert_eq!(batch.records.len(), 1);
    assert_eq!(
        batch.records[0].status_code,
        FeedbackStatus::DeliveryCountExceeded
    );
    assert_eq!(batch.records[0].original_message_id.as_deref(), Some("m1"));
    let queue = hub.queue("dev1").unwrap();
    assert_eq!(queue.depth, 0);
    assert_eq!(queue.finished[0].state, MessageState::DeadLettered);
    assert_eq!(queue.finished[0].delivery_count, 2);
    // A PUBACK after the lock ended completes nothing and changes nothing.
    device.client.ack(&second).await.unwrap();
    device.expect_nothing(Duration::from_secs(2)).await;
    assert_eq!(hub.queue("dev1").unwrap().finished.len(), 1);
    server.shutdown().await;
}

#[tokio::test]
async fn expired_and_purged_messages_give_negative_feedback() {
    let config = IotHubConfig {
        default_ttl: Duration::from_secs(2),
        ..quick_config()
    };
    let (server, hub, _) = start(config).await;
    hub.send(
        "dev1",
        C2dMessage::new("a")
            .message_id("ttl")
            .ttl(Duration::from_secs(1))
            .ack(Ack::Full),
    )
    .unwrap();
    hub.send(
        "dev1",
        C2dMessage::new("b")
            .message_id("default-ttl")
            .ack(Ack::Negative),
    )
    .unwrap();
    let mut records = Vec::new();
    while records.len() < 2 {
        records.extend(feedback(&hub).await.records);
    }
    records.sort_by(|a, b| a.original_message_id.cmp(&b.original_message_id));
    assert_eq!(
        records[0].original_message_id.as_deref(),
        Some("default-ttl")
    );
    assert_eq!(records[1].original_message_id.as_deref(), Some("ttl"));
    assert!(
        records
            .iter()
            .all(|r| r.status_code == FeedbackStatus::Expired)
    );
    assert_eq!(records[0].description, "Message expired");

    for (id, ack) in [
        ("a", Ack::Negative),
        ("b", Ack::Full),
        ("c", Ack::None),
        ("d", Ack::Positive),
    ] {
        hub.send("dev1", C2dMessage::new(id).message_id(id).ack(ack))
            .unwrap();
    }
    assert_eq!(hub.purge("dev1").unwrap(), 4);
    assert_eq!(hub.queue("dev1").unwrap().depth, 0);
    let mut purged = feedback_for(&hub, Duration::from_secs(4)).await;
    purged.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        purged,
        vec![
            (Some("a".into()), FeedbackStatus::Purged),
            (Some("b".into()), FeedbackStatus::Purged)
        ]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn an_offline_device_with_a_persistent_session_gets_its_messages_on_reconnect() {
    let (server, hub, addr) = start(quick_config()).await;
    let mut device = connect(&hub, addr, "dev1", false).await;
    device.subscribe_c2d("dev1").await;
    device.client.disconnect().await.unwrap();
    device.wait_closed().await;
    wait_until("the hub to see the disconnect", || {
        hub.devices()[0].connection_state == "Disconnected"
    })
    .await;

    hub.send("dev1", C2dMessage::new("one").message_id("1"))
        .unwrap();
    hub.send("dev1", C2dMessage::new("two").message_id("2"))
        .unwrap();
    assert_eq!(
        hub.queue("dev1").unwrap().messages[0].state,
        MessageState::Enqueued
    );

    // Clean session 0 again: the subscription is still there, no SUBSCRIBE needed.
    let mut device = connect(&hub, addr, "dev1", false).await;
    assert!(device.session_present);
    let one = device.next().await;
    let two = device.next().await;
    assert_eq!(
        (&one.payload[..], &two.payload[..]),
        (&b"one"[..], &b"two"[..])
    );
    device.client.ack(&one).await.unwrap();
    device.client.ack(&two).await.unwrap();
    wait_until("both completed", || hub.queue("dev1").unwrap().depth == 0).await;
    device.client.disconnect().await.unwrap();
    device.wait_closed().await;

    // Clean session 1: the session is gone; messages wait in the queue until it subscribes.
    hub.send("dev1", C2dMessage::new("three").message_id("3"))
        .unwrap();
    let mut device = connect(&hub, addr, "dev1", true).await;
    assert!(!device.session_present);
    device.expect_nothing(Duration::from_secs(1)).await;
    device.subscribe_c2d("dev1").await;
    assert_eq!(&device.next().await.payload[..], b"three");
    server.shutdown().await;
}

#[tokio::test]
async fn a_second_connection_with_the_same_device_id_drops_the_first() {
    let (server, hub, addr) = start(quick_config()).await;
    let mut first = connect(&hub, addr, "dev1", true).await;
    first.subscribe_c2d("dev1").await;
    let mut second = connect(&hub, addr, "dev1", true).await;
    first.wait_closed().await;
    second.subscribe_c2d("dev1").await;
    hub.send("dev1", C2dMessage::new("to the new one").message_id("m"))
        .unwrap();
    assert_eq!(&second.next().await.payload[..], b"to the new one");
    server.shutdown().await;
}

#[tokio::test]
async fn feedback_is_batched_at_64_records_and_after_the_interval() {
    let config = IotHubConfig {
        feedback_batch_interval: Duration::from_secs(3600),
        devices: vec![
            DeviceSpec::parse("dev1").unwrap(),
            DeviceSpec::parse("dev2").unwrap(),
        ],
        ..IotHubConfig::default()
    };
    let (server, hub, _) = start(config).await;
    for i in 0..50 {
        hub.send(
            "dev1",
            C2dMessage::new("x")
                .message_id(format!("a{i}"))
                .ack(Ack::Negative),
        )
        .unwrap();
    }
    assert_eq!(hub.purge("dev1").unwrap(), 50);
    assert!(
        hub.receive_feedback(Duration::from_millis(500))
            .await
            .is_none(),
        "50 records wait"
    );
    for i in 0..14 {
        hub.send(
            "dev2",
            C2dMessage::new("x")
                .message_id(format!("b{i}"))
                .ack(Ack::Full),
        )
        .unwrap();
    }
    hub.purge("dev2").unwrap();
    let batch = feedback(&hub).await;
    assert_eq!(batch.records.len(), 64);
    assert!(
        batch
            .records
            .iter()
            .all(|r| r.status_code == FeedbackStatus::Purged)
    );
    server.shutdown().await;

    // Interval: 3 records, batched once the (shortened) interval has passed.
    let config = IotHubConfig {
        feedback_batch_interval: Duration::from_secs(2),
        feedback_lock_duration: Duration::from_secs(1),
        ..quick_config()
    };
    let (server, hub, _) = start(config).await;
    for i in 0..3 {
        hub.send(
            "dev1",
            C2dMessage::new("x")
                .message_id(format!("m{i}"))
                .ack(Ack::Full),
        )
        .unwrap();
    }
    hub.purge("dev1").unwrap();
    assert!(
        hub.receive_feedback(Duration::from_millis(300))
            .await
            .is_none(),
        "not before the interval"
    );
    let batch = hub
        .receive_feedback(SOON)
        .await
        .expect("the interval batch");
    assert_eq!(batch.records.len(), 3);
    assert_eq!(batch.delivery_count, 1);
    // Not completed: received again after the feedback lock duration.
    let again = hub.receive_feedback(SOON).await.expect("redelivered batch");
    assert_eq!(again.delivery_count, 2);
    assert_eq!(again.records, batch.records);
    assert!(
        hub.complete_feedback(&batch.lock_token).is_err(),
        "old lock token"
    );
    hub.complete_feedback(&again.lock_token).unwrap();
    assert!(hub.receive_feedback(Duration::from_secs(2)).await.is_none());
    server.shutdown().await;
}

#[tokio::test]
async fn device_rules_telemetry_and_device_deletion() {
    let (server, hub, addr) = start(quick_config()).await;
    hub.add_device(&DeviceSpec::parse("dev2").unwrap()).unwrap();
    let mut device = connect(&hub, addr, "dev1", true).await;
    // Only the device's own device-bound topic; QoS 2 granted as 1.
    assert_eq!(
        device
            .subscribe("devices/dev2/messages/devicebound/#")
            .await,
        vec![SubscribeReasonCode::Failure]
    );
    device
        .client
        .subscribe("devices/dev1/messages/devicebound/#", QoS::ExactlyOnce)
        .await
        .unwrap();
    let codes = tokio::time::timeout(SOON, device.subacks.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(codes, vec![SubscribeReasonCode::Success(QoS::AtLeastOnce)]);

    device
        .client
        .publish(
            "devices/dev1/messages/events/%24.mid=t1&%24.ct=text%2Fplain&temp=21&flag",
            QoS::AtLeastOnce,
            false,
            "hello",
        )
        .await
        .unwrap();
    wait_until("telemetry", || {
        !hub.telemetry("dev1", 0).unwrap().is_empty()
    })
    .await;
    let events = hub.telemetry("dev1", 0).unwrap();
    assert_eq!(events[0].body.as_deref(), Some("hello"));
    assert_eq!(events[0].system_properties["$.mid"].as_deref(), Some("t1"));
    assert_eq!(
        events[0].system_properties["$.ct"].as_deref(),
        Some("text/plain")
    );
    assert_eq!(events[0].properties["temp"].as_deref(), Some("21"));
    assert_eq!(events[0].properties["flag"], None);
    assert!(
        hub.telemetry("dev1", events[0].sequence_number)
            .unwrap()
            .is_empty()
    );

    // QoS 2 publishes close the connection, as on IoT Hub.
    device
        .client
        .publish(
            "devices/dev1/messages/events/",
            QoS::ExactlyOnce,
            false,
            "x",
        )
        .await
        .unwrap();
    device.wait_closed().await;

    // Deleting a device closes its connection and drops its pending feedback.
    let mut device = connect(&hub, addr, "dev1", true).await;
    hub.send(
        "dev1",
        C2dMessage::new("x").message_id("gone").ack(Ack::Full),
    )
    .unwrap();
    hub.purge("dev1").unwrap();
    hub.remove_device("dev1").unwrap();
    device.wait_closed().await;
    assert!(hub.receive_feedback(Duration::from_secs(3)).await.is_none());
    assert_eq!(
        hub.send("dev1", C2dMessage::new("x")).unwrap_err(),
        IotHubError::DeviceNotFound("dev1".into())
    );
    server.shutdown().await;
}

#[tokio::test]
async fn tls_with_a_generated_certificate() {
    let config = IotHubConfig {
        tls: DeviceTls::SelfSigned,
        ..quick_config()
    };
    let (server, hub, addr) = start(config).await;
    let pem = hub.ca_certificate_pem().expect("a generated certificate");
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap())
        .unwrap();
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let token = hub.device_token("dev1", Duration::from_secs(60)).unwrap();
    let mut options = options(addr, "dev1", &hub.device_username("dev1"), &token, true);
    // Connect by name so the certificate's "localhost" entry is checked.
    let mut named = MqttOptions::new("dev1", "localhost", addr.port());
    named.set_credentials(hub.device_username("dev1"), token);
    named.set_manual_acks(true);
    named.set_transport(rumqttc::Transport::tls_with_config(
        rumqttc::TlsConfiguration::Rustls(Arc::new(tls)),
    ));
    let mut device = connect_with(named).await.unwrap();
    device.subscribe_c2d("dev1").await;
    hub.send("dev1", C2dMessage::new("secret").message_id("m"))
        .unwrap();
    assert_eq!(&device.next().await.payload[..], b"secret");
    // Plain MQTT on the TLS port does not get a CONNACK.
    options.set_keep_alive(Duration::from_secs(5));
    let plain = tokio::time::timeout(SOON, connect_with(options))
        .await
        .expect("no answer");
    assert!(plain.is_err());
    server.shutdown().await;
}

#[tokio::test]
async fn the_http_admin_api_and_local_server() {
    let server = LocalServer::start_with(ServerConfig::default().with_iothub(quick_config()))
        .await
        .unwrap();
    let hub = server.iothub().expect("hub configured");
    let admin_addr = hub.endpoints().admin_endpoint.unwrap();
    let admin = AdminClient::new(&format!("http://{admin_addr}")).unwrap();

    let info = admin.hub_info().await.unwrap();
    assert_eq!(info.max_queue_depth, 50);
    let added = admin.add_device("dev2", None).await.unwrap();
    assert_eq!(added.device_id, "dev2");
    let ids: Vec<String> = admin
        .devices()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.device_id)
        .collect();
    assert_eq!(ids, ["dev1", "dev2"]);
    let err = admin.add_device("dev2", None).await.unwrap_err();
    assert!(
        matches!(&err, AdminError::Api { status: 409, code, .. } if code == "DeviceAlreadyExists"),
        "{err}"
    );
    let err = admin.add_device("bad/id", None).await.unwrap_err();
    assert!(
        matches!(
            &err,
            AdminError::Api {
                status: 400 | 404,
                ..
            }
        ),
        "{err}"
    );

    // A body that mixes credentials of two kinds is refused, nothing registered.
    for (request, why) in [
        (
            AddDeviceRequest {
                authentication: Some("selfSigned".into()),
                ..AddDeviceRequest::default()
            },
            "primaryThumbprint",
        ),
        (
            AddDeviceRequest {
                primary_thumbprint: Some("AB".repeat(20)),
                primary_key: Some("c2VjcmV0c2VjcmV0c2VjcmV0".into()),
                ..AddDeviceRequest::default()
            },
            "keys are for sas devices",
        ),
        (
            AddDeviceRequest {
                authentication: Some("certificateAuthority".into()),
                primary_thumbprint: Some("AB".repeat(20)),
                ..AddDeviceRequest::default()
            },
            "thumbprints are for selfSigned devices",
        ),
        (
            AddDeviceRequest {
                authentication: Some("tpm".into()),
                ..AddDeviceRequest::default()
            },
            "expected \"sas\"",
        ),
    ] {
        let err = admin.register_device("x9", &request).await.unwrap_err();
        assert!(
            matches!(&err, AdminError::Api { status: 400, message, .. } if message.contains(why)),
            "{request:?}: {err}"
        );
    }
    assert!(
        admin
            .devices()
            .await
            .unwrap()
            .iter()
            .all(|d| d.device_id != "x9")
    );

    let credentials = admin
        .credentials("dev2", Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(
        credentials.username,
        "localhost/dev2/?api-version=2021-04-12"
    );
    let mut device = connect_with(options(
        hub.endpoints().device_endpoint.unwrap(),
        "dev2",
        &credentials.username,
        &credentials.password,
        true,
    ))
    .await
    .unwrap();
    device.subscribe_c2d("dev2").await;

    let mut request = SendRequest {
        payload: Some("over http".into()),
        message_id: Some("h1".into()),
        ack: Ack::Full,
        ttl_secs: Some(600.0),
        ..SendRequest::default()
    };
    request.properties.insert("a".into(), Some("1".into()));
    request.properties.insert("b".into(), None);
    let receipt = admin.send("dev2", &request).await.unwrap();
    assert_eq!(receipt.message_id.as_deref(), Some("h1"));
    let delivered = device.next().await;
    assert!(
        delivered.topic.ends_with("&iothub-ack=full&a=1&b"),
        "{}",
        delivered.topic
    );
    let queue = admin.queue("dev2").await.unwrap();
    assert_eq!(queue.messages[0].state, MessageState::Invisible);
    device.client.ack(&delivered).await.unwrap();
    let batch = admin
        .receive_feedback(SOON)
        .await
        .unwrap()
        .expect("feedback over HTTP");
    assert_eq!(batch.records[0].status_code, FeedbackStatus::Success);
    admin.complete_feedback(&batch.lock_token).await.unwrap();
    let err = admin
        .complete_feedback(&batch.lock_token)
        .await
        .unwrap_err();
    assert!(matches!(&err, AdminError::Api { status: 412, .. }), "{err}");
    assert!(
        admin
            .receive_feedback(Duration::ZERO)
            .await
            .unwrap()
            .is_none()
    );

    // Every refusal is typed and changes nothing.
    let bad = |f: fn(&mut SendRequest)| {
        let mut r = SendRequest {
            payload: Some("x".into()),
            ..SendRequest::default()
        };
        f(&mut r);
        r
    };
    for (device_id, request, status, code) in [
        ("nobody", bad(|_| {}), 404, "DeviceNotFound"),
        (
            "dev2",
            bad(|r| r.payload = Some("x".repeat(64 * 1024 + 1))),
            413,
            "MessageTooLarge",
        ),
        (
            "dev2",
            bad(|r| r.ttl_secs = Some(-1.0)),
            400,
            "ArgumentInvalid",
        ),
        (
            "dev2",
            bad(|r| {
                r.properties.insert("a b".into(), None);
            }),
            400,
            "ArgumentInvalid",
        ),
        (
            "dev2",
            bad(|r| r.payload_base64 = Some("!!".into())),
            400,
            "ArgumentInvalid",
        ),
    ] {
        let err = admin.send(device_id, &request).await.unwrap_err();
        match &err {
            AdminError::Api {
                status: s,
                code: c,
                message,
            } => {
                assert_eq!((*s, c.as_str()), (status, code), "{message}");
            }
            other => panic!("{other}"),
        }
    }
    assert_eq!(admin.queue("dev2").await.unwrap().depth, 0);
    for i in 0..50 {
        admin
            .send("dev1", &bad(|_| {}))
            .await
            .unwrap_or_else(|e| panic!("{i}: {e}"));
    }
    let err = admin.send("dev1", &bad(|_| {})).await.unwrap_err();
    assert!(
        matches!(&err, AdminError::Api { status: 403, code, .. } if code == "DeviceMaximumQueueDepthExceeded"),
        "{err}"
    );
    assert_eq!(admin.purge("dev1").await.unwrap().total_messages_purged, 50);

    device
        .client
        .publish(
            "devices/dev2/messages/events/k=v",
            QoS::AtLeastOnce,
            false,
            "up",
        )
        .await
        .unwrap();
    let events = admin.events("dev2", 0, SOON).await.unwrap();
    assert_eq!(events[0].body.as_deref(), Some("up"));
    admin.remove_device("dev2").await.unwrap();
    device.wait_closed().await;
    let err = admin.queue("dev2").await.unwrap_err();
    assert!(matches!(&err, AdminError::Api { status: 404, .. }), "{err}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_qos_0_subscription_gets_qos_0_deliveries_completed_when_sent() {
    let (server, hub, addr) = start(quick_config()).await;
    let mut device = connect(&hub, addr, "dev1", true).await;
    device
        .client
        .subscribe("devices/dev1/messages/devicebound/#", QoS::AtMostOnce)
        .await
        .unwrap();
    let codes = tokio::time::timeout(SOON, device.subacks.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(codes, vec![SubscribeReasonCode::Success(QoS::AtMostOnce)]);
    hub.send(
        "dev1",
        C2dMessage::new("once").message_id("q0").ack(Ack::Positive),
    )
    .unwrap();
    let delivered = device.next().await;
    assert_eq!(delivered.qos, QoS::AtMostOnce);
    // No PUBACK exists at QoS 0: the message completed when it was sent.
    let batch = feedback(&hub).await;
    assert_eq!(batch.records[0].status_code, FeedbackStatus::Success);
    assert_eq!(
        hub.queue("dev1").unwrap().finished[0].state,
        MessageState::Completed
    );
    server.shutdown().await;
}

#[tokio::test]
async fn tls_with_certificate_and_key_files() {
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("hub.pem"), dir.path().join("hub.key"));
    std::fs::write(&cert, generated.cert.pem()).unwrap();
    std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
    let config = IotHubConfig {
        tls: DeviceTls::Files {
            cert: cert.clone(),
            key: key.clone(),
        },
        ..quick_config()
    };
    let (server, hub, addr) = start(config).await;
    assert!(hub.endpoints().tls);
    assert!(hub.ca_certificate_pem().is_none(), "nothing generated");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(generated.cert.der().clone()).unwrap();
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let token = hub.device_token("dev1", Duration::from_secs(60)).unwrap();
    let mut options = MqttOptions::new("dev1", "localhost", addr.port());
    options.set_credentials(hub.device_username("dev1"), token);
    options.set_transport(rumqttc::Transport::tls_with_config(
        rumqttc::TlsConfiguration::Rustls(Arc::new(tls)),
    ));
    connect_with(options).await.unwrap();
    server.shutdown().await;

    // A missing or unreadable file is a clear error at start.
    std::fs::write(&key, "not a key").unwrap();
    let config = IotHubConfig {
        tls: DeviceTls::Files { cert, key },
        ..quick_config()
    };
    let err = IotHubServer::start(config).await.unwrap_err();
    assert!(err.to_string().contains("TLS key"), "{err}");
}

#[tokio::test]
async fn a_silent_device_is_dropped_after_one_and_a_half_keep_alives() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (server, hub, addr) = start(quick_config()).await;
    // A CONNECT with a 1 s keep-alive (encoded by rumqttc's codec), then silence.
    let mut connect = rumqttc::mqttbytes::v4::Connect::new("dev1");
    connect.keep_alive = 1;
    connect.set_login(
        hub.device_username("dev1"),
        hub.device_token("dev1", Duration::from_secs(60)).unwrap(),
    );
    let mut bytes = bytes::BytesMut::new();
    connect.write(&mut bytes).unwrap();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(&bytes).await.unwrap();
    let mut connack = [0u8; 4];
    stream.read_exact(&mut connack).await.unwrap();
    assert_eq!(connack, [0x20, 2, 0, 0], "CONNACK accepted");
    let started = tokio::time::Instant::now();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(SOON, stream.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the hub did not close the silent connection");
    assert!(
        started.elapsed() >= Duration::from_millis(1400),
        "closed before 1.5 keep-alives"
    );
    server.shutdown().await;
}

// ----- lock-token deliveries (the AMQP and HTTPS devices' lifecycle) -----

fn token_config(max_delivery_count: u32, lock_timeout: Duration) -> IotHubConfig {
    IotHubConfig {
        max_delivery_count,
        lock_timeout,
        feedback_batch_size: 1,
        ..quick_config()
    }
}

async fn take(hub: &IotHub, id: &str) -> LockedMessage {
    hub.receive_locked(id, Duration::ZERO)
        .await
        .unwrap()
        .expect("no Enqueued message")
}

#[tokio::test]
async fn a_lock_token_completes_its_message() {
    let (server, hub, _) = start(token_config(10, Duration::from_secs(60))).await;
    assert!(
        hub.receive_locked("dev1", Duration::ZERO)
            .await
            .unwrap()
            .is_none(),
        "empty queue: nothing at once (HTTPS answers 204)"
    );
    let receipt = hub
        .send(
            "dev1",
            C2dMessage::new("hi")
                .message_id("t1")
                .property("k", Some("v"))
                .ack(Ack::Full),
        )
        .unwrap();
    let m = take(&hub, "dev1").await;
    assert_eq!(m.lock_token.len(), 36, "a GUID: {}", m.lock_token);
    assert_eq!(m.device_id, "dev1");
    assert_eq!(m.sequence_number, receipt.sequence_number);
    assert_eq!(m.delivery_count, 1);
    assert_eq!(m.message.payload, "hi");
    assert_eq!(m.message.message_id.as_deref(), Some("t1"));
    assert_eq!(m.message.properties, vec![("k".into(), Some("v".into()))]);
    assert!(m.expiry_time > m.enqueued_time);
    assert!(m.lock_until > SystemTime::now());
    let queue = hub.queue("dev1").unwrap();
    assert_eq!(queue.messages[0].state, MessageState::Invisible);
    assert!(
        hub.receive_locked("dev1", Duration::ZERO)
            .await
            .unwrap()
            .is_none(),
        "a locked message is not handed out twice"
    );

    hub.settle("dev1", &m.lock_token, Settlement::Complete)
        .unwrap();
    hub.persisted().await.unwrap();
    let batch = feedback(&hub).await;
    assert_eq!(batch.records[0].status_code, FeedbackStatus::Success);
    let queue = hub.queue("dev1").unwrap();
    assert_eq!(queue.depth, 0);
    assert_eq!(queue.finished[0].state, MessageState::Completed);
    assert_eq!(
        hub.receive_locked("nobody", Duration::ZERO)
            .await
            .unwrap_err(),
        IotHubError::DeviceNotFound("nobody".into())
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_rejected_message_is_dead_lettered_with_rejected_feedback() {
    let (server, hub, _) = start(token_config(10, Duration::from_secs(60))).await;
    hub.send(
        "dev1",
        C2dMessage::new("no").message_id("r1").ack(Ack::Negative),
    )
    .unwrap();
    let m = take(&hub, "dev1").await;
    hub.settle("dev1", &m.lock_token, Settlement::Reject)
        .unwrap();
    let batch = feedback(&hub).await;
    assert_eq!(batch.records.len(), 1);
    assert_eq!(batch.records[0].original_message_id.as_deref(), Some("r1"));
    assert_eq!(batch.records[0].status_code, FeedbackStatus::Rejected);
    assert_eq!(batch.records[0].description, "Message rejected");
    let queue = hub.queue("dev1").unwrap();
    assert_eq!(queue.depth, 0);
    assert!(queue.messages.is_empty());
    assert_eq!(queue.finished[0].state, MessageState::DeadLettered);
    assert_eq!(
        queue.finished[0].status_code,
        Some(FeedbackStatus::Rejected)
    );
    // The admin API's view (and the dashboard's) says the same.
    let json = serde_json::to_value(&queue).unwrap();
    assert_eq!(json["finished"][0]["state"], "DeadLettered");
    assert_eq!(json["finished"][0]["statusCode"], "Rejected");
    assert!(
        hub.receive_locked("dev1", Duration::ZERO)
            .await
            .unwrap()
            .is_none()
    );
    server.shutdown().await;
}

#[tokio::test]
async fn an_abandoned_message_is_delivered_again_with_its_delivery_counted() {
    let (server, hub, _) = start(token_config(3, Duration::from_secs(60))).await;
    hub.send(
        "dev1",
        C2dMessage::new("again").message_id("a1").ack(Ack::Full),
    )
    .unwrap();
    let first = take(&hub, "dev1").await;
    assert_eq!(first.delivery_count, 1);
    hub.settle("dev1", &first.lock_token, Settlement::Abandon)
        .unwrap();
    let queue = hub.queue("dev1").unwrap();
    assert_eq!(queue.messages[0].state, MessageState::Enqueued);
    assert_eq!(queue.messages[0].delivery_count, 1);
    let json = serde_json::to_value(&queue).unwrap();
    assert_eq!(json["messages"][0]["deliveryCount"], 1);

    let second = take(&hub, "dev1").await;
    assert_eq!(second.delivery_count, 2);
    assert_eq!(second.sequence_number, first.sequence_number);
    assert_ne!(second.lock_token, first.lock_token);
    // The first lock's token settles nothing any more.
    assert!(matches!(
        hub.settle("dev1", &first.lock_token, Settlement::Complete),
        Err(IotHubError::MessageLockLost { .. })
    ));
    hub.settle("dev1", &second.lock_token, Settlement::Complete)
        .unwrap();
    let batch = feedback(&hub).await;
    assert_eq!(batch.records[0].status_code, FeedbackStatus::Success);
    server.shutdown().await;
}

#[tokio::test]
async fn abandoning_past_the_max_delivery_count_dead_letters() {
    let (server, hub, _) = start(token_config(2, Duration::from_secs(60))).await;
    hub.send(
        "dev1",
        C2dMessage::new("loop").message_id("x1").ack(Ack::Negative),
    )
    .unwrap();
    for expected in 1..=2 {
        let m = take(&hub, "dev1").await;
        assert_eq!(m.delivery_count, expected);
        hub.settle("dev1", &m.lock_token, Settlement::Abandon)
            .unwrap();
    }
    let batch = feedback(&hub).await;
    assert_eq!(
        batch.records[0].status_code,
        FeedbackStatus::DeliveryCountExceeded
    );
    let queue = hub.queue("dev1").unwrap();
    assert_eq!(queue.depth, 0);
    assert_eq!(queue.finished[0].state, MessageState::DeadLettered);
    assert_eq!(queue.finished[0].delivery_count, 2);
    server.shutdown().await;
}

#[tokio::test]
async fn stale_and_unknown_lock_tokens_are_refused() {
    let (server, hub, _) = start(token_config(10, Duration::from_secs(60))).await;
    hub.send("dev1", C2dMessage::new("x").message_id("s1"))
        .unwrap();
    let m = take(&hub, "dev1").await;
    for token in ["", "not-a-token", "00000000-0000-4000-8000-000000000000"] {
        let err = hub.settle("dev1", token, Settlement::Complete).unwrap_err();
        assert_eq!(err.code(), "DeviceMessageLockLost", "{err}");
    }
    // Another device's token is not this device's.
    hub.add_device(&DeviceSpec::parse("dev2").unwrap()).unwrap();
    assert!(matches!(
        hub.settle("dev2", &m.lock_token, Settlement::Complete),
        Err(IotHubError::MessageLockLost { .. })
    ));
    hub.settle("dev1", &m.lock_token, Settlement::Reject)
        .unwrap();
    for settlement in [
        Settlement::Complete,
        Settlement::Reject,
        Settlement::Abandon,
    ] {
        let err = hub.settle("dev1", &m.lock_token, settlement).unwrap_err();
        assert_eq!(
            err,
            IotHubError::MessageLockLost {
                device: "dev1".into(),
                lock_token: m.lock_token.clone()
            }
        );
    }
    assert_eq!(
        hub.settle("nobody", &m.lock_token, Settlement::Complete)
            .unwrap_err(),
        IotHubError::DeviceNotFound("nobody".into())
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_lock_that_times_out_enqueues_the_message_again() {
    let (server, hub, _) = start(token_config(10, Duration::from_secs(1))).await;
    hub.send("dev1", C2dMessage::new("slow").message_id("l1"))
        .unwrap();
    let m = take(&hub, "dev1").await;
    wait_until("the lock to time out", || {
        hub.queue("dev1").unwrap().messages[0].state == MessageState::Enqueued
    })
    .await;
    assert_eq!(hub.queue("dev1").unwrap().messages[0].delivery_count, 1);
    assert!(matches!(
        hub.settle("dev1", &m.lock_token, Settlement::Complete),
        Err(IotHubError::MessageLockLost { .. })
    ));
    let again = take(&hub, "dev1").await;
    assert_eq!(again.delivery_count, 2);
    server.shutdown().await;
}

#[tokio::test]
async fn a_waiting_receive_gets_messages_as_they_come() {
    let (server, hub, _) = start(token_config(10, Duration::from_secs(1))).await;
    // Push, as an AMQP link with credit: the receive waits for the send.
    let waiting = tokio::spawn({
        let hub = hub.clone();
        async move { hub.receive_locked("dev1", SOON).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    hub.send("dev1", C2dMessage::new("pushed").message_id("p1"))
        .unwrap();
    let m = waiting.await.unwrap().unwrap().expect("no message came");
    assert_eq!(m.message.message_id.as_deref(), Some("p1"));
    // A lock that times out wakes a waiting receive too.
    let again = hub.receive_locked("dev1", SOON).await.unwrap().unwrap();
    assert_eq!(again.delivery_count, 2);
    // A receive that gives up leaves nothing locked.
    let short = hub
        .receive_locked("dev1", Duration::from_millis(100))
        .await
        .unwrap();
    assert!(short.is_none());
    // A cancelled receive takes nothing.
    hub.settle("dev1", &again.lock_token, Settlement::Complete)
        .unwrap();
    let cancelled =
        tokio::time::timeout(Duration::from_millis(100), hub.receive_locked("dev1", SOON)).await;
    assert!(cancelled.is_err());
    assert_eq!(hub.queue("dev1").unwrap().depth, 0);
    server.shutdown().await;
}

#[tokio::test]
async fn mqtt_and_lock_token_deliveries_share_the_queue() {
    let (server, hub, addr) = start(token_config(10, Duration::from_secs(60))).await;
    hub.send("dev1", C2dMessage::new("one").message_id("q1"))
        .unwrap();
    let m = take(&hub, "dev1").await;
    let mut device = connect(&hub, addr, "dev1", true).await;
    device.subscribe_c2d("dev1").await;
    device.expect_nothing(Duration::from_millis(300)).await;
    // Abandoned, it goes to the subscribed MQTT device at once.
    hub.settle("dev1", &m.lock_token, Settlement::Abandon)
        .unwrap();
    let p = device.next().await;
    assert!(p.topic.contains("%24.mid=q1"), "{}", p.topic);
    device.client.ack(&p).await.unwrap();
    wait_until("the PUBACK", || hub.queue("dev1").unwrap().depth == 0).await;
    assert_eq!(
        hub.queue("dev1").unwrap().finished[0].delivery_count,
        2,
        "both deliveries counted"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_abandons_and_locks_by_token_survive_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let config = || IotHubConfig {
        data_dir: Some(tmp.path().to_owned()),
        admin_port: None,
        ..token_config(10, Duration::from_secs(60))
    };
    let (server, hub, _) = start(config()).await;
    for id in ["rejected", "abandoned", "locked"] {
        hub.send("dev1", C2dMessage::new(id).message_id(id))
            .unwrap();
    }
    let rejected = take(&hub, "dev1").await;
    let abandoned = take(&hub, "dev1").await;
    let locked = take(&hub, "dev1").await;
    hub.settle("dev1", &rejected.lock_token, Settlement::Reject)
        .unwrap();
    hub.settle("dev1", &abandoned.lock_token, Settlement::Abandon)
        .unwrap();
    hub.persisted().await.unwrap();
    server.shutdown().await;

    let (server, hub, _) = start(config()).await;
    let queue = hub.queue("dev1").unwrap();
    let state = |id: &str| {
        queue
            .messages
            .iter()
            .chain(&queue.finished)
            .find(|m| m.message_id.as_deref() == Some(id))
            .map(|m| (m.state, m.delivery_count, m.status_code))
            .unwrap()
    };
    assert_eq!(
        state("rejected"),
        (
            MessageState::DeadLettered,
            1,
            Some(FeedbackStatus::Rejected)
        )
    );
    assert_eq!(state("abandoned"), (MessageState::Enqueued, 1, None));
    // A lock held at the restart ends with it: Enqueued, its delivery counted; its token is
    // gone.
    assert_eq!(state("locked"), (MessageState::Enqueued, 1, None));
    assert!(matches!(
        hub.settle("dev1", &locked.lock_token, Settlement::Complete),
        Err(IotHubError::MessageLockLost { .. })
    ));
    let next = take(&hub, "dev1").await;
    assert_eq!(
        (next.message.message_id.as_deref(), next.delivery_count),
        (Some("abandoned"), 2)
    );
    server.shutdown().await;
}

// ----- requests the hub does not serve: answered, the connection kept -----

#[tokio::test]
async fn twin_requests_get_a_403_answer_and_the_connection_stays_open() {
    let (server, hub, addr) = start(quick_config()).await;
    let mut device = connect(&hub, addr, "dev1", true).await;
    assert_eq!(
        device.subscribe("$iothub/twin/res/#").await,
        vec![SubscribeReasonCode::Success(QoS::AtLeastOnce)]
    );
    // The Node SDK asks at QoS 0, the Python SDK at QoS 1 (PUBACKed).
    for (topic, qos, rid) in [
        ("$iothub/twin/GET/?$rid=42", QoS::AtMostOnce, "42"),
        (
            "$iothub/twin/PATCH/properties/reported/?$rid=a%2Db&$version=3",
            QoS::AtLeastOnce,
            "a%2Db",
        ),
    ] {
        device
            .client
            .publish(topic, qos, false, "{}")
            .await
            .unwrap();
        let answer = device.next().await;
        assert_eq!(answer.topic, format!("$iothub/twin/res/403/?$rid={rid}"));
        let body: serde_json::Value = serde_json::from_slice(&answer.payload).unwrap();
        assert_eq!(body["errorCode"], 403_010, "{body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("twins are not supported"),
            "{body}"
        );
        assert!(body["trackingId"].is_string() && body["timestampUtc"].is_string());
    }
    // Still connected: C2D messages flow on the same connection.
    device.subscribe_c2d("dev1").await;
    hub.send("dev1", C2dMessage::new("after").message_id("t2"))
        .unwrap();
    let p = device.next().await;
    assert!(p.topic.starts_with("devices/dev1/messages/devicebound/"));
    assert!(device.closed.borrow().is_none());
    assert_eq!(hub.devices()[0].connection_state, "Connected");
    server.shutdown().await;
}

#[tokio::test]
async fn method_subscriptions_are_refused_and_the_connection_stays_open() {
    let (server, hub, addr) = start(quick_config()).await;
    let mut device = connect(&hub, addr, "dev1", true).await;
    assert_eq!(
        device.subscribe("$iothub/methods/POST/#").await,
        vec![SubscribeReasonCode::Failure]
    );
    // A twin request without the response subscription is not answered (nowhere to go),
    // and does not close the connection either.
    device
        .client
        .publish("$iothub/twin/GET/?$rid=1", QoS::AtMostOnce, false, "")
        .await
        .unwrap();
    device.expect_nothing(Duration::from_millis(300)).await;
    device.subscribe_c2d("dev1").await;
    hub.send("dev1", C2dMessage::new("still").message_id("m2"))
        .unwrap();
    let p = device.next().await;
    assert!(p.topic.contains("%24.mid=m2"));
    assert!(device.closed.borrow().is_none());
    server.shutdown().await;
}

#[tokio::test]
async fn a_connect_whose_token_expiry_overflows_is_refused_and_others_connect() {
    let (server, hub, addr) = start(quick_config()).await;
    let username = hub.device_username("dev1");
    // As an MQTT password this once panicked while the hub's state lock was held (the server
    // went on only because the poisoned lock was ignored). No key is needed to send it.
    for password in [
        "SharedAccessSignature sr=localhost%2Fdevices%2Fdev1&sig=AAAA&se=9223372036854775808",
        "SharedAccessSignature sr=localhost&sig=AAAA&se=9223372036854775808&skn=iothubowner",
        "SharedAccessSignature sr=localhost%2Fdevices%2Fdev1&sig=AAAA&se=18446744073709551615&skn=device",
    ] {
        let code = refusal(connect_with(options(addr, "dev1", &username, password, true)).await);
        assert_eq!(code, ConnectReturnCode::NotAuthorized, "{password}");
    }
    // The same device connects with a good token, and the hub serves it.
    let device = connect(&hub, addr, "dev1", true).await;
    hub.send("dev1", C2dMessage::new("after").message_id("m1"))
        .unwrap();
    drop(device);
    assert_eq!(hub.queue("dev1").unwrap().depth, 1);
    server.shutdown().await;
}
