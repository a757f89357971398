//! Delivery of a KEYNOTIFY client's notifications without a subscription of its own
//! (docs/protocol.md section 6.1): Azure IoT Operations' broker delivers them so (the official
//! Go SDK never subscribes to its notification topic, the .NET SDK to a filter that matches
//! none, and both SDKs' notification tests pass against it in their upstream CI), and the
//! embedded broker does the same unless `--no-implicit-notify` turns it off.
//!
//! How: while a client holds a registration and has no subscription of its own to the
//! standard filter (`.../{HEX(clientId)}/command/notify/+`), the store adds one *for* it, on
//! the broker's router, marked with [`IMPLICIT_FLOW`] so that it is a subscription of its
//! own: the client's own SUBSCRIBE or UNSUBSCRIBE of the same filter neither replaces nor
//! removes it, and removing it never removes the client's. It is not part of the client's
//! session (a reconnect drops it; the next KEYNOTIFY adds it again), and it goes when the
//! client's last registration does.
//!
//! The marker is the router's flow id, which only QUIC connections use (to pick a stream);
//! the embedded broker serves TCP and TLS, where a delivery ignores it.

use std::sync::Arc;

use mqstate::protocol::topics::notification_filter;
use mqtt5::broker::QoS;
use mqtt5::broker::router::{MessageRouter, SubscriptionRequest};

/// The flow id that marks the store's implicit subscriptions (any value no QUIC connection of
/// the embedded broker would use: it serves none).
pub(crate) const IMPLICIT_FLOW: u64 = 0x6d71_7374_6174_6531;

/// Adds and removes the implicit notification subscriptions of the embedded broker.
#[derive(Clone)]
pub struct ImplicitNotify {
    router: Arc<MessageRouter>,
}

impl std::fmt::Debug for ImplicitNotify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImplicitNotify").finish_non_exhaustive()
    }
}

impl ImplicitNotify {
    pub(crate) fn new(router: Arc<MessageRouter>) -> ImplicitNotify {
        ImplicitNotify { router }
    }

    /// Makes sure `client_id` receives its notifications: unless it holds a subscription to
    /// its standard notification filter (its own, or one added here before), adds one.
    /// Returns whether one was added.
    pub(crate) async fn attach(&self, client_id: &str) -> bool {
        let filter = notification_filter(client_id);
        // A client that subscribed as docs/protocol.md section 6 says keeps exactly its own
        // subscription: a second one would deliver every notification twice.
        if self.router.has_subscription(client_id, &filter).await {
            return false;
        }
        let request = SubscriptionRequest::new(client_id, filter, QoS::AtLeastOnce)
            .with_flow_id(Some(IMPLICIT_FLOW));
        match self.router.subscribe(request).await {
            Ok(added) => {
                tracing::debug!(
                    client_id,
                    "no notification subscription: notifications delivered without one"
                );
                added
            }
            Err(e) => {
                tracing::warn!(client_id, error = %e, "cannot add the implicit notification subscription");
                false
            }
        }
    }

    /// Removes the subscription [`ImplicitNotify::attach`] added for `client_id`, if any
    /// (never the client's own).
    pub(crate) async fn detach(&self, client_id: &str) {
        let filter = notification_filter(client_id);
        self.router
            .unsubscribe(client_id, &filter, Some(IMPLICIT_FLOW))
            .await;
    }
}
