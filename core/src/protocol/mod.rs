//! The state store protocol as pure code, with no I/O: the RESP3 codec ([`resp3`]), hybrid
//! logical clocks ([`hlc`]), topics ([`topics`]), the user properties ([`properties`]) and
//! the error vocabulary ([`errors`]). The local server (`mqstate-server`) and the client
//! share it.
//!
//! ```
//! use mqstate::protocol::hlc::Hlc;
//!
//! let version: Hlc = "1696374425000:0:StateStore".parse().unwrap();
//! assert_eq!(version.node_id, "StateStore");
//! ```

pub mod errors;
pub mod glob;
pub mod hlc;
pub mod instance;
pub mod properties;
pub mod resp3;
pub mod topics;

/// The user property asking the service to persist a SET's key (value `true`); the same as
/// [`properties::PERSISTENCE`].
pub const PERSISTENCE_PROPERTY: &str = properties::PERSISTENCE;
