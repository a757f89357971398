//! [`DeviceClient`]: one MQTT 3.1.1 connection to IoT Hub, its connection task, and the
//! application's handles (received messages, completions, telemetry).
//!
//! The connection task alone polls rumqttc's v4 event loop (manual acknowledgements on) and
//! alone writes PUBACKs, so that a PUBACK is never sent on a connection other than the one
//! its message arrived on: completions are recorded by the application under a lock
//! ([`InOrderAcks`]) and the task writes those released for the current connection.
//!
//! Per message, the task does as little as rumqttc's own automatic acknowledgement: the
//! PUBACKs released since its last turn are encoded straight into the connection's write
//! buffer and leave in one write (not one request, one event and one write each through
//! rumqttc's request channel), and the packets rumqttc has already read and buffered are
//! handled in one turn, without a `select!` each.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rumqttc::{
    AsyncClient, ConnectReturnCode, ConnectionError, Event, EventLoop, MqttOptions, NetworkOptions,
    Outgoing, Packet, PubAck, Publish, QoS, StateError, TlsConfiguration, Transport,
};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::time::Instant;

use super::completion::{CompleteOutcome, InOrderAcks, Ticket};
use super::message::{self, MessageContent, Telemetry};
use super::options::{DeviceAuth, DeviceOptions};
use crate::client::ConnectionState;
use crate::client::options::Backoff;
use crate::protocol::errors::Error;

/// Room in rumqttc's request channel: telemetry and the subscription (PUBACKs do not go
/// through it); the outbox bounds what goes in, so `try_*` never finds it full in practice
/// (and when it does, the item waits for the next turn).
const REQUEST_CHANNEL: usize = 4096;
/// How many message ids are remembered to recognise redeliveries.
const SEEN_IDS: usize = 10_000;
/// Telemetry PUBLISHes in flight at once (rumqttc's inflight window).
const INFLIGHT: u16 = 100;
/// How long a graceful close waits for the DISCONNECT to leave.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Counters of a client's life, for soak tests and monitoring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceStats {
    /// Messages received (redeliveries included).
    pub received: u64,
    /// Of those, recognised as redeliveries (DUP flag, or a message id seen before).
    pub redelivered: u64,
    /// PUBACKs sent (completions released in order).
    pub acknowledged: u64,
    /// Completions that came too late: the connection their message arrived on was gone, or
    /// the hub had delivered the message again since (its lock timed out).
    pub stale_completions: u64,
    /// Connections made (the first included).
    pub connections: u64,
    /// Reconnections made to renew the SAS token.
    pub token_renewals: u64,
    /// Messages whose property bag could not be decoded (reported and acknowledged).
    pub malformed: u64,
}

#[derive(Debug, Default)]
struct Counters {
    received: AtomicU64,
    redelivered: AtomicU64,
    acknowledged: AtomicU64,
    stale_completions: AtomicU64,
    connections: AtomicU64,
    token_renewals: AtomicU64,
    malformed: AtomicU64,
}

/// Completions waiting for the connection task.
#[derive(Debug, Default)]
struct AckState {
    acks: InOrderAcks,
    /// Released packet ids, with the connection they belong to.
    to_send: VecDeque<(u64, u16)>,
    closed: bool,
}

/// What the application's handles and the connection task share.
struct Shared {
    device_id: String,
    acks: Mutex<AckState>,
    wake: Notify,
    state: watch::Sender<ConnectionState>,
    /// Why the client stopped, when it stopped on its own (authentication refused...).
    fatal: Mutex<Option<Error>>,
    counters: Counters,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("device_id", &self.device_id)
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn acks(&self) -> MutexGuard<'_, AckState> {
        // A panic while holding this lock cannot leave it inconsistent (no partial updates
        // across awaits), so a poisoned lock is used as is.
        self.acks.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn closed_error(&self) -> Error {
        self.fatal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| Error::Disconnected("the device client is closed".into()))
    }
}

/// A received cloud-to-device message. Read it through [`Deref`] to [`MessageContent`]
/// (`msg.message_id`, `msg.payload`, `msg.property("name")`...), then [`complete`] it.
///
/// Nothing is acknowledged until the application completes the message; a message never
/// completed goes back to the hub's queue when its lock times out (or the connection drops)
/// and is delivered again, with [`C2dMessage::is_redelivery`] set.
///
/// [`complete`]: C2dMessage::complete
#[derive(Debug, Clone)]
pub struct C2dMessage {
    content: MessageContent,
    redelivered: bool,
    ticket: Option<Ticket>,
    shared: Arc<Shared>,
}

impl Deref for C2dMessage {
    type Target = MessageContent;
    fn deref(&self) -> &MessageContent {
        &self.content
    }
}

impl C2dMessage {
    /// The decoded content.
    pub fn content(&self) -> &MessageContent {
        &self.content
    }

    /// True when this message was delivered before (the MQTT DUP flag, or a message id this
    /// client already received): delivery is at-least-once, and a message whose completion
    /// did not reach the hub (the connection dropped first) arrives again.
    pub fn is_redelivery(&self) -> bool {
        self.redelivered
    }

    /// Completes the message: its PUBACK is sent, in arrival order (a completion ahead of an
    /// earlier, still open message is held until that one is completed, as MQTT requires).
    /// Returns at once; the hub sets the message to Completed when the PUBACK arrives.
    ///
    /// Errors: [`Error::Disconnected`] when the connection the message arrived on is gone
    /// (the hub will deliver it again), when the hub already delivered it again because its
    /// lock timed out (complete the new copy), or the client is closed; [`Error::InvalidArgument`]
    /// when it was already completed.
    pub fn complete(&self) -> Result<(), Error> {
        let Some(ticket) = self.ticket else {
            return Ok(()); // QoS 0: nothing to acknowledge
        };
        let mut state = self.shared.acks();
        if state.closed {
            return Err(self.shared.closed_error());
        }
        match state.acks.complete(ticket) {
            CompleteOutcome::Released(ids) => {
                let released = !ids.is_empty();
                state
                    .to_send
                    .extend(ids.into_iter().map(|id| (ticket.connection, id)));
                drop(state);
                if released {
                    self.shared.wake.notify_one();
                }
                Ok(())
            }
            CompleteOutcome::AlreadyCompleted => Err(Error::InvalidArgument(format!(
                "message {:?} was already completed",
                self.content.message_id
            ))),
            CompleteOutcome::Superseded => {
                self.shared
                    .counters
                    .stale_completions
                    .fetch_add(1, Ordering::Relaxed);
                Err(Error::Disconnected(format!(
                    "message {:?} was delivered again after its lock timed out: this copy cannot be completed any more; complete the redelivered copy",
                    self.content.message_id
                )))
            }
            CompleteOutcome::Stale => {
                self.shared
                    .counters
                    .stale_completions
                    .fetch_add(1, Ordering::Relaxed);
                Err(Error::Disconnected(format!(
                    "message {:?} arrived on a connection that has since dropped: it cannot be completed any more and the hub will deliver it again",
                    self.content.message_id
                )))
            }
        }
    }

    /// Always [`Error::NotSupported`]: IoT Hub documents that devices connected over MQTT
    /// cannot reject a cloud-to-device message (let it expire, or complete it and ignore it).
    pub fn reject(&self) -> Result<(), Error> {
        Err(Error::NotSupported(
            "reject is not supported over MQTT: IoT Hub does not let MQTT devices reject cloud-to-device messages (complete it, or let it expire)".into(),
        ))
    }

    /// Always [`Error::NotSupported`]: IoT Hub documents that devices connected over MQTT
    /// cannot abandon a cloud-to-device message (not completing it has the same effect once
    /// its lock times out).
    pub fn abandon(&self) -> Result<(), Error> {
        Err(Error::NotSupported(
            "abandon is not supported over MQTT: IoT Hub does not let MQTT devices abandon cloud-to-device messages (leave it uncompleted: it is delivered again after the lock timeout)".into(),
        ))
    }
}

/// A telemetry request handed to the connection task.
struct SendRequest {
    topic: String,
    payload: Bytes,
    done: oneshot::Sender<Result<(), Error>>,
}

/// An IoT Hub device client over MQTT 3.1.1: receives cloud-to-device messages (explicit,
/// in-order completion) and sends telemetry. Cheap to clone; [`DeviceClient::close`] ends it.
///
/// ```no_run
/// use mqstate::iothub::{DeviceClient, DeviceOptions, Telemetry};
///
/// # async fn demo() -> Result<(), mqstate::Error> {
/// let options = DeviceOptions::from_connection_string(
///     "HostName=myhub.azure-devices.net;DeviceId=dev1;SharedAccessKey=c2VjcmV0",
/// )?;
/// let client = DeviceClient::connect(options).await?;
/// client.send_event(Telemetry::new("hello").property("kind", "greeting")).await?;
/// while let Ok(msg) = client.receive().await {
///     println!("{:?}: {:?}", msg.message_id, msg.payload);
///     msg.complete()?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DeviceClient {
    shared: Arc<Shared>,
    messages: flume::Receiver<Result<C2dMessage, Error>>,
    sends: mpsc::UnboundedSender<SendRequest>,
    shutdown: Arc<watch::Sender<bool>>,
    operation_timeout: Duration,
}

impl DeviceClient {
    /// Connects (waiting for the CONNACK and the SUBACK of the C2D subscription) and keeps
    /// the connection up from then on. Errors: [`Error::InvalidArgument`] for bad options,
    /// [`Error::Authentication`] when the hub refuses the credentials, [`Error::Connection`]
    /// when it cannot be reached, [`Error::Timeout`] after `connect_timeout`.
    pub async fn connect(options: DeviceOptions) -> Result<Self, Error> {
        options.validate()?;
        let (password, expiry) = options.password()?;
        let mut mqtt = MqttOptions::new(
            options.device_id.clone(),
            options.connect_host().to_owned(),
            options.port,
        );
        mqtt.set_keep_alive(options.keep_alive);
        // Clean session 0: the subscription and the messages sent while offline survive.
        mqtt.set_clean_session(false);
        mqtt.set_manual_acks(true);
        mqtt.set_inflight(INFLIGHT);
        mqtt.set_request_channel_capacity(REQUEST_CHANNEL);
        // IoT Hub's C2D limit is 64 KB of body plus the topic; telemetry up to 256 KB.
        mqtt.set_max_packet_size(512 * 1024, 512 * 1024);
        mqtt.set_credentials(options.username(), password.unwrap_or_default());
        if let Some(tls) = &options.tls {
            mqtt.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(
                tls.client_config()?,
            )));
        }
        let connect_secs = options.connect_timeout.as_secs().max(1);
        let mut net = NetworkOptions::new();
        net.set_tcp_nodelay(true);
        net.set_connection_timeout(connect_secs);
        let (client, mut eventloop) = AsyncClient::new(mqtt, REQUEST_CHANNEL);
        eventloop.set_network_options(net);

        let (state, _) = watch::channel(ConnectionState::Connecting);
        let shared = Arc::new(Shared {
            device_id: options.device_id.clone(),
            acks: Mutex::new(AckState::default()),
            wake: Notify::new(),
            state,
            fatal: Mutex::new(None),
            counters: Counters::default(),
        });
        let (messages_tx, messages) = flume::unbounded();
        let (sends, sends_rx) = mpsc::unbounded_channel();
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (ready_tx, ready_rx) = oneshot::channel();
        let operation_timeout = options.operation_timeout;
        let connect_timeout = options.connect_timeout;
        let task = Task {
            shared: shared.clone(),
            client,
            eventloop,
            options,
            token_expiry: expiry,
            messages: messages_tx,
            sends: sends_rx,
            shutdown: shutdown_rx,
            ready: Some(ready_tx),
            outbox: VecDeque::new(),
            submitted: VecDeque::new(),
            in_flight: HashMap::new(),
            seen: (HashSet::new(), VecDeque::new()),
            connected_at: None,
            devicebound: message::devicebound_prefix(&shared.device_id),
            open: 0,
            ack_batch: Vec::new(),
            write_error: None,
            renew_at: None,
            renew_timer: Box::pin(tokio::time::sleep_until(Instant::now())),
        };
        tokio::spawn(task.run());
        let this = DeviceClient {
            shared,
            messages,
            sends,
            shutdown: Arc::new(shutdown),
            operation_timeout,
        };
        match tokio::time::timeout(connect_timeout + Duration::from_secs(1), ready_rx).await {
            Ok(Ok(Ok(()))) => Ok(this),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(Error::Disconnected(
                "the connection task ended while connecting".into(),
            )),
            Err(_) => {
                this.close().await;
                Err(Error::Timeout(connect_timeout))
            }
        }
    }

    /// The device id.
    pub fn device_id(&self) -> &str {
        &self.shared.device_id
    }

    /// The next message, waiting for one. A message whose property bag cannot be decoded is
    /// an `Err(`[`Error::MalformedMessage`]`)` in its place (it is acknowledged, since no
    /// application could process it, and the connection goes on). After [`close`] (or when
    /// the client stopped for good, e.g. its credentials were refused on reconnection), the
    /// buffered messages are still returned, then the reason the client stopped.
    ///
    /// [`close`]: DeviceClient::close
    pub async fn receive(&self) -> Result<C2dMessage, Error> {
        match self.messages.recv_async().await {
            Ok(m) => m,
            Err(_) => Err(self.shared.closed_error()),
        }
    }

    /// The next message if one is buffered (`Ok(None)` otherwise).
    pub fn try_receive(&self) -> Result<Option<C2dMessage>, Error> {
        match self.messages.try_recv() {
            Ok(m) => m.map(Some),
            Err(flume::TryRecvError::Empty) => Ok(None),
            Err(flume::TryRecvError::Disconnected) => Err(self.shared.closed_error()),
        }
    }

    /// Waits up to `timeout` for a message: `Ok(None)` when none came (for blocking callers
    /// and the C binding).
    pub fn receive_blocking(&self, timeout: Duration) -> Result<Option<C2dMessage>, Error> {
        match self.messages.recv_timeout(timeout) {
            Ok(m) => m.map(Some),
            Err(flume::RecvTimeoutError::Timeout) => Ok(None),
            Err(flume::RecvTimeoutError::Disconnected) => Err(self.shared.closed_error()),
        }
    }

    /// Sends telemetry on `devices/{id}/messages/events/{property bag}` at QoS 1 and waits for
    /// the hub's PUBACK (up to `operation_timeout`: then [`Error::Timeout`], and the message
    /// may still arrive). While disconnected it waits for the reconnection; if the hub kept
    /// no session across a reconnection, an unacknowledged message fails with
    /// [`Error::Disconnected`] (it may or may not have arrived).
    pub async fn send_event(&self, event: Telemetry) -> Result<(), Error> {
        let bag = message::telemetry_bag(&event)?;
        let topic = message::events_topic(&self.shared.device_id, &bag);
        let (done, wait) = oneshot::channel();
        self.sends
            .send(SendRequest {
                topic,
                payload: event.payload,
                done,
            })
            .map_err(|_| self.shared.closed_error())?;
        self.shared.wake.notify_one();
        match tokio::time::timeout(self.operation_timeout, wait).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.shared.closed_error()),
            Err(_) => Err(Error::Timeout(self.operation_timeout)),
        }
    }

    /// The connection state now.
    pub fn state(&self) -> ConnectionState {
        *self.shared.state.borrow()
    }

    /// A receiver of connection state changes.
    pub fn state_changes(&self) -> watch::Receiver<ConnectionState> {
        self.shared.state.subscribe()
    }

    /// The counters so far.
    pub fn stats(&self) -> DeviceStats {
        let c = &self.shared.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DeviceStats {
            received: l(&c.received),
            redelivered: l(&c.redelivered),
            acknowledged: l(&c.acknowledged),
            stale_completions: l(&c.stale_completions),
            connections: l(&c.connections),
            token_renewals: l(&c.token_renewals),
            malformed: l(&c.malformed),
        }
    }

    /// Disconnects (a graceful DISCONNECT when connected) and waits until the connection task
    /// ended. Uncompleted messages stay in the hub's queue. Idempotent.
    pub async fn close(&self) {
        let _ = self.shutdown.send(true);
        let mut changes = self.shared.state.subscribe();
        let _ = tokio::time::timeout(
            CLOSE_GRACE + Duration::from_secs(1),
            changes.wait_for(|s| *s == ConnectionState::Closed),
        )
        .await;
    }

    /// Asks the client to close without waiting (for `Drop` in bindings).
    pub fn close_nowait(&self) {
        let _ = self.shutdown.send(true);
    }
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
    /// Message ids received, to recognise redeliveries (bounded, oldest forgotten).
    seen: (HashSet<Arc<str>>, VecDeque<Arc<str>>),
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

    /// When to reconnect with a fresh token: at 80% of its lifetime if no message is open,
    /// and in any case 90% of the way (or 5 s before expiry for short lifetimes).
    fn renew_deadlines(&self) -> Option<(Instant, Instant)> {
        if !matches!(self.options.auth, DeviceAuth::SharedAccessKey { .. }) {
            return None;
        }
        let at = self.connected_at?;
        let expiry = self.token_expiry?;
        let now_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs();
        let remaining = Duration::from_secs(expiry.saturating_sub(now_epoch));
        let now = Instant::now();
        let lifetime = self.options.token_lifetime;
        let soft = at + lifetime.mul_f64(0.8);
        let hard = (now + remaining)
            .checked_sub(Duration::from_secs(5).min(lifetime.mul_f64(0.1)))
            .unwrap_or(now)
            .max(soft);
        Some((soft, hard))
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
                    self.close_gracefully().await;
                    break;
                }
                Wake::Work => {}
                Wake::Renew => {
                    tracing::debug!(device = %self.shared.device_id, "renewing the SAS token");
                    self.shared
                        .counters
                        .token_renewals
                        .fetch_add(1, Ordering::Relaxed);
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
                    let error = classify(e, &self.options, self.token_expiry);
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
                self.shared
                    .counters
                    .connections
                    .fetch_add(1, Ordering::Relaxed);
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

    fn received(&mut self, publish: Publish) {
        let shared = self.shared.clone();
        let c = &shared.counters;
        c.received.fetch_add(1, Ordering::Relaxed);
        let parsed = MessageContent::parse_owned(publish.topic, &self.devicebound, publish.payload);
        let ticket = (publish.qos != QoS::AtMostOnce).then(|| {
            let id = parsed.as_ref().ok().and_then(|c| c.message_id.as_deref());
            let mut state = self.shared.acks();
            let (ticket, released) = state.acks.arrived(publish.pkid, id);
            state
                .to_send
                .extend(released.into_iter().map(|pkid| (ticket.connection, pkid)));
            self.open = state.acks.open();
            ticket
        });
        match parsed {
            Ok(content) => {
                let seen_before = content
                    .message_id
                    .as_ref()
                    .is_some_and(|id| !self.remember(id));
                let redelivered = publish.dup || seen_before;
                if redelivered {
                    c.redelivered.fetch_add(1, Ordering::Relaxed);
                }
                let _ = self.messages.send(Ok(C2dMessage {
                    content,
                    redelivered,
                    ticket,
                    shared: self.shared.clone(),
                }));
            }
            Err(e) => {
                c.malformed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(device = %self.shared.device_id, "{e}");
                if let Some(ticket) = ticket {
                    let mut state = self.shared.acks();
                    if let CompleteOutcome::Released(ids) = state.acks.complete(ticket) {
                        state
                            .to_send
                            .extend(ids.into_iter().map(|id| (ticket.connection, id)));
                    }
                }
                let _ = self.messages.send(Err(e));
            }
        }
    }

    /// Records a message id; false if it was already known.
    fn remember(&mut self, id: &str) -> bool {
        let (set, order) = &mut self.seen;
        if set.contains(id) {
            return false;
        }
        let id: Arc<str> = Arc::from(id);
        set.insert(id.clone());
        order.push_back(id);
        if order.len() > SEEN_IDS
            && let Some(old) = order.pop_front()
        {
            set.remove(&old);
        }
        true
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
            let current = state.acks.connection();
            batch.extend(
                state
                    .to_send
                    .drain(..)
                    .filter(|&(connection, _)| connection == current)
                    .map(|(_, pkid)| pkid),
            );
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
        *self.shared.fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(error);
    }

    fn finish(&mut self) {
        {
            let mut state = self.shared.acks();
            state.closed = true;
            state.acks.new_connection();
            state.to_send.clear();
        }
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

/// Turns rumqttc's connection error into ours (keeping it as the source of a connection error).
fn classify(e: ConnectionError, options: &DeviceOptions, token_expiry: Option<u64>) -> Error {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    match e {
        ConnectionError::ConnectionRefused(code) => match code {
            ConnectReturnCode::BadUserNamePassword | ConnectReturnCode::NotAuthorized => {
                if matches!(options.auth, DeviceAuth::SasToken(_))
                    && token_expiry.is_some_and(|x| x <= now)
                {
                    Error::Authentication(format!(
                        "the hub refused the connection ({code:?}): the SAS token expired and a fixed token cannot be renewed"
                    ))
                } else {
                    Error::Authentication(format!(
                        "the hub refused device {:?} ({code:?}): wrong key, token, certificate or device id",
                        options.device_id
                    ))
                }
            }
            other => Error::connection_caused_by(
                format!("the hub refused the connection: {other:?}"),
                ConnectionError::ConnectionRefused(other),
            ),
        },
        ConnectionError::NetworkTimeout => Error::Timeout(options.connect_timeout),
        other => Error::connection_caused_by(other.to_string(), other),
    }
}
