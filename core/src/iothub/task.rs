//! The device client's connection task: it alone polls rumqttc's v4 event loop (manual
//! acknowledgements on) and alone writes PUBACKs, so that a PUBACK is never sent on a
//! connection other than the one its message arrived on: completions are recorded by the
//! application in the shared state ([`super::shared::AckState`]) and the task writes those
//! released for the current connection.
//!
//! Per message, the task does as little as rumqttc's own automatic acknowledgement: the
//! PUBACKs released since its last turn are encoded straight into the connection's write
//! buffer and leave in one write (not one request, one event and one write each through
//! rumqttc's request channel), and the packets rumqttc has already read and buffered are
//! handled in one turn, without a `select!` each.
//!
//! It also reconnects (with the client's backoff, renewing the SAS token), hands telemetry to
//! rumqttc and matches each PUBACK of the hub to its sender, and on close fails what is left.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rumqttc::{
    AsyncClient, ConnectionError, Event, EventLoop, Outgoing, Packet, PubAck, Publish, QoS,
    StateError,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::c2d::C2dMessage;
use super::connect_error::classify;
use super::message::{self, MessageContent};
use super::options::{DeviceAuth, DeviceOptions};
use super::redelivery::{SEEN_IDS, SeenIds};
use super::renewal::renew_deadlines;
use super::shared::{Counters, Shared};
use crate::client::ConnectionState;
use crate::client::options::Backoff;
use crate::protocol::errors::Error;

/// How long a graceful close waits for the DISCONNECT to leave.
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The Unix time in seconds (0 before 1970).
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
}

/// A telemetry request handed to the connection task.
pub(super) struct SendRequest {
    pub(super) topic: String,
    pub(super) payload: Bytes,
    pub(super) done: oneshot::Sender<Result<(), Error>>,
}

/// The channels between the client's handles and its task.
pub(super) struct Channels {
    /// Received messages (or malformed ones), to `receive`.
    pub(super) messages: flume::Sender<Result<C2dMessage, Error>>,
    /// Telemetry from `send_event`.
    pub(super) sends: mpsc::UnboundedReceiver<SendRequest>,
    /// `close`.
    pub(super) shutdown: watch::Receiver<bool>,
    /// The first connection's outcome, for `connect`.
    pub(super) ready: oneshot::Sender<Result<(), Error>>,
}

/// Starts the connection task of a client whose rumqttc pair is `client` / `eventloop`.
pub(super) fn spawn(
    shared: Arc<Shared>,
    client: AsyncClient,
    eventloop: EventLoop,
    options: DeviceOptions,
    token_expiry: Option<u64>,
    channels: Channels,
) {
    let task = Task {
        devicebound: message::devicebound_prefix(&shared.device_id),
        shared,
        client,
        eventloop,
        options,
        token_expiry,
        messages: channels.messages,
        sends: channels.sends,
        shutdown: channels.shutdown,
        ready: Some(channels.ready),
        outbox: VecDeque::new(),
        submitted: VecDeque::new(),
        in_flight: HashMap::new(),
        seen: SeenIds::new(SEEN_IDS),
        connected_at: None,
        open: 0,
        ack_batch: Vec::new(),
        write_error: None,
        renew_at: None,
        renew_timer: Box::pin(tokio::time::sleep_until(Instant::now())),
    };
    tokio::spawn(task.run());
}

/// The connection task.
struct Task {
    shared: Arc<Shared>,
    client: AsyncClient,
    eventloop: EventLoop,
    options: DeviceOptions,
    token_expiry: Option<u64>,
    messages: flume::Sender<Result<C2dMessage, Error>>,
    sends: mpsc::UnboundedReceiver<SendRequest>,
    shutdown: watch::Receiver<bool>,
    ready: Option<oneshot::Sender<Result<(), Error>>>,
    /// Telemetry not yet handed to rumqttc (only handed over while connected).
    outbox: VecDeque<SendRequest>,
    /// Handed over, packet id not yet known (rumqttc assigns them in order).
    submitted: VecDeque<oneshot::Sender<Result<(), Error>>>,
    /// Sent, waiting for the PUBACK.
    in_flight: HashMap<u16, oneshot::Sender<Result<(), Error>>>,
    /// Message ids received, to recognise redeliveries.
    seen: SeenIds,
    /// When the current connection was made (for token renewal).
    connected_at: Option<Instant>,
    /// `devices/{id}/messages/devicebound/`, made once.
    devicebound: String,
    /// Open messages as of the last arrival (at least the real number: completions since
    /// only lower it), for back-pressure between two looks at the shared state.
    open: usize,
    /// The PUBACKs being written (kept for its capacity).
    ack_batch: Vec<u16>,
    /// Writing PUBACKs failed: the connection is gone, handled as a failed poll next turn.
    write_error: Option<ConnectionError>,
    /// The token renewal deadline `renew_timer` is set to (one timer, reset when it moves,
    /// rather than a new one each turn).
    renew_at: Option<Instant>,
    renew_timer: std::pin::Pin<Box<tokio::time::Sleep>>,
}

/// What one turn of the loop woke up for.
enum Wake {
    Shutdown,
    Work,
    Renew,
    Event(Result<Event, ConnectionError>),
}

impl Task {
    fn set_state(&self, state: ConnectionState) {
        self.shared.state.send_if_modified(|s| {
            let changed = *s != state;
            *s = state;
            changed
        });
    }

    fn connected(&self) -> bool {
        *self.shared.state.borrow() == ConnectionState::Connected
    }

    /// When to reconnect with a fresh token (see [`renewal`](super::renewal)): only for a
    /// token made here from a shared access key, once connected.
    fn renew_deadlines(&self) -> Option<(Instant, Instant)> {
        if !matches!(self.options.auth, DeviceAuth::SharedAccessKey { .. }) {
            return None;
        }
        let at = self.connected_at?;
        let expiry = self.token_expiry?;
        let remaining = Duration::from_secs(expiry.saturating_sub(unix_now()));
        Some(renew_deadlines(
            at,
            Instant::now(),
            remaining,
            self.options.token_lifetime,
        ))
    }

    /// Back-pressure: with `receive_buffer` messages open, stop reading, unless our own
    /// telemetry needs the event loop (PUBACKs do not: the task writes them itself).
    fn may_read(&self, open: usize) -> bool {
        open < self.options.receive_buffer
            || !self.submitted.is_empty()
            || !self.in_flight.is_empty()
            || !self.connected()
    }

    async fn next(&mut self) -> Wake {
        if let Some(e) = self.write_error.take() {
            return Wake::Event(Err(e));
        }
        let open = self.shared.acks().acks.open();
        self.open = open;
        let can_poll = self.may_read(open);
        let renew = if self.connected() {
            self.renew_deadlines().map(|(soft, hard)| {
                if open == 0 && self.submitted.is_empty() {
                    soft
                } else {
                    hard
                }
            })
        } else {
            None
        };
        if renew != self.renew_at {
            self.renew_at = renew;
            if let Some(at) = renew {
                self.renew_timer.as_mut().reset(at);
            }
        }
        tokio::select! {
            biased;
            changed = self.shutdown.changed() => {
                if changed.is_err() || *self.shutdown.borrow() { Wake::Shutdown } else { Wake::Work }
            }
            () = self.shared.wake.notified() => Wake::Work,
            () = self.renew_timer.as_mut(), if renew.is_some() => {
                self.renew_at = None;
                Wake::Renew
            }
            event = self.eventloop.poll(), if can_poll => Wake::Event(event),
        }
    }

    async fn run(mut self) {
        let mut backoff = Backoff::new(self.options.reconnect);
        let mut suback_pending = false;
        loop {
            let wake = self.next().await;
            match wake {
                Wake::Shutdown => {
                    // Completions made before `close()` go out ahead of the DISCONNECT: a
                    // `complete()` then `close()` completes the message.
                    self.flush_acks().await;
                    self.close_gracefully().await;
                    break;
                }
                Wake::Work => {}
                Wake::Renew => {
                    tracing::debug!(device = %self.shared.device_id, "renewing the SAS token");
                    Counters::bump(&self.shared.counters.token_renewals);
                    // Drop the socket: rumqttc keeps unacknowledged telemetry for resending,
                    // the hub keeps the session and redelivers the open messages.
                    self.eventloop.clean();
                    self.lost_connection();
                    if let Err(e) = self.refresh_credentials() {
                        self.stop(e);
                        break;
                    }
                }
                Wake::Event(Ok(event)) => {
                    // The packets rumqttc read along with this one wait in its event queue
                    // (what its next `poll` would return at once): handle them in this turn.
                    let mut next = Some(event);
                    let mut stop = None;
                    while let Some(event) = next {
                        stop = self.handle(event, &mut backoff, &mut suback_pending);
                        if stop.is_some() || !self.may_read(self.open) {
                            break;
                        }
                        next = self.eventloop.state.events.pop_front();
                    }
                    if let Some(stop) = stop {
                        self.stop(stop);
                        break;
                    }
                }
                Wake::Event(Err(e)) => {
                    let reason = e.to_string();
                    let error = classify(e, &self.options, self.token_expiry, unix_now());
                    if let Some(ready) = self.ready.take() {
                        let _ = ready.send(Err(error.clone()));
                        self.stop(error);
                        break;
                    }
                    suback_pending = false;
                    self.lost_connection();
                    if matches!(error, Error::Authentication(_)) {
                        tracing::error!(device = %self.shared.device_id, "{error}; giving up");
                        self.stop(error);
                        break;
                    }
                    let (delay, attempt) = backoff.next_delay(Instant::now(), fastrand::f64());
                    tracing::info!(device = %self.shared.device_id, "connection lost ({reason}); reconnecting in {delay:?} (attempt {attempt})");
                    tokio::select! {
                        biased;
                        changed = self.shutdown.changed() => {
                            if changed.is_err() || *self.shutdown.borrow() {
                                break;
                            }
                        }
                        () = tokio::time::sleep(delay) => {}
                    }
                    if let Err(e) = self.refresh_credentials() {
                        self.stop(e);
                        break;
                    }
                }
            }
            self.flush_acks().await;
            self.submit_sends();
        }
        self.finish();
    }

    /// Handles one event; `Some(error)` stops the client.
    fn handle(
        &mut self,
        event: Event,
        backoff: &mut Backoff,
        suback_pending: &mut bool,
    ) -> Option<Error> {
        match event {
            Event::Incoming(Packet::ConnAck(ack)) => {
                let now = Instant::now();
                backoff.connected(now);
                self.connected_at = Some(now);
                Counters::bump(&self.shared.counters.connections);
                let first = self.ready.is_some();
                if !first && !ack.session_present {
                    // rumqttc dropped what it kept for resending: say so to each sender.
                    let e = Error::Disconnected(
                        "the connection was lost and the hub kept no session: the event may or may not have arrived".into(),
                    );
                    for done in self
                        .submitted
                        .drain(..)
                        .chain(self.in_flight.drain().map(|(_, d)| d))
                    {
                        let _ = done.send(Err(e.clone()));
                    }
                }
                if first || !ack.session_present {
                    let filter =
                        format!("{}#", message::devicebound_prefix(&self.shared.device_id));
                    if let Err(e) = self.client.try_subscribe(filter, QoS::AtLeastOnce) {
                        return Some(Error::connection_caused_by(
                            format!("cannot subscribe: {e}"),
                            e,
                        ));
                    }
                    *suback_pending = true;
                } else {
                    self.set_state(ConnectionState::Connected);
                }
            }
            Event::Incoming(Packet::SubAck(ack)) if *suback_pending => {
                *suback_pending = false;
                if ack
                    .return_codes
                    .iter()
                    .any(|c| matches!(c, rumqttc::SubscribeReasonCode::Failure))
                {
                    let e = Error::connection(format!(
                        "the hub refused the subscription to devices/{}/messages/devicebound/#",
                        self.shared.device_id
                    ));
                    if let Some(ready) = self.ready.take() {
                        let _ = ready.send(Err(e.clone()));
                    }
                    return Some(e);
                }
                self.set_state(ConnectionState::Connected);
                if let Some(ready) = self.ready.take() {
                    let _ = ready.send(Ok(()));
                }
            }
            Event::Incoming(Packet::Publish(publish)) => self.received(publish),
            Event::Incoming(Packet::PubAck(ack)) => {
                if let Some(done) = self.in_flight.remove(&ack.pkid) {
                    let _ = done.send(Ok(()));
                }
            }
            Event::Outgoing(Outgoing::Publish(pkid)) => {
                // A resend after reconnection keeps its packet id (already known); a first
                // send takes the next waiter, in the order they were handed to rumqttc.
                if !self.in_flight.contains_key(&pkid)
                    && let Some(done) = self.submitted.pop_front()
                {
                    self.in_flight.insert(pkid, done);
                }
            }
            _ => {}
        }
        None
    }

    /// A message arrived: its place in the order of PUBACKs (QoS 1), then to the application.
    fn received(&mut self, publish: Publish) {
        let c = &self.shared.counters;
        Counters::bump(&c.received);
        let parsed = MessageContent::parse_owned(publish.topic, &self.devicebound, publish.payload);
        let ticket = (publish.qos != QoS::AtMostOnce).then(|| {
            let id = parsed.as_ref().ok().and_then(|c| c.message_id.as_deref());
            let mut state = self.shared.acks();
            let ticket = state.arrived(publish.pkid, id);
            self.open = state.acks.open();
            ticket
        });
        match parsed {
            Ok(content) => {
                let seen_before = content
                    .message_id
                    .as_ref()
                    .is_some_and(|id| !self.seen.remember(id));
                let redelivered = publish.dup || seen_before;
                if redelivered {
                    Counters::bump(&c.redelivered);
                }
                let message = C2dMessage::new(content, redelivered, ticket, self.shared.clone());
                let _ = self.messages.send(Ok(message));
            }
            Err(e) => {
                Counters::bump(&c.malformed);
                tracing::warn!(device = %self.shared.device_id, "{e}");
                if let Some(ticket) = ticket {
                    // No application could process it: acknowledged as if completed.
                    self.shared.acks().complete(ticket);
                }
                let _ = self.messages.send(Err(e));
            }
        }
    }

    /// Writes the released PUBACKs of the current connection, in order, in one write; older
    /// ones are dropped (their messages are redelivered).
    ///
    /// They go straight into the connection's write buffer, as rumqttc's automatic
    /// acknowledgements do, rather than through its request channel (one request, one
    /// `Outgoing` event and one write per PUBACK). The event loop is not being polled while
    /// this runs (the task owns it), so nothing else writes meanwhile. A failed or stuck
    /// write is handled next turn as the connection lost, as rumqttc's own flush failing
    /// in `poll` would be.
    async fn flush_acks(&mut self) {
        let mut batch = std::mem::take(&mut self.ack_batch);
        {
            let mut state = self.shared.acks();
            if self.eventloop.network.is_none() {
                // Not connected: the released PUBACKs are of a connection now gone (their
                // connection number is behind), dropped on the next connection.
                self.ack_batch = batch;
                return;
            }
            state.take_current(&mut batch);
        }
        if batch.is_empty() {
            self.ack_batch = batch;
            return;
        }
        let timeout = Duration::from_secs(self.options.connect_timeout.as_secs().max(1));
        let written = batch.len() as u64;
        let failure = match self.eventloop.network.as_mut() {
            Some(network) => {
                let write = async {
                    for &pkid in &batch {
                        network.write(Packet::PubAck(PubAck::new(pkid))).await?;
                    }
                    network.flush().await
                };
                match tokio::time::timeout(timeout, write).await {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(ConnectionError::MqttState(e)),
                    Err(_) => Some(ConnectionError::FlushTimeout),
                }
            }
            None => Some(ConnectionError::MqttState(StateError::ConnectionAborted)),
        };
        batch.clear();
        self.ack_batch = batch;
        match failure {
            None => {
                self.shared
                    .counters
                    .acknowledged
                    .fetch_add(written, Ordering::Relaxed);
            }
            Some(e) => {
                // What rumqttc does when its own flush fails in `poll`: drop the socket
                // (keeping unacknowledged telemetry for resending); the run loop then
                // reconnects as after any lost connection.
                self.eventloop.clean();
                self.write_error = Some(e);
            }
        }
    }

    fn submit_sends(&mut self) {
        while let Ok(request) = self.sends.try_recv() {
            self.outbox.push_back(request);
        }
        if !self.connected() {
            return;
        }
        while let Some(request) = self.outbox.pop_front() {
            if request.done.is_closed() {
                continue; // the caller timed out before it could be sent
            }
            match self.client.try_publish(
                request.topic.clone(),
                QoS::AtLeastOnce,
                false,
                request.payload.clone(),
            ) {
                Ok(()) => self.submitted.push_back(request.done),
                Err(rumqttc::ClientError::TryRequest(_)) => {
                    self.outbox.push_front(request);
                    break;
                }
                Err(e) => {
                    let _ = request
                        .done
                        .send(Err(Error::InvalidArgument(format!("cannot publish: {e}"))));
                }
            }
        }
    }

    /// The connection is gone: open messages will be redelivered.
    fn lost_connection(&mut self) {
        self.shared.acks().acks.new_connection();
        self.connected_at = None;
        self.set_state(ConnectionState::Reconnecting);
    }

    fn refresh_credentials(&mut self) -> Result<(), Error> {
        let (password, expiry) = self.options.password()?;
        self.token_expiry = expiry;
        self.eventloop
            .mqtt_options
            .set_credentials(self.options.username(), password.unwrap_or_default());
        Ok(())
    }

    async fn close_gracefully(&mut self) {
        if self.connected() && self.client.try_disconnect().is_ok() {
            let deadline = Instant::now() + CLOSE_GRACE;
            loop {
                match tokio::time::timeout_at(deadline, self.eventloop.poll()).await {
                    Ok(Ok(Event::Outgoing(Outgoing::Disconnect))) | Ok(Err(_)) | Err(_) => break,
                    Ok(Ok(_)) => {}
                }
            }
        }
    }

    fn stop(&mut self, error: Error) {
        self.shared.stop(error);
    }

    fn finish(&mut self) {
        self.shared.acks().close();
        let e = self.shared.closed_error();
        for request in self.outbox.drain(..) {
            let _ = request.done.send(Err(e.clone()));
        }
        for done in self
            .submitted
            .drain(..)
            .chain(self.in_flight.drain().map(|(_, d)| d))
        {
            let _ = done.send(Err(e.clone()));
        }
        if let Some(ready) = self.ready.take() {
            let _ = ready.send(Err(e));
        }
        self.set_state(ConnectionState::Closed);
    }
}
