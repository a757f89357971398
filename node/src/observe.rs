//! `NativeObservation`: a pull-based stream of one key's changes (the wrapper turns it into an
//! async iterator; see [`crate::stream`]).

use std::sync::Arc;

use mqstate::{Client, KeyNotification, KeyObservation, NotifyOperation};
use napi::Env;
use napi::bindgen_prelude::{BufferSlice, PromiseRaw};
use napi_derive::napi;

use crate::hlc::Hlc;
use crate::util::spawn;
use mqstate::stream::SharedStream;

/// A change of an observed key.
#[napi(object, object_from_js = false)]
pub struct Notification<'a> {
    /// The key.
    pub key: BufferSlice<'a>,
    /// `set` or `delete` (a DEL, a VDEL or an expiry).
    pub operation: &'static str,
    /// The new value, for `set`.
    pub value: Option<BufferSlice<'a>>,
    /// The key's new version (absent only for a delete made up after a reconnect).
    pub version: Option<Hlc>,
    /// True when the client made this notification up after a reconnect, because the key
    /// changed while it was away.
    pub synthesized: bool,
}

impl std::fmt::Debug for Notification<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notification")
            .field("key", &&*self.key)
            .field("operation", &self.operation)
            .field("value", &self.value.as_deref())
            .field("version", &self.version)
            .field("synthesized", &self.synthesized)
            .finish()
    }
}

/// The stream of one key's changes.
#[napi]
#[derive(Debug)]
pub struct NativeObservation {
    inner: Arc<SharedStream<KeyObservation>>,
}

impl NativeObservation {
    pub(crate) fn new(observation: KeyObservation, client: &Client) -> Self {
        NativeObservation {
            inner: SharedStream::new(observation, client.state_changes()),
        }
    }
}

fn to_js<'env>(env: &'env Env, n: KeyNotification) -> napi::Result<Notification<'env>> {
    let (operation, value) = match &n.operation {
        NotifyOperation::Set(v) => ("set", Some(BufferSlice::copy_from(env, v)?)),
        _ => ("delete", None),
    };
    Ok(Notification {
        key: BufferSlice::copy_from(env, &n.key)?,
        operation,
        value,
        version: n.version.map(Hlc::from),
        synthesized: n.synthesized,
    })
}

#[napi]
impl NativeObservation {
    /// The next change; null once the observation has ended (closed, unobserved, or the
    /// client closed). Rejects for a notification that could not be read, or a lag
    /// (`ERR_LAGGED`: notifications were dropped because nobody read them).
    #[napi(ts_return_type = "Promise<Notification | null>")]
    pub fn next<'env>(
        &self,
        env: &'env Env,
    ) -> napi::Result<PromiseRaw<'env, Option<Notification<'env>>>> {
        spawn(env, None, self.inner.clone().next(), |env, n| {
            n.map(|n| to_js(env, n)).transpose()
        })
    }

    /// Ends the observation now (a pending `next()` resolves with null); the key is
    /// unregistered when it has no other observation. Idempotent.
    #[napi]
    pub fn close(&self) {
        self.inner.close();
    }
}
