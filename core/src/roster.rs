//! The roster (U5): every gateway heartbeats signed presence for its local entities and for
//! itself (`_gateway`, carrying its profile names); every gateway folds what it hears into an
//! eventually-consistent union view. Entries expire on missed heartbeats. Signed presence is
//! also what binds a gid to a host for admission's sender check.

use crate::ids::{HostId, SessionId};
use crate::status::AgentStatus;
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The gid a gateway speaks as when it speaks for itself (its host entry, its DLQ reports).
pub const GATEWAY_GID: &str = "_gateway";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntityKind {
    Member,
    Lead,
    Gateway,
}

/// The body of a PRESENCE message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Presence {
    pub kind: EntityKind,
    #[serde(default)]
    pub status: Option<AgentStatus>,
    /// For `_gateway` entries: the profile names this host can spawn.
    #[serde(default)]
    pub profiles: Vec<String>,
    /// For `_gateway` entries: when this gateway process started (Unix ms). A larger value
    /// than last seen means the host restarted and lost its soft state — the turn records of
    /// the briefs it had typed among them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
}

impl Presence {
    pub fn to_body(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn from_body(body: &[u8]) -> Result<Presence, String> {
        serde_json::from_slice(body).map_err(|e| e.to_string())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    host: HostId,
    presence: Presence,
    seen_at: Instant,
}

/// Whether a row can be trusted right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    Live,
    /// On another host while the broker is down: nobody can tell.
    Unknown,
}

/// One row of the union view (`fleet_list`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RosterRow {
    pub gid: SessionId,
    pub host: HostId,
    pub kind: EntityKind,
    pub status: Option<AgentStatus>,
    pub profiles: Vec<String>,
    pub liveness: Liveness,
}

/// What a heartbeat did to the roster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    /// Recorded; `restarted` when it shows its host's gateway started again.
    Seen { restarted: bool },
    /// Refused: a fresh heartbeat binds the gid to `bound`, another host.
    Claimed { bound: HostId },
}

#[derive(Debug)]
pub struct Roster {
    ttl: Duration,
    entities: BTreeMap<SessionId, Entry>,
    gateways: BTreeMap<HostId, Entry>,
    /// The latest `since` each host's gateway announced. Kept past expiry (one number per
    /// host), so a host that comes back after its entries expired is still seen restarted.
    boots: BTreeMap<HostId, u64>,
    /// The host each gid was first bound to, kept past expiry: a gid is one host's for its
    /// life (a spawn id lives on the host it was spawned on), so a later claim from another
    /// host is refused even in a gap in the owner's heartbeats. Bounded: past `OWNERS_CAP`
    /// the oldest binding is forgotten first.
    owners: BTreeMap<SessionId, (HostId, u64)>,
    owner_order: std::collections::VecDeque<(u64, SessionId)>,
    next_owner: u64,
}

/// How many gid → host bindings the roster remembers past their expiry.
const OWNERS_CAP: usize = 65_536;

impl Roster {
    pub fn new(ttl: Duration) -> Self {
        Roster {
            ttl,
            entities: BTreeMap::new(),
            gateways: BTreeMap::new(),
            boots: BTreeMap::new(),
            owners: BTreeMap::new(),
            owner_order: std::collections::VecDeque::new(),
            next_owner: 0,
        }
    }

    /// A verified PRESENCE from `host` about `gid`. A gid bound to another host by a fresh
    /// heartbeat stays bound there: the claim is refused (a gid is one host's for its life,
    /// and only its binding's expiry frees it). `Seen { restarted }` says whether it shows
    /// `host`'s gateway restarted since its last heartbeat (a later `since`; an earlier one is
    /// a stale copy and changes nothing).
    pub fn observe(
        &mut self,
        now: Instant,
        host: &HostId,
        gid: &SessionId,
        presence: Presence,
    ) -> Observed {
        if gid.as_str() != GATEWAY_GID {
            let owner = self.owners.get(gid).map(|(h, _)| h.clone());
            if let Some(bound) = owner
                .or_else(|| self.host_of(now, gid))
                .filter(|h| h != host)
            {
                return Observed::Claimed { bound };
            }
            self.own(gid, host);
        }
        let mut restarted = false;
        if let (Some(since), true) = (presence.since, gid.as_str() == GATEWAY_GID) {
            match self.boots.get(host).copied() {
                Some(known) if since <= known => {}
                known => {
                    restarted = known.is_some();
                    self.boots.insert(host.clone(), since);
                }
            }
        }
        let entry = Entry {
            host: host.clone(),
            presence,
            seen_at: now,
        };
        if gid.as_str() == GATEWAY_GID {
            self.gateways.insert(host.clone(), entry);
        } else {
            self.entities.insert(gid.clone(), entry);
        }
        Observed::Seen { restarted }
    }

    /// Records `host` as `gid`'s owner, forgetting the oldest owner past the cap.
    fn own(&mut self, gid: &SessionId, host: &HostId) {
        if self.owners.contains_key(gid) {
            return;
        }
        self.next_owner += 1;
        self.owners
            .insert(gid.clone(), (host.clone(), self.next_owner));
        self.owner_order.push_back((self.next_owner, gid.clone()));
        while self.owners.len() > OWNERS_CAP {
            let Some((n, old)) = self.owner_order.pop_front() else {
                break;
            };
            if self.owners.get(&old).is_some_and(|(_, m)| *m == n) {
                self.owners.remove(&old);
            }
        }
    }

    fn fresh(&self, now: Instant, e: &Entry) -> bool {
        e.seen_at + self.ttl > now
    }

    /// The host signed presence binds `gid` to, if its heartbeat is fresh.
    pub fn host_of(&self, now: Instant, gid: &SessionId) -> Option<HostId> {
        self.entities
            .get(gid)
            .filter(|e| self.fresh(now, e))
            .map(|e| e.host.clone())
    }

    /// The profile names a host advertised, if its gateway heartbeat is fresh.
    pub fn profiles_of(&self, now: Instant, host: &HostId) -> Option<Vec<String>> {
        self.gateways
            .get(host)
            .filter(|e| self.fresh(now, e))
            .map(|e| e.presence.profiles.clone())
    }

    /// Our own broker link is back. Every entry gets a full TTL to be heard again: the silence
    /// was ours (our roster queue died with the connection, and the heartbeats with it), so
    /// it says nothing about the others yet.
    pub fn heard_again(&mut self, now: Instant) {
        for e in self.entities.values_mut().chain(self.gateways.values_mut()) {
            e.seen_at = e.seen_at.max(now);
        }
    }

    /// Drops entries whose heartbeats stopped. Returns the gids that expired.
    pub fn expire(&mut self, now: Instant) -> Vec<SessionId> {
        let ttl = self.ttl;
        let gone: Vec<SessionId> = self
            .entities
            .iter()
            .filter(|(_, e)| e.seen_at + ttl <= now)
            .map(|(g, _)| g.clone())
            .collect();
        for g in &gone {
            self.entities.remove(g);
        }
        self.gateways.retain(|_, e| e.seen_at + ttl > now);
        gone
    }

    /// Forgets one entity at once (a local member stopped, a remote one reported gone). Its
    /// owner is kept: the gid stays that host's.
    pub fn forget(&mut self, gid: &SessionId) {
        self.entities.remove(gid);
    }

    /// The union view. With the broker down, other hosts' rows read as unknown.
    pub fn view(&self, now: Instant, own: &HostId, broker_up: bool) -> Vec<RosterRow> {
        let row = |gid: SessionId, e: &Entry| RosterRow {
            liveness: if broker_up || &e.host == own {
                Liveness::Live
            } else {
                Liveness::Unknown
            },
            gid,
            host: e.host.clone(),
            kind: e.presence.kind,
            status: e.presence.status,
            profiles: e.presence.profiles.clone(),
        };
        let mut rows: Vec<RosterRow> = self
            .gateways
            .iter()
            .filter(|(_, e)| self.fresh(now, e))
            .map(|(_, e)| row(SessionId::new(GATEWAY_GID), e))
            .collect();
        rows.extend(
            self.entities
                .iter()
                .filter(|(_, e)| self.fresh(now, e))
                .map(|(g, e)| row(g.clone(), e)),
        );
        rows
    }

    pub fn len(&self) -> usize {
        self.entities.len() + self.gateways.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member() -> Presence {
        Presence {
            kind: EntityKind::Member,
            status: Some(AgentStatus::Idle),
            profiles: vec![],
            since: None,
        }
    }

    #[test]
    fn entries_expire_on_missed_heartbeats() {
        let mut r = Roster::new(Duration::from_secs(15));
        let (a, g) = (HostId::new("a"), SessionId::new("g1"));
        r.observe(Instant::ZERO, &a, &g, member());
        assert_eq!(r.host_of(Instant::from_millis(14_999), &g), Some(a.clone()));
        assert_eq!(r.host_of(Instant::from_millis(15_000), &g), None);
        r.observe(Instant::from_millis(10_000), &a, &g, member());
        assert_eq!(
            r.expire(Instant::from_millis(20_000)),
            Vec::<SessionId>::new()
        );
        assert_eq!(r.expire(Instant::from_millis(25_000)), vec![g]);
        assert!(r.is_empty());
    }

    #[test]
    fn other_hosts_read_unknown_while_the_broker_is_down() {
        let mut r = Roster::new(Duration::from_secs(15));
        let (a, b) = (HostId::new("a"), HostId::new("b"));
        r.observe(Instant::ZERO, &a, &SessionId::new("ga"), member());
        r.observe(Instant::ZERO, &b, &SessionId::new("gb"), member());
        let down = r.view(Instant::ZERO, &a, false);
        let live: Vec<_> = down
            .iter()
            .map(|x| (x.gid.to_string(), x.liveness))
            .collect();
        assert_eq!(
            live,
            vec![
                ("ga".into(), Liveness::Live),
                ("gb".into(), Liveness::Unknown)
            ]
        );
    }

    #[test]
    fn a_later_start_time_reads_as_a_restart_and_a_stale_copy_does_not() {
        let mut r = Roster::new(Duration::from_secs(15));
        let (b, gw) = (HostId::new("b"), SessionId::new(GATEWAY_GID));
        let boot = |since| Presence {
            kind: EntityKind::Gateway,
            status: None,
            profiles: vec![],
            since: Some(since),
        };
        assert_eq!(
            r.observe(Instant::ZERO, &b, &gw, boot(100)),
            Observed::Seen { restarted: false },
            "first sight"
        );
        assert_eq!(
            r.observe(Instant::ZERO, &b, &gw, boot(100)),
            Observed::Seen { restarted: false },
            "same process"
        );
        assert_eq!(
            r.observe(Instant::ZERO, &b, &gw, boot(200)),
            Observed::Seen { restarted: true },
            "restarted"
        );
        assert_eq!(
            r.observe(Instant::ZERO, &b, &gw, boot(100)),
            Observed::Seen { restarted: false },
            "a stale copy"
        );
        assert_eq!(
            r.observe(Instant::ZERO, &b, &gw, boot(200)),
            Observed::Seen { restarted: false }
        );
        // Past expiry, a host that comes back restarted is still seen so.
        r.expire(Instant::from_millis(60_000));
        assert_eq!(
            r.observe(Instant::from_millis(60_000), &b, &gw, boot(300)),
            Observed::Seen { restarted: true }
        );
        // Member presences never carry it.
        assert_eq!(
            r.observe(Instant::ZERO, &b, &SessionId::new("m"), member()),
            Observed::Seen { restarted: false }
        );
    }

    /// A gid bound to one host cannot be claimed by another — not while its heartbeats are
    /// fresh, and not in a gap in them either (a gid is one host's for its life).
    #[test]
    fn a_live_binding_is_never_taken_over() {
        let mut r = Roster::new(Duration::from_millis(20_000));
        let (a, b, g) = (HostId::new("a"), HostId::new("b"), SessionId::new("g"));
        let member = || Presence {
            kind: EntityKind::Member,
            status: None,
            profiles: vec![],
            since: None,
        };
        r.observe(Instant::ZERO, &a, &g, member());
        assert_eq!(
            r.observe(Instant::from_millis(5_000), &b, &g, member()),
            Observed::Claimed { bound: a.clone() }
        );
        assert_eq!(r.host_of(Instant::from_millis(5_000), &g), Some(a.clone()));
        // Its heartbeats stop: the gid leaves the view, but it stays a's.
        assert_eq!(r.host_of(Instant::from_millis(30_000), &g), None);
        assert_eq!(
            r.observe(Instant::from_millis(30_000), &b, &g, member()),
            Observed::Claimed { bound: a.clone() }
        );
        assert_eq!(
            r.observe(Instant::from_millis(31_000), &a, &g, member()),
            Observed::Seen { restarted: false }
        );
        assert_eq!(r.host_of(Instant::from_millis(31_000), &g), Some(a));
    }

    #[test]
    fn a_gateway_entry_carries_its_profiles() {
        let mut r = Roster::new(Duration::from_secs(15));
        let b = HostId::new("b");
        let p = Presence {
            kind: EntityKind::Gateway,
            status: None,
            profiles: vec!["claude".into(), "opencode".into()],
            since: None,
        };
        r.observe(Instant::ZERO, &b, &SessionId::new(GATEWAY_GID), p.clone());
        assert_eq!(r.profiles_of(Instant::ZERO, &b), Some(p.profiles.clone()));
        assert_eq!(Presence::from_body(&p.to_body()), Ok(p));
        assert!(Presence::from_body(b"{not json").is_err());
    }
}
