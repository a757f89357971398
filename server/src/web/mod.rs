//! What the web surfaces (the IoT Hub admin API and the dashboard) check before a route sees
//! a request (docs/security.md, "The web surfaces"): `guard` (the Host; on what changes
//! state, Fetch Metadata, Origin, Content-Type and the session cookie's proof of origin, since
//! no browser is trusted; the sizes and times of requests) and `auth` (credentials, when
//! the broker authenticates its clients or a web surface listens beyond loopback).

pub(crate) mod auth;
mod error;
pub(crate) mod guard;
pub(crate) mod http1;
mod refusal;

pub use auth::MAX_SESSIONS_PER_USER;
pub use error::WebError;
