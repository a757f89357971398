//! Clients of the local hub's TLS endpoints as the tests drive them (one definition for the
//! files that each had their own copy): an HTTPS client for the REST and device HTTPS APIs,
//! the TLS stream under an AMQP connection, a WebSocket on the HTTPS port as a byte stream
//! (for MQTT and AMQP over WebSockets), the `$cbs` put-token request, and the wait for a
//! message's feedback.

use std::net::SocketAddr;

use bytes::Bytes;
use fe2o3_amqp::types::primitives::Value as Value_;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use mqstate_server::iothub::IotHub;
use rustls::pki_types::ServerName;
use serde_json::Value;

/// The API version every call of the SDKs carries.
pub const API: &str = "api-version=2021-04-12";
/// Device keys (base64) the SDK-like tests register.
pub const KEY1: &str = "AAECAwQFBgcICQoLDA0ODw==";
pub const KEY2: &str = "EBESExQVFhcYGRobHB0eHw==";

/// An HTTPS client of the hub that trusts its generated certificate; one connection per call.
pub struct Https {
    addr: SocketAddr,
    tls: tokio_rustls::TlsConnector,
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn error_code(&self) -> String {
        error_code(&self.json())
    }
}

/// The IoT Hub error code in an error body's `Message` ("ErrorCode:{code};{text}"), as Node
/// parses it.
pub fn error_code(body: &Value) -> String {
    let message = body["Message"].as_str().unwrap_or_default();
    message
        .split(';')
        .next()
        .and_then(|p| p.split(':').nth(1))
        .unwrap_or_default()
        .to_owned()
}

impl Https {
    pub fn new(hub: &IotHub) -> Https {
        let addr = hub.endpoints().https_endpoint.expect("the HTTPS endpoint");
        let pem = hub.ca_certificate_pem().expect("a generated certificate");
        let connector = mqstate_testing::tls::connector(&pem);
        Https {
            addr,
            tls: connector,
        }
    }

    /// A client that presents the TLS client certificate of `config` (an X.509 device).
    pub fn with_config(hub: &IotHub, config: rustls::ClientConfig) -> Https {
        let addr = hub.endpoints().https_endpoint.expect("the HTTPS endpoint");
        Https {
            addr,
            tls: tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)),
        }
    }

    /// Sends one request with `Host: localhost` and `headers` (in that order).
    pub async fn call(
        &self,
        method: Method,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        let tcp = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let stream = self.tls.connect(name, tcp).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let mut request = Request::builder()
            .method(method)
            .uri(path_and_query)
            .header(hyper::header::HOST, "localhost");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = sender
            .send_request(
                request
                    .body(Full::new(Bytes::copy_from_slice(body)))
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Reply {
            status,
            headers,
            body,
        }
    }
}

/// A TLS connection to the hub's AMQP endpoint, trusting the hub's certificate (Nagle off, so
/// that small frames are not held back).
pub async fn amqp_tls(hub: &IotHub) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let addr = hub.endpoints().amqp_endpoint.expect("the AMQP endpoint");
    let pem = hub.ca_certificate_pem().expect("a generated certificate");
    let connector = mqstate_testing::tls::connector(&pem);
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    connector
        .connect(mqstate_testing::tls::localhost(), tcp)
        .await
        .unwrap()
}

/// A `$cbs` put-token request for `token`, as the SDKs send it: message id `id` (the reply's
/// correlation id) and `audience` as its `name` (the service SDKs give the hub's URL, the
/// device SDKs the token's `sr`).
pub fn put_token_request(
    token: &str,
    id: fe2o3_amqp::types::messaging::MessageId,
    audience: &str,
) -> fe2o3_amqp::types::messaging::Message<fe2o3_amqp::types::messaging::AmqpValue<Value_>> {
    use fe2o3_amqp::types::messaging::{ApplicationProperties, Message, Properties};
    use fe2o3_amqp::types::primitives::SimpleValue;
    Message::builder()
        .properties(
            Properties::builder()
                .message_id(id)
                .to("$cbs")
                .reply_to("cbs")
                .build(),
        )
        .application_properties(
            ApplicationProperties::builder()
                .insert("operation", SimpleValue::String("put-token".into()))
                .insert(
                    "type",
                    SimpleValue::String("servicebus.windows.net:sastoken".into()),
                )
                .insert("name", SimpleValue::String(audience.to_owned()))
                .build(),
        )
        .value(Value_::String(token.to_owned()))
        .build()
}

/// A WebSocket to the hub's HTTPS port at `path` (with its query) asking for `subprotocol`,
/// over TLS trusting the hub's certificate, as the SDKs open it. A refused upgrade is the
/// error (`tungstenite::Error::Http` holds the response).
pub async fn websocket_frames(
    hub: &IotHub,
    path: &str,
    subprotocol: Option<&str>,
) -> Result<
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
    tokio_tungstenite::tungstenite::Error,
> {
    let pem = hub.ca_certificate_pem().expect("a generated certificate");
    websocket_frames_with(
        hub,
        mqstate_testing::tls::connector(&pem),
        path,
        subprotocol,
    )
    .await
}

/// [`websocket_frames`] over the TLS of `tls` (one that presents a client certificate).
pub async fn websocket_frames_with(
    hub: &IotHub,
    tls: tokio_rustls::TlsConnector,
    path: &str,
    subprotocol: Option<&str>,
) -> Result<
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
    tokio_tungstenite::tungstenite::Error,
> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let addr = hub.endpoints().https_endpoint.expect("the HTTPS endpoint");
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let tls = tls
        .connect(mqstate_testing::tls::localhost(), tcp)
        .await
        .unwrap();
    let mut request = format!("wss://localhost{path}").into_client_request()?;
    if let Some(protocol) = subprotocol {
        request
            .headers_mut()
            .insert("Sec-WebSocket-Protocol", protocol.parse().unwrap());
    }
    let (socket, _response) = tokio_tungstenite::client_async(request, tls).await?;
    Ok(socket)
}

/// [`websocket_frames`], its binary messages as a byte stream (see [`byte_stream`]).
pub async fn websocket(
    hub: &IotHub,
    path: &str,
    subprotocol: Option<&str>,
) -> Result<
    impl tokio::io::AsyncRead + tokio::io::AsyncWrite + std::fmt::Debug + Send + Unpin + 'static,
    tokio_tungstenite::tungstenite::Error,
> {
    Ok(byte_stream(websocket_frames(hub, path, subprotocol).await?))
}

/// A WebSocket's binary messages as a byte stream (tokio-util's `StreamReader` and
/// `SinkWriter`, as the hub reads them; a write is sent on flush).
pub fn byte_stream<S>(
    socket: tokio_tungstenite::WebSocketStream<S>,
) -> impl tokio::io::AsyncRead + tokio::io::AsyncWrite + std::fmt::Debug + Send + Unpin + 'static
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + std::fmt::Debug + Send + Unpin + 'static,
{
    use futures_util::{SinkExt, StreamExt, future};
    use tokio_tungstenite::tungstenite::Message;
    type WsError = tokio_tungstenite::tungstenite::Error;
    let (sink, stream) = socket.split();
    let reader = tokio_util::io::StreamReader::new(stream.filter_map(|m| {
        future::ready(match m {
            Ok(Message::Binary(b)) => Some(Ok(b)),
            Ok(_) => None,
            Err(e) => Some(Err(std::io::Error::other(e))),
        })
    }));
    let sink = sink
        .with(|b: Bytes| future::ready(Ok::<_, WsError>(Message::Binary(b))))
        .sink_map_err(std::io::Error::other as fn(WsError) -> std::io::Error);
    let writer = tokio_util::io::SinkWriter::new(tokio_util::io::CopyToBytes::new(sink));
    tokio::io::join(reader, writer)
}

pub use mqstate_testing::iothub::feedback;
