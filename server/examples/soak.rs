//! Soak test: the local state store (embedded broker) and mqstate clients under constant
//! churn and random faults for a given duration, then a report.
//!
//! ```sh
//! cargo run --release -p mqstate-server --example soak -- 600   # seconds (default 60)
//! ```
//!
//! Writers (8 tasks, 16 keys each, one SET or DEL at a time) and an observer (one key per
//! writer) reach the broker through a [`FaultProxy`] that, every 3-8 s, drops the connections,
//! stalls them for 0.5 s, cuts a packet in half, delays for 1 s or disconnects on a PUBLISH.
//! At the end it prints:
//! - acknowledged / failed writes, and **lost** writes: keys whose stored value is older than
//!   the last acknowledged write (an acknowledged write must never be lost);
//! - **missed notifications**: observed keys whose last notification differs from the stored
//!   value once everything settled (an observer left silent);
//! - p50 / p99 latency of acknowledged writes;
//! - the RSS of the store process (embedded broker and store; the soak runs them in a child
//!   process, `soak --serve PORT`) every minute, and its growth from the end of the warm-up
//!   (5.5 min: the duplicate cache keeps answers for 5 min, so it fills until then) to the end.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mqstate::{Client, ConnectOptions, NotifyOperation, ReconnectPolicy, SetOptions};
use mqstate_server::{LocalServer, ServerConfig};
use mqstate_testing as testing;
use mqstate_testing::fault_proxy::{Direction, FaultProxy, PacketKind};
use tokio::sync::Mutex;

const WRITERS: usize = 8;
const KEYS_PER_WRITER: usize = 16;
/// The store's duplicate cache keeps every answer for 5 minutes (its default TTL), so its size
/// only levels off after that: RSS is compared from there on.
const WARM_UP: Duration = Duration::from_secs(330);

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

#[derive(Default)]
struct Tally {
    acked: AtomicU64,
    failed: AtomicU64,
    latencies_us: Mutex<Vec<u64>>,
    /// Per key: the last acknowledged write (value, or None for a DEL).
    last_acked: Mutex<HashMap<String, Option<String>>>,
}

/// `soak --serve PORT`: the store process; runs until its stdin closes.
async fn serve(port: u16) {
    let server = LocalServer::start_with(ServerConfig::default().with_port(port))
        .await
        .expect("start the local store");
    println!("ready");
    tokio::task::spawn_blocking(|| {
        let mut sink = String::new();
        while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
    })
    .await
    .unwrap();
    server.shutdown().await;
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--serve") {
        serve(args[2].parse().expect("port")).await;
        return;
    }
    let secs: u64 = args
        .get(1)
        .map(|a| a.parse().expect("duration in seconds"))
        .unwrap_or(60);
    let duration = Duration::from_secs(secs);
    let port = testing::free_port().unwrap();
    let mut store = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--serve", &port.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the store process");
    let store_pid = store.id();
    {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(store.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the store process did not start");
    }
    let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let proxy = Arc::new(FaultProxy::start(upstream).await.unwrap());
    let options = || {
        ConnectOptions::new("127.0.0.1", proxy.port())
            .with_reconnect(ReconnectPolicy::new(
                Duration::from_millis(20),
                Duration::from_millis(500),
            ))
            .with_request_timeout(Duration::from_secs(5))
    };
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();

    // The observer: one key per writer; remembers the last value it was told.
    let observer = Client::connect(options()).await.unwrap();
    let seen: Arc<Mutex<HashMap<String, Option<String>>>> = Arc::default();
    let mut observers = Vec::new();
    for w in 0..WRITERS {
        let k = format!("soak-{w}-0");
        let mut obs = observer.observe(&k).await.unwrap();
        let seen = seen.clone();
        observers.push(tokio::spawn(async move {
            while let Some(item) = obs.recv().await {
                if let Ok(n) = item {
                    let v = match n.operation {
                        NotifyOperation::Set(v) => Some(String::from_utf8_lossy(&v).into_owned()),
                        NotifyOperation::Delete => None,
                    };
                    seen.lock().await.insert(k.clone(), v);
                }
            }
        }));
    }

    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let client = Client::connect(options()).await.unwrap();
        let tally = tally.clone();
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let mut n: u64 = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let k = format!("soak-{w}-{}", n % KEYS_PER_WRITER as u64);
                let t = Instant::now();
                // Churn: one write in ten is a DEL, values vary in size.
                let (result, value) = if n.is_multiple_of(10) {
                    (client.del(&k, None).await.map(|_| ()), None)
                } else {
                    let v = format!("{n}-{}", "x".repeat((n % 512) as usize));
                    (
                        client.set(&k, &v, SetOptions::default()).await.map(|_| ()),
                        Some(v),
                    )
                };
                match result {
                    Ok(()) => {
                        tally.acked.fetch_add(1, Ordering::Relaxed);
                        let us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
                        let mut l = tally.latencies_us.lock().await;
                        if l.len() < 2_000_000 {
                            l.push(us);
                        }
                        drop(l);
                        tally.last_acked.lock().await.insert(k, value);
                    }
                    Err(_) => {
                        tally.failed.fetch_add(1, Ordering::Relaxed);
                        // Its outcome is unknown: forget what we expect for this key until the
                        // next acknowledged write.
                        tally.last_acked.lock().await.remove(&k);
                    }
                }
            }
            client.close().await;
        }));
    }

    // Faults at random.
    let faults = {
        let proxy = proxy.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut count: HashMap<&str, u32> = HashMap::new();
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(fastrand::u64(3000..8000))).await;
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let name = match fastrand::u8(0..5) {
                    0 => {
                        proxy.drop_connections();
                        "drop"
                    }
                    1 => {
                        proxy.set_stalled(true);
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        proxy.set_stalled(false);
                        "stall"
                    }
                    2 => {
                        proxy.cut_next_packet();
                        "cut"
                    }
                    3 => {
                        proxy.set_delay(Duration::from_millis(20));
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        proxy.set_delay(Duration::ZERO);
                        "delay"
                    }
                    _ => {
                        proxy.disconnect_on(PacketKind::Publish, Direction::ToBroker);
                        "disconnect-on-publish"
                    }
                };
                *count.entry(name).or_default() += 1;
            }
            count
        })
    };

    let warm_up = WARM_UP.min(duration / 2);
    let mut samples = Vec::new();
    let mut rss_start = 0;
    let mut warmed = false;
    while start.elapsed() < duration {
        let next_minute = Duration::from_secs((start.elapsed().as_secs() / 60 + 1) * 60);
        let wake = if warmed {
            next_minute
        } else {
            next_minute.min(warm_up)
        };
        tokio::time::sleep(wake.min(duration).saturating_sub(start.elapsed())).await;
        if !warmed && start.elapsed() >= warm_up {
            warmed = true;
            rss_start = rss_kib(store_pid);
        }
        samples.push((start.elapsed().as_secs(), rss_kib(store_pid)));
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let faults = faults.await.unwrap();
    // Let the observer settle (reconnects, catch-ups), then compare with the store.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let checker = Client::connect(ConnectOptions::new("127.0.0.1", port))
        .await
        .unwrap();
    let mut lost = 0;
    let last = tally.last_acked.lock().await.clone();
    for (k, expected) in &last {
        let stored = checker
            .get(k)
            .await
            .unwrap()
            .map(|v| String::from_utf8_lossy(&v.value).into_owned());
        if stored != *expected {
            lost += 1;
            eprintln!("LOST {k}: expected {expected:?}, stored {stored:?}");
        }
    }
    let mut missed = 0;
    for w in 0..WRITERS {
        let k = format!("soak-{w}-0");
        let stored = checker
            .get(&k)
            .await
            .unwrap()
            .map(|v| String::from_utf8_lossy(&v.value).into_owned());
        let told = seen.lock().await.get(&k).cloned().flatten();
        if stored != told {
            missed += 1;
            eprintln!("MISSED {k}: observer has {told:?}, store {stored:?}");
        }
    }
    let rss_end = rss_kib(store_pid);
    let mut lat = tally.latencies_us.lock().await.clone();
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .map_or(0.0, |us| *us as f64 / 1000.0)
    };
    let mut faults: Vec<_> = faults.into_iter().collect();
    faults.sort();
    println!(
        "soak: {:?}, {WRITERS} writers x {KEYS_PER_WRITER} keys, 1 observer of {WRITERS} keys",
        start.elapsed()
    );
    println!(
        "faults injected: {faults:?} ({} one-shot faults took effect)",
        proxy.faults_applied()
    );
    println!(
        "writes: acknowledged {}, failed (typed errors) {}, lost {lost} (of {} keys checked)",
        tally.acked.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
        last.len()
    );
    println!("missed notifications (observed keys left stale): {missed} of {WRITERS}");
    println!(
        "latency of acknowledged writes: p50 {:.3} ms, p99 {:.3} ms",
        pct(0.50),
        pct(0.99)
    );
    println!("store process RSS (s, KiB): {samples:?}");
    println!(
        "store process RSS after {}s warm-up: {rss_start} KiB, at the end: {rss_end} KiB ({:+.1} %)",
        warm_up.as_secs(),
        (rss_end as f64 - rss_start as f64) * 100.0 / rss_start.max(1) as f64
    );
    checker.close().await;
    observer.close().await;
    for o in observers {
        o.abort();
    }
    drop(proxy);
    drop(store.stdin.take()); // the store process stops when its stdin closes
    let _ = store.wait();
    if lost > 0 || missed > 0 {
        std::process::exit(1);
    }
}
