//! Property bags: the `key=value&key2&key3=` tail of IoT Hub's MQTT topics, each key and value
//! URL-encoded, a property with a null value written as its bare key and one with an empty
//! value as `key=` (the device SDKs for C, Python, Node and .NET read them this way).

use super::error::IotHubError;

// The property-bag codec is the device protocol's, so it lives once, in the core, beside the
// device client that reads what this hub writes: the hub only maps its errors.
pub use mqstate::iothub::properties::{Property, encode, encode_component};

/// Decodes a property bag, with the core's codec, into the hub's error type.
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
    mqstate::iothub::properties::decode(bag).map_err(|e| IotHubError::invalid(e.to_string()))
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
