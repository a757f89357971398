//! The dashboard's view of the store: the store's observer
//! ([`StoreObserver`], which the [`Handler`](crate::statestore::handler::Handler) calls on
//! every change: SET, DEL/VDEL, expiry, connections, KEYNOTIFY, request timings), the leases
//! and locks, a feed of changes for server-sent events, per-second request counts and
//! latencies for the chart, and the way the key table reads the store.
//!
//! The handler owns the store and runs on one task; the dashboard's HTTP handlers run on
//! others. The key table reads the store itself, a page at a time: the HTTP handler sends a
//! [`KeyQuery`] to the store's task, which answers it between two requests from the store
//! with the same scan as `SCAN` ([`crate::statestore::scan`]). So the dashboard keeps no copy of the keys
//! (it once did: 500 bytes per key, more than the store itself); what it keeps is small and
//! bounded by activity, not by the store's size: the leases (keys last set with `NEX` and
//! `PX`, a handful), the clients, the last 200 changes and five minutes of metrics. It only
//! exists when the dashboard is on.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use mqstate::Hlc;
use serde::Serialize;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::statestore::observer::{KeyPage, KeyQuery, Removal, StoreObserver};
use crate::statestore::store::Entry;

/// How many changes the page gets when it (re)connects, and how many a slow page may lag.
const FEED_BACKLOG: usize = 200;
/// How long the metrics look back (one bucket per second).
pub(crate) const METRICS_WINDOW_SECS: u64 = 300;
/// At most this many latency samples are kept per second; beyond it every other sample is
/// dropped (the p99 of a busy second is then that of a regular sample of it).
const MAX_SAMPLES_PER_SECOND: usize = 4096;
/// Values longer than this are cut in the key table and the feed (the size column is exact).
const VALUE_PREVIEW: usize = 4096;
/// Key-table queries waiting for the store's task at most; beyond, a query is refused as busy
/// (a page polling in a loop cannot queue work for the store without bound).
const QUERY_BACKLOG: usize = 16;
/// How long a key-table query waits for the store's task.
const QUERY_WAIT: Duration = Duration::from_secs(5);

/// What happened to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ChangeKind {
    /// A SET was applied.
    Set,
    /// DEL or VDEL deleted the key.
    Delete,
    /// The key's `PX` deadline passed.
    Expire,
}

/// One entry of the live feed (JSON for the page).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Change {
    /// Increases by one per change, from 1.
    pub seq: u64,
    /// When the store applied it (RFC 3339, milliseconds).
    pub at: String,
    /// SET, DELETE or expiry.
    pub kind: ChangeKind,
    /// The key, as text or hex (see `key_encoding`).
    pub key: String,
    /// `text` or `hex`.
    pub key_encoding: &'static str,
    /// The new value of a SET (cut at 4 KiB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `text` or `hex`, for a SET.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_encoding: Option<&'static str>,
    /// The key's new version (SET) or the server clock of the deletion (DEL).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// One key as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct KeyView {
    /// The key, as text or hex.
    pub key: String,
    /// `text` or `hex`.
    pub key_encoding: &'static str,
    /// The value, as text or hex (cut at 4 KiB).
    pub value: String,
    /// `text` or `hex`.
    pub value_encoding: &'static str,
    /// The value's size in bytes.
    pub size: usize,
    /// The version of the last SET.
    pub version: String,
    /// The fencing token protecting the key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<String>,
    /// Milliseconds until the key expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// The last SET was `NEX` with `PX`: the way leases and locks are taken and renewed.
    pub lease: bool,
}

impl KeyView {
    /// The view of a stored key; `lease` says its last SET was `NEX` with `PX`.
    pub(crate) fn of(key: &[u8], entry: &Entry, lease: bool, now: Instant) -> KeyView {
        let (key, key_encoding) = display(key, usize::MAX);
        let (value, value_encoding) = display(&entry.value, VALUE_PREVIEW);
        KeyView {
            key,
            key_encoding,
            value,
            value_encoding,
            size: entry.value.len(),
            version: entry.version.to_string(),
            fencing_token: entry.fencing_token.as_ref().map(ToString::to_string),
            ttl_ms: entry
                .expires_at
                .map(|at| millis(at.saturating_duration_since(now))),
            lease,
        }
    }
}

/// One page of the key table: keys read from the store by a scan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct KeysPage {
    /// The keys of this page, in byte order.
    pub keys: Vec<KeyView>,
    /// The continuation token of the next page, as hex (`None` on the last page).
    pub next: Option<String>,
    /// How many keys the store holds in all (expired keys not yet removed included).
    pub count: usize,
}

/// Why a key-table query got no page.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum QueryError {
    /// The pattern or the token was refused (the text says why).
    #[error("{0}")]
    Invalid(String),
    /// The store's task did not answer in time, or is gone, or has too many queries waiting.
    #[error("the store is busy or stopped: {0}")]
    Unavailable(&'static str),
}

/// A lease or lock: a key last set with `NEX` and `PX`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LeaseView {
    /// The lock's key.
    pub key: String,
    /// The holder: the value the holder wrote (its name).
    pub holder: String,
    /// The fencing token the holder got: the version of its SET.
    pub token: String,
    /// Milliseconds until the lease lapses unless renewed.
    pub ttl_ms: u64,
}

/// A client the store knows of, with its KEYNOTIFY registrations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClientView {
    /// The MQTT client id.
    pub client_id: String,
    /// Open connections (0 when only known from a KEYNOTIFY, with an external broker).
    pub connections: u32,
    /// The keys it observes, as text or hex.
    pub keynotify: Vec<String>,
}

/// Requests per second and their p99 latency, one point per second, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MetricsView {
    /// Seconds covered.
    pub window_secs: u64,
    /// Requests handled in each second.
    pub requests: Vec<u64>,
    /// The p99 handling latency of each second, in microseconds (0 with no requests).
    pub p99_micros: Vec<u64>,
    /// Requests handled since the server started.
    pub total_requests: u64,
}

/// A lease or lock as the locks view shows it.
#[derive(Debug)]
struct LeaseRecord {
    /// The holder, cut at [`VALUE_PREVIEW`] bytes.
    holder: Bytes,
    version: Hlc,
    expires_at: Option<Instant>,
}

#[derive(Debug, Default)]
struct ClientRecord {
    connections: u32,
    keys: BTreeSet<Bytes>,
}

#[derive(Debug, Default)]
struct Second {
    index: u64,
    count: u64,
    samples: Vec<u32>,
}

#[derive(Debug)]
struct State {
    /// The keys whose last SET was `NEX` with `PX` (leases and locks).
    leases: BTreeMap<Bytes, LeaseRecord>,
    clients: BTreeMap<String, ClientRecord>,
    recent: VecDeque<Change>,
    next_seq: u64,
    seconds: VecDeque<Second>,
    total_requests: u64,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    feed: broadcast::Sender<Change>,
    started: Instant,
    queries: mpsc::Sender<KeyQuery>,
    /// The receiving end, until the store's task takes it
    /// ([`StoreObserver::take_queries`]).
    query_receiver: Mutex<Option<mpsc::Receiver<KeyQuery>>>,
}

/// The store hook of the dashboard; cheap to clone. See the docs of the (private)
/// `dashboard::monitor` module, and [`crate::dashboard`].
#[derive(Debug, Clone)]
pub(crate) struct Monitor {
    inner: Arc<Inner>,
}

impl Default for Monitor {
    fn default() -> Self {
        Monitor::new()
    }
}

impl Monitor {
    /// An empty monitor (attach it with `HandlerConfig::observer`).
    pub(crate) fn new() -> Monitor {
        let (feed, _) = broadcast::channel(FEED_BACKLOG);
        let (queries, query_receiver) = mpsc::channel(QUERY_BACKLOG);
        Monitor {
            inner: Arc::new(Inner {
                queries,
                query_receiver: Mutex::new(Some(query_receiver)),
                state: Mutex::new(State {
                    leases: BTreeMap::new(),
                    clients: BTreeMap::new(),
                    recent: VecDeque::new(),
                    next_seq: 1,
                    seconds: VecDeque::new(),
                    total_requests: 0,
                }),
                feed,
                started: Instant::now(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is a display copy: after a panic elsewhere, showing it beats stopping.
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the key's last SET was `NEX` with `PX` (a lease or lock).
    pub(crate) fn is_lease(&self, key: &[u8]) -> bool {
        self.state().leases.contains_key(key)
    }

    /// A SET was applied; `entry` is the key as stored now, `lease` says it was `NEX` + `PX`.
    pub(crate) fn key_set(&self, key: &Bytes, entry: &Entry, lease: bool) {
        let mut state = self.state();
        if lease {
            // Copies: the request's key and value are slices of the received packet, which
            // they would keep alive.
            let holder = entry.value.get(..VALUE_PREVIEW).unwrap_or(&entry.value);
            state.leases.insert(
                Bytes::copy_from_slice(key),
                LeaseRecord {
                    holder: Bytes::copy_from_slice(holder),
                    version: entry.version.clone(),
                    expires_at: entry.expires_at,
                },
            );
        } else {
            state.leases.remove(&key[..]);
        }
        let (value, value_encoding) = display(&entry.value, VALUE_PREVIEW);
        self.push(
            &mut state,
            ChangeKind::Set,
            key,
            Some((value, value_encoding)),
            Some(&entry.version),
        );
    }

    /// The key was deleted (`Delete`, with the server clock of the deletion) or expired.
    pub(crate) fn key_deleted(&self, key: &Bytes, version: Option<&Hlc>, kind: ChangeKind) {
        let mut state = self.state();
        state.leases.remove(&key[..]);
        self.push(&mut state, kind, key, None, version);
    }

    fn push(
        &self,
        state: &mut State,
        kind: ChangeKind,
        key: &Bytes,
        value: Option<(String, &'static str)>,
        version: Option<&Hlc>,
    ) {
        let (key, key_encoding) = display(key, usize::MAX);
        let (value, value_encoding) = match value {
            Some((v, e)) => (Some(v), Some(e)),
            None => (None, None),
        };
        let change = Change {
            seq: state.next_seq,
            at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            kind,
            key,
            key_encoding,
            value,
            value_encoding,
            version: version.map(ToString::to_string),
        };
        state.next_seq += 1;
        if state.recent.len() == FEED_BACKLOG {
            state.recent.pop_front();
        }
        state.recent.push_back(change.clone());
        // No page listening is not an error.
        let _ = self.inner.feed.send(change);
    }

    /// A connection of `client_id` opened.
    pub(crate) fn client_connected(&self, client_id: &str) {
        self.state()
            .clients
            .entry(client_id.to_owned())
            .or_default()
            .connections += 1;
    }

    /// A connection of `client_id` closed; with its last one, its registrations are gone too.
    pub(crate) fn client_disconnected(&self, client_id: &str) {
        let mut state = self.state();
        if let Some(client) = state.clients.get_mut(client_id) {
            client.connections = client.connections.saturating_sub(1);
            if client.connections == 0 {
                state.clients.remove(client_id);
            }
        }
    }

    /// `client_id` registered (`observing`) or stopped observing `key`.
    pub(crate) fn keynotify(&self, client_id: &str, key: &Bytes, observing: bool) {
        let mut state = self.state();
        if observing {
            state
                .clients
                .entry(client_id.to_owned())
                .or_default()
                .keys
                .insert(key.clone());
        } else if let Some(client) = state.clients.get_mut(client_id) {
            client.keys.remove(key);
            if client.connections == 0 && client.keys.is_empty() {
                state.clients.remove(client_id);
            }
        }
    }

    /// One request was handled in `took`.
    pub(crate) fn request_handled(&self, took: Duration) {
        let index = self.inner.started.elapsed().as_secs();
        let micros = u32::try_from(took.as_micros()).unwrap_or(u32::MAX);
        let mut state = self.state();
        state.total_requests += 1;
        if state.seconds.back().is_none_or(|s| s.index != index) {
            state.seconds.push_back(Second {
                index,
                ..Second::default()
            });
            while state
                .seconds
                .front()
                .is_some_and(|s| s.index + METRICS_WINDOW_SECS <= index)
            {
                state.seconds.pop_front();
            }
        }
        if let Some(second) = state.seconds.back_mut() {
            second.count += 1;
            if second.samples.len() == MAX_SAMPLES_PER_SECOND {
                let mut keep = 0;
                second.samples.retain(|_| {
                    keep += 1;
                    keep % 2 == 0
                });
            }
            second.samples.push(micros);
        }
    }

    /// A receiver of every change from now on.
    #[cfg(test)]
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.inner.feed.subscribe()
    }

    /// The last changes (at most 200), oldest first.
    #[cfg(test)]
    pub(crate) fn recent_changes(&self) -> Vec<Change> {
        self.state().recent.iter().cloned().collect()
    }

    /// The recent changes and a receiver of the ones after them, with nothing lost between.
    pub(crate) fn recent_and_subscribe(&self) -> (Vec<Change>, broadcast::Receiver<Change>) {
        let state = self.state();
        let rx = self.inner.feed.subscribe();
        (state.recent.iter().cloned().collect(), rx)
    }

    /// How many keys the store holds, asked of the store's task.
    pub(crate) async fn key_count(&self) -> Result<usize, QueryError> {
        let (reply, answer) = oneshot::channel();
        self.ask(KeyQuery::Count(reply), answer).await
    }

    /// One page of the keys matching the glob `pattern`, read from the store by the store's
    /// task, after `token` (the `next` of the page before; `None` for the first page).
    pub(crate) async fn keys_page(
        &self,
        pattern: Bytes,
        token: Option<Bytes>,
    ) -> Result<KeysPage, QueryError> {
        let (reply, answer) = oneshot::channel();
        let query = KeyQuery::Keys {
            pattern,
            token,
            reply,
        };
        let page = self
            .ask(query, answer)
            .await?
            .map_err(QueryError::Invalid)?;
        Ok(self.keys_page_view(page))
    }

    /// The key table's view of a page read from the store: previews of the values, the
    /// leases marked.
    fn keys_page_view(&self, page: KeyPage) -> KeysPage {
        let keys = page
            .keys
            .iter()
            .map(|(key, entry)| KeyView::of(key, entry, self.is_lease(key), page.read_at))
            .collect();
        KeysPage {
            keys,
            next: page.next.map(|t| mqstate::protocol::topics::hex_encode(&t)),
            count: page.count,
        }
    }

    async fn ask<T>(&self, query: KeyQuery, answer: oneshot::Receiver<T>) -> Result<T, QueryError> {
        self.inner.queries.try_send(query).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                QueryError::Unavailable("too many dashboard queries are waiting")
            }
            mpsc::error::TrySendError::Closed(_) => {
                QueryError::Unavailable("the store has stopped")
            }
        })?;
        match tokio::time::timeout(QUERY_WAIT, answer).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(QueryError::Unavailable("the store has stopped")),
            Err(_) => Err(QueryError::Unavailable(
                "the store did not answer within 5 s",
            )),
        }
    }

    /// The leases and locks: keys last set with `NEX` and `PX`, still alive.
    pub(crate) fn leases(&self) -> Vec<LeaseView> {
        let now = Instant::now();
        self.state()
            .leases
            .iter()
            .filter_map(|(key, r)| {
                let ttl = r.expires_at?.checked_duration_since(now)?;
                Some(LeaseView {
                    key: display(key, usize::MAX).0,
                    holder: display(&r.holder, VALUE_PREVIEW).0,
                    token: r.version.to_string(),
                    ttl_ms: millis(ttl),
                })
            })
            .collect()
    }

    /// The clients: connected ones and any with KEYNOTIFY registrations.
    pub(crate) fn clients(&self) -> Vec<ClientView> {
        self.state()
            .clients
            .iter()
            .map(|(id, c)| ClientView {
                client_id: id.clone(),
                connections: c.connections,
                keynotify: c.keys.iter().map(|k| display(k, usize::MAX).0).collect(),
            })
            .collect()
    }

    /// Requests per second and p99 latency over the last [`METRICS_WINDOW_SECS`] seconds.
    pub(crate) fn metrics(&self) -> MetricsView {
        let now = self.inner.started.elapsed().as_secs();
        let first = (now + 1).saturating_sub(METRICS_WINDOW_SECS);
        let points = usize::try_from(now + 1 - first).unwrap_or(0);
        let mut requests = vec![0; points];
        let mut p99_micros = vec![0; points];
        let state = self.state();
        for second in &state.seconds {
            let Some(slot) = second
                .index
                .checked_sub(first)
                .and_then(|i| usize::try_from(i).ok())
            else {
                continue;
            };
            if let (Some(r), Some(p)) = (requests.get_mut(slot), p99_micros.get_mut(slot)) {
                *r = second.count;
                *p = p99(&second.samples);
            }
        }
        MetricsView {
            window_secs: METRICS_WINDOW_SECS,
            requests,
            p99_micros,
            total_requests: state.total_requests,
        }
    }
}

/// The store tells the dashboard what happens through this.
impl StoreObserver for Monitor {
    fn key_set(&self, key: &Bytes, entry: &Entry, lease: bool) {
        Monitor::key_set(self, key, entry, lease);
    }

    fn key_removed(&self, key: &Bytes, removal: Removal<'_>) {
        match removal {
            Removal::Deleted(version) => self.key_deleted(key, Some(version), ChangeKind::Delete),
            Removal::Expired => self.key_deleted(key, None, ChangeKind::Expire),
        }
    }

    fn client_connected(&self, client_id: &str) {
        Monitor::client_connected(self, client_id);
    }

    fn client_disconnected(&self, client_id: &str) {
        Monitor::client_disconnected(self, client_id);
    }

    fn keynotify(&self, client_id: &str, key: &Bytes, observing: bool) {
        Monitor::keynotify(self, client_id, key, observing);
    }

    fn request_handled(&self, took: Duration) {
        Monitor::request_handled(self, took);
    }

    /// The key table's queries, taken once by the store's task (`None` after that).
    fn take_queries(&self) -> Option<mpsc::Receiver<KeyQuery>> {
        self.inner
            .query_receiver
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The 99th percentile (nearest rank) of the samples.
fn p99(samples: &[u32]) -> u64 {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = (sorted.len() * 99).div_ceil(100);
    rank.checked_sub(1)
        .and_then(|i| sorted.get(i))
        .map_or(0, |&v| u64::from(v))
}

/// Bytes as UTF-8 text when they are printable text, else as hex; cut at `limit` bytes.
pub(crate) fn display(bytes: &[u8], limit: usize) -> (String, &'static str) {
    let cut = bytes.get(..limit).unwrap_or(bytes);
    match std::str::from_utf8(bytes) {
        Ok(text)
            if !text
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t') =>
        {
            let mut end = cut.len();
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            (text.get(..end).unwrap_or_default().to_owned(), "text")
        }
        _ => (
            cut.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            "hex",
        ),
    }
}

#[cfg(test)]
mod tests;
