//! How to reach the broker: [`ConnectOptions`], from code, from a URL
//! ([`ConnectOptions::from_url`]) or from the Azure IoT Operations environment variables
//! ([`ConnectOptions::from_env`]).
//!
//! ```
//! use std::time::Duration;
//! use mqstate::ConnectOptions;
//!
//! let options = ConnectOptions::from_url("mqtt://127.0.0.1:1883?client_id=sensor-7").unwrap()
//!     .with_keep_alive(Duration::from_secs(30));
//! assert_eq!(options.host, "127.0.0.1");
//! assert_eq!(options.client_id.as_deref(), Some("sensor-7"));
//! ```
//!
//! By concern: [`ConnectOptions`] and its checks in `connect.rs`; URL parsing in `url.rs`, the
//! `AIO_*` environment in `env.rs`, reconnection backoff in `backoff.rs`, and the merge of
//! settings given field by field (what every binding takes) in `settings.rs`.

mod backoff;
mod connect;
mod env;
mod settings;
mod url;

// Only declarations and re-exports here: the parts name each other through these paths, and
// none names this module's own items (scripts/module-cycles).
pub(crate) use self::backoff::Backoff;
pub use self::backoff::ReconnectPolicy;
pub use self::connect::{ConnectOptions, DEFAULT_PORT, DEFAULT_TLS_PORT, SAT_AUTH_METHOD};
pub use self::env::ENV_VARS;
pub use self::settings::ConnectSettings;
pub use super::tls::TlsOptions;
