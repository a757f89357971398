//! What the web surfaces (the IoT Hub admin API and the dashboard) check before a route sees
//! a request (docs/security.md, "The web surfaces"): [`guard`] (Host, Origin, Content-Type:
//! no browser is trusted) and [`auth`] (credentials, when the broker authenticates its
//! clients or a web surface listens beyond loopback).

pub mod auth;
pub mod guard;
