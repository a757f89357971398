//! Runs the shared RESP3 test vectors (`tests/vectors/*.json`), which the C, Python and
//! Node suites read too.

use bytes::{Bytes, BytesMut};
use mqstate::protocol::resp3::{
    self, KeyNotifyReply, NotifyOperation, Reply, Request, SetCondition, SetReply,
};
use mqstate::{Error, ServiceError};
use serde_json::Value;

use crate::common::vectors::load;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A byte field: `name` (ASCII text) or `name_hex` (base16).
fn bytes_of(case: &Value, name: &str) -> Option<Bytes> {
    if let Some(text) = case.get(name).and_then(Value::as_str) {
        assert!(text.is_ascii(), "{name} must be ASCII: {case}");
        return Some(Bytes::copy_from_slice(text.as_bytes()));
    }
    case.get(format!("{name}_hex"))
        .and_then(Value::as_str)
        .map(|h| Bytes::from(hex(h)))
}

fn condition_of(v: &Value) -> SetCondition {
    match v.get("condition").and_then(Value::as_str) {
        None => SetCondition::Always,
        Some("NX") => SetCondition::NotExists,
        Some("NEX") => SetCondition::NotExistsOrEqual,
        Some(other) => panic!("unknown condition {other}"),
    }
}

fn request_of(v: &Value) -> Request {
    if v["command"] == "SCAN" {
        return Request::Scan {
            pattern: bytes_of(v, "pattern").unwrap(),
            token: bytes_of(v, "token"),
        };
    }
    let key = bytes_of(v, "key").unwrap();
    let value = || bytes_of(v, "value").unwrap();
    match v["command"].as_str().unwrap() {
        "SET" => Request::Set {
            key,
            value: value(),
            condition: condition_of(v),
            expiry_ms: v.get("expiry_ms").and_then(Value::as_u64),
        },
        "GET" => Request::Get { key },
        "DEL" => Request::Del { key },
        "VDEL" => Request::Vdel {
            key,
            value: value(),
        },
        "KEYNOTIFY" => Request::KeyNotify {
            key,
            stop: v.get("stop").and_then(Value::as_bool).unwrap_or(false),
        },
        other => panic!("unknown command {other}"),
    }
}

#[test]
fn request_encodings_are_exact_and_decode_back() {
    let vectors = load("requests.json");
    let cases = vectors["encode"].as_array().unwrap();
    assert!(cases.len() >= 7);
    for case in cases {
        let expected = bytes_of(case, "bytes").unwrap();
        let request = request_of(case);
        let mut buf = BytesMut::new();
        request.encode(&mut buf);
        assert_eq!(buf.freeze(), expected, "{}", case["name"]);
        assert_eq!(
            resp3::decode_request(&expected).unwrap(),
            request,
            "{}",
            case["name"]
        );
    }
}

#[test]
fn request_decoding_cases() {
    let vectors = load("requests.json");
    for case in vectors["decode"].as_array().unwrap() {
        let payload = bytes_of(case, "payload").unwrap();
        let got = resp3::decode_request(&payload);
        match (
            case.get("request"),
            case.get("error").and_then(Value::as_str),
        ) {
            (Some(request), None) => {
                assert_eq!(got.unwrap(), request_of(request), "{}", case["name"])
            }
            (None, Some(kind)) => {
                let err = got.expect_err(case["name"].as_str().unwrap());
                assert_eq!(err.service_error().kind_str(), kind, "{}", case["name"]);
            }
            _ => panic!("bad case {case}"),
        }
    }
}

/// Decodes a reply as the command named in the vector and describes the result the way
/// the vectors do.
fn decode_as(command: &str, payload: &Bytes) -> Result<Value, Error> {
    Ok(match command {
        "SET" => match resp3::decode_set_reply(payload)? {
            SetReply::Applied => "applied".into(),
            SetReply::NotApplied => "not_applied".into(),
        },
        "GET" => match resp3::decode_get_reply(payload)? {
            None => serde_json::json!({ "value": null }),
            Some(v) => match std::str::from_utf8(&v) {
                Ok(text) if v.is_ascii() && !v.contains(&0) => serde_json::json!({ "value": text }),
                _ => serde_json::json!({
                    "value_hex": v.iter().map(|b| format!("{b:02X}")).collect::<String>()
                }),
            },
        },
        "DEL" | "VDEL" => serde_json::json!({ "count": resp3::decode_del_reply(payload)? }),
        "KEYNOTIFY" | "KEYNOTIFY_STOP" => {
            match resp3::decode_keynotify_reply(payload, command == "KEYNOTIFY_STOP")? {
                KeyNotifyReply::Ok => "ok".into(),
                KeyNotifyReply::NotObserved => "not_observed".into(),
            }
        }
        "SCAN" => {
            let page = resp3::decode_scan_reply(payload)?;
            let mut result = serde_json::Map::new();
            let text = |b: &Bytes| b.is_ascii() && !b.contains(&0) && !b.contains(&b'\r');
            if page.keys.iter().all(text) {
                let keys: Vec<Value> = page.keys.iter().map(|k| ascii(k).into()).collect();
                result.insert("keys".into(), keys.into());
            } else {
                let keys: Vec<Value> = page.keys.iter().map(|k| upper_hex(k).into()).collect();
                result.insert("keys_hex".into(), keys.into());
            }
            match &page.token {
                None => result.insert("token".into(), Value::Null),
                Some(t) if text(t) => result.insert("token".into(), ascii(t).into()),
                Some(t) => result.insert("token_hex".into(), upper_hex(t).into()),
            };
            Value::Object(result)
        }
        other => panic!("unknown command {other}"),
    })
}

fn ascii(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn upper_hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02X}")).collect()
}

#[test]
fn reply_decoding_cases() {
    let vectors = load("replies.json");
    let cases = vectors["cases"].as_array().unwrap();
    assert!(cases.len() > 50);
    for case in cases {
        let command = case["command"].as_str().unwrap();
        let payload = bytes_of(case, "payload").unwrap();
        let got = decode_as(command, &payload);
        let what = format!("{command} {case}");
        if let Some(result) = case.get("result") {
            assert_eq!(&got.unwrap(), result, "{what}");
            continue;
        }
        let expected = &case["error"];
        let err = got.expect_err(&what);
        assert_eq!(err.kind().as_str(), expected["kind"], "{what}");
        match &err {
            Error::Service(service) => {
                assert_eq!(service.kind_str(), expected["service"], "{what}");
                assert_eq!(service.text(), expected["text"], "{what}");
            }
            Error::UnexpectedPayload(decode) => {
                assert_eq!(decode.kind().as_str(), expected["decode"], "{what}");
                assert_eq!(decode.payload(), &payload);
                // The message names what was expected and shows what came.
                let message = err.to_string();
                assert!(message.contains(decode.expected()), "{message}");
                assert!(message.contains(&decode.excerpt()), "{message}");
            }
            other => panic!("{what}: unexpected error {other:?}"),
        }
    }
}

#[test]
fn server_reply_encodings_are_exact() {
    let vectors = load("server_replies.json");
    for case in vectors["encode"].as_array().unwrap() {
        let r = &case["reply"];
        let reply = match r["type"].as_str().unwrap() {
            "ok" => Reply::OK,
            "integer" => Reply::Integer(r["value"].as_i64().unwrap()),
            "nil" => Reply::Nil,
            "bulk" => Reply::Bulk(bytes_of(r, "value").unwrap()),
            "scan" => {
                let page = resp3::ScanPage {
                    keys: r["keys"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|k| Bytes::copy_from_slice(k.as_str().unwrap().as_bytes()))
                        .collect(),
                    token: bytes_of(r, "token"),
                };
                let mut buf = BytesMut::new();
                page.encode(&mut buf);
                assert_eq!(buf.len(), page.encoded_len(), "{case}");
                assert_eq!(buf.freeze(), bytes_of(case, "bytes").unwrap(), "{case}");
                continue;
            }
            "error" => {
                let kind = r["service"].as_str().unwrap();
                let e = ServiceError::KNOWN
                    .iter()
                    .find(|e| e.kind_str() == kind)
                    .unwrap();
                Reply::error(e)
            }
            other => panic!("unknown reply type {other}"),
        };
        let mut buf = BytesMut::new();
        reply.encode(&mut buf);
        assert_eq!(buf.freeze(), bytes_of(case, "bytes").unwrap(), "{case}");
    }
}

#[test]
fn notification_cases() {
    let vectors = load("notifications.json");
    for case in vectors["cases"].as_array().unwrap() {
        let payload = bytes_of(case, "payload").unwrap();
        let got = resp3::decode_notification(&payload);
        if let Some(kind) = case.get("error").and_then(Value::as_str) {
            assert_eq!(got.unwrap_err().kind().as_str(), kind, "{case}");
            continue;
        }
        let op = got.unwrap();
        let mut encoded = BytesMut::new();
        match case["operation"].as_str().unwrap() {
            "set" => {
                let value = bytes_of(case, "value").unwrap();
                resp3::encode_notify_set(&mut encoded, &value);
                assert_eq!(op, NotifyOperation::Set(value), "{case}");
            }
            "delete" => {
                resp3::encode_notify_delete(&mut encoded);
                assert_eq!(op, NotifyOperation::Delete, "{case}");
            }
            other => panic!("unknown operation {other}"),
        }
        if case["server_encodes_this"].as_bool().unwrap() {
            assert_eq!(encoded.freeze(), payload, "{case}");
        }
    }
}
