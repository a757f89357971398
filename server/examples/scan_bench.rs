//! SCAN benchmark: time per page and keys listed per second against stores of 10,000, 100,000
//! and 1,000,000 keys, through the real client and the real local server (embedded broker).
//!
//! ```sh
//! cargo run --release -p mqstate-server --example scan_bench            # 7 rounds
//! cargo run --release -p mqstate-server --example scan_bench -- 9 1000000
//! ```
//!
//! Arguments: rounds (default 7), and the largest store (default 1,000,000 keys; the others
//! are 10,000 and 100,000). Each store is its own `mqstate serve` in-process, filled with
//! 12-byte keys (`k/0000000`...). Then, each round, the stores are measured one after the
//! other, alternating, in slices of 20 pages: a slice goes on with that store's scan where the
//! previous slice stopped (so, over the rounds, the scan of the largest store reaches deep into
//! it) and starts a new scan when one ends. A page is 500 keys (the server's page size).
//!
//! It prints, per round, each store's time per page and keys per second, and the ratio of the
//! largest store's time per page to the smallest's; at the end the median of each over the
//! rounds, with its range. The claim it checks (docs/protocol.md section 8): a page costs what
//! it returns, not where it is in the store, so the ratio stays near 1 (target: within 2).
//! This is a benchmark, not a test: it asserts nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::time::{Duration, Instant};

use mqstate::{Client, ConnectOptions, Scan, SetOptions};
use mqstate_server::LocalServer;

/// Pages per slice.
const SLICE_PAGES: usize = 20;
/// Writes in flight while filling a store.
const FILL_IN_FLIGHT: usize = 64;

struct Subject {
    keys: usize,
    _server: LocalServer,
    client: Client,
    scan: Scan,
}

impl Subject {
    async fn start(keys: usize) -> Subject {
        let server = LocalServer::start().await.unwrap();
        let client = Client::connect(ConnectOptions::new(server.host(), server.port()))
            .await
            .unwrap();
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..FILL_IN_FLIGHT {
            let client = client.clone();
            tasks.spawn(async move {
                for i in (w..keys).step_by(FILL_IN_FLIGHT) {
                    client
                        .set(format!("k/{i:07}"), "v", SetOptions::default())
                        .await
                        .unwrap();
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
        eprintln!("filled {keys} keys in {:.1?}", started.elapsed());
        let scan = client.scan("k/*").unwrap();
        Subject {
            keys,
            _server: server,
            client,
            scan,
        }
    }

    /// One slice: `SLICE_PAGES` pages of the running scan; (time per page, keys per second).
    async fn slice(&mut self) -> (Duration, f64) {
        let (mut pages, mut keys) = (0usize, 0usize);
        let started = Instant::now();
        while pages < SLICE_PAGES {
            match self.scan.next_page().await.unwrap() {
                Some(page) => {
                    pages += 1;
                    keys += page.len();
                }
                None => self.scan = self.client.scan("k/*").unwrap(),
            }
        }
        let took = started.elapsed();
        (took / SLICE_PAGES as u32, keys as f64 / took.as_secs_f64())
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(7, |a| a.parse().expect("rounds"));
    let largest: usize = args.next().map_or(1_000_000, |a| a.parse().expect("keys"));
    let mut subjects = Vec::new();
    for keys in [10_000, 100_000, largest] {
        subjects.push(Subject::start(keys).await);
    }
    // One slice each, unmeasured: connections, buffers and the allocator warmed.
    for s in &mut subjects {
        s.slice().await;
    }
    let n = subjects.len();
    let mut per_page: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut ratios = Vec::new();
    for round in 1..=rounds {
        let mut line = format!("round {round}:");
        for (i, s) in subjects.iter_mut().enumerate() {
            let (page, rate) = s.slice().await;
            let ms = page.as_secs_f64() * 1e3;
            per_page[i].push(ms);
            rates[i].push(rate);
            line += &format!(
                "  {} keys {ms:.2} ms/page {:.0} keys/s;",
                s.keys,
                rate.round()
            );
        }
        let ratio = per_page[n - 1][round - 1] / per_page[0][round - 1];
        ratios.push(ratio);
        println!("{line}  ratio {ratio:.2}");
    }
    println!("median of {rounds} rounds (range):");
    for (i, s) in subjects.iter().enumerate() {
        let (lo, hi) = range(&per_page[i]);
        println!(
            "  {:>9} keys: {:.2} ms per page ({lo:.2}-{hi:.2}), {:.0} keys/s",
            s.keys,
            median(&mut per_page[i].clone()),
            median(&mut rates[i].clone())
        );
    }
    let (lo, hi) = range(&ratios);
    println!(
        "  time per page, {} keys / 10000 keys: {:.2} ({lo:.2}-{hi:.2}); target: within 2",
        largest,
        median(&mut ratios.clone())
    );
    for s in subjects {
        s.client.close().await;
    }
}

fn range(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)))
}
