//! In-order acknowledgement of received messages.
//!
//! MQTT 3.1.1 (section 4.6) requires a client to send PUBACKs in the order the PUBLISH
//! packets arrived, and IoT Hub completes a message when its PUBACK arrives. The application
//! may complete messages in any order, so completions are recorded here and released in
//! arrival order: completing message 3 before 2 holds 3's PUBACK until 2 is completed.
//!
//! Packet ids belong to one connection: after a reconnection the hub delivers the unacknowledged
//! messages again, with new packet ids, so completions of messages from an older connection
//! cannot be sent any more ([`CompleteOutcome::Stale`]).
//!
//! The hub also delivers a message again on the *same* connection when its lock times out (1
//! minute on IoT Hub) before the PUBACK came. The hub has then given up the first delivery's
//! packet id (it may even reuse it), so that copy must never be acknowledged; and if it stayed
//! in the order, an application that completes only the new copy (the natural thing to do)
//! would hold that copy's PUBACK, and every later one, behind a message that can no longer be
//! completed: nothing would be acknowledged again until the connection dropped. So the arrival
//! of a message id that a not yet acknowledged message of this connection carries
//! *supersedes* that older copy: it leaves the order without a PUBACK
//! ([`CompleteOutcome::Superseded`] for its late completion; a completion already recorded
//! but held behind an earlier message is dropped too, and the new copy must be completed). This is a pure state machine;
//! the connection task owns the socket.

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
    /// The hub delivered this message again on this connection (its lock timed out): this
    /// copy can no longer be acknowledged; the newer copy can.
    Superseded,
}

/// Where an open message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Received, not completed yet.
    Open,
    /// Completed: its PUBACK goes out when every earlier message is released.
    Completed,
    /// Delivered again since: released without a PUBACK.
    Superseded,
}

/// One message not yet released.
#[derive(Debug)]
struct Entry {
    pkid: u16,
    message_id: Option<String>,
    slot: Slot,
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
    /// Every message not yet released, in arrival order.
    open: VecDeque<Entry>,
    /// Arrival numbers of the last superseded messages already released, so that their late
    /// completion says what happened (bounded: lock timeouts are rare).
    superseded: VecDeque<u64>,
}

/// How many released superseded messages are remembered.
const SUPERSEDED_KEPT: usize = 1024;

impl InOrderAcks {
    /// Records a message that arrived on the current connection. A message with the same
    /// message id not yet acknowledged is superseded (see the module documentation); the
    /// packet ids that this releases are returned with the ticket.
    pub(crate) fn arrived(&mut self, pkid: u16, message_id: Option<&str>) -> (Ticket, Vec<u16>) {
        let mut released = Vec::new();
        if let Some(id) = message_id {
            let older = self
                .open
                .iter_mut()
                .find(|e| e.slot != Slot::Superseded && e.message_id.as_deref() == Some(id));
            if let Some(older) = older {
                older.slot = Slot::Superseded;
                released = self.release();
            }
        }
        let seq = self.front_seq + self.open.len() as u64;
        self.open.push_back(Entry {
            pkid,
            message_id: message_id.map(str::to_owned),
            slot: Slot::Open,
        });
        let ticket = Ticket {
            connection: self.connection,
            seq,
        };
        (ticket, released)
    }

    /// Pops the finished front of the order: the packet ids to acknowledge, in order.
    fn release(&mut self) -> Vec<u16> {
        let mut released = Vec::new();
        while let Some(front) = self.open.front() {
            match front.slot {
                Slot::Open => break,
                Slot::Completed => released.push(front.pkid),
                Slot::Superseded => {
                    if self.superseded.len() >= SUPERSEDED_KEPT {
                        self.superseded.pop_front();
                    }
                    self.superseded.push_back(self.front_seq);
                }
            }
            self.open.pop_front();
            self.front_seq += 1;
        }
        released
    }

    /// The connection dropped: every open message will be redelivered.
    pub(crate) fn new_connection(&mut self) {
        self.connection += 1;
        self.front_seq += self.open.len() as u64;
        self.superseded.clear();
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
            if self.superseded.contains(&ticket.seq) {
                return CompleteOutcome::Superseded;
            }
            return CompleteOutcome::AlreadyCompleted;
        };
        let Some(slot) = usize::try_from(index)
            .ok()
            .and_then(|i| self.open.get_mut(i))
        else {
            return CompleteOutcome::AlreadyCompleted;
        };
        match slot.slot {
            Slot::Completed => return CompleteOutcome::AlreadyCompleted,
            Slot::Superseded => return CompleteOutcome::Superseded,
            Slot::Open => slot.slot = Slot::Completed,
        }
        CompleteOutcome::Released(self.release())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn out_of_order_completions_are_released_in_order() {
        let mut acks = InOrderAcks::default();
        let t: Vec<Ticket> = [10, 11, 12]
            .into_iter()
            .map(|p| acks.arrived(p, None).0)
            .collect();
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
        let (old, _) = acks.arrived(1, Some("a"));
        acks.new_connection();
        assert_eq!(acks.complete(old), CompleteOutcome::Stale);
        let (new, _) = acks.arrived(1, Some("a"));
        assert_eq!(acks.complete(new), CompleteOutcome::Released(vec![1]));
    }

    #[test]
    fn a_redelivery_on_the_same_connection_supersedes_the_open_copy() {
        let mut acks = InOrderAcks::default();
        let (first, _) = acks.arrived(1, Some("m0"));
        let (m1, _) = acks.arrived(2, Some("m1"));
        assert_eq!(acks.complete(m1), CompleteOutcome::Released(vec![]));
        // m0's lock timed out: the hub delivers it again with a new packet id. The first copy
        // leaves the order unacknowledged, which releases m1 behind it.
        let (again, released) = acks.arrived(3, Some("m0"));
        assert_eq!(released, vec![2]);
        assert_eq!(acks.complete(first), CompleteOutcome::Superseded);
        assert_eq!(acks.complete(again), CompleteOutcome::Released(vec![3]));
        assert_eq!(acks.open(), 0);
        // An acknowledged copy is gone from the order: a later arrival supersedes nothing.
        let (done, _) = acks.arrived(4, Some("m2"));
        assert_eq!(acks.complete(done), CompleteOutcome::Released(vec![4]));
        let (m2_again, released) = acks.arrived(5, Some("m2"));
        assert!(released.is_empty());
        // A completion held behind an open message is dropped when its message comes again:
        // the hub gave that packet id up, so it is never acknowledged.
        let (held, _) = acks.arrived(6, Some("m3"));
        assert_eq!(acks.complete(held), CompleteOutcome::Released(vec![]));
        let (m3_again, released) = acks.arrived(7, Some("m3"));
        assert!(released.is_empty());
        assert_eq!(acks.complete(m2_again), CompleteOutcome::Released(vec![5]));
        assert_eq!(acks.complete(m3_again), CompleteOutcome::Released(vec![7]));
        assert_eq!(acks.open(), 0);
    }

    proptest! {
        /// Any completion order releases every packet id exactly once, in arrival order.
        #[test]
        fn any_order_releases_everything_in_arrival_order(
            order in Just((0..40usize).collect::<Vec<_>>()).prop_shuffle()
        ) {
            let mut acks = InOrderAcks::default();
            let tickets: Vec<Ticket> = (0..40u16).map(|p| acks.arrived(p, None).0).collect();
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
