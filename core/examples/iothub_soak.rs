//! Soak test of the IoT Hub device client (not CI length): sends N cloud-to-device messages
//! (default 10,000) through an in-process local hub while a TCP proxy between the device and
//! the hub kills the device's connection every 0.2 s by default (the client now receives 10,000
//! messages in about 2 s, so a longer interval would hardly kill it). Every message asks for positive
//! feedback, so the hub itself reports each completion.
//!
//! Checks: every message id is delivered to the application at least once; at most one copy of
//! each is unflagged (the others are flagged as redeliveries); the hub reports exactly
//! one `Success` feedback record per message id; the queue ends empty. 0 lost.
//!
//! ```sh
//! cargo run --release -p mqstate --example iothub_soak -- [MESSAGES] [KILL_EVERY_SECS]
//! ```

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mqstate::ReconnectPolicy;
use mqstate::iothub::{DeviceClient, DeviceOptions};
use mqstate_server::iothub::{
    Ack, C2dMessage, DeviceSpec, IotHubConfig, IotHubError, IotHubServer,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let total: usize = args.next().map_or(10_000, |a| a.parse().expect("MESSAGES"));
    let kill_every = Duration::from_secs_f64(args.next().map_or(0.2, |a| a.parse().expect("SECS")));

    let server = IotHubServer::start(IotHubConfig {
        admin_port: None,
        lock_timeout: Duration::from_secs(5),
        feedback_batch_interval: Duration::from_secs(1),
        ..IotHubConfig::default()
    })
    .await
    .unwrap();
    let hub = server.hub();
    hub.add_device(&DeviceSpec::parse("soak").unwrap()).unwrap();
    let hub_addr = hub.endpoints().device_endpoint.unwrap();

    // The proxy: forwards device connections to the hub; every `kill_every` it aborts them all.
    let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_port = proxy.local_addr().unwrap().port();
    let live: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
    let kills = Arc::new(AtomicU64::new(0));
    {
        let live = live.clone();
        tokio::spawn(async move {
            loop {
                let (device, _) = proxy.accept().await.unwrap();
                let mut device = device;
                let handle = tokio::spawn(async move {
                    if let Ok(mut upstream) = TcpStream::connect(hub_addr).await {
                        let _ = tokio::io::copy_bidirectional(&mut device, &mut upstream).await;
                    }
                });
                live.lock().await.push(handle);
            }
        });
    }
    let done = Arc::new(AtomicBool::new(false));
    {
        let (live, kills, done) = (live.clone(), kills.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                tokio::time::sleep(kill_every).await;
                for h in live.lock().await.drain(..) {
                    h.abort();
                }
                kills.fetch_add(1, Ordering::Relaxed);
            }
        });
    }

    let options = DeviceOptions::from_connection_string(&hub.connection_string("soak").unwrap())
        .unwrap()
        .with_plain_tcp("127.0.0.1", proxy_port)
        .with_reconnect(ReconnectPolicy::new(
            Duration::from_millis(20),
            Duration::from_millis(500),
        ));
    let client = DeviceClient::connect(options).await.unwrap();
    let started = Instant::now();

    // The service: keeps the queue topped up (the hub refuses a 51st message).
    let sender = {
        let hub = hub.clone();
        tokio::spawn(async move {
            let mut i = 0;
            while i < total {
                match hub.send(
                    "soak",
                    C2dMessage::new(format!("payload {i}"))
                        .message_id(format!("m{i}"))
                        .ack(Ack::Positive),
                ) {
                    Ok(_) => i += 1,
                    Err(IotHubError::QueueFull { .. }) => {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err(e) => panic!("send: {e}"),
                }
            }
        })
    };

    // The feedback reader: counts Success records per message id.
    let feedback: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let reader = {
        let (hub, feedback, done) = (hub.clone(), feedback.clone(), done.clone());
        tokio::spawn(async move {
            loop {
                let got = hub.receive_feedback(Duration::from_millis(500)).await;
                match got {
                    Some(batch) => {
                        let mut f = feedback.lock().await;
                        for r in &batch.records {
                            *f.entry(r.original_message_id.clone().unwrap_or_default())
                                .or_default() += 1;
                        }
                        drop(f);
                        hub.complete_feedback(&batch.lock_token).unwrap();
                    }
                    None if done.load(Ordering::Relaxed) => break,
                    None => {}
                }
            }
        })
    };

    // The application: completes everything it receives.
    let mut first: HashMap<String, u32> = HashMap::new();
    let mut redeliveries = 0u64;
    let mut stale = 0u64;
    while first.len() < total {
        let m = tokio::time::timeout(Duration::from_secs(60), client.receive())
            .await
            .expect("nothing received for 60 s")
            .unwrap();
        let id = m.message_id.clone().unwrap();
        if m.is_redelivery() {
            redeliveries += 1;
            first.entry(id).or_insert(0);
        } else {
            *first.entry(id).or_insert(0) += 1;
        }
        if m.complete().is_err() {
            stale += 1; // its connection was killed: the hub delivers it again
        }
    }
    sender.await.unwrap();
    // Drain: redeliveries of messages whose completion was lost with a killed connection.
    let deadline = Instant::now() + Duration::from_secs(120);
    while hub.queue("soak").unwrap().depth > 0 {
        assert!(
            Instant::now() < deadline,
            "queue not drained: {:?}",
            hub.queue("soak")
        );
        if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(200), client.receive()).await
        {
            let id = m.message_id.clone().unwrap();
            if m.is_redelivery() {
                redeliveries += 1;
            } else {
                *first.entry(id).or_insert(0) += 1;
            }
            if m.complete().is_err() {
                stale += 1;
            }
        }
    }
    let elapsed = started.elapsed();
    // Let the last feedback batch arrive.
    let deadline = Instant::now() + Duration::from_secs(30);
    while feedback.lock().await.len() < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    done.store(true, Ordering::Relaxed);
    let _ = reader.await;
    let feedback = feedback.lock().await;

    let lost = (0..total)
        .filter(|i| !first.contains_key(&format!("m{i}")))
        .count();
    // A copy the hub had already sent once (DUP set) counts as a redelivery even if the
    // client never read the earlier copy; what must not happen is two unflagged copies.
    let first_not_once = first.values().filter(|&&n| n > 1).count();
    let feedback_not_once = (0..total)
        .filter(|i| feedback.get(&format!("m{i}")) != Some(&1))
        .count();
    let stats = client.stats();
    println!("messages sent:                     {total}");
    println!(
        "connection kills (every {kill_every:?}):   {}",
        kills.load(Ordering::Relaxed)
    );
    println!("client connections:                {}", stats.connections);
    println!("deliveries received:               {}", stats.received);
    println!("  flagged as redelivered:          {redeliveries}");
    println!("  completions refused (stale):     {stale}");
    println!("message ids lost:                  {lost}");
    println!("ids delivered unflagged twice:      {first_not_once}");
    println!("ids without exactly one Success feedback: {feedback_not_once}");
    println!(
        "elapsed:                           {:.1} s",
        elapsed.as_secs_f64()
    );
    client.close().await;
    server.shutdown().await;
    if lost != 0 || first_not_once != 0 || feedback_not_once != 0 {
        eprintln!("SOAK FAILED");
        std::process::exit(1);
    }
    println!("SOAK PASSED: 0 lost, every message completed exactly once by the hub");
}
