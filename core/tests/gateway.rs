//! Scenario tests of the message-service rules through `Gateway`, one rule each. The test
//! plays herdr and the callers by hand; time only moves when a test moves it.

use fleet_core::health::Health;
use fleet_core::injector::Cause;
use fleet_core::{
    Action, AgentStatus, AskOutcome, CallError, CallId, CoreConfig, Duration, Event, FlowPhase,
    Gateway, Half, Input, Instant, Link, ListedMember, MsgId, Outcome, Output, Overview, Phase,
    Principal, Request, Response, Round, Sampled, SessionId, Stale, TicketId, TurnId,
};

#[path = "gateway/reports.rs"]
mod reports;

struct Gw {
    gw: Gateway,
    now: Instant,
    next_call: u64,
    out: Vec<Output>,
}

fn w1() -> SessionId {
    SessionId::new("w1")
}

fn lead() -> Principal {
    Principal::primary("lead", Some(SessionId::new("lead-pane")))
}

impl Gw {
    fn new() -> Self {
        Self::with(CoreConfig::default())
    }

    fn with(cfg: CoreConfig) -> Self {
        Gw {
            gw: Gateway::new(cfg, 7, Instant::ZERO).expect("valid config"),
            now: Instant::from_millis(1_000),
            next_call: 0,
            out: Vec::new(),
        }
    }

    fn input(&mut self, i: Input) {
        self.gw.handle(self.now, i);
        while let Some(o) = self.gw.poll_output() {
            self.out.push(o);
        }
    }

    fn call(&mut self, caller: Principal, request: Request) -> CallId {
        self.next_call += 1;
        let call = CallId(self.next_call);
        self.input(Input::Call {
            call,
            caller,
            request,
        });
        call
    }

    /// Types the queued brief into w1 and plays a turn that ran between two polls: idle
    /// samples only, up to the pickup bound. Returns the brief's msg.
    fn missed_fast_turn(&mut self, baseline: &str) -> MsgId {
        self.sample(&w1(), AgentStatus::Idle);
        let (_, msg, _) = self.last_inject().expect("injected");
        self.input(Input::Injected {
            target: w1(),
            msg,
            result: Ok(baseline.into()),
        });
        let cfg = CoreConfig::default();
        for i in 0..cfg.pickup_grace_polls {
            if i > 0 {
                self.advance(cfg.poll_interval());
            }
            self.sample(&w1(), AgentStatus::Idle);
        }
        assert!(self.events().iter().any(|e| matches!(
            e,
            Event::TurnComplete {
                missed_fast_turn: true,
                ..
            }
        )));
        msg
    }

    /// herdr's answer to w1's post-turn scrape of turn `msg`.
    fn scraped(&mut self, msg: MsgId, screen: &str) {
        self.input(Input::PaneRead {
            target: w1(),
            msg,
            result: Ok(screen.into()),
        });
    }

    fn send(&mut self, target: &str, content: &str, wait: bool) -> CallId {
        self.call(
            lead(),
            Request::Send {
                target: SessionId::new(target),
                content: content.into(),
                wait,
                timeout_ms: Some(60_000),
            },
        )
    }

    fn response(&self, call: CallId) -> Option<&Response> {
        self.out.iter().find_map(|o| match o {
            Output::Respond { call: c, response } if *c == call => Some(response),
            _ => None,
        })
    }

    fn outcome(&self, call: CallId) -> Option<(Outcome, Option<String>)> {
        match self.response(call)? {
            Response::Outcome { outcome, body, .. } => Some((*outcome, body.clone())),
            _ => None,
        }
    }

    fn sample(&mut self, target: &SessionId, status: AgentStatus) {
        self.input(Input::StatusSampled {
            target: target.clone(),
            status,
            screen: None,
            asked: self.gw.newest_ask(),
        });
    }

    fn last_inject(&self) -> Option<(SessionId, MsgId, String)> {
        self.out.iter().rev().find_map(|o| match o {
            Output::Inject { target, msg, text } => Some((target.clone(), *msg, text.clone())),
            _ => None,
        })
    }

    /// Samples IDLE, confirms the inject with `baseline`, sees WORKING: the turn is running.
    fn deliver(&mut self, target: &SessionId, baseline: &str) -> MsgId {
        self.sample(target, AgentStatus::Idle);
        let (t, msg, _) = self.last_inject().expect("an inject after an idle sample");
        assert_eq!(&t, target);
        self.input(Input::Injected {
            target: target.clone(),
            msg,
            result: Ok(baseline.into()),
        });
        self.sample(target, AgentStatus::Working);
        msg
    }

    /// WORKING → IDLE, then answers the completion read with `scrape`.
    fn complete(&mut self, target: &SessionId, msg: MsgId, scrape: &str) {
        self.sample(target, AgentStatus::Idle);
        assert!(self.out.iter().any(
            |o| matches!(o, Output::ReadPane { target: t, msg: m } if t == target && *m == msg)
        ));
        self.input(Input::PaneRead {
            target: target.clone(),
            msg,
            result: Ok(scrape.into()),
        });
    }

    fn advance(&mut self, d: Duration) {
        self.now = self.now + d;
        self.input(Input::Tick);
    }

    fn reply(&mut self, session: &SessionId, content: &str) -> CallId {
        self.call(
            Principal::worker(session.clone()),
            Request::Reply {
                content: content.into(),
            },
        )
    }

    fn ask(&mut self, session: &SessionId, q: &str) -> CallId {
        self.call(
            Principal::worker(session.clone()),
            Request::Ask {
                question: q.into(),
                timeout_ms: None,
            },
        )
    }

    fn ticket(&self, call: CallId) -> TicketId {
        match self.response(call) {
            Some(Response::Ticket(v)) => v.ticket,
            other => panic!("expected a ticket, got {other:?}"),
        }
    }

    fn poll(&mut self, ticket: TicketId) -> Response {
        let c = self.call(lead(), Request::Poll { ticket });
        self.response(c)
            .cloned()
            .expect("a poll is answered at once")
    }

    fn events(&self) -> Vec<&Event> {
        self.out
            .iter()
            .filter_map(|o| match o {
                Output::Event(e) => Some(e),
                _ => None,
            })
            .collect()
    }
}

/// The happy path: the reply of the delivered turn resolves the blocking send.
#[test]
fn a_reply_during_the_turn_resolves_the_send_as_replied() {
    let mut g = Gw::new();
    let c = g.send("w1", "do it", true);
    g.deliver(&w1(), "❯ ");
    let r = g.reply(&w1(), "done");
    assert_eq!(g.outcome(c), Some((Outcome::Replied, Some("done".into()))));
    assert_eq!(g.response(r), Some(&Response::ReplyAccepted { held: None }));
}

/// A turn that ends without `fleet_reply` resolves with what it left on screen after the
/// echo of its brief.
#[test]
fn a_silent_turn_completes_unreplied_with_its_new_text() {
    let mut g = Gw::new();
    let c = g.send("w1", "do it", true);
    let m = g.deliver(&w1(), "old line\n❯ ");
    g.complete(&w1(), m, "old line\n❯ \n> do it\nall green");
    assert_eq!(
        g.outcome(c),
        Some((Outcome::CompletedUnreplied, Some("all green".into())))
    );
}

/// A scrape equal to the baseline never resolves: the send stays open until its timeout.
#[test]
fn a_scrape_equal_to_the_baseline_is_suppressed_until_the_timeout() {
    let mut g = Gw::new();
    let c = g.send("w1", "do it", true);
    let m = g.deliver(&w1(), "same screen");
    g.complete(&w1(), m, "same screen");
    assert!(g
        .events()
        .iter()
        .any(|e| matches!(e, Event::Suppressed { .. })));
    assert_eq!(g.outcome(c), None);
    g.advance(Duration::from_secs(61));
    assert_eq!(g.outcome(c), Some((Outcome::TimedOutWorking, None)));
}

/// A reply that arrives after its send timed out is held, not lost, and drained once.
#[test]
fn a_stranded_reply_is_held_and_drained_exactly_once() {
    let mut g = Gw::new();
    let c = g.send("w1", "do it", true);
    g.deliver(&w1(), "❯ ");
    g.advance(Duration::from_secs(61));
    assert_eq!(g.outcome(c), Some((Outcome::TimedOutWorking, None)));
    let r = g.reply(&w1(), "late result");
    assert!(matches!(
        g.response(r),
        Some(Response::ReplyAccepted { held: Some(_) })
    ));
    let d1 = g.call(lead(), Request::Drain { target: w1() });
    let d2 = g.call(lead(), Request::Drain { target: w1() });
    match (g.response(d1), g.response(d2)) {
        (Some(Response::Replies { replies: a }), Some(Response::Replies { replies: b })) => {
            assert_eq!(a.len(), 1);
            assert_eq!(a[0].content, "late result");
            assert!(b.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

/// A second delegation to a session with one open is refused BUSY at once.
#[test]
fn a_second_send_to_a_busy_session_is_busy() {
    let mut g = Gw::new();
    g.send("w1", "first", true);
    let c = g.send("w1", "second", true);
    assert_eq!(g.outcome(c).map(|o| o.0), Some(Outcome::Busy));
}

/// A send that is never delivered times out QUEUED and is withdrawn: it is never typed late.
#[test]
fn a_send_that_times_out_queued_is_never_typed_later() {
    let mut g = Gw::new();
    let c = g.send("w1", "do it", true);
    g.sample(&w1(), AgentStatus::Working);
    g.advance(Duration::from_secs(61));
    assert_eq!(g.outcome(c), Some((Outcome::TimedOutQueued, None)));
    assert!(g.events().iter().any(|e| matches!(
        e,
        Event::Dropped {
            cause: Cause::SenderTimedOut,
            ..
        }
    )));
    g.sample(&w1(), AgentStatus::Idle);
    assert_eq!(g.last_inject(), None);
}

/// The ask/answer rendezvous: QUESTION with a turnId, the answer unblocks the member's ask,
/// and the member's reply then resolves the answer's call.
#[test]
fn a_question_is_answered_by_turn_id_and_the_turn_continues() {
    let mut g = Gw::new();
    let send = g.send("w1", "migrate", true);
    g.deliver(&w1(), "❯ ");
    let ask = g.ask(&w1(), "which db?");
    let turn_id = match g.response(send) {
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
    assert_eq!(g.response(ask), None, "the member waits for its answer");
    // Naming another member as the asker (REST's path id) is refused, and changes nothing.
    let wrong = g.call(
        lead(),
        Request::Answer {
            turn_id,
            content: "sqlite".into(),
            wait: true,
            timeout_ms: None,
            asked_by: Some(SessionId::new("w2")),
        },
    );
    assert!(
        matches!(
            g.response(wrong),
            Some(Response::Error(CallError::InvalidArgument { reason })) if reason.contains("asked by w1")
        ),
        "{:?}",
        g.response(wrong)
    );
    assert_eq!(g.response(ask), None, "still waiting");
    let answer = g.call(
        lead(),
        Request::Answer {
            turn_id,
            content: "postgres".into(),
            wait: true,
            timeout_ms: None,
            asked_by: Some(w1()),
        },
    );
    assert_eq!(
        g.response(ask),
        Some(&Response::Ask {
            outcome: AskOutcome::Answered,
            turn_id: Some(turn_id),
            answer: Some("postgres".into())
        })
    );
    g.reply(&w1(), "migrated to postgres");
    assert_eq!(
        g.outcome(answer),
        Some((Outcome::Replied, Some("migrated to postgres".into())))
    );
}

/// Duplicate asks from one session ride one turnId and are all answered.
#[test]
fn asks_from_one_session_coalesce_and_all_get_the_answer() {
    let mut g = Gw::new();
    g.send("w1", "task", true);
    g.deliver(&w1(), "❯ ");
    let a1 = g.ask(&w1(), "q?");
    let a2 = g.ask(&w1(), "q?");
    let turn = g
        .events()
        .iter()
        .find_map(|e| match e {
            Event::Asked { turn_id, .. } => Some(*turn_id),
            _ => None,
        })
        .expect("an ask event");
    g.call(
        lead(),
        Request::Answer {
            turn_id: turn,
            content: "a".into(),
            wait: false,
            timeout_ms: None,
            asked_by: None,
        },
    );
    for a in [a1, a2] {
        assert!(matches!(
            g.response(a),
            Some(Response::Ask { outcome: AskOutcome::Answered, turn_id: Some(t), .. }) if *t == turn
        ));
    }
}

/// An ask with no delegation waiting on the member's turn is answered NO_WAITER at once.
#[test]
fn an_ask_with_no_waiter_is_no_waiter() {
    let mut g = Gw::new();
    let a = g.ask(&w1(), "anyone?");
    assert_eq!(
        g.response(a),
        Some(&Response::Ask {
            outcome: AskOutcome::NoWaiter,
            turn_id: None,
            answer: None
        })
    );
}

/// An answer naming a turn that is not asking is STALE_TURN, and nothing is typed.
#[test]
fn an_answer_to_an_unknown_turn_is_stale() {
    let mut g = Gw::new();
    let c = g.call(
        lead(),
        Request::Answer {
            turn_id: TurnId(uuid::Uuid::from_u128(99)),
            content: "late".into(),
            wait: true,
            timeout_ms: None,
            asked_by: None,
        },
    );
    assert_eq!(g.outcome(c).map(|o| o.0), Some(Outcome::StaleTurn));
    assert_eq!(g.last_inject(), None);
}

/// An async ticket goes PENDING → ASKING (showing the question) → PENDING after the answer
/// (the same ticket) → DONE.
#[test]
fn an_async_ticket_shows_asking_and_resumes_on_the_answer() {
    let mut g = Gw::new();
    let c = g.send("w1", "task", false);
    let ticket = g.ticket(c);
    g.deliver(&w1(), "❯ ");
    g.ask(&w1(), "which branch?");
    let turn_id = match g.poll(ticket) {
        Response::Ticket(v) => {
            assert_eq!(v.phase, Phase::Asking);
            assert_eq!(v.question.as_deref(), Some("which branch?"));
            v.turn_id.expect("an asking ticket names its turn")
        }
        other => panic!("{other:?}"),
    };
    let a = g.call(
        lead(),
        Request::Answer {
            turn_id,
            content: "main".into(),
            wait: true,
            timeout_ms: None,
            asked_by: None,
        },
    );
    assert!(
        matches!(g.response(a), Some(Response::Ticket(v)) if v.ticket == ticket && v.phase == Phase::Pending)
    );
    g.reply(&w1(), "done on main");
    match g.poll(ticket) {
        Response::Ticket(v) => {
            assert_eq!((v.phase, v.outcome), (Phase::Done, Some(Outcome::Replied)));
            assert_eq!(v.body.as_deref(), Some("done on main"));
        }
        other => panic!("{other:?}"),
    }
}

/// Retention is 10 minutes from completion, not from creation (issue #197): a delegation
/// that ran 15 minutes is still collectable right after it finished.
#[test]
fn a_ticket_is_kept_ten_minutes_after_it_completed() {
    let mut g = Gw::with(CoreConfig {
        send_timeout_max_ms: 3_600_000,
        ..CoreConfig::default()
    });
    let c = g.call(
        lead(),
        Request::Send {
            target: w1(),
            content: "long".into(),
            wait: false,
            timeout_ms: Some(3_000_000),
        },
    );
    let ticket = g.ticket(c);
    g.deliver(&w1(), "❯ ");
    g.advance(Duration::from_secs(15 * 60));
    g.reply(&w1(), "finally");
    g.advance(Duration::from_secs(9 * 60));
    assert!(matches!(g.poll(ticket), Response::Ticket(v) if v.phase == Phase::Done));
    g.advance(Duration::from_secs(61));
    assert_eq!(g.poll(ticket), Response::Error(CallError::UnknownTicket));
}

/// A dead pane fails its delegation WORKER_FAILED.
#[test]
fn a_pane_that_dies_fails_its_send() {
    let mut g = Gw::new();
    let c = g.send("w1", "task", true);
    g.deliver(&w1(), "❯ ");
    g.input(Input::PaneGone { target: w1() });
    assert_eq!(g.outcome(c).map(|o| o.0), Some(Outcome::WorkerFailed));
}

/// Identity comes from the caller: a worker cannot send or drain, nobody can reply for
/// another session, and the audit line never carries content.
#[test]
fn authz_refuses_by_role_and_audits_without_content() {
    let mut g = Gw::new();
    let w2 = Principal::worker(SessionId::new("w2"));
    let s = g.call(
        w2.clone(),
        Request::Send {
            target: w1(),
            content: "secret plan".into(),
            wait: true,
            timeout_ms: None,
        },
    );
    assert!(matches!(
        g.response(s),
        Some(Response::Error(CallError::Denied { .. }))
    ));
    let d = g.call(w2, Request::Drain { target: w1() });
    assert!(matches!(
        g.response(d),
        Some(Response::Error(CallError::Denied { .. }))
    ));
    let r = g.call(
        Principal::anonymous(),
        Request::Reply {
            content: "secret plan".into(),
        },
    );
    assert!(matches!(
        g.response(r),
        Some(Response::Error(CallError::Denied { .. }))
    ));
    let audits: Vec<String> = g
        .out
        .iter()
        .filter_map(|o| match o {
            Output::Audit(a) => Some(a.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(audits.len(), 3);
    assert!(audits.iter().all(|a| !a.contains("secret")));
    assert_eq!(g.gw.stats().auth_failures_total, 3);
}

/// Bad arguments get a clear error and change nothing.
#[test]
fn bad_arguments_are_refused_clearly() {
    let mut g = Gw::new();
    let empty = g.send("w1", "  ", true);
    let zero = g.call(
        lead(),
        Request::Send {
            target: w1(),
            content: "x".into(),
            wait: true,
            timeout_ms: Some(0),
        },
    );
    let own = g.send("lead-pane", "x", true);
    for c in [empty, zero, own] {
        assert!(matches!(
            g.response(c),
            Some(Response::Error(CallError::InvalidArgument { .. }))
        ));
    }
    assert_eq!(g.gw.open_delegations(), 0);
}

/// A full inbox refuses the newest reply (the member is told) and keeps the held ones.
#[test]
fn a_full_inbox_refuses_and_keeps_what_it_holds() {
    let mut g = Gw::with(CoreConfig {
        inbox_cap_per_target: 2,
        ..CoreConfig::default()
    });
    g.reply(&w1(), "one");
    g.reply(&w1(), "two");
    let r = g.reply(&w1(), "three");
    assert!(matches!(
        g.response(r),
        Some(Response::Error(CallError::InboxFull { cap: 2, .. }))
    ));
    assert_eq!(g.gw.inbox_depth(), 2);
}

/// Held replies nudge the lead's own pane — only when it is injectable, at most
/// `nudge_max_reminders` times — and stop once drained.
#[test]
fn nudges_are_gated_bounded_and_stop_when_drained() {
    let mut g = Gw::with(CoreConfig {
        nudge_max_reminders: 2,
        nudge_interval_ms: 10_000,
        ..CoreConfig::default()
    });
    let pane = SessionId::new("lead-pane");
    g.send("w1", "task", true);
    g.deliver(&w1(), "❯ ");
    g.advance(Duration::from_secs(61));
    g.reply(&w1(), "late");
    let nudges = |g: &Gw| {
        g.out
            .iter()
            .filter(
                |o| matches!(o, Output::Inject { target, .. } if target.as_str() == "lead-pane"),
            )
            .count()
    };
    g.sample(&pane, AgentStatus::Working);
    assert_eq!(nudges(&g), 0, "never typed into a working lead");
    for _ in 0..6 {
        g.sample(&pane, AgentStatus::Idle);
        if let Some((t, msg, text)) = g.last_inject() {
            if t == pane {
                assert!(text.contains("fleet_poll"));
                g.input(Input::Injected {
                    target: pane.clone(),
                    msg,
                    result: Ok(String::new()),
                });
            }
        }
        g.sample(&pane, AgentStatus::Working);
        g.sample(&pane, AgentStatus::Idle);
        g.advance(Duration::from_secs(11));
    }
    assert_eq!(nudges(&g), 2, "bounded reminders");

    // A fresh reply after a drain starts over, and a drain withdraws the queued nudge.
    g.call(lead(), Request::Drain { target: w1() });
    g.reply(&w1(), "another");
    g.sample(&pane, AgentStatus::Working);
    g.call(lead(), Request::Drain { target: w1() });
    g.sample(&pane, AgentStatus::Idle);
    assert_eq!(nudges(&g), 2, "nothing left to nudge about");
    assert!(g.events().iter().any(|e| matches!(
        e,
        Event::Dropped {
            cause: Cause::Drained,
            ..
        }
    )));
}

/// UNKNOWN is refined from the pane: a prompt on screen means IDLE, so delivery proceeds.
#[test]
fn an_unknown_status_is_refined_from_the_screen() {
    let mut g = Gw::new();
    g.send("w1", "task", true);
    g.input(Input::StatusSampled {
        target: w1(),
        status: AgentStatus::Unknown,
        screen: Some("garbage".into()),
        asked: g.gw.newest_ask(),
    });
    assert!(g.last_inject().is_none());
    g.input(Input::StatusSampled {
        target: w1(),
        status: AgentStatus::Unknown,
        screen: Some("ok\n❯ ".into()),
        asked: g.gw.newest_ask(),
    });
    assert!(g.last_inject().is_some());
}

/// Time that runs backwards is taken as the latest time seen: no deadline fires early or twice.
#[test]
fn time_running_backwards_is_ignored() {
    let mut g = Gw::new();
    let c = g.send("w1", "task", true);
    g.now = Instant::from_millis(0);
    g.input(Input::Tick);
    assert_eq!(g.outcome(c), None);
    g.now = Instant::from_millis(61_001);
    g.input(Input::Tick);
    assert_eq!(g.outcome(c).map(|o| o.0), Some(Outcome::TimedOutQueued));
}

/// A scrape that arrives after its hold expired is stale: the next turn may already be in the
/// pane, so it must not resolve anything (review finding 5).
#[test]
fn a_scrape_that_arrives_after_its_hold_expired_resolves_nothing() {
    let mut g = Gw::new();
    let c = g.send("w1", "task", true);
    let m = g.deliver(&w1(), "❯ ");
    g.sample(&w1(), AgentStatus::Idle);
    g.advance(Duration::from_secs(16));
    g.input(Input::PaneRead {
        target: w1(),
        msg: m,
        result: Ok("❯ task\nsomething from the next turn\n❯ ".into()),
    });
    assert_eq!(g.outcome(c), None);
    assert!(g
        .events()
        .iter()
        .any(|e| matches!(e, Event::Stale { what: Stale::PaneRead { msg }, .. } if *msg == m)));
}

/// A turn that was only inferred (missed fast turn: the agent answered between two polls and
/// no WORKING was sampled) is scraped like a seen one, and ends COMPLETED_UNREPLIED with what
/// followed the echoed brief — within the pickup bound, not at the send's timeout.
#[test]
fn a_missed_fast_turn_completes_unreplied_with_its_answer() {
    let mut g = Gw::new();
    let c = g.send("w1", "summarise it", true);
    let msg = g.missed_fast_turn("❯ ");
    let Some(Output::ReadPane { target, msg: read }) = g.out.last().cloned() else {
        panic!("an inferred turn end is scraped: {:?}", g.out.last());
    };
    assert_eq!((&target, read), (&w1(), msg));
    g.scraped(msg, "❯ summarise it\n● it is fine\n❯ ");
    assert_eq!(
        g.outcome(c),
        Some((Outcome::CompletedUnreplied, Some("● it is fine".into())))
    );
}

/// An inferred end whose screen shows the brief but nothing after it (the turn is reopened)
/// or no echo at all (typed before the program took input) resolves nothing: a reply, a later
/// end or the timeout does.
#[test]
fn a_missed_fast_turn_with_no_answer_on_screen_waits_for_a_reply() {
    for screen in ["❯ task\n❯ ", "starting…\n❯ "] {
        let mut g = Gw::new();
        let c = g.send("w1", "task", true);
        let msg = g.missed_fast_turn("❯ ");
        g.scraped(msg, screen);
        assert_eq!(g.outcome(c), None, "{screen:?}");
        g.reply(&w1(), "done quickly");
        assert_eq!(
            g.outcome(c),
            Some((Outcome::Replied, Some("done quickly".into())))
        );
    }
}

/// An inferred end whose screen shows the brief taken and no answer yet is not the end (Codex
/// on a loaded host drew its answer after the pickup bound, never shown working): its pickup
/// is waited for again, and the next inferred end's scrape finds the answer —
/// COMPLETED_UNREPLIED, not TIMED_OUT_WORKING at the send's bound.
#[test]
fn a_missed_fast_turn_whose_answer_draws_late_completes_with_it() {
    let mut g = Gw::new();
    let c = g.send("w1", "say hello", true);
    let msg = g.missed_fast_turn("❯ ");
    g.scraped(msg, "❯ say hello\n");
    assert_eq!(g.outcome(c), None, "no answer on screen yet");
    g.out.clear();
    let cfg = CoreConfig::default();
    for _ in 0..cfg.pickup_grace_polls {
        g.advance(cfg.poll_interval());
        g.sample(&w1(), AgentStatus::Idle);
    }
    let Some(Output::ReadPane { msg: read, .. }) = g.out.last().cloned() else {
        panic!("its next inferred end is scraped: {:?}", g.out.last());
    };
    assert_eq!(read, msg);
    g.scraped(msg, "❯ say hello\n• hello\n❯ ");
    assert_eq!(
        g.outcome(c),
        Some((Outcome::CompletedUnreplied, Some("• hello".into())))
    );
}

/// A slow agent herdr never shows working (opencode 1.18 on herdr 0.8.2): its turn's end is
/// inferred at the pickup bound and a scrape is asked; the agent then asks, the lead answers,
/// and the scrape comes back — it is the ended turn's, never the resumed one's to resolve
/// (seen on a real opencode: the answer's continuation ended COMPLETED_UNREPLIED at once).
#[test]
fn a_scrape_asked_before_a_question_never_ends_the_answered_turn() {
    let mut g = Gw::new();
    let send = g.send("w1", "migrate", true);
    let msg = g.missed_fast_turn("❯ ");
    assert!(matches!(g.out.last(), Some(Output::ReadPane { .. })));
    g.ask(&w1(), "which db?");
    let Some(Response::Outcome {
        outcome: Outcome::Question,
        turn_id: Some(turn_id),
        ..
    }) = g.response(send).cloned()
    else {
        panic!("expected QUESTION, got {:?}", g.response(send));
    };
    let answered = g.call(
        lead(),
        Request::Answer {
            turn_id,
            content: "postgres".into(),
            wait: true,
            timeout_ms: None,
            asked_by: None,
        },
    );
    g.input(Input::PaneRead {
        target: w1(),
        msg,
        result: Ok("❯ migrate\n● which db?\n❯ ".into()),
    });
    assert_eq!(
        g.response(answered),
        None,
        "the scrape ended the answered turn"
    );
    g.reply(&w1(), "migrated to postgres");
    assert_eq!(
        g.outcome(answered),
        Some((Outcome::Replied, Some("migrated to postgres".into())))
    );
}

/// A presence round's sample of an idle member can come back after a brief was typed into
/// it: it says nothing about that turn (it may predate the brief), so it never ends it — only
/// the injector's own samples do.
#[test]
fn an_idle_rounds_sample_never_ends_a_turn_typed_since() {
    let mut g = Gw::new();
    let c = g.send("w1", "task", true);
    g.sample(&w1(), AgentStatus::Idle);
    let (_, msg, _) = g.last_inject().expect("injected");
    g.input(Input::Injected {
        target: w1(),
        msg,
        result: Ok("❯ ".into()),
    });
    let round = |asked| Input::StatusesSampled {
        round: Round::Idle,
        asked,
        samples: vec![(
            w1(),
            Sampled::Status {
                status: AgentStatus::Idle,
                screen: None,
            },
        )],
    };
    for _ in 0..8 {
        let asked = g.gw.newest_ask();
        g.input(round(asked));
    }
    let ended = |g: &Gw| {
        g.events()
            .iter()
            .any(|e| matches!(e, Event::TurnComplete { .. }))
    };
    assert!(!ended(&g), "a stale idle sample ended the turn");
    // The injector's own samples, a poll apart as polls are (the pickup bound is time too).
    for _ in 0..8 {
        g.advance(g.gw.config().poll_interval());
        g.sample(&w1(), AgentStatus::Idle);
    }
    assert!(ended(&g), "the injector's own samples still do");
    g.reply(&w1(), "done");
    assert_eq!(g.outcome(c).map(|o| o.0), Some(Outcome::Replied));
}

/// An async delegation paused on a question is still open: a second send is BUSY.
#[test]
fn a_paused_async_ticket_keeps_its_session_busy() {
    let mut g = Gw::new();
    g.send("w1", "task", false);
    g.deliver(&w1(), "❯ ");
    g.ask(&w1(), "which?");
    let c = g.send("w1", "another", true);
    assert_eq!(g.outcome(c).map(|o| o.0), Some(Outcome::Busy));
}

/// A lead pane that is gone is not nudged again and again (review finding 3).
#[test]
fn a_dead_lead_pane_is_not_nudged_forever() {
    let mut g = Gw::new();
    let pane = SessionId::new("lead-pane");
    g.send("w1", "task", true);
    g.deliver(&w1(), "❯ ");
    g.advance(Duration::from_secs(61));
    g.reply(&w1(), "late");
    g.input(Input::PaneGone {
        target: pane.clone(),
    });
    for _ in 0..20 {
        g.sample(&pane, AgentStatus::Idle);
        g.advance(Duration::from_secs(70));
    }
    let nudges = g
        .events()
        .iter()
        .filter(|e| matches!(e, Event::Nudged { .. }))
        .count();
    assert!(nudges <= 1, "{nudges} nudges to a dead pane");
    assert_eq!(g.gw.inbox_depth(), 1, "the reply is still collectable");
}

fn rebuilt(g: &Gw) -> Vec<(SessionId, fleet_core::adoption::AdoptVerdict)> {
    g.events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Rebuilt { gid, verdict } => Some((gid.clone(), *verdict)),
            _ => None,
        })
        .collect()
}

/// A restart rebuilds members from herdr's list alone: a live agent — working included, a
/// restart never kills a busy member — is adopted at its first sample and can be delegated
/// to; one herdr keeps calling `unknown` through the readiness bound is closed; one herdr
/// never answers about is left gated, neither adopted nor closed.
#[test]
fn a_restart_adopts_live_members_closes_dead_ones_and_leaves_silent_ones_alone() {
    use fleet_core::adoption::AdoptVerdict::{Adopted, Reaped, Undecided};
    let mut g = Gw::with(CoreConfig {
        spawn_ready_timeout_ms: 10_000,
        ..CoreConfig::default()
    });
    let [busy, idle, dead, silent] = ["busy", "idle", "dead", "silent"].map(SessionId::new);
    g.input(Input::MembersListed {
        members: [&busy, &idle, &dead, &silent]
            .map(|m| ListedMember::ready(m.clone()))
            .to_vec(),
    });
    for m in [&busy, &idle, &dead, &silent] {
        assert!(g
            .out
            .iter()
            .any(|o| matches!(o, Output::PollStatus { target, .. } if target == m)));
    }
    g.sample(&busy, AgentStatus::Working);
    g.sample(&idle, AgentStatus::Idle);
    for _ in 0..3 {
        g.sample(&dead, AgentStatus::Unknown);
        g.advance(Duration::from_secs(2));
    }
    assert_eq!(
        rebuilt(&g),
        vec![(busy.clone(), Adopted), (idle.clone(), Adopted)]
    );
    g.advance(Duration::from_secs(5));
    assert_eq!(
        rebuilt(&g)[2..],
        [(dead.clone(), Reaped), (silent.clone(), Undecided)]
    );
    assert!(g
        .out
        .iter()
        .any(|o| matches!(o, Output::ClosePane { gid } if *gid == dead)));
    assert!(!g
        .out
        .iter()
        .any(|o| matches!(o, Output::ClosePane { gid } if *gid == silent)));
    // The adopted idle member takes a brief; the silent one stays gated.
    let c = g.send("idle", "after the restart", false);
    assert!(matches!(g.response(c), Some(Response::Ticket(_))));
    g.sample(&idle, AgentStatus::Idle);
    assert!(
        matches!(g.last_inject(), Some((t, _, text)) if t == idle && text == "after the restart")
    );
    assert_eq!(g.gw.member_ready(&silent), Some(false));
}

/// A restart that finds a member's launch mark (its gate never passed before the process
/// stopped) does not take an idle sample as readiness — herdr calls a starting agent idle
/// seconds before it takes input — and types nothing until the member connects; one that never
/// connects within the bound is half-built and closed. Passing the gate drops the mark.
#[test]
fn a_member_still_starting_at_a_restart_is_adopted_only_by_its_connection() {
    use fleet_core::adoption::AdoptVerdict::{Adopted, Reaped};
    let mut g = Gw::with(CoreConfig {
        spawn_ready_timeout_ms: 10_000,
        ..CoreConfig::default()
    });
    let [booting, stuck] = ["booting", "stuck"].map(SessionId::new);
    g.input(Input::MembersListed {
        members: [&booting, &stuck]
            .map(|m| ListedMember {
                gid: m.clone(),
                starting: Some(fleet_core::Readiness::OnConnect),
            })
            .to_vec(),
    });
    g.sample(&booting, AgentStatus::Idle);
    g.sample(&stuck, AgentStatus::Idle);
    assert_eq!(rebuilt(&g), vec![]);
    let c = g.send("booting", "not before it takes input", false);
    assert!(matches!(g.response(c), Some(Response::Ticket(_))));
    g.sample(&booting, AgentStatus::Idle);
    assert_eq!(g.last_inject(), None, "typed into an agent still starting");
    g.input(Input::MemberConnected {
        target: booting.clone(),
    });
    assert_eq!(rebuilt(&g), vec![(booting.clone(), Adopted)]);
    assert!(g
        .out
        .iter()
        .any(|o| matches!(o, Output::MemberReady { gid } if *gid == booting)));
    g.sample(&booting, AgentStatus::Idle);
    assert!(matches!(g.last_inject(), Some((t, _, text))
        if t == booting && text == "not before it takes input"));
    g.advance(Duration::from_secs(11));
    assert_eq!(rebuilt(&g)[1..], [(stuck.clone(), Reaped)]);
    assert!(g
        .out
        .iter()
        .any(|o| matches!(o, Output::ClosePane { gid } if *gid == stuck)));
}

/// A restart finds an agent whose launch recorded a prompt gate still starting: its
/// connection alone does not adopt it (it may connect seconds before it draws its prompt);
/// the core's looks at its screen do, once the prompt is there. One that shows a dialog is
/// reaped, naming it.
#[test]
fn a_restart_goes_on_with_a_starting_agents_prompt_gate() {
    use fleet_core::adoption::AdoptVerdict::{Adopted, Reaped};
    let mut g = Gw::new();
    let rules = CLAUDE_GATE;
    let [drawing, asking] = ["drawing", "asking"].map(SessionId::new);
    g.input(Input::MembersListed {
        members: [&drawing, &asking]
            .map(|m| ListedMember {
                gid: m.clone(),
                starting: Some(rules),
            })
            .to_vec(),
    });
    assert_eq!(g.looks_at(&drawing), 1, "looked at once");
    g.input(Input::MemberConnected {
        target: drawing.clone(),
    });
    g.start_screen(&drawing, CLAUDE_BANNER);
    assert_eq!(rebuilt(&g), vec![], "connected, but no prompt yet");
    assert_eq!(g.gw.member_ready(&drawing), Some(false));
    g.advance(Duration::from_millis(250));
    assert_eq!(g.looks_at(&drawing), 2);
    g.start_screen(&drawing, &claude_prompt());
    assert_eq!(rebuilt(&g), vec![(drawing.clone(), Adopted)]);
    assert_eq!(g.gw.member_ready(&drawing), Some(true));
    let trust =
        "Accessing workspace:\n\n /srv/app\n\n Is this a project you created or one you trust?";
    g.start_screen(&asking, trust);
    assert_eq!(rebuilt(&g)[1..], [(asking.clone(), Reaped)]);
    assert!(g
        .out
        .iter()
        .any(|o| matches!(o, Output::ClosePane { gid } if *gid == asking)));
}

impl Gw {
    /// The launcher placed `gid`'s pane, a `command` member the gateway then sees injectable.
    fn launched_injectable(&mut self, gid: &SessionId) {
        self.input(Input::Spawned {
            gid: gid.clone(),
            result: Ok(fleet_core::Readiness::OnInjectable.into()),
        });
        self.input(Input::StartLooked {
            gid: gid.clone(),
            look: Ok(Sampled::Status {
                status: AgentStatus::Idle,
                screen: None,
            }),
        });
    }

    /// A spawn asked here; the gid the launcher is asked to place.
    fn spawn_here(&mut self) -> (CallId, SessionId) {
        let c = self.call(
            lead(),
            Request::Spawn {
                host: None,
                spec: fleet_core::SpawnSpec::of("claude"),
            },
        );
        let gid = self
            .out
            .iter()
            .rev()
            .find_map(|o| match o {
                Output::SpawnPane { gid, .. } => Some(gid.clone()),
                _ => None,
            })
            .expect("a pane launched");
        (c, gid)
    }

    /// The launcher placed `gid`'s pane, a Claude Code member gated on its prompt.
    fn launched_claude(&mut self, gid: &SessionId) {
        self.input(Input::Spawned {
            gid: gid.clone(),
            result: Ok(CLAUDE_GATE.into()),
        });
    }

    /// The gateway's look at starting `gid` sees `screen`.
    fn start_screen(&mut self, gid: &SessionId, screen: &str) {
        self.input(Input::StartLooked {
            gid: gid.clone(),
            look: Ok(Sampled::Status {
                status: AgentStatus::Idle,
                screen: Some(screen.into()),
            }),
        });
    }

    fn looks_at(&self, gid: &SessionId) -> usize {
        self.out
            .iter()
            .filter(|o| matches!(o, Output::LookAtStart { gid: g } if g == gid))
            .count()
    }
}

fn claude_profile() -> CoreConfig {
    CoreConfig {
        profiles: vec!["claude".into()],
        ..CoreConfig::default()
    }
}

/// How a Claude Code member's readiness is known: its prompt on screen.
const CLAUDE_GATE: fleet_core::Readiness =
    fleet_core::Readiness::OnPrompt(fleet_core::agent_screen::StartRules::ClaudeCode);

/// Claude Code's start screen, its banner drawn and its input box not yet.
const CLAUDE_BANNER: &str = " ▐▛███▛█   Claude Code v2.1.328\n▝▜██████▀  Opus 5.5\n";

fn claude_prompt() -> String {
    let rule = "─".repeat(60);
    format!("{CLAUDE_BANNER}{rule}\n❯ \n{rule}\n  ⏵⏵ auto mode on")
}

/// A real Claude Code connects to the gateway's MCP seconds before it draws its prompt, and
/// drops what is typed before: its gate is its prompt on screen, looked at on the core's
/// clock, and the connection that came first is held until then.
#[test]
fn an_agent_that_connects_before_its_prompt_is_ready_only_at_its_prompt() {
    let mut g = Gw::with(claude_profile());
    let (c, gid) = g.spawn_here();
    g.launched_claude(&gid);
    assert_eq!(g.looks_at(&gid), 1, "the first look is asked at once");
    g.input(Input::MemberConnected {
        target: gid.clone(),
    });
    g.start_screen(&gid, CLAUDE_BANNER);
    assert_eq!(g.response(c), None, "connected, but no prompt yet");
    assert_eq!(g.gw.member_ready(&gid), Some(false));
    g.advance(Duration::from_millis(250));
    assert_eq!(g.looks_at(&gid), 2, "looked at again one poll later");
    g.start_screen(&gid, &claude_prompt());
    assert!(
        matches!(g.response(c), Some(Response::Spawned { gid: s, .. }) if *s == gid),
        "{:?}",
        g.response(c)
    );
    assert_eq!(g.gw.member_ready(&gid), Some(true));
    g.advance(Duration::from_millis(1_000));
    assert_eq!(g.looks_at(&gid), 2, "no look once it passed");
}

/// A first-run dialog at start fails the spawn at once, naming it; its pane is closed and
/// nothing is ever typed into it.
#[test]
fn a_dialog_at_start_fails_the_spawn_naming_it() {
    let mut g = Gw::with(claude_profile());
    let (c, gid) = g.spawn_here();
    g.launched_claude(&gid);
    g.input(Input::MemberConnected {
        target: gid.clone(),
    });
    let trust = "Accessing workspace:\n\n /srv/app\n\n Quick safety check: Is this a project you created or one you trust?\n\n ❯ No, exit";
    g.start_screen(&gid, trust);
    let Some(Response::Error(CallError::SpawnFailed { reason })) = g.response(c) else {
        panic!("{:?}", g.response(c));
    };
    assert!(
        reason.starts_with("claude-code is asking whether to trust /srv/app"),
        "{reason}"
    );
    assert!(g
        .out
        .iter()
        .any(|o| matches!(o, Output::ClosePane { gid: x } if *x == gid)));
    assert!(!g.out.iter().any(|o| matches!(o, Output::Inject { .. })));
}

/// A program that ended at start fails its spawn at once with its exit, not at the bound;
/// one that never draws its prompt fails at the bound with its last screen.
#[test]
fn an_agent_that_never_starts_fails_saying_how() {
    let mut g = Gw::with(CoreConfig {
        start_timeout_ms: 1_000,
        ..claude_profile()
    });
    let (ended, gid) = g.spawn_here();
    g.launched_claude(&gid);
    g.input(Input::StartLooked {
        gid: gid.clone(),
        look: Ok(Sampled::Ended {
            why: "its program exited with status 1; its screen ended:\nAPI Error".into(),
        }),
    });
    let Some(Response::Error(CallError::SpawnFailed { reason })) = g.response(ended) else {
        panic!("{:?}", g.response(ended));
    };
    assert!(
        reason.starts_with("claude-code did not start: its program exited with status 1"),
        "{reason}"
    );
    // The event watcher may read the exit first: the gate words it the same.
    let (watched, gid) = g.spawn_here();
    g.launched_claude(&gid);
    g.input(Input::Spawned {
        gid: gid.clone(),
        result: Err(fleet_core::SpawnError::Ended(
            "its program exited with status 1".into(),
        )),
    });
    let Some(Response::Error(CallError::SpawnFailed { reason })) = g.response(watched) else {
        panic!("{:?}", g.response(watched));
    };
    assert_eq!(
        reason,
        "claude-code did not start: its program exited with status 1"
    );
    assert!(g
        .out
        .iter()
        .any(|o| matches!(o, Output::ClosePane { gid: x } if *x == gid)));
    let (slow, gid) = g.spawn_here();
    g.launched_claude(&gid);
    for _ in 0..4 {
        g.start_screen(&gid, CLAUDE_BANNER);
        assert_eq!(g.response(slow), None);
        g.advance(Duration::from_millis(250));
    }
    g.start_screen(&gid, CLAUDE_BANNER);
    let Some(Response::Error(CallError::SpawnFailed { reason })) = g.response(slow) else {
        panic!("{:?}", g.response(slow));
    };
    assert!(reason.starts_with("claude-code did not show its prompt within 1000 ms; its screen ended:\n ▐▛███▛█   Claude Code"), "{reason}");
}

/// A member token that outlived its pane (a process left behind) announces nothing: the
/// gateway knows no pane for it.
#[test]
fn a_connect_for_no_known_pane_is_stale() {
    let mut g = Gw::new();
    let ghost = SessionId::new("ghost");
    g.input(Input::MemberConnected {
        target: ghost.clone(),
    });
    assert!(g.events().iter().any(|e| matches!(
        e,
        Event::Stale { what: Stale::UnknownMember, target } if *target == ghost
    )));
    assert_eq!(g.gw.member_ready(&ghost), None);
}

/// One host: a member's row carries its sampled status while idle (not null), busy while its
/// turn runs, and `fleet_status` of a gid nobody serves is `not_found`, never "ready".
#[test]
fn the_single_host_roster_is_truthful_and_an_unknown_gid_is_not_found() {
    let mut g = Gw::new();
    let m = SessionId::new("m1");
    g.input(Input::MemberStarted { target: m.clone() });
    g.input(Input::MemberConnected { target: m.clone() });
    assert!(g
        .out
        .iter()
        .any(|o| matches!(o, Output::PollStatus { target, .. } if target == &m)));
    g.sample(&m, AgentStatus::Idle);
    let row = |g: &mut Gw| {
        let c = g.call(lead(), Request::List);
        match g.response(c) {
            Some(Response::Roster { rows }) => rows.iter().find(|r| r.gid == m).cloned(),
            other => panic!("{other:?}"),
        }
    };
    let r = row(&mut g).expect("listed");
    assert_eq!(
        (r.status, r.busy, r.ready),
        (Some(AgentStatus::Idle), false, true)
    );
    g.send("m1", "go", false);
    g.deliver(&m, "base");
    assert_eq!(
        row(&mut g).map(|r| (r.status, r.busy)),
        Some((Some(AgentStatus::Working), true))
    );
    let c = g.call(
        lead(),
        Request::Status {
            target: SessionId::new("nobody"),
        },
    );
    assert_eq!(
        g.response(c),
        Some(&Response::Error(CallError::NotFound {
            target: SessionId::new("nobody"),
            departed: None
        }))
    );
}

// ---- fleet health --------------------------------------------------------------------------

impl Gw {
    /// A member pane started and connected.
    fn member(&mut self, gid: &SessionId) {
        self.input(Input::MemberStarted {
            target: gid.clone(),
        });
        self.input(Input::MemberConnected {
            target: gid.clone(),
        });
    }

    /// Waits out the health round and answers its probe with `status` and `screen`.
    fn probe(&mut self, gid: &SessionId, status: AgentStatus, screen: &str) {
        self.advance(Duration::from_millis(self.gw.config().health.interval_ms));
        let asked = self.out.iter().rev().find_map(|o| match o {
            Output::ProbeHealth { targets } => Some(targets.clone()),
            _ => None,
        });
        assert!(
            asked.is_some_and(|t| t.contains(gid)),
            "no probe asked for {gid}"
        );
        self.input(Input::HealthProbed {
            probes: vec![(
                gid.clone(),
                Sampled::Status {
                    status,
                    screen: Some(screen.into()),
                },
            )],
        });
    }

    /// The state the last health change of `gid` went to.
    fn health(&self, gid: &SessionId) -> Option<Health> {
        self.out.iter().rev().find_map(|o| match o {
            Output::Event(Event::HealthChanged { target, to, .. }) if target == gid => Some(*to),
            _ => None,
        })
    }

    fn row_health(&mut self, gid: &SessionId) -> (Option<Health>, Option<String>) {
        let c = self.call(lead(), Request::List);
        match self.response(c) {
            Some(Response::Roster { rows }) => rows
                .iter()
                .find(|r| &r.gid == gid)
                .map(|r| (r.health, r.health_reason.clone()))
                .unwrap_or_default(),
            other => panic!("fleet_list answered {other:?}"),
        }
    }
}

#[test]
fn a_member_is_starting_until_it_connects_then_idle_then_working() {
    let mut g = Gw::new();
    g.input(Input::MemberStarted { target: w1() });
    g.probe(&w1(), AgentStatus::Unknown, "booting");
    assert_eq!(g.health(&w1()), Some(Health::Starting));
    g.input(Input::MemberConnected { target: w1() });
    g.probe(&w1(), AgentStatus::Idle, "❯ ");
    assert_eq!(g.health(&w1()), Some(Health::Idle));
    let _ = g.send("w1", "task", false);
    g.deliver(&w1(), "❯ ");
    g.probe(&w1(), AgentStatus::Working, "✻ Working… (esc to interrupt)");
    assert_eq!(g.health(&w1()), Some(Health::Working));
    assert_eq!(
        g.row_health(&w1()),
        (
            Some(Health::Working),
            Some("herdr says it is working".into())
        )
    );
    assert_eq!(g.gw.health_counts()[&Health::Working], 1);
}

#[test]
fn two_turns_ended_by_the_fallback_make_a_member_mute_and_a_reply_clears_it() {
    let mut g = Gw::new();
    g.member(&w1());
    for n in 0..2 {
        let _ = g.send("w1", &format!("task {n}"), false);
        let msg = g.deliver(&w1(), "❯ ");
        g.complete(&w1(), msg, &format!("❯ \n● done {n}\n❯ "));
        g.advance(Duration::from_millis(100));
    }
    assert_eq!(g.gw.mute_turns_total(), 2);
    g.probe(&w1(), AgentStatus::Idle, "❯ ");
    assert_eq!(g.health(&w1()), Some(Health::Mute));
    let _ = g.send("w1", "task 3", false);
    let _ = g.deliver(&w1(), "❯ ");
    let _ = g.reply(&w1(), "done 3");
    g.sample(&w1(), AgentStatus::Idle);
    g.advance(Duration::from_millis(100));
    g.probe(&w1(), AgentStatus::Idle, "❯ ");
    assert_eq!(g.health(&w1()), Some(Health::Idle));
}

#[test]
fn a_fatal_line_on_an_idle_members_screen_is_an_error_on_screen_with_the_line() {
    let mut g = Gw::new();
    g.member(&w1());
    g.probe(
        &w1(),
        AgentStatus::Idle,
        "work\n\u{1b}[31mAPI Error: 401 {\"type\":\"authentication_error\"}\u{1b}[0m\n❯ ",
    );
    assert_eq!(g.health(&w1()), Some(Health::ErrorOnScreen));
    let (h, why) = g.row_health(&w1());
    assert_eq!(h, Some(Health::ErrorOnScreen));
    assert_eq!(
        why.as_deref(),
        Some("its screen says: API Error: 401 {\"type\":\"authentication_error\"}")
    );
}

#[test]
fn a_member_that_goes_is_gone_and_fleet_status_says_why() {
    let mut g = Gw::new();
    g.member(&w1());
    g.probe(&w1(), AgentStatus::Idle, "❯ ");
    g.input(Input::PaneGone { target: w1() });
    assert_eq!(g.health(&w1()), Some(Health::Gone));
    let c = g.call(lead(), Request::Status { target: w1() });
    match g.response(c) {
        Some(Response::Error(CallError::NotFound {
            departed: Some(t), ..
        })) => {
            assert_eq!(t.state, Health::Gone);
            assert_eq!(t.reason, "its pane closed or its process exited");
        }
        other => panic!("fleet_status answered {other:?}"),
    }
    assert_eq!(g.gw.health_counts()[&Health::Gone], 1);
    // The tombstone goes after its bound.
    g.advance(Duration::from_millis(g.gw.config().health.tombstone_ms));
    assert_eq!(g.gw.health_counts()[&Health::Gone], 0);
}

#[test]
fn a_probe_that_finds_the_pane_gone_ends_what_was_typed_into_it() {
    let mut g = Gw::new();
    g.member(&w1());
    let c = g.send("w1", "task", true);
    g.deliver(&w1(), "❯ ");
    g.advance(Duration::from_millis(g.gw.config().health.interval_ms));
    g.input(Input::HealthProbed {
        probes: vec![(w1(), Sampled::Gone)],
    });
    assert_eq!(g.health(&w1()), Some(Health::Gone));
    assert_eq!(g.outcome(c).map(|o| o.0), Some(Outcome::WorkerFailed));
}

#[test]
fn a_member_whose_pane_never_connects_is_never_ready() {
    let mut g = Gw::with(CoreConfig {
        spawn_ready_timeout_ms: 20_000,
        ..CoreConfig::default()
    });
    g.input(Input::MemberStarted { target: w1() });
    g.probe(&w1(), AgentStatus::Idle, "❯ ");
    assert_eq!(g.health(&w1()), Some(Health::Starting));
    g.probe(&w1(), AgentStatus::Idle, "❯ ");
    assert_eq!(g.health(&w1()), Some(Health::NeverReady));
    g.input(Input::PaneGone { target: w1() });
    let c = g.call(lead(), Request::Status { target: w1() });
    assert!(matches!(
        g.response(c),
        Some(Response::Error(CallError::NotFound {
            departed: Some(fleet_core::health::Tombstone {
                state: Health::NeverReady,
                ..
            }),
            ..
        }))
    ));
}

#[test]
fn pending_work_a_lost_boundary_a_stall_a_stray_prompt_and_a_stranded_reply_are_each_seen() {
    let mut g = Gw::new();
    g.member(&w1());
    // Queued, not typed yet: the probe's sample is not the injector's.
    let _ = g.send("w1", "task", false);
    g.probe(&w1(), AgentStatus::Idle, "❯ ");
    assert_eq!(g.health(&w1()), Some(Health::WorkPending));
    // Typed, and never seen WORKING: the turn's end is inferred.
    g.sample(&w1(), AgentStatus::Idle);
    let (_, msg, _) = g.last_inject().expect("typed");
    g.input(Input::Injected {
        target: w1(),
        msg,
        result: Ok("❯ ".into()),
    });
    for i in 0..g.gw.config().pickup_grace_polls {
        if i > 0 {
            g.advance(g.gw.config().poll_interval());
        }
        g.sample(&w1(), AgentStatus::Idle);
    }
    g.probe(&w1(), AgentStatus::Idle, "❯ ");
    assert_eq!(g.health(&w1()), Some(Health::TurnBoundaryLost));
    let _ = g.reply(&w1(), "done 1");
    // A turn whose pane herdr cannot read.
    let _ = g.send("w1", "task 2", false);
    g.deliver(&w1(), "❯ ");
    g.probe(&w1(), AgentStatus::Unknown, "▒▒ ░▒");
    assert_eq!(g.health(&w1()), Some(Health::StallSuspected));
    // A prompt fleetd did not make.
    g.probe(&w1(), AgentStatus::Blocked, "Allow this command? (y/n)");
    assert_eq!(g.health(&w1()), Some(Health::BlockedAmbiguous));
    // A reply nobody asked for is held for no lead.
    let w2 = SessionId::new("w2");
    g.member(&w2);
    let _ = g.reply(&w2, "unasked");
    g.probe(&w2, AgentStatus::Idle, "❯ ");
    assert_eq!(g.health(&w2), Some(Health::ReplyStranded));
    let c = g.call(lead(), Request::Drain { target: w2.clone() });
    assert!(matches!(g.response(c), Some(Response::Replies { replies }) if !replies.is_empty()));
    g.probe(&w2, AgentStatus::Idle, "❯ ");
    assert_eq!(g.health(&w2), Some(Health::Idle));
}

// ---- placement and quarantine --------------------------------------------------------------

impl Gw {
    /// An unqualified spawn here, launched ready at once: the gid and the profile placement
    /// chose, or the spawn's error.
    fn spawn_unqualified(&mut self) -> Result<(SessionId, String), CallError> {
        let c = self.call(
            lead(),
            Request::Spawn {
                host: None,
                spec: fleet_core::SpawnSpec::default(),
            },
        );
        let launched = self.out.iter().rev().find_map(|o| match o {
            Output::SpawnPane { gid, spec } => Some((gid.clone(), spec.profile.clone())),
            _ => None,
        });
        if let Some(Response::Error(e)) = self.response(c) {
            return Err(e.clone());
        }
        let (gid, profile) = launched.expect("a pane launched");
        self.launched_injectable(&gid);
        assert!(matches!(self.response(c), Some(Response::Spawned { .. })));
        Ok((gid, profile))
    }
}

fn two_profiles(strategy: fleet_core::placement::Strategy) -> CoreConfig {
    use fleet_core::placement::{PlacementConfig, ProfilePlacement};
    let placed = |weight, credential: &str| ProfilePlacement {
        weight,
        max_load: 0,
        credential: Some(credential.into()),
    };
    CoreConfig {
        profiles: vec!["heavy".into(), "light".into()],
        placement: PlacementConfig {
            strategy,
            default_profile: Some("heavy".into()),
            profiles: [
                ("heavy".to_string(), placed(10, "acct-1")),
                ("light".to_string(), placed(1, "acct-2")),
            ]
            .into_iter()
            .collect(),
            ..PlacementConfig::default()
        },
        ..CoreConfig::default()
    }
}

/// opencode retries OpenAI's `insufficient_quota` for ever: its turn never ends, and the limit
/// shows only in its status line. Seen at two health probes in a row while the turn runs, it
/// ends the send BACKEND_EXHAUSTED and cools the credential; seen once (a retry that then
/// went through), it ends nothing.
#[test]
fn a_usage_limit_shown_while_the_turn_runs_ends_it_backend_exhausted() {
    let mut cfg = two_profiles(fleet_core::placement::Strategy::Weighted);
    cfg.health.interval_ms = 5_000;
    let mut g = Gw::with(cfg);
    g.input(Input::WallClock {
        unix_ms: 1_700_000_000_000,
    });
    let (m, _) = g.spawn_unqualified().expect("placed");
    let c = g.send(m.as_str(), "go", true);
    g.deliver(&m, "❯ ");
    let limit = "  ┃  go\n  ╹▀▀▀\n   ■■⬝⬝ You exceeded your current quota, please check your plan. [retrying attempt #2]";
    let retried = "  ┃  go\n  ╹▀▀▀\n   ■■⬝⬝ working";
    g.probe(&m, AgentStatus::Working, limit);
    g.probe(&m, AgentStatus::Working, retried);
    g.probe(&m, AgentStatus::Working, limit);
    assert_eq!(g.outcome(c), None, "never twice in a row yet");
    assert!(!g
        .out
        .iter()
        .any(|o| matches!(o, Output::Event(Event::Quarantined { .. }))));
    g.probe(&m, AgentStatus::Working, limit);
    assert_eq!(
        g.outcome(c),
        Some((
            Outcome::BackendExhausted,
            Some("exceeded your current quota".into())
        ))
    );
    assert!(g.out.iter().any(|o| matches!(o,
        Output::Event(Event::Quarantined { credential, .. }) if credential == "acct-1")));
}

#[test]
fn a_usage_limit_quarantines_the_credential_and_the_next_unqualified_spawn_lands_elsewhere() {
    let mut g = Gw::with(two_profiles(fleet_core::placement::Strategy::Weighted));
    g.input(Input::WallClock {
        unix_ms: 1_700_000_000_000,
    });
    let (m, profile) = g.spawn_unqualified().expect("placed");
    assert_eq!(profile, "heavy");
    // Its backend refuses: the turn ends BACKEND_EXHAUSTED.
    let c = g.send(m.as_str(), "task", true);
    let msg = g.deliver(&m, "❯ ");
    g.complete(&m, msg, "❯ \n⚠ Claude usage limit reached. Resets 5pm.\n❯ ");
    assert_eq!(g.outcome(c).map(|o| o.0), Some(Outcome::BackendExhausted));
    let until = 1_700_000_000_000 + 30 * 60_000;
    assert!(g.out.iter().any(|o| matches!(o,
        Output::Event(Event::Quarantined { credential, until_unix_ms, .. })
            if credential == "acct-1" && *until_unix_ms == until)));
    // It waits on a person, since the refusal: "needs you" says for how long.
    g.advance(Duration::from_millis(5_000));
    let c = g.call(lead(), Request::Attention);
    match g.response(c) {
        Some(Response::Attention(a)) => {
            let cooling = a
                .needs
                .iter()
                .find(|n| n.need.id == "credential_cooling:acct-1")
                .expect("listed");
            assert!(cooling.waiting_ms >= 5_000, "{cooling:?}");
        }
        other => panic!("attention answered {other:?}"),
    }
    // Weighted 10:1 would take heavy again; its credential cools down, so light it is.
    let (_, next) = g.spawn_unqualified().expect("placed");
    assert_eq!(next, "light");
    let c = g.call(lead(), Request::Profiles);
    match g.response(c) {
        Some(Response::Profiles {
            profiles,
            default_profile,
            ..
        }) => {
            assert_eq!(default_profile.as_deref(), Some("heavy"));
            let heavy = profiles.iter().find(|p| p.name == "heavy").expect("listed");
            assert_eq!((heavy.load, heavy.cooling_until), (1, Some(until)));
            let light = profiles.iter().find(|p| p.name == "light").expect("listed");
            assert_eq!((light.load, light.cooling_until), (1, None));
        }
        other => panic!("fleet_profiles answered {other:?}"),
    }
    // After the cooldown heavy takes its share again.
    g.advance(Duration::from_millis(30 * 60_000));
    let (_, again) = g.spawn_unqualified().expect("placed");
    assert_eq!(again, "heavy");
}

#[test]
fn fixed_placement_refuses_while_its_profile_cools_down_and_names_the_credential() {
    let mut g = Gw::with(two_profiles(fleet_core::placement::Strategy::Fixed));
    g.input(Input::WallClock { unix_ms: 1_000 });
    let (m, profile) = g.spawn_unqualified().expect("placed");
    assert_eq!(profile, "heavy");
    let _ = g.send(m.as_str(), "task", true);
    let msg = g.deliver(&m, "❯ ");
    g.complete(&m, msg, "❯ \nYou've hit your usage limit\n❯ ");
    match g.spawn_unqualified() {
        Err(CallError::SpawnFailed { reason }) => assert!(
            reason.contains("credential acct-1 cools down until 1801000"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    // Named, a profile is the caller's choice: placement does not gate it.
    let c = g.call(
        lead(),
        Request::Spawn {
            host: None,
            spec: fleet_core::SpawnSpec {
                profile: "heavy".into(),
                ..fleet_core::SpawnSpec::default()
            },
        },
    );
    assert!(g.response(c).is_none(), "still launching");
}

// ---- the lead heartbeat (CB-551) -------------------------------------------------------------

impl Gw {
    /// The lead's pane is at rest: the waiting reminder is typed, and its turn is over.
    fn lead_reads(&mut self, lead_pane: &SessionId) -> String {
        self.sample(lead_pane, AgentStatus::Idle);
        let (target, msg, text) = self.last_inject().expect("typed");
        assert_eq!(&target, lead_pane);
        self.input(Input::Injected {
            target: target.clone(),
            msg,
            result: Ok("❯ ".into()),
        });
        for _ in 0..self.gw.config().pickup_grace_polls {
            self.sample(lead_pane, AgentStatus::Idle);
        }
        text
    }

    fn heartbeats(&self) -> usize {
        self.out
            .iter()
            .filter(|o| matches!(o, Output::Event(Event::Heartbeat { .. })))
            .count()
    }
}

#[test]
fn a_quiet_lead_with_work_outstanding_is_reminded_a_bounded_number_of_times() {
    let lead_pane = SessionId::new("lead-pane");
    let mut g = Gw::with(CoreConfig {
        heartbeats: [(
            lead_pane.clone(),
            fleet_core::gateway::HeartbeatConfig {
                idle_after_ms: 60_000,
                max_beats: 2,
            },
        )]
        .into_iter()
        .collect(),
        ..CoreConfig::default()
    });
    g.member(&w1());
    let c = g.call(
        lead(),
        Request::Send {
            target: w1(),
            content: "a long task".into(),
            wait: false,
            timeout_ms: Some(3_600_000),
        },
    );
    let ticket = match g.response(c) {
        Some(Response::Ticket(t)) => t.ticket,
        other => panic!("{other:?}"),
    };
    g.deliver(&w1(), "❯ ");
    // Quiet for a minute with a delegation open: reminded once, in its own pane.
    g.advance(Duration::from_millis(60_000));
    assert_eq!(g.heartbeats(), 1);
    let text = g.lead_reads(&lead_pane);
    assert!(
        text.starts_with("[fleet] heartbeat: 1 delegation(s)"),
        "{text}"
    );
    // At most max_beats until it acts.
    for _ in 0..3 {
        let before = g.heartbeats();
        g.advance(Duration::from_millis(60_000));
        if g.heartbeats() > before {
            let _ = g.lead_reads(&lead_pane);
        }
    }
    assert_eq!(g.heartbeats(), 2);
    // It acts (polls): the count starts again.
    let _ = g.call(lead(), Request::Poll { ticket });
    g.advance(Duration::from_millis(60_000));
    assert_eq!(g.heartbeats(), 3);
    let _ = g.lead_reads(&lead_pane);
    // Its work ends and it collects: nothing is outstanding, nothing more is typed.
    let _ = g.reply(&w1(), "done");
    let _ = g.call(lead(), Request::Poll { ticket });
    g.advance(Duration::from_millis(60_000));
    g.advance(Duration::from_millis(60_000));
    assert_eq!(g.heartbeats(), 3);
}

#[test]
fn a_lead_without_a_heartbeat_is_never_reminded() {
    let mut g = Gw::new();
    g.member(&w1());
    let _ = g.send("w1", "a long task", false);
    g.deliver(&w1(), "❯ ");
    g.advance(Duration::from_millis(3_600_000));
    assert_eq!(g.heartbeats(), 0);
}

impl Gw {
    fn overview(&mut self, caller: Principal) -> Overview {
        let c = self.call(caller, Request::Overview);
        match self.response(c) {
            Some(Response::Overview(o)) => (**o).clone(),
            other => panic!("expected an overview, got {other:?}"),
        }
    }
}

/// The operators' view follows a delegation through its phases — queued until the member is
/// ready, typed, asking (the question shown only to a caller that may answer it), done while
/// its ticket is kept — and shows a late reply held for its lead, with this host's counts.
#[test]
fn the_overview_follows_a_delegation_queued_typed_asking_done_and_a_held_reply() {
    let mut g = Gw::new();
    let c = g.send("w1", "task", false);
    let ticket = g.ticket(c);
    let o = g.overview(lead());
    assert_eq!(o.hosts.len(), 1);
    assert_eq!(o.hosts[0].link, Link::None);
    assert_eq!(o.hosts[0].ops.as_ref().map(|ops| ops.delegations), Some(1));
    assert_eq!(
        o.may,
        [Action::Spawn, Action::Stop, Action::Send, Action::Drain]
    );
    let d = &o.delegations[0];
    assert_eq!(
        (d.ticket, d.phase, d.half),
        (ticket, FlowPhase::Queued, Half::Local)
    );
    assert_eq!(d.lead, Some(SessionId::new("lead-pane")));
    assert!(d.ends_in_ms.is_some_and(|ms| ms <= 60_000));

    g.deliver(&w1(), "❯ ");
    assert_eq!(g.overview(lead()).delegations[0].phase, FlowPhase::Typed);

    g.ask(&w1(), "which branch?");
    let asking = g.overview(lead()).delegations[0].clone();
    assert_eq!(asking.phase, FlowPhase::Asking);
    assert_eq!(asking.question.as_deref(), Some("which branch?"));
    assert!(asking.turn_id.is_some());
    // Another lead reads that a question is open, not the question nor the turn to answer.
    let seen_by_other_lead = g.overview(Principal::primary(
        "lead2",
        Some(SessionId::new("lead2-pane")),
    ));
    assert_eq!(seen_by_other_lead.delegations[0].phase, FlowPhase::Asking);
    assert_eq!(
        (
            &seen_by_other_lead.delegations[0].question,
            seen_by_other_lead.delegations[0].turn_id
        ),
        (&None, None)
    );
    // A member may read the fleet, not another's question, and is offered no action.
    let seen_by_member = g.overview(Principal::worker(SessionId::new("w2")));
    assert_eq!(seen_by_member.delegations[0].phase, FlowPhase::Asking);
    assert_eq!(seen_by_member.delegations[0].question, None);
    assert!(seen_by_member.may.is_empty());
    // Nobody without a token reads it at all.
    let c = g.call(Principal::anonymous(), Request::Overview);
    assert!(matches!(
        g.response(c),
        Some(Response::Error(CallError::Denied { .. }))
    ));

    let turn_id = asking.turn_id.expect("asking names its turn");
    g.call(
        lead(),
        Request::Answer {
            turn_id,
            content: "main".into(),
            wait: false,
            timeout_ms: None,
            asked_by: None,
        },
    );
    g.reply(&w1(), "done on main");
    let done = g.overview(lead());
    assert_eq!(done.delegations.len(), 1);
    let d = &done.delegations[0];
    assert_eq!(
        (d.phase, d.outcome),
        (FlowPhase::Done, Some(Outcome::Replied))
    );
    assert_eq!((d.msg, d.ends_in_ms), (None, None));
    // Shown as long as its ticket is kept (ten minutes from its ending), polled or not.
    g.poll(ticket);
    assert_eq!(g.overview(lead()).delegations.len(), 1);
    g.advance(Duration::from_secs(601));
    assert!(g.overview(lead()).delegations.is_empty());

    // A reply after its delegation timed out is held for the lead, and shown as held.
    let w2 = SessionId::new("w2");
    let c = g.send("w2", "again", true);
    g.deliver(&w2, "❯ ");
    g.advance(Duration::from_secs(61));
    assert_eq!(g.outcome(c), Some((Outcome::TimedOutWorking, None)));
    g.reply(&w2, "late result");
    g.advance(Duration::from_secs(2));
    let o = g.overview(lead());
    assert!(o.delegations.is_empty());
    assert_eq!(o.held.len(), 1);
    let h = &o.held[0];
    assert_eq!((&h.target, h.count, h.bytes), (&w2, 1, "late result".len()));
    assert_eq!(h.lead, Some(SessionId::new("lead-pane")));
    assert_eq!(h.oldest_ms, 2_000);
    assert_eq!(
        o.hosts[0]
            .ops
            .as_ref()
            .map(|ops| (ops.delegations, ops.held)),
        Some((0, 1))
    );
}

/// A sample asked before a brief was typed but heard after the typing says nothing of the
/// member: herdr may have served it before the text landed, and a late WORKING read as the
/// brief's pickup would let the next IDLE end a turn the member never started. The same
/// WORKING asked after the typing is the pickup. (The driver feeds answers as they finish; the
/// core judges their age from the place each ask carries.)
#[test]
fn a_sample_asked_before_a_typing_and_heard_after_it_says_nothing() {
    let mut g = Gw::new();
    g.send("w1", "task", true);
    let before = g
        .out
        .iter()
        .rev()
        .find_map(|o| match o {
            Output::PollStatus { target, asked } if *target == w1() => Some(*asked),
            _ => None,
        })
        .expect("the send asks for w1's status");
    g.sample(&w1(), AgentStatus::Idle);
    let (_, msg, _) = g.last_inject().expect("typed on an idle sample");
    g.input(Input::Injected {
        target: w1(),
        msg,
        result: Ok("❯ ".into()),
    });
    let sampled = |status, asked| Input::StatusSampled {
        target: w1(),
        status,
        screen: None,
        asked,
    };
    // The turn is over once the post-turn scrape is asked for.
    let ended = |g: &Gw| g.out.iter().any(|o| matches!(o, Output::ReadPane { .. }));
    g.input(sampled(AgentStatus::Working, before));
    let now = g.gw.newest_ask();
    g.input(sampled(AgentStatus::Idle, now));
    assert!(
        !ended(&g),
        "a WORKING asked before the typing was taken for its pickup"
    );
    let after = g.gw.newest_ask();
    g.input(sampled(AgentStatus::Working, after));
    g.input(sampled(AgentStatus::Idle, after));
    assert!(
        ended(&g),
        "WORKING then IDLE asked after the typing end the turn"
    );
}

// ---- who a caller is ------------------------------------------------------------------------

/// The shell knows every member by its member token (WORKER); the core knows which were
/// spawned ARCHITECT, and `Whoami` says so — the one place the rule lives.
#[test]
fn whoami_names_a_member_spawned_architect_as_one() {
    let mut g = Gw::with(two_profiles(fleet_core::placement::Strategy::Fixed));
    let spawned = |g: &mut Gw, role| {
        let c = g.call(
            lead(),
            Request::Spawn {
                host: None,
                spec: fleet_core::SpawnSpec {
                    profile: "heavy".into(),
                    role,
                    ..fleet_core::SpawnSpec::default()
                },
            },
        );
        let gid = g
            .out
            .iter()
            .rev()
            .find_map(|o| match o {
                Output::SpawnPane { gid, .. } => Some(gid.clone()),
                _ => None,
            })
            .expect("a pane launched");
        g.launched_injectable(&gid);
        assert!(matches!(g.response(c), Some(Response::Spawned { .. })));
        gid
    };
    let architect = spawned(&mut g, Some(fleet_core::MemberRole::Architect));
    let worker = spawned(&mut g, None);
    for (gid, role) in [
        (architect, fleet_core::Role::Architect),
        (worker, fleet_core::Role::Worker),
    ] {
        let c = g.call(Principal::worker(gid.clone()), Request::Whoami);
        match g.response(c) {
            Some(Response::Whoami { principal }) => {
                assert_eq!(
                    (principal.role, principal.session.as_ref()),
                    (role, Some(&gid))
                )
            }
            other => panic!("{other:?}"),
        }
    }
    // A lead is what its token says.
    let c = g.call(lead(), Request::Whoami);
    assert!(matches!(
        g.response(c),
        Some(Response::Whoami { principal }) if principal.role == fleet_core::Role::Primary
    ));
}

/// A rule that tells about questions after 2 s, with a 10-minute quiet period.
fn notifying() -> CoreConfig {
    CoreConfig {
        notify: vec![fleet_core::notify::NotifyRule {
            name: "phone".into(),
            on: vec![fleet_core::needs::NeedKind::Question],
            grace_ms: 2_000,
            ..fleet_core::notify::NotifyRule::default()
        }],
        ..CoreConfig::default()
    }
}

impl Gw {
    fn notices(&self) -> Vec<&fleet_core::notify::Notice> {
        self.out
            .iter()
            .filter_map(|o| match o {
                Output::Notify(n) => Some(n),
                _ => None,
            })
            .collect()
    }

    /// Ticks every 500 ms for `ms`.
    fn wait(&mut self, ms: u64) {
        for _ in 0..ms / 500 {
            self.advance(Duration::from_millis(500));
        }
    }

    fn answer(&mut self, turn_id: TurnId, content: &str) -> CallId {
        self.call(
            lead(),
            Request::Answer {
                turn_id,
                content: content.into(),
                wait: true,
                timeout_ms: None,
                asked_by: Some(w1()),
            },
        )
    }
}

#[test]
fn a_question_left_past_the_grace_tells_its_lead_once_and_resolves_when_answered() {
    use fleet_core::notify::NoticePhase;
    let mut g = Gw::with(notifying());
    g.send("w1", "migrate", false);
    g.deliver(&w1(), "❯ ");
    g.ask(&w1(), "which db?");
    let needs = g.gw.needs();
    assert_eq!(needs.len(), 1, "{needs:?}");
    let q = &needs[0];
    assert_eq!(q.waits_on, Some(SessionId::new("lead-pane")));
    assert_eq!(q.member, Some(w1()));
    assert!(!q.summary.contains("which db"), "a summary has no words");
    let turn_id = q.turn_id.expect("a question names its turn");
    g.wait(1_500);
    assert!(g.notices().is_empty(), "within its grace");
    g.wait(10_000);
    let sent: Vec<(NoticePhase, &str, Option<&str>)> = g
        .notices()
        .iter()
        .map(|n| (n.phase, n.need.id.as_str(), n.need.text.as_deref()))
        .collect();
    let id = format!("question:{turn_id}");
    assert_eq!(sent, [(NoticePhase::Raised, id.as_str(), None)]);
    g.answer(turn_id, "postgres");
    g.wait(1_000);
    let phases: Vec<NoticePhase> = g.notices().iter().map(|n| n.phase).collect();
    assert_eq!(phases, [NoticePhase::Raised, NoticePhase::Resolved]);
    assert!(g.gw.needs().is_empty());
}

#[test]
fn a_question_answered_within_the_grace_tells_no_one() {
    let mut g = Gw::with(notifying());
    g.send("w1", "migrate", false);
    g.deliver(&w1(), "❯ ");
    g.ask(&w1(), "which db?");
    g.wait(1_000);
    let turn_id = g.gw.needs()[0].turn_id.expect("its turn");
    g.answer(turn_id, "postgres");
    g.wait(60_000);
    assert!(g.notices().is_empty(), "{:?}", g.notices());
}

#[test]
fn a_held_result_nobody_collects_is_a_need_of_its_lead() {
    let mut g = Gw::new();
    let t = g.send("w1", "migrate", false);
    let _ = g.ticket(t);
    let msg = g.deliver(&w1(), "❯ ");
    g.complete(&w1(), msg, "❯ migrate\ndone\n❯ ");
    g.reply(&w1(), "a late word");
    let kinds: Vec<(fleet_core::needs::NeedKind, Option<SessionId>)> =
        g.gw.needs()
            .into_iter()
            .map(|n| (n.kind, n.waits_on))
            .collect();
    assert_eq!(
        kinds,
        [(
            fleet_core::needs::NeedKind::ResultStranded,
            Some(SessionId::new("lead-pane"))
        )]
    );
}

#[test]
fn the_attention_view_shows_a_lead_its_own_needs_and_a_member_only_its_own_without_words() {
    let mut g = Gw::new();
    g.send("w1", "migrate", false);
    g.deliver(&w1(), "❯ ");
    g.ask(&w1(), "which db?");
    g.advance(Duration::from_millis(3_000));
    let view = |g: &mut Gw, who: Principal| {
        let c = g.call(who, Request::Attention);
        match g.response(c) {
            Some(Response::Attention(a)) => (**a).clone(),
            other => panic!("expected the attention view, got {other:?}"),
        }
    };
    let mine = view(&mut g, lead());
    assert_eq!(mine.needs.len(), 1, "{mine:?}");
    let q = &mine.needs[0];
    assert_eq!(q.need.kind, fleet_core::needs::NeedKind::Question);
    assert_eq!(
        q.need.text.as_deref(),
        Some("which db?"),
        "its lead reads the words"
    );
    assert!(q.waiting_ms >= 2_000, "{}", q.waiting_ms);
    let stranger = Principal::primary("bob", Some(SessionId::new("bob-pane")));
    assert!(
        view(&mut g, stranger).needs.is_empty(),
        "not another lead's"
    );
    let member = view(&mut g, Principal::worker(w1()));
    assert_eq!(member.needs.len(), 1);
    assert_eq!(member.needs[0].need.text, None, "a member gets no words");
}
