//! Random interleavings of cross-host traffic and broker faults on two gateways: sends
//! (blocking and async), the worker's status changes, replies, asks, answers, drains, broker
//! bounces and partitions of either host. Checked on every step by the harness (no double
//! answer, ack hygiene) and here (no brief typed twice); after healing and a quiet phase,
//! every send must have ended, and every REPLIED must carry its own brief's reply.

use super::harness::Fleet;
use super::{LEAD, WORKER};
use fleet_core::testing::panes::ScriptedPane as Pane;
use fleet_core::{
    AgentStatus, CallId, Duration, Outcome, Phase, Principal, Request, Response, SessionId, TurnId,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug)]
enum Step {
    Send { wait: bool, timeout_s: u64 },
    Status(AgentStatus),
    Reply,
    Ask,
    Answer,
    Drain,
    Poll,
    Bounce,
    Cut(usize),
    Heal(usize),
    Advance { ms: u64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (any::<bool>(), 2..90u64).prop_map(|(wait, timeout_s)| Step::Send { wait, timeout_s }),
        3 => prop::sample::select(vec![AgentStatus::Idle, AgentStatus::Working, AgentStatus::Unknown])
            .prop_map(Step::Status),
        2 => Just(Step::Reply),
        1 => Just(Step::Ask),
        1 => Just(Step::Answer),
        1 => Just(Step::Drain),
        1 => Just(Step::Poll),
        1 => Just(Step::Bounce),
        1 => (0..2usize).prop_map(Step::Cut),
        1 => (0..2usize).prop_map(Step::Heal),
        4 => prop_oneof![1..3_000u64, 3_000..40_000u64].prop_map(|ms| Step::Advance { ms }),
    ]
}

struct Model {
    f: Fleet,
    lead: Principal,
    worker: SessionId,
    sends: BTreeMap<CallId, String>,
    tickets: BTreeMap<fleet_core::TicketId, String>,
    answers: BTreeMap<CallId, String>,
    turns: Vec<TurnId>,
    n: u64,
}

impl Model {
    fn new() -> Model {
        let mut f = Fleet::new(2);
        let lead = f.lead(0, LEAD);
        let worker = f.member(1, WORKER);
        f.advance(Duration::from_millis(10));
        Model {
            f,
            lead,
            worker,
            sends: BTreeMap::new(),
            tickets: BTreeMap::new(),
            answers: BTreeMap::new(),
            turns: Vec::new(),
            n: 0,
        }
    }

    /// The brief the worker is on: the last text typed into its pane.
    fn current_brief(&self) -> Option<String> {
        self.f.hosts[1]
            .panes
            .get(&self.worker)
            .and_then(|p: &Pane| p.typed.last().cloned())
    }

    fn apply(&mut self, s: Step) {
        match s {
            Step::Send { wait, timeout_s } => {
                self.n += 1;
                let brief = format!("brief-{}", self.n);
                let c = self.f.call(
                    0,
                    self.lead.clone(),
                    Request::Send {
                        target: self.worker.clone(),
                        content: brief.clone(),
                        wait,
                        timeout_ms: Some(timeout_s * 1000),
                    },
                );
                self.sends.insert(c, brief.clone());
                if let Some(Response::Ticket(v)) = self.f.response(0, c) {
                    self.tickets.insert(v.ticket, brief);
                }
            }
            Step::Status(st) => self.f.set_status(1, &self.worker.clone(), st),
            Step::Reply => {
                let content = match self.current_brief() {
                    Some(b) => format!("done: {b}"),
                    None => "done: nothing".into(),
                };
                self.f.call(
                    1,
                    Principal::worker(self.worker.clone()),
                    Request::Reply { content },
                );
            }
            Step::Ask => {
                let question = format!("question about {:?}", self.current_brief());
                self.f.call(
                    1,
                    Principal::worker(self.worker.clone()),
                    Request::Ask {
                        question,
                        timeout_ms: Some(20_000),
                    },
                );
                for r in self.f.hosts[0].responses.values() {
                    if let Response::Outcome {
                        turn_id: Some(t), ..
                    } = r
                    {
                        if !self.turns.contains(t) {
                            self.turns.push(*t);
                        }
                    }
                }
            }
            Step::Answer => {
                if let Some(t) = self.turns.last().copied() {
                    let c = self.f.call(
                        0,
                        self.lead.clone(),
                        Request::Answer {
                            turn_id: t,
                            content: "yes".into(),
                            wait: true,
                            timeout_ms: Some(30_000),
                            asked_by: None,
                        },
                    );
                    self.answers.insert(c, String::new());
                }
            }
            Step::Drain => {
                self.f.call(
                    0,
                    self.lead.clone(),
                    Request::Drain {
                        target: self.worker.clone(),
                    },
                );
            }
            Step::Poll => {
                let tickets: Vec<_> = self.tickets.keys().copied().collect();
                for ticket in tickets {
                    self.f.call(0, self.lead.clone(), Request::Poll { ticket });
                }
            }
            Step::Bounce => {
                if self.f.partitioned.is_empty() {
                    self.f.bounce_broker();
                }
            }
            Step::Cut(h) => self.f.cut(h),
            Step::Heal(h) => self.f.heal(h),
            Step::Advance { ms } => self.f.advance(Duration::from_millis(ms)),
        }
        self.check_step();
    }

    /// I1: no brief is typed twice.
    fn check_step(&self) {
        if let Some(p) = self.f.hosts[1].panes.get(&self.worker) {
            let unique: BTreeSet<&String> = p.typed.iter().collect();
            assert_eq!(
                unique.len(),
                p.typed.len(),
                "a brief typed twice: {:?}",
                p.typed
            );
        }
    }

    /// Heal everything, let the worker finish, run past every bound: every send has ended,
    /// and a REPLIED carries its own brief's reply.
    fn heal_and_check(&mut self) {
        for h in 0..2 {
            self.f.heal(h);
        }
        self.f
            .set_status(1, &self.worker.clone(), AgentStatus::Idle);
        self.f.advance(Duration::from_secs(400));
        for (c, brief) in &self.sends {
            let r = self.f.response(0, *c);
            match r {
                Some(Response::Outcome { outcome, body, .. }) => {
                    if *outcome == Outcome::Replied {
                        assert_eq!(body.as_deref(), Some(format!("done: {brief}").as_str()));
                    }
                }
                Some(Response::Ticket(_)) | Some(Response::Error(_)) => {}
                other => panic!("send of {brief} never ended: {other:?}"),
            }
        }
        // Async tickets: a final poll must show a terminal phase (or the ticket expired).
        let tickets: Vec<_> = self.tickets.iter().map(|(t, b)| (*t, b.clone())).collect();
        for (ticket, brief) in tickets {
            let c = self.f.call(0, self.lead.clone(), Request::Poll { ticket });
            match self.f.response(0, c) {
                Some(Response::Ticket(v)) => {
                    assert!(
                        v.phase == Phase::Done || v.phase == Phase::Failed,
                        "ticket of {brief} still {}",
                        v.phase
                    );
                    if v.outcome == Some(Outcome::Replied) {
                        assert_eq!(v.body.as_deref(), Some(format!("done: {brief}").as_str()));
                    }
                }
                Some(Response::Error(_)) => {} // expired after retention
                other => panic!("poll of {brief}: {other:?}"),
            }
        }
        for c in self.answers.keys() {
            assert!(self.f.response(0, *c).is_some(), "answer {c} never ended");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, max_shrink_iters: 500, .. ProptestConfig::default() })]

    #[test]
    fn cross_host_delivery_holds_under_faults(steps in prop::collection::vec(step(), 1..60)) {
        let mut m = Model::new();
        for s in steps {
            m.apply(s);
        }
        m.heal_and_check();
    }
}
