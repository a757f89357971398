//! MQTT 3.1.1 packets read and served as the device endpoint does ([`mqtt_connect`]).

use super::*;

/// A CONNECT read from the input, and the hub's answer.
#[derive(Debug)]
pub struct ConnectAttempt {
    /// Its client id.
    pub client_id: String,
    /// Its user name.
    pub username: Option<String>,
    /// Whether it is MQTT 3.1.1.
    pub v4: bool,
    /// `IotHub::connect`: session present, or the refusal.
    pub accepted: Result<bool, String>,
}

/// What [`mqtt_connect`] saw.
#[derive(Debug, Default)]
pub struct MqttOutcome {
    /// The bytes the device endpoint read.
    pub input_len: usize,
    /// Each packet `Packet::read` read: its kind (Debug, cut short) and the bytes it took.
    pub packets: Vec<(String, usize)>,
    /// Why reading stopped before the end (not for a packet cut short).
    pub read_error: Option<String>,
    /// Every CONNECT, checked by the hub (and disconnected again).
    pub connects: Vec<ConnectAttempt>,
    /// The device endpoint serving the whole input: how it ended.
    pub served: Option<Result<(), String>>,
    /// What the endpoint wrote back, read as packets (Debug, cut short).
    pub replies: Vec<String>,
    /// Whether its first reply is a CONNACK, and whether that accepts.
    pub connack: Option<bool>,
    /// What the endpoint wrote that does not read as MQTT 3.1.1 packets.
    pub malformed_reply: Option<String>,
    /// The hub or runtime could not be made.
    pub setup: Option<String>,
}

fn short(text: &str) -> String {
    text.chars().take(120).collect()
}

/// MQTT 3.1.1 device connections. The input: a flags byte, then bytes from the device. With
/// flag bit 0 a CONNECT of `d1` comes first (bit 1: clean session; bit 2: an expired token as
/// password, else a valid one, for an hour or with bit 6 until the year 9999; bit 3: a user
/// name without `api-version`; bits 4-5 the keep-alive: 0, 60, 1200 or 65535 s). The bytes are read with `Packet::read` as the
/// endpoint reads them, each CONNECT checked with `IotHub::connect` (then disconnected); then
/// the endpoint serves them as one connection over an in-memory pipe (`d1` has a message
/// queued), and what it writes back is read as packets.
pub fn mqtt_connect(data: &[u8]) -> MqttOutcome {
    use rumqttc::mqttbytes::v4::{Connect, ConnectReturnCode, Packet};

    let mut out = MqttOutcome::default();
    let (hub, rt) = match hub(true).and_then(|h| Ok((h, runtime()?))) {
        Ok(x) => x,
        Err(e) => {
            out.setup = Some(e);
            return out;
        }
    };
    let flags = data.first().copied().unwrap_or(0);
    let mut stream = BytesMut::new();
    if flags & 1 != 0 {
        let mut connect = Connect::new(DEVICE_ID);
        connect.clean_session = flags & 2 != 0;
        connect.keep_alive = [0, 60, 1200, u16::MAX]
            .get(usize::from((flags >> 4) & 3))
            .copied()
            .unwrap_or(0);
        let username = if flags & 8 != 0 {
            format!("{HOSTNAME}/{DEVICE_ID}/")
        } else {
            hub.device_username(DEVICE_ID)
        };
        let resource = sas::device_resource(HOSTNAME, DEVICE_ID);
        let password = if flags & 4 != 0 {
            let past = SystemTime::now().checked_sub(Duration::from_secs(1));
            sas::generate(&resource, DEVICE_KEY, past.unwrap_or(UNIX_EPOCH))
        } else if flags & 0x40 != 0 {
            // Valid until the last second the hub accepts: the connection's token timer.
            sas::generate(&resource, DEVICE_KEY, time::latest())
        } else {
            hub.device_token(DEVICE_ID, Duration::from_secs(3600))
        };
        match password {
            Ok(password) => {
                connect.set_login(username, password);
            }
            Err(e) => {
                out.setup = Some(format!("token: {e}"));
                return out;
            }
        }
        if let Err(e) = Packet::Connect(connect).write(&mut stream, usize::MAX) {
            out.setup = Some(format!("CONNECT: {e}"));
            return out;
        }
    }
    stream.extend_from_slice(data.get(1..).unwrap_or_default());
    out.input_len = stream.len();
    let input = stream.clone().freeze();

    // As the endpoint reads them (endpoint.rs, `Conn::read_packet`).
    let max_incoming = hub.config().max_telemetry_size + 64 * 1024;
    while !stream.is_empty() && out.packets.len() < 1000 {
        let before = stream.len();
        match Packet::read(&mut stream, max_incoming) {
            Ok(packet) => {
                out.packets
                    .push((short(&format!("{packet:?}")), before - stream.len()));
                if let Packet::Connect(c) = packet {
                    let login = c.login.as_ref();
                    let accepted = hub
                        .connect(
                            &c.client_id,
                            login.map(|l| l.username.as_str()),
                            login.map(|l| l.password.as_str()),
                            None,
                            c.clean_session,
                        )
                        .map(|connected| {
                            hub.disconnected(&c.client_id, connected.id);
                            connected.session_present
                        })
                        .map_err(|refusal| format!("{refusal:?}"));
                    out.connects.push(ConnectAttempt {
                        client_id: c.client_id.clone(),
                        username: login.map(|l| l.username.clone()),
                        v4: c.protocol == rumqttc::mqttbytes::Protocol::V4,
                        accepted,
                    });
                }
            }
            Err(rumqttc::mqttbytes::Error::InsufficientBytes(_)) => break,
            Err(e) => {
                out.read_error = Some(e.to_string());
                break;
            }
        }
    }

    // The endpoint itself, over a pipe: the input, then the end of the stream.
    let served = rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (mut from_hub, mut to_hub) = tokio::io::split(client);
        let (_stop, stop_rx) = tokio::sync::watch::channel(false);
        let write = async move {
            let _ = to_hub.write_all(&input).await;
            let _ = to_hub.shutdown().await;
        };
        let read = async move {
            let mut written = Vec::new();
            let _ = from_hub.read_to_end(&mut written).await;
            written
        };
        let serve = crate::iothub::mqtt::serve(hub.clone(), server, None, stop_rx);
        // Everything is in the pipe at once: an endpoint still busy after this long hangs.
        tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(write, read, serve)
        })
        .await
    });
    let (written, served) = match served {
        Ok(((), written, served)) => (written, served),
        Err(_) => (
            Vec::new(),
            Err("HUNG: the endpoint did not finish".to_owned()),
        ),
    };
    out.served = Some(served);
    let mut replies = BytesMut::from(&written[..]);
    while !replies.is_empty() {
        match Packet::read(&mut replies, usize::MAX) {
            Ok(packet) => {
                if out.replies.is_empty() {
                    out.connack = match &packet {
                        Packet::ConnAck(ack) => Some(ack.code == ConnectReturnCode::Success),
                        _ => None,
                    };
                }
                out.replies.push(short(&format!("{packet:?}")));
            }
            Err(e) => {
                out.malformed_reply = Some(format!("{e} ({} bytes left)", replies.len()));
                break;
            }
        }
    }
    out
}
