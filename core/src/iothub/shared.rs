//! What the device client's handles (the client, each received message) and its connection
//! task share: the completion bookkeeping (MQTT's in-order PUBACKs, AMQP's per-message
//! settlements), the connection state, why the client stopped, and the counters.
//!
//! The completions ([`AckState`]) are recorded by the application under a lock and taken by
//! the connection task, which alone writes PUBACKs: a PUBACK released for one connection is
//! never written on another (the task keeps only those of the current connection).

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::{Notify, watch};

use super::completion::{CompleteOutcome, InOrderAcks, Ticket};
use super::settle::Settlements;
use crate::client::ConnectionState;
use crate::protocol::errors::Error;

/// Counters of a client's life, for soak tests and monitoring.
///
/// ```no_run
/// # async fn demo(client: mqstate::iothub::DeviceClient) {
/// let stats = client.stats();
/// println!("{} received, {} acknowledged", stats.received, stats.acknowledged);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceStats {
    /// Messages received (redeliveries included).
    pub received: u64,
    /// Of those, recognised as redeliveries (DUP flag, or a message id seen before).
    pub redelivered: u64,
    /// Completions sent: PUBACKs (MQTT, released in order) or accepted dispositions (AMQP).
    pub acknowledged: u64,
    /// Rejections sent (AMQP only).
    pub rejected: u64,
    /// Abandons sent (AMQP only).
    pub abandoned: u64,
    /// Settlements that came too late ([`crate::Error::LockLost`]): the connection their
    /// message arrived on was gone, or the hub had delivered the message again since (its lock
    /// timed out).
    pub stale_completions: u64,
    /// Connections made (the first included).
    pub connections: u64,
    /// SAS token renewals: reconnections with a fresh token (MQTT), or fresh tokens put on
    /// `$cbs` on the open connection (AMQP).
    pub token_renewals: u64,
    /// Messages whose property bag could not be decoded (reported and acknowledged).
    pub malformed: u64,
}

/// The live counters behind [`DeviceStats`] (atomics: the task and the handles count).
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) received: AtomicU64,
    pub(super) redelivered: AtomicU64,
    pub(super) acknowledged: AtomicU64,
    pub(super) rejected: AtomicU64,
    pub(super) abandoned: AtomicU64,
    pub(super) stale_completions: AtomicU64,
    pub(super) connections: AtomicU64,
    pub(super) token_renewals: AtomicU64,
    pub(super) malformed: AtomicU64,
}

impl Counters {
    /// Adds one to a counter.
    pub(super) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub(super) fn snapshot(&self) -> DeviceStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DeviceStats {
            received: l(&self.received),
            redelivered: l(&self.redelivered),
            acknowledged: l(&self.acknowledged),
            rejected: l(&self.rejected),
            abandoned: l(&self.abandoned),
            stale_completions: l(&self.stale_completions),
            connections: l(&self.connections),
            token_renewals: l(&self.token_renewals),
            malformed: l(&self.malformed),
        }
    }
}

/// Completions waiting for the connection task.
#[derive(Debug, Default)]
pub(super) struct AckState {
    pub(super) acks: InOrderAcks,
    /// Released packet ids, with the connection they belong to.
    to_send: VecDeque<(u64, u16)>,
    pub(super) closed: bool,
}

impl AckState {
    /// Records a message that arrived (QoS 1) on the current connection; the PUBACKs its
    /// arrival released (it superseded an older copy) join those to send.
    pub(super) fn arrived(&mut self, pkid: u16, message_id: Option<&str>) -> Ticket {
        let (ticket, released) = self.acks.arrived(pkid, message_id);
        self.queue(ticket.connection, released);
        ticket
    }

    /// Completes the message of `ticket`; the PUBACKs it released join those to send.
    pub(super) fn complete(&mut self, ticket: Ticket) -> CompleteOutcome {
        let outcome = self.acks.complete(ticket);
        if let CompleteOutcome::Released(ids) = &outcome {
            self.queue(ticket.connection, ids.iter().copied());
        }
        outcome
    }

    fn queue(&mut self, connection: u64, pkids: impl IntoIterator<Item = u16>) {
        self.to_send
            .extend(pkids.into_iter().map(|pkid| (connection, pkid)));
    }

    /// Takes the released PUBACKs into `batch`: those of the current connection, in order;
    /// those of an older connection are dropped (the hub redelivers their messages).
    pub(super) fn take_current(&mut self, batch: &mut Vec<u16>) {
        let current = self.acks.connection();
        batch.extend(
            self.to_send
                .drain(..)
                .filter(|&(connection, _)| connection == current)
                .map(|(_, pkid)| pkid),
        );
    }

    /// The client stopped: no completion is recorded any more, none is sent.
    pub(super) fn close(&mut self) {
        self.closed = true;
        self.acks.new_connection();
        self.to_send.clear();
    }
}

/// What the application's handles and the connection task share.
pub(super) struct Shared {
    pub(super) device_id: String,
    acks: Mutex<AckState>,
    /// AMQP's per-message settlements (unused over MQTT).
    settlements: Mutex<Settlements>,
    /// Wakes the connection task (a completion released PUBACKs or queued a settlement,
    /// telemetry to send).
    pub(super) wake: Notify,
    pub(super) state: watch::Sender<ConnectionState>,
    /// Why the client stopped, when it stopped on its own (authentication refused...).
    fatal: Mutex<Option<Error>>,
    pub(super) counters: Counters,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("device_id", &self.device_id)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// A device's shared state before its first connection.
    pub(super) fn new(device_id: String) -> Self {
        Shared {
            device_id,
            acks: Mutex::new(AckState::default()),
            settlements: Mutex::new(Settlements::default()),
            wake: Notify::new(),
            state: watch::channel(ConnectionState::Connecting).0,
            fatal: Mutex::new(None),
            counters: Counters::default(),
        }
    }

    pub(super) fn acks(&self) -> MutexGuard<'_, AckState> {
        // A panic while holding this lock cannot leave it inconsistent (no partial updates
        // across awaits), so a poisoned lock is used as is.
        self.acks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The AMQP settlements (same poisoning rule as [`Shared::acks`]).
    pub(super) fn settlements(&self) -> MutexGuard<'_, Settlements> {
        self.settlements.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records why the client stopped (what later calls report).
    pub(super) fn stop(&self, error: Error) {
        *self.fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(error);
    }

    /// What a call on a stopped client reports: why it stopped, or that it was closed.
    pub(super) fn closed_error(&self) -> Error {
        self.fatal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| Error::Disconnected("the device client is closed".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_current_connections_pubacks_are_sent() {
        let mut state = AckState::default();
        let a = state.arrived(1, Some("a"));
        let b = state.arrived(2, Some("b"));
        // Completed out of order: nothing leaves until the first is completed.
        assert_eq!(state.complete(b), CompleteOutcome::Released(vec![]));
        assert_eq!(state.complete(a), CompleteOutcome::Released(vec![1, 2]));
        // Released, then the connection dropped before the task wrote them.
        let c = state.arrived(3, None);
        assert_eq!(state.complete(c), CompleteOutcome::Released(vec![3]));
        state.acks.new_connection();
        let d = state.arrived(1, None);
        assert_eq!(state.complete(d), CompleteOutcome::Released(vec![1]));
        let mut batch = Vec::new();
        state.take_current(&mut batch);
        assert_eq!(batch, vec![1], "the older connection's 1, 2, 3 are dropped");
        batch.clear();
        state.take_current(&mut batch);
        assert!(batch.is_empty(), "taken once");
    }

    #[test]
    fn a_redelivery_on_the_same_connection_releases_what_waited_behind_the_old_copy() {
        let mut state = AckState::default();
        let old = state.arrived(1, Some("m"));
        let next = state.arrived(2, Some("n"));
        assert_eq!(state.complete(next), CompleteOutcome::Released(vec![]));
        // The hub's lock on "m" timed out: it comes again, and 2 is no longer held by 1.
        let new = state.arrived(3, Some("m"));
        let mut batch = Vec::new();
        state.take_current(&mut batch);
        assert_eq!(batch, vec![2]);
        assert_eq!(state.complete(old), CompleteOutcome::Superseded);
        assert_eq!(state.complete(new), CompleteOutcome::Released(vec![3]));
    }

    #[test]
    fn closing_drops_what_was_not_sent() {
        let mut state = AckState::default();
        let a = state.arrived(1, None);
        assert_eq!(state.complete(a), CompleteOutcome::Released(vec![1]));
        state.close();
        assert!(state.closed);
        let mut batch = Vec::new();
        state.take_current(&mut batch);
        assert!(batch.is_empty());
        assert_eq!(state.complete(a), CompleteOutcome::Stale);
    }

    #[test]
    fn a_stopped_client_reports_why() {
        let shared = Shared::new("dev1".into());
        assert_eq!(
            shared.closed_error().to_string(),
            "disconnected: the device client is closed"
        );
        shared.stop(Error::Authentication("wrong key".into()));
        assert_eq!(
            shared.closed_error().to_string(),
            "authentication failed: wrong key"
        );
    }

    #[test]
    fn counters_are_reported_as_counted() {
        let counters = Counters::default();
        Counters::bump(&counters.received);
        Counters::bump(&counters.received);
        Counters::bump(&counters.malformed);
        let stats = counters.snapshot();
        assert_eq!(stats.received, 2);
        assert_eq!(stats.malformed, 1);
        assert_eq!(stats.acknowledged, 0);
    }
}
