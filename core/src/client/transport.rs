//! The MQTT5 transport behind a small internal interface, implemented on rumqttc 0.25.
//!
//! The rest of the client sees two halves: a [`Publisher`] (cheap to share, used by every
//! request) and an [`EventSource`] (owned by the one connection task, which polls it). Only
//! this module knows rumqttc, so the connection logic can be driven by a scripted transport
//! in tests and the MQTT library could be swapped without touching the protocol code.
//!
//! What rumqttc does not do, and this module does (measured limits of rumqttc 0.25):
//! - TCP_NODELAY on (rumqttc leaves it off: every round trip then costs 40-88 ms);
//! - clean start off with a session expiry (with clean start on, queued QoS 1 publishes are
//!   silently dropped on reconnect);
//! - our SUBSCRIBE goes ahead of the publishes rumqttc resends after a reconnect, so that a
//!   response cannot arrive before the subscription that routes it exists;
//! - credentials (password file, SAT token) refreshed before every reconnection attempt.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{
    Filter, Packet, PublishProperties, Subscribe, SubscribeReasonCode,
};
use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions, Request};
use rumqttc::{NetworkOptions, Outgoing, TlsConfiguration, Transport};

use crate::client::options::{ConnectOptions, SAT_AUTH_METHOD};
use crate::protocol::errors::Error;

/// How many leading filters of the first SUBSCRIBE must be granted (response topic and
/// notification filter); the rest are optional extensions.
const REQUIRED_FILTERS: usize = 2;

/// A request to publish (QoS 1, on the request topic).
#[derive(Debug)]
pub(crate) struct OutgoingRequest {
    pub(crate) topic: &'static str,
    pub(crate) payload: Bytes,
    pub(crate) response_topic: String,
    pub(crate) correlation: Bytes,
    pub(crate) message_expiry_secs: u32,
    pub(crate) user_properties: Vec<(String, String)>,
}

impl OutgoingRequest {
    /// An upper bound of the PUBLISH packet's size on the wire (the varints counted at their
    /// longest), to refuse a request the broker's maximum packet size would not let through.
    /// rumqttc would otherwise fail the connection on it and, with a persistent session,
    /// resend it after every reconnect forever.
    pub(crate) fn packet_size_bound(&self) -> usize {
        let properties = 2 // payload format indicator
            + 5 // message expiry interval
            + 3 + self.response_topic.len()
            + 3 + self.correlation.len()
            + 3 + crate::protocol::properties::CONTENT_TYPE.len()
            + self
                .user_properties
                .iter()
                .map(|(k, v)| 5 + k.len() + v.len())
                .sum::<usize>();
        let remaining = 2 + self.topic.len() + 2 + 4 + properties + self.payload.len();
        1 + 4 + remaining
    }
}

/// A PUBLISH received from the broker, reduced to what the state store protocol reads.
#[derive(Debug, Clone)]
pub(crate) struct IncomingMessage {
    pub(crate) topic: Bytes,
    pub(crate) payload: Bytes,
    pub(crate) correlation: Option<Bytes>,
    pub(crate) user_properties: Vec<(String, String)>,
}

impl IncomingMessage {
    /// The value of a user property (the first one with that name).
    pub(crate) fn property(&self, name: &str) -> Option<&str> {
        self.user_properties
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the connection task learns from one poll.
#[derive(Debug)]
pub(crate) enum TransportEvent {
    /// CONNACK accepted; `max_packet_size` is the broker's limit on what we send.
    Connected {
        session_present: bool,
        max_packet_size: Option<u32>,
    },
    /// Our SUBSCRIBE left, with this packet id.
    SubscribeSent(u16),
    /// A SUBACK: `Err` carries the refused filters' reason codes.
    SubAck { id: u16, result: Result<(), String> },
    /// A PUBLISH for us.
    Message(IncomingMessage),
    /// Our DISCONNECT left (graceful close).
    DisconnectSent,
    /// Anything else (acks, pings).
    Other,
}

/// Why a poll failed: a lost connection or a failed connection attempt, in words, whether it
/// was the connect timeout that passed (reported as a timeout, not a generic connection
/// error), and rumqttc's error itself (the source of the connection error a first attempt
/// reports).
#[derive(Debug, Clone)]
pub(crate) struct PollError {
    pub(crate) message: String,
    pub(crate) timed_out: bool,
    pub(crate) cause: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

impl From<&str> for PollError {
    fn from(message: &str) -> Self {
        PollError {
            message: message.to_owned(),
            timed_out: false,
            cause: None,
        }
    }
}

impl std::fmt::Display for PollError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The sending half, shared by every request.
pub(crate) trait Publisher: Send + Sync + 'static {
    /// Hands a request to the connection. Waits (asynchronously) when the outgoing queue is
    /// full, which is how 64 requests in flight queue behind a broker's receive maximum of 20.
    /// `Err` means the connection task is gone.
    fn publish(
        &self,
        request: OutgoingRequest,
    ) -> Pin<Box<dyn Future<Output = Result<(), ()>> + Send + '_>>;

    /// Asks for an UNSUBSCRIBE from each of `filters`, then a graceful DISCONNECT, without
    /// waiting; false if the connection is gone.
    fn disconnect(&self, filters: &[String]) -> bool;
}

/// The polling half, owned by the connection task.
pub(crate) trait EventSource: Send + 'static {
    /// The next event; `Err` is a lost connection or a failed connection attempt (the next
    /// call tries to connect again).
    fn poll(&mut self) -> impl Future<Output = Result<TransportEvent, PollError>> + Send;

    /// Sends a SUBSCRIBE to `filters` (QoS 1) before anything else queued.
    fn subscribe_first(&mut self, filters: &[String]);

    /// Called on every CONNACK after a lost connection, before anything is sent: drops from
    /// the transport's own queue every request it would send again by itself, except those
    /// the MQTT session obliges it to retransmit (sent, not acknowledged, and the broker kept
    /// the session), and returns the correlation data of those it keeps. The client re-sends
    /// every other request still waiting for its answer (see [`crate::client::rpc`]).
    fn keep_retransmissions(&mut self) -> Vec<Bytes>;

    /// Credentials for the next connection attempt.
    fn set_credentials(
        &mut self,
        username: Option<&str>,
        password: Option<String>,
        sat: Option<Bytes>,
    );
}

/// How many requests may wait in the queue between the callers and the event loop before
/// `publish` waits. Large enough that a burst of pipelined requests never waits on the
/// channel itself, only on the broker's receive maximum.
const REQUEST_QUEUE: usize = 1024;

/// Builds the rumqttc pair from our options (reading TLS files and secrets now).
pub(crate) fn rumqttc_transport(
    options: &ConnectOptions,
    client_id: &str,
) -> Result<(Arc<dyn Publisher>, RumqttcEvents), Error> {
    let mut mqtt = MqttOptions::new(client_id, options.host.clone(), options.port);
    // validate() guarantees 5 s <= keep-alive <= 65,535 s, so rumqttc's assertion holds.
    mqtt.set_keep_alive(options.keep_alive);
    mqtt.set_clean_start(false);
    let expiry = u32::try_from(options.session_expiry.as_secs()).unwrap_or(u32::MAX);
    mqtt.set_session_expiry_interval(Some(expiry));
    mqtt.set_max_packet_size(Some(options.max_packet_size));
    mqtt.set_request_channel_capacity(REQUEST_QUEUE);
    let connect_secs = options.connect_timeout.as_secs().max(1);
    mqtt.set_connection_timeout(connect_secs);
    let mut net = NetworkOptions::new();
    net.set_tcp_nodelay(true);
    net.set_connection_timeout(connect_secs);
    mqtt.set_network_options(net);
    if let Some(tls) = &options.tls {
        mqtt.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(
            tls.client_config()?,
        )));
    }
    let (client, eventloop) = AsyncClient::new(mqtt, REQUEST_QUEUE);
    let mut events = RumqttcEvents { eventloop };
    events.set_credentials(
        options.username.as_deref(),
        options.current_password()?,
        options.current_sat()?,
    );
    Ok((Arc::new(RumqttcPublisher { client }), events))
}

#[derive(Debug)]
struct RumqttcPublisher {
    client: AsyncClient,
}

impl Publisher for RumqttcPublisher {
    fn publish(
        &self,
        request: OutgoingRequest,
    ) -> Pin<Box<dyn Future<Output = Result<(), ()>> + Send + '_>> {
        Box::pin(async move {
            let properties = PublishProperties {
                payload_format_indicator: Some(0),
                message_expiry_interval: Some(request.message_expiry_secs),
                topic_alias: None,
                response_topic: Some(request.response_topic),
                correlation_data: Some(request.correlation),
                user_properties: request.user_properties,
                subscription_identifiers: Vec::new(),
                content_type: Some(crate::protocol::properties::CONTENT_TYPE.to_owned()),
            };
            self.client
                .publish_bytes_with_properties(
                    request.topic,
                    QoS::AtLeastOnce,
                    false,
                    request.payload,
                    properties,
                )
                .await
                .map_err(|_| ())
        })
    }

    fn disconnect(&self, filters: &[String]) -> bool {
        // The session outlives the connection (clean start off, see `rumqttc_transport`), and
        // rumqttc 0.25 cannot put the Session Expiry Interval 0 that would end it into the
        // DISCONNECT (bytebeamio/rumqtt#887). So a client that leaves on purpose drops its
        // subscriptions first: otherwise the broker keeps routing to, and queueing for, every
        // closed client for the session expiry (an hour), and each later publish pays for
        // matching their filters. The broker handles the packets in order; no UNSUBACK needed.
        for filter in filters {
            let _ = self.client.try_unsubscribe(filter.clone());
        }
        self.client.try_disconnect().is_ok()
    }
}

/// rumqttc's event loop, polled by the connection task only.
pub(crate) struct RumqttcEvents {
    eventloop: EventLoop,
}

/// A failed poll in words. A DISCONNECT from the broker is named by its reason code (and
/// string), and a session takeover also says what causes it: another client connecting with
/// the same client id, which otherwise looks like a bare "connection lost".
fn describe(e: &rumqttc::v5::ConnectionError) -> String {
    use rumqttc::v5::StateError;
    use rumqttc::v5::mqttbytes::v5::DisconnectReasonCode;
    let rumqttc::v5::ConnectionError::MqttState(StateError::ServerDisconnect {
        reason_code,
        reason_string,
    }) = e
    else {
        return e.to_string();
    };
    let mut message = format!("the broker closed the connection: {reason_code:?}");
    if let Some(reason) = reason_string {
        message.push_str(&format!(" ({reason})"));
    }
    if *reason_code == DisconnectReasonCode::SessionTakenOver {
        message.push_str(", another client connected with the same client id");
    }
    message
}

impl std::fmt::Debug for RumqttcEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RumqttcEvents").finish_non_exhaustive()
    }
}

impl EventSource for RumqttcEvents {
    async fn poll(&mut self) -> Result<TransportEvent, PollError> {
        let event = self.eventloop.poll().await.map_err(|e| PollError {
            timed_out: matches!(e, rumqttc::v5::ConnectionError::Timeout(_))
                || matches!(&e, rumqttc::v5::ConnectionError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut),
            message: describe(&e),
            cause: Some(Arc::new(e)),
        })?;
        Ok(match event {
            Event::Incoming(Packet::ConnAck(ack)) => TransportEvent::Connected {
                session_present: ack.session_present,
                max_packet_size: ack.properties.as_ref().and_then(|p| p.max_packet_size),
            },
            Event::Incoming(Packet::SubAck(ack)) => {
                // Only the first two filters (response topic, notification filter) are
                // needed; later ones are extensions (the store instance topic), whose refusal
                // only costs that extension.
                for code in ack.return_codes.iter().skip(REQUIRED_FILTERS) {
                    if !matches!(code, SubscribeReasonCode::Success(_)) {
                        tracing::warn!(?code, "optional subscription refused by the broker");
                    }
                }
                let refused: Vec<String> = ack
                    .return_codes
                    .iter()
                    .take(REQUIRED_FILTERS)
                    .filter(|c| !matches!(c, SubscribeReasonCode::Success(_)))
                    .map(|c| format!("{c:?}"))
                    .collect();
                let reason = ack
                    .properties
                    .as_ref()
                    .and_then(|p| p.reason_string.clone())
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                TransportEvent::SubAck {
                    id: ack.pkid,
                    result: if refused.is_empty() {
                        Ok(())
                    } else {
                        Err(format!("{}{reason}", refused.join(", ")))
                    },
                }
            }
            Event::Incoming(Packet::Publish(publish)) => {
                let (correlation, user_properties) = match publish.properties {
                    Some(p) => (p.correlation_data, p.user_properties),
                    None => (None, Vec::new()),
                };
                TransportEvent::Message(IncomingMessage {
                    topic: publish.topic,
                    payload: publish.payload,
                    correlation,
                    user_properties,
                })
            }
            Event::Outgoing(Outgoing::Subscribe(pkid)) => TransportEvent::SubscribeSent(pkid),
            Event::Outgoing(Outgoing::Disconnect) => TransportEvent::DisconnectSent,
            _ => TransportEvent::Other,
        })
    }

    fn subscribe_first(&mut self, filters: &[String]) {
        let subscribe = Subscribe::new_many(
            filters
                .iter()
                .map(|f| Filter::new(f.clone(), QoS::AtLeastOnce)),
            None,
        );
        // `pending` is what rumqttc sends first after a (re)connection, ahead of the request
        // channel; putting the SUBSCRIBE at its front orders it before every resent publish.
        self.eventloop
            .pending
            .push_front(Request::Subscribe(subscribe));
    }

    fn keep_retransmissions(&mut self) -> Vec<Bytes> {
        // On a lost connection rumqttc 0.25 moves into `pending` both the publishes it sent
        // and that were not acknowledged (with their packet ids) and every request still in
        // the channel (packet id 0, never sent); without a session it clears `pending` before
        // the CONNACK reaches us, with one it sends all of `pending` first. Rather than rely on
        // that, the client re-sends every unanswered request itself (rumqttc cannot know that
        // a request it had sent and got a PUBACK for was lost). So the never-sent ones go from
        // `pending`, or they would be published twice; and `pending` bypasses rumqttc's flow
        // control (the receive maximum, and its one-slot handling of packet id collisions),
        // which the channel respects. The retransmissions with their original packet ids stay,
        // as MQTT requires of a resumed session (at most the receive maximum of them, each in
        // its own slot), and the client does not publish those a second time.
        let mut kept = Vec::new();
        self.eventloop.pending.retain(|request| match request {
            Request::Publish(publish) if publish.pkid == 0 => false,
            Request::Publish(publish) => {
                if let Some(correlation) = publish
                    .properties
                    .as_ref()
                    .and_then(|p| p.correlation_data.clone())
                {
                    kept.push(correlation);
                }
                true
            }
            _ => true,
        });
        kept
    }

    fn set_credentials(
        &mut self,
        username: Option<&str>,
        password: Option<String>,
        sat: Option<Bytes>,
    ) {
        let options = &mut self.eventloop.options;
        if let Some(user) = username {
            options.set_credentials(user, password.unwrap_or_default());
        }
        if let Some(token) = sat {
            options.set_authentication_method(Some(SAT_AUTH_METHOD.to_owned()));
            options.set_authentication_data(Some(token));
        }
    }
}

/// Keeps `Duration` in the signature of this module's users honest: MQTT carries whole
/// seconds, rounded up, at least 1 (docs/protocol.md section 1).
pub(crate) fn expiry_secs(timeout: Duration) -> u32 {
    let ms = timeout.as_millis();
    let secs = ms.div_ceil(1000).max(1);
    u32::try_from(secs).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_expiry_rounds_up_to_whole_seconds() {
        assert_eq!(expiry_secs(Duration::ZERO), 1);
        assert_eq!(expiry_secs(Duration::from_millis(1)), 1);
        assert_eq!(expiry_secs(Duration::from_millis(300)), 1);
        assert_eq!(expiry_secs(Duration::from_millis(1000)), 1);
        assert_eq!(expiry_secs(Duration::from_millis(1001)), 2);
        assert_eq!(expiry_secs(Duration::from_secs(10)), 10);
        assert_eq!(expiry_secs(Duration::MAX), u32::MAX);
    }

    #[test]
    fn a_disconnect_from_the_broker_is_described_by_its_reason() {
        use rumqttc::v5::mqttbytes::v5::DisconnectReasonCode;
        use rumqttc::v5::{ConnectionError, StateError};
        let disconnect = |reason_code, reason_string: Option<&str>| {
            describe(&ConnectionError::MqttState(StateError::ServerDisconnect {
                reason_code,
                reason_string: reason_string.map(str::to_owned),
            }))
        };
        assert_eq!(
            disconnect(DisconnectReasonCode::SessionTakenOver, None),
            "the broker closed the connection: SessionTakenOver, another client connected with the same client id"
        );
        assert_eq!(
            disconnect(DisconnectReasonCode::QuotaExceeded, Some("too many")),
            "the broker closed the connection: QuotaExceeded (too many)"
        );
        // Other errors keep rumqttc's words.
        let abrupt = ConnectionError::MqttState(StateError::ConnectionAborted);
        assert_eq!(describe(&abrupt), abrupt.to_string());
    }

    #[test]
    fn packet_size_bound_is_an_upper_bound() {
        use rumqttc::v5::mqttbytes::v5::Publish;
        let request = OutgoingRequest {
            topic: crate::protocol::topics::REQUEST_TOPIC,
            payload: Bytes::from(vec![7u8; 70_000]),
            response_topic: crate::protocol::topics::response_topic("client"),
            correlation: Bytes::from_static(&[1; 16]),
            message_expiry_secs: 10,
            user_properties: vec![
                ("__srcId".into(), "client".into()),
                ("__ts".into(), "x".repeat(30)),
            ],
        };
        let bound = request.packet_size_bound();
        let mut publish = Publish::new(
            request.topic,
            QoS::AtLeastOnce,
            request.payload.clone(),
            Some(PublishProperties {
                payload_format_indicator: Some(0),
                message_expiry_interval: Some(10),
                topic_alias: None,
                response_topic: Some(request.response_topic.clone()),
                correlation_data: Some(request.correlation.clone()),
                user_properties: request.user_properties.clone(),
                subscription_identifiers: Vec::new(),
                content_type: Some("application/octet-stream".into()),
            }),
        );
        publish.pkid = 1;
        let exact = publish.size();
        assert!(bound >= exact, "{bound} < {exact}");
        assert!(bound - exact <= 8, "{bound} is too loose for {exact}");
    }

    #[test]
    fn only_the_sessions_retransmissions_stay_in_the_transport_queue() {
        use rumqttc::v5::mqttbytes::v5::Publish;
        let (_, mut events) =
            rumqttc_transport(&ConnectOptions::new("127.0.0.1", 1883), "c").unwrap();
        let publish = |pkid: u16, correlation: &'static [u8]| {
            let mut p = Publish::new(
                crate::protocol::topics::REQUEST_TOPIC,
                QoS::AtLeastOnce,
                Bytes::from_static(b"payload"),
                Some(PublishProperties {
                    correlation_data: Some(Bytes::from_static(correlation)),
                    ..PublishProperties::default()
                }),
            );
            p.pkid = pkid;
            Request::Publish(p)
        };
        let pending = &mut events.eventloop.pending;
        pending.push_back(publish(3, b"sent, not acknowledged"));
        pending.push_back(publish(0, b"never sent"));
        pending.push_back(Request::PingReq);
        let kept = events.keep_retransmissions();
        assert_eq!(kept, [Bytes::from_static(b"sent, not acknowledged")]);
        assert_eq!(events.eventloop.pending.len(), 2);
        assert!(matches!(
            &events.eventloop.pending[0],
            Request::Publish(p) if p.pkid == 3
        ));
    }

    #[test]
    fn incoming_property_lookup_takes_the_first() {
        let m = IncomingMessage {
            topic: Bytes::new(),
            payload: Bytes::new(),
            correlation: None,
            user_properties: vec![
                ("x-mqtt-client-id".into(), "b".into()),
                ("__stat".into(), "200".into()),
                ("__stat".into(), "500".into()),
            ],
        };
        assert_eq!(m.property("__stat"), Some("200"));
        assert_eq!(m.property("__ts"), None);
    }
}
