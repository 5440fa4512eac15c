//! Who this gateway serves — its members and leads — and the routing fork that follows from
//! it: a gid served here is local (never touches the broker), any other is remote. Also the
//! roster view `fleet_list` and `fleet_status` answer with, on one host or across the fleet:
//! this host's rows from what it serves (current at once), every other host's from presence.

use super::federation::{topology, Served};
use super::Gateway;
use crate::broker::BrokerOp;
use crate::gateway::Link;
use crate::ids::{HostId, SessionId};
use crate::io::{RosterEntry, StatusView};
use crate::roster::{Entity, EntityKind, Liveness, RosterRow};
use crate::session::SessionState;
use crate::status::AgentStatus;
use std::cmp::Ordering;

/// Whether a newly served entity is announced in the roster now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Announce {
    /// Now: a lead, or a member past its readiness gate.
    Now,
    /// Once it passes its readiness gate (a member just started).
    Later,
}

/// Another host's member while this gateway's broker link is down: whatever its presence
/// said last, nobody here can tell now.
fn link_down_health(mut r: RosterRow) -> RosterRow {
    if r.kind == EntityKind::Member && r.liveness == Liveness::Unknown {
        r.health = Some(crate::health::Health::ControlLinkDown);
    }
    r
}

/// Gateways first, by host; then entities, by gid.
fn row_order(a: &RosterRow, b: &RosterRow) -> Ordering {
    let entity = |r: &RosterRow| r.kind != EntityKind::Gateway;
    entity(a)
        .cmp(&entity(b))
        .then_with(|| match a.kind {
            EntityKind::Gateway => a.host.cmp(&b.host),
            _ => Ordering::Equal,
        })
        .then_with(|| a.gid.cmp(&b.gid))
}

impl Gateway {
    /// The union roster as this gateway sees it (`fleet_list`, `GET /members`).
    pub fn roster(&self) -> Vec<RosterRow> {
        let own = self.own_host();
        let mut rows = vec![RosterRow::gateway(
            own.clone(),
            self.cfg.profiles.clone(),
            Liveness::Live,
        )];
        rows.extend(self.served().map(|(gid, s)| self.local_row(&own, gid, s)));
        if let Link::Fleet(f) = &self.link {
            let theirs = f.roster.view(self.now, &own, f.broker_up);
            rows.extend(
                theirs
                    .into_iter()
                    .filter(|r| r.host != own)
                    .map(link_down_health),
            );
        }
        rows.sort_by(row_order);
        rows
    }

    /// `fleet_status`: the session's row wherever it runs, and what this gateway holds for
    /// it; `None` for a gid no host serves now (never a default "ready").
    pub(super) fn status_view(&self, gid: &SessionId) -> Option<StatusView> {
        let own = self.own_host();
        if let Some(s) = self.served_here(gid) {
            let v = self.injector.view(gid);
            return Some(StatusView {
                row: RosterEntry::from(self.local_row(&own, gid, s)),
                queued: Some(v.queued),
                in_turn: v.in_turn,
            });
        }
        if self.injector.is_active(gid) || self.injector.gate_state(gid).is_some() {
            // A pane this gateway types into without serving it as a member or lead.
            let v = self.injector.view(gid);
            let e = Entity {
                busy: v.in_turn,
                ..Entity::new(EntityKind::Member, v.status)
            };
            return Some(StatusView {
                row: RosterEntry::from(RosterRow {
                    ready: v.ready,
                    ..RosterRow::entity(gid.clone(), own, &e, Liveness::Live)
                }),
                queued: Some(v.queued),
                in_turn: v.in_turn,
            });
        }
        let f = self.link.fleet()?;
        // What this host no longer serves is gone, whatever a late copy of its presence says.
        let row = f
            .roster
            .row(self.now, gid, f.broker_up)
            .filter(|r| r.host != own)
            .map(link_down_health)?;
        Some(StatusView {
            in_turn: row.busy,
            row: RosterEntry::from(row),
            queued: None,
        })
    }

    /// What this host serves, in either mode.
    pub(super) fn served(&self) -> impl Iterator<Item = (&SessionId, &Served)> {
        self.served.iter()
    }

    pub(super) fn served_here(&self, gid: &SessionId) -> Option<&Served> {
        self.served.get(gid)
    }

    pub(super) fn served_here_mut(&mut self, gid: &SessionId) -> Option<&mut Served> {
        self.served.get_mut(gid)
    }

    /// What this host says of an entity it serves: its row here, and its presence.
    pub(super) fn describe(&self, gid: &SessionId, s: &Served) -> Entity {
        Entity {
            kind: s.kind,
            status: s.status.or(self.injector.view(gid).status),
            busy: self.sessions.state(gid) == Some(SessionState::Busy),
            card: self.cards.get(gid).cloned().unwrap_or_default(),
            health: self.health.verdict(gid).map(|v| v.state),
        }
    }

    fn local_row(&self, own: &HostId, gid: &SessionId, s: &Served) -> RosterRow {
        let e = self.describe(gid, s);
        RosterRow {
            // A member not yet past its gate (spawning, or rebuilt and not reconnected).
            ready: s.kind != EntityKind::Member || (s.announced && self.injector.is_ready(gid)),
            status: Some(e.status.unwrap_or(AgentStatus::Unknown)),
            health_reason: self.health.verdict(gid).map(|v| v.reason().to_string()),
            ..RosterRow::entity(gid.clone(), own.clone(), &e, Liveness::Live)
        }
    }

    /// What is known of a member that went from here lately (its tombstone).
    pub(super) fn departed(&self, gid: &SessionId) -> Option<crate::health::Tombstone> {
        self.health.tombstone(gid).cloned()
    }

    /// Remote: a federated gateway that does not serve `gid` itself. Same-host traffic never
    /// produces a broker output.
    pub(super) fn is_remote(&self, gid: &SessionId) -> bool {
        matches!(self.link, Link::Fleet(_)) && !self.served.contains_key(gid)
    }

    /// `gid` is served here now; its inbox is declared if the broker is up.
    pub(super) fn local_entity(&mut self, gid: &SessionId, kind: EntityKind, when: Announce) {
        if kind == EntityKind::Member && self.served_here(gid).is_none() {
            self.health.started(self.now, gid);
        }
        if when == Announce::Now {
            // It joins the roster now (a member rebuilt after a restart: again, from now).
            let since = self.wall_now();
            let card = self.cards.entry(gid.clone()).or_default();
            card.since = card.since.or(since);
        }
        let fresh = !self.served.contains_key(gid);
        let e = self.served.entry(gid.clone()).or_insert(Served {
            kind,
            announced: false,
            status: None,
        });
        e.announced |= when == Announce::Now;
        let Link::Fleet(f) = &mut self.link else {
            return;
        };
        if fresh {
            // A peer's snapshot listing this gid must now be read in full (and the claim
            // refused), not refreshed from its bytes.
            f.roster.drop_listings();
        }
        if fresh && f.broker_up {
            let t = topology::slice(
                &self.cfg,
                f,
                &self.cards,
                &[(gid.clone(), kind)],
                topology::Part::Inboxes,
            );
            self.broker(BrokerOp::Declare(t));
        }
        if when == Announce::Now {
            self.announce(gid);
        }
    }

    /// A member's pane is gone: its inbox is deleted with it (no broadcasts to the dead).
    pub(super) fn local_entity_gone(&mut self, gid: &SessionId) {
        // A lead's inbox is durable across its pane's restarts (x-expires collects it);
        // only a member's inbox goes with its pane.
        let kind = self.served.get(gid).map(|s| s.kind);
        if kind.is_some_and(|k| k != EntityKind::Member) {
            return;
        }
        let Link::Fleet(f) = &mut self.link else {
            if kind.is_some() {
                self.served.remove(gid);
                self.cards.remove(gid);
            }
            return;
        };
        f.forget_unsent(gid);
        if let Some(served) = self.served.remove(gid) {
            self.cards.remove(gid);
            f.roster.forget(gid);
            if served.announced {
                self.announce_left(gid);
            }
            let Link::Fleet(f) = &mut self.link else {
                return;
            };
            // Results held for a member that is gone have no one left to collect them.
            for name in [f.names.inbox(gid), f.names.held(gid)] {
                self.broker(BrokerOp::DeleteQueue { name });
            }
        }
    }
}
