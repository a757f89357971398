//! [`C2dMessage`]: a received cloud-to-device message as the application holds it, and its
//! settlement: complete, reject or abandon (recorded in the shared state; the connection task
//! writes the PUBACK or the AMQP disposition).

use std::ops::Deref;
use std::sync::Arc;

use super::completion::{CompleteOutcome, Ticket};
use super::message::MessageContent;
use super::settle::{Handle, Outcome};
use super::shared::{Counters, Shared};
use crate::protocol::errors::Error;

/// A received cloud-to-device message. Read it through [`Deref`] to [`MessageContent`]
/// (`msg.message_id`, `msg.payload`, `msg.property("name")`...), then settle it: [`complete`]
/// it, or (over AMQP) [`reject`] or [`abandon`] it.
///
/// Nothing is settled until the application says so; a message never settled goes back to
/// the hub's queue when its lock times out (or the connection drops) and is delivered again,
/// with [`C2dMessage::is_redelivery`] set.
///
/// ```no_run
/// # async fn demo(client: mqstate::iothub::DeviceClient) -> Result<(), mqstate::Error> {
/// let msg = client.receive().await?;
/// if msg.is_redelivery() {
///     println!("seen before: {:?}", msg.message_id);
/// }
/// if msg.payload.is_empty() {
///     msg.reject()?; // AMQP only: dead-lettered, the sender gets `Rejected` feedback
/// } else {
///     msg.complete()?;
/// }
/// # Ok(()) }
/// ```
///
/// [`complete`]: C2dMessage::complete
/// [`reject`]: C2dMessage::reject
/// [`abandon`]: C2dMessage::abandon
#[derive(Debug, Clone)]
pub struct C2dMessage {
    content: MessageContent,
    redelivered: bool,
    delivery_count: Option<u32>,
    settle: Settle,
    shared: Arc<Shared>,
}

/// How a message is settled, by transport.
#[derive(Debug, Clone, Copy)]
enum Settle {
    /// Its place in the order of PUBACKs; none for a QoS 0 message (nothing to acknowledge).
    Mqtt(Option<Ticket>),
    /// Its delivery on the AMQP receiver link it arrived on.
    #[cfg_attr(
        not(feature = "amqp"),
        allow(dead_code, reason = "made by the AMQP transport only")
    )]
    Amqp(Handle),
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
            delivery_count: None,
            settle: Settle::Mqtt(ticket),
            shared,
        }
    }

    /// A message as the AMQP connection task hands it to the application: its delivery
    /// `handle` and the delivery count of its header.
    #[cfg(feature = "amqp")]
    pub(super) fn amqp(
        content: MessageContent,
        redelivered: bool,
        delivery_count: u32,
        handle: Handle,
        shared: Arc<Shared>,
    ) -> Self {
        C2dMessage {
            content,
            redelivered,
            delivery_count: Some(delivery_count),
            settle: Settle::Amqp(handle),
            shared,
        }
    }

    /// The decoded content.
    pub fn content(&self) -> &MessageContent {
        &self.content
    }

    /// True when this message was delivered before: the MQTT DUP flag or, over AMQP, a
    /// delivery count above 0; or a message id this client already received. Delivery is
    /// at-least-once, and a message whose settlement did not reach the hub (the connection
    /// dropped first) arrives again.
    pub fn is_redelivery(&self) -> bool {
        self.redelivered
    }

    /// Over AMQP, how many times the hub delivered this message before (the AMQP header's
    /// delivery count: 0 the first time, one more after each abandon, lost lock or lost
    /// connection); `None` over MQTT, which does not carry it.
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::iothub::DeviceClient) -> Result<(), mqstate::Error> {
    /// let msg = client.receive().await?;
    /// if msg.delivery_count() >= Some(3) {
    ///     msg.reject()?; // tried three times already: give up on it
    /// } else {
    ///     msg.abandon()?; // not now: the hub delivers it again
    /// }
    /// # Ok(()) }
    /// ```
    pub fn delivery_count(&self) -> Option<u32> {
        self.delivery_count
    }

    /// Completes the message (the hub sets it to Completed, with `Success` feedback when the
    /// sender asked for it). Returns at once; the connection task writes the settlement.
    ///
    /// Over MQTT its PUBACK is sent in arrival order (a completion ahead of an earlier, still
    /// open message is held until that one is completed, as MQTT requires); over AMQP each
    /// message is settled on its own, in any order.
    ///
    /// Errors: [`Error::LockLost`] when the connection or link the message arrived on is gone
    /// (the hub delivers it again), or the hub already delivered it again because its lock
    /// timed out (settle the new copy); [`Error::InvalidArgument`] when it was already
    /// settled; the reason the client stopped when it is closed.
    pub fn complete(&self) -> Result<(), Error> {
        let ticket = match self.settle {
            Settle::Mqtt(Some(ticket)) => ticket,
            Settle::Mqtt(None) => return Ok(()), // QoS 0: nothing to acknowledge
            Settle::Amqp(handle) => return self.settle_amqp(handle, Outcome::Complete),
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
                Err(Error::LockLost(format!(
                    "message {:?} was delivered again after its lock timed out: this copy cannot be completed any more; complete the redelivered copy",
                    self.content.message_id
                )))
            }
            CompleteOutcome::Stale => {
                Counters::bump(&self.shared.counters.stale_completions);
                Err(Error::LockLost(format!(
                    "message {:?} arrived on a connection that has since dropped: it cannot be completed any more and the hub will deliver it again",
                    self.content.message_id
                )))
            }
        }
    }

    /// Rejects the message (AMQP): the hub dead-letters it, and the sender gets `Rejected`
    /// feedback when it asked for negative feedback. Returns at once, like
    /// [`C2dMessage::complete`], with the same errors.
    ///
    /// Over MQTT it is always [`Error::NotSupported`], and the message is untouched: IoT Hub
    /// does not let MQTT devices reject a message (complete it, or let it expire).
    pub fn reject(&self) -> Result<(), Error> {
        match self.settle {
            Settle::Amqp(handle) => self.settle_amqp(handle, Outcome::Reject),
            Settle::Mqtt(_) => Err(Error::NotSupported(
                "reject is not supported over MQTT: IoT Hub does not let MQTT devices reject cloud-to-device messages (complete it, let it expire, or connect over AMQP)".into(),
            )),
        }
    }

    /// Abandons the message (AMQP): the hub enqueues it again and delivers it again (its
    /// [`delivery_count`](C2dMessage::delivery_count) one higher), until the hub's max delivery
    /// count dead-letters it (`DeliveryCountExceeded` feedback). Returns at once, like
    /// [`C2dMessage::complete`], with the same errors.
    ///
    /// Over MQTT it is always [`Error::NotSupported`], and the message is untouched: IoT Hub
    /// does not let MQTT devices abandon a message (leave it uncompleted: it is delivered
    /// again after the lock timeout).
    pub fn abandon(&self) -> Result<(), Error> {
        match self.settle {
            Settle::Amqp(handle) => self.settle_amqp(handle, Outcome::Abandon),
            Settle::Mqtt(_) => Err(Error::NotSupported(
                "abandon is not supported over MQTT: IoT Hub does not let MQTT devices abandon cloud-to-device messages (leave it uncompleted: it is delivered again after the lock timeout; or connect over AMQP)".into(),
            )),
        }
    }

    /// Queues an AMQP settlement for the connection task, or says why it cannot be made.
    fn settle_amqp(&self, handle: Handle, outcome: Outcome) -> Result<(), Error> {
        let mut settlements = self.shared.settlements();
        if settlements.closed {
            return Err(self.shared.closed_error());
        }
        let settled = settlements.settle(handle, outcome);
        drop(settlements);
        match settled {
            Ok(()) => {
                self.shared.wake.notify_one();
                Ok(())
            }
            Err(refusal) => {
                if !matches!(refusal, super::settle::Refusal::AlreadySettled(_)) {
                    Counters::bump(&self.shared.counters.stale_completions);
                }
                Err(refusal.error(self.content.message_id.as_deref(), outcome))
            }
        }
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
        assert_eq!(err.kind(), ErrorKind::LockLost);
        assert!(err.to_string().contains("has since dropped"), "{err}");
        assert_eq!(shared.counters.snapshot().stale_completions, 1);
    }

    #[test]
    fn a_superseded_copy_cannot_be_completed() {
        let shared = Arc::new(Shared::new("dev1".into()));
        let old = message(&shared, Some(1), "a");
        let new = message(&shared, Some(2), "a");
        let err = old.complete().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::LockLost);
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

    #[cfg(feature = "amqp")]
    #[test]
    fn amqp_messages_settle_three_ways_once_and_not_after_their_link_closed() {
        let shared = Arc::new(Shared::new("dev1".into()));
        shared.settlements().new_link();
        let amqp = |id: &str| {
            let content = MessageContent::parse(PREFIX, "dev1", Bytes::new()).unwrap();
            let (handle, _) = shared.settlements().arrived(Some(id));
            C2dMessage::amqp(content, false, 0, handle, shared.clone())
        };
        let (a, b, c, d) = (amqp("a"), amqp("b"), amqp("c"), amqp("d"));
        assert_eq!(a.delivery_count(), Some(0));
        c.abandon().unwrap();
        a.reject().unwrap();
        b.complete().unwrap();
        let e = b.abandon().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        let mut queued = Vec::new();
        shared.settlements().take_queued(&mut queued);
        assert_eq!(queued.len(), 3);
        shared.settlements().new_link();
        let e = d.complete().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::LockLost, "{e}");
        assert_eq!(shared.counters.snapshot().stale_completions, 1);
        shared.settlements().close();
        assert_eq!(
            d.reject().unwrap_err().to_string(),
            "disconnected: the device client is closed"
        );
    }
}
