//! `ConnectOptions`: the foreign record read into the core's `ConnectOptions`.

use std::time::Duration;

use mqstate::{ReconnectPolicy, TlsOptions};

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
    /// The core's options; the core validates them when connecting.
    pub(crate) fn to_core(&self) -> Result<mqstate::ConnectOptions, MqstateError> {
        let o = self.clone();
        let mut c = match &o.url {
            Some(url) => mqstate::ConnectOptions::from_url(url)?,
            None => mqstate::ConnectOptions::default(),
        };
        if let Some(host) = o.host {
            c.host = host;
        }
        if let Some(t) = o.tls {
            let tls = c.tls.get_or_insert_with(TlsOptions::default);
            if let Some(v) = t.ca_file {
                tls.ca_file = Some(v.into());
            }
            if let Some(v) = t.cert_file {
                tls.client_cert_file = Some(v.into());
            }
            if let Some(v) = t.key_file {
                tls.client_key_file = Some(v.into());
            }
            if let Some(v) = t.server_name {
                tls.server_name = Some(v);
            }
            // Without a URL or a port, the core decides the port (8883 with TLS).
            if o.url.is_none() && o.port.is_none() {
                c.port = mqstate::ConnectOptions::default_port(true);
            }
        }
        if let Some(port) = o.port {
            c.port = port;
        }
        if let Some(id) = o.client_id {
            c.client_id = Some(id);
        }
        if let Some(t) = o.timeout {
            c.request_timeout = t;
        }
        if let Some(t) = o.connect_timeout {
            c.connect_timeout = t;
        }
        if let Some(t) = o.keep_alive {
            c.keep_alive = t;
        }
        if let Some(t) = o.session_expiry {
            c.session_expiry = t;
        }
        if let Some(u) = o.username {
            c.username = Some(u);
        }
        if let Some(p) = o.password {
            c.password = Some(p);
        }
        if let Some(p) = o.password_file {
            c.password_file = Some(p.into());
        }
        if let Some(p) = o.sat_file {
            c.sat_file = Some(p.into());
        }
        if o.reconnect_initial_delay.is_some() || o.reconnect_max_delay.is_some() {
            c.reconnect = ReconnectPolicy::new(
                o.reconnect_initial_delay
                    .unwrap_or(c.reconnect.initial_delay),
                o.reconnect_max_delay.unwrap_or(c.reconnect.max_delay),
            );
        }
        if let Some(n) = o.observation_buffer {
            c.observation_buffer = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(n) = o.max_packet_size {
            c.max_packet_size = n;
        }
        Ok(c)
    }
}
