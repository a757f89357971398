//! Throughput of the IoT Hub device client: C2D messages received and completed per second by
//! one device, against a raw rumqttc v4 (MQTT 3.1.1) QoS 1 subscriber with automatic PUBACKs
//! on the same in-process local hub. Each slice queues N messages while the device is offline,
//! then times from connecting to the last PUBACK (the hub's queue empty). Baseline and subject
//! alternate in slices in the same run (raw first in odd rounds, the client first in even ones,
//! so neither always runs on a warmer or colder process); each round's ratio is its client slice
//! over its raw slice, and the run reports the median ratio and the range.
//!
//! The application completes each message as soon as it has received it, one at a time (explicit
//! completion: the PUBACK leaves only then).
//!
//! ```sh
//! cargo run --release -p mqstate --example iothub_throughput -- [MESSAGES] [ROUNDS] [raw|client]
//! ```
//!
//! With `raw` or `client`, only that side runs (ROUNDS slices), for profiling one side alone.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::time::{Duration, Instant};

use mqstate::iothub::{DeviceClient, DeviceOptions};
use mqstate_server::iothub::{DeviceSpec, IotHub, IotHubConfig, IotHubServer};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};

#[path = "support/iothub_bench.rs"]
mod support;
use support::{DEVICE, drained, fill, print_median};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(5_000, |a| a.parse().expect("MESSAGES"));
    let rounds: usize = args.next().map_or(5, |a| a.parse().expect("ROUNDS"));
    let only = args.next();
    let server = IotHubServer::start(IotHubConfig {
        admin_port: None,
        max_queue_depth: n,
        ..IotHubConfig::default()
    })
    .await
    .unwrap();
    let hub = server.hub();
    hub.add_device(&DeviceSpec::parse(DEVICE).unwrap()).unwrap();
    let port = hub.endpoints().device_endpoint.unwrap().port();

    // Establish both sessions (subscriptions) once.
    raw_round(&hub, port, 0).await;
    client_round(&hub, port, 0).await;
    if let Some(side) = only.as_deref() {
        for slice in 1..=rounds {
            let rate = match side {
                "raw" => raw_round(&hub, port, n).await,
                "client" => client_round(&hub, port, n).await,
                other => panic!("unknown side {other:?}: raw or client"),
            };
            println!("slice {slice}: {side} {rate:>8.0} msg/s");
        }
        server.shutdown().await;
        return;
    }
    let mut ratios = Vec::new();
    for round in 1..=rounds {
        let (raw, ours) = if round % 2 == 1 {
            let raw = raw_round(&hub, port, n).await;
            (raw, client_round(&hub, port, n).await)
        } else {
            let ours = client_round(&hub, port, n).await;
            (raw_round(&hub, port, n).await, ours)
        };
        let ratio = ours / raw;
        println!(
            "round {round}: raw rumqttc v4 {raw:>8.0} msg/s, mqstate DeviceClient {ours:>8.0} msg/s, ratio {ratio:.2}"
        );
        ratios.push(ratio);
    }
    print_median("ratio", ratios, n);
    server.shutdown().await;
}

/// Messages per second through a plain rumqttc v4 subscriber (automatic PUBACKs).
async fn raw_round(hub: &IotHub, port: u16, n: usize) -> f64 {
    fill(hub, n);
    let mut o = MqttOptions::new("bench", "127.0.0.1", port);
    o.set_clean_session(false);
    o.set_keep_alive(Duration::from_secs(60));
    o.set_credentials(
        hub.device_username("bench"),
        hub.device_token("bench", Duration::from_secs(3600))
            .unwrap(),
    );
    let (client, mut events) = AsyncClient::new(o, 1024);
    let start = Instant::now();
    let mut got = 0;
    loop {
        match events.poll().await.unwrap() {
            Event::Incoming(Packet::ConnAck(ack)) if !ack.session_present => {
                client
                    .subscribe(
                        format!("devices/{DEVICE}/messages/devicebound/#"),
                        QoS::AtLeastOnce,
                    )
                    .await
                    .unwrap();
            }
            Event::Incoming(Packet::SubAck(_)) if n == 0 => break,
            Event::Incoming(Packet::Publish(_)) => {
                got += 1;
                if got == n {
                    break;
                }
            }
            _ => {}
        }
    }
    // Keep polling so the last PUBACKs leave, until the hub's queue is empty.
    let poller = tokio::spawn(async move {
        loop {
            if events.poll().await.is_err() {
                break;
            }
        }
    });
    drained(hub).await;
    let rate = n as f64 / start.elapsed().as_secs_f64();
    client.disconnect().await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(2), poller).await;
    rate
}

/// Messages per second received and completed through the device client.
async fn client_round(hub: &IotHub, port: u16, n: usize) -> f64 {
    fill(hub, n);
    let options = DeviceOptions::from_connection_string(&hub.connection_string(DEVICE).unwrap())
        .unwrap()
        .with_plain_tcp("127.0.0.1", port);
    let start = Instant::now();
    let client = DeviceClient::connect(options).await.unwrap();
    for _ in 0..n {
        let m = client.receive().await.unwrap();
        m.complete().unwrap();
    }
    drained(hub).await;
    let rate = n as f64 / start.elapsed().as_secs_f64();
    client.close().await;
    rate
}
