//! # IoT Hub device client (MQTT 3.1.1)
//!
//! Receives Azure IoT Hub **cloud-to-device** (C2D) messages and sends telemetry, as a device,
//! over MQTT 3.1.1 (rumqttc's v4 client), on TLS port 8883 (plain TCP for a local hub). It
//! reuses the state store client's TLS settings ([`crate::TlsOptions`]), reconnect backoff
//! ([`crate::ReconnectPolicy`]), [`crate::ConnectionState`] and [`crate::Error`].
//!
//! What it does that the official device SDKs are known not to:
//! - **Completion is explicit.** A message is acknowledged (its PUBACK sent, which completes it
//!   in the hub) only when the application calls [`C2dMessage::complete`]. Messages that
//!   arrive before the application asks for them wait in the client; with
//!   [`DeviceOptions::receive_buffer`] messages open (received, not yet completed) the client
//!   stops reading from the socket instead of acknowledging anything (it still reads when it
//!   has telemetry in flight, so a handler that sends an event before completing cannot
//!   deadlock; the buffer may then exceed its bound by what arrives meanwhile).
//! - **PUBACKs go out in arrival order**, as MQTT 3.1.1 (section 4.6) requires: a message
//!   completed ahead of an earlier, still open one has its PUBACK held until the earlier one
//!   is completed. An application that never completes a message therefore holds back the
//!   completions behind it (until the connection drops and the hub redelivers them).
//! - **At-least-once, and redeliveries are recognisable**: a message not completed before its
//!   lock times out, or whose completion was lost with the connection, is delivered again;
//!   [`C2dMessage::is_redelivery`] is set (MQTT DUP flag, or a message id already received;
//!   the last 10,000 ids are remembered). Completing a message whose connection has dropped
//!   is an [`crate::Error::Disconnected`]: the hub will deliver it again.
//! - **Property bags**: every value URL-decoded; a null value (`key`) and an empty value
//!   (`key=`) are kept apart, in order; system properties are typed fields. A malformed bag is
//!   an [`crate::Error::MalformedMessage`] for that message (it is acknowledged, since no
//!   application could process it), and the connection goes on.
//! - **reject/abandon** are [`crate::Error::NotSupported`]: IoT Hub does not offer them over
//!   MQTT.
//! - **SAS tokens** are made per connection with [`DeviceOptions::token_lifetime`] and
//!   renewed by reconnecting with a fresh one before expiry (at 80% of the lifetime when no
//!   message is open, at the latest 90% of the way), as the hub requires. Clean session 0:
//!   messages sent while the device was offline arrive after it reconnects.
//!
//! ```no_run
//! use mqstate::iothub::{DeviceClient, DeviceOptions};
//!
//! # async fn demo() -> Result<(), mqstate::Error> {
//! let client = DeviceClient::connect(DeviceOptions::from_connection_string(
//!     "HostName=myhub.azure-devices.net;DeviceId=dev1;SharedAccessKey=c2VjcmV0",
//! )?)
//! .await?;
//! loop {
//!     let msg = client.receive().await?;
//!     println!("{:?} {:?} {:?}", msg.message_id, msg.properties, msg.payload);
//!     msg.complete()?;
//! }
//! # }
//! ```

// The device client (networked) is the `client` feature; message content, property bags
// and SAS tokens are pure (the local server's hub uses them).
#[cfg(feature = "amqp")]
mod amqp;
#[cfg(feature = "client")]
pub mod blocking;
#[cfg(feature = "client")]
mod c2d;
#[cfg(feature = "client")]
mod client;
#[cfg(feature = "client")]
mod completion;
#[cfg(feature = "client")]
mod connect_error;
mod message;
#[cfg(feature = "client")]
mod options;
pub mod properties;
#[cfg(feature = "client")]
mod redelivery;
#[cfg(feature = "client")]
mod renewal;
pub mod sas;
#[cfg(feature = "client")]
mod settle;
#[cfg(feature = "client")]
mod shared;
#[cfg(feature = "client")]
mod task;

#[cfg(feature = "client")]
pub use c2d::C2dMessage;
#[cfg(feature = "client")]
pub use client::DeviceClient;
pub use message::{MessageContent, Telemetry};
#[cfg(feature = "client")]
pub use options::{API_VERSION, DeviceAuth, DeviceOptions, Transport};
pub use properties::Property;
#[cfg(feature = "client")]
pub use shared::DeviceStats;
