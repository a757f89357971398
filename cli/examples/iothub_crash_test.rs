//! Crash test of the local IoT Hub's state in `mqstate serve --data-dir`: a service sends
//! C2D messages through the admin API, a device receives and completes them, and the server
//! is killed with SIGKILL at random moments (30 times by default) and restarted on the same
//! data dir. Every acknowledged send must be delivered or accounted for in feedback (or still
//! queued), none delivered after the service received its Success feedback, and the registry
//! and keys must survive every restart. The harness is `cli/tests/it/support/iothub_crash.rs`
//! (`cli/tests/it/iothub_crash.rs` runs it with 5 kills in the test command).
//!
//! Run it with `scripts/iothub-crash-test` (it builds the release binary first), or:
//!
//! ```sh
//! cargo build --release -p mqstate-cli
//! cargo run --release -p mqstate-cli --example iothub_crash_test -- --binary target/release/mqstate
//! ```
//!
//! The exit status is non-zero if anything was lost, delivered after its completion, or the
//! registry changed.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::path::PathBuf;
use std::time::Duration;

#[path = "../tests/it/support/iothub_crash.rs"]
mod harness;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut binary = PathBuf::from("target/release/mqstate");
    let mut kills = 30;
    let mut data_dir = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--binary" => binary = PathBuf::from(value()),
            "--kills" => kills = value().parse().expect("--kills N"),
            "--data-dir" => data_dir = Some(PathBuf::from(value())),
            other => panic!("unknown argument {other} (--binary PATH, --kills N, --data-dir DIR)"),
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let config = harness::CrashConfig {
        binary,
        kills,
        data_dir: data_dir.unwrap_or_else(|| tmp.path().join("data")),
        senders: 4,
        uptime: (Duration::from_millis(300), Duration::from_millis(1500)),
        verbose: true,
    };
    let report = harness::run(&config).await;
    println!("{report}");
    if !report.lost.is_empty() {
        println!("lost: {:?}", &report.lost[..report.lost.len().min(20)]);
    }
    if !report.delivered_after_completion.is_empty() {
        println!(
            "delivered after completion: {:?}",
            &report.delivered_after_completion[..report.delivered_after_completion.len().min(20)]
        );
    }
    for m in &report.registry_mismatches {
        println!("registry: {m}");
    }
    if report.passed() {
        println!("IOTHUB CRASH TEST PASSED");
    } else {
        println!("IOTHUB CRASH TEST FAILED");
        std::process::exit(1);
    }
}
