//! `Stops` alone: each way a stop ends, on each side, and the bounds on what it keeps.

use super::*;

fn msg(n: u128) -> MsgId {
    format!("00000000-0000-4000-8000-{n:012}")
        .parse()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn waiting(call: u64, target: &str, host: &str) -> Waiting {
    Waiting {
        call: CallId(call),
        target: SessionId::new(target),
        host: HostId::new(host),
        deadline: at(10_000),
    }
}

/// A stop with its STOP `msg(n)` published as `PublishId(n)`.
fn one_stop(n: u64, target: &str, host: &str) -> Stops {
    let mut s = Stops::default();
    let mut fx = Effects::default();
    s.wait(
        &mut fx,
        msg(u128::from(n)),
        PublishId(n),
        waiting(n, target, host),
    );
    assert_eq!(
        fx.take_due(at(10_000)),
        Some(TimerKind::Stop(msg(u128::from(n)))),
        "a waiting stop arms its own bound"
    );
    s
}

/// The member leaving its own host's roster is the stop's truth: `stopped`, once, and only
/// for a leave from the host it was asked of.
#[test]
fn a_leave_from_the_asked_host_answers_stopped_once() {
    let mut s = one_stop(1, "m", "b");
    assert_eq!(s.seen_left(&SessionId::new("m"), &HostId::new("c")), vec![]);
    assert_eq!(
        s.seen_left(&SessionId::new("m"), &HostId::new("b")),
        vec![Answer {
            call: CallId(1),
            response: Response::Stopped {
                target: SessionId::new("m")
            }
        }]
    );
    assert_eq!(s.seen_left(&SessionId::new("m"), &HostId::new("b")), vec![]);
    assert_eq!(
        s.due(at(20_000), msg(1), 10_000),
        None,
        "done, not timed out"
    );
    assert_eq!(s.confirmed(PublishId(1), &PublishResult::Routed), None);
}

/// The target's typed refusal becomes the caller's error; a FAILED for no waiting stop is
/// not a stop's.
#[test]
fn a_refusal_is_told_as_its_typed_error() {
    let mut s = one_stop(1, "m", "b");
    s.wait(
        &mut Effects::default(),
        msg(2),
        PublishId(2),
        waiting(2, "n", "b"),
    );
    let not_found = Refusal::new(RefusalCode::NotFound, "gone").to_body();
    let not_allowed = Refusal::new(RefusalCode::NotAllowed, "not on the allowlist").to_body();
    assert!(matches!(
        s.refused(msg(1), &not_found),
        Some(Answer { call: CallId(1), response: Response::Error(CallError::NotFound { target, .. }) })
            if target == SessionId::new("m")
    ));
    assert!(matches!(
        s.refused(msg(2), &not_allowed),
        Some(Answer { call: CallId(2), response: Response::Error(CallError::NotAllowed { host, reason }) })
            if host == HostId::new("b") && reason == "not on the allowlist"
    ));
    assert_eq!(s.refused(msg(1), &not_found), None);
    assert_eq!(s.host_of(msg(1)), None);
}

/// A STOP no gateway is bound for is a host that does not exist; one the broker failed to
/// take fails for the broker; a routed one waits on.
#[test]
fn its_publish_confirm_ends_it_only_when_it_went_nowhere() {
    let mut s = one_stop(1, "m", "b");
    s.wait(
        &mut Effects::default(),
        msg(2),
        PublishId(2),
        waiting(2, "n", "c"),
    );
    s.wait(
        &mut Effects::default(),
        msg(3),
        PublishId(3),
        waiting(3, "o", "d"),
    );
    assert_eq!(s.confirmed(PublishId(9), &PublishResult::Routed), None);
    assert_eq!(
        s.confirmed(PublishId(1), &PublishResult::Routed),
        Some(None)
    );
    assert_eq!(s.host_of(msg(1)), Some(HostId::new("b")), "still waiting");
    assert!(matches!(
        s.confirmed(PublishId(2), &PublishResult::Unroutable),
        Some(Some(Answer { response: Response::Error(CallError::NoSuchHost { host }), .. }))
            if host == HostId::new("c")
    ));
    assert!(matches!(
        s.confirmed(PublishId(3), &PublishResult::Failed("closed".into())),
        Some(Some(Answer {
            response: Response::Error(CallError::BrokerUnavailable),
            ..
        }))
    ));
}

/// The broker going down fails at once the STOPs it never confirmed; a confirmed one may
/// still act and waits for its leave or its bound.
#[test]
fn a_broker_outage_fails_only_the_unconfirmed() {
    let mut s = one_stop(1, "m", "b");
    s.wait(
        &mut Effects::default(),
        msg(2),
        PublishId(2),
        waiting(2, "n", "b"),
    );
    assert_eq!(
        s.confirmed(PublishId(1), &PublishResult::Routed),
        Some(None)
    );
    let failed = s.broker_down();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].call, CallId(2));
    assert_eq!(s.host_of(msg(1)), Some(HostId::new("b")));
    assert_eq!(s.broker_down(), vec![]);
}

/// Its bound answers `stop_unconfirmed`, and not a millisecond before.
#[test]
fn its_bound_answers_unconfirmed_at_the_deadline() {
    let mut s = one_stop(1, "m", "b");
    assert_eq!(s.due(at(9_999), msg(1), 10_000), None);
    assert!(matches!(
        s.due(at(10_000), msg(1), 10_000),
        Some(Answer {
            response: Response::Error(CallError::StopUnconfirmed {
                waited_ms: 10_000,
                ..
            }),
            ..
        })
    ));
    assert_eq!(s.due(at(10_000), msg(1), 10_000), None);
    assert_eq!(s.confirmed(PublishId(1), &PublishResult::Routed), None);
}

/// Target side: the first STOP closes the member, a redelivery only joins it; all are done
/// when the pane goes, and the gid is remembered as stopped for its window.
#[test]
fn held_stops_are_released_together_when_the_pane_goes() {
    let mut s = Stops::default();
    let g = SessionId::new("m");
    let d = |tag| DeliveryId { generation: 1, tag };
    assert!(s.hold(&g, d(1)));
    assert!(!s.hold(&g, d(2)));
    assert!(!s.stopped_lately(at(0), &g));
    assert_eq!(s.pane_gone(at(1_000), &g), vec![d(1), d(2)]);
    assert!(s.stopped_lately(at(1_000), &g));
    let window = u64::try_from(REMEMBER_STOPPED.as_millis()).unwrap_or(u64::MAX);
    assert!(s.stopped_lately(at(1_000 + window - 1), &g));
    assert!(!s.stopped_lately(at(1_000 + window), &g));
    assert_eq!(s.pane_gone(at(2_000), &g), vec![]);
}

/// A churning host's memory of stopped members is bounded: the oldest goes first.
#[test]
fn the_memory_of_stopped_members_is_bounded() {
    let mut s = Stops::default();
    for i in 0..=REMEMBER_STOPPED_MAX as u64 {
        s.remember(at(i), SessionId::new(format!("m{i}")));
    }
    assert_eq!(s.stopped.len(), REMEMBER_STOPPED_MAX);
    assert!(!s.stopped_lately(at(5_000), &SessionId::new("m0")));
    let last = format!("m{REMEMBER_STOPPED_MAX}");
    assert!(s.stopped_lately(at(5_000), &SessionId::new(last)));
}
