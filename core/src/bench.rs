//! The Rust baseline of the bindings' `get` benchmarks (`node/bench`, `kotlin`'s
//! `GetBenchmark`): the same loop, run by the core's own client, in the binding's process
//! against the same server, so that each binding's figure is a ratio to exactly this code.
//! Not part of the client's API.

use bytes::Bytes;

use crate::client::options::ConnectOptions;
use crate::client::{Client, SetOptions};
use crate::protocol::errors::Error;

/// Connects its own client to `url`, writes one 32-byte value, then runs `n` GETs of it with
/// `depth` in flight (tokio tasks sharing the client). Returns the GETs per second.
///
/// ```no_run
/// # async fn demo() -> Result<(), mqstate::Error> {
/// let ops_per_second = mqstate::bench::rust_get("mqtt://127.0.0.1:1883", 20_000, 64).await?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// Any error of the connection or of a request, as the client reports it.
pub async fn rust_get(url: &str, n: u32, depth: u32) -> Result<f64, Error> {
    let client = Client::connect(ConnectOptions::from_url(url)?).await?;
    let key = Bytes::from_static(b"mqstate-bench-rust");
    client
        .set(&key, [0x5a_u8; 32], SetOptions::default())
        .await?;
    let depth = depth.clamp(1, n.max(1));
    let started = std::time::Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..depth {
        let (client, key) = (client.clone(), key.clone());
        // Spread n over the workers.
        let count = n / depth + u32::from(w < n % depth);
        workers.spawn(async move {
            for _ in 0..count {
                client.get(&key).await?;
            }
            Ok::<(), Error>(())
        });
    }
    while let Some(done) = workers.join_next().await {
        done.map_err(|e| Error::Disconnected(format!("benchmark task failed: {e}")))??;
    }
    let secs = started.elapsed().as_secs_f64();
    client.close().await;
    Ok(f64::from(n) / secs)
}
