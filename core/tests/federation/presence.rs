//! Presence at fleet scale: one signed snapshot per host per interval, a signed delta at once
//! on every join, leave and status change, and a roster that says what is true now.

use super::harness::{host_name, Fleet};
use super::*;
use fleet_core::roster::{Order, Presence, RosterRow};

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
