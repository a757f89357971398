//! IoT Hub's device HTTPS API, as the official device SDKs call it over HTTPS (Node
//! `azure-iot-device-http`, the C SDK's HTTP transport): devices that cannot keep a connection
//! open poll for their cloud-to-device messages and post their telemetry.
//!
//! | Route | Success |
//! |---|---|
//! | `GET /devices/{id}/messages/devicebound` (receive) | 200 + message, or 204 when none |
//! | `DELETE /devices/{id}/messages/devicebound/{etag}` (complete) | 204 |
//! | `DELETE /devices/{id}/messages/devicebound/{etag}?reject` (reject) | 204 |
//! | `POST /devices/{id}/messages/devicebound/{etag}/abandon` (abandon) | 204 |
//! | `POST /devices/{id}/messages/events` (telemetry; a batch with `application/vnd.microsoft.iothub.json`) | 204 |
//!
//! `devicebound` is also served as `deviceBound` (IoT Hub's documentation writes it so; the
//! Node SDK sends it in lower case). Every request carries a device token,
//! `Authorization: SharedAccessSignature sr={host}/devices/{id}&sig=..&se=..`, signed with
//! the device's primary or secondary key (what the SDKs build from a device connection
//! string), or with a shared access policy that has DeviceConnect (`&skn=device`): not a
//! service token, so the registry's check does not apply here.
//!
//! HTTPS is connectionless: a receive locks the message under a new lock token (the `ETag`)
//! for the lock timeout and nothing else; the device queue is the one MQTT and AMQP deliver
//! from, and an MQTT connection of the same device stays open.

use std::collections::HashMap;
use std::time::Duration;

use crate::iothub::domain::x509::ClientCert;
use crate::untrusted::cut;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use super::{RestResult, api_version};
use crate::iothub::IotHubError;
use crate::iothub::domain::message::format_time;
use crate::iothub::domain::properties::Property;
use crate::iothub::domain::system_properties::SystemProperties;
use crate::iothub::{IotHub, LockedMessage, Settlement};

/// The prefix of application properties in HTTP headers, both ways (the Node SDK's
/// `MESSAGE_PROP_HEADER_PREFIX`).
const APP_PREFIX: &str = "iothub-app-";

/// The content type of a telemetry batch (Node's `sendEventBatch`).
const BATCH_CONTENT_TYPE: &str = "application/vnd.microsoft.iothub.json";

/// Request headers (and batch property names) of a device's telemetry, and the system
/// property each one is in the telemetry store: the names MQTT devices put in their topic,
/// so the store reads the same whichever protocol the device used. `iothub-to` is not among
/// them: the SDKs always send it as the request's own path.
const SYSTEM_HEADERS: [(&str, &str); 8] = [
    ("iothub-messageid", "$.mid"),
    ("iothub-correlationid", "$.cid"),
    ("iothub-userid", "$.uid"),
    ("iothub-contenttype", "$.ct"),
    ("iothub-contentencoding", "$.ce"),
    ("iothub-expiry", "$.exp"),
    ("iothub-interface-id", "$.ifid"),
    // The Node SDK sends the `dt-subject` property without the app prefix; MQTT sends `$.sub`.
    ("dt-subject", "$.sub"),
];

/// The device routes, merged into the REST router (which adds the state).
pub(super) fn routes() -> Router<IotHub> {
    let mut router = Router::new().route("/devices/{id}/messages/events", post(telemetry));
    for spelling in ["devicebound", "deviceBound"] {
        router = router
            .route(
                &format!("/devices/{{id}}/messages/{spelling}"),
                get(receive),
            )
            .route(
                &format!("/devices/{{id}}/messages/{spelling}/{{etag}}"),
                delete(complete_or_reject),
            )
            .route(
                &format!("/devices/{{id}}/messages/{spelling}/{{etag}}/abandon"),
                post(abandon),
            );
    }
    router
}

/// Checks the request's device token for `id` ([`IotHub::authenticate_device`]: the
/// device's key, or a policy with DeviceConnect; the device registered and enabled). Every
/// refusal is 401 (IoT Hub's `IotHubUnauthorizedAccess`), with the reason in the body's
/// `ExceptionMessage`.
fn authorize_device(
    hub: &IotHub,
    headers: &HeaderMap,
    cert: Option<&ClientCert>,
    id: &str,
) -> RestResult<()> {
    if headers.get(header::AUTHORIZATION).is_none()
        && let Some(cert) = cert
    {
        // An X.509 device sends no Authorization header; its TLS client certificate is
        // its credential (docs/iothub.md, "X.509 devices").
        hub.authenticate_device_cert(cert, id)?;
        return Ok(());
    }
    let token = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| {
            IotHubError::Unauthorized(format!(
                "no Authorization header (a SharedAccessSignature token for device {:?})",
                cut(id)
            ))
        })?
        .to_str()
        .map_err(|_| IotHubError::Unauthorized("the Authorization header is not text".into()))?;
    hub.authenticate_device(token, id)?;
    Ok(())
}

/// The preamble every device route shares, as an extractor: the device named by the path's
/// `{id}`, once its token is checked ([`authorize_device`]) and the request names an
/// `api-version` ([`api_version`]), in that order. Listed after a route's path and query
/// extractors and before its body, where each handler used to open with these checks.
struct DeviceCaller(String);

impl FromRequestParts<IotHub> for DeviceCaller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, hub: &IotHub) -> Result<Self, Response> {
        // Every device route has `{id}`; a path that does not decode is refused as the
        // handlers' own `Path` refuses it.
        let Path(params) = Path::<HashMap<String, String>>::from_request_parts(parts, hub)
            .await
            .map_err(IntoResponse::into_response)?;
        let id = params.get("id").cloned().unwrap_or_default();
        let cert = parts
            .extensions
            .get::<super::super::PeerCert>()
            .and_then(|c| c.0.clone());
        authorize_device(hub, &parts.headers, cert.as_deref(), &id)
            .map_err(IntoResponse::into_response)?;
        let query = Query::<HashMap<String, String>>::try_from_uri(&parts.uri)
            .map(|Query(q)| q)
            .unwrap_or_default();
        api_version(&query).map_err(IntoResponse::into_response)?;
        Ok(DeviceCaller(id))
    }
}

/// `GET .../messages/devicebound`: the device's oldest Enqueued message, locked (answered
/// once the lock and the delivery count are on disk), or 204.
async fn receive(
    State(hub): State<IotHub>,
    DeviceCaller(id): DeviceCaller,
) -> RestResult<Response> {
    // HTTPS devices poll: the SDK asks again at its interval, so no long wait here.
    match hub.receive_locked(&id, Duration::ZERO).await? {
        None => Ok(StatusCode::NO_CONTENT.into_response()),
        Some(locked) => Ok(message_response(&id, locked)),
    }
}

/// A received message as IoT Hub answers it: the body, the lock token as the quoted `ETag`
/// (the Node SDK's `toMessage` strips the first and last character), the system properties
/// as `iothub-*` headers, the application properties as `iothub-app-{name}` (HTTP cannot
/// tell a null value from an empty one: both are empty), and the content type and encoding
/// as `ContentType` / `ContentEncoding`, the names the C SDK reads.
fn message_response(id: &str, locked: LockedMessage) -> Response {
    let m = &locked.message;
    let sp = SystemProperties::of(id, m, locked.expiry_time);
    let text = |v: Option<&str>| v.map(str::to_owned);
    let mut pairs: Vec<(String, String)> = vec![(
        header::ETAG.as_str().to_owned(),
        format!("\"{}\"", locked.lock_token),
    )];
    let mut system = |name: &str, value: Option<String>| {
        if let Some(v) = value {
            pairs.push((name.to_owned(), v));
        }
    };
    system("iothub-messageid", text(sp.message_id));
    system("iothub-to", Some(sp.to.clone()));
    system("iothub-expiry", Some(format_time(sp.expiry)));
    system("iothub-correlationid", text(sp.correlation_id));
    system("iothub-userid", text(sp.user_id));
    system("iothub-ack", Some(sp.ack.as_str().to_owned()));
    system(
        "iothub-sequencenumber",
        Some(locked.sequence_number.to_string()),
    );
    system(
        "iothub-enqueuedtime",
        Some(format_time(locked.enqueued_time)),
    );
    system(
        "iothub-deliverycount",
        Some(locked.delivery_count.to_string()),
    );
    system("contenttype", text(sp.content_type));
    system("contentencoding", text(sp.content_encoding));
    for (name, value) in &m.properties {
        pairs.push((
            format!("{APP_PREFIX}{name}"),
            value.clone().unwrap_or_default(),
        ));
    }
    let mut response = (StatusCode::OK, m.payload.clone()).into_response();
    let out = response.headers_mut();
    for (name, value) in pairs {
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            (Ok(name), Ok(value)) => {
                out.append(name, value);
            }
            // Only control characters get here (names are checked when the message is
            // sent); the message is still delivered, without that property.
            _ => tracing::warn!(device = %id, header = %name,
                "iothub: a property cannot be an HTTP header; left out of the HTTPS delivery"),
        }
    }
    response
}

/// `DELETE .../devicebound/{etag}`: complete, or with `reject` in the query (the Node SDK
/// sends `?api-version=..&reject`; `reject=true` is accepted too) reject.
async fn complete_or_reject(
    State(hub): State<IotHub>,
    Path((id, etag)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    _: DeviceCaller,
) -> RestResult<Response> {
    let reject = query
        .get("reject")
        .is_some_and(|v| !v.eq_ignore_ascii_case("false"));
    let settlement = if reject {
        Settlement::Reject
    } else {
        Settlement::Complete
    };
    settle(&hub, &id, &etag, settlement).await
}

/// `POST .../devicebound/{etag}/abandon`.
async fn abandon(
    State(hub): State<IotHub>,
    Path((id, etag)): Path<(String, String)>,
    _: DeviceCaller,
) -> RestResult<Response> {
    settle(&hub, &id, &etag, Settlement::Abandon).await
}

/// Settles by lock token; 204 once the outcome is on disk. A token that locks nothing is
/// 412 `DeviceMessageLockLost`.
async fn settle(
    hub: &IotHub,
    id: &str,
    etag: &str,
    settlement: Settlement,
) -> RestResult<Response> {
    hub.settle(id, etag, settlement)?;
    hub.persisted().await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// One message of a telemetry batch, as Node's `sendEventBatch` writes it: the body in
/// base64, the properties with the same names as the single message's headers. The C SDK
/// adds `"base64Encoded": true`; `false` means the body is the text itself.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BatchItem {
    body: String,
    base64_encoded: Option<bool>,
    #[serde(default)]
    properties: HashMap<String, String>,
}

/// `POST .../messages/events`: one message (the body, properties in headers) or a batch,
/// into the device's telemetry store as MQTT telemetry goes. 204.
async fn telemetry(
    State(hub): State<IotHub>,
    Path(id): Path<String>,
    headers: HeaderMap,
    _: DeviceCaller,
    body: Bytes,
) -> RestResult<Response> {
    let max = hub.config().max_telemetry_size;
    if body.len() > max {
        return Err(IotHubError::PayloadTooLarge {
            size: body.len(),
            max,
        }
        .into());
    }
    let batch = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            ct.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case(BATCH_CONTENT_TYPE))
        });
    if !batch {
        let names = headers.iter().map(|(n, v)| (n.as_str(), header_text(v)));
        hub.telemetry_received(&id, property_bag(names), body);
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let items: Vec<BatchItem> = serde_json::from_slice(&body).map_err(|e| {
        IotHubError::invalid(format!(
            "the batch ({BATCH_CONTENT_TYPE}) is not a JSON array of {{\"body\", \"properties\"}}: {e}"
        ))
    })?;
    // Decoded in full first: a bad item refuses the whole batch, as nothing was stored.
    let mut messages = Vec::with_capacity(items.len());
    for (n, item) in items.into_iter().enumerate() {
        let payload = if item.base64_encoded.unwrap_or(true) {
            STANDARD.decode(item.body.trim()).map_err(|e| {
                IotHubError::invalid(format!("batch message {n}: the body is not base64: {e}"))
            })?
        } else {
            item.body.into_bytes()
        };
        let names = item.properties.iter().map(|(k, v)| (k.as_str(), v.clone()));
        messages.push((property_bag(names), Bytes::from(payload)));
    }
    for (bag, payload) in messages {
        hub.telemetry_received(&id, bag, payload);
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The telemetry property bag from HTTP names and values: the system headers as MQTT's `$.`
/// properties, `iothub-app-{name}` as application property `{name}`; other headers are the
/// request's own (authorization, user agent...) and are left out.
fn property_bag<'a>(pairs: impl Iterator<Item = (&'a str, String)>) -> Vec<Property> {
    let mut system = Vec::new();
    let mut application = Vec::new();
    for (name, value) in pairs {
        let lower = name.to_ascii_lowercase();
        if let Some((_, key)) = SYSTEM_HEADERS.iter().find(|(h, _)| *h == lower) {
            system.push(((*key).to_owned(), Some(value)));
        } else if let Some(app) = lower.strip_prefix(APP_PREFIX)
            && !app.is_empty()
        {
            // Headers come lower-cased (HTTP names are case-insensitive); batch properties
            // keep their case.
            let app = name.get(APP_PREFIX.len()..).unwrap_or(app);
            application.push((app.to_owned(), Some(value)));
        }
    }
    system.extend(application);
    system
}

/// A header value as text: UTF-8 when it is, else each byte as its Latin-1 character (what
/// Node writes for a string with characters above 0x7f).
fn header_text(value: &HeaderValue) -> String {
    match std::str::from_utf8(value.as_bytes()) {
        Ok(text) => text.to_owned(),
        Err(_) => value.as_bytes().iter().map(|&b| char::from(b)).collect(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn telemetry_properties_map_as_over_mqtt() {
        let pairs = [
            ("authorization", "SharedAccessSignature x".to_owned()),
            ("iothub-app-Unit", "celsius".to_owned()),
            ("iothub-messageid", "m1".to_owned()),
            ("iothub-to", "/devices/d/messages/events".to_owned()),
            ("IoTHub-CorrelationId", "c1".to_owned()),
            ("iothub-contenttype", "application/json".to_owned()),
            ("dt-subject", "s".to_owned()),
            ("iothub-app-", "nameless".to_owned()),
        ];
        let bag = property_bag(pairs.iter().map(|(n, v)| (*n, v.clone())));
        let some = |k: &str, v: &str| (k.to_owned(), Some(v.to_owned()));
        assert_eq!(
            bag,
            vec![
                some("$.mid", "m1"),
                some("$.cid", "c1"),
                some("$.ct", "application/json"),
                some("$.sub", "s"),
                some("Unit", "celsius"),
            ]
        );
        assert_eq!(
            header_text(&HeaderValue::from_bytes(b"caf\xe9").unwrap()),
            "café"
        );
    }
}
