//! One scenario per state, from evidence as the gateway records it.

use super::*;

fn at(ms: u64) -> Instant {
    Instant::ZERO + Duration::from_millis(ms)
}

fn t() -> Thresholds {
    Thresholds::from(&HealthConfig::default())
}

/// A ready member at rest, nothing against it.
fn resting() -> Evidence {
    Evidence {
        gate: Gate::Open,
        status: AgentStatus::Idle,
        in_turn: false,
        queued: 0,
        asking: false,
        fatal_line: None,
        screen_still_for: Duration::ZERO,
        boundary_lost: false,
        mute_turns: 0,
        stranded: 0,
        orphaned: 0,
        link_up: true,
        reported: None,
    }
}

fn state(e: Evidence) -> Health {
    classify(at(0), &e, t(), None).state
}

#[test]
fn every_state_but_gone_is_reached_from_evidence() {
    let closed = |waited| Gate::Closed {
        waited: Duration::from_millis(waited),
        bound: Duration::from_millis(180_000),
    };
    let cases = [
        (
            Evidence {
                gate: closed(1_000),
                status: AgentStatus::Unknown,
                ..resting()
            },
            Health::Starting,
        ),
        (
            Evidence {
                gate: closed(180_000),
                ..resting()
            },
            Health::NeverReady,
        ),
        (
            Evidence {
                fatal_line: Some("API Error: 401 invalid api key".into()),
                ..resting()
            },
            Health::ErrorOnScreen,
        ),
        (
            Evidence {
                reported: Some(crate::agent_report::Trouble::WaitingOnPerson(
                    "Claude needs your permission to use Bash".into(),
                )),
                in_turn: true,
                ..resting()
            },
            Health::WaitingOnPerson,
        ),
        (
            Evidence {
                reported: Some(crate::agent_report::Trouble::UsageLimited(
                    "rate_limit: 429".into(),
                )),
                in_turn: true,
                status: AgentStatus::Idle,
                ..resting()
            },
            Health::UsageLimited,
        ),
        (
            Evidence {
                reported: Some(crate::agent_report::Trouble::ProviderError(
                    "server_error: 500".into(),
                )),
                ..resting()
            },
            Health::ProviderError,
        ),
        (
            Evidence {
                link_up: false,
                ..resting()
            },
            Health::ControlLinkDown,
        ),
        (
            Evidence {
                orphaned: 1,
                in_turn: true,
                status: AgentStatus::Working,
                ..resting()
            },
            Health::DelegationOrphaned,
        ),
        (
            Evidence {
                stranded: 2,
                ..resting()
            },
            Health::ReplyStranded,
        ),
        (
            Evidence {
                in_turn: true,
                status: AgentStatus::Unknown,
                ..resting()
            },
            Health::StallSuspected,
        ),
        (
            Evidence {
                in_turn: true,
                status: AgentStatus::Working,
                screen_still_for: Duration::from_millis(600_000),
                ..resting()
            },
            Health::StallSuspected,
        ),
        (
            Evidence {
                status: AgentStatus::Blocked,
                ..resting()
            },
            Health::BlockedAmbiguous,
        ),
        (
            Evidence {
                status: AgentStatus::Unknown,
                ..resting()
            },
            Health::BlockedAmbiguous,
        ),
        (
            Evidence {
                in_turn: true,
                status: AgentStatus::Working,
                ..resting()
            },
            Health::Working,
        ),
        (
            Evidence {
                queued: 3,
                status: AgentStatus::Working,
                ..resting()
            },
            Health::Working,
        ),
        (
            Evidence {
                queued: 3,
                status: AgentStatus::Idle,
                ..resting()
            },
            Health::WorkPending,
        ),
        (
            Evidence {
                boundary_lost: true,
                ..resting()
            },
            Health::TurnBoundaryLost,
        ),
        (
            Evidence {
                mute_turns: 2,
                ..resting()
            },
            Health::Mute,
        ),
        (resting(), Health::Idle),
    ];
    for (e, want) in cases {
        assert_eq!(state(e.clone()), want, "{e:?}");
    }
}

#[test]
fn a_member_asking_its_lead_is_neither_stalled_nor_ambiguously_blocked() {
    let e = Evidence {
        in_turn: true,
        asking: true,
        status: AgentStatus::Blocked,
        ..resting()
    };
    assert_eq!(state(e), Health::Idle);
}

#[test]
fn a_fatal_line_on_a_working_member_is_only_output() {
    let e = Evidence {
        in_turn: true,
        status: AgentStatus::Working,
        fatal_line: Some("API Error: 529 overloaded, retrying".into()),
        ..resting()
    };
    assert_eq!(state(e), Health::Working);
}

#[test]
fn every_reason_that_held_is_kept_in_precedence_order() {
    let e = Evidence {
        mute_turns: 5,
        stranded: 1,
        status: AgentStatus::Blocked,
        ..resting()
    };
    let v = classify(at(0), &e, t(), None);
    let states: Vec<Health> = v.reasons.iter().map(|f| f.state).collect();
    assert_eq!(
        states,
        [
            Health::ReplyStranded,
            Health::BlockedAmbiguous,
            Health::Mute
        ]
    );
    assert_eq!(v.reason(), "1 reply(ies) held with no lead to collect");
}

#[test]
fn since_is_kept_while_the_state_stays_and_reset_when_it_changes() {
    let working = Evidence {
        in_turn: true,
        status: AgentStatus::Working,
        ..resting()
    };
    let first = classify(at(1_000), &working, t(), None);
    let again = classify(at(16_000), &working, t(), Some(&first));
    assert_eq!(again.since, Some(at(1_000)));
    let idle = classify(at(31_000), &resting(), t(), Some(&again));
    assert_eq!((idle.state, idle.since), (Health::Idle, Some(at(31_000))));
}

#[test]
fn the_monitor_reports_changes_only_and_remembers_the_screen() {
    let mut m = Monitor::new(&HealthConfig::default(), FatalPatterns::default());
    let gid = SessionId::new("m1");
    let c = m.judge(at(0), &gid, &resting()).expect("first verdict");
    assert_eq!((c.from, c.to), (None, Health::Idle));
    assert_eq!(m.judge(at(15_000), &gid, &resting()), None);
    assert_eq!(m.read_screen(at(0), &gid, None, "a").1, Duration::ZERO);
    assert_eq!(
        m.read_screen(at(20_000), &gid, None, "a").1,
        Duration::from_millis(20_000)
    );
    assert_eq!(m.read_screen(at(30_000), &gid, None, "b").1, Duration::ZERO);
}

#[test]
fn mute_counts_consecutive_fallback_turns_and_a_reply_clears_it() {
    let mut m = Monitor::new(&HealthConfig::default(), FatalPatterns::default());
    let gid = SessionId::new("m1");
    m.mute_turn(&gid, true);
    m.mute_turn(&gid, true);
    assert_eq!((m.mute_streak(&gid), m.mute_turns_total), (2, 2));
    m.replied(&gid);
    assert_eq!((m.mute_streak(&gid), m.mute_turns_total), (0, 2));
}

#[test]
fn a_member_that_went_is_a_tombstone_until_the_bound() {
    let mut m = Monitor::new(&HealthConfig::default(), FatalPatterns::default());
    let (a, b) = (SessionId::new("a"), SessionId::new("b"));
    m.judge(at(0), &a, &resting());
    let c = m.went(at(1_000), &a, true, "its pane closed".into());
    assert_eq!((c.from, c.to), (Some(Health::Idle), Health::Gone));
    let c = m.went(at(2_000), &b, false, "exited with status 1".into());
    assert_eq!((c.from, c.to), (None, Health::NeverReady));
    let counts = m.counts();
    assert_eq!((counts[&Health::Gone], counts[&Health::NeverReady]), (1, 1));
    assert_eq!(counts[&Health::Idle], 0);
    m.expire(at(1_000 + 10 * 60_000));
    assert!(m.tombstone(&a).is_none());
    assert_eq!(m.tombstone(&b).map(|t| t.state), Some(Health::NeverReady));
    m.expire(at(2_000 + 10 * 60_000));
    assert!(m.tombstone(&b).is_none());
}

#[test]
fn fatal_patterns_read_only_the_end_of_the_screen_and_per_profile() {
    let cfg = HealthConfig {
        profile_fatal_patterns: [(
            "codex".to_string(),
            vec![r"(?i)model not found".to_string()],
        )]
        .into_iter()
        .collect(),
        ..HealthConfig::default()
    };
    let f = FatalPatterns::compile(&cfg).expect("patterns compile");
    let scrolled = format!("API Error: 401\n{}", "work\n".repeat(FATAL_TAIL_LINES));
    assert_eq!(f.find(None, &scrolled), None);
    assert_eq!(
        f.find(None, "hello\n\x1b[31mAPI Error: 401\x1b[0m invalid\n❯ "),
        Some("API Error: 401 invalid".into())
    );
    assert_eq!(f.find(None, "Error: model not found"), None);
    assert_eq!(
        f.find(Some("codex"), "Error: model not found"),
        Some("Error: model not found".into())
    );
}

#[test]
fn a_peer_state_this_build_does_not_know_reads_as_none() {
    #[derive(Deserialize)]
    struct Row {
        #[serde(default, deserialize_with = "Health::lenient")]
        health: Option<Health>,
    }
    let r: Row = serde_json::from_str(r#"{"health":"DREAMING"}"#).expect("reads");
    assert_eq!(r.health, None);
    let r: Row = serde_json::from_str(r#"{"health":"MUTE"}"#).expect("reads");
    assert_eq!(r.health, Some(Health::Mute));
}

#[test]
fn an_unchanged_screen_keeps_its_fatal_line_and_a_changed_one_is_read_again() {
    let cfg = HealthConfig::default();
    let f = FatalPatterns::compile(&cfg).expect("patterns compile");
    let mut m = Monitor::new(&cfg, f);
    let gid = SessionId::new("m1");
    let failing = "work\nAPI Error: 401 invalid\n";
    let fatal = Some("API Error: 401 invalid".to_string());
    assert_eq!(
        m.read_screen(at(0), &gid, None, failing),
        (fatal.clone(), Duration::ZERO)
    );
    assert_eq!(
        m.read_screen(at(3_000), &gid, None, failing),
        (fatal, Duration::from_millis(3_000))
    );
    assert_eq!(
        m.read_screen(at(6_000), &gid, None, "work\n❯ "),
        (None, Duration::ZERO)
    );
}
