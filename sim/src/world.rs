//! One simulated host: the real `Gateway`, simulated herdr panes, simulated leads, and a
//! driver that carries out every output with a seeded latency. Time is virtual; the world
//! jumps from one scheduled action (or gateway deadline) to the next.

use crate::agent::{Behaviour, Pane, Task};
use crate::oracle::{Oracle, CHROME_MARK};
pub use crate::pending::Pending;
use fleet_core::{
    AgentStatus, AskOutcome, CallId, CoreConfig, Duration, Gateway, Input, Instant, Outcome,
    Output, Phase, Principal, Request, Response, SessionId, TicketId, TurnId,
};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// Something the world will do at a given instant.
#[derive(Clone, Debug)]
// A call carries a whole `Request` (a spawn's spec is the largest); actions live only in the
// world's schedule, so their size costs nothing worth an indirection.
#[allow(clippy::large_enum_variant)]
enum Action {
    /// The driver samples a pane's status (herdr `agent.get`).
    Sample(SessionId, fleet_core::Asked),
    /// The driver reads the baseline and types a message (herdr `pane.read` + `pane.send_input`).
    Inject {
        target: SessionId,
        msg: fleet_core::MsgId,
        text: String,
    },
    /// The driver reads a pane after a turn (herdr `pane.read`).
    Read {
        target: SessionId,
        msg: fleet_core::MsgId,
    },
    /// The driver's health probe: every target's status and the end of its screen, at once.
    Probe(Vec<SessionId>),
    AgentStart(SessionId),
    AgentFinish(SessionId),
    AgentIdle(SessionId),
    /// A lead (by index) makes a call.
    Call {
        caller: Principal,
        request: Request,
        pending: Pending,
    },
    /// The workload: a lead decides to delegate something.
    LeadDelegates(usize),
    /// Someone types into an idle pane (a human, a lead at work): WORKING with no task.
    BusySpell(SessionId),
    BusySpellEnds(SessionId),
}

/// A simulated lead: a primary with its own pane.
#[derive(Clone, Debug)]
pub struct Lead {
    pub name: String,
    pub pane: SessionId,
    /// Async tickets it still polls, with the task each was about.
    pub open_tickets: BTreeMap<TicketId, String>,
}

/// The workload knobs a seed runs with.
#[derive(Clone, Debug)]
pub struct Workload {
    /// No new delegations after this instant.
    pub until: Instant,
    /// Mean gap between two delegations of one lead.
    pub mean_gap_ms: u64,
    pub timeout_ms_min: u64,
    pub timeout_ms_max: u64,
}

pub struct World {
    pub seed: u64,
    pub now: Instant,
    pub gw: Gateway,
    rng: ChaCha8Rng,
    pub panes: BTreeMap<SessionId, Pane>,
    pub leads: Vec<Lead>,
    workers: Vec<SessionId>,
    queue: BTreeMap<(Instant, u64), Action>,
    seq: u64,
    next_call: u64,
    pending: BTreeMap<CallId, Pending>,
    /// Panes with an inject or a read on its way: no one starts typing into them by hand
    /// then (a race of milliseconds against fleetd's own keystrokes, which no gateway can
    /// win; the oracle judges fleetd, not that race).
    touching: BTreeMap<SessionId, u32>,
    /// Each turnId the lead was asked on, with the task of the turn that asked.
    asked_turns: BTreeMap<TurnId, String>,
    tasks: u64,
    workload: Option<Workload>,
    pub oracle: Oracle,
    /// One line per thing that happened, prefixed with the sim time.
    pub trace: Vec<String>,
    /// Also trace status polls and samples (noisy; off for snapshots).
    pub trace_polls: bool,
}

impl World {
    pub fn new(seed: u64, cfg: CoreConfig) -> Result<World, fleet_core::ConfigError> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let gw_seed = rng.next_u64();
        let cap = cfg.inbox_cap_per_target;
        let turn_end_bound = Duration::from_millis(
            cfg.poll_interval_ms * (u64::from(cfg.pickup_grace_polls) + 4) + 1_000,
        );
        Ok(World {
            seed,
            now: Instant::ZERO,
            gw: Gateway::new(cfg, gw_seed, Instant::ZERO)?,
            rng,
            panes: BTreeMap::new(),
            leads: Vec::new(),
            workers: Vec::new(),
            queue: BTreeMap::new(),
            seq: 0,
            next_call: 0,
            pending: BTreeMap::new(),
            touching: BTreeMap::new(),
            asked_turns: BTreeMap::new(),
            tasks: 0,
            workload: None,
            oracle: Oracle::new(cap, turn_end_bound),
            trace: Vec::new(),
            trace_polls: false,
        })
    }

    /// Every worker's agent draws notices around its turns, as a real TUI does.
    pub fn enable_chrome(&mut self) {
        for w in &self.workers {
            if let Some(p) = self.panes.get_mut(w) {
                p.chrome = true;
            }
        }
    }

    pub fn add_worker(&mut self, name: &str, behaviour: Behaviour) -> SessionId {
        let id = SessionId::new(name);
        self.panes.insert(id.clone(), Pane::new(behaviour, false));
        self.workers.push(id.clone());
        // A member of this host, ready at once: its health is watched.
        self.feed(Input::MemberStarted { target: id.clone() });
        self.feed(Input::MemberConnected { target: id.clone() });
        id
    }

    /// Adds a lead with its own pane; returns its index.
    pub fn add_lead(&mut self, name: &str) -> usize {
        let pane = SessionId::new(format!("{name}-pane"));
        self.panes
            .insert(pane.clone(), Pane::new(Behaviour::Replies, true));
        self.leads.push(Lead {
            name: name.to_string(),
            pane,
            open_tickets: BTreeMap::new(),
        });
        self.leads.len() - 1
    }

    /// Every pane now and then goes WORKING on its own, as real panes do when a person types
    /// into them or a lead is mid-turn: deliveries must wait for those spells too.
    pub fn enable_busy_spells(&mut self) {
        let panes: Vec<SessionId> = self.panes.keys().cloned().collect();
        for pane in panes {
            let after = self.range(1_000, 20_000);
            self.schedule(Duration::from_millis(after), Action::BusySpell(pane));
        }
    }

    pub fn set_workload(&mut self, workload: Workload) {
        for lead in 0..self.leads.len() {
            let gap = self.range(200, workload.mean_gap_ms * 2);
            self.schedule(Duration::from_millis(gap), Action::LeadDelegates(lead));
        }
        self.workload = Some(workload);
    }

    fn principal(&self, lead: usize) -> Principal {
        let l = &self.leads[lead];
        Principal::primary(&l.name, Some(l.pane.clone()))
    }

    /// Lead `lead` delegates `task` to `target` now.
    pub fn send(&mut self, lead: usize, target: &str, task: &str, wait: bool, timeout_ms: u64) {
        let deadline = self.now + Duration::from_millis(timeout_ms);
        let caller = self.principal(lead);
        self.call(
            caller,
            Request::Send {
                target: SessionId::new(target),
                content: task.to_string(),
                wait,
                timeout_ms: Some(timeout_ms),
            },
            Pending::Send {
                lead,
                task: task.to_string(),
                wait,
                deadline,
            },
        );
    }

    // ---- the loop --------------------------------------------------------------------------

    /// Runs until nothing is scheduled and the gateway has no deadline, or until `limit`.
    pub fn run_until(&mut self, limit: Instant) {
        loop {
            let next_action = self.queue.first_key_value().map(|((at, _), _)| *at);
            let next_timer = self.gw.poll_timeout().map(|(at, _)| at);
            let next = match (next_action, next_timer) {
                (Some(a), Some(t)) => a.min(t),
                (Some(a), None) => a,
                (None, Some(t)) => t,
                (None, None) => break,
            };
            if next > limit {
                self.now = limit;
                break;
            }
            self.now = next.max(self.now);
            if next_timer.is_some_and(|t| t <= self.now) {
                self.feed(Input::Tick);
            }
            while let Some(entry) = self.queue.first_entry() {
                if entry.key().0 > self.now {
                    break;
                }
                let action = entry.remove();
                self.act(action);
            }
        }
    }

    /// Runs for `d` of simulated time.
    pub fn run_for(&mut self, d: Duration) {
        let limit = self.now + d;
        self.run_until(limit);
    }

    fn schedule(&mut self, after: Duration, action: Action) {
        self.seq += 1;
        self.queue.insert((self.now + after, self.seq), action);
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.rng.next_u64() % (hi - lo)
    }

    fn latency(&mut self) -> Duration {
        Duration::from_millis(self.range(2, 25))
    }

    /// One trace line, formatted once, in place.
    fn log(&mut self, line: impl std::fmt::Display) {
        use std::fmt::Write;
        let mut s = String::with_capacity(128);
        let _ = write!(s, "{:>9} {line}", self.now.to_string());
        self.trace.push(s);
    }

    fn call(&mut self, caller: Principal, request: Request, pending: Pending) {
        self.next_call += 1;
        let call = CallId(self.next_call);
        self.log(format_args!(
            "call {call} {} {}",
            caller.name,
            describe(&request)
        ));
        if let Pending::Send { deadline, wait, .. } | Pending::Answer { deadline, wait, .. } =
            &pending
        {
            self.oracle.on_send(call, *wait, *deadline);
        }
        self.pending.insert(call, pending);
        self.feed(Input::Call {
            call,
            caller,
            request,
        });
    }

    fn feed(&mut self, input: Input) {
        self.gw.handle(self.now, input);
        while let Some(out) = self.gw.poll_output() {
            self.carry_out(out);
        }
        self.oracle.on_step(self.now, self.gw.inbox_depth());
    }

    fn carry_out(&mut self, out: Output) {
        let quiet = matches!(
            out,
            Output::PollStatus { .. }
                | Output::PollStatuses { .. }
                | Output::ProbeHealth { .. }
                | Output::MemberReady { .. }
        ) && !self.trace_polls;
        if !quiet {
            self.log(&out);
        }
        self.oracle.on_output(self.now, &out, &self.panes);
        match out {
            Output::PollStatus { target, asked } => {
                let d = self.latency();
                self.schedule(d, Action::Sample(target, asked));
            }
            // (Answered one by one, as `PollStatus`es.)
            Output::PollStatuses { targets, asked, .. } => {
                for target in targets {
                    let d = self.latency();
                    self.schedule(d, Action::Sample(target, asked));
                }
            }
            Output::Inject { target, msg, text } => {
                let d = self.latency();
                *self.touching.entry(target.clone()).or_default() += 1;
                self.schedule(d, Action::Inject { target, msg, text });
            }
            Output::ReadPane { target, msg } => {
                let d = self.latency();
                *self.touching.entry(target.clone()).or_default() += 1;
                self.schedule(d, Action::Read { target, msg });
            }
            Output::ProbeHealth { targets } => {
                let d = self.latency();
                self.schedule(d, Action::Probe(targets));
            }
            Output::Respond { call, response } => self.on_response(call, response),
            // The single-host world runs no federation: no broker output can occur.
            Output::Audit(_)
            | Output::Event(_)
            | Output::Broker(_)
            | Output::SpawnPane { .. }
            | Output::ClosePane { .. }
            | Output::LookAtStart { .. }
            | Output::MemberReady { .. }
            | Output::Notify(_)
            | Output::KeepTasks(_)
            | Output::Remember(_) => {}
        }
    }

    fn act(&mut self, action: Action) {
        match action {
            Action::Sample(target, asked) => self.sample(target, asked),
            Action::Inject { target, msg, text } => {
                self.untouch(&target);
                self.inject(target, msg, text)
            }
            Action::Read { target, msg } => {
                self.untouch(&target);
                let result = match self.panes.get(&target) {
                    Some(p) if p.alive => Ok(p.read()),
                    _ => Err(fleet_core::PaneError::NotFound),
                };
                self.feed(Input::PaneRead {
                    target,
                    msg,
                    result,
                });
            }
            Action::Probe(targets) => {
                let probes = targets
                    .into_iter()
                    .map(|t| {
                        let sampled = match self.panes.get(&t).filter(|p| p.alive) {
                            Some(p) => fleet_core::Sampled::Status {
                                status: p.status,
                                screen: Some(p.read()),
                            },
                            None => fleet_core::Sampled::Gone,
                        };
                        (t, sampled)
                    })
                    .collect();
                self.feed(Input::HealthProbed { probes });
            }
            Action::AgentStart(pane) => self.agent_start(pane),
            Action::AgentFinish(pane) => self.agent_finish(pane),
            Action::AgentIdle(pane) => {
                if let Some(p) = self.panes.get_mut(&pane) {
                    if p.alive {
                        p.status = AgentStatus::Idle;
                        p.task = None;
                        p.print("❯ ");
                    }
                }
            }
            Action::Call {
                caller,
                request,
                pending,
            } => self.call(caller, request, pending),
            Action::LeadDelegates(lead) => self.lead_delegates(lead),
            Action::BusySpell(pane) => {
                let until = self.workload.as_ref().map_or(Instant::ZERO, |w| w.until);
                if self.now >= until {
                    return;
                }
                let touched = self.touching.contains_key(&pane);
                if let Some(p) = self.panes.get_mut(&pane) {
                    if p.alive && p.task.is_none() && p.status == AgentStatus::Idle && !touched {
                        p.status = AgentStatus::Working;
                        p.print("(someone is typing…)");
                        self.oracle.busy_by_hand(&pane);
                        let d = self.range(500, 8_000);
                        self.schedule(
                            Duration::from_millis(d),
                            Action::BusySpellEnds(pane.clone()),
                        );
                    }
                }
                let after = self.range(3_000, 30_000);
                self.schedule(Duration::from_millis(after), Action::BusySpell(pane));
            }
            Action::BusySpellEnds(pane) => {
                if let Some(p) = self.panes.get_mut(&pane) {
                    if p.alive && p.task.is_none() && p.status == AgentStatus::Working {
                        p.status = AgentStatus::Idle;
                        p.print("❯ ");
                    }
                }
            }
        }
    }

    // ---- the simulated herdr -----------------------------------------------------------

    fn untouch(&mut self, pane: &SessionId) {
        if let Some(n) = self.touching.get_mut(pane) {
            *n -= 1;
            if *n == 0 {
                self.touching.remove(pane);
            }
        }
    }

    fn sample(&mut self, target: SessionId, asked: fleet_core::Asked) {
        let Some(p) = self.panes.get(&target) else {
            return self.feed(Input::PaneGone { target });
        };
        if !p.alive {
            return self.feed(Input::PaneGone { target });
        }
        let status = p.status;
        let screen = (status == AgentStatus::Unknown).then(|| p.read());
        if self.trace_polls {
            self.log(format_args!("sample {target} {status}"));
        }
        self.feed(Input::StatusSampled {
            target,
            status,
            screen,
            asked,
        });
    }

    fn inject(&mut self, target: SessionId, msg: fleet_core::MsgId, text: String) {
        let pickup = {
            let Some(p) = self.panes.get_mut(&target).filter(|p| p.alive) else {
                return self.feed(Input::Injected {
                    target,
                    msg,
                    result: Err(fleet_core::InjectError::NotTyped(
                        fleet_core::PaneError::NotFound,
                    )),
                });
            };
            let baseline = p.read();
            // Like a real agent, the text is typed into the prompt line, which then scrolls up.
            if p.screen.last().is_some_and(|l| l.trim_end() == "❯") {
                p.screen.pop();
            }
            if p.chrome {
                // A TUI still drawing: a notice lands after the baseline, above the echo.
                p.print(format!("{CHROME_MARK} auto mode is now the default"));
            }
            p.print(format!("❯ {text}"));
            p.task = Some(Task { text: text.clone() });
            let fast = p.behaviour == Behaviour::Fast && !p.is_lead;
            self.feed(Input::Injected {
                target: target.clone(),
                msg,
                result: Ok(baseline),
            });
            if fast {
                0
            } else {
                self.range(50, 400)
            }
        };
        self.schedule(Duration::from_millis(pickup), Action::AgentStart(target));
    }

    fn agent_start(&mut self, pane: SessionId) {
        let (is_lead, behaviour) = match self.panes.get_mut(&pane) {
            Some(p) if p.alive && p.task.is_some() => {
                p.status = AgentStatus::Working;
                (p.is_lead, p.behaviour)
            }
            _ => return,
        };
        if is_lead {
            // A nudge: the lead collects everything waiting for it, then goes idle.
            self.lead_collects(&pane);
            self.schedule(Duration::from_millis(300), Action::AgentIdle(pane));
            return;
        }
        let work = match behaviour {
            Behaviour::Fast => self.range(10, 120),
            _ => self.range(500, 20_000),
        };
        self.schedule(Duration::from_millis(work), Action::AgentFinish(pane));
    }

    fn agent_finish(&mut self, pane: SessionId) {
        let Some(p) = self.panes.get_mut(&pane) else {
            return;
        };
        let Some(task) = p.task.clone().filter(|_| p.alive) else {
            return;
        };
        match p.behaviour {
            Behaviour::Replies => {
                let caller = Principal::worker(pane.clone());
                self.call(
                    caller,
                    Request::Reply {
                        content: format!("done: {}", task.text),
                    },
                    Pending::Reply { pane },
                );
            }
            Behaviour::CompletesSilently | Behaviour::Fast => {
                p.print(format!("● finished: {}", task.text));
                p.status = AgentStatus::Idle;
                p.task = None;
                p.print("❯ ");
                self.oracle.turn_ended(&pane, &task.text, self.now);
            }
            Behaviour::Asks => {
                let caller = Principal::worker(pane.clone());
                self.call(
                    caller,
                    Request::Ask {
                        question: format!("question about {}", task.text),
                        timeout_ms: None,
                    },
                    Pending::Ask { pane },
                );
            }
            Behaviour::Wedges => {
                p.print("▒▒▒ ░▒ garbled ▒▒");
                p.status = AgentStatus::Unknown;
            }
            Behaviour::UsageLimit => {
                p.print("⚠ Claude usage limit reached. Your limit resets at 5pm.");
                p.status = AgentStatus::Idle;
                p.task = None;
            }
            Behaviour::Dies => {
                p.alive = false;
                self.log(format_args!("agent in {pane} exited"));
                self.feed(Input::PaneGone { target: pane });
            }
        }
    }

    // ---- the simulated leads ------------------------------------------------------------

    fn lead_delegates(&mut self, lead: usize) {
        let Some(w) = self.workload.clone() else {
            return;
        };
        if self.now >= w.until || self.workers.is_empty() {
            return;
        }
        let idx = (self.rng.next_u64() % self.workers.len() as u64) as usize;
        let target = self.workers[idx].clone();
        self.tasks += 1;
        let task = format!("task-{} for {target}", self.tasks);
        let wait = self.rng.next_u64().is_multiple_of(2);
        let timeout = self.range(w.timeout_ms_min, w.timeout_ms_max);
        self.send(lead, target.as_str(), &task, wait, timeout);
        let gap = self.range(w.mean_gap_ms / 2, w.mean_gap_ms * 3 / 2);
        self.schedule(Duration::from_millis(gap), Action::LeadDelegates(lead));
    }

    /// A nudged lead drains every worker and polls its open tickets.
    fn lead_collects(&mut self, pane: &SessionId) {
        let Some(lead) = self.leads.iter().position(|l| &l.pane == pane) else {
            return;
        };
        for w in self.workers.clone() {
            let caller = self.principal(lead);
            self.schedule(
                Duration::from_millis(20),
                Action::Call {
                    caller,
                    request: Request::Drain { target: w },
                    pending: Pending::Drain,
                },
            );
        }
        let tickets: Vec<TicketId> = self.leads[lead].open_tickets.keys().copied().collect();
        for ticket in tickets {
            self.schedule_poll(lead, ticket, 30);
        }
    }

    fn schedule_poll(&mut self, lead: usize, ticket: TicketId, after_ms: u64) {
        let caller = self.principal(lead);
        self.schedule(
            Duration::from_millis(after_ms),
            Action::Call {
                caller,
                request: Request::Poll { ticket },
                pending: Pending::Poll { lead },
            },
        );
    }

    fn answer(&mut self, lead: usize, turn_id: TurnId, task: String, wait: bool) {
        let delay = self.range(200, 3_000);
        let timeout = 60_000;
        let caller = self.principal(lead);
        self.seq += 1;
        let at = self.now + Duration::from_millis(delay);
        self.queue.insert(
            (at, self.seq),
            Action::Call {
                caller,
                request: Request::Answer {
                    turn_id,
                    content: format!("answer for {turn_id}"),
                    wait,
                    timeout_ms: Some(timeout),
                    asked_by: None,
                },
                pending: Pending::Answer {
                    lead,
                    task,
                    wait,
                    deadline: at + Duration::from_millis(timeout),
                },
            },
        );
    }

    fn on_response(&mut self, call: CallId, response: Response) {
        let Some(pending) = self.pending.remove(&call) else {
            return;
        };
        self.oracle.on_response(self.now, call, &pending, &response);
        match (pending, response) {
            (
                Pending::Send { lead, task, .. } | Pending::Answer { lead, task, .. },
                Response::Outcome {
                    outcome: Outcome::Question,
                    turn_id: Some(turn_id),
                    ..
                },
            ) => {
                self.asked_turns.insert(turn_id, task.clone());
                self.answer(lead, turn_id, task, true);
            }
            (
                Pending::Send { lead, task, .. } | Pending::Answer { lead, task, .. },
                Response::Ticket(view),
            ) => {
                self.leads[lead].open_tickets.insert(view.ticket, task);
                let after = self.range(1_000, 5_000);
                self.schedule_poll(lead, view.ticket, after);
            }
            (Pending::Poll { lead }, Response::Ticket(view)) => {
                let Some(task) = self.leads[lead].open_tickets.get(&view.ticket).cloned() else {
                    return;
                };
                self.oracle.on_ticket_view(self.now, &view, &task);
                match view.phase {
                    Phase::Done | Phase::Failed => {
                        self.leads[lead].open_tickets.remove(&view.ticket);
                    }
                    Phase::Asking => {
                        if let Some(turn_id) = view.turn_id {
                            if self.asked_turns.insert(turn_id, task.clone()).is_none() {
                                self.answer(lead, turn_id, task, false);
                            }
                        }
                        let after = self.range(2_000, 5_000);
                        self.schedule_poll(lead, view.ticket, after);
                    }
                    Phase::Pending => {
                        let after = self.range(2_000, 5_000);
                        self.schedule_poll(lead, view.ticket, after);
                    }
                }
            }
            (Pending::Poll { lead }, Response::Error(_)) => {
                // Expired or unknown: the lead stops polling everything it cannot see.
                let _ = lead;
            }
            (Pending::Reply { pane }, _) => {
                if let Some(p) = self.panes.get_mut(&pane) {
                    if let Some(t) = &p.task {
                        let line = format!("● replied: done: {}", t.text);
                        p.print(line);
                    }
                }
                self.schedule(Duration::from_millis(150), Action::AgentIdle(pane));
            }
            (
                Pending::Ask { pane },
                Response::Ask {
                    outcome, answer, ..
                },
            ) => {
                let Some(p) = self.panes.get_mut(&pane) else {
                    return;
                };
                let Some(task) = p.task.clone().filter(|_| p.alive) else {
                    return;
                };
                match (outcome, answer) {
                    (AskOutcome::Answered, Some(answer)) => {
                        p.print(format!("● got: {answer}"));
                        let caller = Principal::worker(pane.clone());
                        self.schedule(
                            Duration::from_millis(400),
                            Action::Call {
                                caller,
                                request: Request::Reply {
                                    content: format!("done: {} ({answer})", task.text),
                                },
                                pending: Pending::Reply { pane },
                            },
                        );
                    }
                    _ => {
                        p.print(format!("● finished without an answer: {}", task.text));
                        p.status = AgentStatus::Idle;
                        p.task = None;
                        p.print("❯ ");
                    }
                }
            }
            _ => {}
        }
    }

    /// The trace as one text, for snapshots and hashing.
    pub fn trace_text(&self) -> String {
        let mut s = self.trace.join("\n");
        s.push('\n');
        s
    }
}

fn describe(r: &Request) -> String {
    match r {
        Request::Send {
            target,
            content,
            wait,
            timeout_ms,
        } => format!(
            "send {target} {content:?} wait={wait} timeout_ms={}",
            timeout_ms.unwrap_or(0)
        ),
        Request::Answer {
            turn_id,
            content,
            wait,
            ..
        } => format!("answer turn={turn_id} {content:?} wait={wait}"),
        Request::Reply { content } => format!("reply {content:?}"),
        Request::Ask { question, .. } => format!("ask {question:?}"),
        Request::Report { report } => format!("report seq={} {}", report.seq, report.event.name()),
        Request::Poll { ticket } => format!("poll ticket={ticket}"),
        Request::List => "list".into(),
        Request::Profiles => "profiles".into(),
        Request::Overview => "overview".into(),
        Request::Attention => "attention".into(),
        Request::Whoami => "whoami".into(),
        Request::Peek { target } => format!("peek {target}"),
        Request::Ack { target, ids } => format!("ack {target} {} id(s)", ids.len()),
        Request::Drain { target } => format!("drain {target}"),
        Request::Status { target } => format!("status {target}"),
        Request::Spawn { host, spec } => format!(
            "spawn {} on {}",
            spec.profile,
            host.as_ref().map_or("this host", |h| h.as_str())
        ),
        Request::Stop { target } => format!("stop {target}"),
        Request::Coordinate { target, content } => format!("coordinate {target} {content:?}"),
        Request::Broadcast { group, content } => format!(
            "broadcast to {} {content:?}",
            group.as_deref().unwrap_or("all")
        ),
        Request::TaskAdd { task } => format!(
            "task_add {:?} for {} after {:?}",
            task.title, task.assignee, task.deps
        ),
        Request::Tasks { id } => match id {
            Some(id) => format!("tasks {id}"),
            None => "tasks".into(),
        },
        Request::TaskReview { id, decision } => format!("task_review {id} {decision:?}"),
    }
}
