//! # mqstate-uniffi
//!
//! The Kotlin bindings of the mqstate core, declared with uniffi's proc-macros.
//! `uniffi-bindgen` (the bin of this crate) reads the built library and writes
//! `kotlin/src/main/kotlin/dev/mqstate/mqstate.kt`. Swift sources
//! can be generated from the same library, but none are checked in or tested (`docs/swift.md`).
//!
//! This crate only converts types and errors: every rule (key checks, expiry limits, URL and
//! environment parsing, fencing, lease renewal) lives in the core (`docs/architecture.md`).
//! Async methods become Kotlin `suspend` functions (Swift `async` functions); their futures
//! run on the library's own tokio runtime (`runtime::runtime`), and the foreign side only awaits a
//! handle to them, so no foreign executor ever polls network code.
//!
//! ```no_run
//! # async fn demo() -> Result<(), mqstate_uniffi::MqstateError> {
//! use mqstate_uniffi::{Client, ConnectOptions};
//!
//! let options = ConnectOptions { url: Some("mqtt://127.0.0.1:1883".into()), ..Default::default() };
//! let client = Client::connect(options).await?;
//! client.set(b"door".to_vec(), b"open".to_vec(), false, false, None, None, false, None).await?;
//! # Ok(()) }
//! ```

uniffi::setup_scaffolding!("mqstate");

mod bench;
mod client;
mod errors;
mod iothub;
mod lock;
mod observe;
mod options;
mod runtime;
mod scan;
mod types;

pub use bench::bench_rust_get;
pub use client::{Client, SetOutcome, VdelOutcome, Versioned};
pub use errors::MqstateError;
pub use iothub::{C2dMessage, DeviceClient, DeviceOptions, DeviceStats, Property, Telemetry};
pub use lock::{
    Editor, LeaderElection, LeadershipEvent, LeadershipEvents, Lease, LeaseEvent, LeaseEvents,
    Lock, LockGuard,
};
pub use observe::{Notification, Observation};
pub use options::{ConnectOptions, TlsConfig};
pub use scan::Scan;
pub use types::{Hlc, version};
