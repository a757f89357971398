//! Reconnection backoff: [`ReconnectPolicy`] and the attempts of one connection task.

use std::time::Duration;

use tokio::time::Instant;

///
/// Attempt `n` (from 0) waits a random duration in `[d/2, d]` where
/// `d = min(max_delay, initial_delay × 2^n)`, so that many clients cut off at once by a broker
/// restart do not all come back in the same millisecond.
///
/// The count of attempts starts again from 0 only once a connection has stayed up for at
/// least `max_delay`. A connection that the broker accepts and then drops at once (another
/// client connected with the same client id and took the session over, a quota, a proxy that
/// resets it) is therefore retried at a slowing pace, up to `max_delay` apart, instead of in a
/// loop several times a second.
///
/// ```
/// use std::time::Duration;
/// use mqstate::ReconnectPolicy;
///
/// let policy = ReconnectPolicy::default();
/// // rand01 = 1.0 gives the upper end of the range.
/// assert_eq!(policy.delay(0, 1.0), Duration::from_millis(100));
/// assert_eq!(policy.delay(3, 1.0), Duration::from_millis(800));
/// assert_eq!(policy.delay(60, 1.0), Duration::from_secs(10));
/// assert_eq!(policy.delay(3, 0.0), Duration::from_millis(400));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReconnectPolicy {
    /// The delay before the first reconnection attempt (upper end of its jitter range).
    pub initial_delay: Duration,
    /// The longest delay between two attempts; also how long a connection must last for the
    /// next loss to start again from `initial_delay`.
    pub max_delay: Duration,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        ReconnectPolicy {
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(10),
        }
    }
}

impl ReconnectPolicy {
    /// A policy with the given bounds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mqstate::ReconnectPolicy;
    ///
    /// let p = ReconnectPolicy::new(Duration::from_millis(10), Duration::from_secs(1));
    /// assert_eq!(p.delay(20, 1.0), Duration::from_secs(1));
    /// ```
    pub fn new(initial_delay: Duration, max_delay: Duration) -> Self {
        ReconnectPolicy {
            initial_delay,
            max_delay,
        }
    }

    /// The delay before attempt `attempt` (0 = first reconnection), for a uniform random
    /// number `rand01` in `[0, 1]` (values outside are clamped).
    pub fn delay(&self, attempt: u32, rand01: f64) -> Duration {
        let factor = 2u32.saturating_pow(attempt.min(31));
        let ceiling = self
            .initial_delay
            .checked_mul(factor)
            .unwrap_or(self.max_delay)
            .min(self.max_delay);
        let r = if rand01.is_nan() {
            0.5
        } else {
            rand01.clamp(0.0, 1.0)
        };
        ceiling.mul_f64(0.5 + r / 2.0)
    }
}

/// The reconnection attempts of one connection task, by [`ReconnectPolicy`]'s rule: the
/// count goes back to 0 only after a connection that lasted `max_delay`.
#[derive(Debug)]
pub(crate) struct Backoff {
    policy: ReconnectPolicy,
    attempt: u32,
    connected_at: Option<Instant>,
}

impl Backoff {
    pub(crate) fn new(policy: ReconnectPolicy) -> Self {
        Backoff {
            policy,
            attempt: 0,
            connected_at: None,
        }
    }

    /// A connection was made at `now`.
    pub(crate) fn connected(&mut self, now: Instant) {
        self.connected_at = Some(now);
    }

    /// The connection (or an attempt to make one) failed at `now`: how long to wait before
    /// the next attempt, and that attempt's number (1 = the first since the last connection
    /// that counted as stable).
    pub(crate) fn next_delay(&mut self, now: Instant, rand01: f64) -> (Duration, u32) {
        if let Some(since) = self.connected_at.take()
            && now.saturating_duration_since(since) >= self.policy.max_delay
        {
            self.attempt = 0;
        }
        let delay = self.policy.delay(self.attempt, rand01);
        self.attempt = self.attempt.saturating_add(1);
        (delay, self.attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_caps_and_jitters() {
        let p = ReconnectPolicy::new(Duration::from_millis(100), Duration::from_secs(5));
        let mut last = Duration::ZERO;
        for attempt in 0..10 {
            let hi = p.delay(attempt, 1.0);
            let lo = p.delay(attempt, 0.0);
            assert_eq!(lo * 2, hi);
            assert!(hi >= last);
            last = hi;
        }
        assert_eq!(p.delay(u32::MAX, 1.0), Duration::from_secs(5));
        assert_eq!(p.delay(2, f64::NAN), p.delay(2, 0.5));
        assert_eq!(p.delay(2, 7.0), p.delay(2, 1.0));
    }

    #[test]
    fn backoff_starts_again_only_after_a_connection_that_lasted_max_delay() {
        let p = ReconnectPolicy::new(Duration::from_millis(100), Duration::from_secs(2));
        let mut b = Backoff::new(p);
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        // Failed attempts, no connection in between: 100, 200, 400 ms.
        assert_eq!(b.next_delay(ms(0), 1.0), (Duration::from_millis(100), 1));
        assert_eq!(b.next_delay(ms(100), 1.0), (Duration::from_millis(200), 2));
        assert_eq!(b.next_delay(ms(300), 1.0), (Duration::from_millis(400), 3));
        // Connected, then dropped after 1.999 s (a takeover, say): the count goes on.
        b.connected(ms(1_000));
        assert_eq!(
            b.next_delay(ms(2_999), 1.0),
            (Duration::from_millis(800), 4)
        );
        b.connected(ms(4_000));
        assert_eq!(
            b.next_delay(ms(4_010), 1.0),
            (Duration::from_millis(1_600), 5)
        );
        b.connected(ms(6_000));
        assert_eq!(b.next_delay(ms(6_010), 1.0), (Duration::from_secs(2), 6));
        // A connection that lasted max_delay counts as stable: back to the first delay.
        b.connected(ms(10_000));
        assert_eq!(
            b.next_delay(ms(12_000), 1.0),
            (Duration::from_millis(100), 1)
        );
        // The connection time is used once: failures after it go on counting.
        assert_eq!(
            b.next_delay(ms(12_100), 1.0),
            (Duration::from_millis(200), 2)
        );
    }
}
