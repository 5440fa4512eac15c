//! Model-based tests: random sequences of status samples, sends, replies, asks, answers,
//! driver answers, pane deaths and timer ticks, checked after every step against the delivery
//! invariants. A final healing phase makes everything end, then the end-state rules are checked.

use fleet_core::injector::Cause;
use fleet_core::{
    AgentStatus, CallId, CoreConfig, Event, Gateway, Input, Instant, MsgId, Outcome, Output,
    Principal, Request, Response, SessionId, TicketId, TurnId,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

const TARGETS: [&str; 3] = ["w0", "w1", "w2"];
const LEADS: [&str; 2] = ["lead-a", "lead-b"];

/// One thing that happens to the gateway. Indices pick among what is outstanding.
#[derive(Clone, Debug)]
enum Step {
    /// A lead delegates to a worker.
    Send {
        lead: usize,
        target: usize,
        wait: bool,
        timeout_s: u64,
    },
    /// herdr reports a status (with screen text that may refine UNKNOWN).
    Sample {
        pane: usize,
        status: AgentStatus,
        screen: u8,
    },
    /// The same status sampled `n` times in a row: reaches the grace bounds.
    Burst {
        pane: usize,
        status: AgentStatus,
        n: u8,
    },
    /// The driver answers one outstanding inject.
    InjectDone {
        pick: usize,
        how: Inject,
    },
    /// The driver answers one outstanding completion read.
    ReadDone {
        pick: usize,
        kind: u8,
    },
    /// A worker calls `fleet_reply`.
    Reply {
        target: usize,
    },
    /// A worker calls `fleet_ask`.
    Ask {
        target: usize,
        timeout_s: u64,
    },
    /// A lead answers a seen turnId (or a stale one).
    Answer {
        pick: usize,
        lead: usize,
        wait: bool,
    },
    /// A lead drains a worker's held replies.
    Drain {
        target: usize,
    },
    /// A lead polls a ticket it was given.
    Poll {
        pick: usize,
    },
    MemberStarted {
        target: usize,
    },
    MemberConnected {
        target: usize,
    },
    PaneGone {
        target: usize,
    },
    /// Time passes and the timer fires.
    Advance {
        ms: u64,
    },
}

/// How the driver answers an inject.
#[derive(Clone, Copy, Debug)]
enum Inject {
    Typed,
    /// herdr says the pane is gone; nothing typed.
    Gone,
    /// herdr missed its bound before typing (the baseline read).
    Stalled,
    /// Sent, not confirmed: the text may be in the pane.
    Unconfirmed,
}

fn step() -> impl Strategy<Value = Step> {
    let status = prop::sample::select(AgentStatus::ALL.to_vec());
    prop_oneof![
        3 => (0..2usize, 0..3usize, any::<bool>(), 1..120u64)
            .prop_map(|(lead, target, wait, timeout_s)| Step::Send { lead, target, wait, timeout_s }),
        8 => (0..5usize, status, 0..3u8).prop_map(|(pane, status, screen)| Step::Sample { pane, status, screen }),
        2 => (0..5usize, prop::sample::select(AgentStatus::ALL.to_vec()), 1..9u8)
            .prop_map(|(pane, status, n)| Step::Burst { pane, status, n }),
        3 => (any::<usize>(), prop_oneof![
                17 => Just(Inject::Typed),
                1 => Just(Inject::Gone),
                1 => Just(Inject::Stalled),
                1 => Just(Inject::Unconfirmed),
            ]).prop_map(|(pick, how)| Step::InjectDone { pick, how }),
        2 => (any::<usize>(), 0..3u8).prop_map(|(pick, kind)| Step::ReadDone { pick, kind }),
        2 => (0..3usize).prop_map(|target| Step::Reply { target }),
        1 => (0..3usize, 1..90u64).prop_map(|(target, timeout_s)| Step::Ask { target, timeout_s }),
        1 => (any::<usize>(), 0..2usize, any::<bool>()).prop_map(|(pick, lead, wait)| Step::Answer { pick, lead, wait }),
        1 => (0..3usize).prop_map(|target| Step::Drain { target }),
        1 => any::<usize>().prop_map(|pick| Step::Poll { pick }),
        1 => (0..3usize).prop_map(|target| Step::MemberStarted { target }),
        1 => (0..3usize).prop_map(|target| Step::MemberConnected { target }),
        1 => (0..3usize).prop_map(|target| Step::PaneGone { target }),
        4 => prop_oneof![1..2_000u64, 2_000..70_000u64].prop_map(|ms| Step::Advance { ms }),
    ]
}

fn pane(i: usize) -> SessionId {
    if i < TARGETS.len() {
        SessionId::new(TARGETS[i])
    } else {
        SessionId::new(LEADS[i - TARGETS.len()])
    }
}

fn lead(i: usize) -> Principal {
    Principal::primary(LEADS[i], Some(SessionId::new(LEADS[i])))
}

/// The reference: what the test itself knows about the world, and the rules it checks.
struct Harness {
    gw: Gateway,
    now: Instant,
    next_call: u64,
    /// Last effective (refined) status fed per pane.
    status: BTreeMap<SessionId, AgentStatus>,
    /// Members that must connect before anything is typed into them.
    gated: BTreeSet<SessionId>,
    /// Members that reported connected; a later start report does not close them again.
    connected: BTreeSet<SessionId>,
    /// Messages handed to the driver and not yet ended, per target.
    in_flight: BTreeMap<SessionId, MsgId>,
    /// The latest delivered turn per target, as the events tell it.
    turn: BTreeMap<SessionId, MsgId>,
    pending_injects: Vec<(SessionId, MsgId)>,
    /// Injects answered "sent, not confirmed", or not answered in time: they may be in the
    /// pane, so never typed again, and a late answer is stale.
    unconfirmed: BTreeSet<MsgId>,
    pending_reads: Vec<(SessionId, MsgId)>,
    enqueued: BTreeSet<MsgId>,
    delivered: BTreeSet<MsgId>,
    dropped: BTreeSet<MsgId>,
    injected: BTreeSet<MsgId>,
    /// Which turn each reply text was sent from.
    reply_turn: BTreeMap<String, Option<MsgId>>,
    /// The turn each delegating call (send or answer) is about.
    call_msg: BTreeMap<CallId, MsgId>,
    ticket_msg: BTreeMap<TicketId, MsgId>,
    responded: BTreeSet<CallId>,
    calls: BTreeSet<CallId>,
    turns_seen: Vec<(TurnId, MsgId)>,
    tickets: Vec<TicketId>,
    /// The target of the `StatusSampled` step being handled, if any.
    sampling: Option<SessionId>,
    replies: u64,
    /// Turns that failed (wedged, pane gone): their sends must say so, not time out.
    failed_turns: BTreeSet<MsgId>,
    /// Every output, rendered: the trace the determinism property compares.
    trace: Vec<String>,
}

impl Harness {
    fn new(seed: u64) -> Self {
        // Small grace bounds so random runs reach the missed-fast-turn, stall and readiness paths.
        let cfg = CoreConfig {
            poll_interval_ms: 500,
            pickup_grace_polls: 3,
            stall_grace_polls: 5,
            readiness_grace_polls: 6,
            nudge_interval_ms: 5_000,
            ..CoreConfig::default()
        };
        Harness {
            gw: Gateway::new(cfg, seed, Instant::ZERO).expect("valid config"),
            now: Instant::ZERO,
            next_call: 0,
            status: BTreeMap::new(),
            gated: BTreeSet::new(),
            connected: BTreeSet::new(),
            in_flight: BTreeMap::new(),
            turn: BTreeMap::new(),
            pending_injects: Vec::new(),
            unconfirmed: BTreeSet::new(),
            pending_reads: Vec::new(),
            enqueued: BTreeSet::new(),
            delivered: BTreeSet::new(),
            dropped: BTreeSet::new(),
            injected: BTreeSet::new(),
            reply_turn: BTreeMap::new(),
            call_msg: BTreeMap::new(),
            ticket_msg: BTreeMap::new(),
            responded: BTreeSet::new(),
            calls: BTreeSet::new(),
            turns_seen: Vec::new(),
            tickets: Vec::new(),
            sampling: None,
            replies: 0,
            failed_turns: BTreeSet::new(),
            trace: Vec::new(),
        }
    }

    fn call(&mut self, caller: Principal, request: Request) -> CallId {
        self.next_call += 1;
        let call = CallId(self.next_call);
        self.calls.insert(call);
        self.input(Input::Call {
            call,
            caller,
            request,
        });
        call
    }

    fn input(&mut self, input: Input) {
        self.gw.handle(self.now, input);
        self.drain();
    }

    fn drain(&mut self) {
        let mut last_call_enqueued = None;
        while let Some(out) = self.gw.poll_output() {
            self.trace.push(format!("{} {out}", self.now));
            match out {
                Output::Inject { target, msg, .. } => {
                    let st = self.status.get(&target).copied();
                    assert_eq!(
                        self.sampling.as_ref(),
                        Some(&target),
                        "inject into {target} outside a fresh sample of it"
                    );
                    assert!(
                        st.is_some_and(AgentStatus::injectable),
                        "inject into {target} while {st:?}"
                    );
                    assert!(
                        !self.gated.contains(&target),
                        "inject into unready {target}"
                    );
                    assert!(
                        !self.in_flight.contains_key(&target),
                        "two turns in flight in {target}"
                    );
                    assert!(self.injected.insert(msg), "msg {msg} injected twice");
                    self.in_flight.insert(target.clone(), msg);
                    self.pending_injects.push((target, msg));
                }
                Output::ReadPane { target, msg } => self.pending_reads.push((target, msg)),
                Output::Respond { call, response } => {
                    assert!(self.calls.contains(&call), "answer to unknown {call}");
                    assert!(self.responded.insert(call), "{call} answered twice");
                    self.check_response(call, &response);
                }
                Output::Event(e) => self.on_event(e, &mut last_call_enqueued),
                Output::PollStatus { .. }
                | Output::PollStatuses { .. }
                | Output::Audit(_)
                | Output::ProbeHealth { .. }
                | Output::MemberReady { .. }
                | Output::Notify(_)
                | Output::KeepTasks(_)
                | Output::Remember(_) => {}
                Output::Broker(_)
                | Output::SpawnPane { .. }
                | Output::ClosePane { .. }
                | Output::LookAtStart { .. } => {
                    panic!("an output this workload cannot cause: {out}")
                }
            }
        }
    }

    fn on_event(&mut self, e: Event, last: &mut Option<(TicketId, MsgId)>) {
        match e {
            Event::Enqueued { ticket, msg, .. } => {
                assert!(self.enqueued.insert(msg));
                if let Some(t) = ticket {
                    self.ticket_msg.insert(t, msg);
                    *last = Some((t, msg));
                    self.call_msg.insert(CallId(self.next_call), msg);
                }
            }
            Event::Delivered { target, msg } => {
                assert_eq!(self.in_flight.get(&target), Some(&msg));
                self.delivered.insert(msg);
                self.turn.insert(target, msg);
            }
            Event::TurnComplete { target, msg, .. } => {
                assert_eq!(
                    self.in_flight.get(&target),
                    Some(&msg),
                    "turn end of another msg"
                );
                self.in_flight.remove(&target);
            }
            Event::TurnFailed { target, msg, .. } => {
                assert_eq!(
                    self.in_flight.get(&target),
                    Some(&msg),
                    "turn end of another msg"
                );
                self.in_flight.remove(&target);
                self.failed_turns.insert(msg);
            }
            Event::Dropped { target, msg, cause } => {
                assert!(
                    !self.delivered.contains(&msg),
                    "a delivered msg cannot be dropped"
                );
                if self.in_flight.get(&target) == Some(&msg) {
                    assert!(
                        matches!(
                            cause,
                            Cause::InjectFailed(_)
                                | Cause::IoTimedOut
                                | Cause::Unconfirmed(_)
                                | Cause::PaneGone
                        ),
                        "in-flight drop for {cause}"
                    );
                    // An unanswered or unconfirmed inject may have been typed: its turn
                    // stays in flight.
                    if cause.maybe_typed() {
                        self.unconfirmed.insert(msg);
                    }
                    if !self.unconfirmed.contains(&msg) {
                        self.in_flight.remove(&target);
                    }
                }
                self.dropped.insert(msg);
            }
            Event::Resolved {
                ticket, outcome, ..
            } => {
                if let Some(msg) = self.ticket_msg.get(&ticket) {
                    assert!(
                        !(self.failed_turns.contains(msg)
                            && matches!(
                                outcome,
                                Outcome::TimedOutWorking | Outcome::TimedOutQueued
                            )),
                        "turn {msg} failed, yet its send then ended {outcome}"
                    );
                }
            }
            Event::Asked {
                target,
                turn_id,
                coalesced: false,
            } => {
                let msg = *self
                    .turn
                    .get(&target)
                    .expect("an ask belongs to a delivered turn");
                self.turns_seen.push((turn_id, msg));
            }
            _ => {}
        }
    }

    /// No waiter may be resolved by another turn's event.
    fn check_response(&mut self, call: CallId, response: &Response) {
        match response {
            Response::Outcome {
                outcome,
                body,
                ticket,
                ..
            } => {
                let Some(expect) = self.call_msg.get(&call).copied() else {
                    return;
                };
                if let Some(t) = ticket {
                    self.ticket_msg.entry(*t).or_insert(expect);
                }
                self.check_body(expect, *outcome, body.as_deref());
            }
            Response::Ticket(view) => {
                if let Some(expect) = self.call_msg.get(&call).copied() {
                    self.ticket_msg.entry(view.ticket).or_insert(expect);
                }
                if !self.tickets.contains(&view.ticket) {
                    self.tickets.push(view.ticket);
                }
                if let (Some(o), Some(expect)) =
                    (view.outcome, self.ticket_msg.get(&view.ticket).copied())
                {
                    self.check_body(expect, o, view.body.as_deref());
                }
            }
            _ => {}
        }
    }

    fn check_body(&self, expect: MsgId, outcome: Outcome, body: Option<&str>) {
        match outcome {
            Outcome::Replied => {
                let body = body.expect("a reply has a body");
                assert_eq!(
                    self.reply_turn.get(body),
                    Some(&Some(expect)),
                    "REPLIED with {body:?}, which was not sent during turn {expect}"
                );
            }
            Outcome::CompletedUnreplied | Outcome::Question => {
                let body = body.expect("a completion or question has a body");
                assert!(
                    body.contains(&expect.to_string()),
                    "{outcome} body {body:?} is not from turn {expect}"
                );
            }
            _ => {}
        }
    }

    fn sample(&mut self, target: SessionId, status: AgentStatus, screen: u8) {
        let (screen, effective) = match (screen, status) {
            (1, AgentStatus::Unknown) => (Some("all done\n❯ ".to_string()), AgentStatus::Idle),
            (2, AgentStatus::Unknown) => (
                Some("✻ Working… (esc to interrupt)".to_string()),
                AgentStatus::Working,
            ),
            (_, s) => (None, s),
        };
        self.status.insert(target.clone(), effective);
        self.sampling = Some(target.clone());
        self.input(Input::StatusSampled {
            target,
            status,
            screen,
            asked: self.gw.newest_ask(),
        });
        self.sampling = None;
    }

    fn apply(&mut self, step: Step) {
        match step {
            Step::Send {
                lead: l,
                target,
                wait,
                timeout_s,
            } => {
                let target = pane(target);
                let content = format!("task {}", self.next_call + 1);
                self.call(
                    lead(l),
                    Request::Send {
                        target,
                        content,
                        wait,
                        timeout_ms: Some(timeout_s * 1000),
                    },
                );
            }
            Step::Sample {
                pane: p,
                status,
                screen,
            } => self.sample(pane(p), status, screen),
            Step::Burst { pane: p, status, n } => {
                for _ in 0..n {
                    self.sample(pane(p), status, 0);
                }
            }
            Step::InjectDone { pick, how } => {
                if self.pending_injects.is_empty() {
                    return;
                }
                let (target, msg) = self
                    .pending_injects
                    .remove(pick % self.pending_injects.len());
                let not_typed = |e| {
                    // Nothing reached the pane: typing it again later is not typing it twice.
                    Err(fleet_core::InjectError::NotTyped(e))
                };
                let result = match how {
                    Inject::Typed => Ok(format!("baseline before {msg}")),
                    Inject::Gone => not_typed(fleet_core::PaneError::NotFound),
                    Inject::Stalled => {
                        not_typed(fleet_core::PaneError::Unavailable("timed out".into()))
                    }
                    Inject::Unconfirmed => {
                        self.unconfirmed.insert(msg);
                        Err(fleet_core::InjectError::Unconfirmed("timed out".into()))
                    }
                };
                if matches!(how, Inject::Gone | Inject::Stalled) && !self.unconfirmed.contains(&msg)
                {
                    self.injected.remove(&msg);
                    self.in_flight.remove(&target);
                }
                self.input(Input::Injected {
                    target,
                    msg,
                    result,
                });
            }
            Step::ReadDone { pick, kind } => {
                if self.pending_reads.is_empty() {
                    return;
                }
                let (target, msg) = self.pending_reads.remove(pick % self.pending_reads.len());
                let result = match kind {
                    0 => Ok(format!("baseline before {msg}")),
                    1 => Ok(format!(
                        "baseline before {msg}\nusage limit reached ({msg})"
                    )),
                    _ => Ok(format!("baseline before {msg}\nfinished {msg}")),
                };
                self.input(Input::PaneRead {
                    target,
                    msg,
                    result,
                });
            }
            Step::Reply { target } => {
                let s = pane(target);
                self.replies += 1;
                let content = format!("reply {} from {s}", self.replies);
                self.reply_turn
                    .insert(content.clone(), self.turn.get(&s).copied());
                self.call(Principal::worker(s), Request::Reply { content });
            }
            Step::Ask { target, timeout_s } => {
                let s = pane(target);
                let question = format!("question in {:?}", self.turn.get(&s));
                let question = match self.turn.get(&s) {
                    Some(m) => format!("question in {m}"),
                    None => question,
                };
                self.call(
                    Principal::worker(s),
                    Request::Ask {
                        question,
                        timeout_ms: Some(timeout_s * 1000),
                    },
                );
            }
            Step::Answer {
                pick,
                lead: l,
                wait,
            } => {
                let (turn_id, msg) = if self.turns_seen.is_empty() || pick % 7 == 0 {
                    (TurnId(uuid_like(pick)), None)
                } else {
                    let (t, m) = self.turns_seen[pick % self.turns_seen.len()];
                    (t, Some(m))
                };
                let next = CallId(self.next_call + 1);
                if let Some(m) = msg {
                    self.call_msg.insert(next, m);
                }
                self.call(
                    lead(l),
                    Request::Answer {
                        turn_id,
                        content: "use postgres".into(),
                        wait,
                        timeout_ms: Some(60_000),
                        asked_by: None,
                    },
                );
            }
            Step::Drain { target } => {
                self.call(
                    lead(0),
                    Request::Drain {
                        target: pane(target),
                    },
                );
            }
            Step::Poll { pick } => {
                if self.tickets.is_empty() {
                    return;
                }
                let ticket = self.tickets[pick % self.tickets.len()];
                self.call(lead(0), Request::Poll { ticket });
            }
            Step::MemberStarted { target } => {
                let s = pane(target);
                if !self.connected.contains(&s) {
                    self.gated.insert(s.clone());
                }
                self.input(Input::MemberStarted { target: s });
            }
            Step::MemberConnected { target } => {
                let s = pane(target);
                self.gated.remove(&s);
                self.connected.insert(s.clone());
                self.input(Input::MemberConnected { target: s });
            }
            Step::PaneGone { target } => {
                let s = pane(target);
                self.gated.remove(&s);
                self.connected.remove(&s);
                self.pending_injects.retain(|(t, _)| t != &s);
                self.pending_reads.retain(|(t, _)| t != &s);
                self.input(Input::PaneGone { target: s.clone() });
                self.in_flight.remove(&s);
            }
            Step::Advance { ms } => {
                self.now = self.now + std::time::Duration::from_millis(ms);
                self.input(Input::Tick);
            }
        }
    }

    /// Every agent behaves from here on, and time runs past every bound.
    fn heal(&mut self) {
        for t in TARGETS {
            self.apply(Step::MemberConnected {
                target: TARGETS.iter().position(|x| *x == t).unwrap_or(0),
            });
        }
        for round in 0..900u32 {
            while !self.pending_injects.is_empty() {
                self.apply(Step::InjectDone {
                    pick: 0,
                    how: Inject::Typed,
                });
            }
            while !self.pending_reads.is_empty() {
                self.apply(Step::ReadDone { pick: 0, kind: 2 });
            }
            for p in 0..TARGETS.len() + LEADS.len() {
                let st = if round % 3 == 1 {
                    AgentStatus::Working
                } else {
                    AgentStatus::Idle
                };
                self.sample(pane(p), st, 0);
            }
            self.apply(Step::Advance { ms: 1_000 });
        }
    }

    fn check_end(&self) {
        for msg in &self.enqueued {
            assert!(
                self.delivered.contains(msg) || self.dropped.contains(msg),
                "msg {msg} neither delivered nor failed"
            );
        }
        let unanswered: Vec<_> = self.calls.difference(&self.responded).collect();
        assert!(
            unanswered.is_empty(),
            "calls never answered: {unanswered:?}"
        );
        assert_eq!(self.gw.open_delegations(), 0, "delegations left open");
    }
}

fn uuid_like(n: usize) -> uuid::Uuid {
    uuid::Uuid::from_u128(n as u128 ^ 0x5eed)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        max_shrink_iters: 2_000,
        .. ProptestConfig::default()
    })]

    /// Every step: no inject while not injectable or unready, one turn per target, no
    /// double injection, no double answer, no waiter resolved by another turn's event.
    /// At the end: every message delivered or failed, every call answered once.
    #[test]
    fn delivery_invariants_hold_for_any_event_sequence(
        seed in any::<u64>(),
        steps in prop::collection::vec(step(), 1..160),
    ) {
        let mut h = Harness::new(seed);
        for s in steps {
            h.apply(s);
        }
        h.heal();
        h.check_end();
    }

    /// Same seed and same inputs give the same outputs, byte for byte.
    #[test]
    fn the_gateway_is_deterministic(
        seed in any::<u64>(),
        steps in prop::collection::vec(step(), 1..80),
    ) {
        let run = |steps: &[Step]| {
            let mut h = Harness::new(seed);
            for s in steps {
                h.apply(s.clone());
            }
            h.heal();
            h.trace
        };
        prop_assert_eq!(run(&steps), run(&steps));
    }
}
