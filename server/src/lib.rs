//! # mqstate-server
//!
//! A local state store server for the MQTT5 state store protocol of Azure IoT Operations
//! (`docs/protocol.md`), so that clients and tests run on one machine with no cloud.
//!
//! The store attaches to an MQTT5 broker as an ordinary client, subscribes to the request
//! topic and answers on each request's response topic. The broker is either embedded (the
//! `mqtt5` crate's broker, started in-process) or an external one (Mosquitto...).
//!
//! - [`LocalServer`]: start / stop the whole thing (`mqstate serve` and tests use it).
//! - [`statestore`]: the store itself (keys, KEYNOTIFY registrations, duplicate requests,
//!   SCAN, the request handler, the store's MQTT connection and how it reconnects); public
//!   are how it reconnects, what its observers get, and (hidden) the parts the memory
//!   benchmark drives.
//! - [`broker`]: the embedded broker, its TLS listener and its admission gate.
//! - [`security`]: TLS, authentication and per-client topic confinement of the embedded
//!   broker (`docs/security.md`).
//! - [`persist`]: the data dir (`--data-dir`): keys on disk in redb, group commit, restore.
//! - [`iothub`]: the local IoT Hub (cloud-to-device messages; an MQTT 3.1.1 device endpoint
//!   and an HTTP admin API), started beside the store when [`ServerConfig::iothub`] is set.
//! - [`dashboard`]: the web dashboard (keys, live changes, locks, clients, metrics, hub).
//! - [`web`]: what the admin API and the dashboard check (Host, Origin, credentials); public
//!   only for the limit of sessions per user.
//!
//! ```no_run
//! # async fn demo() -> Result<(), mqstate_server::ServerError> {
//! use mqstate_server::{LocalServer, ServerConfig};
//!
//! // Embedded broker on 127.0.0.1 and a free port:
//! let server = LocalServer::start().await?;
//! let (host, port) = (server.host().to_owned(), server.port());
//! # let _ = (host, port);
//! server.shutdown().await;
//!
//! // Or attached to a broker that is already running:
//! let server = LocalServer::start_with(ServerConfig::external("mqtt://127.0.0.1:1883")?).await?;
//! server.shutdown().await;
//! # Ok(()) }
//! ```

pub mod broker;
mod config_error;
pub mod dashboard;
mod error;
// Entry points of the fuzz targets (server/fuzz); compiled for this crate's unit tests too,
// which run the same checks on stable.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod iothub;
mod local_server;
pub mod persist;
pub mod security;
pub mod statestore;
pub(crate) mod untrusted;
pub mod web;

pub use config_error::ConfigError;
pub use error::ServerError;
pub use local_server::{BrokerChoice, DEFAULT_PORT, LocalServer, ServerConfig, parse_broker_url};
pub use statestore::service::DEFAULT_MAX_PACKET_SIZE;
