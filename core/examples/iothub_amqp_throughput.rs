//! Throughput of the IoT Hub device client over AMQP against the same client over MQTT: C2D
//! messages received and completed per second by one device on the same in-process local hub,
//! both over TLS (the hub's generated certificate). Each slice queues N messages while the
//! device is offline, then times from connecting to the hub's queue being empty. The two
//! transports alternate in slices in the same run (MQTT first in odd rounds, AMQP first in even
//! ones); each round's ratio is AMQP over MQTT, and the run reports the median and the range
//! (docs/performance.md, "C2D device client over AMQP").
//!
//! ```sh
//! cargo run --release -p mqstate --example iothub_amqp_throughput -- [MESSAGES] [ROUNDS]
//! ```

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::path::Path;
use std::time::Instant;

use mqstate::TlsOptions;
use mqstate::iothub::{DeviceClient, DeviceOptions, Transport};
use mqstate_server::iothub::{DeviceSpec, DeviceTls, IotHub, IotHubConfig, IotHubServer};

#[path = "support/iothub_bench.rs"]
mod support;
use support::{DEVICE, drained, fill, print_median};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(5_000, |a| a.parse().expect("MESSAGES"));
    let rounds: usize = args.next().map_or(5, |a| a.parse().expect("ROUNDS"));
    let server = IotHubServer::start(IotHubConfig {
        admin_port: None,
        max_queue_depth: n,
        tls: DeviceTls::SelfSigned,
        ..IotHubConfig::default()
    })
    .await
    .unwrap();
    let hub = server.hub();
    hub.add_device(&DeviceSpec::parse(DEVICE).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, hub.ca_certificate_pem().unwrap()).unwrap();

    // Establish the MQTT session (subscription) once.
    round(&hub, Transport::Mqtt, &ca, 0).await;
    let mut ratios = Vec::new();
    for r in 1..=rounds {
        let (mqtt, amqp) = if r % 2 == 1 {
            let mqtt = round(&hub, Transport::Mqtt, &ca, n).await;
            (mqtt, round(&hub, Transport::Amqp, &ca, n).await)
        } else {
            let amqp = round(&hub, Transport::Amqp, &ca, n).await;
            (round(&hub, Transport::Mqtt, &ca, n).await, amqp)
        };
        let ratio = amqp / mqtt;
        println!("round {r}: MQTT {mqtt:>8.0} msg/s, AMQP {amqp:>8.0} msg/s, ratio {ratio:.2}");
        ratios.push(ratio);
    }
    print_median("ratio AMQP/MQTT", ratios, n);
    server.shutdown().await;
}

/// Messages per second received and completed through the device client over `transport`.
async fn round(hub: &IotHub, transport: Transport, ca: &Path, n: usize) -> f64 {
    fill(hub, n);
    let endpoints = hub.endpoints();
    let port = match transport {
        Transport::Amqp => endpoints.amqp_endpoint.unwrap().port(),
        _ => endpoints.device_endpoint.unwrap().port(),
    };
    let options = DeviceOptions::from_connection_string(&hub.connection_string(DEVICE).unwrap())
        .unwrap()
        .with_transport(transport)
        .with_endpoint("127.0.0.1", port, TlsOptions::default().with_ca_file(ca));
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
