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
use super::spawn_requests::{SpawnRequests, Waiting};
use super::{Effects, Gateway, TimerKind};
use crate::broker::{DeliveryId, Exchange, PublishId, PublishResult};
use crate::control::{Refusal, RefusalCode};
use crate::envelope::Address;
use crate::envelope::{Envelope, Kind};
use crate::ids::{CallId, HostId, MsgId, SessionId};
use crate::io::{CallError, Event, Launched, Output, Readiness, Response, SpawnError, Stale};
use crate::outcome::Outcome;
use crate::planted::PlantedBug;
use crate::roster::{Card, EntityKind, GATEWAY_GID};
use crate::spawn_spec::SpawnSpec;
use crate::time::{Duration, Instant};
use std::collections::{BTreeMap, BTreeSet};

/// Who is told when a reserved spawn ends.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reply {
    /// A caller on this host.
    Local(CallId),
    /// A requester on another host, answered by presence (ready) or FAILED (`re` = the SPAWN).
    /// The SPAWN stays unacked until then (`delivery`): a control message is at-least-once,
    /// and a redelivery is harmless by construction (registry + reservation).
    Remote {
        requester: SessionId,
        re: MsgId,
        delivery: DeliveryId,
    },
}

#[derive(Clone, Debug)]
struct Reservation {
    reply: Reply,
    deadline: Instant,
    /// Who the member will be: its profile, role, group and owner.
    card: Card,
    /// The member connected before its pane was reported (a fast program).
    connected: bool,
}

/// Both sides of spawning.
#[derive(Debug, Default)]
pub(super) struct Spawns {
    /// Target side: spawns entered before the launcher call, until ready or failed.
    reserved: BTreeMap<SessionId, Reservation>,
    /// Requester side: remote spawns awaiting the new member's presence.
    pub(super) requests: SpawnRequests,
}

impl Spawns {
    pub(super) fn reserved(&self) -> usize {
        self.reserved.len()
    }

    pub(super) fn is_reserved(&self, gid: &SessionId) -> bool {
        self.reserved.contains_key(gid)
    }

    /// Each reserved spawn's gid and profile.
    pub(super) fn reserved_profiles(&self) -> impl Iterator<Item = (&SessionId, Option<&str>)> {
        self.reserved
            .iter()
            .map(|(g, r)| (g, r.card.profile.as_deref()))
    }

    /// Enters `gid`'s reservation, arms its readiness bound and asks the launcher for its
    /// pane: the three happen together or not at all.
    fn reserve(&mut self, fx: &mut Effects, gid: SessionId, r: Reservation, spec: SpawnSpec) {
        fx.wake(r.deadline, TimerKind::Spawn(gid.clone()));
        self.reserved.insert(gid.clone(), r);
        fx.emit(Output::SpawnPane { gid, spec });
    }

    /// The launcher reported `gid`'s pane: who it will be and whether it connected already.
    /// A pane for a spawn no longer reserved (reaped, called off) is closed.
    fn launched(&mut self, fx: &mut Effects, gid: &SessionId) -> Option<(Card, bool)> {
        match self.reserved.get(gid) {
            Some(r) => Some((r.card.clone(), r.connected)),
            None => {
                fx.emit(Output::ClosePane { gid: gid.clone() });
                None
            }
        }
    }

    /// `gid`'s readiness bound: a reservation past it is taken off and its pane closed.
    fn reap(&mut self, fx: &mut Effects, now: Instant, gid: &SessionId) -> Option<Reply> {
        if self.reserved.get(gid).is_none_or(|r| r.deadline > now) {
            return None;
        }
        let r = self.reserved.remove(gid)?;
        fx.emit(Output::ClosePane { gid: gid.clone() });
        Some(r.reply)
    }

    /// A spawn called off while in its readiness gate: taken off, its pane closed.
    fn cancel(&mut self, fx: &mut Effects, gid: &SessionId) -> Option<Reply> {
        let r = self.reserved.remove(gid)?;
        fx.emit(Output::ClosePane { gid: gid.clone() });
        Some(r.reply)
    }

    /// A SPAWN for `gid` again while its first copy is in the readiness gate: `None` if it
    /// is not. A redelivery (the first copy's tag died with its connection) takes over the
    /// ack; the copy it replaces is acked now if its connection still lives.
    fn absorb(&mut self, gid: &SessionId, reply: &Reply) -> Option<Absorbed> {
        let r = self.reserved.get_mut(gid)?;
        let (Reply::Remote { delivery: held, .. }, Reply::Remote { delivery, .. }) =
            (&mut r.reply, reply)
        else {
            return Some(Absorbed::Kept);
        };
        let stale = std::mem::replace(held, *delivery);
        Some(if stale.generation == delivery.generation {
            Absorbed::AckStale(stale)
        } else {
            Absorbed::Kept
        })
    }

    /// Every spawn still in its readiness gate.
    fn gids(&self) -> impl Iterator<Item = &SessionId> {
        self.reserved.keys()
    }

    /// `gid` connected before its pane was reported: remembered for when it is. False if no
    /// spawn of `gid` is in its gate.
    fn connected_early(&mut self, gid: &SessionId) -> bool {
        match self.reserved.get_mut(gid) {
            Some(r) => {
                r.connected = true;
                true
            }
            None => false,
        }
    }

    /// `gid`'s spawn ends with its pane left as it is: it passed its readiness gate, or it
    /// failed with no pane to close (the launcher made none, or it is gone). Whoever asked is
    /// answered as the returned `Reply` says.
    fn end(&mut self, gid: &SessionId) -> Option<Reply> {
        self.reserved.remove(gid).map(|r| r.reply)
    }
}

/// What `Spawns::absorb` did with a SPAWN seen again.
#[derive(Debug, PartialEq, Eq)]
enum Absorbed {
    /// The first copy answers; nothing to ack now.
    Kept,
    /// The redelivery took over the ack: this (stale) delivery is acked now.
    AckStale(DeliveryId),
}

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
        let draft = Draft::new(Kind::Spawn, &from, Address::Host(host.clone()), ttl)
            .body(body)
            .spawn_id(gid.clone());
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
        let reservation = Reservation {
            reply,
            deadline,
            card: Card {
                profile: Some(spec.profile.clone()),
                role: Some(spec.role.unwrap_or_default()),
                group: spec.group.clone(),
                owner,
                since: None,
                ticket: spec.ticket.clone(),
                cwd: spec.cwd.clone(),
                charter: None,
            }
            .checked(),
            connected: false,
        };
        self.spawns.reserve(&mut self.fx, gid, reservation, spec);
    }

    /// The launcher's answer. A pane that exists still waits for its readiness gate.
    pub(super) fn on_spawned(&mut self, gid: SessionId, result: Result<Launched, SpawnError>) {
        match result {
            Ok(launched) => {
                // Not reserved: too late, the spawn was already reaped and reported failed.
                let Some((card, connected)) = self.spawns.launched(&mut self.fx, &gid) else {
                    return;
                };
                let card = Card {
                    charter: launched.charter,
                    ..card
                }
                .checked();
                let ready = launched.readiness;
                self.cards.insert(gid.clone(), card);
                self.injector.gate(&gid);
                self.local_entity(&gid, crate::roster::EntityKind::Member, Announce::Later);
                let planted = self.cfg.planted(crate::planted::PlantedBug::ReadyAtLaunch);
                if ready == Readiness::Ready || connected || planted {
                    self.member_connected(&gid);
                }
            }
            Err(reason) => {
                if let Some(reply) = self.spawns.end(&gid) {
                    let why = format!("the launcher failed: {reason}");
                    self.health_failing(&gid, &why);
                    self.spawn_done(&gid, reply, Err(why));
                }
            }
        }
    }

    /// A member passed its readiness gate (connected, or ready at launch): typing may begin,
    /// it is announced, and a spawn waiting on it is done. Only a member whose pane is known
    /// here counts: a token that outlived its pane announces nothing, and a member that is
    /// already connected is not announced again. One that connects before its spawn's pane is
    /// reported is remembered and opened when it is.
    pub(super) fn member_connected(&mut self, gid: &SessionId) {
        match self.injector.gate_state(gid) {
            Some(true) => return,
            Some(false) => {}
            None => {
                if !self.spawns.connected_early(gid) {
                    self.event(Event::Stale {
                        what: Stale::UnknownMember,
                        target: gid.clone(),
                    });
                }
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
                let draft = Draft::new(
                    Kind::Failed,
                    &gateway,
                    Address::Entity(requester.clone()),
                    ttl,
                )
                .re(re)
                .outcome(Outcome::WorkerFailed)
                .body(reason.into_bytes())
                .spawn_id(gid.clone());
                let env = self.seal(draft);
                self.publish(Exchange::Msg, env);
            }
        }
    }

    /// The spawn timer: a reservation that never became ready is reaped; a requester that
    /// never heard back is told.
    pub(super) fn on_spawn_timer(&mut self, now: Instant, gid: SessionId) {
        if let Some(reply) = self.spawns.reap(&mut self.fx, now, &gid) {
            let why = format!(
                "the member did not become ready within {} ms; its pane is reaped",
                self.cfg.spawn_ready_timeout_ms
            );
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
        let gid = env
            .spawn_id
            .clone()
            .ok_or_else(|| "SPAWN without a spawnId".to_string())?;
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
mod spawns_tests {
    //! `Spawns` alone: a reservation, its pane and its bound, from entry to each way out.

    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn gid(n: u8) -> SessionId {
        SessionId::new(format!("00000000-0000-4000-8000-0000000000{n:02}"))
    }

    fn remote(generation: u32, tag: u64) -> Reply {
        Reply::Remote {
            requester: gid(99),
            re: MsgId::MIN,
            delivery: DeliveryId { generation, tag },
        }
    }

    /// One spawn of `gid(1)` reserved until 10 s, answered as `reply`; its outputs drained.
    fn reserved(reply: Reply) -> (Spawns, Effects) {
        let mut s = Spawns::default();
        let mut fx = Effects::default();
        let r = Reservation {
            reply,
            deadline: at(10_000),
            card: Card::default(),
            connected: false,
        };
        s.reserve(&mut fx, gid(1), r, SpawnSpec::of("claude"));
        assert!(
            matches!(fx.pop(), Some(Output::SpawnPane { gid: g, .. }) if g == gid(1)),
            "a reservation asks for its pane"
        );
        assert_eq!(fx.pop(), None);
        (s, fx)
    }

    #[test]
    fn a_reservation_arms_its_own_bound() {
        let (s, mut fx) = reserved(Reply::Local(CallId(1)));
        assert!(s.is_reserved(&gid(1)));
        assert_eq!(fx.take_due(at(9_999)), None);
        assert_eq!(fx.take_due(at(10_000)), Some(TimerKind::Spawn(gid(1))));
    }

    #[test]
    fn a_pane_reported_for_no_reservation_is_closed() {
        let (mut s, mut fx) = reserved(Reply::Local(CallId(1)));
        assert_eq!(s.launched(&mut fx, &gid(2)), None);
        assert_eq!(fx.pop(), Some(Output::ClosePane { gid: gid(2) }));
        assert!(s.launched(&mut fx, &gid(1)).is_some_and(|(_, c)| !c));
        assert_eq!(fx.pop(), None, "its own pane stays");
    }

    #[test]
    fn the_bound_reaps_only_a_reservation_past_it() {
        let (mut s, mut fx) = reserved(Reply::Local(CallId(1)));
        assert_eq!(s.reap(&mut fx, at(9_999), &gid(1)), None);
        assert_eq!(fx.pop(), None);
        assert_eq!(
            s.reap(&mut fx, at(10_000), &gid(1)),
            Some(Reply::Local(CallId(1)))
        );
        assert_eq!(fx.pop(), Some(Output::ClosePane { gid: gid(1) }));
        assert!(!s.is_reserved(&gid(1)));
        assert_eq!(s.reap(&mut fx, at(20_000), &gid(1)), None, "reaped once");
    }

    #[test]
    fn a_redelivered_spawn_takes_over_the_ack() {
        let (mut s, _) = reserved(remote(1, 1));
        assert_eq!(s.absorb(&gid(2), &remote(1, 2)), None, "not reserved");
        assert_eq!(
            s.absorb(&gid(1), &remote(1, 2)),
            Some(Absorbed::AckStale(DeliveryId {
                generation: 1,
                tag: 1
            })),
            "the copy it replaces is acked on its own connection"
        );
        assert_eq!(
            s.absorb(&gid(1), &remote(2, 5)),
            Some(Absorbed::Kept),
            "a dead connection's tag is not acked"
        );
        assert_eq!(
            s.end(&gid(1)),
            Some(remote(2, 5)),
            "the newest copy answers"
        );
    }

    #[test]
    fn a_member_that_connects_first_is_remembered_for_its_pane() {
        let (mut s, mut fx) = reserved(Reply::Local(CallId(1)));
        assert!(!s.connected_early(&gid(2)));
        assert!(s.connected_early(&gid(1)));
        assert!(s.launched(&mut fx, &gid(1)).is_some_and(|(_, c)| c));
    }

    #[test]
    fn a_spawn_ends_once_and_only_a_cancel_closes_its_pane() {
        let (mut s, mut fx) = reserved(Reply::Local(CallId(1)));
        assert_eq!(s.end(&gid(1)), Some(Reply::Local(CallId(1))));
        assert_eq!(s.end(&gid(1)), None);
        assert_eq!(fx.pop(), None, "a ready member keeps its pane");
        assert_eq!(s.cancel(&mut fx, &gid(1)), None, "ended once");
        assert_eq!(fx.pop(), None);
        let (mut s, mut fx) = reserved(Reply::Local(CallId(3)));
        assert_eq!(s.cancel(&mut fx, &gid(1)), Some(Reply::Local(CallId(3))));
        assert_eq!(fx.pop(), Some(Output::ClosePane { gid: gid(1) }));
        assert_eq!(s.cancel(&mut fx, &gid(1)), None);
        assert_eq!(s.reserved(), 0);
    }
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
