//! The oracle: watches every output of the gateway and every answer a caller gets, and
//! records each broken invariant with the sim time it broke at. Names follow DESIGN §5.

use crate::agent::Pane;
use crate::invariant::Invariant;
use crate::pending::Pending;
use fleet_core::health::Health;
use fleet_core::{
    AgentStatus, AskOutcome, CallId, Duration, Event, Instant, MsgId, Outcome, Output, Response,
    SessionId, TicketId, TicketView,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub invariant: Invariant,
    pub at: Instant,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {}: {}", self.invariant, self.at, self.detail)
    }
}

#[derive(Clone, Debug)]
struct SendRec {
    wait: bool,
    deadline: Instant,
    outcomes: u32,
    ticket: Option<TicketId>,
}

#[derive(Clone, Debug)]
struct TicketRec {
    deadline: Instant,
    terminal: u32,
}

/// How late past its deadline an outcome may arrive: the timer fires at the deadline, so
/// only the driver's own latency is allowed.
const SLACK: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct Oracle {
    inbox_cap: usize,
    pub violations: Vec<Violation>,
    injected: BTreeSet<MsgId>,
    enqueued: BTreeMap<SessionId, Vec<MsgId>>,
    ended: BTreeSet<MsgId>,
    sends: BTreeMap<CallId, SendRec>,
    tickets: BTreeMap<TicketId, TicketRec>,
    /// How every delegation ended, for the run summary.
    pub outcomes: BTreeMap<Outcome, u64>,
    pub injections: u64,
    pub max_inbox_depth: usize,
    /// Health changes reported, by the state they went to.
    pub health_seen: BTreeMap<Health, u64>,
    /// Tasks whose agent ended its turn without `fleet_reply`: when, and in which pane (I14).
    turns_ended: BTreeMap<String, (Instant, SessionId)>,
    /// How long after such a turn's end its delegation may still time out: the pickup bound
    /// an inferred end waits out, and a scrape.
    turn_end_bound: Duration,
}

/// What an agent's screen draws around a turn that is not the turn's answer (a TUI's notice):
/// never part of a COMPLETED_UNREPLIED body (I5).
pub const CHROME_MARK: &str = "※ Tip:";

impl Oracle {
    pub fn new(inbox_cap: usize, turn_end_bound: Duration) -> Self {
        Oracle {
            inbox_cap,
            violations: Vec::new(),
            injected: BTreeSet::new(),
            enqueued: BTreeMap::new(),
            ended: BTreeSet::new(),
            sends: BTreeMap::new(),
            tickets: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            injections: 0,
            max_inbox_depth: 0,
            health_seen: BTreeMap::new(),
            turns_ended: BTreeMap::new(),
            turn_end_bound,
        }
    }

    /// The agent in `pane` working on `task` ended its turn at `at` without `fleet_reply`.
    pub fn turn_ended(&mut self, pane: &SessionId, task: &str, at: Instant) {
        self.turns_ended
            .insert(task.to_string(), (at, pane.clone()));
    }

    /// Someone started typing into `pane` by hand: the pane is busy for reasons fleetd cannot
    /// tell from a turn, so a turn that ended there may still time out (I14 is not judged).
    pub fn busy_by_hand(&mut self, pane: &SessionId) {
        self.turns_ended.retain(|_, (_, p)| p != pane);
    }

    /// I14: a delegation typed into a member whose turn then ended ends with an outcome
    /// other than a timeout — at the latest one bound after the turn's end.
    fn check_turn_end(&mut self, now: Instant, outcome: Outcome, task: Option<&str>) {
        let (Outcome::TimedOutWorking, Some(task)) = (outcome, task) else {
            return;
        };
        if let Some(&(ended, _)) = self.turns_ended.get(task) {
            if now > ended + self.turn_end_bound {
                self.violate(
                    Invariant::I14,
                    now,
                    format!(
                        "{task:?} timed out working, though its agent ended the turn at {ended}"
                    ),
                );
            }
        }
    }

    fn violate(&mut self, invariant: Invariant, at: Instant, detail: String) {
        self.violations.push(Violation {
            invariant,
            at,
            detail,
        });
    }

    pub fn on_send(&mut self, call: CallId, wait: bool, deadline: Instant) {
        self.sends.insert(
            call,
            SendRec {
                wait,
                deadline,
                outcomes: 0,
                ticket: None,
            },
        );
    }

    pub fn on_step(&mut self, now: Instant, inbox_depth: usize) {
        self.max_inbox_depth = self.max_inbox_depth.max(inbox_depth);
        let bound = self.inbox_cap * self.enqueued.len().max(1);
        if inbox_depth > bound {
            self.violate(
                Invariant::I10,
                now,
                format!("inbox holds {inbox_depth}, above its bound {bound}"),
            );
        }
    }

    pub fn on_output(&mut self, now: Instant, out: &Output, panes: &BTreeMap<SessionId, Pane>) {
        match out {
            Output::Inject { target, msg, .. } => self.on_inject(now, target, *msg, panes),
            Output::Event(Event::Enqueued { target, msg, .. }) => {
                self.enqueued.entry(target.clone()).or_default().push(*msg);
            }
            Output::Event(Event::HealthChanged { target, to, .. }) => {
                self.on_health(now, target, *to, panes)
            }
            Output::Event(Event::Nudged { lead, msg, .. }) => {
                self.enqueued.entry(lead.clone()).or_default().push(*msg);
            }
            Output::Event(Event::Dropped { msg, .. }) => {
                self.ended.insert(*msg);
            }
            Output::Event(Event::Resolved {
                ticket, outcome, ..
            }) => self.on_resolved(now, *ticket, *outcome),
            _ => {}
        }
    }

    /// A typing: once per message (I1), into an agent that takes input and is on no other
    /// task (I1), after every earlier message for its target (I4).
    fn on_inject(
        &mut self,
        now: Instant,
        target: &SessionId,
        msg: MsgId,
        panes: &BTreeMap<SessionId, Pane>,
    ) {
        self.injections += 1;
        if !self.injected.insert(msg) {
            self.violate(
                Invariant::I1,
                now,
                format!("msg {msg} injected twice into {target}"),
            );
        }
        match panes.get(target) {
            Some(p) if p.alive && !p.status.injectable() => self.violate(
                Invariant::I1,
                now,
                format!("inject into {target} while it is {}", p.status),
            ),
            // One message per turn: the task typed before is not finished.
            Some(p) if p.alive && p.task.is_some() => {
                let on = p.task.as_ref().map(|t| t.text.clone()).unwrap_or_default();
                self.violate(
                    Invariant::I1,
                    now,
                    format!("inject into {target} while its agent is still on {on:?}"),
                )
            }
            _ => {}
        }
        if let Some(order) = self.enqueued.get(target) {
            let earlier: Vec<MsgId> = order
                .iter()
                .take_while(|m| **m != msg)
                .filter(|m| !self.ended.contains(m))
                .copied()
                .collect();
            if !earlier.is_empty() {
                self.violate(
                    Invariant::I4,
                    now,
                    format!("{msg} injected into {target} before earlier {earlier:?}"),
                );
            }
        }
        self.ended.insert(msg);
    }

    /// A health change the pane's own state contradicts (I13).
    fn on_health(
        &mut self,
        now: Instant,
        target: &SessionId,
        to: Health,
        panes: &BTreeMap<SessionId, Pane>,
    ) {
        *self.health_seen.entry(to).or_default() += 1;
        let pane = panes.get(target).filter(|p| p.alive);
        match (to, pane) {
            (Health::Gone, Some(_)) => self.violate(
                Invariant::I13,
                now,
                format!("{target} was reported GONE while its pane lives"),
            ),
            (Health::Working, None) => self.violate(
                Invariant::I13,
                now,
                format!("{target} was reported WORKING, and its pane is gone"),
            ),
            (Health::Working, Some(p))
                if !matches!(p.status, AgentStatus::Working | AgentStatus::Unknown) =>
            {
                self.violate(
                    Invariant::I13,
                    now,
                    format!(
                        "{target} was reported WORKING while herdr says {}",
                        p.status
                    ),
                )
            }
            _ => {}
        }
    }

    /// A delegation's ending: one per ticket, by its deadline (I2).
    fn on_resolved(&mut self, now: Instant, ticket: TicketId, outcome: Outcome) {
        *self.outcomes.entry(outcome).or_default() += 1;
        if outcome == Outcome::Question {
            return;
        }
        if let Some(t) = self.tickets.get_mut(&ticket) {
            t.terminal += 1;
            let (terminal, deadline) = (t.terminal, t.deadline);
            if terminal > 1 {
                self.violate(Invariant::I2, now, format!("ticket {ticket} ended twice"));
            }
            if now > deadline + SLACK {
                self.violate(
                    Invariant::I2,
                    now,
                    format!("ticket {ticket} ended {outcome} after its deadline {deadline}"),
                );
            }
        }
    }

    pub fn on_response(&mut self, now: Instant, call: CallId, pending: &Pending, r: &Response) {
        let task = match pending {
            Pending::Send { task, .. } | Pending::Answer { task, .. } => Some(task.as_str()),
            _ => None,
        };
        if let Some(rec) = self.sends.get_mut(&call) {
            rec.outcomes += 1;
            let (outcomes, deadline, wait) = (rec.outcomes, rec.deadline, rec.wait);
            if outcomes > 1 {
                self.violate(Invariant::I2, now, format!("{call} answered twice"));
            }
            match r {
                Response::Outcome { outcome, body, .. } => {
                    if wait && now > deadline + SLACK {
                        self.violate(
                            Invariant::I2,
                            now,
                            format!("{call} ended {outcome} after its deadline {deadline}"),
                        );
                    }
                    self.check_body(now, *outcome, body.as_deref(), task);
                    self.check_turn_end(now, *outcome, task);
                }
                Response::Ticket(view) => {
                    if let Some(rec) = self.sends.get_mut(&call) {
                        rec.ticket = Some(view.ticket);
                    }
                    let t = self.tickets.entry(view.ticket).or_insert(TicketRec {
                        deadline,
                        terminal: 0,
                    });
                    // An answer resumes a paused ticket with the answer's own timeout.
                    t.deadline = t.deadline.max(deadline);
                }
                _ => {}
            }
        }
        if let (
            Pending::Ask { pane },
            Response::Ask {
                outcome: AskOutcome::Answered,
                turn_id,
                answer,
            },
        ) = (pending, r)
        {
            let want = turn_id.map(|t| format!("answer for {t}"));
            if answer.as_ref() != want.as_ref() || want.is_none() {
                self.violate(
                    Invariant::I5,
                    now,
                    format!("{pane} got answer {answer:?} for turn {turn_id:?}"),
                );
            }
        }
    }

    pub fn on_ticket_view(&mut self, now: Instant, view: &TicketView, task: &str) {
        if let Some(o) = view.outcome {
            self.check_body(now, o, view.body.as_deref(), Some(task));
            self.check_turn_end(now, o, Some(task));
        }
    }

    /// A reply or completion must come from the turn the send was delivered into.
    fn check_body(
        &mut self,
        now: Instant,
        outcome: Outcome,
        body: Option<&str>,
        task: Option<&str>,
    ) {
        let Some(task) = task else { return };
        if matches!(outcome, Outcome::Replied | Outcome::CompletedUnreplied) {
            let ok = body.is_some_and(|b| b.contains(task));
            if body.is_some_and(|b| b.contains(CHROME_MARK)) {
                self.violate(
                    Invariant::I5,
                    now,
                    format!("{outcome} for {task:?} carried the screen's chrome: {body:?}"),
                );
            } else if !ok {
                self.violate(
                    Invariant::I5,
                    now,
                    format!("{outcome} for {task:?} carried another turn's text: {body:?}"),
                );
            }
        }
    }

    /// End of run: every send must have ended exactly once.
    pub fn finish(&mut self, now: Instant) {
        let mut missing = Vec::new();
        for (call, rec) in &self.sends {
            let ended = match (rec.wait, rec.ticket) {
                (_, Some(t)) => self.tickets.get(&t).is_some_and(|t| t.terminal >= 1),
                (_, None) => rec.outcomes >= 1,
            };
            if !ended {
                missing.push(*call);
            }
        }
        for call in missing {
            self.violate(
                Invariant::I2,
                now,
                format!("{call} never reached an outcome"),
            );
        }
    }
}
