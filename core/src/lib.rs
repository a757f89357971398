//! # mqstate
//!
//! A client library for the MQTT5 **state store** protocol, the key-value store of
//! Azure IoT Operations. This crate implements the protocol once (RESP3 payloads,
//! hybrid-logical-clock versions, topics, errors, request/response over MQTT5, change
//! notifications, reconnection); the C, Python and Node bindings and the local server are
//! built on it.
//!
//! - [`Client`]: the async client (tokio). [`blocking::Client`]: the same, blocking, with its
//!   own runtime.
//! - [`ConnectOptions`]: from code, from a URL or from the Azure IoT Operations environment.
//! - [`Client::observe`]: a [`KeyObservation`] stream of a key's changes, kept across
//!   reconnections.
//!
//! The wire protocol is described in `PROTOCOL.md` (shared with the project).
//!
//! ```no_run
//! use mqstate::{Client, ConnectOptions, SetOptions};
//!
//! # async fn demo() -> Result<(), mqstate::Error> {
//! let client = Client::connect(ConnectOptions::from_url("mqtt://127.0.0.1:1883")?).await?;
//! client.set("door", "open", SetOptions::default()).await?;
//! let door = client.get("door").await?;
//! # Ok(()) }
//! ```
//!
//! The codec is usable on its own:
//!
//! ```
//! use bytes::BytesMut;
//! use mqstate::resp3;
//!
//! let mut buf = BytesMut::new();
//! resp3::encode_get(&mut buf, b"SETKEY2");
//! assert_eq!(&buf[..], b"*2\r\n$3\r\nGET\r\n$7\r\nSETKEY2\r\n");
//! ```

pub mod blocking;
mod client;
mod connection;
pub mod error;
pub mod hlc;
pub mod lock;
mod observe;
pub mod options;
pub mod resp3;
mod rpc;
pub mod topics;
mod transport;

pub use client::{Client, ConnectionState, SetOptions, SetOutcome, VdelOutcome, Versioned};
pub use error::{Error, ErrorKind, ServiceError};
pub use hlc::{Hlc, HlcClock};
pub use observe::{KeyNotification, KeyObservation};
pub use options::{ConnectOptions, ReconnectPolicy, TlsOptions};
pub use resp3::{NotifyOperation, SetCondition};
pub use rpc::PERSISTENCE_PROPERTY;
