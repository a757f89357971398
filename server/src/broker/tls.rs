//! The embedded broker's TLS listener, run by mqstate instead of by the `mqtt5` crate.
//!
//! `mqtt5` (0.49) performs each TLS handshake inside its accept loop, with no timeout: one
//! TCP connection that never sends a ClientHello stops every other TLS client from
//! connecting until it closes (docs/security.md, "One peer cannot stall the others"). So
//! mqstate accepts TLS connections itself: every handshake runs in a task of its own and is
//! abandoned after [`HANDSHAKE_TIMEOUT`]; a completed handshake hands the stream to the
//! broker's own per-connection handler, exactly as the broker's loop would, so
//! authentication, client certificates and everything after the handshake stay the broker's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mqtt5::broker::client_handler::ClientHandler;
use mqtt5::broker::tls_acceptor::{TlsAcceptorConfig, accept_tls_connection};
use mqtt5::broker::transport::BrokerTransport;
use mqtt5::broker::{BrokerConfig, MqttBroker};
use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::error::BrokerError;
use crate::config_error::ConfigError;
use crate::security::TlsSettings;

/// How long a client has to complete its TLS handshake.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A TLS listener bound and configured, not yet accepting (the broker it hands connections
/// to must exist first, see [`TlsListener::start`]).
pub(crate) struct TlsListener {
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

/// A running TLS listener: stopping it (or dropping it) stops accepting and tells the
/// connections it handed to the broker to close.
pub(crate) struct RunningTlsListener {
    accept: JoinHandle<()>,
    shutdown: broadcast::Sender<()>,
}

impl TlsListener {
    /// Loads the certificate, key and client CA of `tls` and binds `addr`; every failure
    /// names the file or the address.
    pub(crate) async fn bind(tls: &TlsSettings, addr: SocketAddr) -> Result<Self, BrokerError> {
        let load = |what: &str, path: &std::path::Path, e: mqtt5::MqttError| {
            BrokerError::Tls(ConfigError::caused(
                format!("TLS {what} {}", path.display()),
                e,
            ))
        };
        let chain = TlsAcceptorConfig::load_cert_chain_from_file(&tls.cert)
            .await
            .map_err(|e| load("certificate", &tls.cert, e))?;
        let key = TlsAcceptorConfig::load_private_key_from_file(&tls.key)
            .await
            .map_err(|e| load("private key", &tls.key, e))?;
        let mut config = TlsAcceptorConfig::new(chain, key);
        if let Some(ca) = &tls.client_ca {
            let cas = TlsAcceptorConfig::load_cert_chain_from_file(ca)
                .await
                .map_err(|e| load("client CA", ca, e))?;
            config = config
                .with_client_ca_certs(cas)
                .with_require_client_cert(true);
        }
        let acceptor = config
            .build_acceptor()
            .map_err(|e| BrokerError::Tls(ConfigError::caused("TLS configuration", e)))?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| BrokerError::TlsListen { addr, source })?;
        Ok(TlsListener { listener, acceptor })
    }

    /// The bound address (with the actual port).
    pub(crate) fn local_addr(&self) -> Result<SocketAddr, BrokerError> {
        self.listener.local_addr().map_err(BrokerError::TlsAddress)
    }

    /// Accepts connections for `broker` (configured with `config`) until stopped. Call
    /// after the broker's auth provider is final: connections use the provider in place
    /// now.
    pub(crate) fn start(self, broker: &MqttBroker, config: BrokerConfig) -> RunningTlsListener {
        let (shutdown, _) = broadcast::channel(1);
        let context = Arc::new(HandlerContext {
            config: Arc::new(config),
            broker_router: broker.router(),
            auth: broker.auth_provider(),
            storage: broker.storage(),
            stats: broker.stats(),
            resources: broker.resource_monitor(),
            shutdown: shutdown.clone(),
        });
        let accept = tokio::spawn(accept_loop(self.listener, self.acceptor, context));
        RunningTlsListener { accept, shutdown }
    }
}

impl RunningTlsListener {
    /// Stops accepting and closes the connections handed to the broker.
    pub(crate) fn stop(&self) {
        self.accept.abort();
        let _ = self.shutdown.send(());
    }
}

impl Drop for RunningTlsListener {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the broker's per-connection handler needs, taken from the broker once.
struct HandlerContext {
    config: Arc<BrokerConfig>,
    broker_router: Arc<mqtt5::broker::router::MessageRouter>,
    auth: Arc<dyn mqtt5::broker::auth::AuthProvider>,
    storage: Option<Arc<mqtt5::broker::DynamicStorage>>,
    stats: Arc<mqtt5::broker::sys_topics::BrokerStats>,
    resources: Arc<mqtt5::broker::ResourceMonitor>,
    shutdown: broadcast::Sender<()>,
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    context: Arc<HandlerContext>,
) {
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                tracing::warn!(error = %e, "TLS listener: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if !context.resources.can_accept_connection(addr.ip()).await {
            tracing::warn!(%addr, "TLS connection refused: connection limits reached");
            continue;
        }
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let context = Arc::clone(&context);
        // The handshake runs beside the loop, so a slow or silent peer delays only itself.
        tokio::spawn(async move {
            let handshake = accept_tls_connection(&acceptor, stream, addr);
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::info!(%addr, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::info!(%addr, timeout = ?HANDSHAKE_TIMEOUT, "TLS handshake timed out");
                    return;
                }
            };
            let handler = ClientHandler::new(
                BrokerTransport::tls(tls),
                addr,
                Arc::clone(&context.config),
                Arc::clone(&context.broker_router),
                Arc::clone(&context.auth),
                context.storage.clone(),
                Arc::clone(&context.stats),
                Arc::clone(&context.resources),
                context.shutdown.subscribe(),
            );
            if let Err(e) = handler.run().await
                && !e.is_normal_disconnect()
            {
                tracing::debug!(%addr, error = %e, "TLS client connection ended");
            }
        });
    }
}
