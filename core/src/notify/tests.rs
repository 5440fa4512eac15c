use super::*;
use crate::ids::HostId;

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// The tests' wall clock: Unix ms = the instant's ms.
fn unix(i: Instant) -> u64 {
    i.as_millis()
}

fn rule(name: &str) -> NotifyRule {
    NotifyRule {
        name: name.into(),
        grace_ms: 1_000,
        quiet_ms: 10_000,
        ..NotifyRule::default()
    }
}

fn question(turn: &str, lead: &str, since: u64) -> Need {
    Need {
        id: format!("question:{turn}"),
        kind: NeedKind::Question,
        host: HostId::new("h1"),
        waits_on: Some(SessionId::new(lead)),
        member: Some(SessionId::new("w1")),
        turn_id: None,
        since: at(since),
        summary: "w1 asks".into(),
        text: Some("which branch?".into()),
    }
}

fn broker_down(since: u64) -> Need {
    Need {
        id: "broker_down:h1".into(),
        kind: NeedKind::BrokerDown,
        host: HostId::new("h1"),
        waits_on: None,
        member: None,
        turn_id: None,
        since: at(since),
        summary: "broker link down".into(),
        text: None,
    }
}

/// Every notice of scans every 250 ms from `from` to `to` (inclusive), `needs` holding.
fn scan_notices(n: &mut Notifier, from: u64, to: u64, needs: &[Need]) -> Vec<Notice> {
    let mut out = Vec::new();
    let mut t = from;
    while t <= to {
        out.extend(n.scan(at(t), needs, unix));
        t += 250;
    }
    out
}

/// Scans every 250 ms from `from` to `to` (inclusive) with `needs` holding throughout.
fn scan_span(n: &mut Notifier, from: u64, to: u64, needs: &[Need]) -> Vec<(u64, NoticePhase)> {
    let mut out = Vec::new();
    let mut t = from;
    while t <= to {
        out.extend(n.scan(at(t), needs, unix).into_iter().map(|x| (t, x.phase)));
        t += 250;
    }
    out
}

#[test]
fn a_question_answered_within_the_grace_is_never_sent() {
    let mut n = Notifier::new(vec![rule("phone")]);
    let q = question("t1", "lead", 0);
    assert!(scan_span(&mut n, 0, 750, std::slice::from_ref(&q)).is_empty());
    assert!(scan_span(&mut n, 1_000, 30_000, &[]).is_empty());
    assert_eq!(n.tracked(), 0, "nothing kept of a need never sent");
}

#[test]
fn a_question_held_past_the_grace_is_raised_once_and_resolved_once() {
    let mut n = Notifier::new(vec![rule("phone")]);
    let q = question("t1", "lead", 0);
    let raised = scan_span(&mut n, 0, 5_000, std::slice::from_ref(&q));
    assert_eq!(raised, [(1_000, NoticePhase::Raised)]);
    let resolved = n.scan(at(5_250), &[], unix);
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].phase, NoticePhase::Resolved);
    assert_eq!(resolved[0].seq, 2);
    assert_eq!(resolved[0].need.id, "question:t1");
    assert_eq!(
        resolved[0].opened_unix_ms, 0,
        "the stretch began with the question"
    );
    assert!(scan_span(&mut n, 5_500, 40_000, &[]).is_empty());
}

#[test]
fn a_need_that_holds_is_reminded_once_per_quiet_period() {
    let mut n = Notifier::new(vec![rule("phone")]);
    let got = scan_span(&mut n, 0, 32_000, &[broker_down(0)]);
    assert_eq!(
        got,
        [
            (1_000, NoticePhase::Raised),
            (11_000, NoticePhase::Reminder),
            (21_000, NoticePhase::Reminder),
            (31_000, NoticePhase::Reminder),
        ]
    );
}

#[test]
fn a_need_that_flaps_is_not_raised_again_within_the_quiet_period() {
    let mut n = Notifier::new(vec![rule("phone")]);
    let mut got = scan_span(&mut n, 0, 2_000, &[broker_down(0)]);
    got.extend(scan_span(&mut n, 2_250, 2_500, &[]));
    got.extend(scan_span(&mut n, 2_750, 12_000, &[broker_down(2_750)]));
    assert_eq!(
        got,
        [
            (1_000, NoticePhase::Raised),
            (2_250, NoticePhase::Resolved),
            (11_000, NoticePhase::Raised),
        ],
        "back at 2.75 s, past its grace at 3.75 s, but raised only when the quiet period \
         since the first raise ends"
    );
}

#[test]
fn a_need_that_comes_back_is_a_new_stretch_with_its_own_delivery_key() {
    let mut n = Notifier::new(vec![rule("phone")]);
    let first = n.scan(at(1_000), &[broker_down(0)], unix);
    n.scan(at(1_250), &[], unix);
    let second = scan_notices(&mut n, 30_000, 40_000, &[broker_down(30_000)]);
    let keys =
        |v: &[Notice]| -> Vec<(u64, u32)> { v.iter().map(|x| (x.opened_unix_ms, x.seq)).collect() };
    assert_eq!(keys(&first), [(0, 1)]);
    assert_eq!(
        keys(&second),
        [(30_000, 1)],
        "not (0, 1) again: a receiver would drop it"
    );
}

#[test]
fn a_spent_budget_serves_new_raises_before_reminders() {
    let mut n = Notifier::new(vec![NotifyRule {
        max_per_window: 1,
        window_ms: 15_000,
        ..rule("phone")
    }]);
    // Two host-wide needs, one budget: the broker link down since 0 s is raised at 1 s and due
    // its reminder at 11 s; a credential cooling since 10 s is due its raise at 11 s. The
    // window frees one send at 16 s: the new raise's.
    let standing = broker_down(0);
    assert_eq!(
        n.scan(at(1_000), std::slice::from_ref(&standing), unix)
            .len(),
        1
    );
    let cooling = Need {
        id: "credential_cooling:c1".into(),
        kind: NeedKind::CredentialCooling,
        since: at(10_000),
        ..broker_down(10_000)
    };
    let both = [standing, cooling];
    let got = scan_notices(&mut n, 11_000, 16_000, &both);
    let ids: Vec<&str> = got.iter().map(|x| x.need.id.as_str()).collect();
    assert_eq!(ids, ["credential_cooling:c1"]);
}

#[test]
fn words_leave_only_with_a_rule_that_allows_them() {
    let mut n = Notifier::new(vec![
        rule("plain"),
        NotifyRule {
            include_text: true,
            ..rule("verbose")
        },
    ]);
    let q = question("t1", "lead", 0);
    let got = n.scan(at(1_000), std::slice::from_ref(&q), unix);
    let text: Vec<(&str, Option<&str>)> = got
        .iter()
        .map(|x| (x.rule.as_str(), x.need.text.as_deref()))
        .collect();
    assert_eq!(
        text,
        [("plain", None), ("verbose", Some("which branch?"))],
        "one notice per rule, words only where allowed"
    );
}

#[test]
fn a_rule_tells_only_about_its_kinds_and_its_leads() {
    let mut n = Notifier::new(vec![
        NotifyRule {
            on: vec![NeedKind::BrokerDown],
            ..rule("ops")
        },
        NotifyRule {
            leads: vec![SessionId::new("alice")],
            ..rule("alice")
        },
    ]);
    let needs = [
        question("t1", "alice", 0),
        question("t2", "bob", 0),
        broker_down(0),
    ];
    let got: Vec<(String, String)> = n
        .scan(at(1_000), &needs, unix)
        .into_iter()
        .map(|x| (x.rule, x.need.id))
        .collect();
    assert_eq!(
        got,
        [
            ("ops".to_string(), "broker_down:h1".to_string()),
            ("alice".to_string(), "question:t1".to_string()),
        ],
        "bob's question goes to no rule; a host-wide need only to a rule without leads"
    );
}

#[test]
fn past_its_budget_a_rule_waits_and_counts_but_always_resolves() {
    let mut n = Notifier::new(vec![NotifyRule {
        max_per_window: 2,
        window_ms: 60_000,
        ..rule("phone")
    }]);
    let needs = [
        question("t1", "lead", 0),
        question("t2", "lead", 0),
        question("t3", "lead", 0),
        question("t4", "other", 0),
    ];
    let first = n.scan(at(1_000), &needs, unix);
    let ids: Vec<&str> = first.iter().map(|x| x.need.id.as_str()).collect();
    assert_eq!(
        ids,
        ["question:t1", "question:t2", "question:t4"],
        "two per target: the third question for `lead` waits, `other` has its own budget"
    );
    assert!(n.scan(at(1_250), &needs, unix).is_empty());
    assert_eq!(n.stats().limited, 1, "one wait counted once");
    // t1 is answered: its resolve goes though the budget is spent.
    let rest = &needs[1..];
    let resolved = n.scan(at(2_000), rest, unix);
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].phase, NoticePhase::Resolved);
    // The window moves on: t3 goes out only when the first sends leave it.
    let t3_raised = |got: Vec<Notice>| {
        got.iter()
            .any(|x| x.need.id == "question:t3" && x.phase == NoticePhase::Raised)
    };
    assert!(!t3_raised(n.scan(at(60_750), rest, unix)));
    assert!(t3_raised(n.scan(at(61_000), rest, unix)));
}

#[test]
fn a_rule_without_a_name_or_a_quiet_period_is_refused() {
    assert!(rule("ok").problem().is_none());
    assert!(rule(" ").problem().is_some());
    assert!(NotifyRule {
        quiet_ms: 0,
        ..rule("x")
    }
    .problem()
    .is_some());
}
