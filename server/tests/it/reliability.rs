//! Reliability under faults, with the real store, the real client and real brokers:
//! - the embedded broker admits no client before the store listens (100 restarts in a row);
//! - a store restarted behind a broker that stays up: an observer that never disconnected
//!   gets the next change (the store-instance extension);
//! - Mosquitto restarted with its sessions: every request in flight is answered;
//! - the fault proxy between clients and broker, and between the store and Mosquitto: drop,
//!   stall, cut mid-packet, delay, disconnect on PUBLISH / SUBSCRIBE / PUBACK, rejected
//!   CONNACK / SUBACK / PUBACK. Every request ends with an answer or a typed error, and the
//!   client works again once the fault is gone.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use mqstate::{
    Client, ConnectOptions, ConnectionState, Error, ErrorKind, KeyObservation, NotifyOperation,
    ReconnectPolicy, SetOptions,
};
use mqstate_server::{LocalServer, ServerConfig};
use mqstate_testing::fault_proxy::{Direction, FaultProxy, PacketKind};
use mqstate_testing::{self as testing, Mosquitto};

/// Bound on anything that must happen (generous: slowness is not a failure, a hang is).
const WAIT: Duration = Duration::from_secs(30);

async fn bounded<F: Future<Output = ()>>(name: &str, f: F) {
    if tokio::time::timeout(Duration::from_secs(240), f)
        .await
        .is_err()
    {
        panic!("{name}: did not finish within 240 s");
    }
}

fn fast(host: &str, port: u16) -> ConnectOptions {
    ConnectOptions::new(host, port).with_reconnect(ReconnectPolicy::new(
        Duration::from_millis(20),
        Duration::from_millis(200),
    ))
}

fn key(name: &str) -> String {
    format!("reliability-{name}-{}", std::process::id())
}

/// Only the kinds a fault may legitimately produce.
fn assert_typed(result: Result<(), Error>, what: &str) {
    if let Err(e) = result {
        assert!(
            matches!(
                e.kind(),
                ErrorKind::Disconnected | ErrorKind::Timeout | ErrorKind::Connection
            ),
            "{what}: unexpected error kind {:?}: {e}",
            e.kind()
        );
    }
}

/// The next notification that sets the key to `value`, skipping others (catch-ups).
async fn wait_for_value(obs: &mut KeyObservation, value: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let item = tokio::time::timeout(left, obs.recv())
            .await
            .unwrap_or_else(|_| panic!("no notification {value:?} within {within:?}"))
            .expect("the observation ended");
        match item {
            Ok(n) if matches!(&n.operation, NotifyOperation::Set(v) if v == value) => return,
            Ok(_) => {}
            // An error item (e.g. "could not re-register, retrying") is informative only.
            Err(e) => assert_typed(Err(e), "observation"),
        }
    }
}

async fn wait_state(client: &Client, state: ConnectionState) {
    let mut rx = client.state_changes();
    tokio::time::timeout(WAIT, rx.wait_for(|s| *s == state))
        .await
        .unwrap_or_else(|_| panic!("state {state:?} not reached"))
        .unwrap();
}

// --- 3. the embedded broker admits nobody before the store listens -------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_racing_the_server_start_gets_its_first_answer_100_times() {
    bounded("startup race", async {
        for round in 0..100 {
            let port = testing::free_port().unwrap();
            // The client connects in a loop while the server starts, and sends one request as
            // soon as it is connected: it must be answered (not time out).
            let racer = tokio::spawn(async move {
                let options = ConnectOptions::new("127.0.0.1", port)
                    .with_request_timeout(Duration::from_secs(10));
                let started = Instant::now();
                loop {
                    match Client::connect(options.clone()).await {
                        Ok(client) => {
                            let answer = client.get("startup-race").await;
                            client.close().await;
                            return answer.map(|_| ());
                        }
                        Err(_) if started.elapsed() < WAIT => {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                        Err(e) => return Err(e),
                    }
                }
            });
            tokio::task::yield_now().await;
            let server = LocalServer::start_with(ServerConfig::default().with_port(port))
                .await
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            let answer = tokio::time::timeout(WAIT, racer).await.unwrap().unwrap();
            assert!(
                answer.is_ok(),
                "round {round}: first request not answered: {answer:?}"
            );
            server.shutdown().await;
        }
    })
    .await;
}

// --- 2. a store restart behind a broker that stays up ---------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_survives_a_store_restart_behind_mosquitto() {
    let Some(mosquitto) = testing::mosquitto_or_skip("observer_survives_store_restart") else {
        return;
    };
    bounded("store restart", async {
        let attach = || ServerConfig::external(&mosquitto.url()).unwrap();
        let store = LocalServer::start_with(attach()).await.unwrap();
        let observer = Client::connect(fast("127.0.0.1", mosquitto.port()))
            .await
            .unwrap();
        let writer = Client::connect(fast("127.0.0.1", mosquitto.port()))
            .await
            .unwrap();
        let k = key("store-restart");
        writer
            .set(&k, "before", SetOptions::default())
            .await
            .unwrap();
        let mut obs = observer.observe(&k).await.unwrap();
        writer
            .set(&k, "first", SetOptions::default())
            .await
            .unwrap();
        wait_for_value(&mut obs, "first", WAIT).await;

        // The store dies and comes back; the broker and both clients stay connected.
        store.shutdown().await;
        let store = LocalServer::start_with(attach()).await.unwrap();
        let restarted = Instant::now();
        // The new store has no registration (no persistence here): the observer must learn
        // of the restart by itself and register again.
        writer
            .set(&k, "after-restart", SetOptions::default())
            .await
            .unwrap();
        wait_for_value(&mut obs, "after-restart", WAIT).await;
        println!(
            "observer got the first change after the store restart {:?} after it",
            restarted.elapsed()
        );
        assert_eq!(observer.state(), ConnectionState::Connected);
        // And keeps getting changes.
        writer
            .set(&k, "later", SetOptions::default())
            .await
            .unwrap();
        wait_for_value(&mut obs, "later", WAIT).await;
        observer.close().await;
        writer.close().await;
        store.shutdown().await;
    })
    .await;
}

// --- 1. the broker restarts with its sessions ------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_flight_across_a_mosquitto_restart_are_answered() {
    let mut mosquitto = match Mosquitto::start_persistent() {
        Ok(m) => m,
        Err(e) if !testing::mosquitto_required() => {
            println!("SKIPPED requests_in_flight_across_a_mosquitto_restart: {e}");
            return;
        }
        Err(e) => panic!("cannot start Mosquitto: {e}"),
    };
    bounded("broker restart", async {
        let store = LocalServer::start_with(ServerConfig::external(&mosquitto.url()).unwrap())
            .await
            .unwrap();
        let client = Client::connect(
            fast("127.0.0.1", mosquitto.port()).with_request_timeout(Duration::from_secs(20)),
        )
        .await
        .unwrap();
        let k = key("broker-restart");
        // 64 writers keep requests in flight through the restart.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut writers = Vec::new();
        for w in 0..64 {
            let client = client.clone();
            let stop = stop.clone();
            let k = format!("{k}-{w}");
            writers.push(tokio::spawn(async move {
                let (mut ok, mut failed) = (0u32, Vec::new());
                let mut n = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    match client.set(&k, n.to_string(), SetOptions::default()).await {
                        Ok(_) => ok += 1,
                        Err(e) => failed.push(e),
                    }
                }
                (ok, failed)
            }));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let m = tokio::task::spawn_blocking(move || {
            mosquitto.restart().unwrap();
            mosquitto
        })
        .await
        .unwrap();
        wait_state(&client, ConnectionState::Connected).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut total_ok = 0;
        for w in writers {
            let (ok, failed) = w.await.unwrap();
            total_ok += ok;
            // The broker kept both sessions: nothing may time out or be lost.
            assert!(
                failed.is_empty(),
                "requests failed across the restart: {:?}\nMosquitto log: {}",
                failed,
                m.log()
            );
        }
        println!("{total_ok} SETs acknowledged across a Mosquitto restart, none failed");
        assert!(total_ok > 0);
        client.close().await;
        store.shutdown().await;
        drop(m);
    })
    .await;
}

// --- 4. the fault proxy ------------------------------------------------------------------------

/// Runs `fault` against a client that connects through a proxy to `upstream`, while requests
/// are in flight; then checks the client recovers and its observation still works.
async fn scenario(
    upstream: SocketAddr,
    name: &str,
    fault: impl FnOnce(&FaultProxy),
    heal: impl FnOnce(&FaultProxy),
) {
    let proxy = FaultProxy::start(upstream).await.unwrap();
    let client = Client::connect(
        fast("127.0.0.1", proxy.port()).with_request_timeout(Duration::from_secs(3)),
    )
    .await
    .unwrap();
    let writer = Client::connect(fast("127.0.0.1", upstream.port()))
        .await
        .unwrap();
    let k = key(name);
    client
        .set(&k, "start", SetOptions::default())
        .await
        .unwrap();
    let mut obs = client.observe(&k).await.unwrap();
    let in_flight: Vec<_> = (0..16)
        .map(|i| {
            let c = client.clone();
            let k = format!("{k}-{i}");
            tokio::spawn(async move { c.set(&k, "x", SetOptions::default()).await.map(|_| ()) })
        })
        .collect();
    fault(&proxy);
    // Requests during the fault: answered, or a typed error within their timeout.
    for i in 0..8 {
        let r = client.get(format!("{k}-{i}")).await.map(|_| ());
        assert_typed(r, name);
    }
    for r in in_flight {
        let r = tokio::time::timeout(WAIT, r)
            .await
            .unwrap_or_else(|_| panic!("{name}: a request hung"))
            .unwrap();
        assert_typed(r, name);
    }
    heal(&proxy);
    // Healed: requests work again and the observation still delivers.
    let deadline = Instant::now() + WAIT;
    loop {
        match client.get(&k).await {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => assert_typed(Err(e), name),
            Err(e) => panic!("{name}: the client did not recover: {e}"),
        }
    }
    writer
        .set(&k, "healed", SetOptions::default())
        .await
        .unwrap();
    wait_for_value(&mut obs, "healed", WAIT).await;
    client.close().await;
    writer.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_between_clients_and_the_embedded_broker() {
    bounded("client faults", async {
        let server = LocalServer::start().await.unwrap();
        let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, server.port()));
        scenario(upstream, "drop", |p| p.drop_connections(), |_| {}).await;
        scenario(
            upstream,
            "refuse",
            |p| {
                p.set_refusing(true);
                p.drop_connections();
            },
            |p| p.set_refusing(false),
        )
        .await;
        scenario(
            upstream,
            "stall",
            |p| p.set_stalled(true),
            |p| p.set_stalled(false),
        )
        .await;
        scenario(
            upstream,
            "delay",
            |p| p.set_delay(Duration::from_millis(50)),
            |p| p.set_delay(Duration::ZERO),
        )
        .await;
        scenario(upstream, "cut", |p| p.cut_next_packet(), |_| {}).await;
        scenario(
            upstream,
            "disconnect-on-publish",
            |p| p.disconnect_on(PacketKind::Publish, Direction::ToBroker),
            |_| {},
        )
        .await;
        scenario(
            upstream,
            "disconnect-on-puback",
            |p| p.disconnect_on(PacketKind::PubAck, Direction::ToClient),
            |_| {},
        )
        .await;
        scenario(
            upstream,
            "disconnect-on-subscribe",
            |p| {
                p.disconnect_on(PacketKind::Subscribe, Direction::ToBroker);
                p.drop_connections();
            },
            |_| {},
        )
        .await;
        scenario(
            upstream,
            "reject-puback",
            |p| p.reject_next(PacketKind::PubAck),
            |_| {},
        )
        .await;
        scenario(
            upstream,
            "reject-connack",
            |p| {
                p.reject_next(PacketKind::ConnAck);
                p.drop_connections();
            },
            |_| {},
        )
        .await;
        scenario(
            upstream,
            "reject-suback",
            |p| {
                // A reconnect without session subscribes again; its SUBACK is refused.
                p.reject_next(PacketKind::SubAck);
                p.drop_connections();
            },
            |_| {},
        )
        .await;
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_first_connack_or_suback_is_a_typed_connect_error() {
    bounded("refused first connect", async {
        let server = LocalServer::start().await.unwrap();
        let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, server.port()));
        for kind in [PacketKind::ConnAck, PacketKind::SubAck] {
            let proxy = FaultProxy::start(upstream).await.unwrap();
            proxy.reject_next(kind);
            let err = Client::connect(fast("127.0.0.1", proxy.port()))
                .await
                .expect_err("a refused first connection must fail");
            assert_eq!(err.kind(), ErrorKind::Connection, "{kind:?}: {err}");
            assert_eq!(proxy.faults_applied(), 1);
        }
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_between_the_store_and_mosquitto_lose_no_request() {
    let Some(mosquitto) = testing::mosquitto_or_skip("store_side_faults") else {
        return;
    };
    bounded("store-side faults", async {
        let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, mosquitto.port()));
        let proxy = FaultProxy::start(upstream).await.unwrap();
        let store = LocalServer::start_with(
            ServerConfig::external(&format!("mqtt://127.0.0.1:{}", proxy.port())).unwrap(),
        )
        .await
        .unwrap();
        let client = Client::connect(
            fast("127.0.0.1", mosquitto.port()).with_request_timeout(Duration::from_secs(20)),
        )
        .await
        .unwrap();
        let k = key("store-side");
        let mut obs = client.observe(&k).await.unwrap();
        type Fault = fn(&FaultProxy);
        let faults: [(&str, Fault, Fault); 4] = [
            ("drop", |p| p.drop_connections(), |_| {}),
            ("cut", |p| p.cut_next_packet(), |_| {}),
            ("stall", |p| p.set_stalled(true), |p| p.set_stalled(false)),
            (
                "disconnect-on-publish-to-store",
                |p| p.disconnect_on(PacketKind::Publish, Direction::ToClient),
                |_| {},
            ),
        ];
        for (name, fault, heal) in faults {
            let requests: Vec<_> = (0..32)
                .map(|i| {
                    let c = client.clone();
                    let k = format!("{k}-{name}-{i}");
                    tokio::spawn(async move { c.set(&k, "v", SetOptions::default()).await })
                })
                .collect();
            fault(&proxy);
            tokio::time::sleep(Duration::from_millis(300)).await;
            heal(&proxy);
            // The store's session is kept across its reconnect: every request is answered.
            for r in requests {
                r.await
                    .unwrap()
                    .unwrap_or_else(|e| panic!("{name}: a request was lost: {e}"));
            }
            client.set(&k, name, SetOptions::default()).await.unwrap();
            wait_for_value(&mut obs, name, WAIT).await;
        }
        client.close().await;
        store.shutdown().await;
    })
    .await;
}
