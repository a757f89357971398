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
//!   the token or a user and password): `HttpOnly; SameSite=Strict`, 12 hours. Each user
//!   (the access token counts as one) keeps at most [`MAX_SESSIONS_PER_USER`] sessions, its
//!   oldest ending when it opens one more; all together at most [`MAX_SESSIONS`], beyond
//!   which logins are refused (`503`) rather than ending anyone else's session;
//! - on the IoT Hub admin API's routes, `Authorization: SharedAccessSignature ...`, a service
//!   token of one of the hub's shared access policies with the right the route needs (the
//!   check is the hub's, see [`WebAuth::accept_service_tokens`]).
//!
//! Anything else gets `401` (a page of the dashboard: a redirect to `/login`).

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

use super::error::WebError;
use super::refusal::refuse;
use crate::config_error::ConfigError;
use crate::security::AccessControl;
use crate::security::SecurityError;
use crate::untrusted::cut;

/// The session cookie's name.
pub(crate) const SESSION_COOKIE: &str = "mqstate_session";
/// How long a dashboard session lasts.
const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Sessions one user (or the access token) keeps at most: one more login ends that user's
/// oldest session, and no one else's.
pub const MAX_SESSIONS_PER_USER: usize = 32;
/// Sessions kept at most, all users together, so that logins cannot grow memory: beyond it a
/// login is refused (`503`) until sessions end. Never reached by evicting: that would let
/// one user log everyone else out.
pub(crate) const MAX_SESSIONS: usize = 4096;
/// The largest login request body: a token, a user name and a password.
const LOGIN_BODY_LIMIT: usize = 16 * 1024;
const LOGIN_HTML: &str = include_str!("../dashboard/assets/login.html");

/// Checks a service SAS token for a request (method, path, token): `Err` says why it is
/// refused. Given by the IoT Hub ([`crate::iothub::admin::service_token_check`]).
pub(crate) type ServiceTokenCheck =
    Box<dyn Fn(&Method, &str, &str) -> Result<(), String> + Send + Sync>;

/// The credentials a web surface accepts; see the module documentation.
pub struct WebAuth {
    /// The IoT Hub's check of service tokens, once the hub exists.
    service_tokens: OnceLock<ServiceTokenCheck>,
    token: String,
    token_digest: [u8; 32],
    /// The broker's users (`None` without a password file).
    users: Option<Arc<AccessControl>>,
    /// The sessions, by digest of their id.
    sessions: Mutex<HashMap<[u8; 32], Session>>,
}

/// Who logged in, for the sessions' caps.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Holder {
    /// Whoever has the access token (one "user" for the caps).
    Token,
    /// A user of the password file.
    User(String),
}

#[derive(Debug)]
struct Session {
    end: Instant,
    holder: Holder,
}

/// Why no session was opened.
#[derive(Debug)]
enum SessionRefused {
    /// [`MAX_SESSIONS`] are open.
    Full,
    /// No random id (the OS gave no randomness).
    Random(SecurityError),
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
pub(crate) fn token_from_file(path: &std::path::Path) -> Result<String, WebError> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let token = text.lines().next().unwrap_or_default().trim().to_owned();
            if token.len() < 16 {
                return Err(WebError::Config(ConfigError::new(format!(
                    "web token file {}: the token must be at least 16 characters",
                    path.display()
                ))));
            }
            if let Some(warning) = crate::security::loose_permissions(path) {
                tracing::warn!("{warning}");
            }
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = crate::security::random_secret("the web access token")?;
            crate::security::write_private_file(path, format!("{token}\n").as_bytes())
                .map_err(|e| WebError::io(format!("web token file {}", path.display()), e))?;
            Ok(token)
        }
        Err(e) => Err(WebError::io(
            format!("web token file {}", path.display()),
            e,
        )),
    }
}

impl WebAuth {
    /// Accepts `token` as a bearer token or at the login page, and the users of `users`
    /// (the broker's access control) with HTTP Basic or at the login page.
    pub(crate) fn new(token: String, users: Option<Arc<AccessControl>>) -> Self {
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
    pub(crate) fn accept_service_tokens(&self, check: ServiceTokenCheck) {
        let _ = self.service_tokens.set(check);
    }

    /// The access token.
    pub(crate) fn token(&self) -> &str {
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

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Session>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a session for `holder`: its own oldest session ends if it has
    /// [`MAX_SESSIONS_PER_USER`]; refused if [`MAX_SESSIONS`] are open. (At most a few
    /// thousand sessions: the scans under the lock are short.)
    fn new_session(&self, holder: Holder) -> Result<String, SessionRefused> {
        let id = crate::security::random_secret("a web session").map_err(SessionRefused::Random)?;
        let now = Instant::now();
        let mut sessions = self.sessions();
        sessions.retain(|_, s| s.end > now);
        let own = sessions.values().filter(|s| s.holder == holder).count();
        if own >= MAX_SESSIONS_PER_USER {
            // Same lifetime for all: the one that ends first is the oldest.
            if let Some(oldest) = sessions
                .iter()
                .filter(|(_, s)| s.holder == holder)
                .min_by_key(|(_, s)| s.end)
                .map(|(k, _)| *k)
            {
                sessions.remove(&oldest);
            }
        } else if sessions.len() >= MAX_SESSIONS {
            return Err(SessionRefused::Full);
        }
        sessions.insert(
            digest(id.as_bytes()),
            Session {
                end: now + SESSION_LIFETIME,
                holder,
            },
        );
        Ok(id)
    }

    fn session_valid(&self, id: &str) -> bool {
        let now = Instant::now();
        self.sessions()
            .get(&digest(id.as_bytes()))
            .is_some_and(|s| s.end > now)
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

/// The value of the session cookie among a request's cookies.
pub(crate) fn session_cookie(headers: &HeaderMap) -> Option<&str> {
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
pub(crate) fn require(router: Router, auth: Arc<WebAuth>) -> Router {
    let login = Router::new()
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .layer(axum::extract::DefaultBodyLimit::max(LOGIN_BODY_LIMIT))
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
    login: Result<axum::Json<Login>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let login = match login {
        Ok(axum::Json(login)) => login,
        // Too large (`413`) or not the login form: the JSON error of every web surface.
        Err(rejection) => {
            return refuse(rejection.status(), "InvalidLogin", rejection.body_text());
        }
    };
    let holder = match (&login.token, &login.user, &login.password) {
        (Some(token), _, _) => auth.token_matches(token).then_some(Holder::Token),
        (None, Some(user), Some(password)) => auth
            .user_matches(user, password, peer)
            .await
            .then(|| Holder::User(user.clone())),
        _ => None,
    };
    let Some(holder) = holder else {
        tracing::warn!(%peer, user = ?login.user.as_deref().map(cut), "web login refused");
        return refuse(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "wrong token, user or password".to_owned(),
        );
    };
    let id = match auth.new_session(holder) {
        Ok(id) => id,
        Err(SessionRefused::Full) => {
            tracing::warn!(%peer, "web login refused: {MAX_SESSIONS} sessions are open");
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "TooManySessions",
                format!(
                    "{MAX_SESSIONS} dashboard sessions are open; log in again later (sessions \
                     end after {} hours or at logout), or use the access token as \
                     'Authorization: Bearer TOKEN'",
                    SESSION_LIFETIME.as_secs() / 3600
                ),
            );
        }
        Err(SessionRefused::Random(e)) => {
            tracing::error!(error = %e, "web login: no session");
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
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
        let id = auth.new_session(Holder::Token).unwrap();
        assert!(auth.session_valid(&id));
        assert!(!auth.session_valid("forged"));
        auth.end_session(&id);
        assert!(!auth.session_valid(&id));
        for _ in 0..MAX_SESSIONS_PER_USER + 10 {
            auth.new_session(Holder::Token).unwrap();
        }
        assert_eq!(auth.sessions().len(), MAX_SESSIONS_PER_USER);
    }

    /// Issue: with one cap for everyone, the oldest session evicted first, one user logging
    /// in 1,024 times ended the operator's session.
    #[test]
    fn one_user_logging_in_again_and_again_ends_only_its_own_sessions() {
        let auth = WebAuth::new("token-of-sixteen-chars".into(), None);
        let operator = auth.new_session(Holder::User("operator".into())).unwrap();
        let token = auth.new_session(Holder::Token).unwrap();
        let mallory = || Holder::User("mallory".into());
        let first = auth.new_session(mallory()).unwrap();
        let mut last = first.clone();
        for _ in 0..1030 {
            last = auth.new_session(mallory()).unwrap();
        }
        assert!(
            auth.session_valid(&operator),
            "another user's session ended"
        );
        assert!(auth.session_valid(&token), "the token's session ended");
        assert!(auth.session_valid(&last));
        assert!(
            !auth.session_valid(&first),
            "the user's oldest session ends"
        );
        let held = |h: Holder| auth.sessions().values().filter(|s| s.holder == h).count();
        assert_eq!(held(mallory()), MAX_SESSIONS_PER_USER);
        assert_eq!(auth.sessions().len(), MAX_SESSIONS_PER_USER + 2);
    }

    /// Beyond the global cap a login is refused; no one's session is evicted for it.
    #[test]
    fn beyond_the_global_cap_logins_are_refused_not_evicting() {
        let auth = WebAuth::new("token-of-sixteen-chars".into(), None);
        let users = MAX_SESSIONS / MAX_SESSIONS_PER_USER;
        let mut ids = Vec::new();
        for user in 0..users {
            for _ in 0..MAX_SESSIONS_PER_USER {
                ids.push(auth.new_session(Holder::User(user.to_string())).unwrap());
            }
        }
        assert_eq!(auth.sessions().len(), MAX_SESSIONS);
        assert!(matches!(
            auth.new_session(Holder::User("newcomer".into())),
            Err(SessionRefused::Full)
        ));
        assert!(matches!(
            auth.new_session(Holder::Token),
            Err(SessionRefused::Full)
        ));
        assert!(ids.iter().all(|id| auth.session_valid(id)));
        // A user at its own cap still logs in: it ends its own oldest session.
        let again = auth.new_session(Holder::User("0".into())).unwrap();
        assert!(auth.session_valid(&again));
        assert!(!auth.session_valid(&ids[0]));
        assert!(ids[1..].iter().all(|id| auth.session_valid(id)));
        // A session that ends makes room.
        auth.end_session(&again);
        assert!(auth.new_session(Holder::User("newcomer".into())).is_ok());
    }

    /// The example that was in this module's documentation.
    #[test]
    fn the_token_is_kept() {
        use crate::web::auth::WebAuth;

        let auth = WebAuth::new("s3cret-token".into(), None);
        assert_eq!(auth.token(), "s3cret-token");
    }
}
