//! Members are what they were spawned as (ch. 9): an ARCHITECT member delegates under the same
//! authz table as an architect lead — SEND, never SPAWN, STOP or DRAIN — and every roster
//! shows its role, cwd, ticket and charter receipt. And each lead owns its own work: another
//! lead's ticket, held result or question is unknown to it.

use super::harness::{host_name, Fleet};
use super::{outcome, send, spawned, two_hosts, LEAD, LOCAL_WORKER};
use fleet_core::authz::{Action, Role};
use fleet_core::{
    AgentStatus, CallError, Duration, MemberRole, Outcome, Output, Phase, Principal, Request,
    Response, SessionId, SpawnSpec,
};

const SECOND_LEAD: &str = "77777777-7777-4777-8777-777777777777";
const SHA: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn spawn_on(f: &mut Fleet, lead: &Principal, h: usize, spec: SpawnSpec) -> SessionId {
    let c = f.call(
        0,
        lead.clone(),
        Request::Spawn {
            host: Some(host_name(h)),
            spec,
        },
    );
    f.settle();
    spawned(f.response(0, c)).expect("spawned").0
}

fn denied(r: Option<&Response>) -> Option<(Role, Action)> {
    match r? {
        Response::Error(CallError::Denied { role, action }) => Some((*role, *action)),
        _ => None,
    }
}

/// U6's first half: an ARCHITECT spawned on b from a's lead delegates to a worker on a (its
/// brief is typed there) but may not spawn, stop or drain; a DEV member may not delegate.
#[test]
fn an_architect_member_delegates_but_never_spawns_stops_or_drains() {
    let mut f = Fleet::new(2);
    let lead = f.lead(0, LEAD);
    let worker = f.member(0, LOCAL_WORKER);
    f.advance(Duration::from_millis(10));
    let arch = spawn_on(
        &mut f,
        &lead,
        1,
        SpawnSpec::of("claude").role(MemberRole::Architect),
    );
    let dev = spawn_on(&mut f, &lead, 1, SpawnSpec::of("claude"));
    let as_arch = Principal::worker(arch.clone());

    let s = f.call(
        1,
        as_arch.clone(),
        send(&worker, "design the schema", false),
    );
    assert!(
        matches!(f.response(1, s), Some(Response::Ticket(_))),
        "{:?}",
        f.response(1, s)
    );
    f.advance(Duration::from_secs(1));
    assert_eq!(f.hosts[0].panes[&worker].typed, vec!["design the schema"]);

    for request in [
        Request::Spawn {
            host: None,
            spec: SpawnSpec::of("claude"),
        },
        Request::Stop {
            target: worker.clone(),
        },
        Request::Drain {
            target: worker.clone(),
        },
    ] {
        let action = request.action();
        let c = f.call(1, as_arch.clone(), request);
        assert_eq!(denied(f.response(1, c)), Some((Role::Architect, action)));
    }
    let c = f.call(1, Principal::worker(dev), send(&worker, "not yours", false));
    assert_eq!(denied(f.response(1, c)), Some((Role::Worker, Action::Send)));
}

/// Role, cwd, ticket and the charter receipt travel with the spawn and read the same on every
/// host; what a spawn may not carry is refused before anything starts.
#[test]
fn a_remote_spawn_outside_the_targets_cwd_roots_is_an_invalid_argument() {
    let mut f = Fleet::new(2);
    let lead = f.lead(0, LEAD);
    f.advance(Duration::from_millis(10));
    let spec = SpawnSpec {
        cwd: Some("/root/.ssh".into()),
        ..SpawnSpec::of("claude")
    };
    let c = f.call(
        0,
        lead,
        Request::Spawn {
            host: Some(host_name(1)),
            spec,
        },
    );
    f.settle();
    assert!(
        matches!(
            f.response(0, c),
            Some(Response::Error(CallError::InvalidArgument { reason })) if reason.contains("remote_cwd_roots")
        ),
        "{:?}",
        f.response(0, c)
    );
    assert!(!f.hosts[1]
        .outputs
        .iter()
        .any(|o| matches!(o, Output::SpawnPane { .. })));
}

#[test]
fn a_spawned_members_cwd_ticket_and_charter_show_on_every_host() {
    // The target lets a remote spawn pick a cwd under /srv (none by default).
    let cfg = fleet_core::CoreConfig {
        remote_cwd_roots: vec!["/srv".into()],
        ..super::harness::core_config()
    };
    let mut f = Fleet::with(3, cfg);
    let lead = f.lead(0, LEAD);
    f.advance(Duration::from_millis(10));
    f.charter = Some(SHA.into());
    let spec = SpawnSpec {
        cwd: Some("/srv/app".into()),
        ticket: Some("CB-308".into()),
        ..SpawnSpec::of("claude").role(MemberRole::Reviewer)
    };
    let gid = spawn_on(&mut f, &lead, 1, spec);
    assert!(f.hosts[1].outputs.iter().any(|o| matches!(
        o,
        Output::SpawnPane { gid: g, spec } if g == &gid && spec.cwd.as_deref() == Some("/srv/app")
    )));
    f.advance(Duration::from_secs(6));
    for h in 0..3 {
        let rows = f.hosts[h].gw.roster();
        let r = rows
            .iter()
            .find(|r| r.gid == gid)
            .unwrap_or_else(|| panic!("host {h} does not list {gid}"));
        assert_eq!(r.card.role, Some(MemberRole::Reviewer), "host {h}");
        assert_eq!(r.card.cwd.as_deref(), Some("/srv/app"), "host {h}");
        assert_eq!(r.card.ticket.as_deref(), Some("CB-308"), "host {h}");
        assert_eq!(r.card.charter.as_deref(), Some(SHA), "host {h}");
    }
    let spawned_before = f.spawned.len();
    for (spec, why) in [
        (
            SpawnSpec {
                cwd: Some("relative/dir".into()),
                ..SpawnSpec::of("claude")
            },
            "absolute path",
        ),
        (
            SpawnSpec {
                ticket: Some("CB-1\nrm -rf /".into()),
                ..SpawnSpec::of("claude")
            },
            "one line",
        ),
        (
            SpawnSpec {
                cwd: Some("/srv/app".into()),
                worktree: Some(fleet_core::Worktree {
                    repo: "https://git.example.com/app.git".into(),
                    commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
                }),
                ..SpawnSpec::of("claude")
            },
            "exclusive",
        ),
    ] {
        let c = f.call(
            0,
            lead.clone(),
            Request::Spawn {
                host: Some(host_name(1)),
                spec,
            },
        );
        match f.response(0, c) {
            Some(Response::Error(CallError::InvalidArgument { reason })) => {
                assert!(reason.contains(why), "{reason}")
            }
            other => panic!("expected invalid_argument, got {other:?}"),
        }
    }
    assert_eq!(f.spawned.len(), spawned_before, "nothing started");
}

/// Two leads on one gateway: a's second lead cannot poll the first's ticket, drain the
/// result held for it, or answer the question put to it; the first can.
#[test]
fn each_lead_collects_and_answers_only_its_own_work() {
    let (mut f, first, worker) = two_hosts();
    let second = f.lead(0, SECOND_LEAD);
    f.advance(Duration::from_millis(10));

    // A ticket.
    let s = f.call(0, first.clone(), send(&worker, "async work", false));
    let Some(Response::Ticket(t)) = f.response(0, s).cloned() else {
        panic!("{:?}", f.response(0, s));
    };
    let p = f.call(0, second.clone(), Request::Poll { ticket: t.ticket });
    assert_eq!(
        f.response(0, p),
        Some(&Response::Error(CallError::UnknownTicket))
    );
    let p = f.call(0, first.clone(), Request::Poll { ticket: t.ticket });
    assert!(
        matches!(f.response(0, p), Some(Response::Ticket(v)) if v.phase == Phase::Pending),
        "{:?}",
        f.response(0, p)
    );

    // A question put to the first lead: the second's answer is as if to no waiting turn.
    f.set_status(1, &worker, AgentStatus::Working);
    f.advance(Duration::from_secs(1));
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Ask {
            question: "which db?".into(),
            timeout_ms: None,
        },
    );
    f.advance(Duration::from_millis(100));
    let p = f.call(0, first.clone(), Request::Poll { ticket: t.ticket });
    let turn = match f.response(0, p) {
        Some(Response::Ticket(v)) if v.phase == Phase::Asking => v.turn_id.expect("a turn"),
        other => panic!("expected ASKING, got {other:?}"),
    };
    let answer = |turn_id| Request::Answer {
        turn_id,
        content: "postgres".into(),
        wait: false,
        timeout_ms: None,
        asked_by: None,
    };
    let a = f.call(0, second.clone(), answer(turn));
    assert_eq!(
        outcome(f.response(0, a)).map(|o| o.0),
        Some(Outcome::StaleTurn)
    );
    let a = f.call(0, first.clone(), answer(turn));
    assert!(
        matches!(f.response(0, a), Some(Response::Ticket(_))),
        "{:?}",
        f.response(0, a)
    );

    // A result that came after its blocking send timed out is held for the first lead only.
    let worker = f.member(1, "55555555-5555-4555-8555-555555555555");
    f.advance(Duration::from_millis(10));
    let c = f.call(
        0,
        first.clone(),
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
    f.advance(Duration::from_millis(100));
    let drain = |f: &mut Fleet, who: &Principal| {
        let d = f.call(
            0,
            who.clone(),
            Request::Drain {
                target: worker.clone(),
            },
        );
        match f.response(0, d) {
            Some(Response::Replies { replies }) => replies
                .iter()
                .map(|r| r.content.clone())
                .collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        }
    };
    assert!(drain(&mut f, &second).is_empty(), "not the second lead's");
    assert_eq!(drain(&mut f, &first), vec!["finally".to_string()]);
}
