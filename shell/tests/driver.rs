//! The driver loop end to end on one host, in virtual time. herdr itself cannot run here and
//! its socket client lands with its own issue, so `ScriptedHerdr` stands in for it in these
//! tests only: it answers the same operations the real port will, with a latency, over panes
//! whose agents the tests script.

use fleet_core::{
    AgentStatus, CoreConfig, Gateway, Instant, Outcome, Output, Principal, Request, Response,
    SessionId,
};
use fleetd::{
    Driver, HerdrError, HerdrPort, InjectFailure, NoBroker, Observer, PortFuture, Sample,
    TokioClock,
};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

#[derive(Clone, Debug)]
struct Pane {
    status: AgentStatus,
    screen: String,
    typed: Vec<String>,
    /// When each text landed, on the (virtual) clock.
    typed_at: Vec<tokio::time::Instant>,
}

#[derive(Clone, Default)]
struct ScriptedHerdr {
    panes: Rc<RefCell<BTreeMap<SessionId, Pane>>>,
    /// When set, a sample that finds the agent working is served at once and answered this
    /// late (a loaded host): the answer may reach the loop after newer ones.
    late_working: Rc<std::cell::Cell<Option<Duration>>>,
    /// Injects whose baseline read misses herdr's answer bound (a loaded host) before any of
    /// the text is sent.
    stalled_reads: Rc<std::cell::Cell<u32>>,
}

const LATENCY: Duration = Duration::from_millis(5);

impl ScriptedHerdr {
    fn add(&self, id: &str) -> SessionId {
        let id = SessionId::new(id);
        self.panes.borrow_mut().insert(
            id.clone(),
            Pane {
                status: AgentStatus::Idle,
                screen: "❯ ".into(),
                typed: Vec::new(),
                typed_at: Vec::new(),
            },
        );
        id
    }

    fn set(&self, id: &SessionId, status: AgentStatus) {
        if let Some(p) = self.panes.borrow_mut().get_mut(id) {
            p.status = status;
        }
    }

    fn typed_at(&self, id: &SessionId) -> Vec<tokio::time::Instant> {
        self.panes
            .borrow()
            .get(id)
            .map(|p| p.typed_at.clone())
            .unwrap_or_default()
    }

    /// Waits (in steps of a millisecond) until `id` has been typed into `n` times.
    async fn typed_count(&self, id: &SessionId, n: usize) {
        while self.typed(id).len() < n {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn typed(&self, id: &SessionId) -> Vec<String> {
        self.panes
            .borrow()
            .get(id)
            .map(|p| p.typed.clone())
            .unwrap_or_default()
    }
}

impl HerdrPort for ScriptedHerdr {
    fn sample(&self, target: &SessionId) -> PortFuture<Result<Sample, HerdrError>> {
        let (panes, target) = (self.panes.clone(), target.clone());
        let served = panes.borrow().get(&target).map(|p| p.status);
        if let (Some(late), Some(AgentStatus::Working)) = (self.late_working.get(), served) {
            return Box::pin(async move {
                tokio::time::sleep(late).await;
                Ok(Sample {
                    status: AgentStatus::Working,
                    screen: None,
                })
            });
        }
        Box::pin(async move {
            tokio::time::sleep(LATENCY).await;
            let panes = panes.borrow();
            let p = panes.get(&target).ok_or(HerdrError::PaneNotFound)?;
            Ok(Sample {
                status: p.status,
                screen: (p.status == AgentStatus::Unknown).then(|| p.screen.clone()),
            })
        })
    }

    fn inject(&self, target: &SessionId, text: &str) -> PortFuture<Result<String, InjectFailure>> {
        let (panes, target, text) = (self.panes.clone(), target.clone(), text.to_string());
        let stalled = self.stalled_reads.get();
        if stalled > 0 {
            self.stalled_reads.set(stalled - 1);
            return Box::pin(async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Err(
                    HerdrError::Unavailable("herdr did not answer pane.read within 5000 ms".into())
                        .into(),
                )
            });
        }
        Box::pin(async move {
            tokio::time::sleep(LATENCY).await;
            let mut panes = panes.borrow_mut();
            let p = panes.get_mut(&target).ok_or(HerdrError::PaneNotFound)?;
            let baseline = p.screen.clone();
            p.screen.push_str(&format!("\n❯ {text}"));
            p.typed.push(text);
            p.typed_at.push(tokio::time::Instant::now());
            Ok(baseline)
        })
    }

    fn read(&self, target: &SessionId) -> PortFuture<Result<String, HerdrError>> {
        let (panes, target) = (self.panes.clone(), target.clone());
        Box::pin(async move {
            tokio::time::sleep(LATENCY).await;
            let panes = panes.borrow();
            Ok(panes
                .get(&target)
                .ok_or(HerdrError::PaneNotFound)?
                .screen
                .clone())
        })
    }

    fn spawn(
        &self,
        gid: &SessionId,
        _spec: &fleet_core::SpawnSpec,
    ) -> PortFuture<Result<fleet_core::Launched, fleet_core::SpawnError>> {
        let (me, gid) = (self.clone(), gid.clone());
        Box::pin(async move {
            tokio::time::sleep(LATENCY).await;
            me.add(gid.as_str());
            Ok(fleet_core::Readiness::OnConnect.into())
        })
    }

    fn close(&self, gid: &SessionId) -> PortFuture<Result<(), HerdrError>> {
        let (panes, gid) = (self.panes.clone(), gid.clone());
        Box::pin(async move {
            panes.borrow_mut().remove(&gid);
            Ok(())
        })
    }
}

/// Records every output line, as the simulation's trace will.
#[derive(Clone, Default)]
struct Trace(Rc<RefCell<Vec<String>>>);

impl Observer for Trace {
    fn output(&mut self, now: Instant, output: &Output) {
        self.0.borrow_mut().push(format!("{now} {output}"));
    }
}

fn lead() -> Principal {
    Principal::primary("lead", Some(SessionId::new("lead-pane")))
}

fn gateway(cfg: CoreConfig) -> Gateway {
    Gateway::new(cfg, 7, Instant::ZERO).expect("valid config")
}

type QuietLoop = Driver<ScriptedHerdr, NoBroker, TokioClock>;

/// A loop over `herdr` with `cfg` that observes nothing: the driver, its handle, its calls.
fn quiet_loop(
    herdr: &ScriptedHerdr,
    cfg: CoreConfig,
) -> (
    QuietLoop,
    fleetd::Handle,
    tokio::sync::mpsc::Receiver<fleetd::ToLoop>,
) {
    let driver = Driver::new(
        gateway(cfg),
        herdr.clone(),
        NoBroker,
        TokioClock::new(),
        fleetd::Quiet,
    );
    let (handle, calls) = QuietLoop::channel();
    (driver, handle, calls)
}

/// A blocking send through the loop: the brief is typed when the pane is idle, the member
/// works and calls `fleet_reply`, and the send returns REPLIED — all in virtual time.
#[tokio::test(start_paused = true)]
async fn a_delegation_runs_through_the_loop_and_ends_replied() {
    let herdr = ScriptedHerdr::default();
    let w1 = herdr.add("w1");
    let trace = Trace::default();
    let driver = Driver::new(
        gateway(CoreConfig::default()),
        herdr.clone(),
        NoBroker,
        TokioClock::new(),
        trace.clone(),
    );
    let (handle, calls) = Driver::<ScriptedHerdr, NoBroker, TokioClock, Trace>::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let scenario = async {
        let agent = async {
            while herdr.typed(&w1).is_empty() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            herdr.set(&w1, AgentStatus::Working);
            tokio::time::sleep(Duration::from_secs(3)).await;
            let r = handle
                .call(
                    Principal::worker(w1.clone()),
                    Request::Reply {
                        content: "done: 3 files".into(),
                    },
                )
                .await;
            herdr.set(&w1, AgentStatus::Idle);
            r
        };
        let send = handle.call(
            lead(),
            Request::Send {
                target: w1.clone(),
                content: "fix the bug".into(),
                wait: true,
                timeout_ms: Some(60_000),
            },
        );
        let (sent, replied) = tokio::join!(send, agent);
        let _ = stop.send(());
        (sent, replied)
    };
    let (gw, (sent, replied)) = tokio::join!(driver.run(calls, stopped), scenario);
    assert_eq!(replied, Ok(Response::ReplyAccepted { held: None }));
    match sent {
        Ok(Response::Outcome { outcome, body, .. }) => {
            assert_eq!(outcome, Outcome::Replied);
            assert_eq!(body.as_deref(), Some("done: 3 files"));
        }
        other => panic!("expected REPLIED, got {other:?}"),
    }
    assert_eq!(herdr.typed(&w1), vec!["fix the bug"]);
    assert_eq!(gw.open_delegations(), 0);
    let trace = trace.0.borrow();
    assert!(
        trace.iter().any(|l| l.contains("event delivered w1")),
        "{trace:#?}"
    );
}

/// The lead's blocking sends `brief 1` … `brief n` to `target`, one after another: their
/// outcomes and bodies.
async fn blocking_briefs(
    handle: &fleetd::Handle,
    target: &SessionId,
    n: usize,
) -> Vec<(Outcome, Option<String>)> {
    let mut outcomes = Vec::new();
    for k in 1..=n {
        let send = Request::Send {
            target: target.clone(),
            content: format!("brief {k}"),
            wait: true,
            timeout_ms: Some(60_000),
        };
        match handle.call(lead(), send).await {
            Ok(Response::Outcome { outcome, body, .. }) => outcomes.push((outcome, body)),
            other => panic!("{other:?}"),
        }
    }
    outcomes
}

/// A wedged pane: the loop's own timers (no input arrives) drive the stall bound, and the send
/// ends WORKER_FAILED without anyone poking the loop.
#[tokio::test(start_paused = true)]
async fn the_loop_keeps_time_by_itself() {
    let herdr = ScriptedHerdr::default();
    let w1 = herdr.add("w1");
    let cfg = CoreConfig {
        stall_grace_polls: 4,
        ..CoreConfig::default()
    };
    let (driver, handle, calls) = quiet_loop(&herdr, cfg);
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let scenario = async {
        let wedge = async {
            while herdr.typed(&w1).is_empty() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            herdr.set(&w1, AgentStatus::Working);
            tokio::time::sleep(Duration::from_secs(1)).await;
            herdr.set(&w1, AgentStatus::Unknown);
        };
        let send = handle.call(
            lead(),
            Request::Send {
                target: w1.clone(),
                content: "task".into(),
                wait: true,
                timeout_ms: Some(600_000),
            },
        );
        let (sent, ()) = tokio::join!(send, wedge);
        let _ = stop.send(());
        sent
    };
    let started = tokio::time::Instant::now();
    let (_, sent) = tokio::join!(driver.run(calls, stopped), scenario);
    assert!(
        matches!(
            sent,
            Ok(Response::Outcome {
                outcome: Outcome::WorkerFailed,
                ..
            })
        ),
        "{sent:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "failed by the stall bound, not the send timeout"
    );
}

/// Shutting down answers every waiting call (here: a delegation still queued behind a busy
/// pane) instead of leaving callers hanging, and never types it.
#[tokio::test(start_paused = true)]
async fn shutdown_answers_waiting_calls() {
    let herdr = ScriptedHerdr::default();
    let w1 = herdr.add("w1");
    herdr.set(&w1, AgentStatus::Working);
    let (driver, handle, calls) = quiet_loop(&herdr, CoreConfig::default());
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let scenario = async {
        let send = handle.call(
            lead(),
            Request::Send {
                target: w1.clone(),
                content: "task".into(),
                wait: true,
                timeout_ms: Some(600_000),
            },
        );
        let stopper = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let _ = stop.send(());
        };
        let (sent, ()) = tokio::join!(send, stopper);
        sent
    };
    let (_, sent) = tokio::join!(driver.run(calls, stopped), scenario);
    match sent {
        Ok(Response::Outcome {
            outcome: Outcome::WorkerFailed,
            body,
            ..
        }) => assert!(body.unwrap_or_default().contains("shut down")),
        other => panic!("expected WORKER_FAILED on shutdown, got {other:?}"),
    }
    assert!(herdr.typed(&w1).is_empty(), "never typed into a busy pane");
}

/// A brief for an idle member is typed as soon as it arrives — the arrival asks for a fresh
/// sample at once — not at the next poll round (500 ms here).
#[tokio::test(start_paused = true)]
async fn a_brief_for_an_idle_member_is_typed_at_once() {
    let herdr = ScriptedHerdr::default();
    let w1 = herdr.add("w1");
    let (driver, handle, calls) = quiet_loop(&herdr, CoreConfig::default());
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let started = tokio::time::Instant::now();
    let scenario = async {
        let sent = handle
            .call(
                lead(),
                Request::Send {
                    target: w1.clone(),
                    content: "task".into(),
                    wait: false,
                    timeout_ms: Some(60_000),
                },
            )
            .await;
        herdr.typed_count(&w1, 1).await;
        let _ = stop.send(());
        sent
    };
    let (_, sent) = tokio::join!(driver.run(calls, stopped), scenario);
    assert!(matches!(sent, Ok(Response::Ticket(_))), "{sent:?}");
    let at = herdr.typed_at(&w1)[0] - started;
    // One sample and one inject, 5 ms each.
    assert!(at <= Duration::from_millis(15), "typed after {at:?}");
}

/// herdr on a loaded host misses its answer bound reading the baseline, before any of the
/// brief is sent: the brief is typed on the next injectable sample, once, and the send ends
/// REPLIED. Before, the send ended WORKER_FAILED (`inject_failed`) — seen in CI with three
/// real agents starting at once on two cores.
#[tokio::test(start_paused = true)]
async fn a_baseline_read_herdr_did_not_answer_is_tried_again() {
    let herdr = ScriptedHerdr::default();
    let w1 = herdr.add("w1");
    herdr.stalled_reads.set(1);
    let (driver, handle, calls) = quiet_loop(&herdr, CoreConfig::default());
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let scenario = async {
        let agent = async {
            let typed = herdr.typed_count(&w1, 1);
            tokio::time::timeout(Duration::from_secs(30), typed)
                .await
                .ok()?;
            herdr.set(&w1, AgentStatus::Working);
            tokio::time::sleep(Duration::from_secs(1)).await;
            let r = handle
                .call(
                    Principal::worker(w1.clone()),
                    Request::Reply {
                        content: "done".into(),
                    },
                )
                .await;
            herdr.set(&w1, AgentStatus::Idle);
            Some(r)
        };
        let send = handle.call(
            lead(),
            Request::Send {
                target: w1.clone(),
                content: "task".into(),
                wait: true,
                timeout_ms: Some(60_000),
            },
        );
        let (sent, replied) = tokio::join!(send, agent);
        let _ = stop.send(());
        (sent, replied)
    };
    let (_, (sent, replied)) = tokio::join!(driver.run(calls, stopped), scenario);
    assert!(
        matches!(
            sent,
            Ok(Response::Outcome {
                outcome: Outcome::Replied,
                ..
            })
        ),
        "{sent:?}"
    );
    assert_eq!(replied, Some(Ok(Response::ReplyAccepted { held: None })));
    assert_eq!(herdr.typed(&w1), vec!["task"], "typed once");
    assert_eq!(herdr.stalled_reads.get(), 0, "the first try stalled");
}

/// A member that replies the moment its brief is typed and goes idle — too fast for any
/// sample to see it WORKING — takes its lead's next brief within milliseconds: its reply
/// proves the pickup and herdr's hint that it went idle ends the turn. Before, each turn
/// waited out the pickup bound (8 idle samples, 4 s at the default poll).
#[tokio::test(start_paused = true)]
async fn back_to_back_fast_turns_wait_for_no_poll() {
    let herdr = ScriptedHerdr::default();
    let w1 = herdr.add("w1");
    let (driver, handle, calls) = quiet_loop(&herdr, CoreConfig::default());
    let (stop, stopped) = tokio::sync::oneshot::channel();
    const TURNS: usize = 3;
    let started = tokio::time::Instant::now();
    let scenario = async {
        let agent = async {
            for n in 1..=TURNS {
                herdr.typed_count(&w1, n).await;
                let reply = Request::Reply {
                    content: format!("done {n}"),
                };
                let r = handle.call(Principal::worker(w1.clone()), reply).await;
                assert_eq!(r, Ok(Response::ReplyAccepted { held: None }));
                // herdr's `pane.agent_status_changed` for the idle pane.
                herdr.set(&w1, AgentStatus::Idle);
                let hint = fleet_core::Input::StatusHint { target: w1.clone() };
                assert!(handle.tell(hint).await.is_ok());
            }
        };
        let lead = blocking_briefs(&handle, &w1, TURNS);
        let (outcomes, ()) = tokio::join!(lead, agent);
        let _ = stop.send(());
        outcomes
    };
    let (_, outcomes) = tokio::join!(driver.run(calls, stopped), scenario);
    let expected: Vec<_> = (1..=TURNS)
        .map(|n| (Outcome::Replied, Some(format!("done {n}"))))
        .collect();
    assert_eq!(outcomes, expected);
    assert_eq!(herdr.typed(&w1), vec!["brief 1", "brief 2", "brief 3"]);
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(100),
        "three turns took {took:?} of virtual time"
    );
}

/// A member still finishing its turn after `fleet_reply` is never typed into, whatever hints
/// arrive: the next brief waits for an injectable sample, and is typed within milliseconds of
/// the member going idle.
#[tokio::test(start_paused = true)]
async fn a_busy_member_is_never_typed_into() {
    let herdr = ScriptedHerdr::default();
    let w1 = herdr.add("w1");
    let (driver, handle, calls) = quiet_loop(&herdr, CoreConfig::default());
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let hint = || fleet_core::Input::StatusHint { target: w1.clone() };
    let scenario = async {
        let agent = async {
            herdr.typed_count(&w1, 1).await;
            herdr.set(&w1, AgentStatus::Working);
            let reply = Request::Reply {
                content: "done".into(),
            };
            let r = handle.call(Principal::worker(w1.clone()), reply).await;
            assert_eq!(r, Ok(Response::ReplyAccepted { held: None }));
            // Still writing its summary for two seconds; herdr hints all the while.
            for _ in 0..20 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                assert!(handle.tell(hint()).await.is_ok());
            }
            assert_eq!(herdr.typed(&w1).len(), 1, "typed into a busy pane");
            herdr.set(&w1, AgentStatus::Idle);
            let idle_at = tokio::time::Instant::now();
            assert!(handle.tell(hint()).await.is_ok());
            idle_at
        };
        let lead = async {
            for n in 1..=2 {
                let send = Request::Send {
                    target: w1.clone(),
                    content: format!("brief {n}"),
                    wait: n == 1,
                    timeout_ms: Some(60_000),
                };
                let r = handle.call(lead(), send).await;
                assert!(
                    matches!(
                        r,
                        Ok(Response::Outcome {
                            outcome: Outcome::Replied,
                            ..
                        }) | Ok(Response::Ticket(_))
                    ),
                    "{r:?}"
                );
            }
            herdr.typed_count(&w1, 2).await;
        };
        let (idle_at, ()) = tokio::join!(agent, lead);
        let _ = stop.send(());
        idle_at
    };
    let (_, idle_at) = tokio::join!(driver.run(calls, stopped), scenario);
    let second = herdr.typed_at(&w1)[1];
    assert!(second >= idle_at, "typed before the member went idle");
    assert!(
        second - idle_at <= Duration::from_millis(25),
        "typed {:?} after the member went idle",
        second - idle_at
    );
}

/// A `working` sample that herdr served during one turn but that reaches the loop only after
/// the next brief was typed says nothing about the new turn: the member, still reading that
/// brief, goes idle-to-working later, and its reply — not an early COMPLETED_UNREPLIED — ends
/// the send. (Found by the single-host e2e on a loaded machine.)
#[tokio::test(start_paused = true)]
async fn a_late_answer_from_the_last_turn_does_not_end_the_next() {
    let herdr = ScriptedHerdr::default();
    herdr.late_working.set(Some(Duration::from_millis(400)));
    let w1 = herdr.add("w1");
    let cfg = CoreConfig {
        poll_interval_ms: 50,
        ..CoreConfig::default()
    };
    let (driver, handle, calls) = quiet_loop(&herdr, cfg);
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let hint = || fleet_core::Input::StatusHint { target: w1.clone() };
    let scenario = async {
        let agent = async {
            for n in 1..=2 {
                herdr.typed_count(&w1, n).await;
                // It reads the brief for a moment before herdr sees it work.
                tokio::time::sleep(Duration::from_millis(300)).await;
                herdr.set(&w1, AgentStatus::Working);
                for _ in 0..10 {
                    assert!(handle.tell(hint()).await.is_ok());
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let reply = Request::Reply {
                    content: format!("done {n}"),
                };
                let r = handle.call(Principal::worker(w1.clone()), reply).await;
                assert_eq!(r, Ok(Response::ReplyAccepted { held: None }));
                herdr.set(&w1, AgentStatus::Idle);
                assert!(handle.tell(hint()).await.is_ok());
            }
        };
        let lead = blocking_briefs(&handle, &w1, 2);
        let (outcomes, ()) = tokio::join!(lead, agent);
        let _ = stop.send(());
        outcomes
    };
    let (_, outcomes) = tokio::join!(driver.run(calls, stopped), scenario);
    assert_eq!(
        outcomes,
        vec![
            (Outcome::Replied, Some("done 1".to_string())),
            (Outcome::Replied, Some("done 2".to_string())),
        ]
    );
    assert_eq!(herdr.typed(&w1), vec!["brief 1", "brief 2"]);
}

/// A member that replies the moment its brief is typed finds the brief already known as typed,
/// even while slow samples of another pane are on their way: a typing is not held behind them
/// (held back, such a reply was an orphan, held as stranded — the three-gateway e2e on real
/// herdr).
#[tokio::test(start_paused = true)]
async fn a_reply_right_after_the_typing_is_not_held_behind_slow_samples() {
    let herdr = ScriptedHerdr::default();
    herdr.late_working.set(Some(Duration::from_millis(400)));
    let (w1, w2) = (herdr.add("w1"), herdr.add("w2"));
    let cfg = CoreConfig {
        poll_interval_ms: 50,
        ..CoreConfig::default()
    };
    let (driver, handle, calls) = quiet_loop(&herdr, cfg);
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let scenario = async {
        // w2 works on a long task all along: its samples answer 400 ms late, every poll.
        let long = Request::Send {
            target: w2.clone(),
            content: "a long task".into(),
            wait: false,
            timeout_ms: Some(60_000),
        };
        assert!(matches!(
            handle.call(lead(), long).await,
            Ok(Response::Ticket(_))
        ));
        herdr.typed_count(&w2, 1).await;
        herdr.set(&w2, AgentStatus::Working);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let agent = async {
            herdr.typed_count(&w1, 1).await;
            // At once, as a scripted member can.
            let reply = Request::Reply {
                content: "done".into(),
            };
            let r = handle.call(Principal::worker(w1.clone()), reply).await;
            assert_eq!(r, Ok(Response::ReplyAccepted { held: None }));
        };
        let send = async {
            let send = Request::Send {
                target: w1.clone(),
                content: "quick one".into(),
                wait: true,
                timeout_ms: Some(10_000),
            };
            handle.call(lead(), send).await
        };
        let (sent, ()) = tokio::join!(send, agent);
        let _ = stop.send(());
        sent
    };
    let (_, sent) = tokio::join!(driver.run(calls, stopped), scenario);
    match sent {
        Ok(Response::Outcome { outcome, body, .. }) => {
            assert_eq!((outcome, body.as_deref()), (Outcome::Replied, Some("done")))
        }
        other => panic!("{other:?}"),
    }
}

/// A disk that takes nothing.
struct FullDisk;

impl fleetd::task_store::TaskStore for FullDisk {
    fn keep(&mut self, _list: &fleet_core::tasks::TaskList) -> Result<(), String> {
        Err("No space left on device (os error 28)".into())
    }
}

/// A task list the disk will not take halts the loop before the task's brief is typed: a
/// restart could otherwise start it again and type it twice. The loop says why and stops.
#[tokio::test(start_paused = true)]
async fn a_task_list_the_disk_will_not_take_halts_the_loop_before_its_brief_is_typed() {
    let herdr = ScriptedHerdr::default();
    let w1 = herdr.add("w1");
    let (halt, halted) = tokio::sync::oneshot::channel();
    let driver = Driver::new(
        gateway(CoreConfig::default()),
        herdr.clone(),
        NoBroker,
        TokioClock::new(),
        fleetd::Quiet,
    )
    .with_tasks(FullDisk)
    .with_halt(halt);
    let (handle, calls) = QuietLoop::channel();
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let scenario = async {
        let task = fleet_core::tasks::NewTask {
            title: "first".into(),
            brief: "fix the bug".into(),
            assignee: w1.clone(),
            deps: vec![],
            timeout_ms: Some(60_000),
        };
        let added = handle.call(lead(), Request::TaskAdd { task }).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        added
    };
    let (_gw, added) = tokio::join!(driver.run(calls, stopped), scenario);
    assert!(added.is_err(), "no answer after the halt: {added:?}");
    let why = halted.await.unwrap_or_default();
    assert!(why.contains("task list could not be kept"), "{why}");
    assert!(why.contains("No space left"), "{why}");
    assert!(herdr.typed(&w1).is_empty(), "typed: {:?}", herdr.typed(&w1));
}
