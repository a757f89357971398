//! `mqstate bench`: SET and GET throughput and latency with N requests in flight on one
//! connection, a progress bar on the terminal, then a table (or `--json`).

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use mqstate::{Client, SetOptions};
use serde_json::json;

use super::bench_memory::MemoryArgs;
use super::stdout_failure;
use crate::connect::ConnectArgs;
use crate::duration::parse_duration;
use crate::exit::{Code, Failure, Outcome};
use crate::output;
use crate::signals::Interrupts;

/// Which operations to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Ops {
    /// SET, then GET (one phase each).
    Both,
    /// SET only.
    Set,
    /// GET only (the keys are written first, unmeasured).
    Get,
}

/// The flags of `mqstate bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to measure.
    #[arg(long, value_enum, default_value_t = Ops::Both)]
    pub ops: Ops,

    /// Requests in flight at any time (on one connection).
    #[arg(short = 'c', long, value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub in_flight: u32,

    /// Size of each value in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 64)]
    pub value_size: usize,

    /// How long each phase runs.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "5s")]
    pub duration: Duration,

    /// How many distinct keys the requests cycle through.
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub keys: u32,

    /// Prefix of the keys (they are deleted at the end).
    #[arg(long, value_name = "PREFIX", default_value = "mqstate-bench/")]
    pub prefix: String,

    /// Print the results as one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Measure the memory a local server spends per key instead: start `mqstate serve` on a
    /// free port, write `--keys` 12-byte keys of `--value-size` bytes and print its RSS
    /// growth per key (Linux). The connection flags are not used.
    #[arg(long)]
    pub memory: bool,

    /// With `--memory`: then delete and write the same keys again for this long, printing
    /// the RSS every tenth of it.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "memory")]
    pub churn: Option<Duration>,

    /// With `--memory`: measure `mqstate serve` as its defaults run it (the dashboard and the
    /// IoT Hub on; only the ports are chosen free) instead of with `--no-dashboard
    /// --no-iothub`.
    #[arg(long, requires = "memory")]
    pub serve_defaults: bool,

    /// With `--memory`: the `mqstate` executable whose `serve` to measure (default: this
    /// one), to compare two builds.
    #[arg(long, value_name = "PATH", requires = "memory")]
    pub server_exe: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub connect: ConnectArgs,
}

impl BenchArgs {
    /// The flags that `--memory` reads.
    fn memory_args(&self) -> MemoryArgs {
        MemoryArgs {
            keys: self.keys,
            in_flight: self.in_flight,
            value_size: self.value_size,
            churn: self.churn,
            serve_defaults: self.serve_defaults,
            server_exe: self.server_exe.clone(),
            json: self.json,
        }
    }
}

/// The figures of one phase.
#[derive(Debug, Clone)]
struct PhaseResult {
    op: &'static str,
    ops: u64,
    errors: u64,
    seconds: f64,
    p50_ms: f64,
    p99_ms: f64,
    first_error: Option<mqstate::Error>,
}

impl PhaseResult {
    fn ops_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.ops as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// Runs `bench`. Ctrl-C stops the run: the figures of the phases already finished are
/// printed and the exit code is 130. If any request failed, the figures are printed and the first error
/// decides the exit code.
pub async fn run(args: BenchArgs) -> Outcome {
    if args.memory {
        return super::bench_memory::run(args.memory_args()).await;
    }
    if args.duration.is_zero() {
        return Err(Failure::usage("--duration must be greater than zero"));
    }
    let mut interrupts = Interrupts::new()?;
    let client = args.connect.connect().await?;
    let stop = Arc::new(AtomicBool::new(false));
    let value = vec![b'x'; args.value_size];
    let keys: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..args.keys)
            .map(|i| format!("{}{i}", args.prefix).into_bytes())
            .collect(),
    );
    let phases: &[&'static str] = match args.ops {
        Ops::Both => &["set", "get"],
        Ops::Set => &["set"],
        Ops::Get => &["get"],
    };
    let mut results = Vec::new();
    for &op in phases {
        if op == "get" && args.ops == Ops::Get {
            prepare(&client, &keys, &value, args.in_flight)
                .await
                .map_err(|e| {
                    Failure::from_error("bench: writing the keys before the GET phase", &e)
                })?;
        }
        let phase = phase(&client, op, &keys, &value, &args, &stop);
        let result = tokio::select! {
            result = phase => result,
            _ = interrupts.recv() => {
                stop.store(true, Ordering::Relaxed);
                break;
            }
        };
        results.push(result);
    }
    let interrupted = stop.load(Ordering::Relaxed);
    // Unmeasured clean-up; a failure here only leaves keys behind.
    let _ = cleanup(&client, &keys, args.in_flight).await;
    client.close().await;
    let printed = if args.json {
        output::write_line(&json_report(&args, &results).to_string())
    } else {
        output::write_stdout(table(&results).as_bytes())
    };
    if let Err(e) = printed {
        return stdout_failure(e);
    }
    if interrupted {
        return Err(Failure::new(Code::Interrupted, "bench: interrupted"));
    }
    match results
        .iter()
        .find_map(|r| r.first_error.as_ref().map(|e| (r, e)))
    {
        Some((r, e)) => Err(Failure::from_error(
            &format!(
                "bench: {} of {} {} requests failed; the first",
                r.errors,
                r.ops + r.errors,
                r.op
            ),
            e,
        )),
        None => Ok(Code::Success),
    }
}

/// One timed phase: `in_flight` workers issue `op` back to back until the duration passes.
async fn phase(
    client: &Client,
    op: &'static str,
    keys: &Arc<Vec<Vec<u8>>>,
    value: &[u8],
    args: &BenchArgs,
    stop: &Arc<AtomicBool>,
) -> PhaseResult {
    let done = Arc::new(AtomicU64::new(0));
    let bar = progress_bar(op, args.duration, args.json);
    let start = Instant::now();
    let deadline = start + args.duration;
    let mut workers = Vec::new();
    for w in 0..args.in_flight {
        let client = client.clone();
        let keys = keys.clone();
        let value = value.to_vec();
        let done = done.clone();
        let stop = stop.clone();
        let stride = args.in_flight as usize;
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = 0u64;
            let mut first_error = None;
            let mut i = w as usize;
            while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                let key = keys.get(i % keys.len()).cloned().unwrap_or_default();
                i += stride;
                let sent = Instant::now();
                let result = match op {
                    "set" => client
                        .set(&key, &value, SetOptions::default())
                        .await
                        .map(|_| ()),
                    _ => client.get(&key).await.map(|_| ()),
                };
                match result {
                    Ok(()) => {
                        latencies.push(sent.elapsed());
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(e);
                    }
                }
            }
            (latencies, errors, first_error)
        }));
    }
    let ticker = {
        let bar = bar.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                let elapsed = start.elapsed();
                bar.set_position(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX));
                let ops = done.load(Ordering::Relaxed);
                bar.set_message(format!(
                    "{ops} ops, {:.0} ops/s",
                    ops as f64 / elapsed.as_secs_f64().max(1e-3)
                ));
            }
        })
    };
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut first_error = None;
    for worker in workers {
        if let Ok((l, e, f)) = worker.await {
            latencies.extend(l);
            errors += e;
            if first_error.is_none() {
                first_error = f;
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    ticker.abort();
    bar.finish_and_clear();
    latencies.sort_unstable();
    PhaseResult {
        op,
        ops: latencies.len() as u64,
        errors,
        seconds,
        p50_ms: percentile(&latencies, 0.50),
        p99_ms: percentile(&latencies, 0.99),
        first_error,
    }
}

/// A progress bar over the phase's duration, on stderr when it is a terminal.
fn progress_bar(op: &str, duration: Duration, json: bool) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() && !json {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let length = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    let bar = ProgressBar::with_draw_target(Some(length), target);
    if let Ok(style) = ProgressStyle::with_template("{prefix:>4} [{bar:30}] {elapsed:>4} {msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(op.to_uppercase());
    bar
}

/// The `q` quantile of sorted latencies, in milliseconds (nearest rank).
fn percentile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted
        .get(rank - 1)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// Writes every key once (before a GET-only run).
async fn prepare(
    client: &Client,
    keys: &[Vec<u8>],
    value: &[u8],
    in_flight: u32,
) -> Result<(), mqstate::Error> {
    for chunk in keys.chunks(in_flight as usize) {
        let writes = chunk
            .iter()
            .map(|k| {
                let (client, k, v) = (client.clone(), k.clone(), value.to_vec());
                tokio::spawn(async move { client.set(&k, &v, SetOptions::default()).await })
            })
            .collect::<Vec<_>>();
        for w in writes {
            if let Ok(r) = w.await {
                r?;
            }
        }
    }
    Ok(())
}

/// Deletes the keys the run wrote.
async fn cleanup(client: &Client, keys: &[Vec<u8>], in_flight: u32) -> Result<(), mqstate::Error> {
    for chunk in keys.chunks(in_flight as usize) {
        let deletes = chunk
            .iter()
            .map(|k| {
                let (client, k) = (client.clone(), k.clone());
                tokio::spawn(async move { client.del(&k, None).await })
            })
            .collect::<Vec<_>>();
        for d in deletes {
            if let Ok(r) = d.await {
                r?;
            }
        }
    }
    Ok(())
}

/// The results as an aligned table.
fn table(results: &[PhaseResult]) -> String {
    let mut out = format!(
        "{:<4} {:>10} {:>10} {:>9} {:>9} {:>7}\n",
        "op", "ops", "ops/s", "p50 ms", "p99 ms", "errors"
    );
    for r in results {
        out.push_str(&format!(
            "{:<4} {:>10} {:>10.0} {:>9.3} {:>9.3} {:>7}\n",
            r.op,
            r.ops,
            r.ops_per_sec(),
            r.p50_ms,
            r.p99_ms,
            r.errors
        ));
    }
    out
}

/// The results as JSON.
fn json_report(args: &BenchArgs, results: &[PhaseResult]) -> serde_json::Value {
    json!({
        "in_flight": args.in_flight,
        "value_size": args.value_size,
        "duration_s": args.duration.as_secs_f64(),
        "keys": args.keys,
        "results": results.iter().map(|r| json!({
            "op": r.op,
            "ops": r.ops,
            "ops_per_sec": r.ops_per_sec(),
            "p50_ms": r.p50_ms,
            "p99_ms": r.p99_ms,
            "errors": r.errors,
            "seconds": r.seconds,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let ms: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&ms, 0.50), 50.0);
        assert_eq!(percentile(&ms, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
        assert_eq!(percentile(&ms[..1], 0.99), 1.0);
    }

    #[test]
    fn table_has_a_row_per_phase() {
        let r = PhaseResult {
            op: "set",
            ops: 1000,
            errors: 0,
            seconds: 2.0,
            p50_ms: 1.5,
            p99_ms: 4.25,
            first_error: None,
        };
        let t = table(&[r]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[1].starts_with("set"));
        assert!(lines[1].contains(" 500 "), "{t}");
        assert!(lines[1].contains("4.250"), "{t}");
    }
}
