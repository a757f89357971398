//! The one receive loop of the hub's AMQP links: the next transfer a peer sends on a link the
//! hub receives on (the service's `$cbs` requests and C2D sends; a device's telemetry and twin
//! requests), or why the link ends first: the hub stops, the token that authorized it expires,
//! the hub closes the device's connection, or the link fails. Each link decides what its end
//! means (which error it detaches with, what it logs).

use std::future::Future;
use std::time::SystemTime;

use fe2o3_amqp::link::Receiver;
use fe2o3_amqp::link::RecvError;
use fe2o3_amqp::link::delivery::Delivery;
use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::Value;
use tokio::sync::watch;

/// Why a link stopped receiving.
#[derive(Debug)]
pub(super) enum Ended {
    /// The hub stops.
    Stop,
    /// The token that authorized the link expired.
    Expired,
    /// The hub closed the device's connection (the reason).
    Closed(String),
    /// The peer detached the link, or it failed.
    Failed(RecvError),
}

/// The next transfer on `receiver`, or why the link ends first: `stop` turns, the claims'
/// `expiry` passes (a link with no token to expire gives `None`), or `closed` (the device's
/// connection closed by the hub; `std::future::pending()` on the service side) completes.
pub(super) async fn next(
    receiver: &mut Receiver,
    stop: &mut watch::Receiver<bool>,
    expiry: Option<&mut watch::Receiver<Option<SystemTime>>>,
    closed: impl Future<Output = String>,
) -> Result<Delivery<Body<Value>>, Ended> {
    let expired = async {
        match expiry {
            Some(expiry) => expired(expiry).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        d = receiver.recv::<Body<Value>>() => d.map_err(Ended::Failed),
        why = closed => Err(Ended::Closed(why)),
        () = expired => Err(Ended::Expired),
        _ = stop.changed() => Err(Ended::Stop),
    }
}

/// Resolves when the connection's ServiceConnect claims have expired (at once when it has
/// none); a renewal (a newer put-token) moves the deadline.
pub(super) async fn expired(expiry: &mut watch::Receiver<Option<SystemTime>>) {
    loop {
        let at = *expiry.borrow_and_update();
        let Some(at) = at else { return };
        let Ok(left) = at.duration_since(SystemTime::now()) else {
            return;
        };
        if left.is_zero() {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(left) => {}
            changed = expiry.changed() => {
                if changed.is_err() {
                    // The connection is gone: nothing renews the claims any more.
                    tokio::time::sleep(left).await;
                }
            }
        }
    }
}
