//! The integration tests of `mqstate-server`, one test binary for all of them: each binary
//! links the whole dependency graph (broker, TLS, AMQP, HTTP), so one per file cost the test
//! command most of its link time and gigabytes of disk (issue 50). Each file is a module; its
//! path is the filter: `cargo test -p mqstate-server --test it iothub_amqp::`.
//!
//! Tests of one binary share a process: none may set environment variables or other
//! process-wide state. A test that installs the tracing subscriber (to read the log,
//! `common::logs`) or measures its own memory runs in a process of its own (`run_alone!`,
//! `common::alone`).

// A test fails by panicking; these lints are for the libraries.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

// First, so that its macros (`both_backends!`, `run_alone!`) are in scope in every module
// below.
#[macro_use]
mod common;

mod conformance;
mod dashboard;
mod iothub;
mod iothub_amqp;
mod iothub_amqp_device;
mod iothub_https_device;
mod iothub_persistence;
mod iothub_rest;
mod iothub_websocket;
mod iothub_x509;
mod keynotify;
mod persistence;
mod reconnect;
mod reliability;
mod scan;
mod security;
