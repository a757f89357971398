//! The device client's AMQP 1.0 transport ([`crate::iothub::Transport::Amqp`], and the same
//! over WebSockets: [`crate::iothub::Transport::AmqpWs`]): what IoT Hub offers devices over
//! AMQP that MQTT lacks is settling each cloud-to-device message on its own, three ways
//! (complete, reject, abandon) and in any order (docs/iothub-device.md).
//!
//! By concern: one connection as the device SDKs make it (`connection.rs`: TLS, SASL
//! ANONYMOUS, CBS put-token, the two device links), the WebSocket under it for `AmqpWs`
//! (`websocket.rs`: the handshake, its messages as a byte stream), the connection task that
//! owns it (`task.rs`: receiving, settling, telemetry, token renewal, reconnection) and the
//! message conversions (`convert.rs`). The settlement bookkeeping the application's handles
//! share with the task is transport-neutral and lives in `crate::iothub::settle`.

mod connection;
pub(crate) mod convert;
pub(crate) mod task;
mod websocket;
