//! One device's cloud-to-device queue and the message lifecycle: Enqueued -> Invisible (locked
//! by a delivery) -> Completed (PUBACK, or complete by lock token), or Dead lettered (expired,
//! delivered max-delivery-count times without being completed, rejected, purged); an abandoned
//! message is Enqueued again at once. Every delivery locks its message under a lock token (a
//! GUID). A connection's delivery (MQTT's) is also bound to its connection: only that
//! connection completes it (the endpoint maps its PUBACK's packet id to the token; packet ids
//! are the transport's, not the queue's) and the lock ends when the connection closes. A lock
//! taken by token (AMQP's, HTTPS's) outlives connections and is settled by complete, reject
//! or abandon until it ends. Pure code: the caller passes the time in, so the state machine
//! is tested without waiting.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::error::IotHubError;
use super::message::{
    C2dMessage, FeedbackStatus, MessageInfo, MessageState, QueueInfo, format_time,
};

/// Finished messages a queue remembers for [`QueueInfo::finished`].
const FINISHED_KEPT: usize = 50;

/// The connection id of the locks restored from the data dir (real connections count from 1).
const RESTORED: u64 = 0;

/// A point in time, on both clocks: `instant` for deadlines, `utc` for what is shown.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now {
    pub instant: Instant,
    pub utc: SystemTime,
}

impl Now {
    pub(crate) fn current() -> Now {
        Now {
            instant: Instant::now(),
            utc: SystemTime::now(),
        }
    }
}

/// How an Invisible message is locked, and until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lock {
    /// Its lock token (a GUID, kept as its 128 bits): what settles it.
    token: u128,
    /// The connection it was delivered on, for a connection's delivery (MQTT): only that
    /// connection completes it, and the lock ends when the connection closes (its PUBACK
    /// cannot come any more). `None` for a lock taken by token (AMQP, HTTPS), which outlives
    /// any connection.
    connection: Option<u64>,
    until: Instant,
}

impl Lock {
    fn is_connection(&self, connection: u64) -> bool {
        self.connection == Some(connection)
    }
}

/// How a device settles a message it holds under a lock token (AMQP dispositions, HTTPS
/// `DELETE` / `DELETE ?reject` / `POST .../abandon`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// Completed: removed from the queue, `Success` feedback (AMQP `accepted`, HTTPS
    /// `DELETE .../deviceBound/{etag}`).
    Complete,
    /// Rejected: dead-lettered at once with `Rejected` feedback, never delivered again (AMQP
    /// `rejected`, HTTPS `DELETE .../deviceBound/{etag}?reject`).
    Reject,
    /// Abandoned: Enqueued again at once, its delivery counted, so that a message abandoned on
    /// its last allowed delivery is dead-lettered with `DeliveryCountExceeded` rather than
    /// looping (AMQP `released` / `modified`, HTTPS `POST .../deviceBound/{etag}/abandon`).
    Abandon,
}

/// A cloud-to-device message locked for a device under a lock token, as AMQP and HTTPS hand
/// it out; settle it with [`crate::iothub::IotHub::settle`] before `lock_until`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockedMessage {
    /// The lock token, a GUID: the HTTPS `ETag` and the AMQP delivery tag.
    pub lock_token: String,
    /// The device it is for.
    pub device_id: String,
    /// The hub's sequence number of the message.
    pub sequence_number: u64,
    /// The message as the service sent it: body, ids, content type and encoding,
    /// application properties, ack mode (its `expiry` field is what the service asked for;
    /// `expiry_time` is the resolved one).
    pub message: C2dMessage,
    /// How many times it was delivered, this delivery included (1 the first time).
    pub delivery_count: u32,
    /// When it was enqueued.
    pub enqueued_time: SystemTime,
    /// When it expires (`ExpiryTimeUtc`, `$.exp`).
    pub expiry_time: SystemTime,
    /// When its lock ends: it is then Enqueued again (or dead-lettered) and the lock token
    /// settles nothing.
    pub lock_until: SystemTime,
}

#[derive(Debug)]
struct Entry {
    stored: Arc<Stored>,
    lock: Option<Lock>,
    delivery_count: u32,
}

/// A message that reached a final state, kept for the queue view.
#[derive(Debug, Clone)]
pub(crate) struct Finished {
    pub stored: Arc<Stored>,
    pub delivery_count: u32,
    pub status: FeedbackStatus,
    pub at: SystemTime,
}

/// One message of a queue as the data dir stores it: live (with its lock's end, when it is
/// Invisible) or finished.
#[derive(Debug)]
pub(crate) enum Item<'a> {
    Live {
        stored: &'a Stored,
        delivery_count: u32,
        lock_until: Option<Instant>,
    },
    Finished(&'a Finished),
}

/// A message reached a final state.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub stored: Arc<Stored>,
    pub status: FeedbackStatus,
    pub at: SystemTime,
}

/// A delivery to make on a connection: `stored`, locked under `lock` (the token that
/// [`DeviceQueue::complete`] takes from that connection).
#[derive(Debug)]
pub(crate) struct Delivery {
    pub stored: Arc<Stored>,
    pub lock: u128,
}

/// The queue of one device.
#[derive(Debug, Default)]
pub(crate) struct DeviceQueue {
    entries: VecDeque<Entry>,
    finished: VecDeque<Finished>,
    /// The sequence number of the message each lock token locks, so that a PUBACK and a
    /// settlement are found without scanning the queue (`entries` is in sequence order: found
    /// by binary search).
    holders: HashMap<u128, u64>,
    /// Whether changes are recorded in `changed` (with a data dir).
    track: bool,
    /// Sequence numbers of the messages changed since [`DeviceQueue::take_changes`].
    changed: Vec<u64>,
}

impl DeviceQueue {
    /// An empty queue; with `track`, every change is recorded for the data dir.
    pub(crate) fn new(track: bool) -> DeviceQueue {
        DeviceQueue {
            track,
            ..DeviceQueue::default()
        }
    }

    fn mark(&mut self, sequence_number: u64) {
        if self.track {
            self.changed.push(sequence_number);
        }
    }

    /// The sequence numbers of the messages changed since the last call (to write them).
    pub(crate) fn take_changes(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.changed)
    }

    /// A message as it is now, live or finished; `None` when the queue forgot it.
    pub(crate) fn item(&self, sequence_number: u64) -> Option<Item<'_>> {
        if let Some(e) = self
            .entries
            .iter()
            .find(|e| e.stored.sequence_number == sequence_number)
        {
            return Some(Item::Live {
                stored: &e.stored,
                delivery_count: e.delivery_count,
                lock_until: e.lock.map(|l| l.until),
            });
        }
        self.finished
            .iter()
            .find(|f| f.stored.sequence_number == sequence_number)
            .map(Item::Finished)
    }

    /// Locks the message at `index` under `lock` (it held none).
    fn set_lock(&mut self, index: usize, lock: Lock) -> Option<&mut Entry> {
        let entry = self.entries.get_mut(index)?;
        self.holders
            .insert(lock.token, entry.stored.sequence_number);
        entry.lock = Some(lock);
        Some(entry)
    }

    /// Ends the lock of the message at `index`, if it has one.
    fn clear_lock(&mut self, index: usize) -> Option<&mut Entry> {
        let entry = self.entries.get_mut(index)?;
        if let Some(lock) = entry.lock.take() {
            self.holders.remove(&lock.token);
        }
        Some(entry)
    }

    /// Takes the message at `index` out of the queue, with its lock.
    fn remove_entry(&mut self, index: usize) -> Option<Entry> {
        let entry = self.entries.remove(index)?;
        if let Some(lock) = entry.lock {
            self.holders.remove(&lock.token);
        }
        Some(entry)
    }

    /// Where the message locked under `token` is.
    fn position_of(&self, token: u128) -> Option<usize> {
        let seq = *self.holders.get(&token)?;
        let index = self
            .entries
            .binary_search_by_key(&seq, |e| e.stored.sequence_number)
            .ok()?;
        debug_assert!(
            self.entries
                .get(index)
                .is_some_and(|e| e.lock.is_some_and(|l| l.token == token))
        );
        Some(index)
    }

    /// Puts back a message read from the data dir (oldest first). A message that was locked
    /// stays locked by no connection until [`DeviceQueue::release_restored`] ends the lock.
    pub(crate) fn restore(&mut self, stored: Stored, delivery_count: u32, was_locked: bool) {
        debug_assert!(
            self.entries
                .back()
                .is_none_or(|e| e.stored.sequence_number < stored.sequence_number)
        );
        // Lock tokens are not kept either: every lock held before the restart ends at start,
        // as the locks of a closed connection end (`release_restored`).
        self.entries.push_back(Entry {
            stored: Arc::new(stored),
            lock: None,
            delivery_count,
        });
        if was_locked {
            let lock = Lock {
                token: new_token(),
                connection: Some(RESTORED),
                until: Instant::now(),
            };
            self.set_lock(self.entries.len() - 1, lock);
        }
    }

    /// Puts back a finished message read from the data dir (in the order they finished).
    pub(crate) fn restore_finished(&mut self, finished: Finished) {
        if self.finished.len() >= FINISHED_KEPT
            && let Some(old) = self.finished.pop_front()
        {
            self.mark(old.stored.sequence_number);
        }
        self.finished.push_back(finished);
    }

    /// Ends the locks of the messages that were delivered before a restart, as a lost
    /// connection ends them: their delivery counted, enqueued again or dead-lettered.
    pub(crate) fn release_restored(&mut self, now: Now, max_delivery_count: u32) -> Vec<Outcome> {
        self.release_connection(RESTORED, now, max_delivery_count)
    }

    pub(crate) fn depth(&self) -> usize {
        self.entries.len()
    }

    /// Adds a message, or refuses it when the queue holds `max_depth` messages.
    pub(crate) fn enqueue(
        &mut self,
        stored: Stored,
        device: &str,
        max_depth: usize,
    ) -> Result<Arc<Stored>, IotHubError> {
        if self.entries.len() >= max_depth {
            return Err(IotHubError::QueueFull {
                device: device.to_owned(),
                max: max_depth,
            });
        }
        let stored = Arc::new(stored);
        self.entries.push_back(Entry {
            stored: stored.clone(),
            lock: None,
            delivery_count: 0,
        });
        self.mark(stored.sequence_number);
        Ok(stored)
    }

    /// Locks every Enqueued message for delivery on `connection` (oldest first).
    pub(crate) fn deliver(
        &mut self,
        connection: u64,
        now: Now,
        lock_timeout: Duration,
    ) -> Vec<Delivery> {
        let mut out = Vec::new();
        for i in 0..self.entries.len() {
            if self.entries.get(i).is_none_or(|e| e.lock.is_some()) {
                continue;
            }
            let token = new_token();
            let lock = Lock {
                token,
                connection: Some(connection),
                until: now.instant + lock_timeout,
            };
            if let Some(entry) = self.set_lock(i, lock) {
                entry.delivery_count = entry.delivery_count.saturating_add(1);
                let stored = entry.stored.clone();
                self.mark(stored.sequence_number);
                out.push(Delivery {
                    stored,
                    lock: token,
                });
            }
        }
        out
    }

    /// A PUBACK: completes the message delivered on this connection under this lock. A late
    /// PUBACK (the lock timed out and the message was enqueued again, under another lock)
    /// completes nothing, nor does another connection's.
    pub(crate) fn complete(&mut self, connection: u64, lock: u128, now: Now) -> Option<Outcome> {
        let index = self.position_of(lock)?;
        if !self
            .entries
            .get(index)
            .is_some_and(|e| e.lock.is_some_and(|l| l.is_connection(connection)))
        {
            return None;
        }
        let entry = self.remove_entry(index)?;
        Some(self.finish(entry, FeedbackStatus::Success, now))
    }

    /// Locks the oldest Enqueued message (not expired: the next tick dead-letters those) under
    /// a new lock token for `lock_timeout`, counting the delivery: what an HTTPS receive and
    /// an AMQP receiver link with credit take. `None` when no message is Enqueued.
    pub(crate) fn deliver_locked(
        &mut self,
        device_id: &str,
        now: Now,
        lock_timeout: Duration,
    ) -> Option<LockedMessage> {
        let index = self
            .entries
            .iter()
            .position(|e| e.lock.is_none() && e.stored.expires_at > now.instant)?;
        let token = new_token();
        let lock = Lock {
            token,
            connection: None,
            until: now.instant + lock_timeout,
        };
        let entry = self.set_lock(index, lock)?;
        entry.delivery_count = entry.delivery_count.saturating_add(1);
        let stored = entry.stored.clone();
        let delivery_count = entry.delivery_count;
        self.mark(stored.sequence_number);
        Some(LockedMessage {
            lock_token: format_token(token),
            device_id: device_id.to_owned(),
            sequence_number: stored.sequence_number,
            message: stored.message.clone(),
            delivery_count,
            enqueued_time: stored.enqueued_utc,
            expiry_time: stored.expiry_utc,
            lock_until: now.utc + lock_timeout,
        })
    }

    fn token_index(&self, lock_token: &str) -> Option<usize> {
        let index = self.position_of(parse_token(lock_token)?)?;
        // A connection's delivery is settled by its PUBACK only; its token never left the hub.
        self.entries
            .get(index)
            .is_some_and(|e| e.lock.is_some_and(|l| l.connection.is_none()))
            .then_some(index)
    }

    /// Settles the message locked under `lock_token`: completed (`Success`), rejected
    /// (dead-lettered, `Rejected`) or abandoned (Enqueued again, or dead-lettered with
    /// `DeliveryCountExceeded` when that was its last allowed delivery). Returns the final
    /// state it reached, if it did; [`IotHubError::MessageLockLost`] when the token locks
    /// nothing (unknown, settled, or timed out: a late settlement must not touch a message
    /// that may already be locked again for someone else).
    pub(crate) fn settle(
        &mut self,
        device_id: &str,
        lock_token: &str,
        settlement: Settlement,
        now: Now,
        max_delivery_count: u32,
    ) -> Result<Option<Outcome>, IotHubError> {
        let lost = || IotHubError::MessageLockLost {
            device: device_id.to_owned(),
            lock_token: lock_token.to_owned(),
        };
        let index = self.token_index(lock_token).ok_or_else(lost)?;
        let status = match settlement {
            Settlement::Complete => FeedbackStatus::Success,
            Settlement::Reject => FeedbackStatus::Rejected,
            Settlement::Abandon => {
                let mut out = Vec::new();
                self.unlock(index, max_delivery_count, now, &mut out);
                return Ok(out.pop());
            }
        };
        let entry = self.remove_entry(index).ok_or_else(lost)?;
        Ok(Some(self.finish(entry, status, now)))
    }

    /// Puts back a message taken by [`DeviceQueue::deliver_locked`] that never reached the
    /// device (its receive was cancelled, or its lock could not be persisted): Enqueued again
    /// with that delivery not counted, as if it had not been taken. Returns whether the token
    /// still locked a message.
    pub(crate) fn unreceive(&mut self, lock_token: &str) -> bool {
        let Some(index) = self.token_index(lock_token) else {
            return false;
        };
        let Some(entry) = self.clear_lock(index) else {
            return false;
        };
        entry.delivery_count = entry.delivery_count.saturating_sub(1);
        let seq = entry.stored.sequence_number;
        self.mark(seq);
        true
    }

    /// Whether a message is Enqueued (not locked, not expired): what a token receiver waits
    /// for.
    pub(crate) fn has_enqueued(&self, now: Now) -> bool {
        self.entries
            .iter()
            .any(|e| e.lock.is_none() && e.stored.expires_at > now.instant)
    }

    fn finish(&mut self, entry: Entry, status: FeedbackStatus, now: Now) -> Outcome {
        if self.finished.len() >= FINISHED_KEPT
            && let Some(old) = self.finished.pop_front()
        {
            self.mark(old.stored.sequence_number);
        }
        self.mark(entry.stored.sequence_number);
        self.finished.push_back(Finished {
            stored: entry.stored.clone(),
            delivery_count: entry.delivery_count,
            status,
            at: now.utc,
        });
        Outcome {
            stored: entry.stored,
            status,
            at: now.utc,
        }
    }

    /// Unlocks the message of a lock that ended (timeout, closed connection, abandon):
    /// dead-lettered if it was delivered `max_delivery_count` times, Enqueued again otherwise.
    fn unlock(
        &mut self,
        index: usize,
        max_delivery_count: u32,
        now: Now,
        out: &mut Vec<Outcome>,
    ) -> bool {
        let Some(entry) = self.clear_lock(index) else {
            return false;
        };
        let seq = entry.stored.sequence_number;
        self.mark(seq);
        let Some(entry) = self.entries.get(index) else {
            return false;
        };
        if entry.delivery_count >= max_delivery_count {
            if let Some(entry) = self.remove_entry(index) {
                out.push(self.finish(entry, FeedbackStatus::DeliveryCountExceeded, now));
            }
            return true;
        }
        false
    }

    /// Expires messages and ends timed-out locks.
    pub(crate) fn tick(&mut self, now: Now, max_delivery_count: u32) -> Vec<Outcome> {
        let mut out = Vec::new();
        let mut i = 0;
        while let Some(entry) = self.entries.get(i) {
            if entry.stored.expires_at <= now.instant {
                if let Some(entry) = self.remove_entry(i) {
                    out.push(self.finish(entry, FeedbackStatus::Expired, now));
                }
                continue;
            }
            if entry.lock.is_some_and(|l| l.until <= now.instant)
                && self.unlock(i, max_delivery_count, now, &mut out)
            {
                continue;
            }
            i += 1;
        }
        out
    }

    /// A connection closed: its locks end now (its packet ids mean nothing on another
    /// connection, so its PUBACKs cannot come any more).
    pub(crate) fn release_connection(
        &mut self,
        connection: u64,
        now: Now,
        max_delivery_count: u32,
    ) -> Vec<Outcome> {
        let mut out = Vec::new();
        let mut i = 0;
        while let Some(entry) = self.entries.get(i) {
            if entry.lock.is_some_and(|l| l.is_connection(connection))
                && self.unlock(i, max_delivery_count, now, &mut out)
            {
                continue;
            }
            i += 1;
        }
        out
    }

    /// Dead-letters every message as Purged.
    pub(crate) fn purge(&mut self, now: Now) -> Vec<Outcome> {
        self.holders.clear();
        let entries: Vec<Entry> = self.entries.drain(..).collect();
        entries
            .into_iter()
            .map(|e| self.finish(e, FeedbackStatus::Purged, now))
            .collect()
    }

    /// The earliest expiry or lock end.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.entries
            .iter()
            .flat_map(|e| [Some(e.stored.expires_at), e.lock.map(|l| l.until)])
            .flatten()
            .min()
    }

    pub(crate) fn info(&self, device: &str, max_depth: usize) -> QueueInfo {
        let info = |stored: &Stored, state, delivery_count, status_code| MessageInfo {
            sequence_number: stored.sequence_number,
            message_id: stored.message.message_id.clone(),
            correlation_id: stored.message.correlation_id.clone(),
            state,
            delivery_count,
            ack: stored.message.ack,
            enqueued_time_utc: format_time(stored.enqueued_utc),
            expiry_time_utc: format_time(stored.expiry_utc),
            status_code,
        };
        QueueInfo {
            device_id: device.to_owned(),
            depth: self.entries.len(),
            max_depth,
            messages: self
                .entries
                .iter()
                .map(|e| {
                    let state = if e.lock.is_some() {
                        MessageState::Invisible
                    } else {
                        MessageState::Enqueued
                    };
                    info(&e.stored, state, e.delivery_count, None)
                })
                .collect(),
            finished: self
                .finished
                .iter()
                .map(|f| {
                    let state = if f.status == FeedbackStatus::Success {
                        MessageState::Completed
                    } else {
                        MessageState::DeadLettered
                    };
                    info(&f.stored, state, f.delivery_count, Some(f.status))
                })
                .collect(),
        }
    }
}

mod lock_token;
mod stored;

pub(crate) use lock_token::new_guid;
use lock_token::{format_token, new_token, parse_token};
pub(crate) use stored::{Stored, store};

#[cfg(test)]
mod tests;
