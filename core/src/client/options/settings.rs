//! [`ConnectSettings`]: connection settings given field by field (keyword arguments, an
//! options object, a record), merged over a URL, the environment or the defaults. This is the
//! one merge: every binding fills a `ConnectSettings` and calls
//! [`resolve`](ConnectSettings::resolve), so that the rules (which value wins, TLS on or off,
//! the port when none is given) are the same in every language.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::{ConnectOptions, ReconnectPolicy, TlsOptions};
use crate::protocol::errors::Error;

/// Connection settings given one by one; every field is optional (`None`: not given).
///
/// [`resolve`](ConnectSettings::resolve) starts from `url` (read by
/// [`ConnectOptions::from_url`]), or the environment when `from_env` is set
/// ([`ConnectOptions::from_env`]), or the defaults (`mqtt://127.0.0.1:1883`), and lays every
/// given field over it. Its rules:
///
/// - TLS is on when `tls` is `Some(true)`, or when it is not given and a TLS file or
///   `server_name` is (or the URL / environment turned it on); `Some(false)` turns it off,
///   and is an error together with TLS files or a server name.
/// - With no URL, no environment and no `port`, the port follows TLS:
///   [`ConnectOptions::default_port`] (8883 with TLS, 1883 without), as `mqtts://host` does.
/// - The result is checked by [`ConnectOptions::validate`].
///
/// ```
/// use mqstate::ConnectSettings;
///
/// let mut s = ConnectSettings::default();
/// s.host = Some("broker.local".into());
/// s.tls = Some(true);
/// let o = s.resolve().unwrap();
/// assert_eq!((o.host.as_str(), o.port), ("broker.local", 8883));
///
/// let mut s = ConnectSettings::default();
/// s.url = Some("mqtt://h:1884?client_id=a".into());
/// s.client_id = Some("b".into());
/// let o = s.resolve().unwrap();
/// assert_eq!((o.port, o.client_id.as_deref()), (1884, Some("b")));
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectSettings {
    /// A broker URL (`mqtt://...`, `mqtts://...`) to start from.
    pub url: Option<String>,
    /// Start from the `AIO_*` environment variables instead (not with `url`).
    pub from_env: bool,
    /// Broker host.
    pub host: Option<String>,
    /// Broker port (default: 1883, or 8883 with TLS).
    pub port: Option<u16>,
    /// MQTT client id.
    pub client_id: Option<String>,
    /// MQTT user name.
    pub username: Option<String>,
    /// MQTT password.
    pub password: Option<String>,
    /// A file holding the MQTT password.
    pub password_file: Option<PathBuf>,
    /// A Kubernetes service account token file.
    pub sat_file: Option<PathBuf>,
    /// TLS on (`true`) or off (`false`).
    pub tls: Option<bool>,
    /// PEM CA bundle to trust (turns TLS on).
    pub ca_file: Option<PathBuf>,
    /// Client certificate chain for mutual TLS (turns TLS on).
    pub cert_file: Option<PathBuf>,
    /// Client private key for mutual TLS (turns TLS on).
    pub key_file: Option<PathBuf>,
    /// The name the broker's certificate must be valid for (turns TLS on).
    pub server_name: Option<String>,
    /// MQTT keep-alive.
    pub keep_alive: Option<Duration>,
    /// Session expiry.
    pub session_expiry: Option<Duration>,
    /// Default timeout of every request.
    pub request_timeout: Option<Duration>,
    /// How long one connection attempt may take.
    pub connect_timeout: Option<Duration>,
    /// Delay before the first reconnection attempt.
    pub reconnect_initial_delay: Option<Duration>,
    /// Longest delay between reconnection attempts.
    pub reconnect_max_delay: Option<Duration>,
    /// Notifications buffered per observation before it reports a lag.
    pub observation_buffer: Option<usize>,
    /// Largest MQTT packet accepted, in bytes.
    pub max_packet_size: Option<u32>,
}

impl fmt::Debug for ConnectSettings {
    /// The password is never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectSettings")
            .field("url", &self.url.as_ref().map(|_| "<url>"))
            .field("from_env", &self.from_env)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("client_id", &self.client_id)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl ConnectSettings {
    /// True when a TLS file or the server name is given.
    fn tls_details_given(&self) -> bool {
        self.ca_file.is_some()
            || self.cert_file.is_some()
            || self.key_file.is_some()
            || self.server_name.is_some()
    }

    /// The options: the base (URL, environment or defaults) with every given field over it,
    /// validated. Errors are [`Error::InvalidArgument`] naming what was wrong.
    ///
    /// ```
    /// use mqstate::ConnectSettings;
    ///
    /// let mut s = ConnectSettings::default();
    /// s.tls = Some(false);
    /// s.ca_file = Some("ca.pem".into());
    /// assert!(s.resolve().unwrap_err().to_string().contains("TLS is turned off"));
    ///
    /// assert_eq!(ConnectSettings::default().resolve().unwrap().port, 1883);
    /// ```
    pub fn resolve(self) -> Result<ConnectOptions, Error> {
        let mut o = match (&self.url, self.from_env) {
            (Some(_), true) => {
                return Err(Error::InvalidArgument(
                    "a URL and the environment exclude each other".into(),
                ));
            }
            (Some(url), false) => ConnectOptions::from_url(url)?,
            (None, true) => ConnectOptions::from_env()?,
            (None, false) => ConnectOptions::default(),
        };
        let base_has_port = self.url.is_some() || self.from_env;
        let tls_details = self.tls_details_given();
        match self.tls {
            Some(false) if tls_details => {
                return Err(Error::InvalidArgument(
                    "TLS is turned off, but TLS settings are given (ca_file / cert_file / \
                     key_file / server_name)"
                        .into(),
                ));
            }
            Some(false) => o.tls = None,
            Some(true) => {
                o.tls.get_or_insert_with(TlsOptions::default);
            }
            None if tls_details => {
                o.tls.get_or_insert_with(TlsOptions::default);
            }
            None => {}
        }
        if let Some(tls) = o.tls.as_mut() {
            if let Some(v) = self.ca_file {
                tls.ca_file = Some(v);
            }
            if let Some(v) = self.cert_file {
                tls.client_cert_file = Some(v);
            }
            if let Some(v) = self.key_file {
                tls.client_key_file = Some(v);
            }
            if let Some(v) = self.server_name {
                tls.server_name = Some(v);
            }
        }
        if let Some(host) = self.host {
            o.host = host;
        }
        match self.port {
            Some(port) => o.port = port,
            // Without a URL, an environment or a port, the port follows TLS.
            None if !base_has_port => o.port = ConnectOptions::default_port(o.tls.is_some()),
            None => {}
        }
        if let Some(v) = self.client_id {
            o.client_id = Some(v);
        }
        if let Some(v) = self.username {
            o.username = Some(v);
        }
        if let Some(v) = self.password {
            o.password = Some(v);
        }
        if let Some(v) = self.password_file {
            o.password_file = Some(v);
        }
        if let Some(v) = self.sat_file {
            o.sat_file = Some(v);
        }
        if let Some(v) = self.keep_alive {
            o.keep_alive = v;
        }
        if let Some(v) = self.session_expiry {
            o.session_expiry = v;
        }
        if let Some(v) = self.request_timeout {
            o.request_timeout = v;
        }
        if let Some(v) = self.connect_timeout {
            o.connect_timeout = v;
        }
        if self.reconnect_initial_delay.is_some() || self.reconnect_max_delay.is_some() {
            o.reconnect = ReconnectPolicy::new(
                self.reconnect_initial_delay
                    .unwrap_or(o.reconnect.initial_delay),
                self.reconnect_max_delay.unwrap_or(o.reconnect.max_delay),
            );
        }
        if let Some(v) = self.observation_buffer {
            o.observation_buffer = v;
        }
        if let Some(v) = self.max_packet_size {
            o.max_packet_size = v;
        }
        o.validate()?;
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_follows_tls_only_without_url_or_port() {
        let s = ConnectSettings {
            ca_file: Some("ca.pem".into()),
            ..ConnectSettings::default()
        };
        assert_eq!(s.clone().resolve().unwrap().port, 8883);
        let s = ConnectSettings {
            port: Some(1884),
            ..s
        };
        assert_eq!(s.resolve().unwrap().port, 1884);

        // The URL's port (its scheme's default) stays.
        let s = ConnectSettings {
            url: Some("mqtt://h".into()),
            tls: Some(true),
            ..ConnectSettings::default()
        };
        assert_eq!(s.resolve().unwrap().port, 1883);

        let s = ConnectSettings {
            tls: Some(false),
            ..ConnectSettings::default()
        };
        assert_eq!(s.resolve().unwrap().port, 1883);
    }

    #[test]
    fn tls_off_turns_a_url_tls_off_and_fields_merge() {
        let s = ConnectSettings {
            url: Some("mqtts://h?ca_file=/a.pem".into()),
            tls: Some(false),
            ..ConnectSettings::default()
        };
        assert!(s.resolve().unwrap().tls.is_none());

        let s = ConnectSettings {
            url: Some("mqtts://h?ca_file=/a.pem".into()),
            server_name: Some("n".into()),
            ..ConnectSettings::default()
        };
        let tls = s.resolve().unwrap().tls.unwrap();
        assert_eq!(tls.ca_file.as_deref(), Some(std::path::Path::new("/a.pem")));
        assert_eq!(tls.server_name.as_deref(), Some("n"));
    }

    #[test]
    fn reconnect_and_validation() {
        let s = ConnectSettings {
            reconnect_max_delay: Some(Duration::from_secs(2)),
            ..ConnectSettings::default()
        };
        let o = s.resolve().unwrap();
        assert_eq!(o.reconnect.max_delay, Duration::from_secs(2));
        assert_eq!(
            o.reconnect.initial_delay,
            ReconnectPolicy::default().initial_delay
        );

        let s = ConnectSettings {
            connect_timeout: Some(Duration::from_millis(500)),
            ..ConnectSettings::default()
        };
        assert!(
            s.resolve()
                .unwrap_err()
                .to_string()
                .contains("connect timeout")
        );

        let s = ConnectSettings {
            url: Some("mqtt://h".into()),
            from_env: true,
            ..ConnectSettings::default()
        };
        assert!(s.resolve().is_err());
    }
}
