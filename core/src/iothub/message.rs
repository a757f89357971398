//! A cloud-to-device message as the device receives it: payload, typed system properties and
//! the application properties in order (null and empty kept apart, all URL-decoded).

use bytes::Bytes;

use super::properties::{self, Property};
use crate::protocol::errors::Error;

/// The C2D topic prefix for a device; the property bag follows it.
pub(crate) fn devicebound_prefix(device_id: &str) -> String {
    format!("devices/{device_id}/messages/devicebound/")
}

/// The telemetry topic for a device and an encoded property bag.
#[cfg_attr(
    not(feature = "client"),
    allow(dead_code, reason = "used by the device client only")
)]
pub(crate) fn events_topic(device_id: &str, bag: &str) -> String {
    format!("devices/{device_id}/messages/events/{bag}")
}

/// The decoded content of a C2D message (what [`super::C2dMessage`] derefs to).
///
/// ```
/// use mqstate::iothub::MessageContent;
/// let m = MessageContent::parse(
///     "devices/dev1/messages/devicebound/%24.mid=m1&%24.ct=text%2Fplain&colour=dark%20blue&flag&empty=",
///     "dev1",
///     bytes::Bytes::from_static(b"hello"),
/// )?;
/// assert_eq!(m.message_id.as_deref(), Some("m1"));
/// assert_eq!(m.content_type.as_deref(), Some("text/plain"));
/// assert_eq!(m.property("colour"), Some(Some("dark blue")));
/// assert_eq!(m.property("flag"), Some(None));
/// assert_eq!(m.property("empty"), Some(Some("")));
/// # Ok::<(), mqstate::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MessageContent {
    /// The body, as sent.
    pub payload: Bytes,
    /// `$.mid`: the message id (redeliveries of a message carry the same id).
    pub message_id: Option<String>,
    /// `$.cid`: the correlation id.
    pub correlation_id: Option<String>,
    /// `$.uid`: the user id.
    pub user_id: Option<String>,
    /// `$.to`: `/devices/{deviceId}/messages/devicebound`.
    pub to: Option<String>,
    /// `$.exp`: the expiry time (UTC, ISO 8601, as the hub sent it).
    pub expiry_time: Option<String>,
    /// `$.ct`: the content type.
    pub content_type: Option<String>,
    /// `$.ce`: the content encoding.
    pub content_encoding: Option<String>,
    /// `iothub-ack`: the feedback the sender asked for (`none`, `positive`, `negative`, `full`).
    pub ack: Option<String>,
    /// Other `$.`-prefixed system properties this version does not name, in order.
    pub other_system_properties: Vec<Property>,
    /// The application properties, in order: `(name, None)` for a null value (`name` on the
    /// wire), `(name, Some(""))` for an empty one (`name=`).
    pub properties: Vec<Property>,
    /// The full topic, undecoded.
    pub topic: String,
}

impl MessageContent {
    /// Decodes a message received on `topic` for `device_id`. A topic outside the device's
    /// devicebound tree or a malformed property bag is an [`Error::MalformedMessage`].
    pub fn parse(topic: &str, device_id: &str, payload: Bytes) -> Result<Self, Error> {
        Self::parse_owned(topic.to_owned(), &devicebound_prefix(device_id), payload)
    }

    /// [`MessageContent::parse`] for the device client: takes the topic it received (kept as
    /// is, no copy) and the device's [`devicebound_prefix`], made once per client.
    pub(crate) fn parse_owned(topic: String, prefix: &str, payload: Bytes) -> Result<Self, Error> {
        let Some(bag) = topic
            .strip_prefix(prefix)
            .or_else(|| topic.strip_prefix(prefix.trim_end_matches('/')))
        else {
            return Err(Error::MalformedMessage(format!(
                "message on {topic:?}, outside {prefix}#"
            )));
        };
        // The application properties stay where they were decoded, in order; the system
        // properties move out to their fields (no copy, no second vector).
        let mut properties = properties::decode(bag)?;
        let mut m = MessageContent {
            payload,
            message_id: None,
            correlation_id: None,
            user_id: None,
            to: None,
            expiry_time: None,
            content_type: None,
            content_encoding: None,
            ack: None,
            other_system_properties: Vec::new(),
            properties: Vec::new(),
            topic,
        };
        properties.retain_mut(|(name, value)| {
            let slot = match name.as_str() {
                "$.mid" => &mut m.message_id,
                "$.cid" => &mut m.correlation_id,
                "$.uid" => &mut m.user_id,
                "$.to" => &mut m.to,
                "$.exp" => &mut m.expiry_time,
                "$.ct" => &mut m.content_type,
                "$.ce" => &mut m.content_encoding,
                "iothub-ack" => &mut m.ack,
                n if n.starts_with("$.") => {
                    m.other_system_properties
                        .push((std::mem::take(name), value.take()));
                    return false;
                }
                _ => return true,
            };
            *slot = value.take();
            false
        });
        m.properties = properties;
        Ok(m)
    }

    /// The value of the first application property called `name`: `None` if absent,
    /// `Some(None)` if present with a null value, `Some(Some(v))` otherwise.
    pub fn property(&self, name: &str) -> Option<Option<&str>> {
        self.properties
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_deref())
    }
}

/// A device-to-cloud message for [`super::DeviceClient::send_event`].
///
/// ```
/// use mqstate::iothub::Telemetry;
/// let t = Telemetry::new(r#"{"temp":21.5}"#)
///     .content_type("application/json")
///     .property("alert", "false")
///     .null_property("flag");
/// assert_eq!(t.properties.len(), 2);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Telemetry {
    /// The body.
    pub payload: Bytes,
    /// `$.mid`.
    pub message_id: Option<String>,
    /// `$.cid`.
    pub correlation_id: Option<String>,
    /// `$.ct`.
    pub content_type: Option<String>,
    /// `$.ce`.
    pub content_encoding: Option<String>,
    /// Application properties in order (`None` = null value).
    pub properties: Vec<Property>,
}

impl Telemetry {
    /// A message with this body.
    pub fn new(payload: impl Into<Bytes>) -> Self {
        Telemetry {
            payload: payload.into(),
            ..Telemetry::default()
        }
    }
    /// Sets `$.mid`.
    #[must_use]
    pub fn message_id(mut self, id: impl Into<String>) -> Self {
        self.message_id = Some(id.into());
        self
    }
    /// Sets `$.cid`.
    #[must_use]
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.correlation_id = Some(id.into());
        self
    }
    /// Sets `$.ct`.
    #[must_use]
    pub fn content_type(mut self, ct: impl Into<String>) -> Self {
        self.content_type = Some(ct.into());
        self
    }
    /// Sets `$.ce`.
    #[must_use]
    pub fn content_encoding(mut self, ce: impl Into<String>) -> Self {
        self.content_encoding = Some(ce.into());
        self
    }
    /// Adds an application property with a value (possibly empty).
    #[must_use]
    pub fn property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.push((name.into(), Some(value.into())));
        self
    }
    /// Adds an application property with a null value (`name` without `=` on the wire).
    #[must_use]
    pub fn null_property(mut self, name: impl Into<String>) -> Self {
        self.properties.push((name.into(), None));
        self
    }
}

/// Builds the telemetry property bag: system properties first (`$.mid`, `$.cid`, `$.ct`,
/// `$.ce` when given), then the application properties, whose names are checked.
#[cfg_attr(
    not(feature = "client"),
    allow(dead_code, reason = "used by the device client only")
)]
pub(crate) fn telemetry_bag(event: &Telemetry) -> Result<String, Error> {
    let mut bag: Vec<Property> = Vec::new();
    for (name, value) in [
        ("$.mid", &event.message_id),
        ("$.cid", &event.correlation_id),
        ("$.ct", &event.content_type),
        ("$.ce", &event.content_encoding),
    ] {
        if let Some(v) = value {
            bag.push((name.to_owned(), Some(v.clone())));
        }
    }
    for (name, value) in &event.properties {
        properties::check_application_name(name)?;
        bag.push((name.clone(), value.clone()));
    }
    Ok(properties::encode(&bag))
}

/// A GUID's text form as IoT Hub writes it (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, lower
/// case, the bytes in order): lock tokens, and AMQP UUID message ids and property values, on
/// the device client's and on the local hub's side alike.
///
/// ```
/// let bytes = *b"\x01\x23\x45\x67\x89\xab\xcd\xef\x01\x23\x45\x67\x89\xab\xcd\xef";
/// assert_eq!(
///     mqstate::iothub::guid_text(&bytes),
///     "01234567-89ab-cdef-0123-456789abcdef"
/// );
/// ```
pub fn guid_text(bytes: &[u8; 16]) -> String {
    let mut out = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_system_property_is_typed() {
        // The topic the local hub's tests show byte for byte.
        let topic = "devices/d1/messages/devicebound/%24.mid=id%201&%24.to=%2Fdevices%2Fd1%2Fmessages%2Fdevicebound&%24.exp=2026-01-01T00%3A00%3A00.000Z&%24.cid=c&%24.uid=u&%24.ct=application%2Fjson&%24.ce=utf-8&iothub-ack=full&%24.x=y&n&e=";
        let m = MessageContent::parse(topic, "d1", Bytes::from_static(b"{}")).unwrap();
        assert_eq!(m.message_id.as_deref(), Some("id 1"));
        assert_eq!(m.to.as_deref(), Some("/devices/d1/messages/devicebound"));
        assert_eq!(m.expiry_time.as_deref(), Some("2026-01-01T00:00:00.000Z"));
        assert_eq!(m.correlation_id.as_deref(), Some("c"));
        assert_eq!(m.user_id.as_deref(), Some("u"));
        assert_eq!(m.content_type.as_deref(), Some("application/json"));
        assert_eq!(m.content_encoding.as_deref(), Some("utf-8"));
        assert_eq!(m.ack.as_deref(), Some("full"));
        assert_eq!(
            m.other_system_properties,
            vec![("$.x".into(), Some("y".into()))]
        );
        assert_eq!(
            m.properties,
            vec![("n".into(), None), ("e".into(), Some(String::new()))]
        );
    }

    #[test]
    fn bare_topic_and_bad_topics() {
        let m =
            MessageContent::parse("devices/d1/messages/devicebound", "d1", Bytes::new()).unwrap();
        assert!(m.properties.is_empty());
        let e = MessageContent::parse("devices/d2/messages/devicebound/", "d1", Bytes::new())
            .unwrap_err();
        assert!(e.to_string().contains("outside"), "{e}");
        let e = MessageContent::parse("devices/d1/messages/devicebound/a=%G1", "d1", Bytes::new())
            .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::UnexpectedPayload);
    }

    #[test]
    fn telemetry_bag_encodes_and_checks_names() {
        let t = super::super::Telemetry::new("x")
            .message_id("m 1")
            .content_type("application/json")
            .property("a/b", "1&2")
            .null_property("flag")
            .property("empty", "");
        assert_eq!(
            telemetry_bag(&t).unwrap(),
            "%24.mid=m%201&%24.ct=application%2Fjson&a%2Fb=1%262&flag&empty="
        );
        let t = super::super::Telemetry::new("x").property("$.mid", "no");
        assert!(telemetry_bag(&t).is_err());
    }
}
