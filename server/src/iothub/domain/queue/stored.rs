//! A message as a queue keeps it ([`Stored`]): the message, its sequence number, its resolved
//! expiry on both clocks and its device-bound topic, made once when it is sent (or read back
//! from the data dir) and shared by every delivery.

use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;

use super::Now;
use crate::iothub::IotHubError;
use crate::iothub::domain::message::{Ack, C2dMessage, Expiry, format_time};
use crate::iothub::domain::properties::{self, Property};
use crate::iothub::domain::system_properties::SystemProperties;

/// A message accepted into a queue, with what the hub added to it.
#[derive(Debug)]
pub(crate) struct Stored {
    pub sequence_number: u64,
    pub message: C2dMessage,
    pub enqueued_utc: SystemTime,
    pub expiry_utc: SystemTime,
    pub expires_at: Instant,
    /// The topic it is delivered on (computed once: it does not change between deliveries).
    pub topic: String,
}

/// The device-bound topic of a message: every system property set, `iothub-ack` unless none,
/// then the application properties in order.
fn devicebound_topic(device_id: &str, stored_message: &C2dMessage, expiry: SystemTime) -> String {
    let m = stored_message;
    let sp = SystemProperties::of(device_id, m, expiry);
    let mut bag: Vec<Property> = Vec::new();
    let mut system = |name: &str, value: Option<&str>| {
        if let Some(v) = value {
            bag.push((name.to_owned(), Some(v.to_owned())));
        }
    };
    system("$.mid", sp.message_id);
    system("$.to", Some(&sp.to));
    system("$.exp", Some(&format_time(sp.expiry)));
    system("$.cid", sp.correlation_id);
    system("$.uid", sp.user_id);
    system("$.ct", sp.content_type);
    system("$.ce", sp.content_encoding);
    if sp.ack != Ack::None {
        bag.push(("iothub-ack".to_owned(), Some(sp.ack.as_str().to_owned())));
    }
    bag.extend(m.properties.iter().cloned());
    format!(
        "devices/{device_id}/messages/devicebound/{}",
        properties::encode(&bag)
    )
}

/// Builds the stored form of a message (expiry resolved, topic computed).
pub(crate) fn store(
    device_id: &str,
    message: C2dMessage,
    sequence_number: u64,
    now: Now,
    default_ttl: Duration,
) -> Result<Stored, IotHubError> {
    let ttl = match message.expiry {
        None => default_ttl,
        Some(Expiry::Ttl(ttl)) => ttl,
        Some(Expiry::At(at)) => at.duration_since(now.utc).map_err(|_| {
            IotHubError::invalid(format!(
                "the expiry time {} is in the past",
                format_time(at)
            ))
        })?,
    };
    if ttl.is_zero() || ttl > crate::iothub::config::MAX_TTL {
        return Err(IotHubError::invalid(format!(
            "the TTL must be positive and at most 2 days (got {ttl:?})"
        )));
    }
    let expiry_utc = now.utc + ttl;
    let topic = devicebound_topic(device_id, &message, expiry_utc);
    Ok(Stored {
        sequence_number,
        message,
        enqueued_utc: now.utc,
        expiry_utc,
        expires_at: now.instant + ttl,
        topic,
    })
}

impl Stored {
    /// A message read back from the data dir: its deadline counts from `now` on the monotonic
    /// clock (already past when its expiry time is).
    pub(crate) fn restored(
        device_id: &str,
        message: C2dMessage,
        sequence_number: u64,
        enqueued_utc: SystemTime,
        expiry_utc: SystemTime,
        now: Now,
    ) -> Stored {
        let left = expiry_utc.duration_since(now.utc).unwrap_or_default();
        Stored {
            sequence_number,
            topic: devicebound_topic(device_id, &message, expiry_utc),
            message,
            enqueued_utc,
            expiry_utc,
            expires_at: now.instant + left,
        }
    }

    pub(crate) fn payload(&self) -> Bytes {
        self.message.payload.clone()
    }
}
