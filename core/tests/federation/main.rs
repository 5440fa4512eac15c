//! The federation rules, one scenario each, on two or three gateways wired by hand
//! (`harness.rs`). Each test names the rule it pins; removing the rule fails the test.

mod coordination;
mod harness;
mod hostile;
mod model;
mod negligent;
mod presence;
mod roles;
mod stop;

use fleet_core::broker::{
    BrokerEvent, BrokerOp, DeliveryId, Exchange, QueueType, QUORUM_DELIVERY_LIMIT,
};
use fleet_core::envelope::{Envelope, HeaderValue, Kind, Payload, Refs, VERSION};
use fleet_core::signing::Keyring;
use fleet_core::testing::broker::Raw;
use fleet_core::{
    AgentStatus, AskOutcome, CallError, Duration, Event, Input, MsgId, Outcome, Output, Phase,
    Principal, Readiness, RejectCode, Request, Response, SessionId, SessionState, Stale, TraceId,
};
use harness::{host_name, Fleet, T0_UNIX};
use std::collections::BTreeMap;

const LEAD: &str = "11111111-1111-4111-8111-111111111111";
const WORKER: &str = "22222222-2222-4222-8222-222222222222";
const LOCAL_WORKER: &str = "33333333-3333-4333-8333-333333333333";
const B_LEAD: &str = "44444444-4444-4444-8444-444444444444";

fn send(target: &SessionId, content: &str, wait: bool) -> Request {
    Request::Send {
        target: target.clone(),
        content: content.into(),
        wait,
        timeout_ms: Some(120_000),
    }
}

fn outcome(r: Option<&Response>) -> Option<(Outcome, Option<String>)> {
    match r? {
        Response::Outcome { outcome, body, .. } => Some((*outcome, body.clone())),
        _ => None,
    }
}

/// Two hosts: a lead on a, a worker on b, both announced in the roster.
fn two_hosts() -> (Fleet, Principal, SessionId) {
    let mut f = Fleet::new(2);
    let lead = f.lead(0, LEAD);
    let worker = f.member(1, WORKER);
    f.advance(Duration::from_millis(10));
    (f, lead, worker)
}

fn harness_lead() -> Principal {
    let gid = SessionId::new(LEAD);
    Principal::primary(LEAD, Some(gid))
}

/// How many `kind` messages host `h` published.
fn published(f: &Fleet, h: usize, kind: Kind) -> usize {
    f.broker_ops(h)
        .filter(|op| match op {
            BrokerOp::Publish { headers, .. } => {
                Envelope::from_parts(headers, Vec::new()).is_ok_and(|e| e.kind() == kind)
            }
            _ => false,
        })
        .count()
}

/// Whether host `h` asked to close `gid`'s pane.
fn closed(f: &Fleet, h: usize, gid: &SessionId) -> bool {
    f.hosts[h]
        .outputs
        .iter()
        .any(|o| matches!(o, Output::ClosePane { gid: g } if g == gid))
}

/// How many publishes host `h` asked for.
fn publishes(f: &Fleet, h: usize) -> usize {
    f.broker_ops(h)
        .filter(|op| matches!(op, BrokerOp::Publish { .. }))
        .count()
}

/// The codes of every rejection host `h` reported, in order.
fn codes(f: &Fleet, h: usize) -> Vec<RejectCode> {
    f.rejections(h).into_iter().map(|(c, _)| c).collect()
}

/// How many deliveries host `h` rejected to the DLX.
fn rejects(f: &Fleet, h: usize) -> usize {
    f.broker_ops(h)
        .filter(|op| matches!(op, BrokerOp::Reject { .. }))
        .count()
}

/// `env` as a client with broker access would put it into a queue, routed by `key`.
fn raw(key: &str, env: &Envelope) -> Raw {
    Raw {
        routing_key: key.to_string(),
        headers: env.to_headers(),
        body: env.body.clone(),
    }
}

/// An unsigned envelope as host a would stamp it at T0, valid for ten minutes.
fn envelope(kind: Kind, id: u128, from: &str, to: &str, body: &[u8]) -> Envelope {
    envelope_with(kind, Refs::default(), id, from, to, body)
}

/// As `envelope`, for a kind that carries references (`re`, `turnId`, `spawnId`, `outcome`).
fn envelope_with(kind: Kind, refs: Refs, id: u128, from: &str, to: &str, body: &[u8]) -> Envelope {
    Envelope {
        v: VERSION,
        payload: Payload::from_refs(kind, refs).expect("the references its kind carries"),
        msg_id: MsgId(uuid::Uuid::from_u128(id)),
        trace_id: TraceId(uuid::Uuid::from_u128(id)),
        from: SessionId::new(from),
        to: to.into(),
        signer: host_name(0),
        ts: T0_UNIX,
        expires_at: T0_UNIX + 600_000,
        sig: None,
        body: body.to_vec(),
    }
}

/// U1 end to end: SEND crosses the broker, the worker's gateway acks before it types,
/// INJECTED comes back, the worker's reply crosses back and resolves the blocking send.
#[test]
fn u1_delegate_and_reply_across_hosts() {
    let (mut f, lead, worker) = two_hosts();
    let c = f.call(0, lead, send(&worker, "write the tests", true));
    f.advance(Duration::from_secs(1));
    assert_eq!(f.hosts[1].panes[&worker].typed, vec!["write the tests"]);
    let outs = &f.hosts[1].outputs;
    let ack = outs
        .iter()
        .position(|o| matches!(o, Output::Broker(BrokerOp::Ack { .. })))
        .expect("acked");
    let inject = outs
        .iter()
        .position(|o| matches!(o, Output::Inject { .. }))
        .expect("typed");
    assert!(ack < inject, "the forward path acks before it injects");
    assert_eq!(published(&f, 1, Kind::Injected), 1);
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Reply {
            content: "done: 12 tests".into(),
        },
    );
    assert_eq!(
        outcome(f.response(0, c)),
        Some((Outcome::Replied, Some("done: 12 tests".into())))
    );
    // The REPLY was acked once the lead had it (nothing left unacked on a's side).
    assert_eq!(f.hosts[0].gw.held_deliveries(), 0);
    assert_eq!(f.broker.unacked_total(), 0);
}

/// A turn that ends within `injected_defer_ms` of its typing sends only its REPLY, which says
/// typed as well: two signed messages for the delegation, not three.
#[test]
fn a_fast_turn_sends_its_reply_and_no_injected() {
    let (mut f, lead, worker) = two_hosts();
    let c = f.call(0, lead, send(&worker, "quick one", true));
    f.advance(Duration::from_millis(50));
    assert_eq!(f.hosts[1].panes[&worker].typed, vec!["quick one"]);
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Reply {
            content: "done".into(),
        },
    );
    f.advance(Duration::from_secs(1));
    assert_eq!(
        outcome(f.response(0, c)),
        Some((Outcome::Replied, Some("done".into())))
    );
    assert_eq!(published(&f, 1, Kind::Injected), 0, "the REPLY said typed");
    assert_eq!(published(&f, 1, Kind::Reply), 1);
}

/// A member that asks before its brief's INJECTED went out has it sent just before the ASK,
/// once, in order.
#[test]
fn a_question_within_the_deferral_goes_out_after_its_injected() {
    let (mut f, lead, worker) = two_hosts();
    let c = f.call(0, lead, send(&worker, "migrate", true));
    f.advance(Duration::from_millis(50));
    f.set_status(1, &worker, AgentStatus::Working);
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Ask {
            question: "which db?".into(),
            timeout_ms: None,
        },
    );
    f.advance(Duration::from_secs(1));
    let order: Vec<Kind> = f
        .broker_ops(1)
        .filter_map(|op| match op {
            BrokerOp::Publish { headers, .. } => Envelope::from_parts(headers, Vec::new())
                .ok()
                .map(|e| e.kind()),
            _ => None,
        })
        .filter(|k| matches!(k, Kind::Injected | Kind::Ask))
        .collect();
    assert_eq!(order, vec![Kind::Injected, Kind::Ask]);
    assert!(matches!(
        f.response(0, c),
        Some(Response::Outcome {
            outcome: Outcome::Question,
            ..
        })
    ));
}

/// The routing fork: a local recipient takes the in-process path; no broker output at all.
#[test]
fn same_host_traffic_never_touches_the_broker() {
    let mut f = Fleet::new(2);
    let lead = f.lead(0, LEAD);
    let local = f.member(0, LOCAL_WORKER);
    f.advance(Duration::from_millis(10));
    let others = |f: &Fleet| publishes(f, 0) - published(f, 0, Kind::Presence);
    let before = others(&f);
    f.call(0, lead, send(&local, "local task", true));
    f.advance(Duration::from_secs(1));
    assert_eq!(f.hosts[0].panes[&local].typed, vec!["local task"]);
    assert_eq!(others(&f), before, "only heartbeats may go out");
}

/// A mandatory publish nobody is bound to is a clear error at once, not a timeout.
#[test]
fn an_unroutable_send_is_no_such_recipient_at_once() {
    let (mut f, lead, _) = two_hosts();
    let ghost = SessionId::new("99999999-9999-4999-8999-999999999999");
    let c = f.call(0, lead, send(&ghost, "hello?", true));
    assert_eq!(
        f.response(0, c),
        Some(&Response::Error(CallError::NoSuchRecipient {
            target: ghost
        }))
    );
}

/// Broker down: remote sends fail fast with a clear error, local ones still work, and
/// remote hosts read as unknown in the roster.
#[test]
fn with_the_broker_down_remote_fails_fast_and_local_works() {
    let (mut f, lead, worker) = two_hosts();
    let local = f.member(0, LOCAL_WORKER);
    f.input(0, Input::Broker(BrokerEvent::Down));
    let c = f.call(0, lead.clone(), send(&worker, "remote", true));
    assert_eq!(
        f.response(0, c),
        Some(&Response::Error(CallError::BrokerUnavailable))
    );
    let l = f.call(0, lead, send(&local, "local", true));
    f.advance(Duration::from_secs(1));
    assert_eq!(f.hosts[0].panes[&local].typed, vec!["local"]);
    assert_eq!(
        f.response(0, l),
        None,
        "the local send is in flight normally"
    );
    let view = f.hosts[0].gw.roster();
    let w = view
        .iter()
        .find(|r| r.gid == worker)
        .expect("b's worker is listed");
    assert_eq!(w.liveness, fleet_core::roster::Liveness::Unknown);
}

/// The forward path's loss window is closed by INJECTED: none within the bound is a fast,
/// explicit failure — and the worker's gateway never types the brief after that.
#[test]
fn no_injected_within_the_bound_fails_fast_and_the_brief_is_never_typed_late() {
    let (mut f, lead, worker) = two_hosts();
    f.set_status(1, &worker, AgentStatus::Working);
    let c = f.call(0, lead, send(&worker, "task", true));
    f.advance(Duration::from_secs(23));
    let (o, body) = outcome(f.response(0, c)).expect("failed fast, long before 120 s");
    assert_eq!(o, Outcome::WorkerFailed);
    assert!(body.unwrap_or_default().contains("not injected"));
    f.set_status(1, &worker, AgentStatus::Idle);
    f.advance(Duration::from_secs(5));
    assert!(
        f.hosts[1].panes[&worker].typed.is_empty(),
        "typed after the sender gave up"
    );
}

/// U3 across hosts: the send timed out; the late REPLY is held at the lead's gateway,
/// unacked, until the lead drains it; a redelivery after a broker bounce is not doubled.
#[test]
fn a_stranded_reply_is_held_unacked_until_drained_and_never_doubled() {
    let (mut f, lead, worker) = two_hosts();
    let c = f.call(
        0,
        lead.clone(),
        Request::Send {
            target: worker.clone(),
            content: "long task".into(),
            wait: true,
            timeout_ms: Some(2_000),
        },
    );
    f.advance(Duration::from_secs(3));
    assert_eq!(
        outcome(f.response(0, c)).map(|o| o.0),
        Some(Outcome::TimedOutWorking)
    );
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Reply {
            content: "finally".into(),
        },
    );
    assert_eq!(f.hosts[0].gw.held_deliveries(), 1);
    assert_eq!(f.broker.unacked_total(), 1, "held, not acked");
    f.bounce_broker();
    assert_eq!(
        f.hosts[0].gw.inbox_depth(),
        1,
        "the redelivery was recognised"
    );
    let d = f.call(
        0,
        lead.clone(),
        Request::Drain {
            target: worker.clone(),
        },
    );
    match f.response(0, d) {
        Some(Response::Replies { replies }) => {
            assert_eq!(replies.len(), 1);
            assert_eq!(replies[0].content, "finally");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(f.broker.unacked_total(), 0, "acked after the drain");
    assert_eq!(f.hosts[0].gw.held_deliveries(), 0);
}

/// U2 across hosts: the worker asks; the lead's blocking send returns QUESTION; the answer
/// crosses back into the same turn; the worker's reply resolves the answer's call.
#[test]
fn u2_ask_and_answer_across_hosts() {
    let (mut f, lead, worker) = two_hosts();
    let c = f.call(0, lead.clone(), send(&worker, "migrate", true));
    f.advance(Duration::from_secs(1));
    f.set_status(1, &worker, AgentStatus::Working);
    f.advance(Duration::from_secs(1));
    let ask = f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Ask {
            question: "which db?".into(),
            timeout_ms: None,
        },
    );
    let turn = match f.response(0, c) {
        Some(Response::Outcome {
            outcome: Outcome::Question,
            turn_id: Some(t),
            body,
            ..
        }) => {
            assert_eq!(body.as_deref(), Some("which db?"));
            *t
        }
        other => panic!("expected QUESTION, got {other:?}"),
    };
    let a = f.call(
        0,
        lead,
        Request::Answer {
            turn_id: turn,
            content: "postgres".into(),
            wait: true,
            timeout_ms: None,
            asked_by: None,
        },
    );
    assert_eq!(
        f.response(1, ask),
        Some(&Response::Ask {
            outcome: AskOutcome::Answered,
            turn_id: Some(turn),
            answer: Some("postgres".into())
        })
    );
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Reply {
            content: "migrated".into(),
        },
    );
    assert_eq!(
        outcome(f.response(0, a)),
        Some((Outcome::Replied, Some("migrated".into())))
    );
}

/// An answer that arrives after its turn stopped waiting is not injected; the lead is told
/// TOO_LATE and its answer call ends STALE_TURN.
#[test]
fn a_late_answer_is_dropped_and_reported_too_late() {
    let (mut f, lead, worker) = two_hosts();
    let c = f.call(0, lead.clone(), send(&worker, "task", false));
    f.advance(Duration::from_secs(1));
    let ask = f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Ask {
            question: "q?".into(),
            timeout_ms: Some(5_000),
        },
    );
    let ticket = match f.response(0, c) {
        Some(Response::Ticket(v)) => v.ticket,
        other => panic!("{other:?}"),
    };
    let p = f.call(0, lead.clone(), Request::Poll { ticket });
    let turn = match f.response(0, p) {
        Some(Response::Ticket(v)) if v.phase == Phase::Asking => v.turn_id.expect("turn"),
        other => panic!("{other:?}"),
    };
    f.advance(Duration::from_secs(6));
    assert!(matches!(
        f.response(1, ask),
        Some(Response::Ask {
            outcome: AskOutcome::TimedOut,
            ..
        })
    ));
    let a = f.call(
        0,
        lead,
        Request::Answer {
            turn_id: turn,
            content: "too late".into(),
            wait: true,
            timeout_ms: None,
            asked_by: None,
        },
    );
    // The paused ticket resumed on the answer, and the answer came back TOO_LATE.
    assert!(matches!(f.response(0, a), Some(Response::Ticket(v)) if v.ticket == ticket));
    assert_eq!(published(&f, 1, Kind::TooLate), 1);
    let p = f.call(0, harness_lead(), Request::Poll { ticket });
    match f.response(0, p) {
        Some(Response::Ticket(v)) => {
            assert_eq!(
                (v.phase, v.outcome),
                (Phase::Failed, Some(Outcome::StaleTurn))
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(f.hosts[1].panes[&worker]
        .typed
        .iter()
        .all(|t| t != "too late"));
}

/// An ASK that reaches the lead's gateway with no waiter open is answered NO_WAITER at once.
#[test]
fn an_ask_with_no_waiter_at_the_lead_is_no_waiter() {
    let (mut f, lead, worker) = two_hosts();
    let c = f.call(
        0,
        lead,
        Request::Send {
            target: worker.clone(),
            content: "task".into(),
            wait: true,
            timeout_ms: Some(2_000),
        },
    );
    f.advance(Duration::from_secs(1));
    f.advance(Duration::from_secs(2));
    assert_eq!(
        outcome(f.response(0, c)).map(|o| o.0),
        Some(Outcome::TimedOutWorking)
    );
    // The proxy on b is still open (the turn runs on), so b asks a; a has no waiter.
    let ask = f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Ask {
            question: "still there?".into(),
            timeout_ms: None,
        },
    );
    assert_eq!(
        f.response(1, ask),
        Some(&Response::Ask {
            outcome: AskOutcome::NoWaiter,
            turn_id: match f.response(1, ask) {
                Some(Response::Ask { turn_id, .. }) => *turn_id,
                _ => None,
            },
            answer: None
        })
    );
}

/// The pane dies on the worker's host: its gateway says FAILED at once; the sender's send
/// ends WORKER_FAILED, and the member's inbox queue is deleted with it.
#[test]
fn a_worker_that_dies_fails_the_remote_send_fast_and_its_inbox_is_deleted() {
    let (mut f, lead, worker) = two_hosts();
    let c = f.call(0, lead, send(&worker, "task", true));
    f.advance(Duration::from_secs(1));
    f.input(
        1,
        Input::PaneGone {
            target: worker.clone(),
        },
    );
    f.settle();
    assert_eq!(
        outcome(f.response(0, c)).map(|o| o.0),
        Some(Outcome::WorkerFailed)
    );
    let inbox = format!("test.agent.{worker}.inbox.v2");
    assert!(f
        .broker_ops(1)
        .any(|op| matches!(op, BrokerOp::DeleteQueue { name } if *name == inbox)));
    assert!(!f.broker.has_queue(&format!("test.agent.{worker}.inbox.v2")));
}

/// The worker's gateway is killed mid-turn and comes back: the turn's record died with it, so
/// nothing there would ever end the sender's waiter. Its first heartbeat announces a later
/// start, and the sender fails the typed brief at once instead of at its send timeout. The
/// brief is not typed again; the member's reply, when it comes, is held on its own host.
#[test]
fn a_worker_gateway_that_restarts_mid_turn_fails_the_send_at_once() {
    let (mut f, lead, worker) = two_hosts();
    let b_lead = f.lead(1, B_LEAD);
    let c = f.call(0, lead, send(&worker, "task", true));
    f.advance(Duration::from_secs(1));
    assert_eq!(f.hosts[1].panes[&worker].typed, vec!["task"]);
    f.set_status(1, &worker, AgentStatus::Working);
    f.restart(1, &[SessionId::new(B_LEAD)]);
    f.advance(Duration::from_secs(6));
    let (o, why) = outcome(f.response(0, c)).expect("ended within a heartbeat");
    assert_eq!(o, Outcome::WorkerFailed);
    assert!(why.unwrap_or_default().contains("b's gateway restarted"));
    assert!(f
        .events(0)
        .any(|e| matches!(e, Event::PeerRestarted { host } if host.as_str() == "b")));
    assert_eq!(f.hosts[1].panes[&worker].typed, vec!["task"], "typed once");
    // The member still answers: its reply is not lost, it waits on b for b's leads.
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Reply {
            content: "done anyway".into(),
        },
    );
    let d = f.call(
        1,
        b_lead,
        Request::Drain {
            target: worker.clone(),
        },
    );
    match f.response(1, d) {
        Some(Response::Replies { replies }) => {
            let got: Vec<&str> = replies.iter().map(|r| r.content.as_str()).collect();
            assert_eq!(got, vec!["done anyway"]);
        }
        other => panic!("{other:?}"),
    }
    // A later delegation to the same member, owned by the new process, runs normally.
    f.set_status(1, &worker, AgentStatus::Idle);
    let lead = harness_lead();
    let c2 = f.call(0, lead, send(&worker, "task 2", true));
    f.advance(Duration::from_secs(6));
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Reply {
            content: "done 2".into(),
        },
    );
    assert_eq!(
        outcome(f.response(0, c2)),
        Some((Outcome::Replied, Some("done 2".into())))
    );
    assert_eq!(f.hosts[1].panes[&worker].typed, vec!["task", "task 2"]);
}

/// A brief the old process had not confirmed is left to the INJECTED bound: it may still sit
/// in the worker's queue, and the new process types it and owns its turn.
#[test]
fn a_brief_still_queued_when_the_worker_gateway_restarts_is_typed_by_the_new_one() {
    let (mut f, lead, worker) = two_hosts();
    // b is cut off before the brief reaches it: it waits in b's inbox.
    f.cut(1);
    let c = f.call(0, lead, send(&worker, "task", true));
    f.advance(Duration::from_secs(1));
    assert!(f.hosts[1].panes[&worker].typed.is_empty());
    f.restart(1, &[]);
    f.advance(Duration::from_secs(6));
    assert_eq!(f.hosts[1].panes[&worker].typed, vec!["task"]);
    assert_eq!(
        f.response(0, c),
        None,
        "still open: the new process owns the turn"
    );
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Reply {
            content: "done".into(),
        },
    );
    assert_eq!(
        outcome(f.response(0, c)),
        Some((Outcome::Replied, Some("done".into())))
    );
}

/// The worker's host goes silent for good: when its heartbeats expire from the roster, the
/// typed brief fails (CB-308 §7 item 7: roster expiry backs up the waiter's own timeout).
#[test]
fn a_worker_host_that_goes_silent_fails_the_send_when_its_roster_entry_expires() {
    let (mut f, lead, worker) = two_hosts();
    let c = f.call(0, lead, send(&worker, "task", true));
    f.advance(Duration::from_secs(1));
    f.set_status(1, &worker, AgentStatus::Working);
    f.cut(1);
    f.advance(Duration::from_secs(15));
    assert_eq!(
        f.response(0, c),
        None,
        "a heartbeat or two missed is not death"
    );
    f.advance(Duration::from_secs(15));
    let (o, why) = outcome(f.response(0, c)).expect("ended at the roster's expiry");
    assert_eq!(o, Outcome::WorkerFailed);
    assert!(why.unwrap_or_default().contains("no presence"));
}

/// With its own broker link down, a gateway hears no heartbeats from anyone: that silence is
/// its own, and no waiter is failed for it — not while it lasts, nor on reconnecting, before
/// the others have had a heartbeat's time to be heard again.
#[test]
fn a_sender_cut_off_itself_fails_nothing_for_the_silence() {
    let (mut f, lead, worker) = two_hosts();
    let c = f.call(0, lead, send(&worker, "task", true));
    f.advance(Duration::from_secs(1));
    f.set_status(1, &worker, AgentStatus::Working);
    f.cut(0);
    f.advance(Duration::from_secs(40));
    assert_eq!(f.response(0, c), None);
    f.heal(0);
    f.advance(Duration::from_secs(30));
    assert_eq!(f.response(0, c), None, "{}", f.trace(0));
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Reply {
            content: "done".into(),
        },
    );
    f.advance(Duration::from_secs(1));
    assert_eq!(
        outcome(f.response(0, c)),
        Some((Outcome::Replied, Some("done".into())))
    );
}

/// A second delegation to a busy worker on another host is refused BUSY by its gateway.
#[test]
fn a_busy_remote_worker_answers_busy() {
    let mut f = Fleet::new(3);
    let lead_a = f.lead(0, LEAD);
    let lead_c = f.lead(2, "44444444-4444-4444-8444-444444444444");
    let worker = f.member(1, WORKER);
    f.advance(Duration::from_millis(10));
    f.call(0, lead_a, send(&worker, "first", true));
    let c = f.call(2, lead_c, send(&worker, "second", true));
    assert_eq!(outcome(f.response(2, c)).map(|o| o.0), Some(Outcome::Busy));
}

/// Forged, re-addressed and replayed messages are rejected to the DLX and never typed.
#[test]
fn forged_readdressed_and_replayed_briefs_are_rejected_and_never_typed() {
    let (mut f, _lead, worker) = two_hosts();
    let stranger = Keyring::new(host_name(0), [77; 32], &BTreeMap::new()).expect("key");
    let mut env = envelope(Kind::Send, 5, LEAD, worker.as_str(), b"rm -rf /");
    stranger.sign(&mut env); // signs as "a" with the wrong key
    let inbox = format!("test.agent.{worker}.inbox.v2");
    f.broker.push(&inbox, raw(worker.as_str(), &env));
    f.settle();
    assert_eq!(codes(&f, 1), vec![RejectCode::BadSignature]);
    f.advance(Duration::from_secs(2));
    assert!(f.hosts[1].panes[&worker].typed.is_empty());
    assert_eq!(rejects(&f, 1), 1, "rejected to the DLX");
}

/// A body over `max_body_bytes` is refused before its signature is even hashed — from the
/// broker (rejected `oversized`, never typed) and from the north faces (invalid_argument) —
/// while a genuine brief of ordinary size from the same sender is typed.
#[test]
fn an_oversized_body_is_refused_on_the_wire_and_at_the_faces() {
    let (mut f, lead, worker) = two_hosts();
    let max = harness::core_config().max_body_bytes;
    let a = Keyring::new(host_name(0), [1; 32], &BTreeMap::new()).expect("a's key");
    let inbox = format!("test.agent.{worker}.inbox.v2");
    let mut big = envelope(Kind::Send, 6, LEAD, worker.as_str(), &vec![b'x'; max + 1]);
    big.expires_at = u64::MAX / 2;
    a.sign(&mut big);
    f.broker.push(&inbox, raw(worker.as_str(), &big));
    f.settle();
    assert_eq!(codes(&f, 1), vec![RejectCode::Oversized]);
    assert_eq!(rejects(&f, 1), 1);
    f.advance(Duration::from_secs(2));
    assert!(f.hosts[1].panes[&worker].typed.is_empty());

    let c = f.call(0, lead.clone(), send(&worker, &"y".repeat(max + 1), true));
    assert!(
        matches!(f.response(0, c), Some(Response::Error(CallError::InvalidArgument { reason })) if reason.contains("max_body_bytes")),
        "{:?}",
        f.response(0, c)
    );
    let c = f.call(0, lead, send(&worker, &"z".repeat(max), true));
    f.advance(Duration::from_secs(2));
    assert_eq!(
        f.hosts[1].panes[&worker].typed.len(),
        1,
        "the limit itself passes"
    );
    assert_eq!(f.response(0, c), None, "in flight");
}

/// A client with broker credentials and no key copies a queued brief into the DLX with a
/// forged `x-first-death-reason: maxlen`. The worker's gateway counts it as a broker drop of
/// its queue — a metric — and nothing fails: the brief is typed and its delegation ends
/// REPLIED. (The first build believed the header and failed the live delegation.)
#[test]
fn a_forged_dead_letter_fails_nothing() {
    let (mut f, lead, worker) = two_hosts();
    f.partitioned.insert(1);
    let c = f.call(0, lead, send(&worker, "task", true));
    let inbox = format!("test.agent.{worker}.inbox.v2");
    let mut m = f.stalled_copy(1, &inbox).expect("on its way to b");
    f.partitioned.remove(&1);
    for (k, v) in [
        ("x-first-death-reason", "maxlen"),
        ("x-first-death-queue", &inbox),
    ] {
        m.headers.insert(k.into(), HeaderValue::Str(v.to_string()));
    }
    for tap in ["test.dlq.a", "test.dlq.b"] {
        f.broker.push(tap, m.clone());
    }
    f.settle();
    f.advance(Duration::from_secs(1));
    assert_eq!(f.hosts[1].panes[&worker].typed, vec!["task"]);
    assert_eq!(f.response(0, c), None, "the live delegation is untouched");
    let drops = |h: usize| {
        f.events(h)
            .filter(|e| matches!(e, Event::BrokerDropped { reason, .. } if *reason == fleet_core::DropReason::Maxlen))
            .count()
    };
    assert_eq!(
        (drops(0), drops(1)),
        (0, 1),
        "counted by the queue's own host"
    );
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Reply {
            content: "done".into(),
        },
    );
    assert_eq!(
        outcome(f.response(0, c)),
        Some((Outcome::Replied, Some("done".into())))
    );
}

/// Anyone with broker access can replay a genuine brief it captured. The worker's gateway
/// rejects the copy (`replayed`), and the copy dead-letters — but a rejected copy is not an
/// undelivered brief: reporting it FAILED would let a replay fail the live delegation.
#[test]
fn a_replayed_brief_is_rejected_and_does_not_fail_the_live_delegation() {
    let (mut f, lead, worker) = two_hosts();
    let inbox = format!("test.agent.{worker}.inbox.v2");
    // The rogue's copy of what the lead publishes, taken as the broker routes it.
    f.partitioned.insert(1);
    let c = f.call(0, lead, send(&worker, "task", true));
    let original = f.stalled_copy(1, &inbox).expect("on its way to b");
    f.partitioned.remove(&1);
    f.advance(Duration::from_secs(1));
    assert_eq!(f.hosts[1].panes[&worker].typed, vec!["task"]);
    f.broker.push(&inbox, original);
    f.advance(Duration::from_secs(2));
    assert_eq!(codes(&f, 1), vec![RejectCode::Replayed]);
    assert_eq!(f.hosts[1].panes[&worker].typed, vec!["task"], "typed once");
    assert_eq!(f.response(0, c), None, "the live delegation is untouched");
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Reply {
            content: "done".into(),
        },
    );
    assert_eq!(
        outcome(f.response(0, c)),
        Some((Outcome::Replied, Some("done".into())))
    );
}

/// The roster: every gateway sees every entity and host; a host that stops heartbeating
/// expires from the others' views within the TTL.
#[test]
fn the_roster_converges_and_a_silent_host_expires() {
    let (mut f, _lead, worker) = two_hosts();
    let view_a: Vec<String> = f.hosts[0]
        .gw
        .roster()
        .iter()
        .map(|r| format!("{}@{}", r.gid, r.host))
        .collect();
    let view_b: Vec<String> = f.hosts[1]
        .gw
        .roster()
        .iter()
        .map(|r| format!("{}@{}", r.gid, r.host))
        .collect();
    assert_eq!(view_a, view_b);
    assert!(view_a.contains(&format!("{worker}@b")));
    assert!(view_a.contains(&"_gateway@b".to_string()));
    f.partitioned.insert(1);
    f.advance(Duration::from_secs(30));
    let view_a: Vec<String> = f.hosts[0]
        .gw
        .roster()
        .iter()
        .map(|r| r.gid.to_string())
        .collect();
    assert!(!view_a.contains(&worker.to_string()), "{view_a:?}");
    assert!(f
        .events(0)
        .any(|e| matches!(e, Event::RosterExpired { gid } if *gid == worker)));
}

/// Queue lifecycle as outputs: the gateway declares exactly its slice, names under the
/// namespace, with the `.v2` inbox suffix, the DLX and the caps.
#[test]
fn the_topology_is_this_gateways_slice() {
    let (f, _lead, worker) = two_hosts();
    let t = f.hosts[1].gw.topology().expect("federated");
    let names: Vec<&str> = t.queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "test.dlq".to_string(),
            "test.dlq.b".into(),
            "test.control.b".into(),
            "test.roster.b".into(),
            format!("test.agent.{worker}.inbox.v2"),
            format!("test.agent.{worker}.held.v1"),
        ]
    );
    assert!(
        !t.consumers.iter().any(|c| c.queue == "test.dlq"),
        "the operators' DLQ is never drained by a gateway"
    );
    let inbox = &t.queues[4];
    assert_eq!(inbox.args.dead_letter_exchange.as_deref(), Some("test.dlx"));
    assert!(inbox.args.max_length.is_some() && inbox.args.expires_ms.is_some());
    assert!(t.consumers.iter().all(|c| c.prefetch > 0));
    assert!(t
        .consumers
        .iter()
        .find(|c| c.queue.contains("inbox"))
        .is_some_and(|c| c.exclusive));
    assert_eq!(t.exchanges, Exchange::ALL.to_vec());
}

/// On a cluster: every durable queue is quorum and keeps one reader by single-active-consumer
/// (a quorum queue ignores the exclusive flag); the roster queue stays exclusive, transient
/// and classic, so a second gateway of the same host is still refused there. And a delegation
/// goes through as it does on classic queues.
#[test]
fn on_quorum_queues_the_durable_queues_are_quorum_and_the_roster_stays_classic() {
    let mut f = Fleet::with_queue_type(2, QueueType::Quorum);
    let lead = f.lead(0, LEAD);
    let worker = f.member(1, WORKER);
    f.advance(Duration::from_millis(10));
    let t = f.hosts[1].gw.topology().expect("federated");
    for q in &t.queues {
        if q.name == "test.roster.b" {
            assert_eq!(q.args.queue_type, QueueType::Classic);
            assert!(q.exclusive && !q.durable && q.auto_delete);
            continue;
        }
        assert_eq!(q.args.queue_type, QueueType::Quorum, "{}", q.name);
        assert!(q.durable && !q.exclusive && !q.auto_delete, "{}", q.name);
        assert!(q.args.single_active_consumer, "{}", q.name);
        assert_eq!(q.args.delivery_limit, Some(QUORUM_DELIVERY_LIMIT));
    }
    assert_eq!(t.queues.len(), 6);
    f.call(0, lead, send(&worker, "write the tests", true));
    f.advance(Duration::from_secs(1));
    assert_eq!(
        published(&f, 1, Kind::Injected),
        1,
        "typed on b, and a told so"
    );
}

/// A snapshot of the U1 trace on both hosts: the story of one cross-host delegation.
#[test]
fn u1_trace_snapshot() {
    let (mut f, lead, worker) = two_hosts();
    let start: Vec<usize> = f.hosts.iter().map(|h| h.trace.len()).collect();
    f.call(0, lead, send(&worker, "write the tests", true));
    f.advance(Duration::from_secs(1));
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Reply {
            content: "done".into(),
        },
    );
    let mut lines = Vec::new();
    for (h, s) in start.iter().enumerate() {
        for l in &f.hosts[h].trace[*s..] {
            if !l.contains("PRESENCE") && !l.contains("poll_status") && !l.contains(" audit ") {
                lines.push(l.clone());
            }
        }
    }
    let text = redact(&lines.join("\n"));
    insta::assert_snapshot!(text);
}

fn redact(s: &str) -> String {
    let mut out = String::new();
    let mut ids: BTreeMap<String, usize> = BTreeMap::new();
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if i + 36 <= bytes.len()
            && uuid::Uuid::parse_str(&s[i..i + 36]).is_ok()
            && s.is_char_boundary(i + 36)
        {
            let id = s[i..i + 36].to_string();
            let label = match id.as_str() {
                LEAD => "LEAD".to_string(),
                WORKER => "WORKER".to_string(),
                _ => {
                    let n = ids.len() + 1;
                    format!("#{}", ids.entry(id).or_insert(n))
                }
            };
            out.push_str(&label);
            i += 36;
        } else {
            let c = s[i..].chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn spawn(host: Option<usize>, profile: &str, group: Option<&str>) -> Request {
    Request::Spawn {
        host: host.map(host_name),
        spec: fleet_core::SpawnSpec {
            profile: profile.into(),
            group: group.map(str::to_string),
            ..Default::default()
        },
    }
}

fn spawned(r: Option<&Response>) -> Option<(SessionId, String)> {
    match r? {
        Response::Spawned { gid, host } => Some((gid.clone(), host.to_string())),
        _ => None,
    }
}

/// U4: a lead on a spawns on b. The new member is announced only after its readiness gate,
/// answers the spawn, appears in a's roster, and is then reachable by U1.
#[test]
fn u4_spawn_on_another_host_then_delegate_to_it() {
    let mut f = Fleet::new(2);
    let lead = f.lead(0, LEAD);
    f.advance(Duration::from_millis(10));
    let c = f.call(0, lead.clone(), spawn(Some(1), "claude", None));
    f.settle();
    let (gid, host) = spawned(f.response(0, c)).expect("spawned");
    assert_eq!(host, "b");
    assert_eq!(f.spawned, vec![(1, gid.clone())]);
    assert!(f.hosts[0]
        .gw
        .roster()
        .iter()
        .any(|r| r.gid == gid && r.host == host_name(1)));
    let s = f.call(0, lead, send(&gid, "hello, new member", true));
    f.advance(Duration::from_secs(1));
    assert_eq!(f.hosts[1].panes[&gid].typed, vec!["hello, new member"]);
    assert_eq!(f.response(0, s), None, "in flight");
}

/// A host runs at most `max_members` members, spawning ones included: a peer asking for one
/// more — a leaked key starting agents without end — is told so, and nothing starts.
#[test]
fn a_spawn_past_the_hosts_max_members_fails_saying_so() {
    let mut f = Fleet::with(
        2,
        fleet_core::CoreConfig {
            max_members: 2,
            ..harness::core_config()
        },
    );
    let lead = f.lead(0, LEAD);
    f.advance(Duration::from_millis(10));
    f.auto_ready = false;
    let first = f.call(0, lead.clone(), spawn(Some(1), "claude", None));
    let second = f.call(0, lead.clone(), spawn(Some(1), "claude", None));
    f.settle();
    assert_eq!(f.spawned.len(), 2, "both in their readiness gates");
    let third = f.call(0, lead, spawn(Some(1), "claude", None));
    f.settle();
    assert_eq!(f.spawned.len(), 2, "no third pane");
    match f.response(0, third) {
        Some(Response::Error(CallError::SpawnFailed { reason })) => {
            assert!(reason.contains("max_members"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(f.response(0, first), None);
    assert_eq!(f.response(0, second), None);
}

/// A SPAWN redelivered while the first is still in its readiness gate starts no second pane;
/// one redelivered after it is ready is answered with the existing member (no ledger).
#[test]
fn a_duplicate_spawn_never_starts_a_second_pane() {
    let mut f = Fleet::new(2);
    let lead = f.lead(0, LEAD);
    f.advance(Duration::from_millis(10));
    f.auto_ready = false;
    // Keep b off the broker for a moment so the SPAWN can be copied as a redelivery would be.
    f.partitioned.insert(1);
    let c = f.call(0, lead, spawn(Some(1), "claude", None));
    let control = "test.control.b".to_string();
    let m = f
        .stalled_copy(1, &control)
        .expect("the SPAWN is on its way");
    f.broker.push(&control, m.clone());
    f.partitioned.remove(&1);
    f.settle();
    assert_eq!(f.spawned.len(), 1, "one pane for two deliveries");
    assert_eq!(f.response(0, c), None, "not ready yet");
    let gid = f.spawned[0].1.clone();
    f.input(
        1,
        Input::MemberConnected {
            target: gid.clone(),
        },
    );
    f.settle();
    assert_eq!(spawned(f.response(0, c)).map(|s| s.0), Some(gid.clone()));
    // A third delivery, after ready: the existing member is re-announced, no new pane.
    f.broker.push(&control, m);
    f.settle();
    assert_eq!(f.spawned.len(), 1);
}

/// Control is honoured only from allowed gateways, checked against the verified signature
/// before anything else.
#[test]
fn control_from_a_gateway_not_on_the_allowlist_is_refused() {
    let mut f = Fleet::with_control(2, harness::core_config(), |i| match i {
        1 => std::collections::BTreeSet::new(), // b accepts control from nobody
        _ => (0..2).map(host_name).collect(),
    });
    let lead = f.lead(0, LEAD);
    f.advance(Duration::from_millis(10));
    let c = f.call(0, lead, spawn(Some(1), "claude", None));
    f.settle();
    assert!(f.spawned.is_empty());
    assert_eq!(codes(&f, 1), vec![RejectCode::NotAllowed]);
    // The requester hears why at once (a typed refusal), not at its bound.
    assert!(matches!(
        f.response(0, c),
        Some(Response::Error(CallError::NotAllowed { .. }))
    ));
}

/// An unknown profile is a clear error: at once from the roster's advertised profiles, and
/// from the target itself for a local spawn.
#[test]
fn an_unknown_profile_is_a_clear_error() {
    let mut f = Fleet::new(2);
    let lead = f.lead(0, LEAD);
    f.advance(Duration::from_millis(10));
    let c = f.call(0, lead.clone(), spawn(Some(1), "gpt-9", None));
    assert_eq!(
        f.response(0, c),
        Some(&Response::Error(CallError::UnknownProfile {
            host: host_name(1),
            profile: "gpt-9".into(),
            offered: vec!["claude".into()],
        }))
    );
    let l = f.call(0, lead, spawn(None, "gpt-9", None));
    assert!(matches!(
        f.response(0, l),
        Some(Response::Error(CallError::SpawnFailed { reason })) if reason.contains("gpt-9")
    ));
    assert!(f.spawned.is_empty());
}

/// A member that never connects is reaped at the readiness bound and the spawn fails; a
/// launcher failure fails it at once; a host nobody serves is "no such host".
#[test]
fn spawn_failures_are_reported_not_hung() {
    let mut f = Fleet::new(2);
    let lead = f.lead(0, LEAD);
    f.advance(Duration::from_millis(10));
    f.auto_ready = false;
    let c = f.call(0, lead.clone(), spawn(Some(1), "claude", None));
    f.advance(Duration::from_secs(31));
    assert!(matches!(
        f.response(0, c),
        Some(Response::Error(CallError::SpawnFailed { reason }))
            if reason.contains("did not connect to this gateway's MCP")
    ));
    let gid = f.spawned[0].1.clone();
    assert!(!f.hosts[1].panes.contains_key(&gid), "reaped");
    assert!(closed(&f, 1, &gid));

    f.launcher_fails = true;
    let c = f.call(0, lead.clone(), spawn(Some(1), "claude", None));
    assert!(matches!(
        f.response(0, c),
        Some(Response::Error(CallError::SpawnFailed { reason })) if reason.contains("launcher")
    ));

    let c = f.call(0, lead, spawn(Some(2), "claude", None));
    assert_eq!(
        f.response(0, c),
        Some(&Response::Error(CallError::NoSuchHost {
            host: host_name(2)
        }))
    );
}

/// U8: one publish reaches every member's inbox (mandatory=false); a group broadcast only
/// that group's; each copy is typed by its own gateway.
#[test]
fn u8_broadcast_reaches_every_member_and_groups_only_theirs() {
    let mut f = Fleet::new(2);
    let lead = f.lead(0, LEAD);
    f.advance(Duration::from_millis(10));
    let r1 = f.call(0, lead.clone(), spawn(Some(1), "claude", Some("reviewers")));
    let r2 = f.call(0, lead.clone(), spawn(Some(1), "claude", None));
    let r3 = f.call(0, lead.clone(), spawn(None, "claude", Some("reviewers")));
    let ids: Vec<SessionId> = [r1, r2, r3]
        .iter()
        .map(|c| spawned(f.response(0, *c)).expect("spawned").0)
        .collect();
    let where_ = |i: usize| if i < 2 { 1 } else { 0 };
    let all = f.call(
        0,
        lead.clone(),
        Request::Broadcast {
            group: None,
            content: "everyone: stop".into(),
        },
    );
    assert!(
        matches!(f.response(0, all), Some(Response::Broadcast { key, .. }) if key == "broadcast.all")
    );
    f.advance(Duration::from_secs(1));
    for (i, gid) in ids.iter().enumerate() {
        assert_eq!(
            f.hosts[where_(i)].panes[gid].typed,
            vec!["everyone: stop"],
            "{i}"
        );
    }
    f.call(
        0,
        lead.clone(),
        Request::Broadcast {
            group: Some("reviewers".into()),
            content: "reviewers: look at #42".into(),
        },
    );
    // One message per turn: the scripted panes never show WORKING, so the first copy's turn
    // ends by the pickup bound (8 polls) before the second copy may be typed.
    f.advance(Duration::from_secs(6));
    assert_eq!(f.hosts[1].panes[&ids[0]].typed.len(), 2);
    assert_eq!(f.hosts[1].panes[&ids[1]].typed.len(), 1, "not in the group");
    assert_eq!(f.hosts[0].panes[&ids[2]].typed.len(), 2);
    // An empty group is legal silence, not an error.
    let empty = f.call(
        0,
        lead,
        Request::Broadcast {
            group: Some("nobody".into()),
            content: "hello?".into(),
        },
    );
    assert!(matches!(
        f.response(0, empty),
        Some(Response::Broadcast { .. })
    ));
}

/// A U4 trace on both hosts, for the record.
#[test]
fn u4_trace_snapshot() {
    let mut f = Fleet::new(2);
    let lead = f.lead(0, LEAD);
    f.advance(Duration::from_millis(10));
    let start: Vec<usize> = f.hosts.iter().map(|h| h.trace.len()).collect();
    f.call(0, lead, spawn(Some(1), "claude", None));
    f.settle();
    let mut lines = Vec::new();
    for (h, s) in start.iter().enumerate() {
        for l in &f.hosts[h].trace[*s..] {
            if !l.contains("poll_status") && !l.contains(" audit ") {
                lines.push(l.clone());
            }
        }
    }
    insta::assert_snapshot!(redact(&lines.join("\n")));
}

/// ABANDONED stitches the turn split: the worker's gateway tells the sender at once when the
/// member is stopped, or when the gateway itself shuts down, instead of leaving the waiter to
/// its timeout.
#[test]
fn stop_and_shutdown_abandon_remote_delegations() {
    let (mut f, lead, worker) = two_hosts();
    let c = f.call(0, lead.clone(), send(&worker, "task", true));
    f.advance(Duration::from_secs(1));
    let b_lead = f.lead(1, "55555555-5555-4555-8555-555555555555");
    let s = f.call(
        1,
        b_lead,
        Request::Stop {
            target: worker.clone(),
        },
    );
    assert_eq!(
        f.response(1, s),
        Some(&Response::Stopped {
            target: worker.clone()
        })
    );
    let (o, body) = outcome(f.response(0, c)).expect("abandoned at once");
    assert_eq!(o, Outcome::WorkerFailed);
    assert!(body.unwrap_or_default().contains("stopped"));
    assert!(
        !f.hosts[1].panes.contains_key(&worker),
        "the pane was closed"
    );

    let w2 = f.member(1, "66666666-6666-4666-8666-666666666666");
    f.advance(Duration::from_millis(10));
    let c = f.call(0, lead, send(&w2, "task", true));
    f.advance(Duration::from_secs(1));
    f.input(1, Input::Shutdown);
    f.settle();
    let (o, body) = outcome(f.response(0, c)).expect("abandoned on shutdown");
    assert_eq!(o, Outcome::WorkerFailed);
    assert!(body.unwrap_or_default().contains("shut down"));
}

/// A forward brief the broker redelivers (its ack was lost with the connection) is never
/// typed again: acked silently if this gateway handled it, otherwise acked and its sender told
/// it may have been lost — never dead-lettered as a "replay".
#[test]
fn a_redelivered_brief_is_never_typed_twice() {
    let (mut f, lead, worker) = two_hosts();
    let inbox = format!("test.agent.{worker}.inbox.v2");
    f.partitioned.insert(1);
    let c1 = f.call(0, lead.clone(), send(&worker, "first", false));
    let m1 = f.stalled_copy(1, &inbox).expect("on its way to b");
    f.partitioned.remove(&1);
    f.advance(Duration::from_secs(1));
    assert_eq!(f.hosts[1].panes[&worker].typed, vec!["first"]);
    // The same brief again, marked redelivered: handled before, so silently acked.
    f.deliver_forged(1, &inbox, m1, true);
    f.advance(Duration::from_secs(1));
    assert_eq!(f.hosts[1].panes[&worker].typed, vec!["first"]);
    assert_eq!(codes(&f, 1), vec![], "a redelivery is not an attack");
    let _ = c1;

    // A brief this gateway never saw, arriving redelivered (as after its own restart).
    let w2 = f.member(1, "77777777-7777-4777-8777-777777777777");
    f.advance(Duration::from_millis(10));
    let inbox2 = format!("test.agent.{w2}.inbox.v2");
    f.partitioned.insert(1);
    let c2 = f.call(0, lead, send(&w2, "second", true));
    let m2 = f.take_stalled(1, &inbox2).expect("on its way to b");
    f.partitioned.remove(&1);
    f.deliver_forged(1, &inbox2, m2, true);
    f.advance(Duration::from_secs(1));
    assert!(
        f.hosts[1].panes[&w2].typed.is_empty(),
        "maybe typed before: never again"
    );
    let (o, body) = outcome(f.response(0, c2)).expect("told at once");
    assert_eq!(o, Outcome::WorkerFailed);
    assert!(body
        .unwrap_or_default()
        .contains("may already have been typed"));
}

/// A delivery tagged with an older connection generation is ignored: its tag is void.
#[test]
fn a_delivery_of_an_old_connection_is_ignored() {
    let (mut f, _lead, worker) = two_hosts();
    f.input(
        1,
        Input::Broker(BrokerEvent::Delivery {
            delivery: DeliveryId {
                generation: 0,
                tag: 5,
            },
            queue: format!("test.agent.{worker}.inbox.v2"),
            routing_key: worker.to_string(),
            redelivered: false,
            headers: Default::default(),
            body: Vec::new(),
        }),
    );
    assert!(f.events(1).any(|e| matches!(
        e,
        Event::Stale {
            what: Stale::OldDelivery { .. },
            ..
        }
    )));
    assert_eq!(rejects(&f, 1), 0, "a void tag is never settled");
}

/// A lead's inbox outlives its pane (only members' inboxes go with them).
#[test]
fn a_leads_inbox_is_not_deleted_with_its_pane() {
    let (mut f, _lead, _worker) = two_hosts();
    f.input(
        0,
        Input::PaneGone {
            target: SessionId::new(LEAD),
        },
    );
    assert!(!f
        .broker_ops(0)
        .any(|op| matches!(op, BrokerOp::DeleteQueue { .. })));
}

/// A member's reply to a delegation from another host is accepted only once the broker has
/// it; with the lead's inbox gone it is an error the member sees, not a silent loss.
#[test]
fn a_reply_is_accepted_only_when_the_broker_confirms_it() {
    let (mut f, lead, worker) = two_hosts();
    f.call(0, lead, send(&worker, "task", true));
    f.advance(Duration::from_secs(1));
    let lead_inbox = format!("test.agent.{LEAD}.inbox.v2");
    f.broker.remove_queue(&lead_inbox);
    let r = f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Reply {
            content: "done".into(),
        },
    );
    assert_eq!(
        f.response(1, r),
        Some(&Response::Error(CallError::NoSuchRecipient {
            target: SessionId::new(LEAD)
        }))
    );
}

/// However often the broker bounces, a host publishes one snapshot per interval, whatever
/// it serves, and nothing else while nothing changes.
#[test]
fn heartbeats_do_not_multiply_with_broker_bounces() {
    let (mut f, _lead, _worker) = two_hosts();
    for _ in 0..4 {
        f.bounce_broker();
    }
    f.advance(Duration::from_secs(6));
    let before = published(&f, 0, Kind::Presence);
    f.advance(Duration::from_secs(5));
    let per_interval = published(&f, 0, Kind::Presence) - before;
    assert_eq!(per_interval, 1, "a's snapshot, its lead in it");
    let before = published(&f, 1, Kind::Presence);
    f.advance(Duration::from_secs(5));
    assert_eq!(
        published(&f, 1, Kind::Presence) - before,
        1,
        "b's snapshot, its idle member in it"
    );
}

/// A spawnId must be a canonical UUID: it becomes a routing key and a pane label.
#[test]
fn a_spawn_id_that_is_not_a_uuid_is_refused() {
    let (mut f, _lead, _worker) = two_hosts();
    let a = Keyring::new(host_name(0), [1; 32], &BTreeMap::new()).expect("a's key");
    let refs = Refs {
        spawn_id: Some(SessionId::new("#")),
        ..Refs::default()
    };
    let mut env = envelope_with(Kind::Spawn, refs, 9, LEAD, "b", br#"{"profile":"claude"}"#);
    a.sign(&mut env);
    f.broker.push(
        "test.control.b",
        Raw {
            routing_key: "b".into(),
            headers: env.to_headers(),
            body: env.body.clone(),
        },
    );
    f.settle();
    assert!(f.spawned.is_empty());
    assert!(f
        .rejections(1)
        .iter()
        .any(|(c, d)| *c == RejectCode::Malformed && d.contains("not a canonical UUID")));
}

/// A launcher that reports success after the spawn was reaped gets its pane closed.
#[test]
fn a_late_launcher_success_is_closed() {
    let (mut f, _lead, _worker) = two_hosts();
    let gid = SessionId::new("88888888-8888-4888-8888-888888888888");
    f.input(
        1,
        Input::Spawned {
            gid: gid.clone(),
            result: Ok(Readiness::OnConnect.into()),
        },
    );
    assert!(closed(&f, 1, &gid));
}

/// Admission rule 2 waits for presence rather than guessing: a brief that reaches a host
/// before any signed presence binds its sender — the backlog a reconnect receives before the
/// first heartbeats — is held unacked until that presence arrives, then typed; it is not
/// dead-lettered for a binding the host simply has not heard yet.
#[test]
fn a_backlog_brief_waits_for_its_senders_presence() {
    let (mut f, lead, worker) = two_hosts();
    f.cut(1);
    // Longer than the presence TTL: b's view of a's lead expires while it is cut off.
    f.advance(Duration::from_secs(90));
    let c = f.call(0, lead, send(&worker, "after the outage", false));
    f.advance(Duration::from_millis(100));
    f.heal(1);
    f.advance(Duration::from_secs(10));
    assert_eq!(
        f.hosts[1].panes[&worker].typed,
        vec!["after the outage"],
        "{}",
        f.trace(1)
    );
    assert!(!codes(&f, 1).contains(&RejectCode::SenderNotOnSigningHost));
    let _ = c;
}

/// …and one whose sender never shows up is rejected once the presence TTL has passed, with
/// the reason it waited for.
#[test]
fn a_brief_from_a_sender_nobody_announces_is_rejected_after_the_ttl() {
    let (mut f, _lead, worker) = two_hosts();
    let inbox = format!("test.agent.{worker}.inbox.v2");
    let ghost = "99999999-9999-4999-8999-999999999999";
    let keyring = Keyring::new(host_name(0), [1; 32], &BTreeMap::new()).expect("key");
    let mut env = envelope(Kind::Send, 0xabc, ghost, worker.as_str(), b"from nobody");
    keyring.sign(&mut env);
    f.broker.push(&inbox, raw(worker.as_str(), &env));
    f.advance(Duration::from_secs(5));
    assert_eq!(codes(&f, 1), vec![], "still waiting");
    f.advance(Duration::from_secs(30));
    assert_eq!(rejects(&f, 1), 1);
    assert!(f.rejections(1).iter().any(|(c, d)| {
        *c == RejectCode::SenderNotOnSigningHost && d.contains("no signed presence binds")
    }));
    assert!(f.hosts[1].panes[&worker].typed.is_empty());
}

/// What waits for a sender's presence is bounded in bytes: a peer whose key leaked signs
/// largest-size briefs from a gid nobody announces, and past 16 of them each is rejected at
/// once (saying why) instead of kept — the prefetch window would otherwise hold a gigabyte.
#[test]
fn briefs_waiting_for_an_unannounced_sender_are_bounded_in_bytes() {
    let (mut f, _lead, worker) = two_hosts();
    let inbox = format!("test.agent.{worker}.inbox.v2");
    let ghost = "99999999-9999-4999-8999-999999999999";
    let keyring = Keyring::new(host_name(0), [1; 32], &BTreeMap::new()).expect("key");
    let largest = vec![b'x'; 1 << 20];
    for n in 0..20u128 {
        let mut env = envelope(Kind::Send, 0xb00 + n, ghost, worker.as_str(), &largest);
        keyring.sign(&mut env);
        f.broker.push(&inbox, raw(worker.as_str(), &env));
    }
    f.advance(Duration::from_secs(1));
    let full: Vec<_> = f
        .rejections(1)
        .into_iter()
        .filter(|(c, d)| *c == RejectCode::SenderNotOnSigningHost && d.contains("already hold"))
        .collect();
    assert_eq!(
        full.len(),
        4,
        "16 wait, 4 are turned away: {:?}",
        f.rejections(1)
    );
    assert!(f.hosts[1].panes[&worker].typed.is_empty());
}

/// Presence stays true of idle members: every heartbeat samples each announced member, so a
/// pane that died with nothing delegated to it (nobody was polling it) leaves every roster.
#[test]
fn a_member_that_dies_unwatched_leaves_the_roster() {
    let (mut f, lead, worker) = two_hosts();
    f.advance(Duration::from_secs(6));
    let listed = |f: &mut Fleet, lead: &Principal| {
        let c = f.call(0, lead.clone(), Request::List);
        f.settle();
        match f.response(0, c) {
            Some(Response::Roster { rows }) => rows.iter().any(|r| r.gid == worker),
            other => panic!("fleet_list answered {other:?}"),
        }
    };
    assert!(listed(&mut f, &lead), "announced while alive");
    f.hosts[1].panes.remove(&worker);
    f.advance(Duration::from_secs(30));
    assert!(!listed(&mut f, &lead), "{}", f.trace(1));
}

/// Sessions: a spawned member goes SPAWNING → READY → BUSY → DONE and takes a follow-up; the
/// idle reaper closes it once it has sat idle past `member_idle_ttl_ms`, and never while it
/// works. Its inbox goes with its pane.
#[test]
fn a_member_session_runs_its_course_and_the_idle_reaper_closes_it() {
    use fleet_core::SessionState::*;
    let cfg = fleet_core::CoreConfig {
        member_idle_ttl_ms: 60_000,
        ..harness::core_config()
    };
    let mut f = Fleet::with(2, cfg);
    let lead = f.lead(0, LEAD);
    f.advance(Duration::from_millis(10));
    f.auto_ready = false;
    let c = f.call(0, lead.clone(), spawn(Some(1), "claude", None));
    f.settle();
    let gid = f.spawned[0].1.clone();
    assert_eq!(f.hosts[1].gw.session(&gid), Some(Spawning));
    f.input(
        1,
        Input::MemberConnected {
            target: gid.clone(),
        },
    );
    f.settle();
    assert!(spawned(f.response(0, c)).is_some());
    assert_eq!(f.hosts[1].gw.session(&gid), Some(Ready));
    let s = f.call(0, lead.clone(), send(&gid, "first", false));
    f.advance(Duration::from_secs(1));
    assert!(f.response(0, s).is_some());
    assert_eq!(f.hosts[1].gw.session(&gid), Some(Busy));
    f.set_status(1, &gid, AgentStatus::Working);
    f.advance(Duration::from_secs(1));
    f.set_status(1, &gid, AgentStatus::Idle);
    f.advance(Duration::from_secs(2));
    assert_eq!(f.hosts[1].gw.session(&gid), Some(Done));
    // A follow-up: DONE is not the end of a fleet member.
    f.call(0, lead.clone(), send(&gid, "second", false));
    f.advance(Duration::from_secs(1));
    assert_eq!(f.hosts[1].gw.session(&gid), Some(Busy));
    f.set_status(1, &gid, AgentStatus::Working);
    // Working for longer than the TTL: never reaped.
    f.advance(Duration::from_secs(90));
    assert_eq!(f.hosts[1].gw.session(&gid), Some(Busy));
    assert!(f.hosts[1].panes.contains_key(&gid));
    f.set_status(1, &gid, AgentStatus::Idle);
    f.advance(Duration::from_secs(2));
    assert_eq!(f.hosts[1].gw.session(&gid), Some(Done));
    f.advance(Duration::from_secs(50));
    assert!(
        f.hosts[1].panes.contains_key(&gid),
        "idle 50 s of a 60 s TTL"
    );
    f.advance(Duration::from_secs(30));
    assert!(!f.hosts[1].panes.contains_key(&gid), "reaped");
    assert_eq!(f.hosts[1].gw.session(&gid), None);
    assert!(f
        .events(1)
        .any(|e| matches!(e, Event::Reaped { gid: g, .. } if *g == gid)));
    assert!(f.events(1).any(|e| matches!(
        e,
        Event::Session {
            gid: g,
            from: Some(SessionState::Spawning),
            to: SessionState::Ready,
        } if *g == gid
    )));
    let inbox = format!("test.agent.{gid}.inbox.v2");
    assert!(
        f.broker_ops(1)
            .any(|op| matches!(op, BrokerOp::DeleteQueue { name } if *name == inbox)),
        "its inbox goes with it"
    );
}

/// A worktree travels with a SPAWN only as a repository URL at an exact commit: a path or a
/// branch means something else on another host, so such a spawn is refused before it leaves.
#[test]
fn a_spawn_on_another_host_carries_its_worktree_by_url_and_commit() {
    let mut f = Fleet::new(2);
    let lead = f.lead(0, LEAD);
    f.advance(Duration::from_millis(10));
    let with = |repo: &str, commit: Option<&str>| Request::Spawn {
        host: Some(host_name(1)),
        spec: fleet_core::SpawnSpec {
            profile: "claude".into(),
            worktree: Some(fleet_core::Worktree {
                repo: repo.into(),
                commit: commit.map(str::to_string),
            }),
            ..Default::default()
        },
    };
    let commit = "0123456789abcdef0123456789abcdef01234567";
    for (bad, why) in [
        (with("/src/app", Some(commit)), "URL"),
        (with("file:///src/app", Some(commit)), "https or ssh"),
        // Plaintext, unauthenticated transports are no way to fetch code a member will run.
        (
            with("git://git.example.com/app.git", Some(commit)),
            "https or ssh",
        ),
        (
            with("http://git.example.com/app.git", Some(commit)),
            "https or ssh",
        ),
        // `ext::` runs a command as the target's daemon.
        (
            with("ext::sh -c touch% /tmp/x git@h:r", Some(commit)),
            "remote helper",
        ),
        (
            with("https://bob:tok3n@git.example.com/app.git", Some(commit)),
            "credentials",
        ),
        (
            with("https://git.example.com/app.git", None),
            "exact commit",
        ),
        (
            with("https://git.example.com/app.git", Some("main")),
            "40-hex",
        ),
    ] {
        let c = f.call(0, lead.clone(), bad);
        f.settle();
        match f.response(0, c) {
            Some(Response::Error(CallError::InvalidArgument { reason })) => {
                assert!(reason.contains(why), "{reason}")
            }
            other => panic!("expected invalid_argument, got {other:?}"),
        }
    }
    assert!(f.spawned.is_empty(), "nothing left the host");
    let c = f.call(
        0,
        lead,
        with("https://git.example.com/app.git", Some(commit)),
    );
    f.settle();
    assert!(spawned(f.response(0, c)).is_some());
    assert!(f.hosts[1].outputs.iter().any(|o| matches!(
        o,
        Output::SpawnPane { spec: fleet_core::SpawnSpec { worktree: Some(w), .. }, .. }
            if w.repo == "https://git.example.com/app.git" && w.commit.as_deref() == Some(commit)
    )));
}

/// A member whose pane closes inside its readiness gate (its program died at start) fails its
/// spawn at once — here and for a lead on another host — instead of at the readiness bound.
#[test]
fn a_member_whose_pane_closes_before_it_is_ready_fails_its_spawn_at_once() {
    let mut f = Fleet::new(2);
    let lead = f.lead(0, LEAD);
    f.advance(Duration::from_millis(10));
    f.auto_ready = false;
    let here = f.call(0, lead.clone(), spawn(None, "claude", None));
    let there = f.call(0, lead, spawn(Some(1), "claude", None));
    f.settle();
    assert_eq!(f.spawned.len(), 2, "{:?}", f.spawned);
    for (h, gid) in f.spawned.clone() {
        f.input(h, Input::PaneGone { target: gid });
    }
    f.advance(Duration::from_millis(500));
    for c in [here, there] {
        match f.response(0, c) {
            Some(Response::Error(e)) => assert_eq!(e.code(), "spawn_failed", "{e:?}"),
            other => panic!("expected spawn_failed at once, got {other:?}"),
        }
    }
}

/// The operators' view on both hosts of one delegation: the sender's half and the worker's
/// carry the same msgId and traceId (the flow a dashboard filters on), each host lists the
/// other as heard with the counts its snapshot carried, and a cut link reads UNKNOWN.
#[test]
fn both_halves_of_a_delegation_show_one_flow_and_each_host_sees_the_others_counts() {
    use fleet_core::{FlowPhase, Half, Link, Overview};
    let (mut f, lead, worker) = two_hosts();
    let overview = |f: &mut Fleet, h: usize| -> Overview {
        let c = f.call(h, harness_lead(), Request::Overview);
        match f.response(h, c) {
            Some(Response::Overview(o)) => (**o).clone(),
            other => panic!("expected an overview, got {other:?}"),
        }
    };
    f.call(0, lead, send(&worker, "write the tests", false));
    f.advance(Duration::from_secs(1));
    let (a, b) = (overview(&mut f, 0), overview(&mut f, 1));
    let (sent, worked) = (&a.delegations[0], &b.delegations[0]);
    assert_eq!((sent.half, worked.half), (Half::Sender, Half::Worker));
    assert_eq!(
        (sent.phase, worked.phase),
        (FlowPhase::Typed, FlowPhase::Typed)
    );
    assert_eq!(sent.msg, worked.msg);
    assert!(sent.trace.is_some());
    assert_eq!(sent.trace, worked.trace);
    assert_eq!(worked.lead, Some(SessionId::new(LEAD)));
    // Each names the other, heard through presence, with the counts of its last snapshot.
    f.advance(Duration::from_secs(10));
    let a = overview(&mut f, 0);
    assert_eq!(a.hosts[0].host, host_name(0));
    assert_eq!(a.hosts[0].link, Link::Up);
    let peer = &a.hosts[1];
    assert_eq!((&peer.host, peer.link), (&host_name(1), Link::Up));
    assert!(peer.heard_ms_ago.is_some_and(|ms| ms < 10_000));
    assert_eq!(peer.ops.as_ref().map(|o| o.delegations), Some(1));
    // The member asks: its question is the sender's lead's. The worker's host shows it asking
    // without the question or the turn, and a lead there cannot answer it (STALE_TURN, the
    // question still open for its own lead).
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Ask {
            question: "which branch?".into(),
            timeout_ms: None,
        },
    );
    f.advance(Duration::from_millis(500));
    let (a, b) = (overview(&mut f, 0), overview(&mut f, 1));
    assert_eq!(a.delegations[0].question.as_deref(), Some("which branch?"));
    let turn = a.delegations[0]
        .turn_id
        .expect("the lead sees the turn to answer");
    assert_eq!(b.delegations[0].phase, FlowPhase::Asking);
    assert_eq!(
        (&b.delegations[0].question, b.delegations[0].turn_id),
        (&None, None)
    );
    let b_lead = f.lead(1, B_LEAD);
    let c = f.call(
        1,
        b_lead,
        Request::Answer {
            turn_id: turn,
            content: "not mine to say".into(),
            wait: true,
            timeout_ms: None,
            asked_by: None,
        },
    );
    assert!(matches!(
        f.response(1, c),
        Some(Response::Outcome {
            outcome: Outcome::StaleTurn,
            ..
        })
    ));
    assert_eq!(overview(&mut f, 1).delegations[0].phase, FlowPhase::Asking);
    f.cut(0);
    let a = overview(&mut f, 0);
    assert_eq!(a.hosts[0].link, Link::Down);
    assert!(a.hosts[1..].iter().all(|h| h.link == Link::Unknown));
}
