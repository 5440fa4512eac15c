//! The gateway's internal invariants, asserted after every `handle` in debug builds and in
//! builds with the `invariants` feature (the simulation's), TigerBeetle style: a broken piece
//! of bookkeeping fails the run at the step that broke it, not at the end when the oracle
//! looks at outcomes.

use super::delegation::{Answer, Side};
use super::{Gateway, TimerKind};
use crate::gateway::Link;
use crate::ids::CallId;
use crate::revision::Revision;
use crate::roster::EntityKind;
use std::collections::BTreeSet;

/// Calls asked and not yet answered: every call gets exactly one answer.
#[derive(Debug, Default)]
pub(super) struct OpenCalls {
    open: BTreeSet<CallId>,
    broken: Option<String>,
    /// `Gateway::skip_invariant_checks` was called: no check after each step.
    pub(super) skipped: bool,
}

impl OpenCalls {
    pub(super) fn asked(&mut self, call: CallId) {
        if !self.open.insert(call) && self.broken.is_none() {
            self.broken = Some(format!("call {call} was asked twice while open"));
        }
    }

    pub(super) fn answered(&mut self, call: CallId) {
        if !self.open.remove(&call) && self.broken.is_none() {
            self.broken = Some(format!("call {call} was answered twice, or never asked"));
        }
    }
}

impl Gateway {
    /// Panics with the first broken invariant, naming the input that broke it. A planted
    /// protocol bug is proven against the simulation's oracle (I1–I11), so while one is
    /// switched on these checks stand aside — they would catch most such bugs first; their own
    /// proof is their own planted bug, `held-index-skew`.
    pub(super) fn assert_invariants(&mut self, step: &str) {
        if self.cfg.planted_for_the_oracle() || self.open_calls.skipped {
            return;
        }
        if let Err(broken) = self.check_invariants() {
            let host = &self.host;
            panic!(
                "invariant broken on {host} at {} after {step}: {broken}",
                self.now
            );
        }
    }

    /// Every cross-structure fact the gateway keeps in more than one place agrees.
    pub fn check_invariants(&mut self) -> Result<(), String> {
        if let Some(b) = &self.open_calls.broken {
            return Err(b.clone());
        }
        self.delegations.check()?;
        if let Link::Fleet(f) = &mut self.link {
            f.roster.check_changed()?;
        }
        self.check_served()?;
        self.check_turns()?;
        self.check_reports()?;
        self.check_tasks()?;
        self.check_fleet()?;
        // The reply path's records are walked again only once one of them has changed.
        let Link::Fleet(f) = &self.link else {
            return Ok(());
        };
        let read = ReplyPathRead {
            held: f.held.revision(),
            inbox: self.inbox.revision(),
            parking: f.parking.revision(),
            tickets: self.tickets.revision(),
            link: (f.broker_up, f.generation),
        };
        if self.reply_path_read == Some(read) {
            return Ok(());
        }
        self.check_reply_path()?;
        self.reply_path_read = Some(read);
        Ok(())
    }

    /// A turn end waiting for its agent's report holds its pane for that turn (nothing else is
    /// typed meanwhile), and the wait has its timer: it ends by the report or by its bound.
    fn check_reports(&self) -> Result<(), String> {
        for (gid, msg, until) in self.reports.waits() {
            if self.injector.held_for(gid) != Some(msg) {
                return Err(format!(
                    "{gid} waits for its report of {msg}, and its pane is not held for it"
                ));
            }
            if !self.fx.waking(until, TimerKind::ReportWait(gid.clone())) {
                return Err(format!("{gid} waits for its report of {msg} with no timer"));
            }
        }
        Ok(())
    }

    /// Cards and health are kept only for what is served here.
    fn check_served(&self) -> Result<(), String> {
        // A roster card is kept only for what is served here: no card outlives its member.
        // (Both maps are in gid order: one walk of each, not a lookup per card.)
        let mut served = self.served.keys().peekable();
        for gid in self.cards.keys() {
            while served.next_if(|s| *s < gid).is_some() {}
            if served.peek() != Some(&gid) {
                return Err(format!("{gid} has a roster card but is not served here"));
            }
        }
        // Health is kept only for members served here: none outlives its member (it leaves
        // a tombstone instead). One walk of each map again: a lookup per record was half a
        // 3×1,000 simulation's CPU.
        let mut served = self.served.iter().peekable();
        for gid in self.health.watched() {
            while served.next_if(|(s, _)| *s < gid).is_some() {}
            if served
                .peek()
                .is_none_or(|(s, e)| *s != gid || e.kind != EntityKind::Member)
            {
                return Err(format!(
                    "{gid} has a health record but is no member served here"
                ));
            }
        }
        Ok(())
    }

    /// Each open delegation has its deadline armed, its ticket and its waiter; each waiter,
    /// ticket and adoption agrees with it.
    fn check_turns(&self) -> Result<(), String> {
        for (ticket, d) in self.delegations.iter() {
            // Each open delegation's deadline is armed — except a worker-side turn already
            // typed when its brief expired, which runs to its end (the sender owns the timeout).
            let ran_on = d.side.is_worker() && d.deadline <= self.now;
            if !ran_on && !self.fx.waking(d.deadline, TimerKind::SendDeadline(*ticket)) {
                return Err(format!("{ticket}'s deadline {} is not armed", d.deadline));
            }
            // An async delegation's ticket is open as long as it is.
            if d.side.answer() == Some(Answer::Async)
                && self.tickets.get(ticket).is_none_or(|t| t.ended.is_some())
            {
                return Err(format!("async delegation {ticket} has no open ticket"));
            }
            // A turn that runs here and is not paused has exactly its waiter open.
            let local_turn = !matches!(d.side, Side::Sender { .. });
            if local_turn && d.paused().is_none() {
                let waiter = self.rendezvous.waiter(&d.target, d.msg);
                if waiter.is_none_or(|w| w.ticket != *ticket) {
                    return Err(format!(
                        "{ticket} on {} msg={} has no waiter of its own",
                        d.target, d.msg
                    ));
                }
            }
        }
        for (gid, deadline) in self.adoption.deadlines() {
            if self.injector.gate_state(gid) != Some(false) {
                return Err(format!("{gid} is being adopted but its gate is not closed"));
            }
            if !self.fx.waking(deadline, TimerKind::Adoption(gid.clone())) {
                return Err(format!("{gid}'s adoption bound {deadline} is not armed"));
            }
        }
        for (ticket, t) in self.tickets.iter() {
            if t.ended.is_none() && !self.delegations.contains(ticket) {
                return Err(format!("ticket {ticket} is open but its delegation ended"));
            }
        }
        for (session, msg, ticket) in self.rendezvous.waiters() {
            let ok = self.delegations.get(&ticket).is_some_and(|d| {
                &d.target == session
                    && d.msg == msg
                    && d.paused().is_none()
                    && !matches!(d.side, Side::Sender { .. })
            });
            if !ok {
                return Err(format!(
                    "a waiter on {session} msg={msg} names {ticket}, which is not its open turn"
                ));
            }
        }
        Ok(())
    }

    /// Cross-host: the spawns', stops' and confirms' own checks, and each remote waiter names
    /// a delegation sent on it.
    fn check_fleet(&self) -> Result<(), String> {
        let Link::Fleet(f) = &self.link else {
            return Ok(());
        };
        self.spawns
            .requests
            .check(|at, gid| self.fx.waking(at, TimerKind::Spawn(gid.clone())))?;
        self.stops.check(
            |at, msg| self.fx.waking(at, TimerKind::Stop(msg)),
            |gid| self.served.contains_key(gid),
        )?;
        f.confirms.check()?;
        for (msg, ticket) in f.waiters().each() {
            let ok = self
                .delegations
                .get(ticket)
                .is_some_and(|d| d.msg == *msg && matches!(d.side, Side::Sender { .. }));
            if !ok {
                return Err(format!(
                    "remote waiter for {msg} names {ticket}, which is not a delegation sent on it"
                ));
            }
        }
        Ok(())
    }

    /// What the reply path holds agrees with the inbox, the tickets and the live connection.
    fn check_reply_path(&self) -> Result<(), String> {
        self.inbox.check()?;
        let Link::Fleet(f) = &self.link else {
            return Ok(());
        };
        f.held.check()?;
        for (member, reply) in f.held.inbox_holds() {
            if !self.inbox.contains(member, reply) {
                return Err(format!(
                    "a delivery is held for reply {reply} of {member}, which the inbox no longer has"
                ));
            }
        }
        // Together with the one above: what is held is bounded by the tickets kept and the
        // reply inbox's caps (I10), never by how long a lead stays away.
        for ticket in f.held.ticket_holds() {
            if !self.tickets.contains_key(&ticket) {
                return Err(format!(
                    "a result is held for ticket {ticket}, which has expired: nothing will release it"
                ));
            }
        }
        for tag in f.held.tags().chain(f.parking.tags()) {
            if !f.is_current(tag) {
                return Err(format!(
                    "delivery {tag} is kept unacked, but it is not of the live connection"
                ));
            }
        }
        Ok(())
    }
}

/// The revisions of what `check_reply_path` reads, as of its last walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ReplyPathRead {
    held: Revision,
    inbox: Revision,
    parking: Revision,
    tickets: Revision,
    /// Whether the broker link is up, and its generation: which tags are live.
    link: (bool, u32),
}
