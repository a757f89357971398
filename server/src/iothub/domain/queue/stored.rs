//! A message as a queue keeps it ([`Stored`]): the message, its sequence number and its
//! resolved expiry on both clocks, made once when it is sent (or read back from the data dir)
//! and shared by every delivery. How a transport names its system properties is the
//! transport's ([`SystemProperties`]).

use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;

use super::Now;
use crate::iothub::IotHubError;
use crate::iothub::domain::message::{C2dMessage, Expiry, format_time};
use crate::iothub::domain::system_properties::SystemProperties;

/// A message accepted into a queue, with what the hub added to it.
#[derive(Debug)]
pub(crate) struct Stored {
    pub sequence_number: u64,
    pub message: C2dMessage,
    pub enqueued_utc: SystemTime,
    pub expiry_utc: SystemTime,
    pub expires_at: Instant,
}

/// Builds the stored form of a message (its expiry resolved).
pub(crate) fn store(
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
    Ok(Stored {
        sequence_number,
        message,
        enqueued_utc: now.utc,
        expiry_utc,
        expires_at: now.instant + ttl,
    })
}

impl Stored {
    /// A message read back from the data dir: its deadline counts from `now` on the monotonic
    /// clock (already past when its expiry time is).
    pub(crate) fn restored(
        message: C2dMessage,
        sequence_number: u64,
        enqueued_utc: SystemTime,
        expiry_utc: SystemTime,
        now: Now,
    ) -> Stored {
        let left = expiry_utc.duration_since(now.utc).unwrap_or_default();
        Stored {
            sequence_number,
            message,
            enqueued_utc,
            expiry_utc,
            expires_at: now.instant + left,
        }
    }

    pub(crate) fn payload(&self) -> Bytes {
        self.message.payload.clone()
    }

    /// Its system properties as delivered to `device_id`.
    pub(crate) fn system_properties<'a>(&'a self, device_id: &str) -> SystemProperties<'a> {
        SystemProperties::of(device_id, &self.message, self.expiry_utc)
    }
}
