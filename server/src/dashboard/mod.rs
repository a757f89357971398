//! # The web dashboard of `mqstate serve`
//!
//! A page at `http://{admin address}/dashboard/`, served by the same HTTP server (and port,
//! 8880 by default) as the IoT Hub admin API: the keys (value as text or hex, size,
//! version, fencing token, time to expiry; search by prefix), a live feed of SET, DELETE and
//! expiry pushed with server-sent events, the leases and locks (keys set with `NEX` and `PX`),
//! the connected clients and their KEYNOTIFY registrations, request rate and p99 latency of
//! the last five minutes, and the IoT Hub's devices, queues and feedback. The page, its
//! script and its style are embedded in the binary (`assets/`): no framework, nothing
//! fetched at run time. Read-only unless [`DashboardConfig::edit`] is set.
//!
//! - `Monitor`: the store's observer
//!   ([`StoreObserver`](crate::statestore::observer::StoreObserver)); the
//!   [`Handler`](crate::statestore::handler::Handler) calls it on every change when
//!   `HandlerConfig::observer` is set.
//! - `routes`: the HTTP routes, documented in `docs/dashboard.md`.
//! - `DashboardServer`: the dashboard's own HTTP server, when the hub is off.
//!
//! ```no_run
//! # async fn demo() -> Result<(), mqstate_server::ServerError> {
//! use mqstate_server::dashboard::DashboardConfig;
//! use mqstate_server::iothub::IotHubConfig;
//! use mqstate_server::{LocalServer, ServerConfig};
//!
//! let mut config = ServerConfig::default().with_iothub(IotHubConfig::default());
//! config.dashboard = Some(DashboardConfig::default()); // read-only
//! let server = LocalServer::start_with(config).await?;
//! let admin = server.iothub().and_then(|hub| hub.endpoints().admin_endpoint);
//! println!("dashboard: http://{}/dashboard/", admin.unwrap());
//! server.shutdown().await;
//! # Ok(()) }
//! ```

mod monitor;
pub(crate) mod routes;
mod standalone;

pub(crate) use monitor::Monitor;
pub(crate) use standalone::DashboardServer;

/// Settings of the dashboard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DashboardConfig {
    /// Allow the page to set and delete keys, send C2D messages and purge queues
    /// (`--dashboard-edit`); without it those routes answer `403 ReadOnly`.
    pub edit: bool,
    /// Where the dashboard listens when the IoT Hub is off (with the hub, it is served by
    /// the hub's admin API server and this is unused). `None`: the server's bind address and
    /// any free port. `mqstate serve` passes `--iothub-bind` and `--iothub-admin-port`, so the
    /// address is the same with or without the hub.
    pub standalone_addr: Option<std::net::SocketAddr>,
}
