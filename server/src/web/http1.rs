//! One HTTP/1.1 connection served with an axum router, as every HTTP server of mqstate serves
//! it (the web surfaces' plain listener, the hub's HTTPS REST API): the peer's address given
//! to handlers (`ConnectInfo<SocketAddr>`, as `axum::serve` gives it), each request head
//! bounded in time (and in size where the server says so), keep-alive, and a graceful end
//! when the server stops (the request in flight finishes). `axum::serve` cannot be used:
//! it bounds neither the head's time nor its size, and takes only plain listeners.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

/// How a server bounds each request head.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadLimits {
    /// Time to receive a head (and the idle time of a keep-alive connection).
    pub timeout: Duration,
    /// The largest head in bytes (`431` beyond); `None`: hyper's default.
    pub max_bytes: Option<usize>,
}

/// Serves `router` on `io` (a TCP or TLS stream from `peer`) until the peer closes, a head
/// breaks `limits`, or `stop` turns true (then the request in flight finishes).
pub(crate) async fn serve<S>(
    io: S,
    peer: SocketAddr,
    router: Router,
    limits: HeadLimits,
    mut stop: watch::Receiver<bool>,
) -> Result<(), hyper::Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(router.layer(axum::Extension(ConnectInfo(peer))));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.timeout)
        .keep_alive(true);
    if let Some(max) = limits.max_bytes {
        builder.max_header_size(max);
    }
    // Upgrades are kept: the hub's HTTPS port serves MQTT and AMQP over WebSockets
    // (crate::iothub::websocket); an upgraded connection leaves hyper and is served, and
    // stopped, by its own handler.
    let served = builder
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(served);
    tokio::select! {
        result = served.as_mut() => result,
        _ = stop.changed() => {
            served.as_mut().graceful_shutdown();
            served.await
        }
    }
}
