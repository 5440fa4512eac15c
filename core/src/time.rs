//! The one place time enters the core: the driver passes `now` into every call.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::Add;
pub use std::time::Duration;

/// A point on the driver's monotonic clock, in milliseconds since an origin the driver picks.
///
/// The core never reads a clock; it only compares instants it was given. Millisecond resolution
/// is ample for turn lifecycles measured in polls of hundreds of milliseconds.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Instant(u64);

impl Instant {
    pub const ZERO: Instant = Instant(0);
    pub const MAX: Instant = Instant(u64::MAX);

    pub const fn from_millis(ms: u64) -> Self {
        Instant(ms)
    }

    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// `d` earlier, or the origin if that is before it.
    pub fn saturating_sub(self, d: Duration) -> Instant {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_sub(ms))
    }

    /// Time elapsed since `earlier`, zero if `earlier` is later (time never runs backwards here).
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;

    /// Saturates instead of overflowing: a huge timeout means "never", not a panic.
    fn add(self, rhs: Duration) -> Instant {
        let ms = u64::try_from(rhs.as_millis()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(ms))
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}s", self.0 / 1000, self.0 % 1000)
    }
}
