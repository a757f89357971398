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
//! The wire protocol is described in `docs/protocol.md`; the layers in `docs/architecture.md`.
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
//! use mqstate::protocol::resp3;
//!
//! let mut buf = BytesMut::new();
//! resp3::encode_get(&mut buf, b"SETKEY2");
//! assert_eq!(&buf[..], b"*2\r\n$3\r\nGET\r\n$7\r\nSETKEY2\r\n");
//! ```

// The layers (docs/architecture.md): `protocol` is pure (codec, clock, topics, errors; no
// I/O), `client` is the networked client on top of it, `lock` is built on the public client
// API, `blocking` wraps the client for non-async callers. The networked layers are the
// `client` feature (on by default); without it the crate is the protocol part only (and the
// pure IoT Hub parts: property bags, SAS tokens, message content), which is what the local
// server's store is built on.
#[doc(hidden)]
#[cfg(feature = "client")]
pub mod bench;
#[cfg(feature = "client")]
pub mod blocking;
#[cfg(feature = "client")]
pub mod client;
pub mod iothub;
#[cfg(feature = "client")]
pub mod lock;
pub mod protocol;
#[cfg(feature = "client")]
pub mod stream;

#[cfg(feature = "client")]
pub use client::options::{ConnectOptions, ConnectSettings, ReconnectPolicy, TlsOptions};
#[cfg(feature = "client")]
pub use client::{
    Client, ConnectionState, KeyNotification, KeyObservation, Scan, ScanKeys, SetOptions,
    SetOutcome, VdelOutcome, Versioned,
};
pub use protocol::PERSISTENCE_PROPERTY;
pub use protocol::errors::{Error, ErrorKind, ServiceError};
pub use protocol::hlc::{Hlc, HlcClock};
pub use protocol::resp3::{NotifyOperation, SetCondition};
