//! The `Clock` port: the only place production reads time. The simulation plugs in its own.

use fleet_core::Instant;

/// Monotonic time for the core, plus wall-clock time for stamps that leave the host.
pub trait Clock {
    /// Monotonic now, as the core's `Instant`.
    fn now(&self) -> Instant;
    /// Milliseconds since the Unix epoch.
    fn unix_ms(&self) -> u64;
}

/// The real clock: monotonic from the moment it was built.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: std::time::Instant,
}

impl SystemClock {
    #[allow(clippy::disallowed_methods)] // the one production read of the monotonic clock
    pub fn new() -> Self {
        SystemClock {
            origin: std::time::Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one production read of the monotonic clock
    fn now(&self) -> Instant {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        Instant::from_millis(ms)
    }

    #[allow(clippy::disallowed_methods)] // the one production read of the wall clock
    fn unix_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_never_runs_backwards() {
        let c = SystemClock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        assert!(c.unix_ms() > 1_600_000_000_000, "wall clock is after 2020");
    }
}
