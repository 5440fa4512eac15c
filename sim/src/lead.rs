//! Simulated leads of the multi-host world: each delegates (U1, blocking and async), answers
//! the questions its workers ask (U2, sometimes too late), drains stranded replies (U3), spawns
//! members on any host (U4, sometimes with a profile nobody offers) and stops some of them again
//! (wherever they run), reads the roster (U5), and sends to recipients that do not exist. Everything it sees goes into the shared [`Ledger`]
//! for the oracle.

use crate::host::sim_now;
use fleet_core::{
    HostId, Outcome, Principal, Request, Response, RosterEntry, SessionId, TicketId, TurnId,
};
use fleetd::Handle;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

/// How one send was answered, as its lead saw it.
#[derive(Clone, Debug)]
pub struct SendRecord {
    pub host: usize,
    /// The lead gateway's incarnation when the send was made.
    pub incarnation: u64,
    pub brief: String,
    pub target: SessionId,
    /// The target lived on the lead's own host when the send was made.
    pub local: bool,
    /// The target never existed.
    pub unknown: bool,
    /// Every response, in order (a QUESTION, then the answer's outcome, …), with the sim
    /// milliseconds between the call and it.
    pub responses: Vec<(Response, u64)>,
    /// The async ticket, while it is polled.
    pub ticket: Option<TicketId>,
    /// When its last call was made (sim ms since the world began) and with what timeout: the
    /// bound its final response is judged against.
    pub last_call_ms: u64,
    pub last_timeout_ms: u64,
    /// The send reached its end (a terminal outcome or error).
    pub ended: bool,
    /// The lead's own gateway went down while the send was open: its calls died with the
    /// connection (an MCP client sees a dropped request), so no outcome is owed.
    pub lost: bool,
    /// A negligent lead never polled this async ticket: it expires unpolled on its gateway
    /// (`ticket_ttl_ms`), and what was held for it must go with it (I10).
    pub forgotten: bool,
}

/// One `fleet_spawn`.
#[derive(Clone, Debug)]
pub struct SpawnRecord {
    pub host: usize,
    pub on: HostId,
    pub profile: String,
    pub response: Option<Response>,
    pub lost: bool,
}

/// One `fleet_stop`, of a member its lead spawned (on any host).
#[derive(Clone, Debug)]
pub struct StopRecord {
    pub host: usize,
    pub target: SessionId,
    /// When it was asked (sim ms since the world began).
    pub asked_ms: u64,
    pub response: Option<Response>,
    pub lost: bool,
}

/// What all leads did and saw.
#[derive(Debug, Default)]
pub struct Ledger {
    pub sends: Vec<SendRecord>,
    pub spawns: Vec<SpawnRecord>,
    pub stops: Vec<StopRecord>,
    /// Every reply body a lead received, with how and in which incarnation of its gateway.
    pub received: Vec<Received>,
    /// Members anyone may send to: the initial ones, then every spawned one.
    pub targets: Vec<(SessionId, usize)>,
    /// Each lead's last roster view, taken at the end of the quiet phase: every member row.
    pub views: Vec<(usize, Vec<RosterEntry>)>,
    pub answers: u64,
    pub late_answers: u64,
    /// Every broadcast text sent (each may be typed once into every member).
    pub broadcasts: Vec<String>,
    /// Leads that never collect during the workload (their hosts).
    pub negligent: BTreeSet<usize>,
    /// Every question a blocking send brought back, and when its lead answered it.
    pub questions: Vec<QuestionRecord>,
    /// Every task a lead added to its list (I17).
    pub tasks: Vec<crate::task_lead::TaskRecord>,
}

/// A question a lead heard from a blocking send (its gateway learned of it in the same step).
#[derive(Clone, Debug)]
pub struct QuestionRecord {
    pub host: usize,
    pub turn: TurnId,
    pub asked_ms: u64,
    /// When the lead's answer went to its gateway; none: never (its gateway went first).
    pub answered_ms: Option<u64>,
}

#[derive(Clone, Debug)]
pub struct Received {
    pub host: usize,
    pub incarnation: u64,
    /// The worker the reply came from.
    pub from: SessionId,
    pub body: String,
    pub via: &'static str,
}

impl Ledger {
    /// The host's gateway went down: whatever its lead had open is lost with it.
    pub fn host_down(&mut self, host: usize) {
        for s in self.sends.iter_mut().filter(|s| s.host == host && !s.ended) {
            s.lost = true;
        }
        for s in self
            .spawns
            .iter_mut()
            .filter(|s| s.host == host && s.response.is_none())
        {
            s.lost = true;
        }
        for s in self
            .stops
            .iter_mut()
            .filter(|s| s.host == host && s.response.is_none())
        {
            s.lost = true;
        }
    }
}

pub fn lead_gid(host: usize) -> SessionId {
    SessionId::new(format!("{host:08x}-1111-4111-8111-111111111111"))
}

/// The timeline of one lead incarnation.
#[derive(Clone)]
pub struct LeadPlan {
    pub host: usize,
    pub incarnation: u64,
    pub seed: u64,
    pub hosts: Vec<HostId>,
    /// The workload ends here (sim time since the world began) …
    pub until: Duration,
    /// … and the final roster view and drain happen here, after the quiet phase.
    pub settle_at: Duration,
    /// A lead that never collects while it works: it polls no ticket and drains no reply
    /// until the quiet phase, and sends async work in fan-out bursts — its uncollected results
    /// must not slow its own blocking sends (I11).
    pub negligent: bool,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub async fn lead(plan: LeadPlan, gateway: Handle, ledger: Rc<RefCell<Ledger>>) {
    let mut rng = ChaCha8Rng::seed_from_u64(plan.seed);
    let me = Principal::primary(&format!("lead{}", plan.host), Some(lead_gid(plan.host)));
    let mut n = 0u64;
    let mut polling: Vec<usize> = Vec::new();
    tokio::time::sleep(Duration::from_secs(3)).await;
    while sim_now() < plan.until {
        n += 1;
        let mut roll = rng.next_u64() % 100;
        // A negligent lead fans out: half its steps are async bursts.
        if plan.negligent && (20..70).contains(&roll) {
            roll = 45;
        }
        match roll {
            0..=44 => {
                send(&plan, &me, &gateway, &ledger, &mut rng, n, Shape::Blocking).await;
            }
            45..=69 => {
                let burst = if plan.negligent {
                    2 + rng.next_u64() % 7
                } else {
                    1
                };
                for k in 0..burst {
                    if k > 0 {
                        n += 1;
                    }
                    if let Some(i) =
                        send(&plan, &me, &gateway, &ledger, &mut rng, n, Shape::Async).await
                    {
                        // A negligent lead forgets half its tickets for good.
                        if plan.negligent && rng.next_u64().is_multiple_of(2) {
                            ledger.borrow_mut().sends[i].forgotten = true;
                        } else {
                            polling.push(i);
                        }
                    }
                }
            }
            70..=77 => spawn(&plan, &me, &gateway, &ledger, &mut rng).await,
            78..=82 => {
                send(&plan, &me, &gateway, &ledger, &mut rng, n, Shape::ToNobody).await;
            }
            83..=90 if !plan.negligent => drain(&plan, &me, &gateway, &ledger).await,
            91..=92 => broadcast(&plan, &me, &gateway, &ledger, n).await,
            93..=95 => stop(&plan, &me, &gateway, &ledger, &mut rng).await,
            _ => {
                let _ = gateway.call(me.clone(), Request::List).await;
            }
        }
        // Tickets are looked at now and then, not after every step: a finished one's reply
        // stays held (unacked) on the lead's gateway until then.
        if rng.next_u64() % 3 == 0 && !plan.negligent {
            poll(&plan, &me, &gateway, &ledger, &mut polling).await;
        }
        tokio::time::sleep(Duration::from_millis(500 + rng.next_u64() % 4_000)).await;
    }
    // The quiet phase: collect what is still coming, then look at the roster once more.
    while sim_now() < plan.settle_at {
        poll(&plan, &me, &gateway, &ledger, &mut polling).await;
        drain(&plan, &me, &gateway, &ledger).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    drain(&plan, &me, &gateway, &ledger).await;
    if let Ok(Response::Roster { rows }) = gateway.call(me.clone(), Request::List).await {
        let view = rows
            .into_iter()
            .filter(|r| r.kind == fleet_core::roster::EntityKind::Member)
            .collect();
        ledger.borrow_mut().views.push((plan.host, view));
    }
}

/// What kind of delegation a lead makes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// `wait: true` to a member anywhere in the fleet.
    Blocking,
    /// `wait: false`, polled later.
    Async,
    /// Blocking, to a gid that never existed.
    ToNobody,
}

/// One delegation, answered questions included. Returns the record's index when async.
#[allow(clippy::too_many_arguments)]
async fn send(
    plan: &LeadPlan,
    me: &Principal,
    gateway: &Handle,
    ledger: &Rc<RefCell<Ledger>>,
    rng: &mut ChaCha8Rng,
    n: u64,
    shape: Shape,
) -> Option<usize> {
    let unknown = shape == Shape::ToNobody;
    let (target, local) = if unknown {
        let g = SessionId::new(format!(
            "dead0000-0000-4000-8000-{:012x}",
            rng.next_u64() >> 16
        ));
        (g, false)
    } else {
        let l = ledger.borrow();
        let (g, h) = l.targets[(rng.next_u64() % l.targets.len() as u64) as usize].clone();
        (g, h == plan.host)
    };
    // Unique across the lead's restarts: I1 is judged on the text typed.
    let brief = format!(
        "brief {}.{n} from lead{} for {target}",
        plan.incarnation, plan.host
    );
    let index = open_send(ledger, plan, &brief, &target, local, unknown);
    let timeout_ms = Some(5_000 + rng.next_u64() % 60_000);
    let mut request = Request::Send {
        target,
        content: brief.clone(),
        wait: shape != Shape::Async,
        timeout_ms,
    };
    loop {
        let at = sim_now();
        let timeout = match &request {
            Request::Send { timeout_ms, .. } | Request::Answer { timeout_ms, .. } => *timeout_ms,
            _ => None,
        };
        {
            let mut l = ledger.borrow_mut();
            l.sends[index].last_call_ms = ms(at);
            l.sends[index].last_timeout_ms = timeout.unwrap_or(u64::MAX);
        }
        let answering = match &request {
            Request::Answer { turn_id, .. } => Some(*turn_id),
            _ => None,
        };
        let Ok(r) = gateway.call(me.clone(), request).await else {
            return None; // the gateway is gone; `host_down` marks the send lost
        };
        if let (Some(turn), false) = (answering, matches!(r, Response::Error(_))) {
            // Its gateway took the answer when the call reached it: the question ended then.
            answered(ledger, turn, ms(at));
        }
        let took = ms(sim_now().saturating_sub(at));
        let question = match heard(plan, ledger, index, r, took) {
            Heard::Question(turn) => {
                ledger.borrow_mut().questions.push(QuestionRecord {
                    host: plan.host,
                    turn,
                    asked_ms: ms(sim_now()),
                    answered_ms: None,
                });
                turn
            }
            Heard::Ticket => return Some(index),
            Heard::Ended => return None,
        };
        request = answer(ledger, rng, question, &brief).await;
    }
}

/// The ledger's record of a send about to be made; its index.
fn open_send(
    ledger: &Rc<RefCell<Ledger>>,
    plan: &LeadPlan,
    brief: &str,
    target: &SessionId,
    local: bool,
    unknown: bool,
) -> usize {
    let mut l = ledger.borrow_mut();
    l.sends.push(SendRecord {
        host: plan.host,
        incarnation: plan.incarnation,
        brief: brief.to_string(),
        target: target.clone(),
        local,
        unknown,
        responses: Vec::new(),
        ticket: None,
        last_call_ms: 0,
        last_timeout_ms: 0,
        ended: false,
        lost: false,
        forgotten: false,
    });
    l.sends.len() - 1
}

/// What the lead heard from a send (or an answer): where the exchange goes next.
enum Heard {
    /// The worker asks; the lead answers and waits again.
    Question(TurnId),
    /// An async send's ticket, to poll.
    Ticket,
    /// Any ending, received reply or error.
    Ended,
}

/// Writes `r` (after `took` ms) into send `index`'s record and the lead's received replies.
fn heard(
    plan: &LeadPlan,
    ledger: &Rc<RefCell<Ledger>>,
    index: usize,
    r: Response,
    took: u64,
) -> Heard {
    let mut l = ledger.borrow_mut();
    l.sends[index].responses.push((r.clone(), took));
    match r {
        Response::Outcome {
            outcome: Outcome::Question,
            turn_id: Some(turn),
            ..
        } => Heard::Question(turn),
        Response::Outcome { outcome, body, .. } => {
            l.sends[index].ended = true;
            if let (Outcome::Replied | Outcome::CompletedUnreplied, Some(body)) = (outcome, body) {
                let from = l.sends[index].target.clone();
                l.received.push(Received {
                    host: plan.host,
                    incarnation: plan.incarnation,
                    from,
                    body,
                    via: "send",
                });
            }
            Heard::Ended
        }
        Response::Ticket(view) => {
            l.sends[index].ticket = Some(view.ticket);
            Heard::Ticket
        }
        _ => {
            l.sends[index].ended = true;
            Heard::Ended
        }
    }
}

/// The lead's answer to `turn` was taken at `at_ms`.
fn answered(ledger: &Rc<RefCell<Ledger>>, turn: TurnId, at_ms: u64) {
    let mut l = ledger.borrow_mut();
    if let Some(q) = l.questions.iter_mut().rev().find(|q| q.turn == turn) {
        q.answered_ms = Some(at_ms);
    }
}

/// The lead thinks about a question — sometimes for longer than the worker waits.
async fn answer(
    ledger: &Rc<RefCell<Ledger>>,
    rng: &mut ChaCha8Rng,
    turn: TurnId,
    brief: &str,
) -> Request {
    let think = 300 + rng.next_u64() % 9_000;
    {
        let mut l = ledger.borrow_mut();
        l.answers += 1;
        if think > 6_000 {
            l.late_answers += 1;
        }
    }
    tokio::time::sleep(Duration::from_millis(think)).await;
    Request::Answer {
        turn_id: turn,
        content: format!("answer for {brief}"),
        wait: true,
        timeout_ms: Some(60_000),
        asked_by: None,
    }
}

/// Polls every open async ticket once; a terminal one is recorded and no longer polled.
async fn poll(
    plan: &LeadPlan,
    me: &Principal,
    gateway: &Handle,
    ledger: &Rc<RefCell<Ledger>>,
    polling: &mut Vec<usize>,
) {
    let mut still = Vec::new();
    for i in std::mem::take(polling) {
        let Some(ticket) = ledger.borrow().sends[i].ticket else {
            continue;
        };
        let at = sim_now();
        let Ok(r) = gateway.call(me.clone(), Request::Poll { ticket }).await else {
            return;
        };
        let took = ms(sim_now().saturating_sub(at));
        let mut l = ledger.borrow_mut();
        match &r {
            Response::Ticket(view) if view.outcome.is_none() => still.push(i),
            Response::Ticket(view) => {
                if let (Some(Outcome::Replied | Outcome::CompletedUnreplied), Some(body)) =
                    (view.outcome, &view.body)
                {
                    let from = l.sends[i].target.clone();
                    l.received.push(Received {
                        host: plan.host,
                        incarnation: plan.incarnation,
                        from,
                        body: body.clone(),
                        via: "poll",
                    });
                }
                l.sends[i].ended = true;
                l.sends[i].responses.push((r, took));
            }
            _ => {
                l.sends[i].ended = true;
                l.sends[i].responses.push((r, took));
            }
        }
    }
    *polling = still;
}

/// U8: one text to every member of the fleet; each copy follows the per-recipient rules.
async fn broadcast(
    plan: &LeadPlan,
    me: &Principal,
    gateway: &Handle,
    ledger: &Rc<RefCell<Ledger>>,
    n: u64,
) {
    let content = format!("broadcast {}.{n} from lead{}", plan.incarnation, plan.host);
    ledger.borrow_mut().broadcasts.push(content.clone());
    let request = Request::Broadcast {
        group: None,
        content,
    };
    let _ = gateway.call(me.clone(), request).await;
}

/// `fleet_poll(target)` for every worker this lead has delegated to: the stranded replies held
/// for it (U3).
async fn drain(plan: &LeadPlan, me: &Principal, gateway: &Handle, ledger: &Rc<RefCell<Ledger>>) {
    let targets: BTreeSet<SessionId> = ledger
        .borrow()
        .sends
        .iter()
        .filter(|s| s.host == plan.host && !s.unknown)
        .map(|s| s.target.clone())
        .collect();
    for target in targets {
        let request = Request::Drain { target };
        if let Ok(Response::Replies { replies }) = gateway.call(me.clone(), request).await {
            let mut l = ledger.borrow_mut();
            for r in replies {
                l.received.push(Received {
                    host: plan.host,
                    incarnation: plan.incarnation,
                    from: r.target,
                    body: r.content,
                    via: "drain",
                });
            }
        }
    }
}

async fn spawn(
    plan: &LeadPlan,
    me: &Principal,
    gateway: &Handle,
    ledger: &Rc<RefCell<Ledger>>,
    rng: &mut ChaCha8Rng,
) {
    let h = (rng.next_u64() % plan.hosts.len() as u64) as usize;
    let on = plan.hosts[h].clone();
    let profile = if rng.next_u64().is_multiple_of(10) {
        "nope"
    } else {
        "claude"
    }
    .to_string();
    let index = {
        let mut l = ledger.borrow_mut();
        l.spawns.push(SpawnRecord {
            host: plan.host,
            on: on.clone(),
            profile: profile.clone(),
            response: None,
            lost: false,
        });
        l.spawns.len() - 1
    };
    let request = Request::Spawn {
        host: Some(on),
        spec: fleet_core::SpawnSpec::of(profile),
    };
    let Ok(r) = gateway.call(me.clone(), request).await else {
        return;
    };
    let mut l = ledger.borrow_mut();
    if let Response::Spawned { gid, .. } = &r {
        l.targets.push((gid.clone(), h));
    }
    l.spawns[index].response = Some(r);
}

/// U4's other half: stops a member this lead spawned and has not stopped yet, wherever it runs.
async fn stop(
    plan: &LeadPlan,
    me: &Principal,
    gateway: &Handle,
    ledger: &Rc<RefCell<Ledger>>,
    rng: &mut ChaCha8Rng,
) {
    let (index, target) = {
        let mut l = ledger.borrow_mut();
        let stopped: BTreeSet<&SessionId> = l.stops.iter().map(|s| &s.target).collect();
        let mine: Vec<SessionId> = l
            .spawns
            .iter()
            .filter(|s| s.host == plan.host)
            .filter_map(|s| match &s.response {
                Some(Response::Spawned { gid, .. }) if !stopped.contains(gid) => Some(gid.clone()),
                _ => None,
            })
            .collect();
        if mine.is_empty() {
            return;
        }
        let target = mine[(rng.next_u64() % mine.len() as u64) as usize].clone();
        l.stops.push(StopRecord {
            host: plan.host,
            target: target.clone(),
            asked_ms: ms(sim_now()),
            response: None,
            lost: false,
        });
        (l.stops.len() - 1, target)
    };
    let Ok(r) = gateway.call(me.clone(), Request::Stop { target }).await else {
        return;
    };
    ledger.borrow_mut().stops[index].response = Some(r);
}
