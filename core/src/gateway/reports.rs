//! An agent's own reports of its turns (`agent_report`): a member's report call, the turn end
//! it brings, and the bound a turn end seen on the screen waits for it. The rules of which
//! brief a report speaks for live in `agent_report::Reports`; this file turns its verdicts into
//! turn ends and endings.

use super::timers::TimerKind;
use super::Gateway;
use crate::agent_report::{AgentEvent, AgentReport, Ending, Verdict};
use crate::ids::{CallId, MsgId, SessionId};
use crate::io::{Event, Response};
use crate::outcome::Outcome;
use crate::rendezvous::Kind;
use crate::session::SessionState;
use crate::time::{Duration, Instant};

impl Gateway {
    /// Member `gid`'s report of itself (`Request::Report`; the caller is the member).
    pub(super) fn on_report(
        &mut self,
        now: Instant,
        call: CallId,
        gid: SessionId,
        report: AgentReport,
    ) {
        if let Some(why) = report.refused() {
            return self.invalid(call, &format!("the report: {why}"));
        }
        let mut report = report;
        // A refusal the agent does not call a limit (Claude Code 2.1 calls the spend limit's
        // 400 `unknown`) is one when its words say so, as on its screen.
        if let AgentEvent::TurnFailed { limit, words, .. }
        | AgentEvent::ProviderError { limit, words } = &mut report.event
        {
            *limit |= crate::completion::usage_limit(words, &self.compiled).is_some();
        }
        let (seq, what) = (report.seq, report.event.name());
        let trouble = matches!(
            report.event,
            AgentEvent::Waiting { .. }
                | AgentEvent::ProviderError { .. }
                | AgentEvent::TurnFailed { .. }
        );
        let verdict = self.reports.take(now, &gid, report);
        self.event(Event::Reported {
            target: gid.clone(),
            seq,
            what: what.into(),
            verdict: verdict.name().into(),
        });
        let name = verdict.name().to_string();
        match verdict {
            Verdict::Started(msg) => {
                self.injector.picked_up(&gid, msg);
            }
            Verdict::Ended { msg, .. } | Verdict::Failed { msg, .. } => {
                self.turn_reported(now, &gid, msg)
            }
            Verdict::Stale | Verdict::Foreign | Verdict::Noted => {}
        }
        // Its health says so now, not at the next round (a trouble a person must see to).
        if trouble && verdict_taken(&name) && self.is_member_here(&gid) {
            self.probe_health(vec![gid]);
        }
        self.respond(call, Response::Reported { verdict: name });
    }

    /// The agent said brief `msg`'s turn ended.
    fn turn_reported(&mut self, now: Instant, gid: &SessionId, msg: MsgId) {
        if self.injector.end_reported(now, gid, msg) {
            // Still running by its samples: it ends now, and its TurnComplete finds the
            // ending the agent gave (`judge_turn_end`).
            return self.drain_injector(now);
        }
        let awaited = self.reports.stop_waiting(gid, msg);
        if awaited {
            self.injector.release(now, gid, msg);
        }
        // Ended on its screen first (awaited), or earlier still and its delegation left open
        // (a screen that showed no answer): the agent's word ends it.
        if self.rendezvous.waiter(gid, msg).is_some_and(|w| w.ended) {
            self.settle_reported(now, gid, msg);
        }
        if awaited {
            self.drain_injector(now);
        }
    }

    /// Brief `msg`'s turn ended with its delegation waiting (`TurnComplete`): by the agent's
    /// word when it gave one; for an agent that reports, its report is awaited a bound; else
    /// its screen is read (`completion`).
    pub(super) fn judge_turn_end(&mut self, now: Instant, target: SessionId, msg: MsgId) {
        if self.reports.ending(&target, msg).is_some() {
            return self.settle_reported(now, &target, msg);
        }
        if self.reports.retrying(&target, now) {
            return self.still_retrying(&target, msg);
        }
        if self.reports.reports(&target) {
            return self.await_report(now, target, msg);
        }
        self.injector.hold(now, &target, msg);
        self.read_pane(target, msg);
    }

    /// A turn nothing waits on (a broadcast copy, a note, a brief already replied to) ended
    /// on its screen: an agent that reports is held for its report a bound, so nothing else
    /// is typed while it may still be writing.
    pub(super) fn await_unwaited_end(&mut self, now: Instant, target: &SessionId, msg: MsgId) {
        if self.reports.retrying(target, now) && self.reports.ending(target, msg).is_none() {
            return self.still_retrying(target, msg);
        }
        if self.reports.reports(target) && self.reports.ending(target, msg).is_none() {
            self.await_report(now, target.clone(), msg);
        }
    }

    /// The agent said it retries its provider within turn `msg` (opencode shows idle while it
    /// does): the end its screen showed is not one, and nothing else is typed into it until it
    /// says the turn ended or failed (or its delegation's own bound ends it).
    fn still_retrying(&mut self, target: &SessionId, msg: MsgId) {
        if self.injector.reopen(target, msg) {
            self.rendezvous.turn_resumed(target, msg);
            self.session_to(target, &[SessionState::Done], SessionState::Busy);
        }
    }

    fn await_report(&mut self, now: Instant, target: SessionId, msg: MsgId) {
        let until = now + Duration::from_millis(self.cfg.report_grace_ms);
        // Held past the wait, so the scrape that may follow it finds the pane still held
        // (the injector's own deadlines fire before the gateway's timers).
        let io = Duration::from_millis(self.cfg.io_timeout_ms);
        self.injector.hold_until(&target, msg, until + io);
        self.reports.await_end(&target, msg, until);
        self.fx.wake(until, TimerKind::ReportWait(target));
    }

    /// `gid`'s report did not come within its bound: its screen is the fallback.
    pub(super) fn on_report_wait(&mut self, now: Instant, gid: SessionId) {
        let Some(msg) = self.reports.wait_over(&gid, now) else {
            return;
        };
        self.event(Event::ReportMissing {
            target: gid.clone(),
            msg,
        });
        let scrape = self
            .rendezvous
            .waiter(&gid, msg)
            .is_some_and(|w| w.ended && w.baseline.is_some());
        if scrape {
            self.injector.hold(now, &gid, msg);
            self.read_pane(gid, msg);
        } else {
            self.injector.release(now, &gid, msg);
            self.drain_injector(now);
        }
    }

    /// Brief `msg`'s delegation ends as the agent said its turn did.
    fn settle_reported(&mut self, now: Instant, gid: &SessionId, msg: MsgId) {
        let Some(ending) = self.reports.ending(gid, msg).cloned() else {
            return;
        };
        match ending {
            Ending::Text(text) => {
                // A usage limit in its final words is one, as on its screen.
                if let Some(matched) = crate::completion::usage_limit(&text, &self.compiled) {
                    return self.exhausted(now, gid, msg, matched);
                }
                if let Some(r) = self.rendezvous.resolve(gid, msg, Kind::Completion) {
                    let member = self.is_member_here(gid);
                    self.health.mute_turn(gid, member);
                    self.finish(now, r.ticket, Outcome::CompletedUnreplied, Some(text), None);
                }
            }
            Ending::Failed { limit: true, words } => self.exhausted(now, gid, msg, words),
            Ending::Failed {
                limit: false,
                words,
            } => {
                if let Some(r) = self.rendezvous.resolve(gid, msg, Kind::Failed) {
                    let why = format!("the agent's turn ended on an error: {words}");
                    self.finish(now, r.ticket, Outcome::WorkerFailed, Some(why), None);
                }
            }
        }
    }
}

/// A verdict that took the report (its trouble stands), not one that set it aside.
fn verdict_taken(name: &str) -> bool {
    !matches!(name, "stale" | "foreign")
}
