//! The monitor's unit tests: key views, leases and the feed, clients and their KEYNOTIFY
//! registrations, metrics, and an expiry on the feed.

use super::*;

fn entry(value: &'static [u8], expires_at: Option<Instant>) -> Entry {
    Entry {
        value: Bytes::from_static(value),
        version: Hlc::new(5, 0, "StateStore"),
        fencing_token: None,
        expires_at,
        persist: false,
    }
}

#[test]
fn key_views_leases_and_feed() {
    let m = Monitor::new();
    let mut rx = m.subscribe();
    let later = Instant::now() + Duration::from_secs(60);
    m.key_set(&Bytes::from_static(b"app/a"), &entry(b"1", None), false);
    m.key_set(
        &Bytes::from_static(b"app/b"),
        &entry(b"\x00\x01", None),
        false,
    );
    m.key_set(
        &Bytes::from_static(b"lock"),
        &entry(b"me", Some(later)),
        true,
    );
    let view = KeyView::of(b"app/b", &entry(b"\x00\x01", None), false, Instant::now());
    assert_eq!((view.value.as_str(), view.value_encoding), ("0001", "hex"));
    assert!(m.is_lease(b"lock") && !m.is_lease(b"app/a"));
    let leases = m.leases();
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].holder, "me");
    assert_eq!(leases[0].token, Hlc::new(5, 0, "StateStore").to_string());
    m.key_deleted(&Bytes::from_static(b"lock"), None, ChangeKind::Expire);
    assert!(m.leases().is_empty());
    assert!(!m.is_lease(b"lock"));
    let kinds: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok())
        .map(|c| c.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            ChangeKind::Set,
            ChangeKind::Set,
            ChangeKind::Set,
            ChangeKind::Expire
        ]
    );
    assert_eq!(m.recent_changes().len(), 4);
}

#[test]
fn clients_and_registrations() {
    let m = Monitor::new();
    m.client_connected("c1");
    m.keynotify("c1", &Bytes::from_static(b"k"), true);
    assert_eq!(m.clients()[0].keynotify, ["k"]);
    m.client_disconnected("c1");
    assert!(m.clients().is_empty());
}

#[test]
fn metrics_count_and_p99() {
    let m = Monitor::new();
    for i in 1..=100 {
        m.request_handled(Duration::from_micros(i));
    }
    let metrics = m.metrics();
    assert_eq!(metrics.total_requests, 100);
    assert_eq!(metrics.requests.iter().sum::<u64>(), 100);
    // The 100 requests may straddle a second; the later second holds the slowest one.
    let max = metrics.p99_micros.iter().max().copied();
    assert!(max.is_some_and(|p| (98..=100).contains(&p)), "{max:?}");
    assert_eq!(p99(&[]), 0);
    assert_eq!(p99(&(1..=100).collect::<Vec<_>>()), 99);
}

/// The example that was in this module's documentation.
#[test]
fn the_feed_sees_an_expiry() {
    use crate::dashboard::monitor::{ChangeKind, Monitor};
    use bytes::Bytes;

    let monitor = Monitor::new();
    let mut feed = monitor.subscribe();
    monitor.key_deleted(&Bytes::from_static(b"k"), None, ChangeKind::Expire);
    assert_eq!(feed.try_recv().unwrap().kind, ChangeKind::Expire);
}
