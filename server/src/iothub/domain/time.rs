//! Wall-clock times that peers send: a SAS token's `se`, an AMQP message's absolute expiry
//! time. Each is a number a peer chooses freely, so each is bounded here, once, before it
//! becomes a `SystemTime`: `UNIX_EPOCH + Duration` panics past `SystemTime`'s range (a token
//! with `se=9223372036854775808` once took the server down this way, before any signature
//! check), and RFC 3339, the form IoT Hub writes every time in, ends with the year 9999
//! (`humantime` refuses to write a later one, and `to_string()` then panics).
//!
//! ```
//! use mqstate_server::iothub::time;
//!
//! assert!(time::from_unix_secs(1_700_000_000).is_some());
//! assert!(time::from_unix_secs(9_223_372_036_854_775_808).is_none());
//! assert!(time::from_unix_millis(u64::MAX).is_none());
//! assert_eq!(time::format_rfc3339_millis(std::time::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The last second RFC 3339 can write, 9999-12-31T23:59:59Z, as seconds since the Unix epoch:
/// the latest time the hub accepts from a peer.
pub const LATEST_UNIX_SECS: u64 = 253_402_300_799;

/// The time `secs` seconds after the Unix epoch, or `None` after [`LATEST_UNIX_SECS`].
pub fn from_unix_secs(secs: u64) -> Option<SystemTime> {
    (secs <= LATEST_UNIX_SECS).then(|| UNIX_EPOCH + Duration::from_secs(secs))
}

/// The time `millis` milliseconds after the Unix epoch, or `None` after [`LATEST_UNIX_SECS`].
pub fn from_unix_millis(millis: u64) -> Option<SystemTime> {
    (millis / 1000 <= LATEST_UNIX_SECS).then(|| UNIX_EPOCH + Duration::from_millis(millis))
}

/// The latest time the hub accepts from a peer (see [`LATEST_UNIX_SECS`]).
pub fn latest() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(LATEST_UNIX_SECS)
}

/// `at` in RFC 3339 to the millisecond; a time outside RFC 3339's range is written as the
/// nearest one inside it, so that writing a time never fails (nor panics).
pub fn format_rfc3339_millis(at: SystemTime) -> String {
    let at = at.clamp(UNIX_EPOCH, latest());
    humantime::format_rfc3339_millis(at).to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_range_ends_with_the_year_9999() {
        assert_eq!(format_rfc3339_millis(latest()), "9999-12-31T23:59:59.000Z");
        assert!(from_unix_secs(LATEST_UNIX_SECS).is_some());
        assert!(from_unix_secs(LATEST_UNIX_SECS + 1).is_none());
        assert!(from_unix_millis(LATEST_UNIX_SECS * 1000 + 999).is_some());
        assert!(from_unix_millis((LATEST_UNIX_SECS + 1) * 1000).is_none());
        let far = UNIX_EPOCH + Duration::from_secs(1 << 40);
        assert_eq!(format_rfc3339_millis(far), "9999-12-31T23:59:59.000Z");
    }
}
