//! The handler's unit tests: every rule of docs/protocol.md it applies, request by request.

use super::*;
use mqstate::protocol::hlc::ManualClock;
use mqstate::protocol::resp3::{
    SetCondition, encode_del, encode_get, encode_keynotify, encode_set, encode_vdel,
};

const NOW_MS: u64 = 1_700_000_000_000;

struct T {
    h: Handler,
    wall: Arc<ManualClock>,
    t0: Instant,
}

fn setup(max_keys: Option<usize>) -> T {
    let wall = Arc::new(ManualClock::new(NOW_MS));
    let h = Handler::new(HandlerConfig {
        max_keys,
        wall_clock: Some(wall.clone()),
        ..HandlerConfig::default()
    });
    T {
        h,
        wall,
        t0: Instant::now(),
    }
}

fn ts(ms: u64) -> String {
    Hlc::new(ms, 0, "client").to_string()
}

fn ctx<'a>(ts: Option<&'a str>, ft: Option<&'a str>) -> RequestContext<'a> {
    RequestContext {
        client_id: Some("client"),
        timestamp: ts,
        fencing_token: ft,
        persist: false,
    }
}

fn set(key: &[u8], value: &[u8], c: SetCondition, px: Option<u64>) -> Bytes {
    let mut b = BytesMut::new();
    encode_set(&mut b, key, value, c, px);
    b.freeze()
}

fn req(f: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut b = BytesMut::new();
    f(&mut b);
    b.freeze()
}

impl T {
    fn run(&mut self, c: RequestContext<'_>, payload: &Bytes) -> Outcome {
        self.h.handle(&c, payload, self.t0)
    }
    fn plain(&mut self, payload: &Bytes) -> Outcome {
        let t = ts(NOW_MS);
        self.run(ctx(Some(&t), None), payload)
    }
}

#[test]
fn set_then_get_returns_the_same_version() {
    let mut t = setup(None);
    let client_ts = ts(NOW_MS);
    let o = t.run(
        ctx(Some(&client_ts), None),
        &set(b"k", b"v", SetCondition::Always, None),
    );
    assert_eq!(&o.answer.payload[..], b"+OK\r\n");
    let v = o.answer.timestamp.unwrap();
    assert!(v > client_ts.parse().unwrap());
    assert_eq!(v.node_id, "StateStore");
    let o = t.plain(&req(|b| encode_get(b, b"k")));
    assert_eq!(&o.answer.payload[..], b"$1\r\nv\r\n");
    assert_eq!(o.answer.timestamp, Some(v));
    let o = t.plain(&req(|b| encode_get(b, b"missing")));
    assert_eq!(&o.answer.payload[..], b"$-1\r\n");
    assert_eq!(o.answer.timestamp, None);
}

#[test]
fn timestamps_are_checked() {
    let mut t = setup(None);
    let s = set(b"k", b"v", SetCondition::Always, None);
    let o = t.run(ctx(None, None), &s);
    assert_eq!(&o.answer.payload[..], b"-ERR missing timestamp\r\n");
    assert_eq!(o.answer.timestamp, None);
    let o = t.run(ctx(Some("garbage"), None), &s);
    assert_eq!(&o.answer.payload[..], b"-ERR malformed timestamp\r\n");
    let future = ts(NOW_MS + 60_001);
    let o = t.run(ctx(Some(&future), None), &s);
    assert_eq!(
        o.answer.payload,
        Answer::error(&ServiceError::TimestampSkew).payload
    );
    // Exactly 60 s ahead is accepted; far behind too.
    let edge = ts(NOW_MS + 60_000);
    assert_eq!(
        &t.run(ctx(Some(&edge), None), &s).answer.payload[..],
        b"+OK\r\n"
    );
    let old = ts(1);
    assert_eq!(
        &t.run(ctx(Some(&old), None), &s).answer.payload[..],
        b"+OK\r\n"
    );
    // GET without __ts is fine.
    let o = t.run(ctx(None, None), &req(|b| encode_get(b, b"k")));
    assert_eq!(&o.answer.payload[..], b"$1\r\nv\r\n");
    // A bad __ft.
    let now = ts(NOW_MS);
    let o = t.run(ctx(Some(&now), Some("1:2")), &s);
    assert_eq!(&o.answer.payload[..], b"-ERR malformed timestamp\r\n");
    let o = t.run(ctx(Some(&now), Some(&future)), &s);
    assert_eq!(
        o.answer.payload,
        Answer::error(&ServiceError::FencingTokenSkew).payload
    );
}

#[test]
fn versions_strictly_increase_even_for_nex_renewals() {
    let mut t = setup(None);
    let nex = set(b"lock", b"me", SetCondition::NotExistsOrEqual, Some(10_000));
    let mut last: Option<Hlc> = None;
    for _ in 0..5 {
        let o = t.plain(&nex);
        assert_eq!(&o.answer.payload[..], b"+OK\r\n");
        let v = o.answer.timestamp.unwrap();
        if let Some(prev) = &last {
            assert!(&v > prev);
        }
        last = Some(v);
    }
    let other = set(
        b"lock",
        b"you",
        SetCondition::NotExistsOrEqual,
        Some(10_000),
    );
    let o = t.plain(&other);
    assert_eq!(&o.answer.payload[..], b":-1\r\n");
    assert!(o.answer.timestamp.is_some());
}

#[test]
fn notifications_on_set_delete_and_expiry() {
    let mut t = setup(None);
    let o = t.plain(&req(|b| encode_keynotify(b, b"k", false)));
    assert_eq!(&o.answer.payload[..], b"+OK\r\n");
    assert_eq!(o.answer.timestamp, None);
    let o = t.plain(&set(b"k", b"v", SetCondition::Always, None));
    assert_eq!(o.notifications.len(), 1);
    let n = &o.notifications[0];
    assert_eq!(
        &n.payload[..],
        b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$1\r\nv\r\n"
    );
    assert_eq!(Some(&n.version), o.answer.timestamp.as_ref());
    assert_eq!(n.topic, topics::notification_topic("client", b"k"));
    // Not applied: no notification.
    let o = t.plain(&set(b"k", b"v", SetCondition::NotExists, None));
    assert!(o.notifications.is_empty());
    let o = t.plain(&req(|b| encode_vdel(b, b"k", b"x")));
    assert_eq!(&o.answer.payload[..], b":-1\r\n");
    assert!(o.notifications.is_empty());
    let o = t.plain(&req(|b| encode_del(b, b"k")));
    assert_eq!(&o.answer.payload[..], b":1\r\n");
    assert_eq!(
        &o.notifications[0].payload[..],
        b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n"
    );
    assert_eq!(
        Some(&o.notifications[0].version),
        o.answer.timestamp.as_ref()
    );
    let o = t.plain(&req(|b| encode_del(b, b"k")));
    assert_eq!(&o.answer.payload[..], b":0\r\n");
    assert!(o.notifications.is_empty());

    // Expiry.
    let o = t.plain(&set(b"k", b"v", SetCondition::Always, Some(50)));
    let v = o.answer.timestamp.unwrap();
    assert_eq!(t.h.next_deadline(), Some(t.t0 + Duration::from_millis(50)));
    assert!(t.h.expire(t.t0 + Duration::from_millis(49)).is_empty());
    t.wall.advance(Duration::from_millis(50));
    let n = t.h.expire(t.t0 + Duration::from_millis(50));
    assert_eq!(n.len(), 1);
    assert_eq!(&n[0].payload[..], b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n");
    assert!(n[0].version > v);

    // STOP, then silence; STOP again: :0.
    let o = t.plain(&req(|b| encode_keynotify(b, b"k", true)));
    assert_eq!(&o.answer.payload[..], b"+OK\r\n");
    let o = t.plain(&set(b"k", b"v", SetCondition::Always, None));
    assert!(o.notifications.is_empty());
    let o = t.plain(&req(|b| encode_keynotify(b, b"k", true)));
    assert_eq!(&o.answer.payload[..], b":0\r\n");
}

#[test]
fn an_expired_key_is_gone_before_the_timer_fires() {
    let mut t = setup(None);
    t.plain(&set(b"k", b"v", SetCondition::Always, Some(50)));
    let later = t.t0 + Duration::from_millis(60);
    let now = ts(NOW_MS);
    let o =
        t.h.handle(&ctx(Some(&now), None), &req(|b| encode_get(b, b"k")), later);
    assert_eq!(&o.answer.payload[..], b"$-1\r\n");
}

#[test]
fn quota_and_request_errors() {
    let mut t = setup(Some(1));
    t.plain(&set(b"a", b"v", SetCondition::Always, None));
    let o = t.plain(&set(b"b", b"v", SetCondition::Always, None));
    assert_eq!(
        &o.answer.payload[..],
        b"-ERR the quota has been exceeded\r\n"
    );
    let cases: [(&[u8], &[u8]); 6] = [
        (b"", b"-ERR syntax error\r\n"),
        (b"*1\r\n$4\r\nPING\r\n", b"-ERR unknown command\r\n"),
        (
            b"*2\r\n$3\r\nSET\r\n$1\r\nk\r\n",
            b"-ERR wrong number of arguments\r\n",
        ),
        (
            b"*2\r\n$3\r\nGET\r\n$0\r\n\r\n",
            b"-ERR the key length is zero\r\n",
        ),
        (b"*3\r\n$3\r\nget\r\n$1\r\nk\r\n", b"-ERR syntax error\r\n"),
        (b"*4294967295\r\n", b"-ERR syntax error\r\n"),
    ];
    for (payload, reply) in cases {
        let o = t.plain(&Bytes::copy_from_slice(payload));
        assert_eq!(&o.answer.payload[..], reply, "{payload:?}");
    }
}

#[test]
fn keynotify_after_the_connection_ended_is_not_registered() {
    let mut h = Handler::new(HandlerConfig {
        complete_connection_events: true,
        ..HandlerConfig::default()
    });
    let t0 = Instant::now();
    let keynotify = req(|b| encode_keynotify(b, b"k", false));
    h.client_connected("client");
    let o = h.handle(&ctx(None, None), &keynotify, t0);
    assert_eq!(&o.answer.payload[..], b"+OK\r\n");
    assert_eq!(h.registrations().keys_of("client"), 1);
    h.client_disconnected("client");
    assert_eq!(h.registrations().keys_of("client"), 0);
    // A late KEYNOTIFY of the ended connection.
    let o = h.handle(&ctx(None, None), &keynotify, t0);
    assert_eq!(&o.answer.payload[..], b"+OK\r\n");
    assert_eq!(h.registrations().keys_of("client"), 0);
}

#[test]
fn keynotify_needs_a_client_id() {
    let mut t = setup(None);
    let o = t.h.handle(
        &RequestContext::default(),
        &req(|b| encode_keynotify(b, b"k", false)),
        t.t0,
    );
    assert!(
        o.answer
            .payload
            .starts_with(b"-ERR the request carries no client id")
    );
}

#[test]
fn fencing_through_the_handler() {
    let mut t = setup(None);
    let lease = t.plain(&set(
        b"lock",
        b"me",
        SetCondition::NotExistsOrEqual,
        Some(10_000),
    ));
    let token = lease.answer.timestamp.unwrap().to_string();
    let now = ts(NOW_MS);
    let o = t.run(
        ctx(Some(&now), Some(&token)),
        &set(b"p", b"1", SetCondition::Always, None),
    );
    assert_eq!(&o.answer.payload[..], b"+OK\r\n");
    let o = t.run(
        ctx(Some(&now), None),
        &set(b"p", b"2", SetCondition::Always, None),
    );
    assert_eq!(
        o.answer.payload,
        Answer::error(&ServiceError::FencingTokenRequired).payload
    );
    let lower = Hlc::new(NOW_MS - 1, 0, "StateStore").to_string();
    let o = t.run(ctx(Some(&now), Some(&lower)), &req(|b| encode_del(b, b"p")));
    assert_eq!(
        o.answer.payload,
        Answer::error(&ServiceError::FencingTokenLowerVersion).payload
    );
    // GET never needs the token.
    let o = t.plain(&req(|b| encode_get(b, b"p")));
    assert_eq!(&o.answer.payload[..], b"$1\r\n1\r\n");
    let o = t.run(ctx(Some(&now), Some(&token)), &req(|b| encode_del(b, b"p")));
    assert_eq!(&o.answer.payload[..], b":1\r\n");
}
