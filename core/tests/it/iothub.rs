//! The IoT Hub device client against the local IoT Hub (mqstate-server's `iothub`), over
//! loopback TCP, with shortened lock timeouts and token lifetimes.

use std::time::Duration;

use mqstate::iothub::{DeviceClient, DeviceOptions, Telemetry};
use mqstate::{ConnectionState, ErrorKind};
use mqstate_server::iothub::{C2dMessage as HubMessage, IotHubConfig, MessageState};

use crate::common::iothub::{
    WAIT, assert_every_property, completed, eventually, hub, message_with_every_property,
    mqtt_options as options, only_event, receive,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receives_every_system_property_url_decoded_with_null_and_empty() {
    let (_server, hub) = hub(IotHubConfig::default(), &["dev1"]).await;
    let client = DeviceClient::connect(options(&hub, "dev1")).await.unwrap();
    assert_eq!(client.state(), ConnectionState::Connected);
    hub.send("dev1", message_with_every_property()).unwrap();
    let m = receive(&client).await;
    assert_every_property(&m);
    // Not completed yet: the hub holds it Invisible.
    eventually(&hub, "dev1", "invisible", |q| {
        q.messages.len() == 1 && q.messages[0].state == MessageState::Invisible
    })
    .await;
    m.complete().unwrap();
    eventually(&hub, "dev1", "completed", |q| {
        q.depth == 0 && completed(q) == 1
    })
    .await;
    let e = m.complete().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    client.close().await;
    assert_eq!(client.state(), ConnectionState::Closed);
}

/// A completion made just before `close()` is acknowledged before the connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_made_right_before_close_reaches_the_hub() {
    let (_server, hub) = hub(IotHubConfig::default(), &["dev1"]).await;
    let client = DeviceClient::connect(options(&hub, "dev1")).await.unwrap();
    hub.send("dev1", HubMessage::new("x").message_id("c1"))
        .unwrap();
    receive(&client).await.complete().unwrap();
    client.close().await;
    eventually(&hub, "dev1", "completed before the close", |q| {
        q.depth == 0 && completed(q) == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_and_abandon_are_not_supported_over_mqtt() {
    let (_server, hub) = hub(IotHubConfig::default(), &["dev1"]).await;
    let client = DeviceClient::connect(options(&hub, "dev1")).await.unwrap();
    hub.send("dev1", HubMessage::new("x").message_id("m1"))
        .unwrap();
    let m = receive(&client).await;
    for e in [m.reject().unwrap_err(), m.abandon().unwrap_err()] {
        assert_eq!(e.kind(), ErrorKind::NotSupported);
        assert!(e.to_string().contains("not supported over MQTT"), "{e}");
    }
    // Neither touched the message: it is still locked, and completes normally.
    assert_eq!(
        hub.queue("dev1").unwrap().messages[0].state,
        MessageState::Invisible
    );
    m.complete().unwrap();
    eventually(&hub, "dev1", "completed", |q| completed(q) == 1).await;
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_not_completed_is_redelivered_after_the_lock_timeout() {
    let config = IotHubConfig {
        lock_timeout: Duration::from_secs(2),
        ..IotHubConfig::default()
    };
    let (_server, hub) = hub(config, &["dev1"]).await;
    let client = DeviceClient::connect(options(&hub, "dev1")).await.unwrap();
    hub.send("dev1", HubMessage::new("again").message_id("m-redeliver"))
        .unwrap();
    let first = receive(&client).await;
    assert!(!first.is_redelivery());
    // Left uncompleted: after 2 s the hub takes it back and delivers it again.
    let second = receive(&client).await;
    assert_eq!(second.message_id.as_deref(), Some("m-redeliver"));
    assert!(second.is_redelivery(), "a redelivery is recognisable");
    assert!(client.stats().redelivered >= 1);
    // Completing the redelivered copy alone completes the message: the first copy, whose lock
    // the hub gave up, no longer holds the in-order acknowledgements back.
    second.complete().unwrap();
    eventually(&hub, "dev1", "completed once", |q| {
        q.depth == 0 && completed(q) == 1
    })
    .await;
    let e = first.complete().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LockLost, "{e}");
    assert!(e.to_string().contains("delivered again"), "{e}");
    let info = &hub.queue("dev1").unwrap().finished[0];
    assert!(info.delivery_count >= 2, "{info:?}");
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_out_of_order_are_acknowledged_in_order_and_nothing_is_lost() {
    let (_server, hub) = hub(IotHubConfig::default(), &["dev1"]).await;
    let client = DeviceClient::connect(options(&hub, "dev1")).await.unwrap();
    for i in 0..10 {
        hub.send(
            "dev1",
            HubMessage::new(format!("{i}")).message_id(format!("m{i}")),
        )
        .unwrap();
    }
    let mut got = Vec::new();
    for _ in 0..10 {
        got.push(receive(&client).await);
    }
    let ids: Vec<_> = got.iter().map(|m| m.message_id.clone().unwrap()).collect();
    assert_eq!(ids, (0..10).map(|i| format!("m{i}")).collect::<Vec<_>>());
    // Complete the last nine, in reverse: their PUBACKs are held behind m0.
    for m in got[1..].iter().rev() {
        m.complete().unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let q = hub.queue("dev1").unwrap();
    assert_eq!(q.depth, 10, "nothing acknowledged while m0 is open: {q:#?}");
    assert_eq!(client.stats().acknowledged, 0);
    got[0].complete().unwrap();
    eventually(&hub, "dev1", "all completed", |q| {
        q.depth == 0 && completed(q) == 10
    })
    .await;
    // The client counts its PUBACKs once their write is flushed, which can come after the hub
    // has read them: wait for the count rather than read it once.
    let deadline = tokio::time::Instant::now() + WAIT;
    while client.stats().acknowledged < 10 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            client.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(client.stats().acknowledged, 10);
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_receive_buffer_stops_reading_instead_of_acknowledging() {
    let (_server, hub) = hub(IotHubConfig::default(), &["dev1"]).await;
    let client = DeviceClient::connect(options(&hub, "dev1").with_receive_buffer(3))
        .await
        .unwrap();
    for i in 0..8 {
        hub.send("dev1", HubMessage::new("x").message_id(format!("m{i}")))
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Three were read; the client read no further and acknowledged nothing.
    assert_eq!(client.stats().received, 3);
    assert_eq!(hub.queue("dev1").unwrap().depth, 8);
    let mut done = 0;
    while done < 8 {
        let m = receive(&client).await;
        assert_eq!(m.message_id.as_deref(), Some(format!("m{done}").as_str()));
        m.complete().unwrap();
        done += 1;
    }
    eventually(&hub, "dev1", "all completed", |q| {
        q.depth == 0 && completed(q) == 8
    })
    .await;
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_sent_while_offline_arrive_after_reconnecting() {
    let (_server, hub) = hub(IotHubConfig::default(), &["dev1"]).await;
    let client = DeviceClient::connect(options(&hub, "dev1")).await.unwrap();
    client.close().await;
    for i in 0..3 {
        hub.send(
            "dev1",
            HubMessage::new("offline").message_id(format!("off{i}")),
        )
        .unwrap();
    }
    let client = DeviceClient::connect(options(&hub, "dev1")).await.unwrap();
    for i in 0..3 {
        let m = receive(&client).await;
        assert_eq!(m.message_id.as_deref(), Some(format!("off{i}").as_str()));
        m.complete().unwrap();
    }
    eventually(&hub, "dev1", "all completed", |q| {
        q.depth == 0 && completed(q) == 3
    })
    .await;
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_is_restored_and_open_messages_come_back_as_redeliveries() {
    let (_server, hub) = hub(IotHubConfig::default(), &["dev1"]).await;
    let client = DeviceClient::connect(options(&hub, "dev1")).await.unwrap();
    hub.send("dev1", HubMessage::new("x").message_id("kept"))
        .unwrap();
    let before = receive(&client).await;
    // A second connection with the same device id makes the hub drop the first (as IoT Hub
    // does); the client reconnects, which in turn drops the intruder.
    let intruder = DeviceClient::connect(options(&hub, "dev1")).await.unwrap();
    intruder.close().await;
    let again = receive(&client).await;
    assert_eq!(again.message_id.as_deref(), Some("kept"));
    assert!(again.is_redelivery());
    let e = before.complete().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LockLost, "{e}");
    again.complete().unwrap();
    eventually(&hub, "dev1", "completed", |q| {
        q.depth == 0 && completed(q) == 1
    })
    .await;
    assert!(client.stats().connections >= 2);
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_token_lifetimes_are_renewed_without_losing_a_message() {
    let (_server, hub) = hub(IotHubConfig::default(), &["dev1"]).await;
    let client =
        DeviceClient::connect(options(&hub, "dev1").with_token_lifetime(Duration::from_secs(10)))
            .await
            .unwrap();
    // 24 s: at least two renewals (at 8 s and 16 s), messages flowing throughout.
    let mut received = 0;
    for i in 0..24 {
        hub.send("dev1", HubMessage::new("t").message_id(format!("t{i}")))
            .unwrap();
        let m = receive(&client).await;
        if !m.is_redelivery() {
            received += 1;
        }
        let _ = m.complete();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eventually(&hub, "dev1", "all completed", |q| {
        q.depth == 0 && completed(q) == 24
    })
    .await;
    assert_eq!(received, 24);
    let stats = client.stats();
    assert!(stats.token_renewals >= 2, "{stats:?}");
    assert_eq!(client.state(), ConnectionState::Connected);
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_with_properties_arrives_byte_exact() {
    let (_server, hub) = hub(IotHubConfig::default(), &["dev1"]).await;
    let client = DeviceClient::connect(options(&hub, "dev1")).await.unwrap();
    let body: Vec<u8> = (0..=255u8).collect();
    client
        .send_event(
            Telemetry::new(body.clone())
                .message_id("tm 1")
                .content_type("application/octet-stream")
                .property("place", "a/b&c=d é")
                .null_property("flag")
                .property("empty", ""),
        )
        .await
        .unwrap();
    let (got, t) = only_event(&hub, "dev1", "the PUBACK came after the hub kept it");
    assert_eq!(got, body);
    assert_eq!(
        t.system_properties.get("$.mid"),
        Some(&Some("tm 1".to_owned()))
    );
    assert_eq!(
        t.system_properties.get("$.ct"),
        Some(&Some("application/octet-stream".to_owned()))
    );
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
    let (_server, hub) = hub(IotHubConfig::default(), &["dev1"]).await;
    let port = hub.endpoints().device_endpoint.unwrap().port();
    let wrong = DeviceOptions::new(hub.config().hostname.clone(), "dev1", "d3Jvbmcga2V5")
        .with_plain_tcp("127.0.0.1", port);
    let e = DeviceClient::connect(wrong).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Authentication, "{e}");
    let unknown = DeviceOptions::new(hub.config().hostname.clone(), "nobody", "d3Jvbmcga2V5")
        .with_plain_tcp("127.0.0.1", port);
    let e = DeviceClient::connect(unknown).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Authentication, "{e}");
    // A fixed token that has expired.
    let mut expired = options(&hub, "dev1");
    expired.auth = mqstate::iothub::DeviceAuth::SasToken(
        mqstate::iothub::sas::token(
            &expired.resource_uri(),
            match &expired.auth {
                mqstate::iothub::DeviceAuth::SharedAccessKey { key, .. } => key,
                _ => unreachable!(),
            },
            1_000,
            None,
        )
        .unwrap(),
    );
    let e = DeviceClient::connect(expired).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Authentication, "{e}");
    assert!(e.to_string().contains("expired"), "{e}");
}
