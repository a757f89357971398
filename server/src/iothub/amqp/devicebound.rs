//! `/messages/devicebound`: the service's sender link for cloud-to-device messages. Each
//! transfer is one message for the device its `to` names; it is settled accepted once the hub
//! holds it (on disk with a data dir), or rejected with the condition IoT Hub uses.

use std::sync::Arc;

use fe2o3_amqp::link::Receiver;
use fe2o3_amqp::types::definitions::AmqpError;
use tokio::sync::watch;

use super::cbs::Cbs;
use super::convert;
use super::receive::{self, Ended};
use crate::iothub::IotHub;
use crate::iothub::IotHubError;
use crate::iothub::domain::message::C2dMessage;

/// Sends `message` to the device `raw` names (URL-decoded, or as is: see
/// [`convert::device_candidates`]), and waits until it is durable.
async fn send(hub: &IotHub, raw: &str, message: C2dMessage) -> Result<(), IotHubError> {
    let candidates = convert::device_candidates(raw);
    let id = candidates
        .iter()
        .find(|id| hub.device(id).is_ok())
        .or_else(|| candidates.first())
        .ok_or_else(|| IotHubError::DeviceNotFound(raw.to_owned()))?;
    let receipt = hub.send(id, message)?;
    // Acknowledged only once it is on disk (with a data dir), as the admin API does.
    hub.persisted().await?;
    tracing::debug!(device = %id, sequence_number = receipt.sequence_number,
        "iothub amqp: C2D message enqueued");
    Ok(())
}

/// Serves one `/messages/devicebound` link until the client detaches it, the token that
/// authorized it expires (detached with `amqp:unauthorized-access`) or the hub stops.
pub(super) async fn serve(
    hub: IotHub,
    cbs: Arc<Cbs>,
    mut receiver: Receiver,
    mut stop: watch::Receiver<bool>,
) {
    let mut expiry = cbs.expiry();
    drop(cbs);
    loop {
        let no_device = std::future::pending();
        let next = receive::next(&mut receiver, &mut stop, Some(&mut expiry), no_device);
        let delivery = match next.await {
            Ok(d) => d,
            Err(Ended::Expired) => {
                tracing::info!("iothub amqp: the SAS token expired; C2D link detached");
                let e = convert::error(
                    AmqpError::UnauthorizedAccess,
                    "the SAS token put on $cbs expired".into(),
                );
                let _ = receiver.close_with_error(e).await;
                return;
            }
            Err(Ended::Failed(e)) => {
                tracing::debug!(error = %e, "iothub amqp: C2D link ended");
                let _ = receiver
                    .close_with_error(convert::error(AmqpError::DecodeError, e.to_string()))
                    .await;
                return;
            }
            Err(Ended::Stop | Ended::Closed(_)) => {
                let _ = receiver.close().await;
                return;
            }
        };
        let (info, message) = delivery.into_parts();
        let result = match convert::c2d_message(message) {
            Ok((raw, message)) => send(&hub, &raw, message).await,
            Err(e) => Err(e),
        };
        let settled = match result {
            Ok(()) => receiver.accept(info).await,
            Err(e) => {
                tracing::debug!(error = %e, "iothub amqp: C2D message rejected");
                receiver.reject(info, convert::hub_error(&e)).await
            }
        };
        if let Err(e) = settled {
            tracing::debug!(error = %e, "iothub amqp: C2D message not settled");
        }
    }
}
