//! The AMQP transport's connection task: it alone owns the connection and its links, so a
//! settlement is only ever written on the link its delivery arrived on. The application's
//! settlements are recorded in the shared state ([`crate::iothub::settle`]) and written here;
//! a link that closes makes every open delivery's handle stale (the hub redelivers those
//! messages on the next link, their delivery count one higher).
//!
//! It connects (TLS, SASL, CBS, links: [`super::connection`]), reconnects after a loss with
//! the client's backoff and a fresh SAS token, renews the token on the open connection before
//! it expires (docs/iothub-device.md, "SAS tokens"), sends telemetry and reports each
//! event's outcome, and on close closes the links (unsettled messages go back to the queue).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fe2o3_amqp::link::delivery::DeliveryInfo;
use fe2o3_amqp::link::{LinkStateError, RecvError};
use fe2o3_amqp::types::messaging::{Body, Data, Message, Outcome as AmqpOutcome};
use fe2o3_amqp::types::primitives::Value;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::connection::{Link, description, unauthorized};
use super::convert;
use crate::client::ConnectionState;
use crate::client::options::Backoff;
use crate::iothub::c2d::C2dMessage;
use crate::iothub::options::{DeviceAuth, DeviceOptions};
use crate::iothub::redelivery::{SEEN_IDS, SeenIds};
use crate::iothub::renewal::renew_deadlines;
use crate::iothub::settle::Outcome;
use crate::iothub::shared::{Counters, Shared};
use crate::protocol::errors::Error;

/// How long a graceful close may take.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(4);

/// A telemetry event handed to the task.
pub(crate) struct SendRequest {
    pub(crate) message: Message<Data>,
    pub(crate) done: oneshot::Sender<Result<(), Error>>,
}

/// The channels between the client's handles and the task.
pub(crate) struct Channels {
    pub(crate) messages: flume::Sender<Result<C2dMessage, Error>>,
    pub(crate) sends: mpsc::UnboundedReceiver<SendRequest>,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) ready: oneshot::Sender<Result<(), Error>>,
}

/// Why serving a connection ended.
enum End {
    /// `close` was called.
    Shutdown,
    /// The connection or a link was lost (the reason, for the log).
    Lost(String),
    /// The client cannot go on (a renewed token was refused).
    Fatal(Error),
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
}

/// Starts the task of a client connecting with `options`.
pub(crate) fn spawn(shared: Arc<Shared>, options: DeviceOptions, channels: Channels) {
    let task = Task {
        shared,
        options,
        messages: channels.messages,
        sends: channels.sends,
        shutdown: channels.shutdown,
        ready: Some(channels.ready),
        outbox: VecDeque::new(),
        infos: HashMap::new(),
        seen: SeenIds::new(SEEN_IDS),
        token_expiry: None,
        connected_at: None,
        attempts: 0,
        batch: Vec::new(),
        superseded: Vec::new(),
    };
    tokio::spawn(task.run());
}

struct Task {
    shared: Arc<Shared>,
    options: DeviceOptions,
    messages: flume::Sender<Result<C2dMessage, Error>>,
    sends: mpsc::UnboundedReceiver<SendRequest>,
    shutdown: watch::Receiver<bool>,
    ready: Option<oneshot::Sender<Result<(), Error>>>,
    /// Telemetry waiting for a connection.
    outbox: VecDeque<SendRequest>,
    /// The AMQP delivery of each open message of the current link, by settlement key.
    infos: HashMap<u64, DeliveryInfo>,
    seen: SeenIds,
    /// When the token put last expires (Unix seconds).
    token_expiry: Option<u64>,
    /// When that token was put.
    connected_at: Option<Instant>,
    /// Connections attempted (names the links, so that a new link is never taken for a
    /// resumption of the old one).
    attempts: u64,
    /// Settlements being written (kept for its capacity).
    batch: Vec<(u64, Outcome)>,
    /// Deliveries superseded by a redelivery of their message on the same link (the hub's
    /// lock timed out), to release: their credit comes back, the hub ignores the outcome.
    superseded: Vec<DeliveryInfo>,
}

impl Task {
    fn set_state(&self, state: ConnectionState) {
        self.shared.state.send_if_modified(|s| {
            let changed = *s != state;
            *s = state;
            changed
        });
    }

    fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    async fn run(mut self) {
        let mut backoff = Backoff::new(self.options.reconnect);
        loop {
            if self.shutting_down() {
                break;
            }
            let link = match self.connect().await {
                Some(Ok(link)) => link,
                None => break, // shut down while connecting
                Some(Err(e)) => {
                    if let Some(ready) = self.ready.take() {
                        let _ = ready.send(Err(e.clone()));
                        self.shared.stop(e);
                        break;
                    }
                    if matches!(e, Error::Authentication(_)) {
                        tracing::error!(device = %self.shared.device_id, "{e}; giving up");
                        self.shared.stop(e);
                        break;
                    }
                    if !self.wait(&mut backoff, &e.to_string()).await {
                        break;
                    }
                    continue;
                }
            };
            backoff.connected(Instant::now());
            self.connected(&link);
            let (end, mut link) = self.serve(link).await;
            if matches!(end, End::Shutdown) {
                // What the application settled before `close()` is written before the link
                // closes: a `complete()` then `close()` completes the message.
                let _ = tokio::time::timeout(CLOSE_GRACE, self.flush_settlements(&mut link)).await;
            }
            self.lost_link();
            match end {
                End::Shutdown => {
                    let _ = tokio::time::timeout(CLOSE_GRACE, link.close()).await;
                    break;
                }
                End::Fatal(e) => {
                    tracing::error!(device = %self.shared.device_id, "{e}; giving up");
                    self.shared.stop(e);
                    let _ = tokio::time::timeout(CLOSE_GRACE, link.close()).await;
                    break;
                }
                End::Lost(reason) => {
                    // Closing what is left tells the hub at once (it abandons the open
                    // deliveries); a dead connection just times out here.
                    let _ = tokio::time::timeout(CLOSE_GRACE, link.close()).await;
                    if !self.wait(&mut backoff, &reason).await {
                        break;
                    }
                }
            }
        }
        self.finish();
    }

    /// One connection attempt with a fresh token (none for an X.509 device), bounded by the
    /// connect timeout; `None` when `close` was called meanwhile.
    async fn connect(&mut self) -> Option<Result<Link, Error>> {
        let (token, expiry) = match self.options.password() {
            Ok(password) => password,
            Err(e) => return Some(Err(e)),
        };
        self.attempts = self.attempts.wrapping_add(1);
        let timeout = self.options.connect_timeout;
        let open = Link::open(&self.options, token.as_deref(), self.attempts);
        let mut shutdown = self.shutdown.clone();
        let result = tokio::select! {
            r = tokio::time::timeout(timeout, open) => match r {
                Ok(r) => r,
                Err(_) => Err(Error::Timeout(timeout)),
            },
            _ = shutdown.wait_for(|s| *s) => return None,
        };
        if result.is_ok() {
            self.token_expiry = expiry;
            self.connected_at = Some(Instant::now());
        }
        Some(result)
    }

    /// Waits the backoff delay before the next attempt; false when `close` was called.
    async fn wait(&mut self, backoff: &mut Backoff, reason: &str) -> bool {
        let (delay, attempt) = backoff.next_delay(Instant::now(), fastrand::f64());
        tracing::info!(device = %self.shared.device_id, "AMQP connection lost ({reason}); reconnecting in {delay:?} (attempt {attempt})");
        let mut shutdown = self.shutdown.clone();
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => false,
            () = tokio::time::sleep(delay) => true,
        }
    }

    /// A new link is up: deliveries from now on belong to it.
    fn connected(&mut self, link: &Link) {
        tracing::debug!(device = %self.shared.device_id, address = %link.c2d_address, "AMQP device links attached");
        self.shared.settlements().new_link();
        self.infos.clear();
        self.superseded.clear();
        Counters::bump(&self.shared.counters.connections);
        self.set_state(ConnectionState::Connected);
        if let Some(ready) = self.ready.take() {
            let _ = ready.send(Ok(()));
        }
    }

    /// The link is gone: its open deliveries can no longer be settled (the hub redelivers).
    fn lost_link(&mut self) {
        let dropped = self.shared.settlements().new_link();
        if dropped > 0 {
            tracing::debug!(device = %self.shared.device_id, dropped, "settlements not written before the link closed");
        }
        self.infos.clear();
        self.superseded.clear();
        self.connected_at = None;
        if !self.shutting_down() {
            self.set_state(ConnectionState::Reconnecting);
        }
    }

    /// When to put a fresh token: 80% of the way through the lifetime of one made here from a
    /// shared access key ([`renew_deadlines`]' soft deadline: renewing on the open connection
    /// costs nothing, so there is no reason to wait for the hard one).
    fn renew_at(&self) -> Option<Instant> {
        if !matches!(self.options.auth, DeviceAuth::SharedAccessKey { .. }) {
            return None;
        }
        let at = self.connected_at?;
        let remaining = Duration::from_secs(self.token_expiry?.saturating_sub(unix_now()));
        let (soft, _) = renew_deadlines(at, Instant::now(), remaining, self.options.token_lifetime);
        Some(soft)
    }

    /// Serves one connection until it is lost or the client closes; gives the link back to
    /// be closed.
    async fn serve(&mut self, mut link: Link) -> (End, Link) {
        let end = loop {
            let renew_at = self.renew_at();
            let renew = async {
                match renew_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let Link { c2d, events, .. } = &mut link;
            tokio::select! {
                biased;
                _ = self.shutdown.changed() => {
                    if self.shutting_down() {
                        break End::Shutdown;
                    }
                }
                () = self.shared.wake.notified() => {}
                () = renew => {
                    if let Err(end) = self.renew(&mut link).await {
                        break end;
                    }
                }
                request = self.sends.recv() => match request {
                    Some(request) => self.outbox.push_back(request),
                    None => break End::Shutdown,
                },
                delivery = c2d.recv::<Body<Value>>() => match delivery {
                    Ok(delivery) => self.received(delivery, &link.c2d_address),
                    // A certificate the hub stopped accepting (the device re-registered with
                    // another thumbprint, or disabled): reconnecting with it cannot help.
                    Err(RecvError::LinkStateError(LinkStateError::RemoteClosedWithError(r)))
                        if self.options.auth == DeviceAuth::X509 && unauthorized(&r.condition) =>
                    {
                        break End::Fatal(Error::Authentication(format!(
                            "the hub detached the receiver link: {}",
                            description(&r)
                        )));
                    }
                    Err(e) => break End::Lost(format!("the receiver link ended: {e}")),
                },
                e = events.on_detach() => break End::Lost(format!("the hub detached the telemetry link: {e}")),
            }
            if let Err(end) = self.flush_settlements(&mut link).await {
                break end;
            }
            if let Err(end) = self.submit_sends(&mut link).await {
                break end;
            }
        };
        (end, link)
    }

    /// Puts a fresh token on the open connection.
    async fn renew(&mut self, link: &mut Link) -> Result<(), End> {
        let (token, expiry) = match self.options.password() {
            Ok((Some(token), expiry)) => (token, expiry),
            Ok((None, _)) => return Ok(()),
            Err(e) => return Err(End::Fatal(e)),
        };
        tracing::debug!(device = %self.shared.device_id, "renewing the SAS token on $cbs");
        match link.put_token(&self.options, &token).await {
            Ok(()) => {
                Counters::bump(&self.shared.counters.token_renewals);
                self.token_expiry = expiry;
                self.connected_at = Some(Instant::now());
                Ok(())
            }
            Err(e @ Error::Authentication(_)) => Err(End::Fatal(e)),
            Err(e) => Err(End::Lost(format!("renewing the SAS token: {e}"))),
        }
    }

    /// A delivery arrived: filed under a settlement key, then handed to the application.
    fn received(
        &mut self,
        delivery: fe2o3_amqp::link::delivery::Delivery<Body<Value>>,
        address: &str,
    ) {
        let c = &self.shared.counters;
        Counters::bump(&c.received);
        let (info, message) = delivery.into_parts();
        match convert::content(message, address) {
            Ok((content, delivery_count)) => {
                let (handle, superseded) = self
                    .shared
                    .settlements()
                    .arrived(content.message_id.as_deref());
                self.infos.insert(handle.key(), info);
                if let Some(old) = superseded.and_then(|key| self.infos.remove(&key)) {
                    self.superseded.push(old);
                }
                let seen_before = content
                    .message_id
                    .as_ref()
                    .is_some_and(|id| !self.seen.remember(id));
                let redelivered = delivery_count > 0 || seen_before;
                if redelivered {
                    Counters::bump(&c.redelivered);
                }
                let message = C2dMessage::amqp(
                    content,
                    redelivered,
                    delivery_count,
                    handle,
                    self.shared.clone(),
                );
                let _ = self.messages.send(Ok(message));
            }
            Err(e) => {
                // No application could process it: rejected (dead-lettered, `Rejected`
                // feedback), which says more to the sender than completing it would.
                Counters::bump(&c.malformed);
                tracing::warn!(device = %self.shared.device_id, "{e}");
                let (handle, _) = self.shared.settlements().arrived(None);
                self.infos.insert(handle.key(), info);
                let _ = self.shared.settlements().settle(handle, Outcome::Reject);
                let _ = self.messages.send(Err(e));
            }
        }
    }

    /// Writes the settlements the application made since the last turn, each on its own.
    async fn flush_settlements(&mut self, link: &mut Link) -> Result<(), End> {
        let mut settled = !self.superseded.is_empty();
        for info in std::mem::take(&mut self.superseded) {
            if let Err(e) = link.c2d.release(info).await {
                return Err(End::Lost(format!("releasing a superseded delivery: {e}")));
            }
        }
        let mut batch = std::mem::take(&mut self.batch);
        self.shared.settlements().take_queued(&mut batch);
        // One disposition per run of consecutive delivery ids with the same outcome (fe2o3's
        // `*_all` send `first..last` ranges), rather than one frame per message: settlements
        // need no order over AMQP, so each outcome's deliveries go together, sorted by id.
        let mut by_outcome: [(Outcome, Vec<DeliveryInfo>); 3] = [
            (Outcome::Complete, Vec::new()),
            (Outcome::Reject, Vec::new()),
            (Outcome::Abandon, Vec::new()),
        ];
        for (key, outcome) in batch.drain(..) {
            let Some(info) = self.infos.remove(&key) else {
                continue;
            };
            if let Some((_, infos)) = by_outcome.iter_mut().find(|(o, _)| *o == outcome) {
                infos.push(info);
            }
        }
        self.batch = batch;
        for (outcome, mut infos) in by_outcome {
            if infos.is_empty() {
                continue;
            }
            settled = true;
            infos.sort_by_key(|i| i.delivery_id());
            let n = u64::try_from(infos.len()).unwrap_or(u64::MAX);
            let written = match outcome {
                Outcome::Complete => link.c2d.accept_all(infos).await,
                Outcome::Reject => link.c2d.reject_all(infos, None).await,
                Outcome::Abandon => link.c2d.release_all(infos).await,
            };
            if let Err(e) = written {
                // The rest is dropped with the link; the hub redelivers.
                return Err(End::Lost(format!("writing settlements: {e}")));
            }
            let c = &self.shared.counters;
            let counter = match outcome {
                Outcome::Complete => &c.acknowledged,
                Outcome::Reject => &c.rejected,
                Outcome::Abandon => &c.abandoned,
            };
            counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
        if settled {
            // Back-pressure: the hub may send as many as the buffer has room for, counting
            // those the application holds (the credit is absolute from the last delivery).
            let open = self.shared.settlements().open();
            let room = self.options.receive_buffer.saturating_sub(open);
            let credit = u32::try_from(room).unwrap_or(u32::MAX);
            if let Err(e) = link.c2d.set_credit(credit).await {
                return Err(End::Lost(format!(
                    "renewing the receiver link's credit: {e}"
                )));
            }
        }
        Ok(())
    }

    /// Sends the waiting telemetry; each event's outcome is awaited on its own task.
    async fn submit_sends(&mut self, link: &mut Link) -> Result<(), End> {
        while let Ok(request) = self.sends.try_recv() {
            self.outbox.push_back(request);
        }
        let timeout = self.options.operation_timeout;
        while let Some(request) = self.outbox.pop_front() {
            if request.done.is_closed() {
                continue; // the caller timed out before it could be sent
            }
            let sent =
                tokio::time::timeout(timeout, link.events.send_batchable(request.message)).await;
            match sent {
                Ok(Ok(outcome)) => {
                    let done = request.done;
                    tokio::spawn(async move {
                        let _ = done.send(event_result(outcome.await));
                    });
                }
                Ok(Err(e)) => {
                    let _ = request.done.send(Err(Error::Disconnected(format!(
                        "the event was not sent: {e}"
                    ))));
                    return Err(End::Lost(format!("sending telemetry: {e}")));
                }
                Err(_) => {
                    // No credit from the hub within the timeout: the event was not sent.
                    let _ = request.done.send(Err(Error::Timeout(timeout)));
                }
            }
        }
        Ok(())
    }

    fn finish(&mut self) {
        self.shared.settlements().close();
        self.shared.acks().close();
        let e = self.shared.closed_error();
        for request in self.outbox.drain(..) {
            let _ = request.done.send(Err(e.clone()));
        }
        while let Ok(request) = self.sends.try_recv() {
            let _ = request.done.send(Err(e.clone()));
        }
        if let Some(ready) = self.ready.take() {
            let _ = ready.send(Err(e));
        }
        self.set_state(ConnectionState::Closed);
    }
}

/// What `send_event` reports for the hub's outcome of an event.
fn event_result(outcome: Result<AmqpOutcome, fe2o3_amqp::link::SendError>) -> Result<(), Error> {
    match outcome {
        Ok(AmqpOutcome::Accepted(_)) => Ok(()),
        Ok(AmqpOutcome::Rejected(r)) => Err(Error::InvalidArgument(format!(
            "the hub rejected the event: {}",
            r.error
                .map(|e| format!("{:?}: {}", e.condition, e.description.unwrap_or_default()))
                .unwrap_or_else(|| "no reason given".into())
        ))),
        Ok(other) => Err(Error::Disconnected(format!(
            "the hub did not take the event ({other:?}): it was not stored"
        ))),
        Err(e) => Err(Error::Disconnected(format!(
            "the connection was lost before the hub acknowledged the event ({e}): it may or may not have arrived"
        ))),
    }
}
