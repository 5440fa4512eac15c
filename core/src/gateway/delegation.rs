//! `Delegations`: every send (or an answer's continuation) that has not ended yet, and async
//! tickets as their leads see them. A delegation's side — local, the sender's half of a
//! cross-host one, or the worker's half — is one enum; a pause on a question is stored once,
//! on the delegation, and indexed by its turn inside this module only.

use super::{Effects, TimerKind};
use crate::ids::{CallId, MsgId, SessionId, TicketId, TraceId, TurnId};
use crate::io::TicketView;
use crate::outcome::{Outcome, Phase};
use crate::revision::Revision;
use crate::time::Instant;
use std::collections::BTreeMap;

/// How the lead hears a delegation's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// A blocking call, answered once with the outcome.
    Blocking(CallId),
    /// A `wait:false` ticket the lead polls.
    Async,
}

/// Which half of a delegation this gateway holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// The target is served here: this gateway owns both the turn and the waiter.
    Local(Answer),
    /// The target is on another host: this gateway owns only the waiter, keyed by the
    /// brief's msgId; `brief` is how far the worker's gateway has taken it.
    Sender { answer: Answer, brief: RemoteBrief },
    /// The sender is on another host (CB-308 §7.7): this gateway owns the turn, and its
    /// ending goes back to `reply_to` as a message answering `re`.
    Worker { reply_to: SessionId, re: MsgId },
}

impl Side {
    /// How the lead hears the outcome, if the lead is here.
    pub(crate) fn answer(&self) -> Option<Answer> {
        match self {
            Side::Local(a) | Side::Sender { answer: a, .. } => Some(*a),
            Side::Worker { .. } => None,
        }
    }

    pub(crate) fn is_worker(&self) -> bool {
        matches!(self, Side::Worker { .. })
    }

    /// How far the worker's gateway has taken a cross-host brief we sent.
    pub(crate) fn brief(&self) -> Option<RemoteBrief> {
        match self {
            Side::Sender { brief, .. } => Some(*brief),
            _ => None,
        }
    }
}

/// A cross-host delegation as its sender knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RemoteBrief {
    /// Published; no INJECTED yet.
    Sent,
    /// The worker's gateway typed it (or, for an answer, it needs no typing) at this Unix ms
    /// on that gateway's clock — so a restart announced as starting later cannot have lost it.
    Typed { at_unix: u64 },
}

/// A delegation paused on a member's question: the turn that answers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pause {
    pub(crate) turn: TurnId,
    pub(crate) question: String,
}

/// One open delegation.
#[derive(Clone, Debug)]
pub(crate) struct Delegation {
    pub(crate) target: SessionId,
    /// The message whose turn resolves it (the brief, or an answer's continuation).
    pub(crate) msg: MsgId,
    pub(crate) lead: Option<SessionId>,
    pub(crate) side: Side,
    pub(crate) deadline: Instant,
    /// The flow's trace id, for a cross-host delegation (what both hosts' log lines carry).
    pub(crate) trace: Option<TraceId>,
    /// Set only through `Delegations::pause`, which keeps the turn index with it.
    pause: Option<Pause>,
}

impl Delegation {
    pub(crate) fn new(
        target: SessionId,
        msg: MsgId,
        lead: Option<SessionId>,
        side: Side,
        deadline: Instant,
    ) -> Self {
        Delegation {
            target,
            msg,
            lead,
            side,
            deadline,
            trace: None,
            pause: None,
        }
    }

    pub(crate) fn paused(&self) -> Option<&Pause> {
        self.pause.as_ref()
    }
}

#[derive(Debug, Default)]
pub(crate) struct Delegations {
    open: BTreeMap<TicketId, Delegation>,
    by_turn: BTreeMap<TurnId, TicketId>,
}

impl Delegations {
    /// Opens `ticket` with its deadline armed: an open delegation always has its bound.
    pub(crate) fn insert(&mut self, fx: &mut Effects, ticket: TicketId, d: Delegation) {
        fx.wake(d.deadline, TimerKind::SendDeadline(ticket));
        if let Some(old) = self.open.insert(ticket, d) {
            if let Some(p) = old.pause {
                self.by_turn.remove(&p.turn);
            }
        }
    }

    pub(crate) fn get(&self, ticket: &TicketId) -> Option<&Delegation> {
        self.open.get(ticket)
    }

    /// Moves `ticket`'s deadline to `at` and arms it (an answer's continuation, a brief's
    /// own timeout): the earlier wake-up finds it not yet due and does nothing.
    pub(crate) fn extend(
        &mut self,
        fx: &mut Effects,
        ticket: TicketId,
        at: Instant,
    ) -> Option<&mut Delegation> {
        let d = self.open.get_mut(&ticket)?;
        d.deadline = at;
        fx.wake(at, TimerKind::SendDeadline(ticket));
        Some(d)
    }

    /// The sender's half of `ticket` waits for its brief's INJECTED until `by`.
    pub(crate) fn await_injected(&self, fx: &mut Effects, ticket: TicketId, by: Instant) {
        if self.open.contains_key(&ticket) {
            fx.wake(by, TimerKind::InjectBy(ticket));
        }
    }

    pub(crate) fn get_mut(&mut self, ticket: &TicketId) -> Option<&mut Delegation> {
        self.open.get_mut(ticket)
    }

    pub(crate) fn contains(&self, ticket: &TicketId) -> bool {
        self.open.contains_key(ticket)
    }

    pub(crate) fn remove(&mut self, ticket: &TicketId) -> Option<Delegation> {
        let d = self.open.remove(ticket)?;
        if let Some(p) = &d.pause {
            self.by_turn.remove(&p.turn);
        }
        Some(d)
    }

    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&TicketId, &Delegation)> {
        self.open.iter()
    }

    /// The open delegations `which` picks, in ticket order.
    pub(crate) fn tickets_where(&self, which: impl Fn(&Delegation) -> bool) -> Vec<TicketId> {
        self.open
            .iter()
            .filter(|(_, d)| which(d))
            .map(|(t, _)| *t)
            .collect()
    }

    /// `ticket` waits on the answer to `turn` now.
    pub(crate) fn pause(&mut self, ticket: TicketId, turn: TurnId, question: String) {
        let Some(d) = self.open.get_mut(&ticket) else {
            return;
        };
        if let Some(old) = d.pause.replace(Pause { turn, question }) {
            self.by_turn.remove(&old.turn);
        }
        self.by_turn.insert(turn, ticket);
    }

    /// The delegation paused on `turn`, if any.
    pub(crate) fn paused_on(&self, turn: TurnId) -> Option<TicketId> {
        self.by_turn.get(&turn).copied()
    }

    /// `turn` was answered or closed: the delegation paused on it is no longer paused.
    pub(crate) fn unpause(&mut self, turn: TurnId) -> Option<TicketId> {
        let ticket = self.by_turn.remove(&turn)?;
        if let Some(d) = self.open.get_mut(&ticket) {
            d.pause = None;
        }
        Some(ticket)
    }

    /// The turn index and the pauses are inverse maps of each other.
    #[cfg(any(debug_assertions, feature = "invariants", test))]
    pub(crate) fn check(&self) -> Result<(), String> {
        for (turn, ticket) in &self.by_turn {
            match self.open.get(ticket).and_then(|d| d.pause.as_ref()) {
                Some(p) if p.turn == *turn => {}
                _ => {
                    return Err(format!(
                        "turn {turn} indexes {ticket}, which is not paused on it"
                    ))
                }
            }
        }
        let paused = self.open.values().filter(|d| d.pause.is_some()).count();
        if paused != self.by_turn.len() {
            return Err(format!(
                "{paused} paused delegations but {} turn index entries",
                self.by_turn.len()
            ));
        }
        Ok(())
    }
}

/// An async ticket as its lead will see it; while it is open, its phase comes from its
/// delegation (paused or not), so nothing here repeats that.
#[derive(Clone, Debug)]
pub(crate) struct Ticket {
    pub(crate) target: SessionId,
    pub(crate) lead: Option<SessionId>,
    pub(crate) ended: Option<Ended>,
}

/// The async tickets by id. Reads go through `Deref`; every change goes through the methods
/// here, so the per-step checks can tell when there is nothing new to read.
#[derive(Debug, Default)]
pub(crate) struct Tickets {
    map: BTreeMap<TicketId, Ticket>,
    rev: Revision,
}

impl std::ops::Deref for Tickets {
    type Target = BTreeMap<TicketId, Ticket>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl Tickets {
    pub(crate) fn insert(&mut self, ticket: TicketId, t: Ticket) {
        self.rev.bump();
        self.map.insert(ticket, t);
    }

    pub(crate) fn remove(&mut self, ticket: &TicketId) -> Option<Ticket> {
        self.rev.bump();
        self.map.remove(ticket)
    }

    /// `ticket` ended as `ended`: kept for its lead's poll until `forget_at`, its expiry armed.
    /// Returns false for a ticket not held here.
    pub(crate) fn end(
        &mut self,
        fx: &mut Effects,
        ticket: TicketId,
        ended: Ended,
        forget_at: Instant,
    ) -> bool {
        let Some(t) = self.map.get_mut(&ticket) else {
            return false;
        };
        self.rev.bump();
        t.ended = Some(ended);
        fx.wake(forget_at, TimerKind::TicketExpiry(ticket));
        true
    }

    /// Changed since a check last read it?
    #[cfg(any(debug_assertions, feature = "invariants"))]
    pub(crate) fn revision(&self) -> Revision {
        self.rev
    }
}

/// How an async ticket ended, kept for its retention.
#[derive(Clone, Debug)]
pub(crate) struct Ended {
    pub(crate) outcome: Outcome,
    pub(crate) body: Option<String>,
    pub(crate) at: Instant,
}

impl Ticket {
    /// The view `fleet_poll` returns; `open` is the ticket's delegation while it has one.
    pub(crate) fn view(&self, ticket: TicketId, open: Option<&Delegation>) -> TicketView {
        let mut v = TicketView {
            ticket,
            target: self.target.clone(),
            phase: Phase::Pending,
            outcome: None,
            body: None,
            question: None,
            turn_id: None,
        };
        if let Some(e) = &self.ended {
            v.phase = e.outcome.phase();
            v.outcome = Some(e.outcome);
            v.body = e.body.clone();
        } else if let Some(p) = open.and_then(Delegation::paused) {
            v.phase = Phase::Asking;
            v.question = Some(p.question.clone());
            v.turn_id = Some(p.turn);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> uuid::Uuid {
        uuid::Uuid::from_u128(n)
    }

    fn open(ds: &mut Delegations, n: u128) -> TicketId {
        let t = TicketId(id(n));
        let d = Delegation::new(
            SessionId::new("m"),
            MsgId(id(100 + n)),
            Some(SessionId::new("lead")),
            Side::Local(Answer::Async),
            Instant::from_millis(1_000),
        );
        ds.insert(&mut Effects::default(), t, d);
        t
    }

    /// A pause is found by its turn, shows on the ticket, and is gone once unpaused.
    #[test]
    fn a_pause_is_indexed_by_its_turn_until_unpaused() {
        let mut ds = Delegations::default();
        let t = open(&mut ds, 1);
        let turn = TurnId(id(7));
        ds.pause(t, turn, "which branch?".into());
        assert_eq!(ds.paused_on(turn), Some(t));
        let ticket = Ticket {
            target: SessionId::new("m"),
            lead: None,
            ended: None,
        };
        let v = ticket.view(t, ds.get(&t));
        assert_eq!(v.phase, Phase::Asking);
        assert_eq!(v.turn_id, Some(turn));
        assert_eq!(ds.unpause(turn), Some(t));
        assert!(ds.get(&t).is_some_and(|d| d.paused().is_none()));
        assert_eq!(ticket.view(t, ds.get(&t)).phase, Phase::Pending);
        assert!(ds.check().is_ok());
    }

    /// Removing a paused delegation takes its index entry with it.
    #[test]
    fn removing_a_paused_delegation_clears_its_turn() {
        let mut ds = Delegations::default();
        let t = open(&mut ds, 1);
        let turn = TurnId(id(7));
        ds.pause(t, turn, "q".into());
        assert!(ds.remove(&t).is_some());
        assert_eq!(ds.paused_on(turn), None);
        assert!(ds.check().is_ok());
    }

    /// A second pause replaces the first, and the first turn no longer answers it.
    #[test]
    fn a_new_pause_replaces_the_old_turn() {
        let mut ds = Delegations::default();
        let t = open(&mut ds, 1);
        ds.pause(t, TurnId(id(7)), "q1".into());
        ds.pause(t, TurnId(id(8)), "q2".into());
        assert_eq!(ds.paused_on(TurnId(id(7))), None);
        assert_eq!(ds.paused_on(TurnId(id(8))), Some(t));
        assert!(ds.check().is_ok());
    }

    /// An ended ticket shows its outcome whatever its delegation said.
    #[test]
    fn an_ended_ticket_shows_its_outcome() {
        let ticket = Ticket {
            target: SessionId::new("m"),
            lead: None,
            ended: Some(Ended {
                outcome: Outcome::Replied,
                body: Some("done".into()),
                at: Instant::from_millis(5),
            }),
        };
        let v = ticket.view(TicketId(id(1)), None);
        assert_eq!(v.phase, Phase::Done);
        assert_eq!(v.body.as_deref(), Some("done"));
    }
}
