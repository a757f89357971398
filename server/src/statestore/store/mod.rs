//! The key-value store itself: keys → (value, version, fencing token, expiry deadline), the
//! key quota, conditional SET, and expiry (docs/protocol.md sections 2, 5 and 7).
//!
//! Everything here is synchronous and takes the current time as an argument, so it can be
//! tested without a runtime or a real clock. Versions are computed by the caller (the
//! [`handler`](crate::statestore::handler)) from the server's HLC and passed in.
//!
//! Expiry: every key with a deadline sits in an ordered index. [`Store::expire_due`] removes
//! every key whose deadline has passed and returns them (the caller sends their DELETE
//! notifications); [`Store::next_deadline`] tells the caller when to call it next, so a timer
//! can wake exactly then. The handler also calls `expire_due` before every request, so an
//! expired key is never visible even if the timer has not fired yet.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use bytes::Bytes;
//! use mqstate::Hlc;
//! use mqstate_server::statestore::store::{SetArgs, SetOutcome, Store};
//!
//! let mut store = Store::new(None);
//! let t0 = Instant::now();
//! let args = SetArgs::new(Bytes::from_static(b"k"), Bytes::from_static(b"v"))
//!     .expiry(Some(Duration::from_millis(50)));
//! assert_eq!(store.set(args, Hlc::new(1, 0, "StateStore"), t0), Ok(SetOutcome::Applied));
//! assert!(store.get(b"k").is_some());
//! assert_eq!(store.next_deadline(), Some(t0 + Duration::from_millis(50)));
//! let expired = store.expire_due(t0 + Duration::from_millis(50));
//! assert_eq!(expired.len(), 1);
//! assert!(store.get(b"k").is_none());
//! ```

use std::collections::BTreeSet;
use std::ops::Bound;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mqstate::Hlc;
use mqstate::protocol::glob::Pattern;
use mqstate::protocol::resp3::SetCondition;

mod layout;
#[cfg(test)]
mod tests;
mod values;

use layout::{Extra, NODE_IN_EXTRA, NodeIds, Slot};
pub use values::{Entry, ScanLimits, ScanStep, SetArgs, SetOutcome, StoreError, VdelOutcome};

/// The keys, their deadlines and the quota.
///
/// Memory layout (measured by `cargo bench -p mqstate-server --bench memory` and
/// `mqstate bench --memory`): keys live in a B-tree set of `Slot`s ordered by key, each
/// holding its key and value in one exact-size heap block copied out of the request, so a
/// stored key never keeps the received MQTT packet alive; versions name their node id by
/// index; the rare deadline and fencing token sit behind one pointer. [`Store::get`] builds
/// an [`Entry`] snapshot from this. The order is what `SCAN` needs: a page starts after the
/// last key of the previous one, at a cost that does not depend on the store's size (see
/// [`Store::scan`]); a B-tree of 56-byte slots costs about what the hash table it replaced
/// did (docs/architecture.md, "Memory per key").
#[derive(Debug, Default)]
pub struct Store {
    table: BTreeSet<Slot>,
    nodes: NodeIds,
    /// Every key with a deadline, ordered by deadline (then key, to keep pairs unique).
    deadlines: BTreeSet<(Instant, Box<[u8]>)>,
    /// The most keys the store holds at once (`None`: no limit).
    max_keys: Option<usize>,
    /// When journaling (a data dir is in use): every change since the last
    /// [`Store::take_journal`], as (key, the entry before the change), in order.
    journal: Option<Vec<(Bytes, Option<Entry>)>>,
}

/// Checks a request's fencing token against the key's (docs/protocol.md section 5).
fn check_fence(held: Option<&Hlc>, token: Option<&Hlc>) -> Result<(), StoreError> {
    match (held, token) {
        (None, _) => Ok(()),
        (Some(_), None) => Err(StoreError::FencingTokenRequired),
        (Some(held), Some(given)) if given < held => Err(StoreError::FencingTokenLowerVersion),
        (Some(_), Some(_)) => Ok(()),
    }
}

impl Store {
    /// An empty store; `max_keys` is the key quota (`None`: unlimited).
    pub fn new(max_keys: Option<usize>) -> Self {
        Store {
            max_keys,
            ..Store::default()
        }
    }

    /// Records every change from now on (see [`Store::take_journal`]); the
    /// [`persist`](crate::persist) layer uses the journal to write changes to disk and to undo
    /// them if the disk refuses.
    pub fn enable_journal(&mut self) {
        self.journal.get_or_insert_with(Vec::new);
    }

    /// The changes waiting in the journal (empty when journaling is off).
    pub fn journal(&self) -> &[(Bytes, Option<Entry>)] {
        self.journal.as_deref().unwrap_or_default()
    }

    /// Whether changes are waiting in the journal.
    pub fn journal_is_empty(&self) -> bool {
        self.journal.as_ref().is_none_or(Vec::is_empty)
    }

    /// The changes since the last call: (key, entry before the change), oldest first. The
    /// journal stays enabled.
    pub fn take_journal(&mut self) -> Vec<(Bytes, Option<Entry>)> {
        self.journal
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Undoes changes taken from the journal (newest first), putting every key back as it
    /// was; the undo itself is not journaled.
    pub fn undo(&mut self, changes: Vec<(Bytes, Option<Entry>)>) {
        let journal = self.journal.take();
        for (key, before) in changes.into_iter().rev() {
            self.put(key, before);
        }
        self.journal = journal;
    }

    /// Puts a key as given (`None`: absent), bypassing conditions and quota: for restoring
    /// from disk and for [`Store::undo`]. Not journaled if journaling is off. A key of 4 GiB
    /// or more cannot be stored and is only removed (the codec never produces one).
    pub fn put(&mut self, key: Bytes, entry: Option<Entry>) {
        self.remove(&key);
        if let Some(entry) = entry {
            let Ok(slot) = self.slot(
                &key,
                &entry.value,
                &entry.version,
                Extra {
                    expires_at: entry.expires_at,
                    fencing_token: entry.fencing_token,
                    node_id: None,
                },
                entry.persist,
            ) else {
                tracing::error!(
                    key_len = key.len(),
                    "a key of 4 GiB or more cannot be stored"
                );
                return;
            };
            self.record(&key, |_| None);
            self.insert_new(slot);
        }
    }

    fn record(&mut self, key: &[u8], before: impl FnOnce(&Self) -> Option<Entry>) {
        if self.journal.is_some() {
            let before = before(self);
            if let Some(journal) = &mut self.journal {
                journal.push((Bytes::copy_from_slice(key), before));
            }
        }
    }

    /// Builds a slot: one heap block for key and value, the version's node id interned.
    fn slot(
        &mut self,
        key: &[u8],
        value: &[u8],
        version: &Hlc,
        mut extra: Extra,
        persist: bool,
    ) -> Result<Slot, StoreError> {
        let key_len = u32::try_from(key.len()).map_err(|_| StoreError::KeyTooLong)?;
        let mut data = Vec::with_capacity(key.len() + value.len());
        data.extend_from_slice(key);
        data.extend_from_slice(value);
        let node = match self.nodes.intern(&version.node_id) {
            Some(i) => i,
            None => {
                extra.node_id = Some(version.node_id.clone());
                NODE_IN_EXTRA
            }
        };
        let has_extra =
            extra.expires_at.is_some() || extra.fencing_token.is_some() || extra.node_id.is_some();
        Ok(Slot {
            data: data.into_boxed_slice(),
            version_ms: version.ms,
            version_counter: version.counter,
            extra: has_extra.then(|| Box::new(extra)),
            key_len,
            node,
            persist,
        })
    }

    /// The [`Entry`] snapshot of a slot.
    fn entry(&self, slot: &Slot) -> Entry {
        let node_id = match (&slot.extra, slot.node) {
            (Some(extra), NODE_IN_EXTRA) => extra.node_id.clone().unwrap_or_default(),
            (_, i) => self.nodes.get(i).to_owned(),
        };
        Entry {
            value: Bytes::copy_from_slice(slot.value()),
            version: Hlc::new(slot.version_ms, slot.version_counter, node_id),
            fencing_token: slot.fencing_token().cloned(),
            expires_at: slot.expires_at(),
            persist: slot.persist,
        }
    }

    fn find(&self, key: &[u8]) -> Option<&Slot> {
        self.table.get(key)
    }

    /// Inserts a slot whose key is not in the table.
    fn insert_new(&mut self, slot: Slot) {
        if let Some(at) = slot.expires_at() {
            self.deadlines.insert((at, Box::from(slot.key())));
        }
        self.table.insert(slot);
    }

    /// How many keys the store holds (including expired keys not yet removed).
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The key quota.
    pub fn max_keys(&self) -> Option<usize> {
        self.max_keys
    }

    /// One step of a scan: the keys matching `pattern` after `after` (from the first key when
    /// `None`), in byte order, within `limits`; and where the next step starts, unless no
    /// key is left. Expired keys (deadline at or before `now`) are passed over even if
    /// [`Store::expire_due`] has not removed them yet.
    ///
    /// It walks the ordered keys from the later of `after` and the pattern's literal prefix,
    /// and stops at the end of that prefix, so a step costs the keys it examines (at most
    /// `limits.max_examined`) plus a logarithmic seek, wherever the scan is in the store.
    ///
    /// ```
    /// use std::time::Instant;
    /// use bytes::Bytes;
    /// use mqstate::Hlc;
    /// use mqstate::protocol::glob::Pattern;
    /// use mqstate_server::statestore::store::{ScanLimits, SetArgs, Store};
    ///
    /// let (mut store, now) = (Store::new(None), Instant::now());
    /// for key in ["a/1", "a/2", "b/1"] {
    ///     let args = SetArgs::new(Bytes::from(key), Bytes::from_static(b"v"));
    ///     store.set(args, Hlc::new(1, 0, "StateStore"), now).unwrap();
    /// }
    /// let limits = ScanLimits { max_keys: 1, ..ScanLimits::default() };
    /// let pattern = Pattern::parse(b"a/*").unwrap();
    /// let first = store.scan(&pattern, None, limits, now);
    /// assert_eq!(first.keys, vec![Bytes::from("a/1")]);
    /// let second = store.scan(&pattern, first.resume_after.as_deref(), limits, now);
    /// assert_eq!(second.keys, vec![Bytes::from("a/2")]);
    /// assert_eq!(second.resume_after, None);
    /// ```
    pub fn scan(
        &self,
        pattern: &Pattern,
        after: Option<&[u8]>,
        limits: ScanLimits,
        now: Instant,
    ) -> ScanStep {
        let prefix = pattern.literal_prefix();
        let start = match after {
            Some(after) if after >= prefix => Bound::Excluded(after),
            _ => Bound::Included(prefix),
        };
        let mut slots = self
            .table
            .range::<[u8], _>((start, Bound::Unbounded))
            .take_while(|slot| slot.key().starts_with(prefix))
            .peekable();
        let (mut keys, mut bytes, mut examined) = (Vec::new(), 0usize, 0usize);
        let mut last: Option<&[u8]> = None;
        while let Some(slot) = slots.peek() {
            let key = slot.key();
            let full = keys.len() >= limits.max_keys.max(1)
                || examined >= limits.max_examined.max(1)
                || (!keys.is_empty() && bytes + key.len() > limits.max_bytes);
            if full {
                return ScanStep {
                    keys,
                    resume_after: last.map(Bytes::copy_from_slice),
                };
            }
            examined += 1;
            let live = slot.expires_at().is_none_or(|at| at > now);
            if live && pattern.matches(key) {
                bytes += key.len();
                keys.push(Bytes::copy_from_slice(key));
            }
            last = Some(key);
            slots.next();
        }
        ScanStep {
            keys,
            resume_after: None,
        }
    }

    /// A snapshot of the stored entry of a key. Call [`Store::expire_due`] first so that an
    /// expired key is not returned.
    pub fn get(&self, key: &[u8]) -> Option<Entry> {
        self.find(key).map(|s| self.entry(s))
    }

    /// Whether the key exists and is kept on disk (cheaper than [`Store::get`]).
    pub fn persists(&self, key: &[u8]) -> bool {
        self.find(key).is_some_and(|s| s.persist)
    }

    /// The earliest deadline of any key, if one has one.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// Removes every key whose deadline is at or before `now` and returns them, earliest first.
    pub fn expire_due(&mut self, now: Instant) -> Vec<(Bytes, Entry)> {
        let mut expired = Vec::new();
        while let Some((at, _)) = self.deadlines.first() {
            if *at > now {
                break;
            }
            let Some((_, key)) = self.deadlines.first().cloned() else {
                break;
            };
            // `remove` takes the deadline out too.
            match self.remove(&key) {
                Some(slot) => {
                    let entry = self.entry(&slot);
                    expired.push((Bytes::from(key), entry));
                }
                None => {
                    self.deadlines.pop_first();
                }
            }
        }
        expired
    }

    /// SET with its condition, expiry and fencing token; `version` becomes the key's version
    /// if the SET applies. `now` is when the request is executed (the base of `PX`).
    pub fn set(
        &mut self,
        args: SetArgs,
        version: Hlc,
        now: Instant,
    ) -> Result<SetOutcome, StoreError> {
        let SetArgs {
            key,
            value,
            condition,
            expiry,
            fencing_token,
            persist,
        } = args;
        let (token, old_at) = match self.find(&key) {
            Some(slot) => {
                check_fence(slot.fencing_token(), fencing_token.as_ref())?;
                let applies = match condition {
                    SetCondition::Always => true,
                    SetCondition::NotExists => false,
                    SetCondition::NotExistsOrEqual => slot.value() == &value[..],
                };
                if !applies {
                    return Ok(SetOutcome::NotApplied);
                }
                // The stored token becomes the newer of the two.
                let token = match (slot.fencing_token(), fencing_token) {
                    (Some(held), Some(given)) => Some(given.max(held.clone())),
                    (held, given) => given.or_else(|| held.cloned()),
                };
                (token, Some(slot.expires_at()))
            }
            None => {
                if self.max_keys.is_some_and(|max| self.table.len() >= max) {
                    return Err(StoreError::QuotaExceeded);
                }
                (fencing_token, None)
            }
        };
        // A SET without PX clears a previous deadline (as in Redis).
        let expires_at = expiry.map(|d| now.checked_add(d).unwrap_or(far_future(now)));
        let extra = Extra {
            expires_at,
            fencing_token: token,
            node_id: None,
        };
        let slot = self.slot(&key, &value, &version, extra, persist)?;
        self.record(&key, |s| s.get(&key));
        match old_at {
            Some(old_at) => {
                if old_at != expires_at {
                    if let Some(old_at) = old_at {
                        self.deadlines.remove(&(old_at, Box::from(&key[..])));
                    }
                    if let Some(at) = expires_at {
                        self.deadlines.insert((at, Box::from(&key[..])));
                    }
                }
                self.table.replace(slot);
            }
            None => self.insert_new(slot),
        }
        Ok(SetOutcome::Applied)
    }

    /// DEL: the number of keys deleted (0 or 1). A fenced key needs a token at least as new
    /// as its own.
    pub fn del(&mut self, key: &[u8], fencing_token: Option<&Hlc>) -> Result<u32, StoreError> {
        let Some(slot) = self.find(key) else {
            return Ok(0);
        };
        check_fence(slot.fencing_token(), fencing_token)?;
        self.remove(key);
        Ok(1)
    }

    /// VDEL: delete the key only if it holds `value`. The fencing checks apply to an existing
    /// key before the value is compared.
    pub fn vdel(
        &mut self,
        key: &[u8],
        value: &[u8],
        fencing_token: Option<&Hlc>,
    ) -> Result<VdelOutcome, StoreError> {
        let Some(slot) = self.find(key) else {
            return Ok(VdelOutcome::Missing);
        };
        check_fence(slot.fencing_token(), fencing_token)?;
        if slot.value() != value {
            return Ok(VdelOutcome::Mismatch);
        }
        self.remove(key);
        Ok(VdelOutcome::Deleted)
    }

    fn remove(&mut self, key: &[u8]) -> Option<Slot> {
        let slot = self.table.take(key)?;
        if let Some(at) = slot.expires_at() {
            self.deadlines.remove(&(at, Box::from(key)));
        }
        if self.journal.is_some() {
            let entry = self.entry(&slot);
            if let Some(journal) = &mut self.journal {
                journal.push((Bytes::copy_from_slice(key), Some(entry)));
            }
        }
        Some(slot)
    }
}

/// A deadline for an expiry too large for `Instant` (about 30 years ahead: never, in practice).
fn far_future(now: Instant) -> Instant {
    const THIRTY_YEARS: Duration = Duration::from_secs(30 * 365 * 24 * 3600);
    now.checked_add(THIRTY_YEARS).unwrap_or(now)
}
