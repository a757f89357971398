//! The state store itself: what answers the requests of `docs/protocol.md`.
//!
//! - [`store`]: keys, versions, fencing tokens, expiry deadlines, quota (synchronous).
//! - `registrations`: KEYNOTIFY registrations and connection counting.
//! - [`dedup`]: the duplicate-request cache.
//! - `scan`: `SCAN` pages and their continuation tokens.
//! - [`handler`]: one request in, the reply, its `__ts` and the notifications out.
//! - [`observer`]: what the store tells an observer (the dashboard) and how an observer
//!   reads its keys; the store knows no dashboard.
//! - `service`: the store as an MQTT5 client of its broker (subscriptions, replies,
//!   connection events); [`reconnect`]: how it reconnects (promptly, never backing off for
//!   long); `mosquitto_log`: connection events of an external Mosquitto;
//!   [`ConnectError`]: why it could not connect.
//!
//! [`crate::LocalServer`] runs them; the modules are public for the benchmarks and the
//! conformance tests that measure and drive them directly (no stability promise beyond
//! `LocalServer`, `ServerConfig` and the types they take).

// The store's parts that the memory benchmark (server/benches/memory.rs) and the tests that
// drive the store without a broker use: public for them, hidden from the documentation (no
// stability promise).
#[doc(hidden)]
pub mod dedup;
mod error;
#[doc(hidden)]
pub mod handler;
pub(crate) mod mosquitto_log;
pub mod observer;
pub mod reconnect;
pub(crate) mod registrations;
pub(crate) mod scan;
pub(crate) mod service;
#[doc(hidden)]
pub mod store;

pub use error::ConnectError;
pub(crate) use error::StartError;
