//! The hub's admin API, a transport of its own: the HTTP+JSON routes that give the CLI, curl
//! and any language the service side of the hub (`api`, served beside the dashboard behind
//! the web guard), and [`AdminClient`], the same API from Rust for a hub in another process.

mod api;
mod client;

pub use api::{AddDeviceRequest, DeviceCredentials, PurgeResult, SendRequest, body_limit};
pub(crate) use api::{router, service_token_check};
pub use client::{AdminClient, AdminError};
