//! How the state store reconnects to its broker: promptly after every loss.
//!
//! Every client waits for the store, so the store must not back off the way an application
//! does (the core client's `mqstate::ReconnectPolicy` grows its delay until a connection
//! has lasted a while, which is right for many applications but left the store away for
//! seconds after a few broker restarts in a row). The store's delay before each attempt
//! starts at [`StoreReconnect::initial_delay`], doubles with each failed attempt of the same
//! outage up to [`StoreReconnect::max_delay`] (default [`DEFAULT_MAX_DELAY`], 500 ms), with
//! jitter (each delay is drawn between half and all of it), and starts again from the
//! initial delay after every successful connection: earlier losses never make it wait longer.
//! So once the broker accepts connections again, the store is back within `max_delay` and a
//! connection's round trips.
//!
//! A takeover of the store's client id (another client connecting with it, which makes the
//! broker close the store's connection) is a security event: it is logged at warn level and
//! the store reconnects just as promptly (see the store's `service` module).
//!
//! ```
//! use std::time::Duration;
//! use mqstate_server::statestore::reconnect::StoreReconnect;
//!
//! let policy = StoreReconnect::with_max_delay(Duration::from_secs(1)).unwrap();
//! // The first attempt after a loss waits 25-50 ms; the tenth never more than 1 s.
//! assert!(policy.delay(1) <= Duration::from_millis(50));
//! assert!(policy.delay(10) <= Duration::from_secs(1));
//! assert!(StoreReconnect::with_max_delay(Duration::ZERO).is_err());
//! ```

use std::time::Duration;

use crate::config_error::ConfigError;

/// The delay before the first attempt after a loss (before jitter).
pub const DEFAULT_INITIAL_DELAY: Duration = Duration::from_millis(50);

/// The longest delay between two attempts (before jitter): half the issue's 1 s bound, so
/// that the store is answering within 1 s of a broker being back even on a loaded machine.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_millis(500);

/// The shortest accepted `max_delay`: below it a broker that refuses connections at once
/// would be hammered in a busy loop.
pub const MIN_MAX_DELAY: Duration = Duration::from_millis(10);

/// The longest accepted `max_delay`.
pub const MAX_MAX_DELAY: Duration = Duration::from_secs(3600);

/// The store's reconnection policy; see the [module documentation](self).
///
/// ```
/// use mqstate_server::statestore::reconnect::{DEFAULT_MAX_DELAY, StoreReconnect};
///
/// assert_eq!(StoreReconnect::default().max_delay, DEFAULT_MAX_DELAY);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreReconnect {
    /// The delay before the first attempt after a loss, before jitter (lowered to
    /// `max_delay` when larger).
    pub initial_delay: Duration,
    /// The longest delay between two attempts, before jitter (from [`MIN_MAX_DELAY`] to
    /// [`MAX_MAX_DELAY`]).
    pub max_delay: Duration,
}

impl Default for StoreReconnect {
    fn default() -> Self {
        StoreReconnect {
            initial_delay: DEFAULT_INITIAL_DELAY,
            max_delay: DEFAULT_MAX_DELAY,
        }
    }
}

impl StoreReconnect {
    /// The default policy with another cap; an error if it is out of range.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mqstate_server::statestore::reconnect::StoreReconnect;
    ///
    /// let p = StoreReconnect::with_max_delay(Duration::from_secs(2)).unwrap();
    /// assert_eq!(p.max_delay, Duration::from_secs(2));
    /// assert!(StoreReconnect::with_max_delay(Duration::from_secs(7200)).is_err());
    /// ```
    pub fn with_max_delay(max_delay: Duration) -> Result<Self, ConfigError> {
        let policy = StoreReconnect {
            max_delay,
            ..StoreReconnect::default()
        };
        policy.check()?;
        Ok(policy)
    }

    /// Checks the bounds (done again when the store starts).
    ///
    /// ```
    /// use std::time::Duration;
    /// use mqstate_server::statestore::reconnect::StoreReconnect;
    ///
    /// let p = StoreReconnect { initial_delay: Duration::ZERO, ..StoreReconnect::default() };
    /// assert!(p.check().unwrap_err().to_string().contains("initial delay"));
    /// ```
    pub fn check(&self) -> Result<(), ConfigError> {
        if !(MIN_MAX_DELAY..=MAX_MAX_DELAY).contains(&self.max_delay) {
            return Err(ConfigError::new(format!(
                "the store's reconnection max delay is {}: it must be from {} to {}",
                humantime::format_duration(self.max_delay),
                humantime::format_duration(MIN_MAX_DELAY),
                humantime::format_duration(MAX_MAX_DELAY),
            )));
        }
        if self.initial_delay.is_zero() {
            return Err(ConfigError::new(
                "the store's reconnection initial delay is zero: it must be positive",
            ));
        }
        Ok(())
    }

    /// The delay before reconnection attempt `attempt` of an outage (1 for the first attempt
    /// after the loss): `initial_delay` doubled `attempt - 1` times, capped at `max_delay`,
    /// then drawn uniformly between half of it and all of it (so that stores and clients that
    /// lost the same broker do not all knock at the same instant).
    pub fn delay(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        let base = self
            .initial_delay
            .min(self.max_delay)
            .saturating_mul(1 << doublings)
            .min(self.max_delay);
        let half = base / 2;
        let spread = u64::try_from((base - half).as_micros()).unwrap_or(u64::MAX);
        half + Duration::from_micros(fastrand::u64(0..=spread))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_within_an_outage_up_to_the_cap_with_jitter() {
        let p = StoreReconnect::default();
        for _ in 0..1000 {
            let first = p.delay(1);
            assert!(first >= Duration::from_millis(25) && first <= Duration::from_millis(50));
            let third = p.delay(3);
            assert!(third >= Duration::from_millis(100) && third <= Duration::from_millis(200));
            for attempt in [5, 10, 1000, u32::MAX] {
                let d = p.delay(attempt);
                assert!(
                    d >= DEFAULT_MAX_DELAY / 2 && d <= DEFAULT_MAX_DELAY,
                    "{d:?}"
                );
            }
        }
    }

    #[test]
    fn an_initial_delay_above_the_cap_is_the_cap() {
        let p = StoreReconnect {
            initial_delay: Duration::from_secs(5),
            max_delay: Duration::from_millis(100),
        };
        assert!(p.delay(1) <= Duration::from_millis(100));
    }

    #[test]
    fn bounds_are_checked() {
        assert!(StoreReconnect::default().check().is_ok());
        assert!(StoreReconnect::with_max_delay(MIN_MAX_DELAY).is_ok());
        assert!(StoreReconnect::with_max_delay(MAX_MAX_DELAY).is_ok());
        let err = StoreReconnect::with_max_delay(Duration::from_millis(1)).unwrap_err();
        assert!(err.to_string().contains("max delay"), "{err}");
    }
}
