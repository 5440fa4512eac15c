//! Scenario tests of a lead's task list through `Gateway`: the test plays herdr, the lead and
//! the members by hand; time only moves when a test moves it.

use fleet_core::tasks::{Decision, NewTask, Stage, TaskId, TaskList, TaskState, TaskView};
use fleet_core::{
    AgentStatus, CallError, CallId, CoreConfig, Duration, Event, Gateway, Input, Instant, MsgId,
    Outcome, Output, Principal, Request, Response, SessionId,
};

struct Gw {
    gw: Gateway,
    now: Instant,
    next_call: u64,
    out: Vec<Output>,
}

fn s(name: &str) -> SessionId {
    SessionId::new(name)
}

fn lead() -> Principal {
    Principal::primary("lead", Some(s("lead-pane")))
}

fn task(title: &str, assignee: &str, deps: &[u32]) -> NewTask {
    NewTask {
        title: title.into(),
        brief: format!("brief of {title}"),
        assignee: s(assignee),
        deps: deps.iter().map(|d| TaskId(*d)).collect(),
        timeout_ms: Some(60_000),
    }
}

impl Gw {
    fn new() -> Self {
        let mut g = Gw {
            gw: Gateway::new(CoreConfig::default(), 7, Instant::ZERO).expect("valid config"),
            now: Instant::from_millis(1_000),
            next_call: 0,
            out: Vec::new(),
        };
        g.input(Input::WallClock {
            unix_ms: 1_700_000_000_000,
        });
        g.input(Input::LeadAttached {
            lead: s("lead-pane"),
        });
        g
    }

    fn input(&mut self, i: Input) {
        self.gw.handle(self.now, i);
        while let Some(o) = self.gw.poll_output() {
            self.out.push(o);
        }
    }

    fn call(&mut self, caller: Principal, request: Request) -> Response {
        self.next_call += 1;
        let call = CallId(self.next_call);
        self.input(Input::Call {
            call,
            caller,
            request,
        });
        self.out
            .iter()
            .find_map(|o| match o {
                Output::Respond { call: c, response } if *c == call => Some(response.clone()),
                _ => None,
            })
            .expect("a task call is answered at once")
    }

    fn add(&mut self, t: NewTask) -> TaskView {
        match self.call(lead(), Request::TaskAdd { task: t }) {
            Response::Tasks { mut tasks } if tasks.len() == 1 => tasks.remove(0),
            other => panic!("expected the added task, got {other:?}"),
        }
    }

    fn one(&mut self, id: u32) -> TaskView {
        match self.call(
            lead(),
            Request::Tasks {
                id: Some(TaskId(id)),
            },
        ) {
            Response::Tasks { mut tasks } if tasks.len() == 1 => tasks.remove(0),
            other => panic!("expected task {id}, got {other:?}"),
        }
    }

    fn review(&mut self, id: u32, decision: Decision) -> Response {
        self.call(
            lead(),
            Request::TaskReview {
                id: TaskId(id),
                decision,
            },
        )
    }

    fn sample(&mut self, target: &SessionId, status: AgentStatus) {
        self.input(Input::StatusSampled {
            target: target.clone(),
            status,
            screen: None,
            asked: self.gw.newest_ask(),
        });
    }

    /// Samples the member idle, confirms what was typed, sees it work: returns the brief's
    /// msg and text.
    fn deliver(&mut self, target: &SessionId) -> (MsgId, String) {
        self.sample(target, AgentStatus::Idle);
        let (msg, text) = self
            .out
            .iter()
            .rev()
            .find_map(|o| match o {
                Output::Inject {
                    target: t,
                    msg,
                    text,
                } if t == target => Some((*msg, text.clone())),
                _ => None,
            })
            .expect("an inject after an idle sample");
        self.input(Input::Injected {
            target: target.clone(),
            msg,
            result: Ok("❯ ".into()),
        });
        self.sample(target, AgentStatus::Working);
        (msg, text)
    }

    fn reply(&mut self, member: &SessionId, content: &str) {
        self.call(
            Principal::worker(member.clone()),
            Request::Reply {
                content: content.into(),
            },
        );
    }

    fn injects_into(&self, target: &SessionId) -> usize {
        self.out
            .iter()
            .filter(|o| matches!(o, Output::Inject { target: t, .. } if t == target))
            .count()
    }

    fn moves(&self) -> Vec<(TaskId, TaskState)> {
        self.out
            .iter()
            .filter_map(|o| match o {
                Output::Event(Event::Task { task, state, .. }) => Some((*task, *state)),
                _ => None,
            })
            .collect()
    }

    fn kept(&self) -> Option<&TaskList> {
        self.out.iter().rev().find_map(|o| match o {
            Output::KeepTasks(l) => Some(l),
            _ => None,
        })
    }

    fn advance(&mut self, d: Duration) {
        self.now = self.now + d;
        self.input(Input::Tick);
    }
}

#[test]
fn a_task_starts_only_after_its_dependency_is_reviewed_done() {
    let mut g = Gw::new();
    let a = g.add(task("build", "w1", &[]));
    let b = g.add(task("test", "w2", &[1]));
    // a starts as soon as it is added; b waits.
    assert_eq!((a.state, b.state), (TaskState::Running, TaskState::Pending));
    assert!(a.ticket.is_some());
    let (_, text) = g.deliver(&s("w1"));
    assert_eq!(text, "brief of build");
    // The list is kept with a running before anything is typed for it.
    let kept_at = g
        .out
        .iter()
        .position(|o| matches!(o, Output::KeepTasks(l) if matches!(l.tasks.get(&TaskId(1)).map(|t| &t.stage), Some(Stage::Running(_)))))
        .expect("kept running");
    let typed_at = g
        .out
        .iter()
        .position(|o| matches!(o, Output::Inject { .. }))
        .expect("typed");
    assert!(kept_at < typed_at);

    g.reply(&s("w1"), "built");
    let a = g.one(1);
    assert_eq!(a.state, TaskState::Review);
    assert_eq!(
        (a.outcome, a.result.as_deref()),
        (Some(Outcome::Replied), Some("built"))
    );
    // Review is the lead's decision: nothing reaches w2 until it is made.
    g.sample(&s("w2"), AgentStatus::Idle);
    assert_eq!(g.injects_into(&s("w2")), 0);
    assert_eq!(g.one(2).state, TaskState::Pending);

    assert!(matches!(
        g.review(1, Decision::Done),
        Response::Tasks { .. }
    ));
    assert_eq!(g.one(2).state, TaskState::Running);
    let (_, text) = g.deliver(&s("w2"));
    assert_eq!(text, "brief of test");
    assert_eq!(
        g.moves(),
        vec![
            (TaskId(1), TaskState::Ready),
            (TaskId(1), TaskState::Running),
            (TaskId(2), TaskState::Pending),
            (TaskId(1), TaskState::Review),
            (TaskId(1), TaskState::Done),
            (TaskId(2), TaskState::Ready),
            (TaskId(2), TaskState::Running),
        ]
    );
}

#[test]
fn a_failed_task_is_retried_by_its_lead_and_its_dependent_waits_meanwhile() {
    let mut g = Gw::new();
    g.add(task("build", "w1", &[]));
    g.add(task("test", "w2", &[1]));
    g.deliver(&s("w1"));
    // The turn outlives its bound: the task fails, saying how its delegation ended.
    g.advance(Duration::from_millis(61_000));
    let a = g.one(1);
    assert_eq!(a.state, TaskState::Failed);
    assert_eq!(a.outcome, Some(Outcome::TimedOutWorking));
    assert!(a.why.is_some_and(|w| w.contains("TIMED_OUT_WORKING")));
    assert_eq!(g.one(2).state, TaskState::Pending);
    // Done is refused on a failed task; a retry starts it again.
    assert!(matches!(
        g.review(1, Decision::Done),
        Response::Error(CallError::InvalidArgument { .. })
    ));
    g.review(1, Decision::Retry);
    let a = g.one(1);
    assert_eq!((a.state, a.attempts), (TaskState::Running, 2));
}

#[test]
fn a_busy_assignee_holds_a_ready_task_until_it_is_free() {
    let mut g = Gw::new();
    // The lead's own send keeps w1 busy.
    g.next_call += 1;
    let send = CallId(g.next_call);
    g.input(Input::Call {
        call: send,
        caller: lead(),
        request: Request::Send {
            target: s("w1"),
            content: "by hand".into(),
            wait: true,
            timeout_ms: Some(60_000),
        },
    });
    let a = g.add(task("build", "w1", &[]));
    assert_eq!(a.state, TaskState::Ready);
    assert!(a.why.is_some_and(|w| w.contains("open delegation")));
    g.deliver(&s("w1"));
    g.reply(&s("w1"), "by hand, done");
    g.sample(&s("w1"), AgentStatus::Idle);
    // The next look (a retry bound later) starts it, once the turn before has settled.
    g.advance(Duration::from_millis(2_000));
    assert_eq!(g.one(1).state, TaskState::Running);
    let (_, text) = g.deliver(&s("w1"));
    assert_eq!(text, "brief of build");
}

#[test]
fn each_lead_sees_and_decides_only_its_own_tasks_and_a_member_adds_none() {
    let mut g = Gw::new();
    g.add(task("build", "w1", &[]));
    let other = Principal::primary("other", Some(s("other-pane")));
    assert_eq!(
        g.call(other.clone(), Request::Tasks { id: None }),
        Response::Tasks { tasks: vec![] }
    );
    assert_eq!(
        g.call(
            other,
            Request::TaskReview {
                id: TaskId(1),
                decision: Decision::Failed
            }
        ),
        Response::Error(CallError::UnknownTask { task: TaskId(1) })
    );
    let member = g.call(
        Principal::worker(s("w2")),
        Request::TaskAdd {
            task: task("sneak", "w1", &[]),
        },
    );
    assert!(
        matches!(member, Response::Error(CallError::Denied { .. })),
        "{member:?}"
    );
    let bad = g.call(
        lead(),
        Request::TaskAdd {
            task: NewTask {
                timeout_ms: Some(0),
                ..task("zero", "w1", &[])
            },
        },
    );
    assert!(matches!(
        bad,
        Response::Error(CallError::InvalidArgument { .. })
    ));
    // Never into a lead's pane: a lead is no assignee.
    g.input(Input::LeadAttached {
        lead: s("other-pane"),
    });
    let to_lead = g.call(
        lead(),
        Request::TaskAdd {
            task: task("note", "other-pane", &[]),
        },
    );
    assert!(
        matches!(&to_lead, Response::Error(CallError::InvalidArgument { reason }) if reason.contains("not a member")),
        "{to_lead:?}"
    );
}

#[test]
fn a_list_waits_while_its_lead_is_not_attached_here() {
    let mut g = Gw::new();
    let stranger = Principal::primary("gone", Some(s("gone-pane")));
    let added = g.call(
        stranger.clone(),
        Request::TaskAdd {
            task: task("build", "w1", &[]),
        },
    );
    match added {
        Response::Tasks { tasks } => {
            assert_eq!(tasks[0].state, TaskState::Ready);
            assert!(tasks[0]
                .why
                .as_deref()
                .is_some_and(|w| w.contains("not attached")));
        }
        other => panic!("{other:?}"),
    }
    g.sample(&s("w1"), AgentStatus::Idle);
    assert_eq!(g.injects_into(&s("w1")), 0);
    // Attached, it runs at the next look.
    g.input(Input::LeadAttached {
        lead: s("gone-pane"),
    });
    g.advance(Duration::from_millis(2_000));
    let (_, text) = g.deliver(&s("w1"));
    assert_eq!(text, "brief of build");
}

#[test]
fn a_restart_fails_the_task_that_ran_here_and_keeps_the_rest() {
    let mut before = Gw::new();
    before.add(task("build", "w1", &[]));
    before.add(task("test", "w2", &[1]));
    let kept = before.kept().cloned().expect("kept");

    let mut after = Gw::new();
    after.input(Input::TasksRestored { lists: vec![kept] });
    let a = after.one(1);
    assert_eq!(a.state, TaskState::Failed);
    assert!(a.why.is_some_and(|w| w.contains("restarted")));
    assert_eq!(after.one(2).state, TaskState::Pending);
    // What it says now is kept again; a retry runs it in this process.
    assert!(after.kept().is_some());
    after.review(1, Decision::Retry);
    let (_, text) = after.deliver(&s("w1"));
    assert_eq!(text, "brief of build");
}
