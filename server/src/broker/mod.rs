//! The embedded MQTT5 broker: the `mqtt5` crate's broker (pinned), started in-process on a
//! loopback (or given) address.
//!
//! Configuration: in-memory storage with persistence on (sessions survive a reconnect, so a
//! client connecting with clean start off gets "session present"), `$SYS` topics off, a
//! configurable maximum packet size, anonymous access unless [`BrokerSecurity`] brings access
//! control (which the admission gate of `admission` then wraps). Connects and
//! disconnects are reported on a channel ([`BrokerEvent`]) so that the state store can drop the KEYNOTIFY
//! registrations of clients that went away.
//!
//! The broker adds a user property `x-mqtt-client-id` (the sender's real client id, replacing
//! any that the client sent itself) to every message it forwards; the state store uses it
//! as the authoritative client id.

pub(crate) mod admission;
mod error;
mod implicit_notify;
pub(crate) mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use mqtt5::broker::config::StorageBackend;
use mqtt5::broker::router::MessageRouter;
use mqtt5::broker::{
    BrokerConfig, BrokerEventHandler, ClientConnectEvent, ClientDisconnectEvent, MqttBroker,
    StorageConfig,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use admission::{AdmissionGate, GatedAuth};
pub use error::BrokerError;
pub use implicit_notify::ImplicitNotify;
use tls::{RunningTlsListener, TlsListener};

/// The user property the embedded broker adds to forwarded messages: the sender's client id.
pub(crate) const CLIENT_ID_PROPERTY: &str = "x-mqtt-client-id";

/// A connection event reported by the embedded broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerEvent {
    /// A client connected (a takeover reports the new connection before the old one's end).
    Connected(String),
    /// A client's connection ended.
    Disconnected(String),
}

/// Settings of the embedded broker.
#[derive(Debug, Clone)]
pub struct EmbeddedBrokerConfig {
    /// Where to listen (port 0: a free port chosen by the OS).
    pub bind: SocketAddr,
    /// The largest MQTT packet accepted or sent, in bytes.
    pub max_packet_size: usize,
}

/// TLS and access control of the embedded broker (default: neither).
#[derive(Debug, Clone, Default)]
pub struct BrokerSecurity {
    /// A TLS listener with these settings, on this address.
    pub tls: Option<(crate::security::TlsSettings, SocketAddr)>,
    /// Authentication and authorization of every client.
    pub access: Option<Arc<crate::security::AccessControl>>,
    /// The most subscriptions one client may hold (0, the default here: no limit; the local
    /// server passes [`crate::security::SecurityConfig::max_subscriptions_per_client`]).
    pub max_subscriptions_per_client: usize,
}

/// Closes a client's connection on the embedded broker (its session survives; the broker
/// sends no DISCONNECT packet, the TCP connection just ends).
#[derive(Clone)]
pub(crate) struct Disconnector {
    router: Arc<MessageRouter>,
}

impl std::fmt::Debug for Disconnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Disconnector").finish_non_exhaustive()
    }
}

impl Disconnector {
    /// Disconnects `client_id` (in the background; returns at once).
    pub fn disconnect(&self, client_id: &str) {
        let router = self.router.clone();
        let client_id = client_id.to_owned();
        tokio::spawn(async move {
            router.disconnect_client(&client_id).await;
            tracing::debug!(client_id, "client disconnected");
        });
    }
}

/// A running embedded broker; dropping it stops it.
pub struct EmbeddedBroker {
    addr: SocketAddr,
    tls_addr: Option<SocketAddr>,
    router: Arc<MessageRouter>,
    shutdown: Option<mqtt5::broker::server::BrokerShutdownHandle>,
    task: Option<JoinHandle<()>>,
    gate: Option<AdmissionGate>,
    tls: Option<RunningTlsListener>,
}

impl std::fmt::Debug for EmbeddedBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedBroker")
            .field("addr", &self.addr)
            .field("tls_addr", &self.tls_addr)
            .field("running", &self.shutdown.is_some())
            .finish()
    }
}

struct EventForwarder {
    events: mpsc::UnboundedSender<BrokerEvent>,
}

impl BrokerEventHandler for EventForwarder {
    fn on_client_connect<'a>(
        &'a self,
        event: ClientConnectEvent,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        // The receiver goes away only when the store stops; events are moot then.
        let _ = self
            .events
            .send(BrokerEvent::Connected(event.client_id.to_string()));
        Box::pin(async {})
    }

    fn on_client_disconnect<'a>(
        &'a self,
        event: ClientDisconnectEvent,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        let _ = self
            .events
            .send(BrokerEvent::Disconnected(event.client_id.to_string()));
        Box::pin(async {})
    }
}

impl EmbeddedBroker {
    /// Binds and starts the broker; returns once it accepts connections. Connection events
    /// go to `events`.
    pub async fn start(
        config: &EmbeddedBrokerConfig,
        events: mpsc::UnboundedSender<BrokerEvent>,
    ) -> Result<EmbeddedBroker, BrokerError> {
        EmbeddedBroker::start_secured(config, &BrokerSecurity::default(), events, None).await
    }

    /// Like [`EmbeddedBroker::start`]; with `store_client_id`, every other client's CONNECT is
    /// held until the gate ([`EmbeddedBroker::admission_gate`]) opens, once the store has
    /// subscribed (see `admission`).
    pub async fn start_gated(
        config: &EmbeddedBrokerConfig,
        events: mpsc::UnboundedSender<BrokerEvent>,
        store_client_id: Option<String>,
    ) -> Result<EmbeddedBroker, BrokerError> {
        EmbeddedBroker::start_secured(config, &BrokerSecurity::default(), events, store_client_id)
            .await
    }

    /// [`EmbeddedBroker::start`], keeping sessions (subscriptions, queued and in-flight QoS 1
    /// messages, retained messages) in files under `session_dir`, so that clients with clean
    /// start off find their session after a server restart. The `mqtt5` file backend locks
    /// the directory and group-commits session changes to a log.
    pub async fn start_with_sessions(
        config: &EmbeddedBrokerConfig,
        events: mpsc::UnboundedSender<BrokerEvent>,
        session_dir: Option<&std::path::Path>,
    ) -> Result<EmbeddedBroker, BrokerError> {
        let security = BrokerSecurity::default();
        EmbeddedBroker::start_full(config, &security, events, None, session_dir).await
    }

    /// [`EmbeddedBroker::start_gated`] with a TLS listener and/or access control (see
    /// [`crate::security`]). The admission gate wraps the access control: a held client is
    /// authenticated once the gate opens, and the store's own CONNECT passes the gate at once
    /// (it still authenticates, with its own credentials).
    pub async fn start_secured(
        config: &EmbeddedBrokerConfig,
        security: &BrokerSecurity,
        events: mpsc::UnboundedSender<BrokerEvent>,
        store_client_id: Option<String>,
    ) -> Result<EmbeddedBroker, BrokerError> {
        EmbeddedBroker::start_full(config, security, events, store_client_id, None).await
    }

    /// Everything at once (what `mqstate serve` runs): security as in
    /// [`EmbeddedBroker::start_secured`], the admission gate as in
    /// [`EmbeddedBroker::start_gated`] and the session dir of
    /// [`EmbeddedBroker::start_with_sessions`] (`--data-dir`).
    pub async fn start_full(
        config: &EmbeddedBrokerConfig,
        security: &BrokerSecurity,
        events: mpsc::UnboundedSender<BrokerEvent>,
        store_client_id: Option<String>,
        session_dir: Option<&std::path::Path>,
    ) -> Result<EmbeddedBroker, BrokerError> {
        // Persistence on: without it the broker grants no session expiry at all. Memory
        // storage unless a session dir is given. Offline queues hold a few maximum-size
        // messages at least; expired sessions are swept every minute.
        let storage = match session_dir {
            Some(dir) => StorageConfig::default()
                .with_backend(StorageBackend::File)
                .with_base_dir(dir.to_owned()),
            None => StorageConfig::default().with_backend(StorageBackend::Memory),
        };
        let storage = storage
            .with_persistence(true)
            .with_max_queued_bytes_per_client(
                config.max_packet_size.saturating_mul(8).max(64 << 20),
            )
            .with_cleanup_interval(Duration::from_secs(60));
        let broker_config = BrokerConfig::default()
            .with_bind_addresses(vec![config.bind])
            .with_max_packet_size(config.max_packet_size)
            .with_storage(storage)
            .with_sys_topics_enabled(false)
            .with_max_subscriptions_per_client(security.max_subscriptions_per_client)
            .with_event_handler(Arc::new(EventForwarder { events }));
        // TLS is terminated by mqstate, not by the broker (see crate::broker::tls).
        let tls_listener = match &security.tls {
            Some((tls, addr)) => Some(TlsListener::bind(tls, *addr).await?),
            None => None,
        };
        let handler_config = broker_config.clone();
        let mut broker = MqttBroker::with_config(broker_config)
            .await
            .map_err(|source| BrokerError::Start {
                bind: config.bind,
                sessions: session_dir.map(ToOwned::to_owned),
                source,
            })?;
        if let Some(access) = &security.access {
            broker = broker.with_auth_provider(access.clone());
        }
        // The gate wraps whichever provider is in place now: the access control, or the
        // broker's default (anonymous) one.
        let mut gate = None;
        if let Some(store) = store_client_id {
            let (gated, opener) = GatedAuth::new(broker.auth_provider(), store);
            broker = broker.with_auth_provider(Arc::new(gated));
            gate = Some(opener);
        }
        let tls_addr = tls_listener
            .as_ref()
            .map(TlsListener::local_addr)
            .transpose()?;
        let tls = tls_listener.map(|l| l.start(&broker, handler_config));
        let addr = broker.local_addr().ok_or(BrokerError::NoAddress)?;
        let shutdown = broker.shutdown_handle();
        let router = broker.router();
        let mut ready = broker.ready_receiver();
        let task = tokio::spawn(async move {
            if let Err(e) = broker.run().await {
                tracing::error!(error = %e, "embedded broker stopped with an error");
            }
        });
        // Ready within a few seconds, or something is wrong.
        let wait = async {
            while !*ready.borrow_and_update() {
                if ready.changed().await.is_err() {
                    return false;
                }
            }
            true
        };
        match tokio::time::timeout(Duration::from_secs(10), wait).await {
            Ok(true) => {}
            _ => {
                shutdown.shutdown();
                drop(tls);
                return Err(BrokerError::NotReady);
            }
        }
        tracing::info!(%addr, "embedded MQTT5 broker listening");
        if let Some(tls_addr) = tls_addr {
            tracing::info!(%tls_addr, "embedded MQTT5 broker listening (TLS)");
        }
        Ok(EmbeddedBroker {
            addr,
            tls_addr,
            router,
            shutdown: Some(shutdown),
            task: Some(task),
            gate,
            tls,
        })
    }

    /// The gate that holds other clients' CONNECTs until the store is ready (`None` without
    /// a `store_client_id`, see [`EmbeddedBroker::start_gated`]).
    pub fn admission_gate(&self) -> Option<&AdmissionGate> {
        self.gate.as_ref()
    }

    /// A handle that disconnects clients by id.
    pub(crate) fn disconnector(&self) -> Disconnector {
        Disconnector {
            router: self.router.clone(),
        }
    }

    /// A handle that delivers KEYNOTIFY clients' notifications without a subscription of
    /// their own (see `implicit_notify`).
    pub fn implicit_notify(&self) -> ImplicitNotify {
        ImplicitNotify::new(self.router.clone())
    }

    /// The address the broker listens on (with the actual port).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address of the TLS listener, when there is one.
    pub fn tls_local_addr(&self) -> Option<SocketAddr> {
        self.tls_addr
    }

    /// Stops the broker and waits (a few seconds at most) for it to finish.
    pub async fn shutdown(mut self) {
        if let Some(tls) = self.tls.take() {
            tls.stop();
        }
        if let Some(s) = self.shutdown.take() {
            s.shutdown();
        }
        if let Some(task) = self.task.take()
            && tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_err()
        {
            tracing::warn!("embedded broker did not stop within 5 s");
        }
    }
}

impl Drop for EmbeddedBroker {
    fn drop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            s.shutdown();
        }
    }
}
