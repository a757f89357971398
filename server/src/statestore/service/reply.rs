//! Replies and notifications on the wire: the response's properties (`__stat`, `__protVer`,
//! `__ts`, the instance), the notifications' properties, the check against the maximum
//! packet size, and caching each answer for duplicates.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use mqstate::protocol::instance::INSTANCE_PROPERTY;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::PublishProperties;

use super::request::RequestKind;
use super::task::StoreTask;
use super::{
    CONTENT_TYPE, PACKET_OVERHEAD, PROTOCOL_VERSION, PROTOCOL_VERSION_PROPERTY, STATUS_PROPERTY,
    TIMESTAMP_PROPERTY,
};
use crate::statestore::dedup::{CachedAnswer, DedupCache};
use crate::statestore::handler::{Answer, Notification};

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

impl StoreTask {
    /// Sends an answer and its notifications, and caches it for duplicates.
    pub(super) async fn send_reply(&mut self, reply: Reply) {
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
