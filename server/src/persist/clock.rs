//! A wall clock that never reads below a floor: the server's HLC after a restart.
//!
//! Every version the server issues comes from its HLC, which follows the wall clock. If the
//! wall clock went backwards across a restart (an NTP step, a VM restored from a snapshot),
//! a fresh HLC would issue versions lower than ones already stored, and a fencing token or a
//! `NEX` could then compare the wrong way. [`FloorClock`] shifts the wall clock forward by a
//! constant offset, just enough that its first reading is past the highest stored
//! millisecond; it then advances at the wall clock's pace.
//!
//! ```
//! use std::sync::Arc;
//! use mqstate::protocol::hlc::{ManualClock, WallClock};
//! use mqstate_server::persist::FloorClock;
//!
//! let wall = Arc::new(ManualClock::new(1_000));
//! // Versions up to ms 5_000 are stored: the clock starts past them.
//! let clock = FloorClock::new(wall.clone(), 5_000);
//! assert_eq!(clock.now_ms(), 5_001);
//! wall.set(1_010);
//! assert_eq!(clock.now_ms(), 5_011);
//! // A floor behind the wall clock changes nothing.
//! assert_eq!(FloorClock::new(wall.clone(), 10).now_ms(), 1_010);
//! ```

use std::sync::Arc;

use mqstate::protocol::hlc::WallClock;

/// A wall clock that never reads below a floor: the server's HLC after a restart. See the
/// docs of the (private) `persist::clock` module.
#[derive(Debug)]
pub struct FloorClock {
    inner: Arc<dyn WallClock>,
    offset_ms: u64,
}

impl FloorClock {
    /// A clock reading `inner` plus the offset that puts its current reading past
    /// `floor_ms` (no offset when `inner` is already past it).
    pub fn new(inner: Arc<dyn WallClock>, floor_ms: u64) -> Self {
        let now = inner.now_ms();
        let offset_ms = floor_ms.saturating_add(1).saturating_sub(now);
        FloorClock { inner, offset_ms }
    }

    /// How far ahead of the wall clock this clock runs, in milliseconds.
    pub fn offset_ms(&self) -> u64 {
        self.offset_ms
    }
}

impl WallClock for FloorClock {
    fn now_ms(&self) -> u64 {
        self.inner.now_ms().saturating_add(self.offset_ms)
    }
}
