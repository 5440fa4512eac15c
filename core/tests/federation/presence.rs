//! Presence at fleet scale: one signed snapshot per host per interval, a signed delta at once
//! on every join, leave and status change, and a roster that says what is true now.

use super::harness::{host_name, Fleet};
use super::*;
use fleet_core::roster::{Order, Presence, RosterRow};
use fleet_core::MemberRole;

fn row(f: &Fleet, h: usize, gid: &SessionId) -> Option<RosterRow> {
    f.hosts[h].gw.roster().into_iter().find(|r| &r.gid == gid)
}

/// The member b spawned is in every host's roster as soon as its delta crosses the broker —
/// no host waits for b's next snapshot (the clock does not move here).
#[test]
fn a_spawned_member_is_in_every_roster_before_the_next_snapshot() {
    let mut f = Fleet::new(3);
    let lead = f.lead(0, LEAD);
    f.advance(Duration::from_millis(10));
    let before = published(&f, 1, Kind::Presence);
    let c = f.call(0, lead, spawn(Some(1), "claude", None));
    f.settle();
    let (gid, _) = spawned(f.response(0, c)).expect("spawned");
    for h in 0..3 {
        let r = row(&f, h, &gid).unwrap_or_else(|| panic!("host {h} does not list {gid}"));
        assert_eq!(r.host, host_name(1));
    }
    assert_eq!(
        published(&f, 1, Kind::Presence) - before,
        1,
        "one delta, no snapshot"
    );
}

/// An idle member reads idle on another host, not "no status"; a change of status is sent
/// as a delta when it is sampled, not held for the next snapshot.
#[test]
fn a_members_status_is_reported_and_a_change_goes_out_at_once() {
    let (mut f, _lead, worker) = two_hosts();
    f.advance(Duration::from_secs(6));
    assert_eq!(
        row(&f, 0, &worker).and_then(|r| r.status),
        Some(AgentStatus::Idle)
    );
    f.set_status(1, &worker, AgentStatus::Blocked);
    let before = published(&f, 1, Kind::Presence);
    // b's next round: its snapshot (sampled before the change), then the sample, then the
    // delta that carries it.
    f.advance(Duration::from_secs(5));
    assert_eq!(published(&f, 1, Kind::Presence) - before, 2);
    assert_eq!(
        row(&f, 0, &worker).and_then(|r| r.status),
        Some(AgentStatus::Blocked)
    );
}

/// A member whose pane is gone leaves every roster at once; its gid is not believed on any
/// other host afterwards either.
#[test]
fn a_member_that_is_gone_leaves_every_roster_at_once() {
    let (mut f, _lead, worker) = two_hosts();
    assert!(row(&f, 0, &worker).is_some());
    f.input(
        1,
        Input::PaneGone {
            target: worker.clone(),
        },
    );
    f.settle();
    assert_eq!(row(&f, 0, &worker), None, "gone from a's view");
    assert!(f
        .events(0)
        .any(|e| matches!(e, Event::RosterLeft { gid } if gid == &worker)));
    // The next snapshot does not bring it back.
    f.advance(Duration::from_secs(6));
    assert_eq!(row(&f, 0, &worker), None);
}

/// A snapshot for b's host entry signed by c is refused by admission: presence names its
/// signer as the host in its routing key, so no host can speak for another's set.
#[test]
fn a_snapshot_signed_by_another_host_is_rejected() {
    let mut f = Fleet::new(3);
    f.lead(0, LEAD);
    let worker = f.member(1, WORKER);
    f.advance(Duration::from_millis(10));
    let c = Keyring::new(host_name(2), [3; 32], &BTreeMap::new()).expect("c's key");
    let at = Order {
        since: T0_UNIX + 1,
        seq: 1,
    };
    let body = Presence::snapshot(at, Vec::new(), Vec::new()).to_body();
    let key = "roster.b._gateway";
    let mut env = envelope(Kind::Presence, 0x555, "_gateway", key, &body);
    c.sign(&mut env);
    f.broker.push("test.roster.a", raw(key, &env));
    f.settle();
    assert!(
        codes(&f, 0).contains(&RejectCode::SenderNotOnSigningHost),
        "{:?}",
        codes(&f, 0)
    );
    assert!(row(&f, 0, &worker).is_some(), "b's set stands");
}

/// A spawned member's row says who it is on every host — profile, role, group, the lead that
/// spawned it and since when — and that it is ready and not busy.
#[test]
fn a_spawned_members_row_says_who_it_is_on_every_host() {
    let mut f = Fleet::new(3);
    let lead = f.lead(0, LEAD);
    f.advance(Duration::from_millis(10));
    let spec = Request::Spawn {
        host: Some(host_name(1)),
        spec: fleet_core::SpawnSpec {
            profile: "claude".into(),
            group: Some("red".into()),
            role: Some(MemberRole::Reviewer),
            ..Default::default()
        },
    };
    let c = f.call(0, lead, spec);
    f.settle();
    let (gid, _) = spawned(f.response(0, c)).expect("spawned");
    for h in 0..3 {
        let r = row(&f, h, &gid).unwrap_or_else(|| panic!("host {h} does not list {gid}"));
        assert_eq!(r.card.profile.as_deref(), Some("claude"), "host {h}");
        assert_eq!(r.card.role, Some(MemberRole::Reviewer), "host {h}");
        assert_eq!(r.card.group.as_deref(), Some("red"), "host {h}");
        assert_eq!(r.card.owner, Some(SessionId::new(LEAD)), "host {h}");
        assert!(r.card.since.is_some_and(|s| s >= T0_UNIX), "host {h}");
        assert!(r.ready && !r.busy, "host {h}");
        // Not sampled yet: unknown, never null.
        assert_eq!(r.status, Some(AgentStatus::Unknown), "host {h}");
    }
    // b's next round samples it: idle, everywhere.
    f.advance(Duration::from_secs(6));
    for h in 0..3 {
        assert_eq!(
            row(&f, h, &gid).and_then(|r| r.status),
            Some(AgentStatus::Idle)
        );
    }
}

/// While a turn runs in a member, every host reads it busy; once the turn ends, not busy —
/// each change as a delta, not at the next snapshot (the clock stays inside one interval).
#[test]
fn a_member_reads_busy_on_every_host_while_its_turn_runs() {
    let (mut f, lead, worker) = two_hosts();
    assert_eq!(row(&f, 0, &worker).map(|r| r.busy), Some(false));
    f.call(0, lead, send(&worker, "write the tests", false));
    f.set_status(1, &worker, AgentStatus::Working);
    f.advance(Duration::from_millis(500));
    assert_eq!(f.hosts[1].panes[&worker].typed, vec!["write the tests"]);
    assert_eq!(row(&f, 0, &worker).map(|r| r.busy), Some(true));
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Reply {
            content: "done".into(),
        },
    );
    f.set_status(1, &worker, AgentStatus::Idle);
    let before = published(&f, 1, Kind::Presence);
    f.advance(Duration::from_secs(3));
    assert_eq!(row(&f, 0, &worker).map(|r| r.busy), Some(false));
    assert!(published(&f, 1, Kind::Presence) > before, "a delta said so");
}

/// `fleet_status` answers for a member on another host from its roster row (its queue is
/// that host's to say), for one here with its queue, and `not_found` for a gid nobody serves.
#[test]
fn fleet_status_reads_the_roster_for_any_host_and_refuses_an_unknown_gid() {
    let (mut f, lead, worker) = two_hosts();
    f.advance(Duration::from_secs(6));
    let c = f.call(
        0,
        lead.clone(),
        Request::Status {
            target: worker.clone(),
        },
    );
    let Some(Response::Status { view, .. }) = f.response(0, c) else {
        panic!("{:?}", f.response(0, c));
    };
    assert_eq!(view.row.host, host_name(1));
    assert_eq!(view.row.status, Some(AgentStatus::Idle));
    assert!(view.row.ready && !view.row.busy && !view.in_turn);
    assert_eq!(view.queued, None, "b holds its queue");
    let here = Principal::primary(B_LEAD, Some(SessionId::new(B_LEAD)));
    f.input(
        1,
        Input::LeadAttached {
            lead: SessionId::new(B_LEAD),
        },
    );
    let c = f.call(
        1,
        here,
        Request::Status {
            target: worker.clone(),
        },
    );
    let Some(Response::Status { view, .. }) = f.response(1, c) else {
        panic!("{:?}", f.response(1, c));
    };
    assert_eq!(
        (view.row.host.clone(), view.queued),
        (host_name(1), Some(0))
    );
    let nobody = SessionId::new("99999999-9999-4999-8999-999999999999");
    let c = f.call(
        0,
        lead,
        Request::Status {
            target: nobody.clone(),
        },
    );
    assert_eq!(
        f.response(0, c),
        Some(&Response::Error(CallError::NotFound {
            target: nobody,
            departed: None
        }))
    );
}

/// Changes that come together go out together: two members' status changes in one round are
/// one signed message, not two, and both rows change on the other host.
#[test]
fn a_burst_of_changes_is_one_signed_batch() {
    let mut f = Fleet::new(2);
    f.lead(0, LEAD);
    let w1 = f.member(1, WORKER);
    let w2 = f.member(1, LOCAL_WORKER);
    f.advance(Duration::from_secs(6));
    f.set_status(1, &w1, AgentStatus::Blocked);
    f.set_status(1, &w2, AgentStatus::Blocked);
    let before = published(&f, 1, Kind::Presence);
    // b's next round: its snapshot (sampled before the change), then both samples, then one
    // batch with both.
    f.advance(Duration::from_secs(5));
    assert_eq!(published(&f, 1, Kind::Presence) - before, 2);
    for w in [&w1, &w2] {
        assert_eq!(
            row(&f, 0, w).and_then(|r| r.status),
            Some(AgentStatus::Blocked)
        );
    }
}

/// `host: "any"` places a spawn on the live host with the fewest members in the roster that
/// offers the profile (ties by host name); with no profile, that host's placement chooses one.
#[test]
fn a_spawn_on_any_host_lands_where_the_roster_shows_the_fewest_members() {
    let mut f = Fleet::new(3);
    let lead = f.lead(0, LEAD);
    f.member(0, "m-a1");
    f.member(0, "m-a2");
    f.member(1, "m-b1");
    f.advance(Duration::from_secs(6));
    let any = |profile: &str| Request::Spawn {
        host: Some(fleet_core::HostId::new("any")),
        spec: fleet_core::SpawnSpec {
            profile: profile.into(),
            ..Default::default()
        },
    };
    let c = f.call(0, lead.clone(), any(""));
    f.settle();
    let (gid, host) = spawned(f.response(0, c)).expect("spawned");
    assert_eq!(host, host_name(2).to_string(), "the empty host");
    let r = row(&f, 0, &gid).expect("listed");
    assert_eq!(
        r.card.profile.as_deref(),
        Some("claude"),
        "its placement chose"
    );
    f.advance(Duration::from_secs(6));
    // b and c now hold one each: the tie goes to b.
    let c = f.call(0, lead.clone(), any("claude"));
    f.settle();
    assert_eq!(
        spawned(f.response(0, c)).map(|(_, h)| h),
        Some(host_name(1).to_string())
    );
    let c = f.call(0, lead, any("gpt"));
    f.settle();
    assert!(
        matches!(f.response(0, c), Some(Response::Error(CallError::SpawnFailed { reason }))
            if reason.contains("no live host offers profile \"gpt\"")),
        "{:?}",
        f.response(0, c)
    );
}

/// "Needs you" across hosts: a member on b spawned by a's lead, BLOCKED on a prompt nobody
/// made, waits on that lead — b's presence counts it, and a's view says one waits at b, to
/// that lead only.
#[test]
fn what_waits_on_a_lead_at_another_host_is_counted_in_its_view() {
    let mut f = Fleet::new(2);
    let lead = f.lead(0, LEAD);
    let other = f.lead(0, "lead-other");
    f.advance(Duration::from_millis(10));
    let spec = Request::Spawn {
        host: Some(host_name(1)),
        spec: fleet_core::SpawnSpec::of("claude"),
    };
    let c = f.call(0, lead.clone(), spec);
    f.settle();
    let (gid, _) = spawned(f.response(0, c)).expect("spawned");
    f.set_status(1, &gid, AgentStatus::Blocked);
    f.advance(Duration::from_secs(21));
    let view = |f: &mut Fleet, who: Principal| {
        let c = f.call(0, who, Request::Attention);
        match f.response(0, c) {
            Some(Response::Attention(a)) => (**a).clone(),
            other => panic!("expected the attention view, got {other:?}"),
        }
    };
    let mine = view(&mut f, lead);
    assert!(mine.needs.is_empty(), "nothing here: {:?}", mine.needs);
    assert_eq!(
        mine.elsewhere,
        [fleet_core::needs::Elsewhere {
            host: host_name(1),
            waiting: 1
        }]
    );
    assert!(
        view(&mut f, other).elsewhere.is_empty(),
        "not another lead's"
    );
}
