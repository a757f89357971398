//! Property tests for HLC values and clocks, hex, and the notification topics: formatting then
//! parsing is the identity, the order is the protocol's, merges always move forward, and no
//! input makes a parser panic.

use std::cmp::Ordering;
use std::sync::Arc;

use mqstate::protocol::hlc::{Hlc, HlcClock, HlcError, ManualClock, WallClock};
use mqstate::protocol::topics;
use proptest::prelude::*;

const DRIFT_MS: u64 = 60_000;

/// Milliseconds and counters, biased towards ties and the ends of the range.
fn number() -> impl Strategy<Value = u64> {
    prop_oneof![
        0..4u64,
        u64::MAX - 3..=u64::MAX,
        any::<u64>(),
        1_696_374_425_000..1_696_374_425_004u64,
    ]
}

/// Node ids: anything but ':', sometimes from a tiny alphabet so that ties happen.
fn node_id() -> impl Strategy<Value = String> {
    prop_oneof!["[^:]{0,12}", "[aZé]{0,2}"]
}

fn hlc() -> impl Strategy<Value = Hlc> {
    (number(), number(), node_id()).prop_map(|(ms, counter, node)| Hlc::new(ms, counter, node))
}

/// A clock holding exactly `value` (see `vectors_hlc.rs`), its wall clock then set to `now`.
fn clock_holding(value: &Hlc, now: u64) -> (Arc<ManualClock>, HlcClock) {
    let wall = Arc::new(ManualClock::new(value.ms));
    let clock = HlcClock::with_wall_clock(value.node_id.clone(), wall.clone());
    if (value.ms, value.counter) != (0, 0) {
        if value.counter == 0 {
            clock.send_update().unwrap();
        } else {
            clock
                .merge(&Hlc::new(value.ms, value.counter - 1, "setup"))
                .unwrap();
        }
    }
    assert_eq!(&clock.current(), value);
    wall.set(now);
    (wall, clock)
}

/// The merge rules of docs/protocol.md section 4, written independently of the library, in u128
/// so that overflow is visible.
fn model_merge(own: (u64, u64), remote: (u64, u64), now: u64) -> (u64, u128) {
    let ms = own.0.max(remote.0).max(now);
    let counter = if ms == own.0 && ms == remote.0 {
        u128::from(own.1.max(remote.1)) + 1
    } else if ms == own.0 {
        u128::from(own.1) + 1
    } else if ms == remote.0 {
        u128::from(remote.1) + 1
    } else {
        0
    };
    (ms, counter)
}

proptest! {
    #![proptest_config(crate::common::proptest_config(512))]

    #[test]
    fn display_then_parse_is_identity(h in hlc()) {
        let text = h.to_string();
        prop_assert_eq!(text.parse::<Hlc>().unwrap(), h.clone());
        prop_assert_eq!(Hlc::parse_bytes(text.as_bytes()).unwrap(), h);
    }

    #[test]
    fn any_padding_parses_to_the_same_value(h in hlc(), pad_ms in 0..30usize, pad_c in 0..30usize) {
        let text = format!("{}{}:{}{}:{}", "0".repeat(pad_ms), h.ms, "0".repeat(pad_c), h.counter, h.node_id);
        prop_assert_eq!(text.parse::<Hlc>().unwrap(), h);
    }

    #[test]
    fn order_is_total_and_the_protocols(a in hlc(), b in hlc()) {
        let expected = (a.ms, a.counter, a.node_id.as_bytes()).cmp(&(b.ms, b.counter, b.node_id.as_bytes()));
        prop_assert_eq!(a.cmp(&b), expected);
        prop_assert_eq!(b.cmp(&a), expected.reverse());
        prop_assert_eq!(a.partial_cmp(&b), Some(expected));
        prop_assert_eq!(a == b, expected == Ordering::Equal);
        // The string form keeps the order once parsed.
        let (pa, pb) = (a.to_string().parse::<Hlc>().unwrap(), b.to_string().parse::<Hlc>().unwrap());
        prop_assert_eq!(pa.cmp(&pb), expected);
    }

    #[test]
    fn order_is_transitive(a in hlc(), b in hlc(), c in hlc()) {
        let mut v = [a, b, c];
        v.sort();
        prop_assert!(v[0] <= v[1] && v[1] <= v[2] && v[0] <= v[2]);
    }

    #[test]
    fn parsing_never_panics_and_what_parses_round_trips(s in "\\PC{0,40}|[0-9:+ -]{0,40}") {
        if let Ok(h) = s.parse::<Hlc>() {
            prop_assert_eq!(h.to_string().parse::<Hlc>().unwrap(), h);
        } else {
            prop_assert!(matches!(s.parse::<Hlc>(), Err(HlcError::Malformed { .. })), "{:?}", s);
        }
    }

    #[test]
    fn merge_within_drift_is_greater_than_both(
        own in hlc(),
        remote in hlc(),
        now in number(),
    ) {
        // Keep the remote and the clock within the drift of `now`, as a well-behaved peer is.
        let limit = now.saturating_add(DRIFT_MS);
        let own = Hlc::new(own.ms.min(limit), own.counter, own.node_id);
        let remote = Hlc::new(remote.ms.min(limit), remote.counter, remote.node_id);
        let (_wall, clock) = clock_holding(&own, now);
        let (ms, counter) = model_merge((own.ms, own.counter), (remote.ms, remote.counter), now);
        match clock.merge(&remote) {
            Ok(new) => {
                prop_assert_eq!((new.ms, u128::from(new.counter)), (ms, counter));
                prop_assert!((new.ms, new.counter) > (own.ms, own.counter));
                prop_assert!((new.ms, new.counter) > (remote.ms, remote.counter));
                prop_assert_eq!(&new.node_id, &own.node_id);
                prop_assert_eq!(clock.current(), new);
            }
            Err(e) => {
                prop_assert_eq!(e, HlcError::CounterOverflow { ms });
                prop_assert!(counter > u128::from(u64::MAX));
                prop_assert_eq!(clock.current(), own);
            }
        }
    }

    #[test]
    fn merge_beyond_drift_fails_and_keeps_the_clock(
        own_counter in number(),
        now in 0..u64::MAX - DRIFT_MS - 1,
        beyond in 1..=1_000_000u64,
        remote_counter in number(),
    ) {
        let own = Hlc::new(now, own_counter, "me");
        let (_wall, clock) = clock_holding(&own, now);
        let remote = Hlc::new(now.saturating_add(DRIFT_MS).saturating_add(beyond), remote_counter, "r");
        let err = clock.merge(&remote).unwrap_err();
        prop_assert!(matches!(err, HlcError::Drift { .. }), "{:?}", err);
        prop_assert_eq!(clock.current(), own);
        prop_assert!(clock.check_not_too_far_ahead(&remote).is_err());
    }

    #[test]
    fn sends_strictly_increase_whatever_the_wall_clock_does(
        start in 0..u64::MAX / 2,
        steps in prop::collection::vec((-30_000i64..30_000, prop::option::of(hlc())), 1..40),
    ) {
        let wall = Arc::new(ManualClock::new(start));
        let clock = HlcClock::with_wall_clock("me", wall.clone());
        let mut last = clock.send_update().unwrap();
        for (step, remote) in steps {
            // The wall clock jitters back and forth by up to 30 s, well within the drift.
            wall.set(start.saturating_add_signed(step));
            if let Some(remote) = remote {
                let remote = Hlc::new(remote.ms.min(wall.now_ms()), remote.counter.min(u64::MAX / 2), remote.node_id);
                let merged = clock.merge(&remote).unwrap();
                prop_assert!(merged > last && (merged.ms, merged.counter) > (remote.ms, remote.counter));
                last = merged;
            }
            let next = clock.send_update().unwrap();
            prop_assert!(next > last, "{} !> {}", next, last);
            last = next;
        }
    }

    #[test]
    fn hex_round_trips(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let hex = topics::hex_encode(&bytes);
        prop_assert_eq!(hex.len(), bytes.len() * 2);
        prop_assert!(hex.bytes().all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b)));
        prop_assert_eq!(topics::hex_decode(&hex).unwrap(), bytes.clone());
        prop_assert_eq!(topics::hex_decode(&hex.to_lowercase()).unwrap(), bytes);
    }

    #[test]
    fn hex_decode_never_panics(s in "\\PC{0,20}|[0-9a-fA-F]{0,20}") {
        let _ = topics::hex_decode(&s);
    }

    #[test]
    fn notification_topics_round_trip(
        client_id in "\\PC{0,20}|[/+#\u{0}a-z]{0,8}",
        key in prop::collection::vec(any::<u8>(), 0..100),
        lower in any::<bool>(),
    ) {
        let mut topic = topics::notification_topic(&client_id, &key);
        let filter = topics::notification_filter(&client_id);
        prop_assert_eq!(filter.strip_suffix('+'), topic.strip_suffix(&topics::hex_encode(&key)));
        if lower {
            let (prefix, levels) = topic.split_at(topics::FORBIDDEN_RESPONSE_PREFIX.len());
            topic = format!("{prefix}{}", levels.to_lowercase());
        }
        prop_assert_eq!(topics::parse_notification_topic(&topic).unwrap(), (client_id, key));
        // A notification topic can never serve as a response topic.
        prop_assert_eq!(
            topics::validate_response_topic(&topic).unwrap_err().kind_str(),
            "reserved_prefix"
        );
    }

    #[test]
    fn response_topics_are_always_valid(client_id in "\\PC{0,30}|[/+#\u{0}a-z]{0,8}") {
        let topic = topics::response_topic(&client_id);
        prop_assert_eq!(topics::validate_response_topic(&topic), Ok(()));
    }

    #[test]
    fn notification_parse_never_panics(s in "\\PC{0,80}", tail in "[0-9a-fA-F/+a-z]{0,40}") {
        let _ = topics::parse_notification_topic(&s);
        let _ = topics::parse_notification_topic(&format!("{}/{tail}", topics::FORBIDDEN_RESPONSE_PREFIX));
    }
}

#[test]
fn clock_holding_reaches_extreme_values() {
    for h in [
        Hlc::new(0, 0, "n"),
        Hlc::new(0, u64::MAX, ""),
        Hlc::new(u64::MAX, 0, "n"),
        Hlc::new(u64::MAX, u64::MAX, "n"),
    ] {
        let (_wall, clock) = clock_holding(&h, 0);
        assert_eq!(clock.current(), h);
    }
}
