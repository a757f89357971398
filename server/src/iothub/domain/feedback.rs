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

/// A batch waiting to be received and completed.
#[derive(Debug, Clone)]
pub(crate) struct StoredBatch {
    /// Its number (from 1; [`PENDING`] names the pending records in the data dir).
    pub id: u64,
    pub enqueued_utc: SystemTime,
    pub expires_at: Instant,
    pub records: Vec<FeedbackRecord>,
    /// The lock token of the service that received it, and the lock's end.
    pub lock: Option<(String, Instant)>,
    pub delivery_count: u32,
}

/// The number that names the pending (not yet batched) records among the changes.
pub(crate) const PENDING: u64 = 0;

/// Pending records and made batches.
#[derive(Debug)]
pub(crate) struct Feedback {
    limits: FeedbackLimits,
    pending: Vec<FeedbackRecord>,
    last_batch_at: Instant,
    batches: VecDeque<StoredBatch>,
    next_lock: u64,
    next_batch_id: u64,
    /// Whether changes are recorded in `changed` (with a data dir).
    track: bool,
    /// Batches changed ([`PENDING`] for the pending records) since the last `take_changes`.
    changed: Vec<u64>,
}

impl Feedback {
    pub(crate) fn new(limits: FeedbackLimits, now: Instant) -> Feedback {
        Feedback {
            limits,
            pending: Vec::new(),
            last_batch_at: now,
            batches: VecDeque::new(),
            next_lock: 0,
            next_batch_id: 1,
            track: false,
            changed: Vec::new(),
        }
    }

    /// Feedback read back from the data dir (batches oldest first), recording its changes
    /// from now on. Locked batches stay locked, with their tokens, until their lock ends.
    pub(crate) fn restored(
        limits: FeedbackLimits,
        now: Instant,
        pending: Vec<FeedbackRecord>,
        batches: Vec<StoredBatch>,
    ) -> Feedback {
        let next_batch_id = batches.iter().map(|b| b.id).max().unwrap_or(0) + 1;
        Feedback {
            pending,
            batches: batches.into(),
            next_batch_id,
            track: true,
            ..Feedback::new(limits, now)
        }
    }

    fn mark(&mut self, id: u64) {
        if self.track {
            self.changed.push(id);
        }
    }

    /// The batches changed since the last call ([`PENDING`] for the pending records).
    pub(crate) fn take_changes(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.changed)
    }

    /// The records not yet batched.
    pub(crate) fn pending(&self) -> &[FeedbackRecord] {
        &self.pending
    }

    /// A batch by number, if it is still waiting.
    pub(crate) fn batch(&self, id: u64) -> Option<&StoredBatch> {
        self.batches.iter().find(|b| b.id == id)
    }

    /// Adds a record; returns whether a batch became available.
    pub(crate) fn add(&mut self, record: FeedbackRecord, now: Now) -> bool {
        if self.pending.is_empty() && now.instant >= self.last_batch_at + self.limits.batch_interval
        {
            // Idle for longer than the interval: this record opens a new window.
            self.last_batch_at = now.instant;
        }
        self.pending.push(record);
        self.mark(PENDING);
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
        let id = self.next_batch_id;
        self.next_batch_id += 1;
        self.mark(id);
        self.mark(PENDING);
        self.batches.push_back(StoredBatch {
            id,
            enqueued_utc: now.utc,
            expires_at: now.instant + self.limits.ttl,
            records,
            lock: None,
            delivery_count: 0,
        });
    }

    /// Batches pending records whose interval passed, ends timed-out locks, drops expired
    /// batches and those received too often. Returns whether a batch became available.
    pub(crate) fn tick(&mut self, now: Now) -> bool {
        let mut available = false;
        if !self.pending.is_empty()
            && now.instant >= self.last_batch_at + self.limits.batch_interval
        {
            let records = std::mem::take(&mut self.pending);
            self.make_batch(records, now);
            available = true;
        }
        let max = self.limits.max_delivery_count;
        let mut changed = Vec::new();
        self.batches.retain_mut(|b| {
            if b.expires_at <= now.instant {
                tracing::info!(
                    records = b.records.len(),
                    "feedback batch expired unreceived"
                );
                changed.push(b.id);
                return false;
            }
            if b.lock
                .as_ref()
                .is_some_and(|(_, until)| *until <= now.instant)
            {
                b.lock = None;
                changed.push(b.id);
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
        for id in changed {
            self.mark(id);
        }
        available
    }

    /// Locks and returns the oldest batch nobody holds.
    pub(crate) fn receive(&mut self, now: Now, user_id: &str) -> Option<FeedbackBatch> {
        let lock_duration = self.limits.lock_duration;
        self.next_lock += 1;
        let token = format!("{:016x}-{}", self.next_lock, fastish_nonce(now));
        let batch = self.batches.iter_mut().find(|b| b.lock.is_none())?;
        batch.lock = Some((token.clone(), now.instant + lock_duration));
        batch.delivery_count = batch.delivery_count.saturating_add(1);
        let (id, batch) = (batch.id, batch.clone());
        self.mark(id);
        Some(FeedbackBatch {
            lock_token: token,
            enqueued_time_utc: format_time(batch.enqueued_utc),
            user_id: user_id.to_owned(),
            content_type: FEEDBACK_CONTENT_TYPE.to_owned(),
            delivery_count: batch.delivery_count,
            records: batch.records,
        })
    }

    fn position(&self, token: &str) -> Option<usize> {
        self.batches
            .iter()
            .position(|b| b.lock.as_ref().is_some_and(|(t, _)| t == token))
    }

    /// Completes (removes) a locked batch; false if the token is unknown or its lock ended.
    pub(crate) fn complete(&mut self, token: &str) -> bool {
        match self.position(token).and_then(|i| self.batches.remove(i)) {
            Some(b) => {
                self.mark(b.id);
                true
            }
            None => false,
        }
    }

    /// Abandons a locked batch (available again at once); false if the token is unknown.
    pub(crate) fn abandon(&mut self, token: &str) -> bool {
        match self.position(token).and_then(|i| self.batches.get_mut(i)) {
            Some(b) => {
                b.lock = None;
                let id = b.id;
                self.mark(id);
                true
            }
            None => false,
        }
    }

    /// Drops the pending feedback of a deleted device: records not yet batched, and records in
    /// batches nobody has received yet.
    pub(crate) fn drop_device(&mut self, device: &str) {
        self.pending.retain(|r| r.device_id != device);
        self.mark(PENDING);
        let mut changed = Vec::new();
        for b in self.batches.iter_mut().filter(|b| b.lock.is_none()) {
            let before = b.records.len();
            b.records.retain(|r| r.device_id != device);
            if b.records.len() != before {
                changed.push(b.id);
            }
        }
        self.batches.retain(|b| !b.records.is_empty());
        for id in changed {
            self.mark(id);
        }
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
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
    pub(crate) fn pending_len(&self) -> usize {
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
    use crate::iothub::domain::message::FeedbackStatus;

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
    fn unreceived_batches_expire_after_the_feedback_ttl() {
        let base = Now::current();
        let mut f = Feedback::new(limits(), base.instant);
        for _ in 0..3 {
            f.add(record("a"), base);
        }
        f.tick(at(base, 3599));
        assert!(f.next_deadline().is_some());
        f.tick(at(base, 3600));
        assert!(
            f.receive(at(base, 3600), "hub").is_none(),
            "expired unreceived"
        );
        assert!(f.next_deadline().is_none());
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
