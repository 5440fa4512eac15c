//! Gateways on the real RabbitMQ (127.0.0.1:5672, or `FLEET_AMQP_URI`): the production driver
//! loop and lapin port, two or three gateways in this process, each with the simulation's
//! herdr double (see `fleet_tests::gateways`). The user stories of ch. 9 across hosts, and a
//! connection the broker kills mid-flight with no reply lost and no brief typed twice.

use fleet_core::{Outcome, Request, Response, SessionId, TicketId};
use fleet_sim::agent::Behaviour;
use fleet_sim::host::SimHerdr;
use fleet_tests::gateways::{
    host, lead, lead_principal, member, test_config, Booted, TestFleet, TestGateway,
};
use fleet_tests::herdr_double::HerdrDouble;
use fleetd::herdr::launch::LaunchConfig;
use fleetd::herdr::{HerdrClient, HerdrConfig, Profile, ReportedState};
use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

/// The driver loop is not `Send`: each scenario runs on one thread, bounded.
fn scenario<F: Future<Output = ()>>(f: F) {
    fleet_tests::local_scenario(180, f);
}

async fn call(g: &TestGateway, request: Request) -> Response {
    let lead = lead_principal(g.index);
    match tokio::time::timeout(Duration::from_secs(90), g.handle.call(lead, request)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => panic!("gateway {} is gone: {e}", g.index),
        Err(_) => panic!("gateway {} did not answer within 90 s", g.index),
    }
}

fn send(target: SessionId, content: &str, wait: bool, timeout_ms: u64) -> Request {
    Request::Send {
        target,
        content: content.into(),
        wait,
        timeout_ms: Some(timeout_ms),
    }
}

/// Waits until gateway `g` lists every gid in `want` (and, with `exact`, nothing else of them).
async fn roster_has(g: &TestGateway, want: &[SessionId]) -> BTreeSet<SessionId> {
    let mut seen = BTreeSet::new();
    for _ in 0..100 {
        if let Response::Roster { rows } = call(g, Request::List).await {
            seen = rows.into_iter().map(|r| r.gid).collect();
            if want.iter().all(|w| seen.contains(w)) {
                return seen;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "gateway {} never listed {want:?}; it lists {seen:?}",
        g.index
    );
}

async fn start(tag: &str, members: Vec<Vec<Behaviour>>) -> TestFleet {
    let fleet = match TestFleet::start(tag, test_config(), members).await {
        Ok(f) => f,
        Err(e) => panic!("starting the fleet: {e} (is RabbitMQ running? .ci/run starts it)"),
    };
    if let Err(e) = fleet.connected().await {
        panic!("{e}");
    }
    fleet
}

/// Waits (bounded) until `g` holds an unacked delivery from `queue` — a SPAWN still in its
/// launch — then has the broker kill `g`'s connection, so the broker redelivers it.
async fn kill_while_held(g: &Booted, queue: &str) {
    for _ in 0..100 {
        if g.seen.borrow().held.values().any(|q| q == queue) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let Err(e) = g.kill_connection().await {
        panic!("{e}");
    }
}

/// How many deliveries from `queue` reached `g` marked redelivered.
fn redeliveries(g: &Booted, queue: &str) -> usize {
    g.seen
        .borrow()
        .deliveries
        .iter()
        .filter(|(q, again)| q == queue && *again)
        .count()
}

fn no_brief_typed_twice(fleet: &TestFleet) {
    let typed = fleet.typed();
    let distinct: BTreeSet<_> = typed.iter().collect();
    assert_eq!(
        distinct.len(),
        typed.len(),
        "a brief was typed twice: {typed:#?}"
    );
}

#[test]
fn u1_a_lead_delegates_across_hosts_and_gets_the_reply() {
    scenario(async {
        let fleet = start("u1", vec![vec![], vec![Behaviour::Replies]]).await;
        let (g0, worker) = (&fleet.gateways[0], member(1, 0));
        roster_has(g0, std::slice::from_ref(&worker)).await;
        let r = call(g0, send(worker.clone(), "write the parser", true, 60_000)).await;
        match r {
            Response::Outcome {
                outcome: Outcome::Replied,
                body: Some(body),
                ..
            } => assert_eq!(body, "done: write the parser"),
            other => panic!("expected REPLIED, got {other:?}"),
        }
        assert_eq!(fleet.gateways[1].herdr.typed(&worker).len(), 1);
        no_brief_typed_twice(&fleet);
        fleet.finish().await;
    });
}

#[test]
fn u2_a_question_comes_back_and_a_late_answer_is_too_late() {
    scenario(async {
        let fleet = start("u2", vec![vec![], vec![Behaviour::Asks, Behaviour::Asks]]).await;
        let g0 = &fleet.gateways[0];
        let (w0, w1) = (member(1, 0), member(1, 1));
        roster_has(g0, &[w0.clone(), w1.clone()]).await;

        // In time: the worker asks, the lead answers, the turn ends with the reply.
        let turn = match call(g0, send(w0.clone(), "pick a name", true, 60_000)).await {
            Response::Outcome {
                outcome: Outcome::Question,
                turn_id: Some(turn),
                ..
            } => turn,
            other => panic!("expected QUESTION, got {other:?}"),
        };
        let answer = Request::Answer {
            turn_id: turn,
            content: "call it fleet".into(),
            wait: true,
            timeout_ms: Some(60_000),
            asked_by: None,
        };
        match call(g0, answer).await {
            Response::Outcome {
                outcome: Outcome::Replied,
                body: Some(body),
                ..
            } => assert_eq!(body, "done: pick a name"),
            other => panic!("expected REPLIED after the answer, got {other:?}"),
        }

        // Too late: the worker's ask waits 6 s; the answer comes after it gave up.
        let turn = match call(g0, send(w1.clone(), "pick a color", true, 60_000)).await {
            Response::Outcome {
                outcome: Outcome::Question,
                turn_id: Some(turn),
                ..
            } => turn,
            other => panic!("expected QUESTION, got {other:?}"),
        };
        tokio::time::sleep(Duration::from_secs(8)).await;
        let late = Request::Answer {
            turn_id: turn,
            content: "blue".into(),
            wait: true,
            timeout_ms: Some(30_000),
            asked_by: None,
        };
        match call(g0, late).await {
            Response::Outcome {
                outcome: Outcome::StaleTurn,
                ..
            } => {}
            other => panic!("expected STALE_TURN (TOO_LATE), got {other:?}"),
        }
        // An answer is never typed into a pane.
        let typed = fleet.typed();
        assert!(
            typed
                .iter()
                .all(|(_, t)| !t.contains("blue") && !t.contains("call it fleet")),
            "{typed:?}"
        );
        no_brief_typed_twice(&fleet);
        fleet.finish().await;
    });
}

#[test]
fn u3_a_reply_after_the_wait_ended_is_held_and_drained() {
    scenario(async {
        let fleet = start("u3", vec![vec![], vec![Behaviour::Replies]]).await;
        let (g0, worker) = (&fleet.gateways[0], member(1, 0));
        roster_has(g0, std::slice::from_ref(&worker)).await;
        // The lead stops waiting long before the worker (2 s of work) replies.
        let r = call(g0, send(worker.clone(), "slow job", true, 300)).await;
        assert!(
            matches!(&r, Response::Outcome { outcome, .. } if *outcome != Outcome::Replied),
            "the wait should end before the reply: {r:?}"
        );
        let mut found = None;
        for _ in 0..100 {
            if let Response::Replies { replies } = call(
                g0,
                Request::Drain {
                    target: worker.clone(),
                },
            )
            .await
            {
                if let Some(h) = replies.into_iter().next() {
                    found = Some(h);
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let held = found.unwrap_or_else(|| panic!("the stranded reply never reached the lead"));
        assert!(format!("{held:?}").contains("done: slow job"), "{held:?}");
        no_brief_typed_twice(&fleet);
        fleet.finish().await;
    });
}

#[test]
fn u4_a_spawn_on_another_host_survives_a_redelivered_spawn() {
    scenario(async {
        let fleet = start("u4", vec![vec![], vec![]]).await;
        let (g0, g1) = (&fleet.gateways[0], &fleet.gateways[1]);
        g1.herdr.set_launch_delay(Duration::from_secs(6));
        // gw1's heartbeat (which advertises its profiles) has reached gw0.
        roster_has(g0, &[lead(1)]).await;
        let handle = g0.handle.clone();
        let spawn = tokio::task::spawn_local(async move {
            handle
                .call(
                    lead_principal(0),
                    Request::Spawn {
                        host: Some(host(1)),
                        spec: fleet_core::SpawnSpec {
                            profile: "claude".into(),
                            ..Default::default()
                        },
                    },
                )
                .await
        });
        // The SPAWN is in gw1's hands, unacked while its pane launches (6 s here): kill that
        // connection (rabbitmqctl takes a second or two) so the broker redelivers it.
        let control = fleet_core::broker::Names::new(&fleet.ns).control(&host(1));
        kill_while_held(g1, &control).await;
        let gid = match tokio::time::timeout(Duration::from_secs(90), spawn).await {
            Ok(Ok(Ok(Response::Spawned { gid, host: h }))) => {
                assert_eq!(h, host(1));
                gid
            }
            other => panic!("expected SPAWNED, got {other:?}"),
        };
        assert!(
            redeliveries(g1, &control) >= 1,
            "the SPAWN was never redelivered: the kill came too late"
        );
        assert_eq!(
            g1.herdr.gids(),
            vec![gid.clone()],
            "exactly one pane on gw1"
        );
        assert!(
            g1.herdr.log.borrow().duplicates.is_empty(),
            "launched twice"
        );
        assert!(
            g0.herdr.gids().is_empty(),
            "nothing spawned on the lead's host"
        );
        roster_has(g0, std::slice::from_ref(&gid)).await;
        match call(g0, send(gid.clone(), "first task", true, 60_000)).await {
            Response::Outcome {
                outcome: Outcome::Replied,
                ..
            } => {}
            other => panic!("the spawned member should answer, got {other:?}"),
        }
        no_brief_typed_twice(&fleet);
        fleet.finish().await;
    });
}

#[test]
fn u5_the_roster_converges_and_a_gone_host_expires() {
    scenario(async {
        let mut fleet = start(
            "u5",
            vec![
                vec![Behaviour::Replies],
                vec![Behaviour::Replies],
                vec![Behaviour::Replies],
            ],
        )
        .await;
        let all = [member(0, 0), member(1, 0), member(2, 0)];
        for g in &fleet.gateways {
            roster_has(g, &all).await;
        }
        // gw2 stops; its member leaves every other roster within the presence TTL (4 s here).
        fleet.gateways[2].shutdown().await;
        let gone = member(2, 0);
        let mut left = false;
        for _ in 0..60 {
            let seen = roster_has(&fleet.gateways[0], &all[..2]).await;
            if !seen.contains(&gone) {
                left = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert!(left, "gw2's member never expired from gw0's roster");
        let seen = roster_has(&fleet.gateways[1], &all[..2]).await;
        assert!(!seen.contains(&gone));
        fleet.finish().await;
    });
}

#[test]
fn u8_a_broadcast_reaches_every_member_once() {
    scenario(async {
        let fleet = start(
            "u8",
            vec![
                vec![Behaviour::CompletesSilently],
                vec![Behaviour::CompletesSilently, Behaviour::CompletesSilently],
            ],
        )
        .await;
        let g0 = &fleet.gateways[0];
        let members = [member(0, 0), member(1, 0), member(1, 1)];
        roster_has(g0, &members).await;
        let r = call(
            g0,
            Request::Broadcast {
                group: None,
                content: "freeze main".into(),
            },
        )
        .await;
        assert!(matches!(r, Response::Broadcast { .. }), "{r:?}");
        for _ in 0..100 {
            let typed = fleet.typed();
            let reached: BTreeSet<_> = typed
                .iter()
                .filter(|(_, t)| t.contains("freeze main"))
                .map(|(g, _)| g.clone())
                .collect();
            if reached.len() == members.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let typed = fleet.typed();
        for m in &members {
            let n = typed
                .iter()
                .filter(|(g, t)| g == m && t.contains("freeze main"))
                .count();
            assert_eq!(n, 1, "{m} saw the broadcast {n} times: {typed:#?}");
        }
        fleet.finish().await;
    });
}

#[test]
fn a_connection_killed_mid_flight_loses_no_reply_and_types_nothing_twice() {
    scenario(async {
        let workers = 4;
        let fleet = start("kill", vec![vec![], vec![Behaviour::Replies; workers]]).await;
        let (g0, g1) = (&fleet.gateways[0], &fleet.gateways[1]);
        let targets: Vec<SessionId> = (0..workers).map(|n| member(1, n)).collect();
        roster_has(g0, &targets).await;
        let mut tickets: Vec<(TicketId, String)> = Vec::new();
        for (n, t) in targets.iter().enumerate() {
            let brief = format!("job {n}");
            match call(g0, send(t.clone(), &brief, false, 120_000)).await {
                Response::Ticket(view) => tickets.push((view.ticket, brief)),
                other => panic!("expected a ticket, got {other:?}"),
            }
        }
        // The workers' host loses its connection while the briefs are being typed and worked
        // on; then the lead's host loses its own while the replies travel.
        tokio::time::sleep(Duration::from_millis(300)).await;
        if let Err(e) = g1.kill_connection().await {
            panic!("{e}");
        }
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        if let Err(e) = g0.kill_connection().await {
            panic!("{e}");
        }
        for (ticket, brief) in &tickets {
            let mut last = None;
            for _ in 0..300 {
                let r = call(g0, Request::Poll { ticket: *ticket }).await;
                if let Response::Ticket(view) = &r {
                    if view.outcome.is_some() {
                        last = Some(view.clone());
                        break;
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let view = last.unwrap_or_else(|| {
                panic!(
                    "{brief}: never ended; lead's host {:?}, workers' host {:?}, typed {:?}",
                    *g0.status.borrow(),
                    *g1.status.borrow(),
                    fleet.typed()
                )
            });
            assert_eq!(view.outcome, Some(Outcome::Replied), "{brief}: {view:?}");
            assert_eq!(
                view.body.as_deref(),
                Some(format!("done: {brief}").as_str())
            );
        }
        for t in &targets {
            assert_eq!(
                g1.herdr.typed(t).len(),
                1,
                "{t} was typed {:?}",
                g1.herdr.typed(t)
            );
        }
        no_brief_typed_twice(&fleet);
        fleet.finish().await;
    });
}

/// U4 with the production herdr client on the target host (over the herdr double): the SPAWN
/// is redelivered while the new `command` member sits in its readiness gate, and exactly one
/// pane comes of it — the reservation absorbs the copy, the label names the member — which
/// then takes a brief from the other host and replies.
#[test]
fn u4_on_herdr_a_redelivered_spawn_starts_one_pane_that_then_works() {
    scenario(async {
        let mut fleet = match TestFleet::new("u4h", test_config(), vec![vec![], vec![]]) {
            Ok(f) => f,
            Err(e) => panic!("{e}"),
        };
        match fleet.launch(0, SimHerdr::default(), 1).await {
            Ok(g) => fleet.gateways.push(g),
            Err(e) => panic!("starting gateway 0: {e} (is RabbitMQ running?)"),
        }
        let dir = std::env::temp_dir().join(format!("fleetd-u4h-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let d = HerdrDouble::start(&dir)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let launch = LaunchConfig::new(dir.join("members"), "http://127.0.0.1:7700/mcp", [3; 32]);
        let mut cfg = HerdrConfig::new(&d.path, launch);
        cfg.profiles
            .insert("claude".into(), Profile::command(&["sh", "-c", "cat"]));
        let client = HerdrClient::new(cfg);
        let mut g1 = match fleet.boot(1, client.clone(), 1, &[], &[]).await {
            Ok(b) => b,
            Err(e) => panic!("starting gateway 1: {e}"),
        };
        if let Err(e) = g1.connected().await {
            panic!("{e}");
        }
        // The member program reports itself idle 4 s after its pane appears: the SPAWN stays
        // unacked through that gate.
        let c = client.clone();
        let reporter = tokio::task::spawn_local(async move {
            for _ in 0..600 {
                let panes = c.api().pane_list().await.unwrap_or_default();
                let started = panes
                    .iter()
                    .find(|p| p.label.as_deref().is_some_and(|l| l.starts_with("fleet:")));
                if let Some(p) = started {
                    tokio::time::sleep(Duration::from_secs(4)).await;
                    let r = c
                        .api()
                        .report_agent(&p.pane_id, "sh", ReportedState::Idle)
                        .await;
                    assert!(r.is_ok(), "{r:?}");
                    return;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            panic!("no member pane appeared");
        });
        let g0 = &fleet.gateways[0];
        roster_has(g0, &[lead(1)]).await;
        let handle = g0.handle.clone();
        let spawn = tokio::task::spawn_local(async move {
            let request = Request::Spawn {
                host: Some(host(1)),
                spec: fleet_core::SpawnSpec {
                    profile: "claude".into(),
                    ..Default::default()
                },
            };
            handle.call(lead_principal(0), request).await
        });
        let control = fleet_core::broker::Names::new(&fleet.ns).control(&host(1));
        kill_while_held(&g1, &control).await;
        let gid = match tokio::time::timeout(Duration::from_secs(90), spawn).await {
            Ok(Ok(Ok(Response::Spawned { gid, .. }))) => gid,
            other => panic!("expected SPAWNED, got {other:?}"),
        };
        assert!(reporter.await.is_ok());
        assert!(
            redeliveries(&g1, &control) >= 1,
            "the SPAWN was never redelivered: the kill came too late"
        );
        let members: Vec<_> = d
            .state()
            .panes
            .values()
            .filter_map(|p| p.label.clone())
            .collect();
        assert_eq!(members, vec![format!("fleet:{gid}")], "exactly one pane");
        // The new member works: a brief from host 0, typed once, replied through gateway 1.
        let send = Request::Send {
            target: gid.clone(),
            content: "first job".into(),
            wait: true,
            timeout_ms: Some(60_000),
        };
        let handle = g0.handle.clone();
        let call =
            tokio::task::spawn_local(async move { handle.call(lead_principal(0), send).await });
        let label = format!("fleet:{gid}");
        let mut typed = false;
        for _ in 0..600 {
            if let Some((pane, p)) = d.pane_by_label(&label) {
                if p.typed == vec!["first job".to_string()] {
                    d.set_status(&pane, "working");
                    let r = g1
                        .handle
                        .call(
                            fleet_core::Principal::worker(gid.clone()),
                            Request::Reply {
                                content: "done: first job".into(),
                            },
                        )
                        .await;
                    assert!(matches!(r, Ok(Response::ReplyAccepted { .. })), "{r:?}");
                    d.set_status(&pane, "idle");
                    typed = true;
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(typed, "the brief never reached the member");
        match tokio::time::timeout(Duration::from_secs(60), call).await {
            Ok(Ok(Ok(Response::Outcome { outcome, body, .. }))) => {
                assert_eq!(outcome, Outcome::Replied);
                assert_eq!(body.as_deref(), Some("done: first job"));
            }
            other => panic!("expected REPLIED, got {other:?}"),
        }
        g1.shutdown().await;
        fleet.finish_with(&[gid]).await;
        let _ = std::fs::remove_dir_all(&dir);
    });
}

/// `queue_type` switched under a running fleet: gw1 comes back with quorum over the classic
/// queues it left. It keeps them as they are (counted in its status), connects once and stays
/// connected — no reconnect loop over the refused redeclares — and the fleet delegates as
/// before, gw0 still on classic beside it.
#[test]
fn switching_queue_types_keeps_the_queues_and_never_loops() {
    scenario(async {
        let mut fleet = start("qtype", vec![vec![], vec![Behaviour::Replies]]).await;
        let worker = member(1, 0);
        roster_has(&fleet.gateways[0], std::slice::from_ref(&worker)).await;
        let r = call(
            &fleet.gateways[0],
            send(worker.clone(), "before", true, 60_000),
        )
        .await;
        assert!(
            matches!(
                r,
                Response::Outcome {
                    outcome: Outcome::Replied,
                    ..
                }
            ),
            "{r:?}"
        );

        let herdr = fleet.gateways[1].herdr.clone();
        fleet.gateways[1].run.shutdown().await;
        fleet.queue_type = fleet_core::broker::QueueType::Quorum;
        let g1 = fleet
            .launch(1, herdr, 2)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        fleet.gateways[1] = g1;
        fleet.gateways[1]
            .connected()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let r = call(
            &fleet.gateways[0],
            send(worker.clone(), "after", true, 60_000),
        )
        .await;
        match r {
            Response::Outcome {
                outcome: Outcome::Replied,
                body: Some(body),
                ..
            } => assert_eq!(body, "done: after"),
            other => panic!("expected REPLIED, got {other:?}"),
        }
        let st = fleet.gateways[1].status.borrow().clone();
        // dlq, dlq.gw1, control.gw1, the member's inbox and held queue, the lead's two.
        assert!(st.kept_other_type >= 5, "{st:?}");
        assert!(st.connected, "{st:?}");
        assert_eq!(st.generation, 1, "one connection, never refused: {st:?}");
        no_brief_typed_twice(&fleet);
        fleet.finish().await;
    });
}
