//! The integration tests of `mqstate-cli`, one test binary for all of them: each binary links
//! the whole dependency graph (server, broker, TLS), so one per file cost the test command
//! most of its link time and gigabytes of disk (issue 50). Each file is a module; its path is
//! the filter: `cargo test -p mqstate-cli --test it persistence::`. The `mqstate` binary they
//! run is `env!("CARGO_BIN_EXE_mqstate")`.

// A test fails by panicking; these lints are for the libraries.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod client;
mod iothub;
mod iothub_crash;
mod iothub_persistence;
mod iothub_receive;
mod persistence;
mod security;
mod serve;
mod support;
