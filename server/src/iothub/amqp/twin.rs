//! A device's twin and direct-method links, as the local hub (which has neither) serves them:
//! accepted, so that the device SDK keeps its connection, and answered so that it fails fast.
//!
//! Node's device SDK (`azure-iot-device-amqp`) treats any detach the hub sends on a link it
//! holds attached as a connection error: azure-iot-amqp-base `sender_link.js` and
//! `receiver_link.js` emit `azure-iot-amqp-base:error-indicated` on the container from the
//! state `attached` (rhea reports the hub's attach reply as opened first, even when a detach
//! with an error follows), and `amqp.js` then tears the whole connection down, its C2D and
//! telemetry links with it. So these links are never refused:
//!
//! - Twin (`/devices/{id}/twin`, `amqp_twin_client.js`): a sender and a receiver link on the
//!   same address, both with the link property `com.microsoft:channel-correlation-id` =
//!   `twin:{uuid}` (the same on both) and `com.microsoft:api-version`. A request is a message
//!   on the sender link with the message annotations `operation` (`GET`; `PATCH` with
//!   `resource` `/properties/reported`; `PUT` / `DELETE` with `resource`
//!   `/notifications/twin/properties/desired`) and a string correlation id; the answer comes on
//!   the receiver link with that correlation id, the message annotation `status` and a JSON
//!   body in a data section, and a status over 300 becomes an error (`_onResponseMessage`,
//!   `_translateErrorResponse`: 403 is `InvalidOperationError` with the parsed body as its
//!   message, which `amqp.js` `handleResult` turns into an `Error` "could not get twin. " +
//!   the body's `message`). The hub answers every request with status 403 and IoT Hub's error
//!   body (error code 403010, as a Basic tier hub refuses twins; the MQTT endpoint answers the
//!   same), on the device's twin receiver link of the same channel on this connection.
//! - Direct methods (`/devices/{id}/methods/devicebound`, `amqp_device_method_client.js`): a
//!   sender (method responses) and a receiver (method requests) link. Both stay attached and
//!   no request is ever sent (the local hub has no direct methods); the hub logs that at
//!   attach. The SDK's `onDeviceMethod` succeeds and its handler is never called, as over MQTT.
//!
//! Both need the device's token put on `$cbs` first and count as the device's links
//! ([`device::Member`]), like its C2D and telemetry links.

use std::time::SystemTime;

use fe2o3_amqp::link::delivery::Sendable;
use fe2o3_amqp::link::{Receiver, Sender};
use fe2o3_amqp::types::messaging::{Data, Message, MessageAnnotations, MessageId, Properties};
use fe2o3_amqp::types::performatives::Attach;
use fe2o3_amqp::types::primitives::{Binary, Symbol, Value};
use tokio::sync::{mpsc, watch};

use super::device::{End, Member, next_delivery};
use super::receive;
use crate::iothub::domain::message::format_time;
use crate::iothub::domain::queue::new_guid;

/// The link property pairing a twin sender link with its receiver link.
const CHANNEL_CORRELATION_ID: &str = "com.microsoft:channel-correlation-id";

/// The status of every twin answer: IoT Hub's for an operation the hub does not offer (error
/// code 403010, "not valid for the current IoT Hub tier"), as the MQTT endpoint answers.
const TWIN_REFUSED_STATUS: i32 = 403;
const TWIN_REFUSED_CODE: u32 = 403_010;

/// A link's `com.microsoft:channel-correlation-id` property (`twin:{uuid}` from Node).
pub(super) fn channel_correlation_id(attach: &Attach) -> Option<String> {
    attach
        .properties
        .as_ref()?
        .iter()
        .find(|(k, _)| k.0 == CHANNEL_CORRELATION_ID)
        .and_then(|(_, v)| match v {
            Value::String(s) => Some(s.clone()),
            Value::Symbol(s) => Some(s.0.clone()),
            _ => None,
        })
}

/// A message annotation's text value.
fn annotation<T>(message: &Message<T>, key: &str) -> Option<String> {
    message
        .message_annotations
        .as_ref()?
        .iter()
        .find(|(k, _)| {
            matches!(k, fe2o3_amqp::types::messaging::annotations::OwnedKey::Symbol(s) if s.0 == key)
        })
        .and_then(|(_, v)| match v {
            Value::String(s) => Some(s.clone()),
            Value::Symbol(s) => Some(s.0.clone()),
            _ => None,
        })
}

/// What a twin request asks, in words, from its `operation` and `resource` annotations.
fn what(operation: Option<&str>, resource: Option<&str>) -> String {
    let resource = resource.unwrap_or("").trim_end_matches('/');
    let operation = operation.unwrap_or("").to_ascii_uppercase();
    match (operation.as_str(), resource) {
        ("GET", "") => "get the twin".to_owned(),
        ("PATCH", "/properties/reported") => "update reported properties".to_owned(),
        ("PUT", "/notifications/twin/properties/desired") => {
            "subscribe to desired property updates".to_owned()
        }
        ("DELETE", "/notifications/twin/properties/desired") => {
            "unsubscribe from desired property updates".to_owned()
        }
        (op, res) => format!("run the twin operation {op:?} on {res:?}"),
    }
}

/// The answer to a twin request: status 403 and IoT Hub's error body (`errorCode`,
/// `trackingId`, `message`, `info`, `timestampUtc`), correlated to the request.
fn refusal(correlation_id: MessageId, what: &str) -> Message<Data> {
    let body = serde_json::json!({
        "errorCode": TWIN_REFUSED_CODE,
        "trackingId": new_guid(),
        "message": format!(
            "device twins are not supported by this local IoT Hub (mqstate serves \
             cloud-to-device messages and telemetry): cannot {what}"
        ),
        "info": {},
        "timestampUtc": format_time(SystemTime::now()),
    });
    let properties = Properties {
        correlation_id: Some(correlation_id),
        ..Properties::default()
    };
    Message::builder()
        .properties(properties)
        .message_annotations(
            MessageAnnotations::builder()
                .insert(Symbol::from("status"), Value::Int(TWIN_REFUSED_STATUS))
                .build(),
        )
        .data(Data(Binary::from(body.to_string().into_bytes())))
        .build()
}

/// Closes a device link the way its end asks.
async fn finish_receiver(end: End, device_id: &str, link: &str, receiver: Receiver) {
    end.log(device_id, link);
    let closed = match end.error() {
        Some(e) => receiver.close_with_error(e).await,
        None => receiver.close().await,
    };
    if let Err(e) = closed {
        tracing::debug!(error = %e, link, "iothub amqp: device link closed uncleanly");
    }
}

async fn finish_sender(end: End, device_id: &str, link: &str, sender: Sender) {
    end.log(device_id, link);
    let closed = match end.error() {
        Some(e) => sender.close_with_error(e).await,
        None => sender.close().await,
    };
    if let Err(e) = closed {
        tracing::debug!(error = %e, link, "iothub amqp: device link closed uncleanly");
    }
}

/// Serves the device's twin sender link (the hub's receiver): each request is accepted and
/// answered with a 403 on the device's twin receiver link of the same channel.
pub(super) async fn serve_requests(
    mut member: Member,
    mut expiry: watch::Receiver<Option<SystemTime>>,
    mut receiver: Receiver,
    channel: Option<String>,
    mut stop: watch::Receiver<bool>,
) {
    let device_id = member.device_id().to_owned();
    let end = loop {
        let next = next_delivery(
            &mut receiver,
            &mut member,
            &mut expiry,
            &mut stop,
            "twin requests",
        );
        let (info, message) = match next.await {
            Ok(delivery) => delivery.into_parts(),
            Err(end) => break end,
        };
        // Pre-settled from Node (sender settle mode `settled`): then this sends nothing.
        if let Err(e) = receiver.accept(info).await {
            tracing::debug!(error = %e, "iothub amqp: twin request not settled");
        }
        let operation = annotation(&message, "operation");
        let resource = annotation(&message, "resource");
        let what = what(operation.as_deref(), resource.as_deref());
        let properties = message.properties.unwrap_or_default();
        let Some(correlation_id) = properties.correlation_id.or(properties.message_id) else {
            // Nothing to answer with: an uncorrelated message on the receiver link is a
            // desired-property update to the SDK.
            tracing::info!(device = %device_id, request = %what,
                "iothub amqp: twin request without a correlation id ignored");
            continue;
        };
        match member.twin_routes().find(&device_id, channel.as_deref()) {
            Some(answers) => {
                tracing::info!(device = %device_id, request = %what,
                    "iothub amqp: twin request refused (403: the local hub has no device twins)");
                let _ = answers.send(refusal(correlation_id, &what));
            }
            None => tracing::info!(device = %device_id, request = %what,
                "iothub amqp: twin request not answered (the device has no twin receiver link on this connection)"),
        }
    };
    finish_receiver(end, &device_id, "twin requests", receiver).await;
    drop(member);
}

/// Serves the device's twin receiver link (the hub's sender): sends the answers to the
/// requests, pre-settled where the link allows (Node asks for settled sends and accepts each).
pub(super) async fn serve_answers(
    mut member: Member,
    mut expiry: watch::Receiver<Option<SystemTime>>,
    mut sender: Sender,
    channel: Option<String>,
    mut stop: watch::Receiver<bool>,
) {
    let device_id = member.device_id().to_owned();
    let (tx, mut answers) = mpsc::unbounded_channel();
    let key = member.twin_routes().add(&device_id, channel, tx);
    let end = loop {
        let answer = tokio::select! {
            a = answers.recv() => a,
            _ = sender.on_detach() => break End::Detached,
            why = member.closed() => break End::Closed(why),
            () = receive::expired(&mut expiry) => break End::Expired,
            _ = stop.changed() => break End::Stop,
        };
        let Some(answer) = answer else {
            break End::Detached;
        };
        let sendable = Sendable::builder().message(answer).settled(true).build();
        match sender.send_batchable(sendable).await {
            Ok(settlement) => drop(settlement),
            Err(e) => {
                tracing::debug!(device = %device_id, error = %e, "iothub amqp: twin answer not sent");
                break End::Detached;
            }
        }
    };
    member.twin_routes().remove(key);
    finish_sender(end, &device_id, "twin answers", sender).await;
    drop(member);
}

/// Serves the device's method receiver link (the hub's sender): attached, and no method
/// request is ever sent on it.
pub(super) async fn serve_method_requests(
    mut member: Member,
    mut expiry: watch::Receiver<Option<SystemTime>>,
    mut sender: Sender,
    mut stop: watch::Receiver<bool>,
) {
    let device_id = member.device_id().to_owned();
    tracing::info!(device = %device_id,
        "iothub amqp: device method link attached; direct methods are not supported by this \
         local IoT Hub: no method request will come");
    let end = tokio::select! {
        _ = sender.on_detach() => End::Detached,
        why = member.closed() => End::Closed(why),
        () = receive::expired(&mut expiry) => End::Expired,
        _ = stop.changed() => End::Stop,
    };
    finish_sender(end, &device_id, "method requests", sender).await;
    drop(member);
}

/// Serves the device's method sender link (the hub's receiver): no request was sent, so a
/// response answers nothing; it is accepted and dropped.
pub(super) async fn serve_method_responses(
    mut member: Member,
    mut expiry: watch::Receiver<Option<SystemTime>>,
    mut receiver: Receiver,
    mut stop: watch::Receiver<bool>,
) {
    let device_id = member.device_id().to_owned();
    let end = loop {
        let next = next_delivery(
            &mut receiver,
            &mut member,
            &mut expiry,
            &mut stop,
            "method responses",
        );
        let delivery = match next.await {
            Ok(delivery) => delivery,
            Err(end) => break end,
        };
        tracing::info!(device = %device_id,
            "iothub amqp: method response dropped (the local hub sends no method requests)");
        if let Err(e) = receiver.accept(&delivery).await {
            tracing::debug!(error = %e, "iothub amqp: method response not settled");
        }
    };
    finish_receiver(end, &device_id, "method responses", receiver).await;
    drop(member);
}
