//! Presence: this host's heartbeats (its gateway's and each announced entity's), the peers'
//! heartbeats that bind their gids to their hosts, roster expiry and its consequences, and the
//! periodic sweep of held deliveries past their expiry.

use super::Draft;
use crate::admission::presence_key;
use crate::broker::{DeliveryId, Exchange};
use crate::envelope::{Envelope, Kind};
use crate::gateway::{Gateway, TimerKind};
use crate::ids::SessionId;
use crate::io::{Event, Output, RejectCode};
use crate::roster::{EntityKind, Observed, Presence, GATEWAY_GID};
use crate::time::{Duration, Instant};

impl Gateway {
    /// A peer's signed heartbeat: it binds the sender's gid to the signing host, may reveal
    /// that host's restart, answers a spawn waiting on that gid, and frees deliveries parked
    /// until it came.
    pub(super) fn on_presence(
        &mut self,
        now: Instant,
        delivery: DeliveryId,
        queue: &str,
        env: Envelope,
    ) {
        let p = match Presence::from_body(&env.body) {
            Ok(p) => p,
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
        let Some(f) = &mut self.fed else { return };
        if f.local.contains_key(&env.from) && env.signer != f.cfg.host {
            // Another host claims a gid served here: ours stands.
            let why = format!("{} claims {}, which this host serves", env.signer, env.from);
            return self.event(Event::Rejected {
                queue: queue.to_string(),
                code: RejectCode::GidClaimed,
                detail: why,
            });
        }
        let since = p.since.unwrap_or(0);
        match f.roster.observe(now, &env.signer, &env.from, p) {
            Observed::Seen { restarted: true } => self.peer_restarted(now, &env.signer, since),
            Observed::Seen { restarted: false } => {}
            Observed::Claimed { bound } => {
                // A live binding is never taken over: the claimant is believed about nothing.
                let why = format!("{} claims {}, which {bound} serves", env.signer, env.from);
                return self.event(Event::Rejected {
                    queue: queue.to_string(),
                    code: RejectCode::GidClaimed,
                    detail: why,
                });
            }
        }
        self.spawn_seen(&env.from, &env.signer);
        self.unpark(now, &env.from);
    }

    /// One heartbeat for `gid`, if it is served here and announced.
    pub(in crate::gateway) fn announce(&mut self, gid: &SessionId) {
        let Some(f) = &self.fed else { return };
        let Some((kind, true)) = f.local.get(gid).copied() else {
            return;
        };
        let key = presence_key(f.host(), gid);
        let status = self.injector.view(gid).status;
        let presence = Presence {
            kind,
            status,
            profiles: Vec::new(),
            since: None,
        };
        let ttl = self.cfg.presence_ttl_ms;
        let draft = Draft::new(Kind::Presence, gid, key, ttl).body(presence.to_body());
        let env = self.seal(draft);
        self.publish(Exchange::Roster, env);
    }

    /// The heartbeat round: parked deliveries and remote asks past their bounds go, silent
    /// roster entries expire (failing what was typed into them), and this host announces its
    /// gateway and every entity it serves.
    pub(in crate::gateway) fn on_presence_tick(&mut self, now: Instant) {
        self.expire_parked(now);
        let Some(f) = &mut self.fed else { return };
        f.presence_armed = false;
        f.remote_asks.retain(|_, a| a.until > now);
        // Only silence heard while listening counts: this chain stops while our own link is
        // down, and `heard_again` restarts every entry's clock when it comes back.
        for gid in f.roster.expire(now) {
            self.out
                .push_back(Output::Event(Event::RosterExpired { gid: gid.clone() }));
            let why = format!(
                "{gid} sent no heartbeat for {} ms: its host is gone or cut off, and its \
                 turn with it",
                self.cfg.presence_ttl_ms
            );
            self.fail_typed_briefs(now, |d| d.target == gid, &why);
        }
        let Some(f) = &self.fed else { return };
        if !f.broker_up {
            return;
        }
        let gw = SessionId::new(GATEWAY_GID);
        let key = presence_key(f.host(), &gw);
        let body = Presence {
            kind: EntityKind::Gateway,
            status: None,
            profiles: self.cfg.profiles.clone(),
            since: Some(f.started_unix),
        }
        .to_body();
        let gids: Vec<SessionId> = f.local.keys().cloned().collect();
        let ttl = self.cfg.presence_ttl_ms;
        let env = self.seal(Draft::new(Kind::Presence, &gw, key, ttl).body(body));
        self.publish(Exchange::Roster, env);
        for gid in gids {
            self.announce(&gid);
            // Presence must stay true of members nothing is delegated to as well: sample each
            // idle one once a heartbeat, so a pane that died unwatched (say, while this gateway
            // was restarting) is seen gone, and the next heartbeat carries a fresh status.
            // Members with work in flight are sampled by the injector already (and an extra
            // sample would count against their grace bounds).
            let member = self
                .fed
                .as_ref()
                .and_then(|f| f.local.get(&gid))
                .is_some_and(|(k, announced)| *k == EntityKind::Member && *announced);
            let view = self.injector.view(&gid);
            if member && view.queued == 0 && !view.in_turn {
                self.out.push_back(Output::PollStatus { target: gid });
            }
        }
        let next = now + Duration::from_millis(self.cfg.presence_interval_ms);
        self.timers.insert((next, TimerKind::Presence));
        if let Some(f) = &mut self.fed {
            f.presence_armed = true;
        }
    }

    /// The held-delivery sweep's round: re-armed while the broker is up.
    pub(in crate::gateway) fn on_held_sweep(&mut self, now: Instant) {
        self.sweep_held();
        let up = self.broker_is_up();
        if let Some(f) = &mut self.fed {
            f.sweep_armed = up;
        }
        if up {
            let next = now + Duration::from_millis(self.cfg.held_sweep_interval_ms);
            self.timers.insert((next, TimerKind::HeldSweep));
        }
    }
}
