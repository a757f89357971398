//! The edit a lock runs: `f(old)` called under the lock, its awaitable run on the event loop.

use super::*;

/// Why an edit failed: the store's error, or the exception `f` raised (re-raised as is).
#[derive(Debug)]
pub(super) enum EditError {
    Store(mqstate::Error),
    Raised(PyErr),
}

impl From<mqstate::Error> for EditError {
    fn from(e: mqstate::Error) -> Self {
        EditError::Store(e)
    }
}

impl EditError {
    pub(super) fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            EditError::Store(e) => errors::to_py(py, &e),
            EditError::Raised(e) => e,
        }
    }
}

/// The edit the core runs under the lock: `f(old)` (bytes or None) must return bytes, str
/// or None (delete), or, given an `event_loop` (`AsyncLock.edit`), an awaitable of one (a
/// coroutine function's result), awaited on that loop; an exception it raises abandons the
/// edit.
pub(super) async fn edit_with(
    lock: core::Lock,
    key: Vec<u8>,
    ttl: std::time::Duration,
    timeout: std::time::Duration,
    f: Py<PyAny>,
    event_loop: Option<Py<PyAny>>,
) -> Result<Option<bytes::Bytes>, EditError> {
    lock.edit_async(key, ttl, timeout, |old| async move {
        let returned = Python::attach(|py| {
            let old = old.map(|v| PyBytes::new(py, &v));
            let returned = f.bind(py).call1((old,))?;
            if !is_awaitable(&returned)? {
                return Ok(Returned::Value(returned.unbind()));
            }
            match &event_loop {
                Some(event_loop) => Ok(Returned::Pending(schedule(event_loop.bind(py), returned)?)),
                None => {
                    // Never awaited: close a coroutine so that Python does not warn about it.
                    if returned.hasattr("close")? {
                        returned.call_method0("close")?;
                    }
                    Err(pyo3::exceptions::PyTypeError::new_err(
                        "Lock.edit takes a plain function, and f returned an awaitable: \
                         use AsyncLock.edit for a coroutine function",
                    ))
                }
            }
        })
        .map_err(EditError::Raised)?;
        let value = match returned {
            Returned::Value(value) => value,
            Returned::Pending(outcome) => outcome
                .await
                .map_err(|_| {
                    EditError::Raised(pyo3::exceptions::PyRuntimeError::new_err(
                        "the edit function's awaitable was dropped by its event loop",
                    ))
                })?
                .map_err(EditError::Raised)?,
        };
        Python::attach(|py| {
            let value = value.bind(py);
            if value.is_none() {
                return Ok(None);
            }
            let bytes = bytes_arg(value, "the value returned by f")?;
            Ok(Some(bytes::Bytes::copy_from_slice(bytes)))
        })
        .map_err(EditError::Raised)
    })
    .await
}

/// What the edit function returned: the value, or the outcome of its awaitable.
enum Returned {
    Value(Py<PyAny>),
    Pending(tokio::sync::oneshot::Receiver<PyResult<Py<PyAny>>>),
}

fn is_awaitable(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = value.py();
    py.import("inspect")?
        .call_method1("isawaitable", (value,))?
        .is_truthy()
}

/// The outcome of an edit function's awaitable, sent from the event loop's thread.
type Outcome = tokio::sync::oneshot::Sender<PyResult<Py<PyAny>>>;

/// Runs `awaitable` as a task of `event_loop` (started from this runtime thread, which is not
/// the loop's, with `call_soon_threadsafe`) and gives its outcome through a channel that the
/// core's edit awaits; the runtime thread never blocks on the loop.
fn schedule(
    event_loop: &Bound<'_, PyAny>,
    awaitable: Bound<'_, PyAny>,
) -> PyResult<tokio::sync::oneshot::Receiver<PyResult<Py<PyAny>>>> {
    let py = event_loop.py();
    let (tx, rx) = tokio::sync::oneshot::channel();
    // Shared by the start and done callbacks: whichever finishes first sends.
    let outcome: Arc<Mutex<Option<Outcome>>> = Arc::new(Mutex::new(Some(tx)));
    let send = move |outcome: &Mutex<Option<Outcome>>, result: PyResult<Py<PyAny>>| {
        if let Some(tx) = outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = tx.send(result);
        }
    };
    let awaitable = awaitable.unbind();
    let start = pyo3::types::PyCFunction::new_closure(py, None, None, move |args, _kwargs| {
        let py = args.py();
        let on_done = outcome.clone();
        let started = (|| -> PyResult<()> {
            let task = py
                .import("asyncio")?
                .call_method1("ensure_future", (awaitable.bind(py),))?;
            let done = pyo3::types::PyCFunction::new_closure(py, None, None, move |args, _| {
                let result = args
                    .get_item(0)
                    .and_then(|task| task.call_method0("result"))
                    .map(Bound::unbind);
                send(&on_done, result);
            })?;
            task.call_method1("add_done_callback", (done,))?;
            Ok(())
        })();
        if let Err(e) = started {
            send(&outcome, Err(e));
        }
    })?;
    event_loop.call_method1("call_soon_threadsafe", (start,))?;
    Ok(rx)
}
