//! The roster (U5). Presence is one signed host snapshot per interval — `roster.<host>._gateway`,
//! listing every entity the host serves with the host's profiles and start time — plus a
//! signed delta on `roster.<host>.<gid>` the moment an entity joins, leaves or changes status.
//! Every gateway folds what it hears into an eventually-consistent union view. A host's
//! presence is ordered by its gateway's start time and a per-process sequence number
//! ([`Order`]): a delta older than the snapshot is ignored, a newer one applies, and a stale
//! copy changes nothing. Entries expire when their host goes silent. Signed presence is also
//! what binds a gid to a host for admission's sender check, and a live binding is never taken
//! over.
//!
//! Wire 1.0 gateways sent one heartbeat per entity and a `_gateway` entry without a list; both
//! are still read (as [`Announcement::Heartbeat`] and [`Announcement::Host`]).

mod wire;
pub use wire::*;

use crate::health::Health;
use crate::ids::{HostId, SessionId};
use crate::status::AgentStatus;
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The bytes of the last snapshot applied from a host, kept while nothing else has shaped
/// what is known of it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Kept {
    profiles: Box<str>,
    entities: Box<str>,
}

/// What one delta did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Applied {
    Yes,
    /// Not newer than what is known, or no room: nothing changed.
    Stale,
    /// Another host holds the gid: refused.
    Claimed,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Present(Entity),
    /// It left. Kept until its expiry, so a late report it signed is still admitted and a
    /// stale join is recognised as older than the leave.
    Left,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    host: HostId,
    state: State,
    seen_at: Instant,
    /// The presence that set it (`None`: a 1.0 heartbeat).
    at: Option<Order>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct HostEntry {
    profiles: Vec<String>,
    seen_at: Instant,
    /// Its counts as its latest snapshot said them.
    ops: Option<HostOps>,
}

/// What is known of a host's gateway past its entries' expiry (a few numbers per host with
/// a key): a replay of its presence from before then is still recognised as old.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Known {
    /// The latest gateway process heard from.
    since: u64,
    /// That process's latest snapshot applied.
    snapshot: Option<Order>,
}

/// Whether a row can be trusted right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    Live,
    /// On another host while the broker is down: nobody can tell.
    Unknown,
}

/// One row of the union view (`fleet_list`, `fleet_status`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RosterRow {
    pub gid: SessionId,
    pub host: HostId,
    pub kind: EntityKind,
    /// A member's or lead's status as last sampled on its host (`unknown` before the first
    /// sample); a gateway row has none.
    pub status: Option<AgentStatus>,
    /// A turn is running in it.
    pub busy: bool,
    /// Past its readiness gate: only a member still spawning on this host is not (another
    /// host announces a member once it is ready).
    pub ready: bool,
    pub card: Card,
    /// The profiles a host's gateway offers (its `_gateway` row only).
    pub profiles: Vec<String>,
    pub liveness: Liveness,
    pub health: Option<Health>,
    /// Why, on rows of members served by the gateway answering.
    pub health_reason: Option<String>,
}

impl RosterRow {
    /// A gateway's row.
    pub fn gateway(host: HostId, profiles: Vec<String>, liveness: Liveness) -> RosterRow {
        RosterRow {
            gid: SessionId::new(GATEWAY_GID),
            host,
            kind: EntityKind::Gateway,
            status: None,
            busy: false,
            ready: true,
            card: Card::default(),
            profiles,
            liveness,
            health: None,
            health_reason: None,
        }
    }

    /// An entity's row, as its presence (or its own gateway) describes it.
    pub fn entity(gid: SessionId, host: HostId, e: &Entity, liveness: Liveness) -> RosterRow {
        RosterRow {
            gid,
            host,
            kind: e.kind,
            status: Some(e.status.unwrap_or(AgentStatus::Unknown)),
            busy: e.busy,
            ready: true,
            card: e.card.clone(),
            profiles: Vec::new(),
            liveness,
            health: e.health,
            health_reason: None,
        }
    }
}

/// What one presence did to the roster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// It shows the host's gateway started again since last heard.
    pub restarted: bool,
    /// Older than what is known of the host or the entity: it changed nothing.
    pub stale: bool,
    /// The gids it binds to its host now.
    pub bound: Vec<SessionId>,
    /// The gids it says are gone (a leave, or absent from a newer snapshot).
    pub left: Vec<SessionId>,
    /// Gids it claims that another host holds, with that host: refused, each.
    pub claimed: Vec<(SessionId, HostId)>,
}

#[derive(Debug)]
pub struct Roster {
    ttl: Duration,
    entities: BTreeMap<SessionId, Entry>,
    hosts: BTreeMap<HostId, HostEntry>,
    /// The gids each host's presence put in `entities`, for a snapshot to replace.
    by_host: BTreeMap<HostId, BTreeSet<SessionId>>,
    /// Each host's latest process and snapshot, kept past expiry: a host that comes back is
    /// still seen restarted, and a replay of what it said before is still stale.
    known: BTreeMap<HostId, Known>,
    /// The host each gid was first bound to, kept past expiry: a gid is one host's for its
    /// life (a spawn id lives on the host it was spawned on), so a later claim from another
    /// host is refused even in a gap in the owner's presence. Bounded per host: past
    /// `MAX_LISTED` bindings a host's oldest is forgotten, so no host can push out another's.
    owners: BTreeMap<SessionId, HostId>,
    owner_order: BTreeMap<HostId, VecDeque<SessionId>>,
    /// The planted `delta-applied-out-of-order`: deltas skip the order check.
    unordered: bool,
    /// The first entry whose order went backwards (never, unless the order check is broken).
    broken: Option<String>,
    /// Hosts whose index changed since the last `check_changed`: a step's check walks only
    /// those, so its cost follows the step's work, not the fleet's size.
    touched: BTreeSet<HostId>,
    /// Each host's last snapshot as it came, while only that snapshot has shaped what is known
    /// of the host: no delta, batch or heartbeat since, no gid of it refused or forgotten, no
    /// entry of it expired (any of those drops it, and the next snapshot is read in full).
    listings: BTreeMap<HostId, Kept>,
    /// The last snapshot applied exactly (see `snapshot`): the one `keep_listing` may keep.
    exact: Option<(HostId, Order)>,
}

impl Roster {
    pub fn new(ttl: Duration) -> Self {
        Roster {
            ttl,
            entities: BTreeMap::new(),
            hosts: BTreeMap::new(),
            by_host: BTreeMap::new(),
            known: BTreeMap::new(),
            owners: BTreeMap::new(),
            owner_order: BTreeMap::new(),
            unordered: false,
            broken: None,
            touched: BTreeSet::new(),
            listings: BTreeMap::new(),
            exact: None,
        }
    }

    /// The planted `delta-applied-out-of-order`: every delta applies, whatever its order.
    pub fn with_unordered_deltas(mut self, on: bool) -> Self {
        self.unordered = on;
        self
    }

    /// A verified PRESENCE signed by `host`. A gid bound to another host stays bound there:
    /// that claim is refused (`claimed`) and the rest of the presence applies.
    pub fn observe(&mut self, now: Instant, host: &HostId, ann: Announcement) -> Observed {
        let mut seen = Observed::default();
        if let Some(since) = ann.since() {
            match self.known.get(host).map(|k| k.since) {
                Some(known) if since == known => {}
                // An older process while the newer one is live: a late or replayed copy.
                Some(known) if since < known && self.host_is_fresh(now, host) => {
                    seen.stale = true;
                    return seen;
                }
                // A later process; or an earlier start from a host silent past its TTL (its
                // clock went back over a restart), which is a new process all the same.
                known => {
                    seen.restarted = known.is_some();
                    let k = Known {
                        since,
                        snapshot: None,
                    };
                    self.known.insert(host.clone(), k);
                }
            }
        }
        // Whatever applies now, the host's state is no longer its last snapshot's alone (a
        // snapshot that applies cleanly is kept again by `keep_listing`).
        self.listings.remove(host);
        self.exact = None;
        match ann {
            Announcement::Host { profiles, .. } => {
                let h = self.host_entry(now, host);
                h.profiles = profiles;
                h.seen_at = now;
            }
            Announcement::Snapshot {
                at,
                profiles,
                entities,
                ops,
            } => self.snapshot(now, host, at, (profiles, ops), entities, &mut seen),
            Announcement::Delta { at, gid, change } => {
                if self.delta(now, host, at, gid, change, &mut seen) == Applied::Stale {
                    seen.stale = true;
                }
            }
            Announcement::Batch { at, changes } => {
                let mut all_stale = true;
                for (gid, entity) in changes {
                    let applied = self.delta(now, host, at, gid, Some(entity), &mut seen);
                    all_stale &= applied == Applied::Stale;
                }
                seen.stale = all_stale;
            }
            Announcement::Heartbeat { gid, entity } => {
                if self.claimed(now, host, &gid, &mut seen) {
                    return seen;
                }
                if self
                    .entities
                    .get(&gid)
                    .is_some_and(|e| e.state == State::Left)
                {
                    // Unordered: it cannot undo a leave.
                    seen.stale = true;
                    return seen;
                }
                if !self.make_room(host, &gid) {
                    seen.stale = true;
                    return seen;
                }
                let at = self.entities.get(&gid).and_then(|e| e.at);
                self.set(now, host, &gid, State::Present(entity), at);
                seen.bound.push(gid);
            }
        }
        seen
    }

    /// One entity's delta, ordered against its host's snapshot and its own last presence.
    fn delta(
        &mut self,
        now: Instant,
        host: &HostId,
        at: Order,
        gid: SessionId,
        change: Option<Entity>,
        seen: &mut Observed,
    ) -> Applied {
        if self.claimed(now, host, &gid, seen) {
            return Applied::Claimed;
        }
        let older_than_snapshot = self.snapshot_of(host).is_some_and(|s| s >= at);
        let older_than_entry = self
            .entities
            .get(&gid)
            .filter(|e| &e.host == host)
            .and_then(|e| e.at)
            .is_some_and(|e| e >= at);
        if !self.unordered && (older_than_snapshot || older_than_entry) {
            return Applied::Stale;
        }
        if !self.make_room(host, &gid) {
            return Applied::Stale;
        }
        match change {
            Some(entity) => {
                self.set(now, host, &gid, State::Present(entity), Some(at));
                seen.bound.push(gid);
            }
            None => {
                if self.is_present(&gid) {
                    seen.left.push(gid.clone());
                }
                self.set(now, host, &gid, State::Left, Some(at));
            }
        }
        Applied::Yes
    }

    fn snapshot(
        &mut self,
        now: Instant,
        host: &HostId,
        at: Order,
        (profiles, ops): (Vec<String>, Option<HostOps>),
        entities: Vec<(SessionId, Entity)>,
        seen: &mut Observed,
    ) {
        if self.snapshot_of(host).is_some_and(|s| s >= at) {
            seen.stale = true;
            return;
        }
        let h = self.host_entry(now, host);
        h.profiles = profiles;
        h.seen_at = now;
        h.ops = ops;
        if let Some(k) = self.known.get_mut(host) {
            k.snapshot = Some(at);
        }
        let mut listed = BTreeSet::new();
        // Whether what is held of the host is now exactly this snapshot (no gid refused, no
        // newer delta kept over it): only then may its bytes stand for it (`keep_listing`).
        let mut exact = true;
        for (gid, entity) in entities {
            if self.claimed(now, host, &gid, seen) {
                exact = false;
                continue;
            }
            listed.insert(gid.clone());
            match self.entities.get_mut(&gid) {
                // A delta newer than this snapshot already said more: keep it, and the
                // snapshot still shows the entity alive.
                Some(e) if &e.host == host && e.at.is_some_and(|e| e > at) => {
                    exact = false;
                    e.seen_at = now;
                    if matches!(e.state, State::Present(_)) {
                        seen.bound.push(gid);
                    }
                }
                _ => {
                    self.set(now, host, &gid, State::Present(entity), Some(at));
                    seen.bound.push(gid);
                }
            }
        }
        let unlisted: Vec<SessionId> = self
            .by_host
            .get(host)
            .map(|gids| gids.difference(&listed).cloned().collect())
            .unwrap_or_default();
        for gid in unlisted {
            let Some(e) = self.entities.get_mut(&gid) else {
                continue;
            };
            if e.at.is_some_and(|e| e > at) {
                exact = false;
                continue;
            }
            if e.state == State::Left {
                continue;
            }
            e.state = State::Left;
            e.at = Some(at);
            seen.left.push(gid);
        }
        if exact {
            self.exact = Some((host.clone(), at));
        }
        self.trim_left(host);
    }

    /// The latest snapshot applied from `host`'s current process.
    fn snapshot_of(&self, host: &HostId) -> Option<Order> {
        self.known.get(host).and_then(|k| k.snapshot)
    }

    fn host_is_fresh(&self, now: Instant, host: &HostId) -> bool {
        self.hosts
            .get(host)
            .is_some_and(|h| self.fresh(now, h.seen_at))
    }

    /// Keeps at most `MAX_LISTED` entries per host, present and left: past it, entries that
    /// left go first (a host churning gids must not grow every roster).
    fn trim_left(&mut self, host: &HostId) {
        let Some(gids) = self.by_host.get(host) else {
            return;
        };
        let over = gids.len().saturating_sub(MAX_LISTED);
        if over == 0 {
            return;
        }
        let left: Vec<SessionId> = gids
            .iter()
            .filter(|g| {
                self.entities
                    .get(*g)
                    .is_some_and(|e| e.state == State::Left)
            })
            .take(over)
            .cloned()
            .collect();
        for gid in left {
            self.forget(&gid);
        }
    }

    /// Whether `host` may hold one more entry for `gid`: it already does, or it is under
    /// `MAX_LISTED` once entries that left make room.
    fn make_room(&mut self, host: &HostId, gid: &SessionId) -> bool {
        let Some(gids) = self.by_host.get(host) else {
            return true;
        };
        if gids.contains(gid) || gids.len() < MAX_LISTED {
            return true;
        }
        let left = gids
            .iter()
            .find(|g| {
                self.entities
                    .get(*g)
                    .is_some_and(|e| e.state == State::Left)
            })
            .cloned();
        match left {
            Some(g) => {
                self.forget(&g);
                true
            }
            None => false,
        }
    }

    fn host_entry(&mut self, now: Instant, host: &HostId) -> &mut HostEntry {
        self.hosts.entry(host.clone()).or_insert(HostEntry {
            profiles: Vec::new(),
            seen_at: now,
            ops: None,
        })
    }

    fn is_present(&self, gid: &SessionId) -> bool {
        self.entities
            .get(gid)
            .is_some_and(|e| matches!(e.state, State::Present(_)))
    }

    fn set(
        &mut self,
        now: Instant,
        host: &HostId,
        gid: &SessionId,
        state: State,
        at: Option<Order>,
    ) {
        let entry = Entry {
            host: host.clone(),
            state,
            seen_at: now,
            at,
        };
        if let Some(old) = self.entities.insert(gid.clone(), entry) {
            if let (Some(was), Some(now_at), None) = (old.at, at, &self.broken) {
                if now_at < was {
                    self.broken = Some(format!(
                        "roster: {gid} went back from {was:?} to {now_at:?}"
                    ));
                }
            }
            if &old.host != host {
                self.unindex(&old.host, gid);
            }
        }
        let gids = self.by_host.entry(host.clone()).or_default();
        if gids.insert(gid.clone()) && !self.touched.contains(host) {
            self.touched.insert(host.clone());
        }
    }

    /// `gid` is no longer `host`'s here (it expired, was forgotten, or moved): the host's
    /// last snapshot no longer describes what is held of it.
    fn unindex(&mut self, host: &HostId, gid: &SessionId) {
        self.listings.remove(host);
        if let Some(gids) = self.by_host.get_mut(host) {
            gids.remove(gid);
            if gids.is_empty() {
                self.by_host.remove(host);
            }
        }
        if !self.touched.contains(host) {
            self.touched.insert(host.clone());
        }
    }

    /// Whether `gid` is bound to a host other than `host`; records it in `seen` if so, and
    /// binds it to `host` if it was free.
    fn claimed(
        &mut self,
        now: Instant,
        host: &HostId,
        gid: &SessionId,
        seen: &mut Observed,
    ) -> bool {
        let owner = self.owners.get(gid).cloned();
        if let Some(bound) = owner
            .or_else(|| self.host_of(now, gid))
            .filter(|h| h != host)
        {
            seen.claimed.push((gid.clone(), bound));
            return true;
        }
        self.own(gid, host);
        false
    }

    /// Records `host` as `gid`'s owner, forgetting that host's oldest binding past the cap.
    fn own(&mut self, gid: &SessionId, host: &HostId) {
        if self.owners.contains_key(gid) {
            return;
        }
        self.owners.insert(gid.clone(), host.clone());
        let order = self.owner_order.entry(host.clone()).or_default();
        order.push_back(gid.clone());
        while order.len() > MAX_LISTED {
            let Some(old) = order.pop_front() else { break };
            self.owners.remove(&old);
        }
    }

    fn fresh(&self, now: Instant, seen_at: Instant) -> bool {
        seen_at + self.ttl > now
    }

    /// The host signed presence binds `gid` to, while its presence is fresh. An entity that
    /// left stays bound until then: a report it signed on its way out is still its own.
    pub fn host_of(&self, now: Instant, gid: &SessionId) -> Option<HostId> {
        self.entities
            .get(gid)
            .filter(|e| self.fresh(now, e.seen_at))
            .map(|e| e.host.clone())
    }

    /// The profile names a host advertised, if its gateway presence is fresh.
    pub fn profiles_of(&self, now: Instant, host: &HostId) -> Option<Vec<String>> {
        self.hosts
            .get(host)
            .filter(|h| self.fresh(now, h.seen_at))
            .map(|h| h.profiles.clone())
    }

    /// `listing` says exactly what the last snapshot applied from `host` said, and nothing
    /// else has shaped what is known of the host since: refresh it as that snapshot would have
    /// been applied again — the host and its listed entities heard now, at `listing`'s order —
    /// without reading the list. False (nothing done) when it is not so: read it in full.
    pub fn refresh_unchanged(&mut self, now: Instant, host: &HostId, listing: &Listing) -> bool {
        let at = listing.at;
        let same_process = self
            .known
            .get(host)
            .is_some_and(|k| k.since == at.since && k.snapshot.is_some_and(|s| s < at));
        let same_bytes = self
            .listings
            .get(host)
            .is_some_and(|k| *k.profiles == *listing.profiles && *k.entities == *listing.entities);
        if !same_process || !same_bytes || !self.host_is_fresh(now, host) {
            return false;
        }
        if let Some(k) = self.known.get_mut(host) {
            k.snapshot = Some(at);
        }
        if let Some(h) = self.hosts.get_mut(host) {
            h.seen_at = now;
            h.ops = listing.ops.clone();
        }
        for gid in self.by_host.get(host).into_iter().flatten() {
            if let Some(e) = self.entities.get_mut(gid) {
                if matches!(e.state, State::Present(_)) {
                    e.seen_at = now;
                    e.at = Some(at);
                }
            }
        }
        true
    }

    /// The snapshot `listing` came in was just applied from `host` in full: if it applied
    /// exactly — every gid it lists bound to `host` as it says, nothing refused, no newer delta
    /// kept over it — keep its bytes, so the next one that says the same is only a refresh.
    pub fn keep_listing(&mut self, host: &HostId, listing: &Listing) {
        let exact = self.exact.take();
        if exact
            .as_ref()
            .is_none_or(|(h, at)| h != host || *at != listing.at)
            || self.snapshot_of(host) != Some(listing.at)
        {
            return;
        }
        self.listings.insert(
            host.clone(),
            Kept {
                profiles: listing.profiles.into(),
                entities: listing.entities.into(),
            },
        );
    }

    /// Forget every kept snapshot: something outside presence changed what a snapshot would
    /// do (a gid became this host's own, and a peer's copy listing it must be refused).
    pub fn drop_listings(&mut self) {
        self.listings.clear();
    }

    /// Our own broker link is back. Every entry gets a full TTL to be heard again: the silence
    /// was ours (our roster queue died with the connection, and the presence with it), so it
    /// says nothing about the others yet.
    pub fn heard_again(&mut self, now: Instant) {
        for e in self.entities.values_mut() {
            e.seen_at = e.seen_at.max(now);
        }
        for h in self.hosts.values_mut() {
            h.seen_at = h.seen_at.max(now);
        }
    }

    /// Drops entries whose presence stopped. Returns the gids that expired (those that left
    /// among them: what was typed into them is past hearing of too).
    pub fn expire(&mut self, now: Instant) -> Vec<SessionId> {
        let ttl = self.ttl;
        let gone: Vec<(SessionId, HostId)> = self
            .entities
            .iter()
            .filter(|(_, e)| e.seen_at + ttl <= now)
            .map(|(g, e)| (g.clone(), e.host.clone()))
            .collect();
        for (g, host) in &gone {
            self.entities.remove(g);
            self.unindex(host, g);
        }
        self.hosts.retain(|_, h| h.seen_at + ttl > now);
        let hosts = &self.hosts;
        self.listings.retain(|h, _| hosts.contains_key(h));
        gone.into_iter().map(|(g, _)| g).collect()
    }

    /// Forgets one entity at once (a local member stopped). Its owner is kept: the gid stays
    /// that host's.
    pub fn forget(&mut self, gid: &SessionId) {
        if let Some(e) = self.entities.remove(gid) {
            self.unindex(&e.host, gid);
        }
    }

    /// The union view. With the broker down, other hosts' rows read as unknown.
    pub fn view(&self, now: Instant, own: &HostId, broker_up: bool) -> Vec<RosterRow> {
        let liveness = |host: &HostId| {
            if broker_up || host == own {
                Liveness::Live
            } else {
                Liveness::Unknown
            }
        };
        let mut rows: Vec<RosterRow> = self
            .hosts
            .iter()
            .filter(|(_, h)| self.fresh(now, h.seen_at))
            .map(|(host, h)| RosterRow::gateway(host.clone(), h.profiles.clone(), liveness(host)))
            .collect();
        rows.extend(self.entities.iter().filter_map(|(gid, e)| {
            let State::Present(entity) = &e.state else {
                return None;
            };
            self.fresh(now, e.seen_at)
                .then(|| RosterRow::entity(gid.clone(), e.host.clone(), entity, liveness(&e.host)))
        }));
        rows
    }

    /// Each fresh host but `own`: how long since it was heard, and its counts.
    pub fn hosts_heard(
        &self,
        now: Instant,
        own: &HostId,
    ) -> Vec<(HostId, Duration, Option<HostOps>)> {
        self.hosts
            .iter()
            .filter(|(host, h)| *host != own && self.fresh(now, h.seen_at))
            .map(|(host, h)| (host.clone(), now.saturating_since(h.seen_at), h.ops.clone()))
            .collect()
    }

    /// One entity's row, if it is present and fresh.
    pub fn row(&self, now: Instant, gid: &SessionId, broker_up: bool) -> Option<RosterRow> {
        let e = self
            .entities
            .get(gid)
            .filter(|e| self.fresh(now, e.seen_at))?;
        let State::Present(entity) = &e.state else {
            return None;
        };
        let liveness = if broker_up {
            Liveness::Live
        } else {
            Liveness::Unknown
        };
        Some(RosterRow::entity(
            gid.clone(),
            e.host.clone(),
            entity,
            liveness,
        ))
    }

    /// Entries kept (hosts, entities present or left).
    pub fn len(&self) -> usize {
        self.entities.len() + self.hosts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks the roster's own bookkeeping: no entry's order ever went backwards, and every
    /// entry is indexed under its host, and only there. Walks the whole index (tests).
    pub fn check(&self) -> Result<(), String> {
        self.check_hosts(self.by_host.keys())
    }

    /// The same check, walking only the hosts whose index changed since the last call: run on
    /// every step of a gateway built with invariants, where a full walk made the check, not
    /// the work, the cost of a 12 × 100 world. The counts still cover every host, so an entry
    /// put in or taken out of the index without it is caught all the same.
    pub fn check_changed(&mut self) -> Result<(), String> {
        let touched = std::mem::take(&mut self.touched);
        self.check_hosts(touched.iter())
    }

    fn check_hosts<'a>(&self, hosts: impl Iterator<Item = &'a HostId>) -> Result<(), String> {
        if let Some(b) = &self.broken {
            return Err(b.clone());
        }
        let indexed: usize = self.by_host.values().map(BTreeSet::len).sum();
        if indexed != self.entities.len() {
            return Err(format!(
                "roster: {} entities, {indexed} indexed by host",
                self.entities.len()
            ));
        }
        for host in hosts {
            for gid in self.by_host.get(host).into_iter().flatten() {
                if self.entities.get(gid).map(|e| &e.host) != Some(host) {
                    return Err(format!(
                        "roster: {gid} indexed under {host}, not bound there"
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
