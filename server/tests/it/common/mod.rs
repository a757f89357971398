//! The helpers of the server's integration tests, once for every file. Here: the harness of
//! the conformance tests, a server on one of two backends (the embedded broker, or Mosquitto
//! with the store attached), and a raw MQTT5 client (rumqttc directly, not the mqstate client)
//! that sends hand-built requests and collects everything it receives. In the modules: the
//! hub's HTTPS and AMQP clients (`hub`), the binary's log (`logs`), and a process of its own
//! for a test that measures its process (`alone`).

#![allow(dead_code)]

#[macro_use]
pub mod alone;
pub mod hub;
pub mod logs;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use mqstate::Hlc;
use mqstate::protocol::topics::{self, REQUEST_TOPIC};
use mqstate_server::{LocalServer, ServerConfig, ServerError};
use mqstate_testing::{self as testing, TestStore};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, Publish, PublishProperties, SubscribeReasonCode};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The message of the data dir error that `result` must be.
pub fn data_dir_error(result: Result<LocalServer, ServerError>) -> String {
    match result {
        Err(ServerError::DataDir(e)) => e.to_string(),
        Err(other) => panic!("expected a data dir error, got {other}"),
        Ok(_) => panic!("the server started"),
    }
}

/// How long to wait for anything that must arrive (generous: a slow CI machine is not a
/// failure; only a missing message is).
pub const WAIT: Duration = Duration::from_secs(10);

pub use mqstate_testing::Backend;

/// A running server on one backend (see [`TestStore`]), with raw clients.
pub struct Harness {
    pub store: TestStore,
}

impl Harness {
    /// Starts the server on `backend` with `config` (its broker choice is overridden), or
    /// returns `None` when the test must be skipped (Mosquitto not installed and not required).
    pub async fn start_with(backend: Backend, test: &str, config: ServerConfig) -> Option<Harness> {
        Some(Harness {
            store: TestStore::start_with(backend, test, config).await?,
        })
    }

    pub async fn start(backend: Backend, test: &str) -> Option<Harness> {
        Harness::start_with(backend, test, ServerConfig::default()).await
    }

    /// A connected raw client with this id, subscribed to its response topic.
    pub async fn client(&self, id: &str) -> RawClient {
        RawClient::connect(self.store.host(), self.store.port(), id).await
    }

    /// Stops the store and the broker (Mosquitto is killed).
    pub async fn stop(self) {
        self.store.shutdown().await;
    }
}

/// Builds a request payload as docs/protocol.md section 2 writes it: `*N` then `$len` + bytes.
pub fn resp(parts: &[&[u8]]) -> Bytes {
    let mut out = format!("*{}\r\n", parts.len()).into_bytes();
    for p in parts {
        out.extend_from_slice(format!("${}\r\n", p.len()).as_bytes());
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
    Bytes::from(out)
}

/// The current wall clock in Unix milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A client `__ts` for now.
pub fn ts_now(node: &str) -> String {
    Hlc::new(now_ms(), 0, node).to_string()
}

/// A 16-byte correlation id, unique in this process.
pub fn new_correlation() -> Bytes {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut v = Vec::with_capacity(16);
    v.extend_from_slice(&u64::from(std::process::id()).to_be_bytes());
    v.extend_from_slice(&n.to_be_bytes());
    Bytes::from(v)
}

/// How a request is sent. Default: the client's response topic, a fresh correlation id,
/// `__ts` = now, `__srcId` = the client id, `__protVer` = 1.0, no `__ft`.
#[derive(Debug, Clone, Default)]
pub struct Req {
    /// `Some(None)`: no `__ts` at all; `Some(Some(x))`: this text.
    pub ts: Option<Option<String>>,
    pub ft: Option<String>,
    /// `Some(None)`: no response topic.
    pub response_topic: Option<Option<String>>,
    /// `Some(None)`: no correlation data.
    pub correlation: Option<Option<Bytes>>,
    pub no_src_id: bool,
}

impl Req {
    pub fn ft(token: impl Into<String>) -> Req {
        Req {
            ft: Some(token.into()),
            ..Req::default()
        }
    }
    pub fn no_ts() -> Req {
        Req {
            ts: Some(None),
            ..Req::default()
        }
    }
    pub fn ts(text: impl Into<String>) -> Req {
        Req {
            ts: Some(Some(text.into())),
            ..Req::default()
        }
    }
}

/// A response as received.
#[derive(Debug, Clone)]
pub struct Resp {
    pub topic: String,
    pub payload: Bytes,
    pub correlation: Option<Bytes>,
    pub content_type: Option<String>,
    pub user_properties: Vec<(String, String)>,
    pub qos: QoS,
}

impl Resp {
    fn from_publish(p: Publish) -> Resp {
        let props = p.properties.unwrap_or_default();
        Resp {
            topic: String::from_utf8_lossy(&p.topic).into_owned(),
            payload: p.payload,
            correlation: props.correlation_data,
            content_type: props.content_type,
            user_properties: props.user_properties,
            qos: p.qos,
        }
    }

    /// All values of a user property.
    pub fn props(&self, name: &str) -> Vec<&str> {
        self.user_properties
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The single value of a user property (panics if repeated).
    pub fn prop(&self, name: &str) -> Option<&str> {
        let values = self.props(name);
        assert!(values.len() <= 1, "{name} repeated: {values:?}");
        values.first().copied()
    }

    /// `__ts`, parsed.
    pub fn ts(&self) -> Option<Hlc> {
        self.prop("__ts")
            .map(|t| t.parse().expect("__ts parses as an HLC"))
    }

    /// Checks the properties every response carries and that `__ts` is there or not.
    #[track_caller]
    pub fn check(&self, payload: &[u8], with_ts: bool) -> Option<Hlc> {
        assert_eq!(
            self.payload,
            Bytes::copy_from_slice(payload),
            "reply payload: got {:?}",
            String::from_utf8_lossy(&self.payload)
        );
        assert_eq!(self.prop("__stat"), Some("200"), "__stat");
        assert_eq!(self.prop("__protVer"), Some("1.0"), "__protVer");
        assert_eq!(
            self.content_type.as_deref(),
            Some("application/octet-stream")
        );
        assert_eq!(self.qos, QoS::AtLeastOnce);
        let ts = self.ts();
        assert_eq!(
            ts.is_some(),
            with_ts,
            "__ts presence: {:?}",
            self.user_properties
        );
        ts
    }
}

/// A raw MQTT5 client: everything it receives goes into one queue.
pub struct RawClient {
    pub id: String,
    pub response_topic: String,
    client: AsyncClient,
    incoming: mpsc::UnboundedReceiver<Publish>,
    subacks: mpsc::UnboundedReceiver<Vec<SubscribeReasonCode>>,
    disconnected: mpsc::UnboundedReceiver<()>,
    /// Messages received while waiting for another one.
    stash: Vec<Publish>,
    task: JoinHandle<()>,
}

impl RawClient {
    pub async fn connect(host: &str, port: u16, id: &str) -> RawClient {
        let mut options = MqttOptions::new(id, host, port);
        options
            .set_keep_alive(Duration::from_secs(30))
            .set_clean_start(true)
            .set_max_packet_size(Some(testing::MOSQUITTO_MAX_PACKET_SIZE));
        let mut network = options.network_options();
        network.set_tcp_nodelay(true);
        options.set_network_options(network);
        let (client, mut eventloop) = AsyncClient::new(options, 256);
        let (in_tx, incoming) = mpsc::unbounded_channel();
        let (sub_tx, subacks) = mpsc::unbounded_channel();
        let (dis_tx, disconnected) = mpsc::unbounded_channel();
        let (conn_tx, mut connected) = mpsc::unbounded_channel::<Result<(), String>>();
        let task = tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        let _ = in_tx.send(p);
                    }
                    Ok(Event::Incoming(Packet::SubAck(s))) => {
                        let _ = sub_tx.send(s.return_codes);
                    }
                    Ok(Event::Incoming(Packet::ConnAck(_))) => {
                        let _ = conn_tx.send(Ok(()));
                    }
                    Ok(Event::Incoming(Packet::Disconnect(_))) => {
                        let _ = dis_tx.send(());
                    }
                    Ok(_) => {}
                    Err(e) => {
                        let _ = conn_tx.send(Err(e.to_string()));
                        let _ = dis_tx.send(());
                        // Do not reconnect: a test that wants a new connection makes one.
                        break;
                    }
                }
            }
        });
        tokio::time::timeout(WAIT, connected.recv())
            .await
            .expect("CONNACK in time")
            .expect("connection outcome")
            .expect("connected");
        let response_topic = topics::response_topic(id);
        let mut c = RawClient {
            id: id.to_owned(),
            response_topic: response_topic.clone(),
            client,
            incoming,
            subacks,
            disconnected,
            stash: Vec::new(),
            task,
        };
        c.subscribe(&response_topic).await;
        c
    }

    /// Subscribes (QoS 1) and waits for the SUBACK.
    pub async fn subscribe(&mut self, filter: &str) {
        self.client
            .subscribe(filter, QoS::AtLeastOnce)
            .await
            .expect("subscribe queued");
        let codes = tokio::time::timeout(WAIT, self.subacks.recv())
            .await
            .expect("SUBACK in time")
            .expect("SUBACK");
        assert!(
            codes
                .iter()
                .all(|c| matches!(c, SubscribeReasonCode::Success(_))),
            "{codes:?}"
        );
    }

    /// Subscribes to this client's notification topics.
    pub async fn subscribe_notifications(&mut self) {
        let filter = topics::notification_filter(&self.id);
        self.subscribe(&filter).await;
    }

    /// Publishes a request; returns its correlation data (if any was sent).
    pub async fn send(&self, payload: Bytes, req: &Req) -> Option<Bytes> {
        let correlation = match &req.correlation {
            Some(c) => c.clone(),
            None => Some(new_correlation()),
        };
        let response_topic = match &req.response_topic {
            Some(t) => t.clone(),
            None => Some(self.response_topic.clone()),
        };
        let mut user_properties = Vec::new();
        if !req.no_src_id {
            user_properties.push(("__srcId".to_owned(), self.id.clone()));
        }
        user_properties.push(("__protVer".to_owned(), "1.0".to_owned()));
        match &req.ts {
            Some(None) => {}
            Some(Some(t)) => user_properties.push(("__ts".to_owned(), t.clone())),
            None => user_properties.push(("__ts".to_owned(), ts_now(&self.id))),
        }
        if let Some(ft) = &req.ft {
            user_properties.push(("__ft".to_owned(), ft.clone()));
        }
        let properties = PublishProperties {
            payload_format_indicator: Some(0),
            message_expiry_interval: Some(10),
            response_topic,
            correlation_data: correlation.clone(),
            user_properties,
            content_type: Some("application/octet-stream".to_owned()),
            ..PublishProperties::default()
        };
        self.client
            .publish_with_properties(REQUEST_TOPIC, QoS::AtLeastOnce, false, payload, properties)
            .await
            .expect("publish queued");
        correlation
    }

    /// Sends a request and waits for the response with its correlation data.
    pub async fn request(&mut self, payload: Bytes, req: &Req) -> Resp {
        let correlation = self
            .send(payload, req)
            .await
            .expect("request has correlation data");
        let topic = self.response_topic.clone();
        let resp = self
            .recv_where(WAIT, |p| {
                p.topic == topic.as_bytes()
                    && p.properties
                        .as_ref()
                        .and_then(|pp| pp.correlation_data.as_ref())
                        == Some(&correlation)
            })
            .await
            .expect("a response in time");
        assert_eq!(resp.correlation.as_ref(), Some(&correlation));
        resp
    }

    /// Shorthand: request with default properties.
    pub async fn call(&mut self, payload: Bytes) -> Resp {
        self.request(payload, &Req::default()).await
    }

    /// The first message (received before or within `timeout`) that matches.
    pub async fn recv_where(
        &mut self,
        timeout: Duration,
        mut pred: impl FnMut(&Publish) -> bool,
    ) -> Option<Resp> {
        if let Some(i) = self.stash.iter().position(&mut pred) {
            return Some(Resp::from_publish(self.stash.remove(i)));
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.incoming.recv()).await {
                Ok(Some(p)) if pred(&p) => return Some(Resp::from_publish(p)),
                Ok(Some(p)) => self.stash.push(p),
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// The next notification for `key` (within `timeout`).
    pub async fn notification(&mut self, key: &[u8], timeout: Duration) -> Option<Resp> {
        let topic = topics::notification_topic(&self.id, key);
        self.recv_where(timeout, |p| p.topic == topic.as_bytes())
            .await
    }

    /// Whether the broker closed this connection (within `timeout`).
    pub async fn disconnected_within(&mut self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.disconnected.recv())
            .await
            .is_ok()
    }

    /// Publishes raw bytes on any topic (for spying or abuse tests).
    pub async fn publish_raw(&self, topic: &str, payload: Bytes, properties: PublishProperties) {
        self.client
            .publish_with_properties(topic, QoS::AtLeastOnce, false, payload, properties)
            .await
            .expect("publish queued");
    }

    /// Sends DISCONNECT and stops the event loop.
    pub async fn disconnect(mut self) {
        let _ = self.client.disconnect().await;
        // The event loop ends when the connection is closed.
        let _ = tokio::time::timeout(Duration::from_secs(5), self.disconnected.recv()).await;
    }
}

impl Drop for RawClient {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Defines one `#[tokio::test]` per backend for a scenario `async fn name(h: &Harness)`.
#[macro_export]
macro_rules! both_backends {
    ($name:ident) => {
        $crate::both_backends!($name, mqstate_server::ServerConfig::default());
    };
    ($name:ident, $config:expr) => {
        mod $name {
            // For the names `$config` uses, from the module that calls the macro.
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                let h = $crate::common::Harness::start_with(
                    $crate::common::Backend::Embedded,
                    concat!(stringify!($name), "::embedded"),
                    $config,
                )
                .await
                .unwrap();
                super::$name(&h).await;
                h.stop().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mosquitto() {
                let Some(h) = $crate::common::Harness::start_with(
                    $crate::common::Backend::Mosquitto,
                    concat!(stringify!($name), "::mosquitto"),
                    $config,
                )
                .await
                else {
                    return;
                };
                super::$name(&h).await;
                h.stop().await;
            }
        }
    };
}
