//! The dashboard on its own HTTP server, for when the IoT Hub (whose admin API server
//! normally carries it) is off.

use std::net::SocketAddr;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::web::WebError;

/// A running HTTP server for the dashboard's routes; stop it with
/// [`DashboardServer::shutdown`] (dropping it stops it too, without waiting).
#[derive(Debug)]
pub(crate) struct DashboardServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl DashboardServer {
    /// Listens on `addr` (port 0: any free port) and serves `router`, behind the checks of
    /// [`crate::web::guard`].
    /// With `auth`, every route asks for credentials ([`crate::web::auth`]).
    pub(crate) async fn start(
        addr: SocketAddr,
        router: axum::Router,
        auth: Option<std::sync::Arc<crate::web::auth::WebAuth>>,
    ) -> Result<Self, WebError> {
        let router =
            crate::web::guard::guard(router, crate::web::guard::AllowedHosts::default(), auth);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| WebError::io(format!("cannot listen for the dashboard on {addr}"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| WebError::io("dashboard address", e))?;
        let (stop, mut stop_rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stop_rx.changed().await;
            };
            if let Err(e) = crate::web::guard::serve(listener, router, shutdown).await {
                tracing::error!(%addr, error = %e, "dashboard server stopped");
            }
        });
        Ok(DashboardServer {
            addr,
            stop,
            task: Some(task),
        })
    }

    /// The address it listens on.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops it; open event streams are cut after a few seconds.
    pub(crate) async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take()
            && tokio::time::timeout(std::time::Duration::from_secs(3), task)
                .await
                .is_err()
        {
            tracing::debug!("dashboard: event streams still open at shutdown");
        }
    }
}

impl Drop for DashboardServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
