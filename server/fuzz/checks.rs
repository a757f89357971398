//! The checks of the local IoT Hub's fuzz targets, shared by `cargo fuzz` (nightly,
//! `fuzz_targets/`) and by the stable test suite (the tests of `server/src/fuzzing/`, a
//! bounded run of the same checks), so that both exercise exactly the same code. Each
//! function runs one entry point of `mqstate_server::fuzzing` (named `crate::fuzzing` where
//! this file is included) on `data` and panics (the finding) if the hub misbehaved: a panic
//! inside the hub, or an answer that breaks what the hub promises.

use std::time::{Duration, UNIX_EPOCH};

use crate::fuzzing;

/// The last second RFC 3339 can write (`mqstate_server::iothub::time::LATEST_UNIX_SECS`).
const LATEST_UNIX_SECS: u64 = 253_402_300_799;

/// An RFC 3339 time to the millisecond, as the hub writes every time: `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn assert_rfc3339_millis(text: &str) {
    let b = text.as_bytes();
    assert!(
        b.len() == 24
            && b[4] == b'-'
            && b[10] == b'T'
            && b[19] == b'.'
            && b[23] == b'Z'
            && b[..4].iter().all(u8::is_ascii_digit),
        "not an RFC 3339 time: {text:?}"
    );
}

/// Where a policy token is scoped (as `Policies::authenticate_for` reads `sr`).
fn scope(resource: &str) -> &str {
    resource
        .trim_start_matches("https://")
        .trim_end_matches('/')
}

/// SAS tokens: parsing, expiry and its RFC 3339 form never panic, whatever `se` is; what is
/// accepted is well-formed, unexpired and for the right resource; a token signed with a
/// known key round-trips and is accepted exactly when it should be.
pub fn sas_token(data: &[u8]) {
    let o = fuzzing::sas_token(data);
    let now = o.now;
    assert_rfc3339_millis(&o.hand_built.1);
    let raw = o.raw.expect("the fixed policies parse");
    if let Ok(t) = &raw.parsed {
        assert!(t.expiry <= LATEST_UNIX_SECS, "accepted se {}", t.expiry);
        assert_rfc3339_millis(raw.expiry_text.as_deref().expect("an expiry text"));
    }
    let device = format!("{}/devices/{}", fuzzing::HOSTNAME, fuzzing::DEVICE_ID);
    if let Ok(t) = &raw.validated {
        assert!(t.key_name.is_none());
        assert!(t.resource.eq_ignore_ascii_case(&device));
        assert!(t.expires_at() > now);
    }
    for grant in [&raw.service, &raw.device_policy].into_iter().flatten() {
        assert!(grant.expires_at > now);
    }

    let d = &o.derived;
    let token = d.token.as_ref().expect("the core signs with a valid key");
    let c = d.checks.as_ref().expect("checked");
    let in_range = d.expiry <= LATEST_UNIX_SECS;
    let live = in_range && UNIX_EPOCH + Duration::from_secs(d.expiry) > now;
    match &c.parsed {
        Ok(t) => {
            assert!(in_range, "{token}: se {} accepted", d.expiry);
            assert_eq!(t.resource, d.resource, "{token}: resource");
            assert_eq!(t.expiry, d.expiry, "{token}: se");
            assert_eq!(t.key_name.as_deref(), d.key_name, "{token}: skn");
        }
        Err(e) => assert!(!in_range, "{token}: refused: {e}"),
    }
    let device_signed = d.key_name.is_none() && d.key == fuzzing::DEVICE_KEY;
    let expect = device_signed && d.resource.eq_ignore_ascii_case(&device) && live;
    assert_eq!(c.validated.is_ok(), expect, "{token}: {:?}", c.validated);
    // Both policies sign with their own key here: only the scope and the time decide.
    let policy_signed = d.key_name.is_some();
    let expect = policy_signed && scope(&d.resource).eq_ignore_ascii_case("localhost") && live;
    assert_eq!(c.service.is_ok(), expect, "{token}: {:?}", c.service);
    let expect = policy_signed && scope(&d.resource).eq_ignore_ascii_case(&device) && live;
    assert_eq!(
        c.device_policy.is_ok(),
        expect,
        "{token}: {:?}",
        c.device_policy
    );
}

/// The REST API: no request makes the hub fail (5xx) or panic; every refusal the hub makes
/// carries IoT Hub's error body.
pub fn rest_request(data: &[u8]) {
    let Some(r) = fuzzing::rest_request(data).expect("the hub and its runtime") else {
        return;
    };
    let body = String::from_utf8_lossy(&r.body);
    assert!(
        r.status < 500,
        "{} (token {}): {} {body}",
        r.request,
        r.token,
        r.status
    );
    if let Some(code) = &r.error_code {
        assert!(
            r.status >= 400,
            "{}: {} with an error code",
            r.request,
            r.status
        );
        let json: serde_json::Value = serde_json::from_slice(&r.body)
            .unwrap_or_else(|e| panic!("{}: error body {body:?}: {e}", r.request));
        let message = json["Message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!("ErrorCode:{code};")),
            "{}: {body}",
            r.request
        );
        assert!(
            json["ExceptionMessage"].is_string(),
            "{}: {body}",
            r.request
        );
    }
}

/// AMQP messages: conversion never panics; a C2D message the hub accepts comes back to the
/// device, over AMQP, with the same body and properties; telemetry respects the size limit
/// and writes its expiry in RFC 3339.
pub fn amqp_convert(data: &[u8]) {
    let o = fuzzing::amqp_convert(data);
    assert!(o.setup.is_none(), "{:?}", o.setup);
    if let (Some(Ok((_, sent))), Some((id, Ok(())))) = (&o.c2d, &o.sent) {
        let again = o.redelivered.as_ref().expect("received back");
        let (raw, back) = again
            .as_ref()
            .unwrap_or_else(|e| panic!("{sent:?} to {id}: delivered message: {e}"));
        assert_eq!(raw, id);
        assert_eq!(back.payload, sent.payload);
        assert_eq!(back.message_id, sent.message_id);
        assert_eq!(back.correlation_id, sent.correlation_id);
        assert_eq!(back.user_id, sent.user_id);
        assert_eq!(back.content_type, sent.content_type);
        assert_eq!(back.content_encoding, sent.content_encoding);
        assert_eq!(back.properties, sent.properties);
        assert_eq!(back.ack, sent.ack);
    }
    if let Some(Ok((bag, body))) = &o.telemetry {
        assert!(body.len() <= fuzzing::MAX_BODY);
        for (name, value) in bag {
            if name == "$.exp" {
                assert_rfc3339_millis(value.as_deref().unwrap_or_default());
            }
        }
        assert!(o.stored_telemetry.is_some(), "telemetry not stored");
    }
}

/// MQTT 3.1.1: reading packets never panics and always makes progress; a CONNECT the hub
/// accepts is `d1`'s with a proper user name; the endpoint serving the same bytes ends (it
/// does not hang on a finite stream), writes only well-formed packets, and answers the first
/// CONNECT as the hub's own check does.
pub fn mqtt_connect(data: &[u8]) {
    let o = fuzzing::mqtt_connect(data);
    assert!(o.setup.is_none(), "{:?}", o.setup);
    let taken: usize = o.packets.iter().map(|(_, n)| n).sum();
    assert!(taken <= o.input_len);
    assert!(o.packets.iter().all(|(_, n)| *n > 0));
    for c in &o.connects {
        if c.accepted.is_ok() {
            assert_eq!(c.client_id, fuzzing::DEVICE_ID);
            let user = c.username.as_deref().unwrap_or_default();
            assert!(
                user.starts_with(&format!("{}/{}/?", fuzzing::HOSTNAME, fuzzing::DEVICE_ID)),
                "{user:?}"
            );
        }
    }
    let served = o.served.as_ref().expect("served");
    if let Err(why) = served {
        assert!(!why.contains("HUNG"), "{why}");
    }
    assert!(o.malformed_reply.is_none(), "{:?}", o.malformed_reply);
    let first_is_connect = o
        .packets
        .first()
        .is_some_and(|(p, _)| p.starts_with("Connect("));
    if let (true, Some(c)) = (first_is_connect, o.connects.first())
        && c.v4
        && !c.client_id.is_empty()
    {
        assert_eq!(
            o.connack,
            Some(c.accepted.is_ok()),
            "CONNACK {:?} for {c:?}; replies {:?}",
            o.connack,
            o.replies
        );
    }
}
