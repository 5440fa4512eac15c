//! The push-nudge rule (Java `ReplyPushLoop`): when something waits for a lead — a held reply,
//! a finished or asking ticket — type a short reminder into the lead's own pane, but only when
//! it is injectable (the injector gates that), at most `max_reminders` times, `interval` apart,
//! and stop the moment everything is collected.

use crate::ids::{MsgId, ReplyId, SessionId, TicketId};
use crate::time::{Duration, Instant};
use std::collections::{BTreeMap, BTreeSet};

/// One thing a lead has not collected yet.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Attention {
    Reply { target: SessionId, id: ReplyId },
    Ticket(TicketId),
}

#[derive(Debug, Default)]
struct LeadNudges {
    items: BTreeSet<Attention>,
    sent: u32,
    next_at: Instant,
    /// The nudge message currently queued or in flight in the injector.
    in_flight: Option<MsgId>,
}

#[derive(Debug)]
pub struct Push {
    max_reminders: u32,
    interval: Duration,
    leads: BTreeMap<SessionId, LeadNudges>,
    /// Something changed since `due` last looked: only then can a new nudge be due.
    dirty: bool,
}

impl Push {
    pub fn new(max_reminders: u32, interval: Duration) -> Self {
        Push {
            max_reminders,
            interval,
            leads: BTreeMap::new(),
            dirty: false,
        }
    }

    pub fn add(&mut self, lead: &SessionId, item: Attention) {
        self.dirty = true;
        self.leads
            .entry(lead.clone())
            .or_default()
            .items
            .insert(item);
    }

    /// Removes a collected item. Returns the in-flight nudge to withdraw if nothing is left.
    pub fn remove(&mut self, lead: &SessionId, item: &Attention) -> Option<MsgId> {
        self.dirty = true;
        let n = self.leads.get_mut(lead)?;
        n.items.remove(item);
        if n.items.is_empty() {
            return self.leads.remove(lead).and_then(|n| n.in_flight);
        }
        None
    }

    /// A reminder timer fired: a lead may be due again.
    pub fn wake(&mut self) {
        self.dirty = true;
    }

    /// Leads due a reminder now, in a fixed order. The caller enqueues one nudge each and
    /// reports it with `queued`. Cheap when nothing changed since the last look.
    pub fn due(&mut self, now: Instant) -> Vec<(SessionId, usize)> {
        if !std::mem::take(&mut self.dirty) {
            return Vec::new();
        }
        self.leads
            .iter()
            .filter(|(_, n)| {
                !n.items.is_empty()
                    && n.in_flight.is_none()
                    && n.sent < self.max_reminders
                    && n.next_at <= now
            })
            .map(|(lead, n)| (lead.clone(), n.items.len()))
            .collect()
    }

    pub fn queued(&mut self, lead: &SessionId, msg: MsgId) {
        if let Some(n) = self.leads.get_mut(lead) {
            n.in_flight = Some(msg);
        }
    }

    /// The nudge was typed: count it and schedule the next one. Returns when it is due.
    pub fn delivered(&mut self, now: Instant, lead: &SessionId, msg: MsgId) -> Option<Instant> {
        self.dirty = true;
        let n = self.leads.get_mut(lead)?;
        if n.in_flight != Some(msg) {
            return None;
        }
        n.in_flight = None;
        n.sent += 1;
        n.next_at = now + self.interval;
        (n.sent < self.max_reminders).then_some(n.next_at)
    }

    /// The nudge never reached the pane. It counts as a reminder (a pane that keeps refusing
    /// must not be retried without end) and the next try waits `interval`. Returns when it is due.
    pub fn failed(&mut self, now: Instant, lead: &SessionId, msg: MsgId) -> Option<Instant> {
        self.dirty = true;
        let n = self.leads.get_mut(lead)?;
        if n.in_flight != Some(msg) {
            return None;
        }
        n.in_flight = None;
        n.sent += 1;
        n.next_at = now + self.interval;
        (n.sent < self.max_reminders).then_some(n.next_at)
    }

    /// The lead's pane is gone: stop reminding it. Returns whether it was a nudged lead.
    pub fn forget(&mut self, lead: &SessionId) -> bool {
        self.leads.remove(lead).is_some()
    }

    pub fn pending(&self, lead: &SessionId) -> usize {
        self.leads.get(lead).map_or(0, |n| n.items.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::IdMint;

    #[test]
    fn reminders_are_bounded_spaced_and_stop_when_drained() {
        let mut m = IdMint::from_seed(2);
        let mut p = Push::new(2, Duration::from_secs(60));
        let lead = SessionId::new("lead");
        let item = Attention::Ticket(m.ticket());
        p.add(&lead, item.clone());
        assert_eq!(p.due(Instant::ZERO), vec![(lead.clone(), 1)]);
        let n1 = m.msg();
        p.queued(&lead, n1);
        assert!(
            p.due(Instant::ZERO).is_empty(),
            "one nudge in flight at a time"
        );
        let next = p
            .delivered(Instant::ZERO, &lead, n1)
            .expect("a second reminder");
        assert!(p.due(Instant::from_millis(59_999)).is_empty());
        p.wake(); // the reminder timer fires
        assert_eq!(p.due(next).len(), 1);
        let n2 = m.msg();
        p.queued(&lead, n2);
        assert_eq!(p.delivered(next, &lead, n2), None, "bounded at two");
        assert!(p.due(Instant::from_millis(1_000_000)).is_empty());
        assert_eq!(p.remove(&lead, &item), None);
        assert_eq!(p.pending(&lead), 0);
    }

    #[test]
    fn a_pane_that_refuses_nudges_is_not_retried_without_end() {
        let mut m = IdMint::from_seed(2);
        let mut p = Push::new(2, Duration::from_secs(60));
        let lead = SessionId::new("lead");
        p.add(&lead, Attention::Ticket(m.ticket()));
        let n1 = m.msg();
        assert_eq!(p.due(Instant::ZERO).len(), 1);
        p.queued(&lead, n1);
        let next = p
            .failed(Instant::ZERO, &lead, n1)
            .expect("one more try, later");
        assert!(p.due(Instant::ZERO).is_empty(), "backs off");
        p.wake();
        assert_eq!(p.due(next).len(), 1);
        let n2 = m.msg();
        p.queued(&lead, n2);
        assert_eq!(p.failed(next, &lead, n2), None, "bounded");
        p.wake();
        assert!(p.due(Instant::from_millis(10_000_000)).is_empty());
        assert!(p.forget(&lead));
    }

    #[test]
    fn draining_withdraws_the_queued_nudge() {
        let mut m = IdMint::from_seed(2);
        let mut p = Push::new(3, Duration::from_secs(60));
        let lead = SessionId::new("lead");
        let item = Attention::Ticket(m.ticket());
        p.add(&lead, item.clone());
        let n = m.msg();
        p.queued(&lead, n);
        assert_eq!(p.remove(&lead, &item), Some(n));
    }
}
