//! How delegations end: each with exactly one outcome, told the way its side says — a blocking
//! call's answer, an async ticket's terminal phase, or (worker side) a message to the sender's
//! gateway. Also the endings nobody's turn decides: the send timeout, a stop (`stop`), shutdown.

use super::delegation::{Answer, Ended, RemoteBrief, Side};
use super::federation::Draft;
use super::Gateway;
use crate::broker::Exchange;
use crate::envelope::Address;
use crate::ids::{CallId, TicketId, TurnId};
use crate::injector::Cause;
use crate::io::{CallError, Event, Response};
use crate::outcome::Outcome;
use crate::push::Attention;
use crate::rendezvous::Kind;
use crate::time::Instant;

impl Gateway {
    /// Ends a delegation with its one outcome.
    pub(super) fn finish(
        &mut self,
        now: Instant,
        ticket: TicketId,
        outcome: Outcome,
        body: Option<String>,
        turn_id: Option<TurnId>,
    ) {
        self.end(now, ticket, outcome, body, turn_id, None);
    }

    /// Ends a worker-side delegation with the member's own reply; the member's `fleet_reply`
    /// call is answered once the broker confirms the report (a reply is accepted when it is
    /// safe, never before).
    pub(super) fn finish_replied_remotely(
        &mut self,
        now: Instant,
        ticket: TicketId,
        call: CallId,
        content: String,
    ) {
        self.end(
            now,
            ticket,
            Outcome::Replied,
            Some(content),
            None,
            Some(call),
        );
    }

    fn end(
        &mut self,
        now: Instant,
        ticket: TicketId,
        outcome: Outcome,
        body: Option<String>,
        turn_id: Option<TurnId>,
        member_call: Option<CallId>,
    ) {
        let Some(d) = self.delegations.remove(&ticket) else {
            return;
        };
        self.forget_remote_waiter(d.msg);
        self.event(Event::Resolved {
            ticket,
            target: d.target.clone(),
            outcome,
        });
        match d.side {
            Side::Worker { reply_to, re } => {
                self.late_ack(d.msg);
                self.publish_outcome(&d.target, &reply_to, re, outcome, body, member_call)
            }
            Side::Local(Answer::Blocking(call))
            | Side::Sender {
                answer: Answer::Blocking(call),
                ..
            } => self.respond(
                call,
                Response::Outcome {
                    ticket: Some(ticket),
                    outcome,
                    body,
                    turn_id,
                },
            ),
            Side::Local(Answer::Async) | Side::Sender { .. } => {
                // A task's delegation: its result goes to its list, kept durably there.
                let mut body = body;
                if self.task_ended(d.msg, outcome, &mut body) {
                    self.tickets.remove(&ticket);
                    if let Some(lead) = &d.lead {
                        self.uncollect(lead, &Attention::Ticket(ticket));
                    }
                    return;
                }
                let ttl = self.ticket_ttl();
                let ended = Ended {
                    outcome,
                    body,
                    at: now,
                };
                self.tickets.end(&mut self.fx, ticket, ended, now + ttl);
                if let Some(lead) = d.lead {
                    self.push.add(&lead, Attention::Ticket(ticket));
                }
            }
        }
    }

    /// Ends a delegation with a call error: an error answer for a blocking call, a FAILED
    /// ticket (saying why) for an async one.
    pub(super) fn fail_call(&mut self, now: Instant, ticket: TicketId, err: CallError) {
        let Some(d) = self.delegations.get(&ticket) else {
            return;
        };
        match d.side.answer() {
            Some(Answer::Blocking(call)) => {
                let (target, msg) = (d.target.clone(), d.msg);
                self.delegations.remove(&ticket);
                self.forget_remote_waiter(msg);
                self.event(Event::Resolved {
                    ticket,
                    target,
                    outcome: Outcome::WorkerFailed,
                });
                self.respond(call, Response::Error(err));
            }
            _ => self.finish(
                now,
                ticket,
                Outcome::WorkerFailed,
                Some(err.to_string()),
                None,
            ),
        }
    }

    pub(super) fn on_send_deadline(&mut self, now: Instant, ticket: TicketId) {
        let Some(d) = self.delegations.get(&ticket) else {
            return;
        };
        if d.deadline > now {
            return;
        }
        let (target, msg, side) = (d.target.clone(), d.msg, d.side.clone());
        let withdrawn = self.injector.withdraw(&target, msg, Cause::SenderTimedOut);
        if side.is_worker() {
            // Worker side: once typed, the turn runs to its end (the sender owns the timeout);
            // still queued at the brief's expiry, it is withdrawn — never typed late — and the
            // sender hears a failure, not a timeout.
            if withdrawn {
                self.rendezvous.take(&target, msg, Kind::Failed);
                let why = "not injected before the brief expired (the worker stayed busy or \
                           unready): withdrawn, never typed"
                    .to_string();
                self.finish(now, ticket, Outcome::WorkerFailed, Some(why), None);
            }
            return;
        }
        let outcome = match side.brief() {
            Some(RemoteBrief::Sent) => Outcome::TimedOutQueued,
            Some(RemoteBrief::Typed { .. }) => Outcome::TimedOutWorking,
            None if withdrawn => Outcome::TimedOutQueued,
            None => Outcome::TimedOutWorking,
        };
        self.rendezvous.take(&target, msg, Kind::Failed);
        self.finish(now, ticket, outcome, None, None);
    }

    /// Graceful shutdown (CB-516 abandon on teardown).
    pub(super) fn abandon_all(&mut self, now: Instant) {
        self.abandon(now, |_| true, "its host's gateway shut down");
    }

    /// Ends every delegation `which` picks whose turn runs here: a cross-host one is reported
    /// ABANDONED to its sender, a local one ends WORKER_FAILED. Nothing of it is typed after.
    pub(super) fn abandon(
        &mut self,
        now: Instant,
        which: impl Fn(&super::delegation::Delegation) -> bool,
        why: &str,
    ) {
        for ticket in self.delegations.tickets_where(which) {
            let Some(d) = self.delegations.get(&ticket) else {
                continue;
            };
            let (target, msg) = (d.target.clone(), d.msg);
            match d.side.clone() {
                Side::Worker { reply_to, re } => {
                    self.delegations.remove(&ticket);
                    // Told ABANDONED, the brief must not be typed after all.
                    self.injector.withdraw(&target, msg, Cause::PaneGone);
                    self.rendezvous.take(&target, msg, Kind::Failed);
                    let ttl = self.cfg.reply_ttl_ms;
                    let draft = Draft::new(
                        crate::envelope::Payload::Abandoned { re },
                        &target,
                        Address::Entity(reply_to.clone()),
                        ttl,
                    )
                    .body(why.as_bytes().to_vec());
                    let env = self.seal(draft);
                    self.publish(Exchange::Msg, env);
                    self.event(Event::Resolved {
                        ticket,
                        target,
                        outcome: Outcome::WorkerFailed,
                    });
                }
                Side::Local(_) => {
                    self.injector.withdraw(&target, msg, Cause::PaneGone);
                    self.rendezvous.take(&target, msg, Kind::Failed);
                    self.finish(
                        now,
                        ticket,
                        Outcome::WorkerFailed,
                        Some(why.to_string()),
                        None,
                    );
                }
                // The turn runs on another host: its gateway ends it.
                Side::Sender { .. } => {}
            }
        }
    }
}
