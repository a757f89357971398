//! How the store lays a key out in memory: one [`Slot`] per key (the key and value in one
//! heap block, the version's node id by index into [`NodeIds`], the rare deadline and
//! fencing token behind one pointer in [`Extra`]), ordered by key.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::time::Instant;

use mqstate::Hlc;

/// The most distinct version node ids the store interns; versions with others keep their
/// node id in the key's [`Extra`]. The server's own clock produces every version, so in
/// practice there is one node id (two after a restart under another name).
pub(super) const MAX_INTERNED_NODE_IDS: usize = 1 << 16;

/// The node ids of stored versions, each kept once: a version in a [`Slot`] names its node
/// by index instead of owning a `String` (which cost 24 bytes inline and a 32-byte heap
/// block per key).
#[derive(Debug, Default)]
pub(super) struct NodeIds {
    pub(super) ids: Vec<String>,
    pub(super) index: HashMap<String, u32>,
}

impl NodeIds {
    /// The index of `id`, interning it; `None` when the table is full.
    pub(super) fn intern(&mut self, id: &str) -> Option<u32> {
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

    pub(super) fn get(&self, i: u32) -> &str {
        self.ids.get(i as usize).map_or("", String::as_str)
    }
}

/// What few keys carry: a deadline (`PX`), a fencing token, or a version whose node id is
/// not interned. Boxed so that the common key pays 8 bytes for all three.
#[derive(Debug, Clone, Default)]
pub(super) struct Extra {
    pub(super) expires_at: Option<Instant>,
    pub(super) fencing_token: Option<Hlc>,
    pub(super) node_id: Option<String>,
}

/// `u32::MAX` in [`Slot::node`]: the node id is in the [`Extra`].
pub(super) const NODE_IN_EXTRA: u32 = u32::MAX;

/// One key in the set: 56 bytes plus one heap block holding the key and the value
/// together, copied out of the request (see docs/architecture.md, "Memory per key").
#[derive(Debug)]
pub(super) struct Slot {
    /// The key, then the value.
    pub(super) data: Box<[u8]>,
    pub(super) version_ms: u64,
    pub(super) version_counter: u64,
    pub(super) extra: Option<Box<Extra>>,
    /// Where the key ends in `data`.
    pub(super) key_len: u32,
    /// The version's node id, an index into [`NodeIds`] (or [`NODE_IN_EXTRA`]).
    pub(super) node: u32,
    pub(super) persist: bool,
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
    pub(super) fn key(&self) -> &[u8] {
        self.data.get(..self.key_len as usize).unwrap_or_default()
    }

    pub(super) fn value(&self) -> &[u8] {
        self.data.get(self.key_len as usize..).unwrap_or_default()
    }

    pub(super) fn expires_at(&self) -> Option<Instant> {
        self.extra.as_ref().and_then(|e| e.expires_at)
    }

    pub(super) fn fencing_token(&self) -> Option<&Hlc> {
        self.extra.as_ref().and_then(|e| e.fencing_token.as_ref())
    }
}
