//! Spawning members (U4, CB-308 §7.2, §7.5, §7.8): on this host, or on another through a
//! SPAWN control message.
//!
//! Idempotence without a ledger: the requester mints the spawn id, which *is* the new member's
//! gid and lives in its pane label, so the target's live registry (rebuilt from labels after a
//! restart) answers a redelivery with the existing member; a reservation entered before the
//! launcher call absorbs a redelivery that arrives while the first spawn is still inside its
//! readiness gate. A member is announced only once it is ready.

use super::entities::Announce;
use super::federation::Draft;
use super::spawn_requests::Waiting;
use super::spawns::{Absorbed, Connection, Reply, Reservation, Waited};
use super::Gateway;
use crate::broker::{DeliveryId, Exchange, PublishId, PublishResult};
use crate::control::{Refusal, RefusalCode};
use crate::envelope::Address;
use crate::envelope::Envelope;
use crate::ids::{CallId, HostId, MsgId, SessionId};
use crate::io::{
    CallError, Event, Launched, PaneError, Readiness, Response, Sampled, SpawnError, Stale,
};
use crate::outcome::Outcome;
use crate::planted::PlantedBug;
use crate::roster::{Card, EntityKind, GATEWAY_GID};
use crate::spawn_spec::SpawnSpec;
use crate::start_gate::{Bounds, Look};
use crate::time::{Duration, Instant};
use std::collections::BTreeSet;

impl Gateway {
    pub(super) fn own_host(&self) -> HostId {
        self.host.clone()
    }

    fn spawn_ready_timeout(&self) -> Duration {
        Duration::from_millis(self.cfg.spawn_ready_timeout_ms)
    }

    /// `fleet_spawn` from a caller on this host.
    pub(super) fn on_spawn(
        &mut self,
        now: Instant,
        call: CallId,
        caller_gid: Option<SessionId>,
        host: Option<HostId>,
        spec: SpawnSpec,
    ) {
        let own = self.own_host();
        let host = match host {
            Some(h) if h.as_str() == super::placement::ANY_HOST => {
                match self.place_host(&spec.profile) {
                    Some(h) => h,
                    None => {
                        let reason = if spec.profile.is_empty() {
                            "host \"any\": no live host offers a profile".to_string()
                        } else {
                            format!(
                                "host \"any\": no live host offers profile {:?}",
                                spec.profile
                            )
                        };
                        return self
                            .respond(call, Response::Error(CallError::SpawnFailed { reason }));
                    }
                }
            }
            Some(h) => h,
            None => own.clone(),
        };
        if let Some(why) = spec.invalid(host != own) {
            return self.invalid(call, &why);
        }
        let gid = self.ids.gid();
        if host == own {
            return self.spawn_here(now, gid, spec, Reply::Local(call), caller_gid);
        }
        let Some(from) = caller_gid.filter(|g| !self.is_remote(g)) else {
            return self.invalid(
                call,
                "this caller is not attached to the gateway, so it cannot spawn on another host",
            );
        };
        if !self.broker_is_up() {
            return self.respond(call, Response::Error(CallError::BrokerUnavailable));
        }
        if let Some(offered) = self.profiles_of(&host).filter(|_| !spec.profile.is_empty()) {
            if !offered.contains(&spec.profile) {
                return self.respond(
                    call,
                    Response::Error(CallError::UnknownProfile {
                        host,
                        profile: spec.profile,
                        offered,
                    }),
                );
            }
        }
        let body = serde_json::to_vec(&spec).unwrap_or_default();
        let ttl = self.cfg.spawn_ready_timeout_ms;
        let spawn = crate::envelope::Payload::Spawn {
            spawn_id: gid.clone(),
        };
        let draft = Draft::new(spawn, &from, Address::Host(host.clone()), ttl).body(body);
        let env = self.seal(draft);
        let msg = env.msg_id;
        let Some(publish) = self.publish(Exchange::Control, env) else {
            return self.respond(call, Response::Error(CallError::BrokerUnavailable));
        };
        let deadline = now + self.spawn_ready_timeout() + Duration::from_secs(30);
        let waiting = Waiting {
            call,
            host,
            deadline,
        };
        self.spawns
            .requests
            .wait(&mut self.fx, gid, msg, publish, waiting);
    }

    /// The target side: dedup by the live registry, then by the reservation set, then the
    /// profile check, then reserve and ask the launcher.
    fn spawn_here(
        &mut self,
        now: Instant,
        gid: SessionId,
        spec: SpawnSpec,
        reply: Reply,
        owner: Option<SessionId>,
    ) {
        if self.is_live_member(&gid) {
            // A redelivered SPAWN: answer with the member that exists (its presence, again).
            self.announce(&gid);
            return self.spawn_done(&gid, reply, Ok(()));
        }
        let absorb = !self.cfg.planted(PlantedBug::SpawnWithoutReservation);
        match absorb.then(|| self.spawns.absorb(&gid, &reply)).flatten() {
            Some(Absorbed::AckStale(stale)) => return self.ack_if_current(stale),
            Some(Absorbed::Kept) => return,
            None => {}
        }
        let mut spec = spec;
        if spec.profile.is_empty() {
            match self.choose_profile() {
                Ok(p) => spec.profile = p,
                Err(no) => {
                    let reason = format!("placement on host {}: {no}", self.own_host());
                    return self.spawn_done(&gid, reply, Err(reason));
                }
            }
        }
        if !self.cfg.profiles.contains(&spec.profile) {
            let reason = format!(
                "host {} has no profile {:?} (it offers: {:?})",
                self.own_host(),
                spec.profile,
                self.cfg.profiles
            );
            return self.spawn_done(&gid, reply, Err(reason));
        }
        let running: BTreeSet<&SessionId> = self
            .served()
            .filter(|(_, s)| s.kind == EntityKind::Member)
            .map(|(g, _)| g)
            .chain(self.spawns.gids())
            .collect();
        if running.len() >= self.cfg.max_members {
            let reason = format!(
                "host {} already runs {} members, its max_members",
                self.own_host(),
                running.len()
            );
            return self.spawn_done(&gid, reply, Err(reason));
        }
        let deadline = now + self.spawn_ready_timeout();
        self.session_set(&gid, crate::session::SessionState::Spawning);
        self.stats.spawns_total += 1;
        let card = Card {
            profile: Some(spec.profile.clone()),
            role: Some(spec.role.unwrap_or_default()),
            group: spec.group.clone(),
            owner,
            since: None,
            ticket: spec.ticket.clone(),
            cwd: spec.cwd.clone(),
            charter: None,
        }
        .checked();
        let reservation = Reservation::new(reply, deadline, card);
        self.spawns.reserve(&mut self.fx, gid, reservation, spec);
    }

    /// The launcher's answer. A pane that exists still waits for its readiness gate.
    pub(super) fn on_spawned(
        &mut self,
        now: Instant,
        gid: SessionId,
        result: Result<Launched, SpawnError>,
    ) {
        match result {
            Ok(launched) => {
                let mut readiness = launched.readiness;
                if matches!(readiness, Readiness::OnPrompt(_))
                    && self.cfg.planted(PlantedBug::PromptGateSkipped)
                {
                    readiness = Readiness::OnConnect;
                }
                let bounds = self.start_bounds();
                // Not reserved: too late, the spawn was already reaped and reported failed.
                let Some((card, open)) =
                    self.spawns
                        .launched(&mut self.fx, now, &gid, readiness, bounds)
                else {
                    return;
                };
                let card = Card {
                    charter: launched.charter,
                    ..card
                }
                .checked();
                self.cards.insert(gid.clone(), card);
                if launched.reports {
                    self.reports.launched(&gid);
                }
                self.injector.gate(&gid);
                self.local_entity(&gid, crate::roster::EntityKind::Member, Announce::Later);
                if open || self.cfg.planted(PlantedBug::ReadyAtLaunch) {
                    self.gate_passed(&gid);
                }
            }
            // Its program ended while its gate looked at it (the event watcher or the health
            // probe read the exit first): the gate says so, as its own look would have.
            Err(SpawnError::Ended(why)) if self.spawns.is_looking(&gid) => {
                self.on_start_looked(now, gid, Ok(Sampled::Ended { why }));
            }
            Err(reason) => {
                if let Some(reply) = self.spawns.end(&gid) {
                    let why = match reason {
                        SpawnError::Ended(_) => reason.to_string(),
                        _ => format!("the launcher failed: {reason}"),
                    };
                    self.health_failing(&gid, &why);
                    self.spawn_done(&gid, reply, Err(why));
                }
            }
        }
    }

    /// A look at a starting member's pane (`Output::LookAtStart`), judged by its gate.
    pub(super) fn on_start_looked(
        &mut self,
        now: Instant,
        gid: SessionId,
        look: Result<Sampled, PaneError>,
    ) {
        if !self.spawns.is_reserved(&gid) {
            self.adoption_looked(now, &gid, look);
            return;
        }
        match self.spawns.looked(&mut self.fx, now, &gid, look) {
            Look::Open => self.gate_passed(&gid),
            Look::Failed(why) => {
                if let Some(reply) = self.spawns.cancel(&mut self.fx, &gid) {
                    self.health_failing(&gid, &why);
                    self.spawn_done(&gid, reply, Err(why));
                }
            }
            Look::Ignored | Look::Again(_) | Look::Prompted => {}
        }
    }

    /// A starting member's next look is due.
    pub(super) fn on_start_look_timer(&mut self, gid: &SessionId) {
        self.spawns.look_again(&mut self.fx, gid);
        if self.adoption.is_looking(gid) {
            self.look_at_start(gid.clone());
        }
    }

    pub(super) fn start_bounds(&self) -> Bounds {
        Bounds {
            timeout: Duration::from_millis(self.cfg.start_timeout_ms),
            poll: Duration::from_millis(self.cfg.start_poll_ms),
        }
    }

    /// A member connected to this gateway's MCP. Held while its spawn's gate still looks at
    /// its pane (an agent may connect seconds before it takes input) or its pane is not yet
    /// reported; otherwise its gate passes.
    pub(super) fn member_connected(&mut self, gid: &SessionId) {
        if self.spawns.connection(gid) == Connection::Held || self.adoption.holds_connection(gid) {
            return;
        }
        self.gate_passed(gid);
    }

    /// A member passed its readiness gate (connected, or ready at launch): typing may begin,
    /// it is announced, and a spawn waiting on it is done. Only a member whose pane is known
    /// here counts: a token that outlived its pane announces nothing, and a member that is
    /// already connected is not announced again.
    pub(super) fn gate_passed(&mut self, gid: &SessionId) {
        match self.injector.gate_state(gid) {
            Some(true) => return,
            Some(false) => {}
            None => {
                self.event(Event::Stale {
                    what: Stale::UnknownMember,
                    target: gid.clone(),
                });
                return;
            }
        }
        if self.adoption.settled(gid) {
            self.event(Event::Rebuilt {
                gid: gid.clone(),
                verdict: crate::adoption::AdoptVerdict::Adopted,
            });
        }
        self.session_ready(gid);
        self.open_member(gid);
        self.local_entity(gid, crate::roster::EntityKind::Member, Announce::Now);
        if self.link.is_solo() && !self.injector.is_active(gid) {
            // Its row shows a sampled status, not `unknown` until work comes (a federated
            // gateway samples idle members every presence round).
            self.poll_status(gid.clone());
        }
        self.spawn_ready(gid);
    }

    /// A member connected: if it was being spawned, the spawn is done.
    pub(super) fn spawn_ready(&mut self, gid: &SessionId) {
        if let Some(reply) = self.spawns.end(gid) {
            self.spawn_done(gid, reply, Ok(()));
        }
    }

    fn spawn_done(&mut self, gid: &SessionId, reply: Reply, result: Result<(), String>) {
        if result.is_err() {
            self.session_abandoned(gid);
        }
        match (reply, result) {
            (Reply::Local(call), Ok(())) => {
                let host = self.own_host();
                self.respond(
                    call,
                    Response::Spawned {
                        gid: gid.clone(),
                        host,
                    },
                );
            }
            (Reply::Local(call), Err(reason)) => {
                self.respond(call, Response::Error(CallError::SpawnFailed { reason }))
            }
            // Ready: the requester learns it from the member's presence, which the readiness
            // gate (`MemberConnected`) has just published.
            (Reply::Remote { delivery, .. }, Ok(())) => self.ack_if_current(delivery),
            (
                Reply::Remote {
                    requester,
                    re,
                    delivery,
                },
                Err(reason),
            ) => {
                self.ack_if_current(delivery);
                let ttl = self.cfg.reply_ttl_ms;
                let gateway = SessionId::new(GATEWAY_GID);
                let failed = crate::envelope::Payload::Failed {
                    re,
                    outcome: Outcome::WorkerFailed,
                    spawn_id: Some(gid.clone()),
                };
                let draft = Draft::new(failed, &gateway, Address::Entity(requester.clone()), ttl)
                    .body(reason.into_bytes());
                let env = self.seal(draft);
                self.publish(Exchange::Msg, env);
            }
        }
    }

    /// The spawn timer: a reservation that never became ready is reaped; a requester that
    /// never heard back is told.
    pub(super) fn on_spawn_timer(&mut self, now: Instant, gid: SessionId) {
        if let Some((reply, waited)) = self.spawns.reap(&mut self.fx, now, &gid) {
            let bound = self.cfg.spawn_ready_timeout_ms;
            let why = match waited {
                Waited::Launcher => format!(
                    "the launcher did not report the member's pane within {bound} ms; its pane is reaped"
                ),
                Waited::Connection => format!(
                    "the member did not connect to this gateway's MCP within {bound} ms; its pane is reaped"
                ),
                Waited::Start => format!(
                    "the member did not become ready within {bound} ms; its pane is reaped"
                ),
            };
            self.health_failing(&gid, &why);
            self.spawn_done(&gid, reply, Err(why));
        }
        let answer = self.spawns.requests.due(now, &gid);
        self.answer(answer);
    }

    /// Requester side: presence for a gid we are waiting on means it is ready.
    pub(super) fn spawn_seen(&mut self, gid: &SessionId, host: &HostId) {
        let answer = self.spawns.requests.seen(gid, host);
        self.answer(answer);
    }

    /// Requester side: the host a spawn waiting on SPAWN `re` was sent to.
    pub(super) fn spawn_host(&self, re: MsgId) -> Option<HostId> {
        self.spawns.requests.host_of(re)
    }

    /// Requester side: FAILED answering a SPAWN. Returns false if `re` is not a spawn.
    pub(super) fn spawn_failed(&mut self, re: MsgId, body: &[u8]) -> bool {
        match self.spawns.requests.failed(re, body) {
            Some(answer) => {
                self.answer(answer);
                true
            }
            None => false,
        }
    }

    /// The pane of a member still in its readiness gate closed (its program ended, or someone
    /// closed it): its spawn fails now, not at the readiness bound.
    pub(super) fn spawn_pane_gone(&mut self, gid: &SessionId) {
        if let Some(reply) = self.spawns.end(gid) {
            self.spawn_done(
                gid,
                reply,
                Err("the member's pane closed before it was ready".into()),
            );
        }
    }

    /// A spawn still in its readiness gate is called off: its pane is closed and whoever
    /// asked for it is told it failed, and why.
    pub(super) fn cancel_spawn(&mut self, gid: &SessionId, why: &str) {
        if let Some(reply) = self.spawns.cancel(&mut self.fx, gid) {
            self.spawn_done(gid, reply, Err(why.to_string()));
        }
    }

    /// Requester side: the confirm of `publish`, if it was a SPAWN (`SpawnRequests::confirmed`).
    /// Returns false for any other publish.
    pub(super) fn spawn_confirmed(&mut self, publish: PublishId, result: &PublishResult) -> bool {
        match self.spawns.requests.confirmed(publish, result) {
            Some(answer) => {
                self.answer(answer);
                true
            }
            None => false,
        }
    }

    /// The broker went down: SPAWNs awaiting their confirm fail fast.
    pub(super) fn spawns_broker_down(&mut self) {
        let answers = self.spawns.requests.broker_down();
        self.answer(answers);
    }

    /// Target side: a verified SPAWN from an allowed gateway.
    /// `Err` means the SPAWN is malformed: the caller acks it and reports it.
    pub(super) fn on_spawn_message(
        &mut self,
        now: Instant,
        delivery: DeliveryId,
        env: Envelope,
    ) -> Result<(), String> {
        let crate::envelope::Payload::Spawn { spawn_id: gid } = env.payload.clone() else {
            return Err(format!("a {} is not a SPAWN", env.kind()));
        };
        // A gid becomes a routing key and a pane label: only a canonical UUID is accepted, so
        // no wildcard, no `_gateway`, nothing that could alias another entity's name.
        let canonical = uuid::Uuid::parse_str(gid.as_str())
            .is_ok_and(|u| u.hyphenated().to_string() == gid.as_str());
        if !canonical {
            return Err(format!("spawnId {gid:?} is not a canonical UUID"));
        }
        if self.is_local_non_member(&gid) {
            return Err(format!("spawnId {gid} is already a lead on this host"));
        }
        let spec: SpawnSpec =
            serde_json::from_slice(&env.body).map_err(|e| format!("SPAWN body: {e}"))?;
        if let Some(why) = spec.invalid(true) {
            return Err(format!("SPAWN body: {why}"));
        }
        if let Some(why) = spec
            .cwd
            .as_deref()
            .and_then(|cwd| outside_roots(cwd, &self.cfg.remote_cwd_roots))
        {
            self.ack(delivery);
            self.refuse_control(&env, Refusal::new(RefusalCode::InvalidArgument, why));
            return Ok(());
        }
        let reply = Reply::Remote {
            requester: env.from.clone(),
            re: env.msg_id,
            delivery,
        };
        self.spawn_here(now, gid, spec, reply, Some(env.from));
        Ok(())
    }
}

/// Why `cwd`, asked by another host, is not under one of `roots` (this host's
/// `remote_cwd_roots`; none by default: a remote spawn then names no cwd, or gets a worktree).
/// Judged on the path as written — no `..`, absolute, under a root; the launcher checks the
/// real path again (no hidden directory on the way, nothing the sandbox hides).
fn outside_roots(cwd: &str, roots: &[String]) -> Option<String> {
    use std::path::{Component, Path};
    let path = Path::new(cwd);
    let plain = path.is_absolute() && !path.components().any(|c| c == Component::ParentDir);
    if plain && roots.iter().any(|r| path.starts_with(r)) {
        return None;
    }
    Some(match roots {
        [] => format!(
            "cwd {cwd:?}: this host lets no remote spawn choose its cwd (remote_cwd_roots is empty)"
        ),
        _ => format!(
            "cwd {cwd:?} is not under a root this host lets a remote spawn use (remote_cwd_roots: {})",
            roots.join(", ")
        ),
    })
}

#[cfg(test)]
mod roots_tests {
    use super::outside_roots;

    #[test]
    fn a_remote_cwd_must_be_plainly_under_a_root() {
        let roots = vec!["/srv/projects".to_string()];
        assert_eq!(outside_roots("/srv/projects/app", &roots), None);
        for bad in [
            "/root/.ssh",
            "/srv/projects/../../root/.ssh",
            "srv/projects/app",
            "/srv/projectsX",
        ] {
            assert!(outside_roots(bad, &roots).is_some(), "{bad}");
        }
        assert!(outside_roots("/srv/projects/app", &[]).is_some_and(|w| w.contains("empty")));
    }
}
