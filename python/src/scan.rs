//! `Scan` (an iterator of keys, from `Client.scan`) and `AsyncScan` (an async iterator of keys,
//! from `AsyncClient.scan`): the core's [`mqstate::Scan`] pager, read a page at a time
//! (`next_page`) or key by key.
//!
//! Everything the listing means (pages, the continuation token, an empty pattern refused
//! before sending, a failed page leaving the scan where it was) is the core's; this module
//! keeps the keys of the page being iterated and ends the iteration after its first error,
//! as the core's key stream does (`mqstate::ScanKeys`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use pyo3::exceptions::PyStopAsyncIteration;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::sync::Mutex;

use crate::aio;
use crate::call::Call;
use crate::convert::BytesOut;
use crate::errors::{self, Outcome};
use crate::runtime::call;

/// The core's scan and the keys of its current page not yet handed out by the iterator.
#[derive(Debug)]
struct Cursor {
    scan: mqstate::Scan,
    buffered: VecDeque<Bytes>,
    /// The iteration has raised an error: it has ended (`next_page` still works).
    failed: bool,
}

/// What a Python scan object holds, shared with the page requests under way.
#[derive(Debug)]
struct Shared {
    pattern: Bytes,
    /// Locked for the length of a page request (one at a time; later calls queue, in order).
    cursor: Mutex<Cursor>,
    /// The scan's `is_done()`, readable while a page request holds the cursor.
    done: AtomicBool,
}

impl Shared {
    fn new(scan: mqstate::Scan) -> Arc<Self> {
        Arc::new(Shared {
            pattern: scan.pattern().clone(),
            done: AtomicBool::new(scan.is_done()),
            cursor: Mutex::new(Cursor {
                scan,
                buffered: VecDeque::new(),
                failed: false,
            }),
        })
    }

    fn is_done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }

    /// The next page (the core's `Scan::next_page`). Cancel-safe: dropped before the page
    /// arrives, the scan has not moved.
    async fn next_page(self: Arc<Self>) -> Result<Option<Vec<Bytes>>, mqstate::Error> {
        let mut cursor = self.cursor.lock().await;
        let page = cursor.scan.next_page().await;
        self.done.store(cursor.scan.is_done(), Ordering::SeqCst);
        page
    }

    /// The next key of the iteration, asking for pages as needed; `None` after the last page
    /// or once an error was returned. Cancel-safe, like [`Shared::next_page`].
    async fn next_key(self: Arc<Self>) -> Result<Option<Bytes>, mqstate::Error> {
        let mut cursor = self.cursor.lock().await;
        loop {
            if let Some(key) = cursor.buffered.pop_front() {
                return Ok(Some(key));
            }
            if cursor.failed {
                return Ok(None);
            }
            let page = cursor.scan.next_page().await;
            self.done.store(cursor.scan.is_done(), Ordering::SeqCst);
            match page {
                Ok(Some(keys)) => cursor.buffered.extend(keys),
                Ok(None) => return Ok(None),
                Err(e) => {
                    cursor.failed = true;
                    return Err(e);
                }
            }
        }
    }

    /// A key of the current page, when one is at hand (no page request needed or under way).
    fn buffered_key(&self) -> Option<Bytes> {
        self.cursor.try_lock().ok()?.buffered.pop_front()
    }

    fn repr(&self, py: Python<'_>, class: &str) -> PyResult<String> {
        Ok(format!(
            "<mqstate.{class} pattern={}{}>",
            PyBytes::new(py, &self.pattern).repr()?,
            if self.is_done() { " done" } else { "" }
        ))
    }
}

/// The keys that match a glob pattern, from `Client.scan(pattern)`: an iterator of keys
/// (`bytes`) that asks for each page when the keys of the one before have been read, or a
/// page at a time with `next_page()`. Each page is one request (with the GIL released while
/// it waits). An error is raised once by the iteration, which then ends; `next_page()` after
/// an error asks for the same page again.
///
/// ```python
/// for key in client.scan("line3/*"):
///     print(key)
///
/// scan = client.scan(b"sensor/?/temperature")
/// while (keys := scan.next_page()) is not None:
///     print(len(keys), "keys; last page:", scan.done)
/// ```
#[pyclass(module = "mqstate", name = "Scan", frozen)]
#[derive(Debug)]
pub(crate) struct Scan {
    shared: Arc<Shared>,
}

impl Scan {
    pub(crate) fn new(scan: mqstate::Scan) -> Self {
        Scan {
            shared: Shared::new(scan),
        }
    }
}

#[pymethods]
impl Scan {
    /// The pattern being listed.
    #[getter]
    fn pattern<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.shared.pattern)
    }

    /// Whether the last page has been received (then `next_page()` returns `None`).
    #[getter]
    fn done(&self) -> bool {
        self.shared.is_done()
    }

    /// The keys of the next page (possibly none: a page may be empty and not the last), or
    /// `None` once the last page has been received. After an error, calling again asks for
    /// the same page.
    fn next_page<'py>(&self, py: Python<'py>) -> PyResult<Option<Vec<Bound<'py, PyBytes>>>> {
        let page = call(py, self.shared.clone().next_page())?;
        Ok(page.map(|keys| keys.iter().map(|k| PyBytes::new(py, k)).collect()))
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = match self.shared.buffered_key() {
            Some(key) => Some(key),
            None => call(py, self.shared.clone().next_key())?,
        };
        Ok(key.map(|k| PyBytes::new(py, &k)))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        self.shared.repr(py, "Scan")
    }
}

/// The keys that match a glob pattern, from `AsyncClient.scan(pattern)`: an async iterator
/// of keys (`bytes`) that asks for each page when the keys of the one before have been read,
/// or a page at a time with `await next_page()`. An error is raised once by the iteration,
/// which then ends; `next_page()` after an error asks for the same page again.
///
/// ```python
/// async for key in client.scan("line3/*"):
///     print(key)
///
/// scan = client.scan(b"sensor/?/temperature")
/// while (keys := await scan.next_page()) is not None:
///     print(len(keys), "keys; last page:", scan.done)
/// ```
#[pyclass(module = "mqstate", name = "AsyncScan", frozen)]
#[derive(Debug)]
pub(crate) struct AsyncScan {
    shared: Arc<Shared>,
}

impl AsyncScan {
    pub(crate) fn new(scan: mqstate::Scan) -> Self {
        AsyncScan {
            shared: Shared::new(scan),
        }
    }
}

#[pymethods]
impl AsyncScan {
    /// The pattern being listed.
    #[getter]
    fn pattern<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.shared.pattern)
    }

    /// Whether the last page has been received (then `next_page()` gives `None`).
    #[getter]
    fn done(&self) -> bool {
        self.shared.is_done()
    }

    /// Awaitable: the keys of the next page (possibly none: a page may be empty and not the
    /// last), or `None` once the last page has been received. After an error, calling again
    /// asks for the same page. Cancelling it leaves the scan where it was.
    fn next_page<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let page = self.shared.clone().next_page();
        aio::spawn(py, async move {
            page.await
                .map(|page| page.map(|keys| keys.into_iter().map(BytesOut).collect::<Vec<_>>()))
        })
    }

    fn __aiter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if let Some(key) = self.shared.buffered_key() {
            return aio::ready(py, BytesOut(key));
        }
        aio::spawn_with(py, self.shared.clone().next_key(), |py, target, output| {
            let result = match output {
                Ok(Ok(None)) => Err(PyStopAsyncIteration::new_err(())),
                Ok(next) => Outcome(next.map(|key| key.map(BytesOut))).into_pyobject(py),
                Err(panic) => Err(errors::panicked(&*panic)),
            };
            Call::settle(target, result);
        })
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        self.shared.repr(py, "AsyncScan")
    }
}
