//! One request as received: its properties, the checks that decide whether it is executed
//! at all (a response topic that is present, valid, not forbidden and, when confined, the
//! client's own; correlation data), the duplicate-request cache, then the handler.

use bytes::Bytes;
use mqstate::protocol::topics::{self, REQUEST_TOPIC, TopicError};
use rumqttc::v5::mqttbytes::v5::{Publish, PublishProperties};

use super::reply::Reply;
use super::task::{Deferred, StoreTask};
use super::{FENCING_TOKEN_PROPERTY, SOURCE_ID_PROPERTY, TIMESTAMP_PROPERTY};
use crate::broker::CLIENT_ID_PROPERTY;
use crate::statestore::handler::RequestContext;

pub(super) enum RequestKind {
    /// A GET of this key: answered again from the restored state.
    Read(Bytes),
    /// A SET / DEL / VDEL: answered `persistence failed`.
    Write,
    /// KEYNOTIFY or a refused request: its answer stands.
    Other,
}

impl RequestKind {
    pub(super) fn of(payload: &Bytes) -> Self {
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
    pub(super) async fn on_request(&mut self, publish: Publish) {
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
}
