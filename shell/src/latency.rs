//! Latencies measured between what the driver loop does and what comes back of it, on the
//! loop's own clock: a herdr operation (its output → its answering input), a broker publish
//! (→ its confirm), a brief's wait for its member (queued → typed), and a delegation as its
//! lead sees it (the call → its outcome). Nothing is wrapped or timed inside a port: each pair
//! is matched by its key here; what never comes back is replaced by the next start under its
//! key, and at most `PENDING_CAP` of each kind wait.

use crate::metrics::Histo;
use fleet_core::broker::{BrokerEvent, BrokerOp, PublishId, PublishResult};
use fleet_core::{
    CallId, Duration, Event, Input, Instant, MsgId, Output, Request, Response, Round, SessionId,
    TicketId,
};
use std::collections::BTreeMap;

/// At most this many of each kind wait for their answer.
const PENDING_CAP: usize = 16_384;

/// One measured latency: the histogram, its label, the seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub series: Histo,
    pub label: (&'static str, String),
    pub seconds: f64,
}

/// Starts waiting for their answers.
#[derive(Debug)]
struct Pending<K: Ord> {
    started: BTreeMap<K, (Instant, &'static str)>,
}

impl<K: Ord> Default for Pending<K> {
    fn default() -> Self {
        Pending {
            started: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Clone> Pending<K> {
    /// A start under a key already waiting replaces it: the earlier one was never answered
    /// (herdr unavailable answers nothing), and must not be measured from.
    fn start(&mut self, key: K, now: Instant, what: &'static str) {
        if self.started.len() >= PENDING_CAP && !self.started.contains_key(&key) {
            // Never answered (a lost connection, a dropped call): one goes — the smallest
            // key, which for random ids is any one.
            self.started.pop_first();
        }
        self.started.insert(key, (now, what));
    }

    fn end(&mut self, key: &K, now: Instant) -> Option<(f64, &'static str)> {
        let (at, what) = self.started.remove(key)?;
        Some((secs(now.saturating_since(at)), what))
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Which herdr operation an output starts, and the key its answer comes back under.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum HerdrKey {
    Sample(SessionId),
    SampleAll(Round),
    Inject(SessionId, MsgId),
    Read(SessionId, MsgId),
    Spawn(SessionId),
    Look(SessionId),
    Probe,
}

#[derive(Debug, Default)]
pub struct Latencies {
    herdr: Pending<HerdrKey>,
    confirms: Pending<PublishId>,
    queued: Pending<MsgId>,
    calls: Pending<CallId>,
    tickets: Pending<TicketId>,
}

impl Latencies {
    /// An output: what it starts.
    pub fn output(&mut self, now: Instant, o: &Output, out: &mut Vec<Sample>) {
        let herdr = |k: HerdrKey, op| (k, op);
        let started = match o {
            Output::PollStatus { target, .. } => {
                Some(herdr(HerdrKey::Sample(target.clone()), "sample"))
            }
            Output::PollStatuses { round, .. } => {
                Some(herdr(HerdrKey::SampleAll(*round), "sample_all"))
            }
            Output::Inject { target, msg, .. } => {
                Some(herdr(HerdrKey::Inject(target.clone(), *msg), "inject"))
            }
            Output::ReadPane { target, msg } => {
                Some(herdr(HerdrKey::Read(target.clone(), *msg), "read"))
            }
            Output::SpawnPane { gid, .. } => Some(herdr(HerdrKey::Spawn(gid.clone()), "spawn")),
            Output::LookAtStart { gid } => Some(herdr(HerdrKey::Look(gid.clone()), "look")),
            Output::ProbeHealth { .. } => Some(herdr(HerdrKey::Probe, "probe")),
            Output::Broker(BrokerOp::Publish { publish, .. }) => {
                self.confirms.start(*publish, now, "");
                None
            }
            Output::Event(e) => {
                self.event(now, e, out);
                None
            }
            Output::Respond { call, response } => {
                self.respond(now, *call, response, out);
                None
            }
            _ => None,
        };
        if let Some((key, op)) = started {
            self.herdr.start(key, now, op);
        }
    }

    /// An input: what it answers.
    pub fn input(&mut self, now: Instant, i: &Input, out: &mut Vec<Sample>) {
        let herdr_key = match i {
            Input::StatusSampled { target, .. } | Input::PaneGone { target } => {
                Some(HerdrKey::Sample(target.clone()))
            }
            Input::StatusesSampled { round, .. } => Some(HerdrKey::SampleAll(*round)),
            Input::Injected { target, msg, .. } => Some(HerdrKey::Inject(target.clone(), *msg)),
            Input::PaneRead { target, msg, .. } => Some(HerdrKey::Read(target.clone(), *msg)),
            Input::Spawned { gid, .. } => Some(HerdrKey::Spawn(gid.clone())),
            Input::StartLooked { gid, .. } => Some(HerdrKey::Look(gid.clone())),
            Input::HealthProbed { .. } => Some(HerdrKey::Probe),
            Input::Call {
                call,
                request: Request::Send { .. } | Request::Answer { .. },
                ..
            } => {
                self.calls.start(*call, now, "");
                None
            }
            Input::Broker(BrokerEvent::Published { publish, result }) => {
                if let Some((s, _)) = self.confirms.end(publish, now) {
                    let result = match result {
                        PublishResult::Routed => "routed",
                        PublishResult::Unroutable => "unroutable",
                        PublishResult::Failed(_) => "failed",
                    };
                    out.push(Sample {
                        series: Histo::BrokerConfirm,
                        label: ("result", result.into()),
                        seconds: s,
                    });
                }
                None
            }
            _ => None,
        };
        if let Some(key) = herdr_key {
            if let Some((s, op)) = self.herdr.end(&key, now) {
                out.push(Sample {
                    series: Histo::HerdrCall,
                    label: ("op", op.into()),
                    seconds: s,
                });
            }
        }
    }

    fn event(&mut self, now: Instant, e: &Event, out: &mut Vec<Sample>) {
        match e {
            Event::Enqueued {
                ticket: Some(_),
                msg,
                ..
            } => self.queued.start(*msg, now, ""),
            Event::Delivered { msg, .. } => {
                if let Some((s, _)) = self.queued.end(msg, now) {
                    out.push(Sample {
                        series: Histo::InjectWait,
                        label: ("result", "typed".into()),
                        seconds: s,
                    });
                }
            }
            Event::Dropped { msg, .. } => {
                if let Some((s, _)) = self.queued.end(msg, now) {
                    out.push(Sample {
                        series: Histo::InjectWait,
                        label: ("result", "dropped".into()),
                        seconds: s,
                    });
                }
            }
            Event::Resolved {
                ticket, outcome, ..
            } => {
                if let Some((s, _)) = self.tickets.end(ticket, now) {
                    out.push(Sample {
                        series: Histo::Delegation,
                        label: ("outcome", outcome.as_str().into()),
                        seconds: s,
                    });
                }
            }
            _ => {}
        }
    }

    /// A blocking send ends with its response; a `wait:false` one goes on under its ticket.
    fn respond(&mut self, now: Instant, call: CallId, r: &Response, out: &mut Vec<Sample>) {
        match r {
            Response::Outcome { outcome, .. } => {
                if let Some((s, _)) = self.calls.end(&call, now) {
                    out.push(Sample {
                        series: Histo::Delegation,
                        label: ("outcome", outcome.as_str().into()),
                        seconds: s,
                    });
                }
            }
            Response::Ticket(v) => {
                if let Some(at) = self.calls.started.remove(&call) {
                    if v.outcome.is_none() {
                        self.tickets.start(v.ticket, at.0, "");
                    }
                }
            }
            _ => {
                self.calls.started.remove(&call);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_core::{Outcome, Phase, Principal, TicketView};

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn herdr_calls_are_timed_from_their_output_to_the_answer_with_the_same_key() {
        let (mut l, mut out) = (Latencies::default(), Vec::new());
        let (w1, w2) = (SessionId::new("w1"), SessionId::new("w2"));
        let poll = |t: &SessionId, n| Output::PollStatus {
            target: t.clone(),
            asked: fleet_core::Asked(n),
        };
        l.output(at(0), &poll(&w1, 1), &mut out);
        l.output(at(5), &poll(&w2, 2), &mut out);
        let sampled = |t: &SessionId| Input::StatusSampled {
            target: t.clone(),
            status: fleet_core::AgentStatus::Idle,
            screen: None,
            asked: fleet_core::Asked(1),
        };
        l.input(at(12), &sampled(&w2), &mut out);
        l.input(at(20), &sampled(&w1), &mut out);
        // An answer nothing asked for measures nothing.
        l.input(at(30), &sampled(&w1), &mut out);
        let got: Vec<(String, f64)> = out.iter().map(|s| (s.label.1.clone(), s.seconds)).collect();
        assert_eq!(got, [("sample".into(), 0.007), ("sample".into(), 0.020)]);
        assert!(out.iter().all(|s| s.series == Histo::HerdrCall));
    }

    #[test]
    fn a_delegation_is_timed_from_the_call_to_its_outcome_blocking_or_by_ticket() {
        let (mut l, mut out) = (Latencies::default(), Vec::new());
        let send = |call| Input::Call {
            call: CallId(call),
            caller: Principal::primary("lead", None),
            request: Request::Send {
                target: SessionId::new("w1"),
                content: "x".into(),
                wait: true,
                timeout_ms: None,
            },
        };
        l.input(at(0), &send(1), &mut out);
        let outcome = Response::Outcome {
            ticket: None,
            outcome: Outcome::Replied,
            body: None,
            turn_id: None,
        };
        l.output(
            at(1_500),
            &Output::Respond {
                call: CallId(1),
                response: outcome,
            },
            &mut out,
        );
        // wait:false: the ticket answered at once carries the start on to its resolution.
        l.input(at(2_000), &send(2), &mut out);
        let ticket = TicketId(uuid::Uuid::from_u128(9));
        let view = TicketView {
            ticket,
            target: SessionId::new("w1"),
            phase: Phase::Pending,
            outcome: None,
            body: None,
            question: None,
            turn_id: None,
        };
        l.output(
            at(2_001),
            &Output::Respond {
                call: CallId(2),
                response: Response::Ticket(view),
            },
            &mut out,
        );
        let resolved = Event::Resolved {
            ticket,
            target: SessionId::new("w1"),
            outcome: Outcome::TimedOutWorking,
        };
        l.output(at(5_000), &Output::Event(resolved), &mut out);
        let got: Vec<(Histo, String, f64)> = out
            .iter()
            .map(|s| (s.series, s.label.1.clone(), s.seconds))
            .collect();
        assert_eq!(
            got,
            [
                (Histo::Delegation, "REPLIED".into(), 1.5),
                (Histo::Delegation, "TIMED_OUT_WORKING".into(), 3.0)
            ]
        );
    }

    #[test]
    fn what_never_comes_back_is_forgotten_within_the_cap() {
        let mut p: Pending<u64> = Pending::default();
        for k in 0..(PENDING_CAP as u64 + 10) {
            p.start(k, at(k), "x");
        }
        assert_eq!(p.started.len(), PENDING_CAP);
        assert!(p.end(&0, at(99)).is_none());
        assert!(p
            .end(&(PENDING_CAP as u64 + 9), at(PENDING_CAP as u64 + 9))
            .is_some());
    }
}
