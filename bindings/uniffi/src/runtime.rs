//! The library's own tokio runtime, and how a foreign `suspend`/`async` call waits on it.
//!
//! uniffi polls an exported future from the foreign language's executor (Kotlin coroutines,
//! Swift tasks). The core's futures need a tokio context (timers, sockets), so every call
//! spawns its future on this runtime and the foreign side polls only the task's handle.
//! A cancelled coroutine drops that handle, which aborts the task (so a cancelled request
//! stops waiting, as when a Rust caller drops the future).

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

use crate::errors::MqstateError;

/// Worker threads: the connection tasks are light; two keep one free while the other decodes.
/// (The Python binding went down to one, measured in docs/performance.md#decisions, "One
/// runtime worker"; here the calls that are not polled from the foreign side run on the
/// workers, and no measurement of this binding was made, so it keeps two.)
const WORKER_THREADS: usize = 2;

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// The runtime every client, observation and lease of this process runs on, started on first
/// use. A runtime that cannot start is an error of every call, never a panic.
pub(crate) fn runtime() -> Result<&'static Runtime, MqstateError> {
    let made = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKER_THREADS)
            .thread_name("mqstate")
            .enable_all()
            .build()
            .map_err(|e| format!("could not start the mqstate runtime: {e}"))
    });
    match made {
        Ok(runtime) => Ok(runtime),
        Err(e) => Err(MqstateError::Connection { reason: e.clone() }),
    }
}

/// Runs `future` on the library's runtime and waits for it (from any executor).
pub(crate) async fn run<T, E, F>(future: F) -> Result<T, MqstateError>
where
    F: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: Into<MqstateError> + Send + 'static,
{
    let task = AbortOnDrop(runtime()?.spawn(future));
    match task.await {
        Ok(outcome) => outcome.map_err(Into::into),
        Err(e) => Err(MqstateError::Disconnected {
            reason: format!("disconnected: the call's task ended abnormally: {e}"),
        }),
    }
}

/// Runs `future` in the library runtime's context, polled directly by the caller's executor
/// (no task spawned): for short request/response calls, whose work is done by the
/// connection task already on the runtime; they only need the runtime's timers. Dropping the
/// future (a cancelled coroutine) drops the request, as in Rust.
pub(crate) async fn call<T, E, F>(future: F) -> Result<T, MqstateError>
where
    F: Future<Output = Result<T, E>> + Send,
    E: Into<MqstateError>,
{
    let handle = runtime()?.handle().clone();
    InRuntime {
        future: Box::pin(future),
        handle,
    }
    .await
    .map_err(Into::into)
}

/// A future polled with the runtime's context entered.
struct InRuntime<F: Future> {
    future: Pin<Box<F>>,
    handle: tokio::runtime::Handle,
}

impl<F: Future> Future for InRuntime<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _entered = self.handle.enter();
        self.future.as_mut().poll(cx)
    }
}

/// A task handle that aborts the task when dropped (a cancelled foreign call).
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
