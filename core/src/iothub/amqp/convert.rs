//! AMQP messages to and from the device client's types: a C2D delivery into the same
//! [`MessageContent`] the MQTT transport decodes from a topic (docs/iothub-device.md,
//! "Transports": the fields an application reads do not depend on the transport), and
//! [`Telemetry`] into the AMQP message IoT Hub maps back to the MQTT property bag (AMQP
//! properties for the system properties, application properties as they are).

use bytes::Bytes;
use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Body, Data, Message, MessageId, Properties,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Value};

use crate::iothub::message::{MessageContent, Telemetry};
use crate::iothub::properties;
use crate::protocol::errors::Error;

/// A received C2D message's content and its header's delivery count (0 on the first
/// delivery). `address` is the receiver link's source, kept as the content's `topic`. A body
/// that is not bytes (data sections, or a binary or string value) is an
/// [`Error::MalformedMessage`].
pub(super) fn content(
    message: Message<Body<Value>>,
    address: &str,
) -> Result<(MessageContent, u32), Error> {
    let delivery_count = message.header.as_ref().map_or(0, |h| h.delivery_count);
    let payload = body(message.body)?;
    let p = message.properties.unwrap_or_default();
    let mut ack = None;
    let mut other_system_properties = Vec::new();
    let mut application = Vec::new();
    for (name, value) in message.application_properties.unwrap_or_default().0 {
        let value = simple_text(value);
        if name == "iothub-ack" {
            ack = value;
        } else if name.starts_with("$.") {
            other_system_properties.push((name, value));
        } else {
            application.push((name, value));
        }
    }
    let content = MessageContent {
        payload,
        message_id: p.message_id.map(id_text),
        correlation_id: p.correlation_id.map(id_text),
        user_id: p
            .user_id
            .map(|u| String::from_utf8_lossy(u.as_ref()).into_owned()),
        to: p.to,
        expiry_time: p
            .absolute_expiry_time
            .map(|t| rfc3339_millis(t.milliseconds())),
        content_type: p.content_type.map(|s| s.0),
        content_encoding: p.content_encoding.map(|s| s.0),
        ack,
        other_system_properties,
        properties: application,
        topic: address.to_owned(),
    };
    Ok((content, delivery_count))
}

/// The body's bytes.
fn body(body: Body<Value>) -> Result<Bytes, Error> {
    match body {
        Body::Data(sections) => {
            let mut out = Vec::new();
            for section in sections {
                out.extend_from_slice(section.0.as_ref());
            }
            Ok(Bytes::from(out))
        }
        Body::Value(v) => match v.0 {
            Value::Binary(b) => Ok(Bytes::from(b.into_vec())),
            Value::String(s) => Ok(Bytes::from(s.into_bytes())),
            Value::Null => Ok(Bytes::new()),
            other => Err(Error::MalformedMessage(format!(
                "the message body is an AMQP value of type {}, not bytes",
                value_type(&other)
            ))),
        },
        Body::Empty => Ok(Bytes::new()),
        _ => Err(Error::MalformedMessage(
            "the message body is an AMQP sequence, not bytes".into(),
        )),
    }
}

fn value_type(v: &Value) -> &'static str {
    match v {
        Value::Bool(_) => "boolean",
        Value::List(_) => "list",
        Value::Map(_) => "map",
        Value::Array(_) => "array",
        Value::Symbol(_) => "symbol",
        Value::Described(_) => "described",
        _ => "number or other scalar",
    }
}

/// A message or correlation id as text: IoT Hub's are strings; other AMQP id types are
/// written as their value (a UUID in its usual hyphenated form, bytes as UTF-8).
fn id_text(id: MessageId) -> String {
    match id {
        MessageId::String(s) => s,
        MessageId::Ulong(n) => n.to_string(),
        MessageId::Uuid(u) => crate::iothub::message::guid_text(&u.into_inner()),
        MessageId::Binary(b) => String::from_utf8_lossy(b.as_ref()).into_owned(),
    }
}

/// An application property's value as the MQTT transport gives it: text, or `None` for null.
/// Numbers and booleans (which the service SDKs may send) are written in their usual form.
fn simple_text(v: SimpleValue) -> Option<String> {
    Some(match v {
        SimpleValue::Null => return None,
        SimpleValue::String(s) => s,
        SimpleValue::Symbol(s) => s.0,
        SimpleValue::Bool(b) => b.to_string(),
        SimpleValue::Ubyte(n) => n.to_string(),
        SimpleValue::Ushort(n) => n.to_string(),
        SimpleValue::Uint(n) => n.to_string(),
        SimpleValue::Ulong(n) => n.to_string(),
        SimpleValue::Byte(n) => n.to_string(),
        SimpleValue::Short(n) => n.to_string(),
        SimpleValue::Int(n) => n.to_string(),
        SimpleValue::Long(n) => n.to_string(),
        SimpleValue::Float(n) => n.0.to_string(),
        SimpleValue::Double(n) => n.0.to_string(),
        SimpleValue::Timestamp(t) => rfc3339_millis(t.milliseconds()),
        SimpleValue::Binary(b) => String::from_utf8_lossy(b.as_ref()).into_owned(),
        other => format!("{other:?}"),
    })
}

/// Milliseconds since the Unix epoch as RFC 3339 UTC with milliseconds
/// (`2026-01-01T00:00:00.000Z`), the form IoT Hub writes `$.exp` in over MQTT.
pub(super) fn rfc3339_millis(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's
/// `civil_from_days`); exact for every day an `i64` of milliseconds can name.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The AMQP message of a telemetry event: `$.mid`, `$.cid`, `$.ct`, `$.ce` as the AMQP
/// properties IoT Hub reads them from, the application properties as they are (a null value
/// stays null), the body one data section. Property names are checked as over MQTT; a name
/// given twice is refused, since AMQP application properties are a map.
pub(crate) fn telemetry(event: Telemetry) -> Result<Message<Data>, Error> {
    let mut app = ApplicationProperties::builder();
    let mut names = std::collections::HashSet::new();
    for (name, value) in event.properties {
        properties::check_application_name(&name)?;
        if !names.insert(name.clone()) {
            return Err(Error::InvalidArgument(format!(
                "application property {name:?} is given twice: over AMQP the properties are a map"
            )));
        }
        let value = value.map_or(SimpleValue::Null, SimpleValue::String);
        app = app.insert(name, value);
    }
    let mut p = Properties::builder().build();
    p.message_id = event.message_id.map(MessageId::String);
    p.correlation_id = event.correlation_id.map(MessageId::String);
    p.content_type = event.content_type.map(Symbol::from);
    p.content_encoding = event.content_encoding.map(Symbol::from);
    Ok(Message::builder()
        .properties(p)
        .application_properties(app.build())
        .data(Data(Binary::from(event.payload.to_vec())))
        .build())
}

/// The application properties of a message, in order (for tests and logs).
#[cfg(test)]
fn application(message: &Message<Data>) -> Vec<properties::Property> {
    message
        .application_properties
        .as_ref()
        .map(|a| {
            a.0.iter()
                .map(|(k, v)| (k.clone(), simple_text(v.clone())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use fe2o3_amqp::types::messaging::Header;
    use fe2o3_amqp::types::primitives::Timestamp;

    use super::*;

    #[test]
    fn times_are_written_as_iot_hub_writes_them() {
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339_millis(1_767_225_600_000),
            "2026-01-01T00:00:00.000Z"
        );
        assert_eq!(rfc3339_millis(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339_millis(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn a_delivery_reads_as_over_mqtt() {
        let mut p = Properties::builder()
            .to("/devices/d1/messages/devicebound")
            .build();
        p.message_id = Some(MessageId::String("m 1".into()));
        p.correlation_id = Some(MessageId::Ulong(7));
        p.user_id = Some(Binary::from(b"svc".to_vec()));
        p.content_type = Some(Symbol::from("application/json"));
        p.absolute_expiry_time = Some(Timestamp::from_milliseconds(1_767_225_600_000));
        let app = ApplicationProperties::builder()
            .insert("iothub-ack", SimpleValue::String("full".into()))
            .insert("colour", SimpleValue::String("dark blue".into()))
            .insert("flag", SimpleValue::Null)
            .insert("n", SimpleValue::Int(3))
            .build();
        let message = Message::builder()
            .header(Header::builder().delivery_count(2).build())
            .properties(p)
            .application_properties(app)
            .data(Data(Binary::from(b"{}".to_vec())))
            .build();
        let message: Message<Body<Value>> = Message {
            header: message.header,
            delivery_annotations: None,
            message_annotations: None,
            properties: message.properties,
            application_properties: message.application_properties,
            body: Body::Data(vec![message.body].into()),
            footer: None,
        };
        let (m, count) = content(message, "/devices/d1/messages/devicebound").unwrap();
        assert_eq!(count, 2);
        assert_eq!(&m.payload[..], b"{}");
        assert_eq!(m.message_id.as_deref(), Some("m 1"));
        assert_eq!(m.correlation_id.as_deref(), Some("7"));
        assert_eq!(m.user_id.as_deref(), Some("svc"));
        assert_eq!(m.expiry_time.as_deref(), Some("2026-01-01T00:00:00.000Z"));
        assert_eq!(m.ack.as_deref(), Some("full"));
        assert_eq!(
            m.properties,
            vec![
                ("colour".to_owned(), Some("dark blue".to_owned())),
                ("flag".to_owned(), None),
                ("n".to_owned(), Some("3".to_owned())),
            ]
        );
    }

    #[test]
    fn telemetry_keeps_null_and_empty_and_refuses_repeats() {
        let m = telemetry(
            Telemetry::new("x")
                .message_id("t1")
                .content_type("text/plain")
                .null_property("flag")
                .property("empty", ""),
        )
        .unwrap();
        let p = m.properties.as_ref().unwrap();
        assert_eq!(p.message_id, Some(MessageId::String("t1".into())));
        assert_eq!(p.content_type, Some(Symbol::from("text/plain")));
        assert_eq!(
            application(&m),
            vec![
                ("flag".to_owned(), None),
                ("empty".to_owned(), Some(String::new()))
            ]
        );
        let e = telemetry(Telemetry::new("x").property("a", "1").property("a", "2")).unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        assert!(telemetry(Telemetry::new("x").property("$.mid", "no")).is_err());
    }
}
