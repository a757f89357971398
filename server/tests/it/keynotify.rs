//! KEYNOTIFY notifications for a client that never subscribed to its notification topic
//! (docs/protocol.md section 6.1): the embedded broker delivers them, as Azure IoT Operations'
//! broker does (the official Go SDK never subscribes, and the .NET SDK subscribes to a filter
//! that matches none); `implicit_notify: false` (`mqstate serve --no-implicit-notify`) turns
//! that off. Raw rumqttc clients over loopback, as the SDKs are on the wire.

use std::time::Duration;

use crate::common::{Backend, Harness, RawClient, WAIT, resp};
use bytes::Bytes;
use mqstate::protocol::topics;
use mqstate_server::ServerConfig;

const OK: &[u8] = b"+OK\r\n";
const NOTIFY_DELETE: &[u8] = b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n";

/// How long a notification that must not come is waited for (the ones that do come arrive
/// within milliseconds on loopback).
const QUIET: Duration = Duration::from_millis(700);

fn notify_set(value: &[u8]) -> Bytes {
    let mut out = format!(
        "*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n${}\r\n",
        value.len()
    )
    .into_bytes();
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
    Bytes::from(out)
}

async fn set(c: &mut RawClient, key: &[u8], value: &[u8]) {
    c.call(resp(&[b"SET", key, value])).await.check(OK, true);
}

async fn start(test: &str, implicit_notify: bool) -> Harness {
    let config = ServerConfig {
        implicit_notify,
        ..ServerConfig::default()
    };
    Harness::start_with(Backend::Embedded, test, config)
        .await
        .expect("the embedded broker needs nothing installed")
}

/// The Go SDK's `TestStateStoreObserveSingleKey` on the wire: KEYNOTIFY without a
/// subscription, a SET and a DEL by another client, each notified with its version; after
/// KEYNOTIFY STOP, nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_subscribes_gets_its_notifications() {
    let h = start("implicit-notify", true).await;
    // Subscribed to its response topic only, as the Go SDK's client is.
    let mut observer = h.client("go-observer").await;
    let mut writer = h.client("go-writer").await;

    observer
        .call(resp(&[b"KEYNOTIFY", b"k"]))
        .await
        .check(OK, false);
    set(&mut writer, b"k", b"v1").await;
    let n = observer
        .notification(b"k", WAIT)
        .await
        .expect("SET notified");
    assert_eq!(n.payload, notify_set(b"v1"));
    assert!(n.ts().is_some(), "a notification carries the key's version");
    assert_eq!(
        n.topic,
        topics::notification_topic("go-observer", b"k"),
        "on the protocol's topic"
    );

    writer
        .call(resp(&[b"DEL", b"k"]))
        .await
        .check(b":1\r\n", true);
    let n = observer
        .notification(b"k", WAIT)
        .await
        .expect("DEL notified");
    assert_eq!(n.payload, Bytes::from_static(NOTIFY_DELETE));

    // The writer observes nothing: it gets nothing, although it is a client of the same broker.
    assert!(writer.notification(b"k", QUIET).await.is_none());

    observer
        .call(resp(&[b"KEYNOTIFY", b"k", b"STOP"]))
        .await
        .check(OK, false);
    set(&mut writer, b"k", b"v2").await;
    assert!(
        observer.notification(b"k", QUIET).await.is_none(),
        "no notification after STOP"
    );
    observer.disconnect().await;
    writer.disconnect().await;
    h.stop().await;
}

/// A client that subscribed as docs/protocol.md section 6 says (mqstate, the Rust SDK) gets
/// each notification exactly once: no second, implicit subscription beside its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribed_client_gets_each_notification_once() {
    let h = start("implicit-notify-once", true).await;
    let mut observer = h.client("rust-observer").await;
    observer.subscribe_notifications().await;
    let mut writer = h.client("rust-writer").await;
    observer
        .call(resp(&[b"KEYNOTIFY", b"k"]))
        .await
        .check(OK, false);
    set(&mut writer, b"k", b"v1").await;
    set(&mut writer, b"k", b"v2").await;
    for value in [&b"v1"[..], b"v2"] {
        let n = observer.notification(b"k", WAIT).await.expect("notified");
        assert_eq!(n.payload, notify_set(value));
    }
    assert!(
        observer.notification(b"k", QUIET).await.is_none(),
        "each notification once"
    );
    observer.disconnect().await;
    writer.disconnect().await;
    h.stop().await;
}

/// A registration belongs to its connection (section 6): a client that comes back sends
/// KEYNOTIFY again (the Go SDK does, on every connect) and is notified again, still without
/// subscribing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reconnects_and_registers_again_is_notified_again() {
    let h = start("implicit-notify-reconnect", true).await;
    let mut writer = h.client("again-writer").await;
    let mut observer = h.client("again-observer").await;
    observer
        .call(resp(&[b"KEYNOTIFY", b"k"]))
        .await
        .check(OK, false);
    observer.disconnect().await;

    let mut observer = h.client("again-observer").await;
    set(&mut writer, b"k", b"before").await;
    assert!(
        observer.notification(b"k", QUIET).await.is_none(),
        "the registration ended with the connection"
    );
    observer
        .call(resp(&[b"KEYNOTIFY", b"k"]))
        .await
        .check(OK, false);
    set(&mut writer, b"k", b"v").await;
    let n = observer
        .notification(b"k", WAIT)
        .await
        .expect("notified after the new registration");
    assert_eq!(n.payload, notify_set(b"v"));
    observer.disconnect().await;
    writer.disconnect().await;
    h.stop().await;
}

/// With `--no-implicit-notify`, the protocol as published: no subscription, no notification;
/// the subscribed client still gets them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_implicit_notify_only_subscribers_are_notified() {
    let h = start("no-implicit-notify", false).await;
    let mut unsubscribed = h.client("plain-observer").await;
    let mut subscribed = h.client("subscribed-observer").await;
    subscribed.subscribe_notifications().await;
    let mut writer = h.client("plain-writer").await;
    for c in [&mut unsubscribed, &mut subscribed] {
        c.call(resp(&[b"KEYNOTIFY", b"k"])).await.check(OK, false);
    }
    set(&mut writer, b"k", b"v").await;
    let n = subscribed
        .notification(b"k", WAIT)
        .await
        .expect("the subscriber is notified");
    assert_eq!(n.payload, notify_set(b"v"));
    assert!(
        unsubscribed.notification(b"k", QUIET).await.is_none(),
        "no subscription, no notification"
    );
    for c in [unsubscribed, subscribed, writer] {
        c.disconnect().await;
    }
    h.stop().await;
}
