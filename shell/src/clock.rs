//! The `Clock` implementation on tokio's timer: real time in the daemon, virtual time under
//! `tokio::time::pause` and inside turmoil, where the simulation runs the same loop.

use crate::ports::{Clock, PortFuture};
use fleet_core::Instant;

/// Monotonic time measured from the moment the clock was built, on tokio's timer.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    pub fn new() -> Self {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
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

    fn sleep_until(&self, at: Instant) -> PortFuture<()> {
        let deadline = self.origin + std::time::Duration::from_millis(at.as_millis());
        Box::pin(tokio::time::sleep_until(deadline))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn virtual_time_moves_only_when_the_runtime_sleeps() {
        let c = TokioClock::new();
        assert_eq!(c.now(), Instant::ZERO);
        c.sleep_until(Instant::from_millis(1_500)).await;
        assert_eq!(c.now(), Instant::from_millis(1_500));
        assert!(c.unix_ms() > 1_600_000_000_000, "wall clock is after 2020");
    }
}
