//! What every Python iterator of this module (key observations, lease and leadership events)
//! shares: one core stream behind a lock, a "closed" flag that ends waiting calls, and a
//! buffer for items that were received for an asyncio `__anext__` that was cancelled before
//! it could hand them over (so a cancelled wait never swallows a change).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tokio::sync::{Mutex, Notify, OwnedMutexGuard, watch};

/// A core stream of items (`recv` is cancel-safe: dropping it loses nothing).
pub(crate) trait Source: Send + 'static {
    type Item: Send + 'static;
    fn recv(&mut self) -> impl Future<Output = Option<Self::Item>> + Send + '_;
}

impl Source for mqstate::KeyObservation {
    type Item = Result<mqstate::KeyNotification, mqstate::Error>;
    fn recv(&mut self) -> impl Future<Output = Option<Self::Item>> + Send + '_ {
        mqstate::KeyObservation::recv(self)
    }
}

impl Source for mqstate::lock::LeaseEvents {
    type Item = mqstate::lock::LeaseEvent;
    fn recv(&mut self) -> impl Future<Output = Option<Self::Item>> + Send + '_ {
        mqstate::lock::LeaseEvents::recv(self)
    }
}

impl Source for mqstate::lock::LeadershipEvents {
    type Item = mqstate::lock::LeadershipEvent;
    fn recv(&mut self) -> impl Future<Output = Option<Self::Item>> + Send + '_ {
        mqstate::lock::LeadershipEvents::recv(self)
    }
}

/// What waiting for the next item gave.
#[derive(Debug)]
pub(crate) enum Next<T> {
    Item(T),
    End,
    TimedOut(Duration),
}

/// The stream, its "closed" flag and its buffer of handed-back items, shared by the Python
/// object and the calls waiting on it.
#[derive(Debug)]
pub(crate) struct StreamState<S: Source> {
    stream: Arc<Mutex<Option<S>>>,
    closed: watch::Sender<bool>,
    requeued: std::sync::Mutex<VecDeque<S::Item>>,
    requeue_signal: Notify,
}

impl<S: Source> StreamState<S> {
    pub(crate) fn new(stream: S) -> Arc<Self> {
        Arc::new(StreamState {
            stream: Arc::new(Mutex::new(Some(stream))),
            closed: watch::Sender::new(false),
            requeued: std::sync::Mutex::new(VecDeque::new()),
            requeue_signal: Notify::new(),
        })
    }

    pub(crate) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Ends the stream: waiting calls return "ended", and the core stream is dropped (for an
    /// observation, that stops the key's registration when it was its last stream). Never
    /// blocks.
    pub(crate) fn close(&self) {
        self.closed.send_replace(true);
        self.release();
    }

    fn release(&self) {
        if let Ok(mut stream) = self.stream.try_lock() {
            stream.take();
        }
        // Otherwise a call is waiting on the stream: it sees `closed` and drops it itself.
    }

    /// Gives back an item that was received but could not be delivered (its asyncio future
    /// was cancelled meanwhile): the next call returns it.
    pub(crate) fn requeue(&self, item: S::Item) {
        self.requeued
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(item);
        self.requeue_signal.notify_one();
    }

    fn take_requeued(&self) -> Option<S::Item> {
        self.requeued
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
    }

    /// The next item, or the end; one waiter at a time (others queue). Cancel-safe.
    pub(crate) async fn next(self: Arc<Self>, timeout: Option<Duration>) -> Next<S::Item> {
        self.next_guarded(timeout).await.0
    }

    /// [`next`](Self::next), and the lock on the stream when an item was taken: while the
    /// caller holds it, no other call takes an item, so an item handed back with
    /// [`requeue`](Self::requeue) before the lock is dropped keeps its place.
    pub(crate) async fn next_guarded(
        self: Arc<Self>,
        timeout: Option<Duration>,
    ) -> (Next<S::Item>, Option<Held<S>>) {
        let mut closed = self.closed.subscribe();
        let receive = async {
            let mut stream = self.stream.clone().lock_owned().await;
            loop {
                if let Some(item) = self.take_requeued() {
                    return (Next::Item(item), Some(stream));
                }
                let Some(source) = stream.as_mut() else {
                    return (Next::End, None);
                };
                let requeued = self.requeue_signal.notified();
                tokio::select! {
                    item = source.recv() => match item {
                        Some(item) => return (Next::Item(item), Some(stream)),
                        None => {
                            stream.take();
                            return (Next::End, None);
                        }
                    },
                    () = requeued => continue,
                }
            }
        };
        let receive = async {
            match timeout {
                None => receive.await,
                Some(t) => tokio::time::timeout(t, receive)
                    .await
                    .unwrap_or((Next::TimedOut(t), None)),
            }
        };
        tokio::select! {
            biased;
            _ = closed.wait_for(|c| *c) => {
                self.release();
                (Next::End, None)
            }
            next = receive => next,
        }
    }
}

/// The lock on a stream, held while an item is on its way to an asyncio future.
pub(crate) type Held<S> = OwnedMutexGuard<Option<S>>;
