//! # mqstate
//!
//! A client library for the MQTT5 **state store** protocol, the key-value store of
//! Azure IoT Operations. This crate implements the protocol once: RESP3 payloads
//! ([`resp3`]), hybrid-logical-clock versions ([`hlc`]), topics ([`topics`]) and one error
//! type ([`Error`]). The C, Python and Node bindings and the local server are built on it.
//!
//! The wire protocol is described in `PROTOCOL.md` (shared with the project).
//!
//! ```
//! use bytes::BytesMut;
//! use mqstate::resp3;
//!
//! let mut buf = BytesMut::new();
//! resp3::encode_get(&mut buf, b"SETKEY2");
//! assert_eq!(&buf[..], b"*2\r\n$3\r\nGET\r\n$7\r\nSETKEY2\r\n");
//! ```

pub mod error;
pub mod hlc;
pub mod resp3;
pub mod topics;

pub use error::{Error, ErrorKind, ServiceError};
pub use hlc::{Hlc, HlcClock};
pub use resp3::{NotifyOperation, SetCondition};
