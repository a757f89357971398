//! Runs the shared topic vectors (`tests/vectors/topics.json`), which the C, Python and Node
//! suites read too.

use mqstate::protocol::topics::{self, TopicError};
use serde_json::Value;

use crate::common::vectors::{cases, load, str_of};

fn bytes_of(case: &Value, field: &str) -> Vec<u8> {
    case[field]
        .as_array()
        .unwrap_or_else(|| panic!("{field} must be an array: {case}"))
        .iter()
        .map(|n| u8::try_from(n.as_u64().unwrap()).unwrap())
        .collect()
}

/// An independent decoder, so that a bug in `hex_decode` cannot hide itself.
fn hex_field(case: &Value, field: &str) -> Vec<u8> {
    let s = str_of(case, field);
    assert!(s.len().is_multiple_of(2), "{field}: {case}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn usize_of(case: &Value, field: &str) -> usize {
    usize::try_from(case[field].as_u64().unwrap()).unwrap()
}

#[test]
fn constants() {
    let doc = load("topics.json");
    assert_eq!(str_of(&doc, "request_topic"), topics::REQUEST_TOPIC);
    assert_eq!(
        str_of(&doc, "forbidden_response_prefix"),
        topics::FORBIDDEN_RESPONSE_PREFIX
    );
}

#[test]
fn hex_encode() {
    let doc = load("topics.json");
    for case in cases(&doc, "hex_encode") {
        let bytes = bytes_of(case, "bytes");
        assert_eq!(topics::hex_encode(&bytes), str_of(case, "hex"), "{case}");
        assert_eq!(
            topics::hex_decode(str_of(case, "hex")).unwrap(),
            bytes,
            "{case}"
        );
    }
}

#[test]
fn hex_decode() {
    let doc = load("topics.json");
    for case in cases(&doc, "hex_decode") {
        let text = str_of(case, "text");
        let outcome = topics::hex_decode(text);
        match case.get("error") {
            None => assert_eq!(outcome.unwrap(), bytes_of(case, "bytes"), "{case}"),
            Some(_) => {
                let err = outcome.expect_err(&case.to_string());
                assert_eq!(err.kind_str(), str_of(case, "error"), "{case}: {err}");
                if case.get("position").is_some() {
                    assert!(
                        matches!(err, TopicError::InvalidHexChar { position, .. }
                            if position == usize_of(case, "position")),
                        "{case}: {err:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn response_topic() {
    let doc = load("topics.json");
    for case in cases(&doc, "response_topic") {
        let client_id = str_of(case, "client_id");
        let topic = topics::response_topic(client_id);
        assert_eq!(topic, str_of(case, "topic"), "{case}");
        let level = if case["encoded"].as_bool().unwrap() {
            topics::hex_encode(client_id.as_bytes())
        } else {
            client_id.to_owned()
        };
        assert_eq!(
            topic,
            format!("clients/{level}/services/statestore/_any_/command/invoke/response")
        );
        topics::validate_response_topic(&topic).unwrap_or_else(|e| panic!("{case}: {e}"));
    }
}

#[test]
fn validate_response_topic() {
    let doc = load("topics.json");
    for case in cases(&doc, "validate_response_topic") {
        let outcome = topics::validate_response_topic(str_of(case, "topic"));
        match (case.get("ok"), case.get("error")) {
            (Some(Value::Bool(true)), None) => assert_eq!(outcome, Ok(()), "{case}"),
            (None, Some(_)) => {
                let err = outcome.expect_err(&case.to_string());
                assert_eq!(err.kind_str(), str_of(case, "error"), "{case}: {err}");
            }
            _ => panic!("exactly one of ok and error: {case}"),
        }
    }
}

#[test]
fn notification_topic() {
    let doc = load("topics.json");
    for case in cases(&doc, "notification_topic") {
        let client_id = str_of(case, "client_id");
        let key = hex_field(case, "key_hex");
        let topic = topics::notification_topic(client_id, &key);
        assert_eq!(topic, str_of(case, "topic"), "{case}");
        assert_eq!(
            topics::notification_filter(client_id),
            str_of(case, "filter"),
            "{case}"
        );
        assert_eq!(
            topics::parse_notification_topic(&topic).unwrap(),
            (client_id.to_owned(), key),
            "{case}"
        );
    }
}

#[test]
fn parse_notification_topic() {
    let doc = load("topics.json");
    for case in cases(&doc, "parse_notification_topic") {
        let outcome = topics::parse_notification_topic(str_of(case, "topic"));
        if case.get("error").is_none() {
            let (client_id, key) = outcome.unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(client_id, str_of(case, "client_id"), "{case}");
            assert_eq!(key, hex_field(case, "key_hex"), "{case}");
            continue;
        }
        let err = outcome.expect_err(&case.to_string());
        assert_eq!(err.kind_str(), str_of(case, "error"), "{case}: {err}");
        if case.get("found").is_some() {
            assert_eq!(
                err,
                TopicError::WrongLevelCount {
                    found: usize_of(case, "found")
                },
                "{case}"
            );
        }
        if case.get("expected").is_some() {
            assert!(
                matches!(&err, TopicError::UnexpectedLevel { expected, .. }
                    if *expected == str_of(case, "expected")),
                "{case}: {err:?}"
            );
        }
        if case.get("field").is_some() {
            let field = match &err {
                TopicError::OddHexLength { field, .. }
                | TopicError::InvalidHexChar { field, .. } => *field,
                other => panic!("{case}: {other:?}"),
            };
            assert_eq!(field, str_of(case, "field"), "{case}");
        }
    }
}
