//! `Observation`: the changes of one observed key, read with `next()` (Kotlin wraps it in a
//! Flow: `observeFlow`).

use std::sync::Arc;

use mqstate::{KeyNotification, KeyObservation, NotifyOperation};

use crate::errors::MqstateError;
use crate::runtime::run;
use crate::types::Hlc;
use mqstate::stream::SharedStream;

/// A change of an observed key.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct Notification {
    /// The key.
    pub key: Vec<u8>,
    /// `set` or `delete` (a DEL, a VDEL or an expiry).
    pub operation: String,
    /// The new value, for `set`.
    pub value: Option<Vec<u8>>,
    /// The key's new version (absent only for a delete made up after a reconnect).
    pub version: Option<Hlc>,
    /// True when the client made this notification up after a reconnect, because the key
    /// changed while it was away.
    pub synthesized: bool,
}

impl From<KeyNotification> for Notification {
    fn from(n: KeyNotification) -> Self {
        let (operation, value) = match &n.operation {
            NotifyOperation::Set(v) => ("set", Some(v.to_vec())),
            _ => ("delete", None),
        };
        Notification {
            key: n.key.to_vec(),
            operation: operation.to_owned(),
            value,
            version: n.version.map(Hlc::from),
            synthesized: n.synthesized,
        }
    }
}

/// The stream of one key's changes.
#[derive(Debug, uniffi::Object)]
pub struct Observation {
    inner: Arc<SharedStream<KeyObservation>>,
}

impl Observation {
    pub(crate) fn new(observation: KeyObservation, client: &mqstate::Client) -> Self {
        Observation {
            inner: SharedStream::new(observation, client.state_changes()),
        }
    }
}

#[uniffi::export]
impl Observation {
    /// The next change; null once the observation has ended (closed, unobserved, or the client
    /// closed). Throws `Lagged` when notifications were dropped because nobody read them (the
    /// stream goes on).
    pub async fn next(&self) -> Result<Option<Notification>, MqstateError> {
        let pull = self.inner.clone();
        let next = run(pull.next()).await?;
        Ok(next.map(Notification::from))
    }

    /// Ends the observation now (a pending `next()` returns null); the key is unregistered
    /// when it has no other observation. Idempotent.
    pub fn close(&self) {
        self.inner.close();
    }
}
