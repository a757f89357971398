//! Property bags: the `key=value&key2&key3=` tail of IoT Hub's MQTT topics, each key and value
//! URL-encoded, a property with a null value written as its bare key and one with an empty
//! value as `key=` (the device SDKs for C, Python, Node and .NET read them this way).

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use super::error::IotHubError;

/// What is percent-encoded: everything but RFC 3986's unreserved characters (the encoding of
/// .NET's `Uri.EscapeDataString`, which the hub uses), so `$` is `%24` and `/` is `%2F`.
const ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// One property of a bag: a name and a value, which may be null (absent) or empty.
pub type Property = (String, Option<String>);

/// URL-encodes one key or value.
///
/// ```
/// use mqstate_server::iothub::properties::encode_component;
/// assert_eq!(encode_component("$.to"), "%24.to");
/// assert_eq!(encode_component("/devices/d1"), "%2Fdevices%2Fd1");
/// ```
pub fn encode_component(text: &str) -> String {
    utf8_percent_encode(text, ENCODE).to_string()
}

/// Encodes a property bag: `k=v` pairs joined by `&`, a null value as `k`, an empty one as `k=`.
///
/// ```
/// use mqstate_server::iothub::properties::encode;
/// let bag = vec![
///     ("$.mid".to_owned(), Some("m 1".to_owned())),
///     ("flag".to_owned(), None),
///     ("empty".to_owned(), Some(String::new())),
/// ];
/// assert_eq!(encode(&bag), "%24.mid=m%201&flag&empty=");
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

/// Decodes a property bag (the inverse of [`encode`]); an empty string is an empty bag.
///
/// ```
/// use mqstate_server::iothub::properties::decode;
/// let bag = decode("%24.ct=text%2Fplain&flag&e=").unwrap();
/// assert_eq!(bag[0], ("$.ct".to_owned(), Some("text/plain".to_owned())));
/// assert_eq!(bag[1], ("flag".to_owned(), None));
/// assert_eq!(bag[2], ("e".to_owned(), Some(String::new())));
/// assert!(decode("k=%FF").is_err());
/// ```
pub fn decode(bag: &str) -> Result<Vec<Property>, IotHubError> {
    let mut out = Vec::new();
    for pair in bag.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = match pair.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (pair, None),
        };
        let key = decode_component(key)?;
        if key.is_empty() {
            return Err(IotHubError::invalid(format!(
                "property bag {bag:?} has a property without a name"
            )));
        }
        let value = value.map(decode_component).transpose()?;
        out.push((key, value));
    }
    Ok(out)
}

fn decode_component(text: &str) -> Result<String, IotHubError> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| IotHubError::invalid(format!("{text:?} does not decode to UTF-8 text")))
}

/// Checks the name of an application property a service sets: a non-empty RFC 7230 token
/// (letters, digits and ``!#$%&'*+-.^_`|~``) of at most 128 characters, not one of the
/// reserved prefixes `$.` (system properties) and `iothub-` (the hub's own).
///
/// ```
/// use mqstate_server::iothub::properties::check_property_name;
/// assert!(check_property_name("temperature-unit").is_ok());
/// for bad in ["", "a b", "$.mid", "iothub-ack", "é"] {
///     assert!(check_property_name(bad).is_err(), "{bad}");
/// }
/// ```
pub fn check_property_name(name: &str) -> Result<(), IotHubError> {
    let bad = |why: &str| {
        Err(IotHubError::invalid(format!(
            "property name {name:?} {why}"
        )))
    };
    if name.is_empty() {
        return bad("is empty");
    }
    if name.len() > 128 {
        return bad("is longer than 128 characters");
    }
    if let Some(c) = name
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)))
    {
        return bad(&format!(
            "contains {c:?}; names are letters, digits and !#$%&'*+-.^_`|~"
        ));
    }
    if name.starts_with("$.") {
        return bad("starts with \"$.\", reserved for system properties");
    }
    if name.to_ascii_lowercase().starts_with("iothub-") {
        return bad("starts with \"iothub-\", reserved for the hub (set the ack mode with `ack`)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn round_trip_of_awkward_text() {
        let bag = vec![
            ("k&=".to_owned(), Some("a=b&c d/é%".to_owned())),
            ("n".to_owned(), None),
            ("e".to_owned(), Some(String::new())),
        ];
        let text = encode(&bag);
        assert!(!text.contains(' ') && !text.contains('/'), "{text}");
        assert_eq!(decode(&text).unwrap(), bag);
        assert_eq!(decode("").unwrap(), vec![]);
        assert!(decode("=v").is_err());
    }
}
