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
//! - **Cross-site requests**: a page may send a `GET` (an `<img>`), or POST a `text/plain` or
//!   form body, to any address without the browser asking the server first (a CORS "simple
//!   request"), with the operator's cookies when the page is on the same site (another port
//!   of the same host). So a request that changes state (every method but `GET`, `HEAD`,
//!   `OPTIONS` and `TRACE`, and the `GET` routes marked with [`state_changing`], such as the
//!   admin API's feedback receive, which locks a batch) is refused (`403`) when the browser
//!   says it comes from elsewhere: `Sec-Fetch-Site` other than `same-origin` or `none`, or an
//!   `Origin` that is not the server's own; and when it carries the session cookie without
//!   proof of coming from the server's own pages (`Sec-Fetch-Site: same-origin` or the
//!   server's own `Origin`, which a page elsewhere cannot send). Clients that are not
//!   browsers (curl, `mqstate iothub`, the SDKs) send none of these headers and are not
//!   concerned. A POST, PUT or PATCH must also say `Content-Type: application/json`, which no
//!   page can send cross-site without a preflight the server never grants (`415` otherwise).
//! - **Sizes and times**: a request head must arrive within [`HEAD_TIMEOUT`] and fit in
//!   [`MAX_HEAD_BYTES`]; a body is read up to [`DEFAULT_BODY_LIMIT`] unless a route sets its
//!   own limit (the admin API, the login page).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::MethodRouter;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::untrusted::cut;
use crate::web::auth::WebAuth;
use crate::web::http1::HeadLimits;
use crate::web::refusal::refuse;

/// How long a client has to send a request's head; an idle keep-alive connection is closed
/// after as long.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest request head (request line and headers); larger ones get `431`.
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The largest request body of a route that sets no limit of its own (`413` beyond).
pub(crate) const DEFAULT_BODY_LIMIT: usize = 2 * 1024 * 1024;

/// The host names a web surface answers to, besides IP addresses and `localhost`.
#[derive(Debug, Clone, Default)]
pub(crate) struct AllowedHosts {
    names: Vec<String>,
}

impl AllowedHosts {
    /// IP addresses, `localhost` and `names` (compared without case).
    pub(crate) fn new<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Self {
        AllowedHosts {
            names: names
                .into_iter()
                .map(|n| n.as_ref().to_ascii_lowercase())
                .collect(),
        }
    }

    /// Whether a `Host` header's value (with or without a port) names this server.
    pub(crate) fn allows(&self, host: &str) -> bool {
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
pub(crate) fn guard(router: Router, hosts: AllowedHosts, auth: Option<Arc<WebAuth>>) -> Router {
    let router = match auth {
        Some(auth) => crate::web::auth::require(router, auth),
        None => router,
    };
    router
        .layer(DefaultBodyLimit::max(DEFAULT_BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(Arc::new(hosts), check))
}

/// Marks `route` as changing state although it is a `GET` (it locks, receives or consumes
/// something): it is refused to browsers from elsewhere like a POST is (see the module
/// documentation). Routes with other methods need no mark: their method says it.
pub(crate) fn state_changing<S>(route: MethodRouter<S>) -> MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    route.route_layer(axum::middleware::from_fn(only_from_here))
}

async fn only_from_here(request: Request, next: Next) -> Response {
    if let Some(refused) = from_elsewhere(request.headers(), host(&request)) {
        return refused;
    }
    next.run(request).await
}

/// Serves a [`guard`]ed router on `listener` until `stop` resolves, then lets each
/// connection finish its request in flight and returns when they have. Request heads are
/// bounded in time and size ([`HEAD_TIMEOUT`], [`MAX_HEAD_BYTES`]), which `axum::serve`
/// cannot do; handlers get the peer's address (`ConnectInfo<SocketAddr>`), which the
/// credentials check throttles password guesses by.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (stopping, stopped) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    connections.spawn(connection(stream, peer, router.clone(), stopped.clone()));
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "web: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            // Reap finished connections so the set does not grow with the server's age.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut stop => break,
        }
    }
    drop(listener);
    let _ = stopping.send(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// One connection: HTTP/1.1 until the peer closes, a head times out, or the server stops.
async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    router: Router,
    stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let limits = HeadLimits {
        timeout: HEAD_TIMEOUT,
        max_bytes: Some(MAX_HEAD_BYTES),
    };
    if let Err(e) = crate::web::http1::serve(stream, peer, router, limits, stop).await {
        tracing::debug!(%peer, error = %e, "web: connection ended");
    }
}

/// The `Host` a request names (its header, or the authority of an absolute URI).
fn host(request: &Request) -> Option<&str> {
    request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()))
}

/// Whether `origin` (an `Origin` header's value) is this server's own origin, the one whose
/// `Host` is `host`.
fn own_origin(origin: &str, host: Option<&str>) -> bool {
    let Some(host) = host else {
        return false;
    };
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|o| o.eq_ignore_ascii_case(host))
}

/// The refusal of a state-changing request that a browser sends on behalf of a page that is
/// not one of this server's own (module documentation), or `None` to let it through.
fn from_elsewhere(headers: &HeaderMap, host: Option<&str>) -> Option<Response> {
    // A header that is not text is treated as a foreign value, never as absent.
    let text = |name: &str| {
        headers
            .get(name)
            .map(|v| v.to_str().unwrap_or("(not text)"))
    };
    let fetch_site = text("sec-fetch-site");
    let origin = text("origin");
    let refused = |why: String| {
        // `why` quotes the browser's values cut and escaped (`cut`, Debug).
        tracing::warn!(host = ?host.map(cut), "web: state-changing request refused: {why}");
        Some(refuse(
            StatusCode::FORBIDDEN,
            "CrossOrigin",
            format!(
                "{why}: a request that changes something is accepted from this server's own \
                 pages or from clients that are not browsers"
            ),
        ))
    };
    // Fetch Metadata: the browser says where the request comes from. `none` is the operator
    // typing the address or opening a bookmark.
    if let Some(site) = fetch_site
        && !site.eq_ignore_ascii_case("same-origin")
        && !site.eq_ignore_ascii_case("none")
    {
        return refused(format!(
            "the browser says this request comes from elsewhere (Sec-Fetch-Site: {:?})",
            cut(site)
        ));
    }
    if let Some(origin) = origin
        && !own_origin(origin, host)
    {
        return refused(format!(
            "requests from the origin {:?} are not accepted",
            cut(origin)
        ));
    }
    // The session cookie is sent by the browser with any request from the same site, which
    // includes every other port of this host: it proves who the operator is, not which page
    // sent the request. Only a browser that says the request is from this origin (Fetch
    // Metadata, or `Origin`, both set by the browser and not by pages) may use it to change
    // something; an older browser's `<img>` sends neither.
    let proven = fetch_site.is_some_and(|s| s.eq_ignore_ascii_case("same-origin"))
        || origin.is_some_and(|o| own_origin(o, host));
    if !proven && crate::web::auth::session_cookie(headers).is_some() {
        return refused(
            "a request with the session cookie must say it comes from this server's own pages \
             (Sec-Fetch-Site: same-origin or Origin)"
                .to_owned(),
        );
    }
    None
}

async fn check(State(hosts): State<Arc<AllowedHosts>>, request: Request, next: Next) -> Response {
    let host = host(&request);
    if let Some(host) = host
        && !hosts.allows(host)
    {
        tracing::warn!(
            host = ?cut(host),
            "web request for a host name this server does not have: refused"
        );
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "MisdirectedHost",
            format!(
                "this server does not answer to the host name {:?} (use its IP address, \
                 localhost or its configured host name)",
                cut(host)
            ),
        );
    }
    // Every method but the safe ones changes state; the GET routes that do are marked with
    // `state_changing` and checked there (after routing, which this layer comes before).
    if !request.method().is_safe() {
        if let Some(refused) = from_elsewhere(request.headers(), host) {
            return refused;
        }
        let has_body = [Method::POST, Method::PUT, Method::PATCH].contains(request.method());
        let json = request
            .headers()
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

    #[test]
    fn browsers_from_elsewhere_are_told_apart() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, axum::http::HeaderValue::from_static(value));
            }
            map
        };
        let host = Some("127.0.0.1:8880");
        let allowed = |pairs: &[(&'static str, &'static str)]| {
            from_elsewhere(&headers(pairs), host).is_none()
        };
        // Clients that are not browsers, the server's own pages, the address bar.
        assert!(allowed(&[]));
        assert!(allowed(&[("sec-fetch-site", "same-origin")]));
        assert!(allowed(&[("sec-fetch-site", "none")]));
        assert!(allowed(&[("origin", "http://127.0.0.1:8880")]));
        assert!(allowed(&[
            ("cookie", "mqstate_session=x"),
            ("sec-fetch-site", "same-origin")
        ]));
        assert!(allowed(&[
            ("cookie", "mqstate_session=x"),
            ("origin", "http://127.0.0.1:8880")
        ]));
        // Other sites, other origins (another port), the cookie without proof.
        assert!(!allowed(&[("sec-fetch-site", "cross-site")]));
        assert!(!allowed(&[("sec-fetch-site", "same-site")]));
        assert!(!allowed(&[("origin", "http://127.0.0.1:9999")]));
        assert!(!allowed(&[("origin", "null")]));
        assert!(!allowed(&[("cookie", "mqstate_session=x")]));
        assert!(!allowed(&[
            ("cookie", "mqstate_session=x"),
            ("sec-fetch-site", "none")
        ]));
        assert!(
            from_elsewhere(&headers(&[("origin", "http://127.0.0.1:8880")]), None).is_some(),
            "without a Host, no origin is the server's own"
        );
    }

    /// The example that was in this module's documentation.
    #[test]
    fn allowed_hosts() {
        use crate::web::guard::AllowedHosts;

        let hosts = AllowedHosts::new(["hub.local"]);
        assert!(hosts.allows("127.0.0.1:8880"));
        assert!(hosts.allows("[::1]:8880"));
        assert!(hosts.allows("localhost:8880"));
        assert!(hosts.allows("HUB.local"));
        assert!(!hosts.allows("attacker.example:8880"));
    }

    /// The example that was in this module's documentation.
    #[test]
    fn state_changing_marks_a_get() {
        use crate::web::guard::state_changing;
        use axum::routing::get;

        let _app: axum::Router = axum::Router::new().route(
            "/queue/next",
            state_changing(get(|| async { "locked for you" })),
        );
    }
}
