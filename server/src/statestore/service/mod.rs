//! The state store as an MQTT5 client: it connects to the broker (embedded or external, the
//! same code path), subscribes to the request topic (QoS 1) and answers every request on its
//! response topic.
//!
//! Two tasks, each in a module of its own:
//! - the *event loop* task (`poll`) polls rumqttc (TCP_NODELAY on), subscribes again after every
//!   CONNACK, and forwards incoming requests; after a lost connection it waits as the store's
//!   own [`StoreReconnect`] policy says (promptly, never longer because of earlier losses)
//!   before polling again, which makes rumqttc reconnect, and logs the loss, each failed
//!   attempt and the reconnection. A takeover of the store's client id is logged as a
//!   security event and does not slow the store down either;
//! - the *store* task (`task`) owns the [`Handler`] and the [`DedupCache`]; it answers requests,
//!   publishes notifications, applies the broker's connection events, and wakes exactly at the
//!   next expiry deadline to send DELETE notifications of expired keys.
//!
//! Every response goes to the request's response topic with the same correlation data, QoS 1,
//! content type `application/octet-stream` and the user properties `__stat: 200`,
//! `__protVer: 1.0` and, where docs/protocol.md section 4 says so, `__ts`. A request that cannot be
//! answered (no response topic, no correlation data, an invalid or forbidden response topic) is
//! not executed: it is dropped with a log line (`request`; the replies and notifications
//! on the wire: `reply`).

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use mqstate::protocol::topics::REQUEST_TOPIC;
use rumqttc::v5::{AsyncClient, MqttOptions};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::broker::{BrokerEvent, Disconnector, ImplicitNotify};
use crate::persist::{self, Persistence};
use crate::statestore::dedup::{DedupCache, DedupLimits};
use crate::statestore::error::{ConnectError, StartError};
use crate::statestore::handler::HandlerConfig;
use crate::statestore::reconnect::StoreReconnect;
use poll::{PollSettings, poll_loop};
use reply::Publisher;
use request::Admission;
use task::{Implicit, StoreTask};

mod poll;
mod reply;
mod request;
mod task;

/// The session expiry the store asks for: the broker keeps its session (its subscription and
/// the requests queued for it) across a broker restart or a dropped connection this long.
pub(crate) const DEFAULT_SESSION_EXPIRY: Duration = Duration::from_secs(300);

/// How many unacknowledged QoS 1 messages the broker may have out to the store.
const RECEIVE_MAXIMUM: u16 = 1024;

/// The queue from the event loop to the store task: more than [`RECEIVE_MAXIMUM`], so that
/// QoS 1 traffic never fills it; QoS 0 requests beyond it are dropped.
const INPUT_CAPACITY: usize = 4 * RECEIVE_MAXIMUM as usize;

/// The default maximum MQTT packet size of the store and the embedded broker: 16 MiB, room
/// for values of 10 MiB and more.
pub const DEFAULT_MAX_PACKET_SIZE: u32 = 16 * 1024 * 1024;

/// The largest packet MQTT can carry (256 MiB less one byte).
pub(crate) const MQTT_MAX_PACKET_SIZE: u32 = 268_435_455;

/// Settings of the state store client.
#[derive(Debug, Clone)]
pub(crate) struct ServiceConfig {
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
    /// Delivers a KEYNOTIFY client's notifications without a subscription of its own, as
    /// Azure IoT Operations does (the embedded broker only; see docs/protocol.md section
    /// 6.1 and [`ImplicitNotify`]). `None`: only a client's own subscription routes them.
    pub implicit_notify: Option<ImplicitNotify>,
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
    pub(crate) fn new(host: impl Into<String>, port: u16) -> Self {
        ServiceConfig {
            host: host.into(),
            port,
            client_id: default_client_id(),
            max_packet_size: DEFAULT_MAX_PACKET_SIZE,
            handler: HandlerConfig::default(),
            dedup: DedupLimits::default(),
            trust_broker_client_id: false,
            connect_timeout: Duration::from_secs(10),
            watch_mosquitto_log: false,
            disconnector: None,
            implicit_notify: None,
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
pub(crate) fn new_instance_id() -> String {
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

/// A running state store client; dropping it stops it.
#[derive(Debug)]
pub(crate) struct Service {
    client: AsyncClient,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Service {
    /// Connects to the broker, subscribes to the request topic and starts answering. Returns
    /// once the subscription is acknowledged. `broker_events` carries the embedded broker's
    /// connection events (none with an external broker).
    pub(crate) async fn start(
        config: ServiceConfig,
        broker_events: Option<mpsc::UnboundedReceiver<BrokerEvent>>,
    ) -> Result<Service, StartError> {
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
            admission: Admission {
                trust_broker_client_id: config.trust_broker_client_id,
                disconnector: config.disconnector.clone(),
                own_id: config.client_id.clone(),
                confine_response_topics: config.confine_response_topics,
            },
            publisher: Publisher {
                client: client.clone(),
                max_packet_size: limit,
                instance_id: config.instance_id.clone(),
            },
            persistence: config.persistence.clone(),
            outbox: Vec::new(),
            implicit: config.implicit_notify.clone().map(Implicit::new),
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
                let last_error = last_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                Err(ConnectError::Connect {
                    host: config.host.clone(),
                    port: config.port,
                    timeout: config.connect_timeout,
                    last_error,
                }
                .into())
            }
        }
    }

    /// Disconnects from the broker and stops both tasks (waiting a few seconds at most).
    pub(crate) async fn shutdown(mut self) {
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
