//! The duplicate-request cache: a QoS 1 request may be delivered twice (a client resends it
//! after a reconnect). The answer to a request is remembered under (client id, correlation
//! data), so that a duplicate is answered from here and never executed twice.
//!
//! The cache is bounded by time (entries older than the TTL are gone), by count and by the
//! total size of the cached replies; the oldest entries go first.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use bytes::Bytes;
//! use mqstate_server::statestore::dedup::{DedupCache, DedupLimits};
//!
//! let mut cache: DedupCache<Bytes> = DedupCache::new(DedupLimits::default());
//! let now = Instant::now();
//! let corr = Bytes::from_static(b"0123456789abcdef");
//! assert!(cache.get("c1", &corr, now).is_none());
//! cache.insert("c1", corr.clone(), Bytes::from_static(b"+OK\r\n"), 5, now);
//! assert_eq!(cache.get("c1", &corr, now).unwrap(), &Bytes::from_static(b"+OK\r\n"));
//! assert!(cache.get("c2", &corr, now).is_none());
//! ```

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, Instant};

use std::sync::Arc;

use bytes::Bytes;
use hashbrown::HashTable;
use mqstate::Hlc;

use crate::statestore::handler::Answer;

/// The bounds of a [`DedupCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupLimits {
    /// How long an answer is kept.
    pub ttl: Duration,
    /// The most answers kept.
    pub max_entries: usize,
    /// The most bytes of answers kept (as reported by the caller for each entry).
    pub max_bytes: usize,
}

impl Default for DedupLimits {
    /// Five minutes, 100,000 answers, 64 MiB.
    fn default() -> Self {
        DedupLimits {
            ttl: Duration::from_secs(300),
            max_entries: 100_000,
            max_bytes: 64 << 20,
        }
    }
}

/// The cached answer to a request, replayed for duplicates: 56 bytes, with no heap block
/// for the common replies and the server's node id shared (docs/architecture.md, "Memory
/// per key").
///
/// ```
/// use std::sync::Arc;
/// use bytes::Bytes;
/// use mqstate::Hlc;
/// use mqstate_server::statestore::dedup::CachedAnswer;
/// use mqstate_server::statestore::handler::Answer;
///
/// let node: Arc<str> = Arc::from("StateStore");
/// let answer = Answer {
///     payload: Bytes::from_static(b"+OK\r\n"),
///     timestamp: Some(Hlc::new(5, 1, "StateStore")),
/// };
/// assert_eq!(CachedAnswer::of(answer.clone(), &node).answer(), answer);
/// ```
#[derive(Debug, Clone)]
pub struct CachedAnswer {
    payload: Payload,
    /// The `__ts`: milliseconds, counter, node id (`None`: no `__ts`).
    ts_ms: u64,
    ts_counter: u64,
    ts_node: Option<Arc<str>>,
}

/// A cached reply: one of [`COMMON_REPLIES`], or a copy at exact size.
#[derive(Debug, Clone)]
enum Payload {
    Common(&'static [u8]),
    Copied(Box<[u8]>),
}

/// The replies most requests get, kept without a copy.
const COMMON_REPLIES: [&[u8]; 6] = [
    b"+OK\r\n", b":1\r\n", b":0\r\n", b":-1\r\n", b"_\r\n", b"$-1\r\n",
];

impl CachedAnswer {
    /// Keeps `answer`; `server_node` is the server's node id, shared with every answer
    /// whose `__ts` carries it.
    pub fn of(answer: Answer, server_node: &Arc<str>) -> Self {
        let payload = match COMMON_REPLIES.iter().find(|r| **r == &answer.payload[..]) {
            Some(common) => Payload::Common(common),
            None => Payload::Copied(Box::from(&answer.payload[..])),
        };
        let (ts_ms, ts_counter, ts_node) = match answer.timestamp {
            Some(ts) if *ts.node_id == **server_node => {
                (ts.ms, ts.counter, Some(server_node.clone()))
            }
            Some(ts) => (ts.ms, ts.counter, Some(Arc::from(ts.node_id))),
            None => (0, 0, None),
        };
        CachedAnswer {
            payload,
            ts_ms,
            ts_counter,
            ts_node,
        }
    }

    /// The answer again.
    pub fn answer(&self) -> Answer {
        Answer {
            payload: match &self.payload {
                Payload::Common(reply) => Bytes::from_static(reply),
                Payload::Copied(reply) => Bytes::copy_from_slice(reply),
            },
            timestamp: self
                .ts_node
                .as_ref()
                .map(|node| Hlc::new(self.ts_ms, self.ts_counter, node.to_string())),
        }
    }
}

/// The correlation data of a cached request, copied (so that no received packet stays
/// alive for it): inline up to 16 bytes (a UUID, what clients send), else its own block.
#[derive(Debug)]
enum Correlation {
    Inline { len: u8, bytes: [u8; 16] },
    Boxed(Box<[u8]>),
}

impl Correlation {
    fn new(data: &[u8]) -> Self {
        let mut bytes = [0; 16];
        match (u8::try_from(data.len()), bytes.get_mut(..data.len())) {
            (Ok(len), Some(inline)) => {
                inline.copy_from_slice(data);
                Correlation::Inline { len, bytes }
            }
            _ => Correlation::Boxed(Box::from(data)),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            // `len` is at most 16 (`new`).
            Correlation::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or(bytes),
            Correlation::Boxed(data) => data,
        }
    }
}

/// One remembered answer: the request's client (an index into [`ClientIds`]) and
/// correlation data, when it was answered and what it counts against the size bound.
#[derive(Debug)]
struct Cached<T> {
    client: u32,
    size: u32,
    /// Microseconds since the cache's `epoch`.
    at: u64,
    correlation: Correlation,
    value: T,
}

/// The client ids of the cached answers, each kept once however many answers it has (a
/// client sends many requests), and forgotten with its last answer.
#[derive(Debug, Default)]
struct ClientIds {
    /// Each id and how many cached answers name it; a count of 0 is a free slot.
    ids: Vec<(Arc<str>, u32)>,
    by_name: HashMap<Arc<str>, u32>,
    free: Vec<u32>,
}

impl ClientIds {
    fn find(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    /// The index of `name`, counting one more answer for it.
    fn acquire(&mut self, name: &str) -> Option<u32> {
        if let Some(id) = self.find(name)
            && let Some((_, count)) = self.ids.get_mut(id as usize)
        {
            *count += 1;
            return Some(id);
        }
        let name: Arc<str> = Arc::from(name);
        let reused = self.free.pop().and_then(|id| {
            let slot = self.ids.get_mut(id as usize)?;
            *slot = (name.clone(), 1);
            Some(id)
        });
        let id = match reused {
            Some(id) => id,
            None => {
                let id = u32::try_from(self.ids.len()).ok()?;
                self.ids.push((name.clone(), 1));
                id
            }
        };
        self.by_name.insert(name, id);
        Some(id)
    }

    /// One answer fewer for `id`; the id is forgotten with its last one.
    fn release(&mut self, id: u32) {
        let Some((name, count)) = self.ids.get_mut(id as usize) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            self.by_name.remove(&**name);
            *name = Arc::from("");
            self.free.push(id);
        }
    }
}

/// Remembered answers keyed by (client id, correlation data).
///
/// Layout (docs/architecture.md, "Memory per key"): the answers sit in a queue in insertion
/// order, which is also the eviction order; a hash table of 8-byte sequence numbers finds
/// them. An answer replaced by a newer one for the same request leaves an empty slot in the
/// queue, dropped when it reaches the front. An answer to a request with at most 16 bytes
/// of correlation data takes no heap block besides its queue slot.
#[derive(Debug)]
pub struct DedupCache<T> {
    limits: DedupLimits,
    /// Sequence numbers of the live answers, hashed by (client index, correlation data).
    index: HashTable<u64>,
    hasher: RandomState,
    clients: ClientIds,
    /// Answers (or holes left by replaced ones), oldest first; `queue[i]` has sequence
    /// number `first_seq + i`.
    queue: VecDeque<Option<Cached<T>>>,
    first_seq: u64,
    bytes: usize,
    /// The origin of the entries' `at`.
    epoch: Instant,
}

impl<T> DedupCache<T> {
    /// An empty cache.
    pub fn new(limits: DedupLimits) -> Self {
        DedupCache {
            limits,
            index: HashTable::new(),
            hasher: RandomState::new(),
            clients: ClientIds::default(),
            queue: VecDeque::new(),
            first_seq: 0,
            bytes: 0,
            epoch: Instant::now(),
        }
    }

    fn micros(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_micros()).unwrap_or(u64::MAX)
    }

    fn slot(&self, seq: u64) -> Option<&Cached<T>> {
        let i = usize::try_from(seq.checked_sub(self.first_seq)?).ok()?;
        self.queue.get(i)?.as_ref()
    }

    fn find(&self, client_id: &str, correlation: &[u8]) -> Option<u64> {
        self.find_by_index(self.clients.find(client_id)?, correlation)
    }

    /// [`Self::find`] for a client whose index is known.
    fn find_by_index(&self, client: u32, correlation: &[u8]) -> Option<u64> {
        let hash = self.hasher.hash_one((client, correlation));
        self.index
            .find(hash, |&seq| {
                self.slot(seq)
                    .is_some_and(|c| c.client == client && c.correlation.as_slice() == correlation)
            })
            .copied()
    }

    /// The answer remembered for this request, if it is younger than the TTL.
    pub fn get(&mut self, client_id: &str, correlation: &Bytes, now: Instant) -> Option<&T> {
        self.evict(now);
        let seq = self.find(client_id, correlation)?;
        self.slot(seq).map(|c| &c.value)
    }

    /// The memory an entry takes, to report as its `size` so that `max_bytes` bounds the
    /// cache's real memory: the answer of `answer_len` bytes in its own block, the
    /// correlation data's block when it is longer than 16 bytes, the queue slot and the index
    /// slot, with the allocations' headers, estimated from the types' sizes. (The client id
    /// is kept once per client, not per answer.)
    ///
    /// ```
    /// use mqstate_server::statestore::dedup::{CachedAnswer, DedupCache};
    ///
    /// let size = DedupCache::<CachedAnswer>::entry_size(&[0; 16], 5);
    /// assert!(size > 5 + 8 + 16);
    /// ```
    pub fn entry_size(correlation: &[u8], answer_len: usize) -> usize {
        /// Allocation header and rounding, per heap allocation (glibc: 16 bytes, rounded).
        const ALLOC: usize = 32;
        let correlation = if correlation.len() > 16 {
            correlation.len() + ALLOC
        } else {
            0
        };
        // hashbrown keeps up to 1/8 of its slots empty, plus a control byte each.
        let index = (std::mem::size_of::<u64>() + 1) * 8 / 7;
        answer_len + ALLOC + correlation + std::mem::size_of::<Option<Cached<T>>>() + index
    }

    /// Remembers the answer to a request; `size` is what it counts against `max_bytes`.
    /// An answer larger than `max_bytes` is not kept.
    pub fn insert(
        &mut self,
        client_id: &str,
        correlation: Bytes,
        value: T,
        size: usize,
        now: Instant,
    ) {
        let Ok(size32) = u32::try_from(size) else {
            return;
        };
        if size > self.limits.max_bytes || self.limits.max_entries == 0 {
            return;
        }
        // Counted before the replaced answer is forgotten, so that the client's index
        // survives that (it would otherwise be freed when it was the client's only answer).
        let Some(client) = self.clients.acquire(client_id) else {
            return;
        };
        if let Some(old) = self.find_by_index(client, &correlation) {
            self.remove(old);
        }
        let seq = self.first_seq + self.queue.len() as u64;
        self.queue.push_back(Some(Cached {
            client,
            size: size32,
            at: self.micros(now),
            correlation: Correlation::new(&correlation),
            value,
        }));
        let hash = self.hasher.hash_one((client, &correlation[..]));
        let (hasher, queue, first) = (&self.hasher, &self.queue, self.first_seq);
        self.index.insert_unique(hash, seq, |&s| {
            let slot = s
                .checked_sub(first)
                .and_then(|i| usize::try_from(i).ok())
                .and_then(|i| queue.get(i))
                .and_then(Option::as_ref);
            slot.map_or(0, |c| hasher.hash_one((c.client, c.correlation.as_slice())))
        });
        self.bytes += size;
        self.evict(now);
    }

    /// Forgets the answer with sequence number `seq` (its queue slot becomes a hole).
    fn remove(&mut self, seq: u64) {
        let Some(c) = self.slot(seq) else {
            return;
        };
        let hash = self.hasher.hash_one((c.client, c.correlation.as_slice()));
        if let Ok(entry) = self.index.find_entry(hash, |&s| s == seq) {
            entry.remove();
        }
        let taken = seq
            .checked_sub(self.first_seq)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| self.queue.get_mut(i))
            .and_then(Option::take);
        if let Some(c) = taken {
            self.bytes = self.bytes.saturating_sub(c.size as usize);
            self.clients.release(c.client);
        }
    }

    /// How many answers are kept.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no answer is kept.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Drops what is too old, then the oldest until within the count and size bounds.
    fn evict(&mut self, now: Instant) {
        let now = self.micros(now);
        let ttl = u64::try_from(self.limits.ttl.as_micros()).unwrap_or(u64::MAX);
        loop {
            let over =
                self.index.len() > self.limits.max_entries || self.bytes > self.limits.max_bytes;
            let drop_front = match self.queue.front() {
                None => false,
                // A hole left by a replaced answer.
                Some(None) => true,
                Some(Some(c)) => over || now.saturating_sub(c.at) >= ttl,
            };
            if !drop_front {
                break;
            }
            self.remove(self.first_seq);
            self.queue.pop_front();
            self.first_seq += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corr(n: u8) -> Bytes {
        Bytes::from(vec![n; 16])
    }

    #[test]
    fn an_answer_to_a_set_takes_one_queue_slot_of_at_most_96_bytes() {
        // The layout docs/architecture.md describes ("Memory per key"): the reply and the
        // node id need no block of their own, the correlation data sits inline.
        assert!(std::mem::size_of::<CachedAnswer>() <= 56);
        assert!(std::mem::size_of::<Option<Cached<CachedAnswer>>>() <= 96);
        let node: Arc<str> = Arc::from("StateStore");
        let answer = Answer {
            payload: Bytes::from_static(b"+OK\r\n"),
            timestamp: Some(Hlc::new(5, 1, "StateStore")),
        };
        let cached = CachedAnswer::of(answer, &node);
        assert!(
            matches!(cached.payload, Payload::Common(_)),
            "a common reply is not copied"
        );
        assert!(Arc::ptr_eq(cached.ts_node.as_ref().unwrap(), &node));
        assert!(matches!(
            Correlation::new(&[7; 16]),
            Correlation::Inline { len: 16, .. }
        ));
        assert!(matches!(Correlation::new(&[7; 17]), Correlation::Boxed(_)));
    }

    #[test]
    fn correlation_data_of_any_length_is_told_apart() {
        let mut c = DedupCache::new(DedupLimits::default());
        let t0 = Instant::now();
        let short = Bytes::from_static(b"ab");
        let padded = Bytes::from_static(b"ab\0");
        let long = Bytes::from(vec![9u8; 40]);
        c.insert("a", short.clone(), 1u32, 1, t0);
        c.insert("a", long.clone(), 2, 1, t0);
        c.insert("a", Bytes::new(), 3, 1, t0);
        assert_eq!(c.get("a", &short, t0), Some(&1));
        assert_eq!(c.get("a", &padded, t0), None, "length is part of the key");
        assert_eq!(c.get("a", &long, t0), Some(&2));
        assert_eq!(c.get("a", &Bytes::new(), t0), Some(&3));
        assert_eq!(c.get("b", &short, t0), None, "another client's request");
    }

    #[test]
    fn a_client_id_is_kept_once_and_forgotten_with_its_last_answer() {
        let limits = DedupLimits {
            ttl: Duration::from_secs(10),
            max_entries: 3,
            ..DedupLimits::default()
        };
        let mut c = DedupCache::new(limits);
        let t0 = Instant::now();
        c.insert("a", corr(1), 1u32, 1, t0);
        c.insert("a", corr(2), 2, 1, t0);
        c.insert("b", corr(1), 3, 1, t0);
        assert_eq!(c.clients.by_name.len(), 2);
        let a = c.clients.find("a").unwrap() as usize;
        assert_eq!(c.clients.ids.get(a).map(|(_, count)| *count), Some(2));
        // Three newer answers of client c push out every answer of a and b.
        for n in 1..=3 {
            c.insert("c", corr(n), 10 + u32::from(n), 1, t0);
        }
        assert_eq!(c.clients.by_name.len(), 1, "a and b are forgotten");
        assert_eq!(c.get("a", &corr(1), t0), None);
        assert_eq!(c.get("c", &corr(2), t0), Some(&12));
        // A freed slot is reused for the next client.
        c.insert("d", corr(1), 20, 1, t0);
        assert_eq!(c.clients.ids.len(), 3);
        assert_eq!(c.get("d", &corr(1), t0), Some(&20));
        assert_eq!(
            c.get("c", &corr(1), t0),
            None,
            "the oldest of c went for d's answer"
        );
    }

    #[test]
    fn entries_expire_after_the_ttl() {
        let limits = DedupLimits {
            ttl: Duration::from_secs(10),
            ..DedupLimits::default()
        };
        let mut c = DedupCache::new(limits);
        let t0 = Instant::now();
        c.insert("a", corr(1), 1u32, 1, t0);
        assert_eq!(c.get("a", &corr(1), t0 + Duration::from_secs(9)), Some(&1));
        assert_eq!(c.get("a", &corr(1), t0 + Duration::from_secs(10)), None);
        assert!(c.is_empty());
    }

    #[test]
    fn count_and_size_bounds_evict_the_oldest() {
        let limits = DedupLimits {
            ttl: Duration::from_secs(10),
            max_entries: 2,
            max_bytes: 100,
        };
        let mut c = DedupCache::new(limits);
        let t0 = Instant::now();
        c.insert("a", corr(1), 1u32, 10, t0);
        c.insert("a", corr(2), 2, 10, t0);
        c.insert("a", corr(3), 3, 10, t0);
        assert_eq!(c.len(), 2);
        assert_eq!(c.get("a", &corr(1), t0), None);
        assert_eq!(c.get("a", &corr(3), t0), Some(&3));
        c.insert("a", corr(4), 4, 95, t0);
        assert_eq!(c.len(), 1);
        assert_eq!(c.get("a", &corr(4), t0), Some(&4));
        // Too big to keep at all.
        c.insert("a", corr(5), 5, 101, t0);
        assert_eq!(c.get("a", &corr(5), t0), None);
    }

    #[test]
    fn replacing_an_entry_keeps_the_accounting_right() {
        let limits = DedupLimits {
            ttl: Duration::from_secs(10),
            max_entries: 10,
            max_bytes: 100,
        };
        let mut c = DedupCache::new(limits);
        let t0 = Instant::now();
        c.insert("a", corr(1), 1u32, 60, t0);
        c.insert("a", corr(1), 2, 60, t0 + Duration::from_secs(1));
        assert_eq!(c.len(), 1);
        assert_eq!(c.get("a", &corr(1), t0 + Duration::from_secs(2)), Some(&2));
        // The replaced answer was the client's only one: its id stays, counted once.
        assert_eq!(c.clients.by_name.len(), 1);
        let a = c.clients.find("a").unwrap() as usize;
        assert_eq!(c.clients.ids.get(a).map(|(_, count)| *count), Some(1));
        assert!(c.clients.free.is_empty());
        // The replaced entry's old slot does not evict the new one.
        assert_eq!(c.get("a", &corr(1), t0 + Duration::from_secs(10)), Some(&2));
        assert_eq!(c.get("a", &corr(1), t0 + Duration::from_secs(11)), None);
        assert!(
            c.clients.by_name.is_empty(),
            "forgotten with its last answer"
        );
    }
}
