//! The local IoT Hub's state in `mqstate serve --data-dir`, with the server as a process
//! killed with SIGKILL and restarted on the same data dir: the registry and its keys, queued
//! messages with every property, a locked message (redelivered with its delivery count up),
//! pending and locked feedback, and a completed message (not delivered again).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mqstate_server::iothub::admin::{AdminClient, SendRequest};
use mqstate_server::iothub::{Ack, FeedbackStatus, MessageState};
use mqstate_testing as testing;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, Publish, QoS};
use tokio::sync::mpsc;

use crate::support::Reaper;

/// A running `mqstate serve` with its hub; killed (SIGKILL) on drop.
struct Serve {
    child: Reaper,
    devices: u16,
    admin: AdminClient,
}

struct Ports {
    broker: u16,
    devices: u16,
    admin: u16,
}

impl Ports {
    fn new() -> Ports {
        Ports {
            broker: testing::free_port().unwrap(),
            devices: testing::free_port().unwrap(),
            admin: testing::free_port().unwrap(),
        }
    }
}

impl Serve {
    async fn start(dir: &Path, ports: &Ports, extra: &[&str]) -> Serve {
        let child = Command::new(env!("CARGO_BIN_EXE_mqstate"))
            .args(["serve", "--no-dashboard", "--log", "warn"])
            .args(["--port", &ports.broker.to_string()])
            .args(["--iothub-port", &ports.devices.to_string()])
            .args(["--iothub-admin-port", &ports.admin.to_string()])
            .args(["--iothub-https-port", "0", "--iothub-amqp-port", "0"])
            .arg("--data-dir")
            .arg(dir)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start mqstate serve");
        let admin = AdminClient::new(&format!("http://127.0.0.1:{}", ports.admin)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while admin.hub_info().await.is_err() {
            assert!(Instant::now() < deadline, "mqstate serve did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Serve {
            child: Reaper(child),
            devices: ports.devices,
            admin,
        }
    }

    /// SIGKILL: no shutdown code runs.
    fn kill9(mut self) {
        self.child.0.kill().unwrap();
        self.child.0.wait().unwrap();
    }

    /// A raw MQTT 3.1.1 device (manual PUBACKs when `manual`), subscribed to its messages.
    async fn device(
        &self,
        id: &str,
        manual: bool,
    ) -> (AsyncClient, mpsc::UnboundedReceiver<Publish>) {
        let credentials = self
            .admin
            .credentials(id, Duration::from_secs(600))
            .await
            .unwrap();
        let mut options = MqttOptions::new(id, "127.0.0.1", self.devices);
        options.set_credentials(credentials.username, credentials.password);
        options.set_manual_acks(manual);
        let (client, mut eventloop) = AsyncClient::new(options, 16);
        client
            .subscribe(
                format!("devices/{id}/messages/devicebound/#"),
                QoS::AtLeastOnce,
            )
            .await
            .unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(event) = eventloop.poll().await {
                if let Event::Incoming(Packet::Publish(p)) = event {
                    let _ = tx.send(p);
                }
            }
        });
        (client, rx)
    }
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Publish>) -> Publish {
    tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("a delivery within 30 s")
        .expect("the device's event loop ended")
}

/// Polls `check` until it is true (30 s at most).
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn message(id: &str) -> SendRequest {
    SendRequest {
        payload: Some(format!("body of {id}")),
        message_id: Some(id.into()),
        ack: Ack::Full,
        ..SendRequest::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_keys_and_queued_messages_with_every_property_survive_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let ports = Ports::new();
    let serve = Serve::start(tmp.path(), &ports, &[]).await;
    let generated = serve.admin.add_device("gen", None).await.unwrap();
    let given = serve
        .admin
        .add_device("given", Some("AAECAwQFBgcICQoLDA0ODw==".into()))
        .await
        .unwrap();
    serve.admin.add_device("gone", None).await.unwrap();
    serve.admin.remove_device("gone").await.unwrap();
    let mut properties = BTreeMap::new();
    properties.insert("a".to_owned(), Some("1 & 2".to_owned()));
    properties.insert("n".to_owned(), None);
    let full = SendRequest {
        payload_base64: Some("AAEC/w==".into()),
        message_id: Some("m-full".into()),
        correlation_id: Some("c-1".into()),
        user_id: Some("u-1".into()),
        content_type: Some("application/json".into()),
        content_encoding: Some("utf-8".into()),
        properties,
        ack: Ack::Positive,
        ttl_secs: Some(3600.0),
        ..SendRequest::default()
    };
    let receipt = serve.admin.send("given", &full).await.unwrap();
    let at = SendRequest {
        expiry_time_utc: Some("2099-01-01T00:00:00Z".into()),
        ..message("m-at")
    };
    // An expiry 2 days away at most: this one is refused, nothing is kept.
    assert!(serve.admin.send("given", &at).await.is_err());
    serve
        .admin
        .send("given", &message("m-plain"))
        .await
        .unwrap();
    let queue_before = serve.admin.queue("given").await.unwrap();
    assert_eq!(queue_before.depth, 2);
    let owner = serve
        .admin
        .service_connection_string("iothubowner")
        .await
        .unwrap();
    serve.kill9();

    let serve = Serve::start(tmp.path(), &ports, &[]).await;
    // The shared access policies' keys are kept: back ends keep their connection strings.
    assert_eq!(
        serve
            .admin
            .service_connection_string("iothubowner")
            .await
            .unwrap(),
        owner
    );
    assert_eq!(serve.admin.device("gen").await.unwrap(), generated);
    assert_eq!(serve.admin.device("given").await.unwrap(), given);
    assert!(
        serve.admin.device("gone").await.is_err(),
        "a deleted device stays deleted"
    );
    assert_eq!(serve.admin.queue("given").await.unwrap(), queue_before);
    // A device with its old key connects and gets the messages with every property.
    let (_client, mut rx) = serve.device("given", false).await;
    let first = next(&mut rx).await;
    assert_eq!(&first.payload[..], &[0, 1, 2, 255]);
    let bag = first
        .topic
        .strip_prefix("devices/given/messages/devicebound/")
        .unwrap();
    let props: BTreeMap<String, Option<String>> = mqstate::iothub::properties::decode(bag)
        .unwrap()
        .into_iter()
        .collect();
    let get = |k: &str| props.get(k).cloned().flatten();
    assert_eq!(get("$.mid").as_deref(), Some("m-full"));
    assert_eq!(get("$.cid").as_deref(), Some("c-1"));
    assert_eq!(get("$.uid").as_deref(), Some("u-1"));
    assert_eq!(get("$.ct").as_deref(), Some("application/json"));
    assert_eq!(get("$.ce").as_deref(), Some("utf-8"));
    assert_eq!(get("$.exp"), Some(receipt.expiry_time_utc));
    assert_eq!(get("iothub-ack").as_deref(), Some("positive"));
    assert_eq!(get("a").as_deref(), Some("1 & 2"));
    assert_eq!(props.get("n"), Some(&None));
    let second = next(&mut rx).await;
    assert!(second.topic.contains("m-plain"), "{}", second.topic);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_message_is_redelivered_after_sigkill_with_its_delivery_count_up() {
    let tmp = tempfile::tempdir().unwrap();
    let ports = Ports::new();
    let serve = Serve::start(tmp.path(), &ports, &[]).await;
    serve.admin.add_device("d", None).await.unwrap();
    serve.admin.send("d", &message("m1")).await.unwrap();
    // Delivered, never acknowledged: Invisible, locked for a minute.
    let (_client, mut rx) = serve.device("d", true).await;
    let first = next(&mut rx).await;
    assert!(first.topic.contains("m1"));
    let queue = serve.admin.queue("d").await.unwrap();
    assert_eq!(queue.messages[0].state, MessageState::Invisible);
    assert_eq!(queue.messages[0].delivery_count, 1);
    serve.kill9();

    let serve = Serve::start(tmp.path(), &ports, &[]).await;
    // Released at start as a lost connection releases it: Enqueued, its delivery counted.
    let queue = serve.admin.queue("d").await.unwrap();
    assert_eq!(queue.messages.len(), 1);
    assert_eq!(queue.messages[0].state, MessageState::Enqueued);
    assert_eq!(queue.messages[0].delivery_count, 1);
    let (client, mut rx) = serve.device("d", true).await;
    let again = next(&mut rx).await;
    assert!(again.topic.contains("m1"));
    let queue = serve.admin.queue("d").await.unwrap();
    assert_eq!(queue.messages[0].delivery_count, 2);
    client.ack(&again).await.unwrap();
    eventually("the completion", || async {
        let q = serve.admin.queue("d").await.unwrap();
        q.depth == 0
            && q.finished.len() == 1
            && q.finished[0].state == MessageState::Completed
            && q.finished[0].delivery_count == 2
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_and_locked_feedback_survive_sigkill_and_completed_messages_stay_completed() {
    let tmp = tempfile::tempdir().unwrap();
    let ports = Ports::new();
    // Feedback records wait (a long interval) when the server is killed.
    let serve = Serve::start(tmp.path(), &ports, &["--iothub-feedback-interval", "1h"]).await;
    serve.admin.add_device("d", None).await.unwrap();
    serve.admin.add_device("other", None).await.unwrap();
    let (_client, mut rx) = serve.device("d", false).await;
    for id in ["m1", "m2"] {
        serve.admin.send("d", &message(id)).await.unwrap();
        next(&mut rx).await; // completed at once (automatic PUBACK)
    }
    eventually("both completions", || async {
        serve.admin.queue("d").await.unwrap().finished.len() == 2
    })
    .await;
    // An acknowledged change waits for every change before it: the completions are on disk.
    serve
        .admin
        .send("other", &message("barrier"))
        .await
        .unwrap();
    assert!(
        serve
            .admin
            .receive_feedback(Duration::ZERO)
            .await
            .unwrap()
            .is_none(),
        "pending, not batched yet"
    );
    serve.kill9();

    let serve = Serve::start(tmp.path(), &ports, &["--iothub-feedback-interval", "500ms"]).await;
    let batch = serve
        .admin
        .receive_feedback(Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the pending records, batched after the restart");
    let mut ids: Vec<_> = batch
        .records
        .iter()
        .map(|r| (r.original_message_id.clone().unwrap(), r.status_code))
        .collect();
    ids.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        ids,
        [
            ("m1".to_owned(), FeedbackStatus::Success),
            ("m2".to_owned(), FeedbackStatus::Success)
        ]
    );
    // Received (locked) and not completed when the server dies: still locked after the
    // restart, and its lock token still completes it.
    serve.kill9();
    let serve = Serve::start(tmp.path(), &ports, &["--iothub-feedback-interval", "500ms"]).await;
    assert!(
        serve
            .admin
            .receive_feedback(Duration::ZERO)
            .await
            .unwrap()
            .is_none(),
        "still locked by the service that received it"
    );
    serve
        .admin
        .complete_feedback(&batch.lock_token)
        .await
        .unwrap();
    serve.kill9();

    let serve = Serve::start(tmp.path(), &ports, &["--iothub-feedback-interval", "500ms"]).await;
    assert!(
        serve
            .admin
            .receive_feedback(Duration::from_secs(1))
            .await
            .unwrap()
            .is_none(),
        "a completed batch is not received again"
    );
    // The completed messages are not delivered again, and the queue view still shows them.
    let (_client, mut rx) = serve.device("d", false).await;
    serve.admin.send("d", &message("m3")).await.unwrap();
    let delivered = next(&mut rx).await;
    assert!(delivered.topic.contains("m3"), "{}", delivered.topic);
    let finished: Vec<_> = serve
        .admin
        .queue("d")
        .await
        .unwrap()
        .finished
        .into_iter()
        .map(|m| (m.message_id.unwrap(), m.state))
        .collect();
    assert_eq!(
        finished[..2],
        [
            ("m1".to_owned(), MessageState::Completed),
            ("m2".to_owned(), MessageState::Completed)
        ]
    );
}
