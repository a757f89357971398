//! IoT Hub's REST registry API, as the official service SDKs call it (Node `azure-iothub`
//! `Registry`, Python `azure-iot-hub` `IoTHubRegistryManager` and its generated client), so
//! that they manage the local hub's devices exactly as they manage a real hub's:
//!
//! | Route | Right | Success |
//! |---|---|---|
//! | `PUT /devices/{id}` (create; with `If-Match`: update) | RegistryWrite | 200 + device |
//! | `GET /devices/{id}` | RegistryRead | 200 + device |
//! | `GET /devices?top=N` (or `/devices/`) | RegistryRead | 200 + devices (at most 1000) |
//! | `DELETE /devices/{id}` (`If-Match`: ETag or `*`) | RegistryWrite | 204 |
//! | `DELETE /devices/{id}/commands` (purge the C2D queue) | ServiceConnect | 200 |
//! | `GET /statistics/devices` | RegistryRead | 200 |
//! | `GET /statistics/service` | ServiceConnect | 200 |
//!
//! Every request carries `Authorization: SharedAccessSignature sr={host}&sig=..&se=..&skn=..`
//! (a service token, checked against the hub's shared access policies) and an `api-version`
//! query parameter (the SDKs always send one). Device ids in paths are percent-encoded.
//! The device API served beside it (receive, settle, telemetry: [`device`], in
//! `https/device.rs`) takes device tokens instead, so this check is not applied there.
//!
//! Errors use IoT Hub's body, `{"Message":"ErrorCode:{code};{text}","ExceptionMessage":..}`
//! and `iothub-errorcode` header: the Node SDK reads the code from `Message` (its
//! `Http.parseErrorBody`) and the status to pick its error class (DeviceNotFoundError needs
//! 404 with code `DeviceNotFound`); the Python SDK raises `HttpOperationError` for any status
//! but the one each operation expects (200, or 204 for a delete). A change is acknowledged
//! only once it is on disk (with a data dir).

use std::collections::HashMap;
use std::marker::PhantomData;
use std::time::SystemTime;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::iothub::IotHub;
use crate::iothub::IotHubError;
use crate::iothub::domain::message::format_time;
use crate::iothub::domain::policies::Right;
use crate::iothub::domain::registry::{DeviceStatus, DeviceUpdate, Identity};
use crate::iothub::domain::x509::Authentication;
use crate::untrusted::cut;

// The device API (device tokens, not service ones) is a child module so that it shares this
// module's error body and api-version check without widening their visibility.
#[path = "device.rs"]
mod device;

/// What IoT Hub reports for a time that never happened (a device that never connected).
const NEVER: &str = "0001-01-01T00:00:00Z";
/// The most devices `GET /devices` returns; IoT Hub treats a `top` outside 1..=1000 as 1000.
const MAX_TOP: usize = 1000;

/// The routes of IoT Hub's REST API that the hub serves over HTTPS.
pub(crate) fn router(hub: IotHub) -> Router {
    Router::new()
        .route("/devices", get(list_devices))
        // Node's `Registry.list` asks for `/devices/` (its `devicePath('')`).
        .route("/devices/", get(list_devices))
        .route(
            "/devices/{id}",
            get(get_device).put(put_device).delete(delete_device),
        )
        .route("/devices/{id}/commands", delete(purge))
        .route("/statistics/devices", get(device_statistics))
        .route("/statistics/service", get(service_statistics))
        .merge(device::routes())
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            hub.clone(),
            log_refusals,
        ))
        .with_state(hub)
}

/// A refused request, answered as IoT Hub answers it.
#[derive(Debug)]
struct RestError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl RestError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        RestError {
            status,
            code,
            message: message.into(),
        }
    }
}

impl From<IotHubError> for RestError {
    fn from(e: IotHubError) -> Self {
        let status = match &e {
            IotHubError::DeviceNotFound(_) => StatusCode::NOT_FOUND,
            IotHubError::DeviceAlreadyExists(_) => StatusCode::CONFLICT,
            IotHubError::PreconditionFailed(_) | IotHubError::MessageLockLost { .. } => {
                StatusCode::PRECONDITION_FAILED
            }
            IotHubError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            IotHubError::QueueFull { .. } => StatusCode::FORBIDDEN,
            IotHubError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            IotHubError::NotPersisted(_) => StatusCode::SERVICE_UNAVAILABLE,
            IotHubError::Io { .. } | IotHubError::DataDir(_) | IotHubError::Config(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            _ => StatusCode::BAD_REQUEST,
        };
        RestError::new(status, e.code(), e.to_string())
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let tracking = format!(
            "Tracking ID:{:016x}{:016x}-G:0-TimeStamp:{}",
            fastrand::u64(..),
            fastrand::u64(..),
            humantime::format_rfc3339_seconds(SystemTime::now())
        );
        // The Node SDK splits `Message` at ';' and ':' to find the code and the text, so the
        // text must not hold a ';'. IoT Hub says only "Unauthorized" there; the reason (what
        // a developer needs locally) goes to `ExceptionMessage`, which SDKs keep as the raw
        // body.
        let refused =
            (self.status == StatusCode::UNAUTHORIZED).then(|| Refused(self.message.clone()));
        let (text, exception) = if refused.is_some() {
            (
                "Unauthorized".to_owned(),
                format!("{}. {tracking}", self.message),
            )
        } else {
            (self.message.replace(';', ","), tracking)
        };
        let body = json!({
            "Message": format!("ErrorCode:{};{text}", self.code),
            "ExceptionMessage": exception,
        });
        let mut response = (self.status, json_body(&body)).into_response();
        response
            .headers_mut()
            .insert("iothub-errorcode", HeaderValue::from_static(self.code));
        if let Some(refused) = refused {
            response.extensions_mut().insert(refused);
        }
        response
    }
}

/// Why a request was refused for its credentials, for [`log_refusals`].
#[derive(Debug, Clone)]
struct Refused(String);

/// Logs the requests refused for their credentials, with the caller's address, through the
/// hub's [`crate::untrusted::RefusalLog`]: a peer repeating a bad token adds a few lines a
/// minute, and each line quotes at most a short prefix of what it sent.
async fn log_refusals(
    State(hub): State<IotHub>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let peer = request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0);
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    if let Some(Refused(reason)) = response.extensions().get::<Refused>() {
        let ip = peer.map_or(std::net::IpAddr::from([0, 0, 0, 0]), |p| p.ip());
        if let Some(left_out) = hub.refusals().admit(ip) {
            tracing::info!(peer = ?peer, path = ?cut(&path), left_out, %reason,
                "iothub: REST request refused");
        }
    }
    response
}

type RestResult<T> = Result<T, RestError>;

/// JSON with IoT Hub's content type.
fn json_body(value: &Value) -> impl IntoResponse + use<> {
    (
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        value.to_string(),
    )
}

/// Checks the request's service token and that its policy has `right`.
fn authorize(hub: &IotHub, headers: &HeaderMap, right: Right) -> RestResult<()> {
    let token = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| {
            IotHubError::Unauthorized(
                "no Authorization header (a SharedAccessSignature service token)".into(),
            )
        })?
        .to_str()
        .map_err(|_| IotHubError::Unauthorized("the Authorization header is not text".into()))?;
    hub.authenticate_service(token)?.require(right)?;
    Ok(())
}

/// IoT Hub refuses a request without `api-version` (the SDKs always send one: 2021-04-12 for
/// the registry, 2020-09-30 for Node's generated client). Any date-shaped version is
/// accepted: the routes served here are the same in every version the SDKs use.
fn api_version(query: &HashMap<String, String>) -> RestResult<()> {
    let version = query.get("api-version").map(String::as_str).unwrap_or("");
    let date = version.split_once("-preview").map_or(version, |(d, _)| d);
    let shaped = date.len() == 10
        && date.char_indices().all(|(i, c)| {
            if i == 4 || i == 7 {
                c == '-'
            } else {
                c.is_ascii_digit()
            }
        });
    if shaped {
        Ok(())
    } else {
        Err(RestError::new(
            StatusCode::BAD_REQUEST,
            "InvalidProtocolVersion",
            format!(
                "invalid api-version {version:?}: give api-version=YYYY-MM-DD, e.g. 2021-04-12"
            ),
        ))
    }
}

/// The preamble every service route shares, as an extractor: the request's service token
/// must grant `R`'s right ([`authorize`]), then the request must name an `api-version`
/// ([`api_version`]), in that order. Listed after a route's path and query extractors and
/// before its body, so that it runs where the checks ran when each handler opened with them.
struct Service<R>(PhantomData<R>);

/// The right a service route needs, as a type ([`Service`]'s parameter).
trait NeedsRight {
    const RIGHT: Right;
}

/// Reads the registry.
struct RegistryRead;
/// Changes the registry.
struct RegistryWrite;
/// The service's own operations (purge, statistics of connections).
struct ServiceConnect;

impl NeedsRight for RegistryRead {
    const RIGHT: Right = Right::RegistryRead;
}
impl NeedsRight for RegistryWrite {
    const RIGHT: Right = Right::RegistryWrite;
}
impl NeedsRight for ServiceConnect {
    const RIGHT: Right = Right::ServiceConnect;
}

impl<R: NeedsRight> FromRequestParts<IotHub> for Service<R> {
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, hub: &IotHub) -> RestResult<Self> {
        authorize(hub, &parts.headers, R::RIGHT)?;
        // A query that does not parse names no api-version.
        let query = Query::<HashMap<String, String>>::try_from_uri(&parts.uri)
            .map(|Query(q)| q)
            .unwrap_or_default();
        api_version(&query)?;
        Ok(Service(PhantomData))
    }
}

fn if_match(headers: &HeaderMap) -> RestResult<Option<&str>> {
    headers
        .get(header::IF_MATCH)
        .map(|v| {
            v.to_str().map_err(|_| {
                RestError::from(IotHubError::invalid("the If-Match header is not text"))
            })
        })
        .transpose()
}

/// The body of `PUT /devices/{id}`: what the SDKs send (`Device`); read-only fields (etag,
/// generationId, connectionState, counts, times) are ignored as IoT Hub ignores them.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeviceBody {
    device_id: Option<String>,
    status: Option<String>,
    status_reason: Option<String>,
    authentication: Option<AuthenticationBody>,
    capabilities: Option<CapabilitiesBody>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuthenticationBody {
    #[serde(rename = "type")]
    kind: Option<String>,
    symmetric_key: Option<SymmetricKeyBody>,
    x509_thumbprint: Option<ThumbprintBody>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ThumbprintBody {
    primary_thumbprint: Option<String>,
    secondary_thumbprint: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SymmetricKeyBody {
    primary_key: Option<String>,
    secondary_key: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CapabilitiesBody {
    iot_edge: Option<bool>,
}

impl DeviceBody {
    /// What to set. Empty or absent keys are generated (create) or kept (update): the Node
    /// SDK sends `""` for keys it was not given.
    fn into_update(self) -> Result<DeviceUpdate, IotHubError> {
        let status = match self.status.as_deref() {
            None => DeviceStatus::Enabled,
            Some(s) if s.eq_ignore_ascii_case("enabled") => DeviceStatus::Enabled,
            Some(s) if s.eq_ignore_ascii_case("disabled") => DeviceStatus::Disabled,
            Some(s) => {
                return Err(IotHubError::invalid(format!(
                    "status {s:?} is not \"enabled\" or \"disabled\""
                )));
            }
        };
        let authentication = self.authentication.unwrap_or_default();
        let thumbprints = authentication.x509_thumbprint.unwrap_or_default();
        let has_thumbprint = thumbprints
            .primary_thumbprint
            .as_deref()
            .is_some_and(|t| !t.trim().is_empty());
        // The SDKs name the type (Python's `create_device_with_x509` sends "selfSigned");
        // a body with a thumbprint and no type is self-signed, as on IoT Hub.
        let kind = match authentication.kind.as_deref() {
            None if has_thumbprint => Some("selfSigned"),
            other => other,
        };
        let auth = match kind {
            None => None,
            Some(kind) if kind.eq_ignore_ascii_case("sas") => Some(Authentication::Sas),
            Some(kind) if kind.eq_ignore_ascii_case("selfSigned") => {
                Some(Authentication::self_signed(
                    thumbprints.primary_thumbprint.as_deref(),
                    thumbprints.secondary_thumbprint.as_deref(),
                )?)
            }
            Some(kind) if kind.eq_ignore_ascii_case("certificateAuthority") => {
                Some(Authentication::CertificateAuthority)
            }
            Some(kind) => {
                return Err(IotHubError::invalid(format!(
                    "authentication type {kind:?} is not \"sas\", \"selfSigned\" or \"certificateAuthority\""
                )));
            }
        };
        let keys = authentication.symmetric_key.unwrap_or_default();
        let given = |k: Option<String>| k.filter(|k| !k.trim().is_empty());
        Ok(DeviceUpdate {
            primary_key: given(keys.primary_key),
            secondary_key: given(keys.secondary_key),
            status,
            status_reason: self.status_reason,
            iot_edge: self.capabilities.and_then(|c| c.iot_edge).unwrap_or(false),
            authentication: auth,
        })
    }
}

/// A device as IoT Hub's REST API shows it (the SDKs' `Device` model).
fn device_json(identity: &Identity) -> Value {
    let d = &identity.device;
    let time = |t: Option<SystemTime>| t.map_or_else(|| NEVER.to_owned(), format_time);
    json!({
        "deviceId": d.device_id,
        "generationId": d.generation_id,
        "etag": d.etag,
        "connectionState": if identity.connected { "Connected" } else { "Disconnected" },
        "status": d.status.as_str(),
        "statusReason": d.status_reason,
        "connectionStateUpdatedTime": time(identity.connection_state_updated),
        "statusUpdatedTime": d.status_updated_time.as_deref().unwrap_or(NEVER),
        "lastActivityTime": time(identity.last_activity),
        "cloudToDeviceMessageCount": identity.queue_depth,
        "authentication": authentication_json(d),
        "capabilities": { "iotEdge": d.iot_edge },
        "parentScopes": [],
    })
}

/// IoT Hub's `authentication` of a device: the keys of a SAS device, the thumbprints of a
/// self-signed one, nulls where a type has none (as the SDKs' `Device` model reads them).
fn authentication_json(d: &crate::iothub::Device) -> Value {
    let (keys, thumbprints) = match &d.authentication {
        Authentication::Sas => (
            json!({ "primaryKey": d.primary_key, "secondaryKey": d.secondary_key }),
            json!({ "primaryThumbprint": null, "secondaryThumbprint": null }),
        ),
        Authentication::SelfSigned {
            primary_thumbprint,
            secondary_thumbprint,
        } => (
            json!({ "primaryKey": null, "secondaryKey": null }),
            json!({ "primaryThumbprint": primary_thumbprint, "secondaryThumbprint": secondary_thumbprint }),
        ),
        Authentication::CertificateAuthority => (
            json!({ "primaryKey": null, "secondaryKey": null }),
            json!({ "primaryThumbprint": null, "secondaryThumbprint": null }),
        ),
    };
    json!({
        "symmetricKey": keys,
        "x509Thumbprint": thumbprints,
        "type": d.authentication.type_name(),
    })
}

/// A device response, with its ETag also in the `ETag` header (quoted), as IoT Hub sends it.
fn device_response(identity: &Identity) -> Response {
    let mut response = json_body(&device_json(identity)).into_response();
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", identity.device.etag)) {
        response.headers_mut().insert(header::ETAG, etag);
    }
    response
}

async fn get_device(
    State(hub): State<IotHub>,
    Path(id): Path<String>,
    _: Service<RegistryRead>,
) -> RestResult<Response> {
    Ok(device_response(&hub.identity(&id)?))
}

async fn list_devices(
    State(hub): State<IotHub>,
    Query(query): Query<HashMap<String, String>>,
    _: Service<RegistryRead>,
) -> RestResult<Response> {
    let top = match query.get("top") {
        None => MAX_TOP,
        Some(text) => {
            let n: i64 = text
                .trim()
                .parse()
                .map_err(|_| IotHubError::invalid(format!("top={text:?} is not a whole number")))?;
            usize::try_from(n)
                .ok()
                .filter(|n| (1..=MAX_TOP).contains(n))
                .unwrap_or(MAX_TOP)
        }
    };
    let devices: Vec<Value> = hub.identities(top).iter().map(device_json).collect();
    Ok(json_body(&Value::Array(devices)).into_response())
}

async fn put_device(
    State(hub): State<IotHub>,
    Path(id): Path<String>,
    headers: HeaderMap,
    _: Service<RegistryWrite>,
    body: Bytes,
) -> RestResult<Response> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(RestError::new(
            StatusCode::BAD_REQUEST,
            "ArgumentNull",
            "the request has no body: send the device (JSON)",
        ));
    }
    let request: DeviceBody = serde_json::from_slice(&body)
        .map_err(|e| IotHubError::invalid(format!("the device JSON is not valid: {e}")))?;
    if let Some(body_id) = &request.device_id
        && body_id != &id
    {
        return Err(IotHubError::invalid(format!(
            "the deviceId in the body ({body_id:?}) is not the one in the path ({id:?})"
        ))
        .into());
    }
    let update = request.into_update()?;
    // Without If-Match the SDKs create (and a taken id is a conflict); with it they update
    // (Node's `update` sends "*", Python's the ETag or "*").
    let device = match if_match(&headers)? {
        None => hub.create_device(&id, &update)?,
        Some(etag) => hub.update_device(&id, &update, Some(etag))?,
    };
    hub.persisted().await?;
    let mut identity = hub.identity(&id).unwrap_or_else(|_| Identity {
        device: device.clone(),
        connected: false,
        connection_state_updated: None,
        last_activity: None,
        queue_depth: 0,
    });
    // What this request made, even if another one changed the device since.
    identity.device = device;
    Ok(device_response(&identity))
}

async fn delete_device(
    State(hub): State<IotHub>,
    Path(id): Path<String>,
    headers: HeaderMap,
    _: Service<RegistryWrite>,
) -> RestResult<Response> {
    hub.delete_device(&id, if_match(&headers)?)?;
    hub.persisted().await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn purge(
    State(hub): State<IotHub>,
    Path(id): Path<String>,
    _: Service<ServiceConnect>,
) -> RestResult<Response> {
    let total = hub.purge(&id)?;
    hub.persisted().await?;
    let body = json!({ "totalMessagesPurged": total, "deviceId": id, "moduleId": null });
    Ok(json_body(&body).into_response())
}

async fn device_statistics(
    State(hub): State<IotHub>,
    _: Service<RegistryRead>,
) -> RestResult<Response> {
    let devices = hub.identities(usize::MAX);
    let disabled = devices
        .iter()
        .filter(|i| i.device.status == DeviceStatus::Disabled)
        .count();
    let body = json!({
        "totalDeviceCount": devices.len(),
        "enabledDeviceCount": devices.len() - disabled,
        "disabledDeviceCount": disabled,
    });
    Ok(json_body(&body).into_response())
}

async fn service_statistics(
    State(hub): State<IotHub>,
    _: Service<ServiceConnect>,
) -> RestResult<Response> {
    let connected = hub
        .identities(usize::MAX)
        .iter()
        .filter(|i| i.connected)
        .count();
    Ok(json_body(&json!({ "connectedDeviceCount": connected })).into_response())
}

async fn not_found(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    RestError::new(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!(
            "the local IoT Hub does not serve {method} {} (see docs/iothub.md)",
            uri.path()
        ),
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn api_versions() {
        let q = |v: &str| HashMap::from([("api-version".to_owned(), v.to_owned())]);
        assert!(api_version(&q("2021-04-12")).is_ok());
        assert!(api_version(&q("2020-09-30")).is_ok());
        assert!(api_version(&q("2021-07-02-preview")).is_ok());
        assert!(api_version(&q("latest")).is_err());
        assert_eq!(
            api_version(&HashMap::new()).unwrap_err().code,
            "InvalidProtocolVersion"
        );
    }

    #[test]
    fn bodies_the_sdks_send() {
        // Node's `create` without authentication (normalized by the SDK).
        let node: DeviceBody = serde_json::from_str(
            r#"{"deviceId":"d","authentication":{"type":"sas",
                "symmetricKey":{"primaryKey":"","secondaryKey":""}}}"#,
        )
        .unwrap();
        let u = node.into_update().unwrap();
        assert_eq!((u.primary_key, u.status), (None, DeviceStatus::Enabled));
        // Python's `create_device_with_sas` (msrest drops None fields).
        let python: DeviceBody = serde_json::from_str(
            r#"{"deviceId":"d","status":"disabled","authentication":{"symmetricKey":
                {"primaryKey":"AAECAwQFBgcICQoLDA0ODw=="},"type":"sas"},
                "capabilities":{"iotEdge":true}}"#,
        )
        .unwrap();
        let u = python.into_update().unwrap();
        assert_eq!(u.primary_key.as_deref(), Some("AAECAwQFBgcICQoLDA0ODw=="));
        assert_eq!((u.status, u.iot_edge), (DeviceStatus::Disabled, true));
        // Node's deprecated `Device` class, with read-only fields of other types.
        let class: DeviceBody = serde_json::from_str(
            r#"{"deviceId":"d","connectionState":"disconnected","cloudToDeviceMessageCount":"0",
                "capabilities":{},"authentication":{"type":"sas","symmetricKey":
                {"primaryKey":null,"secondaryKey":null},"x509Thumbprint":
                {"primaryThumbprint":null,"secondaryThumbprint":null}}}"#,
        )
        .unwrap();
        assert!(class.into_update().is_ok());
        let x509: DeviceBody =
            serde_json::from_str(r#"{"authentication":{"type":"selfSigned"}}"#).unwrap();
        assert!(x509.into_update().is_err());
    }
}
