//! Helpers of the CLI's integration tests.

// Also the harness of `cli/examples/iothub_crash_test.rs` (included there by path).
pub mod iothub_crash;
