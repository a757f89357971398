//! `mqstate iothub receive`: the device side of IoT Hub on the command line. It connects as a
//! device with the core's [`DeviceClient`] (MQTT or AMQP, to the local hub or to Azure),
//! prints each cloud-to-device message as one JSON line and settles it.
//!
//! The options go into the core's [`DeviceSettings`], the one merge of a connection string
//! and the settings given one by one (the same rules as every binding), so a mistake is
//! reported before anything connects.
//!
//! One JSON object a line, camelCase like the hub's own JSON:
//!
//! ```text
//! {"messageId":"m1","correlationId":null,"userId":null,"contentType":null,
//!  "contentEncoding":null,"expiryTime":"...","ack":"full","properties":{"a":"1","n":null},
//!  "payload":"hello","deliveryCount":0,"redelivered":false,"settled":"complete"}
//! ```
//!
//! `payload` is the body as text when it is UTF-8; otherwise it is `null` and `payloadBase64`
//! holds the bytes (base64, standard alphabet with padding). `properties` are the application
//! properties by name (`null` for a null value; a name given twice keeps its last value).
//! `deliveryCount` is the AMQP header's (0 the first time); `null` over MQTT, which does not
//! carry it.
//!
//! The order of printing and settling keeps a script on the safe side: a message to
//! complete is printed first, then completed (never completed unseen; if the command dies in
//! between the hub delivers it again); a message to reject or abandon is settled first, then
//! printed (a message that could not be settled is not printed: over MQTT, where IoT Hub
//! offers neither, the command fails with the core's not_supported error and the message
//! stays in the hub's queue).

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use clap::{Args, ValueEnum};
use mqstate::ConnectionState;
use mqstate::iothub::{
    C2dMessage, DeviceClient, DeviceSettings, MessageContent, Telemetry, Transport,
};
use serde_json::{Map, Value, json};

use crate::duration::parse_duration;
use crate::exit::{Code, Failure, Outcome};
use crate::iothub_message::MessageArgs;
use crate::output;
use crate::signals::Interrupts;

/// The core's default receive buffer: --count never raises it.
const DEFAULT_READ_AHEAD: usize = 64;

/// How each received message is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Settle {
    /// Completed: removed from the hub's queue (`Success` feedback).
    Complete,
    /// Rejected (AMQP only): dead-lettered (`Rejected` feedback).
    Reject,
    /// Abandoned (AMQP only): back in the queue, delivered again with its delivery count
    /// one higher.
    Abandon,
}

impl Settle {
    fn as_str(self) -> &'static str {
        match self {
            Settle::Complete => "complete",
            Settle::Reject => "reject",
            Settle::Abandon => "abandon",
        }
    }
}

fn transport(text: &str) -> Result<Transport, String> {
    text.parse::<Transport>().map_err(|e| e.to_string())
}

/// The device connection flags (`receive`, `send-event`).
#[derive(Debug, Args)]
pub struct DeviceConnectArgs {
    /// The device's connection string (`HostName=...;DeviceId=...;SharedAccessKey=...`, or
    /// `SharedAccessSignature=...`, or `x509=true` with --cert-file and --key-file).
    #[arg(
        long,
        env = "MQSTATE_DEVICE_CONNECTION_STRING",
        hide_env_values = true,
        value_name = "CS"
    )]
    pub connection_string: String,
    /// mqtt (MQTT 3.1.1, the default), amqp (AMQP 1.0) or amqp-ws (AMQP over WebSockets, port
    /// 443; docs/iothub-device.md, "Transports").
    #[arg(long, value_name = "TRANSPORT", value_parser = transport)]
    pub transport: Option<Transport>,
    /// Connect to this host instead of the connection string's HostName (a local hub; the
    /// SAS token still names HostName).
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,
    /// The port (default: the transport's, 8883 for MQTT, 5671 for AMQP, 443 for AMQP over
    /// WebSockets).
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// Plain TCP instead of TLS (a local hub's MQTT endpoint without --iothub-tls).
    #[arg(long)]
    pub no_tls: bool,
    /// PEM file of the CAs to trust instead of the system's (for the local hub: what
    /// `mqstate serve --iothub-ca-out FILE` wrote).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// The device's certificate chain (PEM), for an X.509 device (`x509=true`).
    #[arg(long, value_name = "FILE")]
    pub cert_file: Option<PathBuf>,
    /// The private key of --cert-file (PEM).
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
}

impl DeviceConnectArgs {
    /// The core's settings; `resolve` checks them all (usage errors, exit code 2).
    fn settings(&self) -> DeviceSettings {
        let mut s = DeviceSettings::new(self.connection_string.clone());
        s.transport = self.transport;
        s.host = self.host.clone();
        s.port = self.port;
        s.tls = self.no_tls.then_some(false);
        s.ca_file = self.ca_file.clone();
        s.cert_file = self.cert_file.clone();
        s.key_file = self.key_file.clone();
        s
    }

    /// Connects, reading ahead at most `read_ahead` messages (exit codes: 2 bad settings, 4 unreachable, 5 no answer in time,
    /// 8 credentials refused).
    async fn connect(&self, read_ahead: Option<usize>) -> Result<DeviceClient, Failure> {
        let mut settings = self.settings();
        settings.receive_buffer = read_ahead;
        let options = settings
            .resolve()
            .map_err(|e| Failure::from_error("device settings", &e))?;
        let what = format!(
            "connecting device {:?} to {}:{} over {}",
            options.device_id,
            options.connect_host.as_deref().unwrap_or(&options.hostname),
            options.port,
            options.transport.as_str()
        );
        DeviceClient::connect(options)
            .await
            .map_err(|e| Failure::from_error(&what, &e))
    }
}

/// `mqstate iothub receive`.
#[derive(Debug, Args)]
pub struct ReceiveArgs {
    #[command(flatten)]
    pub connect: DeviceConnectArgs,
    /// What to do with each message: complete, or (AMQP only) reject or abandon.
    #[arg(long, value_enum, default_value_t = Settle::Complete)]
    pub settle: Settle,
    /// What to do instead with a message delivered before (`redelivered`: an AMQP delivery
    /// count above 0, the MQTT DUP flag, or an id seen before); default: as --settle.
    /// `--settle abandon --settle-redelivered complete` retries each message once.
    #[arg(long, value_enum, value_name = "SETTLE")]
    pub settle_redelivered: Option<Settle>,
    /// Stop after N messages (redeliveries count).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Stop when no message arrives for this long (after connecting, or after the last
    /// message): exit code 5.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub wait: Option<Duration>,
}

/// `mqstate iothub send-event`.
#[derive(Debug, Args)]
pub struct SendEventArgs {
    #[command(flatten)]
    pub connect: DeviceConnectArgs,
    #[command(flatten)]
    pub message: MessageArgs,
}

impl SendEventArgs {
    fn telemetry(&self) -> Result<Telemetry, String> {
        let m = &self.message;
        let mut t = Telemetry::new(m.payload.clone().into_bytes());
        t.message_id.clone_from(&m.message_id);
        t.correlation_id.clone_from(&m.correlation_id);
        t.content_type.clone_from(&m.content_type);
        t.content_encoding.clone_from(&m.content_encoding);
        t.properties = m.properties()?;
        Ok(t)
    }
}

/// Runs `mqstate iothub send-event`: connects, sends one event, waits for the hub to take it,
/// closes.
pub async fn run_send_event(args: SendEventArgs) -> Outcome {
    let mut interrupts = Interrupts::new()?;
    let event = args.telemetry().map_err(Failure::usage)?;
    let client = tokio::select! {
        client = args.connect.connect(None) => client?,
        () = interrupts.recv() => return Ok(Code::Interrupted),
    };
    let sent = tokio::select! {
        sent = client.send_event(event) => sent.map_err(|e| Failure::from_error("send-event", &e)),
        () = interrupts.recv() => Err(Failure::new(
            Code::Interrupted,
            "send-event: interrupted (the event may or may not have arrived)",
        )),
    };
    client.close().await;
    sent.map(|()| Code::Success)
}

/// One message as its JSON line.
fn message_json(msg: &C2dMessage, settled: Settle) -> Value {
    content_json(
        msg.content(),
        msg.delivery_count(),
        msg.is_redelivery(),
        settled,
    )
}

/// The JSON line of a message's content, its delivery count and redelivery flag, and how it
/// was settled.
fn content_json(
    msg: &MessageContent,
    delivery_count: Option<u32>,
    redelivered: bool,
    settled: Settle,
) -> Value {
    let mut properties = Map::new();
    for (name, value) in &msg.properties {
        properties.insert(
            name.clone(),
            value.clone().map_or(Value::Null, Value::String),
        );
    }
    let mut o = Map::new();
    o.insert("messageId".into(), json!(msg.message_id));
    o.insert("correlationId".into(), json!(msg.correlation_id));
    o.insert("userId".into(), json!(msg.user_id));
    o.insert("contentType".into(), json!(msg.content_type));
    o.insert("contentEncoding".into(), json!(msg.content_encoding));
    o.insert("expiryTime".into(), json!(msg.expiry_time));
    o.insert("ack".into(), json!(msg.ack));
    o.insert("properties".into(), Value::Object(properties));
    match std::str::from_utf8(&msg.payload) {
        Ok(text) => {
            o.insert("payload".into(), Value::String(text.to_owned()));
        }
        Err(_) => {
            o.insert("payload".into(), Value::Null);
            o.insert(
                "payloadBase64".into(),
                Value::String(base64::engine::general_purpose::STANDARD.encode(&msg.payload)),
            );
        }
    }
    o.insert("deliveryCount".into(), json!(delivery_count));
    o.insert("redelivered".into(), json!(redelivered));
    o.insert("settled".into(), json!(settled.as_str()));
    Value::Object(o)
}

fn settle(msg: &C2dMessage, how: Settle) -> Result<(), Failure> {
    let result = match how {
        Settle::Complete => msg.complete(),
        Settle::Reject => msg.reject(),
        Settle::Abandon => msg.abandon(),
    };
    result.map_err(|e| {
        let id = msg
            .message_id
            .as_deref()
            .map_or_else(|| "without an id".to_owned(), |id| format!("{id:?}"));
        let mut f = Failure::from_error(&format!("{} message {id}", how.as_str()), &e);
        if e.kind() == mqstate::ErrorKind::NotSupported {
            f.message
                .push_str(" (the message was not settled: it stays in the hub's queue)");
        }
        f
    })
}

/// Why the receive loop ended.
enum End {
    /// --count reached.
    Done,
    /// Ctrl-C or SIGTERM.
    Stopped,
}

/// Runs `mqstate iothub receive`.
pub async fn run_receive(args: ReceiveArgs) -> Outcome {
    let mut interrupts = Interrupts::new()?;
    // With --count N, no more than N messages are taken from the hub ahead of time: one read
    // ahead and not settled goes back to the queue at close, its delivery count one higher.
    let read_ahead = args.count.map(|n| {
        usize::try_from(n)
            .unwrap_or(usize::MAX)
            .min(DEFAULT_READ_AHEAD)
    });
    let client = tokio::select! {
        client = args.connect.connect(read_ahead) => client?,
        () = interrupts.recv() => return Ok(Code::Interrupted),
    };
    // Connection changes go to stderr, so that stdout stays one line per message (the client
    // reconnects by itself; the hub delivers the unsettled messages again).
    let mut states = client.state_changes();
    let report = tokio::spawn(async move {
        while states.changed().await.is_ok() {
            let state = *states.borrow_and_update();
            match state {
                ConnectionState::Reconnecting => {
                    eprintln!("mqstate: iothub receive: connection lost, reconnecting");
                }
                ConnectionState::Connected => eprintln!("mqstate: iothub receive: reconnected"),
                _ => {}
            }
        }
    });
    let mut received = 0u64;
    let ended = receive_loop(&client, &args, &mut interrupts, &mut received).await;
    report.abort();
    // Settlements made so far are written before the connection closes (the core's close).
    client.close().await;
    match ended? {
        End::Done => Ok(Code::Success),
        // Without --count the command runs until stopped (like `watch`): that is success;
        // with --count, stopping before it is reached is an interruption.
        End::Stopped if args.count.is_some() => Ok(Code::Interrupted),
        End::Stopped => Ok(Code::Success),
    }
}

async fn receive_loop(
    client: &DeviceClient,
    args: &ReceiveArgs,
    interrupts: &mut Interrupts,
    received: &mut u64,
) -> Result<End, Failure> {
    loop {
        if args.count.is_some_and(|n| *received >= n) {
            return Ok(End::Done);
        }
        let next = async {
            match args.wait {
                Some(wait) => tokio::time::timeout(wait, client.receive()).await.ok(),
                None => Some(client.receive().await),
            }
        };
        let msg = tokio::select! {
            next = next => match next {
                Some(Ok(msg)) => msg,
                Some(Err(e)) if e.kind() == mqstate::ErrorKind::UnexpectedPayload => {
                    // Malformed: the client acknowledged it (no one could process it).
                    eprintln!("mqstate: skipped a message: {e}");
                    continue;
                }
                Some(Err(e)) => return Err(Failure::from_error("receive", &e)),
                None => {
                    let wait = args.wait.unwrap_or_default();
                    return Err(Failure::new(
                        Code::Timeout,
                        format!(
                            "no message within {} ({} received)",
                            humantime::format_duration(wait),
                            received
                        ),
                    ));
                }
            },
            () = interrupts.recv() => return Ok(End::Stopped),
        };
        let how = match args.settle_redelivered {
            Some(how) if msg.is_redelivery() => how,
            _ => args.settle,
        };
        let line = message_json(&msg, how).to_string();
        if how == Settle::Complete {
            output::write_line(&line).map_err(write_failure)?;
            settle(&msg, how)?;
        } else {
            settle(&msg, how)?;
            output::write_line(&line).map_err(write_failure)?;
        }
        *received += 1;
    }
}

fn write_failure(e: output::WriteError) -> Failure {
    match e {
        output::WriteError::Closed => Failure::usage("stdout was closed"),
        output::WriteError::Failed(message) => Failure::usage(message),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn args(extra: &[&str]) -> DeviceConnectArgs {
        #[derive(Debug, clap::Parser)]
        struct T {
            #[command(flatten)]
            c: DeviceConnectArgs,
        }
        let base = [
            "t",
            "--connection-string",
            "HostName=h;DeviceId=d;SharedAccessKey=c2VjcmV0",
        ];
        <T as clap::Parser>::try_parse_from(base.iter().chain(extra))
            .unwrap()
            .c
    }

    #[test]
    fn the_json_line() {
        let content = MessageContent::parse(
            "devices/d/messages/devicebound/%24.mid=m1&%24.cid=c1&iothub-ack=full&a=x%20y&n&e=",
            "d",
            bytes::Bytes::from_static(b"\xff\x00ok"),
        )
        .unwrap();
        let line = content_json(&content, Some(1), true, Settle::Abandon);
        assert_eq!(
            line,
            json!({
                "messageId": "m1", "correlationId": "c1", "userId": null, "contentType": null,
                "contentEncoding": null, "expiryTime": null, "ack": "full",
                "properties": {"a": "x y", "n": null, "e": ""},
                "payload": null, "payloadBase64": "/wBvaw==",
                "deliveryCount": 1, "redelivered": true, "settled": "abandon",
            })
        );
        let text = MessageContent::parse(
            "devices/d/messages/devicebound/",
            "d",
            bytes::Bytes::from_static("température".as_bytes()),
        )
        .unwrap();
        let line = content_json(&text, None, false, Settle::Complete);
        assert_eq!(line["payload"], "température");
        assert!(line.get("payloadBase64").is_none());
        assert_eq!(line["deliveryCount"], Value::Null);
    }

    #[test]
    fn flags_fill_the_core_settings() {
        let o = args(&[
            "--transport",
            "AMQP",
            "--host",
            "127.0.0.1",
            "--port",
            "15671",
        ])
        .settings()
        .resolve()
        .unwrap();
        assert_eq!(o.transport, Transport::Amqp);
        assert_eq!(
            (o.connect_host.as_deref(), o.port),
            (Some("127.0.0.1"), 15671)
        );
        assert!(o.tls.is_some());
        let o = args(&["--no-tls"]).settings().resolve().unwrap();
        assert!(o.tls.is_none());
        assert_eq!(o.port, 8883);
        let e = args(&["--no-tls", "--ca-file", "ca.pem"])
            .settings()
            .resolve()
            .unwrap_err();
        assert_eq!(Failure::from_error("x", &e).code, Code::Usage);
        assert!(e.to_string().contains("TLS is turned off"), "{e}");
    }
}
