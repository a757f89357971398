//! Leases, locks and leader election with fencing tokens (docs/protocol.md section 5).
//!
//! Everything here is built on the public [`Client`] API: a lease is one key holding the
//! holder's name, acquired and renewed with `SET name holder NEX PX ttl` and released with
//! `VDEL name holder`. The version of the `+OK` reply is the **fencing token**: a write to
//! a protected key carries it as `__ft`, and the server refuses a write whose token is
//! older than the last one it saw for that key, so a holder that lost its lease without
//! knowing (a long pause, a partition) cannot overwrite the work of the next holder.
//!
//! - [`Lease`]: acquire / wait / renew (by hand or automatically) / release, with a stream
//!   of [`LeaseEvent`]s.
//! - [`Lock`]: a lease used as a mutex; [`Lock::edit`] is a fenced read-modify-write.
//! - [`LeaderElection`]: campaign, resign, the current leader, and [`LeadershipEvent`]s.
//! - [`blocking`]: the same for [`crate::blocking::Client`] users.
//!
//! ```no_run
//! use std::time::Duration;
//! use mqstate::lock::Lease;
//! use mqstate::{Client, ConnectOptions, SetOptions};
//!
//! # async fn demo() -> Result<(), mqstate::Error> {
//! let client = Client::connect(ConnectOptions::new("127.0.0.1", 1883)).await?;
//! let lease = Lease::new(&client, "pump-controller", "edge-node-7")?;
//! if let Some(token) = lease.acquire(Duration::from_secs(10)).await? {
//!     client
//!         .set("pump/speed", "1200", SetOptions::default().fencing_token(token))
//!         .await?;
//!     lease.release().await?;
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use crate::{Client, Error, Hlc, SetOptions};

mod election;
mod lease;
#[allow(
    clippy::module_inception,
    reason = "the lock concept, beside lease and election"
)]
mod lock;

pub mod blocking;

pub use election::{LeaderElection, LeadershipEvent, LeadershipEvents};
pub use lease::{Lease, LeaseEvent, LeaseEvents};
pub use lock::{Lock, LockGuard};

/// A fencing token: the version the server gave the lease's `+OK` reply.
pub type FencingToken = Hlc;

/// Default fraction of the ttl after which the automatic renewal renews.
pub const DEFAULT_RENEW_FRACTION: f64 = 0.5;

/// The renewal fraction rule, one place for [`Lease::auto_renew`] and
/// [`LeaderElection::with_renew_fraction`]: strictly between 0 and 1 (NaN is refused).
pub(crate) fn check_renew_fraction(fraction: f64) -> Result<f64, Error> {
    if fraction > 0.0 && fraction < 1.0 {
        Ok(fraction)
    } else {
        Err(Error::InvalidArgument(format!(
            "the renewal fraction must be between 0 and 1 (exclusive), got {fraction}"
        )))
    }
}

/// Acquires or renews: `SET name holder NEX PX ttl`; the `+OK` reply's version is the token.
pub(crate) async fn set_nex(
    client: &Client,
    name: &[u8],
    holder: &[u8],
    ttl: Duration,
) -> Result<Option<FencingToken>, Error> {
    let outcome = client
        .set(name, holder, SetOptions::default().nex().expiry(ttl))
        .await?;
    Ok(outcome.applied.then_some(outcome.version))
}
