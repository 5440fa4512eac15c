//! The gateway's timers: a fixed table of reasons, fired in time order, each routed to the
//! sub-machine it concerns.

use super::{Gateway, Once};
use crate::ids::{SessionId, TicketId, TurnId};
use crate::io::{Event, Round};
use crate::push::Attention;
use crate::time::Instant;

/// Why the gateway wants to be woken up.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TimerKind {
    /// Sample every active target's status.
    StatusPoll,
    /// An injector bound (an inject result or a post-turn settle is due).
    Injector,
    /// A send reaches its timeout.
    SendDeadline(TicketId),
    /// A member's ask reaches its timeout.
    AskDeadline(TurnId),
    /// A finished ticket's retention ends.
    TicketExpiry(TicketId),
    /// A lead's next reminder is due.
    Nudge,
    /// Cross-host: a remote brief's INJECTED is due.
    InjectBy(TicketId),
    /// Cross-host, worker side: a typed brief's deferred INJECTED goes out, by its msgId.
    TellInjected(crate::ids::MsgId),
    /// Cross-host: heartbeat presence, expire the roster.
    Presence,
    /// Cross-host: the changes gathered since the last presence go out, in one message.
    PresenceFlush,
    /// Cross-host: ack held reply-path deliveries past their `expiresAt`.
    HeldSweep,
    /// A spawn's readiness bound (target side) or answer bound (requester side).
    Spawn(SessionId),
    /// A starting member's next look for its readiness gate.
    StartLook(SessionId),
    /// A turn end seen on the screen of an agent that reports its turns has waited its
    /// bound for the agent's own report (`core.report_grace_ms`).
    ReportWait(SessionId),
    /// A remote stop's answer bound (requester side), by the STOP's msgId.
    Stop(crate::ids::MsgId),
    /// The idle reaper's round.
    Reap,
    /// A member listed at start reaches its adoption bound.
    Adoption(SessionId),
    /// The health round: probe every member served here.
    Health,
    /// A lead's heartbeat (CB-551) is due.
    Heartbeat(SessionId),
    /// The notification rules' round.
    Notify,
    /// The task lists' next look.
    Tasks,
}

impl Gateway {
    pub(super) fn on_tick(&mut self, now: Instant) {
        self.injector.on_timer(now);
        while let Some(kind) = self.fx.take_due(now) {
            match kind {
                TimerKind::SendDeadline(ticket) => self.on_send_deadline(now, ticket),
                TimerKind::AskDeadline(turn_id) => {
                    let due = self
                        .rendezvous
                        .ask(turn_id)
                        .is_some_and(|a| a.deadline <= now);
                    if due {
                        self.close_ask_timed_out(now, turn_id, super::members::AfterAsk::Resume);
                    }
                }
                TimerKind::TicketExpiry(ticket) => self.on_ticket_expiry(now, ticket),
                TimerKind::Nudge => self.push.wake(),
                TimerKind::InjectBy(ticket) => self.on_inject_by(now, ticket),
                TimerKind::TellInjected(msg) => self.tell_injected(&msg),
                TimerKind::Presence => {
                    if let Some(next) = self.on_presence_tick(now) {
                        self.fx.set(Once::Presence, next);
                    }
                }
                TimerKind::PresenceFlush => self.on_presence_flush(),
                TimerKind::HeldSweep => {
                    if let Some(next) = self.on_held_sweep(now) {
                        self.fx.set(Once::HeldSweep, next);
                    }
                }
                TimerKind::Spawn(gid) => self.on_spawn_timer(now, gid),
                TimerKind::StartLook(gid) => self.on_start_look_timer(&gid),
                TimerKind::ReportWait(gid) => self.on_report_wait(now, gid),
                TimerKind::Stop(msg) => self.on_stop_timer(now, msg),
                TimerKind::Reap => self.on_reap(now),
                TimerKind::Adoption(gid) => self.on_adoption_due(now, gid),
                TimerKind::Health => self.on_health_tick(now),
                TimerKind::Heartbeat(lead) => self.on_heartbeat(now, lead),
                TimerKind::Notify => self.on_notify_scan(now),
                TimerKind::Tasks => self.on_tasks_timer(),
                TimerKind::StatusPoll | TimerKind::Injector => {}
            }
        }
        if self.fx.take_once(Once::StatusPoll, now) {
            let mut targets: Vec<SessionId> = self.injector.active_targets().cloned().collect();
            // Members being adopted are sampled too (their verdict comes from the samples).
            targets.extend(
                self.adoption
                    .pending()
                    .filter(|g| !self.injector.is_active(g))
                    .cloned(),
            );
            // One listing of herdr's panes for the whole round.
            match targets.len() {
                0 => {}
                1 => {
                    let target = targets.swap_remove(0);
                    self.poll_status(target);
                }
                _ => self.poll_statuses(Round::Work, targets),
            }
        }
    }

    /// Member `gid`, listed at start, waits for its adoption verdict until `deadline`, with
    /// its bound armed.
    pub(super) fn begin_adoption(
        &mut self,
        gid: &SessionId,
        starting: Option<crate::start_gate::StartGate>,
        deadline: Instant,
    ) {
        self.adoption.begin(gid, starting, deadline);
        self.fx.wake(deadline, TimerKind::Adoption(gid.clone()));
    }

    /// A member being adopted is looked at again at `at` (its start gate still reads its pane).
    pub(super) fn adoption_looks_again(&mut self, gid: SessionId, at: Instant) {
        self.fx.wake(at, TimerKind::StartLook(gid));
    }

    /// `session`'s question (in turn `msg`) waits for an answer until `deadline`, with its
    /// bound armed — a new ask, or one coalesced into the question it already has open.
    pub(super) fn open_ask(
        &mut self,
        session: &SessionId,
        msg: crate::ids::MsgId,
        question: &str,
        call: crate::ids::CallId,
        deadline: Instant,
    ) -> TurnId {
        use crate::rendezvous::AskOpen;
        let (AskOpen::Fresh(turn_id) | AskOpen::Coalesced(turn_id)) = self.rendezvous.open_ask(
            &mut self.ids,
            session,
            msg,
            question,
            call,
            (self.now, deadline),
        );
        self.fx.wake(deadline, TimerKind::AskDeadline(turn_id));
        turn_id
    }

    /// One reaper round per quarter TTL (between 1 s and 60 s): a member is closed at most that
    /// late.
    pub(super) fn arm_reaper(&mut self, now: Instant) {
        let Some(ttl) = self.idle_ttl() else { return };
        if self.fx.is_set(Once::Reap) || self.sessions.is_empty() {
            return;
        }
        let round = (ttl / 4).clamp(
            crate::time::Duration::from_secs(1),
            crate::time::Duration::from_secs(60),
        );
        self.fx.set(Once::Reap, now + round);
    }

    /// A finished ticket nobody polled within its retention is forgotten.
    fn on_ticket_expiry(&mut self, now: Instant, ticket: TicketId) {
        let ttl = self.ticket_ttl();
        let expired = self
            .tickets
            .get(&ticket)
            .is_some_and(|t| t.ended.as_ref().is_some_and(|e| e.at + ttl <= now));
        if !expired {
            return;
        }
        if let Some(t) = self.tickets.remove(&ticket) {
            if let Some(lead) = t.lead {
                self.uncollect(&lead, &Attention::Ticket(ticket));
            }
        }
        // Its result, held for the poll that never came, goes with it: held on past its
        // ticket it would stay for the reply's whole TTL (days), one per unpolled ticket.
        if !self
            .cfg
            .planted(crate::planted::PlantedBug::HoldOutlivesTicket)
        {
            self.ticket_collected(ticket);
        }
        self.event(Event::TicketExpired { ticket });
    }

    pub(super) fn ticket_ttl(&self) -> crate::time::Duration {
        crate::time::Duration::from_millis(self.cfg.ticket_ttl_ms)
    }
}
