//! The queue's state machine, driven with explicit times: no test waits.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
use super::*;

fn at(base: Now, secs: u64) -> Now {
    Now {
        instant: base.instant + Duration::from_secs(secs),
        utc: base.utc + Duration::from_secs(secs),
    }
}

fn queue_with(n: u64, base: Now) -> DeviceQueue {
    let mut q = DeviceQueue::default();
    for i in 0..n {
        let m = C2dMessage::new("x")
            .message_id(format!("m{i}"))
            .ttl(Duration::from_secs(100));
        q.enqueue(
            store(m, i, base, Duration::from_secs(3600)).unwrap(),
            "d",
            3,
        )
        .unwrap();
    }
    q
}

#[test]
fn full_queue_refuses() {
    let base = Now::current();
    let mut q = queue_with(3, base);
    let m = store(C2dMessage::new("x"), 9, base, Duration::from_secs(60)).unwrap();
    assert!(matches!(
        q.enqueue(m, "d", 3),
        Err(IotHubError::QueueFull { max: 3, .. })
    ));
}

#[test]
fn lock_timeouts_count_deliveries_then_dead_letter() {
    let base = Now::current();
    let mut q = queue_with(1, base);
    let lock = Duration::from_secs(2);
    assert_eq!(q.deliver(1, base, lock).len(), 1);
    assert!(
        q.deliver(1, base, lock).is_empty(),
        "locked messages are not redelivered"
    );
    assert!(q.tick(at(base, 1), 2).is_empty());
    assert!(
        q.tick(at(base, 2), 2).is_empty(),
        "back to Enqueued after 1 delivery"
    );
    let again = q.deliver(1, at(base, 2), lock);
    assert_eq!(again.len(), 1);
    let out = q.tick(at(base, 4), 2);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].status, FeedbackStatus::DeliveryCountExceeded);
    assert_eq!(q.depth(), 0);
    assert_eq!(q.info("d", 3).finished[0].delivery_count, 2);
}

#[test]
fn puback_completes_only_the_current_lock() {
    let base = Now::current();
    let mut q = queue_with(2, base);
    let d = q.deliver(7, base, Duration::from_secs(2));
    assert!(q.complete(8, d[0].lock, base).is_none(), "other connection");
    let done = q.complete(7, d[0].lock, base).unwrap();
    assert_eq!(done.status, FeedbackStatus::Success);
    assert!(q.complete(7, d[0].lock, base).is_none(), "twice");
    assert_eq!(q.depth(), 1);
    let expired = q.tick(at(base, 100), 10);
    assert_eq!(expired[0].status, FeedbackStatus::Expired);
}

const MAX: u32 = 3;
const LOCK: Duration = Duration::from_secs(60);

fn settle(q: &mut DeviceQueue, token: &str, s: Settlement, now: Now) -> Option<Outcome> {
    q.settle("d", token, s, now, MAX).unwrap()
}

#[test]
fn lock_tokens_are_guids_and_parse_back() {
    let t = new_token();
    let text = format_token(t);
    assert_eq!(text.len(), 36);
    assert_eq!(text.as_bytes()[14], b'4', "version 4: {text}");
    assert!(matches!(text.as_bytes()[19], b'8' | b'9' | b'a' | b'b'));
    assert_eq!(parse_token(&text), Some(t));
    assert_eq!(
        parse_token(&format!("\"{}\"", text.to_uppercase())),
        Some(t)
    );
    assert_eq!(parse_token("not-a-guid"), None);
    assert_ne!(new_token(), new_token());
}

#[test]
fn token_delivery_locks_the_oldest_and_completes() {
    let base = Now::current();
    let mut q = queue_with(2, base);
    let a = q.deliver_locked("d", base, LOCK).unwrap();
    assert_eq!((a.sequence_number, a.delivery_count), (0, 1));
    assert_eq!(a.message.message_id.as_deref(), Some("m0"));
    assert_eq!(a.lock_until, base.utc + LOCK);
    let b = q.deliver_locked("d", base, LOCK).unwrap();
    assert_eq!(b.sequence_number, 1);
    assert!(q.deliver_locked("d", base, LOCK).is_none(), "both locked");
    assert!(
        q.deliver(1, base, LOCK).is_empty(),
        "MQTT does not take locked ones"
    );
    let done = settle(&mut q, &a.lock_token, Settlement::Complete, base).unwrap();
    assert_eq!(done.status, FeedbackStatus::Success);
    assert_eq!(q.depth(), 1);
    let info = q.info("d", 3);
    assert_eq!(info.messages[0].state, MessageState::Invisible);
    assert_eq!(info.finished[0].state, MessageState::Completed);
}

#[test]
fn reject_dead_letters_at_once() {
    let base = Now::current();
    let mut q = queue_with(1, base);
    let m = q.deliver_locked("d", base, LOCK).unwrap();
    let out = settle(&mut q, &m.lock_token, Settlement::Reject, base).unwrap();
    assert_eq!(out.status, FeedbackStatus::Rejected);
    assert_eq!(q.depth(), 0);
    let info = q.info("d", 3);
    assert_eq!(info.finished[0].state, MessageState::DeadLettered);
    assert_eq!(info.finished[0].status_code, Some(FeedbackStatus::Rejected));
    assert_eq!(info.finished[0].delivery_count, 1);
}

#[test]
fn abandon_enqueues_again_with_the_delivery_counted() {
    let base = Now::current();
    let mut q = queue_with(1, base);
    let m = q.deliver_locked("d", base, LOCK).unwrap();
    assert!(settle(&mut q, &m.lock_token, Settlement::Abandon, base).is_none());
    let info = q.info("d", 3);
    assert_eq!(info.messages[0].state, MessageState::Enqueued);
    assert_eq!(info.messages[0].delivery_count, 1);
    let again = q.deliver_locked("d", base, LOCK).unwrap();
    assert_eq!(again.delivery_count, 2);
    assert_ne!(again.lock_token, m.lock_token, "a new lock, a new token");
    // Abandoned messages go to MQTT too.
    assert!(settle(&mut q, &again.lock_token, Settlement::Abandon, base).is_none());
    let mqtt = q.deliver(5, base, LOCK);
    assert_eq!(mqtt.len(), 1);
}

#[test]
fn abandon_on_the_last_delivery_dead_letters() {
    let base = Now::current();
    let mut q = queue_with(1, base);
    for n in 1..MAX {
        let m = q.deliver_locked("d", base, LOCK).unwrap();
        assert_eq!(m.delivery_count, n);
        assert!(settle(&mut q, &m.lock_token, Settlement::Abandon, base).is_none());
    }
    let last = q.deliver_locked("d", base, LOCK).unwrap();
    assert_eq!(last.delivery_count, MAX);
    let out = settle(&mut q, &last.lock_token, Settlement::Abandon, base).unwrap();
    assert_eq!(out.status, FeedbackStatus::DeliveryCountExceeded);
    assert_eq!(q.depth(), 0);
    assert_eq!(q.info("d", 3).finished[0].delivery_count, MAX);
}

#[test]
fn stale_and_unknown_tokens_are_lock_lost() {
    let base = Now::current();
    let mut q = queue_with(2, base);
    let m = q.deliver_locked("d", base, LOCK).unwrap();
    settle(&mut q, &m.lock_token, Settlement::Complete, base);
    for s in [
        Settlement::Complete,
        Settlement::Reject,
        Settlement::Abandon,
    ] {
        let err = q.settle("d", &m.lock_token, s, base, MAX).unwrap_err();
        assert!(matches!(err, IotHubError::MessageLockLost { .. }), "{err}");
        assert_eq!(err.code(), "DeviceMessageLockLost");
    }
    for token in ["", "garbage", &format_token(new_token())] {
        assert!(
            q.settle("d", token, Settlement::Complete, base, MAX)
                .is_err()
        );
    }
    assert_eq!(q.depth(), 1, "nothing else touched");
}

#[test]
fn token_lock_timeout_enqueues_again_and_the_token_goes_stale() {
    let base = Now::current();
    let mut q = queue_with(1, base);
    let lock = Duration::from_secs(2);
    let m = q.deliver_locked("d", base, lock).unwrap();
    assert!(q.tick(at(base, 1), MAX).is_empty());
    assert_eq!(q.info("d", 3).messages[0].state, MessageState::Invisible);
    assert_eq!(q.next_deadline(), Some(base.instant + lock));
    assert!(q.tick(at(base, 2), MAX).is_empty());
    assert_eq!(q.info("d", 3).messages[0].state, MessageState::Enqueued);
    assert!(
        q.settle("d", &m.lock_token, Settlement::Complete, at(base, 2), MAX)
            .is_err()
    );
    assert_eq!(
        q.deliver_locked("d", at(base, 2), lock)
            .unwrap()
            .delivery_count,
        2
    );
}

#[test]
fn token_locks_outlive_connections_and_unreceive_uncounts() {
    let base = Now::current();
    let mut q = queue_with(1, base);
    let m = q.deliver_locked("d", base, LOCK).unwrap();
    assert!(q.release_connection(RESTORED, base, MAX).is_empty());
    assert!(q.release_connection(1, base, MAX).is_empty());
    assert_eq!(q.info("d", 3).messages[0].state, MessageState::Invisible);
    assert!(q.unreceive(&m.lock_token));
    assert!(!q.unreceive(&m.lock_token), "once");
    let info = q.info("d", 3);
    assert_eq!(info.messages[0].state, MessageState::Enqueued);
    assert_eq!(info.messages[0].delivery_count, 0);
}

#[test]
fn expired_messages_are_not_handed_out() {
    let base = Now::current();
    let mut q = queue_with(1, base);
    assert!(q.has_enqueued(base));
    assert!(!q.has_enqueued(at(base, 100)));
    assert!(q.deliver_locked("d", at(base, 100), LOCK).is_none());
}

#[test]
fn changes_are_tracked_for_the_data_dir() {
    let base = Now::current();
    let mut q = DeviceQueue::new(true);
    let m = C2dMessage::new("x").ttl(Duration::from_secs(100));
    q.enqueue(store(m, 7, base, LOCK).unwrap(), "d", 3).unwrap();
    q.take_changes();
    let m = q.deliver_locked("d", base, LOCK).unwrap();
    assert_eq!(q.take_changes(), vec![7]);
    assert!(matches!(
        q.item(7),
        Some(Item::Live {
            delivery_count: 1,
            lock_until: Some(_),
            ..
        })
    ));
    settle(&mut q, &m.lock_token, Settlement::Abandon, base);
    assert_eq!(q.take_changes(), vec![7]);
    assert!(matches!(
        q.item(7),
        Some(Item::Live {
            lock_until: None,
            ..
        })
    ));
    let m = q.deliver_locked("d", base, LOCK).unwrap();
    q.take_changes();
    settle(&mut q, &m.lock_token, Settlement::Reject, base);
    assert_eq!(q.take_changes(), vec![7]);
    assert!(matches!(q.item(7), Some(Item::Finished(f)) if f.status == FeedbackStatus::Rejected));
}

#[test]
fn pubacks_and_tokens_find_their_message_in_a_long_queue() {
    // A queue far deeper than IoT Hub's 50, delivered at once: every delivery gets its own
    // lock, and each PUBACK (in any order) completes exactly its message. The lookups
    // go through the index of lock holders, not a scan per message.
    let base = Now::current();
    let n = 5_000u64;
    let mut q = DeviceQueue::default();
    for i in 0..n {
        let m = C2dMessage::new("x").ttl(Duration::from_secs(100));
        let stored = store(m, i, base, Duration::from_secs(3600)).unwrap();
        q.enqueue(stored, "d", n as usize).unwrap();
    }
    let d = q.deliver(7, base, Duration::from_secs(60));
    assert_eq!(d.len(), n as usize);
    let locks: std::collections::HashSet<u128> = d.iter().map(|x| x.lock).collect();
    assert_eq!(locks.len(), n as usize, "locks are distinct");
    for delivery in d.iter().rev() {
        let done = q.complete(7, delivery.lock, base).unwrap();
        assert_eq!(done.stored.sequence_number, delivery.stored.sequence_number);
    }
    assert_eq!(q.depth(), 0);

    // Tokens: the middle one settles its own message; the others still lock theirs.
    let mut q = queue_with(3, base);
    let locked: Vec<LockedMessage> = (0..3)
        .map(|_| {
            q.deliver_locked("d", base, Duration::from_secs(60))
                .unwrap()
        })
        .collect();
    let done = settle(&mut q, &locked[1].lock_token, Settlement::Complete, base).unwrap();
    assert_eq!(done.stored.sequence_number, locked[1].sequence_number);
    for other in [&locked[0], &locked[2]] {
        let done = settle(&mut q, &other.lock_token, Settlement::Reject, base).unwrap();
        assert_eq!(done.stored.sequence_number, other.sequence_number);
    }
}
