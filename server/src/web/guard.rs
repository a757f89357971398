//! What every web surface of the server (the IoT Hub admin API, the dashboard) checks before a
//! route sees a request, so that a web page the operator visits cannot use the operator's
//! browser against them (docs/security.md, "The web surfaces"):
//!
//! - **DNS rebinding**: a page on `attacker.example` whose name is made to resolve to
//!   127.0.0.1 can make the browser send requests to the server, with `Host:
//!   attacker.example`. Only a `Host` that is an IP address, `localhost`, or a name the server
//!   was configured with (the IoT Hub's host name) is served; any other gets `421 Misdirected
//!   Request`. (An IP literal cannot be rebound: a page can only reach it from its own
//!   origin, which is that address.)
//! - **Cross-site requests**: a page may POST a `text/plain` or form body to any address
//!   without the browser asking the server first (a CORS "simple request"). A POST, PUT or
//!   PATCH must therefore say `Content-Type: application/json`, which no page can send
//!   cross-site without a preflight the server never grants (`415` otherwise); and any
//!   state-changing request that carries an `Origin` must come from the server's own origin
//!   (`403` otherwise).
//!
//! ```
//! use mqstate_server::web::guard::AllowedHosts;
//!
//! let hosts = AllowedHosts::new(["hub.local"]);
//! assert!(hosts.allows("127.0.0.1:8880"));
//! assert!(hosts.allows("[::1]:8880"));
//! assert!(hosts.allows("localhost:8880"));
//! assert!(hosts.allows("HUB.local"));
//! assert!(!hosts.allows("attacker.example:8880"));
//! ```

use std::net::IpAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::web::auth::WebAuth;

/// The host names a web surface answers to, besides IP addresses and `localhost`.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts {
    names: Vec<String>,
}

impl AllowedHosts {
    /// IP addresses, `localhost` and `names` (compared without case).
    pub fn new<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Self {
        AllowedHosts {
            names: names
                .into_iter()
                .map(|n| n.as_ref().to_ascii_lowercase())
                .collect(),
        }
    }

    /// Whether a `Host` header's value (with or without a port) names this server.
    pub fn allows(&self, host: &str) -> bool {
        let name = host_name(host);
        name.parse::<IpAddr>().is_ok()
            || name.eq_ignore_ascii_case("localhost")
            || self.names.iter().any(|n| n.eq_ignore_ascii_case(name))
    }
}

/// The name part of a `Host` value: `[::1]:80` -> `::1`, `a.b:80` -> `a.b`, `a.b` -> `a.b`.
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    match host.rsplit_once(':') {
        // One colon: a port. More than one without brackets: an IPv6 address alone.
        Some((name, _)) if !name.contains(':') => name,
        _ => host,
    }
}

/// `router` with the checks of this module in front of every route, then, when `auth` is
/// given, the credentials check of [`crate::web::auth`] (and its login page). Serve the
/// result with [`serve`].
pub fn guard(router: Router, hosts: AllowedHosts, auth: Option<Arc<WebAuth>>) -> Router {
    let router = match auth {
        Some(auth) => crate::web::auth::require(router, auth),
        None => router,
    };
    router.layer(axum::middleware::from_fn_with_state(Arc::new(hosts), check))
}

/// Serves a [`guard`]ed router on `listener` until `stop` resolves (with the peer addresses
/// the credentials check throttles by).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(stop)
    .await
}

/// The JSON error every web surface answers with: `{"errorCode": code, "message": message}`.
pub(crate) fn refuse(status: StatusCode, code: &str, message: String) -> Response {
    let body = serde_json::json!({ "errorCode": code, "message": message });
    (status, axum::Json(body)).into_response()
}

async fn check(State(hosts): State<Arc<AllowedHosts>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    if let Some(host) = host
        && !hosts.allows(host)
    {
        tracing::warn!(
            host,
            "web request for a host name this server does not have: refused"
        );
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "MisdirectedHost",
            format!(
                "this server does not answer to the host name {host:?} (use its IP address, \
                 localhost or its configured host name)"
            ),
        );
    }
    let changes_state =
        [Method::POST, Method::PUT, Method::PATCH, Method::DELETE].contains(request.method());
    if changes_state {
        if let (Some(origin), Some(host)) = (headers.get(header::ORIGIN), host) {
            let origin = origin.to_str().unwrap_or_default();
            let same = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .is_some_and(|o| o.eq_ignore_ascii_case(host));
            if !same {
                tracing::warn!(origin, host, "cross-origin request refused");
                return refuse(
                    StatusCode::FORBIDDEN,
                    "CrossOrigin",
                    format!("requests from the origin {origin:?} are not accepted"),
                );
            }
        }
        let has_body = request.method() != Method::DELETE;
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|c| c.to_str().ok())
            .and_then(|c| c.split(';').next())
            .is_some_and(|c| c.trim().eq_ignore_ascii_case("application/json"));
        if has_body && !json {
            return refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                "a request that changes something must have Content-Type: application/json"
                    .to_owned(),
            );
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_with_and_without_ports() {
        assert_eq!(host_name("[::1]:8880"), "::1");
        assert_eq!(host_name("[::1]"), "::1");
        assert_eq!(host_name("::1"), "::1");
        assert_eq!(host_name("a.example:80"), "a.example");
        assert_eq!(host_name("a.example"), "a.example");
        let hosts = AllowedHosts::default();
        assert!(hosts.allows("10.1.2.3:8880"));
        assert!(hosts.allows("LOCALHOST"));
        assert!(!hosts.allows("localhost.attacker.example"));
        assert!(!hosts.allows("127.0.0.1.nip.io:8880"));
    }
}
