//! [`C2dMessage`]: a received cloud-to-device message as the application holds it, and its
//! completion (recorded in the shared state; the connection task writes the PUBACK).

use std::ops::Deref;
use std::sync::Arc;

use super::completion::{CompleteOutcome, Ticket};
use super::message::MessageContent;
use super::shared::{Counters, Shared};
use crate::protocol::errors::Error;

/// A received cloud-to-device message. Read it through [`Deref`] to [`MessageContent`]
/// (`msg.message_id`, `msg.payload`, `msg.property("name")`...), then [`complete`] it.
///
/// Nothing is acknowledged until the application completes the message; a message never
/// completed goes back to the hub's queue when its lock times out (or the connection drops)
/// and is delivered again, with [`C2dMessage::is_redelivery`] set.
///
/// ```no_run
/// # async fn demo(client: mqstate::iothub::DeviceClient) -> Result<(), mqstate::Error> {
/// let msg = client.receive().await?;
/// if msg.is_redelivery() {
///     println!("seen before: {:?}", msg.message_id);
/// }
/// msg.complete()?;
/// # Ok(()) }
/// ```
///
/// [`complete`]: C2dMessage::complete
#[derive(Debug, Clone)]
pub struct C2dMessage {
    content: MessageContent,
    redelivered: bool,
    /// Its place in the order of PUBACKs; none for a QoS 0 message (nothing to acknowledge).
    ticket: Option<Ticket>,
    shared: Arc<Shared>,
}

impl Deref for C2dMessage {
    type Target = MessageContent;
    fn deref(&self) -> &MessageContent {
        &self.content
    }
}

impl C2dMessage {
    /// A message as the connection task hands it to the application.
    pub(super) fn new(
        content: MessageContent,
        redelivered: bool,
        ticket: Option<Ticket>,
        shared: Arc<Shared>,
    ) -> Self {
        C2dMessage {
            content,
            redelivered,
            ticket,
            shared,
        }
    }

    /// The decoded content.
    pub fn content(&self) -> &MessageContent {
        &self.content
    }

    /// True when this message was delivered before (the MQTT DUP flag, or a message id this
    /// client already received): delivery is at-least-once, and a message whose completion
    /// did not reach the hub (the connection dropped first) arrives again.
    pub fn is_redelivery(&self) -> bool {
        self.redelivered
    }

    /// Completes the message: its PUBACK is sent, in arrival order (a completion ahead of an
    /// earlier, still open message is held until that one is completed, as MQTT requires).
    /// Returns at once; the hub sets the message to Completed when the PUBACK arrives.
    ///
    /// Errors: [`Error::Disconnected`] when the connection the message arrived on is gone
    /// (the hub will deliver it again), when the hub already delivered it again because its
    /// lock timed out (complete the new copy), or the client is closed; [`Error::InvalidArgument`]
    /// when it was already completed.
    pub fn complete(&self) -> Result<(), Error> {
        let Some(ticket) = self.ticket else {
            return Ok(()); // QoS 0: nothing to acknowledge
        };
        let mut state = self.shared.acks();
        if state.closed {
            return Err(self.shared.closed_error());
        }
        let outcome = state.complete(ticket);
        drop(state);
        match outcome {
            CompleteOutcome::Released(ids) => {
                if !ids.is_empty() {
                    self.shared.wake.notify_one();
                }
                Ok(())
            }
            CompleteOutcome::AlreadyCompleted => Err(Error::InvalidArgument(format!(
                "message {:?} was already completed",
                self.content.message_id
            ))),
            CompleteOutcome::Superseded => {
                Counters::bump(&self.shared.counters.stale_completions);
                Err(Error::Disconnected(format!(
                    "message {:?} was delivered again after its lock timed out: this copy cannot be completed any more; complete the redelivered copy",
                    self.content.message_id
                )))
            }
            CompleteOutcome::Stale => {
                Counters::bump(&self.shared.counters.stale_completions);
                Err(Error::Disconnected(format!(
                    "message {:?} arrived on a connection that has since dropped: it cannot be completed any more and the hub will deliver it again",
                    self.content.message_id
                )))
            }
        }
    }

    /// Always [`Error::NotSupported`]: IoT Hub documents that devices connected over MQTT
    /// cannot reject a cloud-to-device message (let it expire, or complete it and ignore it).
    pub fn reject(&self) -> Result<(), Error> {
        Err(Error::NotSupported(
            "reject is not supported over MQTT: IoT Hub does not let MQTT devices reject cloud-to-device messages (complete it, or let it expire)".into(),
        ))
    }

    /// Always [`Error::NotSupported`]: IoT Hub documents that devices connected over MQTT
    /// cannot abandon a cloud-to-device message (not completing it has the same effect once
    /// its lock times out).
    pub fn abandon(&self) -> Result<(), Error> {
        Err(Error::NotSupported(
            "abandon is not supported over MQTT: IoT Hub does not let MQTT devices abandon cloud-to-device messages (leave it uncompleted: it is delivered again after the lock timeout)".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::ErrorKind;

    const PREFIX: &str = "devices/dev1/messages/devicebound/";

    /// A message as the task would hand it over: arrived on the current connection with
    /// packet id `pkid` (QoS 1), or QoS 0 with no packet id.
    fn message(shared: &Arc<Shared>, pkid: Option<u16>, id: &str) -> C2dMessage {
        let topic = format!("{PREFIX}%24.mid={id}");
        let content = MessageContent::parse_owned(topic, PREFIX, Bytes::from_static(b"x")).unwrap();
        let ticket = pkid.map(|p| shared.acks().arrived(p, Some(id)));
        C2dMessage::new(content, false, ticket, shared.clone())
    }

    fn pending(shared: &Shared) -> Vec<u16> {
        let mut batch = Vec::new();
        shared.acks().take_current(&mut batch);
        batch
    }

    #[test]
    fn completion_releases_pubacks_in_arrival_order() {
        let shared = Arc::new(Shared::new("dev1".into()));
        let first = message(&shared, Some(7), "a");
        let second = message(&shared, Some(8), "b");
        assert_eq!(first.message_id.as_deref(), Some("a"));
        second.complete().unwrap();
        assert!(pending(&shared).is_empty(), "held behind the first");
        first.complete().unwrap();
        assert_eq!(pending(&shared), vec![7, 8]);
        let again = first.complete().unwrap_err();
        assert_eq!(again.kind(), ErrorKind::InvalidArgument, "{again}");
        assert_eq!(shared.counters.snapshot().stale_completions, 0);
    }

    #[test]
    fn a_completion_after_the_connection_dropped_is_disconnected_and_counted() {
        let shared = Arc::new(Shared::new("dev1".into()));
        let msg = message(&shared, Some(1), "a");
        shared.acks().acks.new_connection();
        let err = msg.complete().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Disconnected);
        assert!(err.to_string().contains("has since dropped"), "{err}");
        assert_eq!(shared.counters.snapshot().stale_completions, 1);
    }

    #[test]
    fn a_superseded_copy_cannot_be_completed() {
        let shared = Arc::new(Shared::new("dev1".into()));
        let old = message(&shared, Some(1), "a");
        let new = message(&shared, Some(2), "a");
        let err = old.complete().unwrap_err();
        assert!(err.to_string().contains("delivered again"), "{err}");
        new.complete().unwrap();
        assert_eq!(pending(&shared), vec![2]);
        assert_eq!(shared.counters.snapshot().stale_completions, 1);
    }

    #[test]
    fn qos0_needs_nothing_and_a_closed_client_says_why() {
        let shared = Arc::new(Shared::new("dev1".into()));
        message(&shared, None, "q").complete().unwrap();
        let msg = message(&shared, Some(1), "a");
        shared.stop(Error::Authentication("token expired".into()));
        shared.acks().close();
        let err = msg.complete().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Authentication);
        assert_eq!(msg.reject().unwrap_err().kind(), ErrorKind::NotSupported);
        assert_eq!(msg.abandon().unwrap_err().kind(), ErrorKind::NotSupported);
    }
}
