//! # mqstate-testing
//!
//! The test tooling of the workspace, in one place and outside every shipped package: the
//! Rust suites, the examples and benchmarks, and the test builds of the Python and Node
//! modules (their cargo feature `testing`) use it; the client libraries, the C library, the
//! Kotlin jar and the `mqstate` binary do not link it.
//!
//! - [`mosquitto`]: a system Mosquitto on a free loopback port, [`free_port`], a local state
//!   store behind either broker ([`TestStore`], [`Backend`]) and generated TLS and password
//!   files ([`SecuredFiles`]).
//! - [`fault_proxy`]: a TCP proxy between clients and a broker that cuts, stalls, delays or
//!   drops chosen MQTT packets, so every language's fault tests inject the same faults.
//! - [`tls`]: TLS clients trusting the local IoT Hub's generated certificate.
//! - [`iothub`]: waits on the local IoT Hub (a message's feedback).
//!
//! ```no_run
//! # async fn demo() {
//! let Some(mosquitto) = mqstate_testing::mosquitto_or_skip("my_test") else { return };
//! println!("a broker on port {}", mosquitto.port());
//! # }
//! ```

pub mod fault_proxy;
pub mod iothub;
pub mod mosquitto;
pub mod tls;

pub use mosquitto::{
    Backend, MOSQUITTO_MAX_PACKET_SIZE, Mosquitto, MosquittoError, REQUIRE_MOSQUITTO_ENV,
    SecuredFiles, TestStore, find_mosquitto, free_port, mosquitto_or_skip, mosquitto_required,
};
