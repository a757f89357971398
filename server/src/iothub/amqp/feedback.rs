//! `/messages/serviceBound/feedback`: the service's receiver link for feedback batches. One
//! batch is in flight at a time (taken from the queue the admin API shares, locked); the
//! client's outcome settles it: accepted completes it, released / modified / rejected abandon
//! it (receivable again at once). A batch not settled within the feedback lock duration is
//! receivable again when its lock expires, as on the admin API, and the link moves on. fe2o3's sender sends only when the client gave credit.

use std::sync::Arc;
use std::time::Duration;

use fe2o3_amqp::link::Sender;
use fe2o3_amqp::types::definitions::AmqpError;
use fe2o3_amqp::types::messaging::Outcome;
use tokio::sync::watch;

use super::cbs::Cbs;
use super::convert;
use super::receive;
use crate::iothub::IotHub;

/// How long one wait for a batch lasts before it starts again (it ends earlier on events).
const WAIT: Duration = Duration::from_secs(60);

/// Why the link stops.
enum End {
    /// The client detached it, or the connection is gone.
    Detached,
    /// The token that authorized it expired.
    Expired,
    /// The hub stops.
    Stop,
}

/// Gives a batch back (at once receivable again); a lost lock only means it already is.
async fn abandon(hub: &IotHub, lock_token: &str) {
    match hub.abandon_feedback(lock_token) {
        Ok(()) => {
            if let Err(e) = hub.persisted().await {
                tracing::warn!(error = %e, "iothub amqp: feedback abandon not persisted");
            }
        }
        Err(e) => tracing::debug!(error = %e, "iothub amqp: feedback batch not abandoned"),
    }
}

/// Serves one feedback link until the client detaches it, the token that authorized it
/// expires (detached with `amqp:unauthorized-access`) or the hub stops.
pub(super) async fn serve(
    hub: IotHub,
    cbs: Arc<Cbs>,
    mut sender: Sender,
    mut stop: watch::Receiver<bool>,
) {
    let mut expiry = cbs.expiry();
    drop(cbs);
    let end = loop {
        let batch = tokio::select! {
            b = hub.receive_feedback(WAIT) => Ok(b),
            _ = sender.on_detach() => Err(End::Detached),
            () = receive::expired(&mut expiry) => Err(End::Expired),
            _ = stop.changed() => Err(End::Stop),
        };
        let batch = match batch {
            Ok(Some(batch)) => batch,
            Ok(None) => continue,
            Err(end) => break end,
        };
        let message = match convert::feedback_message(&batch) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "iothub amqp: feedback batch not encoded");
                abandon(&hub, &batch.lock_token).await;
                continue;
            }
        };
        // Waits for credit; the batch stays locked meanwhile (its lock timeout frees it).
        let sent = tokio::select! {
            s = sender.send_batchable(message) => Ok(s),
            () = receive::expired(&mut expiry) => Err(End::Expired),
            _ = stop.changed() => Err(End::Stop),
        };
        let settlement = match sent {
            Ok(Ok(settlement)) => settlement,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "iothub amqp: feedback batch not sent");
                abandon(&hub, &batch.lock_token).await;
                break End::Detached;
            }
            Err(end) => {
                abandon(&hub, &batch.lock_token).await;
                break end;
            }
        };
        // Unsettled past the lock: the hub's lock timeout already made the batch receivable
        // again; this link moves on (a late settlement finds the lock lost).
        let lock = hub.config().feedback_lock_duration;
        let outcome = tokio::select! {
            o = settlement => Ok(o),
            () = tokio::time::sleep(lock) => {
                tracing::debug!("iothub amqp: feedback batch unsettled past its lock");
                continue;
            }
            () = receive::expired(&mut expiry) => Err(End::Expired),
            _ = stop.changed() => Err(End::Stop),
        };
        match outcome {
            Ok(Ok(Outcome::Accepted(_))) => match hub.complete_feedback(&batch.lock_token) {
                Ok(()) => {
                    if let Err(e) = hub.persisted().await {
                        tracing::warn!(error = %e, "iothub amqp: feedback completion not persisted");
                    }
                }
                Err(e) => tracing::info!(error = %e, "iothub amqp: feedback batch not completed"),
            },
            Ok(Ok(outcome)) => {
                tracing::debug!(?outcome, "iothub amqp: feedback batch given back");
                abandon(&hub, &batch.lock_token).await;
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "iothub amqp: feedback batch not settled");
                abandon(&hub, &batch.lock_token).await;
                break End::Detached;
            }
            Err(end) => {
                abandon(&hub, &batch.lock_token).await;
                break end;
            }
        }
    };
    let closed = match end {
        End::Detached => sender.close().await,
        End::Stop => sender.close().await,
        End::Expired => {
            tracing::info!("iothub amqp: the SAS token expired; feedback link detached");
            let e = convert::error(
                AmqpError::UnauthorizedAccess,
                "the SAS token put on $cbs expired".into(),
            );
            sender.close_with_error(e).await
        }
    };
    if let Err(e) = closed {
        tracing::debug!(error = %e, "iothub amqp: feedback link closed uncleanly");
    }
}
