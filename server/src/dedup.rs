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

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;

/// The bounds of a [`DedupCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupLimits {
    /// How long an answer is kept.
    pub ttl: Duration,
    /// The most answers kept.
    pub max_entries: usize,
    /// The most bytes kept, as reported by the caller for each entry: the store reports
    /// [`DedupCache::entry_size`] (the answer, the key, kept twice, and the fixed overhead of
    /// an entry), so that this bounds the cache's memory, not only its answers.
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

type Key = (String, Bytes);

#[derive(Debug)]
struct Cached<T> {
    at: Instant,
    size: usize,
    value: T,
}

/// Remembered answers keyed by (client id, correlation data).
#[derive(Debug)]
pub struct DedupCache<T> {
    limits: DedupLimits,
    map: HashMap<Key, Cached<T>>,
    /// Insertion order (oldest first), for eviction; may hold keys already replaced.
    order: VecDeque<(Instant, Key)>,
    bytes: usize,
}

impl<T> DedupCache<T> {
    /// An empty cache.
    pub fn new(limits: DedupLimits) -> Self {
        DedupCache {
            limits,
            map: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
        }
    }

    /// The answer remembered for this request, if it is younger than the TTL.
    pub fn get(&mut self, client_id: &str, correlation: &Bytes, now: Instant) -> Option<&T> {
        self.evict(now);
        self.map
            .get(&(client_id.to_owned(), correlation.clone()))
            .map(|c| &c.value)
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
        let key = (client_id.to_owned(), correlation);
        if let Some(old) = self.map.insert(
            key.clone(),
            Cached {
                at: now,
                size,
                value,
            },
        ) {
            self.bytes = self.bytes.saturating_sub(old.size);
        }
        self.bytes += size;
        self.order.push_back((now, key));
        self.evict(now);
    }

    /// The memory an entry takes, to report as its `size`: an answer of `answer_len` bytes
    /// under (client id, correlation data). The key is held twice (the map and the eviction
    /// order) and each entry has a fixed overhead (the map's slot, the order's slot, the
    /// allocations' headers), estimated from the types' sizes. The correlation data must be
    /// its own allocation (not a slice of a larger buffer, which it would keep alive).
    ///
    /// ```
    /// use bytes::Bytes;
    /// use mqstate_server::dedup::DedupCache;
    ///
    /// let size = DedupCache::<Bytes>::entry_size("client-1", &Bytes::from_static(&[0; 16]), 5);
    /// assert!(size > 5 + 2 * (8 + 16));
    /// ```
    pub fn entry_size(client_id: &str, correlation: &Bytes, answer_len: usize) -> usize {
        /// Allocation headers and rounding, per heap allocation (glibc: 16 bytes, rounded).
        const ALLOC: usize = 32;
        let key = client_id.len() + correlation.len() + 2 * ALLOC;
        let slots = 2 * std::mem::size_of::<Key>()
            + std::mem::size_of::<Cached<T>>()
            + 2 * std::mem::size_of::<Instant>()
            // hashbrown keeps up to 1/8 of its slots empty, plus a control byte each.
            + (std::mem::size_of::<(Key, Cached<T>)>() + 1) / 7;
        answer_len + ALLOC + 2 * key + slots
    }

    /// How many answers are kept.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no answer is kept.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Drops what is too old, then the oldest until within the count and size bounds.
    fn evict(&mut self, now: Instant) {
        while let Some((at, key)) = self.order.front() {
            let expired = now.saturating_duration_since(*at) >= self.limits.ttl;
            let over =
                self.map.len() > self.limits.max_entries || self.bytes > self.limits.max_bytes;
            // Entries replaced since are stale in `order`: drop them whenever met.
            let stale = self.map.get(key).is_none_or(|c| c.at != *at);
            if !(expired || over || stale) {
                break;
            }
            if let Some((_, key)) = self.order.pop_front()
                && !stale
                && let Some(c) = self.map.remove(&key)
            {
                self.bytes = self.bytes.saturating_sub(c.size);
            }
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
