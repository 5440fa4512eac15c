//! Leads that do not collect: results waiting for a lead never hold the window its inbox's
//! other traffic rides on, and with a broker they survive the lead's gateway restarting —
//! each pinned by a test that failed while results were held unacked in the inbox.

use super::*;
use harness::core_config;

/// Host a's gateway with a small inbox window, so three windows' worth is cheap.
fn small_window() -> fleet_core::CoreConfig {
    fleet_core::CoreConfig {
        prefetch: 4,
        ..core_config()
    }
}

fn member_gid(i: usize) -> String {
    format!("{:08x}-0000-4000-8000-{:012x}", 0xa000 + i, i)
}

/// Three prefetch windows of `wait:false` results nobody polls, then a blocking send: it is
/// answered, because the uncollected results wait on the lead's held queue, not in its inbox.
#[test]
fn uncollected_results_never_hold_the_inbox_window() {
    let mut f = Fleet::with(2, small_window());
    let lead = f.lead(0, LEAD);
    let members: Vec<SessionId> = (0..12).map(|i| f.member(1, &member_gid(i))).collect();
    let last = f.member(1, WORKER);
    f.advance(Duration::from_millis(10));
    for (i, m) in members.iter().enumerate() {
        f.call(0, lead.clone(), send(m, &format!("task {i}"), false));
    }
    f.advance(Duration::from_secs(1));
    for m in &members {
        assert_eq!(f.hosts[1].panes[m].typed.len(), 1, "{m} was briefed");
        f.call(
            1,
            Principal::worker(m.clone()),
            Request::Reply {
                content: format!("result of {m}"),
            },
        );
    }
    f.advance(Duration::from_secs(1));
    let c = f.call(0, lead, send(&last, "the blocking one", true));
    f.advance(Duration::from_secs(1));
    f.call(
        1,
        Principal::worker(last.clone()),
        Request::Reply {
            content: "answered".into(),
        },
    );
    f.advance(Duration::from_secs(1));
    assert_eq!(
        outcome(f.response(0, c)),
        Some((Outcome::Replied, Some("answered".into()))),
        "{}",
        f.trace(0)
    );
}

/// A lead's gateway restarts with results uncollected — remote ones and a same-host stranded
/// reply: all of them are still there for the lead to drain, from the broker. (A same-host
/// ticket's result is soft state like the ticket itself; the stranded reply is not.)
#[test]
fn held_results_survive_the_lead_gateways_restart() {
    let mut f = Fleet::with(2, small_window());
    let lead_gid = SessionId::new(LEAD);
    // The lead has a pane of its own on a, as a real lead does (a stranded reply names it).
    f.hosts[0]
        .panes
        .add(&lead_gid, fleet_core::testing::panes::ScriptedPane::idle());
    let lead = f.lead(0, LEAD);
    let local = f.member(0, LOCAL_WORKER);
    let remote: Vec<SessionId> = (0..6).map(|i| f.member(1, &member_gid(i))).collect();
    f.advance(Duration::from_millis(10));
    for m in remote.iter().chain([&local]) {
        f.call(0, lead.clone(), send(m, "task", false));
    }
    f.advance(Duration::from_secs(1));
    for m in &remote {
        f.call(
            1,
            Principal::worker(m.clone()),
            Request::Reply {
                content: format!("from {m}"),
            },
        );
    }
    // The local member answers its turn, then replies again with no turn open: the second
    // is a stranded reply for its last lead.
    for content in ["the turn's answer", "stranded here"] {
        f.call(
            0,
            Principal::worker(local.clone()),
            Request::Reply {
                content: content.into(),
            },
        );
        f.advance(Duration::from_secs(1));
    }
    f.restart(0, &[lead_gid]);
    // Remote results wait (parked) for their senders' first signed presence after the restart.
    f.advance(Duration::from_secs(10));
    for m in remote.iter().chain([&local]) {
        let d = f.call(0, lead.clone(), Request::Drain { target: m.clone() });
        let got = match f.response(0, d) {
            Some(Response::Replies { replies }) => replies.len(),
            other => panic!("{other:?}"),
        };
        assert_eq!(got, 1, "{m}'s result after the restart\n{}", f.trace(0));
    }
}

/// A ticket its lead never polls expires (`ticket_ttl_ms`), and the result held for it goes
/// with it — acked, not held for the reply's whole TTL, one more for every forgotten ticket.
#[test]
fn a_ticket_that_expires_unpolled_releases_its_held_result() {
    let cfg = fleet_core::CoreConfig {
        ticket_ttl_ms: 5_000,
        ..small_window()
    };
    let mut f = Fleet::with(2, cfg);
    let lead = f.lead(0, LEAD);
    let worker = f.member(1, WORKER);
    f.advance(Duration::from_millis(10));
    f.call(0, lead, send(&worker, "task", false));
    f.advance(Duration::from_secs(1));
    f.call(
        1,
        Principal::worker(worker.clone()),
        Request::Reply {
            content: "never polled".into(),
        },
    );
    f.advance(Duration::from_secs(1));
    assert_eq!(f.hosts[0].gw.held_deliveries(), 1, "held for the poll");
    f.advance(Duration::from_secs(10));
    assert!(f
        .events(0)
        .any(|e| matches!(e, Event::TicketExpired { .. })));
    assert_eq!(
        f.hosts[0].gw.held_deliveries(),
        0,
        "released with its ticket"
    );
}
