//! asyncio awaitables for core futures, run on the library's runtime.
//!
//! Each call returns an `asyncio.Future` of the running loop; the Rust future runs as a task
//! on the library's runtime. Cancelling the asyncio future (or the task awaiting it) aborts
//! that task, which drops the Rust future and so cancels the request (its correlation entry
//! is removed at once; a late response is ignored).
//!
//! Results come back through one completion queue per event loop: a runtime worker that
//! finishes a request pushes the result (still a Rust value) and, only when the queue was
//! empty, writes one byte to a socket pair that the loop watches (`loop.add_reader`). The
//! loop's reader callback then converts and delivers every queued result at once, on the
//! loop's thread. Runtime workers never take the GIL, and one wake-up serves a whole batch:
//! with many requests in flight, a worker waiting for the GIL held by the loop (as
//! pyo3-async-runtimes' `future_into_py` does for every result) costed more than half of the
//! throughput (see python/README.md, "Benchmark").

use std::cell::RefCell;
use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};

use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;

use crate::errors::Outcome;
use crate::runtime::runtime;
use crate::stream::{Next, Source, StreamState};

/// What a finished task hands to the loop: run there, with the GIL, on the task's future.
type Completion = Box<dyn for<'py> FnOnce(Python<'py>, &Bound<'py, PyAny>) + Send>;

/// The completion queue of one event loop.
struct Bridge {
    queue: Mutex<Vec<(Py<PyAny>, Completion)>>,
    /// A wake-up byte is on its way (or the loop is draining): no need for another.
    armed: AtomicBool,
    reader: UnixStream,
    writer: UnixStream,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("armed", &self.armed)
            .finish_non_exhaustive()
    }
}

impl Bridge {
    /// Queues `completion` for `future` and wakes the loop if it is not awake already.
    /// Called from runtime workers: no GIL needed.
    fn push(&self, future: Py<PyAny>, completion: Completion) {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((future, completion));
        if !self.armed.swap(true, Ordering::SeqCst) {
            // Non-blocking: a full socket buffer means wake-ups are pending anyway.
            let _ = (&self.writer).write(&[1]);
        }
    }

    /// Runs every queued completion (on the loop's thread).
    fn drain(&self, py: Python<'_>) {
        // Consume the wake-up bytes, then disarm, then take the queue: a result queued after
        // the disarming writes a new byte (read by the next call), and one queued before the
        // take is taken. (Disarming before reading could swallow the byte of a re-arming.)
        let mut sink = [0u8; 64];
        while matches!((&self.reader).read(&mut sink), Ok(n) if n > 0) {}
        self.armed.store(false, Ordering::SeqCst);
        let ready = std::mem::take(&mut *self.queue.lock().unwrap_or_else(PoisonError::into_inner));
        for (future, completion) in ready {
            completion(py, future.bind(py));
        }
    }
}

/// The reader callback of a loop's completion socket.
#[pyclass(module = "mqstate._native", name = "_Drain", frozen)]
#[derive(Debug)]
struct Drain(Arc<Bridge>);

#[pymethods]
impl Drain {
    fn __call__(&self, py: Python<'_>) {
        self.0.drain(py);
    }
}

thread_local! {
    /// The last event loop this thread used and its bridge (a loop runs on one thread).
    static LAST: RefCell<Option<(Py<PyAny>, Arc<Bridge>)>> = const { RefCell::new(None) };
}

/// The bridge of `event_loop`, made (and registered with the loop) on first use.
fn bridge(event_loop: &Bound<'_, PyAny>) -> PyResult<Arc<Bridge>> {
    let known = LAST.with_borrow(|last| match last {
        Some((l, bridge)) if l.bind(event_loop.py()).is(event_loop) => Some(bridge.clone()),
        _ => None,
    });
    if let Some(bridge) = known {
        return Ok(bridge);
    }
    let io =
        |e: std::io::Error| PyRuntimeError::new_err(format!("mqstate: completion socket: {e}"));
    let (reader, writer) = UnixStream::pair().map_err(io)?;
    reader.set_nonblocking(true).map_err(io)?;
    writer.set_nonblocking(true).map_err(io)?;
    let bridge = Arc::new(Bridge {
        queue: Mutex::new(Vec::new()),
        armed: AtomicBool::new(false),
        reader,
        writer,
    });
    // The loop keeps the callback (and so the sockets) until it is closed.
    event_loop.call_method1(
        "add_reader",
        (bridge.reader.as_raw_fd(), Drain(bridge.clone())),
    )?;
    LAST.with_borrow_mut(|last| *last = Some((event_loop.clone().unbind(), bridge.clone())));
    Ok(bridge)
}

/// `asyncio.get_running_loop()`.
fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    GET_RUNNING_LOOP
        .import(py, "asyncio", "get_running_loop")?
        .call0()
}

/// A future that turns a panic into an error instead of losing the asyncio future's result.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = std::thread::Result<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    format!("mqstate: internal error (a Rust panic): {text}")
}

/// Runs `future` on the library's runtime and returns an `asyncio.Future` of the running
/// loop for it; `complete` later runs on the loop's thread with the output (a panic of
/// `future` becomes a `RuntimeError` there). Cancelling the asyncio future aborts the task.
pub(crate) fn spawn_with<'py, F, C>(
    py: Python<'py>,
    future: F,
    complete: C,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    C: for<'a> FnOnce(Python<'a>, &Bound<'a, PyAny>, std::thread::Result<F::Output>)
        + Send
        + 'static,
{
    let event_loop = running_loop(py)?;
    let bridge = bridge(&event_loop)?;
    let asyncio_future = event_loop.call_method0("create_future")?;
    let target = asyncio_future.clone().unbind();
    let abort = Py::new(py, AbortTask(OnceLock::new()))?;
    let on_done = abort.clone_ref(py);
    let task = runtime().spawn(async move {
        let output = CatchUnwind(Box::pin(future)).await;
        bridge.push(
            target,
            Box::new(move |py, future| {
                // The task has finished, so the abort callback has nothing left to do. Left
                // in place, it would cost the loop one more scheduled callback (a `call_soon`
                // handle, run on a later iteration) for every request.
                let _ = future.call_method1("remove_done_callback", (on_done,));
                complete(py, future, output)
            }),
        );
    });
    // Set before the loop can run the callback: it runs on this thread, after this returns.
    let _ = abort.get().0.set(task.abort_handle());
    asyncio_future.call_method1("add_done_callback", (abort,))?;
    Ok(asyncio_future)
}

/// Gives `future` its result or exception, unless it is done already (cancelled).
pub(crate) fn settle(
    py: Python<'_>,
    future: &Bound<'_, PyAny>,
    result: PyResult<Bound<'_, PyAny>>,
) {
    // A future that is done already (cancelled) refuses the result with InvalidStateError,
    // which is ignored: asking `done()` first would cost one more call for every request.
    let _ = match result {
        Ok(value) => future.call_method1("set_result", (value,)),
        Err(error) => future.call_method1("set_exception", (error.into_value(py),)),
    };
}

/// Runs `future` on the library's runtime; its result (or its error, as the matching
/// `mqstate` exception) becomes the result of the returned `asyncio.Future`.
pub(crate) fn spawn<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = Result<T, mqstate::Error>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    spawn_with(py, future, |py, target, output| {
        let result = match output {
            Ok(outcome) => Outcome(outcome).into_pyobject(py),
            Err(panic) => Err(PyRuntimeError::new_err(panic_message(&*panic))),
        };
        settle(py, target, result);
    })
}

/// [`spawn`] for a future whose error is already a Python exception (for example one raised
/// by a callback it ran).
pub(crate) fn spawn_fallible<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    spawn_with(py, future, |py, target, output| {
        let result = match output {
            Ok(Ok(value)) => value.into_bound_py_any(py),
            Ok(Err(error)) => Err(error),
            Err(panic) => Err(PyRuntimeError::new_err(panic_message(&*panic))),
        };
        settle(py, target, result);
    })
}

/// An `asyncio.Future` of the running loop that is already done with `value`.
pub(crate) fn ready<'py>(
    py: Python<'py>,
    value: impl IntoPyObject<'py>,
) -> PyResult<Bound<'py, PyAny>> {
    let future = running_loop(py)?.call_method0("create_future")?;
    future.call_method1("set_result", (value,))?;
    Ok(future)
}

/// What `AsyncClient.connect()` and `AsyncClient.observe()` return: an awaitable that is also
/// an async context manager, so both `x = await f()` and `async with f() as x:` work. The
/// work starts at once (it does not wait to be awaited).
#[pyclass(module = "mqstate", name = "Pending", frozen)]
#[derive(Debug)]
pub(crate) struct Pending {
    future: Py<PyAny>,
}

impl Pending {
    pub(crate) fn new(future: Bound<'_, PyAny>) -> Self {
        Pending {
            future: future.unbind(),
        }
    }
}

#[pymethods]
impl Pending {
    fn __await__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.future.bind(py).call_method0("__await__")
    }

    fn __aenter__(&self, py: Python<'_>) -> Py<PyAny> {
        self.future.clone_ref(py)
    }

    #[pyo3(signature = (*exc_info))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        exc_info: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // `async with` awaited the future in __aenter__: its result is the object to exit.
        let value = self.future.bind(py).call_method0("result")?;
        value.call_method1("__aexit__", exc_info)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "<mqstate.Pending {}>",
            self.future.bind(py).repr()?
        ))
    }
}

/// `add_done_callback` of an asyncio future: once it is done before its task has finished
/// (cancelled), the task behind it is aborted. [`spawn_with`] sets the handle right after
/// the spawn, and removes the callback when the task has delivered its result.
#[pyclass(module = "mqstate._native", name = "_AbortTask", frozen)]
#[derive(Debug)]
pub(crate) struct AbortTask(OnceLock<tokio::task::AbortHandle>);

#[pymethods]
impl AbortTask {
    fn __call__(&self, _future: &Bound<'_, PyAny>) {
        if let Some(task) = self.0.get() {
            task.abort();
        }
    }
}

/// The next item of `state` as an `asyncio.Future` of the running loop. Unlike [`spawn`],
/// an item received for a future that was cancelled meanwhile is not lost: it is handed back
/// to `state` for the next call (the stream stays locked until then, so that a later call
/// cannot overtake it). `convert` runs on the loop's thread, with the GIL.
pub(crate) fn spawn_next<'py, S, C>(
    py: Python<'py>,
    state: Arc<StreamState<S>>,
    convert: C,
) -> PyResult<Bound<'py, PyAny>>
where
    S: Source,
    C: for<'a> FnOnce(Python<'a>, Next<S::Item>) -> PyResult<Bound<'a, PyAny>> + Send + 'static,
{
    let receive = {
        let state = state.clone();
        async move { state.next_guarded(None).await }
    };
    spawn_with(py, receive, move |py, future, output| {
        let (next, held) = match output {
            Ok(received) => received,
            Err(panic) => {
                settle(
                    py,
                    future,
                    Err(PyRuntimeError::new_err(panic_message(&*panic))),
                );
                return;
            }
        };
        let pending = !future
            .call_method0("done")
            .and_then(|d| d.is_truthy())
            .unwrap_or(true);
        if pending {
            let result = convert(py, next);
            settle(py, future, result);
        } else if let Next::Item(item) = next {
            // Cancelled meanwhile: keep the item for the next call.
            state.requeue(item);
        }
        drop(held);
        if state.is_closed() {
            state.close(); // drops the stream now that nobody holds it
        }
    })
}
