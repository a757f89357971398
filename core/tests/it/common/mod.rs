//! Shared harness of the client's integration tests: a state store on the embedded broker or
//! on Mosquitto, outages through the fault proxy of `mqstate-testing`, and the scenarios every backend runs;
//! the shared vectors (`vectors`) and the proptest settings.

#![allow(dead_code)]

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mqstate::{
    Client, ConnectOptions, ConnectionState, Error, ErrorKind, KeyNotification, NotifyOperation,
    ServiceError, SetOptions, VdelOutcome,
};
use mqstate_testing::fault_proxy::FaultProxy;
use mqstate_testing::{self as testing, TestStore};
use tokio::task::JoinHandle;

pub mod iothub;
pub mod vectors;

/// Bound on anything that must happen (generous: slowness is not a failure, a hang is).
pub const WAIT: Duration = Duration::from_secs(20);

/// Runs a test body with an overall bound, so a bug shows as a failure rather than a hang.
pub async fn bounded<F: Future<Output = ()>>(name: &str, f: F) {
    if tokio::time::timeout(Duration::from_secs(120), f)
        .await
        .is_err()
    {
        panic!("{name}: did not finish within 120 s");
    }
}

pub use mqstate_testing::Backend;

/// A running state store (see [`TestStore`]) and how clients reach it.
pub struct Env {
    pub store: TestStore,
}

impl Env {
    /// Starts a state store on `backend`; `None` when Mosquitto is missing (and not required).
    pub async fn start(backend: Backend, test: &str) -> Option<Env> {
        Some(Env {
            store: TestStore::start(backend, test).await?,
        })
    }

    pub fn options(&self) -> ConnectOptions {
        ConnectOptions::new(self.store.host(), self.store.port())
    }

    pub async fn client(&self) -> Client {
        Client::connect(self.options()).await.expect("connect")
    }

    /// Stops the state store (and the embedded broker with it); Mosquitto stays up.
    pub async fn stop_store(&mut self) {
        self.store.stop_store().await;
    }

    pub async fn shutdown(self) {
        self.store.shutdown().await;
    }
}

/// Spawns `n` requests on `client`: GETs of `key` and SETs of keys derived from it,
/// alternating; each task ends with the request's outcome.
pub fn spawn_requests(client: &Client, key: &str, n: usize) -> Vec<JoinHandle<Result<(), Error>>> {
    (0..n)
        .map(|i| {
            let c = client.clone();
            let k = key.to_owned();
            tokio::spawn(async move {
                if i % 2 == 0 {
                    c.get(&k).await.map(|_| ())
                } else {
                    c.set(format!("{k}-{i}"), "x", SetOptions::default())
                        .await
                        .map(|_| ())
                }
            })
        })
        .collect()
}

/// Waits for the next item of an observation, with a bound.
pub async fn next(obs: &mut mqstate::KeyObservation) -> KeyNotification {
    match tokio::time::timeout(WAIT, obs.recv()).await {
        Ok(Some(Ok(n))) => n,
        Ok(Some(Err(e))) => panic!("observation error: {e}"),
        Ok(None) => panic!("observation ended"),
        Err(_) => panic!("no notification within {WAIT:?}"),
    }
}

/// Asserts that nothing arrives for a short while.
pub async fn nothing_for(obs: &mut mqstate::KeyObservation, d: Duration) {
    if let Ok(item) = tokio::time::timeout(d, obs.recv()).await {
        panic!("expected nothing, got {item:?}");
    }
}

/// Waits until `f` holds, polling; panics after [`WAIT`].
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < WAIT, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn wait_state(client: &Client, state: ConnectionState) {
    let mut rx = client.state_changes();
    tokio::time::timeout(WAIT, rx.wait_for(|s| *s == state))
        .await
        .unwrap_or_else(|_| panic!("state never became {state}"))
        .unwrap();
}

/// A unique key per test run, so tests sharing a server never collide.
pub fn key(name: &str) -> String {
    format!("{name}-{:08x}", fastrand_u32())
}

fn fastrand_u32() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    nanos ^ std::process::id().rotate_left(16)
}

// ---------------------------------------------------------------------------------------------
// Scenarios run on every backend
// ---------------------------------------------------------------------------------------------

/// Every operation and option: SET (plain, NX, NEX, PX), GET hit/miss, DEL, VDEL (all three
/// outcomes), fencing tokens, service errors, invalid arguments.
pub async fn all_operations(env: &Env) {
    let c = env.client().await;
    let k = key("ops");

    assert!(c.get(&k).await.unwrap().is_none());
    let s1 = c.set(&k, "v1", SetOptions::default()).await.unwrap();
    assert!(s1.applied);
    let got = c.get(&k).await.unwrap().unwrap();
    assert_eq!(got.value, "v1");
    assert_eq!(
        got.version, s1.version,
        "GET returns the version SET returned"
    );

    // NX: not applied on an existing key, applied on a new one.
    let nx = c.set(&k, "v2", SetOptions::default().nx()).await.unwrap();
    assert!(!nx.applied);
    assert_eq!(c.get(&k).await.unwrap().unwrap().value, "v1");
    let k2 = format!("{k}-nx");
    assert!(
        c.set(&k2, "a", SetOptions::default().nx())
            .await
            .unwrap()
            .applied
    );

    // NEX: applied when equal (a renewal, strictly newer version), not when different.
    let nex = c.set(&k, "v1", SetOptions::default().nex()).await.unwrap();
    assert!(nex.applied);
    assert!(nex.version > s1.version);
    assert!(
        !c.set(&k, "other", SetOptions::default().nex())
            .await
            .unwrap()
            .applied
    );

    // VDEL: mismatch, deleted, not found.
    assert_eq!(
        c.vdel(&k, "nope", None).await.unwrap(),
        VdelOutcome::ValueMismatch
    );
    assert_eq!(c.vdel(&k, "v1", None).await.unwrap(), VdelOutcome::Deleted);
    assert_eq!(c.vdel(&k, "v1", None).await.unwrap(), VdelOutcome::NotFound);

    // DEL.
    assert_eq!(c.del(&k2, None).await.unwrap(), 1);
    assert_eq!(c.del(&k2, None).await.unwrap(), 0);

    // PX: the key expires.
    let kx = format!("{k}-px");
    let px = SetOptions::default().expiry(Duration::from_millis(200));
    assert!(c.set(&kx, "soon gone", px).await.unwrap().applied);
    let start = Instant::now();
    while c.get(&kx).await.unwrap().is_some() {
        assert!(start.elapsed() < WAIT, "key never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Fencing: a lease's SET returns the token; the protected key then needs it.
    let lock = format!("{k}-lock");
    let protected = format!("{k}-protected");
    let lease = c
        .set(
            &lock,
            "holder-1",
            SetOptions::default().nex().expiry(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    assert!(lease.applied);
    let token = lease.version;
    let with_token = SetOptions::default().fencing_token(token.clone());
    assert!(
        c.set(&protected, "x", with_token.clone())
            .await
            .unwrap()
            .applied
    );
    let err = c
        .set(&protected, "y", SetOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Service);
    assert_eq!(
        err.service_error(),
        Some(&ServiceError::FencingTokenRequired)
    );
    let renewed = c
        .set(
            &lock,
            "holder-1",
            SetOptions::default().nex().expiry(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    assert!(renewed.version > token);
    assert!(
        c.set(
            &protected,
            "z",
            SetOptions::default().fencing_token(renewed.version.clone())
        )
        .await
        .unwrap()
        .applied
    );
    let err = c.set(&protected, "stale", with_token).await.unwrap_err();
    assert_eq!(
        err.service_error(),
        Some(&ServiceError::FencingTokenLowerVersion)
    );
    let err = c.del(&protected, None).await.unwrap_err();
    assert_eq!(
        err.service_error(),
        Some(&ServiceError::FencingTokenRequired)
    );
    assert_eq!(c.del(&protected, Some(&renewed.version)).await.unwrap(), 1);
    assert_eq!(
        c.vdel(&lock, "holder-1", None).await.unwrap(),
        VdelOutcome::Deleted
    );

    // Invalid arguments never reach the server.
    for err in [
        c.get("").await.unwrap_err(),
        c.set("", "v", SetOptions::default()).await.unwrap_err(),
        c.set("k", "v", SetOptions::default().expiry(Duration::ZERO))
            .await
            .unwrap_err(),
        c.del("", None).await.unwrap_err(),
        c.vdel("", "v", None).await.unwrap_err(),
        c.observe("").await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    }
    assert_eq!(c.requests_in_flight(), 0);
    c.close().await;
    assert_eq!(c.state(), ConnectionState::Closed);
    let err = c.get("k").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Disconnected);
}

/// 64 requests in flight at once from one client (more than Mosquitto's receive maximum of
/// 20: the rest must queue, not stall), each answered with its own value.
pub async fn concurrent_64(env: &Env) {
    let c = env.client().await;
    let k = key("c64");
    let mut sets = Vec::new();
    for i in 0..64 {
        let c = c.clone();
        let key = format!("{k}-{i}");
        sets.push(tokio::spawn(async move {
            c.set(&key, format!("value-{i}"), SetOptions::default())
                .await
        }));
    }
    for s in sets {
        assert!(s.await.unwrap().unwrap().applied);
    }
    for round in 0..3 {
        let mut gets = Vec::new();
        for i in 0..64 {
            let c = c.clone();
            let key = format!("{k}-{i}");
            gets.push(tokio::spawn(async move { (i, c.get(&key).await) }));
        }
        for g in gets {
            let (i, got) = g.await.unwrap();
            let got = got
                .unwrap_or_else(|e| panic!("round {round}, get {i}: {e}"))
                .unwrap();
            assert_eq!(got.value, format!("value-{i}"));
        }
    }
    assert_eq!(c.requests_in_flight(), 0);
    c.close().await;
}

/// Two clients observe one key; a third writes it; both see every change with its version.
pub async fn two_observers(env: &Env) {
    let a = env.client().await;
    let b = env.client().await;
    let w = env.client().await;
    let k = key("obs2");
    let mut oa = a.observe(&k).await.unwrap();
    let mut ob = b.observe(&k).await.unwrap();
    // A second stream on the same client shares one registration.
    let mut oa2 = a.observe(&k).await.unwrap();
    assert_eq!(a.observed_keys(), 1);

    let set = w.set(&k, "hello", SetOptions::default()).await.unwrap();
    for obs in [&mut oa, &mut ob, &mut oa2] {
        let n = next(obs).await;
        assert_eq!(n.key, k.as_bytes());
        assert_eq!(
            n.operation,
            NotifyOperation::Set(Bytes::from_static(b"hello"))
        );
        assert_eq!(n.version.as_ref(), Some(&set.version));
        assert!(!n.synthesized);
    }
    assert_eq!(w.del(&k, None).await.unwrap(), 1);
    for obs in [&mut oa, &mut ob, &mut oa2] {
        assert_eq!(next(obs).await.operation, NotifyOperation::Delete);
    }
    // Expiry is a delete too.
    w.set(
        &k,
        "brief",
        SetOptions::default().expiry(Duration::from_millis(100)),
    )
    .await
    .unwrap();
    assert!(matches!(
        next(&mut oa).await.operation,
        NotifyOperation::Set(_)
    ));
    assert_eq!(next(&mut oa).await.operation, NotifyOperation::Delete);
    for c in [a, b, w] {
        c.close().await;
    }
    // Closing ends the streams.
    assert!(
        tokio::time::timeout(WAIT, oa.recv())
            .await
            .unwrap()
            .is_none()
    );
}

/// unobserve ends every stream of the key and stops notifications; dropping the last stream
/// unregisters the key.
pub async fn unobserve(env: &Env) {
    let c = env.client().await;
    let w = env.client().await;
    let k = key("unobs");
    let mut o1 = c.observe(&k).await.unwrap();
    let mut o2 = c.observe(&k).await.unwrap();
    w.set(&k, "1", SetOptions::default()).await.unwrap();
    next(&mut o1).await;
    next(&mut o2).await;
    c.unobserve(&k).await.unwrap();
    assert!(
        tokio::time::timeout(WAIT, o1.recv())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        tokio::time::timeout(WAIT, o2.recv())
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(c.observed_keys(), 0);
    // Unobserving a key that is not observed is fine.
    c.unobserve(&k).await.unwrap();

    // Observe again, then drop the stream: the registration goes (STOP sent), and a new
    // observation afterwards works (no STOP overtakes its KEYNOTIFY).
    let o3 = c.observe(&k).await.unwrap();
    assert_eq!(c.observed_keys(), 1);
    drop(o3);
    eventually("dropping the last stream unregisters the key", || {
        c.observed_keys() == 0
    })
    .await;
    let mut o4 = c.observe(&k).await.unwrap();
    let set = w.set(&k, "2", SetOptions::default()).await.unwrap();
    let n = next(&mut o4).await;
    assert_eq!(n.version, Some(set.version));
    nothing_for(&mut o4, Duration::from_millis(200)).await;
    c.close().await;
    w.close().await;
}

/// A closed client leaves no subscriptions behind. Its session outlives it (clean start off,
/// and rumqttc cannot send the DISCONNECT's Session Expiry Interval 0), so `close()`
/// unsubscribes first. Proof from outside: messages published afterwards to its response and
/// notification topics are not queued for it; a raw client taking over the session (clean
/// start off, same client id) finds the session but receives none of them before a sentinel
/// it publishes to itself.
pub async fn close_leaves_no_subscriptions(env: &Env) {
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::mqttbytes::v5::Packet;
    use rumqttc::v5::{AsyncClient, Event, MqttOptions};

    let id = key("closed-client");
    let c = Client::connect(env.options().with_client_id(id.as_str()))
        .await
        .expect("connect");
    let _observation = c.observe(&key("closed-observed")).await.unwrap();
    c.close().await;

    let raw = |client_id: &str| {
        let mut o = MqttOptions::new(client_id, env.store.host(), env.store.port());
        o.set_clean_start(false);
        o.set_session_expiry_interval(Some(3600));
        AsyncClient::new(o, 16)
    };
    let stale = [
        mqstate::protocol::topics::response_topic(&id),
        mqstate::protocol::topics::notification_topic(&id, b"closed-observed"),
    ];
    let (publisher, mut publisher_loop) = raw(&key("stale-publisher"));
    for topic in &stale {
        publisher
            .publish(topic.as_str(), QoS::AtLeastOnce, false, "stale")
            .await
            .unwrap();
    }
    let mut acked = 0;
    while acked < stale.len() {
        if let Event::Incoming(Packet::PubAck(_)) = publisher_loop.poll().await.unwrap() {
            acked += 1;
        }
    }
    publisher.disconnect().await.unwrap();

    // Take the closed client's session over and see what it had kept.
    let sentinel = format!("mqstate-test/sentinel/{id}");
    let (taker, mut taker_loop) = raw(&id);
    let mut received = Vec::new();
    loop {
        match taker_loop.poll().await.unwrap() {
            Event::Incoming(Packet::ConnAck(ack)) => {
                assert!(
                    ack.session_present,
                    "the broker kept no session, so this test would prove nothing"
                );
                taker
                    .subscribe(sentinel.as_str(), QoS::AtLeastOnce)
                    .await
                    .unwrap();
            }
            Event::Incoming(Packet::SubAck(_)) => {
                taker
                    .publish(sentinel.as_str(), QoS::AtLeastOnce, false, "sentinel")
                    .await
                    .unwrap();
            }
            Event::Incoming(Packet::Publish(p)) => {
                let topic = String::from_utf8_lossy(&p.topic).into_owned();
                if topic == sentinel {
                    break;
                }
                received.push(topic);
            }
            _ => {}
        }
    }
    assert!(
        received.is_empty(),
        "the closed client's session still had subscriptions: it received {received:?}"
    );
    taker.disconnect().await.unwrap();
    let _ = taker_loop.poll().await;
}

/// Binary keys and values with CR LF and NUL, empty values, 64 KiB values.
pub async fn binary_values(env: &Env) {
    let c = env.client().await;
    let w = env.client().await;
    let k = key("bin");
    let bin_key = [k.as_bytes(), b"\r\n\x00\xff$3\r\n"].concat();
    let value: Vec<u8> = b"line1\r\nline2\r\n\x00\x01\xfe\xff*2\r\n$-1\r\n".to_vec();
    let mut obs = c.observe(&bin_key).await.unwrap();
    w.set(&bin_key, &value, SetOptions::default())
        .await
        .unwrap();
    assert_eq!(c.get(&bin_key).await.unwrap().unwrap().value, value);
    assert_eq!(next(&mut obs).await.value().unwrap(), &value[..]);

    w.set(&bin_key, b"", SetOptions::default()).await.unwrap();
    assert_eq!(c.get(&bin_key).await.unwrap().unwrap().value, &b""[..]);
    assert_eq!(next(&mut obs).await.value().unwrap(), &b""[..]);

    let big: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 251) as u8).collect();
    w.set(&bin_key, &big, SetOptions::default()).await.unwrap();
    assert_eq!(c.get(&bin_key).await.unwrap().unwrap().value, big);
    assert_eq!(next(&mut obs).await.value().unwrap(), &big[..]);
    assert_eq!(
        c.vdel(&bin_key, &big, None).await.unwrap(),
        VdelOutcome::Deleted
    );
    assert_eq!(next(&mut obs).await.operation, NotifyOperation::Delete);
    c.close().await;
    w.close().await;
}

/// A sub-second timeout against a state store that does not answer: the call fails within
/// (about) its timeout with a timeout or disconnected error, and nothing hangs.
pub async fn sub_second_timeout(mut env: Env) {
    let c = env.client().await;
    c.set("warm-up", "1", SetOptions::default()).await.unwrap();
    env.stop_store().await;
    let fast = c.with_timeout(Duration::from_millis(300));
    for _ in 0..3 {
        let start = Instant::now();
        let err = tokio::time::timeout(WAIT, fast.get("k"))
            .await
            .expect("the call hung")
            .unwrap_err();
        let elapsed = start.elapsed();
        assert!(
            matches!(err.kind(), ErrorKind::Timeout | ErrorKind::Disconnected),
            "{err}"
        );
        if env.store.backend() == Backend::Mosquitto {
            // The broker is up: the request went out and was not answered.
            assert!(matches!(err, Error::Timeout(_)), "{err}");
        }
        // Not a speed check: only that the call returned, about when it was told to.
        assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    }
    // A failed observe leaves nothing registered behind.
    let err = tokio::time::timeout(WAIT, fast.observe("k"))
        .await
        .expect("observe hung")
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Timeout | ErrorKind::Disconnected),
        "{err}"
    );
    assert_eq!(c.observed_keys(), 0);
    assert_eq!(c.requests_in_flight(), 0);
    c.close().await;
    env.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// An outage without restarting the broker: the workspace's fault proxy (mqstate-testing)
// ---------------------------------------------------------------------------------------------

/// A fault proxy in front of `upstream` on loopback.
pub async fn proxy(upstream: u16) -> FaultProxy {
    FaultProxy::start(SocketAddr::from((Ipv4Addr::LOCALHOST, upstream)))
        .await
        .unwrap()
}

/// Cuts every connection through `proxy` and refuses new ones until [`restore`].
pub fn cut(proxy: &FaultProxy) {
    proxy.set_refusing(true);
    proxy.drop_connections();
}

/// Accepts connections through `proxy` again.
pub fn restore(proxy: &FaultProxy) {
    proxy.set_refusing(false);
}

/// The outage scenario through a proxy: an observer is cut off while another client writes;
/// requests made during the outage complete once the connection is back; the observer gets
/// the change made while it was away.
pub async fn outage_through_proxy(env: &Env) {
    let proxy = proxy(env.store.port()).await;
    let mut opts = ConnectOptions::new("127.0.0.1", proxy.port());
    opts.reconnect =
        mqstate::ReconnectPolicy::new(Duration::from_millis(50), Duration::from_millis(200));
    let observer = Client::connect(opts).await.unwrap();
    let writer = env.client().await;
    let k = key("outage");
    writer
        .set(&k, "before", SetOptions::default())
        .await
        .unwrap();
    let mut obs = observer.observe(&k).await.unwrap();

    cut(&proxy);
    wait_state(&observer, ConnectionState::Reconnecting).await;
    let during = writer
        .set(&k, "while-away", SetOptions::default())
        .await
        .unwrap();
    // Requests made during the outage wait for the connection, then complete.
    let pending = spawn_requests(&observer, &k, 8);
    tokio::time::sleep(Duration::from_millis(300)).await;
    restore(&proxy);
    wait_state(&observer, ConnectionState::Connected).await;
    for p in pending {
        p.await
            .unwrap()
            .expect("a request made during the outage completes after it");
    }
    // The change made while away arrives: queued by the broker (session kept) or synthesized
    // from the catch-up GET. Either way its version is the write's.
    let n = next(&mut obs).await;
    assert_eq!(n.value().unwrap(), "while-away");
    assert_eq!(n.version.as_ref(), Some(&during.version));
    // And the observation is registered again: later changes arrive normally.
    let after = writer
        .set(&k, "after", SetOptions::default())
        .await
        .unwrap();
    loop {
        let n = next(&mut obs).await;
        if n.version.as_ref() == Some(&after.version) {
            assert_eq!(n.value().unwrap(), "after");
            break;
        }
        // A duplicate of "while-away" (delivered both ways) is allowed, nothing else.
        assert_eq!(n.value().unwrap(), "while-away");
    }
    observer.close().await;
    writer.close().await;
}

// ---------------------------------------------------------------------------------------------
// TLS: a CA, a broker certificate, and Mosquitto with a TLS listener
// ---------------------------------------------------------------------------------------------

pub struct TlsFiles {
    pub dir: tempfile::TempDir,
    pub ca: std::path::PathBuf,
    pub other_ca: std::path::PathBuf,
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
}

/// A self-signed CA and a broker certificate it signs, valid for `names` (DNS names or IPs).
pub fn make_tls_files(names: &[&str]) -> TlsFiles {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let dir = tempfile::tempdir().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(names)
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let mut other_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    other_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let other = other_params
        .self_signed(&KeyPair::generate().unwrap())
        .unwrap();
    let write = |name: &str, pem: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, pem).unwrap();
        p
    };
    TlsFiles {
        ca: write("ca.pem", ca_cert.pem()),
        other_ca: write("other-ca.pem", other.pem()),
        cert: write("broker.pem", leaf.pem()),
        key: write("broker.key", leaf_key.serialize_pem()),
        dir,
    }
}

/// Mosquitto with a plain listener (for the state store) and a TLS one (for the client).
pub struct TlsMosquitto {
    child: std::process::Child,
    pub plain_port: u16,
    pub tls_port: u16,
    dir: tempfile::TempDir,
}

impl TlsMosquitto {
    /// `None` (after a printed skip line) when Mosquitto is not installed and not required.
    pub fn start(files: &TlsFiles, test: &str) -> Option<TlsMosquitto> {
        let binary = match testing::find_mosquitto() {
            Ok(b) => b,
            Err(e) => {
                assert!(!testing::mosquitto_required(), "{test}: {e}");
                println!(
                    "SKIPPED {test}: {e} (set MQSTATE_REQUIRE_MOSQUITTO=1 to make this a failure)"
                );
                return None;
            }
        };
        for _ in 0..3 {
            let plain_port = testing::free_port().unwrap();
            let tls_port = testing::free_port().unwrap();
            let dir = tempfile::tempdir().unwrap();
            let conf = dir.path().join("mosquitto.conf");
            std::fs::write(
                &conf,
                format!(
                    "allow_anonymous true\n\
                     set_tcp_nodelay true\n\
                     persistence false\n\
                     listener {plain_port} 127.0.0.1\n\
                     listener {tls_port} 127.0.0.1\n\
                     cafile {}\n\
                     certfile {}\n\
                     keyfile {}\n",
                    files.ca.display(),
                    files.cert.display(),
                    files.key.display()
                ),
            )
            .unwrap();
            let log = std::fs::File::create(dir.path().join("log")).unwrap();
            let child = std::process::Command::new(&binary)
                .arg("-c")
                .arg(&conf)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap();
            let mut m = TlsMosquitto {
                child,
                plain_port,
                tls_port,
                dir,
            };
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = m.child.try_wait() {
                    break;
                }
                let ok = [plain_port, tls_port].iter().all(|p| {
                    std::net::TcpStream::connect_timeout(
                        &SocketAddr::from((Ipv4Addr::LOCALHOST, *p)),
                        Duration::from_millis(200),
                    )
                    .is_ok()
                });
                if ok {
                    return Some(m);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            println!("mosquitto did not start: {}", m.log());
        }
        panic!("{test}: Mosquitto with a TLS listener did not start");
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

impl Drop for TlsMosquitto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The proptest settings of the property tests: `cases` inputs, and failures saved next to the
/// test's file (`prop_hlc.rs` → `prop_hlc.proptest-regressions`, read back before new inputs).
/// Proptest's default puts them in a directory named so beside the one holding `main.rs`
/// (here `core/tests`), where nobody would look for them.
pub fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..proptest::test_runner::Config::with_cases(cases)
    }
}
