//! The store's *event loop* task: it polls rumqttc (TCP_NODELAY on), subscribes again after
//! every CONNACK and forwards incoming requests to the store task; after a lost connection it
//! waits as the store's own [`StoreReconnect`] policy says before polling again (which makes
//! rumqttc reconnect), and logs the loss, each failed attempt, the reconnection and a
//! takeover of the store's client id.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use mqstate::protocol::instance::INSTANCE_TOPIC;
use mqstate::protocol::topics::REQUEST_TOPIC;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{
    DisconnectReasonCode, Filter, Packet, Publish, SubscribeReasonCode,
};
use rumqttc::v5::{AsyncClient, Event, EventLoop};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::statestore::mosquitto_log;
use crate::statestore::reconnect::StoreReconnect;

/// What the store task receives from the event loop task.
pub(super) enum Input {
    /// A message on the request topic (or any topic other than the log topics).
    Request(Publish),
    /// A line of Mosquitto's log (acknowledged by the store task too).
    Log(Publish),
}

pub(super) struct PollSettings {
    pub(super) watch_mosquitto_log: bool,
    /// The largest packet we may send: ours, lowered to the broker's on CONNACK.
    pub(super) packet_limit: Arc<AtomicUsize>,
    /// The last connection error, for the start-up error message.
    pub(super) last_error: Arc<Mutex<Option<rumqttc::v5::ConnectionError>>>,
    /// Announced on [`INSTANCE_TOPIC`] after every granted subscription.
    pub(super) instance_id: String,
    /// The store's own client id, to recognise a takeover of it in Mosquitto's log.
    pub(super) client_id: String,
    /// The delays between reconnection attempts.
    pub(super) reconnect: StoreReconnect,
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
pub(super) async fn poll_loop(
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
                *last_error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
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
