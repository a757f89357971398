//! The integration tests of `mqstate`, one test binary for all of them: each binary links the
//! whole dependency graph (server, broker, TLS), so one per file cost the test command most of
//! its link time and gigabytes of disk (issue 50). Each file is a module; its path is the
//! filter: `cargo test -p mqstate --test it scenarios::`.
//!
//! Tests of one binary share a process: none may set environment variables or other
//! process-wide state, and helpers live once, in `common`.

// A test fails by panicking; these lints are for the libraries.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod blocking;
mod client;
mod common;
mod connect_packet;
mod fuzz_decoders;
mod iothub;
mod iothub_amqp;
mod iothub_amqp_ws;
mod iothub_x509;
mod lock;
mod prop_hlc;
mod prop_resp3;
mod resend;
mod restart;
mod scenarios;
mod tls;
mod vectors_hlc;
mod vectors_resp3;
mod vectors_topics;
