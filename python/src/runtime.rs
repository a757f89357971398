//! The library's own tokio runtime (one per process, started on first use) and the two ways
//! Python code waits on it: blocking with the GIL released, or through an asyncio future.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use pyo3::prelude::*;
use tokio::runtime::Runtime;

/// Worker threads: the connection tasks and the in-process test server are light; two keep one
/// free while the other decodes (the machines this runs on often have two cores).
const WORKER_THREADS: usize = 2;

/// How often a blocking call on Python's main thread wakes up to run signal handlers, so that
/// Ctrl-C interrupts a call waiting for a slow or absent server.
const SIGNAL_CHECK_INTERVAL: Duration = Duration::from_millis(100);

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The runtime every client, observation, asyncio awaitable and test server of this process
/// runs on, started on first use (so importing the module starts no thread, and a process
/// forked before any use is fine). Never a runtime of the caller's.
pub(crate) fn runtime() -> &'static Runtime {
    RUNTIME.get_or_init(|| {
        #[allow(clippy::expect_used)] // no runtime means no library: report it loudly, once
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKER_THREADS)
            .thread_name("mqstate")
            .enable_all()
            .build()
            .expect("mqstate: could not start the tokio runtime");
        runtime
    })
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
