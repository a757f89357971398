//! Cloud-to-device sends and settlement: send, queue info, purge, hand messages to connected sessions (`pump`), lock-token receives and their settlement; the outcomes become feedback.

use super::*;

impl IotHub {
    /// Sends a cloud-to-device message: checked, then Enqueued (and delivered at once if the
    /// device is connected and subscribed). Refused, with nothing changed, for an unknown
    /// device, a full queue, a body over the limit, a bad TTL or property name.
    pub fn send(&self, device_id: &str, message: C2dMessage) -> Result<SendReceipt, IotHubError> {
        message.check(self.inner.config.max_message_size)?;
        let now = Now::current();
        let mut state = self.state();
        let sequence_number = state.next_sequence;
        let stored = queue::store(message, sequence_number, now, self.inner.config.default_ttl)?;
        let device = state.device_mut(device_id)?;
        let stored = device
            .queue
            .enqueue(stored, device_id, self.inner.config.max_queue_depth)?;
        let receipt = SendReceipt {
            device_id: device_id.to_owned(),
            message_id: stored.message.message_id.clone(),
            sequence_number,
            enqueued_time_utc: format_time(stored.enqueued_utc),
            expiry_time_utc: format_time(stored.expiry_utc),
            queue_depth: device.queue.depth(),
        };
        if stored.message.message_id.is_none() {
            tracing::warn!(device = %device_id, sequence_number,
                "iothub: message sent without a message id: its feedback cannot be correlated");
        }
        state.next_sequence += 1;
        self.pump(&mut state, device_id, now);
        drop(state);
        self.changed();
        Ok(receipt)
    }

    /// The device's queue: depth, messages and their states, recently finished messages.
    pub fn queue(&self, device_id: &str) -> Result<QueueInfo, IotHubError> {
        let state = self.state();
        let device = state.device(device_id)?;
        Ok(device
            .queue
            .info(device_id, self.inner.config.max_queue_depth))
    }

    /// Purges the device's queue (every message dead-lettered with `Purged` feedback); returns
    /// how many messages were purged.
    pub fn purge(&self, device_id: &str) -> Result<usize, IotHubError> {
        let now = Now::current();
        let mut state = self.state();
        let device = state.device_mut(device_id)?;
        let outcomes = device.queue.purge(now);
        let generation = device.device.generation_id.clone();
        let count = outcomes.len();
        self.record_outcomes(&mut state, device_id, &generation, outcomes, now);
        drop(state);
        self.changed();
        tracing::info!(device = %device_id, count, "iothub: queue purged");
        Ok(count)
    }

    pub(super) fn record_outcomes(
        &self,
        state: &mut State,
        device_id: &str,
        generation: &str,
        outcomes: Vec<Outcome>,
        now: Now,
    ) {
        let mut made = false;
        for o in outcomes {
            tracing::debug!(device = %device_id, seq = o.stored.sequence_number, status = ?o.status, "iothub: message finished");
            if o.stored.message.ack.wants(o.status) {
                let record = FeedbackRecord {
                    original_message_id: o.stored.message.message_id.clone(),
                    enqueued_time_utc: format_time(o.at),
                    status_code: o.status,
                    description: o.status.description().to_owned(),
                    device_id: device_id.to_owned(),
                    device_generation_id: generation.to_owned(),
                };
                if state.recent_feedback.len() == RECENT_FEEDBACK {
                    state.recent_feedback.pop_front();
                }
                state.recent_feedback.push_back(record.clone());
                made |= state.feedback.add(record, now);
            }
        }
        if made {
            self.inner.feedback_ready.notify_waiters();
        }
    }

    /// Locks and sends every Enqueued message of the device if it is connected and subscribed
    /// (and, with a QoS 0 subscription, completes it at once: there will be no PUBACK).
    pub(super) fn pump(&self, state: &mut State, device_id: &str, now: Now) {
        // Called wherever a message may have become Enqueued (send, lock end, abandon): the
        // lock-token receivers (AMQP links, HTTPS long polls) look too.
        self.inner.devicebound_ready.notify_waiters();
        // The deliveries wait for the commit that holds their locks and counts.
        let after = if self.inner.durable.is_some() {
            state.taken + 1
        } else {
            0
        };
        let Some(device) = state.devices.get_mut(device_id) else {
            return;
        };
        let Some(connection) = device.connection.as_ref().filter(|c| !c.by_lock_token) else {
            return;
        };
        let at_most_once = match device.session {
            Some(Subscription::AtLeastOnce) => false,
            Some(Subscription::AtMostOnce) => true,
            Some(Subscription::None) | None => return,
        };
        let connection_id = connection.id;
        let deliveries = device
            .queue
            .deliver(connection_id, now, self.inner.config.lock_timeout);
        if !deliveries.is_empty()
            && let Some(d) = &self.inner.durable
        {
            d.wake.notify_one();
        }
        let mut outcomes = Vec::new();
        for d in deliveries {
            let _ = connection.tx.send(ToConnection::Deliver {
                stored: d.stored.clone(),
                lock: d.lock,
                at_most_once,
                after,
            });
            if at_most_once {
                outcomes.extend(device.queue.complete(connection_id, d.lock, now));
            }
        }
        if !outcomes.is_empty() {
            let generation = device.device.generation_id.clone();
            self.record_outcomes(state, device_id, &generation, outcomes, now);
        }
    }

    // ----- cloud-to-device by lock token (AMQP, HTTPS devices) -----

    /// Takes the device's oldest Enqueued message for a transport that settles by lock token
    /// (AMQP receiver links, HTTPS `GET .../messages/deviceBound`): locks it for the lock
    /// timeout under a new lock token and counts the delivery. Waits up to `wait` for one
    /// (`Duration::ZERO`: answer at once, as HTTPS does with 204); `Ok(None)` when none came.
    ///
    /// It returns once the lock and the delivery count are on disk (with a data dir), as an
    /// MQTT delivery waits for them, so a crash can never deliver a message twice uncounted.
    /// Cancel-safe: dropping the future before it returns leaves the queue as it was (a message
    /// taken but not yet handed out is put back uncounted), so an AMQP link may `select!` on
    /// it while it has credit (push) and an HTTPS handler may call it once (pull).
    pub async fn receive_locked(
        &self,
        device_id: &str,
        wait: Duration,
    ) -> Result<Option<LockedMessage>, IotHubError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.inner.devicebound_ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let taken = {
                let now = Now::current();
                let mut state = self.state();
                let device = state.device_mut(device_id)?;
                device.last_activity = Some(now.utc);
                device
                    .queue
                    .deliver_locked(device_id, now, self.inner.config.lock_timeout)
            };
            if let Some(message) = taken {
                self.changed();
                let mut guard = Unhanded {
                    hub: self,
                    device_id,
                    lock_token: Some(message.lock_token.clone()),
                };
                self.persisted().await?;
                guard.lock_token = None;
                return Ok(Some(message));
            }
            // A notification missed between two looks would cost at most a second.
            let cap = tokio::time::Instant::now() + Duration::from_secs(1);
            let until = deadline.min(cap);
            if until <= tokio::time::Instant::now() {
                return Ok(None);
            }
            let _ = tokio::time::timeout_at(until, notified).await;
            if tokio::time::Instant::now() >= deadline {
                // One last look: a message may have come with the deadline.
                if !self.has_enqueued(device_id)? {
                    return Ok(None);
                }
            }
        }
    }

    pub(super) fn has_enqueued(&self, device_id: &str) -> Result<bool, IotHubError> {
        let state = self.state();
        let device = state.device(device_id)?;
        Ok(device.queue.has_enqueued(Now::current()))
    }

    /// Settles a message received with [`IotHub::receive_locked`]: complete, reject
    /// (dead-lettered, `Rejected` feedback when the ack mode asks for negative feedback) or
    /// abandon (Enqueued again at once, its delivery counted toward the max delivery count).
    /// [`IotHubError::MessageLockLost`] (HTTP 412, `DeviceMessageLockLost`) when the token
    /// locks no message of the device: unknown, already settled, or its lock timed out.
    /// The change is in memory when this returns; await [`IotHub::persisted`] before
    /// acknowledging it to the device.
    pub fn settle(
        &self,
        device_id: &str,
        lock_token: &str,
        settlement: Settlement,
    ) -> Result<(), IotHubError> {
        let now = Now::current();
        let mut state = self.state();
        let device = state.device_mut(device_id)?;
        device.last_activity = Some(now.utc);
        let outcome = device.queue.settle(
            device_id,
            lock_token,
            settlement,
            now,
            self.inner.config.max_delivery_count,
        )?;
        let generation = device.device.generation_id.clone();
        tracing::debug!(device = %device_id, lock_token, ?settlement, "iothub: message settled");
        self.record_outcomes(
            &mut state,
            device_id,
            &generation,
            outcome.into_iter().collect(),
            now,
        );
        if settlement == Settlement::Abandon {
            // Enqueued again: deliverable at once, over whichever transport asks.
            self.pump(&mut state, device_id, now);
        }
        drop(state);
        self.changed();
        Ok(())
    }

    // ----- feedback -----
}

/// Puts a message taken by [`IotHub::receive_locked`] back if the receive ends (cancelled,
/// or its lock not persisted) before handing it out.
pub(super) struct Unhanded<'a> {
    hub: &'a IotHub,
    device_id: &'a str,
    lock_token: Option<String>,
}

impl Drop for Unhanded<'_> {
    fn drop(&mut self) {
        let Some(token) = self.lock_token.take() else {
            return;
        };
        let mut state = self.hub.state();
        let put_back = state
            .devices
            .get_mut(self.device_id)
            .is_some_and(|d| d.queue.unreceive(&token));
        if put_back {
            let now = Now::current();
            self.hub.pump(&mut state, self.device_id, now);
        }
        drop(state);
        self.hub.changed();
    }
}
