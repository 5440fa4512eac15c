//! The sender's side of a cross-host delegation: the brief or answer published, the waiter
//! keyed by its msgId, and what comes back — INJECTED, ASK, REPLY (held unacked until the
//! lead has it), FAILED or ABANDONED.

use super::confirms::Pending;
use super::held::{Arrival, HeldFor, Holder};
use super::{Draft, RemoteAsk};
use crate::authz::Principal;
use crate::broker::{DeliveryId, Exchange};
use crate::envelope::Envelope;
use crate::envelope::{Address, Payload};
use crate::gateway::calls::{Answering, Opening, Send};
use crate::gateway::delegation::{Answer, Delegation, RemoteBrief, Side};
use crate::gateway::Gateway;
use crate::gateway::Link;
use crate::ids::{CallId, HostId, MsgId, ReplyId, SessionId, TicketId, TurnId};
use crate::inbox::HeldReply;
use crate::io::{CallError, Event, RejectCode, Response};
use crate::outcome::Outcome;
use crate::planted::PlantedBug;
use crate::push::Attention;
use crate::time::{Duration, Instant};

impl Gateway {
    pub(in crate::gateway) fn send_remote(
        &mut self,
        now: Instant,
        call: CallId,
        caller: &Principal,
        send: Send,
    ) {
        let Some(from) = caller.session.clone().filter(|s| !self.is_remote(s)) else {
            return self.invalid(
                call,
                "this caller is not attached to the gateway, so it has no inbox for the reply",
            );
        };
        if !self.broker_is_up() {
            return self.respond(call, Response::Error(CallError::BrokerUnavailable));
        }
        let inject_ms = self.cfg.injected_timeout_ms;
        let draft = Draft::new(
            Payload::Send,
            &from,
            Address::Entity(send.target.clone()),
            inject_ms,
        )
        .body(send.content.into_bytes());
        let env = self.seal(draft);
        let (msg, trace) = (env.msg_id, env.trace_id);
        let Some(publish) = self.publish(Exchange::Msg, env) else {
            return self.respond(call, Response::Error(CallError::BrokerUnavailable));
        };
        self.stats.sends_total += 1;
        let ticket = self.ids.ticket();
        if let Link::Fleet(f) = &mut self.link {
            f.confirms.expect(publish, Pending::Delegation(ticket));
            f.waiters.expect(msg, ticket);
        }
        let opening = Opening {
            ticket,
            target: send.target,
            msg,
            wait: send.wait,
            timeout: send.timeout,
            brief: Some(RemoteBrief::Sent),
        };
        self.open_delegation(now, call, caller, opening);
        if let Some(d) = self.delegations.get_mut(&ticket) {
            d.trace = Some(trace);
        }
        let by = now + Duration::from_millis(inject_ms + self.cfg.clock_skew_ms);
        self.delegations.await_injected(&mut self.fx, ticket, by);
    }

    /// No INJECTED within the bound: a loud, fast failure, not a send-length silence.
    pub(in crate::gateway) fn on_inject_by(&mut self, now: Instant, ticket: TicketId) {
        let pending = self
            .delegations
            .get(&ticket)
            .is_some_and(|d| d.side.brief() == Some(RemoteBrief::Sent));
        if pending {
            let why = format!(
                "not injected within {} ms: the worker's gateway did not confirm delivery",
                self.cfg.injected_timeout_ms
            );
            self.finish(now, ticket, Outcome::WorkerFailed, Some(why), None);
        }
    }

    pub(in crate::gateway) fn forget_remote_waiter(&mut self, msg: MsgId) {
        if let Link::Fleet(f) = &mut self.link {
            f.waiters.forget(msg);
        }
    }

    /// The worker on another host whose open question `turn` is.
    pub(in crate::gateway) fn remote_asker(&self, turn: TurnId) -> Option<SessionId> {
        Some(self.link.fleet()?.waiters.ask(turn)?.worker.clone())
    }

    /// A coordination note's publish: its call is answered at the confirm.
    pub(in crate::gateway) fn expect_coordination(
        &mut self,
        publish: crate::broker::PublishId,
        call: crate::ids::CallId,
        target: SessionId,
        msg: crate::ids::MsgId,
    ) {
        if let Link::Fleet(f) = &mut self.link {
            f.confirms
                .expect(publish, Pending::Coordination { call, target, msg });
        }
    }

    /// The lead a remote worker's question was put to.
    pub(in crate::gateway) fn remote_ask_lead(&self, turn: TurnId) -> Option<SessionId> {
        self.link.fleet()?.waiters.ask(turn)?.lead.clone()
    }

    pub(in crate::gateway) fn is_remote_ask(&self, turn: TurnId) -> bool {
        self.link
            .fleet()
            .is_some_and(|f| f.waiters.ask(turn).is_some())
    }

    /// A lead answers a question asked by a worker on another host: ANSWER goes to the
    /// worker's inbox; the worker's gateway injects it only if that turn still waits.
    pub(in crate::gateway) fn answer_remote(
        &mut self,
        now: Instant,
        call: CallId,
        caller: &Principal,
        a: Answering,
    ) {
        if !self.broker_is_up() {
            return self.respond(call, Response::Error(CallError::BrokerUnavailable));
        }
        let turn = a.turn;
        let Some(ask) = self.link.fleet_mut().and_then(|f| f.waiters.take_ask(turn)) else {
            return self.invalid(call, "no open question from another host has this turnId");
        };
        let Some(from) = caller.session.clone() else {
            return self.invalid(call, "this caller has no identity to answer from");
        };
        let ttl = self.cfg.ask_timeout_ms;
        let draft = Draft::new(
            Payload::Answer { turn },
            &from,
            Address::Entity(ask.worker.clone()),
            ttl,
        )
        .body(a.content.into_bytes());
        let env = self.seal(draft);
        let (msg, unix) = (env.msg_id, env.ts);
        // A task's list learns the answer's msgId before the answer goes out (`task_msg_moved`).
        let mark = self.fx.mark();
        let Some(publish) = self.publish(Exchange::Msg, env) else {
            return self.respond(call, Response::Error(CallError::BrokerUnavailable));
        };
        let paused = self.delegations.paused_on(turn);
        let ticket = paused.unwrap_or_else(|| self.ids.ticket());
        if let Link::Fleet(f) = &mut self.link {
            f.confirms.expect(publish, Pending::Delegation(ticket));
            f.waiters.expect(msg, ticket);
        }
        if paused.is_some() {
            // A paused async ticket resumes, now waiting on the answer's continuation.
            self.delegations.unpause(turn);
            if let Some(d) = self
                .delegations
                .extend(&mut self.fx, ticket, now + a.timeout)
            {
                d.msg = msg;
            }
            self.task_msg_moved(ticket, msg, mark);
            if let Some(view) = self.ticket_view(ticket) {
                self.respond(call, Response::Ticket(view));
            }
            return;
        }
        self.stats.sends_total += 1;
        // An answer is not typed into a pane: no INJECTED is expected for it.
        let opening = Opening {
            ticket,
            target: ask.worker,
            msg,
            wait: a.wait,
            timeout: a.timeout,
            brief: Some(RemoteBrief::Typed { at_unix: unix }),
        };
        self.open_delegation(now, call, caller, opening);
    }

    /// The reply/pull path (at-least-once): a REPLY stays unacked until its lead has it —
    /// answered to a blocking call at once, or held for a poll or a drain — and a redelivered
    /// copy is recognised by msgId.
    pub(super) fn on_reply_message(
        &mut self,
        now: Instant,
        delivery: DeliveryId,
        held_queue: bool,
        lead: &SessionId,
        env: Envelope,
    ) {
        let dedup = !self.cfg.planted(PlantedBug::NoReplyDedup);
        let Link::Fleet(f) = &mut self.link else {
            return;
        };
        if dedup {
            match f.held.arrived(env.msg_id, delivery, held_queue) {
                Arrival::New => {}
                Arrival::Adopted => return,
                Arrival::Duplicate | Arrival::Handed => return self.ack(delivery),
                Arrival::Stray if self.cfg.planted(PlantedBug::ResultsHeldInInbox) => {
                    f.held.adopt(env.msg_id, delivery);
                    return;
                }
                Arrival::Stray => {
                    if let Some(p) = self.publish_to_held(lead, &env) {
                        self.expect_confirm(p, Pending::Move(env.msg_id));
                        if let Link::Fleet(f) = &mut self.link {
                            f.held.move_again(env.msg_id, delivery);
                        }
                    }
                    return;
                }
            }
        }
        let ticket = env.re().and_then(|re| f.waiters.ticket_of(re));
        let content = String::from_utf8_lossy(&env.body).into_owned();
        let outcome = match env.outcome() {
            Some(o @ (Outcome::Replied | Outcome::CompletedUnreplied)) => o,
            _ => Outcome::Replied,
        };
        if let Some(ticket) = ticket.filter(|t| self.delegations.contains(t)) {
            // A blocking call's result is handed over at once; a task's is kept in its list
            // (durably, before this ack).
            let blocking = self
                .delegations
                .get(&ticket)
                .is_some_and(|d| matches!(d.side.answer(), Some(Answer::Blocking(_))))
                || env
                    .re()
                    .is_some_and(|re| self.tasks.running_on(re).is_some());
            self.finish(now, ticket, outcome, Some(content), None);
            let unix = self.unix_now();
            let Link::Fleet(f) = &mut self.link else {
                return;
            };
            if blocking {
                f.held.handed(env.msg_id, env.expires_at, unix);
                return self.ack(delivery);
            }
            return self.keep(delivery, held_queue, lead, &env, HeldFor::Ticket(ticket));
        }
        // No waiter, but a task restored running on it: the result goes to its list.
        if let Some(re) = env.re().filter(|re| self.tasks.running_on(*re).is_some()) {
            let mut body = Some(content.clone());
            if self.task_ended(re, outcome, &mut body) {
                let unix = self.unix_now();
                if let Link::Fleet(f) = &mut self.link {
                    f.held.handed(env.msg_id, env.expires_at, unix);
                }
                return self.ack(delivery);
            }
        }
        // No waiter: a stranded reply (U3), held for the lead to drain — under an id its
        // msgId gives, so a copy redelivered after a restart keeps the id the lead knew.
        let id = ReplyId(env.msg_id.0);
        let held = HeldReply {
            id,
            target: env.from.clone(),
            lead: Some(lead.clone()),
            content,
            at: now,
        };
        match self.inbox.push(held) {
            Ok(()) => {
                self.event(Event::ReplyHeld {
                    target: env.from.clone(),
                    reply: id,
                    lead: Some(lead.clone()),
                });
                self.push.add(
                    lead,
                    Attention::Reply {
                        target: env.from.clone(),
                        id,
                    },
                );
                let what = HeldFor::Inbox {
                    reply: id,
                    member: env.from.clone(),
                };
                self.keep(delivery, held_queue, lead, &env, what);
            }
            Err(full) => {
                let queue = self
                    .link
                    .fleet()
                    .map(|f| f.names.inbox(lead))
                    .unwrap_or_default();
                self.reject(
                    delivery,
                    &queue,
                    RejectCode::InboxFull,
                    format!("{} held for {}: to the DLQ", full.cap, env.from),
                );
            }
        }
    }

    /// Keeps a result until its lead collects it — off the inbox: one that came on the inbox
    /// is copied to the lead's held queue and its inbox delivery acked at that confirm; one
    /// that came on the held queue (or could not be copied) is held as it is.
    fn keep(
        &mut self,
        delivery: DeliveryId,
        held_queue: bool,
        lead: &SessionId,
        env: &Envelope,
        what: HeldFor,
    ) {
        let in_place = held_queue || self.cfg.planted(PlantedBug::ResultsHeldInInbox);
        let moved = (!in_place)
            .then(|| self.publish_to_held(lead, env))
            .flatten();
        if let Some(p) = moved {
            self.expect_confirm(p, Pending::Move(env.msg_id));
        }
        let Link::Fleet(f) = &mut self.link else {
            return;
        };
        if moved.is_some() {
            f.held
                .hold_moving(env.msg_id, delivery, env.expires_at, what);
        } else {
            f.held.hold(env.msg_id, delivery, env.expires_at, what);
        }
    }

    /// A result's copy on the held queue is confirmed, or failed.
    pub(super) fn result_moved(&mut self, msg: MsgId, routed: bool) {
        let Link::Fleet(f) = &mut self.link else {
            return;
        };
        if let Some(d) = f.held.moved(msg, routed) {
            self.ack_if_current(d);
        }
    }

    /// The lead has what `holder` held: ack the held deliveries (or remember to, if their tags
    /// were voided).
    fn release(&mut self, holder: Holder) {
        let unix = self.unix_now();
        let Link::Fleet(f) = &mut self.link else {
            return;
        };
        for d in f.held.release(holder, unix) {
            self.ack_if_current(d);
        }
    }

    pub(in crate::gateway) fn ticket_collected(&mut self, ticket: TicketId) {
        self.release(Holder::Ticket(ticket));
    }

    pub(in crate::gateway) fn reply_collected(&mut self, id: ReplyId) {
        self.release(Holder::Inbox(id));
    }

    /// Held deliveries past their `expiresAt` are acked and dropped, so one abandoned backlog
    /// cannot wedge an inbox behind a full prefetch window.
    pub(super) fn sweep_held(&mut self) {
        let unix = self.unix_now();
        let Link::Fleet(f) = &self.link else { return };
        for what in f.held.expired(unix) {
            if let HeldFor::Inbox { reply, member } = &what {
                let gone = self.inbox.ack(member, &[*reply]);
                self.collected(&gone);
            }
            self.release(what.holder());
        }
    }

    /// FAILED or ABANDONED answering a brief (or a SPAWN) we sent.
    pub(super) fn on_failed_message(&mut self, now: Instant, env: Envelope) {
        let (re, outcome) = match env.payload {
            Payload::Failed { re, outcome, .. } => (re, outcome),
            Payload::Abandoned { re } => (re, Outcome::WorkerFailed),
            _ => return,
        };
        if self.stop_refused(re, &env.body) || self.spawn_failed(re, &env.body) {
            return;
        }
        let outcome = match outcome {
            o @ (Outcome::BackendExhausted | Outcome::Busy | Outcome::TimedOutQueued) => o,
            _ => Outcome::WorkerFailed,
        };
        let body = String::from_utf8_lossy(&env.body).into_owned();
        let ticket = self.link.fleet().and_then(|f| f.waiters.ticket_of(re));
        let Some(ticket) = ticket else {
            // A task restored running after a restart (its assignee checked as counterpart):
            // it fails now, not at its deadline.
            self.task_ended(re, outcome, &mut Some(body));
            return;
        };
        self.finish(now, ticket, outcome, Some(body), None);
    }

    /// ASK from a remote worker: it surfaces on the open send as QUESTION, or NO_WAITER goes
    /// straight back when no waiter is open (one round trip, as on one host).
    pub(super) fn on_ask_message(&mut self, now: Instant, lead: &SessionId, env: Envelope) {
        let Payload::Ask { re, turn } = env.payload else {
            return;
        };
        let ticket = self
            .link
            .fleet()
            .and_then(|f| f.waiters.ticket_of(re))
            .filter(|t| self.delegations.contains(t));
        let Some(ticket) = ticket else {
            let ttl = self.cfg.reply_ttl_ms;
            let none = Payload::NoWaiter { re: Some(re), turn };
            let draft =
                Draft::new(none, lead, Address::Entity(env.from.clone()), ttl).trace(env.trace_id);
            let nw = self.seal(draft);
            self.publish(Exchange::Msg, nw);
            return;
        };
        let question = String::from_utf8_lossy(&env.body).into_owned();
        // Remembered while its member waits (the ASK's expiry, allowing for skewed clocks),
        // at most `ask_timeout_ms`.
        let left = env
            .expires_at
            .saturating_sub(self.unix_now())
            .saturating_add(self.cfg.clock_skew_ms)
            .min(self.cfg.ask_timeout_ms);
        if let Link::Fleet(f) = &mut self.link {
            let until = now + Duration::from_millis(left);
            let lead = self.delegations.get(&ticket).and_then(|d| d.lead.clone());
            f.waiters.asked(
                turn,
                RemoteAsk {
                    worker: env.from.clone(),
                    until,
                    lead,
                    question: question.clone(),
                    at: now,
                },
            );
        }
        if let Some(d) = self.delegations.get(&ticket) {
            self.forget_remote_waiter(d.msg);
        }
        self.question(now, ticket, question, turn);
    }

    /// `host`'s gateway restarted: the turn records of the briefs it had typed went with its
    /// soft state, so nothing there will ever end our waiters on them. They end now, loudly,
    /// instead of at their send timeout (CB-308 §7 item 7: the waiter hangs longest exactly
    /// when the worker's gateway dies). A brief it had not confirmed is left to `InjectBy`: it
    /// may still be in the worker's queue, for the new process to type.
    pub(super) fn peer_restarted(&mut self, now: Instant, host: &HostId, since: u64) {
        self.event(Event::PeerRestarted { host: host.clone() });
        let Link::Fleet(f) = &self.link else { return };
        let on_host: std::collections::BTreeSet<SessionId> = self
            .delegations
            .iter()
            .map(|(_, d)| d.target.clone())
            .filter(|t| f.roster.host_of(now, t).as_ref() == Some(host))
            .collect();
        let why = format!(
            "{host}'s gateway restarted while the brief was being worked on; the turn's \
             record was lost there, so a reply the member still makes is held on {host}"
        );
        let lost = |d: &Delegation| {
            on_host.contains(&d.target)
                && matches!(d.side.brief(), Some(RemoteBrief::Typed { at_unix }) if at_unix < since)
        };
        self.fail_typed_briefs(now, lost, &why);
    }

    /// Ends with WORKER_FAILED each of our own delegations to another host that `which`
    /// picks and whose brief that host confirmed typing (INJECTED), unless it is paused on a
    /// question (the lead holds that one).
    pub(super) fn fail_typed_briefs(
        &mut self,
        now: Instant,
        which: impl Fn(&Delegation) -> bool,
        why: &str,
    ) {
        let typed = |d: &Delegation| {
            matches!(
                d.side,
                Side::Sender {
                    brief: RemoteBrief::Typed { .. },
                    ..
                }
            ) && d.paused().is_none()
                && which(d)
        };
        for ticket in self.delegations.tickets_where(typed) {
            self.finish(
                now,
                ticket,
                Outcome::WorkerFailed,
                Some(why.to_string()),
                None,
            );
        }
    }
}
