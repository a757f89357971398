//! SET throughput with `--data-dir` (every key persisted, each answer sent only once it is on
//! disk) as a ratio to the in-memory server, at 1 and 64 requests in flight, in one run.
//!
//! ```sh
//! cargo run --release -p mqstate-cli --example persist_bench -- [--rounds 7] [--slice-ms 1000]
//! ```
//!
//! Both servers (embedded broker + store, in this process) run side by side; each round
//! measures a slice on the in-memory one, then a slice on the persisted one, and the ratio is
//! taken per round (so that a change of machine load hits both sides alike). The data dir is
//! a temporary directory (on the same disk as `$TMPDIR`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mqstate::{Client, ConnectOptions, SetOptions};
use mqstate_server::persist::PersistMode;
use mqstate_server::{LocalServer, ServerConfig};

/// SETs completed on `client` with `depth` in flight during `slice`.
async fn measure(client: &Client, depth: usize, slice: Duration) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let value = vec![b'v'; 64];
    let mut tasks = Vec::new();
    for t in 0..depth {
        let (client, stop, done, value) =
            (client.clone(), stop.clone(), done.clone(), value.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("bench/{t}/{}", i % 100);
                client
                    .set(key, &value, SetOptions::default())
                    .await
                    .unwrap();
                done.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(slice).await;
    let count = done.load(Ordering::Relaxed);
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    count as f64 / elapsed.as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

#[tokio::main]
async fn main() {
    let mut rounds = 7usize;
    let mut slice = Duration::from_millis(1000);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--rounds" => rounds = v.parse().unwrap(),
            "--slice-ms" => slice = Duration::from_millis(v.parse().unwrap()),
            other => panic!("unknown argument {other}"),
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let memory = LocalServer::start().await.unwrap();
    let persisted = LocalServer::start_with(
        ServerConfig::default().with_data_dir(tmp.path().join("data"), PersistMode::All),
    )
    .await
    .unwrap();
    let connect = |s: &LocalServer| ConnectOptions::new(s.host(), s.port());
    let mem_client = Client::connect(connect(&memory)).await.unwrap();
    let disk_client = Client::connect(connect(&persisted)).await.unwrap();

    println!(
        "| in flight | in memory (ops/s) | --data-dir, all keys (ops/s) | ratio (median of rounds) | min-max |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for depth in [1usize, 64] {
        // Warm up both.
        measure(&mem_client, depth, Duration::from_millis(200)).await;
        measure(&disk_client, depth, Duration::from_millis(200)).await;
        let (mut mem, mut disk, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let m = measure(&mem_client, depth, slice).await;
            let d = measure(&disk_client, depth, slice).await;
            mem.push(m);
            disk.push(d);
            ratios.push(d / m);
        }
        let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios.iter().copied().fold(0.0, f64::max);
        println!(
            "| {depth} | {:.0} | {:.0} | {:.2} | {lo:.2}-{hi:.2} |",
            median(mem),
            median(disk),
            median(ratios)
        );
    }
    mem_client.close().await;
    disk_client.close().await;
    memory.shutdown().await;
    persisted.shutdown().await;
}
