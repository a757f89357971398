//! Cancellation: the `CancelToken` a call may be given (the wrapper makes one per
//! `AbortSignal`), and the receiver that `util::spawn` watches to drop the call's future.
//!
//! A leaf of its own: the client, the scan, the locks and the elections all take a token,
//! and none of them should depend on another for it.

use napi_derive::napi;
use tokio::sync::watch;

/// Cancels the pending calls it was passed to (the wrapper makes one per `AbortSignal`).
#[napi]
#[derive(Debug)]
pub struct CancelToken {
    tx: watch::Sender<bool>,
}

impl Default for CancelToken {
    fn default() -> Self {
        CancelToken::new()
    }
}

#[napi]
impl CancelToken {
    /// A token that has not fired.
    #[napi(constructor)]
    pub fn new() -> Self {
        CancelToken {
            tx: watch::channel(false).0,
        }
    }

    /// Fires: every call given this token stops waiting and rejects with an `AbortError`.
    #[napi]
    pub fn cancel(&self) {
        self.tx.send_replace(true);
    }

    pub(crate) fn receiver(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }
}

/// The receiver of the token a call was given, if any (what `util::spawn` takes).
pub(crate) fn receiver(cancel: Option<&CancelToken>) -> Option<watch::Receiver<bool>> {
    cancel.map(CancelToken::receiver)
}
