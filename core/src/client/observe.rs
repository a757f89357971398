//! Key observations (docs/protocol.md section 6): per-key registrations shared by every stream
//! that observes the key, notification routing, and restoring everything after a reconnect.
//!
//! - One KEYNOTIFY per key however many [`KeyObservation`]s observe it (reference counted);
//!   `KEYNOTIFY key STOP` when the last one is dropped or [`crate::Client::unobserve`] is
//!   called. The client subscribes to its notification topic (and waits for the SUBACK) when
//!   it connects, so every KEYNOTIFY follows the SUBACK.
//! - After a reconnect the server has forgotten the registrations (they belong to the MQTT
//!   connection): every observed key gets KEYNOTIFY again, then a GET; if the key changed
//!   while the client was away, each stream receives a synthesized notification
//!   ([`KeyNotification::synthesized`]), so no change is missed.
//! - Overflow policy: each stream buffers up to [`crate::ConnectOptions::observation_buffer`]
//!   notifications. When its buffer is full, new notifications for that stream are dropped
//!   and counted; the stream then yields `Err(Error::Lagged(n))` at the point of the gap
//!   (as soon as there is room, or when the buffer has been drained) and carries on. Memory
//!   stays bounded however slow the reader; a reader that sees `Lagged` should `get` the key.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;
use tokio::sync::mpsc;

use crate::client::registry::{Baseline, Item, KeyEntry, KeyNotification, Subscriber};
use crate::client::rpc::Shared;
use crate::client::values::ConnectionState;
use crate::protocol::errors::Error;
use crate::protocol::resp3::NotifyOperation;

/// What an observation needs of its client: implemented by [`crate::Client`], so that this
/// module depends on the request layer ([`Shared`]) only, not on the client facade that
/// uses it.
pub(crate) trait Host: std::fmt::Debug + Send + Sync + 'static {
    /// The connection's shared state (requests, the registry).
    fn shared(&self) -> &Arc<Shared>;
    /// The request timeout of this handle.
    fn timeout(&self) -> Duration;
    /// Queues a command for the observation manager task.
    fn send_command(&self, command: Command);
    /// Another handle on the same connection (which it keeps open).
    fn boxed(&self) -> Box<dyn Host>;
}

/// Commands for the observation manager task.
#[derive(Debug)]
pub(crate) enum Command {
    /// The last stream of a key was dropped: STOP it unless it was observed again meanwhile.
    Release(Bytes),
    /// The connection came back: re-register every key and catch up.
    Restore,
}

/// Observes `key` for `client`: adds a stream, registering the key with the server if it is
/// the first.
pub(crate) async fn observe(client: &dyn Host, key: Bytes) -> Result<KeyObservation, Error> {
    crate::client::rpc::check_key(&key)?;
    let shared = client.shared();
    let registry = &shared.registry;
    let _ops = registry.ops.lock().await;
    let (tx, rx) = flume::bounded(registry.buffer);
    let missed = Arc::new(AtomicU64::new(0));
    let id = registry.next_id.fetch_add(1, Ordering::Relaxed);
    let needs_keynotify = {
        let mut keys = registry.keys();
        let entry = keys.entry(key.clone()).or_insert_with(|| KeyEntry {
            subs: Vec::new(),
            registered: false,
            baseline: Baseline::Unknown,
            seq: 0,
        });
        // Subscribed before the KEYNOTIFY goes out, so a change right after the server's +OK
        // reaches this stream too.
        entry.subs.push(Subscriber {
            id,
            tx,
            missed: missed.clone(),
        });
        !entry.registered
    };
    // Removes the new stream again if this call fails or is cancelled before it returns.
    let mut guard = NewStreamGuard {
        client,
        key: key.clone(),
        id,
        armed: true,
    };
    if needs_keynotify {
        let timeout = client.timeout();
        shared.keynotify(&key, false, timeout).await?;
        let seq = {
            let mut keys = registry.keys();
            match keys.get_mut(&key) {
                Some(entry) => {
                    entry.registered = true;
                    entry.seq
                }
                None => 0,
            }
        };
        // The baseline a later catch-up GET compares with; best effort (Unknown otherwise,
        // which makes the catch-up deliver the value it finds).
        let baseline = match shared.get(&key, timeout).await {
            Ok(Some(v)) => Some(Baseline::Present(v.version)),
            Ok(None) => Some(Baseline::Absent),
            Err(_) => None,
        };
        if let Some(baseline) = baseline
            && let Some(entry) = registry.keys().get_mut(&key)
            && entry.seq == seq
        {
            entry.baseline = baseline;
        }
    }
    guard.armed = false;
    let stream = rx.clone().into_stream();
    Ok(KeyObservation {
        key,
        id,
        rx,
        stream,
        missed,
        client: client.boxed(),
    })
}

struct NewStreamGuard<'a> {
    client: &'a dyn Host,
    key: Bytes,
    id: u64,
    armed: bool,
}

impl Drop for NewStreamGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut keys = self.client.shared().registry.keys();
        if let Some(entry) = keys.get_mut(&self.key) {
            entry.subs.retain(|s| s.id != self.id);
            if entry.subs.is_empty() {
                if entry.registered {
                    // Registered by an earlier stream: the manager STOPs it, unless it is
                    // observed again first.
                    self.client.send_command(Command::Release(self.key.clone()));
                } else {
                    keys.remove(&self.key);
                }
            }
        }
    }
}

/// Ends every stream of `key` and unregisters it.
pub(crate) async fn unobserve(client: &dyn Host, key: &[u8]) -> Result<(), Error> {
    crate::client::rpc::check_key(key)?;
    let shared = client.shared();
    let _ops = shared.registry.ops.lock().await;
    let removed = shared.registry.keys().remove(key);
    if let Some(entry) = removed {
        drop(entry); // ends the streams
        shared.keynotify(key, true, client.timeout()).await?;
    }
    Ok(())
}

/// The observation manager: STOPs released keys and restores registrations after a
/// reconnect. Runs until every sender is gone.
pub(crate) async fn manager(
    shared: Arc<Shared>,
    timeout: Duration,
    tx: mpsc::UnboundedSender<Command>,
    mut rx: mpsc::UnboundedReceiver<Command>,
) {
    // Only a weak handle on our own queue, so that this task does not keep itself alive.
    let weak = tx.downgrade();
    drop(tx);
    let tx = weak;
    while let Some(command) = rx.recv().await {
        match command {
            Command::Release(key) => release(&shared, key, timeout).await,
            Command::Restore => {
                if !restore(&shared, timeout).await {
                    // Some key could not be re-registered: try again shortly, while connected.
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        if let Some(tx) = tx.upgrade() {
                            let _ = tx.send(Command::Restore);
                        }
                    });
                }
            }
        }
    }
}

async fn release(shared: &Shared, key: Bytes, timeout: Duration) {
    let _ops = shared.registry.ops.lock().await;
    let stop = {
        let mut keys = shared.registry.keys();
        match keys.get(&key) {
            Some(entry) if entry.subs.is_empty() => keys.remove(&key).is_some_and(|e| e.registered),
            _ => false,
        }
    };
    let closed = *shared.state.borrow() == ConnectionState::Closed;
    if stop
        && !closed
        && let Err(e) = shared.keynotify(&key, true, timeout).await
    {
        tracing::debug!(
            "KEYNOTIFY STOP failed (the server drops it with the connection anyway): {e}"
        );
    }
}

/// Re-registers every observed key and delivers what changed while away. False if some key
/// could not be restored (it will be retried).
async fn restore(shared: &Arc<Shared>, timeout: Duration) -> bool {
    let _ops = shared.registry.ops.lock().await;
    let keys: Vec<Bytes> = shared.registry.keys().keys().cloned().collect();
    let mut tasks = tokio::task::JoinSet::new();
    for key in keys {
        let shared = shared.clone();
        tasks.spawn(async move { restore_key(&shared, key, timeout).await });
    }
    let mut all_ok = true;
    while let Some(result) = tasks.join_next().await {
        all_ok &= result.unwrap_or(false);
    }
    all_ok
}

async fn restore_key(shared: &Shared, key: Bytes, timeout: Duration) -> bool {
    let registry = &shared.registry;
    if let Err(e) = shared.keynotify(&key, false, timeout).await {
        registry.deliver_error(
            &key,
            &Error::Disconnected(format!(
                "the observation could not be re-registered after a reconnect (retrying): {e}"
            )),
        );
        return false;
    }
    let seq = match registry.keys().get_mut(&key) {
        Some(entry) => {
            entry.registered = true;
            entry.seq
        }
        None => return true,
    };
    let current = match shared.get(&key, timeout).await {
        Ok(v) => v,
        Err(e) => {
            registry.deliver_error(
                &key,
                &Error::Disconnected(format!(
                    "the catch-up GET after a reconnect failed, a change may have been missed: {e}"
                )),
            );
            return true;
        }
    };
    let mut keys = registry.keys();
    let Some(entry) = keys.get_mut(&key) else {
        return true;
    };
    if entry.seq != seq {
        // A notification arrived meanwhile: it is newer than what we could synthesize.
        return true;
    }
    let changed = match (&entry.baseline, &current) {
        (Baseline::Present(old), Some(now)) => now.version > *old,
        (Baseline::Present(_), None) => true,
        (Baseline::Absent | Baseline::Unknown, Some(_)) => true,
        (Baseline::Absent, None) => false,
        (Baseline::Unknown, None) => false,
    };
    if !changed {
        return true;
    }
    let notification = match current {
        Some(v) => {
            entry.baseline = Baseline::Present(v.version.clone());
            KeyNotification {
                key: key.clone(),
                operation: NotifyOperation::Set(v.value),
                version: Some(v.version),
                synthesized: true,
            }
        }
        None => {
            entry.baseline = Baseline::Absent;
            KeyNotification {
                key: key.clone(),
                operation: NotifyOperation::Delete,
                version: None,
                synthesized: true,
            }
        }
    };
    entry.seq += 1;
    for sub in &entry.subs {
        sub.deliver(Ok(notification.clone()));
    }
    true
}

/// A stream of the changes of one key, from [`crate::Client::observe`].
///
/// Items are `Ok(KeyNotification)`, or `Err` for a notification that could not be decoded
/// ([`Error::UnexpectedPayload`]), a lag ([`Error::Lagged`], see the module's overflow
/// policy) or a problem restoring the observation after a reconnect; the stream goes on
/// after an `Err`. It ends (`None`) after [`crate::Client::unobserve`] or
/// [`crate::Client::close`]. Dropping it stops the observation (the key's registration ends
/// when its last stream is dropped). It keeps its client connected while it lives.
///
/// Read it with [`recv`](KeyObservation::recv) or as a [`Stream`]. The buffer is a runtime
/// independent channel, so a stream may be read from another runtime or thread.
///
/// ```no_run
/// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
/// let mut changes = client.observe("door").await?;
/// while let Some(change) = changes.recv().await {
///     println!("{:?}", change?);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct KeyObservation {
    key: Bytes,
    id: u64,
    rx: flume::Receiver<Item>,
    stream: flume::r#async::RecvStream<'static, Item>,
    missed: Arc<AtomicU64>,
    client: Box<dyn Host>,
}

impl KeyObservation {
    /// The observed key.
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
    /// let changes = client.observe("door").await?;
    /// assert_eq!(changes.key(), "door");
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &Bytes {
        &self.key
    }

    /// The next change; `None` once the observation has ended.
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
    /// let mut changes = client.observe("door").await?;
    /// if let Some(Ok(change)) = changes.recv().await {
    ///     println!("door is now {:?}", change.value());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn recv(&mut self) -> Option<Result<KeyNotification, Error>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// A pending lag report, taken (reported once).
    fn take_lag(&self) -> Option<Item> {
        match self.missed.swap(0, Ordering::AcqRel) {
            0 => None,
            n => Some(Err(Error::Lagged(n))),
        }
    }

    /// Blocking receive with a timeout, for the blocking facade: `Err(Error::Timeout)` when
    /// nothing arrived in time. Needs no runtime.
    pub(crate) fn recv_blocking(&self, timeout: Option<Duration>) -> Option<Item> {
        match self.rx.try_recv() {
            Ok(item) => return Some(item),
            Err(flume::TryRecvError::Disconnected) => return self.take_lag(),
            Err(flume::TryRecvError::Empty) => {
                if let Some(lag) = self.take_lag() {
                    return Some(lag);
                }
            }
        }
        let received = match timeout {
            Some(t) => self.rx.recv_timeout(t),
            None => self
                .rx
                .recv()
                .map_err(|_| flume::RecvTimeoutError::Disconnected),
        };
        match received {
            Ok(item) => Some(item),
            Err(flume::RecvTimeoutError::Disconnected) => self.take_lag(),
            Err(flume::RecvTimeoutError::Timeout) => Some(
                self.take_lag()
                    .unwrap_or(Err(Error::Timeout(timeout.unwrap_or_default()))),
            ),
        }
    }
}

impl Stream for KeyObservation {
    type Item = Result<KeyNotification, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match Pin::new(&mut self.stream).poll_next(cx) {
            Poll::Ready(Some(item)) => Poll::Ready(Some(item)),
            // Empty (or ended): a gap recorded since the last item is reported now.
            Poll::Ready(None) => Poll::Ready(self.take_lag()),
            Poll::Pending => match self.take_lag() {
                Some(lag) => Poll::Ready(Some(lag)),
                None => Poll::Pending,
            },
        }
    }
}

impl Drop for KeyObservation {
    fn drop(&mut self) {
        let shared = self.client.shared();
        if shared.registry.remove_subscriber(&self.key, self.id) {
            self.client.send_command(Command::Release(self.key.clone()));
        }
    }
}
