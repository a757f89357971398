//! The device endpoint: MQTT 3.1.1 as IoT Hub speaks it, terminated here (the hub must see each
//! PUBACK to complete messages). Packets are read and written with rumqttc's MQTT 3.1.1 codec
//! (`rumqttc::mqttbytes::v4`); this module only decides what each packet means.

use std::time::{Duration, SystemTime};

use bytes::BytesMut;
use rumqttc::mqttbytes::v4::{
    ConnAck, ConnectReturnCode, Packet, PubAck, Publish, SubAck, SubscribeReasonCode, UnsubAck,
};
use rumqttc::mqttbytes::{self, QoS};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::iothub::IotHubError;
use crate::iothub::client_cert::CaTrust;
use crate::iothub::domain::x509::ClientCert;

use crate::iothub::domain::hub::{ConnectRefusal, IotHub, Subscription, ToConnection};
use crate::iothub::domain::properties;
use crate::untrusted::cut;

mod delivery;
use delivery::{InFlight, devicebound_topic};

/// Room for the topic and headers around the largest body.
pub(crate) const PACKET_OVERHEAD: usize = 64 * 1024;

/// The topic filter twin responses come on: granted (the hub answers twin requests on it, if
/// only to refuse them) so that the SDKs see the answer instead of waiting for it.
const TWIN_RESPONSES: &str = "$iothub/twin/res/#";

/// The status of a twin request's answer: IoT Hub's for an operation the hub does not offer
/// (error code 403010, "not valid for the current IoT Hub tier", as a Basic tier hub answers
/// twin requests). A 4xx other than 429 is what every SDK turns into an error at once:
/// Python's raises `ServiceError` for any status >= 300, Node's calls back with an `Error`
/// built from the body's `errorCode` and `message`, and azure-sdk-for-c retries only 429 and
/// 500 (`az_iot_status_retriable`).
const TWIN_REFUSED_STATUS: u16 = 403;
const TWIN_REFUSED_CODE: u32 = 403_010;

/// A twin request a device published: `$iothub/twin/GET/?$rid={rid}` or
/// `$iothub/twin/PATCH/properties/reported/?$rid={rid}`; returns what it asks and its request
/// id (as written in the topic, so it is echoed byte for byte). `None` for another topic, or
/// a request without a usable `$rid` (nothing to answer it with: closed as before).
fn twin_request(topic: &str) -> Option<(&'static str, &str)> {
    let rest = topic.strip_prefix("$iothub/twin/")?;
    let (what, query) = if let Some(q) = rest.strip_prefix("GET/?") {
        ("get the twin", q)
    } else if let Some(q) = rest.strip_prefix("PATCH/properties/reported/?") {
        ("update reported properties", q)
    } else {
        return None;
    };
    let rid = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("$rid="))
        // Echoed into a topic name: no wildcard, level separator or NUL may come back in it.
        .filter(|rid| !rid.is_empty() && !rid.contains(['#', '+', '/', '\0']))?;
    Some((what, rid))
}

/// The answer to a twin request: IoT Hub's error body (`errorCode`, `trackingId`, `message`,
/// `info`, `timestampUtc`) on `$iothub/twin/res/403/?$rid={rid}`.
fn twin_refusal(what: &str, rid: &str) -> Publish {
    let body = serde_json::json!({
        "errorCode": TWIN_REFUSED_CODE,
        "trackingId": crate::iothub::domain::queue::new_guid(),
        "message": format!(
            "device twins are not supported by this local IoT Hub (mqstate serves cloud-to-device messages and telemetry): cannot {what}"
        ),
        "info": {},
        "timestampUtc": crate::iothub::domain::message::format_time(SystemTime::now()),
    });
    Publish::new(
        format!("$iothub/twin/res/{TWIN_REFUSED_STATUS}/?$rid={rid}"),
        QoS::AtMostOnce,
        body.to_string(),
    )
}

/// Accepts device connections until `stop` fires.
pub(crate) async fn run(
    hub: IotHub,
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    ca_trust: CaTrust,
    stop: watch::Receiver<bool>,
) {
    let mut stop_accepting = stop.clone();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "iothub: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop_accepting.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let hub = hub.clone();
        let tls = tls.clone();
        let ca_trust = ca_trust.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            match tls {
                Some(acceptor) => {
                    let limit = hub.config().connect_timeout;
                    match crate::iothub::tls::handshake(&acceptor, stream, limit).await {
                        Ok(tls_stream) => {
                            let cert = ca_trust.read(tls_stream.get_ref().1.peer_certificates());
                            connection(hub, tls_stream, cert, peer, stop).await
                        }
                        Err(e) => log_refusal(&hub, peer, &e),
                    }
                }
                None => connection(hub, stream, None, peer, stop).await,
            }
        });
    }
}

/// One device connection over `stream` (TCP, TLS, or the byte stream of a WebSocket on the
/// HTTPS port: `crate::iothub::websocket`), served until it ends; why it ended is logged.
pub(crate) async fn connection<S: AsyncRead + AsyncWrite + Unpin>(
    hub: IotHub,
    stream: S,
    cert: Option<ClientCert>,
    peer: std::net::SocketAddr,
    stop: watch::Receiver<bool>,
) {
    if let Err(why) = serve(hub.clone(), stream, cert, stop).await {
        log_refusal(&hub, peer, &why);
    }
}

/// Refusals and protocol errors, summarised per address (a peer repeating a bad CONNECT
/// cannot fill the log).
fn log_refusal(hub: &IotHub, peer: std::net::SocketAddr, why: &str) {
    if let Some(left_out) = hub.refusals().admit(peer.ip()) {
        tracing::info!(%peer, left_out, "iothub: device connection closed: {why}");
    }
}

/// One MQTT connection, its reads and writes.
struct Conn<S> {
    stream: S,
    read: BytesMut,
    write: BytesMut,
    max_incoming: usize,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    async fn read_packet(&mut self) -> Result<Packet, String> {
        loop {
            match Packet::read(&mut self.read, self.max_incoming) {
                Ok(packet) => return Ok(packet),
                Err(mqttbytes::Error::InsufficientBytes(_)) => {}
                Err(e) => return Err(format!("malformed MQTT 3.1.1 packet: {e}")),
            }
            let n = self
                .stream
                .read_buf(&mut self.read)
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("the device closed the connection".into());
            }
        }
    }

    async fn send(&mut self, packet: Packet) -> Result<(), String> {
        packet
            .write(&mut self.write, usize::MAX)
            .map_err(|e| format!("encode: {e}"))?;
        self.stream
            .write_all(&self.write)
            .await
            .map_err(|e| format!("write: {e}"))?;
        // A no-op on TCP; a WebSocket (crate::iothub::websocket) sends its message only on
        // flush, and TLS may hold bytes back until then.
        self.stream
            .flush()
            .await
            .map_err(|e| format!("write: {e}"))?;
        self.write.clear();
        Ok(())
    }
}

/// One device connection; `cert` is the TLS client certificate it presented, with which an
/// X.509 device authenticates instead of a SAS token (docs/iothub.md, "X.509 devices").
pub(crate) async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    hub: IotHub,
    stream: S,
    cert: Option<ClientCert>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    let config = hub.config().clone();
    let mut conn = Conn {
        stream,
        read: BytesMut::with_capacity(4096),
        write: BytesMut::with_capacity(4096),
        max_incoming: config.max_telemetry_size + PACKET_OVERHEAD,
    };
    let first = tokio::time::timeout(config.connect_timeout, conn.read_packet())
        .await
        .map_err(|_| "no CONNECT in time".to_owned())??;
    let Packet::Connect(connect) = first else {
        return Err(format!(
            "the first packet was not CONNECT but {}",
            cut(&format!("{first:?}"))
        ));
    };
    if connect.protocol != mqttbytes::Protocol::V4 {
        // IoT Hub's MQTT endpoint speaks 3.1.1 only.
        let _ = conn
            .send(Packet::ConnAck(ConnAck::new(
                ConnectReturnCode::RefusedProtocolVersion,
                false,
            )))
            .await;
        return Err("refused: not MQTT 3.1.1".into());
    }
    let device_id = connect.client_id.clone();
    if device_id.is_empty() {
        let _ = conn
            .send(Packet::ConnAck(ConnAck::new(
                ConnectReturnCode::BadClientId,
                false,
            )))
            .await;
        return Err("refused: empty client id (it must be the device id)".into());
    }
    let login = connect.login.as_ref();
    let accepted = hub.connect(
        &device_id,
        login.map(|l| l.username.as_str()),
        login.map(|l| l.password.as_str()).filter(|p| !p.is_empty()),
        cert.as_ref(),
        connect.clean_session,
    );
    let mut connected = match accepted {
        Ok(c) => c,
        Err(refusal) => {
            let (code, why) = match refusal {
                ConnectRefusal::BadUsername(w) => (ConnectReturnCode::BadUserNamePassword, w),
                ConnectRefusal::NotAuthorized(w) => (ConnectReturnCode::NotAuthorized, w),
            };
            let _ = conn.send(Packet::ConnAck(ConnAck::new(code, false))).await;
            return Err(format!(
                "device {:?} refused ({code:?}): {why}",
                cut(&device_id)
            ));
        }
    };
    let connection = connected.id;
    tracing::info!(device = %device_id, connection, clean_session = connect.clean_session,
        "iothub: device connected");
    let result = async {
        conn.send(Packet::ConnAck(ConnAck::new(
            ConnectReturnCode::Success,
            connected.session_present,
        )))
        .await?;
        // The keep-alive as the hub honours it; 1.5 times that without a packet ends the link.
        let keep_alive = Duration::from_secs(u64::from(connect.keep_alive)).min(config.max_keep_alive);
        let idle_limit = (!keep_alive.is_zero()).then(|| keep_alive.mul_f64(1.5));
        let token_left = connected
            .token_expires
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        let token_expiry = tokio::time::sleep(token_left);
        tokio::pin!(token_expiry);
        let devicebound = format!("devices/{device_id}/messages/devicebound/");
        let events = format!("devices/{device_id}/messages/events/");
        // Whether the device subscribed to twin responses (only then are they sent).
        let mut twin_responses = false;
        let mut in_flight = InFlight::default();
        // Only packets from the device count as signs of life, not deliveries to it.
        let mut last_heard = tokio::time::Instant::now();
        loop {
            let idle = async {
                match idle_limit {
                    Some(limit) => tokio::time::sleep_until(last_heard + limit).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                packet = conn.read_packet() => {
                    last_heard = tokio::time::Instant::now();
                    match packet? {
                        Packet::PingReq => conn.send(Packet::PingResp).await?,
                        Packet::Disconnect => return Ok("the device disconnected".to_owned()),
                        Packet::PubAck(ack) => match in_flight.acked(ack.pkid) {
                            Some(lock) => hub.puback(&device_id, connection, lock),
                            None => tracing::debug!(device = %device_id, packet_id = ack.pkid,
                                "iothub: PUBACK for a packet id not in flight"),
                        },
                        Packet::Subscribe(sub) => {
                            let mut codes = Vec::with_capacity(sub.filters.len());
                            let mut granted = None;
                            for filter in &sub.filters {
                                if filter.path == format!("{devicebound}#") {
                                    // IoT Hub grants QoS 1 at most (QoS 2 requests get 1).
                                    let (qos, subscription) = if filter.qos == QoS::AtMostOnce {
                                        (QoS::AtMostOnce, Subscription::AtMostOnce)
                                    } else {
                                        (QoS::AtLeastOnce, Subscription::AtLeastOnce)
                                    };
                                    granted = Some(subscription);
                                    codes.push(SubscribeReasonCode::Success(qos));
                                } else if filter.path == TWIN_RESPONSES {
                                    twin_responses = true;
                                    let qos = if filter.qos == QoS::AtMostOnce { QoS::AtMostOnce } else { QoS::AtLeastOnce };
                                    codes.push(SubscribeReasonCode::Success(qos));
                                } else {
                                    // Direct methods, desired property updates...: refused in the
                                    // SUBACK, the connection kept (the device may go on with C2D).
                                    tracing::info!(device = %device_id, filter = ?cut(&filter.path),
                                        "iothub: subscription refused (only {devicebound}# and {TWIN_RESPONSES} are served: no direct methods, no twin updates)");
                                    codes.push(SubscribeReasonCode::Failure);
                                }
                            }
                            conn.send(Packet::SubAck(SubAck::new(sub.pkid, codes))).await?;
                            if let Some(subscription) = granted {
                                hub.subscribed(&device_id, connection, subscription);
                            }
                        }
                        Packet::Unsubscribe(unsub) => {
                            if unsub.topics.iter().any(|t| t == &format!("{devicebound}#")) {
                                hub.unsubscribed(&device_id, connection);
                            }
                            if unsub.topics.iter().any(|t| t == TWIN_RESPONSES) {
                                twin_responses = false;
                            }
                            conn.send(Packet::UnsubAck(UnsubAck::new(unsub.pkid))).await?;
                        }
                        Packet::Publish(publish) => {
                            if publish.qos == QoS::ExactlyOnce {
                                return Err("QoS 2 is not supported by IoT Hub: connection closed".to_owned());
                            }
                            if let Some((what, rid)) = twin_request(&publish.topic) {
                                // Answered, not a reason to close: a device SDK whose request
                                // closes the connection reconnects and asks again, in a loop.
                                if publish.qos == QoS::AtLeastOnce {
                                    conn.send(Packet::PubAck(PubAck::new(publish.pkid))).await?;
                                }
                                if twin_responses {
                                    tracing::info!(device = %device_id, rid = ?cut(rid), status = TWIN_REFUSED_STATUS,
                                        "iothub: twin request refused: device twins are not supported (cannot {what})");
                                    conn.send(Packet::Publish(twin_refusal(what, rid))).await?;
                                } else {
                                    tracing::info!(device = %device_id, rid = ?cut(rid),
                                        "iothub: twin request ignored: not subscribed to {TWIN_RESPONSES}, where its refusal would go");
                                }
                                continue;
                            }
                            let Some(bag) = publish.topic.strip_prefix(&events) else {
                                return Err(format!("publish to {:?}: a device may only publish to {events}", cut(&publish.topic)));
                            };
                            if publish.payload.len() > config.max_telemetry_size {
                                return Err(format!("telemetry of {} bytes is over the limit of {}", publish.payload.len(), config.max_telemetry_size));
                            }
                            let bag = properties::decode(bag).map_err(|e| format!("telemetry topic: {e}"))?;
                            hub.telemetry_received(&device_id, bag, publish.payload.clone());
                            if publish.qos == QoS::AtLeastOnce {
                                conn.send(Packet::PubAck(PubAck::new(publish.pkid))).await?;
                            }
                        }
                        other => return Err(format!("unexpected packet from a device: {}", cut(&format!("{other:?}")))),
                    }
                }
                command = connected.rx.recv() => match command {
                    Some(ToConnection::Deliver { stored, lock, at_most_once, after }) => {
                        // Counted on disk before the device sees it (a crash then releases it
                        // with this delivery counted).
                        if let Err(e) = hub.wait_durable(after).await {
                            tracing::warn!(device = %device_id, error = %e, "iothub: delivering a message whose lock is not on disk");
                        }
                        let qos = if at_most_once { QoS::AtMostOnce } else { QoS::AtLeastOnce };
                        let mut publish = Publish::from_bytes(devicebound_topic(&device_id, &stored), qos, stored.payload());
                        if !at_most_once {
                            // The lock is the queue's; the packet id this connection's.
                            publish.pkid = in_flight.send(lock).ok_or_else(|| "65,535 deliveries wait for their PUBACK".to_owned())?;
                        }
                        conn.send(Packet::Publish(publish)).await?;
                    }
                    Some(ToConnection::Close(why)) => return Err(why),
                    None => return Err("the hub stopped".to_owned()),
                },
                () = idle => return Err(format!("no packet within 1.5 times the keep-alive ({keep_alive:?})")),
                () = &mut token_expiry => return Err("the SAS token expired".to_owned()),
                _ = stop.changed() => return Err("the hub is stopping".to_owned()),
            }
        }
    }
    .await;
    hub.disconnected(&device_id, connection);
    let _ = conn.stream.shutdown().await;
    match result {
        Ok(why) => {
            tracing::info!(device = %device_id, connection, "iothub: {why}");
            Ok(())
        }
        Err(why) => Err(format!("device {device_id:?}: {why}")),
    }
}

/// Binds the device listener.
pub(crate) async fn bind(addr: std::net::SocketAddr) -> Result<TcpListener, IotHubError> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| IotHubError::io(format_args!("cannot listen for devices on {addr}"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twin_requests_are_recognised_with_their_request_id() {
        assert_eq!(
            twin_request("$iothub/twin/GET/?$rid=42"),
            Some(("get the twin", "42"))
        );
        assert_eq!(
            twin_request("$iothub/twin/PATCH/properties/reported/?$version=2&$rid=a%2D1"),
            Some(("update reported properties", "a%2D1"))
        );
        for other in [
            "$iothub/twin/GET/",
            "$iothub/twin/GET/?$rid=",
            "$iothub/twin/GET/?$rid=a/b",
            "$iothub/twin/GET/?$rid=#",
            "$iothub/twin/PATCH/properties/desired/?$rid=1",
            "$iothub/methods/res/200/?$rid=1",
            "devices/d/messages/events/",
        ] {
            assert_eq!(twin_request(other), None, "{other}");
        }
    }
}
