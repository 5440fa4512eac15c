//! Holes a hostile peer or broker client could use, each closed by a rule of the core and
//! pinned here by a test that failed before it: a compromised gateway `c` (a valid key, lying)
//! answering delegations that are not its own, claiming another host's gid, or a client with
//! broker credentials and no key binding queues where they do not belong.

use super::*;
use fleet_core::broker::{Binding, Topology};
use fleet_core::testing::broker::ConnId;

const ROGUE: &str = "66666666-6666-4666-8666-666666666666";

/// Three hosts: a lead on a, a worker on b, and a member on c — whose gateway lies.
fn with_a_liar() -> (Fleet, Principal, SessionId, Keyring) {
    let mut f = Fleet::new(3);
    let lead = f.lead(0, LEAD);
    let worker = f.member(1, WORKER);
    f.member(2, ROGUE);
    f.advance(Duration::from_millis(10));
    let c = Keyring::new(host_name(2), [3; 32], &BTreeMap::new()).expect("c's key");
    (f, lead, worker, c)
}

/// The msgId of the last `kind` host `h` published: what anyone reading the broker learns.
fn last_published(f: &Fleet, h: usize, kind: Kind) -> MsgId {
    f.broker_ops(h)
        .filter_map(|op| match op {
            BrokerOp::Publish { headers, .. } => Envelope::from_parts(headers, Vec::new()).ok(),
            _ => None,
        })
        .filter(|e| e.kind() == kind)
        .last()
        .map(|e| e.msg_id)
        .expect("published")
}

/// c signs `env` as itself and puts it into `queue`, routed by `key`.
fn from_c(f: &mut Fleet, c: &Keyring, mut env: Envelope, queue: &str, key: &str) {
    c.sign(&mut env);
    f.broker.push(queue, raw(key, &env));
    f.settle();
}

fn inbox(gid: &str) -> String {
    format!("test.agent.{gid}.inbox.v2")
}

/// A peer that learns a brief's msgId cannot end, answer or advance that delegation: REPLY,
/// FAILED, ABANDONED, ASK, INJECTED and TOO_LATE naming it by `re` are refused from anyone
/// but the member it went to (`not_counterpart`) — even a `_gateway` report, unless it comes
/// from that member's own host. The genuine reply still ends it.
#[test]
fn only_the_member_a_brief_went_to_can_answer_it() {
    let (mut f, lead, worker, c) = with_a_liar();
    let call = f.call(0, lead, send(&worker, "the real task", true));
    f.advance(Duration::from_secs(1));
    let brief = last_published(&f, 0, Kind::Send);
    let kinds = [
        (Kind::Reply, ROGUE),
        (Kind::Failed, ROGUE),
        (Kind::Failed, "_gateway"),
        (Kind::Abandoned, ROGUE),
        (Kind::Ask, ROGUE),
        (Kind::Injected, ROGUE),
        (Kind::TooLate, ROGUE),
    ];
    for (i, (kind, from)) in kinds.into_iter().enumerate() {
        let refs = Refs {
            re: Some(brief),
            turn: (kind == Kind::Ask).then(|| fleet_core::TurnId(uuid::Uuid::from_u128(7))),
            outcome: match kind {
                Kind::Reply => Some(Outcome::Replied),
                Kind::Failed => Some(Outcome::WorkerFailed),
                _ => None,
            },
            spawn_id: None,
        };
        let (id, body) = (0x900 + i as u128, b"forged: all done");
        let env = envelope_with(kind, refs, id, from, LEAD, body);
        from_c(&mut f, &c, env, &inbox(LEAD), LEAD);
    }
    assert_eq!(codes(&f, 0), vec![RejectCode::NotCounterpart; 7]);
    assert_eq!(f.response(0, call), None, "nothing the liar sent ended it");
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Reply {
            content: "genuinely done".into(),
        },
    );
    assert_eq!(
        outcome(f.response(0, call)),
        Some((Outcome::Replied, Some("genuinely done".into())))
    );
}

/// A spawn's FAILED counts only from the gateway of the host it was sent to.
#[test]
fn only_the_host_a_spawn_went_to_can_fail_it() {
    let (mut f, lead, _worker, c) = with_a_liar();
    f.auto_ready = false;
    let call = f.call(0, lead, spawn(Some(1), "claude", None));
    let spawn_msg = last_published(&f, 0, Kind::Spawn);
    let refs = Refs {
        re: Some(spawn_msg),
        outcome: Some(Outcome::WorkerFailed),
        ..Refs::default()
    };
    let env = envelope_with(
        Kind::Failed,
        refs,
        0x777,
        "_gateway",
        LEAD,
        b"no such profile",
    );
    from_c(&mut f, &c, env, &inbox(LEAD), LEAD);
    assert_eq!(codes(&f, 0), vec![RejectCode::NotCounterpart]);
    assert_eq!(f.response(0, call), None, "still waiting for b");
    let gid = f.spawned[0].1.clone();
    f.input(
        1,
        Input::MemberConnected {
            target: gid.clone(),
        },
    );
    f.settle();
    assert_eq!(spawned(f.response(0, call)).map(|s| s.0), Some(gid));
}

/// A member's open question is closed by NO_WAITER only from the lead it was asked of: a
/// liar's NO_WAITER leaves it open, and the real answer still reaches the member.
#[test]
fn only_the_lead_asked_can_say_no_one_waits() {
    let (mut f, lead, worker, c) = with_a_liar();
    let call = f.call(0, lead.clone(), send(&worker, "task", true));
    f.advance(Duration::from_secs(1));
    f.set_status(1, &worker, AgentStatus::Working);
    f.advance(Duration::from_secs(1));
    let ask = f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Ask {
            question: "which branch?".into(),
            timeout_ms: Some(60_000),
        },
    );
    let turn = match f.response(0, call) {
        Some(Response::Outcome {
            outcome: Outcome::Question,
            turn_id: Some(t),
            ..
        }) => *t,
        other => panic!("expected the question at the lead, got {other:?}"),
    };
    let refs = Refs {
        turn: Some(turn),
        ..Refs::default()
    };
    let env = envelope_with(Kind::NoWaiter, refs, 0x555, ROGUE, WORKER, b"");
    from_c(&mut f, &c, env, &inbox(WORKER), WORKER);
    assert_eq!(codes(&f, 1), vec![RejectCode::NotCounterpart]);
    assert_eq!(f.response(1, ask), None, "the question is still open");
    f.call(
        0,
        lead,
        Request::Answer {
            turn_id: turn,
            content: "main".into(),
            wait: true,
            timeout_ms: Some(60_000),
            asked_by: None,
        },
    );
    assert!(matches!(
        f.response(1, ask),
        Some(Response::Ask {
            outcome: AskOutcome::Answered,
            answer: Some(a),
            ..
        }) if a == "main"
    ));
}

/// A signed presence from another host cannot take over a gid bound to b while b's
/// heartbeats are fresh: a's roster keeps the worker on b.
#[test]
fn presence_cannot_take_over_a_live_binding() {
    let (mut f, _lead, worker, c) = with_a_liar();
    let body =
        fleet_core::roster::Presence::v1_0(fleet_core::roster::EntityKind::Member, None, None)
            .to_body();
    let key = format!("roster.c.{WORKER}");
    let mut env = envelope(Kind::Presence, 0x444, WORKER, &key, &body);
    c.sign(&mut env);
    f.broker.push("test.roster.a", raw(&key, &env));
    f.settle();
    assert!(
        codes(&f, 0).contains(&RejectCode::GidClaimed),
        "{:?}",
        codes(&f, 0)
    );
    let host = f.hosts[0]
        .gw
        .roster()
        .into_iter()
        .find(|r| r.gid == worker)
        .map(|r| r.host.to_string());
    assert_eq!(host.as_deref(), Some("b"));
}

/// A broadcast copy is typed only into a member's inbox, and only for all or its own group:
/// a client with broker credentials that binds a lead's inbox to `broadcast.#` gets the lead
/// nothing typed; a spawn cannot join the group `#`.
#[test]
fn broadcasts_reach_only_member_inboxes_of_their_group() {
    let (mut f, lead, worker, _c) = with_a_liar();
    let rogue = ConnId(99);
    f.broker.connect(rogue);
    let bind = Topology {
        bindings: vec![Binding {
            queue: inbox(LEAD),
            exchange: Exchange::Msg,
            key: "broadcast.#".into(),
        }],
        ..Topology::default()
    };
    f.broker
        .apply(rogue, BrokerOp::Declare(bind))
        .expect("bound");
    let b_lead = f.lead(1, B_LEAD);
    f.call(
        1,
        b_lead,
        Request::Broadcast {
            group: None,
            content: "everyone: stop".into(),
        },
    );
    f.advance(Duration::from_secs(2));
    assert_eq!(f.hosts[1].panes[&worker].typed, vec!["everyone: stop"]);
    assert_eq!(
        codes(&f, 0),
        vec![RejectCode::Misrouted],
        "the lead's copy is refused"
    );
    let c = f.call(0, lead, spawn(Some(1), "claude", Some("#")));
    assert!(matches!(
        f.response(0, c),
        Some(Response::Error(CallError::InvalidArgument { .. }))
    ));
}

/// A brief captured off the broker and replayed after the worker's gateway restarted: the
/// replay record the old process kept (`Output::Remember`, given back as
/// `Input::ReplayRecord`) refuses it, where the first build's in-memory seen-set had forgotten
/// it and typed it again.
#[test]
fn a_brief_replayed_after_the_workers_restart_is_refused_by_the_kept_record() {
    let (mut f, lead, worker) = two_hosts();
    let inbox = format!("test.agent.{worker}.inbox.v2");
    f.partitioned.insert(1);
    f.call(0, lead, send(&worker, "task", false));
    let captured = f.stalled_copy(1, &inbox).expect("on its way to b");
    f.partitioned.remove(&1);
    f.advance(Duration::from_secs(1));
    assert_eq!(f.hosts[1].panes[&worker].typed, vec!["task"]);
    let kept = f.kept(1);
    assert_eq!(kept.len(), 1, "the admitted brief was kept");
    // The member's turn ends; after the restart its pane is adopted and ready again.
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Reply {
            content: "done".into(),
        },
    );
    f.advance(Duration::from_secs(1));
    f.restart_keeping(1, &[], kept);
    f.advance(Duration::from_secs(2));
    f.broker.push(&inbox, captured);
    f.advance(Duration::from_secs(2));
    assert_eq!(
        f.hosts[1].panes[&worker].typed,
        vec!["task"],
        "typed once\n{}",
        f.trace(1)
    );
    assert!(
        codes(&f, 1).contains(&RejectCode::Replayed),
        "{:?}",
        codes(&f, 1)
    );
}

/// A task restored running after its lead's gateway restarted takes its result from its
/// assignee only: a liar that learned the brief's msgId cannot end it; the member's own reply,
/// sent after the restart, does — to review, with its words.
#[test]
fn a_restored_task_takes_its_result_from_its_assignee_only() {
    use fleet_core::tasks::{NewTask, TaskId, TaskState};
    let (mut f, lead, worker, c) = with_a_liar();
    let task = NewTask {
        title: "the chain's first".into(),
        brief: "the real task".into(),
        assignee: worker.clone(),
        deps: vec![],
        timeout_ms: Some(60_000),
    };
    f.call(0, lead.clone(), Request::TaskAdd { task });
    f.advance(Duration::from_secs(1));
    assert_eq!(f.hosts[1].panes[&worker].typed, vec!["the real task"]);
    let brief = last_published(&f, 0, Kind::Send);
    let lists = f.kept_tasks(0);
    let leads: Vec<SessionId> = lead.session.iter().cloned().collect();
    f.restart_with(0, &leads, Vec::new(), lists);
    f.advance(Duration::from_secs(1));

    let refs = Refs {
        re: Some(brief),
        turn: None,
        outcome: Some(Outcome::Replied),
        spawn_id: None,
    };
    let env = envelope_with(Kind::Reply, refs, 0x990, ROGUE, LEAD, b"forged: all done");
    from_c(&mut f, &c, env, &inbox(LEAD), LEAD);
    // (Parked until c's presence binds its member again, then judged.)
    f.advance(Duration::from_secs(3));
    assert!(
        codes(&f, 0).contains(&RejectCode::NotCounterpart),
        "{:?}\n{}",
        codes(&f, 0),
        f.trace(0)
    );
    let state = |f: &mut Fleet| {
        let call = f.call(
            0,
            lead.clone(),
            Request::Tasks {
                id: Some(TaskId(1)),
            },
        );
        match f.response(0, call) {
            Some(Response::Tasks { tasks }) => tasks
                .first()
                .map(|t| (t.state, t.result.clone()))
                .expect("one task"),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(state(&mut f), (TaskState::Running, None));

    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Reply {
            content: "genuinely done".into(),
        },
    );
    f.advance(Duration::from_secs(1));
    assert_eq!(
        state(&mut f),
        (TaskState::Review, Some("genuinely done".into())),
        "{}",
        f.trace(0)
    );
}
