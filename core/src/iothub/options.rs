//! How a device connects: the transport (MQTT or AMQP), hub host, device id, credentials (a
//! shared access key from which SAS tokens are made, a fixed SAS token, or an X.509 client
//! certificate), TLS, token lifetime, buffering and reconnection.

use std::fmt;
use std::time::Duration;

use crate::client::options::{ReconnectPolicy, TlsOptions};
use crate::protocol::errors::Error;

/// The API version sent in the MQTT username, as the official SDKs do.
pub const API_VERSION: &str = "2021-04-12";

/// The protocol a [`super::DeviceClient`] speaks to the hub (docs/iothub-device.md,
/// "Transports"). The connection string is the same for all three.
///
/// ```
/// use mqstate::iothub::{DeviceOptions, Transport};
/// let o = DeviceOptions::new("myhub.azure-devices.net", "dev1", "c2VjcmV0")
///     .with_transport(Transport::Amqp);
/// assert_eq!(o.port, 5671);
/// assert_eq!(Transport::default(), Transport::Mqtt);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Transport {
    /// MQTT 3.1.1 on port 8883 (the default): messages can only be completed, and are
    /// acknowledged in arrival order.
    #[default]
    Mqtt,
    /// AMQP 1.0 on port 5671: messages can be completed, rejected or abandoned, each on its
    /// own, in any order.
    Amqp,
    /// AMQP 1.0 over a WebSocket on port 443, for networks that let only HTTPS through:
    /// TLS, then the WebSocket handshake to `wss://{hostname}/$iothub/websocket` with the
    /// subprotocol `AMQPWSB10` (as the official SDKs' `AmqpWs`), then the same AMQP connection
    /// as [`Transport::Amqp`] inside the WebSocket's binary messages: complete, reject and
    /// abandon alike. It needs TLS (the hub serves WebSockets on its HTTPS port only: plain
    /// TCP is an [`Error::InvalidArgument`]), and a SAS token: X.509 is an
    /// [`Error::NotSupported`], since the hub does not take client certificates on its
    /// WebSocket endpoint. Part of the `amqp` cargo feature, like `Amqp`.
    ///
    /// ```
    /// use mqstate::iothub::{DeviceOptions, Transport};
    /// let o = DeviceOptions::from_connection_string(
    ///     "HostName=myhub.azure-devices.net;DeviceId=dev1;SharedAccessKey=c2VjcmV0",
    /// )?
    /// .with_transport(Transport::AmqpWs);
    /// assert_eq!((o.port, o.transport.as_str()), (443, "amqp-ws"));
    /// assert_eq!("amqp-ws".parse::<Transport>()?, Transport::AmqpWs);
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    AmqpWs,
}

impl Transport {
    /// The hub's TLS port for this transport (8883 for MQTT, 5671 for AMQP, 443 for AMQP over
    /// WebSockets).
    pub fn default_port(self) -> u16 {
        match self {
            Transport::Mqtt => 8883,
            Transport::Amqp => 5671,
            Transport::AmqpWs => 443,
        }
    }

    /// The transport's name as the docs and every binding spell it (`"mqtt"`, `"amqp"`,
    /// `"amqp-ws"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Mqtt => "mqtt",
            Transport::Amqp => "amqp",
            Transport::AmqpWs => "amqp-ws",
        }
    }

    /// Whether the transport is AMQP (over TCP or over WebSockets).
    pub(crate) fn is_amqp(self) -> bool {
        matches!(self, Transport::Amqp | Transport::AmqpWs)
    }
}

impl std::str::FromStr for Transport {
    type Err = Error;

    /// `"mqtt"`, `"amqp"` or `"amqp-ws"` ([`Transport::as_str`]), in any case.
    ///
    /// ```
    /// use mqstate::iothub::Transport;
    /// assert_eq!("AMQP".parse::<Transport>()?, Transport::Amqp);
    /// assert_eq!("amqp-ws".parse::<Transport>()?, Transport::AmqpWs);
    /// assert!("http".parse::<Transport>().is_err());
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().as_str() {
            "mqtt" => Ok(Transport::Mqtt),
            "amqp" => Ok(Transport::Amqp),
            "amqp-ws" => Ok(Transport::AmqpWs),
            _ => Err(Error::InvalidArgument(format!(
                "unknown transport {s:?} (expected \"mqtt\", \"amqp\" or \"amqp-ws\")"
            ))),
        }
    }
}

/// How the device proves who it is.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceAuth {
    /// A shared access key (base64): a fresh SAS token is made for every connection, valid for
    /// [`DeviceOptions::token_lifetime`], and the client reconnects before it expires.
    SharedAccessKey {
        /// The base64 key.
        key: String,
        /// `SharedAccessKeyName` for a hub-level policy (adds `skn=` to the token).
        policy: Option<String>,
    },
    /// A SAS token made elsewhere, used as is (it cannot be renewed: once it expires the hub
    /// drops the connection and reconnecting fails with [`Error::Authentication`]).
    SasToken(String),
    /// An X.509 client certificate (set in [`DeviceOptions::tls`]); no password is sent.
    X509,
}

impl fmt::Debug for DeviceAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceAuth::SharedAccessKey { policy, .. } => f
                .debug_struct("SharedAccessKey")
                .field("key", &"<redacted>")
                .field("policy", policy)
                .finish(),
            DeviceAuth::SasToken(_) => f.write_str("SasToken(<redacted>)"),
            DeviceAuth::X509 => f.write_str("X509"),
        }
    }
}

/// Options of a [`super::DeviceClient`]. Build them from a device connection string
/// ([`DeviceOptions::from_connection_string`]) or from fields ([`DeviceOptions::new`]), then
/// adjust with the `with_*` methods.
///
/// ```
/// use std::time::Duration;
/// use mqstate::iothub::DeviceOptions;
///
/// let o = DeviceOptions::from_connection_string(
///     "HostName=myhub.azure-devices.net;DeviceId=dev1;SharedAccessKey=c2VjcmV0",
/// )?
/// .with_token_lifetime(Duration::from_secs(600));
/// assert_eq!(o.port, 8883);
/// assert!(o.tls.is_some());
/// assert_eq!(o.username(), "myhub.azure-devices.net/dev1/?api-version=2021-04-12");
/// # Ok::<(), mqstate::Error>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DeviceOptions {
    /// The hub's host name, as in the connection string (`myhub.azure-devices.net`); it is
    /// part of the username and the token's resource URI.
    pub hostname: String,
    /// The device id (also the MQTT client id).
    pub device_id: String,
    /// The credentials.
    pub auth: DeviceAuth,
    /// MQTT (the default), AMQP or AMQP over WebSockets; set it with
    /// [`DeviceOptions::with_transport`], which also moves the port to the transport's default.
    pub transport: Transport,
    /// Where to connect, when it is not `hostname` (a local hub on `127.0.0.1`).
    pub connect_host: Option<String>,
    /// The TCP port (8883 for MQTT, 5671 for AMQP, 443 for AMQP over WebSockets, with TLS: the
    /// defaults).
    pub port: u16,
    /// TLS settings; `None` is plain TCP, only for a local hub.
    pub tls: Option<TlsOptions>,
    /// Lifetime of each generated SAS token (default 1 hour, at least 10 s).
    pub token_lifetime: Duration,
    /// MQTT keep-alive (default 60 s; IoT Hub accepts at most 1177 s); over AMQP, the idle
    /// timeout the client announces in its Open (the hub then sends heartbeats).
    pub keep_alive: Duration,
    /// How long a connection attempt may take.
    pub connect_timeout: Duration,
    /// How long `send_event` waits for the hub's PUBACK (MQTT) or disposition (AMQP).
    pub operation_timeout: Duration,
    /// Backoff between reconnection attempts.
    pub reconnect: ReconnectPolicy,
    /// How many received messages may wait for the application before the client stops
    /// reading from the socket (default 64). Over AMQP it is the receiver link's credit,
    /// renewed as messages are settled.
    pub receive_buffer: usize,
    /// Appended to the username (`&DeviceClientType=...`), as the SDKs do; optional.
    pub client_type: Option<String>,
}

impl DeviceOptions {
    /// Options for `device_id` on `hostname` with a shared access key, TLS on port 8883.
    ///
    /// ```
    /// use mqstate::iothub::DeviceOptions;
    /// let o = DeviceOptions::new("myhub.azure-devices.net", "dev1", "c2VjcmV0");
    /// assert_eq!(o.device_id, "dev1");
    /// ```
    pub fn new(
        hostname: impl Into<String>,
        device_id: impl Into<String>,
        shared_access_key: impl Into<String>,
    ) -> Self {
        Self::with_auth(
            hostname,
            device_id,
            DeviceAuth::SharedAccessKey {
                key: shared_access_key.into(),
                policy: None,
            },
        )
    }

    /// Options with any [`DeviceAuth`]; for X.509 set the certificate with
    /// [`DeviceOptions::with_x509`].
    pub fn with_auth(
        hostname: impl Into<String>,
        device_id: impl Into<String>,
        auth: DeviceAuth,
    ) -> Self {
        DeviceOptions {
            hostname: hostname.into(),
            device_id: device_id.into(),
            auth,
            transport: Transport::Mqtt,
            connect_host: None,
            port: 8883,
            tls: Some(TlsOptions::default()),
            token_lifetime: Duration::from_secs(3600),
            keep_alive: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(30),
            operation_timeout: Duration::from_secs(30),
            reconnect: ReconnectPolicy::default(),
            receive_buffer: 64,
            client_type: None,
        }
    }

    /// Options authenticated by an X.509 client certificate (PEM files).
    ///
    /// ```
    /// use mqstate::iothub::{DeviceAuth, DeviceOptions};
    /// let o = DeviceOptions::with_x509("myhub.azure-devices.net", "dev1", "dev1.pem", "dev1.key");
    /// assert_eq!(o.auth, DeviceAuth::X509);
    /// assert!(o.tls.unwrap().client_cert_file.is_some());
    /// ```
    pub fn with_x509(
        hostname: impl Into<String>,
        device_id: impl Into<String>,
        cert_file: impl Into<std::path::PathBuf>,
        key_file: impl Into<std::path::PathBuf>,
    ) -> Self {
        let mut o = Self::with_auth(hostname, device_id, DeviceAuth::X509);
        o.tls = Some(TlsOptions::default().with_client_cert(cert_file, key_file));
        o
    }

    /// Parses a device connection string: `HostName=...;DeviceId=...;SharedAccessKey=...`
    /// (or `SharedAccessSignature=...`, or `x509=true` with the certificate set afterwards),
    /// optionally `SharedAccessKeyName=...` and `GatewayHostName=...` (connect there).
    /// Names are case-insensitive; unknown names are refused so that a typo is not ignored.
    ///
    /// ```
    /// use mqstate::iothub::DeviceOptions;
    /// let e = DeviceOptions::from_connection_string("HostName=h;DeviceId=d").unwrap_err();
    /// assert!(e.to_string().contains("SharedAccessKey"));
    /// ```
    pub fn from_connection_string(s: &str) -> Result<Self, Error> {
        let mut host = None;
        let mut device = None;
        let mut key = None;
        let mut key_name = None;
        let mut token = None;
        let mut x509 = false;
        let mut gateway = None;
        for (index, part) in s.split(';').map(str::trim).enumerate() {
            if part.is_empty() {
                continue;
            }
            // The part is not quoted in the error: it may be a key missing its '='.
            let (name, value) = part.split_once('=').ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "connection string: part {} is not Name=Value",
                    index + 1
                ))
            })?;
            let value = value.to_owned();
            match name.to_ascii_lowercase().as_str() {
                "hostname" => host = Some(value),
                "deviceid" => device = Some(value),
                "sharedaccesskey" => key = Some(value),
                "sharedaccesskeyname" => key_name = Some(value),
                "sharedaccesssignature" => token = Some(value),
                "x509" => x509 = value.eq_ignore_ascii_case("true"),
                "gatewayhostname" => gateway = Some(value),
                "moduleid" => {
                    return Err(Error::InvalidArgument(
                        "connection string: module identities (ModuleId) are not supported".into(),
                    ));
                }
                other => {
                    return Err(Error::InvalidArgument(format!(
                        "connection string: unknown field {other:?} (expected HostName, DeviceId, SharedAccessKey, SharedAccessKeyName, SharedAccessSignature, x509, GatewayHostName)"
                    )));
                }
            }
        }
        let host = host.filter(|h| !h.is_empty()).ok_or_else(|| {
            Error::InvalidArgument("connection string: HostName is missing".into())
        })?;
        let device = device.filter(|d| !d.is_empty()).ok_or_else(|| {
            Error::InvalidArgument("connection string: DeviceId is missing".into())
        })?;
        let auth = match (key, token, x509) {
            (Some(key), None, false) => DeviceAuth::SharedAccessKey {
                key,
                policy: key_name,
            },
            (None, Some(token), false) => DeviceAuth::SasToken(token),
            (None, None, true) => DeviceAuth::X509,
            (None, None, false) => {
                return Err(Error::InvalidArgument(
                    "connection string: no credentials (SharedAccessKey, SharedAccessSignature or x509=true)".into(),
                ));
            }
            _ => {
                return Err(Error::InvalidArgument(
                    "connection string: more than one of SharedAccessKey, SharedAccessSignature and x509=true".into(),
                ));
            }
        };
        let mut o = Self::with_auth(host, device, auth);
        o.connect_host = gateway;
        Ok(o)
    }

    /// Connects to `host:port` over plain TCP instead (a local hub), keeping `hostname` for
    /// the username and tokens.
    ///
    /// ```
    /// use mqstate::iothub::DeviceOptions;
    /// let o = DeviceOptions::new("localhost", "dev1", "c2VjcmV0").with_plain_tcp("127.0.0.1", 1884);
    /// assert!(o.tls.is_none());
    /// ```
    #[must_use]
    pub fn with_plain_tcp(mut self, host: impl Into<String>, port: u16) -> Self {
        self.connect_host = Some(host.into());
        self.port = port;
        self.tls = None;
        self
    }

    /// Connects to `host:port` with TLS (builder style).
    #[must_use]
    pub fn with_endpoint(mut self, host: impl Into<String>, port: u16, tls: TlsOptions) -> Self {
        self.connect_host = Some(host.into());
        self.port = port;
        self.tls = Some(tls);
        self
    }

    /// Chooses the transport (builder style). A port still at the current transport's default
    /// moves to the new one's (8883, 5671, 443); a port set otherwise is kept, so set the
    /// endpoint after the transport.
    ///
    /// ```
    /// use mqstate::iothub::{DeviceOptions, Transport};
    /// let o = DeviceOptions::from_connection_string(
    ///     "HostName=myhub.azure-devices.net;DeviceId=dev1;SharedAccessKey=c2VjcmV0",
    /// )?
    /// .with_transport(Transport::Amqp);
    /// assert_eq!((o.transport, o.port), (Transport::Amqp, 5671));
    /// # Ok::<(), mqstate::Error>(())
    /// ```
    #[must_use]
    pub fn with_transport(mut self, transport: Transport) -> Self {
        if self.port == self.transport.default_port() {
            self.port = transport.default_port();
        }
        self.transport = transport;
        self
    }

    /// Sets the lifetime of generated SAS tokens (builder style).
    #[must_use]
    pub fn with_token_lifetime(mut self, lifetime: Duration) -> Self {
        self.token_lifetime = lifetime;
        self
    }

    /// Sets the reconnection backoff (builder style).
    #[must_use]
    pub fn with_reconnect(mut self, policy: ReconnectPolicy) -> Self {
        self.reconnect = policy;
        self
    }

    /// Sets how many received messages wait for the application (builder style).
    #[must_use]
    pub fn with_receive_buffer(mut self, messages: usize) -> Self {
        self.receive_buffer = messages;
        self
    }

    /// The MQTT username IoT Hub expects: `{hostname}/{deviceId}/?api-version=...`.
    pub fn username(&self) -> String {
        let mut u = format!(
            "{}/{}/?api-version={API_VERSION}",
            self.hostname, self.device_id
        );
        if let Some(t) = &self.client_type {
            u.push_str("&DeviceClientType=");
            u.push_str(&super::properties::encode_component(t));
        }
        u
    }

    /// The token's resource URI: `{hostname}/devices/{deviceId}`.
    pub fn resource_uri(&self) -> String {
        format!("{}/devices/{}", self.hostname, self.device_id)
    }

    /// The password for a connection made now, and when it expires (`None`: never, or not
    /// known). A fresh token for a shared access key.
    pub(crate) fn password(&self) -> Result<(Option<String>, Option<u64>), Error> {
        match &self.auth {
            DeviceAuth::SharedAccessKey { key, policy } => {
                let expiry = super::sas::expiry_after(self.token_lifetime);
                let t = super::sas::token(&self.resource_uri(), key, expiry, policy.as_deref())?;
                Ok((Some(t), Some(expiry)))
            }
            DeviceAuth::SasToken(t) => {
                let expiry = t
                    .split('&')
                    .find_map(|p| p.strip_prefix("se="))
                    .and_then(|s| s.parse().ok());
                Ok((Some(t.clone()), expiry))
            }
            DeviceAuth::X509 => Ok((None, None)),
        }
    }

    /// Checks everything that can be checked before connecting.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if self.hostname.is_empty() {
            return bad("the hub host name is empty".into());
        }
        if self.device_id.is_empty() || self.device_id.len() > 128 {
            return bad(format!(
                "device id {:?} must be 1 to 128 characters",
                self.device_id
            ));
        }
        if let Some(c) = self
            .device_id
            .chars()
            .find(|&c| !(c.is_ascii_alphanumeric() || "-.%_*?!(),:=@$'".contains(c)))
        {
            return bad(format!(
                "device id {:?} contains {c:?}; IoT Hub allows letters, digits and -.%_*?!(),:=@$'",
                self.device_id
            ));
        }
        if self.token_lifetime < Duration::from_secs(10) {
            return bad(format!(
                "token lifetime {:?} is shorter than 10 s",
                self.token_lifetime
            ));
        }
        if self.keep_alive < Duration::from_secs(5) || self.keep_alive > Duration::from_secs(1177) {
            return bad(format!(
                "keep-alive {:?} is outside 5 s ..= 1177 s (IoT Hub's maximum)",
                self.keep_alive
            ));
        }
        if self.receive_buffer == 0 {
            return bad("the receive buffer must hold at least one message".into());
        }
        if self.port == 0 {
            return bad("port 0".into());
        }
        if self.transport == Transport::AmqpWs {
            self.validate_websocket()?;
        }
        match &self.auth {
            DeviceAuth::SharedAccessKey { key, .. } => {
                super::sas::decode_key(key)?;
            }
            DeviceAuth::SasToken(t) => {
                if !t.starts_with("SharedAccessSignature ") {
                    return bad("a SAS token starts with \"SharedAccessSignature \"".into());
                }
            }
            DeviceAuth::X509 => {
                if self
                    .tls
                    .as_ref()
                    .is_none_or(|t| t.client_cert_file.is_none())
                {
                    return bad("X.509 authentication needs TLS with a client certificate".into());
                }
            }
        }
        Ok(())
    }

    /// What AMQP over WebSockets needs: TLS (the hub serves its WebSocket endpoint on its
    /// HTTPS port only) and a SAS token (the hub takes no client certificate there:
    /// docs/security.md, "The WebSocket path is not a web surface").
    fn validate_websocket(&self) -> Result<(), Error> {
        if self.auth == DeviceAuth::X509 {
            return Err(Error::NotSupported(
                "X.509 authentication over WebSockets is not supported: the hub takes no client certificate on its WebSocket endpoint (use MQTT or AMQP over TCP, or a shared access key)".into(),
            ));
        }
        if self.tls.is_none() {
            return Err(Error::InvalidArgument(
                "AMQP over WebSockets needs TLS: the hub serves it on its HTTPS port only (wss://); use with_endpoint, not with_plain_tcp".into(),
            ));
        }
        Ok(())
    }

    pub(crate) fn connect_host(&self) -> &str {
        self.connect_host.as_deref().unwrap_or(&self.hostname)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn documented_connection_string() {
        // The form shown by `az iot hub device-identity connection-string show`.
        let o = DeviceOptions::from_connection_string(
            "HostName=contoso.azure-devices.net;DeviceId=myDevice;SharedAccessKey=c2VjcmV0",
        )
        .unwrap();
        assert_eq!(o.hostname, "contoso.azure-devices.net");
        assert_eq!(o.device_id, "myDevice");
        assert_eq!(
            o.auth,
            DeviceAuth::SharedAccessKey {
                key: "c2VjcmV0".into(),
                policy: None
            }
        );
        assert_eq!(
            o.username(),
            "contoso.azure-devices.net/myDevice/?api-version=2021-04-12"
        );
        assert_eq!(
            o.resource_uri(),
            "contoso.azure-devices.net/devices/myDevice"
        );
        o.validate().unwrap();
        let (password, expiry) = o.password().unwrap();
        let password = password.unwrap();
        assert!(password.starts_with(
            "SharedAccessSignature sr=contoso.azure-devices.net%2Fdevices%2FmyDevice&sig="
        ));
        assert!(password.ends_with(&format!("&se={}", expiry.unwrap())));
    }

    #[test]
    fn key_ending_in_equals_and_other_forms() {
        let o = DeviceOptions::from_connection_string(
            "hostname=h;deviceid=d;SharedAccessKey=AAAA/+==;GatewayHostName=edge",
        )
        .unwrap();
        assert_eq!(
            o.auth,
            DeviceAuth::SharedAccessKey {
                key: "AAAA/+==".into(),
                policy: None
            }
        );
        assert_eq!(o.connect_host(), "edge");
        let o = DeviceOptions::from_connection_string(
            "HostName=h;DeviceId=d;SharedAccessSignature=SharedAccessSignature sr=x&sig=y&se=42",
        )
        .unwrap();
        assert_eq!(o.password().unwrap().1, Some(42));
        let o = DeviceOptions::from_connection_string("HostName=h;DeviceId=d;x509=true").unwrap();
        assert_eq!(o.auth, DeviceAuth::X509);
        assert!(o.validate().is_err(), "x509 without a certificate");
    }

    #[test]
    fn bad_connection_strings_say_why_without_the_key() {
        for (s, why) in [
            ("DeviceId=d;SharedAccessKey=c2VjcmV0", "HostName is missing"),
            ("HostName=h;SharedAccessKey=c2VjcmV0", "DeviceId is missing"),
            ("HostName=h;DeviceId=d;Colour=blue", "unknown field"),
            (
                "HostName=h;DeviceId=d;ModuleId=m;SharedAccessKey=a",
                "ModuleId",
            ),
            (
                "HostName=h;DeviceId=d;SharedAccessKey=a;x509=true",
                "more than one",
            ),
            (
                "HostName=h;DeviceId=d;SharedAccessKeysecret",
                "not Name=Value",
            ),
        ] {
            let e = DeviceOptions::from_connection_string(s).unwrap_err();
            assert!(e.to_string().contains(why), "{s}: {e}");
            assert!(!e.to_string().contains("secret"), "{e}");
        }
        let o = DeviceOptions::new("h", "d", "***");
        assert!(o.validate().unwrap_err().to_string().contains("base64"));
        let o = DeviceOptions::new("h", "a/b", "c2VjcmV0");
        assert!(o.validate().unwrap_err().to_string().contains("'/'"));
        let o =
            DeviceOptions::new("h", "d", "c2VjcmV0").with_token_lifetime(Duration::from_secs(1));
        assert!(o.validate().is_err());
        assert!(!format!("{o:?}").contains("c2VjcmV0"));
    }
}
