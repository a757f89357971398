//! The HTTP+JSON admin API's routes (axum): the service side of the hub for the CLI, curl and any
//! language. Every error is JSON `{"errorCode": "...", "message": "..."}` with a fitting status;
//! the routes are listed in `docs/iothub.md`.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use crate::iothub::IotHubError;
use crate::iothub::domain::hub::IotHub;
use crate::iothub::domain::message::{Ack, C2dMessage, Expiry, format_time};
use crate::iothub::domain::policies::Right;
use crate::iothub::domain::registry::{DeviceSpec, DeviceUpdate};
use crate::iothub::domain::x509::Authentication;

/// The longest a request may wait for feedback or telemetry (`waitSecs`).
const MAX_WAIT: Duration = Duration::from_secs(300);
/// The longest-lived device token `GET /devices/{id}/token` makes (`ttlSecs`): far beyond any
/// use, and far from the clock's end (a TTL of `u64::MAX` seconds used to overflow it).
const MAX_TOKEN_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
/// Room in a request body for everything but a message's payload (ids, properties, JSON).
const BODY_OVERHEAD: usize = 64 * 1024;

/// The largest request body the admin API reads, for a hub whose largest cloud-to-device
/// body is `max_message_size`: that body written as JSON text with every byte escaped
/// (`\u00XX`, 6 bytes per byte; base64 needs only 4 per 3), plus 64 KiB for the rest. With
/// the default 64 KiB messages: 448 KiB. Larger bodies get `413` before any is buffered
/// beyond the limit.
pub fn body_limit(max_message_size: usize) -> usize {
    max_message_size
        .saturating_mul(6)
        .saturating_add(BODY_OVERHEAD)
}

/// The body of `POST /devices/{id}/messages/devicebound`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SendRequest {
    /// The body as UTF-8 text (or use `payloadBase64`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    /// The body, base64-encoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_base64: Option<String>,
    /// `$.mid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// `$.cid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// `$.uid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// `$.ct`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// `$.ce`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    /// Application properties (in name order on the topic); `null` is a null property.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, Option<String>>,
    /// `none` (default), `positive`, `negative` or `full`.
    #[serde(default)]
    pub ack: Ack,
    /// TTL in seconds (default: the hub's default TTL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<f64>,
    /// Absolute expiry (RFC 3339), instead of `ttlSecs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry_time_utc: Option<String>,
}

impl SendRequest {
    /// The message this request describes.
    pub fn into_message(self) -> Result<C2dMessage, IotHubError> {
        let payload = match (self.payload, self.payload_base64) {
            (Some(_), Some(_)) => {
                return Err(IotHubError::invalid(
                    "give payload or payloadBase64, not both",
                ));
            }
            (Some(text), None) => bytes::Bytes::from(text),
            (None, Some(b64)) => STANDARD
                .decode(b64)
                .map_err(|e| IotHubError::invalid(format!("payloadBase64 is not base64: {e}")))?
                .into(),
            (None, None) => bytes::Bytes::new(),
        };
        let expiry = match (self.ttl_secs, self.expiry_time_utc) {
            (Some(_), Some(_)) => {
                return Err(IotHubError::invalid(
                    "give ttlSecs or expiryTimeUtc, not both",
                ));
            }
            (Some(secs), None) => Some(Expiry::Ttl(
                Duration::try_from_secs_f64(secs)
                    .ok()
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| {
                        IotHubError::invalid(format!("ttlSecs {secs} is not a positive number"))
                    })?,
            )),
            (None, Some(at)) => Some(Expiry::At(humantime::parse_rfc3339_weak(&at).map_err(
                |e| {
                    IotHubError::invalid(format!(
                        "expiryTimeUtc {at:?} is not an RFC 3339 time: {e}"
                    ))
                },
            )?)),
            (None, None) => None,
        };
        Ok(C2dMessage {
            payload,
            message_id: self.message_id,
            correlation_id: self.correlation_id,
            user_id: self.user_id,
            content_type: self.content_type,
            content_encoding: self.content_encoding,
            properties: self.properties.into_iter().collect(),
            expiry,
            ack: self.ack,
        })
    }
}

/// The body of `PUT /devices/{id}`: a SAS device (both keys optional: generated when absent),
/// or an X.509 device (docs/iothub.md, "X.509 devices"): `selfSigned` with its certificate's
/// thumbprints, or `certificateAuthority`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddDeviceRequest {
    /// Primary key (base64 of 16 to 64 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_key: Option<String>,
    /// Secondary key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secondary_key: Option<String>,
    /// IoT Hub's `authentication.type`: `sas` (the default), `selfSigned` (the default when a
    /// thumbprint is given) or `certificateAuthority`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<String>,
    /// SHA-1 or SHA-256 thumbprint (hex) of a `selfSigned` device's certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_thumbprint: Option<String>,
    /// The second certificate's thumbprint (certificate rollover).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secondary_thumbprint: Option<String>,
}

impl AddDeviceRequest {
    /// How the device authenticates; refuses keys with a certificate type and thumbprints
    /// with another type, so that nothing given is silently ignored.
    fn authentication(&self) -> Result<Authentication, IotHubError> {
        let thumbprints = self.primary_thumbprint.is_some() || self.secondary_thumbprint.is_some();
        let kind = match (self.authentication.as_deref(), thumbprints) {
            (Some(kind), _) => kind,
            (None, true) => "selfSigned",
            (None, false) => "sas",
        };
        let auth = match kind {
            "sas" => Authentication::Sas,
            "selfSigned" => Authentication::self_signed(
                self.primary_thumbprint.as_deref(),
                self.secondary_thumbprint.as_deref(),
            )?,
            "certificateAuthority" => Authentication::CertificateAuthority,
            other => {
                return Err(IotHubError::invalid(format!(
                    "authentication {other:?}: expected \"sas\", \"selfSigned\" or \"certificateAuthority\""
                )));
            }
        };
        if thumbprints && !matches!(auth, Authentication::SelfSigned { .. }) {
            return Err(IotHubError::invalid(format!(
                "thumbprints are for selfSigned devices, not {kind:?}"
            )));
        }
        if auth.is_x509() && (self.primary_key.is_some() || self.secondary_key.is_some()) {
            return Err(IotHubError::invalid(format!(
                "keys are for sas devices; a {kind:?} device authenticates with its certificate"
            )));
        }
        Ok(auth)
    }
}

/// What `GET /devices/{id}/token` returns: everything an MQTT client needs to connect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceCredentials {
    /// The MQTT client id (the device id).
    pub client_id: String,
    /// The MQTT user name.
    pub username: String,
    /// The MQTT password: a SAS token.
    pub password: String,
    /// When the token expires (RFC 3339).
    pub expiry_time_utc: String,
    /// The device connection string.
    pub connection_string: String,
}

/// What `DELETE /devices/{id}/messages/devicebound` returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PurgeResult {
    /// The device.
    pub device_id: String,
    /// How many messages were purged.
    pub total_messages_purged: usize,
}

/// Why an admin API request failed: the hub's error, or a body that could not be read.
enum ApiError {
    Hub(IotHubError),
    /// Too large for [`body_limit`] (`413`), or cut short.
    Body(BytesRejection),
}

impl From<IotHubError> for ApiError {
    fn from(e: IotHubError) -> Self {
        ApiError::Hub(e)
    }
}

impl From<BytesRejection> for ApiError {
    fn from(rejection: BytesRejection) -> Self {
        ApiError::Body(rejection)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let e = match self {
            ApiError::Hub(e) => e,
            ApiError::Body(rejection) => {
                let code = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    "RequestTooLarge"
                } else {
                    "InvalidRequestBody"
                };
                let body =
                    serde_json::json!({ "errorCode": code, "message": rejection.body_text() });
                return (rejection.status(), axum::Json(body)).into_response();
            }
        };
        let status = match &e {
            IotHubError::DeviceNotFound(_) => StatusCode::NOT_FOUND,
            IotHubError::DeviceAlreadyExists(_) => StatusCode::CONFLICT,
            IotHubError::QueueFull { .. } => StatusCode::FORBIDDEN,
            IotHubError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            IotHubError::FeedbackLockLost(_) => StatusCode::PRECONDITION_FAILED,
            IotHubError::MessageLockLost { .. } => StatusCode::PRECONDITION_FAILED,
            IotHubError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            IotHubError::Io { .. } | IotHubError::DataDir(_) => StatusCode::INTERNAL_SERVER_ERROR,
            IotHubError::NotPersisted(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::BAD_REQUEST,
        };
        let body = serde_json::json!({ "errorCode": e.code(), "message": e.to_string() });
        (status, axum::Json(body)).into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

fn parse_json<T: serde::de::DeserializeOwned + Default>(body: &Bytes) -> Result<T, IotHubError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| IotHubError::invalid(format!("request body: {e}")))
}

fn query_secs(
    query: &HashMap<String, String>,
    name: &str,
    default: f64,
) -> Result<Duration, IotHubError> {
    match query.get(name) {
        None => Ok(Duration::from_secs_f64(default)),
        Some(text) => text
            .parse::<f64>()
            .ok()
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .map(|d| d.min(MAX_WAIT))
            .ok_or_else(|| {
                IotHubError::invalid(format!("{name}={text:?} is not a number of seconds"))
            }),
    }
}

/// The admin API's routes over `hub`. Every route that changes state has a method other than
/// GET, except the feedback receive, which locks a batch: it is marked with
/// [`crate::web::guard::state_changing`], so browsers from elsewhere cannot send it either.
pub(crate) fn router(hub: IotHub) -> Router {
    let limit = body_limit(hub.config().max_message_size);
    Router::new()
        .route("/hub", get(hub_info))
        .route("/devices", get(list_devices))
        .route(
            "/devices/{id}",
            get(get_device).put(add_device).delete(remove_device),
        )
        .route("/devices/{id}/token", get(device_token))
        .route(
            "/policies/{name}/connection-string",
            get(service_connection_string),
        )
        .route(
            "/devices/{id}/messages/devicebound",
            get(queue).post(send).delete(purge),
        )
        .route("/devices/{id}/messages/events", get(events))
        .route(
            "/messages/servicebound/feedback",
            crate::web::guard::state_changing(get(receive_feedback)),
        )
        .route(
            "/messages/servicebound/feedback/{token}",
            axum::routing::delete(complete_feedback),
        )
        .route(
            "/messages/servicebound/feedback/{token}/abandon",
            post(abandon_feedback),
        )
        .fallback(not_found)
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .with_state(hub)
}

async fn not_found(uri: axum::http::Uri) -> Response {
    let body = serde_json::json!({
        "errorCode": "NotFound",
        "message": format!("no route {}; see docs/iothub.md", uri.path()),
    });
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

/// The right a service SAS token needs for a route of this API: the registry rights for
/// devices, ServiceConnect for messages and feedback, every right for the policies'
/// connection strings (they hold keys). `None` for paths that are not this API's (the
/// dashboard is not opened by a hub token).
fn right_for(method: &axum::http::Method, path: &str) -> Option<&'static [Right]> {
    use Right::*;
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let reading = method == axum::http::Method::GET;
    Some(match segments.as_slice() {
        ["hub"] | ["devices"] => &[RegistryRead],
        ["devices", _] | ["devices", _, "token"] if reading => &[RegistryRead],
        ["devices", _] => &[RegistryWrite],
        ["devices", _, "messages", ..] | ["messages", "servicebound", "feedback", ..] => {
            &[ServiceConnect]
        }
        ["policies", _, "connection-string"] => &[RegistryWrite, ServiceConnect, DeviceConnect],
        _ => return None,
    })
}

/// The admin API's check of service SAS tokens, for [`crate::web::auth::WebAuth`]: a token
/// of one of the hub's policies, with the rights the route needs (`right_for`).
pub(crate) fn service_token_check(hub: IotHub) -> crate::web::auth::ServiceTokenCheck {
    Box::new(move |method, path, token| {
        let Some(rights) = right_for(method, path) else {
            return Err(format!(
                "a service SAS token does not give access to {path}; use the access token"
            ));
        };
        let grant = hub.authenticate_service(token).map_err(|e| e.to_string())?;
        rights
            .iter()
            .try_for_each(|r| grant.require(*r))
            .map_err(|e| e.to_string())
    })
}

/// `GET /policies/{name}/connection-string`: the service connection string of a shared
/// access policy (`mqstate iothub connection-string`).
async fn service_connection_string(
    State(hub): State<IotHub>,
    Path(name): Path<String>,
) -> ApiResult<impl IntoResponse> {
    let policy = hub.policy(&name)?;
    Ok(axum::Json(serde_json::json!({
        "keyName": policy.key_name,
        "rights": policy.rights,
        "connectionString": hub.service_connection_string(&name)?,
    })))
}

async fn hub_info(State(hub): State<IotHub>) -> impl IntoResponse {
    axum::Json(hub.info())
}

async fn list_devices(State(hub): State<IotHub>) -> impl IntoResponse {
    axum::Json(hub.devices())
}

async fn get_device(
    State(hub): State<IotHub>,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    Ok(axum::Json(hub.device(&id)?))
}

async fn add_device(
    State(hub): State<IotHub>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<impl IntoResponse> {
    let request: AddDeviceRequest = parse_json(&body?)?;
    let authentication = request.authentication()?;
    let device = if authentication.is_x509() {
        hub.create_device(
            &id,
            &DeviceUpdate {
                authentication: Some(authentication),
                ..DeviceUpdate::default()
            },
        )?
    } else {
        hub.add_device(&DeviceSpec {
            id,
            primary_key: request.primary_key,
            secondary_key: request.secondary_key,
        })?
    };
    hub.persisted().await?;
    Ok((StatusCode::CREATED, axum::Json(device)))
}

async fn remove_device(
    State(hub): State<IotHub>,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    hub.remove_device(&id)?;
    hub.persisted().await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn device_token(
    State(hub): State<IotHub>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<impl IntoResponse> {
    let ttl = match query.get("ttlSecs") {
        None => Duration::from_secs(3600),
        Some(t) => t
            .parse::<u64>()
            .ok()
            .map(Duration::from_secs)
            .filter(|d| !d.is_zero() && *d <= MAX_TOKEN_TTL)
            .ok_or_else(|| {
                IotHubError::invalid(format!(
                    "ttlSecs={t:?} is not a whole number of seconds from 1 to {}",
                    MAX_TOKEN_TTL.as_secs()
                ))
            })?,
    };
    let password = hub.device_token(&id, ttl)?;
    Ok(axum::Json(DeviceCredentials {
        client_id: id.clone(),
        username: hub.device_username(&id),
        password,
        expiry_time_utc: format_time(SystemTime::now() + ttl),
        connection_string: hub.connection_string(&id)?,
    }))
}

async fn send(
    State(hub): State<IotHub>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<impl IntoResponse> {
    let request: SendRequest = parse_json(&body?)?;
    let receipt = hub.send(&id, request.into_message()?)?;
    // Acknowledged only once it is on disk (with a data dir; group commit).
    hub.persisted().await?;
    Ok((StatusCode::CREATED, axum::Json(receipt)))
}

async fn queue(State(hub): State<IotHub>, Path(id): Path<String>) -> ApiResult<impl IntoResponse> {
    Ok(axum::Json(hub.queue(&id)?))
}

async fn purge(State(hub): State<IotHub>, Path(id): Path<String>) -> ApiResult<impl IntoResponse> {
    let total = hub.purge(&id)?;
    hub.persisted().await?;
    Ok(axum::Json(PurgeResult {
        device_id: id,
        total_messages_purged: total,
    }))
}

async fn events(
    State(hub): State<IotHub>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<impl IntoResponse> {
    let since = match query.get("since") {
        None => 0,
        Some(s) => s
            .parse::<u64>()
            .map_err(|_| IotHubError::invalid(format!("since={s:?} is not a sequence number")))?,
    };
    let wait = query_secs(&query, "waitSecs", 0.0)?;
    Ok(axum::Json(hub.wait_telemetry(&id, since, wait).await?))
}

async fn receive_feedback(
    State(hub): State<IotHub>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let wait = query_secs(&query, "waitSecs", 0.0)?;
    Ok(match hub.receive_feedback(wait).await {
        Some(batch) => axum::Json(batch).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    })
}

async fn complete_feedback(
    State(hub): State<IotHub>,
    Path(token): Path<String>,
) -> ApiResult<impl IntoResponse> {
    hub.complete_feedback(&token)?;
    hub.persisted().await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn abandon_feedback(
    State(hub): State<IotHub>,
    Path(token): Path<String>,
) -> ApiResult<impl IntoResponse> {
    hub.abandon_feedback(&token)?;
    hub.persisted().await?;
    Ok(StatusCode::NO_CONTENT)
}
