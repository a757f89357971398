//! The test tooling of the addon, compiled with the `testing` cargo feature only (off in the
//! released npm package: scripts/test-node builds with it, scripts/dist without). Nothing of
//! the client depends on it; `index.ts` reports its absence with a clear error.
//!
//! - `LocalServer` (`server`): the local state store (embedded broker + store) in-process.
//! - `LocalIotHub` (`iothub`): the local IoT Hub in-process.
//! - `FaultProxy` (`fault_proxy`): the fault-injection proxy of every language's suite.
//! - `benchRustGet`, `panickingCall` (`bench`): the benchmark's Rust figure and the panic
//!   test hook.

mod bench;
mod fault_proxy;
mod iothub;
mod server;

pub use bench::{bench_rust_get, panicking_call};
pub use fault_proxy::FaultProxy;
pub use iothub::LocalIotHub;
pub use server::LocalServer;
