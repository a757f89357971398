//! Conformance of the local state store to docs/protocol.md, over raw MQTT5 (rumqttc directly, not
//! the mqstate client). Requests are built by hand as the protocol's byte sequences; every reply
//! is checked byte for byte with its properties (`__stat`, `__protVer`, `__ts`, correlation
//! data, content type). Every scenario runs against the embedded broker and against Mosquitto.

use std::time::Duration;

use crate::common::{self, Backend, Harness, Req, WAIT, resp};
use bytes::Bytes;
use mqstate::Hlc;
use mqstate::protocol::topics::{self, REQUEST_TOPIC};
use mqstate_server::ServerConfig;
use rumqttc::v5::mqttbytes::v5::PublishProperties;

const OK: &[u8] = b"+OK\r\n";
const NOT_APPLIED: &[u8] = b":-1\r\n";
const NIL: &[u8] = b"$-1\r\n";
const NOTIFY_DELETE: &[u8] = b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n";

/// `-ERR {text}\r\n`.
fn err(text: &str) -> Vec<u8> {
    format!("-ERR {text}\r\n").into_bytes()
}

/// `${n}\r\n{value}\r\n`.
fn bulk(value: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", value.len()).into_bytes();
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
    out
}

/// `NOTIFY SET VALUE {value}`.
fn notify_set(value: &[u8]) -> Vec<u8> {
    let mut out = b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n".to_vec();
    out.extend_from_slice(&bulk(value));
    out
}

/// CRUD with the exact byte sequences of docs/protocol.md.
async fn crud(h: &Harness) {
    let mut c = h.client("crud-client").await;
    let set = c
        .call(Bytes::from_static(
            b"*3\r\n$3\r\nSET\r\n$7\r\nSETKEY2\r\n$6\r\nVALUE5\r\n",
        ))
        .await;
    let v1 = set.check(b"+OK\r\n", true).unwrap();
    let get = c
        .call(Bytes::from_static(b"*2\r\n$3\r\nGET\r\n$7\r\nSETKEY2\r\n"))
        .await;
    assert_eq!(get.check(b"$6\r\nVALUE5\r\n", true), Some(v1.clone()));
    let del = c
        .call(Bytes::from_static(b"*2\r\n$3\r\nDEL\r\n$7\r\nSETKEY2\r\n"))
        .await;
    let v2 = del.check(b":1\r\n", true).unwrap();
    assert!(v2 > v1);
    let get = c
        .call(Bytes::from_static(b"*2\r\n$3\r\nGET\r\n$7\r\nSETKEY2\r\n"))
        .await;
    get.check(b"$-1\r\n", false);
    let del = c
        .call(Bytes::from_static(b"*2\r\n$3\r\nDEL\r\n$7\r\nSETKEY2\r\n"))
        .await;
    del.check(b":0\r\n", true);
    // Verbs in any case.
    c.call(resp(&[b"set", b"lower", b"v"]))
        .await
        .check(b"+OK\r\n", true);
    c.call(resp(&[b"gEt", b"lower"]))
        .await
        .check(b"$1\r\nv\r\n", true);
    c.disconnect().await;
}
both_backends!(crud);

/// PX expiry: the key is there before its deadline and gone after it (checked on access, so
/// this does not depend on timer precision); a plain SET clears the deadline.
async fn px_expiry(h: &Harness) {
    let mut c = h.client("px-client").await;
    c.call(resp(&[b"SET", b"pxkey", b"v", b"PX", b"100000"]))
        .await
        .check(OK, true);
    c.call(resp(&[b"GET", b"pxkey"]))
        .await
        .check(&bulk(b"v"), true);
    c.call(resp(&[b"SET", b"short", b"v", b"PX", b"50"]))
        .await
        .check(OK, true);
    tokio::time::sleep(Duration::from_millis(60)).await;
    c.call(resp(&[b"GET", b"short"])).await.check(NIL, false);
    // SET without PX removes the deadline.
    c.call(resp(&[b"SET", b"keep", b"v", b"PX", b"50"]))
        .await
        .check(OK, true);
    c.call(resp(&[b"SET", b"keep", b"w"])).await.check(OK, true);
    tokio::time::sleep(Duration::from_millis(60)).await;
    c.call(resp(&[b"GET", b"keep"]))
        .await
        .check(&bulk(b"w"), true);
    // PX that is not a positive integer.
    for px in [&b"0"[..], b"-1", b"abc"] {
        c.call(resp(&[b"SET", b"k", b"v", b"PX", px]))
            .await
            .check(&err("syntax error"), false);
    }
    c.disconnect().await;
}
both_backends!(px_expiry);

/// NX and NEX, with the exact bytes of `SET k v NX PX 1000`.
async fn conditional_set(h: &Harness) {
    let mut c = h.client("nx-client").await;
    let r = c
        .call(Bytes::from_static(
            b"*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nPX\r\n$4\r\n1000\r\n",
        ))
        .await;
    let v1 = r.check(OK, true).unwrap();
    let r = c.call(resp(&[b"SET", b"k", b"w", b"NX"])).await;
    let v2 = r.check(NOT_APPLIED, true).unwrap();
    assert!(v2 > v1);
    c.call(resp(&[b"GET", b"k"])).await.check(&bulk(b"v"), true);
    // NEX: applied when the value is equal, not applied otherwise; lower-case options.
    c.call(resp(&[b"SET", b"k", b"v", b"nex"]))
        .await
        .check(OK, true);
    c.call(resp(&[b"SET", b"k", b"w", b"NEX"]))
        .await
        .check(NOT_APPLIED, true);
    c.call(resp(&[b"SET", b"fresh", b"x", b"NEX"]))
        .await
        .check(OK, true);
    c.call(resp(&[b"set", b"fresh2", b"x", b"nx", b"px", b"5000"]))
        .await
        .check(OK, true);
    c.disconnect().await;
}
both_backends!(conditional_set);

/// VDEL: mismatch -1, match 1, missing 0 (exact bytes of `VDEL SETKEY2 ABC`).
async fn vdel(h: &Harness) {
    let mut c = h.client("vdel-client").await;
    let vdel_abc = Bytes::from_static(b"*3\r\n$4\r\nVDEL\r\n$7\r\nSETKEY2\r\n$3\r\nABC\r\n");
    c.call(vdel_abc.clone()).await.check(b":0\r\n", true);
    c.call(resp(&[b"SET", b"SETKEY2", b"XYZ"]))
        .await
        .check(OK, true);
    c.call(vdel_abc.clone()).await.check(NOT_APPLIED, true);
    c.call(resp(&[b"GET", b"SETKEY2"]))
        .await
        .check(&bulk(b"XYZ"), true);
    c.call(resp(&[b"SET", b"SETKEY2", b"ABC"]))
        .await
        .check(OK, true);
    c.call(vdel_abc.clone()).await.check(b":1\r\n", true);
    c.call(resp(&[b"GET", b"SETKEY2"])).await.check(NIL, false);
    c.disconnect().await;
}
both_backends!(vdel);

/// Observe one key: SET then DELETE notifications, each with the version of the write.
async fn observe_single_key(h: &Harness) {
    let mut observer = h.client("client-id1").await;
    let mut writer = h.client("writer-1").await;
    observer.subscribe_notifications().await;
    let r = observer
        .call(Bytes::from_static(
            b"*2\r\n$9\r\nKEYNOTIFY\r\n$7\r\nSOMEKEY\r\n",
        ))
        .await;
    r.check(OK, false);
    let set = writer.call(resp(&[b"SET", b"SOMEKEY", b"a\r\nb"])).await;
    let v1 = set.check(OK, true).unwrap();
    let n = observer
        .notification(b"SOMEKEY", WAIT)
        .await
        .expect("SET notification");
    assert_eq!(
        n.topic,
        "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/636C69656E742D696431/command/notify/534F4D454B4559"
    );
    assert_eq!(&n.payload[..], &notify_set(b"a\r\nb")[..]);
    assert_eq!(n.ts(), Some(v1));
    assert_eq!(n.qos, rumqttc::v5::mqttbytes::QoS::AtLeastOnce);
    let del = writer.call(resp(&[b"DEL", b"SOMEKEY"])).await;
    let v2 = del.check(b":1\r\n", true).unwrap();
    let n = observer
        .notification(b"SOMEKEY", WAIT)
        .await
        .expect("DELETE notification");
    assert_eq!(&n.payload[..], NOTIFY_DELETE);
    assert_eq!(n.ts(), Some(v2));
    // VDEL also notifies; a VDEL mismatch does not.
    writer
        .call(resp(&[b"SET", b"SOMEKEY", b"x"]))
        .await
        .check(OK, true);
    observer
        .notification(b"SOMEKEY", WAIT)
        .await
        .expect("SET notification");
    writer
        .call(resp(&[b"VDEL", b"SOMEKEY", b"y"]))
        .await
        .check(NOT_APPLIED, true);
    let vd = writer.call(resp(&[b"VDEL", b"SOMEKEY", b"x"])).await;
    let v3 = vd.check(b":1\r\n", true).unwrap();
    let n = observer
        .notification(b"SOMEKEY", WAIT)
        .await
        .expect("DELETE notification");
    assert_eq!(&n.payload[..], NOTIFY_DELETE);
    assert_eq!(n.ts(), Some(v3));
    observer.disconnect().await;
    writer.disconnect().await;
}
both_backends!(observe_single_key);

/// Observe, then the key expires: a DELETE notification (sent by the expiry timer, with no
/// request to trigger it). The test asserts it arrives, not how fast.
async fn observe_expiry(h: &Harness) {
    let mut c = h.client("expiry-observer").await;
    c.subscribe_notifications().await;
    c.call(resp(&[b"KEYNOTIFY", b"ttl"])).await.check(OK, false);
    let v = c
        .call(resp(&[b"SET", b"ttl", b"v", b"PX", b"50"]))
        .await
        .check(OK, true)
        .unwrap();
    let n = c
        .notification(b"ttl", WAIT)
        .await
        .expect("SET notification");
    assert_eq!(&n.payload[..], &notify_set(b"v")[..]);
    let n = c
        .notification(b"ttl", WAIT)
        .await
        .expect("DELETE notification on expiry");
    assert_eq!(&n.payload[..], NOTIFY_DELETE);
    assert!(n.ts().unwrap() > v);
    c.call(resp(&[b"GET", b"ttl"])).await.check(NIL, false);
    c.disconnect().await;
}
both_backends!(observe_expiry);

/// Unobserve, then silence; STOP of a key not observed is `:0`.
async fn unobserve(h: &Harness) {
    let mut c = h.client("unobserver").await;
    c.subscribe_notifications().await;
    c.call(resp(&[b"keynotify", b"k"])).await.check(OK, false);
    c.call(resp(&[b"KEYNOTIFY", b"k", b"STOP"]))
        .await
        .check(OK, false);
    c.call(resp(&[b"SET", b"k", b"v"])).await.check(OK, true);
    c.call(resp(&[b"DEL", b"k"])).await.check(b":1\r\n", true);
    assert!(
        c.notification(b"k", Duration::from_millis(300))
            .await
            .is_none()
    );
    c.call(resp(&[b"KEYNOTIFY", b"k", b"stop"]))
        .await
        .check(b":0\r\n", false);
    c.call(resp(&[b"KEYNOTIFY", b"k", b"NOPE"]))
        .await
        .check(&err("syntax error"), false);
    c.disconnect().await;
}
both_backends!(unobserve);

/// Two clients observing the same key both get the notification.
async fn two_observers(h: &Harness) {
    let mut a = h.client("observer-a").await;
    let mut b = h.client("observer-b").await;
    for c in [&mut a, &mut b] {
        c.subscribe_notifications().await;
        c.call(resp(&[b"KEYNOTIFY", b"shared"]))
            .await
            .check(OK, false);
    }
    let v = a
        .call(resp(&[b"SET", b"shared", b"1"]))
        .await
        .check(OK, true);
    for c in [&mut a, &mut b] {
        let n = c.notification(b"shared", WAIT).await.expect("notification");
        assert_eq!(&n.payload[..], &notify_set(b"1")[..]);
        assert_eq!(n.ts(), v);
    }
    a.disconnect().await;
    b.disconnect().await;
}
both_backends!(two_observers);

/// An empty value is a value, with a version (exact bytes of `SET k ""`).
async fn empty_value(h: &Harness) {
    let mut c = h.client("empty-client").await;
    let v = c
        .call(Bytes::from_static(
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n",
        ))
        .await
        .check(OK, true);
    let r = c.call(resp(&[b"GET", b"k"])).await;
    assert_eq!(r.check(b"$0\r\n\r\n", true), v);
    c.disconnect().await;
}
both_backends!(empty_value);

/// A 6,500-byte key and a 65,000-byte value (binary, with CR LF inside); a key that is not
/// UTF-8; a notification for the long key.
async fn large_key_and_value(h: &Harness) {
    let mut c = h.client("large-client").await;
    c.subscribe_notifications().await;
    let key: Vec<u8> = (0..6_500u32).map(|i| (i % 251) as u8).collect();
    let value: Vec<u8> = (0..65_000u32).map(|i| (i % 256) as u8).collect();
    c.call(resp(&[b"KEYNOTIFY", &key])).await.check(OK, false);
    let v = c.call(resp(&[b"SET", &key, &value])).await.check(OK, true);
    let r = c.call(resp(&[b"GET", &key])).await;
    assert_eq!(r.check(&bulk(&value), true), v);
    let n = c
        .notification(&key, WAIT)
        .await
        .expect("notification for the long key");
    assert_eq!(&n.payload[..], &notify_set(&value)[..]);
    let bad_utf8 = b"\xff\xfe\x00key";
    c.call(resp(&[b"SET", bad_utf8, b"\xc3\x28"]))
        .await
        .check(OK, true);
    c.call(resp(&[b"GET", bad_utf8]))
        .await
        .check(&bulk(b"\xc3\x28"), true);
    c.disconnect().await;
}
both_backends!(large_key_and_value);

/// A 10 MiB value (below both brokers' maximum packet size) round-trips.
async fn ten_mib_value(h: &Harness) {
    let mut c = h.client("huge-client").await;
    let value = vec![b'x'; 10 * 1024 * 1024];
    c.call(resp(&[b"SET", b"huge", &value]))
        .await
        .check(OK, true);
    let r = c.call(resp(&[b"GET", b"huge"])).await;
    r.check(&bulk(&value), true);
    c.disconnect().await;
}
both_backends!(ten_mib_value);

/// The request errors, each with its exact text.
async fn request_errors(h: &Harness) {
    let mut c = h.client("errors-client").await;
    let cases: Vec<(Bytes, Vec<u8>)> = vec![
        (resp(&[b"GET", b""]), err("the key length is zero")),
        (resp(&[b"SET", b"", b"v"]), err("the key length is zero")),
        (resp(&[b"DEL", b""]), err("the key length is zero")),
        (resp(&[b"PING"]), err("unknown command")),
        (resp(&[b"GET"]), err("wrong number of arguments")),
        (
            resp(&[b"GET", b"a", b"b"]),
            err("wrong number of arguments"),
        ),
        (resp(&[b"SET", b"k"]), err("wrong number of arguments")),
        (resp(&[b"VDEL", b"k"]), err("wrong number of arguments")),
        (resp(&[b"KEYNOTIFY"]), err("wrong number of arguments")),
        (resp(&[b"SET", b"k", b"v", b"XX"]), err("syntax error")),
        (
            resp(&[b"SET", b"k", b"v", b"NX", b"NEX"]),
            err("syntax error"),
        ),
        (resp(&[b"SET", b"k", b"v", b"PX"]), err("syntax error")),
        (Bytes::from_static(b""), err("syntax error")),
        (Bytes::from_static(b"GET k\r\n"), err("syntax error")),
        (
            Bytes::from_static(b"*2\r\n$3\r\nGET\r\n$10\r\nk\r\n"),
            err("syntax error"),
        ),
        (
            Bytes::from_static(b"*4294967295\r\n$3\r\nGET\r\n"),
            err("syntax error"),
        ),
        (
            Bytes::from_static(b"*99999999999999999999\r\n"),
            err("syntax error"),
        ),
        (Bytes::from_static(b"*1\r\n:1\r\n"), err("syntax error")),
    ];
    for (payload, reply) in cases {
        let r = c.call(payload.clone()).await;
        assert_eq!(r.payload, Bytes::from(reply.clone()), "request {payload:?}");
        r.check(&reply, false);
    }
    // Timestamps.
    let set = resp(&[b"SET", b"k", b"v"]);
    c.request(set.clone(), &Req::no_ts())
        .await
        .check(&err("missing timestamp"), false);
    c.request(set.clone(), &Req::ts("not-an-hlc"))
        .await
        .check(&err("malformed timestamp"), false);
    c.request(set.clone(), &Req::ts("12:+3:node"))
        .await
        .check(&err("malformed timestamp"), false);
    let future = Hlc::new(common::now_ms() + 120_000, 0, "errors-client").to_string();
    c.request(set.clone(), &Req::ts(future))
        .await
        .check(
            &err("the request timestamp is too far in the future; ensure that the client and broker system clocks are synchronized"),
            false,
        );
    // A timestamp from the past is fine; GET needs none.
    let past = Hlc::new(1, 0, "errors-client").to_string();
    c.request(set.clone(), &Req::ts(past)).await.check(OK, true);
    c.request(resp(&[b"GET", b"k"]), &Req::no_ts())
        .await
        .check(&bulk(b"v"), true);
    // Any width of zero padding.
    let short = format!("{}:0:x", common::now_ms());
    c.request(set, &Req::ts(short)).await.check(OK, true);
    c.disconnect().await;
}
both_backends!(request_errors);

/// The key quota.
async fn quota(h: &Harness) {
    let mut c = h.client("quota-client").await;
    c.call(resp(&[b"SET", b"a", b"1"])).await.check(OK, true);
    c.call(resp(&[b"SET", b"b", b"1"])).await.check(OK, true);
    c.call(resp(&[b"SET", b"c", b"1"]))
        .await
        .check(&err("the quota has been exceeded"), false);
    c.call(resp(&[b"SET", b"a", b"2"])).await.check(OK, true);
    c.call(resp(&[b"DEL", b"b"])).await.check(b":1\r\n", true);
    c.call(resp(&[b"SET", b"c", b"1"])).await.check(OK, true);
    c.disconnect().await;
}
both_backends!(quota, ServerConfig::default().with_max_keys(Some(2)));

/// Fencing tokens (docs/protocol.md section 5): token set, missing, lower, equal, newer, future;
/// DEL and VDEL follow the same checks; GET needs none.
async fn fencing(h: &Harness) {
    let mut c = h.client("Client1").await;
    let lease = c
        .call(resp(&[
            b"SET",
            b"LockName",
            b"Client1",
            b"NEX",
            b"PX",
            b"10000",
        ]))
        .await;
    let token = lease.check(OK, true).unwrap();
    let ft = token.to_string();
    // Token set with the key.
    c.request(resp(&[b"SET", b"ProtectedKey", b"1"]), &Req::ft(ft.clone()))
        .await
        .check(OK, true);
    // Missing token.
    c.call(resp(&[b"SET", b"ProtectedKey", b"2"]))
        .await
        .check(&err("a fencing token is required for this request"), false);
    // Lower token.
    let lower = Hlc::new(token.ms - 1, token.counter, token.node_id.clone()).to_string();
    c.request(resp(&[b"SET", b"ProtectedKey", b"3"]), &Req::ft(lower.clone()))
        .await
        .check(
            &err("the request fencing token is a lower version than the fencing token protecting the resource"),
            false,
        );
    // Equal token.
    c.request(resp(&[b"SET", b"ProtectedKey", b"4"]), &Req::ft(ft.clone()))
        .await
        .check(OK, true);
    // Future token (more than 60 s ahead).
    let future = Hlc::new(common::now_ms() + 120_000, 0, "StateStore").to_string();
    c.request(resp(&[b"SET", b"ProtectedKey", b"5"]), &Req::ft(future))
        .await
        .check(
            &err("the request fencing token timestamp is too far in the future; ensure that the client and broker system clocks are synchronized"),
            false,
        );
    // Malformed token.
    c.request(resp(&[b"SET", b"ProtectedKey", b"6"]), &Req::ft("x:y:z"))
        .await
        .check(&err("malformed timestamp"), false);
    // GET needs no token.
    c.call(resp(&[b"GET", b"ProtectedKey"]))
        .await
        .check(&bulk(b"4"), true);
    // A renewal gives a newer token, which then protects the key.
    let renewed = c
        .call(resp(&[
            b"SET",
            b"LockName",
            b"Client1",
            b"NEX",
            b"PX",
            b"10000",
        ]))
        .await
        .check(OK, true)
        .unwrap();
    assert!(renewed > token);
    c.request(
        resp(&[b"SET", b"ProtectedKey", b"7"]),
        &Req::ft(renewed.to_string()),
    )
    .await
    .check(OK, true);
    c.request(resp(&[b"SET", b"ProtectedKey", b"8"]), &Req::ft(ft.clone()))
        .await
        .check(
            &err("the request fencing token is a lower version than the fencing token protecting the resource"),
            false,
        );
    // DEL / VDEL.
    c.call(resp(&[b"DEL", b"ProtectedKey"]))
        .await
        .check(&err("a fencing token is required for this request"), false);
    c.request(resp(&[b"VDEL", b"ProtectedKey", b"7"]), &Req::ft(lower))
        .await
        .check(
            &err("the request fencing token is a lower version than the fencing token protecting the resource"),
            false,
        );
    c.request(
        resp(&[b"DEL", b"ProtectedKey"]),
        &Req::ft(renewed.to_string()),
    )
    .await
    .check(b":1\r\n", true);
    // The token went with the key.
    c.call(resp(&[b"SET", b"ProtectedKey", b"9"]))
        .await
        .check(OK, true);
    // Release the lock.
    c.call(resp(&[b"VDEL", b"LockName", b"Client1"]))
        .await
        .check(b":1\r\n", true);
    c.disconnect().await;
}
both_backends!(fencing);

/// Lease renewal with NEX: every renewal applies and returns a strictly greater version; a
/// GET returns the last one; another holder is refused.
async fn lease_renewal(h: &Harness) {
    let mut c = h.client("leaser").await;
    let mut last: Option<Hlc> = None;
    for _ in 0..20 {
        let v = c
            .call(resp(&[
                b"SET",
                b"lease",
                b"holder-1",
                b"NEX",
                b"PX",
                b"10000",
            ]))
            .await
            .check(OK, true)
            .unwrap();
        if let Some(prev) = &last {
            assert!(&v > prev, "{v} > {prev}");
        }
        last = Some(v);
    }
    let r = c.call(resp(&[b"GET", b"lease"])).await;
    assert_eq!(r.check(&bulk(b"holder-1"), true), last);
    c.call(resp(&[
        b"SET",
        b"lease",
        b"holder-2",
        b"NEX",
        b"PX",
        b"10000",
    ]))
    .await
    .check(NOT_APPLIED, true);
    c.disconnect().await;
}
both_backends!(lease_renewal);

/// Registrations are dropped when the client's connection ends: after a reconnect with the
/// same client id (subscribed again, but without KEYNOTIFY), no notification comes; after a
/// new KEYNOTIFY it does. With Mosquitto, disconnects are read from its log topic.
async fn registrations_dropped_after_disconnect(h: &Harness) {
    let mut writer = h.client("reg-writer").await;
    let mut c = h.client("reg-observer").await;
    c.subscribe_notifications().await;
    c.call(resp(&[b"KEYNOTIFY", b"rk"])).await.check(OK, false);
    writer
        .call(resp(&[b"SET", b"rk", b"1"]))
        .await
        .check(OK, true);
    c.notification(b"rk", WAIT)
        .await
        .expect("notification while registered");
    c.disconnect().await;

    // The server learns of the disconnect asynchronously: poll (bounded) until a write no
    // longer notifies the reconnected client.
    let mut c = h.client("reg-observer").await;
    c.subscribe_notifications().await;
    let mut dropped = false;
    for i in 0..50 {
        let value = format!("v{i}");
        writer
            .call(resp(&[b"SET", b"rk", value.as_bytes()]))
            .await
            .check(OK, true);
        if c.notification(b"rk", Duration::from_secs(1))
            .await
            .is_none()
        {
            dropped = true;
            break;
        }
    }
    assert!(dropped, "the registration survived the disconnect");
    // STOP now says it was not observed; a new KEYNOTIFY works.
    c.call(resp(&[b"KEYNOTIFY", b"rk", b"STOP"]))
        .await
        .check(b":0\r\n", false);
    c.call(resp(&[b"KEYNOTIFY", b"rk"])).await.check(OK, false);
    writer
        .call(resp(&[b"SET", b"rk", b"last"]))
        .await
        .check(OK, true);
    let n = c
        .notification(b"rk", WAIT)
        .await
        .expect("notification after KEYNOTIFY");
    assert_eq!(&n.payload[..], &notify_set(b"last")[..]);
    c.disconnect().await;
    writer.disconnect().await;
}
both_backends!(registrations_dropped_after_disconnect);

/// A session takeover (same client id connecting while the old connection is open) reports
/// the new connect before the old disconnect: a registration made on the new connection
/// survives the old one's end.
async fn registrations_survive_takeover(h: &Harness) {
    let mut writer = h.client("take-writer").await;
    let old = h.client("take-observer").await;
    let mut new = h.client("take-observer").await; // takes the session over
    new.subscribe_notifications().await;
    new.call(resp(&[b"KEYNOTIFY", b"tk"]))
        .await
        .check(OK, false);
    // Give the old connection's end time to be reported, then write.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(old);
    tokio::time::sleep(Duration::from_millis(200)).await;
    writer
        .call(resp(&[b"SET", b"tk", b"1"]))
        .await
        .check(OK, true);
    let n = new
        .notification(b"tk", WAIT)
        .await
        .expect("notification after takeover");
    assert_eq!(&n.payload[..], &notify_set(b"1")[..]);
    new.disconnect().await;
    writer.disconnect().await;
}
both_backends!(registrations_survive_takeover);

/// A QoS 1 duplicate (same client, same correlation data) is answered from the cache, not
/// executed twice: the second `SET NX` still says `+OK` with the same version, the second DEL
/// still says `:1`.
async fn duplicate_requests(h: &Harness) {
    let mut c = h.client("dup-client").await;
    let corr = common::new_correlation();
    let req = Req {
        correlation: Some(Some(corr.clone())),
        ..Req::default()
    };
    let first = c.request(resp(&[b"SET", b"dk", b"v", b"NX"]), &req).await;
    let v1 = first.check(OK, true);
    let again = c.request(resp(&[b"SET", b"dk", b"v", b"NX"]), &req).await;
    assert_eq!(again.check(OK, true), v1);
    // A new correlation id is a new request.
    c.call(resp(&[b"SET", b"dk", b"v", b"NX"]))
        .await
        .check(NOT_APPLIED, true);
    let corr = common::new_correlation();
    let req = Req {
        correlation: Some(Some(corr)),
        ..Req::default()
    };
    let d1 = c.request(resp(&[b"DEL", b"dk"]), &req).await;
    let dv = d1.check(b":1\r\n", true);
    let d2 = c.request(resp(&[b"DEL", b"dk"]), &req).await;
    assert_eq!(d2.check(b":1\r\n", true), dv);
    // Another client with the same correlation data is not a duplicate.
    let mut other = h.client("dup-other").await;
    other
        .request(resp(&[b"DEL", b"dk"]), &req)
        .await
        .check(b":0\r\n", true);
    other.disconnect().await;
    c.disconnect().await;
}
both_backends!(duplicate_requests);

/// A request with a forbidden response topic is not executed; nothing is published on that
/// topic; with the embedded broker the client is disconnected. Other clients are unaffected.
async fn forbidden_response_topic(h: &Harness) {
    let mut spy = h.client("spy").await;
    spy.subscribe(REQUEST_TOPIC).await;
    let forbidden_prefix = format!("{}/x/command/notify/AB", topics::FORBIDDEN_RESPONSE_PREFIX);
    spy.subscribe(&forbidden_prefix).await;
    let mut bad = h.client("bad-client").await;
    for (i, topic) in [REQUEST_TOPIC.to_owned(), forbidden_prefix.clone()]
        .into_iter()
        .enumerate()
    {
        let key = format!("forbidden{i}");
        let req = Req {
            response_topic: Some(Some(topic.clone())),
            ..Req::default()
        };
        bad.send(resp(&[b"SET", key.as_bytes(), b"v"]), &req).await;
        // The spy sees the request itself on the request topic, and nothing else.
        if h.store.backend() == Backend::Embedded {
            assert!(
                bad.disconnected_within(WAIT).await,
                "client not disconnected"
            );
            bad = h.client("bad-client").await;
        }
        let mut c = h.client("checker").await;
        c.call(resp(&[b"GET", key.as_bytes()]))
            .await
            .check(NIL, false);
        c.disconnect().await;
    }
    // No response was published on the forbidden topic (the request topic carries only the
    // two requests and the checker's GETs).
    let answer = spy
        .recv_where(Duration::from_millis(300), |p| {
            p.topic == forbidden_prefix.as_bytes()
                || (p.topic == REQUEST_TOPIC.as_bytes() && !p.payload.starts_with(b"*"))
        })
        .await;
    assert!(
        answer.is_none(),
        "a response went to a forbidden topic: {answer:?}"
    );
    bad.disconnect().await;
    spy.disconnect().await;
}
both_backends!(forbidden_response_topic);

/// Requests that cannot be answered (no correlation data, no response topic, an invalid
/// response topic) are dropped; the server keeps answering the next ones.
async fn unanswerable_requests_are_dropped(h: &Harness) {
    let mut c = h.client("dropper").await;
    c.call(resp(&[b"SET", b"ok", b"1"])).await.check(OK, true);
    let no_corr = Req {
        correlation: Some(None),
        ..Req::default()
    };
    c.send(resp(&[b"SET", b"nocorr", b"v"]), &no_corr).await;
    let no_topic = Req {
        response_topic: Some(None),
        ..Req::default()
    };
    c.send(resp(&[b"SET", b"notopic", b"v"]), &no_topic).await;
    // A request with no properties at all.
    c.publish_raw(
        REQUEST_TOPIC,
        resp(&[b"SET", b"noprops", b"v"]),
        PublishProperties::default(),
    )
    .await;
    c.call(resp(&[b"GET", b"nocorr"])).await.check(NIL, false);
    c.call(resp(&[b"GET", b"notopic"])).await.check(NIL, false);
    c.call(resp(&[b"GET", b"noprops"])).await.check(NIL, false);
    c.call(resp(&[b"GET", b"ok"]))
        .await
        .check(&bulk(b"1"), true);
    // Nothing but the answers above arrived on the response topic.
    let stray = c.recv_where(Duration::from_millis(200), |_| true).await;
    assert!(stray.is_none(), "{stray:?}");
    c.disconnect().await;
}
both_backends!(unanswerable_requests_are_dropped);

/// A burst of malformed payloads and valid requests interleaved: every one answered in
/// order, the server stays up.
async fn garbage_burst(h: &Harness) {
    let mut c = h.client("garbage-client").await;
    for i in 0u32..200 {
        let junk: Vec<u8> = (0..(i % 40)).map(|j| (i * 31 + j * 7) as u8).collect();
        let r = c.call(Bytes::from(junk)).await;
        assert!(r.payload.starts_with(b"-ERR "), "{:?}", r.payload);
        r.check(&r.payload.clone(), false);
    }
    c.call(resp(&[b"SET", b"alive", b"yes"]))
        .await
        .check(OK, true);
    c.call(resp(&[b"GET", b"alive"]))
        .await
        .check(&bulk(b"yes"), true);
    c.disconnect().await;
}
both_backends!(garbage_burst);

/// Persistent sessions: a client that connects with clean start off and a session expiry
/// gets "session present" when it reconnects, with its subscription kept (what the mqstate
/// client relies on to get its unacknowledged requests answered after a reconnect).
async fn sessions_are_kept(h: &Harness) {
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::mqttbytes::v5::Packet;
    use rumqttc::v5::{AsyncClient, Event, MqttOptions};

    async fn connect(h: &Harness) -> (AsyncClient, rumqttc::v5::EventLoop, bool) {
        let mut options = MqttOptions::new("session-client", h.store.host(), h.store.port());
        options
            .set_clean_start(false)
            .set_session_expiry_interval(Some(60));
        let (client, mut eventloop) = AsyncClient::new(options, 16);
        let present = tokio::time::timeout(WAIT, async {
            loop {
                if let Event::Incoming(Packet::ConnAck(ack)) = eventloop.poll().await.unwrap() {
                    return ack.session_present;
                }
            }
        })
        .await
        .unwrap();
        (client, eventloop, present)
    }

    let (client, mut eventloop, _) = connect(h).await;
    let topic = topics::response_topic("session-client");
    client
        .subscribe(topic.clone(), QoS::AtLeastOnce)
        .await
        .unwrap();
    tokio::time::timeout(WAIT, async {
        loop {
            if let Event::Incoming(Packet::SubAck(_)) = eventloop.poll().await.unwrap() {
                break;
            }
        }
    })
    .await
    .unwrap();
    client.disconnect().await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while eventloop.poll().await.is_ok() {}
    })
    .await;

    // While it is away, a request is answered: the response waits in its session.
    let mut other = h.client("session-helper").await;
    let corr = common::new_correlation();
    let req = Req {
        response_topic: Some(Some(topic.clone())),
        correlation: Some(Some(corr.clone())),
        ..Req::default()
    };
    other.send(resp(&[b"SET", b"sk", b"v"]), &req).await;
    // Make sure the store handled it before reconnecting.
    other
        .call(resp(&[b"GET", b"sk"]))
        .await
        .check(&bulk(b"v"), true);

    let (client, mut eventloop, present) = connect(h).await;
    assert!(present, "session present on reconnect");
    let publish = tokio::time::timeout(WAIT, async {
        loop {
            if let Event::Incoming(Packet::Publish(p)) = eventloop.poll().await.unwrap() {
                return p;
            }
        }
    })
    .await
    .expect("the queued response");
    assert_eq!(&publish.payload[..], OK);
    assert_eq!(
        publish.properties.unwrap().correlation_data,
        Some(corr),
        "queued response correlation"
    );
    client.disconnect().await.unwrap();
    other.disconnect().await;
}
both_backends!(sessions_are_kept);

/// A request larger than the embedded broker's maximum packet size is refused: it is not
/// executed, and the server keeps serving. (With an external broker its own limit applies;
/// the test Mosquitto's is 64 MiB, and rumqttc refuses to send more than a broker's limit.)
async fn oversize_request(h: &Harness) {
    let mut big = h.client("oversize-client").await;
    let value = vec![b'x'; 2 * 1024 * 1024];
    big.send(resp(&[b"SET", b"big", &value]), &Req::default())
        .await;
    let mut c = h.client("oversize-checker").await;
    // Bounded wait for a response that must not come.
    assert!(
        big.recv_where(Duration::from_millis(500), |_| true)
            .await
            .is_none(),
        "an oversize request was answered"
    );
    c.call(resp(&[b"GET", b"big"])).await.check(NIL, false);
    c.call(resp(&[b"SET", b"small", b"v"]))
        .await
        .check(OK, true);
    c.disconnect().await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_request_embedded() {
    let config = ServerConfig::default().with_max_packet_size(1024 * 1024);
    let h = Harness::start_with(Backend::Embedded, "oversize_request_embedded", config)
        .await
        .unwrap();
    oversize_request(&h).await;
    h.stop().await;
}

/// Many requests in flight from several clients at once: every one answered, with its own
/// correlation data, and the writes all applied.
async fn pipelined_burst(h: &Harness) {
    const CLIENTS: usize = 4;
    const PER_CLIENT: usize = 500;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let mut client = h.client(&format!("burst-{c}")).await;
        tasks.push(tokio::spawn(async move {
            let mut sent = Vec::with_capacity(PER_CLIENT);
            for i in 0..PER_CLIENT {
                let key = format!("burst-{c}-{i}");
                let corr = client
                    .send(resp(&[b"SET", key.as_bytes(), b"v"]), &Req::default())
                    .await
                    .unwrap();
                sent.push(corr);
            }
            let topic = client.response_topic.clone();
            let mut answered = 0;
            while answered < PER_CLIENT {
                let r = client
                    .recv_where(WAIT, |p| p.topic == topic.as_bytes())
                    .await
                    .expect("every request answered");
                assert!(sent.contains(r.correlation.as_ref().unwrap()));
                r.check(OK, true);
                answered += 1;
            }
            client.disconnect().await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut c = h.client("burst-check").await;
    c.call(resp(&[b"GET", b"burst-3-499"]))
        .await
        .check(&bulk(b"v"), true);
    c.disconnect().await;
}
both_backends!(pipelined_burst);
