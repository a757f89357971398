//! `mqstate iothub ...` (the admin side of a running local IoT Hub, over its HTTP API) and the
//! `--iothub-*` flags of `mqstate serve`.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use mqstate_server::iothub::admin::{AddDeviceRequest, AdminClient, SendRequest};

use crate::iothub_message::MessageArgs;
use mqstate_server::iothub::{
    Ack, AmqpLimits, DEFAULT_ADMIN_PORT, DEFAULT_AMQP_PORT, DEFAULT_DEVICE_PORT, DEFAULT_HOSTNAME,
    DEFAULT_HTTPS_PORT, DeviceSpec, DeviceTls, IotHubConfig,
};

/// Parses `2s`, `500ms`, `1h`, `1h 30m`...
fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{text:?}: {e} (examples: 2s, 500ms, 1h)"))
}

/// The local IoT Hub flags of `mqstate serve` (IoT Hub's own values as defaults).
#[derive(Debug, Args)]
#[command(next_help_heading = "Local IoT Hub")]
pub struct ServeHubArgs {
    /// Do not run the local IoT Hub (only the state store).
    #[arg(long)]
    pub no_iothub: bool,
    /// Host name devices use in their user name and SAS token.
    #[arg(long, value_name = "HOST", default_value = DEFAULT_HOSTNAME)]
    pub iothub_hostname: String,
    /// Address of every endpoint of the hub (devices, admin API, HTTPS, AMQP).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    pub iothub_bind: IpAddr,
    /// Port of the MQTT 3.1.1 device endpoint (0: any free port).
    #[arg(long, value_name = "PORT", default_value_t = DEFAULT_DEVICE_PORT)]
    pub iothub_port: u16,
    /// Port of the HTTP+JSON admin API (0: any free port).
    #[arg(long, value_name = "PORT", default_value_t = DEFAULT_ADMIN_PORT)]
    pub iothub_admin_port: u16,
    /// Port of IoT Hub's REST registry API over HTTPS, for the official service SDKs (they
    /// use 443: see docs/iothub.md, "Port 443"; 0: any free port).
    #[arg(long, value_name = "PORT", default_value_t = DEFAULT_HTTPS_PORT)]
    pub iothub_https_port: u16,
    /// Port of the AMQP 1.0 service endpoint over TLS, for the official service SDKs (0: any
    /// free port).
    #[arg(long, value_name = "PORT", default_value_t = DEFAULT_AMQP_PORT)]
    pub iothub_amqp_port: u16,
    /// The hub's shared access policies (JSON, see docs/iothub.md); default: kept in
    /// --data-dir, or generated at start without one.
    #[arg(long, value_name = "FILE")]
    pub iothub_policies_file: Option<PathBuf>,
    /// CA certificates (PEM) that the certificates of `certificateAuthority` X.509 devices
    /// must chain to (docs/iothub.md, "X.509 devices"); without it such devices cannot
    /// connect.
    #[arg(long, value_name = "FILE")]
    pub iothub_ca_file: Option<PathBuf>,
    /// TLS on the device endpoint with a self-signed certificate generated at start.
    #[arg(long, conflicts_with_all = ["iothub_tls_cert", "iothub_tls_key"])]
    pub iothub_tls: bool,
    /// TLS with this certificate chain, on the device endpoint too (PEM; needs
    /// --iothub-tls-key). Without it, HTTPS and AMQP use a certificate generated at start.
    #[arg(long, value_name = "FILE", requires = "iothub_tls_key")]
    pub iothub_tls_cert: Option<PathBuf>,
    /// The private key of --iothub-tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "iothub_tls_cert")]
    pub iothub_tls_key: Option<PathBuf>,
    /// Write the generated certificate here (what devices and the service SDKs must trust).
    #[arg(long, value_name = "FILE", conflicts_with = "iothub_tls_cert")]
    pub iothub_ca_out: Option<PathBuf>,
    /// Register a device at start: ID or ID:KEY (base64); repeatable.
    #[arg(long = "iothub-device", value_name = "ID[:KEY]", value_parser = parse_device_spec)]
    pub iothub_devices: Vec<DeviceSpec>,
    /// Register the devices of a file (one `ID[:KEY]` per line, `#` comments); repeatable.
    #[arg(long = "iothub-devices-file", value_name = "FILE")]
    pub iothub_device_files: Vec<PathBuf>,
    /// Messages a device queue holds.
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub iothub_max_queue_depth: usize,
    /// Largest cloud-to-device body, bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 65536)]
    pub iothub_max_message_size: usize,
    /// Lock (visibility) timeout of a delivered message.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration)]
    pub iothub_lock_timeout: Duration,
    /// TTL of messages sent without one (up to 2 days).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = duration)]
    pub iothub_default_ttl: Duration,
    /// Deliveries before an unacknowledged message is dead-lettered (1-100).
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub iothub_max_delivery_count: u32,
    /// Feedback records that make a batch at once.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub iothub_feedback_batch_size: usize,
    /// Time after the last feedback batch when pending records are batched anyway.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = duration)]
    pub iothub_feedback_interval: Duration,
    /// How long a feedback batch waits to be received (up to 2 days).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = duration)]
    pub iothub_feedback_ttl: Duration,
    /// Receptions of a feedback batch, not completed, before it is dropped (1-100).
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub iothub_feedback_max_delivery_count: u32,
    /// Lock of a received feedback batch (up to 300 s).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration)]
    pub iothub_feedback_lock: Duration,
    /// Device-to-cloud messages kept per device.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub iothub_telemetry_capacity: usize,
    /// Sessions one AMQP connection may have at once (a multiplexing client uses one per
    /// device; docs/security.md, "Limits per connection on the hub").
    #[arg(long, value_name = "N", default_value_t = AmqpLimits::default().max_sessions)]
    pub iothub_amqp_max_sessions: usize,
    /// Links one AMQP session may have attached at once.
    #[arg(long, value_name = "N", default_value_t = AmqpLimits::default().max_links_per_session)]
    pub iothub_amqp_max_links: usize,
}

fn parse_device_spec(text: &str) -> Result<DeviceSpec, String> {
    DeviceSpec::parse(text).map_err(|e| e.to_string())
}

impl ServeHubArgs {
    /// The hub configuration, or `None` with --no-iothub.
    pub fn to_config(&self) -> Option<IotHubConfig> {
        if self.no_iothub {
            return None;
        }
        let tls = match (&self.iothub_tls_cert, &self.iothub_tls_key) {
            (Some(cert), Some(key)) => DeviceTls::Files {
                cert: cert.clone(),
                key: key.clone(),
            },
            _ if self.iothub_tls => DeviceTls::SelfSigned,
            _ => DeviceTls::None,
        };
        Some(IotHubConfig {
            hostname: self.iothub_hostname.clone(),
            bind: self.iothub_bind,
            device_port: self.iothub_port,
            admin_port: Some(self.iothub_admin_port),
            https_port: Some(self.iothub_https_port),
            amqp_port: Some(self.iothub_amqp_port),
            policies_file: self.iothub_policies_file.clone(),
            ca_file: self.iothub_ca_file.clone(),
            tls,
            devices: self.iothub_devices.clone(),
            device_files: self.iothub_device_files.clone(),
            max_queue_depth: self.iothub_max_queue_depth,
            max_message_size: self.iothub_max_message_size,
            lock_timeout: self.iothub_lock_timeout,
            default_ttl: self.iothub_default_ttl,
            max_delivery_count: self.iothub_max_delivery_count,
            feedback_batch_size: self.iothub_feedback_batch_size,
            feedback_batch_interval: self.iothub_feedback_interval,
            feedback_ttl: self.iothub_feedback_ttl,
            feedback_max_delivery_count: self.iothub_feedback_max_delivery_count,
            feedback_lock_duration: self.iothub_feedback_lock,
            telemetry_capacity: self.iothub_telemetry_capacity,
            amqp_limits: AmqpLimits {
                max_sessions: self.iothub_amqp_max_sessions,
                max_links_per_session: self.iothub_amqp_max_links,
                ..AmqpLimits::default()
            },
            ..IotHubConfig::default()
        })
    }
}

/// The message of a start error, with a hint when the hub's ports are taken.
pub fn explain_start_error(error: &mqstate_server::ServerError) -> String {
    let text = error.to_string();
    if matches!(error, mqstate_server::ServerError::IotHub(_)) && text.contains("cannot listen") {
        format!(
            "{text} (choose other ports with --iothub-port / --iothub-admin-port / \
             --iothub-https-port / --iothub-amqp-port, or run without the hub: --no-iothub)"
        )
    } else {
        text
    }
}

/// Logs where the hub listens and writes the generated certificate if asked to.
pub fn announce(hub: &mqstate_server::iothub::IotHub, args: &ServeHubArgs) -> Result<(), String> {
    let endpoints = hub.endpoints();
    if let (Some(path), Some(pem)) = (&args.iothub_ca_out, hub.ca_certificate_pem()) {
        std::fs::write(path, pem)
            .map_err(|e| format!("--iothub-ca-out {}: {e}", path.display()))?;
        // A certificate is public, and what other users' devices and back ends must trust:
        // readable by all whatever the umask (`serve --data-dir` makes it 077).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
            .map_err(|e| format!("--iothub-ca-out {}: {e}", path.display()))?;
        tracing::info!(path = %path.display(), "iothub: certificate written");
    }
    let scheme = if endpoints.tls { "mqtts" } else { "mqtt" };
    if let Some(addr) = endpoints.device_endpoint {
        tracing::info!("local IoT Hub: devices connect to {scheme}://{addr} (MQTT 3.1.1)");
    }
    if let Some(addr) = endpoints.admin_endpoint {
        tracing::info!("local IoT Hub: admin API on http://{addr}");
    }
    if let Some(addr) = endpoints.https_endpoint {
        tracing::info!("local IoT Hub: REST registry API on https://{addr}");
    }
    if let Some(addr) = endpoints.amqp_endpoint {
        tracing::info!("local IoT Hub: AMQP service endpoint on amqps://{addr}");
    }
    tracing::info!(
        "local IoT Hub: the service SDKs' connection string: `mqstate iothub connection-string \
         [--policy NAME]` (policies: iothubowner, service, device, registryRead, \
         registryReadWrite)"
    );
    Ok(())
}

/// `mqstate iothub ...`: drive a running local IoT Hub through its HTTP admin API.
#[derive(Debug, Args)]
pub struct IotHubArgs {
    /// Base URL of the hub's admin API.
    #[arg(
        long,
        global = true,
        env = "MQSTATE_IOTHUB_URL",
        default_value = "http://127.0.0.1:8880"
    )]
    pub url: String,
    /// The access token `mqstate serve` printed at start, when the hub asks for credentials
    /// (authentication on, or the admin API beyond loopback).
    #[arg(long, global = true, env = "MQSTATE_WEB_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    #[command(subcommand)]
    pub command: IotHubCommand,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum IotHubCommand {
    /// Be the device: connect with its connection string (MQTT or AMQP), print each
    /// cloud-to-device message as one JSON line and settle it (complete, reject, abandon).
    #[command(
        after_help = "Examples:\n  mqstate iothub receive --connection-string \"$CS\" --no-tls --port 8883 --count 1\n  mqstate iothub receive --transport amqp --ca-file hub.pem --settle reject --wait 30s\n\nThe connection string may come from $MQSTATE_DEVICE_CONNECTION_STRING.\nExit codes: 0 done (--count reached, or stopped by Ctrl-C without --count), 2 bad\nsettings or a settlement the transport does not offer (reject, abandon over MQTT),\n4 connection, 5 --wait ran out, 8 credentials refused, 130 Ctrl-C before --count."
    )]
    Receive(Box<crate::iothub_device::ReceiveArgs>),
    /// Be the device: send one device-to-cloud message (telemetry) and wait for the hub to
    /// take it.
    #[command(
        after_help = "Example:\n  mqstate iothub send-event --connection-string \"$CS\" --no-tls --port 8883 '{\"t\": 21.5}' -P unit=celsius\n\nThe connection flags and exit codes are those of `mqstate iothub receive`."
    )]
    SendEvent(Box<crate::iothub_device::SendEventArgs>),
    /// Register, list, remove devices; print MQTT credentials.
    #[command(subcommand)]
    Device(DeviceCommand),
    /// Send a cloud-to-device message.
    Send(SendArgs),
    /// Show a device queue: depth, each message's state, recently finished messages.
    Queue {
        /// The device.
        device: String,
    },
    /// Purge a device queue (Purged feedback for messages that asked for negative feedback).
    Purge {
        /// The device.
        device: String,
    },
    /// Receive feedback batches as they come (one JSON batch per line), completing each.
    Feedback {
        /// Stop after the first batch (or when --wait passes without one: exit code 1).
        #[arg(long)]
        once: bool,
        /// With --once, how long to wait for a batch.
        #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration)]
        wait: Duration,
    },
    /// Print the service connection string of a shared access policy (what back ends and the
    /// official service SDKs connect with).
    ConnectionString {
        /// The policy: iothubowner, service, device, registryRead, registryReadWrite.
        #[arg(long, default_value = "iothubowner")]
        policy: String,
    },
    /// Print the device-to-cloud messages a device sent (one JSON object per line).
    Events {
        /// The device.
        device: String,
        /// Keep printing new ones as they come.
        #[arg(long, short)]
        follow: bool,
        /// Only messages with a higher sequence number.
        #[arg(long, value_name = "N", default_value_t = 0)]
        since: u64,
    },
}

/// `mqstate iothub device ...`.
#[derive(Debug, Subcommand)]
pub enum DeviceCommand {
    /// Register a device (prints it, with its keys): a SAS device, or with --x509-thumbprint
    /// or --x509-ca an X.509 device (docs/iothub.md, "X.509 devices").
    Add {
        /// The device id.
        id: String,
        /// Its primary key (base64 of 16 to 64 bytes); generated if absent.
        #[arg(long, conflicts_with_all = ["x509_thumbprint", "x509_ca"])]
        key: Option<String>,
        /// A self-signed X.509 device: the SHA-1 or SHA-256 thumbprint (hex) of its
        /// certificate (`openssl x509 -noout -fingerprint -sha256 -in dev.pem`); given twice,
        /// the second is the secondary thumbprint.
        #[arg(long, value_name = "HEX", num_args = 1, action = clap::ArgAction::Append, conflicts_with = "x509_ca")]
        x509_thumbprint: Vec<String>,
        /// A CA-signed X.509 device: its certificate chains to a CA of the hub's
        /// --iothub-ca-file and its subject CN is the device id.
        #[arg(long)]
        x509_ca: bool,
    },
    /// List the devices.
    List,
    /// Delete a device (its queue and pending feedback go with it).
    Remove {
        /// The device id.
        id: String,
    },
    /// Print MQTT credentials for the device: client id, user name, SAS token password.
    Token {
        /// The device id.
        id: String,
        /// Token lifetime.
        #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = duration)]
        ttl: Duration,
    },
}

/// `mqstate iothub send ...`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The device.
    pub device: String,
    #[command(flatten)]
    pub message: MessageArgs,
    /// Feedback wanted: none, positive, negative, full.
    #[arg(long, default_value = "none", value_parser = |s: &str| Ack::parse(s).map_err(|e| e.to_string()))]
    pub ack: Ack,
    /// Time to live (default: the hub's default TTL).
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub ttl: Option<Duration>,
}

impl SendArgs {
    fn request(&self) -> Result<SendRequest, String> {
        let m = &self.message;
        let mut request = SendRequest {
            payload: Some(m.payload.clone()),
            message_id: m.message_id.clone(),
            correlation_id: m.correlation_id.clone(),
            content_type: m.content_type.clone(),
            content_encoding: m.content_encoding.clone(),
            ack: self.ack,
            ttl_secs: self.ttl.map(|t| t.as_secs_f64()),
            ..SendRequest::default()
        };
        request.properties.extend(m.properties()?);
        Ok(request)
    }
}

fn print_json<T: serde::Serialize>(value: &T, pretty: bool) -> Result<(), String> {
    let text = if pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    }
    .map_err(|e| e.to_string())?;
    println!("{text}");
    Ok(())
}

/// Runs one `mqstate iothub` command.
pub async fn run(args: IotHubArgs) -> Result<(), String> {
    let admin = AdminClient::new(&args.url)
        .map_err(|e| e.to_string())?
        .with_token(args.token);
    let e = |e: mqstate_server::iothub::admin::AdminError| e.to_string();
    match args.command {
        IotHubCommand::Receive(_) | IotHubCommand::SendEvent(_) => {
            Err("the device commands are run by main".into())
        }
        IotHubCommand::Device(DeviceCommand::Add {
            id,
            key,
            x509_thumbprint,
            x509_ca,
        }) => {
            if x509_thumbprint.len() > 2 {
                return Err("--x509-thumbprint is given at most twice (primary, secondary)".into());
            }
            let mut thumbprints = x509_thumbprint.into_iter();
            let request = AddDeviceRequest {
                primary_key: key,
                authentication: x509_ca.then(|| "certificateAuthority".to_owned()),
                primary_thumbprint: thumbprints.next(),
                secondary_thumbprint: thumbprints.next(),
                ..AddDeviceRequest::default()
            };
            print_json(
                &admin.register_device(&id, &request).await.map_err(e)?,
                true,
            )
        }
        IotHubCommand::Device(DeviceCommand::List) => {
            for d in admin.devices().await.map_err(e)? {
                println!(
                    "{}\t{}\tqueue={}\tgeneration={}\tauth={}",
                    d.device_id,
                    d.connection_state,
                    d.queue_depth,
                    d.generation_id,
                    d.authentication
                );
            }
            Ok(())
        }
        IotHubCommand::Device(DeviceCommand::Remove { id }) => {
            admin.remove_device(&id).await.map_err(e)?;
            println!("removed {id}");
            Ok(())
        }
        IotHubCommand::Device(DeviceCommand::Token { id, ttl }) => {
            print_json(&admin.credentials(&id, ttl).await.map_err(e)?, true)
        }
        IotHubCommand::Send(send) => {
            let request = send.request()?;
            print_json(&admin.send(&send.device, &request).await.map_err(e)?, true)
        }
        IotHubCommand::ConnectionString { policy } => {
            println!(
                "{}",
                admin.service_connection_string(&policy).await.map_err(e)?
            );
            Ok(())
        }
        IotHubCommand::Queue { device } => {
            print_json(&admin.queue(&device).await.map_err(e)?, true)
        }
        IotHubCommand::Purge { device } => {
            let result = admin.purge(&device).await.map_err(e)?;
            println!(
                "purged {} messages from {device}",
                result.total_messages_purged
            );
            Ok(())
        }
        IotHubCommand::Feedback { once, wait } => loop {
            let poll = if once { wait } else { Duration::from_secs(30) };
            match admin.receive_feedback(poll).await.map_err(e)? {
                Some(batch) => {
                    print_json(&batch, false)?;
                    admin
                        .complete_feedback(&batch.lock_token)
                        .await
                        .map_err(e)?;
                    if once {
                        return Ok(());
                    }
                }
                None if once => return Err(format!("no feedback batch within {wait:?}")),
                None => {}
            }
        },
        IotHubCommand::Events {
            device,
            follow,
            since,
        } => {
            let mut since = since;
            loop {
                let wait = if follow {
                    Duration::from_secs(30)
                } else {
                    Duration::ZERO
                };
                let events = admin.events(&device, since, wait).await.map_err(e)?;
                for event in &events {
                    print_json(event, false)?;
                    since = since.max(event.sequence_number);
                }
                if !follow {
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn properties_null_and_empty() {
        let args = SendArgs {
            device: "d".into(),
            message: MessageArgs {
                payload: "p".into(),
                properties: vec!["a=1".into(), "n".into(), "e=".into()],
                ..MessageArgs::default()
            },
            ack: Ack::None,
            ttl: None,
        };
        let r = args.request().unwrap();
        assert_eq!(r.properties["a"].as_deref(), Some("1"));
        assert_eq!(r.properties["n"], None);
        assert_eq!(r.properties["e"].as_deref(), Some(""));
    }
}
