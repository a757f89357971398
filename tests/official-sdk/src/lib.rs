//! Tests only: the official Azure IoT Operations Rust SDK's state store client
//! (`azure_iot_operations_services` 1.5.0-beta1) against mqstate's local server. See the
//! crate's README and `tests/list_keys.rs`; this library is empty.
