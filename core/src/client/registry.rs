//! The observed keys of one client (docs/protocol.md section 6): each key's streams, what the
//! client last knew of it, and the routing of notifications to the streams. A leaf of the
//! client: the request layer ([`super::rpc`]) holds a [`Registry`], the observation logic
//! ([`super::observe`]) registers keys in it; neither depends back on the other here.
//!
//! Overflow policy: each stream buffers up to [`crate::ConnectOptions::observation_buffer`]
//! notifications; when its buffer is full, new ones are dropped and counted
//! ([`Subscriber::deliver`]), and the stream reports `Err(Error::Lagged(n))` at the gap.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use crate::client::transport::IncomingMessage;
use crate::protocol::errors::Error;
use crate::protocol::hlc::{Hlc, HlcClock};
use crate::protocol::resp3::{self, NotifyOperation};
use crate::protocol::topics;

/// A change of an observed key.
///
/// ```
/// use bytes::Bytes;
/// use mqstate::{Hlc, KeyNotification, NotifyOperation};
///
/// let n = KeyNotification::new(
///     Bytes::from_static(b"door"),
///     NotifyOperation::Set(Bytes::from_static(b"open")),
///     Some(Hlc::new(1_700_000_000_000, 0, "StateStore")),
/// );
/// assert_eq!(n.value().map(|v| &v[..]), Some(&b"open"[..]));
/// assert!(!n.synthesized);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyNotification {
    /// The key.
    pub key: Bytes,
    /// What happened: set to a value, or deleted (DEL, VDEL or expiry).
    pub operation: NotifyOperation,
    /// The key's new version (the notification's `__ts`). `None` only for a synthesized
    /// delete (a GET miss carries no version) or a notification that arrived without `__ts`.
    pub version: Option<Hlc>,
    /// True when the client made this notification up after a reconnect, from the catch-up
    /// GET, because the key changed while it was disconnected.
    pub synthesized: bool,
}

impl KeyNotification {
    /// Builds a notification (for tests and bindings).
    ///
    /// ```
    /// use mqstate::{KeyNotification, NotifyOperation};
    ///
    /// let n = KeyNotification::new("k", NotifyOperation::Delete, None);
    /// assert!(n.value().is_none() && !n.synthesized);
    /// ```
    pub fn new(key: impl Into<Bytes>, operation: NotifyOperation, version: Option<Hlc>) -> Self {
        KeyNotification {
            key: key.into(),
            operation,
            version,
            synthesized: false,
        }
    }

    /// The new value, for a SET.
    ///
    /// ```
    /// # use mqstate::{KeyNotification, NotifyOperation};
    /// let n = KeyNotification::new("k", NotifyOperation::Set("v".into()), None);
    /// assert_eq!(n.value().unwrap(), "v");
    /// ```
    pub fn value(&self) -> Option<&Bytes> {
        match &self.operation {
            NotifyOperation::Set(v) => Some(v),
            NotifyOperation::Delete => None,
        }
    }
}

/// What a stream receives: a change, or an error (a lag, an undecodable notification...).
pub(super) type Item = Result<KeyNotification, Error>;

/// What the client last knew of an observed key, to tell after a reconnect whether it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Baseline {
    Unknown,
    Present(Hlc),
    Absent,
}

#[derive(Debug)]
pub(super) struct Subscriber {
    pub(super) id: u64,
    pub(super) tx: flume::Sender<Item>,
    pub(super) missed: Arc<AtomicU64>,
}

impl Subscriber {
    /// Never blocks: a full buffer drops the item and counts it (see the module's policy).
    pub(super) fn deliver(&self, item: Item) {
        let missed = self.missed.load(Ordering::Acquire);
        if missed > 0
            && self
                .missed
                .compare_exchange(missed, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            && self.tx.try_send(Err(Error::Lagged(missed))).is_err()
        {
            self.missed.fetch_add(missed, Ordering::AcqRel);
        }
        if let Err(flume::TrySendError::Full(_)) = self.tx.try_send(item) {
            self.missed.fetch_add(1, Ordering::AcqRel);
        }
    }
}

#[derive(Debug)]
pub(super) struct KeyEntry {
    pub(super) subs: Vec<Subscriber>,
    /// KEYNOTIFY was accepted on some connection (the registration to STOP eventually).
    pub(super) registered: bool,
    pub(super) baseline: Baseline,
    /// Bumped by every notification, so a catch-up GET can tell it raced with one.
    pub(super) seq: u64,
}

/// All observed keys of one client.
#[derive(Debug)]
pub(crate) struct Registry {
    pub(super) keys: Mutex<HashMap<Bytes, KeyEntry>>,
    /// Serialises registration changes (observe, release, unobserve, restore), so a STOP can
    /// never overtake a KEYNOTIFY for the same key.
    pub(super) ops: tokio::sync::Mutex<()>,
    pub(super) next_id: AtomicU64,
    pub(super) buffer: usize,
}

impl Registry {
    pub(crate) fn new(buffer: usize) -> Self {
        Registry {
            keys: Mutex::new(HashMap::new()),
            ops: tokio::sync::Mutex::new(()),
            next_id: AtomicU64::new(1),
            buffer,
        }
    }

    pub(super) fn keys(&self) -> MutexGuard<'_, HashMap<Bytes, KeyEntry>> {
        // Only map operations and non-blocking sends happen under this lock.
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The number of keys with a registration (for tests and diagnostics).
    pub(crate) fn observed_keys(&self) -> usize {
        self.keys().len()
    }

    /// Ends every stream (the client closed).
    pub(crate) fn close_all(&self) {
        self.keys().clear();
    }

    /// Removes one stream; true if it was the key's last one.
    pub(super) fn remove_subscriber(&self, key: &Bytes, id: u64) -> bool {
        let mut keys = self.keys();
        let Some(entry) = keys.get_mut(key) else {
            return false;
        };
        let before = entry.subs.len();
        entry.subs.retain(|s| s.id != id);
        before != entry.subs.len() && entry.subs.is_empty()
    }

    /// Routes a message received on `client_id`'s notification topics, merging its
    /// version into `clock`. Called by the connection task: never blocks, never fails.
    pub(crate) fn route_notification(
        &self,
        client_id: &str,
        clock: &HlcClock,
        message: IncomingMessage,
    ) {
        let Ok(topic) = std::str::from_utf8(&message.topic) else {
            return;
        };
        let key = match topics::parse_notification_topic(topic) {
            Ok((to, key)) if to == client_id => Bytes::from(key),
            Ok(_) => return,
            Err(e) => {
                tracing::debug!("notification on a malformed topic dropped: {e}");
                return;
            }
        };
        let version = match message
            .property(crate::protocol::properties::TIMESTAMP)
            .map(str::parse::<Hlc>)
        {
            Some(Ok(v)) => {
                if let Err(e) = clock.merge(&v) {
                    tracing::warn!("notification version not merged into the clock: {e}");
                }
                Some(v)
            }
            Some(Err(e)) => {
                self.deliver_error(&key, &Error::from(e));
                return;
            }
            None => None,
        };
        let item = resp3::decode_notification(&message.payload)
            .map(|operation| KeyNotification::new(key.clone(), operation, version.clone()))
            .map_err(Error::from);
        let mut keys = self.keys();
        let Some(entry) = keys.get_mut(&key) else {
            return;
        };
        if let Ok(n) = &item {
            entry.seq += 1;
            entry.baseline = match (&n.operation, version) {
                (NotifyOperation::Set(_), Some(v)) => Baseline::Present(v),
                (NotifyOperation::Set(_), None) => Baseline::Unknown,
                (NotifyOperation::Delete, _) => Baseline::Absent,
            };
        }
        for sub in &entry.subs {
            sub.deliver(item.clone());
        }
    }

    pub(super) fn deliver_error(&self, key: &Bytes, error: &Error) {
        if let Some(entry) = self.keys().get(key) {
            for sub in &entry.subs {
                sub.deliver(Err(error.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(buffer: usize) -> (Subscriber, flume::Receiver<Item>, Arc<AtomicU64>) {
        let (tx, rx) = flume::bounded(buffer);
        let missed = Arc::new(AtomicU64::new(0));
        (
            Subscriber {
                id: 1,
                tx,
                missed: missed.clone(),
            },
            rx,
            missed,
        )
    }

    fn n(i: u64) -> Item {
        Ok(KeyNotification::new(
            "k",
            NotifyOperation::Set(Bytes::from(i.to_string())),
            Some(Hlc::new(i, 0, "S")),
        ))
    }

    fn value(item: Item) -> u64 {
        item.unwrap().version.unwrap().ms
    }

    #[test]
    fn overflow_counts_then_reports_lag_in_order() {
        let (s, rx, missed) = sub(2);
        for i in 0..5 {
            s.deliver(n(i));
        }
        assert_eq!(missed.load(Ordering::SeqCst), 3);
        assert_eq!(value(rx.try_recv().unwrap()), 0);
        // Room for one: the lag marker takes it, the new item is counted.
        s.deliver(n(5));
        assert_eq!(value(rx.try_recv().unwrap()), 1);
        assert!(matches!(rx.try_recv().unwrap(), Err(Error::Lagged(3))));
        assert_eq!(missed.load(Ordering::SeqCst), 1);
        s.deliver(n(6));
        assert!(matches!(rx.try_recv().unwrap(), Err(Error::Lagged(1))));
        assert_eq!(value(rx.try_recv().unwrap()), 6);
        assert_eq!(missed.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn delivering_to_a_dropped_stream_is_harmless() {
        let (s, rx, missed) = sub(1);
        drop(rx);
        s.deliver(n(1));
        assert_eq!(missed.load(Ordering::SeqCst), 0);
    }
}
