//! Per-message settlement over AMQP: which received deliveries are still open on the current
//! receiver link, the settlements the application asked for that the connection task has not
//! written yet, and why a settlement cannot be made any more.
//!
//! Unlike MQTT's in-order PUBACKs ([`super::completion`]), each AMQP delivery is settled on its
//! own, in any order (AMQP 1.0 section 2.6.12; docs/iothub-device.md, "Ordering"). A delivery
//! belongs to the link it arrived on: when that link (or its connection) closes, the hub gives
//! the message back to the queue and delivers it again on the next link, so a settlement of the
//! old delivery is refused with [`Error::LockLost`] and never written on the new link (whose
//! delivery ids start again).
// Without the `amqp` feature nothing makes AMQP deliveries: the bookkeeping stays compiled
// (the received message's type names it) but unused.
#![cfg_attr(
    not(feature = "amqp"),
    allow(dead_code, reason = "used by the AMQP transport only")
)]

use std::collections::{HashMap, VecDeque};

use crate::protocol::errors::Error;

/// How the application settles a message (IoT Hub's three ways: docs/iothub-device.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Accepted: the hub completes the message.
    Complete,
    /// Rejected: the hub dead-letters it (feedback `Rejected`).
    Reject,
    /// Released: the hub enqueues it again (its delivery count goes up on the next delivery).
    Abandon,
}

impl Outcome {
    /// The verb, for messages.
    pub(crate) fn verb(self) -> &'static str {
        match self {
            Outcome::Complete => "completed",
            Outcome::Reject => "rejected",
            Outcome::Abandon => "abandoned",
        }
    }
}

/// A received delivery as its message holds it: the link it arrived on and its key there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Handle {
    link: u64,
    key: u64,
}

impl Handle {
    /// The key the connection task files the delivery's AMQP information under.
    pub(crate) fn key(self) -> u64 {
        self.key
    }
}

/// Why a settlement was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The link the message arrived on has closed since.
    LinkClosed,
    /// The hub delivered the message again on this link (its lock timed out).
    Superseded,
    /// The message was already settled, this way.
    AlreadySettled(Outcome),
}

impl Refusal {
    /// The error a settlement refused this way is, for message `id`.
    pub(crate) fn error(&self, id: Option<&str>, wanted: Outcome) -> Error {
        match self {
            Refusal::LinkClosed => Error::LockLost(format!(
                "message {id:?} cannot be {} any more: the link it arrived on has closed (the connection was lost); the hub delivers it again",
                wanted.verb()
            )),
            Refusal::Superseded => Error::LockLost(format!(
                "message {id:?} cannot be {} any more: the hub delivered it again after its lock timed out; settle the redelivered copy",
                wanted.verb()
            )),
            Refusal::AlreadySettled(how) => {
                Error::InvalidArgument(format!("message {id:?} was already {}", how.verb()))
            }
        }
    }
}

/// How many settled deliveries are remembered, to tell a second settlement from a late one.
const REMEMBERED: usize = 10_000;

/// The open deliveries of the current link and the settlements waiting to be written.
#[derive(Debug, Default)]
pub(crate) struct Settlements {
    /// The current link's number (0 before the first).
    link: u64,
    next_key: u64,
    /// Open deliveries of the current link: key -> message id.
    open: HashMap<u64, Option<String>>,
    /// The open delivery of each message id (to recognise a redelivery on the same link).
    by_id: HashMap<String, u64>,
    /// Settled (or superseded) deliveries of the current link, to say why a second settlement
    /// is refused: the last [`REMEMBERED`] of them (`done_order` is their order).
    done: HashMap<u64, Result<Outcome, ()>>,
    done_order: VecDeque<u64>,
    /// Settled by the application, not written yet: key and outcome, in the order asked.
    queued: Vec<(u64, Outcome)>,
    /// The client stopped: no settlement is taken any more.
    pub(crate) closed: bool,
}

impl Settlements {
    /// A new link replaces the previous one: its open deliveries are forgotten (the hub
    /// delivers their messages again) and unwritten settlements dropped. Returns how many
    /// settlements were dropped.
    pub(crate) fn new_link(&mut self) -> usize {
        self.link = self.link.wrapping_add(1);
        self.open.clear();
        self.by_id.clear();
        self.done.clear();
        self.done_order.clear();
        let dropped = self.queued.len();
        self.queued.clear();
        dropped
    }

    /// A delivery arrived on the current link. A message id still open on this link means the
    /// hub delivered it again (its lock timed out): the older delivery cannot be settled by the
    /// application any more, and its key is returned for the task to release it (so that the
    /// link's credit it holds comes back; the hub ignores a settlement of a lock it gave up).
    pub(crate) fn arrived(&mut self, message_id: Option<&str>) -> (Handle, Option<u64>) {
        let key = self.next_key;
        self.next_key = self.next_key.wrapping_add(1);
        let mut superseded = None;
        if let Some(id) = message_id
            && let Some(old) = self.by_id.insert(id.to_owned(), key)
            && self.open.remove(&old).is_some()
        {
            self.remember(old, Err(()));
            superseded = Some(old);
        }
        self.open.insert(key, message_id.map(str::to_owned));
        let handle = Handle {
            link: self.link,
            key,
        };
        (handle, superseded)
    }

    /// The application settles the delivery of `handle`; queued for the connection task.
    pub(crate) fn settle(&mut self, handle: Handle, outcome: Outcome) -> Result<(), Refusal> {
        if handle.link != self.link {
            return Err(Refusal::LinkClosed);
        }
        match self.open.remove(&handle.key) {
            Some(id) => {
                if let Some(id) = id
                    && self.by_id.get(&id) == Some(&handle.key)
                {
                    self.by_id.remove(&id);
                }
                self.remember(handle.key, Ok(outcome));
                self.queued.push((handle.key, outcome));
                Ok(())
            }
            None => match self.done.get(&handle.key) {
                Some(Ok(how)) => Err(Refusal::AlreadySettled(*how)),
                // Superseded, or (never the case) unknown on this link.
                _ => Err(Refusal::Superseded),
            },
        }
    }

    /// Takes the settlements to write on the current link, in the order they were asked.
    pub(crate) fn take_queued(&mut self, into: &mut Vec<(u64, Outcome)>) {
        into.append(&mut self.queued);
    }

    /// Deliveries received on the current link and not settled.
    pub(crate) fn open(&self) -> usize {
        self.open.len()
    }

    /// The client stopped.
    pub(crate) fn close(&mut self) {
        self.closed = true;
        self.new_link();
    }

    /// Records how a delivery ended, forgetting the oldest record past [`REMEMBERED`].
    fn remember(&mut self, key: u64, how: Result<Outcome, ()>) {
        self.done.insert(key, how);
        self.done_order.push_back(key);
        if self.done_order.len() > REMEMBERED
            && let Some(oldest) = self.done_order.pop_front()
        {
            self.done.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn settlements_are_per_message_in_any_order() {
        let mut s = Settlements::default();
        s.new_link();
        let a = s.arrived(Some("a")).0;
        let b = s.arrived(Some("b")).0;
        let c = s.arrived(None).0;
        s.settle(c, Outcome::Abandon).unwrap();
        s.settle(a, Outcome::Reject).unwrap();
        let mut q = Vec::new();
        s.take_queued(&mut q);
        assert_eq!(q, vec![(c.key, Outcome::Abandon), (a.key, Outcome::Reject)]);
        assert_eq!(s.open(), 1);
        s.settle(b, Outcome::Complete).unwrap();
        let again = s.settle(b, Outcome::Reject).unwrap_err();
        assert_eq!(again, Refusal::AlreadySettled(Outcome::Complete));
        let e = again.error(Some("b"), Outcome::Reject);
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("already completed"), "{e}");
    }

    #[test]
    fn a_delivery_of_a_closed_link_is_never_settled_on_the_next() {
        let mut s = Settlements::default();
        s.new_link();
        let old = s.arrived(Some("m")).0;
        let other = s.arrived(Some("n")).0;
        s.settle(other, Outcome::Complete).unwrap();
        assert_eq!(s.new_link(), 1, "the unwritten settlement is dropped");
        let new = s.arrived(Some("m")).0;
        assert_ne!(new.key(), old.key());
        let refusal = s.settle(old, Outcome::Complete).unwrap_err();
        assert_eq!(refusal, Refusal::LinkClosed);
        let e = refusal.error(Some("m"), Outcome::Complete);
        assert_eq!(e.kind(), ErrorKind::LockLost);
        assert!(
            e.to_string().contains("link it arrived on has closed"),
            "{e}"
        );
        let mut q = Vec::new();
        s.take_queued(&mut q);
        assert!(q.is_empty());
        s.settle(new, Outcome::Complete).unwrap();
        s.take_queued(&mut q);
        assert_eq!(q, vec![(new.key, Outcome::Complete)]);
    }

    #[test]
    fn a_redelivery_on_the_same_link_supersedes_the_open_copy() {
        let mut s = Settlements::default();
        s.new_link();
        let (old, none) = s.arrived(Some("m"));
        assert_eq!(none, None);
        let (new, superseded) = s.arrived(Some("m"));
        assert_eq!(superseded, Some(old.key()));
        assert_eq!(s.open(), 1);
        let e = s.settle(old, Outcome::Abandon).unwrap_err();
        assert_eq!(e, Refusal::Superseded);
        assert!(
            e.error(Some("m"), Outcome::Abandon)
                .to_string()
                .contains("delivered it again")
        );
        s.settle(new, Outcome::Abandon).unwrap();
        s.close();
        assert!(s.closed);
        assert_eq!(s.settle(new, Outcome::Complete), Err(Refusal::LinkClosed));
    }
}
