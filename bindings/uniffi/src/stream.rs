//! The pull-based streams handed to the foreign side (key observations, lease and leadership
//! events): each `next()` waits in the core for one item, so an unread stream holds nothing
//! on the foreign side. A stream ends (`next()` returns null) when it is closed, when the core
//! ends it, or when its client is closed, so no `next()` outlives the client.

use std::future::Future;
use std::sync::Arc;

use mqstate::lock::{LeadershipEvent, LeadershipEvents, LeaseEvent, LeaseEvents};
use mqstate::{ConnectionState, Error, KeyNotification, KeyObservation};
use tokio::sync::{Mutex, watch};

/// Something that yields items until it ends.
pub(crate) trait Source: Send + 'static {
    type Item: Send + 'static;
    /// The next item; `None` once ended.
    fn recv(&mut self) -> impl Future<Output = Option<Result<Self::Item, Error>>> + Send;
}

impl Source for KeyObservation {
    type Item = KeyNotification;
    async fn recv(&mut self) -> Option<Result<KeyNotification, Error>> {
        KeyObservation::recv(self).await
    }
}

impl Source for LeaseEvents {
    type Item = LeaseEvent;
    async fn recv(&mut self) -> Option<Result<LeaseEvent, Error>> {
        LeaseEvents::recv(self).await.map(Ok)
    }
}

impl Source for LeadershipEvents {
    type Item = LeadershipEvent;
    async fn recv(&mut self) -> Option<Result<LeadershipEvent, Error>> {
        LeadershipEvents::recv(self).await.map(Ok)
    }
}

/// A source shared between the foreign object and its pending `next()` calls.
#[derive(Debug)]
pub(crate) struct Pull<S> {
    source: Mutex<Option<S>>,
    closed: watch::Sender<bool>,
    state: watch::Receiver<ConnectionState>,
}

impl<S: Source> Pull<S> {
    /// A stream over `source` that also ends when the client whose state is `state` closes.
    pub(crate) fn new(source: S, state: watch::Receiver<ConnectionState>) -> Arc<Self> {
        Arc::new(Pull {
            source: Mutex::new(Some(source)),
            closed: watch::channel(false).0,
            state,
        })
    }

    /// The next item, `None` once ended (and from then on). Calls are served one at a time.
    pub(crate) async fn next(self: Arc<Self>) -> Result<Option<S::Item>, Error> {
        let mut closed = self.closed.subscribe();
        let mut state = self.state.clone();
        let mut slot = self.source.lock().await;
        let Some(source) = slot.as_mut() else {
            return Ok(None);
        };
        if *closed.borrow_and_update() {
            *slot = None;
            return Ok(None);
        }
        let client_closed = async move {
            // Also ends if the client is gone altogether (the sender dropped).
            let _ = state.wait_for(|s| *s == ConnectionState::Closed).await;
        };
        tokio::select! {
            item = source.recv() => match item {
                Some(Ok(item)) => Ok(Some(item)),
                Some(Err(e)) => Err(e),
                None => {
                    *slot = None;
                    Ok(None)
                }
            },
            _ = closed.changed() => {
                *slot = None;
                Ok(None)
            }
            () = client_closed => {
                *slot = None;
                Ok(None)
            }
        }
    }

    /// Ends the stream now: a pending `next()` returns `None`, the source is dropped (which,
    /// for an observation, unregisters the key). Idempotent.
    pub(crate) fn close(&self) {
        self.closed.send_replace(true);
        // Not read right now: drop the source here; otherwise the pending `next` drops it.
        if let Ok(mut slot) = self.source.try_lock() {
            slot.take();
        }
    }
}
