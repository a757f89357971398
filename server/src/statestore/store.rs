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

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mqstate::protocol::glob::Pattern;
use mqstate::protocol::resp3::SetCondition;
use mqstate::{Hlc, ServiceError};

/// One stored key, as the store hands it out (a snapshot: [`Store::get`] builds it from the
/// store's compact layout, see [`Store`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The value (any bytes, possibly empty).
    pub value: Bytes,
    /// The version the last applied SET gave the key.
    pub version: Hlc,
    /// The fencing token protecting the key, if a SET carried one (docs/protocol.md section 5).
    pub fencing_token: Option<Hlc>,
    /// When the key expires, if it was set with `PX`.
    pub expires_at: Option<Instant>,
    /// Whether the key is kept on disk (its last SET asked for it, or the server persists
    /// every key). Only meaningful with a data dir ([`crate::persist`]).
    pub persist: bool,
}

/// Why the store refused a write. Each maps to one service error text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The key is fenced and the request carried no fencing token.
    #[error("a fencing token is required for this request")]
    FencingTokenRequired,
    /// The request's fencing token is older than the key's.
    #[error(
        "the request fencing token is a lower version than the fencing token protecting the resource"
    )]
    FencingTokenLowerVersion,
    /// The key quota is reached and the SET would create a new key.
    #[error("the quota has been exceeded")]
    QuotaExceeded,
    /// The key is 4 GiB or longer (more than any MQTT packet carries, so only a caller
    /// building requests in code meets this).
    #[error("the key is too long (4 GiB or more)")]
    KeyTooLong,
}

impl StoreError {
    /// The service error the server answers with.
    pub fn service_error(self) -> ServiceError {
        match self {
            StoreError::FencingTokenRequired => ServiceError::FencingTokenRequired,
            StoreError::FencingTokenLowerVersion => ServiceError::FencingTokenLowerVersion,
            StoreError::QuotaExceeded => ServiceError::QuotaExceeded,
            StoreError::KeyTooLong => ServiceError::Unknown(self.to_string()),
        }
    }
}

/// The bounds of one [`Store::scan`] step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanLimits {
    /// The most keys a step returns.
    pub max_keys: usize,
    /// The most key bytes a step returns (a step returns at least one key, however long,
    /// when one is left).
    pub max_bytes: usize,
    /// The most keys a step examines, matching or not: a pattern that matches few keys
    /// gives short (even empty) steps instead of one long one.
    pub max_examined: usize,
    /// The largest reply a `SCAN` page may be ([`crate::statestore::scan::page`] refuses a page that
    /// would not fit, rather than let the broker drop it); not used by [`Store::scan`].
    pub max_reply: usize,
}

impl Default for ScanLimits {
    /// 500 keys, 256 KiB of keys, 5,000 keys examined, no bound on the reply.
    fn default() -> Self {
        ScanLimits {
            max_keys: 500,
            max_bytes: 256 * 1024,
            max_examined: 5_000,
            max_reply: usize::MAX,
        }
    }
}

/// What one [`Store::scan`] step found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanStep {
    /// The matching keys, in byte order.
    pub keys: Vec<Bytes>,
    /// The last key the step examined, where the next step starts; `None` when the scan is
    /// over.
    pub resume_after: Option<Bytes>,
}

/// What a SET did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOutcome {
    /// The value was written (`+OK`).
    Applied,
    /// The NX / NEX condition failed; nothing changed (`:-1`).
    NotApplied,
}

/// What a VDEL did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VdelOutcome {
    /// The key held the value and was deleted (`:1`).
    Deleted,
    /// The key holds another value; nothing changed (`:-1`).
    Mismatch,
    /// No such key (`:0`).
    Missing,
}

impl VdelOutcome {
    /// The integer reply.
    pub fn reply_value(self) -> i64 {
        match self {
            VdelOutcome::Deleted => 1,
            VdelOutcome::Mismatch => -1,
            VdelOutcome::Missing => 0,
        }
    }
}

/// The arguments of a SET.
#[derive(Debug, Clone)]
pub struct SetArgs {
    /// The key (not empty; the codec refuses empty keys).
    pub key: Bytes,
    /// The value.
    pub value: Bytes,
    /// `NX` / `NEX` / none.
    pub condition: SetCondition,
    /// `PX`, as a duration.
    pub expiry: Option<Duration>,
    /// The request's `__ft`, already parsed and checked for drift.
    pub fencing_token: Option<Hlc>,
    /// Keep the key on disk (see [`Entry::persist`]).
    pub persist: bool,
}

impl SetArgs {
    /// An unconditional SET with no expiry and no fencing token.
    pub fn new(key: Bytes, value: Bytes) -> Self {
        SetArgs {
            key,
            value,
            condition: SetCondition::Always,
            expiry: None,
            fencing_token: None,
            persist: false,
        }
    }

    /// Sets the condition (builder style).
    #[must_use]
    pub fn condition(mut self, condition: SetCondition) -> Self {
        self.condition = condition;
        self
    }

    /// Sets the expiry (builder style).
    #[must_use]
    pub fn expiry(mut self, expiry: Option<Duration>) -> Self {
        self.expiry = expiry;
        self
    }

    /// Sets the fencing token (builder style).
    #[must_use]
    pub fn fencing_token(mut self, token: Option<Hlc>) -> Self {
        self.fencing_token = token;
        self
    }

    /// Marks the key to be kept on disk (builder style).
    #[must_use]
    pub fn persist(mut self, persist: bool) -> Self {
        self.persist = persist;
        self
    }
}

/// The most distinct version node ids the store interns; versions with others keep their
/// node id in the key's [`Extra`]. The server's own clock produces every version, so in
/// practice there is one node id (two after a restart under another name).
const MAX_INTERNED_NODE_IDS: usize = 1 << 16;

/// The node ids of stored versions, each kept once: a version in a [`Slot`] names its node
/// by index instead of owning a `String` (which cost 24 bytes inline and a 32-byte heap
/// block per key).
#[derive(Debug, Default)]
struct NodeIds {
    ids: Vec<String>,
    index: HashMap<String, u32>,
}

impl NodeIds {
    /// The index of `id`, interning it; `None` when the table is full.
    fn intern(&mut self, id: &str) -> Option<u32> {
        if let Some(&i) = self.index.get(id) {
            return Some(i);
        }
        if self.ids.len() >= MAX_INTERNED_NODE_IDS {
            return None;
        }
        let i = u32::try_from(self.ids.len()).ok()?;
        self.ids.push(id.to_owned());
        self.index.insert(id.to_owned(), i);
        Some(i)
    }

    fn get(&self, i: u32) -> &str {
        self.ids.get(i as usize).map_or("", String::as_str)
    }
}

/// What few keys carry: a deadline (`PX`), a fencing token, or a version whose node id is
/// not interned. Boxed so that the common key pays 8 bytes for all three.
#[derive(Debug, Clone, Default)]
struct Extra {
    expires_at: Option<Instant>,
    fencing_token: Option<Hlc>,
    node_id: Option<String>,
}

/// `u32::MAX` in [`Slot::node`]: the node id is in the [`Extra`].
const NODE_IN_EXTRA: u32 = u32::MAX;

/// One key in the set: 56 bytes plus one heap block holding the key and the value
/// together, copied out of the request (see docs/architecture.md, "Memory per key").
#[derive(Debug)]
struct Slot {
    /// The key, then the value.
    data: Box<[u8]>,
    version_ms: u64,
    version_counter: u64,
    extra: Option<Box<Extra>>,
    /// Where the key ends in `data`.
    key_len: u32,
    /// The version's node id, an index into [`NodeIds`] (or [`NODE_IN_EXTRA`]).
    node: u32,
    persist: bool,
}

// A slot is ordered, compared and looked up by its key alone, so that the ordered set of
// slots is a map from keys (and `SCAN` can walk it in key order from any position).
impl PartialEq for Slot {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Slot {}

impl PartialOrd for Slot {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Slot {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(other.key())
    }
}

impl Borrow<[u8]> for Slot {
    fn borrow(&self) -> &[u8] {
        self.key()
    }
}

impl Slot {
    fn key(&self) -> &[u8] {
        self.data.get(..self.key_len as usize).unwrap_or_default()
    }

    fn value(&self) -> &[u8] {
        self.data.get(self.key_len as usize..).unwrap_or_default()
    }

    fn expires_at(&self) -> Option<Instant> {
        self.extra.as_ref().and_then(|e| e.expires_at)
    }

    fn fencing_token(&self) -> Option<&Hlc> {
        self.extra.as_ref().and_then(|e| e.fencing_token.as_ref())
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &'static str) -> Bytes {
        Bytes::from_static(s.as_bytes())
    }

    fn v(ms: u64, counter: u64) -> Hlc {
        Hlc::new(ms, counter, "StateStore")
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn set_get_del() {
        let now = Instant::now();
        let mut s = Store::new(None);
        assert_eq!(
            s.set(SetArgs::new(b("k"), b("v")), v(1, 0), now),
            Ok(SetOutcome::Applied)
        );
        let e = s.get(b"k").unwrap();
        assert_eq!((&e.value[..], &e.version), (&b"v"[..], &v(1, 0)));
        assert_eq!(s.del(b"k", None), Ok(1));
        assert_eq!(s.del(b"k", None), Ok(0));
        assert!(s.get(b"k").is_none());
        assert!(s.is_empty());
    }

    #[test]
    fn nx_and_nex() {
        let now = Instant::now();
        let mut s = Store::new(None);
        let nx = |val| SetArgs::new(b("k"), val).condition(SetCondition::NotExists);
        let nex = |val| SetArgs::new(b("k"), val).condition(SetCondition::NotExistsOrEqual);
        assert_eq!(s.set(nx(b("a")), v(1, 0), now), Ok(SetOutcome::Applied));
        assert_eq!(s.set(nx(b("a")), v(2, 0), now), Ok(SetOutcome::NotApplied));
        assert_eq!(s.get(b"k").unwrap().version, v(1, 0));
        assert_eq!(s.set(nex(b("b")), v(3, 0), now), Ok(SetOutcome::NotApplied));
        assert_eq!(s.set(nex(b("a")), v(4, 0), now), Ok(SetOutcome::Applied));
        assert_eq!(s.get(b"k").unwrap().version, v(4, 0));
        s.del(b"k", None).unwrap();
        assert_eq!(s.set(nex(b("c")), v(5, 0), now), Ok(SetOutcome::Applied));
    }

    #[test]
    fn vdel_outcomes() {
        let now = Instant::now();
        let mut s = Store::new(None);
        s.set(SetArgs::new(b("k"), b("v")), v(1, 0), now).unwrap();
        assert_eq!(s.vdel(b"k", b"x", None), Ok(VdelOutcome::Mismatch));
        assert_eq!(s.vdel(b"k", b"v", None), Ok(VdelOutcome::Deleted));
        assert_eq!(s.vdel(b"k", b"v", None), Ok(VdelOutcome::Missing));
    }

    #[test]
    fn quota_counts_new_keys_only() {
        let now = Instant::now();
        let mut s = Store::new(Some(2));
        s.set(SetArgs::new(b("a"), b("1")), v(1, 0), now).unwrap();
        s.set(SetArgs::new(b("b"), b("1")), v(1, 1), now).unwrap();
        assert_eq!(
            s.set(SetArgs::new(b("c"), b("1")), v(1, 2), now),
            Err(StoreError::QuotaExceeded)
        );
        // Overwriting an existing key is fine at the quota.
        assert_eq!(
            s.set(SetArgs::new(b("a"), b("2")), v(1, 3), now),
            Ok(SetOutcome::Applied)
        );
        s.del(b"b", None).unwrap();
        assert_eq!(
            s.set(SetArgs::new(b("c"), b("1")), v(1, 4), now),
            Ok(SetOutcome::Applied)
        );
    }

    #[test]
    fn expiry_is_exact_and_cleared_by_a_plain_set() {
        let t0 = Instant::now();
        let mut s = Store::new(None);
        let px = |val, d| SetArgs::new(b("k"), val).expiry(Some(ms(d)));
        s.set(px(b("a"), 50), v(1, 0), t0).unwrap();
        assert_eq!(s.next_deadline(), Some(t0 + ms(50)));
        assert!(s.expire_due(t0 + ms(49)).is_empty());
        // Renewed at 40 ms for 50 ms more: the old deadline is gone.
        s.set(px(b("a"), 50), v(2, 0), t0 + ms(40)).unwrap();
        assert_eq!(s.next_deadline(), Some(t0 + ms(90)));
        assert!(s.expire_due(t0 + ms(60)).is_empty());
        let expired = s.expire_due(t0 + ms(90));
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].0, b("k"));
        assert_eq!(expired[0].1.version, v(2, 0));
        assert!(s.get(b"k").is_none());
        assert_eq!(s.next_deadline(), None);

        // A SET without PX removes the deadline.
        s.set(px(b("a"), 50), v(3, 0), t0).unwrap();
        s.set(SetArgs::new(b("k"), b("b")), v(4, 0), t0).unwrap();
        assert_eq!(s.next_deadline(), None);
        assert!(s.expire_due(t0 + ms(1000)).is_empty());
        assert!(s.get(b"k").is_some());
    }

    #[test]
    fn deleting_a_key_removes_its_deadline() {
        let t0 = Instant::now();
        let mut s = Store::new(None);
        s.set(
            SetArgs::new(b("k"), b("v")).expiry(Some(ms(10))),
            v(1, 0),
            t0,
        )
        .unwrap();
        s.del(b"k", None).unwrap();
        assert_eq!(s.next_deadline(), None);
        s.set(
            SetArgs::new(b("k"), b("v")).expiry(Some(ms(10))),
            v(1, 0),
            t0,
        )
        .unwrap();
        s.vdel(b"k", b"v", None).unwrap();
        assert_eq!(s.next_deadline(), None);
    }

    #[test]
    fn many_deadlines_expire_in_order() {
        let t0 = Instant::now();
        let mut s = Store::new(None);
        for (i, d) in [30u64, 10, 20].into_iter().enumerate() {
            let key = Bytes::from(format!("k{i}"));
            s.set(SetArgs::new(key, b("v")).expiry(Some(ms(d))), v(1, 0), t0)
                .unwrap();
        }
        let keys: Vec<Bytes> = s
            .expire_due(t0 + ms(25))
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys, vec![b("k1"), b("k2")]);
        assert_eq!(s.next_deadline(), Some(t0 + ms(30)));
    }

    #[test]
    fn fencing_algorithm() {
        let now = Instant::now();
        let mut s = Store::new(None);
        let t1 = Hlc::new(100, 0, "StateStore");
        let t2 = Hlc::new(200, 0, "StateStore");
        let set = |token: Option<&Hlc>| SetArgs::new(b("p"), b("v")).fencing_token(token.cloned());
        // No token on the key, a token on the SET: stored.
        s.set(set(Some(&t1)), v(1, 0), now).unwrap();
        assert_eq!(s.get(b"p").unwrap().fencing_token, Some(t1.clone()));
        // Fenced: no token, a lower token are refused; equal and newer accepted.
        assert_eq!(
            s.set(set(None), v(2, 0), now),
            Err(StoreError::FencingTokenRequired)
        );
        assert_eq!(
            s.set(set(Some(&Hlc::new(99, 5, "x"))), v(2, 0), now),
            Err(StoreError::FencingTokenLowerVersion)
        );
        assert_eq!(s.set(set(Some(&t1)), v(3, 0), now), Ok(SetOutcome::Applied));
        assert_eq!(s.set(set(Some(&t2)), v(4, 0), now), Ok(SetOutcome::Applied));
        assert_eq!(s.get(b"p").unwrap().fencing_token, Some(t2.clone()));
        assert_eq!(
            s.set(set(Some(&t1)), v(5, 0), now),
            Err(StoreError::FencingTokenLowerVersion)
        );
        // DEL and VDEL follow the same checks; the token goes with the key.
        assert_eq!(s.del(b"p", None), Err(StoreError::FencingTokenRequired));
        assert_eq!(
            s.vdel(b"p", b"v", Some(&t1)),
            Err(StoreError::FencingTokenLowerVersion)
        );
        assert_eq!(s.vdel(b"p", b"v", Some(&t2)), Ok(VdelOutcome::Deleted));
        assert_eq!(s.set(set(None), v(6, 0), now), Ok(SetOutcome::Applied));
        assert_eq!(s.get(b"p").unwrap().fencing_token, None);
        // An unfenced key accepts DEL with or without a token.
        assert_eq!(s.del(b"p", Some(&t1)), Ok(1));
    }

    #[test]
    fn the_journal_records_changes_and_undo_restores_them() {
        let t0 = Instant::now();
        let mut s = Store::new(None);
        s.set(SetArgs::new(b("a"), b("1")), v(1, 0), t0).unwrap();
        assert!(s.journal().is_empty(), "journaling is off by default");
        s.enable_journal();
        s.set(SetArgs::new(b("a"), b("2")).persist(true), v(2, 0), t0)
            .unwrap();
        s.set(
            SetArgs::new(b("n"), b("x")).expiry(Some(ms(10))),
            v(3, 0),
            t0,
        )
        .unwrap();
        s.del(b"a", None).unwrap();
        s.set(SetArgs::new(b("a"), b("3")), v(4, 0), t0).unwrap();
        assert_eq!(s.expire_due(t0 + ms(10)).len(), 1);
        // A condition that fails and a refused write change nothing and record nothing.
        s.set(
            SetArgs::new(b("a"), b("4")).condition(SetCondition::NotExists),
            v(5, 0),
            t0,
        )
        .unwrap();
        assert_eq!(s.journal().len(), 5);
        let changes = s.take_journal();
        assert!(s.journal_is_empty());
        assert_eq!(changes[0].1.as_ref().unwrap().version, v(1, 0));
        s.undo(changes);
        assert!(s.journal_is_empty(), "undo is not journaled");
        let a = s.get(b"a").unwrap();
        assert_eq!(
            (&a.value, &a.version, a.persist),
            (&b("1"), &v(1, 0), false)
        );
        assert!(s.get(b"n").is_none());
        assert_eq!(s.next_deadline(), None);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn fence_is_checked_before_the_condition() {
        let now = Instant::now();
        let mut s = Store::new(None);
        let t1 = Hlc::new(100, 0, "StateStore");
        s.set(
            SetArgs::new(b("p"), b("v")).fencing_token(Some(t1.clone())),
            v(1, 0),
            now,
        )
        .unwrap();
        assert_eq!(
            s.set(
                SetArgs::new(b("p"), b("v")).condition(SetCondition::NotExists),
                v(2, 0),
                now
            ),
            Err(StoreError::FencingTokenRequired)
        );
        // A condition that fails does not move the token.
        let newer = Hlc::new(500, 0, "StateStore");
        assert_eq!(
            s.set(
                SetArgs::new(b("p"), b("v"))
                    .condition(SetCondition::NotExists)
                    .fencing_token(Some(newer)),
                v(3, 0),
                now
            ),
            Ok(SetOutcome::NotApplied)
        );
        assert_eq!(s.get(b"p").unwrap().fencing_token, Some(t1));
    }
}
