//! The MQTT topics of the state store (docs/protocol.md sections 1 and 6): the request topic, the
//! response topic a client chooses and the rules it must follow, and the per-client
//! notification topics with their hex-encoded levels.
//!
//! ```
//! use mqstate::protocol::topics;
//!
//! assert_eq!(
//!     topics::response_topic("client-id1"),
//!     "clients/client-id1/services/statestore/_any_/command/invoke/response"
//! );
//! let topic = topics::notification_topic("client-id1", b"SOMEKEY");
//! assert_eq!(
//!     topic,
//!     "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/636C69656E742D696431/command/notify/534F4D454B4559"
//! );
//! let (client_id, key) = topics::parse_notification_topic(&topic).unwrap();
//! assert_eq!((client_id.as_str(), key.as_slice()), ("client-id1", &b"SOMEKEY"[..]));
//! ```

use std::fmt::Write as _;

use crate::protocol::resp3::escape_excerpt;

/// The topic the state store subscribes to and every request is published on.
pub const REQUEST_TOPIC: &str = "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke";

/// No response topic may start with this (the service's own namespace, where notifications
/// are published); the real service disconnects a client that uses one.
pub const FORBIDDEN_RESPONSE_PREFIX: &str =
    "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8";

/// The longest topic name MQTT can carry (a UTF-8 string with a 16-bit length).
pub const MAX_TOPIC_LEN: usize = 65_535;

/// How many bytes of a topic or a level an error message shows.
const EXCERPT_LEN: usize = 64;

/// The literal levels between the client id and the key of a notification topic.
const NOTIFY_LITERALS: [&str; 2] = ["command", "notify"];

/// What is wrong with a topic, or with a hex string.
///
/// Each variant has a stable snake_case name, [`TopicError::kind_str`], used by the shared
/// test vectors and the bindings.
///
/// ```
/// use mqstate::protocol::topics::{self, TopicError};
///
/// let err = topics::validate_response_topic(topics::REQUEST_TOPIC).unwrap_err();
/// assert_eq!(err, TopicError::RequestTopic);
/// assert_eq!(err.kind_str(), "request_topic");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopicError {
    /// A hex string has an odd number of digits.
    #[error("invalid hex in the {field}: odd number of digits ({len})")]
    OddHexLength {
        /// What held the hex: `"hex string"`, `"client id level"` or `"key level"`.
        field: &'static str,
        /// The number of characters.
        len: usize,
    },
    /// A hex string holds a character that is not a hex digit.
    #[error("invalid hex in the {field}: {ch:?} at byte {position} is not a hex digit")]
    InvalidHexChar {
        /// What held the hex: `"hex string"`, `"client id level"` or `"key level"`.
        field: &'static str,
        /// Byte offset of the character within that string.
        position: usize,
        /// The offending character.
        ch: char,
    },
    /// The topic is empty, which MQTT forbids.
    #[error("invalid topic: a topic name cannot be empty")]
    EmptyTopic,
    /// The topic is longer than MQTT can carry.
    #[error("invalid topic: {len} bytes long, more than the MQTT maximum of {MAX_TOPIC_LEN}")]
    TopicTooLong {
        /// The topic's length in bytes.
        len: usize,
    },
    /// The topic holds a wildcard, which MQTT forbids in a topic name (it is a filter).
    #[error(
        "invalid topic: wildcard {ch:?} at byte {position}; a topic name cannot hold '+' or '#'"
    )]
    Wildcard {
        /// Byte offset of the wildcard.
        position: usize,
        /// `'+'` or `'#'`.
        ch: char,
    },
    /// The topic holds a NUL character, which MQTT forbids in any string.
    #[error("invalid topic: NUL character at byte {position}")]
    NulCharacter {
        /// Byte offset of the NUL.
        position: usize,
    },
    /// The response topic is the request topic itself.
    #[error("forbidden response topic: it is the request topic \"{REQUEST_TOPIC}\"")]
    RequestTopic,
    /// The response topic is in the service's reserved namespace.
    #[error(
        "forbidden response topic: it starts with the reserved prefix \"{FORBIDDEN_RESPONSE_PREFIX}\""
    )]
    ReservedPrefix,
    /// The topic does not start with `{FORBIDDEN_RESPONSE_PREFIX}/`.
    #[error(
        "not a notification topic: \"{}\" does not start with \"{FORBIDDEN_RESPONSE_PREFIX}/\"",
        escape_excerpt(.topic.as_bytes(), EXCERPT_LEN)
    )]
    WrongPrefix {
        /// The topic as received.
        topic: String,
    },
    /// The notification topic does not have exactly 4 levels after the prefix.
    #[error(
        "not a notification topic: expected 4 levels after the prefix ({{client id}}/command/notify/{{key}}), found {found}"
    )]
    WrongLevelCount {
        /// The number of levels found after the prefix.
        found: usize,
    },
    /// A literal level of the notification topic is not the expected word.
    #[error(
        "not a notification topic: expected the level \"{expected}\", found \"{}\"",
        escape_excerpt(.found.as_bytes(), EXCERPT_LEN)
    )]
    UnexpectedLevel {
        /// The level the protocol has there (`"command"` or `"notify"`).
        expected: &'static str,
        /// The level found.
        found: String,
    },
    /// The client id level decodes to bytes that are not UTF-8.
    #[error(
        "invalid notification topic: the client id level decodes to bytes that are not UTF-8: \"{}\"",
        escape_excerpt(.bytes, EXCERPT_LEN)
    )]
    ClientIdNotUtf8 {
        /// The decoded bytes.
        bytes: Vec<u8>,
    },
}

impl TopicError {
    /// A stable snake_case name of the variant (`"odd_hex_length"`, `"invalid_hex_char"`,
    /// `"empty_topic"`, `"topic_too_long"`, `"wildcard"`, `"nul_character"`, `"request_topic"`,
    /// `"reserved_prefix"`, `"wrong_prefix"`, `"wrong_level_count"`, `"unexpected_level"`,
    /// `"client_id_not_utf8"`).
    ///
    /// ```
    /// use mqstate::protocol::topics;
    ///
    /// assert_eq!(topics::hex_decode("ABC").unwrap_err().kind_str(), "odd_hex_length");
    /// ```
    pub fn kind_str(&self) -> &'static str {
        match self {
            TopicError::OddHexLength { .. } => "odd_hex_length",
            TopicError::InvalidHexChar { .. } => "invalid_hex_char",
            TopicError::EmptyTopic => "empty_topic",
            TopicError::TopicTooLong { .. } => "topic_too_long",
            TopicError::Wildcard { .. } => "wildcard",
            TopicError::NulCharacter { .. } => "nul_character",
            TopicError::RequestTopic => "request_topic",
            TopicError::ReservedPrefix => "reserved_prefix",
            TopicError::WrongPrefix { .. } => "wrong_prefix",
            TopicError::WrongLevelCount { .. } => "wrong_level_count",
            TopicError::UnexpectedLevel { .. } => "unexpected_level",
            TopicError::ClientIdNotUtf8 { .. } => "client_id_not_utf8",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Hex (RFC 4648 base16)
// ---------------------------------------------------------------------------------------------

/// Encodes bytes as RFC 4648 base16, upper case (the form the protocol's topics use).
///
/// ```
/// use mqstate::protocol::topics::hex_encode;
///
/// assert_eq!(hex_encode(b"SOMEKEY"), "534F4D454B4559");
/// assert_eq!(hex_encode(&[0x00, 0xab, 0xff]), "00ABFF");
/// assert_eq!(hex_encode(b""), "");
/// ```
pub fn hex_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        // `{:02X}` on a String cannot fail.
        let _ = write!(out, "{b:02X}");
    }
    out
}

/// Decodes RFC 4648 base16 in either case (the protocol's clients must accept both).
///
/// ```
/// use mqstate::protocol::topics::{hex_decode, TopicError};
///
/// assert_eq!(hex_decode("00abFF").unwrap(), vec![0x00, 0xab, 0xff]);
/// assert_eq!(hex_decode("").unwrap(), Vec::<u8>::new());
/// assert!(matches!(
///     hex_decode("0G"),
///     Err(TopicError::InvalidHexChar { position: 1, ch: 'G', .. })
/// ));
/// assert!(matches!(hex_decode("ABC"), Err(TopicError::OddHexLength { len: 3, .. })));
/// ```
pub fn hex_decode(s: &str) -> Result<Vec<u8>, TopicError> {
    decode_hex_field(s, "hex string")
}

fn decode_hex_field(s: &str, field: &'static str) -> Result<Vec<u8>, TopicError> {
    let mut out = Vec::with_capacity(s.len() / 2);
    let mut high: Option<u8> = None;
    for (position, ch) in s.char_indices() {
        // A hex digit is below 16, so the conversion to u8 never fails.
        let Some(digit) = ch.to_digit(16).and_then(|d| u8::try_from(d).ok()) else {
            return Err(TopicError::InvalidHexChar {
                field,
                position,
                ch,
            });
        };
        match high.take() {
            None => high = Some(digit),
            Some(h) => out.push(h << 4 | digit),
        }
    }
    if high.is_some() {
        return Err(TopicError::OddHexLength {
            field,
            len: s.len(),
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Response topics
// ---------------------------------------------------------------------------------------------

/// Whether a client id must be hex-encoded to become one topic level.
fn needs_encoding(client_id: &str) -> bool {
    client_id.contains(['+', '#', '/', '\0'])
}

/// The recommended response topic for a client:
/// `clients/{clientId}/services/statestore/_any_/command/invoke/response`.
///
/// A client id that cannot be one topic level as is (containing `+`, `#`, `/` or NUL) is
/// replaced by its upper-case hex encoding, as the Go SDK does. The encoded form is not
/// marked, so a client named `612F62` and a client named `a/b` share a response topic. That is
/// tolerated rather than escaped away: each then also receives the other's responses and drops
/// them, as their correlation data is unknown to it.
///
/// An empty client id gives an empty level (`clients//services/...`), a valid topic; hex of
/// nothing would be the same. A client that connected with an empty id should pass the
/// identifier the broker assigned instead.
///
/// ```
/// use mqstate::protocol::topics::response_topic;
///
/// assert_eq!(
///     response_topic("c1"),
///     "clients/c1/services/statestore/_any_/command/invoke/response"
/// );
/// assert_eq!(
///     response_topic("a/b"),
///     "clients/612F62/services/statestore/_any_/command/invoke/response"
/// );
/// ```
pub fn response_topic(client_id: &str) -> String {
    let level = if needs_encoding(client_id) {
        hex_encode(client_id.as_bytes())
    } else {
        client_id.to_owned()
    };
    format!("clients/{level}/services/statestore/_any_/command/invoke/response")
}

/// Checks that a topic may be used as the response topic of a request.
///
/// The rules, checked in this order: MQTT's rules for a topic name (not empty, at most
/// 65,535 bytes, no NUL, no `+` or `#`), then the protocol's (not the request topic, and not
/// starting with [`FORBIDDEN_RESPONSE_PREFIX`], compared byte-wise and case-sensitively as
/// MQTT compares topics; a plain string prefix, so `...0FE8x` is refused too).
///
/// ```
/// use mqstate::protocol::topics::{self, validate_response_topic};
///
/// assert!(validate_response_topic(&topics::response_topic("c1")).is_ok());
/// assert_eq!(
///     validate_response_topic("clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/x")
///         .unwrap_err()
///         .kind_str(),
///     "reserved_prefix"
/// );
/// assert_eq!(validate_response_topic("a/+/b").unwrap_err().kind_str(), "wildcard");
/// ```
pub fn validate_response_topic(topic: &str) -> Result<(), TopicError> {
    if topic.is_empty() {
        return Err(TopicError::EmptyTopic);
    }
    if topic.len() > MAX_TOPIC_LEN {
        return Err(TopicError::TopicTooLong { len: topic.len() });
    }
    if let Some(position) = topic.find('\0') {
        return Err(TopicError::NulCharacter { position });
    }
    if let Some((position, ch)) = topic.char_indices().find(|&(_, c)| c == '+' || c == '#') {
        return Err(TopicError::Wildcard { position, ch });
    }
    if topic == REQUEST_TOPIC {
        return Err(TopicError::RequestTopic);
    }
    if topic.starts_with(FORBIDDEN_RESPONSE_PREFIX) {
        return Err(TopicError::ReservedPrefix);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Notification topics
// ---------------------------------------------------------------------------------------------

/// The topic on which the state store publishes changes of `key` to the client `client_id`:
/// `{FORBIDDEN_RESPONSE_PREFIX}/{HEX(clientId)}/command/notify/{HEX(key)}`, upper-case hex.
///
/// ```
/// use mqstate::protocol::topics::notification_topic;
///
/// assert_eq!(
///     notification_topic("client-id1", b"SOMEKEY"),
///     "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/636C69656E742D696431/command/notify/534F4D454B4559"
/// );
/// ```
pub fn notification_topic(client_id: &str, key: &[u8]) -> String {
    format!(
        "{FORBIDDEN_RESPONSE_PREFIX}/{}/command/notify/{}",
        hex_encode(client_id.as_bytes()),
        hex_encode(key)
    )
}

/// The filter a client subscribes to, before sending KEYNOTIFY, to receive the notifications
/// of all its keys: [`notification_topic`] with `+` as the key level.
///
/// ```
/// use mqstate::protocol::topics::notification_filter;
///
/// assert_eq!(
///     notification_filter("client-id1"),
///     "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/636C69656E742D696431/command/notify/+"
/// );
/// ```
pub fn notification_filter(client_id: &str) -> String {
    format!(
        "{FORBIDDEN_RESPONSE_PREFIX}/{}/command/notify/+",
        hex_encode(client_id.as_bytes())
    )
}

/// Reads the client id and the key back from a notification topic; the exact inverse of
/// [`notification_topic`], accepting hex in either case.
///
/// The structure is checked exactly: the prefix, then 4 levels (client id, `command`,
/// `notify`, key; the literals are case-sensitive), each hex level well formed, and the client
/// id UTF-8. An empty level decodes to an empty client id or key (what
/// [`notification_topic`] writes for them); refusing an empty key is the caller's business.
///
/// ```
/// use mqstate::protocol::topics::parse_notification_topic;
///
/// let topic = "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/6331/command/notify/00ff";
/// let (client_id, key) = parse_notification_topic(topic).unwrap();
/// assert_eq!(client_id, "c1");
/// assert_eq!(key, vec![0x00, 0xff]);
///
/// let err = parse_notification_topic("clients/c1/command/notify/00").unwrap_err();
/// assert_eq!(err.kind_str(), "wrong_prefix");
/// ```
pub fn parse_notification_topic(topic: &str) -> Result<(String, Vec<u8>), TopicError> {
    let Some(rest) = topic
        .strip_prefix(FORBIDDEN_RESPONSE_PREFIX)
        .and_then(|rest| rest.strip_prefix('/'))
    else {
        return Err(TopicError::WrongPrefix {
            topic: topic.to_owned(),
        });
    };
    let levels: Vec<&str> = rest.split('/').collect();
    let [client_hex, command, notify, key_hex] = levels.as_slice() else {
        return Err(TopicError::WrongLevelCount {
            found: levels.len(),
        });
    };
    for (found, expected) in [command, notify].into_iter().zip(NOTIFY_LITERALS) {
        if *found != expected {
            return Err(TopicError::UnexpectedLevel {
                expected,
                found: (*found).to_owned(),
            });
        }
    }
    let client_id = decode_hex_field(client_hex, "client id level")?;
    let key = decode_hex_field(key_hex, "key level")?;
    let client_id = String::from_utf8(client_id).map_err(|e| TopicError::ClientIdNotUtf8 {
        bytes: e.into_bytes(),
    })?;
    Ok((client_id, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = FORBIDDEN_RESPONSE_PREFIX;

    #[test]
    fn hex_round_trips_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let hex = hex_encode(&all);
        assert_eq!(hex.len(), 512);
        assert!(hex.starts_with("000102") && hex.ends_with("FDFEFF"));
        assert_eq!(hex_decode(&hex).unwrap(), all);
        assert_eq!(hex_decode(&hex.to_lowercase()).unwrap(), all);
    }

    #[test]
    fn hex_errors_name_the_position_and_char() {
        let err = hex_decode("00é0").unwrap_err();
        assert_eq!(
            err,
            TopicError::InvalidHexChar {
                field: "hex string",
                position: 2,
                ch: 'é'
            }
        );
        assert_eq!(
            err.to_string(),
            "invalid hex in the hex string: 'é' at byte 2 is not a hex digit"
        );
        // A bad character is reported even when the length is odd too.
        assert_eq!(
            hex_decode("0 0").unwrap_err().kind_str(),
            "invalid_hex_char"
        );
        assert_eq!(hex_decode("+").unwrap_err().kind_str(), "invalid_hex_char");
        assert_eq!(
            hex_decode("abc").unwrap_err().to_string(),
            "invalid hex in the hex string: odd number of digits (3)"
        );
    }

    #[test]
    fn response_topic_encodes_only_what_it_must() {
        let level = |id: &str| {
            response_topic(id)
                .strip_prefix("clients/")
                .and_then(|t| t.strip_suffix("/services/statestore/_any_/command/invoke/response"))
                .unwrap()
                .to_owned()
        };
        assert_eq!(level("x:y.z-é $"), "x:y.z-é $");
        assert_eq!(level("41"), "41");
        assert_eq!(level("a+b"), "612B62");
        assert_eq!(level("#"), "23");
        assert_eq!(level("/"), "2F");
        assert_eq!(level("a\0"), "6100");
        // Hex of nothing is nothing: an empty level, which MQTT allows.
        assert_eq!(level(""), "");
        for id in ["", "a+b", "#", "/", "a\0", "c1"] {
            validate_response_topic(&response_topic(id)).unwrap();
        }
    }

    #[test]
    fn validation_reports_which_rule_failed() {
        let kind = |t: &str| validate_response_topic(t).map_err(|e| e.kind_str());
        assert_eq!(kind("a"), Ok(()));
        assert_eq!(kind("/"), Ok(()));
        assert_eq!(kind(""), Err("empty_topic"));
        assert_eq!(kind(&"a".repeat(MAX_TOPIC_LEN)), Ok(()));
        assert_eq!(kind(&"a".repeat(MAX_TOPIC_LEN + 1)), Err("topic_too_long"));
        assert_eq!(kind("a\0b"), Err("nul_character"));
        assert_eq!(kind("a/#"), Err("wildcard"));
        assert_eq!(kind(REQUEST_TOPIC), Err("request_topic"));
        assert_eq!(kind(&format!("{REQUEST_TOPIC}/x")), Ok(()));
        assert_eq!(kind(P), Err("reserved_prefix"));
        assert_eq!(kind(&format!("{P}x")), Err("reserved_prefix"));
        assert_eq!(kind(&P.to_lowercase()), Ok(()));
        assert_eq!(
            validate_response_topic("x/y+").unwrap_err(),
            TopicError::Wildcard {
                position: 3,
                ch: '+'
            }
        );
        assert_eq!(
            validate_response_topic("x\0").unwrap_err(),
            TopicError::NulCharacter { position: 1 }
        );
    }

    #[test]
    fn notification_topic_matches_the_protocol_example() {
        let topic = notification_topic("client-id1", b"SOMEKEY");
        assert_eq!(
            topic,
            format!("{P}/636C69656E742D696431/command/notify/534F4D454B4559")
        );
        assert_eq!(
            notification_filter("client-id1"),
            format!("{P}/636C69656E742D696431/command/notify/+")
        );
        assert_eq!(
            parse_notification_topic(&topic.to_lowercase().replace(&P.to_lowercase(), P)),
            Ok(("client-id1".to_owned(), b"SOMEKEY".to_vec()))
        );
    }

    #[test]
    fn notification_topic_round_trips_empty_and_binary_parts() {
        for (id, key) in [("", &b""[..]), ("a/b+#", b"\0\r\n\xff"), ("é", b"k")] {
            let topic = notification_topic(id, key);
            assert_eq!(
                parse_notification_topic(&topic).unwrap(),
                (id.to_owned(), key.to_vec())
            );
        }
    }

    #[test]
    fn notification_parse_checks_the_exact_structure() {
        let parse = |t: String| parse_notification_topic(&t).unwrap_err();
        assert_eq!(
            parse(P.to_owned()),
            TopicError::WrongPrefix {
                topic: P.to_owned()
            }
        );
        assert_eq!(
            parse(format!("{P}6331/command/notify/00")).kind_str(),
            "wrong_prefix"
        );
        assert_eq!(
            parse(format!("x{P}/6331/command/notify/00")).kind_str(),
            "wrong_prefix"
        );
        assert_eq!(
            parse(format!("{P}/6331/command/notify")),
            TopicError::WrongLevelCount { found: 3 }
        );
        assert_eq!(
            parse(format!("{P}/6331/command/notify/00/")),
            TopicError::WrongLevelCount { found: 5 }
        );
        assert_eq!(
            parse(format!("{P}/6331/Command/notify/00")),
            TopicError::UnexpectedLevel {
                expected: "command",
                found: "Command".to_owned()
            }
        );
        assert_eq!(
            parse(format!("{P}/6331/command/invoke/00")),
            TopicError::UnexpectedLevel {
                expected: "notify",
                found: "invoke".to_owned()
            }
        );
        assert_eq!(
            parse(format!("{P}/633/command/notify/00")),
            TopicError::OddHexLength {
                field: "client id level",
                len: 3
            }
        );
        assert_eq!(
            parse(format!("{P}/6331/command/notify/0+")),
            TopicError::InvalidHexChar {
                field: "key level",
                position: 1,
                ch: '+'
            }
        );
        let err = parse(format!("{P}/FF/command/notify/00"));
        assert_eq!(err, TopicError::ClientIdNotUtf8 { bytes: vec![0xff] });
        assert_eq!(
            err.to_string(),
            "invalid notification topic: the client id level decodes to bytes that are not UTF-8: \"\\xff\""
        );
    }

    #[test]
    fn messages_say_what_was_wrong() {
        let err = parse_notification_topic("nope\r\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("not a notification topic: \"nope\\r\\n\" does not start with \"{P}/\"")
        );
        assert_eq!(
            TopicError::WrongLevelCount { found: 2 }.to_string(),
            "not a notification topic: expected 4 levels after the prefix ({client id}/command/notify/{key}), found 2"
        );
        assert!(TopicError::ReservedPrefix.to_string().contains(P));
        assert!(TopicError::RequestTopic.to_string().contains(REQUEST_TOPIC));
    }
}
