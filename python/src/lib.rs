//! `mqstate._native`: the native module of the Python package `mqstate` (see `python/mqstate`).
//!
//! A thin layer over the Rust client (`mqstate`): every protocol rule lives there. This crate
//! converts arguments and results, runs the client on the library's own tokio runtime, waits
//! for it with the GIL released (`Client`) or through asyncio futures (`AsyncClient`), and
//! turns `mqstate::Error` into the exception classes of `mqstate/_errors.py`.
//!
//! The `testing` cargo feature adds the test tooling (module `testing`): the in-process local
//! server and IoT Hub, the fault proxy and the benchmark hooks. The released wheel is built
//! without it: only the clients.

mod aio;
mod call;
mod client;
mod convert;
mod errors;
mod iothub;
mod lock;
mod observe;
mod options;
mod runtime;
mod scan;
mod stream;
#[cfg(feature = "testing")]
mod testing;
mod types;

use pyo3::prelude::*;

#[pymodule(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    runtime::read_worker_threads()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<client::Client>()?;
    m.add_class::<client::AsyncClient>()?;
    m.add_class::<aio::Pending>()?;
    m.add_class::<call::Call>()?;
    m.add_class::<observe::Observation>()?;
    m.add_class::<observe::AsyncObservation>()?;
    m.add_class::<scan::Scan>()?;
    m.add_class::<scan::AsyncScan>()?;
    m.add_class::<types::Hlc>()?;
    m.add_class::<types::Versioned>()?;
    m.add_class::<types::SetOutcome>()?;
    m.add_class::<types::VdelOutcome>()?;
    m.add_class::<types::Notification>()?;
    m.add_class::<lock::Lease>()?;
    m.add_class::<lock::AsyncLease>()?;
    m.add_class::<lock::LeaseEvent>()?;
    m.add_class::<lock::LeaseEvents>()?;
    m.add_class::<lock::Lock>()?;
    m.add_class::<lock::AsyncLock>()?;
    m.add_class::<lock::LockGuard>()?;
    m.add_class::<lock::AsyncLockGuard>()?;
    m.add_class::<lock::LeaderElection>()?;
    m.add_class::<lock::AsyncLeaderElection>()?;
    m.add_class::<lock::LeadershipEvent>()?;
    m.add_class::<lock::LeadershipEvents>()?;
    m.add_class::<iothub::DeviceClient>()?;
    m.add_class::<iothub::AsyncDeviceClient>()?;
    m.add_class::<iothub::C2dMessage>()?;
    m.add_class::<iothub::Messages>()?;
    m.add_class::<iothub::AsyncMessages>()?;
    // The test tooling (in-process local server and IoT Hub, fault proxy, benchmark hooks):
    // only in builds with the `testing` feature, never in the released wheel.
    #[cfg(feature = "testing")]
    testing::register(m)?;
    Ok(())
}
