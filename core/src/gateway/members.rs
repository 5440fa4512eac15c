//! A member's own calls — `fleet_reply` and `fleet_ask` — and the life of its open question:
//! coalescing, the answer or the timeout, and the paused delegation resuming its turn.

use super::delegation::Side;
use super::Gateway;
use crate::ids::{CallId, SessionId, TicketId, TurnId};
use crate::inbox::HeldReply;
use crate::io::{CallError, Event, Response};
use crate::outcome::{AskOutcome, Outcome};
use crate::push::Attention;
use crate::rendezvous::Kind;
use crate::time::Instant;

/// What happens to a delegation paused on a question whose ask closes unanswered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AfterAsk {
    /// It resumes its turn, waiting for a reply or its own timeout.
    Resume,
    /// It is left as it is: its pane is gone and the caller ends it next.
    Leave,
}

impl Gateway {
    pub(super) fn on_reply(
        &mut self,
        now: Instant,
        call: CallId,
        session: SessionId,
        content: String,
    ) {
        self.stats.replies_total += 1;
        self.health.replied(&session);
        let turn = self.turns.get(&session).copied();
        if let Some(m) = turn {
            // The reply proves the brief was picked up: the turn ends at the next injectable
            // sample instead of waiting out the pickup bound (a fast member's turn is often
            // never sampled WORKING).
            self.injector.replied(&session, m);
            if self.cfg.planted(crate::planted::PlantedBug::ReplyEndsTurn) {
                // Trusts the reply as the turn's end and types what waits at once.
                self.injector
                    .on_sample(now, &session, crate::AgentStatus::Idle);
                self.injector
                    .on_sample(now, &session, crate::AgentStatus::Idle);
            }
        }
        let resolved = turn.and_then(|m| self.rendezvous.resolve(&session, m, Kind::Reply));
        if let Some(r) = resolved {
            let worker = self
                .delegations
                .get(&r.ticket)
                .is_some_and(|d| d.side.is_worker());
            if worker {
                // Accepted only once the broker has it (answered at the report's confirm).
                return self.finish_replied_remotely(now, r.ticket, call, content);
            }
            self.finish(now, r.ticket, Outcome::Replied, Some(content), None);
            return self.respond(call, Response::ReplyAccepted { held: None });
        }
        if self.retry_unsent_reply(call, &session, &content) {
            return;
        }
        let lead = self.last_delegator.get(&session).cloned();
        // With a broker, a stranded reply to a lead on this host waits on that lead's held
        // queue like any other result, so a gateway restart does not lose it; without one it
        // is held in memory (and a restart loses it).
        let durable = !self
            .cfg
            .planted(crate::planted::PlantedBug::ResultsHeldInInbox);
        let through_broker = |l: &SessionId| self.is_remote(l) || (durable && self.broker_is_up());
        if let Some(l) = lead.clone().filter(through_broker) {
            return self.reply_to_remote_lead(call, &session, &l, content);
        }
        let id = self.ids.reply();
        let held = HeldReply {
            id,
            target: session.clone(),
            lead: lead.clone(),
            content,
            at: now,
        };
        match self.inbox.push(held) {
            Ok(()) => {
                self.event(Event::ReplyHeld {
                    target: session.clone(),
                    reply: id,
                    lead: lead.clone(),
                });
                if let Some(lead) = lead {
                    self.push.add(
                        &lead,
                        Attention::Reply {
                            target: session,
                            id,
                        },
                    );
                }
                self.respond(call, Response::ReplyAccepted { held: Some(id) });
            }
            Err(full) => self.respond(
                call,
                Response::Error(CallError::InboxFull {
                    target: session,
                    cap: full.cap,
                }),
            ),
        }
    }

    pub(super) fn on_ask(
        &mut self,
        now: Instant,
        call: CallId,
        session: SessionId,
        question: String,
        timeout_ms: Option<u64>,
    ) {
        let timeout = match self.timeout(timeout_ms, self.cfg.ask_timeout_ms) {
            Ok(t) => t,
            Err(e) => return self.respond(call, Response::Error(e)),
        };
        if let Some(turn_id) = self.rendezvous.ask_of(&session) {
            let msg = self.rendezvous.ask(turn_id).map(|a| a.msg);
            if let Some(msg) = msg {
                self.rendezvous
                    .open_ask(&mut self.ids, &session, msg, &question, call, (now, now));
                self.event(Event::Asked {
                    target: session,
                    turn_id,
                    coalesced: true,
                });
                return;
            }
        }
        let captured = self.turns.get(&session).copied().filter(|m| {
            self.rendezvous
                .waiter(&session, *m)
                .is_some_and(|w| w.baseline.is_some())
        });
        let Some(msg) = captured else {
            return self.respond(
                call,
                Response::Ask {
                    outcome: AskOutcome::NoWaiter,
                    turn_id: None,
                    answer: None,
                },
            );
        };
        let deadline = now + timeout;
        let turn_id = self.open_ask(&session, msg, &question, call, deadline);
        self.injector.set_asking(&session, true);
        self.event(Event::Asked {
            target: session.clone(),
            turn_id,
            coalesced: false,
        });
        if let Some(r) = self.rendezvous.take(&session, msg, Kind::Question) {
            self.question(now, r.ticket, question, turn_id);
        }
    }

    /// The waiter of `ticket` was resolved by a question.
    pub(super) fn question(
        &mut self,
        now: Instant,
        ticket: TicketId,
        question: String,
        turn_id: TurnId,
    ) {
        let Some(d) = self.delegations.get(&ticket) else {
            return;
        };
        let (target, lead) = (d.target.clone(), d.lead.clone());
        self.rendezvous.set_owner(turn_id, lead.clone());
        match d.side.clone() {
            Side::Local(super::delegation::Answer::Blocking(_))
            | Side::Sender {
                answer: super::delegation::Answer::Blocking(_),
                ..
            } => self.finish(
                now,
                ticket,
                Outcome::Question,
                Some(question),
                Some(turn_id),
            ),
            Side::Worker { reply_to, re } => {
                self.delegations.pause(ticket, turn_id, question.clone());
                self.event(Event::Resolved {
                    ticket,
                    target: target.clone(),
                    outcome: Outcome::Question,
                });
                self.publish_ask(&target, &reply_to, re, turn_id, question);
            }
            Side::Local(_) | Side::Sender { .. } => {
                self.delegations.pause(ticket, turn_id, question);
                self.event(Event::Resolved {
                    ticket,
                    target,
                    outcome: Outcome::Question,
                });
                if let Some(lead) = lead {
                    self.push.add(&lead, Attention::Ticket(ticket));
                }
            }
        }
    }

    /// An async delegation to `target` is paused on a question: still open, though it has no
    /// waiter until the answer.
    pub(super) fn paused_ticket_on(&self, target: &SessionId) -> bool {
        self.rendezvous
            .ask_of(target)
            .is_some_and(|turn| self.delegations.paused_on(turn).is_some())
    }

    /// An ask ended without an answer. A delegation paused on it resumes its turn, or is left
    /// for the caller to end.
    pub(super) fn close_ask_timed_out(&mut self, now: Instant, turn_id: TurnId, then: AfterAsk) {
        let Some(ask) = self.rendezvous.close_ask(turn_id) else {
            return;
        };
        self.end_ask(&ask, turn_id, AskOutcome::TimedOut, None);
        if let Some(ticket) = self.delegations.unpause(turn_id) {
            if then == AfterAsk::Resume {
                let baseline = ask.baseline.unwrap_or_default();
                self.resume_ticket(now, ticket, &ask.session, ask.msg, baseline, None);
            }
        }
    }

    /// A closed ask ends: every coalesced `fleet_ask` call gets the same answer, and the
    /// member's paused turn resumes.
    pub(super) fn end_ask(
        &mut self,
        ask: &crate::rendezvous::Ask,
        turn_id: TurnId,
        outcome: AskOutcome,
        answer: Option<String>,
    ) {
        for c in &ask.calls {
            self.respond(
                *c,
                Response::Ask {
                    outcome,
                    turn_id: Some(turn_id),
                    answer: answer.clone(),
                },
            );
        }
        self.event(Event::AskClosed {
            target: ask.session.clone(),
            turn_id,
            outcome,
        });
        self.injector.set_asking(&ask.session, false);
    }
}
