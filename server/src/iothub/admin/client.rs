//! [`AdminClient`]: the HTTP admin API from Rust (what `mqstate iothub ...` uses), for a hub
//! running in another process. Requests go through hyper-util's client (its URL handling,
//! connection setup and `Host` header), one connection per request: simple, plenty for an
//! admin API, and nothing stale to reuse when the hub restarts between two requests.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::de::DeserializeOwned;

use super::api::{AddDeviceRequest, DeviceCredentials, PurgeResult, SendRequest};
use crate::iothub::domain::hub::{DeviceInfo, HubInfo};
use crate::iothub::domain::message::{FeedbackBatch, QueueInfo, SendReceipt, TelemetryMessage};
use crate::iothub::domain::properties::encode_component;
use crate::iothub::domain::registry::Device;

/// Why an admin request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// The hub answered with an error.
    #[error("{message} ({code}, HTTP {status})")]
    Api {
        /// HTTP status.
        status: u16,
        /// The hub's `errorCode` (`DeviceNotFound`, `DeviceMaximumQueueDepthExceeded`...).
        code: String,
        /// The hub's message.
        message: String,
    },
    /// The hub could not be reached, or answered something that is not the admin API.
    #[error("IoT Hub admin API at {url}: {message}")]
    Transport {
        /// The base URL.
        url: String,
        /// What went wrong.
        message: String,
    },
}

/// A client of the hub's HTTP admin API.
///
/// ```no_run
/// # async fn demo() -> Result<(), mqstate_server::iothub::admin::AdminError> {
/// use mqstate_server::iothub::admin::{AdminClient, SendRequest};
///
/// let admin = AdminClient::new("http://127.0.0.1:8880")?;
/// admin.add_device("dev1", None).await?;
/// let request = SendRequest { payload: Some("hi".into()), message_id: Some("m1".into()), ..Default::default() };
/// admin.send("dev1", &request).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct AdminClient {
    url: String,
    /// `Authorization: Bearer` value, for a server that asks for credentials.
    token: Option<String>,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl AdminClient {
    /// A client for the admin API at `url` (`http://host:port`).
    pub fn new(url: &str) -> Result<AdminClient, AdminError> {
        let transport = |message: &str| AdminError::Transport {
            url: url.to_owned(),
            message: message.to_owned(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|_| transport("expected http://host:port"))?;
        if uri.scheme_str() != Some("http") {
            return Err(transport("only http:// URLs are supported"));
        }
        let Some(authority) = uri.authority() else {
            return Err(transport("expected http://host:port"));
        };
        if authority.host().is_empty() || !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(transport("expected http://host:port"));
        }
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build_http();
        Ok(AdminClient {
            url: format!("http://{authority}"),
            token: None,
            client,
        })
    }

    /// Sends `token` (the access token `mqstate serve` prints when it asks for credentials,
    /// see docs/security.md) with every request.
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    /// The base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn transport(&self, message: impl std::fmt::Display) -> AdminError {
        AdminError::Transport {
            url: self.url.clone(),
            message: message.to_string(),
        }
    }

    async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), AdminError> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.url))
            .header(hyper::header::CONTENT_TYPE, "application/json");
        if let Some(token) = &self.token {
            request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| self.transport(e))?;
        let response = self.client.request(request).await.map_err(|e| {
            // The legacy client's error says "client error (Connect)"; its source says why.
            let why = std::error::Error::source(&e).map_or_else(String::new, |s| format!(": {s}"));
            if e.is_connect() {
                self.transport(format!("cannot connect{why}"))
            } else {
                self.transport(format!("{e}{why}"))
            }
        })?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| self.transport(e))?
            .to_bytes();
        if status.is_success() {
            return Ok((status, body));
        }
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct ApiError {
            error_code: String,
            message: String,
        }
        match serde_json::from_slice::<ApiError>(&body) {
            Ok(e) => Err(AdminError::Api {
                status: status.as_u16(),
                code: e.error_code,
                message: e.message,
            }),
            Err(_) => {
                Err(self.transport(format!("HTTP {status}: {}", String::from_utf8_lossy(&body))))
            }
        }
    }

    async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T, AdminError> {
        let (_, body) = self.request(method, path, body).await?;
        serde_json::from_slice(&body).map_err(|e| self.transport(format!("unexpected answer: {e}")))
    }

    fn to_json<T: serde::Serialize>(&self, value: &T) -> Result<Vec<u8>, AdminError> {
        serde_json::to_vec(value).map_err(|e| self.transport(e))
    }

    /// `GET /hub`.
    pub async fn hub_info(&self) -> Result<HubInfo, AdminError> {
        self.json(Method::GET, "/hub", None).await
    }

    /// `GET /devices`.
    pub async fn devices(&self) -> Result<Vec<DeviceInfo>, AdminError> {
        self.json(Method::GET, "/devices", None).await
    }

    /// `GET /devices/{id}`.
    pub async fn device(&self, id: &str) -> Result<Device, AdminError> {
        self.json(
            Method::GET,
            &format!("/devices/{}", encode_component(id)),
            None,
        )
        .await
    }

    /// `PUT /devices/{id}`: registers a device (keys generated when `primary_key` is `None`).
    pub async fn add_device(
        &self,
        id: &str,
        primary_key: Option<String>,
    ) -> Result<Device, AdminError> {
        self.register_device(
            id,
            &AddDeviceRequest {
                primary_key,
                ..AddDeviceRequest::default()
            },
        )
        .await
    }

    /// `PUT /devices/{id}` with any body: an X.509 device, or both keys.
    pub async fn register_device(
        &self,
        id: &str,
        request: &AddDeviceRequest,
    ) -> Result<Device, AdminError> {
        let body = self.to_json(request)?;
        self.json(
            Method::PUT,
            &format!("/devices/{}", encode_component(id)),
            Some(body),
        )
        .await
    }

    /// `DELETE /devices/{id}`.
    pub async fn remove_device(&self, id: &str) -> Result<(), AdminError> {
        self.request(
            Method::DELETE,
            &format!("/devices/{}", encode_component(id)),
            None,
        )
        .await
        .map(|_| ())
    }

    /// `GET /devices/{id}/token?ttlSecs=...`: MQTT credentials for the device.
    pub async fn credentials(
        &self,
        id: &str,
        ttl: Duration,
    ) -> Result<DeviceCredentials, AdminError> {
        let path = format!(
            "/devices/{}/token?ttlSecs={}",
            encode_component(id),
            ttl.as_secs().max(1)
        );
        self.json(Method::GET, &path, None).await
    }

    /// `GET /policies/{name}/connection-string`: the service connection string of a shared
    /// access policy.
    pub async fn service_connection_string(&self, policy: &str) -> Result<String, AdminError> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Reply {
            connection_string: String,
        }
        let path = format!("/policies/{}/connection-string", encode_component(policy));
        let reply: Reply = self.json(Method::GET, &path, None).await?;
        Ok(reply.connection_string)
    }

    /// `POST /devices/{id}/messages/devicebound`.
    pub async fn send(&self, id: &str, request: &SendRequest) -> Result<SendReceipt, AdminError> {
        let body = self.to_json(request)?;
        let path = format!("/devices/{}/messages/devicebound", encode_component(id));
        self.json(Method::POST, &path, Some(body)).await
    }

    /// `GET /devices/{id}/messages/devicebound`.
    pub async fn queue(&self, id: &str) -> Result<QueueInfo, AdminError> {
        let path = format!("/devices/{}/messages/devicebound", encode_component(id));
        self.json(Method::GET, &path, None).await
    }

    /// `DELETE /devices/{id}/messages/devicebound`.
    pub async fn purge(&self, id: &str) -> Result<PurgeResult, AdminError> {
        let path = format!("/devices/{}/messages/devicebound", encode_component(id));
        self.json(Method::DELETE, &path, None).await
    }

    /// `GET /messages/servicebound/feedback?waitSecs=...`: the next batch, locked, or `None`
    /// when none came within `wait`.
    pub async fn receive_feedback(
        &self,
        wait: Duration,
    ) -> Result<Option<FeedbackBatch>, AdminError> {
        let path = format!(
            "/messages/servicebound/feedback?waitSecs={}",
            wait.as_secs_f64()
        );
        let (status, body) = self.request(Method::GET, &path, None).await?;
        if status == StatusCode::NO_CONTENT {
            return Ok(None);
        }
        serde_json::from_slice(&body)
            .map(Some)
            .map_err(|e| self.transport(format!("unexpected answer: {e}")))
    }

    /// `DELETE /messages/servicebound/feedback/{lockToken}`: completes a batch.
    pub async fn complete_feedback(&self, lock_token: &str) -> Result<(), AdminError> {
        let path = format!(
            "/messages/servicebound/feedback/{}",
            encode_component(lock_token)
        );
        self.request(Method::DELETE, &path, None).await.map(|_| ())
    }

    /// `GET /devices/{id}/messages/events?since=...&waitSecs=...`.
    pub async fn events(
        &self,
        id: &str,
        since: u64,
        wait: Duration,
    ) -> Result<Vec<TelemetryMessage>, AdminError> {
        let path = format!(
            "/devices/{}/messages/events?since={since}&waitSecs={}",
            encode_component(id),
            wait.as_secs_f64()
        );
        self.json(Method::GET, &path, None).await
    }
}
