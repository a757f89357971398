//! Entry points of the local IoT Hub's fuzz targets: the network parsers a peer's bytes reach
//! before anything trusts them. `server/fuzz` (cargo-fuzz, nightly) runs them with the
//! `fuzzing` feature; this module's tests run the same checks (`server/fuzz/checks.rs`) on a
//! bounded number of inputs on stable, as part of `cargo test`.
//!
//! Each function takes arbitrary bytes, feeds them through the hub's real code (a hub made in
//! process, no network) and returns what happened, for the checks to judge. None of them may
//! panic, whatever the input: a panic is a finding. Not a supported API.
//!
//! - [`sas_token`]: SAS token parsing, expiry, its RFC 3339 form, device and policy checks.
//! - [`rest_request`]: a request to the HTTPS REST API's router (registry and device routes).
//! - [`amqp_convert`]: an AMQP message (decoded as fe2o3 decodes a transfer) converted as a
//!   C2D message (sent, received back, converted again) and as telemetry.
//! - [`mqtt_connect`]: MQTT 3.1.1 packets read as the device endpoint reads them; each CONNECT
//!   checked by the hub; the whole stream served by the device endpoint over an in-memory pipe.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;

use crate::iothub::policies::{self, Policies, ServiceGrant};
use crate::iothub::properties::Property;
use crate::iothub::sas::{self, SasToken};
use crate::iothub::{Ack, C2dMessage, DeviceSpec, IotHub, IotHubConfig, IotHubError, time};

/// The crate-private functions the entry points call. Their modules are private to
/// `iothub`, so each adds its function to this type (`rest.rs`, `amqp/convert.rs`,
/// `endpoint.rs`), compiled only with this module.
#[derive(Debug)]
pub(crate) struct Hooks;

/// The hub's host name.
pub const HOSTNAME: &str = "localhost";
/// The registered device the targets address.
pub const DEVICE_ID: &str = "d1";
/// `d1`'s primary key (base64 of the bytes 0 to 31).
pub const DEVICE_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
/// The `iothubowner` policy's key in [`sas_token`]'s policies (bytes 32 to 63).
pub const OWNER_KEY: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
/// The `device` policy's key (DeviceConnect) in [`sas_token`]'s policies (bytes 64 to 95).
pub const DEVICE_POLICY_KEY: &str = "QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8=";
/// A valid key that signs nothing the hub knows (bytes 96 to 127).
pub const OTHER_KEY: &str = "YGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn8=";
/// The largest C2D and telemetry bodies of the fuzzed hubs (small, so that both refusals are
/// reached).
pub const MAX_BODY: usize = 512;

/// [`sas_token`]'s shared access policies.
fn fixed_policies() -> Result<Policies, IotHubError> {
    Policies::parse(&format!(
        r#"[{{"keyName":"iothubowner","rights":["RegistryWrite","ServiceConnect","DeviceConnect"],
             "primaryKey":"{OWNER_KEY}","secondaryKey":"{OWNER_KEY}"}},
            {{"keyName":"device","rights":["DeviceConnect"],
             "primaryKey":"{DEVICE_POLICY_KEY}","secondaryKey":"{DEVICE_POLICY_KEY}"}}]"#
    ))
}

/// A hub in process (nothing listens): `d1` registered with [`DEVICE_KEY`], a disabled device
/// `off`, and with `queued` one C2D message waiting for `d1`.
fn hub(queued: bool) -> Result<IotHub, String> {
    let spec = |text: &str| DeviceSpec::parse(text).map_err(|e| e.to_string());
    let config = IotHubConfig {
        hostname: HOSTNAME.to_owned(),
        admin_port: None,
        https_port: None,
        amqp_port: None,
        devices: vec![spec(&format!("{DEVICE_ID}:{DEVICE_KEY}"))?, spec("off")?],
        max_message_size: MAX_BODY,
        max_telemetry_size: MAX_BODY,
        ..IotHubConfig::default()
    };
    let hub = IotHub::new(config).map_err(|e| format!("hub: {e}"))?;
    let off = crate::iothub::registry::DeviceUpdate {
        status: crate::iothub::registry::DeviceStatus::Disabled,
        ..crate::iothub::registry::DeviceUpdate::default()
    };
    hub.update_device("off", &off, None)
        .map_err(|e| format!("disable: {e}"))?;
    if queued {
        let message = C2dMessage::new("hello")
            .message_id("m1")
            .correlation_id("c1")
            .content_type("text/plain")
            .property("unit", Some("celsius"))
            .property("flag", None)
            .ack(Ack::Full);
        hub.send(DEVICE_ID, message)
            .map_err(|e| format!("send: {e}"))?;
    }
    Ok(hub)
}

/// A single-threaded runtime with timers (the hub's waits and timeouts need them).
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| format!("runtime: {e}"))
}

fn le_u64(data: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    for (to, from) in bytes.iter_mut().zip(data) {
        *to = *from;
    }
    u64::from_le_bytes(bytes)
}

// ----- sas_token -----

/// What the hub made of one token text.
#[derive(Debug)]
pub struct SasChecks {
    /// `SasToken::parse`.
    pub parsed: Result<SasToken, IotHubError>,
    /// The parsed token's `expires_at()` in RFC 3339 (`time::format_rfc3339_millis`).
    pub expiry_text: Option<String>,
    /// `sas::validate` for `{HOSTNAME}/devices/{DEVICE_ID}` with [`DEVICE_KEY`].
    pub validated: Result<SasToken, IotHubError>,
    /// `Policies::authenticate` for [`HOSTNAME`] (a service token).
    pub service: Result<ServiceGrant, IotHubError>,
    /// `Policies::authenticate_for` the device's resource (a device connecting with a policy
    /// token).
    pub device_policy: Result<ServiceGrant, IotHubError>,
    /// Each error's text (formatting one must not panic either).
    pub errors: Vec<String>,
}

/// A token built from the input and signed with a known key, so that signatures match.
#[derive(Debug)]
pub struct DerivedToken {
    /// The resource it is for.
    pub resource: String,
    /// Its `se`.
    pub expiry: u64,
    /// The key it is signed with.
    pub key: &'static str,
    /// Its `skn`.
    pub key_name: Option<&'static str>,
    /// The token, from the core's signer (the device client's).
    pub token: Result<String, String>,
    /// What the hub made of it.
    pub checks: Option<SasChecks>,
}

/// What [`sas_token`] saw.
#[derive(Debug)]
pub struct SasOutcome {
    /// The time every check used.
    pub now: SystemTime,
    /// The input's text, checked as a token.
    pub raw: Result<SasChecks, String>,
    /// A token built by hand with the input's first 8 bytes as `se`: its expiry, formatted.
    pub hand_built: (u64, String),
    /// The token derived from the input.
    pub derived: DerivedToken,
}

fn sas_checks(policies: &Policies, token: &str, now: SystemTime) -> SasChecks {
    let device = sas::device_resource(HOSTNAME, DEVICE_ID);
    let parsed = SasToken::parse(token);
    let expiry_text = parsed
        .as_ref()
        .ok()
        .map(|t| time::format_rfc3339_millis(t.expires_at()));
    let validated = sas::validate(token, &device, &[DEVICE_KEY], now);
    let service = policies.authenticate(token, HOSTNAME, now);
    let device_policy = policies.authenticate_for(token, &device, now);
    let mut errors = Vec::new();
    for e in [
        parsed.as_ref().err(),
        validated.as_ref().err(),
        service.as_ref().err(),
        device_policy.as_ref().err(),
    ]
    .into_iter()
    .flatten()
    {
        errors.push(e.to_string());
    }
    if let Ok(grant) = &service {
        for right in [
            policies::Right::RegistryRead,
            policies::Right::RegistryWrite,
            policies::Right::ServiceConnect,
            policies::Right::DeviceConnect,
        ] {
            if let Err(e) = grant.require(right) {
                errors.push(e.to_string());
            }
        }
    }
    SasChecks {
        parsed,
        expiry_text,
        validated,
        service,
        device_policy,
        errors,
    }
}

/// SAS tokens. The input: 8 bytes (little-endian `se`), a flags byte, then text. The text is
/// checked as a token as is; a token is also derived and signed with a known key: flags bits
/// 0-1 pick its resource (the device's, the hub's, `https://LOCALHOST/`, or the text), bits
/// 2-3 its key and `skn` (device key; `iothubowner`; `device` policy; an unknown key), bit 4
/// puts `se` within a day of now (else `se` is the 8 bytes as they are).
pub fn sas_token(data: &[u8]) -> SasOutcome {
    let now = SystemTime::now();
    let now_secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let se = le_u64(data);
    let flags = data.get(8).copied().unwrap_or(0);
    let text = String::from_utf8_lossy(data.get(9..).unwrap_or_default()).into_owned();
    let policies = fixed_policies().map_err(|e| format!("policies: {e}"));
    let raw = policies
        .as_ref()
        .map(|p| sas_checks(p, &text, now))
        .map_err(Clone::clone);
    let hand = SasToken {
        resource_encoded: String::new(),
        resource: String::new(),
        signature: Vec::new(),
        expiry: se,
        key_name: None,
    };
    let hand_built = (se, time::format_rfc3339_millis(hand.expires_at()));
    let device = sas::device_resource(HOSTNAME, DEVICE_ID);
    let resource = match flags & 3 {
        0 => device,
        1 => HOSTNAME.to_owned(),
        2 => "https://LOCALHOST/".to_owned(),
        _ => text,
    };
    let (key, key_name) = match (flags >> 2) & 3 {
        0 => (DEVICE_KEY, None),
        1 => (OWNER_KEY, Some("iothubowner")),
        2 => (DEVICE_POLICY_KEY, Some("device")),
        _ => (OTHER_KEY, None),
    };
    let expiry = if flags & 0x10 != 0 {
        (now_secs + se % 172_800).saturating_sub(86_400)
    } else {
        se
    };
    let token =
        mqstate::iothub::sas::token(&resource, key, expiry, key_name).map_err(|e| e.to_string());
    let checks = match (&token, &policies) {
        (Ok(t), Ok(p)) => Some(sas_checks(p, t, now)),
        _ => None,
    };
    SasOutcome {
        now,
        raw,
        hand_built,
        derived: DerivedToken {
            resource,
            expiry,
            key,
            key_name,
            token,
            checks,
        },
    }
}

// ----- rest_request -----

/// The response of [`rest_request`].
#[derive(Debug)]
pub struct RestResponse {
    /// The request's method and URI.
    pub request: String,
    /// Which token the input asked for (its first byte modulo 8).
    pub token: u8,
    /// The status.
    pub status: u16,
    /// `iothub-errorcode`, if set.
    pub error_code: Option<String>,
    /// `Content-Type`, if set.
    pub content_type: Option<String>,
    /// The body.
    pub body: Vec<u8>,
}

/// A request to the HTTPS REST API's router, in process. The input: a byte choosing the
/// `Authorization` header (modulo 8: the request's own; a token of `iothubowner`,
/// `registryRead`, `service`; `d1`'s device token; a `device` policy token for `d1`; an
/// expired `iothubowner` token; an `iothubowner` token for another host), then
/// `METHOD URI\n`, header lines `Name: value\n`, an empty line and the body. `Ok(None)`: the
/// `http` crate refuses the method, URI or a header (no server would route it). `Err`: the
/// hub or its runtime could not be made.
pub fn rest_request(data: &[u8]) -> Result<Option<RestResponse>, String> {
    let selector = data.first().copied().unwrap_or(0) % 8;
    let rest = data.get(1..).unwrap_or_default();
    let (head, body) = match rest.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (
            rest.get(..at).unwrap_or_default(),
            rest.get(at + 2..).unwrap_or_default(),
        ),
        None => (rest, &[][..]),
    };
    let mut lines = head.split(|b| *b == b'\n');
    let request_line = lines.next().unwrap_or_default();
    let (method, uri) = match request_line.iter().position(|b| *b == b' ') {
        Some(at) => (
            request_line.get(..at).unwrap_or_default(),
            request_line.get(at + 1..).unwrap_or_default(),
        ),
        None => (request_line, &b"/"[..]),
    };
    let Ok(method) = axum::http::Method::from_bytes(method) else {
        return Ok(None);
    };
    let Ok(uri) = axum::http::Uri::try_from(uri) else {
        return Ok(None);
    };
    let mut builder = axum::http::Request::builder()
        .method(method.clone())
        .uri(uri.clone());
    for line in lines {
        let (name, value) = match line.iter().position(|b| *b == b':') {
            Some(at) => (
                line.get(..at).unwrap_or_default(),
                line.get(at + 1..).unwrap_or_default().trim_ascii(),
            ),
            None => (line, &[][..]),
        };
        let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(name.trim_ascii()),
            axum::http::HeaderValue::from_bytes(value),
        ) else {
            return Ok(None);
        };
        builder = builder.header(name, value);
    }
    let hub = hub(true)?;
    let hour = Duration::from_secs(3600);
    let later = SystemTime::now() + hour;
    let service = |name: &str, host: &str, expiry: SystemTime| {
        hub.policy(name)
            .and_then(|p| policies::service_token(host, &p, expiry))
    };
    let token = match selector {
        1 => Some(service("iothubowner", HOSTNAME, later)),
        2 => Some(service("registryRead", HOSTNAME, later)),
        3 => Some(service("service", HOSTNAME, later)),
        4 => Some(hub.device_token(DEVICE_ID, hour)),
        5 => Some(hub.policy("device").and_then(|p| {
            let resource = sas::device_resource(HOSTNAME, DEVICE_ID);
            sas::generate(&resource, &p.primary_key, later).map(|t| format!("{t}&skn=device"))
        })),
        6 => Some(service(
            "iothubowner",
            HOSTNAME,
            SystemTime::now().checked_sub(hour).unwrap_or(UNIX_EPOCH),
        )),
        7 => Some(service("iothubowner", "other.example", later)),
        _ => None,
    };
    let mut request = builder
        .body(axum::body::Body::from(body.to_vec()))
        .map_err(|e| format!("request: {e}"))?;
    if let Some(token) = token {
        let token = token.map_err(|e| format!("token: {e}"))?;
        let value = axum::http::HeaderValue::from_str(&token).map_err(|e| e.to_string())?;
        request
            .headers_mut()
            .insert(axum::http::header::AUTHORIZATION, value);
    }
    let router = Hooks::rest_router(hub);
    let response = runtime()?.block_on(async move {
        use hyper::service::Service as _;
        let service = hyper_util::service::TowerToHyperService::new(router);
        let response = match service.call(request).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        let (parts, body) = response.into_parts();
        let body = http_body_util::BodyExt::collect(body)
            .await
            .map_err(|e| format!("response body: {e}"))?
            .to_bytes();
        Ok::<_, String>((parts, body))
    })?;
    let (parts, body) = response;
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    Ok(Some(RestResponse {
        request: format!("{method} {uri}"),
        token: selector,
        status: parts.status.as_u16(),
        error_code: header("iothub-errorcode"),
        content_type: header("content-type"),
        body: body.to_vec(),
    }))
}

// ----- amqp_convert -----

/// A telemetry message as the hub converts it: its property bag and its body.
pub type Telemetry = (Vec<Property>, Vec<u8>);

/// What [`amqp_convert`] saw.
#[derive(Debug, Default)]
pub struct AmqpOutcome {
    /// The message decoded from the input (its error's text otherwise).
    pub decoded: Option<Result<(), String>>,
    /// The C2D conversion: the raw device id of `to`, and the message.
    pub c2d: Option<Result<(String, C2dMessage), IotHubError>>,
    /// The device the message was sent to, and the hub's answer.
    pub sent: Option<(String, Result<(), IotHubError>)>,
    /// The sent message as the hub hands it to the device over AMQP, encoded, decoded and
    /// converted again as a C2D message.
    pub redelivered: Option<Result<(String, C2dMessage), String>>,
    /// The telemetry conversion (property bag and body), with [`MAX_BODY`] as the limit.
    pub telemetry: Option<Result<Telemetry, IotHubError>>,
    /// The telemetry as the hub stored it (its system properties' count, its properties'
    /// count).
    pub stored_telemetry: Option<(usize, usize)>,
    /// The AMQP error conditions of the refusals.
    pub conditions: Vec<String>,
    /// The hub or runtime could not be made.
    pub setup: Option<String>,
}

/// An AMQP message: the input decoded as fe2o3 decodes a transfer's payload
/// (`Message<Body<Value>>`), converted as the `/messages/devicebound` link converts a C2D
/// message (then sent to the device it names, received back locked and converted as the hub
/// delivers it over AMQP, that message encoded, decoded and converted again), and as a
/// device's `/messages/events` link converts telemetry.
pub fn amqp_convert(data: &[u8]) -> AmqpOutcome {
    use fe2o3_amqp::types::messaging::message::DecodeIntoMessage;
    use fe2o3_amqp::types::messaging::{Body, Message};
    use fe2o3_amqp::types::primitives::Value;

    let decode = |bytes: &[u8]| {
        <Body<Value> as DecodeIntoMessage>::decode_message_from_reader(
            serde_amqp::read::SliceReader::new(bytes),
        )
    };
    let mut out = AmqpOutcome::default();
    let message: Message<Body<Value>> = match decode(data) {
        Ok(m) => m,
        Err(e) => {
            out.decoded = Some(Err(e.to_string()));
            return out;
        }
    };
    out.decoded = Some(Ok(()));
    let (hub, rt) = match hub(false).and_then(|h| Ok((h, runtime()?))) {
        Ok(x) => x,
        Err(e) => {
            out.setup = Some(e);
            return out;
        }
    };
    let c2d = Hooks::amqp_c2d_message(message.clone());
    if let Ok((raw, m)) = &c2d {
        // As the devicebound link picks the device.
        let candidates = Hooks::amqp_device_candidates(raw);
        let id = candidates
            .iter()
            .find(|id| hub.device(id).is_ok())
            .or_else(|| candidates.first())
            .cloned();
        if let Some(id) = id {
            let sent = hub.send(&id, m.clone()).map(drop);
            if sent.is_ok() {
                let locked = rt.block_on(async {
                    hub.persisted().await?;
                    hub.receive_locked(&id, Duration::ZERO).await
                });
                out.redelivered = Some(match locked {
                    Ok(Some(locked)) => {
                        let delivered = Hooks::amqp_device_message(&id, &locked);
                        use fe2o3_amqp::types::messaging::message::__private::Serializable;
                        serde_amqp::to_vec(&Serializable(delivered))
                            .map_err(|e| format!("encode: {e}"))
                            .and_then(|bytes| decode(&bytes).map_err(|e| format!("decode: {e}")))
                            .and_then(|m| {
                                Hooks::amqp_c2d_message(m).map_err(|e| format!("convert: {e}"))
                            })
                    }
                    Ok(None) => Err("nothing to receive after the send".to_owned()),
                    Err(e) => Err(format!("receive: {e}")),
                });
            }
            out.sent = Some((id, sent));
        }
    }
    let telemetry = Hooks::amqp_telemetry(message, MAX_BODY);
    if let Ok((bag, body)) = &telemetry {
        hub.telemetry_received(DEVICE_ID, bag.clone(), body.clone().into());
        out.stored_telemetry = hub.telemetry(DEVICE_ID, 0).ok().and_then(|t| {
            t.last()
                .map(|t| (t.system_properties.len(), t.properties.len()))
        });
    }
    for e in [
        c2d.as_ref().err(),
        out.sent.as_ref().and_then(|(_, r)| r.as_ref().err()),
        telemetry.as_ref().err(),
    ]
    .into_iter()
    .flatten()
    {
        out.conditions.push(Hooks::amqp_condition(e));
    }
    out.c2d = Some(c2d);
    out.telemetry = Some(telemetry);
    out
}

// ----- mqtt_connect -----

/// A CONNECT read from the input, and the hub's answer.
#[derive(Debug)]
pub struct ConnectAttempt {
    /// Its client id.
    pub client_id: String,
    /// Its user name.
    pub username: Option<String>,
    /// Whether it is MQTT 3.1.1.
    pub v4: bool,
    /// `IotHub::connect`: session present, or the refusal.
    pub accepted: Result<bool, String>,
}

/// What [`mqtt_connect`] saw.
#[derive(Debug, Default)]
pub struct MqttOutcome {
    /// The bytes the device endpoint read.
    pub input_len: usize,
    /// Each packet `Packet::read` read: its kind (Debug, cut short) and the bytes it took.
    pub packets: Vec<(String, usize)>,
    /// Why reading stopped before the end (not for a packet cut short).
    pub read_error: Option<String>,
    /// Every CONNECT, checked by the hub (and disconnected again).
    pub connects: Vec<ConnectAttempt>,
    /// The device endpoint serving the whole input: how it ended.
    pub served: Option<Result<(), String>>,
    /// What the endpoint wrote back, read as packets (Debug, cut short).
    pub replies: Vec<String>,
    /// Whether its first reply is a CONNACK, and whether that accepts.
    pub connack: Option<bool>,
    /// What the endpoint wrote that does not read as MQTT 3.1.1 packets.
    pub malformed_reply: Option<String>,
    /// The hub or runtime could not be made.
    pub setup: Option<String>,
}

fn short(text: &str) -> String {
    text.chars().take(120).collect()
}

/// MQTT 3.1.1 device connections. The input: a flags byte, then bytes from the device. With
/// flag bit 0 a CONNECT of `d1` comes first (bit 1: clean session; bit 2: an expired token as
/// password, else a valid one, for an hour or with bit 6 until the year 9999; bit 3: a user
/// name without `api-version`; bits 4-5 the keep-alive: 0, 60, 1200 or 65535 s). The bytes are read with `Packet::read` as the
/// endpoint reads them, each CONNECT checked with `IotHub::connect` (then disconnected); then
/// the endpoint serves them as one connection over an in-memory pipe (`d1` has a message
/// queued), and what it writes back is read as packets.
pub fn mqtt_connect(data: &[u8]) -> MqttOutcome {
    use rumqttc::mqttbytes::v4::{Connect, ConnectReturnCode, Packet};

    let mut out = MqttOutcome::default();
    let (hub, rt) = match hub(true).and_then(|h| Ok((h, runtime()?))) {
        Ok(x) => x,
        Err(e) => {
            out.setup = Some(e);
            return out;
        }
    };
    let flags = data.first().copied().unwrap_or(0);
    let mut stream = BytesMut::new();
    if flags & 1 != 0 {
        let mut connect = Connect::new(DEVICE_ID);
        connect.clean_session = flags & 2 != 0;
        connect.keep_alive = [0, 60, 1200, u16::MAX]
            .get(usize::from((flags >> 4) & 3))
            .copied()
            .unwrap_or(0);
        let username = if flags & 8 != 0 {
            format!("{HOSTNAME}/{DEVICE_ID}/")
        } else {
            hub.device_username(DEVICE_ID)
        };
        let resource = sas::device_resource(HOSTNAME, DEVICE_ID);
        let password = if flags & 4 != 0 {
            let past = SystemTime::now().checked_sub(Duration::from_secs(1));
            sas::generate(&resource, DEVICE_KEY, past.unwrap_or(UNIX_EPOCH))
        } else if flags & 0x40 != 0 {
            // Valid until the last second the hub accepts: the connection's token timer.
            sas::generate(&resource, DEVICE_KEY, time::latest())
        } else {
            hub.device_token(DEVICE_ID, Duration::from_secs(3600))
        };
        match password {
            Ok(password) => {
                connect.set_login(username, password);
            }
            Err(e) => {
                out.setup = Some(format!("token: {e}"));
                return out;
            }
        }
        if let Err(e) = Packet::Connect(connect).write(&mut stream, usize::MAX) {
            out.setup = Some(format!("CONNECT: {e}"));
            return out;
        }
    }
    stream.extend_from_slice(data.get(1..).unwrap_or_default());
    out.input_len = stream.len();
    let input = stream.clone().freeze();

    // As the endpoint reads them (endpoint.rs, `Conn::read_packet`).
    let max_incoming = hub.config().max_telemetry_size + 64 * 1024;
    while !stream.is_empty() && out.packets.len() < 1000 {
        let before = stream.len();
        match Packet::read(&mut stream, max_incoming) {
            Ok(packet) => {
                out.packets
                    .push((short(&format!("{packet:?}")), before - stream.len()));
                if let Packet::Connect(c) = packet {
                    let login = c.login.as_ref();
                    let accepted = hub
                        .connect(
                            &c.client_id,
                            login.map(|l| l.username.as_str()),
                            login.map(|l| l.password.as_str()),
                            c.clean_session,
                        )
                        .map(|connected| {
                            hub.disconnected(&c.client_id, connected.id);
                            connected.session_present
                        })
                        .map_err(|refusal| format!("{refusal:?}"));
                    out.connects.push(ConnectAttempt {
                        client_id: c.client_id.clone(),
                        username: login.map(|l| l.username.clone()),
                        v4: c.protocol == rumqttc::mqttbytes::Protocol::V4,
                        accepted,
                    });
                }
            }
            Err(rumqttc::mqttbytes::Error::InsufficientBytes(_)) => break,
            Err(e) => {
                out.read_error = Some(e.to_string());
                break;
            }
        }
    }

    // The endpoint itself, over a pipe: the input, then the end of the stream.
    let served = rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (mut from_hub, mut to_hub) = tokio::io::split(client);
        let (_stop, stop_rx) = tokio::sync::watch::channel(false);
        let write = async move {
            let _ = to_hub.write_all(&input).await;
            let _ = to_hub.shutdown().await;
        };
        let read = async move {
            let mut written = Vec::new();
            let _ = from_hub.read_to_end(&mut written).await;
            written
        };
        let serve = Hooks::mqtt_serve(hub.clone(), server, stop_rx);
        // Everything is in the pipe at once: an endpoint still busy after this long hangs.
        tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(write, read, serve)
        })
        .await
    });
    let (written, served) = match served {
        Ok(((), written, served)) => (written, served),
        Err(_) => (
            Vec::new(),
            Err("HUNG: the endpoint did not finish".to_owned()),
        ),
    };
    out.served = Some(served);
    let mut replies = BytesMut::from(&written[..]);
    while !replies.is_empty() {
        match Packet::read(&mut replies, usize::MAX) {
            Ok(packet) => {
                if out.replies.is_empty() {
                    out.connack = match &packet {
                        Packet::ConnAck(ack) => Some(ack.code == ConnectReturnCode::Success),
                        _ => None,
                    };
                }
                out.replies.push(short(&format!("{packet:?}")));
            }
            Err(e) => {
                out.malformed_reply = Some(format!("{e} ({} bytes left)", replies.len()));
                break;
            }
        }
    }
    out
}

// ----- the bounded run on stable -----

/// Valid inputs of each target, for mutation: the stable run's seeds, and the corpus
/// `cargo fuzz` starts from (written by the ignored test `write_seed_corpus`).
#[cfg(test)]
mod seeds {
    use super::*;

    pub(super) fn seeds(target: &str) -> Vec<Vec<u8>> {
        match target {
            "sas_token" => sas_seeds(),
            "rest_request" => rest_seeds(),
            "amqp_convert" => amqp_seeds(),
            "mqtt_connect" => mqtt_seeds(),
            _ => Vec::new(),
        }
    }

    // The seeds do not depend on the time, so that the stable run's inputs are the same on
    // every run.
    fn sas_seeds() -> Vec<Vec<u8>> {
        let later = time::latest();
        let device = sas::device_resource(HOSTNAME, DEVICE_ID);
        let mut texts = vec![
            "SharedAccessSignature se=10&sr=h%2Fdevices%2Fd&sig=AAAA".to_owned(),
            "SharedAccessSignature sr=localhost%2Fdevices%2Fd1&sig=AAAA&se=9223372036854775808"
                .to_owned(),
            "SharedAccessSignature sr=localhost&sig=AAAA&se=253402300799&skn=iothubowner"
                .to_owned(),
        ];
        for (resource, key, skn) in [
            (device.as_str(), DEVICE_KEY, ""),
            (HOSTNAME, OWNER_KEY, "&skn=iothubowner"),
            (device.as_str(), DEVICE_POLICY_KEY, "&skn=device"),
        ] {
            if let Ok(t) = sas::generate(resource, key, later) {
                texts.push(format!("{t}{skn}"));
            }
        }
        let mut out = Vec::new();
        for (n, text) in texts.iter().enumerate() {
            let mut seed = (n as u64 * 1_000_003).to_le_bytes().to_vec();
            seed.push(0);
            seed.extend_from_slice(text.as_bytes());
            out.push(seed);
        }
        // With flag 0x10, se 90000 is an hour from now.
        for flags in [
            0u8, 0x10, 0x15, 0x19, 0x18, 0x1c, 0x13, 0x03, 0x11, 0x12, 0x14, 0x16,
        ] {
            let mut seed = 90_000u64.to_le_bytes().to_vec();
            seed.push(flags);
            seed.extend_from_slice(b"localhost/devices/d1");
            out.push(seed);
        }
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.push(0);
        out.push(huge);
        out
    }

    fn rest_seeds() -> Vec<Vec<u8>> {
        let requests: [(u8, &str); 16] = [
            (1, "GET /devices?api-version=2021-04-12\n\n"),
            (2, "GET /devices/?top=5&api-version=2020-09-30\n\n"),
            (1, "GET /devices/d1?api-version=2021-04-12\n\n"),
            (
                1,
                "PUT /devices/d2?api-version=2021-04-12\ncontent-type: application/json\n\n{\"deviceId\":\"d2\",\"status\":\"enabled\",\"authentication\":{\"type\":\"sas\",\"symmetricKey\":{\"primaryKey\":\"\",\"secondaryKey\":\"\"}}}",
            ),
            (
                1,
                "PUT /devices/d1?api-version=2021-04-12\nif-match: *\n\n{\"deviceId\":\"d1\",\"status\":\"disabled\",\"statusReason\":\"x\",\"capabilities\":{\"iotEdge\":true}}",
            ),
            (
                1,
                "DELETE /devices/d1?api-version=2021-04-12\nif-match: *\n\n",
            ),
            (3, "DELETE /devices/d1/commands?api-version=2021-04-12\n\n"),
            (2, "GET /statistics/devices?api-version=2021-04-12\n\n"),
            (3, "GET /statistics/service?api-version=2021-04-12\n\n"),
            (
                4,
                "GET /devices/d1/messages/devicebound?api-version=2020-09-30\n\n",
            ),
            (
                5,
                "GET /devices/d1/messages/deviceBound?api-version=2021-04-12-preview\n\n",
            ),
            (
                4,
                "DELETE /devices/d1/messages/devicebound/00000000-0000-0000-0000-000000000000?api-version=2020-09-30&reject\n\n",
            ),
            (
                4,
                "POST /devices/d1/messages/devicebound/abc/abandon?api-version=2020-09-30\n\n",
            ),
            (
                4,
                "POST /devices/d1/messages/events?api-version=2020-09-30\niothub-messageid: m1\niothub-app-unit: celsius\ndt-subject: s\ncontent-type: text/plain\n\nhello",
            ),
            (
                4,
                "POST /devices/d1/messages/events?api-version=2020-09-30\ncontent-type: application/vnd.microsoft.iothub.json\n\n[{\"body\":\"aGk=\",\"properties\":{\"iothub-app-k\":\"v\",\"iothub-messageid\":\"m\"}},{\"body\":\"raw\",\"base64Encoded\":false}]",
            ),
            (
                0,
                "GET /devices/d1?api-version=2021-04-12\nauthorization: SharedAccessSignature sr=localhost&sig=AAAA&se=9223372036854775808&skn=iothubowner\n\n",
            ),
        ];
        requests
            .iter()
            .map(|(token, text)| {
                let mut seed = vec![*token];
                seed.extend_from_slice(text.as_bytes());
                seed
            })
            .collect()
    }

    fn amqp_seeds() -> Vec<Vec<u8>> {
        use fe2o3_amqp::types::messaging::message::__private::Serializable;
        use fe2o3_amqp::types::messaging::{
            AmqpValue, ApplicationProperties, Body, Data, Message, MessageAnnotations, MessageId,
            Properties,
        };
        use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Timestamp, Value};

        let properties = |expiry: Option<i64>| {
            let mut p = Properties::builder()
                .to("/devices/d1/messages/devicebound")
                .message_id(MessageId::Uuid([7u8; 16].into()))
                .correlation_id(MessageId::Ulong(9))
                .user_id(Binary::from(b"svc".to_vec()))
                .content_type(Symbol::from("application/json"))
                .content_encoding(Symbol::from("utf-8"))
                .build();
            p.absolute_expiry_time = expiry.map(Timestamp::from_milliseconds);
            p
        };
        let app = ApplicationProperties::builder()
            .insert("iothub-ack", SimpleValue::String("full".into()))
            .insert("n", SimpleValue::Int(7))
            .insert("z", SimpleValue::Null)
            .insert("b", SimpleValue::Binary(Binary::from(b"t".to_vec())))
            .build();
        let annotations = MessageAnnotations::builder()
            .insert(
                Symbol::from("iothub-interface-id"),
                Value::String("dtmi:x;1".into()),
            )
            .insert(Symbol::from("dt-subject"), Value::Symbol(Symbol::from("s")))
            .build();
        let data = Body::<Value>::Data(vec![Data(Binary::from(b"{\"a\":1}".to_vec()))].into());
        let messages: Vec<Message<Body<Value>>> = vec![
            Message::builder()
                .properties(properties(None))
                .application_properties(app.clone())
                .message_annotations(annotations.clone())
                .body(data.clone())
                .build(),
            Message::builder()
                .properties(properties(Some(i64::MAX)))
                .body(Body::Value(AmqpValue(Value::String("text".into()))))
                .build(),
            Message::builder()
                .properties(
                    Properties::builder()
                        .to("/devices/d1/messages/events")
                        .message_id(String::from("m1"))
                        .build(),
                )
                .application_properties(app)
                .message_annotations(annotations)
                .body(Body::Value(AmqpValue(Value::Binary(Binary::from(
                    b"bin".to_vec(),
                )))))
                .build(),
            Message::builder()
                .properties(properties(Some(-1)))
                .body(Body::Empty)
                .build(),
            // 2100-01-01: more than 2 days away.
            Message::builder()
                .properties(properties(Some(4_102_444_800_000)))
                .body(data.clone())
                .build(),
        ];
        messages
            .into_iter()
            .filter_map(|m| serde_amqp::to_vec(&Serializable(m)).ok())
            .collect()
    }

    fn mqtt_seeds() -> Vec<Vec<u8>> {
        use rumqttc::mqttbytes::QoS;
        use rumqttc::mqttbytes::v4::{
            Connect, Packet, PubAck, Publish, Subscribe, SubscribeFilter, Unsubscribe,
        };

        // `None` if a packet does not encode (a seed would then be garbage after it).
        let write = |packets: Vec<Packet>| {
            let mut buf = BytesMut::new();
            for p in packets {
                p.write(&mut buf, usize::MAX).ok()?;
            }
            Some(buf.to_vec())
        };
        let devicebound = format!("devices/{DEVICE_ID}/messages/devicebound/#");
        let mut subscribe = Subscribe::new_many([
            SubscribeFilter::new(devicebound.clone(), QoS::AtLeastOnce),
            SubscribeFilter::new("$iothub/twin/res/#".to_owned(), QoS::AtMostOnce),
            SubscribeFilter::new("$iothub/methods/POST/#".to_owned(), QoS::AtMostOnce),
        ]);
        subscribe.pkid = 1;
        let mut telemetry = Publish::new(
            format!("devices/{DEVICE_ID}/messages/events/%24.ct=application%2Fjson&k=v&n"),
            QoS::AtLeastOnce,
            "{\"t\":1}",
        );
        telemetry.pkid = 2;
        let mut twin = Publish::new("$iothub/twin/GET/?$rid=1", QoS::AtLeastOnce, "");
        twin.pkid = 3;
        let mut unsubscribe = Unsubscribe::new(devicebound);
        unsubscribe.pkid = 4;
        let session = vec![
            Packet::Subscribe(subscribe),
            Packet::PingReq,
            Packet::PubAck(PubAck::new(1)),
            Packet::Publish(telemetry),
            Packet::Publish(twin),
            Packet::Unsubscribe(unsubscribe),
            Packet::PingReq,
            Packet::Disconnect,
        ];
        let mut out = Vec::new();
        for flags in [1u8, 0x13, 0x25, 0x09, 0x31, 0x43] {
            if let Some(packets) = write(session.clone()) {
                let mut seed = vec![flags];
                seed.extend(packets);
                out.push(seed);
            }
        }
        let mut raw = Connect::new(DEVICE_ID);
        raw.set_login(
            format!("{HOSTNAME}/{DEVICE_ID}/?api-version=2021-04-12"),
            "SharedAccessSignature sr=localhost%2Fdevices%2Fd1&sig=AAAA&se=9223372036854775808",
        );
        if let Some(packets) = write(vec![Packet::Connect(raw), Packet::PingReq]) {
            let mut seed = vec![0u8];
            seed.extend(packets);
            out.push(seed);
        }
        out
    }
}

// The checks of the fuzz targets, shared with `server/fuzz`.
#[cfg(test)]
#[path = "../fuzz/checks.rs"]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
mod checks;

#[cfg(test)]
mod tests {
    //! The fuzz targets on stable: each check on random bytes and on mutations of valid
    //! inputs ([`seeds`]), from a fixed seed, so that a failure repeats.
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::checks;
    use super::seeds::seeds;

    /// One input: random bytes, or a seed with bytes replaced, inserted, removed, cut short,
    /// extended, or a number in it changed.
    fn input(rng: &mut fastrand::Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
        let random = |rng: &mut fastrand::Rng, max: usize| {
            let n = rng.usize(..max);
            (0..n).map(|_| rng.u8(..)).collect::<Vec<u8>>()
        };
        if seeds.is_empty() || rng.u8(..10) == 0 {
            return random(rng, 128);
        }
        let mut v = seeds[rng.usize(..seeds.len())].clone();
        let edits = 1 + rng.usize(..3);
        for _ in 0..edits {
            let len = v.len();
            match rng.u8(..6) {
                0 if len > 0 => v[rng.usize(..len)] = rng.u8(..),
                1 => v.insert(rng.usize(..=len), rng.u8(..)),
                2 if len > 0 => {
                    let at = rng.usize(..len);
                    let n = rng.usize(1..=(len - at).min(8));
                    v.drain(at..at + n);
                }
                3 => v.truncate(rng.usize(..=len)),
                4 => v.extend(random(rng, 16)),
                _ => {
                    // A run of digits (a length, an expiry, a count) replaced by another
                    // number.
                    if let Some(at) = v.iter().position(|b| b.is_ascii_digit()) {
                        let end = v[at..]
                            .iter()
                            .position(|b| !b.is_ascii_digit())
                            .map_or(len, |n| at + n);
                        let n = match rng.u8(..3) {
                            0 => rng.u64(..),
                            1 => u64::from(rng.u32(..)),
                            _ => rng.u64(..1000),
                        };
                        v.splice(at..end, n.to_string().into_bytes());
                    } else if len > 0 {
                        v[rng.usize(..len)] ^= 1 << rng.u8(..8);
                    }
                }
            }
        }
        v
    }

    fn run(target: &str, cases: usize, check: fn(&[u8])) {
        let seeds = seeds(target);
        assert!(!seeds.is_empty(), "{target}: no seeds");
        for seed in &seeds {
            check(seed);
        }
        let mut rng = fastrand::Rng::with_seed(0x6d71_7374);
        for _ in 0..cases {
            let data = input(&mut rng, &seeds);
            check(&data);
        }
    }

    #[test]
    fn sas_token() {
        run("sas_token", 20_000, checks::sas_token);
    }

    #[test]
    fn rest_request() {
        run("rest_request", 5_000, checks::rest_request);
    }

    #[test]
    fn amqp_convert() {
        run("amqp_convert", 10_000, checks::amqp_convert);
    }

    #[test]
    fn mqtt_connect() {
        run("mqtt_connect", 5_000, checks::mqtt_connect);
    }

    /// Writes [`seeds`] as the starting corpus of `server/fuzz`:
    /// `cargo test -p mqstate-server --lib fuzzing::tests::write_seed_corpus -- --ignored`.
    #[test]
    #[ignore = "writes files; run it before a first `cargo fuzz run`"]
    fn write_seed_corpus() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
        for target in ["sas_token", "rest_request", "amqp_convert", "mqtt_connect"] {
            let dir = root.join(target);
            std::fs::create_dir_all(&dir).unwrap();
            for (n, seed) in seeds(target).iter().enumerate() {
                std::fs::write(dir.join(format!("seed-{n:02}")), seed).unwrap();
            }
        }
    }
}
