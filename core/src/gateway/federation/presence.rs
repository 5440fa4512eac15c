//! Presence: this host's snapshot each round and a delta on every join, leave and status
//! change; the peers' presence that binds their gids to their hosts; roster expiry and its
//! consequences; and the periodic sweep of held deliveries past their expiry.

use super::Draft;
use crate::broker::{DeliveryId, Exchange};
use crate::envelope::Envelope;
use crate::envelope::{Address, Payload};
use crate::gateway::Gateway;
use crate::gateway::Link;
use crate::ids::{HostId, SessionId};
use crate::io::{Event, RejectCode};
use crate::planted::PlantedBug;
use crate::roster::{
    Announcement, Card, Entity, EntityKind, Listed, Listing, Order, Presence, GATEWAY_GID,
};
use crate::status::AgentStatus;
use crate::time::{Duration, Instant};

impl Gateway {
    /// A peer's signed presence — its host snapshot or one entity's delta (or a wire 1.0
    /// heartbeat): it binds gids to the signing host, may reveal that host's restart, answers
    /// spawns waiting on the gids it binds, and frees deliveries parked until they came.
    pub(super) fn on_presence(
        &mut self,
        now: Instant,
        delivery: DeliveryId,
        queue: &str,
        env: Envelope,
    ) {
        // A snapshot that says what the host's last one said only refreshes (most rounds of
        // a quiet fleet): its list is not read again.
        let mut listing = (env.from.as_str() == GATEWAY_GID)
            .then(|| Listing::peek(&env.body))
            .flatten();
        if let (Some(l), Link::Fleet(f)) = (&listing, &mut self.link) {
            if f.roster.refresh_unchanged(now, &env.signer, l) {
                self.ack(delivery);
                return;
            }
        }
        let mut ann = match Announcement::parse(&env.from, &env.body) {
            Ok(a) => a,
            Err(e) => {
                return self.reject(
                    delivery,
                    queue,
                    RejectCode::Malformed,
                    format!("presence body: {e}"),
                )
            }
        };
        self.ack(delivery);
        let Link::Fleet(f) = &mut self.link else {
            return;
        };
        if env.signer != f.cfg.host {
            // Another host claims gids served here: ours stand, and the rest of what it says
            // is still heard.
            if let Some(whole) = self.refuse_claims(&env.signer, queue, &mut ann) {
                // What is applied is not what it said: its bytes may not stand for it.
                listing = None;
                if whole {
                    return;
                }
            }
        }
        let since = match &ann {
            Announcement::Snapshot { at, .. }
            | Announcement::Batch { at, .. }
            | Announcement::Delta { at, .. } => at.since,
            Announcement::Host { since, .. } => since.unwrap_or(0),
            Announcement::Heartbeat { .. } => 0,
        };
        let Link::Fleet(f) = &mut self.link else {
            return;
        };
        let seen = f.roster.observe(now, &env.signer, ann);
        if let Some(l) = &listing {
            f.roster.keep_listing(&env.signer, l);
        }
        for (gid, bound) in &seen.claimed {
            // A live binding is never taken over: the claimant is believed about nothing it
            // said of that gid.
            let why = format!("{} claims {gid}, which {bound} serves", env.signer);
            self.event(Event::Rejected {
                queue: queue.to_string(),
                code: RejectCode::GidClaimed,
                detail: why,
            });
        }
        if seen.restarted {
            self.peer_restarted(now, &env.signer, since);
        }
        for gid in seen.left {
            // A restarted host's first word leaves out the members it has not adopted yet:
            // that is not the leave a STOP waits for (its pane may well be adopted again).
            if !seen.restarted {
                self.stop_seen_left(&gid, &env.signer);
            }
            self.event(Event::RosterLeft { gid });
        }
        for gid in &seen.bound {
            self.spawn_seen(gid, &env.signer);
            self.unpark(now, gid);
        }
    }

    /// Takes out of `ann` every gid served here that another host claims, and says each
    /// claim refused. `None`: it claimed nothing of ours; `Some(true)`: all it said was a
    /// claim (one entity's delta or heartbeat), and nothing of it is heard.
    fn refuse_claims(
        &mut self,
        signer: &HostId,
        queue: &str,
        ann: &mut Announcement,
    ) -> Option<bool> {
        let mut claims = Vec::new();
        match ann {
            Announcement::Snapshot { entities, .. }
            | Announcement::Batch {
                changes: entities, ..
            } => entities.retain(|(g, _)| {
                let ours = self.served.contains_key(g);
                if ours {
                    claims.push(g.clone());
                }
                !ours
            }),
            Announcement::Delta { gid, .. } | Announcement::Heartbeat { gid, .. } => {
                if self.served.contains_key(gid) {
                    claims.push(gid.clone());
                }
            }
            Announcement::Host { .. } => {}
        }
        if claims.is_empty() {
            return None;
        }
        let whole = !matches!(
            ann,
            Announcement::Snapshot { .. } | Announcement::Batch { .. }
        );
        for gid in claims {
            let why = format!("{signer} claims {gid}, which this host serves");
            self.event(Event::Rejected {
                queue: queue.to_string(),
                code: RejectCode::GidClaimed,
                detail: why,
            });
        }
        Some(whole)
    }

    /// The next order this process's presence goes out with.
    fn next_order(&mut self) -> Option<Order> {
        let f = self.link.fleet_mut()?;
        f.presence_seq += 1;
        Some(Order {
            since: f.started_unix,
            seq: f.presence_seq,
        })
    }

    /// One entity's delta: `gid` joined (or is told again), if it is served here and
    /// announced. Sent at once, so a spawned member is seen fleet-wide within a broker round
    /// trip.
    pub(in crate::gateway) fn announce(&mut self, gid: &SessionId) {
        let Link::Fleet(f) = &mut self.link else {
            return;
        };
        f.changed.remove(gid);
        let Some(served) = self.served.get(gid).filter(|s| s.announced) else {
            return;
        };
        let entity = self.describe(gid, served);
        self.publish_delta(gid, Some(entity));
    }

    /// One entity's leave: its pane is gone.
    pub(in crate::gateway) fn announce_left(&mut self, gid: &SessionId) {
        if let Link::Fleet(f) = &mut self.link {
            f.changed.remove(gid);
        }
        self.publish_delta(gid, None);
    }

    /// `gid`'s status or busy flag changed: it goes out within `presence_batch_ms`, with
    /// every other change by then, in one message.
    fn announce_change(&mut self, gid: &SessionId) {
        let Link::Fleet(f) = &mut self.link else {
            return;
        };
        if !self.served.get(gid).is_some_and(|s| s.announced) {
            return;
        }
        let at = self.now + Duration::from_millis(self.cfg.presence_batch_ms);
        f.changed(&mut self.fx, gid, at);
    }

    /// The changes gathered: one as its own delta (the spec's key), several as one batch on
    /// the host's key. With the broker down they are dropped: the snapshot after it comes
    /// back says the same.
    pub(in crate::gateway) fn on_presence_flush(&mut self) {
        let Link::Fleet(f) = &mut self.link else {
            return;
        };
        let changed = std::mem::take(&mut f.changed);
        let lines: Vec<Listed> = changed
            .iter()
            .filter_map(|gid| {
                let s = self.served.get(gid).filter(|s| s.announced)?;
                Some(Listed::new(gid.clone(), self.describe(gid, s)))
            })
            .collect();
        match lines.len() {
            0 => {}
            1 => {
                let l = lines.into_iter().next();
                if let Some(l) = l {
                    let e = Entity {
                        kind: l.kind,
                        status: l.status,
                        busy: l.busy,
                        card: l.card,
                        health: l.health,
                    };
                    self.publish_delta(&l.gid, Some(e));
                }
            }
            _ => self.publish_batch(lines),
        }
    }

    fn publish_batch(&mut self, lines: Vec<Listed>) {
        if !self.broker_is_up() {
            return;
        }
        let Some(at) = self.next_order() else { return };
        let Link::Fleet(f) = &self.link else { return };
        let gw = SessionId::new(GATEWAY_GID);
        let to = Address::Presence {
            host: f.host().clone(),
            gid: gw.clone(),
        };
        let body = Presence::batch(at, lines).to_body();
        let ttl = self.cfg.presence_ttl_ms;
        let env = self.seal(Draft::new(Payload::Presence, &gw, to, ttl).body(body));
        self.publish(Exchange::Roster, env);
    }

    fn publish_delta(&mut self, gid: &SessionId, change: Option<Entity>) {
        // With the broker down a delta has nowhere to go; the snapshot after it comes back
        // says the same.
        if !self.broker_is_up() {
            return;
        }
        let Some(at) = self.next_order() else { return };
        let Link::Fleet(f) = &self.link else { return };
        let to = Address::Presence {
            host: f.host().clone(),
            gid: gid.clone(),
        };
        let body = Presence::delta(at, change).to_body();
        let ttl = self.cfg.presence_ttl_ms;
        let env = self.seal(Draft::new(Payload::Presence, gid, to, ttl).body(body));
        self.publish(Exchange::Roster, env);
    }

    /// A fresh status sample of a member served here: kept as its status (an idle member
    /// nothing is delegated to has one too), and one other than its presence last said goes
    /// out as a delta now, not at the next snapshot.
    pub(in crate::gateway) fn status_sampled(&mut self, gid: &SessionId, status: AgentStatus) {
        let Some(served) = self
            .served_here_mut(gid)
            .filter(|s| s.status != Some(status))
        else {
            return;
        };
        served.status = Some(status);
        self.announce_change(gid);
    }

    /// A member's health changed: its presence says so soon.
    pub(in crate::gateway) fn health_changed(&mut self, gid: &SessionId) {
        self.announce_change(gid);
    }

    /// A member's session went busy or idle: its presence says so soon.
    pub(in crate::gateway) fn busy_changed(&mut self, gid: &SessionId) {
        self.announce_change(gid);
    }

    /// The presence round: parked deliveries and remote asks past their bounds go, silent
    /// roster entries expire (failing what was typed into them), and this host publishes its
    /// snapshot — one signed message for its gateway and every entity it has announced.
    /// Returns when the next round is due; none while the link is down.
    pub(in crate::gateway) fn on_presence_tick(&mut self, now: Instant) -> Option<Instant> {
        self.expire_parked(now);
        let Link::Fleet(f) = &mut self.link else {
            return None;
        };
        f.waiters.expire_asks(now);
        // Only silence heard while listening counts: this chain stops while our own link is
        // down, and `heard_again` restarts every entry's clock when it comes back.
        for gid in f.roster.expire(now) {
            self.event(Event::RosterExpired { gid: gid.clone() });
            let why = format!(
                "{gid} sent no presence for {} ms: its host is gone or cut off, and its \
                 turn with it",
                self.cfg.presence_ttl_ms
            );
            self.fail_typed_briefs(now, |d| d.target == gid, &why);
        }
        if !self.broker_is_up() {
            return None;
        }
        let members: Vec<SessionId> = self
            .served
            .iter()
            .filter(|(_, s)| s.announced && s.kind == EntityKind::Member)
            .map(|(g, _)| g.clone())
            .collect();
        self.publish_snapshot();
        // Presence must stay true of members nothing is delegated to as well: sample each idle
        // one once a round — all of them from one listing of herdr's panes — so a pane that
        // died unwatched (say, while this gateway was restarting) is seen gone, and a changed
        // status goes out as a delta. Members with work in flight are sampled by the injector
        // already (and an extra sample would count against their grace bounds).
        let idle: Vec<SessionId> = members
            .into_iter()
            .filter(|gid| {
                let view = self.injector.view(gid);
                view.queued == 0 && !view.in_turn
            })
            .collect();
        if !idle.is_empty() {
            self.poll_statuses(crate::io::Round::Idle, idle);
        }
        Some(now + Duration::from_millis(self.cfg.presence_interval_ms))
    }

    /// This host's snapshot: its profiles, its start, and every announced entity with its
    /// status as last sampled (a sample that changed it went out as a delta already).
    fn publish_snapshot(&mut self) {
        let Some(at) = self.next_order() else { return };
        // The snapshot carries every change gathered so far.
        if let Link::Fleet(f) = &mut self.link {
            f.changed.clear();
        }
        let Link::Fleet(f) = &self.link else { return };
        let drop_cards = self.cfg.planted(PlantedBug::SnapshotDropsCards);
        let listed: Vec<Listed> = self
            .served
            .iter()
            .filter(|(_, s)| s.announced)
            .map(|(gid, s)| {
                let mut e = self.describe(gid, s);
                if drop_cards {
                    e.card = Card::default();
                }
                Listed::new(gid.clone(), e)
            })
            .collect();
        let gw = SessionId::new(GATEWAY_GID);
        let to = Address::Presence {
            host: f.host().clone(),
            gid: gw.clone(),
        };
        let body = Presence::snapshot(at, self.cfg.profiles.clone(), listed)
            .with_ops(self.host_ops())
            .to_body();
        let ttl = self.cfg.presence_ttl_ms;
        let env = self.seal(Draft::new(Payload::Presence, &gw, to, ttl).body(body));
        self.publish(Exchange::Roster, env);
    }

    /// The held-delivery sweep's round; returns when the next is due, while the broker is up.
    pub(in crate::gateway) fn on_held_sweep(&mut self, now: Instant) -> Option<Instant> {
        self.sweep_held();
        self.broker_is_up()
            .then(|| now + Duration::from_millis(self.cfg.held_sweep_interval_ms))
    }
}
