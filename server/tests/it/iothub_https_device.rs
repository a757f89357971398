//! IoT Hub's device HTTPS API on the local hub, over HTTPS with a real HTTP client, sending
//! what the Node device SDK's HTTP transport (`azure-iot-device-http`) sends: receive (204
//! when empty, 200 with the message's properties as headers and the lock token as `ETag`),
//! complete, reject and abandon by ETag with their feedback, stale ETags (412), telemetry
//! and telemetry batches, and the device-token checks (401).

use std::time::{Duration, SystemTime};

use hyper::{Method, StatusCode};
use mqstate_server::iothub::policies::service_token;
use mqstate_server::iothub::{
    Ack, C2dMessage, DeviceSpec, FeedbackStatus, IotHub, IotHubConfig, IotHubServer, sas,
};

use crate::common::hub::{API, Https, KEY1, KEY2, Reply, feedback};

const OTHER_KEY: &str = "ICEiIyQlJicoKSorLC0uLw==";

/// The hub's device HTTPS API, as the Node SDK calls it.
impl Https {
    /// `GET .../messages/devicebound` as the Node SDK sends it (lower-case `devicebound`).
    async fn receive(&self, id: &str, token: &str) -> Reply {
        let path = format!("/devices/{id}/messages/devicebound?{API}");
        let to = format!("/devices/{id}/messages/devicebound");
        self.call(
            Method::GET,
            &path,
            &[("Authorization", token), ("iothub-to", &to)],
            b"",
        )
        .await
    }

    /// Complete (`DELETE`), reject (`DELETE ...&reject`) or abandon (`POST .../abandon`) as
    /// the Node SDK sends them: the lock token without its quotes, also in `If-Match`.
    async fn settle(&self, id: &str, token: &str, lock: &str, how: &str) -> Reply {
        let base = format!("/devices/{id}/messages/devicebound/{lock}");
        let (method, path) = match how {
            "complete" => (Method::DELETE, format!("{base}?{API}")),
            "reject" => (Method::DELETE, format!("{base}?{API}&reject")),
            "abandon" => (Method::POST, format!("{base}/abandon?{API}")),
            _ => unreachable!(),
        };
        self.call(
            method,
            &path,
            &[("Authorization", token), ("If-Match", lock)],
            b"",
        )
        .await
    }
}

/// The lock token of a 200 receive: the ETag without its quotes (what Node's `toMessage`
/// strips).
fn lock_token(reply: &Reply) -> String {
    let etag = reply.header("etag").expect("an ETag");
    assert!(
        etag.starts_with('"') && etag.ends_with('"') && etag.len() > 2,
        "{etag}"
    );
    etag[1..etag.len() - 1].to_owned()
}

fn config(max_delivery_count: u32) -> IotHubConfig {
    IotHubConfig {
        admin_port: None,
        amqp_port: None,
        max_delivery_count,
        devices: vec![
            DeviceSpec {
                id: "d1".into(),
                primary_key: Some(KEY1.into()),
                secondary_key: Some(KEY2.into()),
            },
            DeviceSpec {
                id: "d2".into(),
                primary_key: None,
                secondary_key: None,
            },
        ],
        ..IotHubConfig::default()
    }
}

fn token(hub: &IotHub, id: &str) -> String {
    hub.device_token(id, Duration::from_secs(3600)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receive_gives_every_property_and_the_etag() {
    let server = IotHubServer::start(config(10)).await.unwrap();
    let hub = server.hub();
    let https = Https::new(&hub);
    let t = token(&hub, "d1");

    let empty = https.receive("d1", &t).await;
    assert_eq!(empty.status, StatusCode::NO_CONTENT);
    assert!(empty.body.is_empty());

    let receipt = hub
        .send(
            "d1",
            C2dMessage::new("{\"setpoint\":21.5}")
                .message_id("m-1")
                .correlation_id("c-1")
                .user_id("u-1")
                .content_type("application/json")
                .content_encoding("utf-8")
                .property("unit", Some("celsius"))
                .property("place", Some("kitchen & hall/2 = 50%"))
                .property("empty", Some(""))
                .ack(Ack::Full),
        )
        .unwrap();
    // The camel-cased spelling of the documentation is served too.
    let got = https
        .call(
            Method::GET,
            &format!("/devices/d1/messages/deviceBound?{API}"),
            &[("Authorization", &t)],
            b"",
        )
        .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(&got.body[..], b"{\"setpoint\":21.5}");
    let lock = lock_token(&got);
    assert_eq!(lock.len(), 36, "a GUID: {lock}");
    assert_eq!(got.header("iothub-messageid"), Some("m-1"));
    assert_eq!(got.header("iothub-correlationid"), Some("c-1"));
    assert_eq!(got.header("iothub-userid"), Some("u-1"));
    assert_eq!(got.header("iothub-ack"), Some("full"));
    assert_eq!(
        got.header("iothub-to"),
        Some("/devices/d1/messages/devicebound")
    );
    assert_eq!(
        got.header("iothub-expiry"),
        Some(receipt.expiry_time_utc.as_str())
    );
    assert_eq!(
        got.header("iothub-enqueuedtime"),
        Some(receipt.enqueued_time_utc.as_str())
    );
    assert_eq!(
        got.header("iothub-sequencenumber"),
        Some(receipt.sequence_number.to_string().as_str())
    );
    assert_eq!(got.header("iothub-deliverycount"), Some("1"));
    assert_eq!(got.header("contenttype"), Some("application/json"));
    assert_eq!(got.header("contentencoding"), Some("utf-8"));
    assert_eq!(got.header("iothub-app-unit"), Some("celsius"));
    assert_eq!(
        got.header("iothub-app-place"),
        Some("kitchen & hall/2 = 50%")
    );
    assert_eq!(got.header("iothub-app-empty"), Some(""));

    // Locked: not received again while the lock holds.
    assert_eq!(https.receive("d1", &t).await.status, StatusCode::NO_CONTENT);
    // Complete: Success feedback, the queue is empty.
    let done = https.settle("d1", &t, &lock, "complete").await;
    assert_eq!(done.status, StatusCode::NO_CONTENT);
    assert_eq!(feedback(&hub, "m-1").await, FeedbackStatus::Success);
    assert_eq!(hub.queue("d1").unwrap().depth, 0);

    // The same ETag again: it locks nothing any more.
    let stale = https.settle("d1", &t, &lock, "complete").await;
    assert_eq!(stale.status, StatusCode::PRECONDITION_FAILED);
    assert_eq!(stale.error_code(), "DeviceMessageLockLost");
    assert_eq!(
        stale.header("iothub-errorcode"),
        Some("DeviceMessageLockLost")
    );
    // An unknown one, and one that is no GUID.
    for lock in ["9b2c6f1e-5d3a-4c8b-a1f0-2e7d9c4b6a13", "not-a-token"] {
        for how in ["complete", "reject", "abandon"] {
            let r = https.settle("d1", &t, lock, how).await;
            assert_eq!(r.status, StatusCode::PRECONDITION_FAILED, "{how} {lock}");
            assert_eq!(r.error_code(), "DeviceMessageLockLost");
        }
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_and_abandon_settle_as_on_iot_hub() {
    let server = IotHubServer::start(config(2)).await.unwrap();
    let hub = server.hub();
    let https = Https::new(&hub);
    let t = token(&hub, "d1");

    // Reject: Rejected feedback, dead-lettered, never delivered again.
    hub.send("d1", C2dMessage::new("r").message_id("rej").ack(Ack::Full))
        .unwrap();
    let got = https.receive("d1", &t).await;
    assert_eq!(got.status, StatusCode::OK);
    let lock = lock_token(&got);
    let rejected = https.settle("d1", &t, &lock, "reject").await;
    assert_eq!(rejected.status, StatusCode::NO_CONTENT);
    assert_eq!(feedback(&hub, "rej").await, FeedbackStatus::Rejected);
    assert_eq!(hub.queue("d1").unwrap().depth, 0);
    assert_eq!(https.receive("d1", &t).await.status, StatusCode::NO_CONTENT);
    // `reject=true`, as some SDK versions write it, rejects too.
    hub.send(
        "d1",
        C2dMessage::new("r2").message_id("rej2").ack(Ack::Full),
    )
    .unwrap();
    let lock = lock_token(&https.receive("d1", &t).await);
    let r = https
        .call(
            Method::DELETE,
            &format!("/devices/d1/messages/devicebound/{lock}?{API}&reject=true"),
            &[("Authorization", &t)],
            b"",
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(feedback(&hub, "rej2").await, FeedbackStatus::Rejected);

    // Abandon: received again at once, the delivery counted; abandoning the last allowed
    // delivery (max 2) dead-letters it.
    hub.send("d1", C2dMessage::new("a").message_id("ab").ack(Ack::Full))
        .unwrap();
    let first = https.receive("d1", &t).await;
    assert_eq!(first.header("iothub-deliverycount"), Some("1"));
    let lock1 = lock_token(&first);
    let abandoned = https.settle("d1", &t, &lock1, "abandon").await;
    assert_eq!(abandoned.status, StatusCode::NO_CONTENT);
    let second = https.receive("d1", &t).await;
    assert_eq!(second.status, StatusCode::OK);
    assert_eq!(second.header("iothub-messageid"), Some("ab"));
    assert_eq!(second.header("iothub-deliverycount"), Some("2"));
    let lock2 = lock_token(&second);
    assert_ne!(lock1, lock2, "a new lock has a new token");
    // The first lock's token settles nothing now.
    let stale = https.settle("d1", &t, &lock1, "complete").await;
    assert_eq!(stale.status, StatusCode::PRECONDITION_FAILED);
    assert_eq!(
        https.settle("d1", &t, &lock2, "abandon").await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        feedback(&hub, "ab").await,
        FeedbackStatus::DeliveryCountExceeded
    );
    assert_eq!(hub.queue("d1").unwrap().depth, 0);
    assert_eq!(https.receive("d1", &t).await.status, StatusCode::NO_CONTENT);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_is_stored_with_its_properties() {
    let server = IotHubServer::start(config(10)).await.unwrap();
    let hub = server.hub();
    let https = Https::new(&hub);
    let t = token(&hub, "d1");
    let path = format!("/devices/d1/messages/events?{API}");

    // What Node's sendEvent sends for a message with every property.
    let sent = https
        .call(
            Method::POST,
            &path,
            &[
                ("Authorization", &t),
                ("iothub-to", "/devices/d1/messages/events"),
                ("iothub-app-temperature", "21.5"),
                ("iothub-app-place", "kitchen & hall"),
                ("IoTHub-MessageId", "t-1"),
                ("IoTHub-CorrelationId", "c-1"),
                ("iothub-contenttype", "application/json"),
                ("iothub-contentencoding", "utf-8"),
            ],
            b"{\"t\":21.5}",
        )
        .await;
    assert_eq!(sent.status, StatusCode::NO_CONTENT);
    let stored = hub.telemetry("d1", 0).unwrap();
    assert_eq!(stored.len(), 1);
    let m = &stored[0];
    assert_eq!(m.body.as_deref(), Some("{\"t\":21.5}"));
    let some = |v: &str| Some(v.to_owned());
    assert_eq!(m.properties["temperature"], some("21.5"));
    assert_eq!(m.properties["place"], some("kitchen & hall"));
    assert_eq!(m.properties.len(), 2, "{:?}", m.properties);
    assert_eq!(m.system_properties["$.mid"], some("t-1"));
    assert_eq!(m.system_properties["$.cid"], some("c-1"));
    assert_eq!(m.system_properties["$.ct"], some("application/json"));
    assert_eq!(m.system_properties["$.ce"], some("utf-8"));
    assert_eq!(m.system_properties.len(), 4, "{:?}", m.system_properties);

    // A batch, as Node's sendEventBatch writes it (bodies base64, properties prefixed).
    let batch = br#"[{"body": "b25l", "properties":{"iothub-app-n":"1"}},{"body": "dHdv"}]"#;
    let sent = https
        .call(
            Method::POST,
            &path,
            &[
                ("Authorization", &t),
                ("Content-Type", "application/vnd.microsoft.iothub.json"),
            ],
            batch,
        )
        .await;
    assert_eq!(sent.status, StatusCode::NO_CONTENT);
    let stored = hub.telemetry("d1", m.sequence_number).unwrap();
    let bodies: Vec<_> = stored.iter().map(|m| m.body.clone().unwrap()).collect();
    assert_eq!(bodies, ["one", "two"]);
    assert_eq!(stored[0].properties["n"], some("1"));
    assert!(stored[1].properties.is_empty());

    // Over the size limit: 413, nothing stored.
    let big = vec![b'x'; hub.config().max_telemetry_size + 1];
    let refused = https
        .call(Method::POST, &path, &[("Authorization", &t)], &big)
        .await;
    assert_eq!(refused.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(refused.error_code(), "MessageTooLarge");
    assert_eq!(hub.telemetry("d1", 0).unwrap().len(), 3);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_tokens_are_checked() {
    let server = IotHubServer::start(config(10)).await.unwrap();
    let hub = server.hub();
    let https = Https::new(&hub);
    let resource = sas::device_resource("localhost", "d1");
    let hour = SystemTime::now() + Duration::from_secs(3600);

    let refused = |reply: &Reply, why: &str| {
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{why}");
        assert_eq!(reply.error_code(), "IotHubUnauthorizedAccess", "{why}");
        assert_eq!(
            reply.json()["Message"],
            "ErrorCode:IotHubUnauthorizedAccess;Unauthorized"
        );
    };
    let wrong_key = sas::generate(&resource, OTHER_KEY, hour).unwrap();
    let expired =
        sas::generate(&resource, KEY1, SystemTime::now() - Duration::from_secs(1)).unwrap();
    let other_device = token(&hub, "d2");
    let service = service_token("localhost", &hub.policy("service").unwrap(), hour).unwrap();
    // A policy token for the device's resource: needs DeviceConnect.
    let by_policy = |name: &str| {
        let key = hub.policy(name).unwrap().primary_key;
        format!(
            "{}&skn={name}",
            sas::generate(&resource, &key, hour).unwrap()
        )
    };
    let without_right = by_policy("service");
    for (token, why) in [
        (Some(wrong_key.as_str()), "wrong key"),
        (Some(expired.as_str()), "expired token"),
        (Some(other_device.as_str()), "another device's token"),
        (Some(service.as_str()), "a service token"),
        (
            Some(without_right.as_str()),
            "a policy without DeviceConnect",
        ),
        (None, "no token"),
    ] {
        let headers: Vec<(&str, &str)> = token.map(|t| ("Authorization", t)).into_iter().collect();
        for (method, path) in [
            (
                Method::GET,
                format!("/devices/d1/messages/devicebound?{API}"),
            ),
            (Method::POST, format!("/devices/d1/messages/events?{API}")),
            (
                Method::DELETE,
                format!(
                    "/devices/d1/messages/devicebound/9b2c6f1e-5d3a-4c8b-a1f0-2e7d9c4b6a13?{API}"
                ),
            ),
        ] {
            let reply = https.call(method, &path, &headers, b"x").await;
            refused(&reply, why);
        }
    }
    assert!(hub.telemetry("d1", 0).unwrap().is_empty());

    // The secondary key and the `device` policy are accepted.
    let secondary = sas::generate(&resource, KEY2, hour).unwrap();
    for t in [secondary, by_policy("device")] {
        let reply = https.receive("d1", &t).await;
        assert_eq!(reply.status, StatusCode::NO_CONTENT, "{t}");
    }
    // A disabled device is refused.
    let mut update = mqstate_server::iothub::registry::DeviceUpdate {
        primary_key: None,
        secondary_key: None,
        status: mqstate_server::iothub::registry::DeviceStatus::Disabled,
        status_reason: None,
        iot_edge: false,
        authentication: None,
    };
    hub.update_device("d1", &update, None).unwrap();
    refused(&https.receive("d1", &token(&hub, "d1")).await, "disabled");
    update.status = mqstate_server::iothub::registry::DeviceStatus::Enabled;
    hub.update_device("d1", &update, None).unwrap();
    assert_eq!(
        https.receive("d1", &token(&hub, "d1")).await.status,
        StatusCode::NO_CONTENT
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_shares_the_queue_and_leaves_mqtt_connected() {
    let server = IotHubServer::start(config(10)).await.unwrap();
    let hub = server.hub();
    let https = Https::new(&hub);

    // An MQTT connection of d1 that never subscribes: its messages wait in the queue.
    let addr = hub.endpoints().device_endpoint.unwrap();
    let mut options = rumqttc::MqttOptions::new("d1", addr.ip().to_string(), addr.port());
    options.set_credentials(hub.device_username("d1"), token(&hub, "d1"));
    let (_client, mut eventloop) = rumqttc::AsyncClient::new(options, 8);
    let first = tokio::time::timeout(Duration::from_secs(10), eventloop.poll())
        .await
        .unwrap();
    assert!(
        matches!(
            first,
            Ok(rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(_)))
        ),
        "{first:?}"
    );
    let poll = tokio::spawn(async move {
        loop {
            if let Err(e) = eventloop.poll().await {
                return e;
            }
        }
    });

    hub.send("d1", C2dMessage::new("shared").message_id("s"))
        .unwrap();
    let t = token(&hub, "d1");
    let got = https.receive("d1", &t).await;
    assert_eq!(got.status, StatusCode::OK);
    let lock = lock_token(&got);
    assert_eq!(
        https.settle("d1", &t, &lock, "complete").await.status,
        StatusCode::NO_CONTENT
    );
    let events = https
        .call(
            Method::POST,
            &format!("/devices/d1/messages/events?{API}"),
            &[("Authorization", &t)],
            b"hi",
        )
        .await;
    assert_eq!(events.status, StatusCode::NO_CONTENT);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!poll.is_finished(), "the MQTT connection was closed");
    let d1 = hub
        .devices()
        .into_iter()
        .find(|d| d.device_id == "d1")
        .unwrap();
    assert_eq!(d1.connection_state, "Connected");
    poll.abort();
    server.shutdown().await;
}
