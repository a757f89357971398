//! AMQP over WebSockets ([`crate::iothub::Transport::AmqpWs`]), as the official SDKs' `AmqpWs`
//! connects: on the TLS stream to the hub's HTTPS port, the WebSocket client handshake to
//! `wss://{hostname}/$iothub/websocket` with the subprotocol `AMQPWSB10` (IoT Hub's name for
//! the AMQP WebSocket binding), then the WebSocket's binary messages carry the AMQP bytes. The
//! AMQP connection inside is the one `connection.rs` makes over TCP: only this step differs.
//!
//! tungstenite does the handshake (it also fails it when the hub answers with another
//! subprotocol or none) and the framing; tokio-util's `StreamReader` and `SinkWriter` turn its
//! messages into an `AsyncRead + AsyncWrite`, as the local hub's side does
//! (`server/src/iothub/websocket.rs`).

use std::io;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt, future};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::error::{ProtocolError, SubProtocolError};
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::io::{CopyToBytes, SinkWriter, StreamReader};

use crate::iothub::options::DeviceOptions;
use crate::protocol::errors::Error;

/// The path IoT Hub serves WebSockets on.
pub(super) const PATH: &str = "/$iothub/websocket";

/// The subprotocol of AMQP over WebSockets, as IoT Hub and its SDKs name it.
pub(super) const SUBPROTOCOL: &str = "AMQPWSB10";

/// The query the SDKs add when the device does not authenticate with a certificate: the hub
/// then does not ask for one in the TLS handshake.
const QUERY: &str = "iothub-no-client-cert=true";

/// How much of a refusal's body goes into the error.
const BODY_SHOWN: usize = 300;

/// The URL of the upgrade request: the hub's name (the HTTP `Host`), not the address connected
/// to, as the SDKs send it.
fn url(options: &DeviceOptions) -> String {
    format!("wss://{}{PATH}?{QUERY}", options.hostname)
}

/// The WebSocket handshake on `stream` (TLS to the hub's HTTPS port), then the WebSocket as a
/// byte stream for the AMQP connection. Errors are [`Error::Connection`]s that say what the
/// hub answered: an HTTP status instead of the upgrade (with the start of its body), a missing
/// or other subprotocol, or a reply that is no HTTP at all (not a WebSocket endpoint).
pub(super) async fn connect<S>(
    options: &DeviceOptions,
    stream: S,
) -> Result<impl AsyncRead + AsyncWrite + std::fmt::Debug + Send + Unpin + 'static, Error>
where
    S: AsyncRead + AsyncWrite + std::fmt::Debug + Send + Unpin + 'static,
{
    let url = url(options);
    let mut request = url
        .as_str()
        .into_client_request()
        .map_err(|e| Error::InvalidArgument(format!("WebSocket URL {url:?}: {e}")))?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static(SUBPROTOCOL),
    );
    let (socket, _response) = tokio_tungstenite::client_async(request, stream)
        .await
        .map_err(|e| refused(options, &url, e))?;
    Ok(byte_stream(socket))
}

/// A failed handshake as a connection error that names the endpoint and what it answered.
fn refused(options: &DeviceOptions, url: &str, e: tungstenite::Error) -> Error {
    let at = format!(
        "the WebSocket upgrade to {url} (subprotocol {SUBPROTOCOL}) at {}:{}",
        options.connect_host(),
        options.port
    );
    let message = match &e {
        tungstenite::Error::Http(response) => {
            let body = response
                .body()
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            let body: String = body.trim().chars().take(BODY_SHOWN).collect();
            format!(
                "{at} was refused: HTTP {}{}{body}",
                response.status(),
                if body.is_empty() { "" } else { ": " }
            )
        }
        tungstenite::Error::Protocol(ProtocolError::SecWebSocketSubProtocolError(s)) => {
            let why = match s {
                SubProtocolError::NoSubProtocol => "the hub accepted no subprotocol",
                SubProtocolError::InvalidSubProtocol => "the hub chose another subprotocol",
                SubProtocolError::ServerSentSubProtocolNoneRequested => {
                    "the hub sent a subprotocol not asked for"
                }
            };
            format!("{at} failed: {why}")
        }
        tungstenite::Error::HttpFormat(_)
        | tungstenite::Error::Protocol(_)
        | tungstenite::Error::ConnectionClosed
        | tungstenite::Error::AlreadyClosed => {
            format!("{at} failed (is it the hub's HTTPS port?): {e}")
        }
        _ => format!("{at} failed: {e}"),
    };
    Error::connection_caused_by(message, e)
}

/// The bytes a WebSocket carries, read and written as a stream: each binary message read is
/// the next bytes of the stream, each write is sent as one binary message; a text message is
/// an error (AMQP travels in binary ones), pings and pongs are tungstenite's business, and the
/// peer's close ends the stream. Shutting the stream down sends the close.
fn byte_stream<S>(
    socket: tokio_tungstenite::WebSocketStream<S>,
) -> impl AsyncRead + AsyncWrite + std::fmt::Debug + Send + Unpin + 'static
where
    S: AsyncRead + AsyncWrite + std::fmt::Debug + Send + Unpin + 'static,
{
    let (sink, stream) = socket.split();
    // Function pointers, not closures: fe2o3-amqp wants a `Debug` stream, and only pointers
    // are.
    let read = stream.filter_map(read_message as fn(_) -> _);
    let sink = sink
        .with(binary as fn(Bytes) -> future::Ready<Result<Message, tungstenite::Error>>)
        .sink_map_err(io::Error::other as fn(tungstenite::Error) -> io::Error);
    tokio::io::join(
        StreamReader::new(read),
        SinkWriter::new(CopyToBytes::new(sink)),
    )
}

/// One message read: its bytes, nothing (control messages), or an error.
fn read_message(
    message: Result<Message, tungstenite::Error>,
) -> future::Ready<Option<Result<Bytes, io::Error>>> {
    future::ready(match message {
        Ok(Message::Binary(bytes)) => Some(Ok(bytes)),
        Ok(Message::Text(_)) => Some(Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a text WebSocket message (AMQP travels in binary ones)",
        ))),
        Ok(Message::Ping(_) | Message::Pong(_) | Message::Close(_) | Message::Frame(_)) => None,
        Err(e) => Some(Err(io::Error::other(e))),
    })
}

/// The bytes of one write, as one binary message.
fn binary(bytes: Bytes) -> future::Ready<Result<Message, tungstenite::Error>> {
    future::ready(Ok(Message::Binary(bytes)))
}

#[cfg(test)]
mod tests {
    // tungstenite's server callback returns its large error type: the signature is not ours.
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::result_large_err
    )]

    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};
    use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};

    use super::*;
    use crate::ErrorKind;

    fn options() -> DeviceOptions {
        DeviceOptions::from_connection_string(
            "HostName=myhub.azure-devices.net;DeviceId=dev1;SharedAccessKey=c2VjcmV0",
        )
        .unwrap()
        .with_transport(crate::iothub::Transport::AmqpWs)
    }

    #[tokio::test]
    async fn asks_for_the_hubs_path_and_subprotocol_and_carries_bytes_both_ways() {
        let (client, server) = duplex(64 * 1024);
        let hub = tokio::spawn(async move {
            let check = |request: &Request, mut response: Response| {
                assert_eq!(request.uri().path(), PATH);
                assert_eq!(request.uri().query(), Some(QUERY));
                assert_eq!(
                    request.headers().get("Host").unwrap(),
                    "myhub.azure-devices.net"
                );
                assert_eq!(
                    request.headers().get("Sec-WebSocket-Protocol").unwrap(),
                    SUBPROTOCOL
                );
                response.headers_mut().insert(
                    "Sec-WebSocket-Protocol",
                    HeaderValue::from_static(SUBPROTOCOL),
                );
                Ok(response)
            };
            let mut ws = tokio_tungstenite::accept_hdr_async(server, check)
                .await
                .unwrap();
            let got = ws.next().await.unwrap().unwrap();
            assert_eq!(
                got,
                Message::Binary(Bytes::from_static(b"AMQP\x00\x01\x00\x00"))
            );
            ws.send(Message::Ping(Bytes::from_static(b"p")))
                .await
                .unwrap();
            ws.send(Message::Binary(Bytes::from_static(b"AMQP")))
                .await
                .unwrap();
            ws.send(Message::Binary(Bytes::from_static(b"\x00\x01\x00\x00")))
                .await
                .unwrap();
            ws.close(None).await.unwrap();
            // Until the client's close answers ours.
            while ws.next().await.is_some() {}
        });
        let mut stream = connect(&options(), client).await.unwrap();
        stream.write_all(b"AMQP\x00\x01\x00\x00").await.unwrap();
        stream.flush().await.unwrap();
        let mut read = Vec::new();
        stream.read_to_end(&mut read).await.unwrap();
        assert_eq!(
            read, b"AMQP\x00\x01\x00\x00",
            "two messages, one stream; close is EOF"
        );
        hub.await.unwrap();
    }

    #[tokio::test]
    async fn a_refused_upgrade_says_the_status_and_the_hubs_reason() {
        let (client, mut server) = duplex(64 * 1024);
        tokio::spawn(async move {
            let mut head = vec![0; 4096];
            let _ = server.read(&mut head).await.unwrap();
            let body = "no subprotocol the hub serves";
            let reply = format!(
                "HTTP/1.1 400 Bad Request\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            server.write_all(reply.as_bytes()).await.unwrap();
        });
        let e = connect(&options(), client).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
        let text = e.to_string();
        assert!(text.contains("400"), "{text}");
        assert!(text.contains("no subprotocol the hub serves"), "{text}");
        assert!(text.contains("/$iothub/websocket"), "{text}");
    }

    #[tokio::test]
    async fn another_subprotocol_or_none_fails_the_handshake() {
        for chosen in [Some("mqtt"), None] {
            let (client, server) = duplex(64 * 1024);
            tokio::spawn(async move {
                let answer = move |_: &Request, mut response: Response| {
                    if let Some(p) = chosen {
                        response
                            .headers_mut()
                            .insert("Sec-WebSocket-Protocol", HeaderValue::from_static(p));
                    }
                    Ok(response)
                };
                let _ = tokio_tungstenite::accept_hdr_async(server, answer).await;
            });
            let e = connect(&options(), client).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
            assert!(e.to_string().contains("subprotocol"), "{chosen:?}: {e}");
        }
    }

    #[tokio::test]
    async fn a_peer_that_is_not_http_fails_at_once() {
        let (client, mut server) = duplex(64 * 1024);
        tokio::spawn(async move {
            let mut head = vec![0; 4096];
            let _ = server.read(&mut head).await.unwrap();
            // What an AMQP endpoint answers to bytes that are not an AMQP header.
            server.write_all(b"AMQP\x00\x01\x00\x00").await.unwrap();
        });
        let e = connect(&options(), client).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
        assert!(e.to_string().contains("HTTPS port"), "{e}");
    }
}
