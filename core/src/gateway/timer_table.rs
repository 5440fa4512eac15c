//! One-instance timers (quinn's `TimerTable`): each is pending at most once, set or cleared
//! in place, so no `*_armed` flag has to agree with an entry in the timer set. Timers that can
//! be pending several times at once (a deadline per ticket, a nudge per reminder, a flush per
//! batch) stay in the ordered set.

use super::timers::TimerKind;
use crate::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Once {
    /// Sample every active target (runs after every other timer due at the same tick).
    StatusPoll,
    /// The presence round (cross-host).
    Presence,
    /// The held-delivery sweep (cross-host, while the broker is up).
    HeldSweep,
    /// The idle reaper's round.
    Reap,
    /// The health round.
    Health,
    /// The notification rules' round.
    Notify,
    /// The task lists' next look: a start put off, or a restored task's deadline.
    Tasks,
}

impl Once {
    const ALL: [Once; 7] = [
        Once::StatusPoll,
        Once::Presence,
        Once::HeldSweep,
        Once::Reap,
        Once::Health,
        Once::Notify,
        Once::Tasks,
    ];

    fn index(self) -> usize {
        self as usize
    }

    pub(super) fn kind(self) -> TimerKind {
        match self {
            Once::StatusPoll => TimerKind::StatusPoll,
            Once::Presence => TimerKind::Presence,
            Once::HeldSweep => TimerKind::HeldSweep,
            Once::Reap => TimerKind::Reap,
            Once::Health => TimerKind::Health,
            Once::Notify => TimerKind::Notify,
            Once::Tasks => TimerKind::Tasks,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub(super) struct TimerTable {
    at: [Option<Instant>; Once::ALL.len()],
}

impl TimerTable {
    pub(super) fn set(&mut self, t: Once, at: Instant) {
        self.at[t.index()] = Some(at);
    }

    pub(super) fn get(&self, t: Once) -> Option<Instant> {
        self.at[t.index()]
    }

    pub(super) fn is_set(&self, t: Once) -> bool {
        self.get(t).is_some()
    }

    pub(super) fn clear(&mut self, t: Once) {
        self.at[t.index()] = None;
    }

    /// The earliest pending timer other than the status poll, ordered as the timer set orders
    /// its entries (by instant, then kind), so taking timers from both keeps one order.
    pub(super) fn earliest_but_poll(&self) -> Option<(Instant, TimerKind, Once)> {
        Once::ALL
            .into_iter()
            .filter(|t| *t != Once::StatusPoll)
            .filter_map(|t| self.get(t).map(|at| (at, t.kind(), t)))
            .min_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)))
    }

    /// The earliest pending timer of all.
    pub(super) fn earliest(&self) -> Option<(Instant, TimerKind)> {
        Once::ALL
            .into_iter()
            .filter_map(|t| self.get(t).map(|at| (at, t.kind())))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_timer_is_pending_once_and_the_earliest_comes_first() {
        let mut t = TimerTable::default();
        t.set(Once::Health, Instant::from_millis(50));
        t.set(Once::Reap, Instant::from_millis(50));
        t.set(Once::Health, Instant::from_millis(30));
        t.set(Once::StatusPoll, Instant::from_millis(10));
        assert_eq!(t.get(Once::Health), Some(Instant::from_millis(30)));
        assert_eq!(
            t.earliest(),
            Some((Instant::from_millis(10), TimerKind::StatusPoll))
        );
        let (at, kind, once) = t.earliest_but_poll().expect("two pending");
        assert_eq!(
            (at, kind, once),
            (Instant::from_millis(30), TimerKind::Health, Once::Health)
        );
        t.clear(Once::Health);
        // At one instant, the kind's order decides, as in the timer set.
        assert_eq!(t.earliest_but_poll().map(|e| e.1), Some(TimerKind::Reap));
        assert!(!t.is_set(Once::Presence));
    }
}
