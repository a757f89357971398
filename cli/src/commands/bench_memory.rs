//! `mqstate bench --memory`: how much memory a local server spends per key.
//!
//! It starts `mqstate serve` (this executable, or `--server-exe`) as a child process on a
//! free port with the dashboard and the IoT Hub off (with `--serve-defaults`: on, as
//! `mqstate serve` runs by default, on free ports), warms it up, then writes `--keys`
//! distinct 12-byte keys with `--value-size`-byte values (`--in-flight` at a time) in ten
//! steps. After each step it reads the child's resident set size (`VmRSS` in
//! `/proc/PID/status`, Linux only) and prints how many bytes per key the server grew
//! beyond the key and value bytes themselves. The figures include everything the server
//! holds for a key: the store, its deadline index (none here: no `PX`) and the
//! duplicate-request cache, which holds the answers of the last 100,000 requests, so steps
//! past 100,000 keys show the store alone.
//!
//! With `--churn DURATION` it then deletes and writes again the same keys for that long and
//! prints the RSS every tenth of it: flat figures after the first samples show that
//! nothing leaks under constant churn.
//!
//! Measuring from outside (the RSS of a real server process) rather than counting
//! allocations inside counts what the allocator keeps and what a user sees; the server
//! crate's `memory` bench target (`cargo bench -p mqstate-server --bench memory`) counts
//! the heap bytes of each structure to split the figure by part.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mqstate::{Client, ConnectOptions, SetOptions};
use serde_json::json;

use super::stdout_failure;
use crate::exit::{Code, Failure, Outcome};
use crate::output;

/// The key length of the memory bench (as in the figures of issue 19: 12-byte keys).
const KEY_LEN: usize = 12;

/// How many SET + DEL pairs warm the server up before the first reading (buffers, the
/// runtime's tasks, the connection).
const WARM_UP_KEYS: usize = 2_000;

/// The RSS of a process, from `/proc/PID/status`.
fn rss_bytes(pid: u32) -> Result<u64, Failure> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|e| {
        Failure::new(
            Code::Usage,
            format!("bench --memory: reading {path}: {e} (the memory bench needs Linux /proc)"),
        )
    })?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| Failure::new(Code::Usage, format!("bench --memory: no VmRSS in {path}")))
}

/// The server child: killed when dropped.
struct ServerChild(std::process::Child);

impl Drop for ServerChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> Result<u16, Failure> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| {
            Failure::new(
                Code::Connection,
                format!("bench --memory: no free port: {e}"),
            )
        })
}

fn start_server(exe: &PathBuf, port: u16, defaults: bool) -> Result<ServerChild, Failure> {
    let mut command = std::process::Command::new(exe);
    command.args(["serve", "--port", &port.to_string()]);
    if defaults {
        // Everything as `mqstate serve` has it, but the hub's fixed ports, which another
        // server may hold.
        command.args([
            "--iothub-port",
            &free_port()?.to_string(),
            "--iothub-admin-port",
            &free_port()?.to_string(),
            "--iothub-https-port",
            "0",
            "--iothub-amqp-port",
            "0",
        ]);
    } else {
        command.args(["--no-dashboard", "--no-iothub"]);
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(ServerChild)
        .map_err(|e| {
            Failure::new(
                Code::Connection,
                format!("bench --memory: starting {} serve: {e}", exe.display()),
            )
        })
}

/// Connects to the child, retrying while it starts (up to a minute: the machine may be busy).
async fn connect(port: u16, child: &mut ServerChild) -> Result<Client, Failure> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut options = ConnectOptions::default();
        options.host = "127.0.0.1".to_owned();
        options.port = port;
        options.connect_timeout = Duration::from_secs(5);
        options.request_timeout = Duration::from_secs(60);
        match Client::connect(options).await {
            Ok(client) => return Ok(client),
            Err(e) => {
                if let Ok(Some(status)) = child.0.try_wait() {
                    return Err(Failure::new(
                        Code::Connection,
                        format!(
                            "bench --memory: the server exited ({status}) before accepting a connection"
                        ),
                    ));
                }
                if Instant::now() > deadline {
                    return Err(Failure::from_error(
                        "bench --memory: connecting to the server",
                        &e,
                    ));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("{i:0KEY_LEN$}").into_bytes()
}

/// Applies `op` to every index in `range`, `in_flight` at a time (each worker takes every
/// `in_flight`-th index).
async fn run_all<F, Fut>(
    client: &Client,
    range: std::ops::Range<usize>,
    in_flight: usize,
    op: F,
) -> Result<(), mqstate::Error>
where
    F: Fn(Client, usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), mqstate::Error>> + Send + 'static,
{
    let op = Arc::new(op);
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..in_flight {
        let (client, op, range) = (client.clone(), op.clone(), range.clone());
        workers.spawn(async move {
            let mut i = range.start + w;
            while i < range.end {
                op(client.clone(), i).await?;
                i += in_flight;
            }
            Ok::<(), mqstate::Error>(())
        });
    }
    while let Some(done) = workers.join_next().await {
        if let Ok(result) = done {
            result?;
        }
    }
    Ok(())
}

fn set_op(value: Arc<Vec<u8>>) -> impl Fn(Client, usize) -> BoxedOp + Send + Sync + 'static {
    move |client, i| {
        let value = value.clone();
        Box::pin(async move {
            client
                .set(&key(i), &value[..], SetOptions::default())
                .await
                .map(|_| ())
        })
    }
}

type BoxedOp =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), mqstate::Error>> + Send>>;

/// One reading after a load step.
struct Step {
    keys: usize,
    rss: u64,
    /// RSS growth per key over this step.
    step_per_key: f64,
}

/// What the memory bench is given: the `mqstate bench` flags it reads (`--memory` and its
/// companions, plus `--keys`, `--value-size`, `--in-flight` and `--json`). Its own type, so
/// that this module does not depend on the `bench` command that chooses it.
#[derive(Debug, Clone)]
pub struct MemoryArgs {
    /// How many keys to write (`--keys`).
    pub keys: u32,
    /// Requests in flight (`--in-flight`).
    pub in_flight: u32,
    /// Size of each value in bytes (`--value-size`).
    pub value_size: usize,
    /// Delete and write the keys again for this long (`--churn`).
    pub churn: Option<Duration>,
    /// Run `mqstate serve` as its defaults run it (`--serve-defaults`).
    pub serve_defaults: bool,
    /// The `mqstate` executable to measure (`--server-exe`; default: this one).
    pub server_exe: Option<PathBuf>,
    /// Print one JSON object instead of a table (`--json`).
    pub json: bool,
}

/// Runs the memory bench (see the module docs).
pub async fn run(args: MemoryArgs) -> Outcome {
    let keys = args.keys as usize;
    if keys < 10 {
        return Err(Failure::usage("--memory needs --keys 10 or more"));
    }
    let in_flight = args.in_flight as usize;
    let exe = match &args.server_exe {
        Some(exe) => exe.clone(),
        None => std::env::current_exe().map_err(|e| {
            Failure::new(
                Code::Connection,
                format!("bench --memory: own executable: {e}"),
            )
        })?,
    };
    let port = free_port()?;
    let mut child = start_server(&exe, port, args.serve_defaults)?;
    let pid = child.0.id();
    let client = connect(port, &mut child).await?;
    let value = Arc::new(vec![b'x'; args.value_size]);
    let failed = |what: &str| {
        let what = what.to_owned();
        move |e: mqstate::Error| Failure::from_error(&format!("bench --memory: {what}"), &e)
    };

    // Warm-up on other keys, then the baseline.
    let warm = keys..keys + WARM_UP_KEYS;
    run_all(&client, warm.clone(), in_flight, set_op(value.clone()))
        .await
        .map_err(failed("warm-up"))?;
    run_all(&client, warm, in_flight, |client, i| async move {
        client.del(&key(i), None).await.map(|_| ())
    })
    .await
    .map_err(failed("warm-up"))?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let base = rss_bytes(pid)?;

    let mut steps = Vec::new();
    let mut previous = (0usize, base);
    for s in 1..=10 {
        let end = keys * s / 10;
        run_all(&client, previous.0..end, in_flight, set_op(value.clone()))
            .await
            .map_err(failed("loading the keys"))?;
        let rss = rss_bytes(pid)?;
        let step_keys = (end - previous.0).max(1);
        steps.push(Step {
            keys: end,
            rss,
            step_per_key: (rss as f64 - previous.1 as f64) / step_keys as f64,
        });
        previous = (end, rss);
    }

    let churn = match args.churn {
        Some(duration) => Some(churn(&client, pid, keys, in_flight, &value, duration).await?),
        None => None,
    };
    client.close().await;
    drop(child);

    let data = (KEY_LEN + args.value_size) as f64;
    let total_per_key = (previous.1 as f64 - base as f64) / keys as f64;
    let report = Report {
        keys,
        value_size: args.value_size,
        data,
        base,
        steps,
        total_per_key,
        churn,
        serve_defaults: args.serve_defaults,
    };
    let printed = if args.json {
        output::write_line(&report.json().to_string())
    } else {
        output::write_stdout(report.table().as_bytes())
    };
    match printed {
        Ok(()) => Ok(Code::Success),
        Err(e) => stdout_failure(e),
    }
}

/// DEL then SET of the same keys for `duration`; the RSS every tenth of it.
async fn churn(
    client: &Client,
    pid: u32,
    keys: usize,
    in_flight: usize,
    value: &Arc<Vec<u8>>,
    duration: Duration,
) -> Result<Vec<(f64, u64)>, Failure> {
    let start = Instant::now();
    let deadline = start + duration;
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..in_flight {
        let (client, value) = (client.clone(), value.clone());
        workers.spawn(async move {
            let mut i = w;
            while Instant::now() < deadline {
                let k = key(i % keys);
                client.del(&k, None).await?;
                client.set(&k, &value[..], SetOptions::default()).await?;
                i += in_flight;
            }
            Ok::<(), mqstate::Error>(())
        });
    }
    let mut samples = Vec::new();
    for n in 1..=10 {
        tokio::time::sleep_until((start + duration * n / 10).into()).await;
        samples.push((start.elapsed().as_secs_f64(), rss_bytes(pid)?));
    }
    while let Some(done) = workers.join_next().await {
        if let Ok(Err(e)) = done {
            return Err(Failure::from_error("bench --memory: churn", &e));
        }
    }
    Ok(samples)
}

struct Report {
    keys: usize,
    value_size: usize,
    data: f64,
    base: u64,
    steps: Vec<Step>,
    total_per_key: f64,
    churn: Option<Vec<(f64, u64)>>,
    /// The server ran with its defaults (dashboard and IoT Hub on).
    serve_defaults: bool,
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

impl Report {
    fn limit(&self) -> f64 {
        2.0 * self.data + 200.0
    }

    fn table(&self) -> String {
        let mut out = format!(
            "mqstate serve {}\nkeys {} x (key {KEY_LEN} B + value {} B = {} B of data); server RSS before: {:.1} MiB\n",
            self.server(),
            self.keys,
            self.value_size,
            self.data,
            mib(self.base)
        );
        out.push_str(&format!(
            "{:>10} {:>10} {:>14} {:>14}\n",
            "keys", "RSS MiB", "step B/key", "beyond data"
        ));
        for s in &self.steps {
            out.push_str(&format!(
                "{:>10} {:>10.1} {:>14.0} {:>14.0}\n",
                s.keys,
                mib(s.rss),
                s.step_per_key,
                s.step_per_key - self.data
            ));
        }
        out.push_str(&format!(
            "total: {:.0} B/key, {:.0} B/key beyond the data (limit 2 x data + 200 = {:.0} B/key)\n",
            self.total_per_key,
            self.total_per_key - self.data,
            self.limit()
        ));
        if let Some(samples) = &self.churn {
            out.push_str("churn (DEL + SET of the same keys):\n");
            for (t, rss) in samples {
                out.push_str(&format!("{t:>8.1} s {:>10.1} MiB\n", mib(*rss)));
            }
        }
        out
    }

    /// How the measured server was started, as its command line says it.
    fn server(&self) -> &'static str {
        if self.serve_defaults {
            "with its defaults (dashboard and IoT Hub on)"
        } else {
            "--no-dashboard --no-iothub"
        }
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "server": self.server(),
            "keys": self.keys,
            "key_size": KEY_LEN,
            "value_size": self.value_size,
            "data_bytes_per_key": self.data,
            "rss_before": self.base,
            "steps": self.steps.iter().map(|s| json!({
                "keys": s.keys,
                "rss": s.rss,
                "step_bytes_per_key": s.step_per_key,
            })).collect::<Vec<_>>(),
            "bytes_per_key": self.total_per_key,
            "bytes_per_key_beyond_data": self.total_per_key - self.data,
            "limit_bytes_per_key": self.limit(),
            "churn": self.churn.as_ref().map(|c| c.iter().map(|(t, rss)| json!({
                "seconds": t,
                "rss": rss,
            })).collect::<Vec<_>>()),
        })
    }
}
