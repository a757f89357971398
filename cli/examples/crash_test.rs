//! Crash test of `mqstate serve --data-dir`: two clients keep 64 SETs in flight (32 writer
//! tasks each, every task writing increasing sequence numbers to its own key, with
//! `persist`); the server is killed with SIGKILL at a random moment, restarted on the same
//! data dir, and every key is read back: its value must be the last acknowledged write or a
//! later one. Repeated `--kills` times (default 50).
//!
//! Run it with `scripts/crash-test` (it builds the release binary first), or:
//!
//! ```sh
//! cargo build --release -p mqstate-cli
//! cargo run --release -p mqstate-cli --example crash_test -- --binary target/release/mqstate
//! ```
//!
//! It prints one line per kill and, at the end, `N kills, M acknowledged writes, L lost`;
//! the exit status is non-zero if anything was lost.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mqstate::{Client, ConnectOptions, ReconnectPolicy, SetOptions};

const CLIENTS: usize = 2;
const TASKS_PER_CLIENT: usize = 32;

struct Args {
    binary: PathBuf,
    kills: u32,
    data_dir: Option<PathBuf>,
}

fn parse_args() -> Args {
    let mut args = Args {
        binary: PathBuf::from("target/release/mqstate"),
        kills: 50,
        data_dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--binary" => args.binary = PathBuf::from(value()),
            "--kills" => args.kills = value().parse().expect("--kills N"),
            "--data-dir" => args.data_dir = Some(PathBuf::from(value())),
            other => panic!("unknown argument {other} (--binary PATH, --kills N, --data-dir DIR)"),
        }
    }
    args
}

fn start_server(binary: &PathBuf, port: u16, dir: &std::path::Path) -> Child {
    Command::new(binary)
        .args([
            "serve",
            "--no-iothub",
            "--no-dashboard",
            "--port",
            &port.to_string(),
            "--log",
            "error",
            "--data-dir",
        ])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()))
}

/// The last acknowledged sequence number of each key.
type Acked = Arc<Mutex<HashMap<String, u64>>>;

async fn writer(
    client: Client,
    key: String,
    next: Arc<AtomicU64>,
    acked: Acked,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
) {
    while !stop.load(Ordering::Relaxed) {
        let seq = next.fetch_add(1, Ordering::Relaxed);
        if client
            .set(&key, seq.to_string(), SetOptions::default().persist())
            .await
            .is_ok()
        {
            count.fetch_add(1, Ordering::Relaxed);
            let mut acked = acked.lock().unwrap();
            let slot = acked.entry(key.clone()).or_insert(0);
            *slot = (*slot).max(seq);
        } else {
            // Killed mid-request: wait for the server to come back rather than spin.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Waits until the restarted server answers.
async fn wait_ready(client: &Client) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.get("crash-test/probe").await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the server did not come back within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::main]
async fn main() {
    let args = parse_args();
    let tmp = tempfile::tempdir().unwrap();
    let dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| tmp.path().join("data"));
    let port = mqstate_testing::free_port().unwrap();
    let mut server = start_server(&args.binary, port, &dir);

    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let options = ConnectOptions::new("127.0.0.1", port)
            .with_client_id(format!("crash-test-{i}"))
            .with_reconnect(ReconnectPolicy::new(
                Duration::from_millis(20),
                Duration::from_millis(200),
            ));
        let deadline = Instant::now() + Duration::from_secs(60);
        let client = loop {
            match Client::connect(options.clone()).await {
                Ok(c) => break c.with_timeout(Duration::from_secs(5)),
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("cannot connect: {e}"),
            }
        };
        wait_ready(&client).await;
        clients.push(client);
    }

    let acked: Acked = Arc::default();
    let count = Arc::new(AtomicU64::new(0));
    let sequences: Vec<(String, Arc<AtomicU64>)> = (0..CLIENTS * TASKS_PER_CLIENT)
        .map(|i| (format!("crash-test/key-{i}"), Arc::new(AtomicU64::new(1))))
        .collect();
    let mut lost = 0u64;
    let started = Instant::now();
    for kill in 1..=args.kills {
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for (i, (key, next)) in sequences.iter().enumerate() {
            let client = clients[i % CLIENTS].clone();
            tasks.push(tokio::spawn(writer(
                client,
                key.clone(),
                next.clone(),
                acked.clone(),
                stop.clone(),
                count.clone(),
            )));
        }
        // A random moment: 50 to 800 ms of full load.
        tokio::time::sleep(Duration::from_millis(fastrand::u64(50..800))).await;
        server.kill().unwrap(); // SIGKILL
        server.wait().unwrap();
        stop.store(true, Ordering::Relaxed);
        server = start_server(&args.binary, port, &dir);
        // Requests in flight at the kill end (answered by the new server, or failed).
        for t in tasks {
            t.await.unwrap();
        }
        wait_ready(&clients[0]).await;
        let expected = acked.lock().unwrap().clone();
        let mut lost_now = 0;
        for (key, want) in &expected {
            let got = clients[0].get(key).await.unwrap();
            let got: u64 = got
                .map(|v| String::from_utf8_lossy(&v.value).parse().unwrap())
                .unwrap_or(0);
            if got < *want {
                eprintln!("LOST: {key} holds {got}, acknowledged {want}");
                lost_now += 1;
            }
        }
        lost += lost_now;
        println!(
            "kill {kill:>3}: {} keys checked, {} acknowledged writes so far, {lost_now} lost",
            expected.len(),
            count.load(Ordering::Relaxed)
        );
    }
    server.kill().unwrap();
    server.wait().unwrap();
    let writes = count.load(Ordering::Relaxed);
    println!(
        "{} kills, {writes} acknowledged writes, {lost} lost ({} in flight from {CLIENTS} clients, {:.0} s)",
        args.kills,
        CLIENTS * TASKS_PER_CLIENT,
        started.elapsed().as_secs_f64()
    );
    if lost > 0 {
        std::process::exit(1);
    }
}
