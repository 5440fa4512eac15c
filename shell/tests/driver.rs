//! The driver loop end to end on one host, in virtual time. herdr itself cannot run here and
//! its socket client lands with its own issue, so `ScriptedHerdr` stands in for it in these
//! tests only: it answers the same operations the real port will, with a latency, over panes
//! whose agents the tests script.

use fleet_core::{
    AgentStatus, CoreConfig, Gateway, Instant, Outcome, Output, Principal, Request, Response,
    SessionId,
};
use fleetd::{Driver, HerdrError, HerdrPort, NoBroker, Observer, PortFuture, Sample, TokioClock};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

#[derive(Clone, Debug)]
struct Pane {
    status: AgentStatus,
    screen: String,
    typed: Vec<String>,
}

#[derive(Clone, Default)]
struct ScriptedHerdr {
    panes: Rc<RefCell<BTreeMap<SessionId, Pane>>>,
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
            },
        );
        id
    }

    fn set(&self, id: &SessionId, status: AgentStatus) {
        if let Some(p) = self.panes.borrow_mut().get_mut(id) {
            p.status = status;
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

    fn inject(&self, target: &SessionId, text: &str) -> PortFuture<Result<String, HerdrError>> {
        let (panes, target, text) = (self.panes.clone(), target.clone(), text.to_string());
        Box::pin(async move {
            tokio::time::sleep(LATENCY).await;
            let mut panes = panes.borrow_mut();
            let p = panes.get_mut(&target).ok_or(HerdrError::PaneNotFound)?;
            let baseline = p.screen.clone();
            p.screen.push_str(&format!("\n❯ {text}"));
            p.typed.push(text);
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
    ) -> PortFuture<Result<fleet_core::Launched, HerdrError>> {
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
    let driver = Driver::new(
        gateway(cfg),
        herdr.clone(),
        NoBroker,
        TokioClock::new(),
        fleetd::Quiet,
    );
    let (handle, calls) = Driver::<ScriptedHerdr, NoBroker, TokioClock>::channel();
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
    let driver = Driver::new(
        gateway(CoreConfig::default()),
        herdr.clone(),
        NoBroker,
        TokioClock::new(),
        fleetd::Quiet,
    );
    let (handle, calls) = Driver::<ScriptedHerdr, NoBroker, TokioClock>::channel();
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
