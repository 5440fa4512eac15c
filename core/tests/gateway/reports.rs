//! An agent's own reports of its turns (docs/delivery.md, "Reports"): its word ends its turn,
//! with its own final text; a turn end seen on its screen waits a bound for it; a report for
//! another brief, or an old one, ends nothing.

use super::*;
use fleet_core::agent_report::{AgentEvent, AgentReport};

impl Gw {
    /// `gid`'s agent reports `event` as its `seq`-th report; the verdict it was told.
    fn report(&mut self, gid: &SessionId, seq: u64, event: AgentEvent) -> String {
        let c = self.call(
            Principal::worker(gid.clone()),
            Request::Report {
                report: AgentReport {
                    seq,
                    session: Some("sess-1".into()),
                    event,
                },
            },
        );
        match self.response(c) {
            Some(Response::Reported { verdict }) => verdict.clone(),
            other => panic!("a report is answered with its verdict, got {other:?}"),
        }
    }

    fn typed_text(&self) -> String {
        self.last_inject().expect("typed").2
    }

    fn scrapes(&self) -> usize {
        self.out
            .iter()
            .filter(|o| matches!(o, Output::ReadPane { .. }))
            .count()
    }
}

fn ended(prompt: &str, text: &str) -> AgentEvent {
    AgentEvent::TurnEnded {
        prompt: Some(prompt.into()),
        text: text.into(),
    }
}

/// The agent says its turn ended while herdr still calls it working: the send ends at once
/// with the agent's own text, and its screen is never read.
#[test]
fn a_turn_ends_when_its_agent_says_so_with_its_own_text() {
    let mut g = Gw::new();
    assert_eq!(g.report(&w1(), 1, AgentEvent::Ready), "noted");
    let c = g.send("w1", "say hello", true);
    let _msg = g.deliver(&w1(), "❯ ");
    let typed = g.typed_text();
    let started = AgentEvent::TurnStarted {
        prompt: typed.clone(),
    };
    assert_eq!(g.report(&w1(), 2, started), "started");
    assert_eq!(g.outcome(c), None);
    assert_eq!(g.report(&w1(), 3, ended(&typed, "hello")), "ended");
    assert_eq!(
        g.outcome(c),
        Some((Outcome::CompletedUnreplied, Some("hello".into())))
    );
    assert_eq!(g.scrapes(), 0, "the agent's word, not its screen");
    assert_eq!(g.gw.reported_session(&w1()), Some("sess-1"));
}

/// herdr shows the turn over before the agent's report lands: the end waits for the report,
/// and takes its text; nothing else is typed meanwhile.
#[test]
fn a_turn_seen_over_waits_for_its_report_and_takes_its_text() {
    let mut g = Gw::new();
    g.report(&w1(), 1, AgentEvent::Ready);
    let c = g.send("w1", "say hello", true);
    g.deliver(&w1(), "❯ ");
    let typed = g.typed_text();
    g.sample(&w1(), AgentStatus::Idle);
    assert_eq!(g.scrapes(), 0, "its report is awaited first");
    g.advance(Duration::from_millis(1_000));
    assert_eq!(g.report(&w1(), 2, ended(&typed, "hello")), "ended");
    assert_eq!(
        g.outcome(c),
        Some((Outcome::CompletedUnreplied, Some("hello".into())))
    );
    assert_eq!(g.scrapes(), 0);
}

/// A report that never comes (its hook was not installed, the agent was killed) costs its
/// bound, no more: the screen is read as before.
#[test]
fn a_report_that_never_comes_falls_back_to_the_screen_within_its_bound() {
    let mut g = Gw::new();
    g.report(&w1(), 1, AgentEvent::Ready);
    let c = g.send("w1", "say hello", true);
    let msg = g.deliver(&w1(), "❯ ");
    g.sample(&w1(), AgentStatus::Idle);
    g.advance(Duration::from_millis(
        CoreConfig::default().report_grace_ms - 1,
    ));
    assert_eq!(g.scrapes(), 0);
    g.advance(Duration::from_millis(1));
    assert!(g
        .events()
        .iter()
        .any(|e| matches!(e, Event::ReportMissing { msg: m, .. } if *m == msg)));
    assert_eq!(g.scrapes(), 1);
    g.scraped(msg, "❯ say hello\n● hi there\n❯ ");
    assert_eq!(
        g.outcome(c),
        Some((Outcome::CompletedUnreplied, Some("● hi there".into())))
    );
}

/// An end reported for the previous brief — late, or re-sent — names that brief's prompt: it
/// ends nothing of the next one's.
#[test]
fn an_end_for_an_earlier_brief_ends_nothing_of_the_next() {
    let mut g = Gw::new();
    g.report(&w1(), 1, AgentEvent::Ready);
    let first = g.send("w1", "first", true);
    g.deliver(&w1(), "❯ ");
    let first_typed = g.typed_text();
    g.reply(&w1(), "done first");
    assert_eq!(
        g.outcome(first),
        Some((Outcome::Replied, Some("done first".into())))
    );
    // Its end shows on screen; the report is awaited, then missed.
    g.sample(&w1(), AgentStatus::Idle);
    g.advance(Duration::from_millis(CoreConfig::default().report_grace_ms));
    let second = g.send("w1", "second", true);
    g.advance(CoreConfig::default().poll_interval());
    g.deliver(&w1(), "❯ ");
    assert_eq!(
        g.report(&w1(), 5, ended(&first_typed, "done first")),
        "foreign"
    );
    assert_eq!(
        g.outcome(second),
        None,
        "the first brief's end is not the second's"
    );
    // An older report, numbered before one already heard, is old news.
    assert_eq!(g.report(&w1(), 4, ended("second", "x")), "stale");
    assert_eq!(g.outcome(second), None);
}

/// The screen showed no answer (the agent had not drawn it): the delegation stayed open, and
/// the agent's own end, arriving after, closes it with its text — not TIMED_OUT_WORKING.
#[test]
fn a_late_report_ends_a_delegation_its_screen_left_open() {
    let mut g = Gw::new();
    g.report(&w1(), 1, AgentEvent::Ready);
    let c = g.send("w1", "say hello", true);
    let msg = g.missed_fast_turn("❯ ");
    let typed = g.typed_text();
    g.advance(Duration::from_millis(CoreConfig::default().report_grace_ms));
    g.scraped(msg, "❯ ");
    assert_eq!(g.outcome(c), None, "nothing new on screen");
    g.advance(Duration::from_millis(5_000));
    assert_eq!(g.report(&w1(), 2, ended(&typed, "hello")), "ended");
    assert_eq!(
        g.outcome(c),
        Some((Outcome::CompletedUnreplied, Some("hello".into())))
    );
}

/// A turn nothing waits on any more (its member replied) is held for its report: the next
/// brief is typed after the agent says its turn ended, not at the first idle sample.
#[test]
fn nothing_is_typed_until_the_agent_says_its_turn_ended() {
    let mut g = Gw::new();
    g.report(&w1(), 1, AgentEvent::Ready);
    let first = g.send("w1", "first", true);
    let m1 = g.deliver(&w1(), "❯ ");
    let typed = g.typed_text();
    g.reply(&w1(), "done");
    assert!(g.outcome(first).is_some());
    let _second = g.send("w1", "second", true);
    g.sample(&w1(), AgentStatus::Idle);
    g.sample(&w1(), AgentStatus::Idle);
    assert_eq!(
        g.last_inject().map(|(_, m, _)| m),
        Some(m1),
        "held for the report"
    );
    assert_eq!(
        g.report(&w1(), 2, ended(&typed, "done, and a summary")),
        "ended"
    );
    g.sample(&w1(), AgentStatus::Idle);
    let (_, m2, text) = g.last_inject().expect("typed");
    assert_ne!(m2, m1);
    assert!(text.contains("second"), "{text}");
}

/// A turn that ends on the provider's usage limit, by the agent's word, ends the send
/// BACKEND_EXHAUSTED with the agent's words.
#[test]
fn a_usage_limit_the_agent_reports_ends_the_send_backend_exhausted() {
    let mut g = Gw::new();
    g.report(&w1(), 1, AgentEvent::Ready);
    let c = g.send("w1", "work", true);
    g.deliver(&w1(), "❯ ");
    let typed = g.typed_text();
    let failed = AgentEvent::TurnFailed {
        prompt: Some(typed),
        limit: true,
        words: "rate_limit: usage limit reached".into(),
    };
    assert_eq!(g.report(&w1(), 2, failed), "failed");
    assert_eq!(
        g.outcome(c),
        Some((
            Outcome::BackendExhausted,
            Some("rate_limit: usage limit reached".into())
        ))
    );
}

/// A report is a member's word on itself only: a lead has no turn to report, and a malformed
/// session id is refused.
#[test]
fn only_a_member_reports_and_only_well_formed() {
    let mut g = Gw::new();
    let c = g.call(
        Principal::worker(w1()),
        Request::Report {
            report: AgentReport {
                seq: 1,
                session: Some("bad\nid".into()),
                event: AgentEvent::Ready,
            },
        },
    );
    assert!(matches!(
        g.response(c),
        Some(Response::Error(CallError::InvalidArgument { .. }))
    ));
    let c = g.call(
        Principal::primary("anon", None),
        Request::Report {
            report: AgentReport {
                seq: 1,
                session: None,
                event: AgentEvent::Ready,
            },
        },
    );
    assert!(matches!(g.response(c), Some(Response::Error(_))));
}

/// The agent says it waits on a person (a permission prompt): its health says so at once —
/// the report asks for a probe — in the agent's words, outranking its screen, and a need is
/// listed; its next brief clears it.
#[test]
fn a_member_waiting_on_a_person_says_so_on_its_health_and_as_a_need() {
    let mut g = Gw::new();
    g.member(&w1());
    let waiting = AgentEvent::Waiting {
        words: "Claude needs your permission to use Bash".into(),
    };
    assert_eq!(g.report(&w1(), 1, waiting), "noted");
    let asked = g.out.iter().rev().find_map(|o| match o {
        Output::ProbeHealth { targets } => Some(targets.clone()),
        _ => None,
    });
    assert_eq!(asked, Some(vec![w1()]), "the report asks for a probe");
    g.input(Input::HealthProbed {
        probes: vec![(
            w1(),
            Sampled::Status {
                status: AgentStatus::Blocked,
                screen: Some("API Error: 401 invalid api key\nDo you want to proceed?".into()),
            },
        )],
    });
    assert_eq!(g.health(&w1()), Some(Health::WaitingOnPerson));
    let (_, why) = g.row_health(&w1());
    assert_eq!(
        why.as_deref(),
        Some("its agent waits on a person: Claude needs your permission to use Bash")
    );
    let c = g.call(Principal::primary("op", None), Request::Attention);
    let Some(Response::Attention(a)) = g.response(c).cloned() else {
        panic!("attention answered {:?}", g.response(c));
    };
    assert!(
        a.needs
            .iter()
            .any(|n| n.need.kind == fleet_core::needs::NeedKind::WaitingOnPerson),
        "{a:?}"
    );
}

/// An agent that says it retries its provider's limit is still in its turn, though its screen
/// shows it idle (opencode 1.18 does): nothing else is typed into it, and its turn ends when
/// it says so.
#[test]
fn an_agent_that_retries_its_provider_is_still_busy() {
    let mut g = Gw::new();
    g.report(&w1(), 1, AgentEvent::Ready);
    let c = g.send("w1", "work", true);
    let m1 = g.deliver(&w1(), "❯ ");
    let typed = g.typed_text();
    let retrying = AgentEvent::ProviderError {
        limit: true,
        words: "Rate limited: retrying in 30s".into(),
    };
    assert_eq!(g.report(&w1(), 2, retrying), "noted");
    let cfg = CoreConfig::default();
    for _ in 0..3 * cfg.pickup_grace_polls {
        g.advance(cfg.poll_interval());
        g.sample(&w1(), AgentStatus::Idle);
    }
    assert_eq!(g.outcome(c), None, "its turn goes on while it retries");
    assert_eq!(g.scrapes(), 0);
    let failed = AgentEvent::TurnFailed {
        prompt: Some(typed),
        limit: true,
        words: "Rate limited".into(),
    };
    assert_eq!(g.report(&w1(), 3, failed), "failed");
    assert!(matches!(g.outcome(c), Some((Outcome::BackendExhausted, _))));
    let _next = g.send("w1", "next", true);
    g.sample(&w1(), AgentStatus::Idle);
    assert_ne!(
        g.last_inject().map(|(_, m, _)| m),
        Some(m1),
        "the next brief is typed"
    );
}
