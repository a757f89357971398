//! When to reconnect with a fresh SAS token: IoT Hub ends a connection whose token expires,
//! so a client that makes its own tokens (a shared access key) reconnects before that.
//!
//! At 80% of the token's lifetime when no message is open (a reconnection then costs
//! nothing), and in any case 90% of the way to its expiry (or 5 s before it, for short
//! lifetimes), even with messages open (they are redelivered on the new connection).

use std::time::Duration;

use tokio::time::Instant;

/// The two renewal deadlines of a connection made at `connected_at` with a token that
/// expires `remaining` after `now` and was made for `lifetime`: the soft one (used when no
/// message is open) and the hard one (never later than expiry, never before the soft one).
pub(super) fn renew_deadlines(
    connected_at: Instant,
    now: Instant,
    remaining: Duration,
    lifetime: Duration,
) -> (Instant, Instant) {
    let soft = connected_at + lifetime.mul_f64(0.8);
    let hard = (now + remaining)
        .checked_sub(Duration::from_secs(5).min(lifetime.mul_f64(0.1)))
        .unwrap_or(now)
        .max(soft);
    (soft, hard)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_long_token_is_renewed_at_80_percent_or_5_s_before_expiry() {
        let at = Instant::now();
        let (soft, hard) = renew_deadlines(at, at, HOUR, HOUR);
        assert_eq!(soft - at, Duration::from_secs(2880));
        assert_eq!(hard - at, Duration::from_secs(3595));
    }

    #[test]
    fn a_short_token_keeps_a_tenth_of_its_lifetime() {
        let at = Instant::now();
        let lifetime = Duration::from_secs(20);
        let (soft, hard) = renew_deadlines(at, at, lifetime, lifetime);
        assert_eq!(soft - at, Duration::from_secs(16));
        assert_eq!(hard - at, Duration::from_secs(18));
    }

    #[test]
    fn the_hard_deadline_is_never_before_the_soft_one() {
        // The token was made long before the connection (the clock says it expires soon).
        let at = Instant::now();
        let later = at + Duration::from_secs(100);
        let (soft, hard) = renew_deadlines(at, later, Duration::from_secs(1), HOUR);
        assert_eq!(soft - at, Duration::from_secs(2880));
        assert_eq!(hard, soft);
    }
}
