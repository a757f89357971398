//! What the service side sends and reads: cloud-to-device messages, their states, feedback
//! records and batches, device-to-cloud telemetry. The JSON forms (serde, camelCase) are those
//! of the HTTP admin API.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::error::IotHubError;
use super::properties::{Property, check_property_name};

/// The `iothub-ack` property of a message: which final states produce feedback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ack {
    /// No feedback (the default).
    #[default]
    None,
    /// Feedback when the message is completed.
    Positive,
    /// Feedback when the message is dead-lettered (expired, delivery count exceeded, rejected,
    /// purged).
    Negative,
    /// Both.
    Full,
}

impl Ack {
    /// The property value (`none`, `positive`, `negative`, `full`).
    pub fn as_str(self) -> &'static str {
        match self {
            Ack::None => "none",
            Ack::Positive => "positive",
            Ack::Negative => "negative",
            Ack::Full => "full",
        }
    }

    /// Parses the property value.
    ///
    /// ```
    /// use mqstate_server::iothub::Ack;
    /// assert_eq!(Ack::parse("full").unwrap(), Ack::Full);
    /// assert!(Ack::parse("all").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Ack, IotHubError> {
        match text {
            "none" => Ok(Ack::None),
            "positive" => Ok(Ack::Positive),
            "negative" => Ok(Ack::Negative),
            "full" => Ok(Ack::Full),
            _ => Err(IotHubError::invalid(format!(
                "ack {text:?} is not one of none, positive, negative, full"
            ))),
        }
    }

    /// Whether a message ending with `status` produces a feedback record.
    pub fn wants(self, status: FeedbackStatus) -> bool {
        match self {
            Ack::None => false,
            Ack::Full => true,
            Ack::Positive => status == FeedbackStatus::Success,
            Ack::Negative => status != FeedbackStatus::Success,
        }
    }
}

/// When a message expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// This long after it is enqueued (at most 2 days).
    Ttl(Duration),
    /// At this time (`ExpiryTimeUtc`; in the future, at most 2 days away).
    At(SystemTime),
}

/// A cloud-to-device message as the service sends it.
///
/// ```
/// use std::time::Duration;
/// use mqstate_server::iothub::{Ack, C2dMessage};
///
/// let message = C2dMessage::new("reboot")
///     .message_id("m-1")
///     .correlation_id("job-7")
///     .property("priority", Some("high"))
///     .ack(Ack::Full)
///     .ttl(Duration::from_secs(600));
/// assert_eq!(message.properties.len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct C2dMessage {
    /// The body.
    pub payload: Bytes,
    /// `$.mid`: set it, so feedback can be correlated with the message.
    pub message_id: Option<String>,
    /// `$.cid`.
    pub correlation_id: Option<String>,
    /// `$.uid`.
    pub user_id: Option<String>,
    /// `$.ct`.
    pub content_type: Option<String>,
    /// `$.ce`.
    pub content_encoding: Option<String>,
    /// Application properties in order; `None` values are null properties.
    pub properties: Vec<Property>,
    /// Expiry; the hub's default TTL when `None`.
    pub expiry: Option<Expiry>,
    /// Which outcomes produce feedback.
    pub ack: Ack,
}

impl C2dMessage {
    /// A message with this body and nothing else.
    pub fn new(payload: impl Into<Bytes>) -> Self {
        C2dMessage {
            payload: payload.into(),
            ..C2dMessage::default()
        }
    }
    /// Sets the message id (builder style).
    #[must_use]
    pub fn message_id(mut self, id: impl Into<String>) -> Self {
        self.message_id = Some(id.into());
        self
    }
    /// Sets the correlation id (builder style).
    #[must_use]
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.correlation_id = Some(id.into());
        self
    }
    /// Sets the user id (builder style).
    #[must_use]
    pub fn user_id(mut self, id: impl Into<String>) -> Self {
        self.user_id = Some(id.into());
        self
    }
    /// Sets the content type (builder style).
    #[must_use]
    pub fn content_type(mut self, ct: impl Into<String>) -> Self {
        self.content_type = Some(ct.into());
        self
    }
    /// Sets the content encoding (builder style).
    #[must_use]
    pub fn content_encoding(mut self, ce: impl Into<String>) -> Self {
        self.content_encoding = Some(ce.into());
        self
    }
    /// Adds an application property; `None` is a null value (builder style).
    #[must_use]
    pub fn property(mut self, name: impl Into<String>, value: Option<&str>) -> Self {
        self.properties
            .push((name.into(), value.map(str::to_owned)));
        self
    }
    /// Sets a TTL (builder style).
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.expiry = Some(Expiry::Ttl(ttl));
        self
    }
    /// Sets an absolute expiry (builder style).
    #[must_use]
    pub fn expires_at(mut self, at: SystemTime) -> Self {
        self.expiry = Some(Expiry::At(at));
        self
    }
    /// Sets the ack mode (builder style).
    #[must_use]
    pub fn ack(mut self, ack: Ack) -> Self {
        self.ack = ack;
        self
    }

    /// Checks the message against the hub's limits; nothing is sent when this fails.
    pub(crate) fn check(&self, max_size: usize) -> Result<(), IotHubError> {
        if self.payload.len() > max_size {
            return Err(IotHubError::PayloadTooLarge {
                size: self.payload.len(),
                max: max_size,
            });
        }
        for (name, value) in [
            ("message id", &self.message_id),
            ("correlation id", &self.correlation_id),
            ("user id", &self.user_id),
        ] {
            if let Some(v) = value
                && (v.is_empty() || v.len() > 128)
            {
                return Err(IotHubError::invalid(format!(
                    "the {name} must be 1 to 128 characters long (got {} bytes)",
                    v.len()
                )));
            }
        }
        for (name, _) in &self.properties {
            check_property_name(name)?;
        }
        Ok(())
    }
}

/// The state of a cloud-to-device message in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MessageState {
    /// Waiting in the device queue.
    Enqueued,
    /// Delivered to the device and locked until its PUBACK or the lock timeout.
    Invisible,
    /// The device completed it (PUBACK).
    Completed,
    /// Expired, rejected, purged or delivered too many times.
    DeadLettered,
}

/// The status of a feedback record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FeedbackStatus {
    /// The device completed the message.
    Success,
    /// The message expired before it was completed.
    Expired,
    /// The message was delivered max-delivery-count times without being completed.
    DeliveryCountExceeded,
    /// The device rejected the message (not possible over MQTT).
    Rejected,
    /// The device's queue was purged.
    Purged,
}

impl FeedbackStatus {
    /// The record's `description`.
    pub fn description(self) -> &'static str {
        match self {
            FeedbackStatus::Success => "Success",
            FeedbackStatus::Expired => "Message expired",
            FeedbackStatus::DeliveryCountExceeded => "Message delivery count exceeded",
            FeedbackStatus::Rejected => "Message rejected",
            FeedbackStatus::Purged => "Message purged",
        }
    }
}

/// What [`crate::iothub::IotHub::send`] returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendReceipt {
    /// The device.
    pub device_id: String,
    /// The message id, if the service set one.
    pub message_id: Option<String>,
    /// The hub's number for the message (increasing over the whole hub).
    pub sequence_number: u64,
    /// When it was enqueued (RFC 3339).
    pub enqueued_time_utc: String,
    /// When it expires (RFC 3339).
    pub expiry_time_utc: String,
    /// Messages in the device's queue now (this one included).
    pub queue_depth: usize,
}

/// One message of a device queue as [`crate::iothub::IotHub::queue`] shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageInfo {
    /// The hub's number for the message.
    pub sequence_number: u64,
    /// `$.mid`.
    pub message_id: Option<String>,
    /// `$.cid`.
    pub correlation_id: Option<String>,
    /// Its state.
    pub state: MessageState,
    /// How many times it was delivered (Enqueued -> Invisible).
    pub delivery_count: u32,
    /// The ack mode.
    pub ack: Ack,
    /// When it was enqueued (RFC 3339).
    pub enqueued_time_utc: String,
    /// When it expires (RFC 3339).
    pub expiry_time_utc: String,
    /// For a finished message: why it finished.
    pub status_code: Option<FeedbackStatus>,
}

/// A device queue: its depth, its messages and the most recent finished ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueInfo {
    /// The device.
    pub device_id: String,
    /// Messages Enqueued or Invisible (what the queue limit counts).
    pub depth: usize,
    /// The queue limit.
    pub max_depth: usize,
    /// Enqueued and Invisible messages, oldest first.
    pub messages: Vec<MessageInfo>,
    /// The last completed or dead-lettered messages, oldest first (bounded).
    pub finished: Vec<MessageInfo>,
}

/// One feedback record, as IoT Hub serializes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackRecord {
    /// The message id of the message; `null` when the service did not set one (the record
    /// cannot then be matched to its message).
    pub original_message_id: Option<String>,
    /// When the outcome happened (RFC 3339).
    pub enqueued_time_utc: String,
    /// The outcome.
    pub status_code: FeedbackStatus,
    /// Text for the outcome.
    pub description: String,
    /// The device.
    pub device_id: String,
    /// The device's generation id.
    pub device_generation_id: String,
}

/// Content type of feedback batches.
pub const FEEDBACK_CONTENT_TYPE: &str = "application/vnd.microsoft.iothub.feedback.json";

/// A feedback batch received (and locked) by the service: complete it with its lock token, or
/// it is delivered again after the feedback lock duration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackBatch {
    /// Completes ([`crate::iothub::IotHub::complete_feedback`]) or abandons the batch.
    pub lock_token: String,
    /// When the batch was made (RFC 3339).
    pub enqueued_time_utc: String,
    /// The hub's name.
    pub user_id: String,
    /// Always [`FEEDBACK_CONTENT_TYPE`].
    pub content_type: String,
    /// How many times the batch was received (this time included).
    pub delivery_count: u32,
    /// The records: the body of the feedback message.
    pub records: Vec<FeedbackRecord>,
}

/// A device-to-cloud message captured by the hub.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TelemetryMessage {
    /// The hub's number for it (increasing over the whole hub; read on with `since`).
    pub sequence_number: u64,
    /// The device that sent it.
    pub device_id: String,
    /// When the hub received it (RFC 3339).
    pub enqueued_time_utc: String,
    /// System properties (`$.mid`, `$.ct`...), by name.
    pub system_properties: BTreeMap<String, Option<String>>,
    /// Application properties, by name (`null` for a null value).
    pub properties: BTreeMap<String, Option<String>>,
    /// The body as UTF-8 text, or `null` when it is not UTF-8.
    pub body: Option<String>,
    /// The body, base64-encoded.
    pub body_base64: String,
}

/// The RFC 3339 form, to the millisecond, used for every time of the API.
pub fn format_time(time: SystemTime) -> String {
    super::time::format_rfc3339_millis(time)
}
