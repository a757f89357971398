//! KEYNOTIFY registrations (docs/protocol.md section 6), per client id, and the connection
//! counting that drops them when a client's connection ends.
//!
//! A broker that reports connects and disconnects (the embedded one) feeds
//! [`Registrations::client_connected`] and [`Registrations::client_disconnected`]. Connections
//! are *counted* per client id, because a session takeover (a client reconnecting with the
//! same id while its old connection is still open) reports the new connect before the old
//! disconnect: only when the count falls back to zero are the client's registrations dropped.

use std::collections::{BTreeSet, HashMap, HashSet};

use bytes::Bytes;

/// Who observes which key, and how many live connections each client id has.
#[derive(Debug, Default)]
pub(crate) struct Registrations {
    by_key: HashMap<Bytes, BTreeSet<String>>,
    by_client: HashMap<String, HashSet<Bytes>>,
    connections: HashMap<String, u32>,
}

impl Registrations {
    /// Registers `client_id` for changes of `key` (idempotent).
    pub(crate) fn register(&mut self, client_id: &str, key: Bytes) {
        self.by_key
            .entry(key.clone())
            .or_default()
            .insert(client_id.to_owned());
        self.by_client
            .entry(client_id.to_owned())
            .or_default()
            .insert(key);
    }

    /// Removes a registration; `false` if there was none (the `:0` reply to STOP).
    pub(crate) fn unregister(&mut self, client_id: &str, key: &[u8]) -> bool {
        let removed = match self.by_key.get_mut(key) {
            Some(clients) => {
                let removed = clients.remove(client_id);
                if clients.is_empty() {
                    self.by_key.remove(key);
                }
                removed
            }
            None => false,
        };
        if let Some(keys) = self.by_client.get_mut(client_id) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_client.remove(client_id);
            }
        }
        removed
    }

    /// The clients observing `key`, in a stable (sorted) order.
    pub(crate) fn observers(&self, key: &[u8]) -> impl Iterator<Item = &str> {
        self.by_key
            .get(key)
            .into_iter()
            .flat_map(|clients| clients.iter().map(String::as_str))
    }

    /// Whether `client_id` observes at least one key.
    pub(crate) fn observes_any(&self, client_id: &str) -> bool {
        self.by_client.contains_key(client_id)
    }

    /// How many keys `client_id` observes.
    #[cfg(test)]
    pub(crate) fn keys_of(&self, client_id: &str) -> usize {
        self.by_client.get(client_id).map_or(0, HashSet::len)
    }

    /// The number of (client, key) registrations.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_client.values().map(HashSet::len).sum()
    }

    /// Whether there is no registration.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.by_client.is_empty()
    }

    /// Drops every registration of a client; returns how many there were.
    pub(crate) fn drop_client(&mut self, client_id: &str) -> usize {
        let Some(keys) = self.by_client.remove(client_id) else {
            return 0;
        };
        for key in &keys {
            if let Some(clients) = self.by_key.get_mut(key) {
                clients.remove(client_id);
                if clients.is_empty() {
                    self.by_key.remove(key);
                }
            }
        }
        keys.len()
    }

    /// A connection of `client_id` was opened.
    pub(crate) fn client_connected(&mut self, client_id: &str) {
        *self.connections.entry(client_id.to_owned()).or_default() += 1;
    }

    /// A connection of `client_id` was closed. When it was the client's last one, its
    /// registrations are dropped; returns how many were.
    pub(crate) fn client_disconnected(&mut self, client_id: &str) -> usize {
        let remaining = match self.connections.get_mut(client_id) {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n
            }
            // A disconnect we never saw the connect of (it happened before we started
            // listening): the client is gone all the same.
            None => 0,
        };
        if remaining > 0 {
            return 0;
        }
        self.connections.remove(client_id);
        self.drop_client(client_id)
    }

    /// How many open connections the broker reported for `client_id`.
    pub(crate) fn connections_of(&self, client_id: &str) -> u32 {
        self.connections.get(client_id).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &'static str) -> Bytes {
        Bytes::from_static(s.as_bytes())
    }

    #[test]
    fn register_and_unregister() {
        let mut r = Registrations::default();
        r.register("a", b("k"));
        r.register("a", b("k"));
        r.register("b", b("k"));
        r.register("a", b("j"));
        assert_eq!(r.observers(b"k").collect::<Vec<_>>(), vec!["a", "b"]);
        assert_eq!(r.len(), 3);
        assert!(r.unregister("a", b"k"));
        assert!(!r.unregister("a", b"k"));
        assert!(!r.unregister("zz", b"k"));
        assert_eq!(r.observers(b"k").collect::<Vec<_>>(), vec!["b"]);
        assert_eq!(r.keys_of("a"), 1);
        assert!(r.observes_any("a"));
        assert_eq!(r.drop_client("a"), 1);
        assert!(!r.observes_any("a"));
        assert_eq!(r.drop_client("b"), 1);
        assert!(r.is_empty());
        assert_eq!(r.observers(b"k").count(), 0);
    }

    #[test]
    fn disconnect_drops_only_at_zero_connections() {
        let mut r = Registrations::default();
        r.client_connected("a");
        r.register("a", b("k"));
        r.register("b", b("k"));
        r.client_connected("a");
        assert_eq!(r.client_disconnected("a"), 0);
        assert_eq!(r.connections_of("a"), 1);
        assert_eq!(r.keys_of("a"), 1);
        assert_eq!(r.client_disconnected("a"), 1);
        assert_eq!(r.connections_of("a"), 0);
        assert_eq!(r.observers(b"k").collect::<Vec<_>>(), vec!["b"]);
        // An unmatched disconnect is harmless.
        assert_eq!(r.client_disconnected("a"), 0);
    }

    /// The example that was in this module's documentation.
    #[test]
    fn registrations_survive_a_takeover() {
        use crate::statestore::registrations::Registrations;
        use bytes::Bytes;

        let mut r = Registrations::default();
        r.client_connected("c1");
        r.register("c1", Bytes::from_static(b"k"));
        r.client_connected("c1"); // takeover: new connection first...
        r.client_disconnected("c1"); // ...then the old one goes
        assert_eq!(r.observers(b"k").count(), 1);
        r.client_disconnected("c1");
        assert_eq!(r.observers(b"k").count(), 0);
    }
}
