//! The dashboard's HTTP routes (axum), merged into the IoT Hub admin API's server so both
//! answer on one port. Everything lives under `/dashboard/`: the page and its script and
//! style (embedded in the binary), JSON reads, the live feed as server-sent events, and the
//! edits, which answer `403 ReadOnly` unless the server runs with `--dashboard-edit`.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use tokio::sync::broadcast;
#[cfg(feature = "client")]
use {std::sync::Arc, tokio::sync::OnceCell};

use super::monitor::{Monitor, QueryError};
use crate::iothub::IotHub;
use crate::iothub::admin::SendRequest;
use bytes::Bytes;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// What the routes need.
#[derive(Clone)]
struct Ctx {
    monitor: Monitor,
    hub: Option<IotHub>,
    edit: bool,
    /// The broker the store listens on: edits go through the protocol like any client's.
    broker: (String, u16),
    /// The dashboard's own state store client, for edits (the core's client layer: feature
    /// `client`; without it the dashboard is read-only).
    #[cfg(feature = "client")]
    client: Arc<OnceCell<mqstate::Client>>,
}

/// The dashboard's routes: `monitor` is the store's hook, `hub` the local IoT Hub (if it
/// runs), `edit` allows set/delete/send/purge, and `broker` is where the store's clients
/// connect (the page's key edits are sent there as ordinary requests).
pub(crate) fn router(
    monitor: Monitor,
    hub: Option<IotHub>,
    edit: bool,
    broker: (String, u16),
) -> Router {
    let ctx = Ctx {
        monitor,
        hub,
        edit,
        broker,
        #[cfg(feature = "client")]
        client: Arc::new(OnceCell::new()),
    };
    Router::new()
        .route("/", get(|| async { Redirect::to("/dashboard/") }))
        .route("/dashboard", get(|| async { Redirect::to("/dashboard/") }))
        .route("/dashboard/", get(index))
        .route("/dashboard/app.js", get(app_js))
        .route("/dashboard/app.css", get(app_css))
        .route("/dashboard/api/info", get(info))
        .route(
            "/dashboard/api/keys",
            get(keys).post(set_key).delete(delete_key),
        )
        .route("/dashboard/api/changes", get(changes))
        .route("/dashboard/api/leases", get(leases))
        .route("/dashboard/api/clients", get(clients))
        .route("/dashboard/api/metrics", get(metrics))
        .route("/dashboard/api/feedback", get(feedback))
        .route(
            "/dashboard/api/devices/{id}/messages",
            post(send).delete(purge),
        )
        .with_state(ctx)
}

async fn index() -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        INDEX_HTML,
    )
        .into_response()
}

async fn app_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        APP_JS,
    )
        .into_response()
}

async fn app_css() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], APP_CSS).into_response()
}

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "errorCode": code, "message": message.into() });
    (status, Json(body)).into_response()
}

fn read_only() -> Response {
    error(
        StatusCode::FORBIDDEN,
        "ReadOnly",
        "the dashboard is read-only; start `mqstate serve --dashboard-edit` to edit",
    )
}

async fn info(State(ctx): State<Ctx>) -> Response {
    // The count is the store's; a busy store does not keep the page from loading.
    let keys = ctx.monitor.key_count().await.ok();
    Json(serde_json::json!({
        "edit": ctx.edit,
        "iothub": ctx.hub.is_some(),
        "broker": format!("{}:{}", ctx.broker.0, ctx.broker.1),
        "keys": keys,
    }))
    .into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysQuery {
    /// Keys starting with this text (the default: every key).
    prefix: Option<String>,
    /// A glob pattern instead (docs/protocol.md, "Listing keys: SCAN").
    pattern: Option<String>,
    /// The `next` of the page before, to go on from there.
    token: Option<String>,
}

/// One page of the key table, read from the store with the same scan as `SCAN`.
async fn keys(State(ctx): State<Ctx>, Query(q): Query<KeysQuery>) -> Response {
    let pattern = match (q.pattern, q.prefix) {
        (Some(_), Some(_)) => {
            return error(
                StatusCode::BAD_REQUEST,
                "BadQuery",
                "give either prefix or pattern, not both",
            );
        }
        (Some(pattern), None) => pattern.into_bytes(),
        (None, prefix) => prefix_pattern(prefix.unwrap_or_default().as_bytes()),
    };
    let token = match q
        .token
        .as_deref()
        .map(mqstate::protocol::topics::hex_decode)
        .transpose()
    {
        Ok(token) => token,
        Err(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "BadToken",
                "token must be the hex `next` of a page",
            );
        }
    };
    match ctx
        .monitor
        .keys_page(Bytes::from(pattern), token.map(Bytes::from))
        .await
    {
        Ok(page) => Json(page).into_response(),
        Err(QueryError::Invalid(text)) => error(StatusCode::BAD_REQUEST, "BadQuery", text),
        Err(e @ QueryError::Unavailable(_)) => {
            error(StatusCode::SERVICE_UNAVAILABLE, "Busy", e.to_string())
        }
    }
}

/// The glob pattern matching the keys that start with `prefix`: its metacharacters escaped,
/// then `*`.
fn prefix_pattern(prefix: &[u8]) -> Vec<u8> {
    let mut pattern = Vec::with_capacity(prefix.len() + 1);
    for &b in prefix {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            pattern.push(b'\\');
        }
        pattern.push(b);
    }
    pattern.push(b'*');
    pattern
}

async fn leases(State(ctx): State<Ctx>) -> Response {
    Json(ctx.monitor.leases()).into_response()
}

async fn clients(State(ctx): State<Ctx>) -> Response {
    Json(ctx.monitor.clients()).into_response()
}

async fn metrics(State(ctx): State<Ctx>) -> Response {
    Json(ctx.monitor.metrics()).into_response()
}

async fn feedback(State(ctx): State<Ctx>) -> Response {
    match &ctx.hub {
        Some(hub) => Json(hub.recent_feedback()).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "NoIotHub",
            "the IoT Hub is not running",
        ),
    }
}

/// The live feed: the recent changes, then each new one, as `change` events whose data is
/// the change's JSON. A page that falls too far behind gets a `lagged` event (it says so).
async fn changes(State(ctx): State<Ctx>) -> Response {
    let (recent, rx) = ctx.monitor.recent_and_subscribe();
    let backlog = futures_util::stream::iter(recent.into_iter().map(|c| Ok(change_event(&c))));
    let live = futures_util::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(c) => Some((Ok::<_, Infallible>(change_event(&c)), rx)),
            Err(broadcast::error::RecvError::Lagged(n)) => {
                Some((Ok(Event::default().event("lagged").data(n.to_string())), rx))
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    });
    use futures_util::StreamExt;
    Sse::new(backlog.chain(live))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

fn change_event(change: &super::monitor::Change) -> Event {
    let data = serde_json::to_string(change).unwrap_or_default();
    Event::default()
        .event("change")
        .id(change.seq.to_string())
        .data(data)
}

#[cfg(feature = "client")]
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SetBody {
    key: String,
    value: String,
    /// Expire the key after this many milliseconds.
    ttl_ms: Option<u64>,
}

#[cfg(feature = "client")]
#[derive(Debug, Deserialize)]
struct KeyQuery {
    key: String,
}

#[cfg(feature = "client")]
async fn store_client(ctx: &Ctx) -> Result<&mqstate::Client, Response> {
    ctx.client
        .get_or_try_init(|| async {
            let options = mqstate::ConnectOptions::new(ctx.broker.0.clone(), ctx.broker.1)
                .with_client_id(format!("mqstate-dashboard-{}", std::process::id()));
            mqstate::Client::connect(options).await
        })
        .await
        .map_err(|e| {
            error(
                StatusCode::BAD_GATEWAY,
                "StoreUnreachable",
                format!("cannot reach the state store: {e}"),
            )
        })
}

#[cfg(feature = "client")]
async fn set_key(State(ctx): State<Ctx>, body: axum::body::Bytes) -> Response {
    if !ctx.edit {
        return read_only();
    }
    let body: SetBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, "InvalidArgument", format!("{e}")),
    };
    if body.key.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
            "the key is empty",
        );
    }
    let client = match store_client(&ctx).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let mut options = mqstate::SetOptions::default();
    options.expiry = body.ttl_ms.map(Duration::from_millis);
    match client.set(&body.key, &body.value, options).await {
        Ok(outcome) => Json(serde_json::json!({
            "applied": outcome.applied,
            "version": outcome.version.to_string(),
        }))
        .into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, "StoreError", e.to_string()),
    }
}

#[cfg(feature = "client")]
async fn delete_key(State(ctx): State<Ctx>, Query(q): Query<KeyQuery>) -> Response {
    if !ctx.edit {
        return read_only();
    }
    let client = match store_client(&ctx).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    match client.del(&q.key, None).await {
        Ok(deleted) => Json(serde_json::json!({ "deleted": deleted })).into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, "StoreError", e.to_string()),
    }
}

/// Key edits without the core's client layer (built without feature `client`).
#[cfg(not(feature = "client"))]
async fn set_key() -> Response {
    error(
        StatusCode::NOT_IMPLEMENTED,
        "NotSupported",
        "this server was built without the client feature: the dashboard cannot edit keys",
    )
}

/// See the other `set_key`.
#[cfg(not(feature = "client"))]
async fn delete_key() -> Response {
    set_key().await
}

fn hub_error(e: &crate::iothub::IotHubError) -> Response {
    use crate::iothub::IotHubError as E;
    let status = match e {
        E::DeviceNotFound(_) => StatusCode::NOT_FOUND,
        E::QueueFull { .. } => StatusCode::FORBIDDEN,
        E::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        _ => StatusCode::BAD_REQUEST,
    };
    error(status, e.code(), e.to_string())
}

async fn send(State(ctx): State<Ctx>, Path(id): Path<String>, body: axum::body::Bytes) -> Response {
    if !ctx.edit {
        return read_only();
    }
    let Some(hub) = &ctx.hub else {
        return error(
            StatusCode::NOT_FOUND,
            "NoIotHub",
            "the IoT Hub is not running",
        );
    };
    let request: SendRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, "InvalidArgument", format!("{e}")),
    };
    match request.into_message().and_then(|m| hub.send(&id, m)) {
        Ok(receipt) => Json(receipt).into_response(),
        Err(e) => hub_error(&e),
    }
}

async fn purge(State(ctx): State<Ctx>, Path(id): Path<String>) -> Response {
    if !ctx.edit {
        return read_only();
    }
    let Some(hub) = &ctx.hub else {
        return error(
            StatusCode::NOT_FOUND,
            "NoIotHub",
            "the IoT Hub is not running",
        );
    };
    match hub.purge(&id) {
        Ok(purged) => Json(serde_json::json!({ "purged": purged })).into_response(),
        Err(e) => hub_error(&e),
    }
}
