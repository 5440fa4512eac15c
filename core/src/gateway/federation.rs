//! The cross-host half of the gateway (ch. 10, CB-308 §7): the routing fork, both ack models,
//! the turn-state split between the sender's and the worker's gateway, cross-host asks, the
//! roster, and broker outage. Everything here is a rule over inputs; the shell carries the
//! resulting `BrokerOp`s out against AMQP.
//!
//! Who owns what (CB-308 §7.7): the worker's gateway owns the turn — a `Mode::Remote` proxy
//! delegation there does the turnId minting, ask coalescing, completion and failure
//! fallbacks — and reports each ending as a message answering the brief (`re`). The sender's
//! gateway owns only the waiter, keyed by the brief's msgId.

use super::{Delegation, Gateway, Mode, RemoteBrief, TimerKind};
use crate::admission::{admit_in, presence_key, SeenSet};
use crate::authz::Principal;
use crate::broker::{
    Binding, BrokerEvent, BrokerOp, Consume, DeliveryId, Exchange, Names, PublishId, PublishResult,
    QueueArgs, QueueSpec, Topology,
};
use crate::config::CoreConfig;
use crate::envelope::{Envelope, HeaderValue, Headers, Kind, VERSION};
use crate::ids::{CallId, HostId, MsgId, ReplyId, SessionId, TicketId, TraceId, TurnId};
use crate::inbox::HeldReply;
use crate::io::{CallError, Event, Output, Response};
use crate::outcome::{AskOutcome, Outcome, Phase};
use crate::planted::PlantedBug;
use crate::push::Attention;
use crate::roster::{EntityKind, Presence, Roster, GATEWAY_GID};
use crate::signing::Keyring;
use crate::time::{Duration, Instant};
use std::collections::{BTreeMap, BTreeSet};

/// What a gateway needs to take part in a fleet of hosts.
#[derive(Clone, Debug)]
pub struct Federation {
    pub host: HostId,
    pub keyring: Keyring,
    /// Prefix of every broker object name (default `fleet`).
    pub namespace: String,
    /// Gateways allowed to send this host control (SPAWN), checked against the signature.
    pub control_allowlist: BTreeSet<HostId>,
}

/// A reply-path delivery held unacked until the lead has the message (at-least-once).
#[derive(Clone, Debug)]
struct Held {
    /// `None` after a reconnect: the broker will redeliver it with a new tag.
    delivery: Option<DeliveryId>,
    /// For a stranded reply: the member it came from (its inbox key here).
    target: Option<SessionId>,
    expires_unix: u64,
    holder: Holder,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Holder {
    Inbox(ReplyId),
    Ticket(TicketId),
}

/// An ASK from a remote worker that resolved one of our waiters: where to send the answer,
/// and until when it is worth remembering.
#[derive(Clone, Debug)]
struct RemoteAsk {
    worker: SessionId,
    until: Instant,
}

/// What a publish's confirm decides.
#[derive(Clone, Debug)]
enum Pending {
    /// A delegation's brief or answer: unroutable is "no such recipient" at once.
    Delegation(TicketId),
    /// A member's `fleet_reply` that goes to another host: the member is answered only once
    /// the broker has the reply (a reply is accepted when it is safe, never before).
    MemberReply {
        call: CallId,
        held: Option<ReplyId>,
        member: SessionId,
        sent: Unsent,
    },
    /// A turn's ending reported to its sender; a failure here is loud.
    Report { to: SessionId, kind: Kind },
}

/// A member's reply to another host, as published: if the publish fails, the member is told the
/// broker is unavailable and this is kept, so its retry in the same turn goes out under the same
/// msgId and `re`. The lead's waiter then resolves with it (the delegation on this side already
/// ended at the first try), and a first copy that did reach the broker before the connection
/// died is dropped at the lead as a duplicate msgId. Only ids are kept, never the body: the
/// gateway does not buffer on the broker's behalf.
#[derive(Clone, Debug)]
struct Unsent {
    /// The member's turn (its brief's msgId) the reply belongs to; a retry in a later turn is a
    /// new reply.
    turn: Option<MsgId>,
    to: SessionId,
    re: Option<MsgId>,
    msg_id: MsgId,
    trace_id: TraceId,
}

pub(super) struct Fed {
    cfg: Federation,
    names: Names,
    broker_up: bool,
    generation: u32,
    wall_at: Instant,
    wall_unix: u64,
    /// When this gateway started (Unix ms), announced as its presence's `since`.
    started_unix: u64,
    seen: SeenSet,
    /// Reply-path msgIds already handed to a lead: a redelivery of one is acked and dropped.
    done: SeenSet,
    roster: Roster,
    /// Entities served here, and whether each is announced (members after the readiness gate).
    local: BTreeMap<SessionId, (EntityKind, bool)>,
    /// The broadcast group of each member that joined one at spawn.
    groups: BTreeMap<SessionId, String>,
    next_publish: u64,
    /// Publishes whose confirm decides something.
    publishes: BTreeMap<PublishId, Pending>,
    /// A member's reply call being answered by a report to another host: see `Pending`.
    reply_call: Option<CallId>,
    /// At most one failed reply per member, for its retry: see `Unsent`.
    unsent: BTreeMap<SessionId, Unsent>,
    /// Timers armed (one chain each, however often the broker bounces).
    presence_armed: bool,
    sweep_armed: bool,
    /// Sender side: the waiter of each brief or answer we published, by its msgId.
    remote_waiters: BTreeMap<MsgId, TicketId>,
    remote_asks: BTreeMap<TurnId, RemoteAsk>,
    held: BTreeMap<MsgId, Held>,
    held_by: BTreeMap<Holder, MsgId>,
    /// Forward-path deliveries left unacked until their turn ends. Only the planted
    /// `AckAfterInject` bug fills it: the real forward path acks before the inject.
    late_acks: BTreeMap<MsgId, DeliveryId>,
    /// Deliveries whose sender no fresh signed presence binds to any host yet — the backlog a
    /// reconnect or a restart receives before the first heartbeats — kept unacked until that
    /// presence arrives (then admitted again) or `presence_ttl_ms` passes (then rejected).
    parked: Vec<Parked>,
}

/// A delivery waiting for its sender's presence (see `Fed::parked`), fed again as it came.
#[derive(Debug)]
struct Parked {
    from: SessionId,
    since: Instant,
    delivery: BrokerEvent,
    /// Its tag and queue, for the rejection if the presence never comes.
    tag: DeliveryId,
    queue: String,
}

impl Fed {
    pub(super) fn host(&self) -> &HostId {
        &self.cfg.host
    }
}

impl std::fmt::Debug for Fed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fed")
            .field("host", &self.cfg.host)
            .field("broker_up", &self.broker_up)
            .field("local", &self.local.len())
            .field("held", &self.held.len())
            .finish()
    }
}

impl Gateway {
    /// A gateway that is one host of a fleet: `now` on the monotonic clock is `unix_ms` on the
    /// wall clock. It starts with the broker down; `BrokerEvent::Up` brings it in.
    pub fn federated(
        cfg: CoreConfig,
        federation: Federation,
        seed: u64,
        now: Instant,
        unix_ms: u64,
    ) -> Result<Self, crate::config::ConfigError> {
        let mut gw = Gateway::new(cfg, seed, now)?;
        let c = &gw.cfg;
        gw.fed = Some(Fed {
            names: Names::new(&federation.namespace),
            cfg: federation,
            broker_up: false,
            generation: 0,
            wall_at: now,
            wall_unix: unix_ms,
            started_unix: unix_ms,
            seen: SeenSet::new(c.seen_capacity),
            done: SeenSet::new(c.seen_capacity),
            roster: Roster::new(Duration::from_millis(
                if c.planted(PlantedBug::RosterNeverExpires) {
                    u64::MAX / 4
                } else {
                    c.presence_ttl_ms
                },
            )),
            local: BTreeMap::new(),
            groups: BTreeMap::new(),
            next_publish: 0,
            publishes: BTreeMap::new(),
            reply_call: None,
            unsent: BTreeMap::new(),
            presence_armed: false,
            sweep_armed: false,
            remote_waiters: BTreeMap::new(),
            remote_asks: BTreeMap::new(),
            held: BTreeMap::new(),
            held_by: BTreeMap::new(),
            late_acks: BTreeMap::new(),
            parked: Vec::new(),
        });
        Ok(gw)
    }

    /// The union roster as this gateway sees it (`fleet_list`).
    pub fn roster(&self) -> Vec<crate::roster::RosterRow> {
        use crate::roster::{Liveness, RosterRow, GATEWAY_GID};
        match &self.fed {
            Some(f) => f.roster.view(self.now, &f.cfg.host, f.broker_up),
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

    /// Deliveries held unacked: reply-path holds, and deliveries parked until their sender's
    /// presence arrives (both bounded by the prefetch window).
    pub fn held_deliveries(&self) -> usize {
        self.fed
            .as_ref()
            .map_or(0, |f| f.held.len() + f.parked.len())
    }

    /// This gateway's slice of the broker topology (`fleetd topology`).
    pub fn topology(&self) -> Option<Topology> {
        let f = self.fed.as_ref()?;
        let gids: Vec<(SessionId, EntityKind)> =
            f.local.iter().map(|(g, (k, _))| (g.clone(), *k)).collect();
        Some(slice(&self.cfg, f, &gids, true))
    }

    pub(super) fn broker_is_up(&self) -> bool {
        self.fed.as_ref().is_some_and(|f| f.broker_up)
    }

    /// The profiles `host` advertised, if its gateway heartbeat is fresh.
    pub(super) fn profiles_of(&self, host: &HostId) -> Option<Vec<String>> {
        self.fed.as_ref()?.roster.profiles_of(self.now, host)
    }

    /// A member this gateway serves now (its gid is in a live pane's label).
    pub(super) fn is_live_member(&self, gid: &SessionId) -> bool {
        self.fed.as_ref().is_some_and(|f| {
            f.local
                .get(gid)
                .is_some_and(|(k, _)| *k == EntityKind::Member)
        })
    }

    pub(super) fn is_local_non_member(&self, gid: &SessionId) -> bool {
        self.fed.as_ref().is_some_and(|f| {
            f.local
                .get(gid)
                .is_some_and(|(k, _)| *k != EntityKind::Member)
        })
    }

    pub(super) fn fed_envelope(
        &mut self,
        kind: Kind,
        from: &SessionId,
        to: String,
        re: Option<MsgId>,
        body: Vec<u8>,
        ttl_ms: u64,
    ) -> Envelope {
        self.envelope(kind, from, to, re, None, None, body, ttl_ms, None)
    }

    pub(super) fn fed_publish(&mut self, exchange: Exchange, env: Envelope) -> Option<PublishId> {
        self.publish(exchange, env)
    }

    /// Records the broadcast group a member joins; its inbox binds `broadcast.<group>`.
    pub(super) fn join_group(&mut self, gid: &SessionId, group: &str) {
        if let Some(f) = &mut self.fed {
            f.groups.insert(gid.clone(), group.to_string());
        }
    }

    pub(super) fn announce_now(&mut self, gid: &SessionId) {
        self.announce(gid);
    }

    /// U8: one publish to `broadcast.all` (or a group); the broker copies it into every bound
    /// inbox and each copy follows the per-recipient rules. Not mandatory: an empty group is
    /// legal silence.
    pub(super) fn on_broadcast(
        &mut self,
        call: CallId,
        caller: &Principal,
        group: Option<String>,
        content: String,
    ) {
        if self.fed.is_none() {
            return self.invalid(call, "broadcast runs over the broker; none is configured");
        }
        if content.trim().is_empty() {
            return self.invalid(call, "content must not be empty");
        }
        if group
            .as_deref()
            .is_some_and(|g| g.is_empty() || g.contains(['.', '*', '#']))
        {
            return self.invalid(call, "a group name is one word (no '.', '*' or '#')");
        }
        let Some(from) = caller.session.clone().filter(|s| !self.is_remote(s)) else {
            return self.invalid(call, "this caller is not attached to the gateway");
        };
        if !self.broker_is_up() {
            return self.respond(call, Response::Error(CallError::BrokerUnavailable));
        }
        let key = match &group {
            Some(g) => format!("broadcast.{g}"),
            None => "broadcast.all".to_string(),
        };
        let ttl = self.cfg.injected_timeout_ms;
        let env = self.envelope(
            Kind::Broadcast,
            &from,
            key.clone(),
            None,
            None,
            None,
            content.into_bytes(),
            ttl,
            None,
        );
        let msg = env.msg_id;
        match self.publish(Exchange::Msg, env) {
            Some(_) => self.respond(call, Response::Broadcast { msg, key }),
            None => self.respond(call, Response::Error(CallError::BrokerUnavailable)),
        }
    }

    fn unix_now(&self) -> u64 {
        match &self.fed {
            Some(f) => f
                .wall_unix
                .saturating_add(self.now.saturating_since(f.wall_at).as_millis() as u64),
            None => 0,
        }
    }

    pub(super) fn on_wall_clock(&mut self, now: Instant, unix_ms: u64) {
        if let Some(f) = &mut self.fed {
            f.wall_at = now;
            f.wall_unix = unix_ms;
        }
    }

    // ---- the routing fork ------------------------------------------------------------------

    /// Remote: a federated gateway that does not serve `gid` itself. Same-host traffic never
    /// produces a broker output.
    pub(super) fn is_remote(&self, gid: &SessionId) -> bool {
        self.fed
            .as_ref()
            .is_some_and(|f| !f.local.contains_key(gid))
    }

    pub(super) fn local_entity(&mut self, gid: &SessionId, kind: EntityKind, announce: bool) {
        let Some(f) = &mut self.fed else {
            self.solo.insert(gid.clone(), kind);
            return;
        };
        let fresh = !f.local.contains_key(gid);
        let e = f.local.entry(gid.clone()).or_insert((kind, false));
        e.1 |= announce;
        if fresh && f.broker_up {
            let t = slice(&self.cfg, f, &[(gid.clone(), kind)], false);
            self.out.push_back(Output::Broker(BrokerOp::Declare(t)));
        }
        if announce {
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
            .is_some_and(|(k, _)| *k != EntityKind::Member)
        {
            return;
        }
        f.unsent.remove(gid);
        if f.local.remove(gid).is_some() {
            f.roster.forget(gid);
            f.groups.remove(gid);
            let name = f.names.inbox(gid);
            self.out
                .push_back(Output::Broker(BrokerOp::DeleteQueue { name }));
        }
    }

    // ---- publishing ----------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn envelope(
        &mut self,
        kind: Kind,
        from: &SessionId,
        to: String,
        re: Option<MsgId>,
        turn_id: Option<TurnId>,
        outcome: Option<Outcome>,
        body: Vec<u8>,
        ttl_ms: u64,
        trace: Option<TraceId>,
    ) -> Envelope {
        let ts = self.unix_now();
        let msg_id = self.ids.msg();
        let trace_id = trace.unwrap_or_else(|| self.ids.trace());
        Envelope {
            v: VERSION,
            kind,
            msg_id,
            trace_id,
            from: from.clone(),
            to,
            signer: HostId::new(""),
            re,
            turn_id,
            spawn_id: None,
            outcome,
            ts,
            expires_at: ts.saturating_add(ttl_ms),
            sig: None,
            body,
        }
    }

    /// Signs and publishes. Returns the publish id, or `None` with the broker down.
    fn publish(&mut self, exchange: Exchange, mut env: Envelope) -> Option<PublishId> {
        let f = self.fed.as_mut()?;
        if !f.broker_up {
            return None;
        }
        f.cfg.keyring.sign(&mut env);
        f.next_publish += 1;
        let publish = PublishId(f.next_publish);
        let mandatory = env.kind != Kind::Broadcast;
        let persistent = matches!(
            env.kind,
            Kind::Send | Kind::Reply | Kind::Failed | Kind::Abandoned | Kind::Spawn
        );
        self.out.push_back(Output::Broker(BrokerOp::Publish {
            publish,
            exchange,
            key: env.to.clone(),
            mandatory,
            persistent,
            headers: env.to_headers(),
            body: env.body,
        }));
        Some(publish)
    }

    /// Acks `delivery` if it belongs to the live connection (a tag from an earlier one died
    /// with it; the broker has requeued that copy).
    pub(super) fn ack_if_current(&mut self, delivery: DeliveryId) {
        if self
            .fed
            .as_ref()
            .is_some_and(|f| f.broker_up && f.generation == delivery.generation)
        {
            self.ack(delivery);
        }
    }

    /// The planted `AckAfterInject` bug's ack, once the brief's turn has ended.
    pub(super) fn late_ack(&mut self, msg: MsgId) {
        if let Some(d) = self.fed.as_mut().and_then(|f| f.late_acks.remove(&msg)) {
            self.ack_if_current(d);
        }
    }

    fn ack(&mut self, delivery: DeliveryId) {
        self.out
            .push_back(Output::Broker(BrokerOp::Ack { delivery }));
    }

    fn reject(&mut self, delivery: DeliveryId, queue: &str, code: &str, detail: String) {
        self.out
            .push_back(Output::Broker(BrokerOp::Reject { delivery }));
        self.event(Event::Rejected {
            queue: queue.to_string(),
            code: code.to_string(),
            detail,
        });
    }

    // ---- sender side: delegating across hosts ----------------------------------------------

    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_remote(
        &mut self,
        now: Instant,
        call: CallId,
        caller: &Principal,
        target: SessionId,
        content: String,
        wait: bool,
        timeout: Duration,
    ) {
        let Some(from) = caller.session.clone().filter(|s| !self.is_remote(s)) else {
            return self.invalid(
                call,
                "this caller is not attached to the gateway, so it has no inbox for the reply",
            );
        };
        let up = self.fed.as_ref().is_some_and(|f| f.broker_up);
        if !up {
            return self.respond(call, Response::Error(CallError::BrokerUnavailable));
        }
        let inject_ms = self.cfg.injected_timeout_ms;
        let env = self.envelope(
            Kind::Send,
            &from,
            target.to_string(),
            None,
            None,
            None,
            content.into_bytes(),
            inject_ms,
            None,
        );
        let msg = env.msg_id;
        let Some(publish) = self.publish(Exchange::Msg, env) else {
            return self.respond(call, Response::Error(CallError::BrokerUnavailable));
        };
        self.stats.sends_total += 1;
        let ticket = self.ids.ticket();
        if let Some(f) = &mut self.fed {
            f.publishes.insert(publish, Pending::Delegation(ticket));
            f.remote_waiters.insert(msg, ticket);
        }
        self.open_delegation(now, call, ticket, &target, msg, caller, wait, timeout);
        if let Some(d) = self.delegations.get_mut(&ticket) {
            d.remote = Some(RemoteBrief::Sent);
        }
        let by = now + Duration::from_millis(inject_ms + self.cfg.clock_skew_ms);
        self.timers.insert((by, TimerKind::InjectBy(ticket)));
    }

    /// No INJECTED within the bound: a loud, fast failure, not a send-length silence.
    pub(super) fn on_inject_by(&mut self, now: Instant, ticket: TicketId) {
        let pending = self
            .delegations
            .get(&ticket)
            .is_some_and(|d| d.remote == Some(RemoteBrief::Sent));
        if pending {
            let why = format!(
                "not injected within {} ms: the worker's gateway did not confirm delivery",
                self.cfg.injected_timeout_ms
            );
            self.finish(now, ticket, Outcome::WorkerFailed, Some(why), None);
        }
    }

    pub(super) fn forget_remote_waiter(&mut self, msg: MsgId) {
        if let Some(f) = &mut self.fed {
            f.remote_waiters.remove(&msg);
        }
    }

    /// The worker on another host whose open question `turn` is.
    pub(super) fn remote_asker(&self, turn: TurnId) -> Option<SessionId> {
        Some(self.fed.as_ref()?.remote_asks.get(&turn)?.worker.clone())
    }

    pub(super) fn is_remote_ask(&self, turn: TurnId) -> bool {
        self.fed
            .as_ref()
            .is_some_and(|f| f.remote_asks.contains_key(&turn))
    }

    /// A lead answers a question asked by a worker on another host: ANSWER goes to the
    /// worker's inbox; the worker's gateway injects it only if that turn still waits.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn answer_remote(
        &mut self,
        now: Instant,
        call: CallId,
        caller: &Principal,
        turn: TurnId,
        content: String,
        wait: bool,
        timeout: Duration,
    ) {
        let up = self.fed.as_ref().is_some_and(|f| f.broker_up);
        if !up {
            return self.respond(call, Response::Error(CallError::BrokerUnavailable));
        }
        let Some(ask) = self.fed.as_mut().and_then(|f| f.remote_asks.remove(&turn)) else {
            return;
        };
        let Some(from) = caller.session.clone() else {
            return self.invalid(call, "this caller has no identity to answer from");
        };
        let ttl = self.cfg.ask_timeout_ms;
        let env = self.envelope(
            Kind::Answer,
            &from,
            ask.worker.to_string(),
            None,
            Some(turn),
            None,
            content.into_bytes(),
            ttl,
            None,
        );
        let (msg, unix) = (env.msg_id, env.ts);
        let Some(publish) = self.publish(Exchange::Msg, env) else {
            return self.respond(call, Response::Error(CallError::BrokerUnavailable));
        };
        let ticket_for_publish = self
            .asking_tickets
            .get(&turn)
            .copied()
            .unwrap_or_else(|| self.ids.ticket());
        if let Some(f) = &mut self.fed {
            f.publishes
                .insert(publish, Pending::Delegation(ticket_for_publish));
        }
        if let Some(ticket) = self.asking_tickets.remove(&turn) {
            // A paused async ticket resumes, now waiting on the answer's continuation.
            if let Some(d) = self.delegations.get_mut(&ticket) {
                d.asking = None;
                d.msg = msg;
                d.deadline = now + timeout;
                self.timers
                    .insert((d.deadline, TimerKind::SendDeadline(ticket)));
            }
            if let Some(f) = &mut self.fed {
                f.remote_waiters.insert(msg, ticket);
            }
            if let Some(t) = self.tickets.get_mut(&ticket) {
                t.phase = Phase::Pending;
                t.question = None;
                t.turn_id = None;
            }
            if let Some(t) = self.tickets.get(&ticket) {
                let view = super::ticket_view(ticket, t);
                self.respond(call, Response::Ticket(view));
            }
            return;
        }
        self.stats.sends_total += 1;
        let ticket = ticket_for_publish;
        if let Some(f) = &mut self.fed {
            f.remote_waiters.insert(msg, ticket);
        }
        self.open_delegation(now, call, ticket, &ask.worker, msg, caller, wait, timeout);
        if let Some(d) = self.delegations.get_mut(&ticket) {
            // An answer is not typed into a pane: no INJECTED is expected for it.
            d.remote = Some(RemoteBrief::Typed { at_unix: unix });
        }
    }

    // ---- worker side: the turn owner -------------------------------------------------------

    /// A brief from another host was typed: tell its sender.
    pub(super) fn remote_injected(&mut self, _now: Instant, target: &SessionId, msg: MsgId) {
        let Some(ticket) = self.rendezvous.waiter(target, msg).map(|w| w.ticket) else {
            return;
        };
        let Some(Mode::Remote { reply_to, re }) =
            self.delegations.get(&ticket).map(|d| d.mode.clone())
        else {
            return;
        };
        let ttl = self.cfg.reply_ttl_ms;
        let env = self.envelope(
            Kind::Injected,
            target,
            reply_to.to_string(),
            Some(re),
            None,
            None,
            Vec::new(),
            ttl,
            None,
        );
        self.publish(Exchange::Msg, env);
    }

    /// The worker-side proxy ended: REPLY for a reply or a completion, FAILED otherwise.
    pub(super) fn publish_outcome(
        &mut self,
        _now: Instant,
        worker: &SessionId,
        reply_to: &SessionId,
        re: MsgId,
        outcome: Outcome,
        body: Option<String>,
    ) {
        let kind = match outcome {
            Outcome::Replied | Outcome::CompletedUnreplied => Kind::Reply,
            _ => Kind::Failed,
        };
        let ttl = self.cfg.reply_ttl_ms;
        let env = self.envelope(
            kind,
            worker,
            reply_to.to_string(),
            Some(re),
            None,
            Some(outcome),
            body.unwrap_or_default().into_bytes(),
            ttl,
            None,
        );
        let call = self.fed.as_mut().and_then(|f| f.reply_call.take());
        let sent = Unsent {
            turn: self.turns.get(worker).copied(),
            to: reply_to.clone(),
            re: Some(re),
            msg_id: env.msg_id,
            trace_id: env.trace_id,
        };
        match (self.publish(Exchange::Msg, env), call) {
            (Some(publish), Some(call)) => self.pending(
                publish,
                Pending::MemberReply {
                    call,
                    held: None,
                    member: worker.clone(),
                    sent,
                },
            ),
            (Some(publish), None) => self.pending(
                publish,
                Pending::Report {
                    to: reply_to.clone(),
                    kind,
                },
            ),
            (None, Some(call)) => self.reply_unsent(call, worker, sent),
            (None, None) => self.event(Event::Undelivered {
                kind: kind.to_string(),
                to: reply_to.clone(),
                why: "the broker is down".into(),
            }),
        }
    }

    /// Reports a brief's failure to its sender (no member call involved).
    fn publish_outcome_report(
        &mut self,
        worker: &SessionId,
        reply_to: &SessionId,
        re: MsgId,
        outcome: Outcome,
        why: String,
    ) {
        let now = self.now;
        self.publish_outcome(now, worker, reply_to, re, outcome, Some(why));
    }

    /// The member's reply resolves a delegation from another host: it is answered once the
    /// report is confirmed (see `Pending::MemberReply`).
    pub(super) fn answer_reply_on_confirm(&mut self, call: CallId) {
        if let Some(f) = &mut self.fed {
            f.reply_call = Some(call);
        }
    }

    fn pending(&mut self, publish: PublishId, what: Pending) {
        if let Some(f) = &mut self.fed {
            f.publishes.insert(publish, what);
        }
    }

    /// The member asked mid-turn in a delegation from another host: ASK goes to the lead;
    /// the member stays parked until ANSWER, NO_WAITER or its ask timeout.
    pub(super) fn publish_ask(
        &mut self,
        _now: Instant,
        worker: &SessionId,
        reply_to: &SessionId,
        re: MsgId,
        turn: TurnId,
        question: String,
    ) {
        let ttl = self.cfg.ask_timeout_ms;
        let env = self.envelope(
            Kind::Ask,
            worker,
            reply_to.to_string(),
            Some(re),
            Some(turn),
            None,
            question.into_bytes(),
            ttl,
            None,
        );
        if self.publish(Exchange::Msg, env).is_none() {
            // Nobody can be asked: close the ask as NO_WAITER so the member is not left parked.
            self.close_remote_ask(turn, AskOutcome::NoWaiter);
        }
    }

    /// A member replied with no waiter, and the lead that last delegated to it is on another
    /// host: the reply goes to that lead's inbox, where it is held until drained (U3).
    pub(super) fn reply_to_remote_lead(
        &mut self,
        _now: Instant,
        call: CallId,
        member: &SessionId,
        lead: &SessionId,
        content: String,
    ) {
        let sent = Unsent {
            turn: self.turns.get(member).copied(),
            to: lead.clone(),
            re: None,
            msg_id: self.ids.msg(),
            trace_id: self.ids.trace(),
        };
        self.publish_member_reply(call, member, sent, content);
    }

    /// A member's reply retried after its publish failed: true if this turn has one (see
    /// `Unsent`), which then goes out again under its first msgId.
    pub(super) fn retry_unsent_reply(
        &mut self,
        call: CallId,
        member: &SessionId,
        content: &str,
    ) -> bool {
        let turn = self.turns.get(member).copied();
        let Some(f) = &mut self.fed else { return false };
        let Some(sent) = f.unsent.remove(member) else {
            return false;
        };
        if sent.turn != turn {
            return false;
        }
        self.publish_member_reply(call, member, sent, content.to_string());
        true
    }

    /// Publishes a member's REPLY as `sent` names it; the member is answered at the confirm.
    fn publish_member_reply(
        &mut self,
        call: CallId,
        member: &SessionId,
        sent: Unsent,
        content: String,
    ) {
        let ttl = self.cfg.reply_ttl_ms;
        let mut env = self.envelope(
            Kind::Reply,
            member,
            sent.to.to_string(),
            sent.re,
            None,
            Some(Outcome::Replied),
            content.into_bytes(),
            ttl,
            Some(sent.trace_id),
        );
        env.msg_id = sent.msg_id;
        // A reply to a delegation resolved its waiter here already: nothing is held.
        let held = sent.re.is_none().then_some(ReplyId(sent.msg_id.0));
        match self.publish(Exchange::Msg, env) {
            Some(publish) => self.pending(
                publish,
                Pending::MemberReply {
                    call,
                    held,
                    member: member.clone(),
                    sent,
                },
            ),
            None => self.reply_unsent(call, member, sent),
        }
    }

    /// The broker does not have the member's reply: the member hears so, and may try again.
    fn reply_unsent(&mut self, call: CallId, member: &SessionId, sent: Unsent) {
        if let Some(f) = &mut self.fed {
            // A failed reply to the delegation outranks a failed stranded one of the same turn
            // (a second `fleet_reply` made while the first awaited its confirm): the retry
            // must still carry `re`.
            let keep = f
                .unsent
                .get(member)
                .is_some_and(|old| old.re.is_some() && sent.re.is_none() && old.turn == sent.turn);
            if !keep {
                f.unsent.insert(member.clone(), sent);
            }
        }
        self.respond(call, Response::Error(CallError::BrokerUnavailable));
    }

    fn close_remote_ask(&mut self, turn: TurnId, outcome: AskOutcome) {
        let Some(ask) = self.rendezvous.close_ask(turn) else {
            return;
        };
        self.end_ask(&ask, turn, outcome, None);
        // Nobody is waiting on this proxy any more: it ends without a message.
        if let Some(ticket) = self.asking_tickets.remove(&turn) {
            self.delegations.remove(&ticket);
        }
    }

    /// `fleet_stop` of a member on this host: its pane is closed; delegations from other hosts
    /// are reported ABANDONED, local ones end WORKER_FAILED; the inbox goes when the pane does.
    pub(super) fn on_stop(&mut self, now: Instant, call: CallId, target: SessionId) {
        if self.is_remote(&target) {
            return self.invalid(call, "stop a member through the gateway of its own host");
        }
        self.abandon(now, |d| d.target == target, "stopped by its lead");
        self.out.push_back(Output::ClosePane {
            gid: target.clone(),
        });
        self.respond(call, Response::Stopped { target });
    }

    /// Graceful shutdown (CB-516 abandon on teardown).
    pub(super) fn abandon_all(&mut self, now: Instant) {
        self.abandon(now, |_| true, "its host's gateway shut down");
    }

    fn abandon(&mut self, now: Instant, which: impl Fn(&Delegation) -> bool, why: &str) {
        let hit: Vec<TicketId> = self
            .delegations
            .iter()
            .filter(|(_, d)| which(d))
            .map(|(t, _)| *t)
            .collect();
        for ticket in hit {
            let Some(d) = self.delegations.get(&ticket) else {
                continue;
            };
            match d.mode.clone() {
                Mode::Remote { reply_to, re } => {
                    let (target, msg) = (d.target.clone(), d.msg);
                    self.delegations.remove(&ticket);
                    // Told ABANDONED, the brief must not be typed after all.
                    self.injector
                        .withdraw(&target, msg, crate::injector::Cause::PaneGone);
                    self.rendezvous
                        .take(&target, msg, crate::rendezvous::Kind::Failed);
                    let ttl = self.cfg.reply_ttl_ms;
                    let env = self.envelope(
                        Kind::Abandoned,
                        &target,
                        reply_to.to_string(),
                        Some(re),
                        None,
                        None,
                        why.as_bytes().to_vec(),
                        ttl,
                        None,
                    );
                    self.publish(Exchange::Msg, env);
                    self.event(Event::Resolved {
                        ticket,
                        target,
                        outcome: Outcome::WorkerFailed,
                    });
                }
                _ if self.fed.is_none() || !self.is_remote(&d.target) => {
                    let (target, msg) = (d.target.clone(), d.msg);
                    self.injector
                        .withdraw(&target, msg, crate::injector::Cause::PaneGone);
                    self.rendezvous
                        .take(&target, msg, crate::rendezvous::Kind::Failed);
                    self.finish(
                        now,
                        ticket,
                        Outcome::WorkerFailed,
                        Some(why.to_string()),
                        None,
                    );
                }
                _ => {}
            }
        }
    }

    // ---- the broker ------------------------------------------------------------------------

    pub(super) fn on_broker(&mut self, now: Instant, ev: BrokerEvent) {
        match ev {
            BrokerEvent::Up { generation } => self.on_broker_up(now, generation),
            BrokerEvent::Down => self.on_broker_down(now),
            BrokerEvent::Published { publish, result } => {
                let spawn = match &result {
                    PublishResult::Unroutable => self.spawn_unroutable(publish),
                    PublishResult::Failed(_) => self.spawn_published(publish, true),
                    PublishResult::Routed => self.spawn_published(publish, false),
                };
                if spawn {
                    return;
                }
                let what = self.fed.as_mut().and_then(|f| f.publishes.remove(&publish));
                if let Some(what) = what {
                    self.confirmed(now, what, result);
                }
            }
            BrokerEvent::Delivery {
                delivery,
                queue,
                routing_key,
                redelivered,
                headers,
                body,
            } => {
                let current = self
                    .fed
                    .as_ref()
                    .is_some_and(|f| f.broker_up && f.generation == delivery.generation);
                if !current {
                    // A delivery of a dead connection: its tag is void and the broker has
                    // requeued it for the next generation.
                    return self.event(Event::Stale {
                        what: format!("delivery {delivery} of an old connection"),
                        target: SessionId::new(&queue),
                    });
                }
                self.on_delivery(
                    now,
                    delivery,
                    &queue,
                    &routing_key,
                    redelivered,
                    &headers,
                    body,
                )
            }
        }
    }

    fn on_broker_up(&mut self, now: Instant, generation: u32) {
        let cfg = self.cfg.clone();
        let Some(f) = &mut self.fed else { return };
        f.broker_up = true;
        f.generation = generation;
        f.roster.heard_again(now);
        let gids: Vec<(SessionId, EntityKind)> =
            f.local.iter().map(|(g, (k, _))| (g.clone(), *k)).collect();
        let t = slice(&cfg, f, &gids, true);
        let (arm_presence, arm_sweep) = (!f.presence_armed, !f.sweep_armed);
        f.presence_armed = true;
        f.sweep_armed = true;
        self.out.push_back(Output::Broker(BrokerOp::Declare(t)));
        if arm_presence {
            self.timers.insert((now, TimerKind::Presence));
        }
        if arm_sweep {
            self.timers.insert((
                now + Duration::from_millis(cfg.held_sweep_interval_ms),
                TimerKind::HeldSweep,
            ));
        }
    }

    /// Held deliveries lose their tags (the broker requeues them for the next generation);
    /// publishes awaiting a confirm are failed — nothing is buffered on the broker's behalf.
    fn on_broker_down(&mut self, now: Instant) {
        let Some(f) = &mut self.fed else { return };
        f.broker_up = false;
        // Their tags died with the connection; the broker redelivers them.
        f.parked.clear();
        for h in f.held.values_mut() {
            h.delivery = None;
        }
        let pending: Vec<Pending> = std::mem::take(&mut f.publishes).into_values().collect();
        for what in pending {
            self.confirmed(
                now,
                what,
                PublishResult::Failed("the connection closed".into()),
            );
        }
        self.spawns_broker_down();
    }

    /// A publish's fate, as the confirm (or its absence) tells it.
    fn confirmed(&mut self, now: Instant, what: Pending, result: PublishResult) {
        match (what, result) {
            (Pending::MemberReply { call, held, .. }, PublishResult::Routed) => {
                self.respond(call, Response::ReplyAccepted { held })
            }
            (_, PublishResult::Routed) => {}
            (Pending::Delegation(ticket), PublishResult::Unroutable) => {
                let target = self.delegations.get(&ticket).map(|d| d.target.clone());
                if let Some(target) = target {
                    self.fail_call(now, ticket, CallError::NoSuchRecipient { target });
                }
            }
            (Pending::Delegation(ticket), PublishResult::Failed(_)) => {
                self.fail_call(now, ticket, CallError::BrokerUnavailable)
            }
            (Pending::MemberReply { call, sent, .. }, PublishResult::Unroutable) => self.respond(
                call,
                Response::Error(CallError::NoSuchRecipient { target: sent.to }),
            ),
            (
                Pending::MemberReply {
                    call, member, sent, ..
                },
                PublishResult::Failed(_),
            ) => self.reply_unsent(call, &member, sent),
            (Pending::Report { to, kind }, r) => self.event(Event::Undelivered {
                kind: kind.to_string(),
                to,
                why: match r {
                    PublishResult::Unroutable => "no inbox is bound to its sender any more".into(),
                    PublishResult::Failed(why) => why,
                    PublishResult::Routed => String::new(),
                },
            }),
        }
    }

    /// Ends a delegation with a call error: an error answer for a blocking call, a FAILED
    /// ticket (saying why) for an async one.
    fn fail_call(&mut self, now: Instant, ticket: TicketId, err: CallError) {
        let Some(d) = self.delegations.get(&ticket) else {
            return;
        };
        match d.mode {
            Mode::Blocking(call) => {
                let target = d.target.clone();
                let msg = d.msg;
                self.delegations.remove(&ticket);
                self.forget_remote_waiter(msg);
                self.event(Event::Resolved {
                    ticket,
                    target,
                    outcome: Outcome::WorkerFailed,
                });
                self.respond(call, Response::Error(err));
            }
            _ => self.finish(
                now,
                ticket,
                Outcome::WorkerFailed,
                Some(err.to_string()),
                None,
            ),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_delivery(
        &mut self,
        now: Instant,
        delivery: DeliveryId,
        queue: &str,
        routing_key: &str,
        redelivered: bool,
        headers: &Headers,
        body: Vec<u8>,
    ) {
        let unix = self.unix_now();
        let Some(f) = &mut self.fed else { return };
        if queue == f.names.dlq() {
            return self.on_dead_letter(now, delivery, headers, body);
        }
        // Checked first: a body this size is refused before anything hashes or copies it.
        if body.len() > self.cfg.max_body_bytes {
            let why = format!(
                "a body of {} bytes exceeds max_body_bytes ({})",
                body.len(),
                self.cfg.max_body_bytes
            );
            return self.reject(delivery, queue, "oversized", why);
        }
        let Some(f) = &mut self.fed else { return };
        let (roster, keyring) = (&f.roster, &f.cfg.keyring);
        let roster_queue = queue == f.names.roster(&f.cfg.host);
        let kept = (!roster_queue).then(|| body.clone());
        let admitted = admit_in(
            keyring,
            headers,
            body,
            routing_key,
            queue,
            unix,
            |g| roster.host_of(now, g),
            (!redelivered).then_some(&mut f.seen),
        );
        let env = match admitted {
            Ok(env) => env,
            // Nothing binds the sender to a host *yet*: wait for its presence (bounded).
            Err(crate::admission::Rejection::NotOnSigningHost {
                from, roster: None, ..
            }) if kept.is_some() => {
                f.parked.push(Parked {
                    from,
                    since: now,
                    delivery: BrokerEvent::Delivery {
                        delivery,
                        queue: queue.to_string(),
                        routing_key: routing_key.to_string(),
                        redelivered,
                        headers: headers.clone(),
                        body: kept.unwrap_or_default(),
                    },
                    tag: delivery,
                    queue: queue.to_string(),
                });
                return;
            }
            Err(r) => return self.reject(delivery, queue, r.code(), r.to_string()),
        };
        // A SPAWN is at-least-once (acked once its member is ready or failed): a broker
        // redelivery of one goes to the spawn dedup (registry, then reservation), not here.
        if redelivered
            && env.kind.replay_guarded()
            && env.kind != Kind::Spawn
            && !self.cfg.planted(PlantedBug::AckAfterInject)
        {
            return self.on_forward_redelivery(delivery, queue, env);
        }
        let Some(f) = &mut self.fed else { return };
        let control = queue == f.names.control(&f.cfg.host);
        let roster_q = queue == f.names.roster(&f.cfg.host);
        let inbox_of = f.names.inbox_gid(queue).filter(|g| f.local.contains_key(g));
        // Point-to-point kinds must be addressed to the inbox they arrived in.
        let inbox = inbox_of.as_ref().is_some_and(|g| g.as_str() == env.to);
        if control && !f.cfg.control_allowlist.contains(&env.signer) {
            let why = format!("{} may not send control to this host", env.signer);
            return self.reject(delivery, queue, "not_allowed", why);
        }
        match env.kind {
            Kind::Spawn if control => {
                if let Err(why) = self.on_spawn_message(now, delivery, env) {
                    self.ack(delivery);
                    self.event(Event::Rejected {
                        queue: queue.to_string(),
                        code: "malformed".into(),
                        detail: why,
                    });
                }
            }
            Kind::Broadcast if inbox_of.is_some() => {
                let member = inbox_of.unwrap_or_else(|| SessionId::new(""));
                self.on_broadcast_copy(now, delivery, queue, &member, env)
            }
            Kind::Presence if roster_q => self.on_presence(now, delivery, queue, env),
            Kind::Send if inbox => self.on_brief(now, delivery, queue, env),
            Kind::Answer if inbox => {
                self.ack(delivery);
                self.on_answer_message(now, env);
            }
            Kind::Reply if inbox => self.on_reply_message(now, delivery, env),
            Kind::Failed | Kind::Abandoned if inbox => {
                self.ack(delivery);
                self.on_failed_message(now, env);
            }
            Kind::Injected if inbox => {
                self.ack(delivery);
                let ticket = env
                    .re
                    .and_then(|re| self.fed.as_ref()?.remote_waiters.get(&re).copied());
                if let Some(d) = ticket.and_then(|t| self.delegations.get_mut(&t)) {
                    d.remote = Some(RemoteBrief::Typed { at_unix: env.ts });
                }
            }
            Kind::Ask if inbox => {
                self.ack(delivery);
                self.on_ask_message(now, env);
            }
            Kind::NoWaiter if inbox => {
                self.ack(delivery);
                if let Some(turn) = env.turn_id {
                    self.close_remote_ask(turn, AskOutcome::NoWaiter);
                }
            }
            Kind::TooLate if inbox => {
                self.ack(delivery);
                let ticket = env
                    .re
                    .and_then(|re| self.fed.as_ref()?.remote_waiters.get(&re).copied());
                if let Some(ticket) = ticket {
                    let why = "the turn was no longer waiting when the answer arrived".to_string();
                    self.finish(now, ticket, Outcome::StaleTurn, Some(why), env.turn_id);
                }
            }
            kind if control => self.reject(
                delivery,
                queue,
                "unsupported",
                format!("{kind} on the control queue is not handled yet"),
            ),
            kind => self.reject(
                delivery,
                queue,
                "misrouted",
                format!("{kind} has no meaning on {queue}"),
            ),
        }
    }

    /// A forward-path message the broker redelivers: our ack was lost with a connection (or
    /// this gateway restarted). It may already have been typed, so it is never typed again:
    /// acked, and — unless we know we handled it — its sender is told it may have been lost.
    fn on_forward_redelivery(&mut self, delivery: DeliveryId, queue: &str, env: Envelope) {
        self.ack(delivery);
        let handled = self
            .fed
            .as_ref()
            .is_some_and(|f| f.seen.contains_scoped(env.msg_id, queue));
        if handled {
            return;
        }
        let to = SessionId::new(&env.to);
        let why = "redelivered after a lost ack: it may already have been typed, so it was not \
                   typed again"
            .to_string();
        match env.kind {
            Kind::Send => {
                self.publish_outcome_report(&to, &env.from, env.msg_id, Outcome::WorkerFailed, why);
            }
            Kind::Answer => {
                let ttl = self.cfg.reply_ttl_ms;
                let late = self.envelope(
                    Kind::TooLate,
                    &to,
                    env.from.to_string(),
                    Some(env.msg_id),
                    env.turn_id,
                    None,
                    why.into_bytes(),
                    ttl,
                    Some(env.trace_id),
                );
                self.publish(Exchange::Msg, late);
            }
            _ => {}
        }
    }

    fn on_presence(&mut self, now: Instant, delivery: DeliveryId, queue: &str, env: Envelope) {
        match Presence::from_body(&env.body) {
            Ok(p) => {
                self.ack(delivery);
                let Some(f) = &mut self.fed else { return };
                if f.local.contains_key(&env.from) && env.signer != f.cfg.host {
                    // Another host claims a gid served here: ours stands.
                    let why = format!("{} claims {}, which this host serves", env.signer, env.from);
                    return self.event(Event::Rejected {
                        queue: queue.to_string(),
                        code: "gid_claimed".into(),
                        detail: why,
                    });
                }
                let since = p.since.unwrap_or(0);
                let restarted = f.roster.observe(now, &env.signer, &env.from, p);
                if restarted {
                    self.peer_restarted(now, &env.signer, since);
                }
                self.spawn_seen(&env.from, &env.signer);
                self.unpark(now, &env.from);
            }
            Err(e) => self.reject(delivery, queue, "malformed", format!("presence body: {e}")),
        }
    }

    /// `host`'s gateway restarted: the turn records of the briefs it had typed went with its
    /// soft state, so nothing there will ever end our waiters on them. They end now, loudly,
    /// instead of at their send timeout (CB-308 §7 item 7: the waiter hangs longest exactly
    /// when the worker's gateway dies). A brief it had not confirmed is left to `InjectBy`: it
    /// may still be in the worker's queue, for the new process to type.
    fn peer_restarted(&mut self, now: Instant, host: &HostId, since: u64) {
        self.event(Event::PeerRestarted { host: host.clone() });
        let Some(f) = &self.fed else { return };
        let on_host: BTreeSet<SessionId> = self
            .delegations
            .values()
            .map(|d| d.target.clone())
            .filter(|t| f.roster.host_of(now, t).as_ref() == Some(host))
            .collect();
        let why = format!(
            "{host}'s gateway restarted while the brief was being worked on; the turn's \
             record was lost there, so a reply the member still makes is held on {host}"
        );
        let lost = |d: &Delegation| {
            on_host.contains(&d.target)
                && matches!(d.remote, Some(RemoteBrief::Typed { at_unix }) if at_unix < since)
        };
        self.fail_typed_briefs(now, lost, &why);
    }

    /// Ends with WORKER_FAILED each of our own delegations to another host that `which`
    /// picks and whose brief that host confirmed typing (INJECTED), unless it is paused on a
    /// question (the lead holds that one).
    fn fail_typed_briefs(&mut self, now: Instant, which: impl Fn(&Delegation) -> bool, why: &str) {
        let tickets: Vec<TicketId> = self
            .delegations
            .iter()
            .filter(|(_, d)| {
                matches!(d.remote, Some(RemoteBrief::Typed { .. }))
                    && d.asking.is_none()
                    && !matches!(d.mode, Mode::Remote { .. })
                    && which(d)
            })
            .map(|(t, _)| *t)
            .collect();
        for ticket in tickets {
            self.finish(
                now,
                ticket,
                Outcome::WorkerFailed,
                Some(why.to_string()),
                None,
            );
        }
    }

    /// `gid`'s presence arrived: what waited for it is admitted again, in arrival order.
    fn unpark(&mut self, now: Instant, gid: &SessionId) {
        let Some(f) = &mut self.fed else { return };
        if !f.parked.iter().any(|p| &p.from == gid) {
            return;
        }
        let (ready, rest): (Vec<Parked>, Vec<Parked>) = std::mem::take(&mut f.parked)
            .into_iter()
            .partition(|p| &p.from == gid);
        f.parked = rest;
        for p in ready {
            self.on_broker(now, p.delivery);
        }
    }

    /// Parked deliveries whose sender never showed up within the presence TTL are rejected
    /// with the reason they were parked for.
    fn expire_parked(&mut self, now: Instant) {
        let ttl = Duration::from_millis(self.cfg.presence_ttl_ms);
        let Some(f) = &mut self.fed else { return };
        let (late, rest): (Vec<Parked>, Vec<Parked>) = std::mem::take(&mut f.parked)
            .into_iter()
            .partition(|p| p.since + ttl <= now);
        f.parked = rest;
        for p in late {
            let why = format!(
                "no signed presence binds {} to a host within {} ms",
                p.from, self.cfg.presence_ttl_ms
            );
            self.reject(p.tag, &p.queue, "sender_not_on_signing_host", why);
        }
    }

    /// The forward path (at-most-once): ack first — a redelivered brief can never be typed
    /// twice — then the status-gated inject; INJECTED follows once it lands.
    fn on_brief(&mut self, now: Instant, delivery: DeliveryId, queue: &str, env: Envelope) {
        let Ok(text) = String::from_utf8(env.body.clone()) else {
            return self.reject(delivery, queue, "malformed", "body is not UTF-8".into());
        };
        if self.cfg.planted(PlantedBug::AckAfterInject) {
            if let Some(f) = &mut self.fed {
                f.late_acks.insert(env.msg_id, delivery);
            }
        } else {
            self.ack(delivery);
        }
        let target = SessionId::new(&env.to);
        let busy = self.rendezvous.has_waiter(&target) || self.paused_ticket_on(&target);
        if busy || text.trim().is_empty() {
            let (outcome, why) = if busy {
                (
                    Outcome::Busy,
                    format!("{target} already has an open delegation"),
                )
            } else {
                (Outcome::WorkerFailed, "empty brief".to_string())
            };
            return self.publish_outcome(now, &target, &env.from, env.msg_id, outcome, Some(why));
        }
        let ticket = self.ids.ticket();
        let msg = env.msg_id;
        // Typed by the brief's own lifetime, measured from its arrival on this host's clock
        // (never from the two hosts' wall clocks against each other), less the skew
        // allowance, and never longer than this host's own bound.
        let lifetime = env
            .expires_at
            .saturating_sub(env.ts)
            .min(self.cfg.injected_timeout_ms)
            .saturating_sub(self.cfg.clock_skew_ms);
        let deadline = now + Duration::from_millis(lifetime);
        self.delegator_of.insert(msg, env.from.clone());
        self.rendezvous.open(&target, msg, ticket);
        self.injector.enqueue(&target, msg, text);
        self.delegations.insert(
            ticket,
            Delegation {
                target: target.clone(),
                msg,
                lead: None,
                mode: Mode::Remote {
                    reply_to: env.from.clone(),
                    re: env.msg_id,
                },
                deadline,
                asking: None,
                remote: None,
            },
        );
        self.timers
            .insert((deadline, TimerKind::SendDeadline(ticket)));
        self.event(Event::Enqueued {
            ticket: Some(ticket),
            target: target.clone(),
            msg,
        });
        self.out.push_back(Output::PollStatus { target });
    }

    /// One copy of a broadcast, in one member's inbox: the forward path's rules (ack first,
    /// status-gated, FIFO with everything else queued for it) without a waiter — replies to a
    /// broadcast are ordinary replies to its sender.
    fn on_broadcast_copy(
        &mut self,
        _now: Instant,
        delivery: DeliveryId,
        queue: &str,
        member: &SessionId,
        env: Envelope,
    ) {
        let Ok(text) = String::from_utf8(env.body.clone()) else {
            return self.reject(delivery, queue, "malformed", "body is not UTF-8".into());
        };
        self.ack(delivery);
        if text.trim().is_empty() {
            return;
        }
        let msg = self.ids.msg();
        self.delegator_of.insert(msg, env.from.clone());
        self.injector.enqueue(member, msg, text);
        self.event(Event::Enqueued {
            ticket: None,
            target: member.clone(),
            msg,
        });
        self.out.push_back(Output::PollStatus {
            target: member.clone(),
        });
    }

    /// ANSWER for a member's ask: delivered into the ask only if that turn still waits, and
    /// only from the lead it was asked of; otherwise dropped and the sender told TOO_LATE.
    fn on_answer_message(&mut self, now: Instant, env: Envelope) {
        let worker = SessionId::new(&env.to);
        let waiting = env.turn_id.and_then(|turn| {
            let ask = self.rendezvous.ask(turn)?;
            let ticket = *self.asking_tickets.get(&turn)?;
            let asked_of = match &self.delegations.get(&ticket)?.mode {
                Mode::Remote { reply_to, .. } => reply_to.clone(),
                _ => return None,
            };
            (ask.session == worker && asked_of == env.from).then_some((turn, ticket))
        });
        let Some((turn, ticket)) = waiting else {
            if self.cfg.planted(PlantedBug::AnswerWithoutTurnCheck) && self.is_live_member(&worker)
            {
                let answer = String::from_utf8_lossy(&env.body).into_owned();
                self.injector.enqueue(&worker, env.msg_id, answer);
                self.out.push_back(Output::PollStatus { target: worker });
                return;
            }
            let ttl = self.cfg.reply_ttl_ms;
            let late = self.envelope(
                Kind::TooLate,
                &worker,
                env.from.to_string(),
                Some(env.msg_id),
                env.turn_id,
                None,
                Vec::new(),
                ttl,
                Some(env.trace_id),
            );
            self.publish(Exchange::Msg, late);
            return;
        };
        let Some(ask) = self.rendezvous.close_ask(turn) else {
            return;
        };
        let answer = String::from_utf8_lossy(&env.body).into_owned();
        self.end_ask(&ask, turn, AskOutcome::Answered, Some(answer));
        self.asking_tickets.remove(&turn);
        // The proxy continues the same turn; its ending now answers the ANSWER.
        if let Some(d) = self.delegations.get_mut(&ticket) {
            d.asking = None;
            if let Mode::Remote { re, .. } = &mut d.mode {
                *re = env.msg_id;
            }
        }
        let baseline = ask.baseline.unwrap_or_default();
        self.rendezvous
            .open_captured(&worker, ask.msg, ticket, baseline);
        let _ = now;
    }

    // ---- sender side: what comes back ------------------------------------------------------

    /// The reply/pull path (at-least-once): a REPLY stays unacked until its lead has it —
    /// answered to a blocking call at once, or held for a poll or a drain — and a redelivered
    /// copy is recognised by msgId.
    fn on_reply_message(&mut self, now: Instant, delivery: DeliveryId, env: Envelope) {
        let dedup = !self.cfg.planted(PlantedBug::NoReplyDedup);
        let Some(f) = &mut self.fed else { return };
        if let Some(h) = f.held.get_mut(&env.msg_id).filter(|_| dedup) {
            match h.delivery {
                // A second copy within one connection: the held one stays, this one is acked.
                Some(d) if d.generation == delivery.generation => return self.ack(delivery),
                // Redelivered after a reconnect: adopt the new tag.
                _ => h.delivery = Some(delivery),
            }
            return;
        }
        if dedup && f.done.contains(env.msg_id) {
            return self.ack(delivery); // already handed to the lead: a benign duplicate
        }
        let ticket = env.re.and_then(|re| f.remote_waiters.get(&re).copied());
        let content = String::from_utf8_lossy(&env.body).into_owned();
        let outcome = env.outcome.unwrap_or(Outcome::Replied);
        let outcome = if matches!(outcome, Outcome::Replied | Outcome::CompletedUnreplied) {
            outcome
        } else {
            Outcome::Replied
        };
        if let Some(ticket) = ticket.filter(|t| self.delegations.contains_key(t)) {
            let blocking = matches!(
                self.delegations.get(&ticket).map(|d| &d.mode),
                Some(Mode::Blocking(_))
            );
            self.finish(now, ticket, outcome, Some(content), None);
            if blocking {
                self.mark_done(env.msg_id, env.expires_at);
                return self.ack(delivery);
            }
            return self.hold(env.msg_id, delivery, env.expires_at, Holder::Ticket(ticket));
        }
        // No waiter: a stranded reply (U3), held for the lead to drain.
        let lead = SessionId::new(&env.to);
        let id = self.ids.reply();
        let held = HeldReply {
            id,
            target: env.from.clone(),
            lead: Some(lead.clone()),
            content,
            at: now,
        };
        match self.inbox.push(held) {
            Ok(()) => {
                self.event(Event::ReplyHeld {
                    target: env.from.clone(),
                    reply: id,
                    lead: Some(lead.clone()),
                });
                self.push.add(
                    &lead,
                    Attention::Reply {
                        target: env.from.clone(),
                        id,
                    },
                );
                self.hold(env.msg_id, delivery, env.expires_at, Holder::Inbox(id));
                if let Some(h) = self.fed.as_mut().and_then(|f| f.held.get_mut(&env.msg_id)) {
                    h.target = Some(env.from.clone());
                }
            }
            Err(full) => {
                let queue = self
                    .fed
                    .as_ref()
                    .map(|f| f.names.inbox(&lead))
                    .unwrap_or_default();
                self.reject(
                    delivery,
                    &queue,
                    "inbox_full",
                    format!("{} held for {}: to the DLQ", full.cap, env.from),
                );
            }
        }
    }

    fn hold(&mut self, msg: MsgId, delivery: DeliveryId, expires_unix: u64, holder: Holder) {
        if let Some(f) = &mut self.fed {
            f.held.insert(
                msg,
                Held {
                    delivery: Some(delivery),
                    target: None,
                    expires_unix,
                    holder,
                },
            );
            f.held_by.insert(holder, msg);
        }
    }

    fn mark_done(&mut self, msg: MsgId, expires_unix: u64) {
        let unix = self.unix_now();
        if let Some(f) = &mut self.fed {
            f.done.insert(msg, expires_unix, unix);
        }
    }

    /// The lead has it: ack the held delivery (or remember to, if its tag was voided).
    fn release(&mut self, holder: Holder) {
        let Some(f) = &mut self.fed else { return };
        let Some(msg) = f.held_by.remove(&holder) else {
            return;
        };
        let Some(h) = f.held.remove(&msg) else { return };
        let unix = self.unix_now();
        if let Some(f) = &mut self.fed {
            f.done.insert(msg, h.expires_unix, unix);
        }
        if let Some(d) = h.delivery {
            self.ack(d);
        }
    }

    pub(super) fn ticket_collected(&mut self, ticket: TicketId) {
        self.release(Holder::Ticket(ticket));
    }

    pub(super) fn reply_collected(&mut self, id: ReplyId) {
        self.release(Holder::Inbox(id));
    }

    fn on_failed_message(&mut self, now: Instant, env: Envelope) {
        if let Some(re) = env.re {
            let reason = String::from_utf8_lossy(&env.body).into_owned();
            if self.spawn_failed(re, reason) {
                return;
            }
        }
        let ticket = env
            .re
            .and_then(|re| self.fed.as_ref()?.remote_waiters.get(&re).copied());
        let Some(ticket) = ticket else { return };
        let outcome = match env.kind {
            Kind::Abandoned => Outcome::WorkerFailed,
            _ => match env.outcome {
                Some(o @ (Outcome::BackendExhausted | Outcome::Busy | Outcome::TimedOutQueued)) => {
                    o
                }
                _ => Outcome::WorkerFailed,
            },
        };
        let body = String::from_utf8_lossy(&env.body).into_owned();
        self.finish(now, ticket, outcome, Some(body), None);
    }

    /// ASK from a remote worker: it surfaces on the open send as QUESTION, or NO_WAITER goes
    /// straight back when no waiter is open (one round trip, as on one host).
    fn on_ask_message(&mut self, now: Instant, env: Envelope) {
        let Some(turn) = env.turn_id else { return };
        let ticket = env
            .re
            .and_then(|re| self.fed.as_ref()?.remote_waiters.get(&re).copied())
            .filter(|t| self.delegations.contains_key(t));
        let Some(ticket) = ticket else {
            let ttl = self.cfg.reply_ttl_ms;
            let lead = SessionId::new(&env.to);
            let nw = self.envelope(
                Kind::NoWaiter,
                &lead,
                env.from.to_string(),
                env.re,
                Some(turn),
                None,
                Vec::new(),
                ttl,
                Some(env.trace_id),
            );
            self.publish(Exchange::Msg, nw);
            return;
        };
        if let Some(f) = &mut self.fed {
            let until = now + Duration::from_millis(self.cfg.ask_timeout_ms);
            f.remote_asks.insert(
                turn,
                RemoteAsk {
                    worker: env.from.clone(),
                    until,
                },
            );
        }
        if let Some(d) = self.delegations.get(&ticket) {
            self.forget_remote_waiter(d.msg);
        }
        let question = String::from_utf8_lossy(&env.body).into_owned();
        self.question(now, ticket, question, turn);
    }

    /// A genuine forward brief that was dead-lettered (an overflowing inbox, an expired
    /// message, a rejected delivery) is reported to its sender as FAILED: the caps never
    /// become a silent loss channel. Anything else in the DLQ is acked and left to operators.
    fn on_dead_letter(
        &mut self,
        _now: Instant,
        delivery: DeliveryId,
        headers: &Headers,
        body: Vec<u8>,
    ) {
        self.ack(delivery);
        // Only a brief the broker dropped undelivered (its inbox overflowed, or its TTL ran
        // out) is reported. One a gateway rejected was refused on admission — an expired,
        // replayed or re-addressed copy — and its genuine original was handled, or its
        // sender's INJECTED bound covers it; reporting the copy would let anyone with broker
        // access fail a live delegation by replaying it.
        let undelivered = matches!(
            headers.get("x-first-death-reason"),
            Some(HeaderValue::Str(r)) if r == "maxlen" || r == "expired"
        );
        if !undelivered {
            return;
        }
        let Ok(env) = Envelope::from_parts(headers, body) else {
            return;
        };
        let genuine = self
            .fed
            .as_ref()
            .is_some_and(|f| f.cfg.keyring.check(&env).is_ok());
        if !genuine || env.kind != Kind::Send {
            return;
        }
        let ttl = self.cfg.reply_ttl_ms;
        let report = self.envelope(
            Kind::Failed,
            &SessionId::new(GATEWAY_GID),
            env.from.to_string(),
            Some(env.msg_id),
            None,
            Some(Outcome::WorkerFailed),
            format!("dead-lettered before delivery to {}", env.to).into_bytes(),
            ttl,
            Some(env.trace_id),
        );
        if self.publish(Exchange::Msg, report).is_some() {
            self.event(Event::DeadLetterReported {
                msg: env.msg_id,
                sender: env.from,
            });
        }
    }

    // ---- presence, expiry, sweeping --------------------------------------------------------

    fn announce(&mut self, gid: &SessionId) {
        let Some(f) = &self.fed else { return };
        let Some((kind, true)) = f.local.get(gid).copied() else {
            return;
        };
        let host = f.cfg.host.clone();
        let status = self.injector.view(gid).status;
        let presence = Presence {
            kind,
            status,
            profiles: Vec::new(),
            since: None,
        };
        let ttl = self.cfg.presence_ttl_ms;
        let env = self.envelope(
            Kind::Presence,
            gid,
            presence_key(&host, gid),
            None,
            None,
            None,
            presence.to_body(),
            ttl,
            None,
        );
        self.publish(Exchange::Roster, env);
    }

    pub(super) fn on_presence_tick(&mut self, now: Instant) {
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
        let (host, profiles) = (f.cfg.host.clone(), self.cfg.profiles.clone());
        let since = Some(f.started_unix);
        let gids: Vec<SessionId> = f.local.keys().cloned().collect();
        let gw = SessionId::new(GATEWAY_GID);
        let body = Presence {
            kind: EntityKind::Gateway,
            status: None,
            profiles,
            since,
        }
        .to_body();
        let ttl = self.cfg.presence_ttl_ms;
        let env = self.envelope(
            Kind::Presence,
            &gw,
            presence_key(&host, &gw),
            None,
            None,
            None,
            body,
            ttl,
            None,
        );
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

    /// Held deliveries past their `expiresAt` are acked and dropped, so one abandoned backlog
    /// cannot wedge an inbox behind a full prefetch window.
    pub(super) fn on_held_sweep(&mut self, now: Instant) {
        let unix = self.unix_now();
        let Some(f) = &mut self.fed else { return };
        let expired: Vec<(Holder, Option<SessionId>)> = f
            .held
            .values()
            .filter(|h| h.expires_unix < unix)
            .map(|h| (h.holder, h.target.clone()))
            .collect();
        for (holder, target) in expired {
            if let (Holder::Inbox(id), Some(target)) = (holder, target) {
                let gone = self.inbox.ack(&target, &[id]);
                self.collected(&gone);
            }
            self.release(holder);
        }
        let up = self.fed.as_ref().is_some_and(|f| f.broker_up);
        if let Some(f) = &mut self.fed {
            f.sweep_armed = up;
        }
        if up {
            let next = now + Duration::from_millis(self.cfg.held_sweep_interval_ms);
            self.timers.insert((next, TimerKind::HeldSweep));
        }
    }
}

/// This gateway's slice of the topology: the shared exchanges and its own queues when `full`,
/// plus an inbox for each of `gids`.
fn slice(cfg: &CoreConfig, f: &Fed, gids: &[(SessionId, EntityKind)], full: bool) -> Topology {
    let n = &f.names;
    let host = &f.cfg.host;
    let dlx = Some(n.exchange(Exchange::Dlx));
    let mut t = Topology::default();
    if full {
        t.exchanges = Exchange::ALL.to_vec();
        t.queues.push(QueueSpec {
            name: n.dlq(),
            durable: true,
            exclusive: false,
            auto_delete: false,
            args: QueueArgs {
                max_length: Some(cfg.dlq_max_length),
                ..QueueArgs::default()
            },
        });
        t.queues.push(QueueSpec {
            name: n.control(host),
            durable: true,
            exclusive: false,
            auto_delete: false,
            args: QueueArgs {
                dead_letter_exchange: dlx.clone(),
                ..QueueArgs::default()
            },
        });
        // A rejected heartbeat (forged, expired) dead-letters like any other rejection, and a
        // flood of them is capped: heartbeats come again, so dropping the oldest loses nothing.
        t.queues.push(QueueSpec {
            name: n.roster(host),
            durable: false,
            exclusive: true,
            auto_delete: true,
            args: QueueArgs {
                dead_letter_exchange: dlx.clone(),
                max_length: Some(cfg.inbox_max_length),
                ..QueueArgs::default()
            },
        });
        t.bindings.push(Binding {
            queue: n.dlq(),
            exchange: Exchange::Dlx,
            key: String::new(),
        });
        t.bindings.push(Binding {
            queue: n.control(host),
            exchange: Exchange::Control,
            key: host.to_string(),
        });
        t.bindings.push(Binding {
            queue: n.roster(host),
            exchange: Exchange::Roster,
            key: "roster.#".into(),
        });
        for (queue, exclusive) in [
            (n.control(host), true),
            (n.roster(host), true),
            (n.dlq(), false),
        ] {
            t.consumers.push(Consume {
                queue,
                exclusive,
                prefetch: cfg.prefetch,
            });
        }
    }
    for (gid, kind) in gids {
        let name = n.inbox(gid);
        let expires = match kind {
            EntityKind::Member => cfg.worker_inbox_expires_ms,
            _ => cfg.lead_inbox_expires_ms,
        };
        t.queues.push(QueueSpec {
            name: name.clone(),
            durable: true,
            exclusive: false,
            auto_delete: false,
            args: QueueArgs {
                dead_letter_exchange: dlx.clone(),
                max_length: Some(cfg.inbox_max_length),
                message_ttl_ms: Some(cfg.inbox_message_ttl_ms),
                expires_ms: Some(expires),
            },
        });
        t.bindings.push(Binding {
            queue: name.clone(),
            exchange: Exchange::Msg,
            key: gid.to_string(),
        });
        if *kind == EntityKind::Member {
            t.bindings.push(Binding {
                queue: name.clone(),
                exchange: Exchange::Msg,
                key: "broadcast.all".into(),
            });
            if let Some(g) = f.groups.get(gid) {
                t.bindings.push(Binding {
                    queue: name.clone(),
                    exchange: Exchange::Msg,
                    key: format!("broadcast.{g}"),
                });
            }
        }
        t.consumers.push(Consume {
            queue: name,
            exclusive: true,
            prefetch: cfg.prefetch,
        });
    }
    t
}
