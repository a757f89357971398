//! [`IotHubConfig`]: every limit and default of the hub, with IoT Hub's own values as
//! defaults. Tests shorten the timeouts (a 2 s lock, a 1 s feedback batch); the ranges checked
//! by [`IotHubConfig::validate`] are the hub's where they protect something, and looser where a
//! test needs a shorter time than the real hub allows (noted on each field).

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use super::domain::error::IotHubError;
use super::domain::registry::DeviceSpec;

/// Port of the device endpoint (MQTT 3.1.1) used by `mqstate serve`: IoT Hub's MQTT port.
pub const DEFAULT_DEVICE_PORT: u16 = 8883;
/// Port of the HTTP+JSON admin API used by `mqstate serve`.
pub const DEFAULT_ADMIN_PORT: u16 = 8880;
/// Port of IoT Hub's REST API over HTTPS used by `mqstate serve`. IoT Hub and its SDKs use
/// 443, which only root (or a process with `CAP_NET_BIND_SERVICE`) may bind, so the default is
/// an unprivileged port; `--iothub-https-port 443` and docs/iothub.md ("Port 443") say how to
/// serve the SDKs' port.
pub const DEFAULT_HTTPS_PORT: u16 = 8443;
/// Port of the AMQP 1.0 service endpoint (TLS) used by `mqstate serve`: IoT Hub's AMQPS port.
pub const DEFAULT_AMQP_PORT: u16 = 5671;
/// Host name devices put in their user name and SAS token resource by default.
pub const DEFAULT_HOSTNAME: &str = "localhost";
/// The longest TTL IoT Hub accepts (2 days), for messages and for feedback.
pub const MAX_TTL: Duration = Duration::from_secs(2 * 24 * 3600);

/// How the device endpoint secures connections.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DeviceTls {
    /// Plain TCP (local use; the real hub only speaks TLS).
    #[default]
    None,
    /// TLS with a self-signed certificate generated at start for the hub's host name,
    /// `localhost` and `127.0.0.1` (see `IotHub::ca_certificate_pem`).
    SelfSigned,
    /// TLS with this PEM certificate chain and PEM private key.
    Files {
        /// Certificate chain (PEM).
        cert: PathBuf,
        /// Private key (PEM: PKCS#8, PKCS#1 or SEC1).
        key: PathBuf,
    },
}

/// Settings of the local IoT Hub. `IotHubConfig::default()` listens on 127.0.0.1 with free
/// ports (0) and uses IoT Hub's limits; `mqstate serve` uses ports 8883 and 8880.
///
/// ```
/// use std::time::Duration;
/// use mqstate_server::iothub::IotHubConfig;
///
/// let mut config = IotHubConfig::default();
/// assert_eq!(config.max_queue_depth, 50);
/// assert_eq!(config.lock_timeout, Duration::from_secs(60));
/// config.lock_timeout = Duration::from_secs(2); // a test does not wait a minute
/// config.validate().unwrap();
/// config.max_delivery_count = 101;
/// assert!(config.validate().is_err());
/// ```
#[derive(Debug, Clone)]
pub struct IotHubConfig {
    /// Host name of the hub as devices see it: the user name must be
    /// `{hostname}/{deviceId}/?api-version=...` and SAS tokens are for
    /// `{hostname}/devices/{deviceId}` (default `localhost`).
    pub hostname: String,
    /// Address both listeners bind (default 127.0.0.1).
    pub bind: IpAddr,
    /// Port of the MQTT 3.1.1 device endpoint (0: a free port).
    pub device_port: u16,
    /// Port of the HTTP+JSON admin API (0: a free port); `None` runs no HTTP endpoint (the
    /// in-process API still works).
    pub admin_port: Option<u16>,
    /// Port of IoT Hub's REST registry API over HTTPS (0: a free port); `None` runs none.
    pub https_port: Option<u16>,
    /// Port of the AMQP 1.0 service endpoint over TLS (0: a free port); `None` runs none.
    pub amqp_port: Option<u16>,
    /// Plain TCP or TLS on the device endpoint. The HTTPS and AMQP endpoints always speak
    /// TLS: with the files given here, else with a certificate generated at start (the same
    /// one as the device endpoint's with [`DeviceTls::SelfSigned`]).
    pub tls: DeviceTls,
    /// PEM file of the CA certificates that `certificateAuthority` devices' certificates
    /// must chain to (`--iothub-ca-file`); `None`: such devices cannot connect.
    pub ca_file: Option<PathBuf>,
    /// The shared access policies, from this JSON file (see [`crate::iothub::policies`]);
    /// `None`: kept in the data dir, or generated at start without one.
    pub policies_file: Option<PathBuf>,
    /// Devices registered at start.
    pub devices: Vec<DeviceSpec>,
    /// Files of devices (`ID[:KEY]` per line) registered at start.
    pub device_files: Vec<PathBuf>,
    /// Messages a device queue holds (IoT Hub: 50).
    pub max_queue_depth: usize,
    /// Largest cloud-to-device body in bytes (IoT Hub: 64 KiB).
    pub max_message_size: usize,
    /// Largest device-to-cloud body in bytes (IoT Hub: 256 KiB).
    pub max_telemetry_size: usize,
    /// How long a delivered message stays locked (Invisible) waiting for its PUBACK before it
    /// is enqueued again (IoT Hub: 1 minute, fixed). Any positive duration is accepted.
    pub lock_timeout: Duration,
    /// TTL of messages sent without an expiry (IoT Hub: 1 hour; 1 minute to 2 days there,
    /// any positive duration up to 2 days here).
    pub default_ttl: Duration,
    /// Deliveries after which an unacknowledged message is dead-lettered (1-100, IoT Hub: 10).
    pub max_delivery_count: u32,
    /// Records that make a feedback batch at once (IoT Hub: 64).
    pub feedback_batch_size: usize,
    /// Time after the last batch when pending feedback records are batched anyway
    /// (IoT Hub: 15 s).
    pub feedback_batch_interval: Duration,
    /// How long a feedback batch waits to be received (IoT Hub: 1 hour, up to 2 days).
    pub feedback_ttl: Duration,
    /// Receptions of a feedback batch, without completing it, before it is dropped (1-100,
    /// IoT Hub: 10).
    pub feedback_max_delivery_count: u32,
    /// How long a received feedback batch stays locked waiting to be completed (IoT Hub:
    /// 60 s, 5-300 s; up to 300 s here).
    pub feedback_lock_duration: Duration,
    /// Device-to-cloud messages kept per device for reading (oldest dropped first).
    pub telemetry_capacity: usize,
    /// Largest keep-alive the hub honours; devices asking for more get this (IoT Hub: 1177 s).
    pub max_keep_alive: Duration,
    /// How long a new connection has to send its CONNECT.
    pub connect_timeout: Duration,
    /// What one AMQP connection may make the hub hold (frames, sessions, links, replies, time
    /// to authenticate).
    pub amqp_limits: AmqpLimits,
    /// Keep the hub's state (registry, queues, feedback) in `DIR/iothub.redb` so that it
    /// survives a restart or a crash (`None`: in memory only). `mqstate serve --data-dir`
    /// sets it to its data dir ([`crate::ServerConfig::data_dir`]).
    pub data_dir: Option<PathBuf>,
}

impl Default for IotHubConfig {
    fn default() -> Self {
        IotHubConfig {
            hostname: DEFAULT_HOSTNAME.to_owned(),
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            device_port: 0,
            admin_port: Some(0),
            https_port: Some(0),
            amqp_port: Some(0),
            tls: DeviceTls::None,
            ca_file: None,
            policies_file: None,
            devices: Vec::new(),
            device_files: Vec::new(),
            max_queue_depth: 50,
            max_message_size: 64 * 1024,
            max_telemetry_size: 256 * 1024,
            lock_timeout: Duration::from_secs(60),
            default_ttl: Duration::from_secs(3600),
            max_delivery_count: 10,
            feedback_batch_size: 64,
            feedback_batch_interval: Duration::from_secs(15),
            feedback_ttl: Duration::from_secs(3600),
            feedback_max_delivery_count: 10,
            feedback_lock_duration: Duration::from_secs(60),
            telemetry_capacity: 1000,
            max_keep_alive: Duration::from_secs(1177),
            connect_timeout: Duration::from_secs(10),
            amqp_limits: AmqpLimits::default(),
            data_dir: None,
        }
    }
}

impl IotHubConfig {
    /// The settings `mqstate serve` starts with: devices on port 8883, the admin API on 8880,
    /// the REST API on 8443 (HTTPS) and AMQP on 5671.
    pub fn serve_defaults() -> Self {
        IotHubConfig {
            device_port: DEFAULT_DEVICE_PORT,
            admin_port: Some(DEFAULT_ADMIN_PORT),
            https_port: Some(DEFAULT_HTTPS_PORT),
            amqp_port: Some(DEFAULT_AMQP_PORT),
            ..IotHubConfig::default()
        }
    }

    /// Checks every limit; the error names the field and its allowed range.
    pub fn validate(&self) -> Result<(), IotHubError> {
        let bad = |what: String| Err(IotHubError::Config(what));
        if self.hostname.is_empty() || self.hostname.contains(['/', ' ', '?', '#']) {
            return bad(format!("hostname {:?} is not a host name", self.hostname));
        }
        if self.max_queue_depth == 0 {
            return bad("max_queue_depth must be at least 1".into());
        }
        if self.max_message_size == 0 || self.max_telemetry_size == 0 {
            return bad("message size limits must be at least 1 byte".into());
        }
        for (name, value) in [
            ("lock_timeout", self.lock_timeout),
            ("feedback_batch_interval", self.feedback_batch_interval),
            ("connect_timeout", self.connect_timeout),
            ("max_keep_alive", self.max_keep_alive),
        ] {
            if value.is_zero() {
                return bad(format!("{name} must be positive"));
            }
        }
        for (name, value) in [
            ("default_ttl", self.default_ttl),
            ("feedback_ttl", self.feedback_ttl),
        ] {
            if value.is_zero() || value > MAX_TTL {
                return bad(format!(
                    "{name} must be positive and at most 2 days (got {value:?})"
                ));
            }
        }
        if self.feedback_lock_duration.is_zero()
            || self.feedback_lock_duration > Duration::from_secs(300)
        {
            return bad(format!(
                "feedback_lock_duration must be positive and at most 300 s (got {:?})",
                self.feedback_lock_duration
            ));
        }
        for (name, value) in [
            ("max_delivery_count", self.max_delivery_count),
            (
                "feedback_max_delivery_count",
                self.feedback_max_delivery_count,
            ),
        ] {
            if !(1..=100).contains(&value) {
                return bad(format!("{name} must be from 1 to 100 (got {value})"));
            }
        }
        if self.feedback_batch_size == 0 {
            return bad("feedback_batch_size must be at least 1".into());
        }
        if self.telemetry_capacity == 0 {
            return bad("telemetry_capacity must be at least 1".into());
        }
        self.amqp_limits.validate()
    }
}

/// What one connection to the AMQP endpoint may make the hub hold, before and after it
/// authenticates (docs/security.md, "Limits per connection on the hub"). A peer past a limit
/// gets the error AMQP gives for it (`amqp:resource-limit-exceeded`,
/// `amqp:link:message-size-exceeded`, `amqp:unauthorized-access`) on the link, session or
/// connection it went too far with, and the hub logs it once.
///
/// ```
/// use mqstate_server::iothub::AmqpLimits;
///
/// let limits = AmqpLimits::default();
/// assert_eq!((limits.max_sessions, limits.max_links_per_session), (32, 32));
/// assert!(AmqpLimits { max_sessions: 0, ..limits }.validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpLimits {
    /// The largest frame the hub accepts (its Open's max-frame-size; 64 KiB). Larger messages
    /// come in several frames, each counted against the link's largest message.
    pub max_frame_size: u32,
    /// Sessions one connection may have at once (32; a device SDK or a service client uses
    /// one, a multiplexing C SDK one per device): the Open's channel-max, past which a Begin
    /// closes the connection. `mqstate serve --iothub-amqp-max-sessions`.
    pub max_sessions: usize,
    /// Links one session may have attached at once (32; a device SDK uses 8, a service client
    /// 4). `mqstate serve --iothub-amqp-max-links`.
    pub max_links_per_session: usize,
    /// Put-token replies kept for a `$cbs` receiver link that is not attached (16); one more
    /// closes the request link. A client waits for each reply before its next put-token.
    pub max_pending_cbs_replies: usize,
    /// How long a new connection has, from its first byte, for TLS, SASL and its first
    /// accepted put-token (30 s); after that without one, the connection is closed.
    pub auth_timeout: Duration,
}

impl Default for AmqpLimits {
    fn default() -> Self {
        AmqpLimits {
            max_frame_size: 64 * 1024,
            max_sessions: 32,
            max_links_per_session: 32,
            max_pending_cbs_replies: 16,
            auth_timeout: Duration::from_secs(30),
        }
    }
}

impl AmqpLimits {
    /// Checks that every limit lets a client work: the error names the one that does not.
    pub fn validate(&self) -> Result<(), IotHubError> {
        let bad = |why: String| Err(IotHubError::invalid(format!("invalid AMQP limit: {why}")));
        // AMQP's own floor for max-frame-size (2.7.1: 512 bytes).
        if self.max_frame_size < 512 {
            return bad(format!(
                "max_frame_size must be at least 512 bytes (got {})",
                self.max_frame_size
            ));
        }
        for (name, value) in [
            ("max_sessions", self.max_sessions),
            ("max_links_per_session", self.max_links_per_session),
            ("max_pending_cbs_replies", self.max_pending_cbs_replies),
        ] {
            if value == 0 {
                return bad(format!("{name} must be at least 1"));
            }
        }
        if self.max_sessions > usize::from(u16::MAX) {
            return bad(format!(
                "max_sessions must be at most 65535, AMQP's channel limit (got {})",
                self.max_sessions
            ));
        }
        if self.auth_timeout.is_zero() {
            return bad("auth_timeout must be positive".into());
        }
        Ok(())
    }
}
