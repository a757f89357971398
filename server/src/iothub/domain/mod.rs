//! The hub's domain, which knows no transport: the hub's state and its session API
//! ([`hub::IotHub`]), the device registry, the per-device cloud-to-device queues with their lock
//! tokens, feedback batches, shared access policies and SAS token checks, and durability (the
//! hub's file in the data dir). The transports (`mqtt`, `amqp`, `https`, `admin`) are thin
//! modules over this API; nothing here names them.

pub(crate) mod durable;
pub(crate) mod error;
pub(crate) mod feedback;
pub(crate) mod hub;
pub mod message;
pub mod policies;
pub mod properties;
pub(crate) mod queue;
pub mod registry;
pub mod sas;
pub(crate) mod system_properties;
pub mod time;
pub mod x509;
