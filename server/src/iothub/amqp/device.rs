//! A device's links, as the device SDKs open them (Node `azure-iot-device-amqp`: `amqp.js`,
//! `_c2dEndpoint` / `_d2cEndpoint` from azure-iot-common `endpoint.js`):
//!
//! - `/devices/{id}/messages/devicebound`, the device's receiver link: the device's queue is
//!   pushed on it, each message locked under a lock token ([`IotHub::receive_locked`]) and
//!   settled by the device's disposition as IoT Hub maps them: accepted completes it,
//!   rejected dead-letters it, released or modified abandons it (Node's `complete`, `reject`,
//!   `abandon` are rhea's `accept()`, `reject()`, `release()`: azure-iot-amqp-base
//!   `receiver_link.js`). Deliveries unsettled when the link or the connection ends are
//!   abandoned at once, as IoT Hub releases them (the lock timeout would only catch them
//!   later).
//! - `/devices/{id}/messages/events`, the device's sender link: telemetry, into the same
//!   per-device store as MQTT's, accepted, or rejected with IoT Hub's condition.
//!
//! Both need a device token for that device put on `$cbs` first, and are detached with
//! `amqp:unauthorized-access` when it expires. A device's first link registers the AMQP
//! connection as the device's one connection ([`Devices`]): an MQTT connection of the same
//! device is closed, and an MQTT CONNECT (or another AMQP connection) later detaches these
//! links with `amqp:link:stolen`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fe2o3_amqp::link::delivery::Delivery;
use fe2o3_amqp::link::{Receiver, SendError, Sender};
use fe2o3_amqp::types::definitions::{self, AmqpError, LinkError};
use fe2o3_amqp::types::messaging::{Body, Data, Message, Outcome};
use fe2o3_amqp::types::primitives::Value;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::convert;
use super::receive::{self, Ended};
use crate::iothub::IotHub;
use crate::iothub::IotHubError;
use crate::iothub::domain::hub::ToConnection;
use crate::iothub::domain::queue::Settlement;

/// How long one wait for a message lasts before it starts again (it ends earlier on events).
const WAIT: Duration = Duration::from_secs(60);

pub(super) fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The map is consistent after every statement; a poisoned lock is still usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A device's registration on one AMQP connection: the hub's connection id, how many of its
/// links are open, and why the hub closed it (another connection took over, the device was
/// deleted or disabled), once it did.
struct Joined {
    connection: u64,
    links: usize,
    closed: watch::Receiver<Option<String>>,
}

/// The devices with open links on one AMQP connection (the Node SDK opens one device per
/// connection; IoT Hub multiplexes several, and so can this).
pub(super) struct Devices {
    hub: IotHub,
    joined: Mutex<HashMap<String, Joined>>,
    /// Where twin requests are answered: the twin response links open on this connection.
    twin_routes: Routes,
}

impl std::fmt::Debug for Devices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Devices").finish_non_exhaustive()
    }
}

/// One link's share of a device's registration: the last one dropped ends the device's
/// connection on the hub.
pub(super) struct Member {
    devices: Arc<Devices>,
    device_id: String,
    connection: u64,
    closed: watch::Receiver<Option<String>>,
}

impl Devices {
    pub(super) fn new(hub: IotHub) -> Arc<Devices> {
        Arc::new(Devices {
            hub,
            joined: Mutex::new(HashMap::new()),
            twin_routes: Routes::default(),
        })
    }

    /// A link of `device_id` opens: the first one (or the first since the hub closed the
    /// device's connection) registers this AMQP connection with the hub, which closes the
    /// device's previous connection over any transport.
    pub(super) fn join(self: &Arc<Self>, device_id: &str) -> Result<Member, IotHubError> {
        let mut joined = relock(&self.joined);
        if let Some(j) = joined.get_mut(device_id)
            && j.closed.borrow().is_none()
        {
            j.links += 1;
            return Ok(Member {
                devices: self.clone(),
                device_id: device_id.to_owned(),
                connection: j.connection,
                closed: j.closed.clone(),
            });
        }
        let (connection, mut rx) = self.hub.connect_by_lock_token(device_id)?;
        let (tx, closed) = watch::channel(None);
        tokio::spawn(async move {
            // Nothing is pushed to a lock-token connection; only a close comes. The channel
            // ends when the hub forgets the connection (its last link closed).
            let why = loop {
                match rx.recv().await {
                    Some(ToConnection::Close(why)) => break why,
                    Some(ToConnection::Deliver { .. }) => continue,
                    None => break "the device's connection ended".to_owned(),
                }
            };
            let _ = tx.send(Some(why));
        });
        joined.insert(
            device_id.to_owned(),
            Joined {
                connection,
                links: 1,
                closed: closed.clone(),
            },
        );
        tracing::info!(device = %device_id, connection, "iothub amqp: device connected");
        Ok(Member {
            devices: self.clone(),
            device_id: device_id.to_owned(),
            connection,
            closed,
        })
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut joined = relock(&self.devices.joined);
        let Some(j) = joined.get_mut(&self.device_id) else {
            return;
        };
        if j.connection != self.connection {
            return; // A newer registration of the device on this AMQP connection.
        }
        j.links = j.links.saturating_sub(1);
        if j.links == 0 {
            joined.remove(&self.device_id);
            drop(joined);
            // A no-op when another connection already took over.
            self.devices
                .hub
                .disconnected(&self.device_id, self.connection);
            tracing::info!(device = %self.device_id, connection = self.connection,
                "iothub amqp: device disconnected (its last link closed)");
        }
    }
}

impl Member {
    /// The device's id.
    pub(super) fn device_id(&self) -> &str {
        &self.device_id
    }

    /// The twin response links of this AMQP connection ([`Routes`]).
    pub(super) fn twin_routes(&self) -> &Routes {
        &self.devices.twin_routes
    }

    /// Resolves with the reason once the hub closed the device's connection.
    pub(super) async fn closed(&mut self) -> String {
        match self.closed.wait_for(Option::is_some).await {
            Ok(why) => why.clone().unwrap_or_default(),
            Err(_) => "the device's connection ended".to_owned(),
        }
    }
}

/// One twin receiver link of the device (the hub sends the answers on it).
struct Route {
    key: u64,
    device_id: String,
    channel: Option<String>,
    answers: mpsc::UnboundedSender<Message<Data>>,
}

/// The twin receiver links open on one AMQP connection: where the answer to a request goes
/// (kept here, with the connection's devices, so that the twin links' module depends on this
/// one and not the other way round).
#[derive(Default)]
pub(super) struct Routes {
    inner: Mutex<(u64, Vec<Route>)>,
}

impl std::fmt::Debug for Routes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routes").finish_non_exhaustive()
    }
}

impl Routes {
    pub(super) fn add(
        &self,
        device_id: &str,
        channel: Option<String>,
        answers: mpsc::UnboundedSender<Message<Data>>,
    ) -> u64 {
        let mut inner = relock(&self.inner);
        inner.0 += 1;
        let key = inner.0;
        inner.1.push(Route {
            key,
            device_id: device_id.to_owned(),
            channel,
            answers,
        });
        key
    }

    pub(super) fn remove(&self, key: u64) {
        relock(&self.inner).1.retain(|r| r.key != key);
    }

    /// The device's receiver link of `channel`; else its newest twin receiver link (a client
    /// that sets no channel property still gets its answers).
    pub(super) fn find(
        &self,
        device_id: &str,
        channel: Option<&str>,
    ) -> Option<mpsc::UnboundedSender<Message<Data>>> {
        let inner = relock(&self.inner);
        let device = || inner.1.iter().rev().filter(|r| r.device_id == device_id);
        device()
            .find(|r| channel.is_some() && r.channel.as_deref() == channel)
            .or_else(|| device().next())
            .map(|r| r.answers.clone())
    }
}

/// Why a device link stops.
pub(super) enum End {
    /// The device detached it, or the connection is gone.
    Detached,
    /// The hub closed the device's connection (the reason): another connection took over,
    /// or the device was deleted or disabled.
    Closed(String),
    /// The device token that authorized it expired.
    Expired,
    /// The hub stops.
    Stop,
    /// The hub refused something (the device is gone...).
    Failed(IotHubError),
}

impl End {
    /// The error the link is detached with (none for a plain detach).
    pub(super) fn error(&self) -> Option<definitions::Error> {
        match self {
            End::Detached | End::Stop => None,
            End::Closed(why) => {
                // A takeover is what `amqp:link:stolen` means ("the link has been attached
                // elsewhere"); anything else is the hub detaching the link by force.
                let condition = if why.contains("took over") {
                    LinkError::Stolen
                } else {
                    LinkError::DetachForced
                };
                Some(convert::error(condition, why.clone()))
            }
            End::Expired => Some(convert::error(
                AmqpError::UnauthorizedAccess,
                "the device's SAS token put on $cbs expired".into(),
            )),
            End::Failed(e) => Some(convert::hub_error(e)),
        }
    }

    pub(super) fn log(&self, device_id: &str, link: &str) {
        match self {
            End::Detached => {
                tracing::debug!(device = %device_id, link, "iothub amqp: device link detached")
            }
            End::Stop => {}
            End::Closed(why) => tracing::info!(device = %device_id, link,
                "iothub amqp: device link detached: {why}"),
            End::Expired => tracing::info!(device = %device_id, link,
                "iothub amqp: the device's SAS token expired; link detached"),
            End::Failed(e) => tracing::info!(device = %device_id, link, error = %e,
                "iothub amqp: device link detached"),
        }
    }
}

/// Gives a message back: Enqueued again at once, its delivery counted (a lost lock only
/// means the lock timeout already did it).
async fn abandon(hub: &IotHub, device_id: &str, lock_token: &str) {
    match hub.settle(device_id, lock_token, Settlement::Abandon) {
        Ok(()) => {
            if let Err(e) = hub.persisted().await {
                tracing::warn!(error = %e, "iothub amqp: abandon not persisted");
            }
        }
        Err(e) => tracing::debug!(device = %device_id, error = %e,
            "iothub amqp: message not abandoned"),
    }
}

/// The settlement a device's outcome asks for, as IoT Hub maps dispositions.
fn settlement(outcome: &Outcome) -> Settlement {
    match outcome {
        Outcome::Accepted(_) => Settlement::Complete,
        Outcome::Rejected(_) => Settlement::Reject,
        Outcome::Released(_) | Outcome::Modified(_) => Settlement::Abandon,
        #[allow(unreachable_patterns)]
        _ => Settlement::Abandon,
    }
}

/// How long, once a device's C2D link has ended, the outcomes the device sent before the end
/// may take to be taken (each is resolved already; its task only has to run).
const LATE_OUTCOMES: Duration = Duration::from_millis(200);

/// Serves a device's `/devices/{id}/messages/devicebound` link (the hub's sender) until the
/// device detaches it, its token expires, the hub closes the device's connection or stops.
pub(super) async fn serve_devicebound(
    hub: IotHub,
    mut member: Member,
    mut expiry: watch::Receiver<Option<SystemTime>>,
    mut sender: Sender,
    mut stop: watch::Receiver<bool>,
) {
    let device_id = member.device_id.clone();
    // Deliveries sent and not settled yet: their lock tokens, and a task per delivery that
    // waits for its outcome.
    let mut unsettled: HashSet<String> = HashSet::new();
    let mut outcomes: JoinSet<(String, Result<Outcome, SendError>)> = JoinSet::new();
    let end = loop {
        tokio::select! {
            received = hub.receive_locked(&device_id, WAIT) => {
                let locked = match received {
                    Ok(Some(locked)) => locked,
                    Ok(None) => continue,
                    Err(e) => break End::Failed(e),
                };
                let token = locked.lock_token.clone();
                let message = convert::device_message(&device_id, &locked);
                // Waits for credit (the message stays locked meanwhile); unsettled, whatever
                // the link's sender settle mode allows, so the device's outcome settles it.
                let sendable = fe2o3_amqp::link::delivery::Sendable::builder()
                    .message(message)
                    .settled(false)
                    .build();
                let sent = tokio::select! {
                    s = sender.send_batchable(sendable) => Ok(s),
                    why = member.closed() => Err(End::Closed(why)),
                    () = receive::expired(&mut expiry) => Err(End::Expired),
                    _ = stop.changed() => Err(End::Stop),
                };
                match sent {
                    Ok(Ok(fut)) => {
                        tracing::debug!(device = %device_id, lock_token = %token,
                            delivery_count = locked.delivery_count, "iothub amqp: C2D message sent to the device");
                        unsettled.insert(token.clone());
                        outcomes.spawn(async move { (token, fut.await) });
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(device = %device_id, error = %e, "iothub amqp: C2D message not sent");
                        abandon(&hub, &device_id, &token).await;
                        break End::Detached;
                    }
                    Err(end) => {
                        abandon(&hub, &device_id, &token).await;
                        break end;
                    }
                }
            }
            Some(done) = outcomes.join_next() => {
                if let Ok((token, outcome)) = done {
                    unsettled.remove(&token);
                    apply_outcome(&hub, &device_id, &token, outcome).await;
                }
            }
            _ = sender.on_detach() => break End::Detached,
            why = member.closed() => break End::Closed(why),
            () = receive::expired(&mut expiry) => break End::Expired,
            _ = stop.changed() => break End::Stop,
        }
    };
    // A disposition the device sent before it detached or closed (a reject, then close) counts:
    // the session handles frames in order, so its outcome is resolved already, but the task
    // waiting for it may not have run when the detach was seen. Take the outcomes that come
    // at once; what is still unsettled after that is abandoned.
    while let Ok(Some(done)) = tokio::time::timeout(LATE_OUTCOMES, outcomes.join_next()).await {
        if let Ok((token, outcome)) = done {
            unsettled.remove(&token);
            apply_outcome(&hub, &device_id, &token, outcome).await;
        }
    }
    outcomes.abort_all();
    for token in &unsettled {
        abandon(&hub, &device_id, token).await;
    }
    end.log(&device_id, "devicebound");
    let closed = match end.error() {
        Some(e) => sender.close_with_error(e).await,
        None => sender.close().await,
    };
    if let Err(e) = closed {
        tracing::debug!(error = %e, "iothub amqp: devicebound link closed uncleanly");
    }
    drop(member);
}

/// Applies the device's outcome of a delivery (or abandons it when the delivery ended
/// without one).
async fn apply_outcome(
    hub: &IotHub,
    device_id: &str,
    token: &str,
    outcome: Result<Outcome, SendError>,
) {
    match outcome {
        Ok(outcome) => {
            let how = settlement(&outcome);
            match hub.settle(device_id, token, how) {
                Ok(()) => {
                    if let Err(e) = hub.persisted().await {
                        tracing::warn!(error = %e, "iothub amqp: settlement not persisted");
                    }
                }
                Err(e) => tracing::info!(device = %device_id, error = %e, ?how,
                    "iothub amqp: settlement refused"),
            }
        }
        Err(e) => {
            tracing::debug!(device = %device_id, error = %e,
                "iothub amqp: C2D delivery ended unsettled");
            abandon(hub, device_id, token).await;
        }
    }
}

/// The next message the device sends on `receiver` (one of its links the hub receives on),
/// or why the link ends: the device detached it or it failed (logged as the `link` link
/// ending), the hub closed the device's connection, its token expired, or the hub stops.
pub(super) async fn next_delivery(
    receiver: &mut Receiver,
    member: &mut Member,
    expiry: &mut watch::Receiver<Option<SystemTime>>,
    stop: &mut watch::Receiver<bool>,
    link: &str,
) -> Result<Delivery<Body<Value>>, End> {
    let next = receive::next(receiver, stop, Some(expiry), member.closed()).await;
    next.map_err(|ended| match ended {
        Ended::Stop => End::Stop,
        Ended::Expired => End::Expired,
        Ended::Closed(why) => End::Closed(why),
        Ended::Failed(e) => {
            tracing::debug!(device = %member.device_id, error = %e, link, "iothub amqp: device link ended");
            End::Detached
        }
    })
}

/// Serves a device's `/devices/{id}/messages/events` link (the hub's receiver): each message
/// is telemetry, accepted once stored, or rejected (too large: `amqp:link:message-size-exceeded`,
/// Node's `MessageTooLargeError`; malformed: `com.microsoft:argument-error`).
pub(super) async fn serve_events(
    hub: IotHub,
    mut member: Member,
    mut expiry: watch::Receiver<Option<SystemTime>>,
    mut receiver: Receiver,
    mut stop: watch::Receiver<bool>,
) {
    let device_id = member.device_id.clone();
    let max = hub.config().max_telemetry_size;
    let end = loop {
        let next = next_delivery(&mut receiver, &mut member, &mut expiry, &mut stop, "events");
        let (info, message) = match next.await {
            Ok(delivery) => delivery.into_parts(),
            Err(end) => break end,
        };
        let settled = match convert::telemetry(message, max) {
            Ok((bag, body)) => {
                hub.telemetry_received(&device_id, bag, body.into());
                receiver.accept(info).await
            }
            Err(e) => {
                tracing::info!(device = %device_id, error = %e, "iothub amqp: telemetry rejected");
                receiver.reject(info, convert::hub_error(&e)).await
            }
        };
        if let Err(e) = settled {
            tracing::debug!(error = %e, "iothub amqp: telemetry not settled");
        }
    };
    end.log(&device_id, "events");
    let closed = match end.error() {
        Some(e) => receiver.close_with_error(e).await,
        None => receiver.close().await,
    };
    if let Err(e) = closed {
        tracing::debug!(error = %e, "iothub amqp: events link closed uncleanly");
    }
    drop(member);
}
