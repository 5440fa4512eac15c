//! The presence wire format: what a host signs and publishes about itself (snapshots, deltas,
//! 1.0 heartbeats), read strictly — a line that breaks a rule refuses the whole announcement.

use crate::health::Health;
use crate::ids::SessionId;
use crate::spawn_spec::MemberRole;
use crate::status::AgentStatus;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::collections::{BTreeMap, BTreeSet};

/// The gid a gateway speaks as when it speaks for itself (its host entry, its DLQ reports).
pub const GATEWAY_GID: &str = "_gateway";

/// The longest profile name a card may carry: a peer's card is stored in every roster.
pub const MAX_PROFILE_LEN: usize = 128;

/// How many entities one snapshot may list (a longer one is refused whole), and how many
/// entries and remembered gid bindings one host may hold in a roster: a host with a key must
/// not grow every roster without bound, nor push out another host's bindings.
pub const MAX_LISTED: usize = 16_384;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntityKind {
    Member,
    Lead,
    Gateway,
}

impl EntityKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EntityKind::Member => "member",
            EntityKind::Lead => "lead",
            EntityKind::Gateway => "gateway",
        }
    }
}

/// The body of a PRESENCE message. 1.0 readers ignore the fields they do not know, so they
/// still read a 1.1 snapshot as their host entry and a delta as a heartbeat.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Presence {
    pub kind: EntityKind,
    #[serde(default)]
    pub status: Option<AgentStatus>,
    /// For `_gateway` entries: the profile names this host can spawn.
    #[serde(default)]
    pub profiles: Vec<String>,
    /// When this gateway process started (Unix ms). A larger value than last seen means the
    /// host restarted and lost its soft state — the turn records of the briefs it had typed
    /// among them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// 1.1: this gateway process's presence sequence number; with `since`, the order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// 1.1, on `_gateway`: every entity the host serves. Replaces what was known of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entities: Option<Vec<Listed>>,
    /// 1.1, on `_gateway`: the entities whose state changed since the host's last presence,
    /// several at once — each applies as its own delta would.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Vec<Listed>>,
    /// 1.1, on an entity's key: it left.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gone: bool,
    /// 1.1, on an entity's key: a turn is running in it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub busy: bool,
    /// 1.1, on an entity's key: who it is.
    #[serde(default, skip_serializing_if = "Card::is_empty")]
    pub card: Card,
    /// Its health as its gateway last classified it (none before the first probe, or from
    /// a peer that does not say; one this build does not know reads as none).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "Health::lenient"
    )]
    pub health: Option<Health>,
    /// 1.2, on a `_gateway` snapshot: the host's counts, for operators (never acted on).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "HostOps::lenient"
    )]
    pub ops: Option<HostOps>,
}

/// A host's counts as its snapshot says them: what an operator watches, nothing any gateway
/// acts on (a host may say anything here; it can only mislead a dashboard about itself).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostOps {
    /// Delegations it holds a half of.
    #[serde(default)]
    pub delegations: u64,
    /// Replies it holds for leads to collect.
    #[serde(default)]
    pub held: u64,
    /// Deliveries it rejected to the dead-letter exchange since it started.
    #[serde(default)]
    pub dead_letters: u64,
    /// Messages of its queues the broker dead-lettered itself since it started.
    #[serde(default)]
    pub broker_drops: u64,
    /// Needs waiting on each lead there (`needs`): what another host's "needs you" view
    /// counts for its own lead.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub waiting: BTreeMap<SessionId, u64>,
}

/// The most leads a host's `waiting` counts are kept for: a lying host cannot make this
/// gateway keep more.
pub const MAX_WAITING_LEADS: usize = 1_024;

impl HostOps {
    /// Counts that do not read (a newer or odd peer) are none, never the whole presence lost.
    fn lenient<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<HostOps>, D::Error> {
        let raw = Option::<serde_json::Value>::deserialize(d)?;
        let mut ops: Option<HostOps> = raw.and_then(|v| serde_json::from_value(v).ok());
        if let Some(o) = ops.as_mut().filter(|o| o.waiting.len() > MAX_WAITING_LEADS) {
            o.waiting = std::mem::take(&mut o.waiting)
                .into_iter()
                .take(MAX_WAITING_LEADS)
                .collect();
        }
        Ok(ops)
    }
}

/// Who an entity is, beyond its state: fixed for its life. A member rebuilt after its
/// gateway restarted has lost its profile, role and owner (its pane label keeps only its gid).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Card {
    /// The profile it was spawned from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// A role this build does not know reads as none, so a later one costs an older peer
    /// only that field.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_role"
    )]
    pub role: Option<MemberRole>,
    /// The broadcast group it joined at spawn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The lead that spawned it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<SessionId>,
    /// When it joined (Unix ms, on its gateway's clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// The work item it was spawned for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<String>,
    /// The directory it was started in, when its spawn named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The SHA-256 (hex) of the exact charter it was launched with — for audit, never the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charter: Option<String>,
}

fn lenient_role<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<MemberRole>, D::Error> {
    let raw = Option::<serde_json::Value>::deserialize(d)?;
    Ok(raw.and_then(|v| serde_json::from_value(v).ok()))
}

impl Card {
    pub fn is_empty(&self) -> bool {
        *self == Card::default()
    }

    /// The card with every field a roster may not keep dropped: a profile or owner that is
    /// empty or longer than `MAX_PROFILE_LEN`, a group that is not one word. A peer's card is
    /// read through it, and this host's own is made through it, so both say the same and one
    /// odd field never costs a host its whole snapshot.
    pub fn checked(self) -> Card {
        // No control characters: a card is shown in dashboards, tables and terminals.
        let fits = |s: &str| {
            !s.is_empty() && s.len() <= MAX_PROFILE_LEN && !s.chars().any(char::is_control)
        };
        let sha256 = |c: &str| c.len() == 64 && c.bytes().all(|b| b.is_ascii_hexdigit());
        Card {
            profile: self.profile.filter(|p| fits(p)),
            owner: self.owner.filter(|o| fits(o.as_str())),
            group: self
                .group
                .filter(|g| crate::spawn_spec::invalid_group(g).is_none()),
            ticket: self
                .ticket
                .filter(|t| crate::spawn_spec::invalid_ticket(t).is_none()),
            cwd: self
                .cwd
                .filter(|c| crate::spawn_spec::invalid_cwd(c).is_none()),
            charter: self.charter.filter(|c| sha256(c)),
            ..self
        }
    }
}

/// One entity as presence describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entity {
    pub kind: EntityKind,
    #[serde(default)]
    pub status: Option<AgentStatus>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub busy: bool,
    #[serde(default, skip_serializing_if = "Card::is_empty")]
    pub card: Card,
    /// Its health as its gateway last classified it (none before the first probe, or from
    /// a peer that does not say; one this build does not know reads as none).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "Health::lenient"
    )]
    pub health: Option<Health>,
}

impl Entity {
    pub fn new(kind: EntityKind, status: Option<AgentStatus>) -> Entity {
        Entity {
            kind,
            status,
            busy: false,
            card: Card::default(),
            health: None,
        }
    }
}

/// One line of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listed {
    pub gid: SessionId,
    pub kind: EntityKind,
    #[serde(default)]
    pub status: Option<AgentStatus>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub busy: bool,
    #[serde(default, skip_serializing_if = "Card::is_empty")]
    pub card: Card,
    /// Its health as its gateway last classified it (none before the first probe, or from
    /// a peer that does not say; one this build does not know reads as none).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "Health::lenient"
    )]
    pub health: Option<Health>,
}

impl Listed {
    pub fn new(gid: SessionId, e: Entity) -> Listed {
        Listed {
            gid,
            kind: e.kind,
            status: e.status,
            busy: e.busy,
            card: e.card,
            health: e.health,
        }
    }
}

/// Where one host's presence stands: its gateway process, then that process's sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Order {
    pub since: u64,
    pub seq: u64,
}

/// A PRESENCE body, read for what it says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Announcement {
    /// The host's whole set, as of `at`.
    Snapshot {
        at: Order,
        profiles: Vec<String>,
        entities: Vec<(SessionId, Entity)>,
        ops: Option<HostOps>,
    },
    /// A 1.0 host entry: the host and its profiles, no list.
    Host {
        since: Option<u64>,
        profiles: Vec<String>,
    },
    /// Several entities changed, as of `at` (each as its own delta would).
    Batch {
        at: Order,
        changes: Vec<(SessionId, Entity)>,
    },
    /// One entity joined or changed (`Some`) or left (`None`), as of `at`.
    Delta {
        at: Order,
        gid: SessionId,
        change: Option<Entity>,
    },
    /// A 1.0 per-entity heartbeat: unordered, current.
    Heartbeat { gid: SessionId, entity: Entity },
}

impl Presence {
    /// A snapshot of this host (`_gateway`).
    pub fn snapshot(at: Order, profiles: Vec<String>, entities: Vec<Listed>) -> Presence {
        Presence {
            kind: EntityKind::Gateway,
            status: None,
            profiles,
            since: Some(at.since),
            seq: Some(at.seq),
            entities: Some(entities),
            changes: None,
            gone: false,
            busy: false,
            card: Card::default(),
            health: None,
            ops: None,
        }
    }

    /// The snapshot with the host's counts.
    pub fn with_ops(mut self, ops: HostOps) -> Presence {
        self.ops = Some(ops);
        self
    }

    /// Several entities' changes at once (`_gateway`): one signature for a burst.
    pub fn batch(at: Order, changes: Vec<Listed>) -> Presence {
        Presence {
            entities: None,
            changes: Some(changes),
            ..Presence::snapshot(at, Vec::new(), Vec::new())
        }
    }

    /// A delta for one entity: its state now, or `None` when it left.
    pub fn delta(at: Order, change: Option<Entity>) -> Presence {
        let gone = change.is_none();
        let e = change.unwrap_or(Entity::new(EntityKind::Member, None));
        Presence {
            kind: e.kind,
            status: e.status,
            profiles: Vec::new(),
            since: Some(at.since),
            seq: Some(at.seq),
            entities: None,
            changes: None,
            gone,
            busy: e.busy,
            card: e.card,
            health: e.health,
            ops: None,
        }
    }

    /// A wire 1.0 body: an entity's heartbeat, or with `since` a host entry.
    pub fn v1_0(kind: EntityKind, status: Option<AgentStatus>, since: Option<u64>) -> Presence {
        Presence {
            kind,
            status,
            profiles: Vec::new(),
            since,
            seq: None,
            entities: None,
            changes: None,
            gone: false,
            busy: false,
            card: Card::default(),
            health: None,
            ops: None,
        }
    }

    pub fn to_body(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn from_body(body: &[u8]) -> Result<Presence, String> {
        serde_json::from_slice(body).map_err(|e| e.to_string())
    }
}

impl Announcement {
    /// Reads the body of a PRESENCE sent as `from` (the gid its routing key names).
    pub fn parse(from: &SessionId, body: &[u8]) -> Result<Announcement, String> {
        let p = Presence::from_body(body)?;
        let order = match (p.since, p.seq) {
            (Some(since), Some(seq)) => Some(Order { since, seq }),
            _ => None,
        };
        if from.as_str() == GATEWAY_GID {
            if p.kind != EntityKind::Gateway {
                return Err(format!("a _gateway entry of kind {:?}", p.kind));
            }
            return match (order, p.entities, p.changes) {
                (Some(at), Some(listed), _) => Ok(Announcement::Snapshot {
                    at,
                    profiles: p.profiles,
                    entities: read_listed("snapshot", listed)?,
                    ops: p.ops,
                }),
                (Some(at), None, Some(listed)) => Ok(Announcement::Batch {
                    at,
                    changes: read_listed("batch", listed)?,
                }),
                _ => Ok(Announcement::Host {
                    since: p.since,
                    profiles: p.profiles,
                }),
            };
        }
        if p.kind == EntityKind::Gateway {
            return Err(format!("{from} announced as a gateway"));
        }
        if p.entities.is_some() || p.changes.is_some() {
            return Err(format!("{from}'s presence carries a snapshot"));
        }
        let entity = Entity {
            kind: p.kind,
            status: p.status,
            busy: p.busy,
            card: p.card.checked(),
            health: p.health,
        };
        Ok(match order {
            Some(at) => Announcement::Delta {
                at,
                gid: from.clone(),
                change: (!p.gone).then_some(entity),
            },
            None => Announcement::Heartbeat {
                gid: from.clone(),
                entity,
            },
        })
    }

    /// The gateway start time it announces, if any.
    pub(super) fn since(&self) -> Option<u64> {
        match self {
            Announcement::Snapshot { at, .. }
            | Announcement::Batch { at, .. }
            | Announcement::Delta { at, .. } => Some(at.since),
            Announcement::Host { since, .. } => *since,
            Announcement::Heartbeat { .. } => None,
        }
    }
}

/// A snapshot as it came, its profiles and list not yet read. A host serializes the same set
/// the same way, so the next snapshot that says the same is recognised by its bytes and only
/// refreshes what the roster holds (`Roster::refresh_unchanged`): with every host snapshotting
/// every round, reading each list again was most of what a fleet's presence cost a receiver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing<'a> {
    pub at: Order,
    pub(super) profiles: &'a str,
    pub(super) entities: &'a str,
    /// The host's counts: not part of what makes two snapshots the same, taken from each.
    pub(super) ops: Option<HostOps>,
}

impl<'a> Listing<'a> {
    /// The listing of a snapshot body; `None` for any other presence, or a body that does not
    /// read (`Announcement::parse` says why).
    pub fn peek(body: &'a [u8]) -> Option<Listing<'a>> {
        #[derive(Deserialize)]
        struct Head<'a> {
            kind: EntityKind,
            since: Option<u64>,
            seq: Option<u64>,
            #[serde(borrow, default)]
            profiles: Option<&'a RawValue>,
            #[serde(borrow, default)]
            entities: Option<&'a RawValue>,
            #[serde(borrow, default)]
            changes: Option<&'a RawValue>,
            #[serde(borrow, default)]
            ops: Option<&'a RawValue>,
        }
        let h: Head<'a> = serde_json::from_slice(body).ok()?;
        match (h.kind, h.since, h.seq, h.entities, h.changes) {
            (EntityKind::Gateway, Some(since), Some(seq), Some(entities), None) => Some(Listing {
                at: Order { since, seq },
                profiles: h.profiles.map_or("", RawValue::get),
                entities: entities.get(),
                ops: h.ops.and_then(|o| serde_json::from_str(o.get()).ok()),
            }),
            _ => None,
        }
    }
}

/// A snapshot's or batch's lines, checked: no gateway, no gid twice, at most `MAX_LISTED`.
fn read_listed(what: &str, listed: Vec<Listed>) -> Result<Vec<(SessionId, Entity)>, String> {
    if listed.len() > MAX_LISTED {
        return Err(format!(
            "a {what} of {} entities, more than {MAX_LISTED}",
            listed.len()
        ));
    }
    let mut entities = Vec::with_capacity(listed.len());
    let mut gids = BTreeSet::new();
    for l in listed {
        if l.kind == EntityKind::Gateway || l.gid.as_str() == GATEWAY_GID {
            return Err(format!("a {what} lists {} as a gateway", l.gid));
        }
        if !gids.insert(l.gid.clone()) {
            return Err(format!("a {what} lists {} twice", l.gid));
        }
        let entity = Entity {
            kind: l.kind,
            status: l.status,
            busy: l.busy,
            card: l.card.checked(),
            health: l.health,
        };
        entities.push((l.gid, entity));
    }
    Ok(entities)
}
