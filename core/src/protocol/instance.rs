//! The store-instance extension (an mqstate extension of the protocol; other clients ignore
//! it): how a client notices that the state store it talks to was restarted and forgot its
//! KEYNOTIFY registrations, although the client's own connection never dropped.
//!
//! - The local state store (`mqstate serve`) picks a random **instance id** at every start and
//!   puts it in the user property [`INSTANCE_PROPERTY`] of every response and notification.
//! - Once subscribed to the request topic, it publishes the id, retained, QoS 1, on
//!   [`INSTANCE_TOPIC`]; so a restarted store announces itself to every subscribed client at
//!   once, even to a client that sends no request.
//! - The mqstate client subscribes to [`INSTANCE_TOPIC`] (a broker that refuses that
//!   subscription only costs the early warning) and compares every id it sees with the last
//!   one: a different id means "the store lost my registrations", and the client re-registers
//!   its observations and catches up exactly as after its own reconnect.
//!
//! The names start with `x-` / sit beside the request topic, so the official SDKs, which
//! ignore user properties and topics they do not know, are not affected.
//!
//! ```
//! use mqstate::protocol::instance::InstanceTracker;
//!
//! let tracker = InstanceTracker::default();
//! assert!(!tracker.observe("a1"));   // the first id seen is the baseline
//! assert!(!tracker.observe("a1"));   // same store
//! assert!(tracker.observe("b2"));    // the store restarted: restore
//! assert!(!tracker.observe("b2"));
//! ```

use std::sync::{Mutex, PoisonError};

/// The user property carrying the store's instance id on responses and notifications.
pub const INSTANCE_PROPERTY: &str = "x-mqstate-instance";

/// The topic on which the store publishes its instance id (retained, QoS 1) once it listens.
pub const INSTANCE_TOPIC: &str =
    "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/x-mqstate/instance";

/// The longest instance id a client accepts (anything longer is not ours and is ignored).
pub const MAX_INSTANCE_ID_LEN: usize = 64;

/// Remembers the last store instance id seen; tells when it changes.
#[derive(Debug, Default)]
pub struct InstanceTracker {
    last: Mutex<Option<String>>,
}

impl InstanceTracker {
    /// Records `id`; true if an earlier, different id was seen (the store restarted). Empty or
    /// over-long ids are ignored.
    ///
    /// ```
    /// let t = mqstate::protocol::instance::InstanceTracker::default();
    /// assert!(!t.observe(""));
    /// assert!(!t.observe("x"));
    /// assert!(t.observe("y"));
    /// ```
    pub fn observe(&self, id: &str) -> bool {
        if id.is_empty() || id.len() > MAX_INSTANCE_ID_LEN {
            return false;
        }
        // Only a compare and an assignment happen under the lock: poison cannot leave it torn.
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        match last.as_deref() {
            Some(previous) if previous == id => false,
            Some(_) => {
                *last = Some(id.to_owned());
                true
            }
            None => {
                *last = Some(id.to_owned());
                false
            }
        }
    }

    /// Forgets the last id: the next one seen is a baseline (after the client's own reconnect,
    /// which restores every observation anyway).
    pub fn reset(&self) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// The last instance id seen, if any.
    pub fn current(&self) -> Option<String> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_reported_once() {
        let t = InstanceTracker::default();
        assert_eq!(t.current(), None);
        assert!(!t.observe("one"));
        assert!(t.observe("two"));
        assert!(!t.observe("two"));
        assert!(t.observe("one"));
        assert_eq!(t.current().as_deref(), Some("one"));
        assert!(!t.observe(&"z".repeat(MAX_INSTANCE_ID_LEN + 1)));
        assert_eq!(t.current().as_deref(), Some("one"));
        t.reset();
        assert!(!t.observe("three"));
    }

    #[test]
    fn the_topic_is_beside_the_request_topic_and_not_under_it() {
        let prefix = crate::protocol::topics::REQUEST_TOPIC
            .strip_suffix("/command/invoke")
            .unwrap_or_default();
        assert!(INSTANCE_TOPIC.starts_with(prefix));
        assert!(!INSTANCE_TOPIC.starts_with(crate::protocol::topics::REQUEST_TOPIC));
    }
}
