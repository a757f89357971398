//! asyncio awaitables for core futures, driven on the event loop's own thread.
//!
//! Each call returns a [`Call`] of the running loop (an asyncio future-like, see `call.rs`).
//! The Rust future behind it is polled on the loop's thread (inside the library runtime's
//! context, so its timers and channels work), first right away, then each time it is woken:
//! its waker, called by the runtime's workers (a response arrived, a timer fired), queues it
//! on the loop's completion queue and, only when the queue was empty, writes one byte to a
//! socket pair that the loop watches (`loop.add_reader`). The loop's reader callback polls every queued future at once
//! and settles the calls of those that finished (each is a [`Task`] of `mqstate-drive`, the
//! driver the Node binding uses too), whose done callbacks (the awaiting Tasks' wake-ups) run
//! right there. So runtime workers never take the GIL, one wake-up serves a whole batch, and
//! a request costs no task of its own on the runtime: no spawn, no extra thread hand-off
//! (see python/README.md, "Benchmark").
//!
//! Cancelling the call (or the task awaiting it) drops the Rust future at once, which
//! cancels the request (its correlation entry is removed; a late response is ignored).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use mqstate_drive::{Host, Output, Task};

use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;

use crate::call::{self, Call};
use crate::errors::{self, Outcome};
use crate::runtime::runtime;
use crate::stream::{Next, Source, StreamState};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The completion queue of one event loop: the driven futures woken since its last drain.
struct Bridge {
    queue: Mutex<Vec<Arc<Task<Bridge>>>>,
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

/// The driven futures of one loop are [`Task`]s of this bridge: a wake-up queues them here.
impl Host for Bridge {
    type Context = ();

    /// Queues `woken` for a poll and wakes the loop if it is not awake already. Called from
    /// any thread (mostly runtime workers): no GIL needed.
    fn schedule(&self, woken: Arc<Task<Self>>) {
        lock(&self.queue).push(woken);
        if !self.armed.swap(true, Ordering::SeqCst) {
            // Non-blocking: a full socket buffer means wake-ups are pending anyway.
            let _ = (&self.writer).write(&[1]);
        }
    }
}

impl Bridge {
    /// Polls every queued future (on the loop's thread, with the GIL held, which the
    /// settling of the finished ones needs).
    fn drain(&self, py: Python<'_>) -> PyResult<()> {
        // Consume the wake-up byte, then disarm, then take the queue: a future queued after
        // the disarming writes a new byte (read by the next call), and one queued before the
        // take is taken. (Disarming before reading could swallow the byte of a re-arming.) A
        // byte is written only when the flag goes from disarmed to armed, so at most one is
        // waiting: one read takes it (a second would only find the socket empty).
        let _ = (&self.reader).read(&mut [0u8; 8]);
        self.armed.store(false, Ordering::SeqCst);
        let woken = std::mem::take(&mut *lock(&self.queue));
        // This callback's loop, when it is the thread's last (as it nearly always is): then
        // the calls made while the batch is delivered need not ask for the running loop.
        let known_loop = LAST.with_borrow(|last| match last {
            Some((event_loop, bridge)) if std::ptr::eq(Arc::as_ptr(bridge), self) => {
                Some(event_loop.clone_ref(py))
            }
            _ => None,
        });
        // The loop runs this callback between Tasks' steps, where the awaiting Tasks may be
        // woken at once; not so if a Task is running (a loop run from within one). If that
        // cannot be told, the callbacks are scheduled: the batch must be delivered anyway.
        let direct = current_task(py, known_loop.as_ref()).is_ok_and(|task| task.is_none());
        let _context = runtime().enter();
        let _draining = Draining::enter(known_loop.is_some());
        call::delivering(direct, || {
            for task in woken {
                task.poll(());
            }
        })
    }
}

/// Marks the thread as running the reader callback of its last loop's bridge, until dropped
/// (also by a panic unwinding through the callback).
struct Draining(bool);

impl Draining {
    fn enter(last_loop: bool) -> Self {
        Draining(DRAINING_LAST.replace(last_loop))
    }
}

impl Drop for Draining {
    fn drop(&mut self) {
        DRAINING_LAST.set(self.0);
    }
}

/// What `Call.cancel()` drops: the call's task, with its future.
impl call::Cancel for Task<Bridge> {
    fn cancel(&self) {
        Task::cancel(self);
    }
}

/// The reader callback of a loop's completion socket.
#[pyclass(module = "mqstate._native", name = "_Drain", frozen)]
#[derive(Debug)]
struct Drain(Arc<Bridge>);

#[pymethods]
impl Drain {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        self.0.drain(py)
    }
}

thread_local! {
    /// The last event loop this thread used and its bridge (a loop runs on one thread).
    static LAST: RefCell<Option<(Py<PyAny>, Arc<Bridge>)>> = const { RefCell::new(None) };
    /// Set while the reader callback of `LAST`'s bridge runs: that loop is then the running
    /// one (asyncio refuses to start a loop from within another's callback).
    static DRAINING_LAST: Cell<bool> = const { Cell::new(false) };
}

/// The running loop and its bridge. During a delivery by the last loop's reader callback
/// (where a call's result resumes the Task that makes the next call), that loop, without
/// `asyncio.get_running_loop()`: on CPython 3.11 each of those makes a `getpid` system call,
/// a few percent of the loop's time per request (see docs/performance.md#decisions).
fn running_bridge(py: Python<'_>) -> PyResult<(Bound<'_, PyAny>, Arc<Bridge>)> {
    if DRAINING_LAST.get() {
        let last = LAST.with_borrow(|last| {
            last.as_ref()
                .map(|(event_loop, bridge)| (event_loop.bind(py).clone(), bridge.clone()))
        });
        if let Some(last) = last {
            return Ok(last);
        }
    }
    let event_loop = running_loop(py)?;
    let bridge = bridge(&event_loop)?;
    Ok((event_loop, bridge))
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
pub(crate) fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    GET_RUNNING_LOOP
        .import(py, "asyncio", "get_running_loop")?
        .call0()
}

/// `asyncio.current_task(event_loop)`, by default of the running loop (which costs the
/// lookup of [`running_loop`]): `None` between Tasks' steps.
fn current_task<'py>(
    py: Python<'py>,
    event_loop: Option<&Py<PyAny>>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    static CURRENT_TASK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let current_task = CURRENT_TASK.import(py, "asyncio", "current_task")?;
    let task = match event_loop {
        Some(event_loop) => current_task.call1((event_loop,))?,
        None => current_task.call0()?,
    };
    Ok((!task.is_none()).then_some(task))
}

/// Drives `future` on the running loop's thread and returns a [`Call`] of that loop for it;
/// `complete` runs there too, with the output (a panic of `future` becomes a
/// `RuntimeError`). Cancelling the call drops `future`.
pub(crate) fn spawn_with<'py, F, C>(
    py: Python<'py>,
    future: F,
    complete: C,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    C: for<'a> FnOnce(Python<'a>, &Bound<'a, Call>, std::thread::Result<F::Output>)
        + Send
        + 'static,
{
    let (event_loop, bridge) = running_bridge(py)?;
    let call = Bound::new(py, Call::new(event_loop.unbind()))?;
    let target = call.clone().unbind();
    let task = Task::new(
        bridge,
        future,
        None,
        move |(), output: Output<F::Output>| {
            // On the loop's thread, from a poll made with the GIL held: attaching is a no-op.
            // (`None` would mean cancelled by a cancellation future, which is never given
            // here: a cancelled call drops its task instead, and nothing is settled.)
            if let Some(output) = output.transpose() {
                Python::attach(|py| complete(py, target.bind(py), output));
            }
        },
    );
    call.get().set_work(task.clone());
    // The first poll starts the work now (sends the request), not when it is awaited.
    let _context = runtime().enter();
    task.poll(());
    Ok(call.into_any())
}

/// Drives `future` on the running loop's thread; its result (or its error, as the matching
/// `mqstate` exception) becomes the result of the returned [`Call`].
pub(crate) fn spawn<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = Result<T, mqstate::Error>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    spawn_with(py, future, |py, target, output| {
        let result = match output {
            Ok(outcome) => Outcome(outcome).into_pyobject(py),
            Err(panic) => Err(errors::panicked(&*panic)),
        };
        Call::settle(target, result);
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
            Err(panic) => Err(errors::panicked(&*panic)),
        };
        Call::settle(target, result);
    })
}

/// A [`Call`] of the running loop that is already done with `value`.
pub(crate) fn ready<'py>(
    py: Python<'py>,
    value: impl IntoPyObject<'py>,
) -> PyResult<Bound<'py, PyAny>> {
    let value = value.into_bound_py_any(py)?.unbind();
    let call = Call::done_with(running_loop(py)?.unbind(), value);
    Ok(Bound::new(py, call)?.into_any())
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

/// The next item of `state` as a [`Call`] of the running loop. Unlike [`spawn`],
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
                Call::settle(future, Err(errors::panicked(&*panic)));
                return;
            }
        };
        if !future.get().is_done() {
            let result = convert(py, next);
            Call::settle(future, result);
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
