//! `ConnectOptions`: the foreign record read into the core's `ConnectOptions`.

use std::time::Duration;

use mqstate::ConnectSettings;

use crate::errors::MqstateError;

/// TLS settings; an empty record uses the platform's roots.
#[derive(Debug, Clone, Default, uniffi::Record)]
pub struct TlsConfig {
    /// PEM file with the CA certificate(s) of the broker.
    #[uniffi(default)]
    pub ca_file: Option<String>,
    /// PEM file with the client certificate chain (mutual TLS).
    #[uniffi(default)]
    pub cert_file: Option<String>,
    /// PEM file with the client's private key (mutual TLS).
    #[uniffi(default)]
    pub key_file: Option<String>,
    /// The name the broker's certificate must be valid for, if not the host.
    #[uniffi(default)]
    pub server_name: Option<String>,
}

/// Where to connect and how. `url` (`mqtt://host:port?client_id=...`, `mqtts://...`) is read
/// first; the other fields override it. Every field is optional.
#[derive(Debug, Clone, Default, uniffi::Record)]
pub struct ConnectOptions {
    /// A broker URL, as the core reads it.
    #[uniffi(default)]
    pub url: Option<String>,
    /// Broker host (default 127.0.0.1).
    #[uniffi(default)]
    pub host: Option<String>,
    /// Broker port (default 1883, or 8883 with TLS).
    #[uniffi(default)]
    pub port: Option<u16>,
    /// MQTT client id (generated when absent).
    #[uniffi(default)]
    pub client_id: Option<String>,
    /// Default timeout of every request (default 10 s).
    #[uniffi(default)]
    pub timeout: Option<Duration>,
    /// How long connecting may take (default 10 s).
    #[uniffi(default)]
    pub connect_timeout: Option<Duration>,
    /// MQTT keep-alive (default 60 s).
    #[uniffi(default)]
    pub keep_alive: Option<Duration>,
    /// How long the broker keeps the session after a disconnection (default 1 h).
    #[uniffi(default)]
    pub session_expiry: Option<Duration>,
    /// MQTT user name.
    #[uniffi(default)]
    pub username: Option<String>,
    /// MQTT password.
    #[uniffi(default)]
    pub password: Option<String>,
    /// A file holding the password, read at every connection.
    #[uniffi(default)]
    pub password_file: Option<String>,
    /// A Kubernetes service account token file (`K8S-SAT` enhanced authentication).
    #[uniffi(default)]
    pub sat_file: Option<String>,
    /// TLS settings (turns TLS on).
    #[uniffi(default)]
    pub tls: Option<TlsConfig>,
    /// Delay before the first reconnection attempt (default 100 ms).
    #[uniffi(default)]
    pub reconnect_initial_delay: Option<Duration>,
    /// Longest delay between reconnection attempts (default 10 s); also how long a
    /// connection must last for the backoff to start again from the first delay.
    #[uniffi(default)]
    pub reconnect_max_delay: Option<Duration>,
    /// Notifications buffered per observation before it reports a lag (default 1024).
    #[uniffi(default)]
    pub observation_buffer: Option<u32>,
    /// Largest MQTT packet accepted, in bytes (default 16 MiB).
    #[uniffi(default)]
    pub max_packet_size: Option<u32>,
}

impl ConnectOptions {
    /// The core's options: the record's fields laid over its URL (or the defaults) by the
    /// core's one merge (`ConnectSettings::resolve`, which owns the rules: which value wins,
    /// the port when none is given, validation).
    pub(crate) fn to_core(&self) -> Result<mqstate::ConnectOptions, MqstateError> {
        let o = self.clone();
        let mut s = ConnectSettings::default();
        s.url = o.url;
        s.host = o.host;
        s.port = o.port;
        s.client_id = o.client_id;
        s.request_timeout = o.timeout;
        s.connect_timeout = o.connect_timeout;
        s.keep_alive = o.keep_alive;
        s.session_expiry = o.session_expiry;
        s.username = o.username;
        s.password = o.password;
        s.password_file = o.password_file.map(Into::into);
        s.sat_file = o.sat_file.map(Into::into);
        if let Some(t) = o.tls {
            s.tls = Some(true);
            s.ca_file = t.ca_file.map(Into::into);
            s.cert_file = t.cert_file.map(Into::into);
            s.key_file = t.key_file.map(Into::into);
            s.server_name = t.server_name;
        }
        s.reconnect_initial_delay = o.reconnect_initial_delay;
        s.reconnect_max_delay = o.reconnect_max_delay;
        s.observation_buffer = o
            .observation_buffer
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        s.max_packet_size = o.max_packet_size;
        Ok(s.resolve()?)
    }
}
