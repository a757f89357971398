//! Feedback: records wait until 64 are pending (a batch at once) or until the batch interval
//! has passed since the last batch; when no batch was due for longer than that, the interval
//! counts from the first pending record, so a burst is not split by an old deadline. Batches
//! then wait in the feedback queue, with their own TTL, lock duration and max delivery count,
//! until the service receives and completes them. Pure code: the caller passes the time in.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};

use super::message::{FEEDBACK_CONTENT_TYPE, FeedbackBatch, FeedbackRecord, format_time};
use super::queue::Now;

/// The limits of feedback (from `IotHubConfig`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FeedbackLimits {
    pub batch_size: usize,
    pub batch_interval: Duration,
    pub ttl: Duration,
    pub lock_duration: Duration,
    pub max_delivery_count: u32,
}

#[derive(Debug)]
struct StoredBatch {
    enqueued_utc: SystemTime,
    expires_at: Instant,
    records: Vec<FeedbackRecord>,
    lock: Option<(String, Instant)>,
    delivery_count: u32,
}

/// Pending records and made batches.
#[derive(Debug)]
pub(crate) struct Feedback {
    limits: FeedbackLimits,
    pending: Vec<FeedbackRecord>,
    last_batch_at: Instant,
    batches: VecDeque<StoredBatch>,
    next_lock: u64,
}

impl Feedback {
    pub fn new(limits: FeedbackLimits, now: Instant) -> Feedback {
        Feedback {
            limits,
            pending: Vec::new(),
            last_batch_at: now,
            batches: VecDeque::new(),
            next_lock: 0,
        }
    }

    /// Adds a record; returns whether a batch became available.
    pub fn add(&mut self, record: FeedbackRecord, now: Now) -> bool {
        if self.pending.is_empty() && now.instant >= self.last_batch_at + self.limits.batch_interval
        {
            // Idle for longer than the interval: this record opens a new window.
            self.last_batch_at = now.instant;
        }
        self.pending.push(record);
        let mut made = false;
        while self.pending.len() >= self.limits.batch_size {
            let rest = self.pending.split_off(self.limits.batch_size);
            let records = std::mem::replace(&mut self.pending, rest);
            self.make_batch(records, now);
            made = true;
        }
        made
    }

    fn make_batch(&mut self, records: Vec<FeedbackRecord>, now: Now) {
        self.last_batch_at = now.instant;
        self.batches.push_back(StoredBatch {
            enqueued_utc: now.utc,
            expires_at: now.instant + self.limits.ttl,
            records,
            lock: None,
            delivery_count: 0,
        });
    }

    /// Batches pending records whose interval passed, ends timed-out locks, drops expired
    /// batches and those received too often. Returns whether a batch became available.
    pub fn tick(&mut self, now: Now) -> bool {
        let mut available = false;
        if !self.pending.is_empty()
            && now.instant >= self.last_batch_at + self.limits.batch_interval
        {
            let records = std::mem::take(&mut self.pending);
            self.make_batch(records, now);
            available = true;
        }
        let max = self.limits.max_delivery_count;
        self.batches.retain_mut(|b| {
            if b.expires_at <= now.instant {
                tracing::info!(
                    records = b.records.len(),
                    "feedback batch expired unreceived"
                );
                return false;
            }
            if b.lock
                .as_ref()
                .is_some_and(|(_, until)| *until <= now.instant)
            {
                b.lock = None;
                if b.delivery_count >= max {
                    tracing::info!(
                        records = b.records.len(),
                        "feedback batch dropped: max delivery count"
                    );
                    return false;
                }
                available = true;
            }
            true
        });
        available
    }

    /// Locks and returns the oldest batch nobody holds.
    pub fn receive(&mut self, now: Now, user_id: &str) -> Option<FeedbackBatch> {
        let lock_duration = self.limits.lock_duration;
        self.next_lock += 1;
        let token = format!("{:016x}-{}", self.next_lock, fastish_nonce(now));
        let batch = self.batches.iter_mut().find(|b| b.lock.is_none())?;
        batch.lock = Some((token.clone(), now.instant + lock_duration));
        batch.delivery_count = batch.delivery_count.saturating_add(1);
        Some(FeedbackBatch {
            lock_token: token,
            enqueued_time_utc: format_time(batch.enqueued_utc),
            user_id: user_id.to_owned(),
            content_type: FEEDBACK_CONTENT_TYPE.to_owned(),
            delivery_count: batch.delivery_count,
            records: batch.records.clone(),
        })
    }

    fn position(&self, token: &str) -> Option<usize> {
        self.batches
            .iter()
            .position(|b| b.lock.as_ref().is_some_and(|(t, _)| t == token))
    }

    /// Completes (removes) a locked batch; false if the token is unknown or its lock ended.
    pub fn complete(&mut self, token: &str) -> bool {
        self.position(token)
            .and_then(|i| self.batches.remove(i))
            .is_some()
    }

    /// Abandons a locked batch (available again at once); false if the token is unknown.
    pub fn abandon(&mut self, token: &str) -> bool {
        match self.position(token).and_then(|i| self.batches.get_mut(i)) {
            Some(b) => {
                b.lock = None;
                true
            }
            None => false,
        }
    }

    /// Drops the pending feedback of a deleted device: records not yet batched, and records in
    /// batches nobody has received yet.
    pub fn drop_device(&mut self, device: &str) {
        self.pending.retain(|r| r.device_id != device);
        for b in self.batches.iter_mut().filter(|b| b.lock.is_none()) {
            b.records.retain(|r| r.device_id != device);
        }
        self.batches.retain(|b| !b.records.is_empty());
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        let batch_due =
            (!self.pending.is_empty()).then(|| self.last_batch_at + self.limits.batch_interval);
        self.batches
            .iter()
            .flat_map(|b| [Some(b.expires_at), b.lock.as_ref().map(|(_, until)| *until)])
            .chain([batch_due])
            .flatten()
            .min()
    }

    /// Records not yet batched.
    #[cfg(test)]
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
}

/// Makes lock tokens differ between hub runs (a token from an earlier run is never valid).
fn fastish_nonce(now: Now) -> u32 {
    now.utc
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use crate::iothub::message::FeedbackStatus;

    fn record(device: &str) -> FeedbackRecord {
        FeedbackRecord {
            original_message_id: Some("m".into()),
            enqueued_time_utc: String::new(),
            status_code: FeedbackStatus::Success,
            description: "Success".into(),
            device_id: device.into(),
            device_generation_id: "1".into(),
        }
    }

    fn limits() -> FeedbackLimits {
        FeedbackLimits {
            batch_size: 3,
            batch_interval: Duration::from_secs(15),
            ttl: Duration::from_secs(3600),
            lock_duration: Duration::from_secs(60),
            max_delivery_count: 2,
        }
    }

    fn at(base: Now, secs: u64) -> Now {
        Now {
            instant: base.instant + Duration::from_secs(secs),
            utc: base.utc + Duration::from_secs(secs),
        }
    }

    #[test]
    fn batches_by_count_and_by_interval() {
        let base = Now::current();
        let mut f = Feedback::new(limits(), base.instant);
        assert!(!f.add(record("a"), base));
        assert!(!f.add(record("a"), base));
        assert!(f.add(record("a"), base), "third record fills a batch");
        let batch = f.receive(base, "hub").unwrap();
        assert_eq!(batch.records.len(), 3);
        assert!(f.complete(&batch.lock_token));
        assert!(!f.add(record("b"), at(base, 1)));
        assert!(!f.tick(at(base, 14)));
        assert!(f.tick(at(base, 15)), "15 s after the last batch");
        let batch = f.receive(at(base, 15), "hub").unwrap();
        assert_eq!(batch.records.len(), 1);
        assert!(f.complete(&batch.lock_token));
        // Idle for long: the window opens at the first record.
        assert!(!f.add(record("c"), at(base, 100)));
        assert!(!f.tick(at(base, 114)));
        assert!(f.tick(at(base, 115)));
    }

    #[test]
    fn locks_redelivery_and_completion() {
        let base = Now::current();
        let mut f = Feedback::new(limits(), base.instant);
        for _ in 0..3 {
            f.add(record("a"), base);
        }
        let first = f.receive(base, "hub").unwrap();
        assert!(f.receive(base, "hub").is_none(), "locked");
        assert!(f.tick(at(base, 60)), "lock ended: available again");
        let second = f.receive(at(base, 60), "hub").unwrap();
        assert_eq!(second.delivery_count, 2);
        assert!(!f.complete(&first.lock_token), "old lock token");
        assert!(!f.tick(at(base, 120)), "dropped after 2 deliveries");
        assert!(f.receive(at(base, 120), "hub").is_none());
        for _ in 0..3 {
            f.add(record("a"), at(base, 130));
        }
        let third = f.receive(at(base, 130), "hub").unwrap();
        assert!(f.complete(&third.lock_token));
        assert!(f.receive(at(base, 130), "hub").is_none());
    }

    #[test]
    fn deleting_a_device_drops_its_feedback() {
        let base = Now::current();
        let mut f = Feedback::new(limits(), base.instant);
        f.add(record("a"), base);
        f.add(record("b"), base);
        f.drop_device("a");
        assert_eq!(f.pending_len(), 1);
    }
}
