//! Throughput benchmark: mqstate `get` / `set` against the limit, a raw MQTT5 QoS 1
//! request/response echo done with plain rumqttc, at 1 and 64 requests in flight, on the
//! embedded broker and on Mosquitto (skipped when it is not installed).
//!
//! ```text
//! cargo bench -p mqstate --bench throughput     # 7 rounds of 1 s slices
//! MQSTATE_BENCH_SECS=2 MQSTATE_BENCH_ROUNDS=9 cargo bench -p mqstate --bench throughput
//! ```
//!
//! Prints one table: ops/s, p50 and p99 latency, and each mqstate figure as a ratio to the
//! raw echo at the same depth on the same broker. Every workload runs once per round, in
//! short slices right after the raw echo it is compared with; a ratio is taken per round
//! and the table gives the median (and range) of those, which cancels most of the noise of a
//! shared machine. mqstate is measured against a stub store (a responder that answers like
//! the state store without doing any store work, so only the client differs from the raw
//! echo's requester) and against the local state store (end to end). Everything runs on
//! loopback, on one machine: the figures compare the client with the transport's limit, they
//! are not absolute.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mqstate::{Client, ConnectOptions, SetOptions};
use mqstate_server::broker::{EmbeddedBroker, EmbeddedBrokerConfig};
use mqstate_testing::{Backend, Mosquitto, TestStore};
use rumqttc::NetworkOptions;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use tokio::sync::{mpsc, oneshot};

const DEPTHS: [usize; 2] = [1, 64];
const VALUE: &[u8] = b"0123456789abcdef0123456789abcdef"; // 32 bytes

#[derive(Debug, Clone)]
struct Figure {
    broker: &'static str,
    workload: &'static str,
    depth: usize,
    round: usize,
    ops_per_sec: f64,
    p50: Duration,
    p99: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Runs `depth` workers, each issuing operations back to back, for `secs` (after a warm-up),
/// and measures throughput and latency.
async fn measure<F, Fut>(depth: usize, secs: f64, op: F) -> (f64, Duration, Duration)
where
    F: Fn(u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    // Warm-up.
    let warm = Instant::now() + Duration::from_millis(300);
    let mut tasks = Vec::new();
    for w in 0..depth {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while Instant::now() < warm {
                op((w as u64) << 32 | i).await;
                i += 1;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..depth {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(100_000);
            let mut i = 0u64;
            while Instant::now() < end {
                let t0 = Instant::now();
                op((w as u64) << 32 | i).await;
                lat.push(t0.elapsed());
                i += 1;
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort_unstable();
    (
        all.len() as f64 / elapsed,
        percentile(&all, 0.50),
        percentile(&all, 0.99),
    )
}

/// Unique per call: each round's clients get fresh sessions (clean start is off).
fn unique_tag() -> String {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    format!(
        "{:x}-{}",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    )
}

/// Plain rumqttc options with the MQTT session settings mqstate connects with (TCP_NODELAY,
/// clean start off with a one-hour session expiry), so that the broker does the same session
/// bookkeeping for the raw echo as for mqstate and only the client libraries differ.
fn raw_options(id: &str, port: u16) -> MqttOptions {
    let mut o = MqttOptions::new(id, "127.0.0.1", port);
    let mut net = NetworkOptions::new();
    net.set_tcp_nodelay(true);
    o.set_network_options(net);
    o.set_max_packet_size(Some(1024 * 1024));
    o.set_clean_start(false);
    o.set_session_expiry_interval(Some(3600));
    o
}

/// The limit: a raw QoS 1 request/response echo with plain rumqttc on both ends. Requests and
/// responses carry the same MQTT properties as state store ones (response topic, 16-byte
/// correlation data, expiry, content type, the same user properties), so the messages on the
/// wire have the same shape; the responder does nothing but echo. Responses are matched by
/// correlation through one map, as the client does.
struct RawEcho {
    client: AsyncClient,
    id: String,
    req_topic: String,
    resp_topic: String,
    waiters: Arc<Mutex<HashMap<u64, oneshot::Sender<()>>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Answers every request on `topic`: with its own payload (raw echo), or as a state store
/// with no store behind it would (a fixed GET value, `+OK` to anything else).
fn spawn_responder(
    port: u16,
    id: String,
    topic: String,
    stub_store: bool,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> impl std::future::Future<Output = ()> {
    let (responder, mut responder_loop) = AsyncClient::new(raw_options(&id, port), 1024);
    let (echo_tx, mut echo_rx) = mpsc::unbounded_channel::<(String, Bytes, Bytes)>();
    let (subacked_tx, subacked) = oneshot::channel();
    tasks.push(tokio::spawn(async move {
        let mut subacked_tx = Some(subacked_tx);
        loop {
            match responder_loop.poll().await {
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    if let Some(PublishProperties {
                        response_topic: Some(rt),
                        correlation_data: Some(cd),
                        ..
                    }) = p.properties
                    {
                        let _ = echo_tx.send((rt, cd, p.payload));
                    }
                }
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    if let Some(tx) = subacked_tx.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }));
    {
        let responder = responder.clone();
        tasks.push(tokio::spawn(async move {
            let get_reply = {
                let mut b = format!("${}\r\n", VALUE.len()).into_bytes();
                b.extend_from_slice(VALUE);
                b.extend_from_slice(b"\r\n");
                Bytes::from(b)
            };
            while let Some((topic, cd, payload)) = echo_rx.recv().await {
                let payload = if !stub_store {
                    payload
                } else if payload.starts_with(b"*2\r\n$3\r\nGET") {
                    get_reply.clone()
                } else {
                    Bytes::from_static(b"+OK\r\n")
                };
                // The properties of a state store response (same bytes on the wire).
                let props = PublishProperties {
                    correlation_data: Some(cd),
                    content_type: Some("application/octet-stream".into()),
                    user_properties: vec![
                        ("__stat".into(), "200".into()),
                        ("__protVer".into(), "1.0".into()),
                        ("__ts".into(), "001700000000000:00000:StateStore".into()),
                    ],
                    ..Default::default()
                };
                let _ = responder
                    .publish_bytes_with_properties(topic, QoS::AtLeastOnce, false, payload, props)
                    .await;
            }
        }));
    }
    async move {
        responder.subscribe(topic, QoS::AtLeastOnce).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), subacked)
            .await
            .expect("responder SUBACK")
            .unwrap();
    }
}

impl RawEcho {
    async fn start(port: u16) -> RawEcho {
        let tag = unique_tag();
        // Topics of the same shape and length as the state store's (the broker validates
        // and routes them on every message), but not the same request topic: the stub
        // store listens on that one.
        let requester_id = format!("mqstate-{:016x}", fastrand::u64(..));
        let req_topic = mqstate::protocol::topics::REQUEST_TOPIC.replace("0FE8", "BE7C");
        let resp_topic = mqstate::protocol::topics::response_topic(&requester_id);
        let mut tasks = Vec::new();
        let subscribed = spawn_responder(
            port,
            format!("bench-responder-{tag}"),
            req_topic.clone(),
            false,
            &mut tasks,
        );
        subscribed.await;

        // Requester.
        let (client, mut requester_loop) = AsyncClient::new(raw_options(&requester_id, port), 1024);
        // The same two subscriptions as mqstate's (responses, notifications).
        let filters = [
            resp_topic.clone(),
            mqstate::protocol::topics::notification_filter(&requester_id),
        ];
        client
            .subscribe_many(
                filters
                    .into_iter()
                    .map(|f| rumqttc::v5::mqttbytes::v5::Filter::new(f, QoS::AtLeastOnce)),
            )
            .await
            .unwrap();
        let waiters: Arc<Mutex<HashMap<u64, oneshot::Sender<()>>>> = Arc::default();
        let (subacks_tx, mut subacks) = mpsc::unbounded_channel();
        {
            let waiters = waiters.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    match requester_loop.poll().await {
                        Ok(Event::Incoming(Packet::Publish(p))) => {
                            let id = p
                                .properties
                                .and_then(|pr| pr.correlation_data)
                                .and_then(|c| <[u8; 8]>::try_from(c.get(..8)?).ok())
                                .map(u64::from_be_bytes);
                            if let Some(tx) = id.and_then(|id| waiters.lock().unwrap().remove(&id))
                            {
                                let _ = tx.send(());
                            }
                        }
                        Ok(Event::Incoming(Packet::SubAck(_))) => {
                            let _ = subacks_tx.send(());
                        }
                        Ok(_) => {}
                        Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                }
            }));
        }
        subacks.recv().await.unwrap();
        let echo = RawEcho {
            client,
            id: requester_id,
            req_topic,
            resp_topic,
            waiters,
            tasks,
        };
        echo.round_trip(u64::MAX).await;
        echo
    }

    async fn round_trip(&self, id: u64) {
        let (tx, rx) = oneshot::channel();
        self.waiters.lock().unwrap().insert(id, tx);
        // The properties of a state store request (same bytes on the wire as mqstate's).
        let mut correlation = [0u8; 16];
        correlation[..8].copy_from_slice(&id.to_be_bytes());
        let props = PublishProperties {
            payload_format_indicator: Some(0),
            response_topic: Some(self.resp_topic.clone()),
            correlation_data: Some(Bytes::copy_from_slice(&correlation)),
            message_expiry_interval: Some(10),
            content_type: Some("application/octet-stream".into()),
            user_properties: vec![
                ("__srcId".into(), self.id.clone()),
                ("__protVer".into(), "1.0".into()),
                ("__ts".into(), format!("001700000000000:00000:{}", self.id)),
                ("$partition".into(), self.id.clone()),
                ("$high_priority".into(), String::new()),
            ],
            ..Default::default()
        };
        self.client
            .publish_bytes_with_properties(
                self.req_topic.clone(),
                QoS::AtLeastOnce,
                false,
                Bytes::from_static(VALUE),
                props,
            )
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), rx)
            .await
            .expect("raw echo timed out")
            .unwrap();
    }
}

impl Drop for RawEcho {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A state store stub (answers without a store) on `port`, while it lives.
struct StubStore {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl StubStore {
    async fn start(port: u16) -> StubStore {
        let mut tasks = Vec::new();
        spawn_responder(
            port,
            format!("bench-stub-store-{}", unique_tag()),
            mqstate::protocol::topics::REQUEST_TOPIC.to_owned(),
            true,
            &mut tasks,
        )
        .await;
        StubStore { tasks }
    }
}

impl Drop for StubStore {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A broker with nothing else on it.
enum BareBroker {
    Embedded(EmbeddedBroker),
    Mosquitto(Mosquitto),
}

impl BareBroker {
    async fn start(backend: Backend) -> BareBroker {
        match backend {
            Backend::Embedded => {
                let (events, mut events_rx) = mpsc::unbounded_channel();
                // Nobody needs the connection events here; drain them.
                tokio::spawn(async move { while events_rx.recv().await.is_some() {} });
                let config = EmbeddedBrokerConfig {
                    bind: (std::net::Ipv4Addr::LOCALHOST, 0).into(),
                    max_packet_size: 16 << 20,
                };
                BareBroker::Embedded(EmbeddedBroker::start(&config, events).await.unwrap())
            }
            Backend::Mosquitto => BareBroker::Mosquitto(Mosquitto::start().unwrap()),
        }
    }

    fn port(&self) -> u16 {
        match self {
            BareBroker::Embedded(b) => b.local_addr().port(),
            BareBroker::Mosquitto(m) => m.port(),
        }
    }

    async fn shutdown(self) {
        match self {
            BareBroker::Embedded(b) => b.shutdown().await,
            BareBroker::Mosquitto(m) => drop(m),
        }
    }
}

/// One measured workload: its label and how to run one operation.
type Op = Arc<dyn Fn(u64) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

fn raw_op(echo: Arc<RawEcho>) -> Op {
    Arc::new(move |id| {
        let echo = echo.clone();
        Box::pin(async move { echo.round_trip(id).await })
    })
}

fn get_op(client: Client, errors: Arc<AtomicU64>) -> Op {
    Arc::new(move |_| {
        let (c, e) = (client.clone(), errors.clone());
        Box::pin(async move {
            if c.get("bench-key").await.is_err() {
                e.fetch_add(1, Ordering::Relaxed);
            }
        })
    })
}

fn set_op(client: Client, errors: Arc<AtomicU64>) -> Op {
    Arc::new(move |id| {
        let (c, e) = (client.clone(), errors.clone());
        Box::pin(async move {
            let key = format!("bench-set-{}", id >> 32);
            if c.set(key, VALUE, SetOptions::default()).await.is_err() {
                e.fetch_add(1, Ordering::Relaxed);
            }
        })
    })
}

async fn mqstate_client(port: u16) -> Client {
    let client = Client::connect(ConnectOptions::new("127.0.0.1", port))
        .await
        .unwrap();
    client
        .set("bench-key", VALUE, SetOptions::default())
        .await
        .unwrap();
    client
}

/// Everything measured on one broker, set up once: the raw echo and mqstate against the stub
/// store on `bare` (a broker with nothing else on it), mqstate against the local state store
/// on `store` (another broker of the same kind: the stub and the store would both answer on
/// one broker).
async fn bench_broker(
    broker: &'static str,
    bare: u16,
    store: u16,
    secs: f64,
    rounds: usize,
    out: &mut Vec<Figure>,
) {
    let errors = Arc::new(AtomicU64::new(0));
    let echo = Arc::new(RawEcho::start(bare).await);
    let _stub = StubStore::start(bare).await;
    let stub_client = mqstate_client(bare).await;
    let store_client = mqstate_client(store).await;
    let workloads: [(&'static str, Op); 5] = [
        ("raw echo", raw_op(echo)),
        (
            "mqstate get (stub store)",
            get_op(stub_client.clone(), errors.clone()),
        ),
        (
            "mqstate set (stub store)",
            set_op(stub_client.clone(), errors.clone()),
        ),
        (
            "mqstate get (local store)",
            get_op(store_client.clone(), errors.clone()),
        ),
        (
            "mqstate set (local store)",
            set_op(store_client.clone(), errors.clone()),
        ),
    ];
    // Short slices, interleaved: within a round every workload runs right after the raw
    // echo it is compared with, so a change in the machine's load hits both sides of a ratio.
    for round in 0..rounds {
        for depth in DEPTHS {
            for (workload, op) in &workloads {
                let op = op.clone();
                let (ops_per_sec, p50, p99) = measure(depth, secs, move |id| op(id)).await;
                out.push(Figure {
                    broker,
                    workload,
                    depth,
                    round,
                    ops_per_sec,
                    p50,
                    p99,
                });
            }
        }
    }
    let errors = errors.load(Ordering::Relaxed);
    assert_eq!(errors, 0, "{broker}: {errors} mqstate requests failed");
    stub_client.close().await;
    store_client.close().await;
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// One row per (broker, workload, depth): the medians over the rounds of ops/s, p50, p99,
/// and of the per-round ratio to the raw echo of the same round (the paired comparison is
/// what the noise of a shared machine cancels out of).
fn print_table(figures: &[Figure]) {
    println!();
    println!(
        "| broker | workload | in flight | ops/s | p50 | p99 | vs raw echo (median of rounds) | min-max |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    let mut seen: Vec<(&str, &str, usize)> = Vec::new();
    for f in figures {
        let id = (f.broker, f.workload, f.depth);
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        let same: Vec<&Figure> = figures
            .iter()
            .filter(|g| (g.broker, g.workload, g.depth) == id)
            .collect();
        let ratios: Vec<f64> = same
            .iter()
            .filter_map(|g| {
                figures
                    .iter()
                    .find(|r| {
                        r.broker == g.broker
                            && r.depth == g.depth
                            && r.round == g.round
                            && r.workload == "raw echo"
                    })
                    .filter(|r| r.ops_per_sec > 0.0)
                    .map(|r| g.ops_per_sec / r.ops_per_sec)
            })
            .collect();
        let (ratio, range) = if f.workload == "raw echo" {
            ("1.00 (limit)".to_owned(), String::new())
        } else if ratios.is_empty() {
            ("-".to_owned(), String::new())
        } else {
            let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = ratios.iter().copied().fold(0.0, f64::max);
            (
                format!("{:.2}", median(ratios.clone())),
                format!("{lo:.2}-{hi:.2}"),
            )
        };
        println!(
            "| {} | {} | {} | {:.0} | {:.3} ms | {:.3} ms | {} | {} |",
            f.broker,
            f.workload,
            f.depth,
            median(same.iter().map(|g| g.ops_per_sec).collect()),
            median(same.iter().map(|g| g.p50.as_secs_f64()).collect()) * 1e3,
            median(same.iter().map(|g| g.p99.as_secs_f64()).collect()) * 1e3,
            ratio,
            range
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs it with no such flag and
    // expects it to be quick: run one short pass then.
    let bench_mode = std::env::args().any(|a| a == "--bench");
    let secs: f64 = std::env::var("MQSTATE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if bench_mode { 1.0 } else { 0.2 });
    let rounds: usize = std::env::var("MQSTATE_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if bench_mode { 7 } else { 1 })
        .max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut figures = Vec::new();
    runtime.block_on(async {
        for (name, backend) in [
            ("embedded", Backend::Embedded),
            ("mosquitto", Backend::Mosquitto),
        ] {
            // The local store on its own broker; a bare broker of the same kind beside it for
            // the raw echo and the stub store (the stub and the store would both answer on one).
            let Some(store) = TestStore::start(backend, "throughput").await else {
                continue;
            };
            let bare = BareBroker::start(backend).await;
            bench_broker(name, bare.port(), store.port(), secs, rounds, &mut figures).await;
            store.shutdown().await;
            bare.shutdown().await;
        }
    });
    print_table(&figures);
}
