//! The IoT Hub device client over AMQP (`Transport::Amqp`) against the local IoT Hub's AMQP
//! endpoint (TLS, SASL, CBS put-token, the device's two links): complete, reject and abandon
//! with the hub's feedback (also over AMQP over WebSockets, `Transport::AmqpWs`), settlement in any order, a lost lock, token renewal on the open
//! connection, and a hub restarted from its data dir while messages are in flight.

use std::collections::HashMap;
use std::time::Duration;

use mqstate::iothub::{DeviceClient, DeviceOptions, Telemetry, Transport};
use mqstate::{ConnectionState, ErrorKind};
use mqstate_server::iothub::{
    Ack, C2dMessage as HubMessage, FeedbackStatus, IotHub, IotHubConfig, IotHubServer, MessageState,
};

use crate::common::iothub::{
    AMQP_ENDPOINTS, AmqpEndpoint, CaFile, WAIT, amqp_options, amqp_port, amqp_tcp,
    assert_every_property, completed, eventually, feedback, finished, fixed_tls, hub,
    message_with_every_property, only_event, receive,
};

/// A hub with `dev1` (started with `config`) and `dev1` connected through `endpoint`; the CA
/// file is returned to live as long as the client.
async fn amqp_device(
    config: IotHubConfig,
    endpoint: AmqpEndpoint,
) -> (IotHubServer, IotHub, CaFile, DeviceClient) {
    let (server, hub) = hub(config, &["dev1"]).await;
    let ca = CaFile::of(&hub);
    let client = DeviceClient::connect(endpoint(&hub, "dev1", &ca))
        .await
        .unwrap();
    (server, hub, ca, client)
}

/// Feedback right away, so that each test can read its records.
fn config() -> IotHubConfig {
    IotHubConfig {
        feedback_batch_size: 1,
        ..IotHubConfig::default()
    }
}

/// Over AMQP and over AMQP over WebSockets, as each test below run over [`AMQP_ENDPOINTS`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receives_every_property_and_completes_with_success_feedback() {
    for (transport, endpoint) in AMQP_ENDPOINTS {
        receives_and_completes(transport, endpoint).await;
    }
}

async fn receives_and_completes(transport: Transport, endpoint: AmqpEndpoint) {
    let (_server, hub) = hub(config(), &["dev1"]).await;
    let ca = CaFile::of(&hub);
    let options = endpoint(&hub, "dev1", &ca);
    assert_eq!(options.transport, transport);
    let client = DeviceClient::connect(options).await.unwrap();
    assert_eq!(client.state(), ConnectionState::Connected);
    hub.send("dev1", message_with_every_property()).unwrap();
    let m = receive(&client).await;
    assert_every_property(&m);
    assert_eq!(m.delivery_count(), Some(0));
    eventually(&hub, "dev1", "invisible", |q| {
        q.messages.len() == 1 && q.messages[0].state == MessageState::Invisible
    })
    .await;
    m.complete().unwrap();
    eventually(&hub, "dev1", "completed", |q| {
        q.depth == 0 && completed(q) == 1
    })
    .await;
    assert_eq!(feedback(&hub, "id 1/é").await, FeedbackStatus::Success);
    let e = m.complete().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let e = m.reject().unwrap_err();
    assert!(e.to_string().contains("already completed"), "{e}");
    assert_eq!(client.stats().acknowledged, 1);
    client.close().await;
    assert_eq!(client.state(), ConnectionState::Closed);
}

/// Settlements made just before `close()` are written before the link closes (none is left to
/// the hub's lock timeout and a redelivery).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlements_made_right_before_close_reach_the_hub() {
    let (_server, hub, _ca, client) = amqp_device(config(), amqp_tcp).await;
    for id in ["c1", "r1"] {
        hub.send("dev1", HubMessage::new(id).message_id(id))
            .unwrap();
    }
    let (first, second) = (receive(&client).await, receive(&client).await);
    first.complete().unwrap();
    second.reject().unwrap();
    client.close().await;
    eventually(&hub, "dev1", "settled before the close", |q| {
        q.depth == 0
            && completed(q) == 1
            && q.finished
                .iter()
                .any(|m| m.state == MessageState::DeadLettered)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_dead_letters_with_rejected_feedback() {
    for (_, endpoint) in AMQP_ENDPOINTS {
        rejects(endpoint).await;
    }
}

async fn rejects(endpoint: AmqpEndpoint) {
    let (_server, hub, _ca, client) = amqp_device(config(), endpoint).await;
    hub.send(
        "dev1",
        HubMessage::new("bad").message_id("r1").ack(Ack::Negative),
    )
    .unwrap();
    let m = receive(&client).await;
    m.reject().unwrap();
    eventually(&hub, "dev1", "dead-lettered", |q| {
        q.depth == 0 && finished(q, MessageState::DeadLettered) == 1
    })
    .await;
    assert_eq!(feedback(&hub, "r1").await, FeedbackStatus::Rejected);
    assert_eq!(m.abandon().unwrap_err().kind(), ErrorKind::InvalidArgument);
    // Nothing comes again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(client.try_receive().unwrap().is_none());
    assert_eq!(client.stats().rejected, 1);
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandon_redelivers_with_the_delivery_count_one_higher() {
    for (_, endpoint) in AMQP_ENDPOINTS {
        abandons(endpoint).await;
    }
}

async fn abandons(endpoint: AmqpEndpoint) {
    let (_server, hub, _ca, client) = amqp_device(config(), endpoint).await;
    hub.send(
        "dev1",
        HubMessage::new("later").message_id("a1").ack(Ack::Full),
    )
    .unwrap();
    let first = receive(&client).await;
    assert_eq!(first.delivery_count(), Some(0));
    first.abandon().unwrap();
    let second = receive(&client).await;
    assert_eq!(second.message_id.as_deref(), Some("a1"));
    assert_eq!(second.delivery_count(), Some(1));
    assert!(second.is_redelivery());
    second.complete().unwrap();
    eventually(&hub, "dev1", "completed once", |q| {
        q.depth == 0 && completed(q) == 1
    })
    .await;
    assert_eq!(feedback(&hub, "a1").await, FeedbackStatus::Success);
    let stats = client.stats();
    assert_eq!(
        (stats.abandoned, stats.acknowledged, stats.redelivered),
        (1, 1, 1)
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoning_past_the_max_delivery_count_dead_letters() {
    let config = IotHubConfig {
        max_delivery_count: 2,
        ..config()
    };
    let (_server, hub, _ca, client) = amqp_device(config, amqp_tcp).await;
    hub.send(
        "dev1",
        HubMessage::new("x").message_id("x1").ack(Ack::Negative),
    )
    .unwrap();
    for count in 0..2 {
        let m = receive(&client).await;
        assert_eq!(m.delivery_count(), Some(count));
        m.abandon().unwrap();
    }
    eventually(&hub, "dev1", "dead-lettered", |q| {
        q.depth == 0 && finished(q, MessageState::DeadLettered) == 1
    })
    .await;
    assert_eq!(
        feedback(&hub, "x1").await,
        FeedbackStatus::DeliveryCountExceeded
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        client.try_receive().unwrap().is_none(),
        "not delivered a third time"
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_are_settled_each_on_its_own_in_any_order() {
    let (_server, hub, _ca, client) = amqp_device(config(), amqp_tcp).await;
    for i in 0..4 {
        hub.send("dev1", HubMessage::new("o").message_id(format!("o{i}")))
            .unwrap();
    }
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(receive(&client).await);
    }
    // The last one first, while the first stays open: it is settled at once (no in-order
    // hold as over MQTT).
    got[3].complete().unwrap();
    eventually(&hub, "dev1", "o3 completed alone", |q| {
        completed(q) == 1 && q.depth == 3
    })
    .await;
    got[1].reject().unwrap();
    got[2].complete().unwrap();
    got[0].complete().unwrap();
    eventually(&hub, "dev1", "all settled", |q| {
        q.depth == 0 && completed(q) == 3 && finished(q, MessageState::DeadLettered) == 1
    })
    .await;
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_after_the_connection_dropped_is_lock_lost_and_the_message_comes_again() {
    let (_server, hub) = hub(config(), &["dev1"]).await;
    let ca = CaFile::of(&hub);
    let port = amqp_port(&hub);
    let client = DeviceClient::connect(amqp_options(&hub, "dev1", port, &ca))
        .await
        .unwrap();
    hub.send("dev1", HubMessage::new("x").message_id("kept"))
        .unwrap();
    let before = receive(&client).await;
    // A second connection of the device makes the hub drop the first (IoT Hub's one
    // connection per device); the client reconnects, which in turn drops the intruder.
    let intruder = DeviceClient::connect(amqp_options(&hub, "dev1", port, &ca))
        .await
        .unwrap();
    intruder.close().await;
    let again = receive(&client).await;
    assert_eq!(again.message_id.as_deref(), Some("kept"));
    assert!(again.is_redelivery());
    assert!(
        again.delivery_count() >= Some(1),
        "{:?}",
        again.delivery_count()
    );
    for e in [
        before.complete().unwrap_err(),
        before.reject().unwrap_err(),
        before.abandon().unwrap_err(),
    ] {
        assert_eq!(e.kind(), ErrorKind::LockLost, "{e}");
        assert!(e.to_string().contains("has closed"), "{e}");
    }
    again.complete().unwrap();
    eventually(&hub, "dev1", "completed once", |q| {
        q.depth == 0 && completed(q) == 1
    })
    .await;
    let stats = client.stats();
    assert!(stats.connections >= 2, "{stats:?}");
    assert_eq!(stats.stale_completions, 3, "{stats:?}");
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_superseded_after_the_lock_timeout_is_lock_lost_and_the_new_one_settles() {
    let config = IotHubConfig {
        lock_timeout: Duration::from_secs(2),
        ..config()
    };
    let (_server, hub, _ca, client) = amqp_device(config, amqp_tcp).await;
    hub.send("dev1", HubMessage::new("slow").message_id("s1"))
        .unwrap();
    let first = receive(&client).await;
    assert_eq!(first.message_id.as_deref(), Some("s1"));
    // Held past the 2 s lock: the hub gives it up and delivers it again on the same link (the
    // client releases the superseded delivery, so its credit comes back).
    let second = receive(&client).await;
    assert_eq!(second.message_id.as_deref(), Some("s1"));
    assert!(second.is_redelivery());
    assert_eq!(second.delivery_count(), Some(1));
    let e = first.complete().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LockLost, "{e}");
    assert!(e.to_string().contains("delivered it again"), "{e}");
    second.complete().unwrap();
    hub.send("dev1", HubMessage::new("next").message_id("s2"))
        .unwrap();
    let next = receive(&client).await;
    assert_eq!(next.message_id.as_deref(), Some("s2"));
    next.complete().unwrap();
    eventually(&hub, "dev1", "both completed once", |q| {
        q.depth == 0 && completed(q) == 2
    })
    .await;
    assert_eq!(client.stats().connections, 1);
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_token_lifetimes_are_renewed_on_the_open_connection_without_losing_a_message() {
    let (_server, hub) = hub(config(), &["dev1"]).await;
    let ca = CaFile::of(&hub);
    let options = amqp_options(&hub, "dev1", amqp_port(&hub), &ca)
        .with_token_lifetime(Duration::from_secs(10));
    let client = DeviceClient::connect(options).await.unwrap();
    // 24 s: at least two renewals (at 8 s and 16 s), messages flowing and one held open
    // across them.
    hub.send("dev1", HubMessage::new("held").message_id("held"))
        .unwrap();
    let held = receive(&client).await;
    for i in 0..24 {
        hub.send("dev1", HubMessage::new("t").message_id(format!("t{i}")))
            .unwrap();
        let m = receive(&client).await;
        assert!(!m.is_redelivery(), "{:?}", m.message_id);
        m.complete().unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    held.complete().unwrap();
    eventually(&hub, "dev1", "all completed", |q| {
        q.depth == 0 && completed(q) == 25
    })
    .await;
    let stats = client.stats();
    assert!(stats.token_renewals >= 2, "{stats:?}");
    assert_eq!(
        stats.connections, 1,
        "renewed without reconnecting: {stats:?}"
    );
    assert_eq!(client.state(), ConnectionState::Connected);
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_arrives_with_the_same_properties_as_over_mqtt() {
    let (_server, hub, _ca, client) = amqp_device(config(), amqp_tcp).await;
    let body: Vec<u8> = (0..=255u8).collect();
    client
        .send_event(
            Telemetry::new(body.clone())
                .message_id("tm 1")
                .correlation_id("c 1")
                .content_type("application/octet-stream")
                .content_encoding("binary")
                .property("place", "a/b&c=d é")
                .null_property("flag")
                .property("empty", ""),
        )
        .await
        .unwrap();
    let (got, t) = only_event(&hub, "dev1", "the disposition came after the hub kept it");
    assert_eq!(got, body);
    let sys = |k: &str| t.system_properties.get(k).cloned().flatten();
    assert_eq!(sys("$.mid").as_deref(), Some("tm 1"));
    assert_eq!(sys("$.cid").as_deref(), Some("c 1"));
    assert_eq!(sys("$.ct").as_deref(), Some("application/octet-stream"));
    assert_eq!(sys("$.ce").as_deref(), Some("binary"));
    assert_eq!(
        t.properties.get("place"),
        Some(&Some("a/b&c=d é".to_owned()))
    );
    assert_eq!(t.properties.get("flag"), Some(&None));
    assert_eq!(t.properties.get("empty"), Some(&Some(String::new())));
    let e = client
        .send_event(Telemetry::new("x").property("$.mid", "sneaky"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_are_authentication_errors() {
    let (_server, hub) = hub(config(), &["dev1"]).await;
    let ca = CaFile::of(&hub);
    let good = amqp_options(&hub, "dev1", amqp_port(&hub), &ca);
    let mut wrong = DeviceOptions::new(hub.config().hostname.clone(), "dev1", "d3Jvbmcga2V5")
        .with_transport(Transport::Amqp);
    wrong.connect_host = good.connect_host.clone();
    wrong.port = good.port;
    wrong.tls = good.tls.clone();
    let e = DeviceClient::connect(wrong).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Authentication, "{e}");
}

/// The hub is shut down while messages are in flight (received, not settled; settled, maybe
/// not yet written) and started again from its data dir on the same port: the client
/// reconnects, every message the hub acknowledged sending is delivered again or finished, and
/// none is completed twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_restarted_from_its_data_dir_loses_nothing_and_completes_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    // The same certificate before and after the restart (a generated one would change).
    let (_tls_dir, tls, ca) = fixed_tls();
    let config = IotHubConfig {
        data_dir: Some(dir.path().to_owned()),
        tls,
        ..config()
    };
    let (server, hub) = hub(config.clone(), &["dev1"]).await;
    let port = amqp_port(&hub);
    let client = DeviceClient::connect(amqp_options(&hub, "dev1", port, &ca))
        .await
        .unwrap();
    const N: usize = 20;
    for i in 0..N {
        hub.send(
            "dev1",
            HubMessage::new("p")
                .message_id(format!("p{i}"))
                .ack(Ack::Full),
        )
        .unwrap();
    }
    // Settle half (complete, reject, abandon in turn), keep the rest open.
    let mut open = Vec::new();
    let mut rejected = Vec::new();
    for i in 0..N {
        let m = receive(&client).await;
        let id = m.message_id.clone().unwrap();
        if i % 2 == 1 {
            open.push(m);
            continue;
        }
        match i % 6 {
            0 => m.complete().unwrap(),
            2 => {
                m.reject().unwrap();
                rejected.push(id);
            }
            _ => m.abandon().unwrap(),
        }
    }
    server.shutdown().await;
    // Restarted on the same AMQP port, from the data dir.
    let restarted = IotHubServer::start(IotHubConfig {
        admin_port: None,
        amqp_port: Some(port),
        ..config
    })
    .await
    .unwrap();
    let hub = restarted.hub();
    // Settling what arrived before the restart is refused: their link is gone.
    for m in &open {
        let e = m.complete().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::LockLost, "{e}");
    }
    // Everything not finished comes again; complete it all.
    let mut completions: HashMap<String, usize> = HashMap::new();
    let deadline = tokio::time::Instant::now() + WAIT * 2;
    loop {
        let q = hub.queue("dev1").unwrap();
        if q.depth == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{q:#?}");
        if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(1), client.receive()).await {
            match m.complete() {
                Ok(()) => {
                    *completions
                        .entry(m.message_id.clone().unwrap())
                        .or_default() += 1
                }
                // Received on the link before the restart and read only now: it comes again.
                Err(e) => assert_eq!(e.kind(), ErrorKind::LockLost, "{e}"),
            }
        }
    }
    assert!(completions.values().all(|&n| n == 1), "{completions:?}");
    let q = hub.queue("dev1").unwrap();
    // Every acknowledged send is finished: completed or dead-lettered (the rejected ones).
    let mut states: HashMap<String, MessageState> = HashMap::new();
    for m in &q.finished {
        let id = m.message_id.clone().unwrap();
        assert!(
            states.insert(id.clone(), m.state).is_none(),
            "{id} finished twice: {q:#?}"
        );
    }
    for i in 0..N {
        let id = format!("p{i}");
        let want = if rejected.contains(&id) {
            MessageState::DeadLettered
        } else {
            MessageState::Completed
        };
        assert_eq!(states.get(&id), Some(&want), "{id}: {q:#?}");
    }
    // Feedback: one terminal record per message, never two.
    let records = hub.recent_feedback();
    for i in 0..N {
        let id = format!("p{i}");
        let n = records
            .iter()
            .filter(|r| r.original_message_id.as_deref() == Some(id.as_str()))
            .count();
        assert!(n <= 1, "{id} has {n} feedback records");
    }
    assert!(client.stats().connections >= 2);
    client.close().await;
    restarted.shutdown().await;
}
