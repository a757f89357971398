//! Entry points of the local IoT Hub's fuzz targets: the network parsers a peer's bytes reach
//! before anything trusts them. `server/fuzz` (cargo-fuzz, nightly) runs them with the
//! `fuzzing` feature; this module's tests run the same checks (`server/fuzz/checks.rs`) on a
//! bounded number of inputs on stable, as part of `cargo test`.
//!
//! Each function takes arbitrary bytes, feeds them through the hub's real code (a hub made in
//! process, no network) and returns what happened, for the checks to judge. None of them may
//! panic, whatever the input: a panic is a finding. Not a supported API.
//!
//! - [`sas_token`]: SAS token parsing, expiry, its RFC 3339 form, device and policy checks.
//! - [`rest_request`]: a request to the HTTPS REST API's router (registry and device routes).
//! - [`amqp_convert`]: an AMQP message (decoded as fe2o3 decodes a transfer) converted as a
//!   C2D message (sent, received back, converted again) and as telemetry.
//! - [`mqtt_connect`]: MQTT 3.1.1 packets read as the device endpoint reads them; each CONNECT
//!   checked by the hub; the whole stream served by the device endpoint over an in-memory pipe.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;

use crate::iothub::policies::{self, Policies, ServiceGrant};
use crate::iothub::properties::Property;
use crate::iothub::sas::{self, SasToken};
use crate::iothub::{Ack, C2dMessage, DeviceSpec, IotHub, IotHubConfig, IotHubError, time};

/// The hub's host name.
pub const HOSTNAME: &str = "localhost";
/// The registered device the targets address.
pub const DEVICE_ID: &str = "d1";
/// `d1`'s primary key (base64 of the bytes 0 to 31).
pub const DEVICE_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
/// The `iothubowner` policy's key in [`sas_token`]'s policies (bytes 32 to 63).
pub const OWNER_KEY: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
/// The `device` policy's key (DeviceConnect) in [`sas_token`]'s policies (bytes 64 to 95).
pub const DEVICE_POLICY_KEY: &str = "QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8=";
/// A valid key that signs nothing the hub knows (bytes 96 to 127).
pub const OTHER_KEY: &str = "YGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn8=";
/// The largest C2D and telemetry bodies of the fuzzed hubs (small, so that both refusals are
/// reached).
pub const MAX_BODY: usize = 512;

/// [`sas_token`]'s shared access policies.
fn fixed_policies() -> Result<Policies, IotHubError> {
    Policies::parse(&format!(
        r#"[{{"keyName":"iothubowner","rights":["RegistryWrite","ServiceConnect","DeviceConnect"],
             "primaryKey":"{OWNER_KEY}","secondaryKey":"{OWNER_KEY}"}},
            {{"keyName":"device","rights":["DeviceConnect"],
             "primaryKey":"{DEVICE_POLICY_KEY}","secondaryKey":"{DEVICE_POLICY_KEY}"}}]"#
    ))
}

/// A hub in process (nothing listens): `d1` registered with [`DEVICE_KEY`], a disabled device
/// `off`, and with `queued` one C2D message waiting for `d1`.
fn hub(queued: bool) -> Result<IotHub, String> {
    let spec = |text: &str| DeviceSpec::parse(text).map_err(|e| e.to_string());
    let config = IotHubConfig {
        hostname: HOSTNAME.to_owned(),
        admin_port: None,
        https_port: None,
        amqp_port: None,
        devices: vec![spec(&format!("{DEVICE_ID}:{DEVICE_KEY}"))?, spec("off")?],
        max_message_size: MAX_BODY,
        max_telemetry_size: MAX_BODY,
        ..IotHubConfig::default()
    };
    let hub = IotHub::new(config).map_err(|e| format!("hub: {e}"))?;
    let off = crate::iothub::registry::DeviceUpdate {
        status: crate::iothub::registry::DeviceStatus::Disabled,
        ..crate::iothub::registry::DeviceUpdate::default()
    };
    hub.update_device("off", &off, None)
        .map_err(|e| format!("disable: {e}"))?;
    if queued {
        let message = C2dMessage::new("hello")
            .message_id("m1")
            .correlation_id("c1")
            .content_type("text/plain")
            .property("unit", Some("celsius"))
            .property("flag", None)
            .ack(Ack::Full);
        hub.send(DEVICE_ID, message)
            .map_err(|e| format!("send: {e}"))?;
    }
    Ok(hub)
}

/// A single-threaded runtime with timers (the hub's waits and timeouts need them).
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| format!("runtime: {e}"))
}

fn le_u64(data: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    for (to, from) in bytes.iter_mut().zip(data) {
        *to = *from;
    }
    u64::from_le_bytes(bytes)
}

mod amqp_convert;
mod mqtt_connect;
mod rest_request;
mod sas_token;

pub use amqp_convert::{AmqpOutcome, Telemetry, amqp_convert};
pub use mqtt_connect::{ConnectAttempt, MqttOutcome, mqtt_connect};
pub use rest_request::{RestResponse, rest_request};
pub use sas_token::{DerivedToken, SasChecks, SasOutcome, sas_token};

// ----- the bounded run on stable -----

#[cfg(test)]
mod seeds;

// The checks of the fuzz targets, shared with `server/fuzz`.
#[cfg(test)]
#[path = "../../fuzz/checks.rs"]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
mod checks;

#[cfg(test)]
mod tests;
