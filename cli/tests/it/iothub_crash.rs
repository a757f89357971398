//! The local IoT Hub's crash test, short: `mqstate serve --data-dir` SIGKILLed 5 times while a
//! service sends C2D messages and a device completes them (the 30-kill run is
//! `scripts/iothub-crash-test`; the harness is `tests/it/support/iothub_crash.rs`).

use std::time::Duration;

use crate::support::iothub_crash as support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_kills_lose_no_acknowledged_message_and_keep_the_registry() {
    let tmp = tempfile::tempdir().unwrap();
    let config = support::CrashConfig {
        binary: env!("CARGO_BIN_EXE_mqstate").into(),
        kills: 5,
        data_dir: tmp.path().join("data"),
        senders: 2,
        uptime: (Duration::from_millis(300), Duration::from_millis(1000)),
        verbose: false,
    };
    let report = support::run(&config).await;
    println!("{report}");
    assert!(
        report.passed(),
        "{report}\nlost: {:?}\nafter completion: {:?}\nregistry: {:?}",
        report.lost,
        report.delivered_after_completion,
        report.registry_mismatches
    );
}
