//! One request as received: its properties, the checks that decide whether it is executed
//! at all (a response topic that is present, valid, not forbidden and, when confined, the
//! client's own; correlation data), the duplicate-request cache, then the handler.

use bytes::Bytes;
use mqstate::protocol::topics::{self, REQUEST_TOPIC, TopicError};
use rumqttc::v5::mqttbytes::v5::{Publish, PublishProperties};

use mqstate::protocol::properties::{
    FENCING_TOKEN as FENCING_TOKEN_PROPERTY, SOURCE_ID as SOURCE_ID_PROPERTY,
    TIMESTAMP as TIMESTAMP_PROPERTY,
};

use crate::broker::{CLIENT_ID_PROPERTY, Disconnector};

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
pub(super) struct RequestProps {
    pub(super) response_topic: Option<String>,
    pub(super) correlation: Option<Bytes>,
    pub(super) message_expiry: Option<u32>,
    pub(super) timestamp: Option<String>,
    pub(super) fencing_token: Option<String>,
    pub(super) source_id: Option<String>,
    pub(super) broker_client_id: Option<String>,
    pub(super) persist: bool,
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

/// The checks a request passes before it is executed, with what they need to know.
pub(super) struct Admission {
    /// The broker's client id property is the sender's (the embedded broker sets it).
    pub(super) trust_broker_client_id: bool,
    /// Disconnects a client of the embedded broker that broke the rules.
    pub(super) disconnector: Option<Disconnector>,
    /// The store's own client id.
    pub(super) own_id: String,
    /// Every client must use response topics of its own (the broker authenticates).
    pub(super) confine_response_topics: bool,
}

/// A request that passed the checks.
pub(super) struct Admitted {
    pub(super) payload: Bytes,
    pub(super) props: RequestProps,
    pub(super) response_topic: String,
    pub(super) correlation: Bytes,
    trust_broker_client_id: bool,
}

impl Admitted {
    /// Who asks: the broker's client id when it is trusted, else the request's `__srcId`.
    pub(super) fn client_id(&self) -> Option<&str> {
        if self.trust_broker_client_id {
            self.props
                .broker_client_id
                .as_deref()
                .or(self.props.source_id.as_deref())
        } else {
            self.props.source_id.as_deref()
        }
    }
}

impl Admission {
    /// The request, if it is to be executed: on the request topic, not retained, with a
    /// response topic that is valid, not forbidden and (when confined) the client's own,
    /// and with correlation data. Anything else is dropped with a log line, and a client
    /// that names a forbidden or another client's response topic is disconnected.
    pub(super) fn admit(&self, publish: Publish) -> Option<Admitted> {
        if publish.topic != REQUEST_TOPIC.as_bytes() {
            tracing::debug!(topic = ?publish.topic, "ignored a message on another topic");
            return None;
        }
        if publish.retain {
            // A retained request would be executed again at every (re)subscription.
            tracing::warn!("retained request: not executed, dropped");
            return None;
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
            return None;
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
            return None;
        }
        if self.confine_response_topics
            && let Some(id) = props.broker_client_id.as_deref()
            && id != self.own_id
            && !crate::security::provider::owns_topic(id, response_topic)
        {
            tracing::warn!(
                client_id = id,
                response_topic,
                "request with another client's response topic: not executed; disconnecting the client"
            );
            if let Some(disconnector) = &self.disconnector {
                disconnector.disconnect(id);
            }
            return None;
        }
        let Some(correlation) = props.correlation.clone() else {
            tracing::warn!(
                client_id,
                response_topic,
                "request without correlation data: not executed, dropped"
            );
            return None;
        };
        Some(Admitted {
            payload,
            response_topic: response_topic.to_owned(),
            correlation,
            props,
            trust_broker_client_id: self.trust_broker_client_id,
        })
    }
}
