//! IoT Hub property bags: the `key=value&key2&key3=` tail of a device topic.
//!
//! Every name and value is URL-encoded on the wire. A property without `=` has a **null**
//! value (`None`), a property with `=` and nothing after it an **empty** value (`Some("")`);
//! the two are kept apart in both directions, which the official SDKs are known not to do.
//! Order is kept, and so are repeated names.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use crate::protocol::errors::Error;

/// One property: a name and a value that may be null (`None`) or empty (`Some("")`).
pub type Property = (String, Option<String>);

/// What is left unencoded: RFC 3986's unreserved characters, as IoT Hub and its SDKs encode.
const ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// URL-encodes one name or value.
///
/// ```
/// use mqstate::iothub::properties::encode_component;
/// assert_eq!(encode_component("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
/// ```
pub fn encode_component(text: &str) -> String {
    utf8_percent_encode(text, ENCODE).to_string()
}

/// Encodes a property bag (names and values URL-encoded, null as `key`, empty as `key=`).
///
/// ```
/// use mqstate::iothub::properties::encode;
/// let bag = vec![
///     ("$.ct".to_owned(), Some("application/json".to_owned())),
///     ("flag".to_owned(), None),
///     ("empty".to_owned(), Some(String::new())),
/// ];
/// assert_eq!(encode(&bag), "%24.ct=application%2Fjson&flag&empty=");
/// ```
pub fn encode(bag: &[Property]) -> String {
    let mut out = String::new();
    for (i, (key, value)) in bag.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(&encode_component(key));
        if let Some(value) = value {
            out.push('=');
            out.push_str(&encode_component(value));
        }
    }
    out
}

/// Decodes a property bag. Names and values are URL-decoded; `+` is a literal plus (IoT Hub
/// encodes spaces as `%20`). A pair without a name, a `%` not followed by two hex digits, or
/// bytes that are not UTF-8 after decoding are an [`Error::MalformedMessage`] naming the pair.
///
/// ```
/// use mqstate::iothub::properties::decode;
/// let bag = decode("%24.mid=m%201&flag&empty=&k=a%3Db").unwrap();
/// assert_eq!(bag, vec![
///     ("$.mid".to_owned(), Some("m 1".to_owned())),
///     ("flag".to_owned(), None),
///     ("empty".to_owned(), Some(String::new())),
///     ("k".to_owned(), Some("a=b".to_owned())),
/// ]);
/// ```
pub fn decode(bag: &str) -> Result<Vec<Property>, Error> {
    let mut out = Vec::with_capacity(bag.bytes().filter(|&b| b == b'&').count() + 1);
    for pair in bag.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = match pair.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (pair, None),
        };
        let key = decode_component(key, pair)?;
        if key.is_empty() {
            return Err(Error::MalformedMessage(format!(
                "property bag {bag:?}: the pair {pair:?} has no name"
            )));
        }
        let value = value.map(|v| decode_component(v, pair)).transpose()?;
        out.push((key, value));
    }
    Ok(out)
}

fn decode_component(text: &str, pair: &str) -> Result<String, Error> {
    // percent_decode_str passes a stray `%` through; IoT Hub never sends one, so it is a
    // malformed bag rather than a value to guess at.
    let bytes = text.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'%' {
            let ok = bytes
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
            if !ok {
                return Err(Error::MalformedMessage(format!(
                    "property {pair:?}: '%' not followed by two hexadecimal digits"
                )));
            }
        }
    }
    percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| {
            Error::MalformedMessage(format!("property {pair:?} does not decode to UTF-8 text"))
        })
}

/// Checks an application property name a device sends: not empty, not a reserved system
/// name (`$.` prefix, `iothub-` prefix).
#[cfg_attr(
    not(feature = "client"),
    allow(dead_code, reason = "used by the device client only")
)]
pub(crate) fn check_application_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::InvalidArgument(
            "an application property name is empty".into(),
        ));
    }
    if name.starts_with("$.") {
        return Err(Error::InvalidArgument(format!(
            "application property {name:?} starts with \"$.\", reserved for system properties"
        )));
    }
    if name.to_ascii_lowercase().starts_with("iothub-") {
        return Err(Error::InvalidArgument(format!(
            "application property {name:?} starts with \"iothub-\", reserved for the hub"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn documented_example_topic_tail() {
        // The shape of a C2D topic tail as IoT Hub sends it.
        let bag = decode(
            "%24.mid=0987654321&%24.to=%2Fdevices%2Fdev1%2Fmessages%2Fdevicebound&iothub-ack=full&temp=21.5",
        )
        .unwrap();
        assert_eq!(bag[0], ("$.mid".into(), Some("0987654321".into())));
        assert_eq!(
            bag[1],
            (
                "$.to".into(),
                Some("/devices/dev1/messages/devicebound".into())
            )
        );
        assert_eq!(bag[2], ("iothub-ack".into(), Some("full".into())));
        assert_eq!(bag[3], ("temp".into(), Some("21.5".into())));
    }

    #[test]
    fn null_and_empty_are_different() {
        let bag = decode("a&b=").unwrap();
        assert_eq!(
            bag,
            vec![("a".into(), None), ("b".into(), Some(String::new()))]
        );
        assert_eq!(encode(&bag), "a&b=");
    }

    #[test]
    fn plus_is_a_plus_and_order_and_repeats_are_kept() {
        let bag = decode("k=1+1&k=2&z=%2B").unwrap();
        assert_eq!(
            bag,
            vec![
                ("k".into(), Some("1+1".into())),
                ("k".into(), Some("2".into())),
                ("z".into(), Some("+".into())),
            ]
        );
    }

    #[test]
    fn malformed_bags_name_the_pair() {
        let e = decode("good=1&=x").unwrap_err();
        assert!(e.to_string().contains("\"=x\" has no name"), "{e}");
        let e = decode("k=%zz").unwrap_err();
        assert!(e.to_string().contains("two hexadecimal digits"), "{e}");
        let e = decode("k=%ff").unwrap_err();
        assert!(e.to_string().contains("UTF-8"), "{e}");
        assert_eq!(e.kind(), crate::ErrorKind::UnexpectedPayload);
        assert_eq!(decode("").unwrap(), vec![]);
    }

    #[test]
    fn reserved_names_are_refused() {
        assert!(check_application_name("$.mid").is_err());
        assert!(check_application_name("IoTHub-ack").is_err());
        assert!(check_application_name("").is_err());
        assert!(check_application_name("temp").is_ok());
    }

    proptest! {
        #[test]
        fn any_bag_round_trips(bag in proptest::collection::vec(
            ("[^\\x00]{1,12}", proptest::option::of("[^\\x00]{0,12}")), 0..6)) {
            let encoded = encode(&bag);
            prop_assert!(!encoded.contains('/') && !encoded.contains('#') && !encoded.contains('+'));
            prop_assert_eq!(decode(&encoded).unwrap(), bag);
        }
    }
}
