//! Replies and notifications on the wire ([`Publisher`]): the response's properties
//! (`__stat`, `__protVer`, `__ts`, the instance), the notifications' properties, and the check
//! against the maximum packet size; and [`Reply`], an answer waiting to be sent.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use mqstate::protocol::instance::INSTANCE_PROPERTY;
use mqstate::protocol::properties::{
    CONTENT_TYPE, PROTOCOL_VERSION, PROTOCOL_VERSION_PROPERTY, STATUS as STATUS_PROPERTY,
    TIMESTAMP as TIMESTAMP_PROPERTY,
};
use rumqttc::v5::AsyncClient;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::PublishProperties;

use super::request::RequestKind;
use crate::statestore::handler::{Answer, Notification};

/// Room for the fixed header, topic and properties of a response, on top of its payload,
/// when checking it against the maximum packet size.
const PACKET_OVERHEAD: usize = 1024;

/// An answer ready to send, with what it takes to send it (or answer again).
pub(super) struct Reply {
    pub(super) response_topic: String,
    pub(super) correlation: Bytes,
    pub(super) message_expiry: Option<u32>,
    pub(super) answer: Answer,
    pub(super) notifications: Vec<Notification>,
    pub(super) dedup_id: String,
    /// What the request was, for answering again if its batch's commit fails.
    pub(super) kind: RequestKind,
}

/// Publishes the store's responses and notifications.
pub(super) struct Publisher {
    pub(super) client: AsyncClient,
    /// The largest packet that may be sent (ours and the broker's limit).
    pub(super) max_packet_size: Arc<AtomicUsize>,
    /// This store instance's id, on every response and notification.
    pub(super) instance_id: String,
}

impl Publisher {
    pub(super) async fn respond(
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

    pub(super) async fn publish_notifications(&self, notifications: Vec<Notification>) {
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

    pub(super) async fn publish(
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
