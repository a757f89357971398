//! [`ConnectOptions`]: the settings of one client's connection, their defaults and checks.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;

use super::{ReconnectPolicy, TlsOptions};
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
            Some(path) => std::fs::read_to_string(path).map(Some).map_err(|e| {
                Error::connection_caused_by(format!("password file {}: {e}", path.display()), e)
            }),
            None => Ok(self.password.clone()),
        }
    }

    /// The SAT token to send now (read at every connection: tokens rotate).
    pub fn current_sat(&self) -> Result<Option<Bytes>, Error> {
        match &self.sat_file {
            Some(path) => std::fs::read(path)
                .map(|t| Some(Bytes::from(t)))
                .map_err(|e| {
                    Error::connection_caused_by(
                        format!("SAT token file {}: {e}", path.display()),
                        e,
                    )
                }),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
