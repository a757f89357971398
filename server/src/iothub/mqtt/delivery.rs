//! How the device endpoint renders the hub's deliveries on MQTT: the device-bound topic that
//! carries a message's system and application properties, and the packet ids of a
//! connection's QoS 1 deliveries, each mapped to the lock its PUBACK completes. Packet ids are
//! MQTT's: the queue locks by lock token and knows no packet id.

use std::collections::HashMap;

use crate::iothub::domain::message::{Ack, format_time};
use crate::iothub::domain::properties::{self, Property};
use crate::iothub::domain::queue::Stored;

/// The device-bound topic of a message: every system property set, `iothub-ack` unless none,
/// then the application properties in order.
pub(super) fn devicebound_topic(device_id: &str, stored: &Stored) -> String {
    let sp = stored.system_properties(device_id);
    let mut bag: Vec<Property> = Vec::new();
    let mut system = |name: &str, value: Option<&str>| {
        if let Some(v) = value {
            bag.push((name.to_owned(), Some(v.to_owned())));
        }
    };
    system("$.mid", sp.message_id);
    system("$.to", Some(&sp.to));
    system("$.exp", Some(&format_time(sp.expiry)));
    system("$.cid", sp.correlation_id);
    system("$.uid", sp.user_id);
    system("$.ct", sp.content_type);
    system("$.ce", sp.content_encoding);
    if sp.ack != Ack::None {
        bag.push(("iothub-ack".to_owned(), Some(sp.ack.as_str().to_owned())));
    }
    bag.extend(stored.message.properties.iter().cloned());
    format!(
        "devices/{device_id}/messages/devicebound/{}",
        properties::encode(&bag)
    )
}

/// A connection's QoS 1 deliveries waiting for their PUBACK: packet id -> lock.
#[derive(Debug, Default)]
pub(super) struct InFlight {
    locks: HashMap<u16, u128>,
    last: u16,
}

impl InFlight {
    /// A packet id for a delivery locked under `lock`: the next one not in flight (0 is not a
    /// packet id). `None` when all 65,535 are in flight, which a queue's depth limit keeps
    /// from happening.
    pub(super) fn send(&mut self, lock: u128) -> Option<u16> {
        for _ in 0..u16::MAX {
            self.last = self.last.checked_add(1).unwrap_or(1);
            if let std::collections::hash_map::Entry::Vacant(slot) = self.locks.entry(self.last) {
                slot.insert(lock);
                return Some(self.last);
            }
        }
        None
    }

    /// The lock a PUBACK for `packet_id` completes, if that packet id is in flight.
    pub(super) fn acked(&mut self, packet_id: u16) -> Option<u128> {
        self.locks.remove(&packet_id)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::iothub::domain::message::C2dMessage;
    use crate::iothub::domain::queue::{Now, store};

    #[test]
    fn the_topic_has_every_property() {
        let m = C2dMessage::new("x")
            .message_id("id 1")
            .correlation_id("c")
            .user_id("u")
            .content_type("application/json")
            .content_encoding("utf-8")
            .property("n", None)
            .property("e", Some(""))
            .ack(Ack::Full);
        let s = store(m, 1, Now::current(), Duration::from_secs(60)).unwrap();
        let exp = properties::encode_component(&format_time(s.expiry_utc));
        assert_eq!(
            devicebound_topic("d1", &s),
            format!(
                "devices/d1/messages/devicebound/%24.mid=id%201&%24.to=%2Fdevices%2Fd1%2Fmessages%2Fdevicebound&%24.exp={exp}&%24.cid=c&%24.uid=u&%24.ct=application%2Fjson&%24.ce=utf-8&iothub-ack=full&n&e="
            )
        );
    }

    #[test]
    fn packet_ids_are_distinct_wrap_past_zero_and_map_back_to_their_locks() {
        let mut f = InFlight::default();
        assert_eq!(f.send(10), Some(1));
        assert_eq!(f.send(20), Some(2));
        assert_eq!(f.acked(1), Some(10));
        assert_eq!(f.acked(1), None, "a second PUBACK completes nothing");
        assert_eq!(f.acked(9), None, "a packet id never sent");
        // Past 65,535 the ids start again at 1, skipping those still in flight (2).
        f.last = u16::MAX;
        assert_eq!(f.send(30), Some(1));
        assert_eq!(f.send(40), Some(3));
        assert_eq!(f.acked(2), Some(20));
        // Every id in flight: none is handed out twice.
        let mut f = InFlight::default();
        for lock in 0..u128::from(u16::MAX) {
            assert!(f.send(lock).is_some());
        }
        assert_eq!(f.send(99), None);
    }
}
