//! The MQTT5 user properties and fixed values of the state store protocol
//! (docs/protocol.md): defined once, used by the client (`client/rpc.rs`, `registry.rs`,
//! `transport.rs`) and by the local server (`mqstate-server`'s `service.rs`).
//!
//! ```
//! use mqstate::protocol::properties;
//!
//! assert_eq!(properties::TIMESTAMP, "__ts");
//! assert_eq!(properties::PROTOCOL_VERSION, "1.0");
//! ```

/// `__stat`: the status of a response (`200` when the request was handled).
pub const STATUS: &str = "__stat";
/// `__stMsg`: the text that may come with a status other than 200.
pub const STATUS_MESSAGE: &str = "__stMsg";
/// `__protVer`: the protocol version a request or response speaks.
pub const PROTOCOL_VERSION_PROPERTY: &str = "__protVer";
/// `__ts`: the sender's hybrid logical clock on requests; the key's version on responses and
/// notifications.
pub const TIMESTAMP: &str = "__ts";
/// `__ft`: the fencing token of a request on a protected key.
pub const FENCING_TOKEN: &str = "__ft";
/// `__srcId`: the requesting client's id.
pub const SOURCE_ID: &str = "__srcId";
/// `$partition`: the broker's partition key for requests (the client id).
pub const PARTITION: &str = "$partition";
/// `$high_priority`: marks a request as high priority for the broker.
pub const HIGH_PRIORITY: &str = "$high_priority";
/// `aio-persistence`: asks the service to persist a SET's key (value `true`).
pub const PERSISTENCE: &str = "aio-persistence";
/// The protocol version both sides speak (the value of `__protVer`).
pub const PROTOCOL_VERSION: &str = "1.0";
/// The content type of requests, responses and notifications.
pub const CONTENT_TYPE: &str = "application/octet-stream";
