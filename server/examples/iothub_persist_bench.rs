//! What `--data-dir` costs the local IoT Hub: C2D sends acknowledged per second through the
//! HTTP admin API (each 201 waits for its group commit), and messages delivered and completed
//! per second by one raw MQTT 3.1.1 device (each delivery waits for the commit holding its
//! lock), in memory and with a data dir, on the same machine.
//!
//! ```sh
//! cargo run --release -p mqstate-server --example iothub_persist_bench -- [MESSAGES] [SENDERS] [ROUNDS]
//! ```

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mqstate_server::iothub::admin::{AdminClient, SendRequest};
use mqstate_server::iothub::{DeviceSpec, IotHubConfig, IotHubServer};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(5_000, |a| a.parse().expect("MESSAGES"));
    let senders: usize = args.next().map_or(16, |a| a.parse().expect("SENDERS"));
    let rounds: usize = args.next().map_or(3, |a| a.parse().expect("ROUNDS"));
    for round in 1..=rounds {
        for persisted in [false, true] {
            let tmp = tempfile::tempdir().unwrap();
            let (sends, deliveries) = run(n, senders, persisted.then(|| tmp.path())).await;
            println!(
                "round {round} {:<10} {sends:>7.0} sends/s (HTTP, {senders} at once), {deliveries:>7.0} deliveries+completions/s",
                if persisted { "data dir" } else { "memory" },
            );
        }
    }
}

async fn run(n: usize, senders: usize, dir: Option<&std::path::Path>) -> (f64, f64) {
    let server = IotHubServer::start(IotHubConfig {
        max_queue_depth: n,
        data_dir: dir.map(std::path::Path::to_owned),
        ..IotHubConfig::default()
    })
    .await
    .unwrap();
    let hub = server.hub();
    hub.add_device(&DeviceSpec::parse("bench").unwrap())
        .unwrap();
    let endpoints = hub.endpoints();
    let admin = AdminClient::new(&format!("http://{}", endpoints.admin_endpoint.unwrap())).unwrap();

    // Sends through the admin API, `senders` at a time.
    let left = Arc::new(AtomicUsize::new(n));
    let began = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..senders {
        let (admin, left) = (admin.clone(), left.clone());
        tasks.push(tokio::spawn(async move {
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1))
                .is_ok()
            {
                let request = SendRequest {
                    payload: Some("x".repeat(100)),
                    message_id: Some("m".into()),
                    ..SendRequest::default()
                };
                admin.send("bench", &request).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let sends = n as f64 / began.elapsed().as_secs_f64();

    // One device takes them all (automatic PUBACKs); done when the queue is empty and the
    // completions are on disk.
    let token = hub.device_token("bench", Duration::from_secs(600)).unwrap();
    let mut options = MqttOptions::new(
        "bench",
        "127.0.0.1",
        endpoints.device_endpoint.unwrap().port(),
    );
    options.set_credentials(hub.device_username("bench"), token);
    options.set_inflight(100);
    let (client, mut eventloop) = AsyncClient::new(options, 1024);
    client
        .subscribe("devices/bench/messages/devicebound/#", QoS::AtLeastOnce)
        .await
        .unwrap();
    let began = Instant::now();
    let poller = tokio::spawn(async move {
        while let Ok(event) = eventloop.poll().await {
            if let Event::Incoming(Packet::Disconnect) = event {
                break;
            }
        }
    });
    while hub.queue("bench").unwrap().depth > 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    hub.persisted().await.unwrap();
    let deliveries = n as f64 / began.elapsed().as_secs_f64();
    let _ = client.disconnect().await;
    poller.abort();
    server.shutdown().await;
    (sends, deliveries)
}
