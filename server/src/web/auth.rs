//! Credentials for the web surfaces (the IoT Hub admin API and the dashboard), required
//! when the broker authenticates its clients or a web surface listens beyond loopback
//! (docs/security.md, "The web surfaces"): whoever may not read a key over MQTT must not
//! read it over HTTP either.
//!
//! A request is let through when it carries one of:
//! - `Authorization: Bearer TOKEN`, with the access token of this start (random, printed by
//!   `mqstate serve`, or read from `--web-token-file`): for scripts and `mqstate iothub`
//!   (`MQSTATE_WEB_TOKEN`);
//! - `Authorization: Basic`, with a user and password of the broker's password file (checked
//!   like an MQTT login: on the blocking pool, throttled per address);
//! - the session cookie set by `POST /login` (the dashboard's login page at `/login` takes
//!   the token or a user and password): `HttpOnly; SameSite=Strict`, 12 hours;
//! - on the IoT Hub admin API's routes, `Authorization: SharedAccessSignature ...`, a service
//!   token of one of the hub's shared access policies with the right the route needs (the
//!   check is the hub's, see [`WebAuth::accept_service_tokens`]).
//!
//! Anything else gets `401` (a page of the dashboard: a redirect to `/login`).
//!
//! ```
//! use mqstate_server::web::auth::WebAuth;
//!
//! let auth = WebAuth::new("s3cret-token".into(), None);
//! assert_eq!(auth.token(), "s3cret-token");
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use serde::Deserialize;

use super::guard::refuse;
use crate::error::ServerError;
use crate::security::AccessControl;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "mqstate_session";
/// How long a dashboard session lasts.
const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Sessions kept at most (the oldest go first beyond it): logins cannot grow memory.
const MAX_SESSIONS: usize = 1024;
const LOGIN_HTML: &str = include_str!("../dashboard/assets/login.html");

/// Checks a service SAS token for a request (method, path, token): `Err` says why it is
/// refused. Given by the IoT Hub ([`crate::iothub::http::service_token_check`]).
pub type ServiceTokenCheck = Box<dyn Fn(&Method, &str, &str) -> Result<(), String> + Send + Sync>;

/// The credentials a web surface accepts; see the module documentation.
pub struct WebAuth {
    /// The IoT Hub's check of service tokens, once the hub exists.
    service_tokens: OnceLock<ServiceTokenCheck>,
    token: String,
    token_digest: [u8; 32],
    /// The broker's users (`None` without a password file).
    users: Option<Arc<AccessControl>>,
    /// Digest of each session id, and when it ends.
    sessions: Mutex<HashMap<[u8; 32], Instant>>,
}

impl std::fmt::Debug for WebAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebAuth")
            .field("users", &self.users.is_some())
            .finish_non_exhaustive()
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// Reads the access token from `path` (its first line), or writes a new random one there
/// (mode 0600) when the file does not exist.
pub fn token_from_file(path: &std::path::Path) -> Result<String, ServerError> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let token = text.lines().next().unwrap_or_default().trim().to_owned();
            if token.len() < 16 {
                return Err(ServerError::Config(format!(
                    "web token file {}: the token must be at least 16 characters",
                    path.display()
                )));
            }
            if let Some(warning) = crate::security::loose_permissions(path) {
                tracing::warn!("{warning}");
            }
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = crate::security::random_secret("the web access token")?;
            crate::security::write_private_file(path, format!("{token}\n").as_bytes())
                .map_err(|e| ServerError::io(format!("web token file {}", path.display()), e))?;
            Ok(token)
        }
        Err(e) => Err(ServerError::io(
            format!("web token file {}", path.display()),
            e,
        )),
    }
}

impl WebAuth {
    /// Accepts `token` as a bearer token or at the login page, and the users of `users`
    /// (the broker's access control) with HTTP Basic or at the login page.
    pub fn new(token: String, users: Option<Arc<AccessControl>>) -> Self {
        WebAuth {
            token_digest: digest(token.as_bytes()),
            token,
            users,
            sessions: Mutex::new(HashMap::new()),
            service_tokens: OnceLock::new(),
        }
    }

    /// Also admits `Authorization: SharedAccessSignature ...` when `check` accepts the token
    /// for the request; the first check set stays.
    pub fn accept_service_tokens(&self, check: ServiceTokenCheck) {
        let _ = self.service_tokens.set(check);
    }

    /// The access token.
    pub fn token(&self) -> &str {
        &self.token
    }

    fn token_matches(&self, candidate: &str) -> bool {
        // Digests compared: the time taken says nothing about the token's bytes.
        digest(candidate.as_bytes()) == self.token_digest
    }

    async fn user_matches(&self, user: &str, password: &str, peer: SocketAddr) -> bool {
        match &self.users {
            Some(users) if user != crate::security::STORE_USER => {
                users
                    .password_accepted(user, password.as_bytes(), peer)
                    .await
            }
            _ => false,
        }
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Instant>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn new_session(&self) -> Result<String, ServerError> {
        let id = crate::security::random_secret("a web session")?;
        let now = Instant::now();
        let mut sessions = self.sessions();
        sessions.retain(|_, end| *end > now);
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, end)| **end)
                .map(|(k, _)| *k)
        {
            sessions.remove(&oldest);
        }
        sessions.insert(digest(id.as_bytes()), now + SESSION_LIFETIME);
        Ok(id)
    }

    fn session_valid(&self, id: &str) -> bool {
        let now = Instant::now();
        self.sessions()
            .get(&digest(id.as_bytes()))
            .is_some_and(|end| *end > now)
    }

    fn end_session(&self, id: &str) {
        self.sessions().remove(&digest(id.as_bytes()));
    }

    /// Whether `request` carries valid credentials; `Err` with the reason of a refused
    /// service token.
    async fn admits(
        &self,
        (method, path, headers): (&Method, &str, &HeaderMap),
        peer: SocketAddr,
    ) -> Result<bool, String> {
        if let Some(id) = session_cookie(headers)
            && self.session_valid(id)
        {
            return Ok(true);
        }
        let Some(auth) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return Ok(false);
        };
        let (scheme, value) = auth.split_once(' ').unwrap_or((auth, ""));
        if scheme.eq_ignore_ascii_case("bearer") {
            return Ok(self.token_matches(value.trim()));
        }
        if scheme == "SharedAccessSignature"
            && let Some(check) = self.service_tokens.get()
        {
            return check(method, path, auth).map(|()| true);
        }
        if scheme.eq_ignore_ascii_case("basic") {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(value.trim())
                .ok()
                .and_then(|b| String::from_utf8(b).ok());
            if let Some((user, password)) = decoded.as_deref().and_then(|d| d.split_once(':')) {
                return Ok(self.user_matches(user, password, peer).await);
            }
        }
        Ok(false)
    }
}

fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value)
}

/// `router` with the login page and the credential check in front of every other route.
/// The server must be run with `into_make_service_with_connect_info::<SocketAddr>()` (the
/// peer's address throttles password guesses).
pub fn require(router: Router, auth: Arc<WebAuth>) -> Router {
    let login = Router::new()
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .with_state(Arc::clone(&auth));
    router
        .layer(axum::middleware::from_fn_with_state(auth, check))
        .merge(login)
}

async fn check(
    State(auth): State<Arc<WebAuth>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let refused_token = match auth.admits((&method, &path, request.headers()), peer).await {
        Ok(true) => return next.run(request).await,
        Ok(false) => None,
        Err(why) => Some(why),
    };
    let wants_page = request.method() == Method::GET
        && request
            .headers()
            .get(header::ACCEPT)
            .and_then(|a| a.to_str().ok())
            .is_some_and(|a| a.contains("text/html"));
    if wants_page && refused_token.is_none() {
        return Redirect::to("/login").into_response();
    }
    let message = refused_token.unwrap_or_else(|| {
        "credentials required: the access token printed by `mqstate serve` as 'Authorization: \
         Bearer TOKEN', a user of the password file with HTTP Basic, a session from /login, or \
         (IoT Hub admin API) a service SAS token"
            .to_owned()
    });
    let mut response = refuse(StatusCode::UNAUTHORIZED, "Unauthorized", message);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"mqstate\""),
    );
    response
}

async fn login_page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        LOGIN_HTML,
    )
        .into_response()
}

/// The login form's body: the token, or a user and password.
#[derive(Deserialize)]
struct Login {
    token: Option<String>,
    user: Option<String>,
    password: Option<String>,
}

async fn login(
    State(auth): State<Arc<WebAuth>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    axum::Json(login): axum::Json<Login>,
) -> Response {
    let accepted = match (&login.token, &login.user, &login.password) {
        (Some(token), _, _) => auth.token_matches(token),
        (None, Some(user), Some(password)) => auth.user_matches(user, password, peer).await,
        _ => false,
    };
    if !accepted {
        tracing::warn!(%peer, "web login refused");
        return refuse(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "wrong token, user or password".to_owned(),
        );
    }
    let Ok(id) = auth.new_session() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let cookie = format!(
        "{SESSION_COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        SESSION_LIFETIME.as_secs()
    );
    match HeaderValue::from_str(&cookie) {
        Ok(value) => (StatusCode::NO_CONTENT, [(header::SET_COOKIE, value)]).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn logout(State(auth): State<Arc<WebAuth>>, headers: HeaderMap) -> Response {
    if let Some(id) = session_cookie(&headers) {
        auth.end_session(id);
    }
    let expired = format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    match HeaderValue::from_str(&expired) {
        Ok(value) => (StatusCode::NO_CONTENT, [(header::SET_COOKIE, value)]).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; mqstate_session=abc; b=2"),
        );
        assert_eq!(session_cookie(&headers), Some("abc"));
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("xmqstate_session=abc"),
        );
        assert_eq!(session_cookie(&headers), None);
    }

    #[test]
    fn sessions_end_and_are_bounded() {
        let auth = WebAuth::new("token-of-sixteen-chars".into(), None);
        let id = auth.new_session().unwrap();
        assert!(auth.session_valid(&id));
        assert!(!auth.session_valid("forged"));
        auth.end_session(&id);
        assert!(!auth.session_valid(&id));
        for _ in 0..MAX_SESSIONS + 10 {
            auth.new_session().unwrap();
        }
        assert!(auth.sessions().len() <= MAX_SESSIONS);
    }
}
