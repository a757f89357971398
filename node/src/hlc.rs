//! `Hlc`: a version (hybrid logical clock value), parsed, formatted and ordered by the core.

use std::cmp::Ordering;

use mqstate::Error;
use napi::Env;
use napi::bindgen_prelude::{BigInt, Either};
use napi_derive::napi;

use crate::error::js_error;

/// A version: a hybrid logical clock value `{ms}:{counter}:{nodeId}` (the version of a key,
/// the fencing token of a lock). Immutable.
///
/// Ordered by `ms`, then `counter`, then `nodeId` compared byte-wise in UTF-8 (not by UTF-16
/// code units as JavaScript's `<` on strings would).
#[napi]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hlc {
    pub(crate) inner: mqstate::Hlc,
}

impl From<mqstate::Hlc> for Hlc {
    fn from(inner: mqstate::Hlc) -> Self {
        Hlc { inner }
    }
}

fn ordering(o: Ordering) -> i32 {
    match o {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }
}

fn part(env: &Env, name: &str, value: Either<f64, BigInt>) -> napi::Result<u64> {
    let bad = |why: &str| {
        js_error(
            env,
            &Error::InvalidArgument(format!("Hlc {name} {why}")),
            &[],
        )
    };
    match value {
        Either::A(n) => crate::util::whole::<u64>(name, n).map_err(|e| js_error(env, &e, &[])),
        Either::B(b) => match b.get_u64() {
            (false, v, true) => Ok(v),
            _ => Err(bad("must be a bigint from 0 to 2^64 - 1")),
        },
    }
}

#[napi]
impl Hlc {
    /// Builds a value from its parts (`ms` and `counter` as bigint, or as safe integers).
    #[napi(constructor)]
    pub fn new(
        env: Env,
        ms: Either<f64, BigInt>,
        counter: Either<f64, BigInt>,
        node_id: String,
    ) -> napi::Result<Self> {
        let ms = part(&env, "ms", ms)?;
        let counter = part(&env, "counter", counter)?;
        mqstate::Hlc::try_new(ms, counter, node_id)
            .map(Hlc::from)
            .map_err(|e| js_error(&env, &Error::from(e), &[]))
    }

    /// Parses `{ms}:{counter}:{nodeId}` (any zero padding). A malformed text throws an
    /// `ERR_INVALID_ARGUMENT` error whose `reason` is the stable code of the failure
    /// (`too_few_parts`, `invalid_ms`, ... as in `tests/vectors/hlc.json`).
    #[napi(factory)]
    pub fn parse(env: Env, text: String) -> napi::Result<Self> {
        match text.parse::<mqstate::Hlc>() {
            Ok(h) => Ok(h.into()),
            Err(e) => {
                let reason = e.reason_code().unwrap_or("other");
                Err(js_error(
                    &env,
                    &Error::InvalidArgument(e.to_string()),
                    &[("reason", reason)],
                ))
            }
        }
    }

    /// `a.compare(b)`, for `versions.sort(Hlc.compare)`: -1, 0 or 1.
    #[napi(js_name = "compare")]
    pub fn compare_static(a: &Hlc, b: &Hlc) -> i32 {
        ordering(a.inner.cmp(&b.inner))
    }

    /// Wall-clock milliseconds since the Unix epoch.
    #[napi(getter)]
    pub fn ms(&self) -> BigInt {
        BigInt::from(self.inner.ms)
    }

    /// Logical counter within the millisecond.
    #[napi(getter)]
    pub fn counter(&self) -> BigInt {
        BigInt::from(self.inner.counter)
    }

    /// The node that produced the value (`StateStore` for the local server, a client id...).
    #[napi(getter)]
    pub fn node_id(&self) -> String {
        self.inner.node_id.clone()
    }

    /// -1, 0 or 1 as this value is lower than, equal to or greater than `other`.
    #[napi]
    pub fn compare(&self, other: &Hlc) -> i32 {
        ordering(self.inner.cmp(&other.inner))
    }

    /// True if both are the same value (padding does not matter).
    #[napi]
    pub fn equals(&self, other: &Hlc) -> bool {
        self.inner == other.inner
    }

    /// The wire form: `ms` padded to 15 digits, `counter` to 5 (`001696374425000:00000:CLIENT`).
    #[napi(js_name = "toString")]
    pub fn to_js_string(&self) -> String {
        self.inner.to_string()
    }

    /// The wire form, so that `JSON.stringify` writes versions as strings.
    #[napi(js_name = "toJSON")]
    pub fn to_json(&self) -> String {
        self.inner.to_string()
    }
}
