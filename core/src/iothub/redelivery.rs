//! Recognising redeliveries: the message ids received last, bounded (the oldest forgotten).
//!
//! The MQTT DUP flag marks a redelivery on the same session only; a message whose completion
//! was lost with the connection comes again without it, so the client also remembers the ids
//! it has seen (`$.mid`, which a redelivery keeps).

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

/// How many message ids are remembered to recognise redeliveries.
pub(super) const SEEN_IDS: usize = 10_000;

/// The last message ids received, at most `capacity` of them.
#[derive(Debug)]
pub(super) struct SeenIds {
    set: HashSet<Arc<str>>,
    order: VecDeque<Arc<str>>,
    capacity: usize,
}

impl SeenIds {
    /// Remembers up to `capacity` ids.
    pub(super) fn new(capacity: usize) -> Self {
        SeenIds {
            set: HashSet::new(),
            order: VecDeque::new(),
            capacity,
        }
    }

    /// Records a message id; false if it was already known (a redelivery).
    pub(super) fn remember(&mut self, id: &str) -> bool {
        if self.set.contains(id) {
            return false;
        }
        let id: Arc<str> = Arc::from(id);
        self.set.insert(id.clone());
        self.order.push_back(id);
        if self.order.len() > self.capacity
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_id_is_a_redelivery() {
        let mut seen = SeenIds::new(SEEN_IDS);
        assert!(seen.remember("a"));
        assert!(seen.remember("b"));
        assert!(!seen.remember("a"));
        assert!(!seen.remember("b"));
    }

    #[test]
    fn the_oldest_id_is_forgotten_past_the_capacity() {
        let mut seen = SeenIds::new(2);
        assert!(seen.remember("a"));
        assert!(seen.remember("b"));
        assert!(seen.remember("c")); // forgets "a"
        assert!(!seen.remember("b"));
        assert!(!seen.remember("c"));
        assert!(seen.remember("a"), "forgotten, so new again");
        assert_eq!(seen.order.len(), 2);
        assert_eq!(seen.set.len(), 2);
    }
}
