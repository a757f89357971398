//! Holds every client's CONNECT on the embedded broker until the state store has subscribed
//! to the request topic, so that no client can publish a request the store would never see.
//!
//! The broker accepts TCP connections as soon as it runs, and the store is itself a client of
//! it: without this gate, a client that connects in the few milliseconds before the store's
//! SUBACK could send requests that reach no subscriber and are dropped without a word (the
//! client then waits for its whole timeout). The gate wraps the broker's own authentication
//! provider: the store's CONNECT passes at once; any other waits (its CONNACK is delayed)
//! until [`AdmissionGate::open`], then is authenticated by the wrapped provider as before.
//! Nobody is refused, so a client that starts together with the server just connects a few
//! milliseconds later.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use mqtt5::broker::auth::{AuthProvider, AuthResult, EnhancedAuthResult};
use mqtt5::packet::connect::ConnectPacket;
use mqtt5::protocol::v5::reason_codes::ReasonCode;
use tokio::sync::watch;

/// How long a held CONNECT waits before it is refused with "server unavailable" (the store
/// never became ready: it failed to start; the broker is being shut down then anyway). Below
/// the broker's own 10 s connect timeout.
const HOLD_LIMIT: Duration = Duration::from_secs(8);

/// Opens the gate; dropping it without opening leaves held clients to time out.
#[derive(Debug, Clone)]
pub struct AdmissionGate {
    open: Arc<watch::Sender<bool>>,
}

impl AdmissionGate {
    /// Lets every held and future CONNECT through.
    pub fn open(&self) {
        self.open.send_replace(true);
    }

    /// Whether the gate is open.
    pub fn is_open(&self) -> bool {
        *self.open.borrow()
    }
}

/// The broker's authentication provider behind the gate.
pub(crate) struct GatedAuth {
    inner: Arc<dyn AuthProvider>,
    store_client_id: String,
    open: watch::Receiver<bool>,
}

impl GatedAuth {
    /// Wraps `inner`; `store_client_id` is let through at once.
    pub(crate) fn new(
        inner: Arc<dyn AuthProvider>,
        store_client_id: String,
    ) -> (GatedAuth, AdmissionGate) {
        let (tx, rx) = watch::channel(false);
        (
            GatedAuth {
                inner,
                store_client_id,
                open: rx,
            },
            AdmissionGate { open: Arc::new(tx) },
        )
    }

    /// Waits until the gate opens; false if it did not within [`HOLD_LIMIT`].
    async fn admitted(&self, client_id: &str) -> bool {
        if client_id == self.store_client_id {
            return true;
        }
        let mut open = self.open.clone();
        if *open.borrow_and_update() {
            return true;
        }
        tracing::debug!(client_id, "CONNECT held until the state store listens");
        matches!(
            tokio::time::timeout(HOLD_LIMIT, open.wait_for(|o| *o)).await,
            Ok(Ok(_))
        )
    }
}

impl AuthProvider for GatedAuth {
    fn authenticate<'a>(
        &'a self,
        connect: &'a ConnectPacket,
        client_addr: SocketAddr,
    ) -> Pin<Box<dyn Future<Output = mqtt5::Result<AuthResult>> + Send + 'a>> {
        Box::pin(async move {
            if !self.admitted(&connect.client_id).await {
                return Ok(AuthResult::fail_with_reason(
                    ReasonCode::ServerUnavailable,
                    "the state store is not ready",
                ));
            }
            self.inner.authenticate(connect, client_addr).await
        })
    }

    fn authorize_publish<'a>(
        &'a self,
        client_id: &str,
        user_id: Option<&'a str>,
        topic: &'a str,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        self.inner.authorize_publish(client_id, user_id, topic)
    }

    fn authorize_subscribe<'a>(
        &'a self,
        client_id: &str,
        user_id: Option<&'a str>,
        topic_filter: &'a str,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        self.inner
            .authorize_subscribe(client_id, user_id, topic_filter)
    }

    fn supports_enhanced_auth(&self) -> bool {
        self.inner.supports_enhanced_auth()
    }

    fn authenticate_enhanced<'a>(
        &'a self,
        auth_method: &'a str,
        auth_data: Option<&'a [u8]>,
        client_id: &'a str,
    ) -> Pin<Box<dyn Future<Output = mqtt5::Result<EnhancedAuthResult>> + Send + 'a>> {
        Box::pin(async move {
            if !self.admitted(client_id).await {
                return Ok(EnhancedAuthResult::fail(
                    auth_method,
                    ReasonCode::ServerUnavailable,
                ));
            }
            self.inner
                .authenticate_enhanced(auth_method, auth_data, client_id)
                .await
        })
    }

    fn reauthenticate<'a>(
        &'a self,
        auth_method: &'a str,
        auth_data: Option<&'a [u8]>,
        client_id: &'a str,
        user_id: Option<&'a str>,
    ) -> Pin<Box<dyn Future<Output = mqtt5::Result<EnhancedAuthResult>> + Send + 'a>> {
        self.inner
            .reauthenticate(auth_method, auth_data, client_id, user_id)
    }

    fn cleanup_session<'a>(
        &'a self,
        user_id: &'a str,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        self.inner.cleanup_session(user_id)
    }
}
