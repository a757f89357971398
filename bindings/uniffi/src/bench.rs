//! The Rust figure of the Kotlin benchmark (`kotlin/bench`): the core's own client, measured
//! in the same process and run as the Kotlin one.

use bytes::Bytes;
use mqstate::{Client, ConnectOptions, Error, SetOptions};

use crate::errors::MqstateError;
use crate::runtime::run;

/// Connects its own client to `url`, writes one 32-byte value, then runs `n` GETs of it with
/// `depth` in flight, from Rust only. Returns the GETs per second.
#[uniffi::export]
pub async fn bench_rust_get(url: String, n: u32, depth: u32) -> Result<f64, MqstateError> {
    run(async move {
        let client = Client::connect(ConnectOptions::from_url(&url)?).await?;
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
        Ok::<_, Error>(f64::from(n) / secs)
    })
    .await
}
