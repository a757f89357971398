//! Leases, locks and leader election (`mqstate::lock`), blocking (`Lease`, `Lock`,
//! `LeaderElection`) and asyncio (`AsyncLease`, `AsyncLock`, `AsyncLeaderElection`), with
//! their event streams (`LeaseEvents`, `LeadershipEvents`, usable with `for` and
//! `async for`). Every rule (NEX sets, renewal, fencing tokens) lives in the core.
//!
//! By concern: the events and their streams (`events.rs`), leases (`lease.rs`), locks and
//! their guards (`locks.rs`), the edit run under a lock (`edit.rs`) and leader election
//! (`election.rs`); the way a class runs a core call, blocking or asyncio, is here ([`Mode`]).

mod edit;
mod election;
mod events;
mod lease;
mod locks;

use std::sync::{Arc, Mutex, PoisonError};

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use mqstate::lock as core;

use crate::aio::{self, Pending};
use crate::client::{AsyncClient, Client};
use crate::convert::{BytesOut, bytes_arg, positive_duration_arg};
use crate::errors::{self, OrRaise};
use crate::observe::next_to_py;
use crate::runtime::{runtime, wait};
use crate::stream::StreamState;
use crate::types::{Hlc, hlc};

use self::edit::edit_with;
pub(crate) use self::election::{AsyncLeaderElection, LeaderElection};
pub(crate) use self::events::{LeadershipEvent, LeadershipEvents, LeaseEvent, LeaseEvents};
use self::lease::lease_repr;
pub(crate) use self::lease::{AsyncLease, Lease};
pub(crate) use self::locks::{AsyncLock, AsyncLockGuard, Lock, LockGuard};

/// How a class of this module runs a core call: blocking (`wait`: on the library's runtime,
/// with the GIL released, the result converted) or asyncio (a `Call` of the running
/// loop). The blocking and asyncio twins are generated once, by [`lease_class!`], over this.
trait Mode {
    fn run<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
    where
        F: std::future::Future<Output = Result<T, mqstate::Error>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static;

    /// [`Mode::run`] for a future whose error is already a Python exception.
    fn run_py<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
    where
        F: std::future::Future<Output = PyResult<T>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static;

    /// The event loop on which an edit function's awaitable runs (`AsyncLock.edit`); `None`
    /// in the blocking classes, whose edit functions must return the value itself.
    fn event_loop(py: Python<'_>) -> PyResult<Option<Py<PyAny>>>;
}

/// The blocking classes (`Lease`, ...).
#[derive(Debug)]
struct Blocking;

impl Mode for Blocking {
    fn run<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
    where
        F: std::future::Future<Output = Result<T, mqstate::Error>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        wait(py, future)?.or_raise(py)?.into_bound_py_any(py)
    }

    fn run_py<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
    where
        F: std::future::Future<Output = PyResult<T>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        wait(py, future)??.into_bound_py_any(py)
    }

    fn event_loop(_py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(None)
    }
}

/// The asyncio classes (`AsyncLease`, ...).
#[derive(Debug)]
struct Asyncio;

impl Mode for Asyncio {
    fn run<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
    where
        F: std::future::Future<Output = Result<T, mqstate::Error>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        aio::spawn(py, future)
    }

    fn run_py<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
    where
        F: std::future::Future<Output = PyResult<T>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        aio::spawn_fallible(py, future)
    }

    fn event_loop(py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(Some(aio::running_loop(py)?.unbind()))
    }
}
