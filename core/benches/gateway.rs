//! Core throughput: events per second through `Gateway::handle` on a mixed workload of 1,000
//! targets — sends (blocking and async), status samples, inject confirmations, completion
//! reads, replies, asks and answers, polls, drains and timer ticks — driven closed-loop by a
//! tiny deterministic driver. Every `handle` call counts as one event; the driver's own work
//! is included in the time, so the figure is a lower bound for the core alone.
//!
//! Run: `cargo bench -p fleet-core --bench gateway` (add `-- --targets N --rounds R`).

use fleet_core::{
    AgentStatus, CallId, CoreConfig, Duration, Gateway, Input, Instant, MsgId, Outcome, Output,
    Principal, Request, Response, SessionId,
};
use std::collections::VecDeque;

/// A tiny agent: how many samples it stays WORKING and how it ends its turn.
#[derive(Clone, Copy)]
enum Agent {
    Idle,
    Working {
        left: u8,
        msg: MsgId,
    },
    /// Inside `fleet_ask`: WORKING until the answer (or the ask's timeout) comes back.
    Asking {
        msg: MsgId,
    },
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

struct Bench {
    gw: Gateway,
    now: Instant,
    rng: XorShift,
    targets: Vec<SessionId>,
    agents: Vec<Agent>,
    /// Targets with a delegation open, so leads delegate like a lead would (not into BUSY).
    open: Vec<bool>,
    /// Ask calls in flight, by the agent that made them.
    asks: std::collections::BTreeMap<CallId, usize>,
    leads: Vec<Principal>,
    inputs: VecDeque<Input>,
    next_call: u64,
    events: u64,
    outputs: u64,
    outcomes: [u64; 9],
}

impl Bench {
    fn new(n: usize) -> Self {
        let targets: Vec<SessionId> = (0..n).map(|i| SessionId::new(format!("w{i}"))).collect();
        let leads = (0..10)
            .map(|i| {
                Principal::primary(
                    &format!("lead{i}"),
                    Some(SessionId::new(format!("lead{i}-pane"))),
                )
            })
            .collect();
        Bench {
            gw: Gateway::new(CoreConfig::default(), 1, Instant::ZERO).expect("valid config"),
            now: Instant::ZERO,
            rng: XorShift(0x2545_f491_4f6c_dd1d),
            agents: vec![Agent::Idle; n],
            open: vec![false; n],
            asks: std::collections::BTreeMap::new(),
            targets,
            leads,
            inputs: VecDeque::new(),
            next_call: 0,
            events: 0,
            outputs: 0,
            outcomes: [0; 9],
        }
    }

    fn handle(&mut self, input: Input) {
        self.inputs.push_back(input);
        while let Some(i) = self.inputs.pop_front() {
            self.gw.handle(self.now, i);
            self.events += 1;
            while let Some(out) = self.gw.poll_output() {
                self.outputs += 1;
                self.carry_out(out);
            }
        }
    }

    fn carry_out(&mut self, out: Output) {
        match out {
            Output::Inject { target, msg, .. } => {
                if let Some(i) = index(&target) {
                    self.agents[i] = Agent::Working {
                        left: 1 + (self.rng.next() % 4) as u8,
                        msg,
                    };
                }
                self.inputs.push_back(Input::Injected {
                    target,
                    msg,
                    result: Ok("❯ ".to_string()),
                });
            }
            Output::ReadPane { target, msg } => self.inputs.push_back(Input::PaneRead {
                target,
                msg,
                result: Ok(format!("❯ \n> task\nresult of {msg}")),
            }),
            Output::Event(fleet_core::Event::Enqueued { target, .. }) => {
                if let Some(i) = index(&target) {
                    self.open[i] = true;
                }
            }
            Output::Event(fleet_core::Event::Resolved {
                target, outcome, ..
            }) => {
                if let Some(i) = index(&target) {
                    self.open[i] = outcome == Outcome::Question;
                }
            }
            Output::Respond { call, response } => {
                if let Some(i) = self.asks.remove(&call) {
                    if let Agent::Asking { msg } = self.agents[i] {
                        self.agents[i] = Agent::Working { left: 1, msg };
                    }
                }
                if let Response::Outcome {
                    outcome, turn_id, ..
                } = response
                {
                    self.outcomes[outcome as usize] += 1;
                    if let (Outcome::Question, Some(turn_id)) = (outcome, turn_id) {
                        let lead = self.leads[(self.rng.next() % 10) as usize].clone();
                        self.call(
                            lead,
                            Request::Answer {
                                turn_id,
                                content: "yes".into(),
                                wait: true,
                                timeout_ms: Some(120_000),
                                asked_by: None,
                            },
                        );
                    }
                }
            }
            _ => {}
        }
    }

    fn call(&mut self, caller: Principal, request: Request) -> CallId {
        self.next_call += 1;
        self.inputs.push_back(Input::Call {
            call: CallId(self.next_call),
            caller,
            request,
        });
        CallId(self.next_call)
    }

    /// One poll interval: every target is sampled, some get new work, agents progress.
    fn round(&mut self) {
        for i in 0..self.targets.len() {
            let target = self.targets[i].clone();
            let roll = self.rng.next() % 100;
            match self.agents[i] {
                Agent::Asking { .. } => {
                    self.handle(Input::StatusSampled {
                        target,
                        status: AgentStatus::Working,
                        screen: None,
                        asked: self.gw.newest_ask(),
                    });
                }
                Agent::Idle => {
                    if roll < 20 && !self.open[i] {
                        let lead = self.leads[(self.rng.next() % 10) as usize].clone();
                        let wait = roll.is_multiple_of(2);
                        self.call(
                            lead,
                            Request::Send {
                                target: target.clone(),
                                content: "task".into(),
                                wait,
                                timeout_ms: Some(120_000),
                            },
                        );
                        self.handle_pending();
                    }
                    self.handle(Input::StatusSampled {
                        target,
                        status: AgentStatus::Idle,
                        screen: None,
                        asked: self.gw.newest_ask(),
                    });
                }
                Agent::Working { left, msg } => {
                    if left == 0 {
                        let worker = Principal::worker(target.clone());
                        let asked =
                            matches!(self.agents[i], Agent::Working { .. }) && roll % 4 == 2;
                        if asked {
                            let c = self.call(
                                worker,
                                Request::Ask {
                                    question: "ok?".into(),
                                    timeout_ms: Some(10_000),
                                },
                            );
                            self.asks.insert(c, i);
                            self.agents[i] = Agent::Asking { msg };
                            self.handle_pending();
                            self.handle(Input::StatusSampled {
                                target,
                                status: AgentStatus::Working,
                                screen: None,
                                asked: self.gw.newest_ask(),
                            });
                            continue;
                        }
                        if roll % 4 < 2 {
                            self.call(
                                worker,
                                Request::Reply {
                                    content: format!("done {msg}"),
                                },
                            );
                        }
                        self.handle_pending();
                        self.agents[i] = Agent::Idle;
                        self.handle(Input::StatusSampled {
                            target,
                            status: AgentStatus::Idle,
                            screen: None,
                            asked: self.gw.newest_ask(),
                        });
                    } else {
                        self.agents[i] = Agent::Working {
                            left: left - 1,
                            msg,
                        };
                        self.handle(Input::StatusSampled {
                            target,
                            status: AgentStatus::Working,
                            screen: None,
                            asked: self.gw.newest_ask(),
                        });
                    }
                }
            }
        }
        let lead = self.leads[(self.rng.next() % 10) as usize].clone();
        let t = self.targets[(self.rng.next() as usize) % self.targets.len()].clone();
        self.call(lead, Request::Drain { target: t });
        self.handle_pending();
        self.now = self.now + Duration::from_millis(500);
        self.handle(Input::Tick);
    }

    fn handle_pending(&mut self) {
        if let Some(i) = self.inputs.pop_front() {
            self.handle(i);
        }
    }
}

fn index(s: &SessionId) -> Option<usize> {
    s.as_str().strip_prefix('w')?.parse().ok()
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One measured run from a fresh gateway: (events, outputs, seconds, the bench for stats).
#[allow(clippy::disallowed_methods)] // a benchmark measures wall time; it never feeds the core
fn measure(targets: usize, rounds: usize) -> (u64, u64, f64, Bench) {
    let mut b = Bench::new(targets);
    // Warm up: fill queues, tickets and timers to a steady state.
    for _ in 0..40 {
        b.round();
    }
    let (e0, o0) = (b.events, b.outputs);
    let started = std::time::Instant::now();
    for _ in 0..rounds {
        b.round();
    }
    let secs = started.elapsed().as_secs_f64();
    (b.events - e0, b.outputs - o0, secs, b)
}

fn main() {
    let targets = arg("--targets", 1_000);
    let rounds = arg("--rounds", 400);
    let runs = arg("--runs", 7).max(1);
    let mut rates = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let (events, outputs, secs, b) = measure(targets, rounds);
        rates.push((events as f64 / secs, outputs as f64 / secs, events));
        last = Some(b);
    }
    rates.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (median, median_out, events) = rates[rates.len() / 2];
    let (min, max) = (rates[0].0, rates[rates.len() - 1].0);
    println!(
        "gateway throughput: {targets} targets, {rounds} rounds of 500 ms sim time, {runs} runs"
    );
    println!(
        "  median {median:.0} events/s ({:.0} ns/event), min {min:.0}, max {max:.0}; {median_out:.0} outputs/s; {events} events per run",
        1e9 / median
    );
    let Some(b) = last else { return };
    println!(
        "  per run: sends {} injections {} replies {} open delegations {} inbox {}",
        b.gw.stats().sends_total,
        b.gw.stats().injections_total,
        b.gw.stats().replies_total,
        b.gw.open_delegations(),
        b.gw.inbox_depth()
    );
    let names = [
        "REPLIED",
        "COMPLETED_UNREPLIED",
        "WORKER_FAILED",
        "BACKEND_EXHAUSTED",
        "QUESTION",
        "TIMED_OUT_WORKING",
        "TIMED_OUT_QUEUED",
        "BUSY",
        "STALE_TURN",
    ];
    let mix: Vec<String> = names
        .iter()
        .zip(b.outcomes)
        .filter(|(_, n)| *n > 0)
        .map(|(o, n)| format!("{o}={n}"))
        .collect();
    println!("  blocking outcomes per run: {}", mix.join(" "));
}
