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
//! use mqstate_server::dedup::{DedupCache, DedupLimits};
//!
//! let mut cache: DedupCache<Bytes> = DedupCache::new(DedupLimits::default());
//! let now = Instant::now();
//! let corr = Bytes::from_static(b"0123456789abcdef");
//! assert!(cache.get("c1", &corr, now).is_none());
//! cache.insert("c1", corr.clone(), Bytes::from_static(b"+OK\r\n"), 5, now);
//! assert_eq!(cache.get("c1", &corr, now).unwrap(), &Bytes::from_static(b"+OK\r\n"));
//! assert!(cache.get("c2", &corr, now).is_none());
//! ```

use std::collections::VecDeque;
use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, Instant};

use std::sync::Arc;

use bytes::Bytes;
use hashbrown::HashTable;
use mqstate::Hlc;

use crate::handler::Answer;

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

/// The cached answer to a request, replayed for duplicates: 64 bytes, with no heap block
/// for the common replies and the server's node id shared (docs/architecture.md, "Memory
/// per key").
///
/// ```
/// use std::sync::Arc;
/// use bytes::Bytes;
/// use mqstate::Hlc;
/// use mqstate_server::dedup::CachedAnswer;
/// use mqstate_server::handler::Answer;
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
    payload: Bytes,
    /// The `__ts`: milliseconds, counter, node id (`None`: no `__ts`).
    ts_ms: u64,
    ts_counter: u64,
    ts_node: Option<Arc<str>>,
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
            Some(r) => Bytes::from_static(r),
            // An exact-size copy: the encoder's buffer may be larger.
            None => Bytes::copy_from_slice(&answer.payload),
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
            payload: self.payload.clone(),
            timestamp: self
                .ts_node
                .as_ref()
                .map(|node| Hlc::new(self.ts_ms, self.ts_counter, node.to_string())),
        }
    }
}

/// One remembered answer. Its key is the client id and the correlation data in one
/// exact-size block (copied, so that no received packet stays alive for it).
#[derive(Debug)]
struct Cached<T> {
    /// The client id's bytes, then the correlation data.
    key: Box<[u8]>,
    client_len: u32,
    at: Instant,
    size: usize,
    value: T,
}

impl<T> Cached<T> {
    fn is(&self, client_id: &str, correlation: &[u8]) -> bool {
        let (client, corr) = self.key.split_at(self.client_len as usize);
        client == client_id.as_bytes() && corr == correlation
    }
}

/// Remembered answers keyed by (client id, correlation data).
///
/// Layout (docs/architecture.md, "Memory per key"): the answers sit in a queue in insertion
/// order, which is also the eviction order; a hash table of 8-byte sequence numbers finds
/// them. An answer replaced by a newer one for the same request leaves an empty slot in the
/// queue, dropped when it reaches the front.
#[derive(Debug)]
pub struct DedupCache<T> {
    limits: DedupLimits,
    /// Sequence numbers of the live answers, hashed by their key.
    index: HashTable<u64>,
    hasher: RandomState,
    /// Answers (or holes left by replaced ones), oldest first; `queue[i]` has sequence
    /// number `first_seq + i`.
    queue: VecDeque<Option<Cached<T>>>,
    first_seq: u64,
    bytes: usize,
}

impl<T> DedupCache<T> {
    /// An empty cache.
    pub fn new(limits: DedupLimits) -> Self {
        DedupCache {
            limits,
            index: HashTable::new(),
            hasher: RandomState::new(),
            queue: VecDeque::new(),
            first_seq: 0,
            bytes: 0,
        }
    }

    fn hash(&self, client_id: &str, correlation: &[u8]) -> u64 {
        self.hasher.hash_one((client_id.as_bytes(), correlation))
    }

    fn slot(&self, seq: u64) -> Option<&Cached<T>> {
        let i = usize::try_from(seq.checked_sub(self.first_seq)?).ok()?;
        self.queue.get(i)?.as_ref()
    }

    fn find(&self, client_id: &str, correlation: &[u8]) -> Option<u64> {
        let hash = self.hash(client_id, correlation);
        self.index
            .find(hash, |&seq| {
                self.slot(seq).is_some_and(|c| c.is(client_id, correlation))
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
    /// cache's real memory: the answer of `answer_len` bytes, the key's own block (client id
    /// and correlation data), the queue slot and the index slot, with the allocations'
    /// headers, estimated from the types' sizes.
    ///
    /// ```
    /// use mqstate_server::dedup::{CachedAnswer, DedupCache};
    ///
    /// let size = DedupCache::<CachedAnswer>::entry_size("client-1", &[0; 16], 5);
    /// assert!(size > 5 + 8 + 16);
    /// ```
    pub fn entry_size(client_id: &str, correlation: &[u8], answer_len: usize) -> usize {
        /// Allocation header and rounding, per heap allocation (glibc: 16 bytes, rounded).
        const ALLOC: usize = 32;
        let key = client_id.len() + correlation.len() + ALLOC;
        // hashbrown keeps up to 1/8 of its slots empty, plus a control byte each.
        let index = (std::mem::size_of::<u64>() + 1) * 8 / 7;
        answer_len + ALLOC + key + std::mem::size_of::<Option<Cached<T>>>() + index
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
        if size > self.limits.max_bytes || self.limits.max_entries == 0 {
            return;
        }
        let Ok(client_len) = u32::try_from(client_id.len()) else {
            return;
        };
        if let Some(old) = self.find(client_id, &correlation) {
            self.remove(old);
        }
        let mut key = Vec::with_capacity(client_id.len() + correlation.len());
        key.extend_from_slice(client_id.as_bytes());
        key.extend_from_slice(&correlation);
        let seq = self.first_seq + self.queue.len() as u64;
        self.queue.push_back(Some(Cached {
            key: key.into_boxed_slice(),
            client_len,
            at: now,
            size,
            value,
        }));
        let hash = self.hash(client_id, &correlation);
        let (hasher, queue, first) = (&self.hasher, &self.queue, self.first_seq);
        self.index.insert_unique(hash, seq, |&s| {
            let slot = s
                .checked_sub(first)
                .and_then(|i| usize::try_from(i).ok())
                .and_then(|i| queue.get(i))
                .and_then(Option::as_ref);
            slot.map_or(0, |c| {
                let (client, corr) = c.key.split_at(c.client_len as usize);
                hasher.hash_one((client, corr))
            })
        });
        self.bytes += size;
        self.evict(now);
    }

    /// Forgets the answer with sequence number `seq` (its queue slot becomes a hole).
    fn remove(&mut self, seq: u64) {
        let Some(c) = self.slot(seq) else {
            return;
        };
        let (client, corr) = c.key.split_at(c.client_len as usize);
        let hash = self.hasher.hash_one((client, corr));
        if let Ok(entry) = self.index.find_entry(hash, |&s| s == seq) {
            entry.remove();
        }
        let taken = seq
            .checked_sub(self.first_seq)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| self.queue.get_mut(i))
            .and_then(Option::take);
        if let Some(c) = taken {
            self.bytes = self.bytes.saturating_sub(c.size);
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
        loop {
            let over =
                self.index.len() > self.limits.max_entries || self.bytes > self.limits.max_bytes;
            let drop_front = match self.queue.front() {
                None => false,
                // A hole left by a replaced answer.
                Some(None) => true,
                Some(Some(c)) => over || now.saturating_duration_since(c.at) >= self.limits.ttl,
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
        // The replaced entry's old slot does not evict the new one.
        assert_eq!(c.get("a", &corr(1), t0 + Duration::from_secs(10)), Some(&2));
        assert_eq!(c.get("a", &corr(1), t0 + Duration::from_secs(11)), None);
    }
}
