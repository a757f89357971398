//! `mqstate.Call`: what every `AsyncClient` method (and every other asyncio method) returns.
//!
//! A future-like object of the running event loop, as asyncio defines them: it has
//! `_asyncio_future_blocking`, so `asyncio.isfuture()` is true and Tasks, `gather`,
//! `wait_for`, `wait`, `shield` and `as_completed` take it as they take an `asyncio.Future`;
//! it has the same methods (`result`, `exception`, `done`, `cancelled`, `cancel`,
//! `add_done_callback`, `remove_done_callback`, `get_loop`, and the private
//! `_make_cancelled_error` and `_cancel_message` that `asyncio.gather` reads from a cancelled
//! child), it can be weakly referenced, and it logs an exception that nobody retrieved, as a
//! Future does.
//!
//! Why not an `asyncio.Future`: a Future schedules its done callbacks with `loop.call_soon`,
//! so a result reached the Task awaiting it one loop iteration after the completion socket
//! delivered it, through a `Handle` made and run per request, and cancelling needed a done
//! callback per request (added, then removed again on completion). A `Call` whose result
//! is delivered by the completion socket's reader callback runs its done callbacks right
//! there, each in its own context; so the awaiting Task resumes in the same loop iteration,
//! and `cancel()` drops the Rust future itself. Done callbacks of a `Call` that is finished
//! any other way (cancelled, or done before the callback was added) are scheduled with
//! `call_soon`, as a Future's are. See python/README.md ("Design notes").

use std::cell::{Cell, RefCell};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::{PyKeyboardInterrupt, PyStopIteration, PySystemExit};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};
use pyo3::{import_exception, intern};

import_exception!(asyncio, CancelledError);
import_exception!(asyncio, InvalidStateError);

/// Where a call stands.
enum Stage {
    Pending,
    Done(Py<PyAny>),
    /// The exception instance, and whether nobody has retrieved it yet (logged on drop).
    Failed(Py<PyAny>, bool),
    /// With the message given to `cancel()`, if any.
    Cancelled(Option<Py<PyAny>>),
}

struct State {
    stage: Stage,
    /// Done callbacks and the `contextvars.Context` each runs in.
    callbacks: Vec<(Py<PyAny>, Py<PyAny>)>,
    /// asyncio's protocol: set by `await` before it yields the call to the Task, cleared by
    /// the Task once it has added its wake-up.
    blocking: bool,
    /// The work behind the call, dropped by `cancel()` (which withdraws its request); not
    /// kept once the call is done.
    work: Option<Arc<dyn Cancel>>,
}

/// The work behind a [`Call`], as far as `cancel()` needs it.
pub(crate) trait Cancel: Send + Sync {
    /// Drops the work unfinished.
    fn cancel(&self);
}

/// An asyncio future-like for one call of the library (see the module documentation).
///
/// ```python
/// call = client.get("door")     # the request is sent now
/// assert asyncio.isfuture(call)
/// value = await call            # or asyncio.wait_for(call, 1.0), asyncio.gather(...)
/// ```
#[pyclass(module = "mqstate", name = "Call", frozen, weakref)]
pub(crate) struct Call {
    event_loop: Py<PyAny>,
    state: Mutex<State>,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call").finish_non_exhaustive()
    }
}

thread_local! {
    /// Set while the completion socket's reader callback delivers results, outside any
    /// Task's step: then a call's done callbacks may run at once (see [`delivering`]).
    static DIRECT: Cell<bool> = const { Cell::new(false) };
    /// A `KeyboardInterrupt` or `SystemExit` raised by a done callback run at once: raised
    /// again once the delivery is over, so that the other results of the batch are not lost.
    static ESCAPED: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// Runs `deliver`, which settles calls, letting their done callbacks run at once when
/// `direct` (no Task's step is running: a Task's wake-up would be refused inside another's).
/// Afterwards raises the first `KeyboardInterrupt`/`SystemExit` a callback raised, if any.
pub(crate) fn delivering(direct: bool, deliver: impl FnOnce()) -> PyResult<()> {
    let outer = DIRECT.replace(direct);
    deliver();
    DIRECT.set(outer);
    match ESCAPED.take() {
        Some(escaped) => Err(escaped),
        None => Ok(()),
    }
}

fn lock(mutex: &Mutex<State>) -> MutexGuard<'_, State> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Call {
    /// A pending call of `event_loop`.
    pub(crate) fn new(event_loop: Py<PyAny>) -> Self {
        Call {
            event_loop,
            state: Mutex::new(State {
                stage: Stage::Pending,
                callbacks: Vec::new(),
                blocking: false,
                work: None,
            }),
        }
    }

    /// A call of `event_loop` that is done already, with `value`.
    pub(crate) fn done_with(event_loop: Py<PyAny>, value: Py<PyAny>) -> Self {
        let call = Call::new(event_loop);
        lock(&call.state).stage = Stage::Done(value);
        call
    }

    /// The work that `cancel()` drops. Set once, right after the call is made.
    pub(crate) fn set_work(&self, work: Arc<dyn Cancel>) {
        let mut state = lock(&self.state);
        if matches!(state.stage, Stage::Pending) {
            state.work = Some(work);
        }
    }

    /// Whether the call is done (finished or cancelled).
    pub(crate) fn is_done(&self) -> bool {
        !matches!(lock(&self.state).stage, Stage::Pending)
    }

    /// Gives the call its result or exception, unless it is done already (cancelled), and
    /// runs or schedules its done callbacks.
    pub(crate) fn settle(slf: &Bound<'_, Call>, result: PyResult<Bound<'_, PyAny>>) {
        let py = slf.py();
        // Made before the lock is taken: making the exception instance may run Python code.
        let stage = match result {
            Ok(value) => Stage::Done(value.unbind()),
            Err(error) => Stage::Failed(error.into_value(py).into_any(), true),
        };
        let (callbacks, work) = {
            let mut state = lock(&slf.get().state);
            if !matches!(state.stage, Stage::Pending) {
                return;
            }
            state.stage = stage;
            (std::mem::take(&mut state.callbacks), state.work.take())
        };
        drop(work); // outside the lock (the Rust task: dropping it may run code)
        if DIRECT.get() {
            // Cleared while the callbacks run: a call settled meanwhile (by a Task's step
            // they resumed) schedules its callbacks instead.
            DIRECT.set(false);
            for (callback, context) in callbacks {
                run_callback(slf, &callback, &context);
            }
            DIRECT.set(true);
        } else {
            slf.get().schedule(py, slf.as_any(), callbacks);
        }
    }

    /// Schedules `callbacks` with `loop.call_soon(callback, call, context=...)`.
    fn schedule(
        &self,
        py: Python<'_>,
        call: &Bound<'_, PyAny>,
        callbacks: Vec<(Py<PyAny>, Py<PyAny>)>,
    ) {
        let event_loop = self.event_loop.bind(py);
        for (callback, context) in callbacks {
            let kwargs = PyDict::new(py);
            let scheduled = kwargs
                .set_item(intern!(py, "context"), context)
                .and_then(|()| {
                    event_loop.call_method(
                        intern!(py, "call_soon"),
                        (callback, call),
                        Some(&kwargs),
                    )
                });
            if let Err(error) = scheduled {
                // A closed loop refuses: nothing would run the callback anyway.
                report(
                    event_loop,
                    "mqstate: could not schedule a done callback",
                    error,
                );
            }
        }
    }
}

/// Runs one done callback at once, in its context; an exception it raises goes to the loop's
/// exception handler, as the `Handle` that `call_soon` makes would send it.
fn run_callback(call: &Bound<'_, Call>, callback: &Py<PyAny>, context: &Py<PyAny>) {
    let py = call.py();
    let ran = context
        .bind(py)
        .call_method1(intern!(py, "run"), (callback, call));
    let Err(error) = ran else { return };
    // As `Handle._run` does: these two leave the loop, anything else is reported.
    if error.is_instance_of::<PyKeyboardInterrupt>(py) || error.is_instance_of::<PySystemExit>(py) {
        ESCAPED.with_borrow_mut(|escaped| {
            escaped.get_or_insert(error);
        });
    } else {
        let message = format!("Exception in callback {}", callback.bind(py));
        report(call.get().event_loop.bind(py), &message, error);
    }
}

/// `asyncio.CancelledError(message)`, or without arguments when `cancel()` had none.
fn cancelled_error(py: Python<'_>, message: Option<&Py<PyAny>>) -> PyErr {
    match message {
        Some(message) => CancelledError::new_err((message.clone_ref(py),)),
        None => CancelledError::new_err(()),
    }
}

/// `loop.call_exception_handler({"message": ..., "exception": ...})`.
fn report(event_loop: &Bound<'_, PyAny>, message: &str, error: PyErr) {
    let py = event_loop.py();
    let context = PyDict::new(py);
    let handled = context
        .set_item("message", message)
        .and_then(|()| context.set_item("exception", error.into_value(py)))
        .and_then(|()| event_loop.call_method1(intern!(py, "call_exception_handler"), (context,)));
    if let Err(error) = handled {
        error.write_unraisable(py, Some(event_loop));
    }
}

#[pymethods]
impl Call {
    #[getter(_asyncio_future_blocking)]
    fn blocking(&self) -> bool {
        lock(&self.state).blocking
    }

    #[setter(_asyncio_future_blocking)]
    fn set_blocking(&self, value: bool) {
        lock(&self.state).blocking = value;
    }

    /// The event loop the call belongs to.
    fn get_loop(&self, py: Python<'_>) -> Py<PyAny> {
        self.event_loop.clone_ref(py)
    }

    /// Whether the call finished (with a result or an exception) or was cancelled.
    fn done(&self) -> bool {
        self.is_done()
    }

    fn cancelled(&self) -> bool {
        matches!(lock(&self.state).stage, Stage::Cancelled(_))
    }

    /// The result; raises the call's exception, `CancelledError` if it was cancelled, or
    /// `InvalidStateError` while it is pending.
    fn result(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match &mut lock(&self.state).stage {
            Stage::Done(value) => Ok(value.clone_ref(py)),
            Stage::Failed(error, unretrieved) => {
                *unretrieved = false;
                Err(PyErr::from_value(error.bind(py).clone()))
            }
            Stage::Cancelled(message) => Err(cancelled_error(py, message.as_ref())),
            Stage::Pending => Err(InvalidStateError::new_err("Result is not set.")),
        }
    }

    /// The exception (`None` if the call succeeded); raises `CancelledError` if it was
    /// cancelled, or `InvalidStateError` while it is pending.
    fn exception(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        match &mut lock(&self.state).stage {
            Stage::Done(_) => Ok(None),
            Stage::Failed(error, unretrieved) => {
                *unretrieved = false;
                Ok(Some(error.clone_ref(py)))
            }
            Stage::Cancelled(message) => Err(cancelled_error(py, message.as_ref())),
            Stage::Pending => Err(InvalidStateError::new_err("Exception is not set.")),
        }
    }

    /// The `CancelledError` a cancelled call raises (asyncio's protocol: `asyncio.gather`
    /// asks a cancelled child for it).
    fn _make_cancelled_error(&self, py: Python<'_>) -> Py<PyAny> {
        cancelled_error(py, self._cancel_message(py).as_ref())
            .into_value(py)
            .into_any()
    }

    /// The message given to `cancel()`, if any (asyncio's protocol, read by `asyncio.gather`).
    #[getter]
    fn _cancel_message(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        match &lock(&self.state).stage {
            Stage::Cancelled(Some(message)) => Some(message.clone_ref(py)),
            _ => None,
        }
    }

    /// Cancels the call: drops the work behind it at once (a request is withdrawn, a late
    /// response ignored) and schedules the done callbacks. False if it is done already.
    #[pyo3(signature = (msg = None))]
    fn cancel(slf: &Bound<'_, Self>, msg: Option<Py<PyAny>>) -> bool {
        let (callbacks, work) = {
            let mut state = lock(&slf.get().state);
            if !matches!(state.stage, Stage::Pending) {
                return false;
            }
            state.stage = Stage::Cancelled(msg);
            (std::mem::take(&mut state.callbacks), state.work.take())
        };
        if let Some(work) = work {
            work.cancel(); // outside the lock: dropping the Rust future may run code
        }
        slf.get().schedule(slf.py(), slf.as_any(), callbacks);
        true
    }

    /// Calls `fn(call)` once the call is done (at once through `call_soon` if it is done
    /// already), in `context` (by default a copy of the current one).
    #[pyo3(signature = (r#fn, /, *, context = None))]
    fn add_done_callback(
        slf: &Bound<'_, Self>,
        r#fn: Py<PyAny>,
        context: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let context = match context {
            Some(context) => context,
            None => py
                .import(intern!(py, "contextvars"))?
                .call_method0(intern!(py, "copy_context"))?
                .unbind(),
        };
        {
            let mut state = lock(&slf.get().state);
            if matches!(state.stage, Stage::Pending) {
                state.callbacks.push((r#fn, context));
                return Ok(());
            }
        }
        slf.get().schedule(py, slf.as_any(), vec![(r#fn, context)]);
        Ok(())
    }

    /// Removes every registration of `fn`; returns how many there were.
    #[pyo3(signature = (r#fn, /))]
    fn remove_done_callback(&self, py: Python<'_>, r#fn: &Bound<'_, PyAny>) -> PyResult<usize> {
        let callbacks = std::mem::take(&mut lock(&self.state).callbacks);
        let mut kept = Vec::with_capacity(callbacks.len());
        let mut removed = 0;
        for (callback, context) in callbacks {
            if callback.bind(py).eq(r#fn)? {
                removed += 1;
            } else {
                kept.push((callback, context));
            }
        }
        // Callbacks added meanwhile (by `eq`, which may run Python code) come after these.
        let mut state = lock(&self.state);
        kept.append(&mut state.callbacks);
        state.callbacks = kept;
        Ok(removed)
    }

    /// `await call`: the call is its own iterator (as asyncio's futures are awaited: yield
    /// the future to the Task until it is done, then return its result).
    fn __await__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        {
            let mut state = lock(&slf.get().state);
            if matches!(state.stage, Stage::Pending) {
                state.blocking = true;
                return Ok(slf.clone().into_any().unbind());
            }
        }
        let value = slf.get().result(slf.py())?;
        Err(PyStopIteration::new_err((value,)))
    }

    /// `Call[bytes]` in annotations.
    #[classmethod]
    #[pyo3(signature = (item, /))]
    fn __class_getitem__<'py>(
        cls: &Bound<'py, PyType>,
        item: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = cls.py();
        py.import(intern!(py, "types"))?
            .getattr(intern!(py, "GenericAlias"))?
            .call1((cls, item))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        // The lock is released before `repr()`, which runs Python code.
        let (what, value) = match &lock(&self.state).stage {
            Stage::Pending => return "<mqstate.Call pending>".to_owned(),
            Stage::Cancelled(_) => return "<mqstate.Call cancelled>".to_owned(),
            Stage::Done(value) => ("result", value.clone_ref(py)),
            Stage::Failed(error, _) => ("exception", error.clone_ref(py)),
        };
        let shown = value
            .bind(py)
            .repr()
            .map_or_else(|_| "?".to_owned(), |r| r.to_string());
        format!("<mqstate.Call finished {what}={shown}>")
    }
}

impl Drop for Call {
    /// An exception nobody retrieved is reported to the loop's exception handler, as an
    /// `asyncio.Future` reports it ("Future exception was never retrieved").
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Stage::Failed(error, true) = &state.stage {
            Python::attach(|py| {
                let error = PyErr::from_value(error.bind(py).clone());
                report(
                    self.event_loop.bind(py),
                    "Future exception was never retrieved",
                    error,
                );
            });
        }
    }
}
