//! What the store offers those who watch it (the dashboard): [`StoreObserver`], told of
//! every change, connection and request by the [`Handler`](super::handler::Handler), and
//! [`KeyQuery`], the way an observer on another task reads pages of the keys (the store's
//! task answers between two requests, with the same scan as `SCAN`, so no observer keeps a
//! copy of the keys). The store knows nothing of who observes it or how it shows what it
//! sees.

use std::time::{Duration, Instant};

use bytes::Bytes;
use mqstate::Hlc;
use tokio::sync::{mpsc, oneshot};

use super::store::Entry;

/// The most keys one page of a [`KeyQuery::Keys`] holds.
pub const KEY_PAGE_KEYS: usize = 100;

/// How a key went away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal<'a> {
    /// DEL or VDEL deleted it, at this time of the server's clock.
    Deleted(&'a Hlc),
    /// Its `PX` deadline passed.
    Expired,
}

/// Told of what happens in the store, on the store's task: keep it quick (no I/O, no await).
pub trait StoreObserver: Send + Sync + std::fmt::Debug {
    /// A SET was applied; `entry` is the key as stored now, `lease` says it was `NEX` + `PX`
    /// (the way leases and locks are taken and renewed).
    fn key_set(&self, key: &Bytes, entry: &Entry, lease: bool);
    /// The key was deleted or expired.
    fn key_removed(&self, key: &Bytes, removal: Removal<'_>);
    /// A connection of `client_id` opened.
    fn client_connected(&self, client_id: &str);
    /// A connection of `client_id` closed.
    fn client_disconnected(&self, client_id: &str);
    /// `client_id` registered (`observing`) or stopped observing `key` (KEYNOTIFY).
    fn keynotify(&self, client_id: &str, key: &Bytes, observing: bool);
    /// One request was handled in `took`.
    fn request_handled(&self, took: Duration);
    /// The observer's questions to the store, which the store's task takes once and answers
    /// ([`Handler::answer_query`](super::handler::Handler::answer_query)); `None`: it asks
    /// none.
    fn take_queries(&self) -> Option<mpsc::Receiver<KeyQuery>> {
        None
    }
}

/// A question to the store's task, which owns the store.
#[derive(Debug)]
pub enum KeyQuery {
    /// A page of the keys matching `pattern` (at most [`KEY_PAGE_KEYS`]), after `token` (a
    /// `SCAN` continuation token).
    Keys {
        /// The glob pattern.
        pattern: Bytes,
        /// Where to go on from (`None`: the first page).
        token: Option<Bytes>,
        /// Where the answer goes: the page, or the error text (a malformed pattern, a bad
        /// token).
        reply: oneshot::Sender<Result<KeyPage, String>>,
    },
    /// How many keys the store holds.
    Count(oneshot::Sender<usize>),
}

/// One page of keys, as read from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPage {
    /// The keys of this page with what is stored under them, in byte order.
    pub keys: Vec<(Bytes, Entry)>,
    /// The continuation token of the next page (`None` on the last page).
    pub next: Option<Bytes>,
    /// How many keys the store holds in all (expired keys not yet removed included).
    pub count: usize,
    /// When the page was read (the time the entries' deadlines are relative to).
    pub read_at: Instant,
}
