//! The crash test of the local IoT Hub's data dir, shared by `cli/examples/iothub_crash_test.rs`
//! (30 kills and more, `scripts/iothub-crash-test`) and `cli/tests/it/iothub_crash.rs` (a short
//! run in the test command).
//!
//! `mqstate serve --data-dir` runs as a process; four service tasks send C2D messages through
//! the admin API (`ack: full`; a send counts as acknowledged when it got its 201), one device
//! (mqstate's own `DeviceClient`) receives and completes them, and one task receives and
//! completes the feedback. The server is SIGKILLed at random moments and restarted on the same
//! data dir. At the end every acknowledged message must have been delivered, or be accounted
//! for in feedback, or still be queued; no message may be delivered after the service
//! received its `Success` feedback (its completion was acknowledged, hence on disk); and the
//! registry (ids, keys, generation ids) must be the same after every restart.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mqstate::ReconnectPolicy;
use mqstate::iothub::{DeviceClient, DeviceOptions};
use mqstate_server::iothub::admin::{AdminClient, SendRequest};
use mqstate_server::iothub::{Ack, Device, FeedbackStatus};

/// How a run goes.
pub struct CrashConfig {
    /// The `mqstate` binary.
    pub binary: PathBuf,
    /// SIGKILLs.
    pub kills: u32,
    /// The data dir (a fresh one for a meaningful run).
    pub data_dir: PathBuf,
    /// Service tasks sending at once.
    pub senders: usize,
    /// How long the server runs between a restart and the next kill (random in this range).
    pub uptime: (Duration, Duration),
    /// Print one line per kill.
    pub verbose: bool,
}

/// What a run saw.
#[derive(Debug, Default)]
pub struct CrashReport {
    pub kills: u32,
    /// Sends answered 201.
    pub acknowledged: usize,
    /// Sends that failed or got no answer (the server was down or died): not acknowledged.
    pub send_failures: u64,
    /// Deliveries to the device (redeliveries included).
    pub deliveries: u64,
    /// Acknowledged messages delivered at least once.
    pub delivered: usize,
    /// Deliveries of a message already delivered before (at-least-once after a crash).
    pub redeliveries: u64,
    /// Acknowledged messages with a `Success` feedback record.
    pub completed: usize,
    /// Acknowledged messages with another final status in feedback (dead-lettered).
    pub dead_lettered: usize,
    /// Acknowledged messages never delivered but still in the queue at the end.
    pub still_queued: usize,
    /// Acknowledged messages with no final feedback record and not in the queue.
    pub lost: Vec<String>,
    /// Messages delivered after the service had received their `Success` feedback.
    pub delivered_after_completion: Vec<String>,
    /// Registry checks after restarts, and those that found a difference.
    pub registry_checks: u32,
    pub registry_mismatches: Vec<String>,
    /// Messages delivered that were never acknowledged to the service (their 201 was lost
    /// with the server): allowed, counted.
    pub delivered_unacknowledged: usize,
    pub elapsed: Duration,
}

impl CrashReport {
    /// Nothing lost, nothing delivered after its completion, the registry intact.
    pub fn passed(&self) -> bool {
        self.lost.is_empty()
            && self.delivered_after_completion.is_empty()
            && self.registry_mismatches.is_empty()
            && self.kills > 0
            && self.acknowledged > 0
    }
}

impl std::fmt::Display for CrashReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "kills:                              {}", self.kills)?;
        writeln!(
            f,
            "acknowledged sends (201):           {}",
            self.acknowledged
        )?;
        writeln!(
            f,
            "sends not acknowledged (server down): {}",
            self.send_failures
        )?;
        writeln!(f, "deliveries to the device:           {}", self.deliveries)?;
        writeln!(
            f,
            "  redeliveries:                     {}",
            self.redeliveries
        )?;
        writeln!(
            f,
            "  of unacknowledged sends:          {}",
            self.delivered_unacknowledged
        )?;
        writeln!(f, "acknowledged and delivered:         {}", self.delivered)?;
        writeln!(f, "acknowledged with Success feedback: {}", self.completed)?;
        writeln!(
            f,
            "acknowledged, dead-lettered:        {}",
            self.dead_lettered
        )?;
        writeln!(
            f,
            "acknowledged, still queued:         {}",
            self.still_queued
        )?;
        writeln!(f, "lost:                               {}", self.lost.len())?;
        writeln!(
            f,
            "delivered after completion acked:   {}",
            self.delivered_after_completion.len()
        )?;
        writeln!(
            f,
            "registry checks after restarts:     {} ({} mismatches)",
            self.registry_checks,
            self.registry_mismatches.len()
        )?;
        write!(
            f,
            "elapsed:                            {:.1} s",
            self.elapsed.as_secs_f64()
        )
    }
}

const DEVICE: &str = "crash-dev";
/// A device registered with keys of our choosing, to see them come back.
const KEPT: &str = "kept-dev";
const KEPT_KEY: &str = "AAECAwQFBgcICQoLDA0ODw==";

struct Ports {
    broker: u16,
    devices: u16,
    admin: u16,
}

fn start(config: &CrashConfig, ports: &Ports) -> Child {
    Command::new(&config.binary)
        .args(["serve", "--no-dashboard", "--log", "error"])
        .args(["--port", &ports.broker.to_string()])
        .args(["--iothub-port", &ports.devices.to_string()])
        .args(["--iothub-admin-port", &ports.admin.to_string()])
        .args(["--iothub-https-port", "0", "--iothub-amqp-port", "0"])
        .args(["--iothub-max-queue-depth", "5000"])
        .args(["--iothub-feedback-interval", "200ms"])
        // A batch received but not completed before a kill stays locked after the restart
        // (its lock is on disk): a short lock lets the drain finish soon.
        .args(["--iothub-feedback-lock", "2s"])
        .arg("--data-dir")
        .arg(&config.data_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", config.binary.display()))
}

/// Waits until the admin API answers (generous: the machine may be loaded).
async fn ready(admin: &AdminClient, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if admin.hub_info().await.is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("mqstate serve exited at start: {status}");
        }
        assert!(Instant::now() < deadline, "mqstate serve did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[derive(Default)]
struct Seen {
    acknowledged: HashSet<String>,
    /// Message id → how many times delivered.
    deliveries: HashMap<String, u32>,
    /// Message id → when the service received its Success feedback.
    succeeded: HashMap<String, Instant>,
    /// Message id → another final status.
    dead: HashMap<String, FeedbackStatus>,
    after_completion: Vec<String>,
}

/// Runs the crash test.
pub async fn run(config: &CrashConfig) -> CrashReport {
    let began = Instant::now();
    let free = || mqstate_testing::free_port().expect("a free port");
    let ports = Ports {
        broker: free(),
        devices: free(),
        admin: free(),
    };
    let admin = AdminClient::new(&format!("http://127.0.0.1:{}", ports.admin)).unwrap();
    let mut child = start(config, &ports);
    ready(&admin, &mut child).await;
    let device: Device = match admin.device(DEVICE).await {
        Ok(d) => d,
        Err(_) => admin.add_device(DEVICE, None).await.unwrap(),
    };
    let kept: Device = match admin.device(KEPT).await {
        Ok(d) => d,
        Err(_) => admin.add_device(KEPT, Some(KEPT_KEY.into())).await.unwrap(),
    };

    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop_sending = Arc::new(AtomicBool::new(false));
    let send_failures = Arc::new(AtomicU64::new(0));
    let next_id = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..config.senders {
        let (admin, seen, stop) = (admin.clone(), seen.clone(), stop_sending.clone());
        let (failures, next_id) = (send_failures.clone(), next_id.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let id = format!("m{}", next_id.fetch_add(1, Ordering::Relaxed));
                let request = SendRequest {
                    payload: Some(format!("body of {id}")),
                    message_id: Some(id.clone()),
                    ack: Ack::Full,
                    ..SendRequest::default()
                };
                match admin.send(DEVICE, &request).await {
                    Ok(_) => {
                        seen.lock().unwrap().acknowledged.insert(id);
                    }
                    Err(_) => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        }));
    }

    // The device: every delivery is recorded, then completed.
    let options = DeviceOptions::new("localhost", DEVICE, device.primary_key.clone())
        .with_plain_tcp("127.0.0.1", ports.devices)
        .with_reconnect(ReconnectPolicy::new(
            Duration::from_millis(20),
            Duration::from_millis(200),
        ));
    let client = DeviceClient::connect(options).await.unwrap();
    let device_task = {
        let (client, seen) = (client.clone(), seen.clone());
        tokio::spawn(async move {
            while let Ok(message) = client.receive().await {
                if let Some(id) = message.content().message_id.clone() {
                    let mut s = seen.lock().unwrap();
                    *s.deliveries.entry(id.clone()).or_default() += 1;
                    if s.succeeded.contains_key(&id) {
                        s.after_completion.push(id);
                    }
                }
                // A completion on a connection that dropped is refused: the hub redelivers.
                let _ = message.complete();
            }
        })
    };

    // The service's feedback receiver.
    let stop_feedback = Arc::new(AtomicBool::new(false));
    let feedback_task = {
        let (admin, seen, stop) = (admin.clone(), seen.clone(), stop_feedback.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let batch = match admin.receive_feedback(Duration::from_millis(500)).await {
                    Ok(Some(batch)) => batch,
                    Ok(None) => continue,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                {
                    let now = Instant::now();
                    let mut s = seen.lock().unwrap();
                    for r in &batch.records {
                        let Some(id) = r.original_message_id.clone() else {
                            continue;
                        };
                        if r.status_code == FeedbackStatus::Success {
                            s.succeeded.entry(id).or_insert(now);
                        } else {
                            s.dead.insert(id, r.status_code);
                        }
                    }
                }
                // If this fails (killed), the batch is received again: same records.
                let _ = admin.complete_feedback(&batch.lock_token).await;
            }
        })
    };

    let mut report = CrashReport::default();
    for kill in 1..=config.kills {
        let (lo, hi) = config.uptime;
        let span = hi.saturating_sub(lo).as_millis() as u64;
        let uptime = lo + Duration::from_millis(fastrand::u64(0..=span));
        tokio::time::sleep(uptime).await;
        child.kill().unwrap();
        child.wait().unwrap();
        report.kills = kill;
        child = start(config, &ports);
        ready(&admin, &mut child).await;
        report.registry_checks += 1;
        for (id, before) in [(DEVICE, &device), (KEPT, &kept)] {
            match admin.device(id).await {
                Ok(after) if &after == before => {}
                Ok(after) => report.registry_mismatches.push(format!(
                    "after kill {kill}: {id}: {before:?} became {after:?}"
                )),
                Err(e) => report
                    .registry_mismatches
                    .push(format!("after kill {kill}: {id}: {e}")),
            }
        }
        if config.verbose {
            let s = seen.lock().unwrap();
            println!(
                "kill {kill:>3} after {:>4} ms: {} acknowledged, {} delivered, {} completed so far",
                uptime.as_millis(),
                s.acknowledged.len(),
                s.deliveries.len(),
                s.succeeded.len()
            );
        }
    }

    // Drain: no more sends; wait until every acknowledged message has a final feedback record
    // (or nothing moves any more).
    stop_sending.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let done = {
            let s = seen.lock().unwrap();
            s.acknowledged
                .iter()
                .all(|id| s.succeeded.contains_key(id) || s.dead.contains_key(id))
        };
        if done || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let queued: HashSet<String> = admin
        .queue(DEVICE)
        .await
        .map(|q| {
            q.messages
                .into_iter()
                .filter_map(|m| m.message_id)
                .collect()
        })
        .unwrap_or_default();
    stop_feedback.store(true, Ordering::Relaxed);
    feedback_task.await.unwrap();
    client.close().await;
    device_task.await.unwrap();
    child.kill().unwrap();
    child.wait().unwrap();

    let s = seen.lock().unwrap();
    report.acknowledged = s.acknowledged.len();
    report.send_failures = send_failures.load(Ordering::Relaxed);
    report.deliveries = s.deliveries.values().map(|&n| u64::from(n)).sum();
    report.redeliveries = s.deliveries.values().map(|&n| u64::from(n - 1)).sum();
    report.delivered_unacknowledged = s
        .deliveries
        .keys()
        .filter(|id| !s.acknowledged.contains(*id))
        .count();
    for id in &s.acknowledged {
        let delivered = s.deliveries.contains_key(id);
        if delivered {
            report.delivered += 1;
        }
        if s.succeeded.contains_key(id) {
            report.completed += 1;
        } else if s.dead.contains_key(id) {
            report.dead_lettered += 1;
        } else if !delivered && queued.contains(id) {
            report.still_queued += 1;
        }
        // With `ack: full` every message ends in a feedback record; until then it is queued.
        if !s.succeeded.contains_key(id) && !s.dead.contains_key(id) && !queued.contains(id) {
            report.lost.push(id.clone());
        }
    }
    report.delivered_after_completion = s.after_completion.clone();
    report.elapsed = began.elapsed();
    report
}
