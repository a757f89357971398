//! The Rust figure of the Kotlin benchmark (`GetBenchmark`): the core's baseline loop
//! (`mqstate::bench::rust_get`), measured in the same process and run as the Kotlin one.

use crate::errors::MqstateError;
use crate::runtime::run;

/// Connects its own client to `url`, writes one 32-byte value, then runs `n` GETs of it with
/// `depth` in flight, from Rust only. Returns the GETs per second.
#[uniffi::export]
pub async fn bench_rust_get(url: String, n: u32, depth: u32) -> Result<f64, MqstateError> {
    run(async move { mqstate::bench::rust_get(&url, n, depth).await }).await
}
