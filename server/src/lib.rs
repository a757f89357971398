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
//! - [`store`]: keys, versions, fencing tokens, expiry deadlines, quota (synchronous).
//! - [`registrations`]: KEYNOTIFY registrations and connection counting.
//! - [`dedup`]: the duplicate-request cache.
//! - [`scan`]: `SCAN` pages and their continuation tokens.
//! - [`handler`]: one request in, the reply, its `__ts` and the notifications out.
//! - [`broker`]: the embedded broker; [`service`]: the MQTT side of the store;
//!   [`reconnect`]: how it reconnects to its broker (promptly, never backing off for long).
//! - [`dashboard`]: the web dashboard (keys, live changes, locks, clients, metrics, hub).
//! - [`security`]: TLS, authentication and per-client topic confinement of the embedded
//!   broker (`docs/security.md`).
//! - [`iothub`]: the local IoT Hub (cloud-to-device messages; an MQTT 3.1.1 device endpoint
//!   and an HTTP admin API), started beside the store when [`ServerConfig::iothub`] is set.
//! - [`persist`]: the data dir (`--data-dir`): keys on disk in redb, group commit, restore.
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

pub mod admission;
pub mod broker;
mod broker_tls;
pub mod dashboard;
pub mod dedup;
mod error;
pub mod handler;
pub mod iothub;
mod local_server;
pub mod mosquitto_log;
pub mod persist;
pub mod reconnect;
pub mod registrations;
pub mod scan;
pub mod security;
pub mod service;
pub mod store;
pub mod web_auth;
pub mod web_guard;

pub use error::ServerError;
pub use local_server::{
    BrokerChoice, DEFAULT_MAX_PACKET_SIZE, DEFAULT_PORT, LocalServer, ServerConfig,
    parse_broker_url,
};
