//! The cross-host half of the gateway (ch. 10, CB-308 §7): the routing fork, both ack models,
//! the turn-state split between the sender's and the worker's gateway, cross-host asks, the
//! roster, and broker outage. Everything here is a rule over inputs; the shell carries the
//! resulting `BrokerOp`s out against AMQP.
//!
//! Who owns what (CB-308 §7.7): the worker's gateway owns the turn — a `Side::Worker`
//! delegation there does the turnId minting, ask coalescing, completion and failure
//! fallbacks — and reports each ending as a message answering the brief (`re`). The sender's
//! gateway owns only the waiter, keyed by the brief's msgId.
//!
//! By concern: `inbound` (admission and dispatch of every delivery), `sender` (delegating to
//! another host and what comes back), `worker` (a brief from another host, its turn and its
//! report), `presence` (heartbeats, the roster, sweeping), `publish` (envelopes out),
//! `topology` (this gateway's broker objects); and three sub-machines with their own state:
//! `held` (reply-path deliveries held unacked), `parking` (deliveries waiting for their
//! sender's presence), `confirms` (what each publish's confirm decides).

use super::{Effects, Gateway, Once, TimerKind};
use crate::admission::SeenSet;
use crate::broker::{DeliveryId, Names, QueueType, Topology};
use crate::config::CoreConfig;
use crate::gateway::Link;
use crate::ids::{HostId, MsgId, SessionId};
use crate::planted::PlantedBug;
use crate::roster::{EntityKind, Roster};
use crate::signing::Keyring;
use crate::status::AgentStatus;
use crate::time::{Duration, Instant};
use std::collections::{BTreeMap, BTreeSet};

mod confirms;
mod counterpart;
mod held;
pub(super) mod inbound;
mod parking;
mod presence;
mod publish;
mod sender;
pub(super) mod topology;
mod waiters;
mod worker;

use confirms::{Confirms, Unsent};
use held::HeldDeliveries;
use parking::Parking;
pub(super) use publish::Draft;
use waiters::{RemoteAsk, Waiters};

/// What a gateway needs to take part in a fleet of hosts.
#[derive(Clone, Debug)]
pub struct Federation {
    pub host: HostId,
    pub keyring: Keyring,
    /// Prefix of every broker object name (default `fleet`).
    pub namespace: String,
    /// Gateways allowed to send this host control (SPAWN), checked against the signature.
    pub control_allowlist: BTreeSet<HostId>,
    /// The type of every durable queue this gateway declares: quorum on a cluster.
    pub queue_type: QueueType,
}

/// An entity served here, as this host's presence describes it.
#[derive(Clone, Debug)]
pub(crate) struct Served {
    pub(crate) kind: EntityKind,
    /// In the roster yet: a lead at once, a member once past its readiness gate.
    pub(crate) announced: bool,
    /// The status its latest presence carried: a sample that differs is a delta.
    pub(crate) status: Option<AgentStatus>,
}

/// The federation's state: the broker link, the clocks, the roster, what this gateway serves,
/// and the sub-machines of the cross-host paths.
pub(crate) struct Fed {
    pub(crate) cfg: Federation,
    pub(crate) names: Names,
    pub(crate) broker_up: bool,
    /// When the link last went up or down (it starts down).
    pub(crate) link_since: Instant,
    pub(crate) generation: u32,
    /// When this gateway started (Unix ms), announced as its presence's `since`.
    started_unix: u64,
    seen: SeenSet,
    pub(crate) roster: Roster,
    /// The sequence number of this process's latest presence (snapshot or delta).
    presence_seq: u64,
    /// Entities whose status or busy flag changed since this host's last presence: they go
    /// out together within `presence_batch_ms`, one signature for a burst.
    changed: BTreeSet<SessionId>,
    pub(crate) confirms: Confirms,
    /// At most one failed reply per member, for its retry: see `Unsent`.
    unsent: BTreeMap<SessionId, Unsent>,
    /// Sender side: the waiter of each brief or answer we published, and the questions remote
    /// workers asked through them.
    waiters: Waiters,
    pub(crate) held: HeldDeliveries,
    /// Forward-path deliveries left unacked until their turn ends. Only the planted
    /// `AckAfterInject` bug fills it: the real forward path acks before the inject.
    late_acks: BTreeMap<MsgId, DeliveryId>,
    pub(crate) parking: Parking,
    /// Worker side: typed remote briefs whose INJECTED waits out `injected_defer_ms`, by the
    /// brief's msgId, with the delegation's ticket and when it goes out. The turn's REPLY or
    /// FAILED, sooner, says typed for it and takes its place.
    untold: BTreeMap<MsgId, (crate::ids::TicketId, Instant)>,
}

impl Fed {
    pub(crate) fn host(&self) -> &HostId {
        &self.cfg.host
    }

    /// `gid` changed: it goes out with every change gathered until `flush_at`, the batch's
    /// flush armed by its first change.
    pub(crate) fn changed(&mut self, fx: &mut Effects, gid: &SessionId, flush_at: Instant) {
        if self.changed.is_empty() {
            fx.wake(flush_at, TimerKind::PresenceFlush);
        }
        self.changed.insert(gid.clone());
    }

    /// The link is up: the presence round runs now unless it is running, and the held sweep
    /// from `sweep_at` unless it is.
    pub(crate) fn rounds_begin(fx: &mut Effects, now: Instant, sweep_at: Instant) {
        if !fx.is_set(Once::Presence) {
            fx.set(Once::Presence, now);
        }
        if !fx.is_set(Once::HeldSweep) {
            fx.set(Once::HeldSweep, sweep_at);
        }
    }

    /// The sender side's waiters, read (the invariants check them against the delegations).
    pub(crate) fn waiters(&self) -> &Waiters {
        &self.waiters
    }

    /// `gid` is gone: a reply it failed to send is not retried.
    pub(crate) fn forget_unsent(&mut self, gid: &SessionId) {
        self.unsent.remove(gid);
    }

    /// A delivery of the live connection (a tag of an earlier one died with it).
    pub(crate) fn is_current(&self, delivery: DeliveryId) -> bool {
        self.broker_up && self.generation == delivery.generation
    }
}

impl std::fmt::Debug for Fed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fed")
            .field("host", &self.cfg.host)
            .field("broker_up", &self.broker_up)
            .field("held", &self.held.len())
            .field("confirms", &self.confirms.len())
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
        gw.on_wall_clock(now, unix_ms);
        let c = &gw.cfg;
        let roster_ttl_ms = if c.planted(PlantedBug::RosterNeverExpires) {
            u64::MAX / 4
        } else {
            c.presence_ttl_ms
        };
        gw.host = federation.host.clone();
        gw.link = Link::Fleet(Box::new(Fed {
            names: Names::new(&federation.namespace),
            cfg: federation,
            broker_up: false,
            link_since: now,
            generation: 0,
            started_unix: unix_ms,
            seen: SeenSet::new(c.seen_capacity),
            roster: Roster::new(Duration::from_millis(roster_ttl_ms))
                .with_unordered_deltas(c.planted(PlantedBug::DeltaAppliedOutOfOrder)),
            presence_seq: 0,
            changed: BTreeSet::new(),
            confirms: Confirms::default(),
            unsent: BTreeMap::new(),
            waiters: Waiters::default(),
            held: HeldDeliveries::new(c.seen_capacity)
                .with_skewed_index(c.planted(PlantedBug::HeldIndexSkew)),
            late_acks: BTreeMap::new(),
            untold: BTreeMap::new(),
            parking: Parking::default(),
        }));
        Ok(gw)
    }

    /// Deliveries held unacked: reply-path holds, and deliveries parked until their sender's
    /// presence arrives (both bounded by the prefetch window).
    pub fn held_deliveries(&self) -> usize {
        self.link
            .fleet()
            .map_or(0, |f| f.held.len() + f.parking.len())
    }

    /// This gateway's slice of the broker topology (`fleetd topology`).
    pub fn topology(&self) -> Option<Topology> {
        let f = self.link.fleet()?;
        let gids: Vec<(SessionId, EntityKind)> = self
            .served
            .iter()
            .map(|(g, s)| (g.clone(), s.kind))
            .collect();
        Some(topology::slice(
            &self.cfg,
            f,
            &self.cards,
            &gids,
            topology::Part::Whole,
        ))
    }

    pub(super) fn broker_is_up(&self) -> bool {
        self.link.fleet().is_some_and(|f| f.broker_up)
    }

    /// The profiles `host` advertised, if its gateway heartbeat is fresh.
    pub(super) fn profiles_of(&self, host: &HostId) -> Option<Vec<String>> {
        self.link.fleet()?.roster.profiles_of(self.now, host)
    }

    /// A member this gateway serves now (its gid is in a live pane's label).
    pub(super) fn is_live_member(&self, gid: &SessionId) -> bool {
        self.served_as(gid).is_some_and(|k| k == EntityKind::Member)
    }

    pub(super) fn is_local_non_member(&self, gid: &SessionId) -> bool {
        self.served_as(gid).is_some_and(|k| k != EntityKind::Member)
    }

    fn served_as(&self, gid: &SessionId) -> Option<EntityKind> {
        self.served.get(gid).map(|s| s.kind)
    }
}
