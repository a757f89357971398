//! # IoT Hub device client (MQTT 3.1.1 or AMQP 1.0)
//!
//! Receives Azure IoT Hub **cloud-to-device** (C2D) messages and sends telemetry, as a device,
//! over MQTT 3.1.1 (rumqttc's v4 client, TLS port 8883, plain TCP for a local hub; the default)
//! or AMQP 1.0 (fe2o3-amqp, TLS port 5671: [`Transport::Amqp`], the `amqp` cargo feature,
//! docs/iothub-device.md "Transports"). It reuses the state store client's TLS settings
//! ([`crate::TlsOptions`]), reconnect backoff ([`crate::ReconnectPolicy`]),
//! [`crate::ConnectionState`] and [`crate::Error`].
//!
//! What it does that the official device SDKs are known not to:
//! - **Settlement is explicit.** A message is acknowledged (its PUBACK or AMQP disposition
//!   sent, which completes it in the hub) only when the application calls
//!   [`C2dMessage::complete`] (or, over AMQP, [`C2dMessage::reject`] / [`C2dMessage::abandon`]). Messages that
//!   arrive before the application asks for them wait in the client; with
//!   [`DeviceOptions::receive_buffer`] messages open (received, not yet completed) the client
//!   stops reading from the socket instead of acknowledging anything (it still reads when it
//!   has telemetry in flight, so a handler that sends an event before completing cannot
//!   deadlock; the buffer may then exceed its bound by what arrives meanwhile).
//! - **Over MQTT, PUBACKs go out in arrival order**, as MQTT 3.1.1 (section 4.6) requires: a message
//!   completed ahead of an earlier, still open one has its PUBACK held until the earlier one
//!   is completed. An application that never completes a message therefore holds back the
//!   completions behind it (until the connection drops and the hub redelivers them).
//! - **At-least-once, and redeliveries are recognisable**: a message not completed before its
//!   lock times out, or whose completion was lost with the connection, is delivered again;
//!   [`C2dMessage::is_redelivery`] is set (MQTT DUP flag, or a message id already received;
//!   the last 10,000 ids are remembered; over AMQP also a delivery count above 0). Settling a
//!   message whose connection (or AMQP link) has dropped is an [`crate::Error::LockLost`]: the
//!   hub will deliver it again. Over AMQP each message is settled on its own, in any order.
//! - **Property bags**: every value URL-decoded; a null value (`key`) and an empty value
//!   (`key=`) are kept apart, in order; system properties are typed fields. A malformed bag is
//!   an [`crate::Error::MalformedMessage`] for that message (it is acknowledged, since no
//!   application could process it; over AMQP a body that is not bytes is rejected instead, so
//!   the sender learns of it), and the connection goes on.
//! - **reject/abandon** are [`crate::Error::NotSupported`] over MQTT: IoT Hub does not offer
//!   them there.
//! - **SAS tokens** are made per connection with [`DeviceOptions::token_lifetime`] and
//!   renewed before expiry, as the hub requires: over MQTT by reconnecting with a fresh one (at
//!   80% of the lifetime when no message is open, at the latest 90% of the way), over AMQP by
//!   putting a fresh one on `$cbs` at 80%, the connection staying up. Clean session 0:
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
//!
//! Over AMQP, a message can also be rejected or abandoned:
//!
//! ```no_run
//! use mqstate::iothub::{DeviceClient, DeviceOptions, Transport};
//!
//! # async fn demo() -> Result<(), mqstate::Error> {
//! let options = DeviceOptions::from_connection_string(
//!     "HostName=myhub.azure-devices.net;DeviceId=dev1;SharedAccessKey=c2VjcmV0",
//! )?
//! .with_transport(Transport::Amqp);
//! let client = DeviceClient::connect(options).await?;
//! loop {
//!     let msg = client.receive().await?;
//!     match msg.payload.first() {
//!         None => msg.reject()?,                  // dead-lettered, `Rejected` feedback
//!         Some(b'?') => msg.abandon()?,           // delivered again, delivery count + 1
//!         Some(_) => msg.complete()?,
//!     }
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
mod settings;
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
pub use message::{MessageContent, Telemetry, guid_text};
#[cfg(feature = "client")]
pub use options::{API_VERSION, DeviceAuth, DeviceOptions, Transport};
pub use properties::Property;
#[cfg(feature = "client")]
pub use settings::DeviceSettings;
#[cfg(feature = "client")]
pub use shared::DeviceStats;
