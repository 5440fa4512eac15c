//! The one sink of a step's effects (the rustls/str0m shape): the outputs it decided, in
//! order, and when the gateway wants to be woken — timers that can be pending several times
//! (a deadline per ticket) in an ordered set, one-instance timers in their table. Every path
//! of the hub writes here, and the driver reads only here (`poll_output`, `poll_timeout`).

use super::timer_table::{Once, TimerTable};
use super::timers::TimerKind;
use crate::io::Output;
use crate::time::Instant;
use std::collections::{BTreeSet, VecDeque};

#[derive(Debug, Default)]
pub(crate) struct Effects {
    out: VecDeque<Output>,
    timers: BTreeSet<(Instant, TimerKind)>,
    once: TimerTable,
}

impl Effects {
    /// Something to carry out, after everything emitted before it.
    pub(crate) fn emit(&mut self, o: Output) {
        self.out.push_back(o);
    }

    /// Where the next output will go: `emit_at` puts one there later in the step, before
    /// what was emitted since (what must be kept before the outputs it leads to).
    pub(crate) fn mark(&self) -> usize {
        self.out.len()
    }

    pub(crate) fn emit_at(&mut self, mark: usize, o: Output) {
        let at = mark.min(self.out.len());
        self.out.insert(at, o);
    }

    pub(crate) fn pop(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// Wake at `at` for `kind` (several of one kind may be pending).
    pub(crate) fn wake(&mut self, at: Instant, kind: TimerKind) {
        self.timers.insert((at, kind));
    }

    /// Whether a wake-up for `kind` at `at` is pending (the invariant checks').
    #[cfg(any(debug_assertions, feature = "invariants", test))]
    pub(crate) fn waking(&self, at: Instant, kind: TimerKind) -> bool {
        self.timers.contains(&(at, kind))
    }

    /// Sets one-instance timer `t` to `at`, replacing where it was.
    pub(crate) fn set(&mut self, t: Once, at: Instant) {
        self.once.set(t, at);
    }

    /// Sets one-instance timer `t` to `at` unless it is already set earlier.
    pub(crate) fn set_earlier(&mut self, t: Once, at: Instant) {
        if self.once.get(t).is_none_or(|was| at < was) {
            self.once.set(t, at);
        }
    }

    pub(crate) fn is_set(&self, t: Once) -> bool {
        self.once.is_set(t)
    }

    /// One-instance timer `t`, if it is due by `now`: taken off.
    pub(crate) fn take_once(&mut self, t: Once, now: Instant) -> bool {
        let due = self.once.get(t).is_some_and(|at| at <= now);
        if due {
            self.once.clear(t);
        }
        due
    }

    /// The next timer due by `now`, from the set or the table, in one order (instant, then
    /// kind) — taken off where it was. The status poll is not among them: the hub runs it
    /// after every other timer of the tick.
    pub(crate) fn take_due(&mut self, now: Instant) -> Option<TimerKind> {
        let set = self.timers.first().cloned();
        let once = self.once.earliest_but_poll();
        let from_once = match (&set, &once) {
            (None, None) => return None,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some(s), Some(o)) => (o.0, &o.1) < (s.0, &s.1),
        };
        if from_once {
            let (at, kind, t) = once?;
            if at > now {
                return None;
            }
            self.once.clear(t);
            Some(kind)
        } else {
            let (at, kind) = set?;
            if at > now {
                return None;
            }
            self.timers.pop_first();
            Some(kind)
        }
    }

    /// The earliest pending wake-up of all.
    pub(crate) fn earliest(&self) -> Option<(Instant, TimerKind)> {
        let mut best = self.timers.first().cloned();
        if let Some((at, kind)) = self.once.earliest() {
            if best.as_ref().is_none_or(|b| (at, &kind) < (b.0, &b.1)) {
                best = Some((at, kind));
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TicketId;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn outputs_leave_in_the_order_they_were_emitted() {
        let mut fx = Effects::default();
        fx.emit(Output::Remember(vec![]));
        fx.emit(Output::PollStatuses {
            round: crate::io::Round::Idle,
            targets: vec![],
            asked: crate::io::Asked(1),
        });
        assert!(matches!(fx.pop(), Some(Output::Remember(_))));
        assert!(matches!(fx.pop(), Some(Output::PollStatuses { .. })));
        assert!(fx.pop().is_none());
    }

    #[test]
    fn timers_from_the_set_and_the_table_are_taken_in_one_order() {
        let mut fx = Effects::default();
        let t = TicketId(uuid::Uuid::from_u128(7));
        fx.wake(at(30), TimerKind::SendDeadline(t));
        fx.set(Once::Health, at(20));
        fx.set(Once::StatusPoll, at(10));
        assert_eq!(fx.earliest(), Some((at(10), TimerKind::StatusPoll)));
        // The status poll is the hub's to run last; the others come by instant.
        assert_eq!(fx.take_due(at(5)), None);
        assert_eq!(fx.take_due(at(40)), Some(TimerKind::Health));
        assert!(fx.waking(at(30), TimerKind::SendDeadline(t)));
        assert_eq!(fx.take_due(at(40)), Some(TimerKind::SendDeadline(t)));
        assert_eq!(fx.take_due(at(40)), None);
        assert!(fx.take_once(Once::StatusPoll, at(40)));
        assert!(!fx.is_set(Once::StatusPoll));
        assert_eq!(fx.earliest(), None);
    }
}
