use super::*;
use crate::spawn_spec::MemberRole;

const TTL: u64 = 20_000;

fn at(since: u64, seq: u64) -> Order {
    Order { since, seq }
}

fn member(status: AgentStatus) -> Entity {
    Entity::new(EntityKind::Member, Some(status))
}

fn snapshot(order: Order, gids: &[&str]) -> Announcement {
    Announcement::Snapshot {
        at: order,
        profiles: vec!["claude".into()],
        entities: gids
            .iter()
            .map(|g| (SessionId::new(g), member(AgentStatus::Idle)))
            .collect(),
        ops: None,
    }
}

fn delta(order: Order, gid: &str, change: Option<Entity>) -> Announcement {
    Announcement::Delta {
        at: order,
        gid: SessionId::new(gid),
        change,
    }
}

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

fn gids(r: &Roster, now: Instant) -> Vec<String> {
    r.view(now, &HostId::new("a"), true)
        .into_iter()
        .filter(|row| row.kind != EntityKind::Gateway)
        .map(|row| row.gid.to_string())
        .collect()
}

/// The status `gid`'s row shows at `now`, if it is listed.
fn status_of(r: &Roster, now: Instant, gid: &str) -> Option<AgentStatus> {
    r.view(now, &HostId::new("a"), true)
        .into_iter()
        .find(|row| row.gid.as_str() == gid)
        .and_then(|row| row.status)
}

fn roster() -> Roster {
    Roster::new(Duration::from_millis(TTL))
}

#[test]
fn a_snapshot_replaces_what_was_known_of_its_host() {
    let (mut r, b) = (roster(), HostId::new("b"));
    let seen = r.observe(ms(0), &b, snapshot(at(1, 1), &["m1", "m2"]));
    assert_eq!(seen.bound.len(), 2);
    assert_eq!(gids(&r, ms(0)), ["m1", "m2"]);
    let seen = r.observe(ms(5_000), &b, snapshot(at(1, 2), &["m2", "m3"]));
    assert_eq!(seen.left, vec![SessionId::new("m1")]);
    assert_eq!(gids(&r, ms(5_000)), ["m2", "m3"]);
    assert_eq!(r.profiles_of(ms(5_000), &b), Some(vec!["claude".into()]));
}

#[test]
fn a_delta_older_than_the_snapshot_is_ignored_and_a_newer_one_applies() {
    let (mut r, b) = (roster(), HostId::new("b"));
    r.observe(ms(0), &b, snapshot(at(1, 5), &["m1"]));
    let old = r.observe(
        ms(1),
        &b,
        delta(at(1, 4), "m9", Some(member(AgentStatus::Idle))),
    );
    assert!(old.stale);
    assert_eq!(gids(&r, ms(1)), ["m1"]);
    let leave_old = r.observe(ms(1), &b, delta(at(1, 3), "m1", None));
    assert!(leave_old.stale, "a leave older than the snapshot");
    assert_eq!(gids(&r, ms(1)), ["m1"]);
    let new = r.observe(
        ms(2),
        &b,
        delta(at(1, 6), "m9", Some(member(AgentStatus::Working))),
    );
    assert_eq!(new.bound, vec![SessionId::new("m9")]);
    let working = status_of(&r, ms(2), "m9");
    assert_eq!(working, Some(AgentStatus::Working));
}

#[test]
fn deltas_of_one_entity_apply_in_order_whatever_order_they_arrive_in() {
    let (mut r, b) = (roster(), HostId::new("b"));
    r.observe(ms(0), &b, snapshot(at(1, 1), &[]));
    r.observe(ms(1), &b, delta(at(1, 3), "m1", None));
    let join = r.observe(
        ms(2),
        &b,
        delta(at(1, 2), "m1", Some(member(AgentStatus::Idle))),
    );
    assert!(
        join.stale,
        "the join came before the leave that arrived first"
    );
    assert!(gids(&r, ms(2)).is_empty());
}

/// A delta newer than a snapshot that arrives before it keeps its word: the late snapshot
/// neither undoes the join nor the change.
#[test]
fn a_late_snapshot_does_not_undo_a_newer_delta() {
    let (mut r, b) = (roster(), HostId::new("b"));
    r.observe(ms(0), &b, snapshot(at(1, 1), &["m1"]));
    r.observe(
        ms(1),
        &b,
        delta(at(1, 3), "m2", Some(member(AgentStatus::Idle))),
    );
    r.observe(
        ms(1),
        &b,
        delta(at(1, 4), "m1", Some(member(AgentStatus::Blocked))),
    );
    let seen = r.observe(ms(2), &b, snapshot(at(1, 2), &["m1"]));
    assert!(seen.left.is_empty(), "{seen:?}");
    assert_eq!(gids(&r, ms(2)), ["m1", "m2"]);
    let m1 = status_of(&r, ms(2), "m1");
    assert_eq!(m1, Some(AgentStatus::Blocked));
}

#[test]
fn a_stale_snapshot_changes_nothing() {
    let (mut r, b) = (roster(), HostId::new("b"));
    r.observe(ms(0), &b, snapshot(at(1, 7), &["m1"]));
    let seen = r.observe(ms(10_000), &b, snapshot(at(1, 6), &["ghost"]));
    assert!(seen.stale);
    assert_eq!(gids(&r, ms(10_000)), ["m1"]);
    // Nor does it keep the host alive: its entries expire from the last real snapshot.
    assert!(gids(&r, ms(TTL)).is_empty());
}

#[test]
fn a_host_that_goes_silent_expires_with_its_entities() {
    let (mut r, b) = (roster(), HostId::new("b"));
    r.observe(ms(0), &b, snapshot(at(1, 1), &["m1"]));
    r.observe(
        ms(1_000),
        &b,
        delta(at(1, 2), "m2", Some(member(AgentStatus::Idle))),
    );
    assert!(r.expire(ms(TTL - 1)).is_empty());
    r.observe(ms(5_000), &b, snapshot(at(1, 3), &["m1", "m2"]));
    assert!(
        r.expire(ms(TTL + 1_000)).is_empty(),
        "the snapshot refreshed both"
    );
    let gone = r.expire(ms(5_000 + TTL));
    assert_eq!(gone, vec![SessionId::new("m1"), SessionId::new("m2")]);
    assert_eq!(r.profiles_of(ms(5_000 + TTL), &b), None);
    assert!(r.is_empty());
    r.check().expect("index");
}

/// An entity that left is out of the view at once, yet stays bound to its host until its
/// presence expires: its host's last report about it is still admitted as its own.
#[test]
fn an_entity_that_left_is_unlisted_but_still_bound_until_expiry() {
    let (mut r, b) = (roster(), HostId::new("b"));
    r.observe(ms(0), &b, snapshot(at(1, 1), &["m1"]));
    let seen = r.observe(ms(1_000), &b, delta(at(1, 2), "m1", None));
    assert_eq!(seen.left, vec![SessionId::new("m1")]);
    assert!(gids(&r, ms(1_000)).is_empty());
    assert_eq!(r.host_of(ms(1_000), &SessionId::new("m1")), Some(b.clone()));
    // A later snapshot does not list it; it stays left, and expires from the leave.
    r.observe(ms(5_000), &b, snapshot(at(1, 3), &[]));
    assert_eq!(r.expire(ms(1_000 + TTL)), vec![SessionId::new("m1")]);
}

/// A gid bound to one host cannot be claimed by another — by snapshot or delta, while its
/// presence is fresh or in a gap in it (a gid is one host's for its life). The rest of the
/// claimant's snapshot stands.
#[test]
fn a_live_binding_is_never_taken_over() {
    let (mut r, a, c) = (roster(), HostId::new("a"), HostId::new("c"));
    r.observe(ms(0), &a, snapshot(at(1, 1), &["g"]));
    let seen = r.observe(ms(1_000), &c, snapshot(at(9, 1), &["g", "c1"]));
    assert_eq!(seen.claimed, vec![(SessionId::new("g"), a.clone())]);
    assert_eq!(seen.bound, vec![SessionId::new("c1")]);
    let seen = r.observe(ms(1_000), &c, delta(at(9, 2), "g", None));
    assert_eq!(seen.claimed.len(), 1, "nor may it say the gid left");
    assert_eq!(r.host_of(ms(1_000), &SessionId::new("g")), Some(a.clone()));
    // a goes silent: the gid leaves the view, but it stays a's.
    r.expire(ms(30_000));
    let seen = r.observe(
        ms(30_000),
        &c,
        delta(at(9, 3), "g", Some(member(AgentStatus::Idle))),
    );
    assert_eq!(seen.claimed, vec![(SessionId::new("g"), a.clone())]);
    let seen = r.observe(ms(31_000), &a, snapshot(at(1, 2), &["g"]));
    assert_eq!(seen.bound, vec![SessionId::new("g")]);
}

#[test]
fn a_later_start_time_reads_as_a_restart_and_a_stale_copy_does_not() {
    let (mut r, b) = (roster(), HostId::new("b"));
    let restarted =
        |r: &mut Roster, since| r.observe(ms(0), &b, snapshot(at(since, 1), &[])).restarted;
    assert!(!restarted(&mut r, 100), "first sight");
    assert!(!restarted(&mut r, 100), "same process");
    assert!(restarted(&mut r, 200), "restarted");
    assert!(!restarted(&mut r, 100), "a stale copy");
    // A delta from the new process shows it as well as its snapshot would.
    let seen = r.observe(
        ms(0),
        &b,
        delta(at(300, 1), "m", Some(member(AgentStatus::Idle))),
    );
    assert!(seen.restarted);
    // Past expiry, a host that comes back restarted is still seen so.
    r.expire(ms(60_000));
    assert!(
        r.observe(ms(60_000), &b, snapshot(at(400, 1), &[]))
            .restarted
    );
}

/// After a restart the new process's first snapshot, whatever its sequence number, replaces
/// the old process's set.
#[test]
fn a_restarted_hosts_snapshot_replaces_the_old_processs_set() {
    let (mut r, b) = (roster(), HostId::new("b"));
    r.observe(ms(0), &b, snapshot(at(100, 900), &["old"]));
    let seen = r.observe(ms(1_000), &b, snapshot(at(200, 1), &["new"]));
    assert!(seen.restarted);
    assert_eq!(seen.left, vec![SessionId::new("old")]);
    assert_eq!(gids(&r, ms(1_000)), ["new"]);
    let late = r.observe(
        ms(1_000),
        &b,
        delta(at(100, 901), "old", Some(member(AgentStatus::Idle))),
    );
    assert!(late.stale, "the old process's last word came too late");
}

/// Wire 1.0: one heartbeat per entity and a `_gateway` entry without a list. Read as before.
#[test]
fn wire_1_0_presence_is_still_read() {
    let (mut r, b) = (roster(), HostId::new("b"));
    let gw = SessionId::new(GATEWAY_GID);
    let host = Presence::v1_0(EntityKind::Gateway, None, Some(100)).to_body();
    let ann = Announcement::parse(&gw, &host).expect("host entry");
    assert!(matches!(
        ann,
        Announcement::Host {
            since: Some(100),
            ..
        }
    ));
    r.observe(ms(0), &b, ann);
    let m = SessionId::new("m1");
    let beat = Presence::v1_0(EntityKind::Member, Some(AgentStatus::Idle), None).to_body();
    let ann = Announcement::parse(&m, &beat).expect("heartbeat");
    assert!(matches!(ann, Announcement::Heartbeat { .. }));
    assert_eq!(r.observe(ms(0), &b, ann).bound, vec![m.clone()]);
    assert_eq!(gids(&r, ms(TTL - 1)), ["m1"]);
    assert!(gids(&r, ms(TTL)).is_empty(), "expires on missed heartbeats");
}

/// The other half of the schema policy: a 1.0 reader (whose body had only these four fields
/// and ignored the rest) reads a 1.1 snapshot as its host entry and a delta as a heartbeat.
#[test]
fn a_1_0_reader_reads_1_1_presence() {
    #[derive(Deserialize, Debug, PartialEq)]
    struct V10 {
        kind: EntityKind,
        #[serde(default)]
        status: Option<AgentStatus>,
        #[serde(default)]
        profiles: Vec<String>,
        #[serde(default)]
        since: Option<u64>,
    }
    let card = Card {
        profile: Some("claude".into()),
        role: Some(MemberRole::Reviewer),
        group: Some("red".into()),
        owner: Some(SessionId::new("lead-1")),
        since: Some(90),
        ..Card::default()
    };
    let listed = vec![Listed::new(
        SessionId::new("m1"),
        Entity {
            busy: true,
            card,
            ..member(AgentStatus::Idle)
        },
    )];
    let snap = Presence::snapshot(at(100, 7), vec!["claude".into()], listed).to_body();
    let read: V10 = serde_json::from_slice(&snap).expect("1.0 reads the snapshot");
    assert_eq!(
        read,
        V10 {
            kind: EntityKind::Gateway,
            status: None,
            profiles: vec!["claude".into()],
            since: Some(100)
        }
    );
    let d = Presence::delta(at(100, 8), Some(member(AgentStatus::Working))).to_body();
    let read: V10 = serde_json::from_slice(&d).expect("1.0 reads a delta");
    assert_eq!(read.status, Some(AgentStatus::Working));
}

#[test]
fn malformed_presence_is_refused_with_a_reason() {
    let gw = SessionId::new(GATEWAY_GID);
    let listed = |gid: &str, kind| Listed::new(SessionId::new(gid), Entity::new(kind, None));
    let body = |entities| Presence::snapshot(at(1, 1), Vec::new(), entities).to_body();
    let err = |from: &SessionId, b: &[u8]| Announcement::parse(from, b).expect_err("refused");
    assert!(err(&gw, &body(vec![listed("x", EntityKind::Gateway)])).contains("gateway"));
    let twice = vec![
        listed("m", EntityKind::Member),
        listed("m", EntityKind::Lead),
    ];
    assert!(err(&gw, &body(twice)).contains("twice"));
    let many = (0..=MAX_LISTED)
        .map(|i| listed(&format!("m{i}"), EntityKind::Member))
        .collect();
    assert!(err(&gw, &body(many)).contains("more than"));
    let m = SessionId::new("m");
    let as_gateway = Presence::v1_0(EntityKind::Gateway, None, None).to_body();
    assert!(err(&m, &as_gateway).contains("as a gateway"));
    assert!(err(&m, b"{not json").contains("key must be a string"));
}

#[test]
fn other_hosts_read_unknown_while_the_broker_is_down() {
    let (mut r, a, b) = (roster(), HostId::new("a"), HostId::new("b"));
    r.observe(ms(0), &a, snapshot(at(1, 1), &["ga"]));
    r.observe(ms(0), &b, snapshot(at(1, 1), &["gb"]));
    let rows: Vec<_> = r
        .view(ms(0), &a, false)
        .into_iter()
        .filter(|x| x.kind != EntityKind::Gateway)
        .map(|x| (x.gid.to_string(), x.liveness))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("ga".into(), Liveness::Live),
            ("gb".into(), Liveness::Unknown)
        ]
    );
}

/// What is known of a host outlives its entries: a copy of its last snapshot replayed after
/// the host expired (say, a machine lost for good) is still older than what was applied, and
/// brings nobody back.
#[test]
fn a_snapshot_replayed_after_its_host_expired_is_still_stale() {
    let (mut r, b) = (roster(), HostId::new("b"));
    r.observe(ms(0), &b, snapshot(at(1, 7), &["m1"]));
    r.expire(ms(TTL));
    assert!(gids(&r, ms(TTL)).is_empty());
    let seen = r.observe(ms(TTL + 1), &b, snapshot(at(1, 7), &["m1"]));
    assert!(seen.stale);
    assert!(gids(&r, ms(TTL + 1)).is_empty());
    assert_eq!(r.profiles_of(ms(TTL + 1), &b), None);
    // Nor does a copy from an older process while the newer one is live.
    r.observe(ms(TTL + 2), &b, snapshot(at(2, 1), &["m2"]));
    assert!(
        r.observe(ms(TTL + 3), &b, snapshot(at(1, 8), &["m1"]))
            .stale
    );
    assert_eq!(gids(&r, ms(TTL + 3)), ["m2"]);
}

/// A host that churns gids holds at most `MAX_LISTED` entries in a roster: those that left
/// go first.
#[test]
fn a_host_churning_gids_holds_a_bounded_number_of_entries() {
    let (mut r, c) = (roster(), HostId::new("c"));
    let batch = |from: usize| -> Vec<String> {
        (from..from + MAX_LISTED).map(|i| format!("g{i}")).collect()
    };
    let first = batch(0);
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    r.observe(ms(0), &c, snapshot(at(1, 1), &first));
    let second = batch(MAX_LISTED);
    let second: Vec<&str> = second.iter().map(String::as_str).collect();
    let seen = r.observe(ms(1), &c, snapshot(at(1, 2), &second));
    assert_eq!(seen.left.len(), MAX_LISTED);
    assert_eq!(
        r.len(),
        MAX_LISTED + 1,
        "its listed entities and its host entry"
    );
    r.check().expect("index");
}

/// Bindings remembered past expiry are bounded per host: a host that binds more than
/// `MAX_LISTED` gids forgets its own oldest, never another host's, so flooding the roster
/// does not reopen a takeover of an honest gid.
#[test]
fn a_host_binding_many_gids_never_pushes_out_anothers_binding() {
    let (mut r, a, c) = (roster(), HostId::new("a"), HostId::new("c"));
    r.observe(ms(0), &a, snapshot(at(1, 1), &["honest"]));
    for round in 0..5u64 {
        let names: Vec<String> = (0..MAX_LISTED)
            .map(|i| format!("flood{round}-{i}"))
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        r.observe(ms(1 + round), &c, snapshot(at(9, 1 + round), &names));
    }
    // a goes silent; its gid leaves the view, but it stays a's.
    r.expire(ms(TTL + 10));
    let seen = r.observe(
        ms(TTL + 10),
        &c,
        delta(at(9, 10), "honest", Some(member(AgentStatus::Idle))),
    );
    assert_eq!(seen.claimed, vec![(SessionId::new("honest"), a)]);
}

#[test]
fn a_card_field_a_roster_may_not_keep_is_dropped_and_the_rest_is_kept_with_its_busy_flag() {
    let m = SessionId::new("m");
    let with = |card: Card| {
        let e = Entity {
            busy: true,
            card,
            ..member(AgentStatus::Working)
        };
        Presence::delta(at(1, 1), Some(e)).to_body()
    };
    let card_of = |body: &[u8]| match Announcement::parse(&m, body) {
        Ok(Announcement::Delta {
            change: Some(e), ..
        }) => e.card,
        other => panic!("{other:?}"),
    };
    let bad = Card {
        profile: Some("p".repeat(MAX_PROFILE_LEN + 1)),
        group: Some("#".into()),
        owner: Some(SessionId::new("")),
        since: Some(7),
        ..Card::default()
    };
    assert_eq!(
        card_of(&with(bad)),
        Card {
            since: Some(7),
            ..Card::default()
        },
        "one odd field costs only itself"
    );
    // A role from a later build reads as none; the rest of the card stands.
    let later =
        br#"{"kind":"member","since":1,"seq":1,"card":{"role":"TESTER","profile":"claude"}}"#;
    let card = card_of(later);
    assert_eq!((card.role, card.profile.as_deref()), (None, Some("claude")));
    let good = Card {
        profile: Some("claude".into()),
        role: Some(MemberRole::Architect),
        group: Some("red".into()),
        owner: Some(SessionId::new("lead")),
        since: Some(7),
        ticket: Some("CB-1".into()),
        cwd: Some("/srv/app".into()),
        charter: Some("ab".repeat(32)),
    };
    let ann = Announcement::parse(&m, &with(good.clone())).expect("a good card");
    let (mut r, b) = (roster(), HostId::new("b"));
    r.observe(ms(0), &b, ann);
    let row = r.row(ms(0), &m, true).expect("listed");
    assert_eq!((row.busy, row.card), (true, good));
    assert_eq!(row.status, Some(AgentStatus::Working));
}

#[test]
fn a_member_never_sampled_reads_unknown_not_null() {
    let (mut r, b) = (roster(), HostId::new("b"));
    let m = SessionId::new("m");
    let heartbeat = Announcement::Heartbeat {
        gid: m.clone(),
        entity: Entity::new(EntityKind::Member, None),
    };
    r.observe(ms(0), &b, heartbeat);
    assert_eq!(status_of(&r, ms(0), "m"), Some(AgentStatus::Unknown));
}

#[test]
fn a_batch_applies_each_change_as_its_own_delta_would() {
    let (mut r, b) = (roster(), HostId::new("b"));
    r.observe(ms(0), &b, snapshot(at(1, 1), &["m1", "m2"]));
    // m2 has a newer delta already; the batch's word on it is older and ignored.
    r.observe(
        ms(1),
        &b,
        delta(at(1, 5), "m2", Some(member(AgentStatus::Blocked))),
    );
    let batch = Announcement::Batch {
        at: at(1, 4),
        changes: vec![
            (SessionId::new("m1"), member(AgentStatus::Working)),
            (SessionId::new("m2"), member(AgentStatus::Idle)),
        ],
    };
    let seen = r.observe(ms(2), &b, batch);
    assert!(!seen.stale);
    assert_eq!(status_of(&r, ms(2), "m1"), Some(AgentStatus::Working));
    assert_eq!(status_of(&r, ms(2), "m2"), Some(AgentStatus::Blocked));
    // A batch no newer than the snapshot changes nothing at all.
    r.observe(ms(3), &b, snapshot(at(1, 6), &["m1", "m2"]));
    let old = Announcement::Batch {
        at: at(1, 4),
        changes: vec![(SessionId::new("m1"), member(AgentStatus::Blocked))],
    };
    assert!(r.observe(ms(4), &b, old).stale);
    assert_eq!(status_of(&r, ms(4), "m1"), Some(AgentStatus::Idle));
    // On the wire: a `_gateway` body with `changes` and no `entities`.
    let body = Presence::batch(
        at(1, 7),
        vec![Listed::new(SessionId::new("m1"), member(AgentStatus::Done))],
    )
    .to_body();
    let parsed = Announcement::parse(&SessionId::new(GATEWAY_GID), &body).expect("a batch");
    assert!(matches!(parsed, Announcement::Batch { ref changes, .. } if changes.len() == 1));
}

/// A snapshot body as a host sends it.
fn snapshot_body(order: Order, gids: &[(&str, AgentStatus)]) -> Vec<u8> {
    let listed = gids
        .iter()
        .map(|(g, s)| Listed::new(SessionId::new(g), member(*s)))
        .collect();
    Presence::snapshot(order, vec!["claude".into()], listed).to_body()
}

/// Applies a snapshot body as a gateway does: a refresh if it says what the last one said,
/// else read in full (and kept if it applied exactly). True: it was only a refresh.
fn apply_body(r: &mut Roster, now: Instant, host: &HostId, body: &[u8]) -> bool {
    let listing = Listing::peek(body).expect("a snapshot");
    if r.refresh_unchanged(now, host, &listing) {
        return true;
    }
    let gateway = SessionId::new(GATEWAY_GID);
    let ann = Announcement::parse(&gateway, body).expect("parses");
    r.observe(now, host, ann);
    r.keep_listing(host, &listing);
    false
}

/// A quiet host's snapshot, the same every round, is read once: later ones only refresh —
/// its entries live on, at the later order, exactly as if each had been read again.
#[test]
fn an_unchanged_snapshot_only_refreshes_what_it_listed() {
    let (mut r, b) = (roster(), HostId::new("b"));
    let quiet = [("m1", AgentStatus::Idle), ("m2", AgentStatus::Idle)];
    assert!(!apply_body(
        &mut r,
        ms(0),
        &b,
        &snapshot_body(at(1, 1), &quiet)
    ));
    for round in 1..6u64 {
        let now = ms(round * 5_000);
        assert!(apply_body(
            &mut r,
            now,
            &b,
            &snapshot_body(at(1, 1 + round), &quiet)
        ));
    }
    // Heard at 25 s: alive a TTL later than the first snapshot would have kept them.
    assert!(r.expire(ms(TTL + 1_000)).is_empty());
    assert_eq!(gids(&r, ms(TTL + 1_000)), ["m1", "m2"]);
    // The refresh moved the order on: a delta from between the rounds is stale now.
    let seen = r.observe(
        ms(26_000),
        &b,
        delta(at(1, 4), "m1", Some(member(AgentStatus::Working))),
    );
    assert!(seen.stale);
    r.check().expect("index");
}

/// A delta applied since the kept snapshot changed what is held: the next snapshot is read
/// in full even when its bytes are the same, and it sets the state back to what it says.
#[test]
fn a_snapshot_after_a_delta_is_read_in_full() {
    let (mut r, b) = (roster(), HostId::new("b"));
    let quiet = [("m1", AgentStatus::Idle)];
    apply_body(&mut r, ms(0), &b, &snapshot_body(at(1, 1), &quiet));
    r.observe(
        ms(1_000),
        &b,
        delta(at(1, 2), "m1", Some(member(AgentStatus::Working))),
    );
    assert_eq!(status_of(&r, ms(1_000), "m1"), Some(AgentStatus::Working));
    // Its turn ended, and that delta was lost: the snapshot says idle again.
    assert!(!apply_body(
        &mut r,
        ms(5_000),
        &b,
        &snapshot_body(at(1, 4), &quiet)
    ));
    assert_eq!(status_of(&r, ms(5_000), "m1"), Some(AgentStatus::Idle));
}

/// A snapshot that arrived after a newer delta kept that delta's word over its own: it does
/// not stand for what is held, so the next snapshot with its bytes is read in full.
#[test]
fn a_snapshot_behind_a_newer_delta_is_not_kept() {
    let (mut r, b) = (roster(), HostId::new("b"));
    let quiet = [("m1", AgentStatus::Idle)];
    apply_body(&mut r, ms(0), &b, &snapshot_body(at(1, 1), &quiet));
    // Working at seq 3, then idle at seq 5 (lost); the snapshot of seq 2 arrives late.
    r.observe(
        ms(1_000),
        &b,
        delta(at(1, 3), "m1", Some(member(AgentStatus::Working))),
    );
    assert!(!apply_body(
        &mut r,
        ms(1_100),
        &b,
        &snapshot_body(at(1, 2), &quiet)
    ));
    assert_eq!(status_of(&r, ms(1_100), "m1"), Some(AgentStatus::Working));
    assert!(!apply_body(
        &mut r,
        ms(5_000),
        &b,
        &snapshot_body(at(1, 6), &quiet)
    ));
    assert_eq!(status_of(&r, ms(5_000), "m1"), Some(AgentStatus::Idle));
}

/// The same bytes from a restarted process are that process's first snapshot: read in full
/// (and the restart seen).
#[test]
fn the_same_snapshot_from_a_restarted_host_is_read_in_full() {
    let (mut r, b) = (roster(), HostId::new("b"));
    let quiet = [("m1", AgentStatus::Idle)];
    apply_body(&mut r, ms(0), &b, &snapshot_body(at(1, 1), &quiet));
    let body = snapshot_body(at(2, 1), &quiet);
    let listing = Listing::peek(&body).expect("a snapshot");
    assert!(!r.refresh_unchanged(ms(5_000), &b, &listing));
    let gateway = SessionId::new(GATEWAY_GID);
    let seen = r.observe(
        ms(5_000),
        &b,
        Announcement::parse(&gateway, &body).expect("parses"),
    );
    assert!(seen.restarted);
}

/// A host's counts ride on its snapshot: taken from every one (a refresh too, though they are
/// not part of what makes two snapshots the same), and counts that do not read are none —
/// never the presence refused.
#[test]
fn a_snapshot_carries_its_hosts_counts_and_odd_counts_read_as_none() {
    let (mut r, b) = (roster(), HostId::new("b"));
    let ops = |n: u64| HostOps {
        delegations: n,
        held: 1,
        dead_letters: 2,
        broker_drops: 0,
        waiting: [(SessionId::new("lead-a"), n)].into_iter().collect(),
    };
    let body = |seq: u64, n: u64| {
        let listed = vec![Listed::new(SessionId::new("m1"), member(AgentStatus::Idle))];
        Presence::snapshot(at(1, seq), vec!["claude".into()], listed)
            .with_ops(ops(n))
            .to_body()
    };
    assert!(!apply_body(&mut r, ms(0), &b, &body(1, 3)));
    let heard = r.hosts_heard(ms(1_000), &HostId::new("a"));
    assert_eq!(heard, [(b.clone(), Duration::from_secs(1), Some(ops(3)))]);
    // The same list with other counts is only a refresh, and the counts are the new ones.
    assert!(apply_body(&mut r, ms(5_000), &b, &body(2, 4)));
    assert_eq!(
        r.hosts_heard(ms(5_000), &HostId::new("a"))[0].2,
        Some(ops(4))
    );
    // A host is not listed as its own peer.
    assert!(r.hosts_heard(ms(5_000), &b).is_empty());
    // Counts of the wrong shape: the snapshot still applies, with none.
    let mut odd: serde_json::Value = serde_json::from_slice(&body(3, 5)).expect("json");
    odd["ops"] = serde_json::json!({"delegations": "many"});
    odd["entities"][0]["gid"] = serde_json::json!("m2");
    let odd = serde_json::to_vec(&odd).expect("json");
    assert!(!apply_body(&mut r, ms(6_000), &b, &odd));
    assert_eq!(gids(&r, ms(6_000)), ["m2"]);
    assert_eq!(r.hosts_heard(ms(6_000), &HostId::new("a"))[0].2, None);
    // A host that counts more leads than anyone serves is kept to the bound.
    let mut many: serde_json::Value = serde_json::from_slice(&body(4, 5)).expect("json");
    let waiting: serde_json::Map<String, serde_json::Value> = (0..MAX_WAITING_LEADS + 10)
        .map(|i| (format!("lead-{i:05}"), serde_json::json!(1)))
        .collect();
    many["ops"]["waiting"] = serde_json::Value::Object(waiting);
    let many = serde_json::to_vec(&many).expect("json");
    apply_body(&mut r, ms(7_000), &b, &many);
    let kept = r.hosts_heard(ms(7_000), &HostId::new("a"))[0].2.clone();
    assert_eq!(kept.map(|o| o.waiting.len()), Some(MAX_WAITING_LEADS));
}

/// A peer's card is shown in dashboards, tables and terminals: a field with a control
/// character (`ESC ]52;…` in a profile or owner) is dropped, the rest of the card kept.
#[test]
fn a_card_field_with_control_characters_is_dropped() {
    let card = Card {
        profile: Some("claude\u{1b}]52;c;ZXZpbA==\u{7}".into()),
        owner: Some(SessionId::new("lead\u{9b}2J")),
        ticket: Some("CB-1".into()),
        ..Card::default()
    }
    .checked();
    assert_eq!(card.profile, None);
    assert_eq!(card.owner, None);
    assert_eq!(card.ticket.as_deref(), Some("CB-1"));
}
