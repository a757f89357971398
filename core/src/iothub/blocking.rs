//! A blocking [`DeviceClient`], with its own small runtime, for non-async Rust and the C and
//! Python bindings. Receiving and completing never need the runtime; connecting, sending
//! telemetry and closing run on it.
//!
//! ```no_run
//! use std::time::Duration;
//! use mqstate::iothub::{DeviceOptions, blocking::DeviceClient};
//!
//! let client = DeviceClient::connect(DeviceOptions::from_connection_string(
//!     "HostName=myhub.azure-devices.net;DeviceId=dev1;SharedAccessKey=c2VjcmV0",
//! )?)?;
//! if let Some(msg) = client.receive_timeout(Duration::from_secs(5))? {
//!     println!("{:?}", msg.payload);
//!     msg.complete()?;
//! }
//! client.close();
//! # Ok::<(), mqstate::Error>(())
//! ```

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Runtime;

use super::{C2dMessage, DeviceOptions, DeviceStats, Telemetry};
use crate::client::ConnectionState;
use crate::protocol::errors::Error;

struct Owner {
    runtime: Option<Runtime>,
    client: super::DeviceClient,
}

impl Drop for Owner {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            let client = self.client.clone();
            // Close gracefully (bounded), then let the runtime go without blocking on it.
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            runtime.spawn(async move {
                client.close().await;
                let _ = tx.send(());
            });
            let _ = rx.recv_timeout(Duration::from_secs(4));
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owner")
            .field("client", &self.client)
            .finish()
    }
}

/// The blocking device client; cheap to clone, closed when the last clone drops.
#[derive(Debug, Clone)]
pub struct DeviceClient {
    owner: Arc<Owner>,
}

impl DeviceClient {
    /// Connects; see [`super::DeviceClient::connect`].
    pub fn connect(options: DeviceOptions) -> Result<Self, Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("mqstate-iothub")
            .enable_all()
            .build()
            .map_err(|e| Error::connection_caused_by(format!("cannot start a runtime: {e}"), e))?;
        let client = run(&runtime, super::DeviceClient::connect(options))?;
        Ok(DeviceClient {
            owner: Arc::new(Owner {
                runtime: Some(runtime),
                client,
            }),
        })
    }

    /// The async client this one drives.
    pub fn as_async(&self) -> &super::DeviceClient {
        &self.owner.client
    }

    /// Waits for the next message (or the reason the client stopped).
    pub fn receive(&self) -> Result<C2dMessage, Error> {
        loop {
            if let Some(m) = self.receive_timeout(Duration::from_secs(3600))? {
                return Ok(m);
            }
        }
    }

    /// Waits up to `timeout` for a message; `Ok(None)` when none came.
    pub fn receive_timeout(&self, timeout: Duration) -> Result<Option<C2dMessage>, Error> {
        self.owner.client.receive_blocking(timeout)
    }

    /// Sends telemetry and waits for the PUBACK; see [`super::DeviceClient::send_event`].
    pub fn send_event(&self, event: Telemetry) -> Result<(), Error> {
        let client = self.owner.client.clone();
        self.run(async move { client.send_event(event).await })
    }

    /// The connection state now.
    pub fn state(&self) -> ConnectionState {
        self.owner.client.state()
    }

    /// The counters so far.
    pub fn stats(&self) -> DeviceStats {
        self.owner.client.stats()
    }

    /// Closes the connection and waits (bounded) for it.
    pub fn close(&self) {
        let client = self.owner.client.clone();
        let _ = self.run(async move {
            client.close().await;
            Ok(())
        });
    }

    fn run<T: Send + 'static>(
        &self,
        f: impl std::future::Future<Output = Result<T, Error>> + Send + 'static,
    ) -> Result<T, Error> {
        match &self.owner.runtime {
            Some(rt) => run(rt, f),
            None => Err(Error::Disconnected(
                "the client's runtime is shut down".into(),
            )),
        }
    }
}

/// Runs `f` on `runtime` and waits on a std channel (never `block_on`, so calling from inside
/// another runtime blocks that thread but does not panic).
fn run<T: Send + 'static>(
    runtime: &Runtime,
    f: impl std::future::Future<Output = Result<T, Error>> + Send + 'static,
) -> Result<T, Error> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let _ = tx.send(f.await);
    });
    rx.recv()
        .map_err(|_| Error::Disconnected("the client's runtime is shut down".into()))?
}
