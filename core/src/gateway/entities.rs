//! Who this gateway serves — its members and leads — and the routing fork that follows from
//! it: a gid served here is local (never touches the broker), any other is remote. Also the
//! roster view `fleet_list` answers with, on one host or across the fleet.

use super::federation::{topology, Served};
use super::Gateway;
use crate::broker::BrokerOp;
use crate::ids::SessionId;
use crate::io::Output;
use crate::roster::{EntityKind, Liveness, RosterRow, GATEWAY_GID};

/// Whether a newly served entity is announced in the roster now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Announce {
    /// Now: a lead, or a member past its readiness gate.
    Now,
    /// Once it passes its readiness gate (a member just started).
    Later,
}

impl Gateway {
    /// The union roster as this gateway sees it (`fleet_list`).
    pub fn roster(&self) -> Vec<RosterRow> {
        match &self.fed {
            Some(f) => f.roster.view(self.now, f.host(), f.broker_up),
            // One host: its own gateway and what it serves, all live.
            None => {
                let row = |gid: SessionId, kind, status| RosterRow {
                    gid,
                    host: self.host.clone(),
                    kind,
                    status,
                    profiles: Vec::new(),
                    liveness: Liveness::Live,
                };
                let mut rows = vec![RosterRow {
                    profiles: self.cfg.profiles.clone(),
                    ..row(SessionId::new(GATEWAY_GID), EntityKind::Gateway, None)
                }];
                rows.extend(
                    self.solo
                        .iter()
                        .map(|(g, k)| row(g.clone(), *k, self.injector.view(g).status)),
                );
                rows
            }
        }
    }

    /// Remote: a federated gateway that does not serve `gid` itself. Same-host traffic never
    /// produces a broker output.
    pub(super) fn is_remote(&self, gid: &SessionId) -> bool {
        self.fed
            .as_ref()
            .is_some_and(|f| !f.local.contains_key(gid))
    }

    /// `gid` is served here now; its inbox is declared if the broker is up.
    pub(super) fn local_entity(&mut self, gid: &SessionId, kind: EntityKind, when: Announce) {
        let Some(f) = &mut self.fed else {
            self.solo.insert(gid.clone(), kind);
            return;
        };
        let fresh = !f.local.contains_key(gid);
        let e = f.local.entry(gid.clone()).or_insert(Served {
            kind,
            announced: false,
            status: None,
        });
        e.announced |= when == Announce::Now;
        if fresh && f.broker_up {
            let t = topology::slice(
                &self.cfg,
                f,
                &[(gid.clone(), kind)],
                topology::Part::Inboxes,
            );
            self.out.push_back(Output::Broker(BrokerOp::Declare(t)));
        }
        if when == Announce::Now {
            self.announce(gid);
        }
    }

    /// A member's pane is gone: its inbox is deleted with it (no broadcasts to the dead).
    pub(super) fn local_entity_gone(&mut self, gid: &SessionId) {
        let Some(f) = &mut self.fed else {
            if self.solo.get(gid) == Some(&EntityKind::Member) {
                self.solo.remove(gid);
            }
            return;
        };
        // A lead's inbox is durable across its pane's restarts (x-expires collects it);
        // only a member's inbox goes with its pane.
        if f.local
            .get(gid)
            .is_some_and(|s| s.kind != EntityKind::Member)
        {
            return;
        }
        f.unsent.remove(gid);
        if let Some(served) = f.local.remove(gid) {
            f.roster.forget(gid);
            if served.announced {
                self.announce_left(gid);
            }
            let Some(f) = &mut self.fed else { return };
            f.groups.remove(gid);
            // Results held for a member that is gone have no one left to collect them.
            for name in [f.names.inbox(gid), f.names.held(gid)] {
                self.out
                    .push_back(Output::Broker(BrokerOp::DeleteQueue { name }));
            }
        }
    }
}
