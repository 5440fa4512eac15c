//! `SpawnRequests` alone: each way a requester's spawn ends, and only once.

use super::*;

fn msg(n: u64) -> MsgId {
    format!("00000000-0000-4000-8000-{n:012}")
        .parse()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn gid(n: u64) -> SessionId {
    SessionId::new(format!("g{n}"))
}

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// Spawn `n` asked of `host`: SPAWN `msg(n)`, published as `PublishId(n)`, call `n`, bound
/// at 10 s.
fn asked(r: &mut SpawnRequests, n: u64, host: &str) {
    let w = Waiting {
        call: CallId(n),
        host: HostId::new(host),
        deadline: at(10_000),
    };
    let mut fx = Effects::default();
    r.wait(&mut fx, gid(n), msg(n), PublishId(n), w);
    assert_eq!(
        fx.take_due(at(10_000)),
        Some(TimerKind::Spawn(gid(n))),
        "a waiting spawn arms its own bound"
    );
}

/// The member's presence from the host asked is the answer — `spawned`, once; a presence
/// from another host under that gid is not.
#[test]
fn presence_from_the_asked_host_answers_spawned_once() {
    let mut r = SpawnRequests::default();
    asked(&mut r, 1, "b");
    assert_eq!(r.seen(&gid(1), &HostId::new("c")), None);
    assert_eq!(
        r.seen(&gid(1), &HostId::new("b")),
        Some(Answer {
            call: CallId(1),
            response: Response::Spawned {
                gid: gid(1),
                host: HostId::new("b")
            }
        })
    );
    assert_eq!(r.seen(&gid(1), &HostId::new("b")), None);
    assert_eq!(r.due(at(20_000), &gid(1)), None);
    assert_eq!(r.host_of(msg(1)), None);
    assert_eq!(r.check(|_, _| true), Ok(()));
}

/// The target's refusal becomes the caller's typed error; a FAILED for no SPAWN of ours is
/// not ours, and a second one for the same SPAWN answers nothing.
#[test]
fn a_refusal_is_told_as_its_typed_error() {
    let mut r = SpawnRequests::default();
    asked(&mut r, 1, "b");
    asked(&mut r, 2, "b");
    let not_allowed = Refusal::new(RefusalCode::NotAllowed, "not on the allowlist").to_body();
    let bad_cwd = Refusal::new(RefusalCode::InvalidArgument, "cwd outside roots").to_body();
    assert_eq!(r.failed(msg(9), &not_allowed), None);
    assert!(matches!(
        r.failed(msg(1), &not_allowed),
        Some(Some(Answer { call: CallId(1), response: Response::Error(CallError::NotAllowed { host, .. }) }))
            if host == HostId::new("b")
    ));
    assert!(matches!(
        r.failed(msg(2), &bad_cwd),
        Some(Some(Answer { call: CallId(2), response: Response::Error(CallError::InvalidArgument { reason }) }))
            if reason == "cwd outside roots"
    ));
    assert_eq!(r.failed(msg(1), &not_allowed), None);
    assert_eq!(r.check(|_, _| true), Ok(()));
}

/// A SPAWN no gateway is bound for is no such host; one the broker dropped fails for the
/// broker; a routed one waits for the member; a confirm that is not a SPAWN's is not ours.
#[test]
fn its_confirm_ends_it_only_when_it_went_nowhere() {
    let mut r = SpawnRequests::default();
    asked(&mut r, 1, "b");
    asked(&mut r, 2, "nowhere");
    asked(&mut r, 3, "b");
    assert_eq!(r.confirmed(PublishId(9), &PublishResult::Routed), None);
    assert_eq!(
        r.confirmed(PublishId(1), &PublishResult::Routed),
        Some(None)
    );
    assert_eq!(r.host_of(msg(1)), Some(HostId::new("b")));
    assert!(matches!(
        r.confirmed(PublishId(2), &PublishResult::Unroutable),
        Some(Some(Answer { response: Response::Error(CallError::NoSuchHost { host }), .. }))
            if host == HostId::new("nowhere")
    ));
    assert!(matches!(
        r.confirmed(PublishId(3), &PublishResult::Failed("closed".into())),
        Some(Some(Answer {
            response: Response::Error(CallError::BrokerUnavailable),
            ..
        }))
    ));
    assert_eq!(r.check(|_, _| true), Ok(()));
}

/// The broker going down fails at once the SPAWNs it never confirmed; a confirmed one waits
/// for its member or its bound, which answers `spawn_failed` and not a millisecond early.
#[test]
fn an_outage_fails_the_unconfirmed_and_the_bound_the_rest() {
    let mut r = SpawnRequests::default();
    asked(&mut r, 1, "b");
    asked(&mut r, 2, "b");
    assert_eq!(
        r.confirmed(PublishId(1), &PublishResult::Routed),
        Some(None)
    );
    let failed = r.broker_down();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].call, CallId(2));
    assert_eq!(r.due(at(9_999), &gid(1)), None);
    assert!(matches!(
        r.due(at(10_000), &gid(1)),
        Some(Answer { call: CallId(1), response: Response::Error(CallError::SpawnFailed { reason }) })
            if reason.contains("never reported the member ready")
    ));
    assert_eq!(r.due(at(10_000), &gid(1)), None);
}

/// The bookkeeping check fails when a waiting spawn has no bound armed.
#[test]
fn the_check_sees_a_spawn_with_no_bound() {
    let mut r = SpawnRequests::default();
    asked(&mut r, 1, "b");
    assert!(r.check(|_, _| false).is_err());
    assert_eq!(r.check(|d, g| d == at(10_000) && *g == gid(1)), Ok(()));
}
