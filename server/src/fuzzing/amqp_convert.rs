//! An AMQP message converted as a C2D message and as telemetry ([`amqp_convert`]).

use super::*;
use crate::iothub::amqp::convert;

/// A telemetry message as the hub converts it: its property bag and its body.
pub type Telemetry = (Vec<Property>, Vec<u8>);

/// What [`amqp_convert`] saw.
#[derive(Debug, Default)]
pub struct AmqpOutcome {
    /// The message decoded from the input (its error's text otherwise).
    pub decoded: Option<Result<(), String>>,
    /// The C2D conversion: the raw device id of `to`, and the message.
    pub c2d: Option<Result<(String, C2dMessage), IotHubError>>,
    /// The device the message was sent to, and the hub's answer.
    pub sent: Option<(String, Result<(), IotHubError>)>,
    /// The sent message as the hub hands it to the device over AMQP, encoded, decoded and
    /// converted again as a C2D message.
    pub redelivered: Option<Result<(String, C2dMessage), String>>,
    /// The telemetry conversion (property bag and body), with [`MAX_BODY`] as the limit.
    pub telemetry: Option<Result<Telemetry, IotHubError>>,
    /// The telemetry as the hub stored it (its system properties' count, its properties'
    /// count).
    pub stored_telemetry: Option<(usize, usize)>,
    /// The AMQP error conditions of the refusals.
    pub conditions: Vec<String>,
    /// The hub or runtime could not be made.
    pub setup: Option<String>,
}

/// An AMQP message: the input decoded as fe2o3 decodes a transfer's payload
/// (`Message<Body<Value>>`), converted as the `/messages/devicebound` link converts a C2D
/// message (then sent to the device it names, received back locked and converted as the hub
/// delivers it over AMQP, that message encoded, decoded and converted again), and as a
/// device's `/messages/events` link converts telemetry.
pub fn amqp_convert(data: &[u8]) -> AmqpOutcome {
    use fe2o3_amqp::types::messaging::message::DecodeIntoMessage;
    use fe2o3_amqp::types::messaging::{Body, Message};
    use fe2o3_amqp::types::primitives::Value;

    let decode = |bytes: &[u8]| {
        <Body<Value> as DecodeIntoMessage>::decode_message_from_reader(
            serde_amqp::read::SliceReader::new(bytes),
        )
    };
    let mut out = AmqpOutcome::default();
    let message: Message<Body<Value>> = match decode(data) {
        Ok(m) => m,
        Err(e) => {
            out.decoded = Some(Err(e.to_string()));
            return out;
        }
    };
    out.decoded = Some(Ok(()));
    let (hub, rt) = match hub(false).and_then(|h| Ok((h, runtime()?))) {
        Ok(x) => x,
        Err(e) => {
            out.setup = Some(e);
            return out;
        }
    };
    let c2d = convert::c2d_message(message.clone());
    if let Ok((raw, m)) = &c2d {
        // As the devicebound link picks the device.
        let candidates = convert::device_candidates(raw);
        let id = candidates
            .iter()
            .find(|id| hub.device(id).is_ok())
            .or_else(|| candidates.first())
            .cloned();
        if let Some(id) = id {
            let sent = hub.send(&id, m.clone()).map(drop);
            if sent.is_ok() {
                let locked = rt.block_on(async {
                    hub.persisted().await?;
                    hub.receive_locked(&id, Duration::ZERO).await
                });
                out.redelivered = Some(match locked {
                    Ok(Some(locked)) => {
                        let delivered = convert::device_message(&id, &locked);
                        use fe2o3_amqp::types::messaging::message::__private::Serializable;
                        serde_amqp::to_vec(&Serializable(delivered))
                            .map_err(|e| format!("encode: {e}"))
                            .and_then(|bytes| decode(&bytes).map_err(|e| format!("decode: {e}")))
                            .and_then(|m| {
                                convert::c2d_message(m).map_err(|e| format!("convert: {e}"))
                            })
                    }
                    Ok(None) => Err("nothing to receive after the send".to_owned()),
                    Err(e) => Err(format!("receive: {e}")),
                });
            }
            out.sent = Some((id, sent));
        }
    }
    let telemetry = convert::telemetry(message, MAX_BODY);
    if let Ok((bag, body)) = &telemetry {
        hub.telemetry_received(DEVICE_ID, bag.clone(), body.clone().into());
        out.stored_telemetry = hub.telemetry(DEVICE_ID, 0).ok().and_then(|t| {
            t.last()
                .map(|t| (t.system_properties.len(), t.properties.len()))
        });
    }
    for e in [
        c2d.as_ref().err(),
        out.sent.as_ref().and_then(|(_, r)| r.as_ref().err()),
        telemetry.as_ref().err(),
    ]
    .into_iter()
    .flatten()
    {
        out.conditions
            .push(format!("{:?}", convert::hub_error(e).condition));
    }
    out.c2d = Some(c2d);
    out.telemetry = Some(telemetry);
    out
}
