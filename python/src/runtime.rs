//! The library's own tokio runtime (one per process, started on first use) and the two ways
//! Python code waits on it: blocking with the GIL released, or through an asyncio future.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use pyo3::prelude::*;
use tokio::runtime::Runtime;

/// Worker threads unless `MQSTATE_WORKER_THREADS` says otherwise. One is enough, and the
/// cheapest: each call's own work runs on the caller's thread (the event loop's, or the one
/// blocked in the call), so the workers only move packets and run timers, and never take the
/// GIL. A second worker measured costing about 3 µs of CPU per request on the runtime's
/// threads and 1 µs on the event loop's, without carrying more requests
/// (docs/performance.md#decisions, "One runtime worker"). A process that runs a busy
/// in-process `LocalServer` may want more.
const DEFAULT_WORKER_THREADS: usize = 1;

/// The environment variable that sets the count of worker threads.
const WORKER_THREADS_VAR: &str = "MQSTATE_WORKER_THREADS";

/// The count of worker threads set by the environment, read when the module is imported
/// ([`read_worker_threads`]), so that a bad value fails the import instead of the first call.
/// Unset: [`DEFAULT_WORKER_THREADS`].
static WORKER_THREADS: OnceLock<usize> = OnceLock::new();

/// How often a blocking call on Python's main thread wakes up to run signal handlers, so that
/// Ctrl-C interrupts a call waiting for a slow or absent server.
const SIGNAL_CHECK_INTERVAL: Duration = Duration::from_millis(100);

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The runtime every client, observation, asyncio awaitable and test server of this process
/// runs on, started on first use (so importing the module starts no thread, and a process
/// forked before any use is fine). Never a runtime of the caller's.
pub(crate) fn runtime() -> &'static Runtime {
    RUNTIME.get_or_init(|| {
        let workers = WORKER_THREADS
            .get()
            .copied()
            .unwrap_or(DEFAULT_WORKER_THREADS);
        #[allow(clippy::expect_used)] // no runtime means no library: report it loudly, once
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("mqstate")
            .enable_all()
            .build()
            .expect("mqstate: could not start the tokio runtime");
        runtime
    })
}

/// Reads `MQSTATE_WORKER_THREADS` (a whole number from 1 to 1024), when set, for the runtime
/// that [`runtime`] starts later. Called when the module is imported: any other value raises
/// `ValueError` there.
pub(crate) fn read_worker_threads() -> PyResult<()> {
    if let Some(value) = std::env::var_os(WORKER_THREADS_VAR) {
        let workers = parse_worker_threads(&value.to_string_lossy()).map_err(|e| {
            pyo3::exceptions::PyValueError::new_err(format!("{WORKER_THREADS_VAR}: {e}"))
        })?;
        // Set once per process: should the module's init ever run again, the count the
        // runtime may already have started with stays.
        let _ = WORKER_THREADS.set(workers);
    }
    Ok(())
}

/// `value` as a count of worker threads, or why it is not one.
fn parse_worker_threads(value: &str) -> Result<usize, String> {
    match value.trim().parse::<usize>() {
        Ok(n @ 1..=1024) => Ok(n),
        _ => Err(format!(
            "expected a whole number of worker threads from 1 to 1024, got {value:?}"
        )),
    }
}

/// Runs `future` to completion on the library's runtime with the GIL released, so other Python
/// threads run meanwhile. On the main thread it wakes up every 100 ms to run signal handlers:
/// a `KeyboardInterrupt` raised by one abandons the call (dropping `future`, which cancels
/// the request).
pub(crate) fn wait<F>(py: Python<'_>, future: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let main = is_main_thread(py);
    py.detach(move || {
        let runtime = runtime();
        if !main {
            // Only the main thread runs signal handlers: nothing to wake up for.
            return Ok(runtime.block_on(future));
        }
        let mut future = std::pin::pin!(future);
        loop {
            // The timer is made inside `block_on`, where the runtime's context is set.
            let chunk =
                async { tokio::time::timeout(SIGNAL_CHECK_INTERVAL, future.as_mut()).await };
            match runtime.block_on(chunk) {
                Ok(output) => return Ok(output),
                Err(_elapsed) => Python::attach(|py| py.check_signals())?,
            }
        }
    })
}

/// The glue of every blocking call into the core: runs `future` on the library's runtime with
/// the GIL released (see [`wait`]) and raises its error as the matching Python exception
/// (see [`crate::errors`]).
pub(crate) fn call<F, T>(py: Python<'_>, future: F) -> PyResult<T>
where
    F: Future<Output = Result<T, mqstate::Error>> + Send,
    T: Send,
{
    use crate::errors::OrRaise as _;
    wait(py, future)?.or_raise(py)
}

/// Whether the calling thread is Python's main thread (the one that runs signal handlers);
/// computed once per thread.
fn is_main_thread(py: Python<'_>) -> bool {
    thread_local! {
        static IS_MAIN: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
    }
    if let Some(known) = IS_MAIN.get() {
        return known;
    }
    let ident = |method: &str| {
        py.import("threading")
            .and_then(|t| t.call_method0(method))
            .and_then(|t| {
                if method == "main_thread" {
                    t.getattr("ident")
                } else {
                    Ok(t)
                }
            })
            .and_then(|i| i.extract::<u64>())
            .ok()
    };
    let main = matches!((ident("get_ident"), ident("main_thread")), (Some(a), Some(b)) if a == b);
    IS_MAIN.set(Some(main));
    main
}
