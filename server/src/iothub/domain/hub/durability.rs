//! Durability: group commit of the journaled changes to the hub's file in the data dir, the wait for a change to be on disk, and the restore of a hub from that file.

use super::*;

impl IotHub {
    /// Something changed: deadlines may have moved, and there may be something to write.
    pub(super) fn changed(&self) {
        self.inner.timer.notify_one();
        if let Some(d) = &self.inner.durable {
            d.wake.notify_one();
        }
    }

    /// Waits until every change made so far (by this caller or any other) is on disk: what
    /// the admin API does before it acknowledges a send, a completion or a registry change.
    /// At once without a data dir. Changes made meanwhile share the same commit (group
    /// commit), so concurrent callers cost one fsync, not one each.
    ///
    /// ```no_run
    /// # async fn demo(hub: mqstate_server::iothub::IotHub) -> Result<(), mqstate_server::iothub::IotHubError> {
    /// use mqstate_server::iothub::C2dMessage;
    /// let receipt = hub.send("dev1", C2dMessage::new("hello").message_id("m1"))?;
    /// hub.persisted().await?; // now it survives a crash
    /// # let _ = receipt; Ok(()) }
    /// ```
    pub async fn persisted(&self) -> Result<(), IotHubError> {
        let Some(d) = &self.inner.durable else {
            return Ok(());
        };
        let ticket = self.state().taken + 1;
        d.wake.notify_one();
        self.wait_durable(ticket).await
    }

    /// Waits until the commit `ticket` is on disk (at once for 0 or without a data dir).
    pub(crate) async fn wait_durable(&self, ticket: u64) -> Result<(), IotHubError> {
        let Some(d) = &self.inner.durable else {
            return Ok(());
        };
        if ticket == 0 {
            return Ok(());
        }
        let mut rx = d.status.subscribe();
        loop {
            {
                let status = rx.borrow_and_update();
                if status.committed >= ticket {
                    return Ok(());
                }
                if let Some((failed, why)) = &status.failed
                    && *failed >= ticket
                {
                    return Err(IotHubError::NotPersisted(why.clone()));
                }
                if status.stopped {
                    return Err(IotHubError::NotPersisted("the hub stopped".into()));
                }
            }
            if rx.changed().await.is_err() {
                return Err(IotHubError::NotPersisted("the hub stopped".into()));
            }
        }
    }

    /// Takes every change recorded so far as the next batch: its number, the keys (to record
    /// again if the commit fails), their state now, and the sequence counter.
    pub(super) fn take_writes(&self) -> (u64, Vec<Key>, Vec<Write>, u64) {
        let now = Now::current();
        let mut state = self.state();
        state.taken += 1;
        let ticket = state.taken;
        let mut keys = std::mem::take(&mut state.journal);
        for (id, d) in &mut state.devices {
            keys.extend(
                d.queue
                    .take_changes()
                    .into_iter()
                    .map(|seq| Key::Message(id.clone(), seq)),
            );
        }
        keys.extend(state.feedback.take_changes().into_iter().map(Key::Feedback));
        // Each key once, at its last place (a device deleted then added again is deleted,
        // then written).
        let mut seen = std::collections::HashSet::new();
        let mut unique: Vec<Key> = keys
            .into_iter()
            .rev()
            .filter(|k| seen.insert(k.clone()))
            .collect();
        unique.reverse();
        let mut writes = Vec::with_capacity(unique.len());
        for key in &unique {
            match key {
                Key::Device(id) => {
                    if let Some(d) = state.devices.get(id) {
                        writes.push(Write::PutDevice(
                            id.clone(),
                            durable::encode_device(&d.device),
                        ));
                    }
                }
                Key::Removed(id) => writes.push(Write::RemoveDevice(id.clone())),
                Key::Message(id, seq) => {
                    match state.devices.get(id).and_then(|d| d.queue.item(*seq)) {
                        Some(item) => writes.push(Write::PutMessage(
                            id.clone(),
                            *seq,
                            durable::encode_message(&item, now),
                        )),
                        None => writes.push(Write::DeleteMessage(id.clone(), *seq)),
                    }
                }
                Key::Feedback(PENDING) => writes.push(Write::PutFeedback(
                    PENDING,
                    durable::encode_pending(state.feedback.pending()),
                )),
                Key::Feedback(id) => match state.feedback.batch(*id) {
                    Some(b) => writes.push(Write::PutFeedback(*id, durable::encode_batch(b, now))),
                    None => writes.push(Write::DeleteFeedback(*id)),
                },
            }
        }
        (ticket, unique, writes, state.next_sequence)
    }

    /// Commits the changes recorded so far (one transaction); a failed commit leaves them
    /// recorded for the next one, and fails the callers waiting for this one.
    pub(super) async fn commit_once(&self) {
        let Some(d) = &self.inner.durable else {
            return;
        };
        let (ticket, keys, writes, next_sequence) = self.take_writes();
        let result = if writes.is_empty() {
            Ok(())
        } else {
            let file = d.file.clone();
            tokio::task::spawn_blocking(move || file.commit(&writes, next_sequence))
                .await
                .unwrap_or_else(|e| {
                    Err(crate::persist::CommitFailed {
                        file: d.file.path().display().to_string(),
                        reason: format!("the commit task failed: {e}"),
                    })
                })
        };
        match result {
            Ok(()) => d.status.send_modify(|s| s.committed = ticket),
            Err(e) => {
                tracing::error!(error = %e, "iothub: the hub's changes could not be persisted; retrying with the next commit");
                {
                    let mut state = self.state();
                    let mut again = keys;
                    again.append(&mut state.journal);
                    state.journal = again;
                }
                d.status
                    .send_modify(|s| s.failed = Some((ticket, e.to_string())));
            }
        }
    }

    /// Commits the hub's changes in batches until `stop` fires (then once more): while one
    /// commit is on its way to the disk, new changes gather for the next one.
    pub(crate) async fn run_committer(self, mut stop: watch::Receiver<bool>) {
        let Some(d) = &self.inner.durable else {
            return;
        };
        loop {
            tokio::select! {
                () = d.wake.notified() => {}
                // A change whose wake-up was missed is still written soon.
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => {
                    // The last changes (connections closing release their locks), then the
                    // file is released for the next server.
                    self.commit_once().await;
                    d.file.close();
                    d.status.send_modify(|s| s.stopped = true);
                    return;
                }
            }
            self.commit_once().await;
        }
    }
}

/// Fills a new hub's state from its data dir: devices, queues (finished messages in the order
/// they finished), feedback; changes are recorded from now on.
pub(super) fn restore(
    state: &mut State,
    loaded: durable::Loaded,
    limits: FeedbackLimits,
    now: Now,
) -> Result<(), IotHubError> {
    state.track = true;
    state.next_sequence = loaded.next_sequence.max(1);
    for device in loaded.devices {
        state.devices.insert(
            device.device_id.clone(),
            DeviceState {
                device,
                queue: DeviceQueue::new(true),
                session: None,
                connection: None,
                telemetry: VecDeque::new(),
                connection_changed: None,
                last_activity: None,
            },
        );
    }
    let mut finished: BTreeMap<String, Vec<queue::Finished>> = BTreeMap::new();
    for (id, seq, record) in loaded.messages {
        let Some(device) = state.devices.get_mut(&id) else {
            // A message of a device that is gone (cannot happen: they go in one transaction).
            state.journal.push(Key::Message(id, seq));
            continue;
        };
        match durable::decode_message(&id, seq, record, now)? {
            durable::Restored::Live {
                stored,
                delivery_count,
                was_locked,
            } => device.queue.restore(*stored, delivery_count, was_locked),
            durable::Restored::Finished(f) => finished.entry(id).or_default().push(f),
        }
    }
    for (id, mut list) in finished {
        list.sort_by_key(|f| (f.at, f.stored.sequence_number));
        if let Some(device) = state.devices.get_mut(&id) {
            for f in list {
                device.queue.restore_finished(f);
            }
        }
    }
    let batches = loaded
        .batches
        .into_iter()
        .map(|(id, b)| durable::decode_batch(id, b, now))
        .collect();
    state.feedback = Feedback::restored(limits, now.instant, loaded.pending, batches);
    Ok(())
}
