//! What the injector decided and what herdr answered: typing, turn boundaries, the post-turn
//! scrape, and a pane that went away. The rules themselves live in `injector`, `rendezvous`
//! and `completion`; this file turns their verdicts into endings and outputs.

use super::members::AfterAsk;
use super::sessions::IDLE;
use super::Gateway;
use crate::completion::{self, Verdict};
use crate::ids::{MsgId, SessionId};
use crate::injector::{Cause, InjectResult, InjectorEvent};
use crate::io::{Event, InjectError, PaneError, Stale};
use crate::outcome::Outcome;
use crate::rendezvous::Kind;
use crate::session::SessionState;
use crate::time::Instant;

impl Gateway {
    pub(super) fn drain_injector(&mut self, now: Instant) {
        while let Some(ev) = self.injector.poll_event() {
            match ev {
                InjectorEvent::Inject { target, msg, text } => self.type_into(target, msg, text),
                InjectorEvent::Delivered { target, msg } => self.on_delivered(now, target, msg),
                InjectorEvent::TurnComplete {
                    target,
                    msg,
                    missed_fast_turn,
                } => {
                    self.event(Event::TurnComplete {
                        target: target.clone(),
                        msg,
                        missed_fast_turn,
                    });
                    self.session_to(&target, &[SessionState::Busy], SessionState::Done);
                    if self.is_member_here(&target) {
                        self.health.turn_ended(&target, missed_fast_turn);
                    }
                    // A missed fast turn is inferred, not seen, and goes through the same scrape
                    // (a fast agent that forgot `fleet_reply` is the common case): the scrape
                    // believes it only if the screen shows the brief taken and answered.
                    let captured = self
                        .rendezvous
                        .waiter(&target, msg)
                        .is_some_and(|w| w.baseline.is_some());
                    let scraped = !(missed_fast_turn
                        && self
                            .cfg
                            .planted(crate::planted::PlantedBug::InferredTurnNeverCompletes));
                    if captured && scraped {
                        self.rendezvous.turn_ended(&target, msg, missed_fast_turn);
                        self.judge_turn_end(now, target, msg);
                    } else if !captured {
                        self.await_unwaited_end(now, &target, msg);
                    }
                }
                InjectorEvent::TurnFailed { target, msg, cause } => {
                    let why = cause.to_string();
                    let stalled = cause == Cause::Stalled;
                    self.event(Event::TurnFailed {
                        target: target.clone(),
                        msg,
                        cause,
                    });
                    self.session_to(&target, &[SessionState::Busy], SessionState::Failed);
                    if stalled && self.is_member_here(&target) {
                        self.health.turn_ended(&target, true);
                    }
                    if let Some(r) = self.rendezvous.resolve(&target, msg, Kind::Failed) {
                        self.finish(now, r.ticket, Outcome::WorkerFailed, Some(why), None);
                    }
                }
                // Not if the turn's scrape took the pane since (its release asks again).
                InjectorEvent::WantSample { target } if self.injector.takes_next(&target) => {
                    self.poll_status(target)
                }
                InjectorEvent::WantSample { .. } => {}
                InjectorEvent::Dropped { target, msg, cause } => {
                    let lead = self.delegator_of.remove(&msg);
                    if cause.maybe_typed() {
                        // Its turn may run: a reply from it is a late reply to its sender,
                        // never an unclaimed one another lead could drain.
                        if let Some(lead) = lead {
                            self.last_delegator.insert(target.clone(), lead);
                        }
                        self.turns.insert(target.clone(), msg);
                    }
                    if let Some(lead) = self.nudges.remove(&msg) {
                        let next = self.push.failed(now, &lead, msg);
                        self.nudge_at(next);
                    }
                    let why = cause.to_string();
                    let sender_gave_up = cause == Cause::SenderTimedOut;
                    self.event(Event::Dropped {
                        target: target.clone(),
                        msg,
                        cause,
                    });
                    if !sender_gave_up {
                        if let Some(r) = self.rendezvous.take(&target, msg, Kind::Failed) {
                            self.finish(now, r.ticket, Outcome::WorkerFailed, Some(why), None);
                        }
                    }
                }
            }
        }
    }

    /// `msg` was typed into `target`: its turn is the target's current one.
    fn on_delivered(&mut self, now: Instant, target: SessionId, msg: MsgId) {
        if let Some(lead) = self.delegator_of.remove(&msg) {
            self.last_delegator.insert(target.clone(), lead);
        }
        self.turns.insert(target.clone(), msg);
        self.session_to(&target, IDLE, SessionState::Busy);
        self.remote_injected(&target, msg);
        if let Some(lead) = self.nudges.remove(&msg) {
            let next = self.push.delivered(now, &lead, msg);
            self.nudge_at(next);
        }
        self.event(Event::Delivered { target, msg });
    }

    pub(super) fn pump_nudges(&mut self, now: Instant) {
        for (lead, pending) in self.push.due(now) {
            let msg = self.ids.msg();
            let text = format!(
                "[fleet] {pending} item(s) are waiting for you: call fleet_poll to collect them."
            );
            self.injector.enqueue(&lead, msg, text);
            self.push.queued(&lead, msg);
            self.nudges.insert(msg, lead.clone());
            self.stats.push_nudges_total += 1;
            self.event(Event::Nudged {
                lead: lead.clone(),
                msg,
                pending,
            });
            self.poll_status(lead);
        }
    }

    pub(super) fn on_injected(
        &mut self,
        target: &SessionId,
        msg: MsgId,
        result: Result<String, InjectError>,
    ) {
        self.samples.typed(target);
        let (ack, baseline) = match result {
            Ok(baseline) => (InjectResult::Typed, Some(baseline)),
            Err(InjectError::NotTyped(e)) => (
                InjectResult::NotTyped {
                    gone: e == PaneError::NotFound,
                    why: e.to_string(),
                },
                None,
            ),
            Err(InjectError::Unconfirmed(why)) => {
                let retried = self
                    .cfg
                    .planted(crate::planted::PlantedBug::UnconfirmedInjectRetried);
                let ack = if retried {
                    InjectResult::NotTyped { why, gone: false }
                } else {
                    InjectResult::Unconfirmed(why)
                };
                (ack, None)
            }
        };
        if !self.injector.on_injected(target, msg, ack) {
            return self.event(Event::Stale {
                what: Stale::Injected { msg },
                target: target.clone(),
            });
        }
        if let Some(baseline) = baseline {
            self.rendezvous.capture(target, msg, baseline);
        }
    }

    pub(super) fn on_pane_read(
        &mut self,
        now: Instant,
        target: &SessionId,
        msg: MsgId,
        result: Result<String, PaneError>,
    ) {
        if !self.injector.release(now, target, msg) {
            // The hold expired and the next turn may be running: this text is not turn `msg`'s.
            return self.event(Event::Stale {
                what: Stale::PaneRead { msg },
                target: target.clone(),
            });
        }
        let Some((baseline, typed, inferred)) = self
            .rendezvous
            .waiter(target, msg)
            .filter(|w| w.ended)
            .and_then(|w| Some((w.baseline.clone()?, w.typed.clone(), w.inferred)))
        else {
            // Already resolved (a reply raced the scrape) or timed out; or the turn resumed
            // since (a question answered: its continuation waits on a later end): nothing.
            return;
        };
        let scrape = match result {
            Ok(s) => s,
            Err(error) => {
                // The waiter stays open: a reply or the timeout still ends it.
                return self.event(Event::Stale {
                    what: Stale::PaneReadFailed { error },
                    target: target.clone(),
                });
            }
        };
        let turn = completion::TurnText {
            baseline: &baseline,
            typed: typed.as_deref(),
            inferred,
        };
        match completion::resolve(&scrape, turn, &self.compiled) {
            Verdict::Suppressed => self.event(Event::Suppressed {
                target: target.clone(),
                msg,
            }),
            Verdict::Unanswered => self.unanswered(target, msg),
            Verdict::Exhausted { matched } => self.exhausted(now, target, msg, matched),
            Verdict::Completed { text } => {
                if let Some(r) = self.rendezvous.resolve(target, msg, Kind::Completion) {
                    let member = self.is_member_here(target);
                    self.health.mute_turn(target, member);
                    self.finish(now, r.ticket, Outcome::CompletedUnreplied, Some(text), None);
                }
            }
        }
    }

    /// Turn `msg`'s inferred end showed its brief taken and no answer yet: the turn goes on,
    /// and its next end is scraped again (bounded by its delegation's deadline).
    fn unanswered(&mut self, target: &SessionId, msg: MsgId) {
        self.event(Event::Suppressed {
            target: target.clone(),
            msg,
        });
        if self.injector.reopen(target, msg) {
            self.rendezvous.turn_resumed(target, msg);
            self.session_to(target, &[SessionState::Done], SessionState::Busy);
        }
    }

    /// Turn `msg` of `target` met its provider's usage limit (`matched`): the profile's
    /// credential cools down and the turn's delegation ends BACKEND_EXHAUSTED.
    pub(super) fn exhausted(
        &mut self,
        now: Instant,
        target: &SessionId,
        msg: MsgId,
        matched: String,
    ) {
        self.backend_exhausted(target);
        // Its health says so, however the limit was learned (its report, or its screen).
        if self.is_member_here(target) {
            let limited = crate::agent_report::Trouble::UsageLimited(matched.clone());
            self.reports.seen(target, limited);
            self.probe_health(vec![target.clone()]);
        }
        if let Some(r) = self.rendezvous.resolve(target, msg, Kind::BackendExhausted) {
            self.finish(
                now,
                r.ticket,
                Outcome::BackendExhausted,
                Some(matched),
                None,
            );
        }
    }

    /// The pane closed or its process exited: everything open on it ends WORKER_FAILED.
    pub(super) fn on_pane_gone(&mut self, now: Instant, target: &SessionId) {
        self.health_went(now, target, None);
        self.spawn_pane_gone(target);
        self.adoption.settled(target);
        self.injector.abort_target(target, Cause::PaneGone);
        self.drain_injector(now);
        if let Some(turn_id) = self.rendezvous.ask_of(target) {
            self.close_ask_timed_out(now, turn_id, AfterAsk::Leave);
        }
        for r in self.rendezvous.take_all(target, Kind::Failed) {
            self.finish(
                now,
                r.ticket,
                Outcome::WorkerFailed,
                Some(Cause::PaneGone.to_string()),
                None,
            );
        }
        for ticket in self.delegations.tickets_where(|d| &d.target == target) {
            self.finish(
                now,
                ticket,
                Outcome::WorkerFailed,
                Some(Cause::PaneGone.to_string()),
                None,
            );
        }
        self.turns.remove(target);
        self.reports.forget(target);
        self.sessions.remove(target);
        self.samples.forget(target);
        self.local_entity_gone(target);
        self.stop_pane_gone(now, target);
        self.last_delegator.remove(target);
        if self.push.forget(target) {
            // A lead pane died: nothing can be typed into it; its items stay collectable.
            self.last_delegator.retain(|_, lead| lead != target);
        }
    }
}
