//! The state store itself: what answers the requests of `docs/protocol.md`.
//!
//! - [`store`]: keys, versions, fencing tokens, expiry deadlines, quota (synchronous).
//! - [`registrations`]: KEYNOTIFY registrations and connection counting.
//! - [`dedup`]: the duplicate-request cache.
//! - [`scan`]: `SCAN` pages and their continuation tokens.
//! - [`handler`]: one request in, the reply, its `__ts` and the notifications out.
//! - [`observer`]: what the store tells an observer (the dashboard) and how an observer
//!   reads its keys; the store knows no dashboard.
//! - `service`: the store as an MQTT5 client of its broker (subscriptions, replies,
//!   connection events); [`reconnect`]: how it reconnects (promptly, never backing off for
//!   long); [`mosquitto_log`]: connection events of an external Mosquitto;
//!   [`ConnectError`]: why it could not connect.
//!
//! [`crate::LocalServer`] runs them; the modules are public for the benchmarks and the
//! conformance tests that measure and drive them directly (no stability promise beyond
//! `LocalServer`, `ServerConfig` and the types they take).

pub mod dedup;
mod error;
pub mod handler;
pub mod mosquitto_log;
pub mod observer;
pub mod reconnect;
pub mod registrations;
pub mod scan;
pub(crate) mod service;
pub mod store;

pub use error::ConnectError;
