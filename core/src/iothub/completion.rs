//! In-order acknowledgement of received messages.
//!
//! MQTT 3.1.1 (section 4.6) requires a client to send PUBACKs in the order the PUBLISH
//! packets arrived, and IoT Hub completes a message when its PUBACK arrives. The application
//! may complete messages in any order, so completions are recorded here and released in
//! arrival order: completing message 3 before 2 holds 3's PUBACK until 2 is completed.
//!
//! Packet ids belong to one connection: after a reconnection the hub delivers the unacknowledged
//! messages again, with new packet ids, so completions of messages from an older connection
//! cannot be sent any more ([`CompleteOutcome::Stale`]). This is a pure state machine; the
//! connection task owns the socket.

use std::collections::VecDeque;

/// What happened to a completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CompleteOutcome {
    /// Recorded; these packet ids may now be acknowledged, in this order (possibly none,
    /// when an earlier message is still open).
    Released(Vec<u16>),
    /// The message was already completed.
    AlreadyCompleted,
    /// The message came from an earlier connection: its PUBACK can no longer be sent; the hub
    /// will deliver it again.
    Stale,
}

/// A received message's place in the order: its connection and its arrival number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket {
    pub(crate) connection: u64,
    pub(crate) seq: u64,
}

/// The open (not yet acknowledged) messages of the current connection, in arrival order.
#[derive(Debug, Default)]
pub(crate) struct InOrderAcks {
    connection: u64,
    /// Arrival number of the front of `open`.
    front_seq: u64,
    /// (packet id, completed?) for every message not yet released.
    open: VecDeque<(u16, bool)>,
}

impl InOrderAcks {
    /// Records a message that arrived on the current connection.
    pub(crate) fn arrived(&mut self, pkid: u16) -> Ticket {
        let seq = self.front_seq + self.open.len() as u64;
        self.open.push_back((pkid, false));
        Ticket {
            connection: self.connection,
            seq,
        }
    }

    /// The connection dropped: every open message will be redelivered.
    pub(crate) fn new_connection(&mut self) {
        self.connection += 1;
        self.front_seq += self.open.len() as u64;
        self.open.clear();
    }

    /// The current connection's number.
    pub(crate) fn connection(&self) -> u64 {
        self.connection
    }

    /// Messages received on this connection and not yet acknowledged (held completions
    /// included).
    pub(crate) fn open(&self) -> usize {
        self.open.len()
    }

    /// Completes the message of `ticket`.
    pub(crate) fn complete(&mut self, ticket: Ticket) -> CompleteOutcome {
        if ticket.connection != self.connection {
            return CompleteOutcome::Stale;
        }
        let Some(index) = ticket.seq.checked_sub(self.front_seq) else {
            return CompleteOutcome::AlreadyCompleted;
        };
        let Some(slot) = usize::try_from(index)
            .ok()
            .and_then(|i| self.open.get_mut(i))
        else {
            return CompleteOutcome::AlreadyCompleted;
        };
        if slot.1 {
            return CompleteOutcome::AlreadyCompleted;
        }
        slot.1 = true;
        let mut released = Vec::new();
        while let Some(&(pkid, true)) = self.open.front() {
            released.push(pkid);
            self.open.pop_front();
            self.front_seq += 1;
        }
        CompleteOutcome::Released(released)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn out_of_order_completions_are_released_in_order() {
        let mut acks = InOrderAcks::default();
        let t: Vec<Ticket> = [10, 11, 12].into_iter().map(|p| acks.arrived(p)).collect();
        assert_eq!(acks.complete(t[2]), CompleteOutcome::Released(vec![]));
        assert_eq!(acks.complete(t[1]), CompleteOutcome::Released(vec![]));
        assert_eq!(acks.open(), 3);
        assert_eq!(
            acks.complete(t[0]),
            CompleteOutcome::Released(vec![10, 11, 12])
        );
        assert_eq!(acks.open(), 0);
        assert_eq!(acks.complete(t[1]), CompleteOutcome::AlreadyCompleted);
    }

    #[test]
    fn completions_from_an_old_connection_are_stale() {
        let mut acks = InOrderAcks::default();
        let old = acks.arrived(1);
        acks.new_connection();
        assert_eq!(acks.complete(old), CompleteOutcome::Stale);
        let new = acks.arrived(1);
        assert_eq!(acks.complete(new), CompleteOutcome::Released(vec![1]));
    }

    proptest! {
        /// Any completion order releases every packet id exactly once, in arrival order.
        #[test]
        fn any_order_releases_everything_in_arrival_order(
            order in Just((0..40usize).collect::<Vec<_>>()).prop_shuffle()
        ) {
            let mut acks = InOrderAcks::default();
            let tickets: Vec<Ticket> = (0..40u16).map(|p| acks.arrived(p)).collect();
            let mut released = Vec::new();
            for i in order {
                match acks.complete(tickets[i]) {
                    CompleteOutcome::Released(ids) => released.extend(ids),
                    other => prop_assert!(false, "{other:?}"),
                }
            }
            prop_assert_eq!(released, (0..40u16).collect::<Vec<_>>());
        }
    }
}
