//! Holds every client's CONNECT on the embedded broker until the state store has subscribed
//! to the request topic, so that no client can publish a request the store would never see.
//!
//! The broker accepts TCP connections as soon as it runs, and the store is itself a client of
//! it: without this gate, a client that connects in the few milliseconds before the store's
//! SUBACK could send requests that reach no subscriber and are dropped without a word (the
//! client then waits for its whole timeout). The gate wraps the broker's own authentication
//! provider: the store's CONNECT passes at once; any other waits (its CONNACK is delayed)
//! until [`AdmissionGate::open`], then is authenticated by the wrapped provider as before.
//! Nobody is refused for being early, so a client that starts together with the server just
//! connects a few milliseconds later.
//!
//! Being in front of every CONNECT, the gate also keeps client ids with their identities
//! (docs/security.md, "Client ids"): a client id belongs to the identity (user name or SAT
//! user; every anonymous client is one identity) that first connects with it, and a CONNECT
//! of another identity with that id is refused with "not authorized", so that it cannot take
//! the owner's session over (and with it the owner's notifications), nor lock the owner out.
//! The store connects first (everyone else waits for it), so its own id is its own. The id
//! `statestore`, whose topic tree `clients/statestore/...` holds every client's
//! notifications, is refused to everyone.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

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

/// Client ids no client may use: their topic trees are the service's
/// (`clients/statestore/...` holds the notification topics of every client).
pub const RESERVED_CLIENT_IDS: &[&str] = &["statestore"];

/// How long a client id stays with its identity after the last CONNECT with it (longer than
/// any session the broker keeps for it), when the table of owners is full.
const OWNERSHIP_KEPT: Duration = Duration::from_secs(24 * 3600);
/// Client ids whose owners are kept before old entries are dropped.
const MAX_OWNED_IDS: usize = 100_000;

/// Who owns each client id: its identity (`None`: anonymous) and when it last connected.
#[derive(Debug, Default)]
struct Owners(HashMap<String, (Option<String>, Instant)>);

impl Owners {
    /// Whether `identity` may use `client_id`: it owns it now, or it is free (it then owns
    /// it from now on).
    fn claim(&mut self, client_id: &str, identity: Option<&str>, now: Instant) -> bool {
        if let Some((owner, last)) = self.0.get_mut(client_id) {
            if owner.as_deref() != identity {
                return false;
            }
            *last = now;
            return true;
        }
        if self.0.len() >= MAX_OWNED_IDS {
            self.0
                .retain(|_, (_, last)| now.duration_since(*last) < OWNERSHIP_KEPT);
        }
        self.0
            .insert(client_id.to_owned(), (identity.map(str::to_owned), now));
        true
    }
}

/// The broker's authentication provider behind the gate.
pub(crate) struct GatedAuth {
    inner: Arc<dyn AuthProvider>,
    store_client_id: String,
    open: watch::Receiver<bool>,
    owners: Mutex<Owners>,
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
                owners: Mutex::new(Owners::default()),
            },
            AdmissionGate { open: Arc::new(tx) },
        )
    }

    /// Whether the id is one no client may use.
    fn reserved(client_id: &str) -> bool {
        RESERVED_CLIENT_IDS
            .iter()
            .any(|r| r.eq_ignore_ascii_case(client_id))
    }

    /// Whether the authenticated `identity` may use `client_id` (see the module docs); logs
    /// a refusal as the security event it is.
    fn may_use(&self, client_id: &str, identity: Option<&str>) -> bool {
        let granted = self
            .owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .claim(client_id, identity, Instant::now());
        if !granted {
            let store = client_id == self.store_client_id;
            tracing::warn!(
                client_id,
                user = ?identity,
                store,
                "refused: the client id belongs to another identity{}",
                if store { " (the state store's own)" } else { "" }
            );
        }
        granted
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
            if Self::reserved(&connect.client_id) {
                tracing::warn!(client_id = %connect.client_id, %client_addr, "refused: a reserved client id");
                return Ok(AuthResult::fail_with_reason(
                    ReasonCode::ClientIdentifierNotValid,
                    "this client id is reserved for the state store",
                ));
            }
            if !self.admitted(&connect.client_id).await {
                return Ok(AuthResult::fail_with_reason(
                    ReasonCode::ServerUnavailable,
                    "the state store is not ready",
                ));
            }
            let result = self.inner.authenticate(connect, client_addr).await?;
            if result.authenticated && !self.may_use(&connect.client_id, result.user_id.as_deref())
            {
                return Ok(AuthResult::fail_with_reason(
                    ReasonCode::NotAuthorized,
                    "the client id is in use by another user",
                ));
            }
            Ok(result)
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
            if Self::reserved(client_id) {
                return Ok(EnhancedAuthResult::fail(
                    auth_method,
                    ReasonCode::ClientIdentifierNotValid,
                ));
            }
            if !self.admitted(client_id).await {
                return Ok(EnhancedAuthResult::fail(
                    auth_method,
                    ReasonCode::ServerUnavailable,
                ));
            }
            let result = self
                .inner
                .authenticate_enhanced(auth_method, auth_data, client_id)
                .await?;
            if result.status == mqtt5::broker::auth::EnhancedAuthStatus::Success
                && !self.may_use(client_id, result.user_id.as_deref())
            {
                return Ok(EnhancedAuthResult::fail_with_reason(
                    auth_method,
                    ReasonCode::NotAuthorized,
                    "the client id is in use by another user",
                ));
            }
            Ok(result)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_id_belongs_to_the_identity_that_first_used_it() {
        let mut owners = Owners::default();
        let now = Instant::now();
        assert!(owners.claim("c1", Some("alice"), now));
        assert!(owners.claim("c1", Some("alice"), now));
        assert!(!owners.claim("c1", Some("bob"), now));
        assert!(
            !owners.claim("c1", None, now),
            "anonymous is another identity"
        );
        assert!(owners.claim("c2", None, now));
        assert!(owners.claim("c2", None, now));
        assert!(GatedAuth::reserved("statestore") && GatedAuth::reserved("StateStore"));
        assert!(!GatedAuth::reserved("statestore-1"));
    }
}
