//! How to reach the broker: [`ConnectOptions`], from code, from a URL
//! ([`ConnectOptions::from_url`]) or from the Azure IoT Operations environment variables
//! ([`ConnectOptions::from_env`]).
//!
//! ```
//! use std::time::Duration;
//! use mqstate::ConnectOptions;
//!
//! let options = ConnectOptions::from_url("mqtt://127.0.0.1:1883?client_id=sensor-7").unwrap()
//!     .with_keep_alive(Duration::from_secs(30));
//! assert_eq!(options.host, "127.0.0.1");
//! assert_eq!(options.client_id.as_deref(), Some("sensor-7"));
//! ```

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

pub use super::tls::TlsOptions;
use crate::protocol::errors::Error;

/// The authentication method of a Kubernetes service account token (SAT), the Azure IoT
/// Operations convention for MQTT5 enhanced authentication.
///
/// ```
/// assert_eq!(mqstate::client::options::SAT_AUTH_METHOD, "K8S-SAT");
/// ```
pub const SAT_AUTH_METHOD: &str = "K8S-SAT";

/// The default MQTT port without TLS.
///
/// ```
/// use mqstate::{ConnectOptions, client::options::DEFAULT_PORT};
/// assert_eq!(ConnectOptions::from_url("mqtt://h").unwrap().port, DEFAULT_PORT);
/// ```
pub const DEFAULT_PORT: u16 = 1883;
/// The default MQTT port with TLS.
///
/// ```
/// use mqstate::{ConnectOptions, client::options::DEFAULT_TLS_PORT};
/// assert_eq!(ConnectOptions::from_url("mqtts://h").unwrap().port, DEFAULT_TLS_PORT);
/// ```
pub const DEFAULT_TLS_PORT: u16 = 8883;

/// Every `AIO_*` variable [`ConnectOptions::from_env`] reads.
///
/// ```
/// assert!(mqstate::client::options::ENV_VARS.contains(&"AIO_SAT_FILE"));
/// ```
pub const ENV_VARS: &[&str] = &[
    "AIO_BROKER_HOSTNAME",
    "AIO_BROKER_TCP_PORT",
    "AIO_MQTT_USE_TLS",
    "AIO_TLS_CA_FILE",
    "AIO_TLS_CERT_FILE",
    "AIO_TLS_KEY_FILE",
    "AIO_SAT_FILE",
    "AIO_MQTT_CLIENT_ID",
    "AIO_MQTT_USERNAME",
    "AIO_MQTT_PASSWORD_FILE",
    "AIO_MQTT_KEEP_ALIVE",
    "AIO_MQTT_SESSION_EXPIRY",
];

/// How the client waits between reconnection attempts: exponential backoff with jitter.
///
/// Attempt `n` (from 0) waits a random duration in `[d/2, d]` where
/// `d = min(max_delay, initial_delay × 2^n)`, so that many clients cut off at once by a broker
/// restart do not all come back in the same millisecond.
///
/// The count of attempts starts again from 0 only once a connection has stayed up for at
/// least `max_delay`. A connection that the broker accepts and then drops at once (another
/// client connected with the same client id and took the session over, a quota, a proxy that
/// resets it) is therefore retried at a slowing pace, up to `max_delay` apart, instead of in a
/// loop several times a second.
///
/// ```
/// use std::time::Duration;
/// use mqstate::ReconnectPolicy;
///
/// let policy = ReconnectPolicy::default();
/// // rand01 = 1.0 gives the upper end of the range.
/// assert_eq!(policy.delay(0, 1.0), Duration::from_millis(100));
/// assert_eq!(policy.delay(3, 1.0), Duration::from_millis(800));
/// assert_eq!(policy.delay(60, 1.0), Duration::from_secs(10));
/// assert_eq!(policy.delay(3, 0.0), Duration::from_millis(400));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReconnectPolicy {
    /// The delay before the first reconnection attempt (upper end of its jitter range).
    pub initial_delay: Duration,
    /// The longest delay between two attempts; also how long a connection must last for the
    /// next loss to start again from `initial_delay`.
    pub max_delay: Duration,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        ReconnectPolicy {
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(10),
        }
    }
}

impl ReconnectPolicy {
    /// A policy with the given bounds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mqstate::ReconnectPolicy;
    ///
    /// let p = ReconnectPolicy::new(Duration::from_millis(10), Duration::from_secs(1));
    /// assert_eq!(p.delay(20, 1.0), Duration::from_secs(1));
    /// ```
    pub fn new(initial_delay: Duration, max_delay: Duration) -> Self {
        ReconnectPolicy {
            initial_delay,
            max_delay,
        }
    }

    /// The delay before attempt `attempt` (0 = first reconnection), for a uniform random
    /// number `rand01` in `[0, 1]` (values outside are clamped).
    pub fn delay(&self, attempt: u32, rand01: f64) -> Duration {
        let factor = 2u32.saturating_pow(attempt.min(31));
        let ceiling = self
            .initial_delay
            .checked_mul(factor)
            .unwrap_or(self.max_delay)
            .min(self.max_delay);
        let r = if rand01.is_nan() {
            0.5
        } else {
            rand01.clamp(0.0, 1.0)
        };
        ceiling.mul_f64(0.5 + r / 2.0)
    }
}

/// The reconnection attempts of one connection task, by [`ReconnectPolicy`]'s rule: the
/// count goes back to 0 only after a connection that lasted `max_delay`.
#[derive(Debug)]
pub(crate) struct Backoff {
    policy: ReconnectPolicy,
    attempt: u32,
    connected_at: Option<Instant>,
}

impl Backoff {
    pub(crate) fn new(policy: ReconnectPolicy) -> Self {
        Backoff {
            policy,
            attempt: 0,
            connected_at: None,
        }
    }

    /// A connection was made at `now`.
    pub(crate) fn connected(&mut self, now: Instant) {
        self.connected_at = Some(now);
    }

    /// The connection (or an attempt to make one) failed at `now`: how long to wait before
    /// the next attempt, and that attempt's number (1 = the first since the last connection
    /// that counted as stable).
    pub(crate) fn next_delay(&mut self, now: Instant, rand01: f64) -> (Duration, u32) {
        if let Some(since) = self.connected_at.take()
            && now.saturating_duration_since(since) >= self.policy.max_delay
        {
            self.attempt = 0;
        }
        let delay = self.policy.delay(self.attempt, rand01);
        self.attempt = self.attempt.saturating_add(1);
        (delay, self.attempt)
    }
}

/// Where to connect and how. Build one with [`ConnectOptions::new`],
/// [`from_url`](ConnectOptions::from_url) or [`from_env`](ConnectOptions::from_env), then
/// adjust the public fields or use the `with_*` methods.
///
/// ```
/// use std::time::Duration;
/// use mqstate::{ConnectOptions, TlsOptions};
///
/// let options = ConnectOptions::new("broker.local", 8883)
///     .with_client_id("line-3-controller")
///     .with_tls(TlsOptions::default().with_ca_file("ca.pem"))
///     .with_request_timeout(Duration::from_secs(2));
/// assert_eq!(options.port, 8883);
/// assert!(options.tls.is_some());
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// Broker host name or IP address.
    pub host: String,
    /// Broker port.
    pub port: u16,
    /// MQTT client id; a random `mqstate-…` id is generated when `None`. It is also the node
    /// id of the client's clock and names its response and notification topics.
    pub client_id: Option<String>,
    /// MQTT keep-alive (5 s to 65,535 s; default 60 s).
    pub keep_alive: Duration,
    /// How long the broker keeps the session (subscriptions and queued QoS 1 messages) after
    /// a disconnection (default 1 hour). The client always connects with clean start off so
    /// that unacknowledged requests are resent after a reconnect. [`crate::Client::close`]
    /// unsubscribes before it disconnects, so the session left behind is empty.
    pub session_expiry: Duration,
    /// TLS, or `None` for plain TCP.
    pub tls: Option<TlsOptions>,
    /// MQTT user name.
    pub username: Option<String>,
    /// MQTT password.
    pub password: Option<String>,
    /// A file holding the MQTT password, read at every (re)connection (it wins over
    /// `password`).
    pub password_file: Option<PathBuf>,
    /// A Kubernetes service account token file, sent as MQTT5 enhanced authentication with
    /// method [`SAT_AUTH_METHOD`], read again at every (re)connection because the token
    /// rotates.
    pub sat_file: Option<PathBuf>,
    /// Default timeout of every request (default 10 s); see [`crate::Client::with_timeout`].
    pub request_timeout: Duration,
    /// How long one connection attempt (TCP, TLS, CONNECT/CONNACK) may take (default 10 s).
    /// The minimum is 1 s: a shorter value is an [`Error::InvalidArgument`] at connect (the
    /// MQTT layer counts it in whole seconds, so a fraction of a second is dropped). When
    /// the first attempt takes longer, `Client::connect` fails with
    /// [`Error::ConnectTimeout`] (kind `timeout`), whose message names host, port and limit.
    pub connect_timeout: Duration,
    /// Backoff between reconnection attempts.
    pub reconnect: ReconnectPolicy,
    /// Largest MQTT packet the client accepts (default 16 MiB; the protocol bounds values by
    /// this).
    pub max_packet_size: u32,
    /// How many notifications each observation stream buffers before it reports lag
    /// (default 1024).
    pub observation_buffer: usize,
}

impl fmt::Debug for ConnectOptions {
    /// The password is never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("client_id", &self.client_id)
            .field("keep_alive", &self.keep_alive)
            .field("session_expiry", &self.session_expiry)
            .field("tls", &self.tls)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("password_file", &self.password_file)
            .field("sat_file", &self.sat_file)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("reconnect", &self.reconnect)
            .field("max_packet_size", &self.max_packet_size)
            .field("observation_buffer", &self.observation_buffer)
            .finish()
    }
}

impl Default for ConnectOptions {
    /// `mqtt://127.0.0.1:1883`, as `mqstate serve` listens by default.
    fn default() -> Self {
        ConnectOptions::new("127.0.0.1", DEFAULT_PORT)
    }
}

impl ConnectOptions {
    /// Plain TCP to `host:port` with the defaults documented on each field.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mqstate::ConnectOptions;
    ///
    /// let o = ConnectOptions::new("localhost", 1883);
    /// assert_eq!(o.request_timeout, Duration::from_secs(10));
    /// assert!(o.client_id.is_none() && o.tls.is_none());
    /// ```
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        ConnectOptions {
            host: host.into(),
            port,
            client_id: None,
            keep_alive: Duration::from_secs(60),
            session_expiry: Duration::from_secs(3600),
            tls: None,
            username: None,
            password: None,
            password_file: None,
            sat_file: None,
            request_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            reconnect: ReconnectPolicy::default(),
            max_packet_size: 16 * 1024 * 1024,
            observation_buffer: 1024,
        }
    }

    /// Sets the client id (builder style).
    ///
    /// ```
    /// # use mqstate::ConnectOptions;
    /// assert_eq!(ConnectOptions::default().with_client_id("c1").client_id.as_deref(), Some("c1"));
    /// ```
    #[must_use]
    pub fn with_client_id(mut self, client_id: impl Into<String>) -> Self {
        self.client_id = Some(client_id.into());
        self
    }

    /// Enables TLS (builder style).
    ///
    /// ```
    /// # use mqstate::{ConnectOptions, TlsOptions};
    /// assert!(ConnectOptions::default().with_tls(TlsOptions::default()).tls.is_some());
    /// ```
    #[must_use]
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sets user name and password (builder style).
    ///
    /// ```
    /// # use mqstate::ConnectOptions;
    /// let o = ConnectOptions::default().with_credentials("user", "secret");
    /// assert_eq!(o.username.as_deref(), Some("user"));
    /// assert!(!format!("{o:?}").contains("secret"));
    /// ```
    #[must_use]
    pub fn with_credentials(
        mut self,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.username = Some(username.into());
        self.password = Some(password.into());
        self
    }

    /// Sets the SAT token file (builder style).
    ///
    /// ```
    /// # use mqstate::ConnectOptions;
    /// assert!(ConnectOptions::default().with_sat_file("/var/run/secrets/token").sat_file.is_some());
    /// ```
    #[must_use]
    pub fn with_sat_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.sat_file = Some(path.into());
        self
    }

    /// Sets the keep-alive (builder style).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use mqstate::ConnectOptions;
    /// let o = ConnectOptions::default().with_keep_alive(Duration::from_secs(30));
    /// assert_eq!(o.keep_alive, Duration::from_secs(30));
    /// ```
    #[must_use]
    pub fn with_keep_alive(mut self, keep_alive: Duration) -> Self {
        self.keep_alive = keep_alive;
        self
    }

    /// Sets the session expiry (builder style).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use mqstate::ConnectOptions;
    /// let o = ConnectOptions::default().with_session_expiry(Duration::from_secs(600));
    /// assert_eq!(o.session_expiry, Duration::from_secs(600));
    /// ```
    #[must_use]
    pub fn with_session_expiry(mut self, session_expiry: Duration) -> Self {
        self.session_expiry = session_expiry;
        self
    }

    /// Sets the default request timeout (builder style).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use mqstate::ConnectOptions;
    /// let o = ConnectOptions::default().with_request_timeout(Duration::from_millis(500));
    /// assert_eq!(o.request_timeout, Duration::from_millis(500));
    /// ```
    #[must_use]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The port used when none is given: [`DEFAULT_TLS_PORT`] (8883) with TLS,
    /// [`DEFAULT_PORT`] (1883) without. Every binding asks this rather than deciding.
    ///
    /// ```
    /// use mqstate::ConnectOptions;
    ///
    /// assert_eq!(ConnectOptions::default_port(true), 8883);
    /// assert_eq!(ConnectOptions::default_port(false), 1883);
    /// ```
    pub fn default_port(tls: bool) -> u16 {
        if tls { DEFAULT_TLS_PORT } else { DEFAULT_PORT }
    }

    /// Sets how long one connection attempt may take (builder style); see
    /// [`ConnectOptions::connect_timeout`] (at least 1 s).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use mqstate::ConnectOptions;
    /// let o = ConnectOptions::default().with_connect_timeout(Duration::from_secs(3));
    /// assert_eq!(o.connect_timeout, Duration::from_secs(3));
    /// ```
    #[must_use]
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the reconnection backoff (builder style).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use mqstate::{ConnectOptions, ReconnectPolicy};
    /// let p = ReconnectPolicy::new(Duration::from_millis(50), Duration::from_secs(2));
    /// assert_eq!(ConnectOptions::default().with_reconnect(p).reconnect, p);
    /// ```
    #[must_use]
    pub fn with_reconnect(mut self, policy: ReconnectPolicy) -> Self {
        self.reconnect = policy;
        self
    }

    /// Parses `mqtt://[user[:password]@]host[:port][?query]` (plain TCP, default port 1883)
    /// or `mqtts://...` (TLS, default port 8883); `tcp://` and `ssl://` are synonyms. This is
    /// the one URL parser: every binding passes its URL here unchanged.
    ///
    /// Query parameters (percent-decoded, like the user and password):
    ///
    /// | parameter | meaning |
    /// |---|---|
    /// | `client_id` | MQTT client id (no `:`; default: a generated `mqstate-...` id) |
    /// | `keep_alive` | MQTT keep-alive, whole seconds, 5 to 65535 (default 60) |
    /// | `session_expiry` | how long the broker keeps the session, whole seconds (default 3600) |
    /// | `request_timeout_ms` | default timeout of every request, ms, > 0 (default 10000) |
    /// | `connect_timeout_ms` | one connection attempt, ms, at least 1000 (default 10000) |
    /// | `ca_file` | PEM CA bundle to trust (`mqtts://` only; default: the platform's roots) |
    /// | `cert_file`, `key_file` | client certificate and key for mutual TLS (`mqtts://` only) |
    /// | `server_name` | the name the broker's certificate must be valid for (`mqtts://` only) |
    /// | `sat_file` | Kubernetes service account token file (`K8S-SAT` authentication) |
    /// | `password_file` | file holding the MQTT password, read at every connection |
    ///
    /// Any other parameter, scheme or malformed part is an [`Error::InvalidArgument`] that
    /// names it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mqstate::ConnectOptions;
    ///
    /// let o = ConnectOptions::from_url("mqtts://app:p%40ss@[::1]:18883?ca_file=/tmp/ca.pem&keep_alive=20").unwrap();
    /// assert_eq!((o.host.as_str(), o.port), ("::1", 18883));
    /// assert_eq!(o.password.as_deref(), Some("p@ss"));
    /// assert_eq!(o.keep_alive, Duration::from_secs(20));
    /// assert!(o.tls.unwrap().ca_file.is_some());
    ///
    /// assert!(ConnectOptions::from_url("http://host").is_err());
    /// assert!(ConnectOptions::from_url("mqtt://host?colour=blue").is_err());
    /// ```
    pub fn from_url(url: &str) -> Result<Self, Error> {
        let bad = |what: String| Error::InvalidArgument(format!("broker URL {url:?}: {what}"));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("expected mqtt://host[:port] or mqtts://host[:port]".into()))?;
        let use_tls = match scheme.to_ascii_lowercase().as_str() {
            "mqtt" | "tcp" => false,
            "mqtts" | "ssl" => true,
            other => {
                return Err(bad(format!(
                    "unsupported scheme {other:?} (use mqtt:// or mqtts://)"
                )));
            }
        };
        let (authority, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let authority = authority.strip_suffix('/').unwrap_or(authority);
        if authority.contains('/') {
            return Err(bad("a path is not allowed".into()));
        }
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (host, port) = split_host_port(hostport).map_err(bad)?;
        let port = port.unwrap_or(Self::default_port(use_tls));
        let mut options = ConnectOptions::new(host, port);
        if use_tls {
            options.tls = Some(TlsOptions::default());
        }
        if let Some(userinfo) = userinfo {
            let (user, password) = match userinfo.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (userinfo, None),
            };
            if user.is_empty() {
                return Err(bad("user: empty user name before '@'".into()));
            }
            options.username = Some(percent_decode(user).map_err(|e| bad(format!("user: {e}")))?);
            if let Some(p) = password {
                options.password =
                    Some(percent_decode(p).map_err(|e| bad(format!("password: {e}")))?);
            }
        }
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value =
                percent_decode(value).map_err(|e| bad(format!("query parameter {name}: {e}")))?;
            let secs = |v: &str| {
                v.parse::<u64>()
                    .map(Duration::from_secs)
                    .map_err(|_| bad(format!("{name} must be whole seconds, got {v:?}")))
            };
            match name {
                "client_id" => options.client_id = Some(value),
                "keep_alive" => options.keep_alive = secs(&value)?,
                "session_expiry" => options.session_expiry = secs(&value)?,
                "request_timeout_ms" => {
                    options.request_timeout = value
                        .parse::<u64>()
                        .map(Duration::from_millis)
                        .map_err(|_| {
                            bad(format!(
                                "request_timeout_ms must be whole milliseconds, got {value:?}"
                            ))
                        })?;
                }
                "connect_timeout_ms" => {
                    options.connect_timeout = value
                        .parse::<u64>()
                        .map(Duration::from_millis)
                        .map_err(|_| {
                            bad(format!(
                                "connect_timeout_ms must be whole milliseconds, got {value:?}"
                            ))
                        })?;
                }
                "ca_file" | "cert_file" | "key_file" | "server_name" => {
                    let tls = options.tls.get_or_insert_with(TlsOptions::default);
                    match name {
                        "ca_file" => tls.ca_file = Some(value.into()),
                        "cert_file" => tls.client_cert_file = Some(value.into()),
                        "key_file" => tls.client_key_file = Some(value.into()),
                        _ => tls.server_name = Some(value),
                    }
                    if !use_tls {
                        return Err(bad(format!("{name} needs the mqtts:// scheme")));
                    }
                }
                "sat_file" => options.sat_file = Some(value.into()),
                "password_file" => options.password_file = Some(value.into()),
                other => return Err(bad(format!("unknown query parameter {other:?}"))),
            }
        }
        options.validate()?;
        Ok(options)
    }

    /// Reads the Azure IoT Operations environment variables:
    ///
    /// | variable | meaning |
    /// |---|---|
    /// | `AIO_BROKER_HOSTNAME` | broker host (required) |
    /// | `AIO_BROKER_TCP_PORT` | port (default 8883 with TLS, 1883 without) |
    /// | `AIO_MQTT_USE_TLS` | `true` / `false` (default `true`) |
    /// | `AIO_TLS_CA_FILE` | CA certificate PEM file |
    /// | `AIO_TLS_CERT_FILE`, `AIO_TLS_KEY_FILE` | client certificate and key (mutual TLS) |
    /// | `AIO_SAT_FILE` | service account token file (enhanced authentication `K8S-SAT`) |
    /// | `AIO_MQTT_CLIENT_ID` | client id (generated if unset) |
    /// | `AIO_MQTT_USERNAME` | user name |
    /// | `AIO_MQTT_PASSWORD_FILE` | file holding the password |
    /// | `AIO_MQTT_KEEP_ALIVE` | keep-alive, seconds |
    /// | `AIO_MQTT_SESSION_EXPIRY` | session expiry, seconds |
    ///
    /// An empty variable counts as unset. A malformed value is an [`Error::InvalidArgument`]
    /// that names the variable and the value.
    ///
    /// ```no_run
    /// let options = mqstate::ConnectOptions::from_env()?;
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    pub fn from_env() -> Result<Self, Error> {
        Self::from_env_with(|name| std::env::var_os(name))
    }

    /// [`from_env`](ConnectOptions::from_env) reading variables through `lookup` instead of
    /// the process environment (for tests, and for bindings that pass a mapping).
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use mqstate::ConnectOptions;
    ///
    /// let env = HashMap::from([
    ///     ("AIO_BROKER_HOSTNAME", "aio-broker"),
    ///     ("AIO_MQTT_USE_TLS", "false"),
    ///     ("AIO_MQTT_CLIENT_ID", "pump-1"),
    /// ]);
    /// let o = ConnectOptions::from_env_with(|k| env.get(k).map(Into::into)).unwrap();
    /// assert_eq!((o.host.as_str(), o.port), ("aio-broker", 1883));
    ///
    /// let env = HashMap::from([("AIO_BROKER_HOSTNAME", "b"), ("AIO_MQTT_USE_TLS", "maybe")]);
    /// let err = ConnectOptions::from_env_with(|k| env.get(k).map(Into::into)).unwrap_err();
    /// assert!(err.to_string().contains("AIO_MQTT_USE_TLS"));
    /// ```
    pub fn from_env_with<F>(lookup: F) -> Result<Self, Error>
    where
        F: Fn(&str) -> Option<std::ffi::OsString>,
    {
        let var = |name: &str| -> Result<Option<String>, Error> {
            match lookup(name) {
                None => Ok(None),
                Some(v) if v.is_empty() => Ok(None),
                Some(v) => v.into_string().map(Some).map_err(|v| {
                    Error::InvalidArgument(format!(
                        "environment variable {name}: not valid UTF-8 ({v:?})"
                    ))
                }),
            }
        };
        let invalid = |name: &str, value: &str, expected: &str| {
            Error::InvalidArgument(format!(
                "environment variable {name}={value:?}: expected {expected}"
            ))
        };
        let host = var("AIO_BROKER_HOSTNAME")?.ok_or_else(|| {
            Error::InvalidArgument("environment variable AIO_BROKER_HOSTNAME is not set".into())
        })?;
        let use_tls = match var("AIO_MQTT_USE_TLS")? {
            None => true,
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => true,
                "false" | "0" | "no" => false,
                _ => return Err(invalid("AIO_MQTT_USE_TLS", &v, "true or false")),
            },
        };
        let port = match var("AIO_BROKER_TCP_PORT")? {
            None if use_tls => DEFAULT_TLS_PORT,
            None => DEFAULT_PORT,
            Some(v) => match v.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => return Err(invalid("AIO_BROKER_TCP_PORT", &v, "a port number 1-65535")),
            },
        };
        let mut options = ConnectOptions::new(host, port);
        let seconds = |name: &str| -> Result<Option<Duration>, Error> {
            match var(name)? {
                None => Ok(None),
                Some(v) => v
                    .parse::<u64>()
                    .map(|s| Some(Duration::from_secs(s)))
                    .map_err(|_| invalid(name, &v, "a whole number of seconds")),
            }
        };
        if let Some(k) = seconds("AIO_MQTT_KEEP_ALIVE")? {
            options.keep_alive = k;
        }
        if let Some(s) = seconds("AIO_MQTT_SESSION_EXPIRY")? {
            options.session_expiry = s;
        }
        options.client_id = var("AIO_MQTT_CLIENT_ID")?;
        options.username = var("AIO_MQTT_USERNAME")?;
        options.password_file = var("AIO_MQTT_PASSWORD_FILE")?.map(PathBuf::from);
        options.sat_file = var("AIO_SAT_FILE")?.map(PathBuf::from);
        let ca = var("AIO_TLS_CA_FILE")?;
        let cert = var("AIO_TLS_CERT_FILE")?;
        let key = var("AIO_TLS_KEY_FILE")?;
        if use_tls {
            options.tls = Some(TlsOptions {
                ca_file: ca.map(PathBuf::from),
                client_cert_file: cert.map(PathBuf::from),
                client_key_file: key.map(PathBuf::from),
                server_name: None,
            });
        } else if let Some((name, _)) = [
            ("AIO_TLS_CA_FILE", &ca),
            ("AIO_TLS_CERT_FILE", &cert),
            ("AIO_TLS_KEY_FILE", &key),
        ]
        .into_iter()
        .find(|(_, v)| v.is_some())
        {
            return Err(Error::InvalidArgument(format!(
                "environment variable {name} is set but AIO_MQTT_USE_TLS is false"
            )));
        }
        options.validate().map_err(|e| match e {
            Error::InvalidArgument(m) => {
                Error::InvalidArgument(format!("from the AIO_* environment: {m}"))
            }
            other => other,
        })?;
        Ok(options)
    }

    /// Checks the values the MQTT layer cannot carry, before anything is sent (the one set
    /// of option rules: [`crate::Client::connect`] calls it, and so does every binding's
    /// option setter, so a bad value fails where it is given).
    ///
    /// ```
    /// use std::time::Duration;
    /// use mqstate::ConnectOptions;
    ///
    /// assert!(ConnectOptions::default().validate().is_ok());
    /// let short = ConnectOptions::default().with_keep_alive(Duration::from_secs(1));
    /// assert!(short.validate().unwrap_err().to_string().contains("keep-alive"));
    /// ```
    pub fn validate(&self) -> Result<(), Error> {
        let invalid = |m: String| Err(Error::InvalidArgument(m));
        if self.host.is_empty() {
            return invalid("the broker host is empty".into());
        }
        if self.port == 0 {
            return invalid("the broker port is 0".into());
        }
        if self.keep_alive < Duration::from_secs(5) || self.keep_alive > Duration::from_secs(65_535)
        {
            return invalid(format!(
                "keep-alive {:?} is out of range (5 s to 65,535 s)",
                self.keep_alive
            ));
        }
        if self.session_expiry > Duration::from_secs(u64::from(u32::MAX)) {
            return invalid(format!(
                "session expiry {:?} is too long",
                self.session_expiry
            ));
        }
        if self.request_timeout.is_zero() {
            return invalid("the request timeout is zero".into());
        }
        if self.connect_timeout < Duration::from_secs(1) {
            return invalid(format!(
                "the connect timeout {:?} is under the minimum of 1 s",
                self.connect_timeout
            ));
        }
        if self.observation_buffer == 0 {
            return invalid("the observation buffer is zero".into());
        }
        if self.max_packet_size < 1024 {
            return invalid(format!(
                "max packet size {} is too small (at least 1024)",
                self.max_packet_size
            ));
        }
        if let Some(id) = &self.client_id {
            if id.is_empty() {
                return invalid("the client id is empty (leave it unset to generate one)".into());
            }
            if id.contains('\0') {
                return invalid("the client id contains NUL".into());
            }
            // The client id is the node id of the client's clock.
            if let Err(e) = crate::protocol::hlc::check_node_id(id) {
                return invalid(format!("client id: {e}"));
            }
        }
        if self.password.is_some() && self.username.is_none() {
            return invalid("a password needs a user name".into());
        }
        if let Some(tls) = &self.tls
            && tls.client_cert_file.is_some() != tls.client_key_file.is_some()
        {
            return invalid("mutual TLS needs both cert_file and key_file".into());
        }
        Ok(())
    }

    /// The password to send now: the file's content if a password file is set (read at every
    /// connection, so rotated secrets are picked up), else `password`.
    pub fn current_password(&self) -> Result<Option<String>, Error> {
        match &self.password_file {
            Some(path) => std::fs::read_to_string(path)
                .map(Some)
                .map_err(|e| Error::Connection(format!("password file {}: {e}", path.display()))),
            None => Ok(self.password.clone()),
        }
    }

    /// The SAT token to send now (read at every connection: tokens rotate).
    pub fn current_sat(&self) -> Result<Option<Bytes>, Error> {
        match &self.sat_file {
            Some(path) => std::fs::read(path)
                .map(|t| Some(Bytes::from(t)))
                .map_err(|e| Error::Connection(format!("SAT token file {}: {e}", path.display()))),
            None => Ok(None),
        }
    }
}

/// Splits `host`, `host:port`, `[v6]` or `[v6]:port`.
fn split_host_port(s: &str) -> Result<(String, Option<u16>), String> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| "unterminated [IPv6] host".to_string())?;
        match after {
            "" => (host, None),
            p => (
                host,
                Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| format!("unexpected {p:?} after the host"))?,
                ),
            ),
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return Err("the host is empty".into());
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => Some(n),
            _ => return Err(format!("port {p:?} is not a number 1-65535")),
        },
    };
    Ok((host.to_owned(), port))
}

/// Decodes `%XX` escapes (and nothing else); the result must be UTF-8.
fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape at byte {i}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "not UTF-8 after percent-decoding".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<ConnectOptions, Error> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        ConnectOptions::from_env_with(|k| map.get(k).map(Into::into))
    }

    #[test]
    fn url_defaults() {
        let o = ConnectOptions::from_url("mqtt://localhost").unwrap();
        assert_eq!((o.host.as_str(), o.port), ("localhost", 1883));
        assert!(o.tls.is_none() && o.username.is_none());
        let o = ConnectOptions::from_url("mqtts://h").unwrap();
        assert_eq!(o.port, 8883);
        assert_eq!(o.tls, Some(TlsOptions::default()));
        let o = ConnectOptions::from_url("MQTT://h:1/").unwrap();
        assert_eq!(o.port, 1);
    }

    #[test]
    fn url_full() {
        let o = ConnectOptions::from_url(
            "mqtts://u%3Ax:p@example.com:8884?client_id=a%2Fb&session_expiry=0&request_timeout_ms=250&cert_file=c&key_file=k&server_name=srv&sat_file=/t&password_file=/p",
        )
        .unwrap();
        assert_eq!(o.username.as_deref(), Some("u:x"));
        assert_eq!(o.password.as_deref(), Some("p"));
        assert_eq!(o.client_id.as_deref(), Some("a/b"));
        assert_eq!(o.session_expiry, Duration::ZERO);
        assert_eq!(o.request_timeout, Duration::from_millis(250));
        let tls = o.tls.unwrap();
        assert_eq!(tls.server_name.as_deref(), Some("srv"));
        assert!(tls.client_cert_file.is_some() && tls.client_key_file.is_some());
        assert_eq!(o.sat_file, Some(PathBuf::from("/t")));
        assert_eq!(o.password_file, Some(PathBuf::from("/p")));
    }

    #[test]
    fn url_errors_name_the_problem() {
        for (url, needle) in [
            ("127.0.0.1:1883", "expected mqtt://"),
            ("ws://h", "unsupported scheme"),
            ("mqtt://", "host is empty"),
            ("mqtt://h:0", "port"),
            ("mqtt://h:99999", "port"),
            ("mqtt://h:x", "port"),
            ("mqtt://[::1", "IPv6"),
            ("mqtt://h/path", "path"),
            ("mqtt://h?keep_alive=soon", "keep_alive"),
            ("mqtt://h?keep_alive=1", "keep-alive"),
            ("mqtt://h?nope=1", "nope"),
            ("mqtt://h?ca_file=x", "mqtts"),
            ("mqtt://h?client_id=%zz", "percent"),
            ("mqtt://h?client_id=", "client id is empty"),
            ("mqtt://:pw@h", "user"),
        ] {
            let err = ConnectOptions::from_url(url).expect_err(url);
            assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument, "{url}");
            let msg = err.to_string();
            assert!(msg.contains(needle), "{url}: {msg}");
        }
    }

    #[test]
    fn url_ipv6() {
        let o = ConnectOptions::from_url("mqtt://[::1]").unwrap();
        assert_eq!((o.host.as_str(), o.port), ("::1", 1883));
    }

    #[test]
    fn env_minimal_defaults_to_tls() {
        let o = env(&[("AIO_BROKER_HOSTNAME", "aio-broker")]).unwrap();
        assert_eq!(o.port, 8883);
        assert!(o.tls.is_some());
        assert!(o.client_id.is_none());
    }

    #[test]
    fn env_all_variables() {
        let o = env(&[
            ("AIO_BROKER_HOSTNAME", "b"),
            ("AIO_BROKER_TCP_PORT", "18883"),
            ("AIO_MQTT_USE_TLS", "TRUE"),
            ("AIO_TLS_CA_FILE", "/ca.pem"),
            ("AIO_TLS_CERT_FILE", "/c.pem"),
            ("AIO_TLS_KEY_FILE", "/k.pem"),
            ("AIO_SAT_FILE", "/sat"),
            ("AIO_MQTT_CLIENT_ID", "id"),
            ("AIO_MQTT_USERNAME", "user"),
            ("AIO_MQTT_PASSWORD_FILE", "/pw"),
            ("AIO_MQTT_KEEP_ALIVE", "15"),
            ("AIO_MQTT_SESSION_EXPIRY", "120"),
        ])
        .unwrap();
        assert_eq!(o.port, 18883);
        let tls = o.tls.clone().unwrap();
        assert_eq!(tls.ca_file, Some(PathBuf::from("/ca.pem")));
        assert_eq!(tls.client_key_file, Some(PathBuf::from("/k.pem")));
        assert_eq!(o.sat_file, Some(PathBuf::from("/sat")));
        assert_eq!(o.client_id.as_deref(), Some("id"));
        assert_eq!(o.username.as_deref(), Some("user"));
        assert_eq!(o.password_file, Some(PathBuf::from("/pw")));
        assert_eq!(o.keep_alive, Duration::from_secs(15));
        assert_eq!(o.session_expiry, Duration::from_secs(120));
    }

    #[test]
    fn env_errors_name_the_variable() {
        for (pairs, needle) in [
            (vec![], "AIO_BROKER_HOSTNAME"),
            (
                vec![
                    ("AIO_BROKER_HOSTNAME", "b"),
                    ("AIO_BROKER_TCP_PORT", "70000"),
                ],
                "AIO_BROKER_TCP_PORT",
            ),
            (
                vec![("AIO_BROKER_HOSTNAME", "b"), ("AIO_BROKER_TCP_PORT", "0")],
                "AIO_BROKER_TCP_PORT",
            ),
            (
                vec![
                    ("AIO_BROKER_HOSTNAME", "b"),
                    ("AIO_MQTT_USE_TLS", "sometimes"),
                ],
                "AIO_MQTT_USE_TLS",
            ),
            (
                vec![("AIO_BROKER_HOSTNAME", "b"), ("AIO_MQTT_KEEP_ALIVE", "1m")],
                "AIO_MQTT_KEEP_ALIVE",
            ),
            (
                vec![
                    ("AIO_BROKER_HOSTNAME", "b"),
                    ("AIO_MQTT_SESSION_EXPIRY", "-1"),
                ],
                "AIO_MQTT_SESSION_EXPIRY",
            ),
            (
                vec![
                    ("AIO_BROKER_HOSTNAME", "b"),
                    ("AIO_MQTT_USE_TLS", "false"),
                    ("AIO_TLS_CA_FILE", "/x"),
                ],
                "AIO_TLS_CA_FILE",
            ),
            (
                vec![("AIO_BROKER_HOSTNAME", "b"), ("AIO_MQTT_KEEP_ALIVE", "2")],
                "keep-alive",
            ),
        ] {
            let err = env(&pairs).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
            assert!(err.to_string().contains(needle), "{needle}: {err}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn env_not_utf8() {
        use std::os::unix::ffi::OsStringExt;
        let err = ConnectOptions::from_env_with(|k| {
            (k == "AIO_BROKER_HOSTNAME").then(|| std::ffi::OsString::from_vec(vec![0xff]))
        })
        .unwrap_err();
        assert!(err.to_string().contains("AIO_BROKER_HOSTNAME"));
    }

    #[test]
    fn backoff_grows_caps_and_jitters() {
        let p = ReconnectPolicy::new(Duration::from_millis(100), Duration::from_secs(5));
        let mut last = Duration::ZERO;
        for attempt in 0..10 {
            let hi = p.delay(attempt, 1.0);
            let lo = p.delay(attempt, 0.0);
            assert_eq!(lo * 2, hi);
            assert!(hi >= last);
            last = hi;
        }
        assert_eq!(p.delay(u32::MAX, 1.0), Duration::from_secs(5));
        assert_eq!(p.delay(2, f64::NAN), p.delay(2, 0.5));
        assert_eq!(p.delay(2, 7.0), p.delay(2, 1.0));
    }

    #[test]
    fn backoff_starts_again_only_after_a_connection_that_lasted_max_delay() {
        let p = ReconnectPolicy::new(Duration::from_millis(100), Duration::from_secs(2));
        let mut b = Backoff::new(p);
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        // Failed attempts, no connection in between: 100, 200, 400 ms.
        assert_eq!(b.next_delay(ms(0), 1.0), (Duration::from_millis(100), 1));
        assert_eq!(b.next_delay(ms(100), 1.0), (Duration::from_millis(200), 2));
        assert_eq!(b.next_delay(ms(300), 1.0), (Duration::from_millis(400), 3));
        // Connected, then dropped after 1.999 s (a takeover, say): the count goes on.
        b.connected(ms(1_000));
        assert_eq!(
            b.next_delay(ms(2_999), 1.0),
            (Duration::from_millis(800), 4)
        );
        b.connected(ms(4_000));
        assert_eq!(
            b.next_delay(ms(4_010), 1.0),
            (Duration::from_millis(1_600), 5)
        );
        b.connected(ms(6_000));
        assert_eq!(b.next_delay(ms(6_010), 1.0), (Duration::from_secs(2), 6));
        // A connection that lasted max_delay counts as stable: back to the first delay.
        b.connected(ms(10_000));
        assert_eq!(
            b.next_delay(ms(12_000), 1.0),
            (Duration::from_millis(100), 1)
        );
        // The connection time is used once: failures after it go on counting.
        assert_eq!(
            b.next_delay(ms(12_100), 1.0),
            (Duration::from_millis(200), 2)
        );
    }

    #[test]
    fn tls_config_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let err = TlsOptions::default()
            .with_ca_file(&missing)
            .client_config()
            .unwrap_err();
        assert!(err.to_string().contains("missing.pem"), "{err}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate").unwrap();
        let err = TlsOptions::default()
            .with_ca_file(&empty)
            .client_config()
            .unwrap_err();
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
        let err = TlsOptions {
            client_cert_file: Some(empty.clone()),
            ..TlsOptions::default()
        }
        .client_config()
        .unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
    }

    #[test]
    fn secrets_are_read_from_files() {
        let dir = tempfile::tempdir().unwrap();
        let sat = dir.path().join("token");
        std::fs::write(&sat, b"tok-1").unwrap();
        let mut o = ConnectOptions::default().with_sat_file(&sat);
        assert_eq!(o.current_sat().unwrap().unwrap(), &b"tok-1"[..]);
        std::fs::write(&sat, b"tok-2").unwrap();
        assert_eq!(o.current_sat().unwrap().unwrap(), &b"tok-2"[..]);
        o.password_file = Some(dir.path().join("nope"));
        assert!(
            o.current_password()
                .unwrap_err()
                .to_string()
                .contains("nope")
        );
    }
}
