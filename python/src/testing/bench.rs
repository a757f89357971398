//! `_bench_rust_get` and `_bench_rust_blocking_get`: the Rust figures the Python benchmark
//! (`python/bench/bench.py`) compares with, measured in the same process and run, against the
//! same server.

use std::time::Instant;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::errors::{self, OrRaise};
use crate::runtime::{runtime, wait};

/// Connects a Rust client to `url` and runs `n` GETs of `key` with `depth` requests in flight
/// (`depth` tasks, each awaiting its GETs one after the other), all on the library's runtime;
/// returns GETs per second. Test and benchmark helper; not part of the API.
#[pyfunction]
#[pyo3(signature = (url, n, depth, key = "mqstate-bench"))]
pub(crate) fn _bench_rust_get(
    py: Python<'_>,
    url: &str,
    n: usize,
    depth: usize,
    key: &str,
) -> PyResult<f64> {
    if n == 0 || depth == 0 {
        return Err(errors::invalid_argument(py, "n and depth must be positive"));
    }
    let options = mqstate::ConnectOptions::from_url(url).or_raise(py)?;
    let key = bytes::Bytes::copy_from_slice(key.as_bytes());
    let per_task = n.div_ceil(depth);
    let task = runtime().spawn(async move {
        let client = mqstate::Client::connect(options).await?;
        for _ in 0..200 {
            client.get(&key).await?; // warm-up
        }
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..depth {
            let client = client.clone();
            let key = key.clone();
            tasks.spawn(async move {
                for _ in 0..per_task {
                    client.get(&key).await?;
                }
                Ok::<(), mqstate::Error>(())
            });
        }
        let mut result = Ok(());
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(e),
                Err(e) => result = Err(mqstate::Error::Disconnected(format!("task failed: {e}"))),
            }
        }
        let elapsed = start.elapsed().as_secs_f64();
        client.close().await;
        result.map(|()| (per_task * depth) as f64 / elapsed)
    });
    match wait(py, task)? {
        Ok(result) => result.or_raise(py),
        Err(e) => Err(PyRuntimeError::new_err(format!(
            "benchmark task failed: {e}"
        ))),
    }
}

/// Connects a Rust blocking client (`mqstate::blocking::Client`, the facade a blocking Python
/// call goes through too) to `url` and runs `n` GETs of `key` one after the other on the
/// calling thread, with the GIL released; returns GETs per second. The baseline of Python's
/// blocking `get`: the same calls, minus Python. Test and benchmark helper; not part of the API.
#[pyfunction]
#[pyo3(signature = (url, n, key = "mqstate-bench"))]
pub(crate) fn _bench_rust_blocking_get(
    py: Python<'_>,
    url: &str,
    n: usize,
    key: &str,
) -> PyResult<f64> {
    if n == 0 {
        return Err(errors::invalid_argument(py, "n must be positive"));
    }
    let options = mqstate::ConnectOptions::from_url(url).or_raise(py)?;
    let key = key.as_bytes().to_vec();
    py.detach(move || {
        let client = mqstate::blocking::Client::connect(options)?;
        for _ in 0..200 {
            client.get(&key)?; // warm-up
        }
        let start = Instant::now();
        for _ in 0..n {
            client.get(&key)?;
        }
        let rate = n as f64 / start.elapsed().as_secs_f64();
        client.close();
        Ok(rate)
    })
    .or_raise(py)
}

/// An awaitable whose Rust future panics when it is first polled, which happens on the
/// loop's thread: the panic must become a `RuntimeError` of the awaitable, and the loop must
/// go on. Test helper; not part of the API.
#[pyfunction]
pub(crate) fn _panicking_call(py: Python<'_>, message: String) -> PyResult<Bound<'_, PyAny>> {
    crate::aio::spawn(py, async move {
        // A yield first, so that the panic happens in a later poll (from the loop's reader
        // callback), not in the call itself.
        tokio::task::yield_now().await;
        #[allow(clippy::panic)] // the panic is what this helper exists to make
        std::panic::panic_any::<String>(message);
        #[allow(unreachable_code)]
        Ok::<(), mqstate::Error>(())
    })
}
