//! AMQP messages <-> the hub's types: a service SDK's C2D message to a [`C2dMessage`], a
//! [`FeedbackBatch`] to the feedback message IoT Hub sends, and [`IotHubError`]s to the error
//! conditions IoT Hub uses, so that each SDK raises its documented error.

use std::time::{SystemTime, UNIX_EPOCH};

use fe2o3_amqp::types::definitions::{self, AmqpError, ErrorCondition, LinkError};
use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Body, Data, Header, Message, MessageAnnotations, MessageId, Properties,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Timestamp, Value};
use mqstate::iothub::guid_text;

use crate::iothub::IotHubError;
use crate::iothub::domain::message::{
    Ack, C2dMessage, FEEDBACK_CONTENT_TYPE, FeedbackBatch, format_time,
};
use crate::iothub::domain::properties::Property;
use crate::iothub::domain::queue::LockedMessage;
use crate::iothub::domain::system_properties::SystemProperties;

/// The condition SDKs map to their argument errors (Node `ArgumentError`).
const ARGUMENT_ERROR: &str = "com.microsoft:argument-error";

/// An AMQP error with `condition` and `description`.
pub(super) fn error(
    condition: impl Into<ErrorCondition>,
    description: String,
) -> definitions::Error {
    definitions::Error::new(condition, Some(description), None)
}

/// The condition IoT Hub rejects a send or refuses a link with, for `e`. Node's
/// `translateError` (azure-iothub `amqp_service_errors.js`, `common-amqp/amqp_common_errors.js`)
/// turns each into the error the SDK documents.
pub(crate) fn hub_error(e: &IotHubError) -> definitions::Error {
    let condition: ErrorCondition = match e {
        IotHubError::DeviceNotFound(_) => AmqpError::NotFound.into(),
        IotHubError::QueueFull { .. } => AmqpError::ResourceLimitExceeded.into(),
        IotHubError::PayloadTooLarge { .. } => LinkError::MessageSizeExceeded.into(),
        IotHubError::InvalidArgument(_) => ErrorCondition::Custom(Symbol::from(ARGUMENT_ERROR)),
        IotHubError::Unauthorized(_) => AmqpError::UnauthorizedAccess.into(),
        _ => AmqpError::InternalError.into(),
    };
    error(condition, e.to_string())
}

/// A message id or correlation id as the SDKs mean it: Node sends a UUID-shaped id as an
/// AMQP uuid (`encodeUuid` in `common-amqp/amqp_message.js`), turned back into its text.
pub(super) fn id_text(id: &MessageId) -> Result<String, IotHubError> {
    Ok(match id {
        MessageId::String(s) => s.clone(),
        MessageId::Ulong(n) => n.to_string(),
        MessageId::Uuid(u) => guid_text(u.as_inner()),
        MessageId::Binary(b) => String::from_utf8(b.to_vec())
            .map_err(|_| IotHubError::invalid("a binary message id must be UTF-8 text"))?,
    })
}

/// An application property value as the text the device sees on its topic (`None`: null).
fn property_text(name: &str, value: &SimpleValue) -> Result<Option<String>, IotHubError> {
    Ok(Some(match value {
        SimpleValue::Null => return Ok(None),
        SimpleValue::String(s) => s.clone(),
        SimpleValue::Symbol(s) => s.0.clone(),
        SimpleValue::Bool(b) => b.to_string(),
        SimpleValue::Ubyte(n) => n.to_string(),
        SimpleValue::Ushort(n) => n.to_string(),
        SimpleValue::Uint(n) => n.to_string(),
        SimpleValue::Ulong(n) => n.to_string(),
        SimpleValue::Byte(n) => n.to_string(),
        SimpleValue::Short(n) => n.to_string(),
        SimpleValue::Int(n) => n.to_string(),
        SimpleValue::Long(n) => n.to_string(),
        SimpleValue::Float(n) => n.to_string(),
        SimpleValue::Double(n) => n.to_string(),
        SimpleValue::Char(c) => c.to_string(),
        SimpleValue::Timestamp(t) => t.milliseconds().to_string(),
        SimpleValue::Uuid(u) => guid_text(u.as_inner()),
        SimpleValue::Binary(b) => String::from_utf8(b.to_vec()).map_err(|_| {
            IotHubError::invalid(format!(
                "application property {name:?} is binary, not UTF-8 text"
            ))
        })?,
        _ => {
            return Err(IotHubError::invalid(format!(
                "application property {name:?} has a type IoT Hub does not carry"
            )));
        }
    }))
}

/// The device id a C2D message is for, from its `to`: `/devices/{id}/messages/devicebound`.
/// Node URL-encodes the id (`encodeURIComponent`), Python does not: the caller tries both
/// forms (see [`device_candidates`]).
pub(super) fn device_in_to(to: Option<&str>) -> Result<&str, IotHubError> {
    let to = to.ok_or_else(|| {
        IotHubError::invalid("the message has no `to` (/devices/{id}/messages/devicebound)")
    })?;
    let invalid = || {
        IotHubError::invalid(format!(
            "`to` {to:?} is not /devices/{{id}}/messages/devicebound"
        ))
    };
    let rest = strip_prefix_ci(to, "/devices/").ok_or_else(invalid)?;
    let id = strip_suffix_ci(rest, "/messages/devicebound").ok_or_else(invalid)?;
    if id.is_empty() {
        return Err(invalid());
    }
    Ok(id)
}

/// The ids `raw` may name: URL-decoded first (Node), then as is (Python sends it raw, and
/// an IoT Hub device id may contain `%`).
pub(crate) fn device_candidates(raw: &str) -> Vec<String> {
    let mut out = Vec::with_capacity(2);
    if let Ok(decoded) = percent_encoding::percent_decode_str(raw).decode_utf8()
        && decoded != raw
    {
        out.push(decoded.into_owned());
    }
    out.push(raw.to_owned());
    out
}

pub(super) fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| s.get(prefix.len()..))
        .flatten()
}

fn strip_suffix_ci<'a>(s: &'a str, suffix: &str) -> Option<&'a str> {
    let cut = s.len().checked_sub(suffix.len())?;
    let tail = s.get(cut..)?;
    tail.eq_ignore_ascii_case(suffix)
        .then(|| s.get(..cut))
        .flatten()
}

/// The body bytes: one or more data sections (what both SDKs send), or an amqp-value of
/// binary or string, or nothing.
fn body_bytes(body: Body<Value>) -> Result<Vec<u8>, IotHubError> {
    match body {
        Body::Data(sections) => Ok(sections.iter().flat_map(|d| d.0.iter().copied()).collect()),
        Body::Value(v) => match v.0 {
            Value::Binary(b) => Ok(b.into_vec()),
            Value::String(s) => Ok(s.into_bytes()),
            Value::Null => Ok(Vec::new()),
            _ => Err(IotHubError::invalid(
                "the message body must be data sections, or an amqp-value of binary or string",
            )),
        },
        Body::Empty => Ok(Vec::new()),
        Body::Sequence(_) => Err(IotHubError::invalid(
            "the message body must be data sections, not amqp-sequence",
        )),
    }
}

/// Converts a service SDK's C2D message: its properties (message id, correlation id, user id,
/// content type and encoding, absolute expiry time), its application properties
/// (`iothub-ack` is the ack mode) and its body. Returns the raw device id of its `to` too.
pub(crate) fn c2d_message(
    message: Message<Body<Value>>,
) -> Result<(String, C2dMessage), IotHubError> {
    let properties = message.properties.unwrap_or_default();
    let device = device_in_to(properties.to.as_deref())?.to_owned();
    let mut out = C2dMessage::new(body_bytes(message.body)?);
    if let Some(id) = &properties.message_id {
        out = out.message_id(id_text(id)?);
    }
    if let Some(id) = &properties.correlation_id {
        out = out.correlation_id(id_text(id)?);
    }
    if let Some(user) = properties.user_id {
        out = out.user_id(
            String::from_utf8(user.into_vec())
                .map_err(|_| IotHubError::invalid("the user id must be UTF-8 text"))?,
        );
    }
    if let Some(ct) = properties.content_type {
        out = out.content_type(ct.0);
    }
    if let Some(ce) = properties.content_encoding {
        out = out.content_encoding(ce.0);
    }
    if let Some(at) = properties.absolute_expiry_time {
        out = out.expires_at(absolute_expiry(at.milliseconds())?);
    }
    if let Some(app) = message.application_properties {
        for (name, value) in app.0.iter() {
            if name == "iothub-ack" {
                let text = property_text(name, value)?.unwrap_or_default();
                out = out.ack(Ack::parse(&text)?);
            } else {
                let text = property_text(name, value)?;
                out = out.property(name.clone(), text.as_deref());
            }
        }
    }
    Ok((device, out))
}

/// The feedback message of `batch`, as IoT Hub sends it on `/messages/serviceBound/feedback`:
/// a data section holding the JSON array of records (what the HTTP API returns as `records`),
/// content type [`FEEDBACK_CONTENT_TYPE`], user id the hub name, message id the lock token,
/// the batch's enqueued time as the `iothub-enqueuedtime` annotation.
pub(super) fn feedback_message(batch: &FeedbackBatch) -> Result<Message<Data>, IotHubError> {
    let json =
        serde_json::to_vec(&batch.records).map_err(|e| IotHubError::io("feedback records", e))?;
    let enqueued = humantime::parse_rfc3339_weak(&batch.enqueued_time_utc)
        .unwrap_or_else(|_| SystemTime::now());
    let millis = enqueued
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let properties = Properties::builder()
        .message_id(batch.lock_token.clone())
        .user_id(Binary::from(batch.user_id.clone().into_bytes()))
        .content_type(Symbol::from(FEEDBACK_CONTENT_TYPE))
        .content_encoding(Symbol::from("utf-8"))
        .creation_time(Timestamp::from_milliseconds(millis))
        .build();
    let annotations = MessageAnnotations::builder()
        .insert(
            Symbol::from("iothub-enqueuedtime"),
            Value::Timestamp(Timestamp::from_milliseconds(millis)),
        )
        .build();
    Ok(Message::builder()
        .header(
            Header::builder()
                .durable(true)
                .delivery_count(batch.delivery_count.saturating_sub(1))
                .build(),
        )
        .message_annotations(annotations)
        .properties(properties)
        .data(Data(Binary::from(json)))
        .build())
}

/// Milliseconds since the Unix epoch, as an AMQP timestamp.
fn timestamp(at: SystemTime) -> Timestamp {
    let millis = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Timestamp::from_milliseconds(millis)
}

/// A lock token's GUID text (`xxxxxxxx-xxxx-...`) as an AMQP uuid, its bytes in text order.
fn lock_token_uuid(token: &str) -> Option<Value> {
    let hex: String = token.chars().filter(|c| *c != '-').collect();
    let n = u128::from_str_radix(&hex, 16)
        .ok()
        .filter(|_| hex.len() == 32)?;
    Some(Value::Uuid(n.to_be_bytes().into()))
}

/// A cloud-to-device message as IoT Hub hands it to a device on
/// `/devices/{id}/messages/devicebound`: the service's properties (message id, correlation id
/// and user id, content type and encoding; `to` the device's devicebound address, absolute
/// expiry time the resolved expiry), the ack mode as the `iothub-ack` application property
/// beside the service's own (Node's `AmqpMessage.toMessage` reads it into `message.ack`), the
/// header's delivery count (prior deliveries: Node exposes it as
/// `message.transportObj.delivery_count`) and the annotations IoT Hub sets: `iothub-enqueuedtime`,
/// `x-opt-sequence-number`, `x-opt-lock-token` (what the .NET device SDK takes the lock
/// token from; the delivery tag is fe2o3's own, so it is not the lock token here).
pub(crate) fn device_message(device_id: &str, locked: &LockedMessage) -> Message<Data> {
    let m = &locked.message;
    let sp = SystemProperties::of(device_id, m, locked.expiry_time);
    let text = |v: Option<&str>| v.map(str::to_owned);
    let mut properties = Properties::builder()
        .to(sp.to.clone())
        .absolute_expiry_time(timestamp(sp.expiry))
        .build();
    properties.message_id = text(sp.message_id).map(MessageId::String);
    properties.correlation_id = text(sp.correlation_id).map(MessageId::String);
    properties.user_id = text(sp.user_id).map(|u| Binary::from(u.into_bytes()));
    properties.content_type = text(sp.content_type).map(Symbol::from);
    properties.content_encoding = text(sp.content_encoding).map(Symbol::from);
    let mut app = ApplicationProperties::builder();
    if sp.ack != Ack::None {
        app = app.insert(
            "iothub-ack",
            SimpleValue::String(sp.ack.as_str().to_owned()),
        );
    }
    for (name, value) in &m.properties {
        let value = value.clone().map_or(SimpleValue::Null, SimpleValue::String);
        app = app.insert(name.clone(), value);
    }
    let mut annotations = MessageAnnotations::builder()
        .insert(
            Symbol::from("iothub-enqueuedtime"),
            Value::Timestamp(timestamp(locked.enqueued_time)),
        )
        .insert(
            Symbol::from("x-opt-sequence-number"),
            Value::Long(i64::try_from(locked.sequence_number).unwrap_or(i64::MAX)),
        );
    if let Some(uuid) = lock_token_uuid(&locked.lock_token) {
        annotations = annotations.insert(Symbol::from("x-opt-lock-token"), uuid);
    }
    Message::builder()
        .header(
            Header::builder()
                .durable(true)
                .delivery_count(locked.delivery_count.saturating_sub(1))
                .build(),
        )
        .message_annotations(annotations.build())
        .properties(properties)
        .application_properties(app.build())
        .data(Data(Binary::from(m.payload.to_vec())))
        .build()
}

/// A device's telemetry message on `/devices/{id}/messages/events` as the property bag the
/// MQTT endpoint reads from a telemetry topic, and its body: the AMQP properties become the
/// system properties the MQTT device SDKs write (`$.mid`, `$.cid`, `$.uid`, `$.to`, `$.ct`,
/// `$.ce`, `$.exp` in RFC 3339 as Node's `toISOString`: azure-iot-device-mqtt `mqtt.js`
/// `_getTopicWithProperties`), the annotations Node sets from a message (`iothub-interface-id`
/// -> `$.ifid`, `dt-subject` -> `$.sub`: azure-iot-amqp-base `amqp_message.js` `fromMessage`),
/// and the application properties stay as they are. A body over `max` bytes is refused with
/// [`IotHubError::PayloadTooLarge`] (`amqp:link:message-size-exceeded`).
pub(crate) fn telemetry(
    message: Message<Body<Value>>,
    max: usize,
) -> Result<(Vec<Property>, Vec<u8>), IotHubError> {
    let body = body_bytes(message.body)?;
    if body.len() > max {
        return Err(IotHubError::PayloadTooLarge {
            size: body.len(),
            max,
        });
    }
    let mut bag: Vec<Property> = Vec::new();
    let properties = message.properties.unwrap_or_default();
    let mut system = |name: &str, value: Option<String>| {
        if let Some(v) = value {
            bag.push((name.to_owned(), Some(v)));
        }
    };
    system(
        "$.mid",
        properties.message_id.as_ref().map(id_text).transpose()?,
    );
    system(
        "$.cid",
        properties
            .correlation_id
            .as_ref()
            .map(id_text)
            .transpose()?,
    );
    system(
        "$.uid",
        properties
            .user_id
            .map(|u| String::from_utf8(u.into_vec()))
            .transpose()
            .map_err(|_| IotHubError::invalid("the user id must be UTF-8 text"))?,
    );
    system("$.to", properties.to);
    system("$.ct", properties.content_type.map(|s| s.0));
    system("$.ce", properties.content_encoding.map(|s| s.0));
    if let Some(at) = properties.absolute_expiry_time {
        system(
            "$.exp",
            Some(format_time(absolute_expiry(at.milliseconds())?)),
        );
    }
    if let Some(annotations) = &message.message_annotations {
        for (key, name) in [("iothub-interface-id", "$.ifid"), ("dt-subject", "$.sub")] {
            let value = annotations
                .0
                .iter()
                .find(|(k, _)| annotation_key(k) == Some(key))
                .map(|(_, v)| v);
            let text = match value {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Symbol(s)) => Some(s.0.clone()),
                _ => None,
            };
            system(name, text);
        }
    }
    if let Some(app) = message.application_properties {
        for (name, value) in app.0.iter() {
            bag.push((name.clone(), property_text(name, value)?));
        }
    }
    Ok((bag, body))
}

/// A message annotation's key as text (annotation keys are symbols, or ulongs).
fn annotation_key(key: &fe2o3_amqp::types::messaging::annotations::OwnedKey) -> Option<&str> {
    match key {
        fe2o3_amqp::types::messaging::annotations::OwnedKey::Symbol(s) => Some(s.0.as_str()),
        _ => None,
    }
}

/// A message's `absolute-expiry-time` (milliseconds since the Unix epoch, as the peer wrote
/// it), refused before 1970 or after the year 9999 (crate::iothub::domain::time).
fn absolute_expiry(millis: i64) -> Result<SystemTime, IotHubError> {
    let millis = u64::try_from(millis)
        .map_err(|_| IotHubError::invalid("the absolute expiry time is before 1970"))?;
    crate::iothub::domain::time::from_unix_millis(millis)
        .ok_or_else(|| IotHubError::invalid("the absolute expiry time is after the year 9999"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use fe2o3_amqp::types::messaging::ApplicationProperties;

    use super::*;

    #[test]
    fn the_device_comes_from_to_in_both_sdk_forms() {
        assert_eq!(
            device_in_to(Some("/devices/a%2Fb/messages/devicebound")).unwrap(),
            "a%2Fb"
        );
        assert_eq!(
            device_candidates("a%2Fb"),
            vec!["a/b".to_owned(), "a%2Fb".to_owned()]
        );
        assert_eq!(device_candidates("plain"), vec!["plain".to_owned()]);
        assert!(device_in_to(Some("/devices//messages/devicebound")).is_err());
        assert!(device_in_to(Some("/devices/d")).is_err());
        assert!(device_in_to(None).is_err());
    }

    #[test]
    fn every_property_is_carried() {
        let uuid = [
            0x12u8, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8,
        ];
        let message = Message::builder()
            .properties(
                Properties::builder()
                    .to("/devices/d1/messages/devicebound")
                    .message_id(MessageId::Uuid(uuid.into()))
                    .correlation_id(String::from("c-1"))
                    .user_id(Binary::from(b"svc".to_vec()))
                    .content_type(Symbol::from("application/json"))
                    .content_encoding(Symbol::from("utf-8"))
                    .absolute_expiry_time(Timestamp::from_milliseconds(4_102_444_800_000))
                    .build(),
            )
            .application_properties(
                ApplicationProperties::builder()
                    .insert("iothub-ack", SimpleValue::String("full".into()))
                    .insert("n", SimpleValue::Int(7))
                    .insert("z", SimpleValue::Null)
                    .build(),
            )
            .body(Body::Data(
                vec![
                    Data(Binary::from(b"he".to_vec())),
                    Data(Binary::from(b"y".to_vec())),
                ]
                .into(),
            ))
            .build();
        let (device, m) = c2d_message(message).unwrap();
        assert_eq!(device, "d1");
        assert_eq!(
            m.message_id.as_deref(),
            Some("12345678-9abc-def0-0102-030405060708")
        );
        assert_eq!(m.correlation_id.as_deref(), Some("c-1"));
        assert_eq!(m.user_id.as_deref(), Some("svc"));
        assert_eq!(m.content_type.as_deref(), Some("application/json"));
        assert_eq!(m.content_encoding.as_deref(), Some("utf-8"));
        assert_eq!(m.ack, Ack::Full);
        assert_eq!(&m.payload[..], b"hey");
        assert_eq!(
            m.properties,
            vec![
                ("n".to_owned(), Some("7".to_owned())),
                ("z".to_owned(), None)
            ]
        );
        assert!(matches!(
            m.expiry,
            Some(crate::iothub::domain::message::Expiry::At(_))
        ));
    }
}
