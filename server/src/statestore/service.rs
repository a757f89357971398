//! The state store as an MQTT5 client: it connects to the broker (embedded or external, the
//! same code path), subscribes to the request topic (QoS 1) and answers every request on its
//! response topic.
//!
//! Two tasks:
//! - the *event loop* task polls rumqttc (TCP_NODELAY on), subscribes again after every
//!   CONNACK, and forwards incoming requests; after a lost connection it waits as the store's
//!   own [`StoreReconnect`] policy says (promptly, never longer because of earlier losses)
//!   before polling again, which makes rumqttc reconnect, and logs the loss, each failed
//!   attempt and the reconnection. A takeover of the store's client id is logged as a
//!   security event and does not slow the store down either;
//! - the *store* task owns the [`Handler`] and the [`DedupCache`]; it answers requests,
//!   publishes notifications, applies the broker's connection events, and wakes exactly at the
//!   next expiry deadline to send DELETE notifications of expired keys.
//!
//! Every response goes to the request's response topic with the same correlation data, QoS 1,
//! content type `application/octet-stream` and the user properties `__stat: 200`,
//! `__protVer: 1.0` and, where docs/protocol.md section 4 says so, `__ts`. A request that cannot be
//! answered (no response topic, no correlation data, an invalid or forbidden response topic) is
//! not executed: it is dropped with a log line.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use mqstate::protocol::instance::{INSTANCE_PROPERTY, INSTANCE_TOPIC};
use mqstate::protocol::topics::{self, REQUEST_TOPIC, TopicError};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{
    DisconnectReasonCode, Filter, Packet, Publish, PublishProperties, SubscribeReasonCode,
};
use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::broker::{BrokerEvent, CLIENT_ID_PROPERTY, Disconnector};
use crate::error::ServerError;
use crate::persist::{self, MAX_BATCH, Persistence};
use crate::statestore::dedup::{CachedAnswer, DedupCache, DedupLimits};
use crate::statestore::handler::{Answer, Handler, HandlerConfig, Notification, RequestContext};
use crate::statestore::mosquitto_log;
use crate::statestore::reconnect::StoreReconnect;

// The protocol's property names and fixed values, defined once in the core
// (`mqstate::protocol::properties`) and used by the client and this server alike; kept here
// under their earlier names.
/// The content type of requests, responses and notifications.
pub use mqstate::protocol::properties::CONTENT_TYPE;
/// `__ft`.
pub use mqstate::protocol::properties::FENCING_TOKEN as FENCING_TOKEN_PROPERTY;
/// The protocol version the server speaks.
pub use mqstate::protocol::properties::PROTOCOL_VERSION;
/// `__protVer`.
pub use mqstate::protocol::properties::PROTOCOL_VERSION_PROPERTY;
/// `__srcId`.
pub use mqstate::protocol::properties::SOURCE_ID as SOURCE_ID_PROPERTY;
/// `__stat`: the status property on every response.
pub use mqstate::protocol::properties::STATUS as STATUS_PROPERTY;
/// `__ts`.
pub use mqstate::protocol::properties::TIMESTAMP as TIMESTAMP_PROPERTY;

/// The session expiry the store asks for: the broker keeps its session (its subscription and
/// the requests queued for it) across a broker restart or a dropped connection this long.
pub const DEFAULT_SESSION_EXPIRY: Duration = Duration::from_secs(300);

/// How many unacknowledged QoS 1 messages the broker may have out to the store.
const RECEIVE_MAXIMUM: u16 = 1024;

/// The queue from the event loop to the store task: more than [`RECEIVE_MAXIMUM`], so that
/// QoS 1 traffic never fills it; QoS 0 requests beyond it are dropped.
const INPUT_CAPACITY: usize = 4 * RECEIVE_MAXIMUM as usize;

/// The largest packet MQTT can carry (256 MiB less one byte).
pub const MQTT_MAX_PACKET_SIZE: u32 = 268_435_455;

/// Room for the fixed header, topic and properties of a response, on top of its payload,
/// when checking it against the maximum packet size.
const PACKET_OVERHEAD: usize = 1024;

/// Settings of the state store client.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The broker's host.
    pub host: String,
    /// The broker's port.
    pub port: u16,
    /// The MQTT client id of the state store.
    pub client_id: String,
    /// The largest packet the store accepts and sends, in bytes (the broker's own limit, from
    /// its CONNACK, applies on top when it is lower). With an external broker, use
    /// [`MQTT_MAX_PACKET_SIZE`]: Mosquitto 2.0.11 loops forever dropping a message larger
    /// than a subscriber's limit.
    pub max_packet_size: u32,
    /// The store's settings.
    pub handler: HandlerConfig,
    /// The bounds of the duplicate-request cache.
    pub dedup: DedupLimits,
    /// Trust the `x-mqtt-client-id` user property as the sender's client id (only the
    /// embedded broker sets it, replacing whatever a client sent; an external broker passes a
    /// client's own value through, so it must not be trusted there).
    pub trust_broker_client_id: bool,
    /// How long to wait for the first connection and subscription.
    pub connect_timeout: Duration,
    /// Read connects and disconnects from Mosquitto's log topic (`$SYS/broker/log/N` and
    /// `/E`, published when Mosquitto runs with `log_dest topic`); see
    /// [`mosquitto_log`]. For external brokers.
    pub watch_mosquitto_log: bool,
    /// Disconnects a client that sends a request with a forbidden response topic (the
    /// embedded broker, where the sender's client id is known for sure); without it such
    /// requests are only dropped and logged.
    pub disconnector: Option<Disconnector>,
    /// This store instance's id, sent in the [`INSTANCE_PROPERTY`] of every response and
    /// notification and announced on [`INSTANCE_TOPIC`] (random per start by default).
    pub instance_id: String,
    /// How long the broker keeps the store's session after a disconnect (clean start is off,
    /// so requests queued for the store while it was away are delivered when it is back).
    pub session_expiry: Duration,
    /// The data dir: keys persisted, answers sent once durable (see [`persist`]).
    pub persistence: Option<Persistence>,
    /// User name and password of the store's own connection (an embedded broker with
    /// authentication; see [`crate::security`]).
    pub credentials: Option<(String, String)>,
    /// Refuse (and, with a [`ServiceConfig::disconnector`], disconnect) a client whose
    /// response topic is not its own (`clients/{client id}/...`; see
    /// [`crate::security::owns_topic`]). Needs the broker's trusted client id.
    pub confine_response_topics: bool,
    /// TLS to the broker (attach mode; see [`crate::ServerConfig::attach`]).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// A K8S-SAT token for the broker (attach mode).
    pub sat: Option<bytes::Bytes>,
    /// How the store reconnects after losing the broker (default: promptly, at most
    /// [`crate::statestore::reconnect::DEFAULT_MAX_DELAY`] between attempts).
    pub reconnect: StoreReconnect,
}

impl ServiceConfig {
    /// Settings for a broker at `host:port`, everything else default.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        ServiceConfig {
            host: host.into(),
            port,
            client_id: default_client_id(),
            max_packet_size: crate::DEFAULT_MAX_PACKET_SIZE,
            handler: HandlerConfig::default(),
            dedup: DedupLimits::default(),
            trust_broker_client_id: false,
            connect_timeout: Duration::from_secs(10),
            watch_mosquitto_log: false,
            disconnector: None,
            instance_id: new_instance_id(),
            session_expiry: DEFAULT_SESSION_EXPIRY,
            persistence: None,
            credentials: None,
            confine_response_topics: false,
            tls: None,
            sat: None,
            reconnect: StoreReconnect::default(),
        }
    }
}

/// A random instance id: 16 hex digits.
pub fn new_instance_id() -> String {
    format!("{:016x}", random_u64())
}

/// The store's client id when none is configured: random per start, so that no other client
/// can know it in advance (docs/security.md, "Client ids").
fn default_client_id() -> String {
    format!("mqstate-statestore-{:016x}", random_u64())
}

/// 64 bits from the operating system's random generator (`fastrand`, seeded from the clock
/// and the thread, only if the OS has none to give: a predictable id is then better than no
/// server).
fn random_u64() -> u64 {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 8];
    match ring::rand::SystemRandom::new().fill(&mut bytes) {
        Ok(()) => u64::from_be_bytes(bytes),
        Err(_) => {
            tracing::warn!("no randomness from the OS: the store's ids are not random");
            fastrand::u64(..)
        }
    }
}

/// What the store task receives from the event loop task.
enum Input {
    /// A message on the request topic (or any topic other than the log topics).
    Request(Publish),
    /// A line of Mosquitto's log (acknowledged by the store task too).
    Log(Publish),
}

/// A running state store client; dropping it stops it.
#[derive(Debug)]
pub struct Service {
    client: AsyncClient,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Service {
    /// Connects to the broker, subscribes to the request topic and starts answering. Returns
    /// once the subscription is acknowledged. `broker_events` carries the embedded broker's
    /// connection events (none with an external broker).
    pub async fn start(
        config: ServiceConfig,
        broker_events: Option<mpsc::UnboundedReceiver<BrokerEvent>>,
    ) -> Result<Service, ServerError> {
        config.reconnect.check()?;
        let handler = persist::handler(config.handler.clone(), config.persistence.as_ref())?;
        let mut options = MqttOptions::new(config.client_id.clone(), &config.host, config.port);
        options
            .set_keep_alive(Duration::from_secs(30))
            // Clean start off with a session expiry: when the broker restarts with its
            // sessions (or the connection drops), the requests queued for the store meanwhile
            // are delivered when it reconnects, instead of being dropped with a clean session.
            .set_clean_start(false)
            .set_session_expiry_interval(Some(
                u32::try_from(config.session_expiry.as_secs()).unwrap_or(u32::MAX),
            ))
            .set_max_packet_size(Some(config.max_packet_size))
            // Requests are acknowledged by the store task once answered (manual acks), so the
            // broker never has more than RECEIVE_MAXIMUM unanswered QoS 1 messages out to us:
            // the input channel (larger) never fills, and the event loop never blocks on it.
            .set_receive_maximum(Some(RECEIVE_MAXIMUM))
            .set_manual_acks(true)
            .set_request_channel_capacity(4096);
        if let Some((user, password)) = &config.credentials {
            options.set_credentials(user.clone(), password.clone());
        }
        if let Some(token) = &config.sat {
            options.set_authentication_method(Some("K8S-SAT".to_owned()));
            options.set_authentication_data(Some(token.clone()));
        }
        if let Some(tls) = &config.tls {
            options.set_transport(rumqttc::Transport::tls_with_config(
                rumqttc::TlsConfiguration::Rustls(tls.clone()),
            ));
        }
        let mut network = options.network_options();
        network.set_tcp_nodelay(true);
        options.set_network_options(network);
        let (client, eventloop) = AsyncClient::new(options, 4096);

        let (shutdown, shutdown_rx) = watch::channel(false);
        let (input_tx, input_rx) = mpsc::channel(INPUT_CAPACITY);
        let (ready_tx, ready_rx) = oneshot::channel();
        let limit = Arc::new(AtomicUsize::new(
            usize::try_from(config.max_packet_size).unwrap_or(usize::MAX),
        ));
        let last_error = Arc::new(Mutex::new(None));
        let poll = tokio::spawn(poll_loop(
            eventloop,
            client.clone(),
            input_tx,
            ready_tx,
            shutdown_rx.clone(),
            PollSettings {
                watch_mosquitto_log: config.watch_mosquitto_log,
                packet_limit: limit.clone(),
                last_error: last_error.clone(),
                instance_id: config.instance_id.clone(),
                client_id: config.client_id.clone(),
                reconnect: config.reconnect,
            },
        ));
        let handler_node_id = handler.clock().node_id().to_owned();
        let store = StoreTask {
            handler,
            dedup: DedupCache::new(config.dedup),
            node_id: Arc::from(handler_node_id.as_str()),
            client: client.clone(),
            trust_broker_client_id: config.trust_broker_client_id,
            max_packet_size: limit,
            disconnector: config.disconnector.clone(),
            own_id: config.client_id.clone(),
            instance_id: config.instance_id.clone(),
            persistence: config.persistence.clone(),
            outbox: Vec::new(),
            confine_response_topics: config.confine_response_topics,
        };
        let store = tokio::spawn(store.run(input_rx, broker_events, shutdown_rx));
        let service = Service {
            client,
            shutdown,
            tasks: vec![poll, store],
        };
        match tokio::time::timeout(config.connect_timeout, ready_rx).await {
            Ok(Ok(())) => {
                tracing::info!(
                    host = %config.host,
                    port = config.port,
                    client_id = %config.client_id,
                    instance = %config.instance_id,
                    "state store subscribed to the request topic"
                );
                Ok(service)
            }
            Ok(Err(_)) | Err(_) => {
                service.shutdown().await;
                let cause = last_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take()
                    .map(|e| format!(" (last error: {e})"))
                    .unwrap_or_default();
                Err(ServerError::Client(format!(
                    "could not connect to the broker at {}:{} and subscribe within {:?}{cause}",
                    config.host, config.port, config.connect_timeout
                )))
            }
        }
    }

    /// Disconnects from the broker and stops both tasks (waiting a few seconds at most).
    pub async fn shutdown(mut self) {
        self.stop();
        // Give the event loop a moment to send DISCONNECT.
        for task in self.tasks.drain(..) {
            if tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_err()
            {
                tracing::warn!("state store task did not stop within 5 s");
            }
        }
    }

    fn stop(&self) {
        // The session outlives the connection (clean start off): unsubscribe first, so that a
        // store that stopped on purpose does not leave a session collecting requests.
        let _ = self.client.try_unsubscribe(REQUEST_TOPIC);
        let _ = self.client.try_disconnect();
        let _ = self.shutdown.send(true);
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop();
        for task in &self.tasks {
            task.abort();
        }
    }
}

struct PollSettings {
    watch_mosquitto_log: bool,
    /// The largest packet we may send: ours, lowered to the broker's on CONNACK.
    packet_limit: Arc<AtomicUsize>,
    /// The last connection error, for the start-up error message.
    last_error: Arc<Mutex<Option<String>>>,
    /// Announced on [`INSTANCE_TOPIC`] after every granted subscription.
    instance_id: String,
    /// The store's own client id, to recognise a takeover of it in Mosquitto's log.
    client_id: String,
    /// The delays between reconnection attempts.
    reconnect: StoreReconnect,
}

/// An outage: from a lost connection (or the first failed connection) to the next CONNACK.
struct Outage {
    since: Instant,
    /// Reconnection attempts that failed so far.
    failed: u32,
}

/// What the event loop knows of its connection, for the reconnection policy and its logs.
#[derive(Default)]
struct Link {
    outage: Option<Outage>,
    /// Whether a CONNACK was ever received (a failure before it is a failed start).
    connected_once: bool,
    /// Whether a takeover of the store's client id was reported since the last CONNACK
    /// (Mosquitto's log line and a DISCONNECT "session taken over" may both tell it).
    taken_over: bool,
    /// When Mosquitto's log said "{our id} already connected, closing old connection" while
    /// the store was connected. It is a takeover only if the connection is lost right after:
    /// the same line follows the store's own reconnection when Mosquitto still held its
    /// previous, half-dead connection (the new connection resumes the session, log
    /// subscription included, and receives it), and that connection stays up.
    takeover_hint: Option<Instant>,
}

/// How soon after Mosquitto's takeover line the connection must drop for it to count.
const TAKEOVER_HINT_WINDOW: Duration = Duration::from_secs(2);

impl Link {
    /// Logs a takeover of the store's client id as the security event it is (once per
    /// connection): whoever connected with it receives the requests and could answer them.
    fn taken_over(&mut self, client_id: &str, seen_in: &str) {
        if !self.taken_over {
            self.taken_over = true;
            tracing::warn!(
                client_id,
                seen_in,
                security_event = "client id takeover",
                "another client connected with the state store's client id and took over its \
                 session (a second store with the same id, or a client impersonating the store); \
                 the store reconnects at once"
            );
        }
    }

    /// Mosquitto's log says another connection with the store's client id came in: during an
    /// outage it was the one that took the store's connection; while connected, it is a
    /// takeover if the connection drops next (see [`Link::takeover_hint`]).
    fn takeover_line(&mut self, client_id: &str) {
        if self.outage.is_some() {
            self.taken_over(client_id, "Mosquitto's log");
        } else {
            self.takeover_hint = Some(Instant::now());
        }
    }

    /// Records a failed poll; returns how long to wait before the next attempt, having
    /// logged the loss (warn) or the failed attempt (info, then every 60th once the outage
    /// is long).
    fn failed(
        &mut self,
        policy: &StoreReconnect,
        cause: &rumqttc::v5::ConnectionError,
    ) -> Duration {
        let connected_once = self.connected_once;
        let taken_over = self.taken_over;
        match &mut self.outage {
            None => {
                self.outage = Some(Outage {
                    since: Instant::now(),
                    failed: 0,
                });
                let delay = policy.delay(1);
                if connected_once {
                    tracing::warn!(
                        cause = %cause,
                        taken_over,
                        retry_in = ?delay,
                        attempt = 1,
                        "state store lost its connection to the broker; reconnecting"
                    );
                } else {
                    tracing::warn!(cause = %cause, retry_in = ?delay, attempt = 1, "state store cannot connect to the broker; retrying");
                }
                delay
            }
            Some(outage) => {
                outage.failed = outage.failed.saturating_add(1);
                let next = outage.failed.saturating_add(1);
                let delay = policy.delay(next);
                if outage.failed <= 10 || outage.failed % 60 == 0 {
                    tracing::info!(
                        cause = %cause,
                        failed_attempts = outage.failed,
                        down_for = ?outage.since.elapsed(),
                        retry_in = ?delay,
                        attempt = next,
                        "state store reconnection attempt failed"
                    );
                } else {
                    tracing::debug!(cause = %cause, attempt = next, retry_in = ?delay, "state store reconnection attempt failed");
                }
                delay
            }
        }
    }

    /// Records a CONNACK, logging the reconnection that ends an outage.
    fn connected(&mut self, session_present: bool) {
        if let Some(outage) = self.outage.take()
            && self.connected_once
        {
            tracing::info!(
                down_for = ?outage.since.elapsed(),
                attempts = outage.failed.saturating_add(1),
                session_present,
                "state store reconnected to the broker"
            );
        }
        self.connected_once = true;
        self.taken_over = false;
    }
}

/// Whether the broker closed the connection because another client connected with the same
/// client id (MQTT 5 DISCONNECT reason 0x8E; Mosquitto 2.0.11 closes without one and says
/// it in its log instead, see [`mosquitto_log::taken_over`]).
fn is_takeover(e: &rumqttc::v5::ConnectionError) -> bool {
    matches!(
        e,
        rumqttc::v5::ConnectionError::MqttState(rumqttc::v5::StateError::ServerDisconnect {
            reason_code: DisconnectReasonCode::SessionTakenOver,
            ..
        })
    )
}

/// Polls the MQTT connection. rumqttc reconnects on the next poll after an error; the wait
/// before that poll is the store's own [`StoreReconnect`] policy.
async fn poll_loop(
    mut eventloop: EventLoop,
    client: AsyncClient,
    input: mpsc::Sender<Input>,
    ready: oneshot::Sender<()>,
    mut shutdown: watch::Receiver<bool>,
    settings: PollSettings,
) {
    let PollSettings {
        watch_mosquitto_log,
        packet_limit,
        last_error,
        instance_id,
        client_id,
        reconnect,
    } = settings;
    let own_limit = packet_limit.load(Ordering::Relaxed);
    let mut ready = Some(ready);
    let mut link = Link::default();
    loop {
        let event = tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            event = eventloop.poll() => event,
        };
        match event {
            Ok(Event::Incoming(Packet::Publish(publish))) => {
                let qos = publish.qos;
                let item = if publish.topic.starts_with(b"$SYS/") {
                    if mosquitto_log::taken_over(&String::from_utf8_lossy(&publish.payload))
                        == Some(client_id.as_str())
                    {
                        link.takeover_line(&client_id);
                    }
                    Input::Log(publish)
                } else {
                    Input::Request(publish)
                };
                if qos == QoS::AtMostOnce {
                    // Not flow-controlled by the broker: never wait for room.
                    match input.try_send(item) {
                        Ok(()) => {}
                        Err(mpsc::error::TrySendError::Full(_)) => {
                            tracing::warn!("store overloaded: QoS 0 request dropped");
                        }
                        Err(mpsc::error::TrySendError::Closed(_)) => break,
                    }
                } else if input.send(item).await.is_err() {
                    break;
                }
            }
            Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                link.connected(ack.session_present);
                tracing::debug!(
                    session_present = ack.session_present,
                    "state store connected"
                );
                // What we may send is bounded by the broker's limit too.
                let broker_limit = ack
                    .properties
                    .as_ref()
                    .and_then(|p| p.max_packet_size)
                    .and_then(|m| usize::try_from(m).ok())
                    .unwrap_or(usize::MAX);
                packet_limit.store(own_limit.min(broker_limit), Ordering::Relaxed);
                // Subscribe again on every connection: when the broker lost our session (a
                // broker restart without persistence) the subscription is gone; when it kept it,
                // subscribing again changes nothing.
                // One SUBSCRIBE, so that its SUBACK's first code is the request topic's.
                let mut filters = vec![Filter::new(REQUEST_TOPIC, QoS::AtLeastOnce)];
                if watch_mosquitto_log {
                    filters.extend(
                        mosquitto_log::LOG_TOPICS
                            .iter()
                            .map(|t| Filter::new(*t, QoS::AtLeastOnce)),
                    );
                }
                if let Err(e) = client.try_subscribe_many(filters) {
                    tracing::error!(error = %e, "cannot queue the request-topic subscription");
                }
            }
            Ok(Event::Incoming(Packet::SubAck(ack))) => {
                let granted = |c: Option<&SubscribeReasonCode>| {
                    matches!(c, Some(SubscribeReasonCode::Success(_)))
                };
                if granted(ack.return_codes.first()) {
                    // Tell the clients which store instance listens now (retained, so that
                    // clients subscribing later learn it too): a client that sees a new id
                    // restores its observations (see mqstate::protocol::instance).
                    if let Err(e) = client.try_publish(
                        INSTANCE_TOPIC,
                        QoS::AtLeastOnce,
                        true,
                        instance_id.clone(),
                    ) {
                        tracing::error!(error = %e, "cannot queue the instance announcement");
                    }
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                } else {
                    tracing::error!(codes = ?ack.return_codes, "the broker refused the request-topic subscription");
                }
                if watch_mosquitto_log && !ack.return_codes.iter().skip(1).all(|c| granted(Some(c)))
                {
                    tracing::warn!(
                        codes = ?ack.return_codes,
                        "cannot subscribe to Mosquitto's log topics: disconnects are not detected"
                    );
                }
            }
            // (rumqttc reports the broker's DISCONNECT as an error, below.)
            Ok(_) => {}
            Err(e) => {
                if *shutdown.borrow() {
                    break;
                }
                if is_takeover(&e) {
                    link.taken_over(&client_id, "the broker's DISCONNECT");
                } else if link
                    .takeover_hint
                    .take()
                    .is_some_and(|at| at.elapsed() < TAKEOVER_HINT_WINDOW)
                {
                    link.taken_over(&client_id, "Mosquitto's log");
                }
                let delay = link.failed(&reconnect, &e);
                *last_error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
                tokio::select! {
                    _ = shutdown.changed() => break,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
    // Let the event loop flush a queued DISCONNECT, briefly.
    let _ = tokio::time::timeout(Duration::from_millis(200), async {
        while let Ok(event) = eventloop.poll().await {
            if matches!(event, Event::Outgoing(rumqttc::Outgoing::Disconnect)) {
                break;
            }
        }
    })
    .await;
}

struct StoreTask {
    handler: Handler,
    dedup: DedupCache<CachedAnswer>,
    /// The node id of the server's versions, shared by the cached answers.
    node_id: Arc<str>,
    client: AsyncClient,
    trust_broker_client_id: bool,
    /// The largest packet that may be sent (ours and the broker's limit).
    max_packet_size: Arc<AtomicUsize>,
    disconnector: Option<Disconnector>,
    own_id: String,
    instance_id: String,
    confine_response_topics: bool,
    /// The data dir, if any.
    persistence: Option<Persistence>,
    /// What waits for the group commit in progress (see [`persist`]), in order.
    outbox: Vec<Deferred>,
}

/// An answer ready to send, with what it takes to send it (or answer again).
struct Reply {
    response_topic: String,
    correlation: Bytes,
    message_expiry: Option<u32>,
    answer: Answer,
    notifications: Vec<Notification>,
    dedup_id: String,
    /// What the request was, for answering again if its batch's commit fails.
    kind: RequestKind,
}

enum RequestKind {
    /// A GET of this key: answered again from the restored state.
    Read(Bytes),
    /// A SET / DEL / VDEL: answered `persistence failed`.
    Write,
    /// KEYNOTIFY or a refused request: its answer stands.
    Other,
}

impl RequestKind {
    fn of(payload: &Bytes) -> Self {
        match mqstate::protocol::resp3::decode_request(payload) {
            Ok(mqstate::protocol::resp3::Request::Get { key }) => RequestKind::Read(key),
            Ok(
                mqstate::protocol::resp3::Request::Set { .. }
                | mqstate::protocol::resp3::Request::Del { .. }
                | mqstate::protocol::resp3::Request::Vdel { .. },
            ) => RequestKind::Write,
            _ => RequestKind::Other,
        }
    }
}

/// What waits in the outbox.
enum Deferred {
    Reply(Box<Reply>),
    Notifications(Vec<Notification>),
    Ack(Publish),
}

/// The properties of a request, as received.
#[derive(Default)]
struct RequestProps {
    response_topic: Option<String>,
    correlation: Option<Bytes>,
    message_expiry: Option<u32>,
    timestamp: Option<String>,
    fencing_token: Option<String>,
    source_id: Option<String>,
    broker_client_id: Option<String>,
    persist: bool,
}

impl RequestProps {
    fn from(properties: Option<PublishProperties>) -> Self {
        let Some(p) = properties else {
            return RequestProps::default();
        };
        let mut props = RequestProps {
            response_topic: p.response_topic,
            correlation: p.correlation_data,
            message_expiry: p.message_expiry_interval,
            ..RequestProps::default()
        };
        // The last value wins when a property is repeated.
        for (name, value) in p.user_properties {
            match name.as_str() {
                TIMESTAMP_PROPERTY => props.timestamp = Some(value),
                FENCING_TOKEN_PROPERTY => props.fencing_token = Some(value),
                SOURCE_ID_PROPERTY => props.source_id = Some(value),
                CLIENT_ID_PROPERTY => props.broker_client_id = Some(value),
                mqstate::protocol::properties::PERSISTENCE => {
                    props.persist = value.eq_ignore_ascii_case("true");
                }
                _ => {}
            }
        }
        props
    }
}

impl StoreTask {
    async fn run(
        mut self,
        mut input: mpsc::Receiver<Input>,
        broker_events: Option<mpsc::UnboundedReceiver<BrokerEvent>>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut broker_events = broker_events;
        let mut dashboard = self.handler.take_dashboard_queries();
        loop {
            let deadline = self.handler.next_deadline().map(Instant::from_std);
            tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                event = recv_event(&mut broker_events) => match event {
                    Some(event) => self.on_broker_event(event),
                    None => broker_events = None,
                },
                query = recv_query(&mut dashboard) => match query {
                    Some(query) => self.handler.answer_query(query, std::time::Instant::now()),
                    None => dashboard = None,
                },
                _ = sleep_until(deadline) => {
                    let notifications = self.handler.expire(std::time::Instant::now());
                    if self.batch_open() {
                        self.outbox.push(Deferred::Notifications(notifications));
                    } else {
                        self.publish_notifications(notifications).await;
                    }
                }
                request = input.recv() => match request {
                    Some(input) => self.on_input(input).await,
                    None => break,
                },
            }
            if !self.outbox.is_empty() {
                self.group_commit(&mut input).await;
            }
        }
    }

    async fn on_input(&mut self, input: Input) {
        match input {
            Input::Request(publish) => {
                let ack = ack_of(&publish);
                self.on_request(publish).await;
                self.ack(ack).await;
            }
            Input::Log(publish) => {
                let line = String::from_utf8_lossy(&publish.payload);
                if let Some(event) = mosquitto_log::parse_line(&line) {
                    self.on_broker_event(event);
                }
                self.ack(ack_of(&publish)).await;
            }
        }
    }

    /// Whether what was just handled must wait for a commit: something already waits, or
    /// the store's journal touches a key on disk. Otherwise the journal (memory-only
    /// changes) is dropped and the answer goes out at once.
    fn batch_open(&mut self) -> bool {
        let Some(p) = &self.persistence else {
            return false;
        };
        if !self.outbox.is_empty() || p.needs_disk(self.handler.store()) {
            return true;
        }
        self.handler.store_mut().take_journal();
        false
    }

    /// Handles every request already queued (up to [`MAX_BATCH`]) into the open batch,
    /// commits the batch in one transaction, then sends what waited (see [`persist`]).
    async fn group_commit(&mut self, input: &mut mpsc::Receiver<Input>) {
        for _ in 0..MAX_BATCH {
            match input.try_recv() {
                Ok(item) => self.on_input(item).await,
                Err(_) => break,
            }
        }
        let Some(p) = self.persistence.clone() else {
            return;
        };
        let clock_ms = self.handler.clock().current().ms;
        let result = p.commit(self.handler.store_mut(), clock_ms).await;
        let failed = match &result {
            Ok(_) => false,
            Err(e) => {
                tracing::error!(error = %e, "commit failed: the batch's writes are undone and answered with an error");
                true
            }
        };
        for deferred in std::mem::take(&mut self.outbox) {
            match deferred {
                Deferred::Reply(mut reply) if failed => {
                    match &reply.kind {
                        RequestKind::Read(key) => {
                            reply.answer = self.handler.answer_get(key, std::time::Instant::now());
                        }
                        RequestKind::Write => {
                            reply.answer = Answer::error(&mqstate::ServiceError::PersistenceFailed);
                        }
                        RequestKind::Other => {}
                    }
                    reply.notifications.clear();
                    self.send_reply(*reply).await;
                }
                Deferred::Reply(reply) => self.send_reply(*reply).await,
                Deferred::Notifications(_) if failed => {}
                Deferred::Notifications(n) => self.publish_notifications(n).await,
                Deferred::Ack(publish) => self.send_ack(publish).await,
            }
        }
    }

    /// Acknowledges a received QoS 1 message (nothing to do for QoS 0), after what waits
    /// for a commit if anything does.
    async fn ack(&mut self, ack: Option<Publish>) {
        let Some(publish) = ack else {
            return;
        };
        if self.outbox.is_empty() {
            self.send_ack(publish).await;
        } else {
            self.outbox.push(Deferred::Ack(publish));
        }
    }

    async fn send_ack(&self, publish: Publish) {
        if let Err(e) = self.client.ack(&publish).await {
            tracing::error!(error = %e, "cannot acknowledge a request");
        }
    }

    fn on_broker_event(&mut self, event: BrokerEvent) {
        tracing::trace!(?event, "broker connection event");
        match event {
            BrokerEvent::Connected(id) => self.handler.client_connected(&id),
            BrokerEvent::Disconnected(id) => {
                self.handler.client_disconnected(&id);
            }
        }
    }

    async fn on_request(&mut self, publish: Publish) {
        if publish.topic != REQUEST_TOPIC.as_bytes() {
            tracing::debug!(topic = ?publish.topic, "ignored a message on another topic");
            return;
        }
        if publish.retain {
            // A retained request would be executed again at every (re)subscription.
            tracing::warn!("retained request: not executed, dropped");
            return;
        }
        let payload = publish.payload;
        let props = RequestProps::from(publish.properties);
        let client_id = if self.trust_broker_client_id {
            props
                .broker_client_id
                .as_deref()
                .or(props.source_id.as_deref())
        } else {
            props.source_id.as_deref()
        };
        let Some(response_topic) = props.response_topic.as_deref() else {
            tracing::warn!(
                client_id,
                "request without a response topic: not executed, dropped"
            );
            return;
        };
        if let Err(e) = topics::validate_response_topic(response_topic) {
            if matches!(e, TopicError::RequestTopic | TopicError::ReservedPrefix) {
                tracing::warn!(
                    client_id,
                    response_topic,
                    error = %e,
                    "request with a forbidden response topic: not executed, dropped"
                );
                if let (Some(disconnector), Some(id)) =
                    (&self.disconnector, props.broker_client_id.as_deref())
                    && id != self.own_id
                {
                    tracing::warn!(
                        client_id = id,
                        "disconnecting the client (forbidden response topic)"
                    );
                    disconnector.disconnect(id);
                }
            } else {
                tracing::warn!(client_id, error = %e, "request with an invalid response topic: not executed, dropped");
            }
            return;
        }
        if self.confine_response_topics
            && let Some(id) = props.broker_client_id.as_deref()
            && id != self.own_id
            && !crate::security::owns_topic(id, response_topic)
        {
            tracing::warn!(
                client_id = id,
                response_topic,
                "request with another client's response topic: not executed; disconnecting the client"
            );
            if let Some(disconnector) = &self.disconnector {
                disconnector.disconnect(id);
            }
            return;
        }
        let Some(correlation) = props.correlation.clone() else {
            tracing::warn!(
                client_id,
                response_topic,
                "request without correlation data: not executed, dropped"
            );
            return;
        };
        // Duplicates are recognised by (client id, correlation data); without a client id the
        // response topic stands in for it.
        let dedup_id = client_id.unwrap_or(response_topic).to_owned();
        let now = std::time::Instant::now();
        if let Some(answer) = self.dedup.get(&dedup_id, &correlation, now) {
            tracing::debug!(client_id = %dedup_id, "duplicate request answered from the cache");
            let answer = answer.answer();
            self.respond(response_topic, &correlation, props.message_expiry, &answer)
                .await;
            return;
        }
        let persist = self
            .persistence
            .as_ref()
            .is_some_and(|p| p.persists(props.persist));
        let ctx = RequestContext {
            client_id,
            timestamp: props.timestamp.as_deref(),
            fencing_token: props.fencing_token.as_deref(),
            persist,
        };
        let outcome = self.handler.handle(&ctx, &payload, now);
        let reply = Reply {
            response_topic: response_topic.to_owned(),
            correlation,
            message_expiry: props.message_expiry,
            answer: outcome.answer,
            notifications: outcome.notifications,
            dedup_id,
            kind: if self.persistence.is_some() {
                RequestKind::of(&payload)
            } else {
                RequestKind::Other
            },
        };
        if self.batch_open() {
            self.outbox.push(Deferred::Reply(Box::new(reply)));
        } else {
            self.send_reply(reply).await;
        }
    }

    /// Sends an answer and its notifications, and caches it for duplicates.
    async fn send_reply(&mut self, reply: Reply) {
        let Reply {
            response_topic,
            correlation,
            message_expiry,
            answer,
            notifications,
            dedup_id,
            kind: _,
        } = reply;
        self.respond(&response_topic, &correlation, message_expiry, &answer)
            .await;
        self.publish_notifications(notifications).await;
        let size = DedupCache::<CachedAnswer>::entry_size(&correlation, answer.payload.len());
        let cached = CachedAnswer::of(answer, &self.node_id);
        self.dedup.insert(
            &dedup_id,
            correlation,
            cached,
            size,
            std::time::Instant::now(),
        );
    }

    async fn respond(
        &self,
        topic: &str,
        correlation: &Bytes,
        message_expiry: Option<u32>,
        answer: &Answer,
    ) {
        let mut user_properties = vec![
            (STATUS_PROPERTY.to_owned(), "200".to_owned()),
            (
                PROTOCOL_VERSION_PROPERTY.to_owned(),
                PROTOCOL_VERSION.to_owned(),
            ),
        ];
        if let Some(ts) = &answer.timestamp {
            user_properties.push((TIMESTAMP_PROPERTY.to_owned(), ts.to_string()));
        }
        user_properties.push((INSTANCE_PROPERTY.to_owned(), self.instance_id.clone()));
        let properties = PublishProperties {
            payload_format_indicator: Some(0),
            message_expiry_interval: message_expiry,
            correlation_data: Some(correlation.clone()),
            user_properties,
            content_type: Some(CONTENT_TYPE.to_owned()),
            ..PublishProperties::default()
        };
        self.publish(topic, answer.payload.clone(), properties, "response")
            .await;
    }

    async fn publish_notifications(&self, notifications: Vec<Notification>) {
        for n in notifications {
            let properties = PublishProperties {
                payload_format_indicator: Some(0),
                user_properties: vec![
                    (TIMESTAMP_PROPERTY.to_owned(), n.version.to_string()),
                    (
                        PROTOCOL_VERSION_PROPERTY.to_owned(),
                        PROTOCOL_VERSION.to_owned(),
                    ),
                    (INSTANCE_PROPERTY.to_owned(), self.instance_id.clone()),
                ],
                content_type: Some(CONTENT_TYPE.to_owned()),
                ..PublishProperties::default()
            };
            self.publish(&n.topic, n.payload, properties, "notification")
                .await;
        }
    }

    async fn publish(
        &self,
        topic: &str,
        payload: Bytes,
        properties: PublishProperties,
        what: &str,
    ) {
        let max = self.max_packet_size.load(Ordering::Relaxed);
        if payload.len() + topic.len() + PACKET_OVERHEAD > max {
            tracing::error!(
                what,
                topic,
                size = payload.len(),
                max,
                "message larger than the maximum packet size: not sent"
            );
            return;
        }
        if let Err(e) = self
            .client
            .publish_bytes_with_properties(topic, QoS::AtLeastOnce, false, payload, properties)
            .await
        {
            tracing::error!(what, topic, error = %e, "cannot publish");
        }
    }
}

/// What `AsyncClient::ack` needs of a received message (its QoS and packet id), without the
/// payload and properties, which the request handling consumes.
fn ack_of(publish: &Publish) -> Option<Publish> {
    if publish.qos == QoS::AtMostOnce {
        return None;
    }
    let mut ack = Publish::new("", publish.qos, Bytes::new(), None);
    ack.pkid = publish.pkid;
    Some(ack)
}

async fn recv_event(
    events: &mut Option<mpsc::UnboundedReceiver<BrokerEvent>>,
) -> Option<BrokerEvent> {
    match events {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The next dashboard query; never, without a dashboard.
async fn recv_query(
    queries: &mut Option<mpsc::Receiver<crate::dashboard::StoreQuery>>,
) -> Option<crate::dashboard::StoreQuery> {
    match queries {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
