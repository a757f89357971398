//! The hub's HTTPS server: IoT Hub's REST API ([`crate::iothub::https::service`]) over TLS and HTTP/1.1, as
//! the service SDKs reach it (they only speak HTTPS).
//!
//! Each TLS handshake runs on the connection's own task with the broker's timeout (10 s,
//! [`HANDSHAKE_TIMEOUT`]), so a silent or slow peer delays only itself; request heads have the
//! same deadline (no slowloris). `axum::serve` cannot be used: it only
//! takes plain listeners. On stop, the server accepts no more connections, lets each one
//! finish its request in flight (keep-alive connections close) and returns when they have.

use std::net::SocketAddr;
use std::time::Duration;

use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use tokio_rustls::TlsAcceptor;

use crate::iothub::client_cert::CaTrust;
use crate::iothub::domain::x509::ClientCert;
use crate::iothub::tls::HANDSHAKE_TIMEOUT;

/// The TLS client certificate of the request's connection, if it presented one.
#[derive(Debug, Clone)]
pub(crate) struct PeerCert(pub(crate) Option<Arc<ClientCert>>);
use crate::web::http1::HeadLimits;

pub(crate) mod service;

/// Serves `router` over TLS on `listener` until `stop` turns true, then waits for the
/// connections' requests in flight.
pub(crate) async fn run(
    listener: TcpListener,
    tls: TlsAcceptor,
    ca_trust: CaTrust,
    router: axum::Router,
    mut stop: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    connections.spawn(connection(
                        stream,
                        peer,
                        tls.clone(),
                        ca_trust.clone(),
                        router.clone(),
                        stop.clone(),
                    ));
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "iothub: HTTPS accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            // Reap finished connections so the set does not grow with the server's age.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stop.changed() => break,
        }
        if *stop.borrow() {
            break;
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// One connection: the TLS handshake (bounded), then HTTP/1.1 until the peer closes or the
/// server stops.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    tls: TlsAcceptor,
    ca_trust: CaTrust,
    router: axum::Router,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let handshake = tokio::select! {
        result = crate::iothub::tls::handshake(&tls, stream, HANDSHAKE_TIMEOUT) => result,
        _ = stop.changed() => return,
    };
    let stream = match handshake {
        Ok(stream) => stream,
        Err(e) => {
            tracing::info!(%peer, error = %e, "iothub: HTTPS connection refused");
            return;
        }
    };
    // The device routes authenticate an X.509 device by the connection's client certificate
    // (docs/iothub.md, "X.509 devices"): each request of the connection carries it.
    let cert = PeerCert(
        ca_trust
            .read(stream.get_ref().1.peer_certificates())
            .map(Arc::new),
    );
    let router = router.layer(axum::Extension(cert));
    // Handlers may ask who is calling (logs); heads have the handshake's deadline (no
    // slowloris) and hyper's size limit.
    let limits = HeadLimits {
        timeout: HANDSHAKE_TIMEOUT,
        max_bytes: None,
    };
    if let Err(e) = crate::web::http1::serve(stream, peer, router, limits, stop).await {
        tracing::debug!(%peer, error = %e, "iothub: HTTPS connection ended");
    }
}
