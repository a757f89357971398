//! Plain values shared by the client, the locks and the device client.

use crate::errors::MqstateError;

/// A hybrid-logical-clock version (also a fencing token): wall milliseconds, a counter and the
/// node that produced it. Its string form is `ms:counter:node` (see `Hlc.parse`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, uniffi::Record)]
pub struct Hlc {
    /// Wall-clock milliseconds since the Unix epoch.
    pub ms: u64,
    /// Logical counter within one millisecond.
    pub counter: u64,
    /// The node that produced the value.
    pub node_id: String,
}

impl From<mqstate::Hlc> for Hlc {
    fn from(h: mqstate::Hlc) -> Self {
        Hlc {
            ms: h.ms,
            counter: h.counter,
            node_id: h.node_id,
        }
    }
}

impl Hlc {
    /// The core's value; a node id the wire form cannot carry is refused by the core.
    pub(crate) fn to_core(&self) -> Result<mqstate::Hlc, MqstateError> {
        mqstate::Hlc::try_new(self.ms, self.counter, self.node_id.clone())
            .map_err(|e| MqstateError::from(mqstate::Error::from(e)))
    }
}

pub(crate) fn to_core(token: Option<Hlc>) -> Result<Option<mqstate::Hlc>, MqstateError> {
    token.as_ref().map(Hlc::to_core).transpose()
}

/// Parses the wire form of a version (`001696374425000:00000:node`, any zero padding). A
/// malformed text is the caller's mistake: `InvalidArgument`, saying what is wrong (as in
/// every binding).
#[uniffi::export]
pub fn hlc_parse(text: String) -> Result<Hlc, MqstateError> {
    text.parse::<mqstate::Hlc>()
        .map(Hlc::from)
        .map_err(|e| MqstateError::from(mqstate::Error::InvalidArgument(e.to_string())))
}

/// The core's order of two versions: -1, 0 or 1 (milliseconds, then counter, then node id).
#[uniffi::export]
pub fn hlc_compare(a: Hlc, b: Hlc) -> i32 {
    let core = |h: Hlc| mqstate::Hlc::new(h.ms, h.counter, h.node_id);
    match core(a).cmp(&core(b)) {
        std::cmp::Ordering::Less => -1,
        std::cmp::Ordering::Equal => 0,
        std::cmp::Ordering::Greater => 1,
    }
}

/// The wire form of a version, as the state store writes it.
#[uniffi::export]
pub fn hlc_format(hlc: Hlc) -> Result<String, MqstateError> {
    Ok(hlc.to_core()?.to_string())
}

/// The library's version.
#[uniffi::export]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}
