//! The local IoT Hub for the device client's tests (`iothub`, `iothub_amqp`, `iothub_amqp_ws`):
//! started in-process, its devices, device options for each transport, and waiting on its
//! queues.

use std::path::PathBuf;
use std::time::Duration;

use mqstate::ReconnectPolicy;
use mqstate::TlsOptions;
use mqstate::iothub::{C2dMessage, DeviceClient, DeviceOptions, Transport};
use mqstate_server::iothub::{
    DeviceSpec, DeviceTls, IotHub, IotHubConfig, IotHubServer, MessageState, QueueInfo,
    TelemetryMessage,
};

/// Generous: the machine running the tests may be very busy.
pub const WAIT: Duration = Duration::from_secs(30);

/// Starts a hub with `config` (no admin port) and registers `devices` (`ID[:KEY]`).
pub async fn hub(config: IotHubConfig, devices: &[&str]) -> (IotHubServer, IotHub) {
    let server = IotHubServer::start(IotHubConfig {
        admin_port: None,
        ..config
    })
    .await
    .unwrap();
    let hub = server.hub();
    for d in devices {
        hub.add_device(&DeviceSpec::parse(d).unwrap()).unwrap();
    }
    (server, hub)
}

/// Fast reconnection, for tests that drop connections.
fn fast_reconnect() -> ReconnectPolicy {
    ReconnectPolicy::new(Duration::from_millis(50), Duration::from_millis(500))
}

/// MQTT over loopback TCP to the hub's device endpoint.
pub fn mqtt_options(hub: &IotHub, device: &str) -> DeviceOptions {
    let port = hub.endpoints().device_endpoint.unwrap().port();
    DeviceOptions::from_connection_string(&hub.connection_string(device).unwrap())
        .unwrap()
        .with_plain_tcp("127.0.0.1", port)
        .with_reconnect(fast_reconnect())
}

/// The hub's generated CA certificate in a file, for TLS options (kept while the value lives).
#[derive(Debug)]
pub struct CaFile {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl CaFile {
    /// The certificate the hub generated at start.
    pub fn of(hub: &IotHub) -> CaFile {
        CaFile::from_pem(&hub.ca_certificate_pem().expect("a generated certificate"))
    }

    /// A PEM certificate.
    pub fn from_pem(pem: &str) -> CaFile {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub-ca.pem");
        std::fs::write(&path, pem).unwrap();
        CaFile { _dir: dir, path }
    }
}

/// A self-signed certificate for `localhost` and `127.0.0.1` in files, for a hub that must
/// present the same certificate across a restart ([`DeviceTls::Files`]); the certificate is
/// also what clients trust.
pub fn fixed_tls() -> (tempfile::TempDir, DeviceTls, CaFile) {
    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, generated.cert.pem()).unwrap();
    std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
    let ca = CaFile::from_pem(&generated.cert.pem());
    (dir, DeviceTls::Files { cert, key }, ca)
}

/// AMQP over TLS to the hub's AMQP endpoint on 127.0.0.1 (`port`: the endpoint's port, or
/// another one, e.g. a restarted hub's), trusting `ca`.
pub fn amqp_options(hub: &IotHub, device: &str, port: u16, ca: &CaFile) -> DeviceOptions {
    DeviceOptions::from_connection_string(&hub.connection_string(device).unwrap())
        .unwrap()
        .with_transport(Transport::Amqp)
        .with_endpoint(
            "127.0.0.1",
            port,
            TlsOptions::default().with_ca_file(&ca.path),
        )
        .with_reconnect(fast_reconnect())
}

/// The port of the hub's AMQP endpoint.
pub fn amqp_port(hub: &IotHub) -> u16 {
    hub.endpoints().amqp_endpoint.unwrap().port()
}

/// AMQP over WebSockets (`wss://`) to the hub's HTTPS port on 127.0.0.1, trusting `ca`: the
/// options of [`amqp_options`] with the other transport.
pub fn amqp_ws_options(hub: &IotHub, device: &str, ca: &CaFile) -> DeviceOptions {
    let mut options = amqp_options(hub, device, https_port(hub), ca);
    options.transport = Transport::AmqpWs;
    options
}

/// Where an AMQP test's device connects: [`amqp_tcp`] or [`amqp_ws_options`].
pub type AmqpEndpoint = fn(&IotHub, &str, &CaFile) -> DeviceOptions;

/// AMQP over TLS on the hub's AMQP port (the [`AmqpEndpoint`] of `Transport::Amqp`).
pub fn amqp_tcp(hub: &IotHub, device: &str, ca: &CaFile) -> DeviceOptions {
    amqp_options(hub, device, amqp_port(hub), ca)
}

/// Both AMQP transports, for the tests that must hold over each.
pub const AMQP_ENDPOINTS: [(Transport, AmqpEndpoint); 2] = [
    (Transport::Amqp, amqp_tcp),
    (Transport::AmqpWs, amqp_ws_options),
];

/// The port of the hub's HTTPS server (REST API, and MQTT and AMQP over WebSockets).
pub fn https_port(hub: &IotHub) -> u16 {
    hub.endpoints().https_endpoint.unwrap().port()
}

/// The next message, within [`WAIT`].
pub async fn receive(client: &DeviceClient) -> C2dMessage {
    tokio::time::timeout(WAIT, client.receive())
        .await
        .expect("no message within the wait")
        .unwrap()
}

/// Waits until `check` holds for the hub's view of the device queue.
pub async fn eventually(
    hub: &IotHub,
    device: &str,
    what: &str,
    check: impl Fn(&QueueInfo) -> bool,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let q = hub.queue(device).unwrap();
        if check(&q) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {q:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Messages of the queue in state `state` among the finished ones.
pub fn finished(q: &QueueInfo, state: MessageState) -> usize {
    q.finished.iter().filter(|m| m.state == state).count()
}

/// Completed messages of the queue.
pub fn completed(q: &QueueInfo) -> usize {
    finished(q, MessageState::Completed)
}

pub use mqstate_testing::iothub::feedback;

/// A message with every system property (URL-special and non-ASCII characters in them), a
/// null and an empty application property, full acknowledgement: what every transport must
/// deliver unchanged ([`assert_every_property`]).
pub fn message_with_every_property() -> mqstate_server::iothub::C2dMessage {
    mqstate_server::iothub::C2dMessage::new(&b"\x00binary\xff"[..])
        .message_id("id 1/é")
        .correlation_id("corr&1")
        .user_id("user=1")
        .content_type("application/json")
        .content_encoding("utf-8")
        .ack(mqstate_server::iothub::Ack::Full)
        .property("colour", Some("dark blue/€&x=y"))
        .property("nothing", None)
        .property("empty", Some(""))
}

/// Asserts that `m` is [`message_with_every_property`] as `dev1` received it, first delivery.
pub fn assert_every_property(m: &C2dMessage) {
    assert_eq!(&m.payload[..], b"\x00binary\xff");
    assert_eq!(m.message_id.as_deref(), Some("id 1/é"));
    assert_eq!(m.correlation_id.as_deref(), Some("corr&1"));
    assert_eq!(m.user_id.as_deref(), Some("user=1"));
    assert_eq!(m.to.as_deref(), Some("/devices/dev1/messages/devicebound"));
    assert!(
        m.expiry_time.as_deref().unwrap().ends_with('Z'),
        "{:?}",
        m.expiry_time
    );
    assert_eq!(m.content_type.as_deref(), Some("application/json"));
    assert_eq!(m.content_encoding.as_deref(), Some("utf-8"));
    assert_eq!(m.ack.as_deref(), Some("full"));
    assert_eq!(
        m.properties,
        vec![
            ("colour".to_owned(), Some("dark blue/€&x=y".to_owned())),
            ("nothing".to_owned(), None),
            ("empty".to_owned(), Some(String::new())),
        ]
    );
    assert!(!m.is_redelivery());
}

/// The one telemetry message `device` sent (the send's acknowledgement came after the hub kept
/// it, `why` says which), with its body decoded.
pub fn only_event(hub: &IotHub, device: &str, why: &str) -> (Vec<u8>, TelemetryMessage) {
    use base64::Engine;
    let mut got = hub.telemetry(device, 0).unwrap();
    assert_eq!(got.len(), 1, "{why}");
    let t = got.remove(0);
    let body = base64::engine::general_purpose::STANDARD
        .decode(&t.body_base64)
        .unwrap();
    (body, t)
}
