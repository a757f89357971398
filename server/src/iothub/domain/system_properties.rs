//! The system properties of a cloud-to-device message as the hub delivers it, resolved once
//! here and rendered by each transport under its own names: the MQTT topic's property bag
//! (`$.mid`, `$.to`, `$.exp`...), AMQP's message properties, HTTPS's `iothub-*` headers.
//! What a delivery adds (sequence number, enqueued time, delivery count, lock token) is in
//! [`super::queue::LockedMessage`].

use std::time::SystemTime;

use super::message::{Ack, C2dMessage};

/// A message's system properties, for `device_id`, with its resolved expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SystemProperties<'a> {
    /// `message-id`.
    pub message_id: Option<&'a str>,
    /// `to`: the device's device-bound address, `/devices/{id}/messages/devicebound`.
    pub to: String,
    /// `absolute-expiry-time`: when the message expires (its TTL resolved when it was sent).
    pub expiry: SystemTime,
    /// `correlation-id`.
    pub correlation_id: Option<&'a str>,
    /// `user-id`.
    pub user_id: Option<&'a str>,
    /// `content-type`.
    pub content_type: Option<&'a str>,
    /// `content-encoding`.
    pub content_encoding: Option<&'a str>,
    /// `iothub-ack`: the feedback the service asked for.
    pub ack: Ack,
}

impl<'a> SystemProperties<'a> {
    /// The system properties of `message`, delivered to `device_id`, expiring at `expiry`.
    pub(crate) fn of(device_id: &str, message: &'a C2dMessage, expiry: SystemTime) -> Self {
        SystemProperties {
            message_id: message.message_id.as_deref(),
            to: format!("/devices/{device_id}/messages/devicebound"),
            expiry,
            correlation_id: message.correlation_id.as_deref(),
            user_id: message.user_id.as_deref(),
            content_type: message.content_type.as_deref(),
            content_encoding: message.content_encoding.as_deref(),
            ack: message.ack,
        }
    }
}
