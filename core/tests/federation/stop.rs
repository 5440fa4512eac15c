//! STOP over `fleet.control`: any gid in the roster can be stopped from a lead that may stop,
//! the target closes the pane, deletes the inbox and ends what was open on it ABANDONED, and
//! the requester's call answers `stopped` or a clear error within its bound.

use super::harness::{core_config, host_name, Fleet};
use super::{codes, envelope, outcome, published, raw, send, two_hosts, B_LEAD, LEAD, WORKER};
use fleet_core::signing::Keyring;
use std::collections::BTreeMap;

fn nobody_else() -> SessionId {
    SessionId::new("88888888-8888-4888-8888-888888888888")
}
use fleet_core::broker::BrokerOp;
use fleet_core::control::{Refusal, RefusalCode};
use fleet_core::envelope::Kind;
use fleet_core::{
    CallError, Duration, Event, Input, Outcome, RejectCode, Request, Response, SessionId,
};
use std::collections::BTreeSet;

fn stop(target: &SessionId) -> Request {
    Request::Stop {
        target: target.clone(),
    }
}

fn in_roster(f: &Fleet, h: usize, gid: &SessionId) -> bool {
    f.hosts[h].gw.roster().iter().any(|r| &r.gid == gid)
}

fn deleted_queues(f: &Fleet, h: usize) -> Vec<String> {
    f.broker_ops(h)
        .filter_map(|op| match op {
            BrokerOp::DeleteQueue { name } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

/// U4's other half: a lead on a stops a member on b. b closes the pane, deletes the inbox and
/// tells the sender of the open brief ABANDONED; a's call answers `stopped` once b's leave says
/// so, and a's roster no longer lists the member.
#[test]
fn a_lead_stops_a_member_on_another_host() {
    let (mut f, lead, worker) = two_hosts();
    let task = f.call(0, lead.clone(), send(&worker, "a long task", true));
    f.advance(Duration::from_secs(1));
    assert_eq!(f.hosts[1].panes[&worker].typed, vec!["a long task"]);

    let s = f.call(0, lead, stop(&worker));
    assert_eq!(
        f.response(0, s),
        Some(&Response::Stopped {
            target: worker.clone()
        })
    );
    assert!(!f.hosts[1].panes.contains_key(&worker), "b closed the pane");
    assert!(
        deleted_queues(&f, 1).contains(&format!("test.agent.{worker}.inbox.v2")),
        "b deleted the member's inbox"
    );
    let (o, body) = outcome(f.response(0, task)).expect("the open brief ended");
    assert_eq!(o, Outcome::WorkerFailed);
    let body = body.unwrap_or_default();
    assert!(
        body.contains(&format!("stopped by {LEAD} on a")),
        "ABANDONED names who stopped it: {body}"
    );
    assert!(!in_roster(&f, 0, &worker));
    assert!(f
        .events(1)
        .any(|e| matches!(e, Event::Stopping { gid, .. } if gid == &worker)));
    assert_eq!(f.broker.unacked_total(), 0, "the STOP was acked");
}

/// A STOP the broker redelivers (its ack lost with b's connection) closes nothing twice and
/// never answers `not_found`: while the pane closes it joins the first; after, b tells the
/// member's leave again.
#[test]
fn a_redelivered_stop_is_idempotent() {
    let (mut f, lead, worker) = two_hosts();
    f.partitioned.insert(1);
    let s = f.call(0, lead, stop(&worker));
    let control = "test.control.b";
    let m = f.stalled_copy(1, control).expect("the STOP is on its way");
    f.partitioned.remove(&1);
    f.settle();
    assert_eq!(
        f.response(0, s),
        Some(&Response::Stopped {
            target: worker.clone()
        })
    );
    let closes = |f: &Fleet| {
        f.hosts[1]
            .outputs
            .iter()
            .filter(|o| matches!(o, fleet_core::Output::ClosePane { gid } if gid == &worker))
            .count()
    };
    assert_eq!(closes(&f), 1);
    let failed_before = published(&f, 1, Kind::Failed);
    let presence_before = published(&f, 1, Kind::Presence);
    f.deliver_forged(1, control, m, true);
    assert_eq!(closes(&f), 1, "no second close");
    assert_eq!(
        published(&f, 1, Kind::Failed),
        failed_before,
        "no not_found for a member it stopped"
    );
    assert_eq!(
        published(&f, 1, Kind::Presence),
        presence_before + 1,
        "its leave told again"
    );
}

/// A replay of a captured STOP (a first delivery of a msgId already admitted) is refused by
/// the replay record, like any replay-guarded kind.
#[test]
fn a_replayed_stop_is_refused() {
    let (mut f, lead, worker) = two_hosts();
    f.partitioned.insert(1);
    f.call(0, lead, stop(&worker));
    let m = f.stalled_copy(1, "test.control.b").expect("on its way");
    f.partitioned.remove(&1);
    f.settle();
    f.deliver_forged(1, "test.control.b", m, false);
    assert!(codes(&f, 1).contains(&RejectCode::Replayed));
}

/// Control is honoured only from allowed gateways: a STOP (and a SPAWN) from a host b does not
/// allow is refused, and the requester's call says `not_allowed` at once.
#[test]
fn stop_and_spawn_from_a_host_not_allowed_answer_not_allowed() {
    let mut f = Fleet::with_control(2, core_config(), |i| match i {
        1 => BTreeSet::new(),
        _ => (0..2).map(host_name).collect(),
    });
    let lead = f.lead(0, LEAD);
    let worker = f.member(1, WORKER);
    f.advance(Duration::from_millis(10));
    let s = f.call(0, lead.clone(), stop(&worker));
    assert!(
        matches!(
            f.response(0, s),
            Some(Response::Error(CallError::NotAllowed { host, .. })) if host == &host_name(1)
        ),
        "{:?}",
        f.response(0, s)
    );
    assert!(f.hosts[1].panes.contains_key(&worker), "nothing closed");
    assert!(codes(&f, 1).contains(&RejectCode::NotAllowed));

    let sp = f.call(
        0,
        lead,
        Request::Spawn {
            host: Some(host_name(1)),
            spec: fleet_core::SpawnSpec {
                profile: "claude".into(),
                ..Default::default()
            },
        },
    );
    assert!(matches!(
        f.response(0, sp),
        Some(Response::Error(CallError::NotAllowed { .. }))
    ));
    assert!(f.spawned.is_empty());
}

/// What a peer off the allowlist sends is refused before the replay record takes it: STOPs
/// past `seen_capacity` from a host b does not allow leave b's record empty, and a genuine
/// brief after them is typed. Before, admission recorded each msgId ahead of the allowlist,
/// and the brief was refused `replay_record_full` — for as long as the STOPs' `expiresAt`.
#[test]
fn refused_control_never_fills_the_replay_record() {
    let cfg = fleet_core::CoreConfig {
        seen_capacity: 2,
        ..core_config()
    };
    let mut f = Fleet::with_control(2, cfg, |i| match i {
        1 => BTreeSet::new(),
        _ => (0..2).map(host_name).collect(),
    });
    let lead = f.lead(0, LEAD);
    let worker = f.member(1, WORKER);
    f.advance(Duration::from_millis(10));
    for _ in 0..3 {
        f.call(0, lead.clone(), stop(&worker));
    }
    assert!(codes(&f, 1).contains(&RejectCode::NotAllowed));
    assert!(f.kept(1).is_empty(), "nothing refused is recorded");
    f.call(0, lead, send(&worker, "a genuine brief", false));
    f.set_status(1, &worker, fleet_core::AgentStatus::Idle);
    f.settle();
    assert!(!codes(&f, 1).contains(&RejectCode::RecordFull));
    assert_eq!(
        f.hosts[1].panes.typed(&worker),
        ["a genuine brief".to_string()]
    );
}

/// A signed message claiming to live longer than `max_expiry_ms` is refused
/// (`expiry_too_far`) and recorded nowhere.
#[test]
fn an_expiry_too_far_ahead_is_refused() {
    let (mut f, _lead, worker) = two_hosts();
    let a_key = Keyring::new(host_name(0), [1; 32], &BTreeMap::new()).expect("a's key");
    let body = serde_json::to_vec(&serde_json::json!({"target": worker})).expect("json");
    let mut env = envelope(Kind::Stop, 9, LEAD, "b", &body);
    env.expires_at = u64::try_from(i64::MAX).unwrap_or(u64::MAX);
    a_key.sign(&mut env);
    f.deliver_forged(1, "test.control.b", raw("b", &env), false);
    assert!(
        codes(&f, 1).contains(&RejectCode::ExpiryTooFar),
        "{:?}",
        codes(&f, 1)
    );
    assert!(f.kept(1).is_empty());
    assert!(f.hosts[1].panes.contains_key(&worker), "nothing closed");
}

/// `not_found`: at once for a gid no roster shows; from the target for a member it does not
/// serve and has not seen go lately (a STOP redelivered long after), as a typed refusal. A
/// member whose pane died unseen by the requester is answered `stopped`: its host tells its
/// leave again.
#[test]
fn stopping_what_no_host_serves_is_not_found() {
    let (mut f, lead, worker) = two_hosts();
    let nobody = SessionId::new("99999999-9999-4999-8999-999999999999");
    let s = f.call(0, lead.clone(), stop(&nobody));
    assert_eq!(
        f.response(0, s),
        Some(&Response::Error(CallError::NotFound {
            target: nobody,
            departed: None
        }))
    );
    assert_eq!(published(&f, 0, Kind::Stop), 0, "nobody was asked");

    // b's member goes; a never hears its leave, and asks b to stop it.
    f.partitioned.insert(0);
    f.input(
        1,
        Input::PaneGone {
            target: worker.clone(),
        },
    );
    f.settle();
    while f.take_stalled(0, "test.roster.a").is_some() {}
    f.partitioned.remove(&0);
    f.settle();
    assert!(in_roster(&f, 0, &worker), "a still shows it");
    f.partitioned.insert(1);
    let s = f.call(0, lead, stop(&worker));
    let control = "test.control.b";
    assert!(f.stalled_copy(1, control).is_some(), "b was asked");
    f.partitioned.remove(&1);
    f.settle();
    assert_eq!(
        f.response(0, s),
        Some(&Response::Stopped {
            target: worker.clone()
        })
    );

    // A STOP (signed by a) naming a gid b never served: refused `not_found`, typed.
    let a_key = Keyring::new(host_name(0), [1; 32], &BTreeMap::new()).expect("a's key");
    let body = serde_json::to_vec(&serde_json::json!({"target": nobody_else()})).expect("json");
    let mut env = envelope(Kind::Stop, 7, LEAD, "b", &body);
    a_key.sign(&mut env);
    let before = published(&f, 1, Kind::Failed);
    f.deliver_forged(1, control, raw("b", &env), false);
    assert_eq!(published(&f, 1, Kind::Failed), before + 1);
    let refusal = f
        .broker_ops(1)
        .filter_map(|op| match op {
            BrokerOp::Publish { headers, body, .. }
                if headers.get("kind")
                    == Some(&fleet_core::envelope::HeaderValue::Str("FAILED".into())) =>
            {
                Some(Refusal::parse(body))
            }
            _ => None,
        })
        .last()
        .expect("a refusal");
    assert_eq!(refusal.code, RefusalCode::NotFound, "{refusal:?}");
}

/// A lead is not a member: `fleet_stop` refuses it, here or on another host.
#[test]
fn a_lead_is_not_stopped() {
    let (mut f, lead, _) = two_hosts();
    f.lead(1, B_LEAD);
    f.advance(Duration::from_millis(10));
    let b_lead = SessionId::new(B_LEAD);
    let s = f.call(0, lead.clone(), stop(&b_lead));
    assert!(matches!(
        f.response(0, s),
        Some(Response::Error(CallError::InvalidArgument { .. }))
    ));
    let own = SessionId::new(LEAD);
    let s = f.call(0, lead, stop(&own));
    assert!(matches!(
        f.response(0, s),
        Some(Response::Error(CallError::InvalidArgument { .. }))
    ));
    assert_eq!(published(&f, 0, Kind::Stop), 0, "nothing went out");
}

/// With the broker down a remote stop fails fast, and nothing waits on it.
#[test]
fn a_remote_stop_with_the_broker_down_is_broker_unavailable() {
    let (mut f, lead, worker) = two_hosts();
    f.cut(0);
    let s = f.call(0, lead, stop(&worker));
    assert_eq!(
        f.response(0, s),
        Some(&Response::Error(CallError::BrokerUnavailable))
    );
}

/// A STOP nobody answers (b's link stalls) is `stop_unconfirmed` at its bound — never hung.
#[test]
fn an_unanswered_stop_is_unconfirmed_at_its_bound() {
    let (mut f, lead, worker) = two_hosts();
    f.partitioned.insert(1);
    let s = f.call(0, lead, stop(&worker));
    f.advance(Duration::from_millis(29_000));
    assert_eq!(f.response(0, s), None, "still within its bound");
    f.advance(Duration::from_millis(1_500));
    assert!(matches!(
        f.response(0, s),
        Some(Response::Error(CallError::StopUnconfirmed { target, .. })) if target == &worker
    ));
}

/// A member still in its readiness gate is stopped too: its spawn fails, saying why.
#[test]
fn a_member_still_spawning_is_stopped_and_its_spawn_fails() {
    let mut f = Fleet::new(2);
    let lead = f.lead(0, LEAD);
    f.advance(Duration::from_millis(10));
    f.auto_ready = false;
    let sp = f.call(
        0,
        lead.clone(),
        Request::Spawn {
            host: None,
            spec: fleet_core::SpawnSpec {
                profile: "claude".into(),
                ..Default::default()
            },
        },
    );
    let gid = f.spawned[0].1.clone();
    let s = f.call(0, lead, stop(&gid));
    assert_eq!(f.response(0, s), Some(&Response::Stopped { target: gid }));
    assert!(matches!(
        f.response(0, sp),
        Some(Response::Error(CallError::SpawnFailed { reason })) if reason.contains("stopped")
    ));
}

/// A process that outlives its stopped pane still holds its token: what it says now is
/// refused (`pane_gone`), never held as an orphan for whichever lead drains next.
#[test]
fn a_stopped_member_that_still_calls_is_refused() {
    let (mut f, lead, worker) = two_hosts();
    let task = f.call(0, lead.clone(), send(&worker, "work", true));
    f.advance(Duration::from_secs(1));
    let s = f.call(0, lead, stop(&worker));
    assert!(matches!(f.response(0, s), Some(Response::Stopped { .. })));
    assert!(outcome(f.response(0, task)).is_some());
    let zombie = fleet_core::Principal::worker(worker.clone());
    for request in [
        Request::Reply {
            content: "done: work".into(),
        },
        Request::Ask {
            question: "still there?".into(),
            timeout_ms: None,
        },
    ] {
        let c = f.call(1, zombie.clone(), request);
        assert_eq!(
            f.response(1, c),
            Some(&Response::Error(CallError::PaneGone {
                target: worker.clone()
            }))
        );
    }
    assert_eq!(published(&f, 1, Kind::Reply), 0, "nothing went out for it");
}

/// A STOP that waits while its target's host restarts ends consistently: `stopped` only of a
/// pane that closed, `stop_unconfirmed` of one that lives. (The ordering that broke this in
/// the simulation — the restarted host's first snapshot, without the member it had not yet
/// adopted, read as the member's leave — is pinned by `sim/tests/multi.rs`.)
#[test]
fn a_restart_is_not_taken_for_a_stopped_member() {
    let (mut f, lead, worker) = two_hosts();
    f.cut(1);
    let s = f.call(0, lead, stop(&worker));
    f.advance(Duration::from_millis(100));
    f.restart(1, &[]);
    f.advance(Duration::from_secs(31));
    let alive = f.hosts[1].panes.contains_key(&worker);
    match f.response(0, s) {
        Some(Response::Stopped { .. }) => assert!(!alive, "told stopped, but the pane lives"),
        Some(Response::Error(CallError::StopUnconfirmed { .. })) => assert!(alive),
        other => panic!("expected stopped or stop_unconfirmed, got {other:?}"),
    }
}
