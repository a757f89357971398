//! MQTT and AMQP over WebSockets on the hub's HTTPS port, as IoT Hub serves them for networks
//! that let only 443 through: `GET /$iothub/websocket` (any query, such as the SDKs'
//! `?iothub-no-client-cert=true`; or Service Bus's `/$servicebus/websocket/`, where uamqp
//! goes), upgraded to a WebSocket whose subprotocol names what it carries: `mqtt` (the MQTT
//! 3.1.1 device endpoint) or `AMQPWSB10` (the AMQP endpoint, devices and service alike).
//! docs/iothub.md, "Transports and credentials".
//!
//! This module owns only the upgrade and the byte stream: axum's `ws` extractor (tungstenite)
//! does the WebSocket handshake and framing, tokio-util's `StreamReader` and `SinkWriter` turn
//! its binary messages into an `AsyncRead + AsyncWrite`, and that stream is handed to the same
//! connection handlers as the TCP listeners' ([`crate::iothub::mqtt::connection`],
//! [`crate::iothub::amqp::serve`]): one implementation of authentication, limits, lifecycle
//! and durability for both. Bounds before authentication (docs/security.md, "Limits per
//! connection on the hub"): the HTTP head has the HTTPS server's deadline; a WebSocket message
//! (and frame) is at most what the protocol inside accepts in one packet or message
//! ([`max_message`]), so tungstenite never buffers more; then the handler's own deadlines
//! apply (MQTT: CONNECT within the connect timeout; AMQP: the first accepted put-token within
//! the auth timeout). A request for a subprotocol the hub does not serve is refused at once
//! with `400` (no upgrade), and so is a plain `GET` (axum's rejection), rather than left to the
//! client's timeout. The hub's stop reaches the handlers, which close their connections.

use std::io;
use std::net::SocketAddr;

use axum::Router;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt, future};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio_util::io::{CopyToBytes, SinkWriter, StreamReader};

use crate::iothub::IotHub;
use crate::untrusted::cut;

/// The path IoT Hub serves its WebSockets on.
const PATH: &str = "/$iothub/websocket";

/// Service Bus's path, which IoT Hub serves too: uamqp (the Python service SDK's AMQP, with
/// `TransportType.AmqpOverWebsocket`) asks for `/$servicebus/websocket/`, trailing slash
/// included, whoever it talks to (its `wsio` resource name is fixed).
const SERVICE_BUS_PATHS: [&str; 2] = ["/$servicebus/websocket", "/$servicebus/websocket/"];

/// The subprotocols served, as the SDKs ask for them (compared exactly: axum matches the
/// requested names byte for byte).
const MQTT: &str = "mqtt";
const AMQP: &str = "AMQPWSB10";

/// What the route's handler needs: the hub and the signal that stops its connections.
#[derive(Debug, Clone)]
struct Ws {
    hub: IotHub,
    stop: watch::Receiver<bool>,
}

/// The WebSocket route, to merge into the HTTPS server's router; `stop` turning true closes
/// every connection it upgraded.
pub(crate) fn router(hub: IotHub, stop: watch::Receiver<bool>) -> Router {
    let [bus, bus_slash] = SERVICE_BUS_PATHS;
    Router::new()
        .route(PATH, get(upgrade))
        .route(bus, get(upgrade))
        .route(bus_slash, get(upgrade))
        .with_state(Ws { hub, stop })
}

/// What one WebSocket carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inside {
    Mqtt,
    Amqp,
}

/// The largest WebSocket message (and frame) a connection carrying `inside` takes: one packet
/// of the MQTT endpoint (the largest telemetry with its topic), or the largest message an AMQP
/// link takes with its properties (a client that writes a whole multi-frame transfer at once
/// still fits). Past it tungstenite fails the read and the connection ends.
fn max_message(hub: &IotHub, inside: Inside) -> usize {
    let config = hub.config();
    match inside {
        Inside::Mqtt => config
            .max_telemetry_size
            .saturating_add(crate::iothub::mqtt::PACKET_OVERHEAD),
        Inside::Amqp => {
            let overhead = usize::try_from(crate::iothub::amqp::MESSAGE_OVERHEAD).unwrap_or(0);
            let frame = usize::try_from(config.amqp_limits.max_frame_size).unwrap_or(usize::MAX);
            config
                .max_message_size
                .max(config.max_telemetry_size)
                .saturating_add(overhead)
                .max(frame)
        }
    }
}

/// `GET /$iothub/websocket`: the upgrade, for a subprotocol the hub serves.
async fn upgrade(
    State(ws): State<Ws>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let upgrade = upgrade.protocols([MQTT, AMQP]);
    let inside = match upgrade.selected_protocol().map(|p| p.as_bytes()) {
        Some(p) if p == MQTT.as_bytes() => Inside::Mqtt,
        Some(p) if p == AMQP.as_bytes() => Inside::Amqp,
        _ => {
            let asked: Vec<String> = upgrade
                .requested_protocols()
                .map(|p| cut(&String::from_utf8_lossy(p.as_bytes())).to_string())
                .collect();
            if let Some(left_out) = ws.hub.refusals().admit(peer.ip()) {
                tracing::info!(%peer, ?asked, left_out,
                    "iothub: WebSocket refused: no subprotocol the hub serves");
            }
            return (
                StatusCode::BAD_REQUEST,
                format!(
                    "the local IoT Hub serves WebSockets at {PATH} with the subprotocol {MQTT:?} \
                     or {AMQP:?} (Sec-WebSocket-Protocol); asked for: {asked:?} (see docs/iothub.md)"
                ),
            )
                .into_response();
        }
    };
    let max = max_message(&ws.hub, inside);
    upgrade
        .max_message_size(max)
        .max_frame_size(max)
        .on_failed_upgrade(move |e| {
            tracing::debug!(%peer, error = %e, "iothub: WebSocket upgrade failed");
        })
        .on_upgrade(move |socket| serve(ws, socket, peer, inside))
}

/// Hands the WebSocket's byte stream to the connection handler of the protocol inside.
async fn serve(ws: Ws, socket: WebSocket, peer: SocketAddr, inside: Inside) {
    tracing::debug!(%peer, ?inside, "iothub: WebSocket opened");
    let stream = byte_stream(socket);
    match inside {
        Inside::Mqtt => crate::iothub::mqtt::connection(ws.hub, stream, None, peer, ws.stop).await,
        Inside::Amqp => {
            let deadline = tokio::time::Instant::now() + ws.hub.config().amqp_limits.auth_timeout;
            crate::iothub::amqp::serve(ws.hub, stream, None, peer, deadline, ws.stop).await;
        }
    }
}

/// The bytes a WebSocket carries, read and written as a stream: each binary message read is
/// the next bytes of the stream, each write is sent as one binary message; a text message is
/// an error (the SDKs send only binary ones), pings and pongs are tungstenite's business, and
/// the peer's close ends the stream. Shutting the stream down sends the close.
fn byte_stream(
    socket: WebSocket,
) -> impl AsyncRead + AsyncWrite + std::fmt::Debug + Send + Unpin + 'static {
    let (sink, stream) = socket.split();
    let reader = StreamReader::new(stream.filter_map(|message| {
        future::ready(match message {
            Ok(Message::Binary(bytes)) => Some(Ok(bytes)),
            Ok(Message::Text(_)) => Some(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a text WebSocket message (MQTT and AMQP travel in binary ones)",
            ))),
            Ok(Message::Ping(_) | Message::Pong(_) | Message::Close(_)) => None,
            Err(e) => Some(Err(io::Error::other(e))),
        })
    }));
    let sink = sink
        .with(|bytes: Bytes| future::ready(Ok::<_, axum::Error>(Message::Binary(bytes))))
        // A function pointer, not the item: fe2o3-amqp wants a `Debug` stream, and only
        // pointers are.
        .sink_map_err(io::Error::other as fn(axum::Error) -> io::Error);
    tokio::io::join(reader, SinkWriter::new(CopyToBytes::new(sink)))
}
