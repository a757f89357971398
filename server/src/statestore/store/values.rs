//! The values the store takes and hands out: [`SetArgs`] in, [`Entry`], [`SetOutcome`],
//! [`VdelOutcome`] and [`ScanStep`] out, [`StoreError`] when it refuses a write, and the
//! bounds of a scan ([`ScanLimits`]).

use std::time::{Duration, Instant};

use bytes::Bytes;
use mqstate::protocol::resp3::SetCondition;
use mqstate::{Hlc, ServiceError};

/// One stored key, as the store hands it out (a snapshot: [`Store::get`](super::Store::get) builds it from the
/// store's compact layout, see [`Store`](super::Store)).
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

/// The bounds of one [`Store::scan`](super::Store::scan) step.
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
    /// The largest reply a `SCAN` page may be (`scan::page` refuses a page that
    /// would not fit, rather than let the broker drop it); not used by [`Store::scan`](super::Store::scan).
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

/// What one [`Store::scan`](super::Store::scan) step found.
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
