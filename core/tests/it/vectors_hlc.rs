//! Runs the shared HLC vectors (`tests/vectors/hlc.json`), which the C, Python and Node
//! suites read too.

use std::sync::Arc;
use std::time::Duration;

use mqstate::protocol::hlc::{Hlc, HlcClock, HlcError, ManualClock};
use serde_json::Value;

use crate::common::vectors::{cases, load, str_of};

/// Numbers are decimal strings in the vectors (JavaScript cannot hold u64 exactly).
fn u64_of(case: &Value, field: &str) -> u64 {
    str_of(case, field)
        .parse()
        .unwrap_or_else(|e| panic!("{field}: {e}: {case}"))
}

fn hlc_of(case: &Value, field: &str) -> Hlc {
    str_of(case, field)
        .parse()
        .unwrap_or_else(|e| panic!("{field}: {e}: {case}"))
}

/// A clock holding exactly `value` (node id included), on a wall clock reading `now`.
fn clock_holding(value: &Hlc, now: u64, max_drift: Duration) -> HlcClock {
    // Drive the clock to the value through its public API, with the wall clock at the value's
    // milliseconds so that no drift check can interfere; then move the wall clock to `now`.
    let wall = Arc::new(ManualClock::new(value.ms));
    let clock =
        HlcClock::with_wall_clock(value.node_id.clone(), wall.clone()).with_max_drift(max_drift);
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
    clock
}

fn max_drift_of(case: &Value) -> Duration {
    match case.get("max_drift_ms") {
        Some(_) => Duration::from_millis(u64_of(case, "max_drift_ms")),
        None => Duration::from_secs(60),
    }
}

/// Checks an operation's outcome against `result` or `error`, and that a failed operation
/// left the clock unchanged.
fn check_outcome(case: &Value, clock: &HlcClock, before: &Hlc, outcome: Result<Hlc, HlcError>) {
    match (case.get("result"), case.get("error")) {
        (Some(_), None) => {
            let expected = hlc_of(case, "result");
            assert_eq!(outcome.as_ref().ok(), Some(&expected), "{case}");
            assert_eq!(clock.current(), expected, "{case}");
        }
        (None, Some(_)) => {
            let err = outcome.expect_err(&case.to_string());
            assert_eq!(err.kind_str(), str_of(case, "error"), "{case}: {err}");
            assert_eq!(&clock.current(), before, "the clock moved on error: {case}");
        }
        _ => panic!("exactly one of result and error: {case}"),
    }
}

#[test]
fn valid() {
    let doc = load("hlc.json");
    for case in cases(&doc, "valid") {
        let h: Hlc = str_of(case, "text")
            .parse()
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(h.ms, u64_of(case, "ms"), "{case}");
        assert_eq!(h.counter, u64_of(case, "counter"), "{case}");
        assert_eq!(h.node_id, str_of(case, "node_id"), "{case}");
        assert_eq!(h.to_string(), str_of(case, "display"), "{case}");
        // The display form parses back to the same value.
        assert_eq!(str_of(case, "display").parse::<Hlc>().unwrap(), h, "{case}");
        assert_eq!(
            Hlc::parse_bytes(str_of(case, "text").as_bytes()).unwrap(),
            h
        );
    }
}

#[test]
fn malformed() {
    let doc = load("hlc.json");
    for case in cases(&doc, "malformed") {
        let text = str_of(case, "text");
        let err = text.parse::<Hlc>().expect_err(&case.to_string());
        assert_eq!(err.kind_str(), "malformed", "{case}");
        assert_eq!(
            err.reason_code(),
            Some(str_of(case, "reason")),
            "{case}: {err}"
        );
        assert!(matches!(&err, HlcError::Malformed { input, .. } if input == text));
        assert!(err.to_string().starts_with("malformed HLC \""), "{err}");
    }
}

#[test]
fn ordering() {
    let doc = load("hlc.json");
    for case in cases(&doc, "ordering") {
        let lower = hlc_of(case, "lower");
        let higher = hlc_of(case, "higher");
        assert!(lower < higher, "{case}");
        assert!(higher > lower, "{case}");
        assert_ne!(lower, higher, "{case}");
    }
}

#[test]
fn equal() {
    let doc = load("hlc.json");
    for case in cases(&doc, "equal") {
        let a = hlc_of(case, "a");
        let b = hlc_of(case, "b");
        assert_eq!(a, b, "{case}");
        assert_eq!(a.cmp(&b), std::cmp::Ordering::Equal, "{case}");
        assert_eq!(a.to_string(), b.to_string(), "{case}");
    }
}

#[test]
fn merge() {
    let doc = load("hlc.json");
    for case in cases(&doc, "merge") {
        let before = hlc_of(case, "clock");
        let remote = hlc_of(case, "remote");
        let clock = clock_holding(&before, u64_of(case, "now"), max_drift_of(case));
        let outcome = clock.merge(&remote);
        if let Ok(new) = &outcome {
            assert!(
                (new.ms, new.counter) > (before.ms, before.counter),
                "{case}"
            );
            assert!(
                (new.ms, new.counter) > (remote.ms, remote.counter),
                "{case}"
            );
        }
        check_outcome(case, &clock, &before, outcome);
    }
}

#[test]
fn send() {
    let doc = load("hlc.json");
    for case in cases(&doc, "send") {
        let before = hlc_of(case, "clock");
        let clock = clock_holding(&before, u64_of(case, "now"), max_drift_of(case));
        let outcome = clock.send_update();
        check_outcome(case, &clock, &before, outcome);
    }
}

#[test]
fn too_far_ahead() {
    let doc = load("hlc.json");
    for case in cases(&doc, "too_far_ahead") {
        let clock = HlcClock::with_wall_clock(
            "StateStore",
            Arc::new(ManualClock::new(u64_of(case, "now"))),
        );
        let outcome = clock.check_not_too_far_ahead(&hlc_of(case, "remote"));
        match (case.get("ok"), case.get("error")) {
            (Some(Value::Bool(true)), None) => assert_eq!(outcome, Ok(()), "{case}"),
            (None, Some(_)) => {
                assert_eq!(
                    outcome.unwrap_err().kind_str(),
                    str_of(case, "error"),
                    "{case}"
                )
            }
            _ => panic!("exactly one of ok and error: {case}"),
        }
    }
}
