//! A stream of the client (key observations, lease and leadership events) shared between a
//! binding's foreign object and the `next()` calls waiting on it, and closable from either.
//!
//! The Node and Kotlin bindings hand streams to their language as pull-based objects:
//! each `next()` waits here, in the core, for one item, so a stream nobody reads holds
//! nothing on the foreign side. A [`SharedStream`] ends (`next()` gives `None`, and from
//! then on) when it is closed, when the core ends it, or when its client is closed, so no
//! `next()` outlives the client. Closing drops the core stream, which for an observation
//! unregisters the key once it was its last observation.
//!
//! ```no_run
//! use mqstate::stream::SharedStream;
//! use mqstate::{Client, ConnectOptions};
//!
//! # async fn demo() -> Result<(), mqstate::Error> {
//! let client = Client::connect(ConnectOptions::from_url("mqtt://127.0.0.1:1883")?).await?;
//! let stream = SharedStream::new(client.observe("door").await?, client.state_changes());
//! let reader = stream.clone();
//! tokio::spawn(async move {
//!     // `next` takes the `Arc` (its future is `'static`, for a binding to spawn it).
//!     while let Ok(Some(change)) = reader.clone().next().await {
//!         println!("{:?}", change.operation);
//!     }
//! });
//! stream.close(); // the reader's pending next() gives None
//! # Ok(()) }
//! ```

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{Mutex, watch};

use crate::client::{ConnectionState, KeyNotification, KeyObservation};
use crate::lock::{LeadershipEvent, LeadershipEvents, LeaseEvent, LeaseEvents};
use crate::protocol::errors::Error;

/// A core stream that yields items until it ends: [`KeyObservation`], [`LeaseEvents`],
/// [`LeadershipEvents`].
pub trait ItemSource: Send + 'static {
    /// What it yields.
    type Item: Send + 'static;
    /// The next item; `None` once ended. Cancel-safe (dropping it loses nothing).
    fn recv(&mut self) -> impl Future<Output = Option<Result<Self::Item, Error>>> + Send;
}

impl ItemSource for KeyObservation {
    type Item = KeyNotification;
    async fn recv(&mut self) -> Option<Result<KeyNotification, Error>> {
        KeyObservation::recv(self).await
    }
}

impl ItemSource for LeaseEvents {
    type Item = LeaseEvent;
    async fn recv(&mut self) -> Option<Result<LeaseEvent, Error>> {
        LeaseEvents::recv(self).await.map(Ok)
    }
}

impl ItemSource for LeadershipEvents {
    type Item = LeadershipEvent;
    async fn recv(&mut self) -> Option<Result<LeadershipEvent, Error>> {
        LeadershipEvents::recv(self).await.map(Ok)
    }
}

/// A closable stream shared by a foreign object and its pending `next()` calls (see the
/// module's documentation).
#[derive(Debug)]
pub struct SharedStream<S> {
    source: Mutex<Option<S>>,
    closed: watch::Sender<bool>,
    state: watch::Receiver<ConnectionState>,
}

impl<S: ItemSource> SharedStream<S> {
    /// A stream over `source` that also ends when the client whose state is `state`
    /// ([`Client::state_changes`](crate::Client::state_changes)) closes.
    pub fn new(source: S, state: watch::Receiver<ConnectionState>) -> Arc<Self> {
        Arc::new(SharedStream {
            source: Mutex::new(Some(source)),
            closed: watch::channel(false).0,
            state,
        })
    }

    /// The next item, `None` once ended (and from then on). Calls are served one at a time.
    ///
    /// # Errors
    ///
    /// What the source reports for one item (for an observation, [`Error::Lagged`] with the
    /// number of notifications lost); the stream goes on after it.
    pub async fn next(self: Arc<Self>) -> Result<Option<S::Item>, Error> {
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

    /// Ends the stream now: a pending `next()` gives `None`, and the source is dropped (for
    /// an observation, that unregisters the key). Idempotent; never blocks.
    pub fn close(&self) {
        self.closed.send_replace(true);
        // Not read right now: drop the source here; otherwise the pending `next` drops it.
        if let Ok(mut slot) = self.source.try_lock() {
            slot.take();
        }
    }
}
