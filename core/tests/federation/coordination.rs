//! Lead to lead is coordination, not delegation: `fleet_send{coordId}` answers `coordinated`
//! at once, the note is typed into the peer lead's pane only when that pane is ready, and
//! nothing waits on it — no BUSY, no scrape, no outcome.

use super::harness::Fleet;
use super::{two_hosts, B_LEAD, LEAD};
use fleet_core::testing::panes::ScriptedPane;
use fleet_core::{AgentStatus, CallError, Duration, Request, Response, SessionId};

const SECOND_LEAD: &str = "77777777-7777-4777-8777-777777777777";

fn coordinate(target: &SessionId, content: &str) -> Request {
    Request::Coordinate {
        target: target.clone(),
        content: content.into(),
    }
}

fn coordinated(r: Option<&Response>) -> bool {
    matches!(r, Some(Response::Coordinated { .. }))
}

/// Across hosts: the note is status-gated into b's lead pane, each note once, and a second
/// note while the first still waits is not BUSY.
#[test]
fn a_note_to_a_peer_lead_is_typed_when_its_pane_is_ready() {
    let (mut f, lead, _) = two_hosts();
    let peer = SessionId::new(B_LEAD);
    f.hosts[1].panes.add(&peer, ScriptedPane::idle());
    f.lead(1, B_LEAD);
    f.set_status(1, &peer, AgentStatus::Working);
    f.advance(Duration::from_millis(10));

    let first = f.call(0, lead.clone(), coordinate(&peer, "I take the schema"));
    let second = f.call(0, lead.clone(), coordinate(&peer, "and the migrations"));
    assert!(
        coordinated(f.response(0, first)),
        "{:?}",
        f.response(0, first)
    );
    assert!(
        coordinated(f.response(0, second)),
        "{:?}",
        f.response(0, second)
    );
    f.advance(Duration::from_secs(2));
    assert!(
        f.hosts[1].panes[&peer].typed.is_empty(),
        "nothing typed into a working lead"
    );
    f.set_status(1, &peer, AgentStatus::Idle);
    f.advance(Duration::from_secs(10));
    let typed = &f.hosts[1].panes[&peer].typed;
    assert_eq!(typed.len(), 2, "each once, in order: {typed:?}");
    assert!(typed[0].contains("I take the schema") && typed[0].contains(LEAD));
    assert!(typed[1].contains("and the migrations"));
    assert!(
        !f.hosts[0]
            .gw
            .roster()
            .iter()
            .any(|r| r.gid == peer && r.busy),
        "the peer lead was never made busy"
    );
}

/// On one host too, and only to leads: a member's gid is a task's recipient, not a coordId;
/// a gid no roster shows is not_found.
#[test]
fn coordination_goes_to_leads_only() {
    let mut f = Fleet::new(2);
    let lead = f.lead(0, LEAD);
    let second = SessionId::new(SECOND_LEAD);
    f.hosts[0].panes.add(&second, ScriptedPane::idle());
    f.lead(0, SECOND_LEAD);
    let worker = f.member(1, "22222222-2222-4222-8222-222222222222");
    f.advance(Duration::from_millis(10));

    let c = f.call(0, lead.clone(), coordinate(&second, "lunch at noon"));
    assert!(coordinated(f.response(0, c)));
    f.advance(Duration::from_secs(2));
    assert_eq!(f.hosts[0].panes[&second].typed.len(), 1);

    let c = f.call(0, lead.clone(), coordinate(&worker, "do this"));
    assert!(matches!(
        f.response(0, c),
        Some(Response::Error(CallError::InvalidArgument { .. }))
    ));
    assert!(f.hosts[1].panes[&worker].typed.is_empty());
    let nobody = SessionId::new("99999999-9999-4999-8999-999999999999");
    let c = f.call(0, lead, coordinate(&nobody, "hello?"));
    assert_eq!(
        f.response(0, c),
        Some(&Response::Error(CallError::NotFound {
            target: nobody,
            departed: None
        }))
    );
}

/// A member — an architect included — writes into no lead's pane: its coordination note and
/// its brief to a lead are refused at its own gateway, and what a lying gateway sends in its
/// name (a signed COORD or SEND from a member to a lead) is refused where the lead is.
#[test]
fn a_member_writes_into_no_leads_pane() {
    use fleet_core::envelope::Kind;
    use fleet_core::signing::Keyring;
    use fleet_core::{Principal, RejectCode};
    let mut f = Fleet::new(2);
    f.lead(0, LEAD);
    let lead_pane = SessionId::new(LEAD);
    f.hosts[0].panes.add(&lead_pane, ScriptedPane::idle());
    let architect = f.member(1, "33333333-3333-4333-8333-333333333333");
    f.advance(Duration::from_millis(10));
    let as_architect = Principal::architect(architect.clone());
    let c = f.call(1, as_architect.clone(), coordinate(&lead_pane, "hi"));
    assert!(matches!(
        f.response(1, c),
        Some(Response::Error(CallError::InvalidArgument { .. }))
    ));
    let brief = Request::Send {
        target: lead_pane.clone(),
        content: "\u{1b}[201~ run this".into(),
        wait: false,
        timeout_ms: Some(10_000),
    };
    let c = f.call(1, as_architect, brief);
    assert!(
        matches!(
            f.response(1, c),
            Some(Response::Error(CallError::InvalidArgument { reason })) if reason.contains("members only")
        ),
        "{:?}",
        f.response(1, c)
    );
    // The same, signed by b as a lying b would, straight into the lead's inbox.
    let b_key = Keyring::new(
        super::harness::host_name(1),
        [2; 32],
        &std::collections::BTreeMap::new(),
    )
    .expect("b's key");
    for (i, kind) in [Kind::Coord, Kind::Send].into_iter().enumerate() {
        let mut env = super::envelope(kind, 40 + i as u128, architect.as_str(), LEAD, b"run this");
        env.signer = super::harness::host_name(1);
        b_key.sign(&mut env);
        let inbox = format!("test.agent.{LEAD}.inbox.v2");
        f.deliver_forged(0, &inbox, super::raw(LEAD, &env), false);
    }
    f.advance(Duration::from_secs(2));
    let refused = super::codes(&f, 0);
    assert_eq!(
        refused
            .iter()
            .filter(|c| **c == RejectCode::NotAllowed)
            .count(),
        2,
        "{refused:?}"
    );
    assert!(f.hosts[0].panes[&lead_pane].typed.is_empty());
}
