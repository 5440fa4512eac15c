//! A compromised gateway in the world (drawn per seed): a host with a valid fleet key that
//! lies. It taps the message exchange as any broker client can (a queue bound to `#`), and
//! for every brief it sees it answers as if it were the member — a REPLY, FAILED, INJECTED,
//! ABANDONED, ASK or TOO_LATE naming the brief by `re`, from its own announced member, and it
//! floods every lead it has seen with unsolicited replies. Half the briefs
//! it also copies into the DLX with forged broker headers (`x-first-death-reason: maxlen`),
//! as a client with credentials and no key can, binds the inboxes it learns of (leads' too) to
//! every broadcast; and every brief it captures it replays, once,
//! unchanged, 5–40 s later (a replay after the worker's gateway restarted is caught only by a
//! replay record that survived the restart). Everything it writes carries [`MARK`] (the
//! forged reason too), so the oracle can trace any outcome, answer or typed text back to it:
//! I8 in the hostile world is "an adversary changes no outcome".
//!
//! One member in three it sees work for, it tries to stop: a signed STOP from its own member to
//! every honest host's control queue, which no honest host's allowlist admits (I12).
//!
//! It also taps the roster and replays every presence delta an honest host signed, once, unchanged,
//! 1–15 s later (within its expiry): only the order of a host's presence (its start, then its
//! sequence number) tells a late delta from a fresh one. Its own presence is a 1.1 snapshot in
//! odd seeds and wire 1.0 heartbeats in even ones, so both readers run.
//!
//! It does not claim other hosts' gids in its presence: tried, the oracle found that a liar
//! announcing faster than the owner wins a gid at any gateway that (re)starts and hears the
//! liar first — first-heard is no authority, and ordering a host's own presence does not
//! change that (docs/security.md, "Who may answer what").

use crate::net::SimBrokerClient;
use fleet_core::admission::presence_key;
use fleet_core::broker::{
    Binding, BrokerEvent, BrokerOp, Consume, Exchange, PublishId, QueueArgs, QueueSpec, Topology,
};
use fleet_core::control::StopRequest;
use fleet_core::envelope::{Envelope, HeaderValue, Kind, Payload, VERSION};
use fleet_core::ids::IdMint;
use fleet_core::roster::{Entity, EntityKind, Listed, Order, Presence, GATEWAY_GID};
use fleet_core::signing::Keyring;
use fleet_core::{HostId, Outcome, SessionId};
use fleetd::BrokerPort;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeSet;
use std::time::Duration;

/// What every forged text carries.
pub const MARK: &str = "ADVERSARY";
/// The lying gateway's host name.
pub const HOST: &str = "liar";
/// The member the liar announces as its own, so its forged answers pass admission.
pub const MEMBER: &str = "dead0000-0000-4000-8000-00000000beef";

/// How the liar behaves, from the seed.
#[derive(Clone, Debug)]
pub struct Liar {
    pub secret: [u8; 32],
    pub seed: u64,
    pub epoch_unix_ms: u64,
    pub namespace: String,
}

fn unix_ms(epoch_unix_ms: u64) -> u64 {
    match turmoil::since_epoch() {
        Some(d) => u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
        None => epoch_unix_ms,
    }
}

/// A captured delivery to publish again, unchanged: when, its routing key, headers and body.
type Replay = (
    tokio::time::Instant,
    String,
    fleet_core::envelope::Headers,
    Vec<u8>,
);

/// An envelope from `from` on the liar's host, stamped now, signed with the liar's key. Its
/// payload is made after its ids are minted (a forged question mints its turn last).
fn forge(
    ids: &mut IdMint,
    now: u64,
    payload: impl FnOnce(&mut IdMint) -> Payload,
    from: &SessionId,
    to: String,
) -> Envelope {
    let (msg_id, trace_id) = (ids.msg(), ids.trace());
    Envelope {
        v: VERSION,
        payload: payload(ids),
        msg_id,
        trace_id,
        from: from.clone(),
        to,
        signer: HostId::new(""),
        ts: now,
        expires_at: now + 60_000,
        sig: None,
        body: Vec::new(),
    }
}

/// The liar's state: its key and streams, what it has learned from its taps, and what it has
/// yet to replay.
struct Tap {
    liar: Liar,
    keyring: Keyring,
    rng: ChaCha8Rng,
    ids: IdMint,
    member: SessionId,
    gateway: SessionId,
    tap: String,
    next_publish: u64,
    /// The key-less copies are numbered apart from the signed publishes.
    dead_publish: u64,
    /// Gids whose inboxes it has bound to every broadcast, and the leads it floods.
    learned: BTreeSet<String>,
    leads: BTreeSet<SessionId>,
    /// Captured briefs and honest presence to publish again, unchanged, and when.
    replays: Vec<Replay>,
    roster_replays: Vec<Replay>,
    /// Each captured message is replayed once: its tap hears its own replays too, and replaying
    /// those again made every seed with a liar carry a geometric flood of stale copies (eight
    /// times the cost of a seed without one, all of it refused as expired).
    replayed: BTreeSet<fleet_core::MsgId>,
    /// Honest hosts heard on the roster, and the members it has tried to stop through them.
    hosts: BTreeSet<HostId>,
    stopping: BTreeSet<SessionId>,
    /// Its own presence: wire 1.1 (a snapshot, ordered) or 1.0 (a heartbeat per entity).
    v1_1: bool,
    started: u64,
    seq: u64,
    up: bool,
}

/// The liar's program, until its host goes down: tap, answer every brief falsely, claim every
/// target gid, and announce itself so admission binds its member to its host.
pub async fn run(liar: Liar) -> turmoil::Result {
    let keyring = Keyring::new(
        HostId::new(HOST),
        liar.secret,
        &std::collections::BTreeMap::new(),
    )?;
    let mut rng = ChaCha8Rng::seed_from_u64(liar.seed);
    let ids = IdMint::from_seed(rng.next_u64());
    let mut broker = SimBrokerClient::start("broker");
    let mut me = Tap {
        tap: format!("{}.tap.{HOST}", liar.namespace),
        v1_1: liar.seed % 2 == 1,
        started: unix_ms(liar.epoch_unix_ms),
        liar,
        keyring,
        rng,
        ids,
        member: SessionId::new(MEMBER),
        gateway: SessionId::new(GATEWAY_GID),
        next_publish: 0,
        dead_publish: 1u64 << 40,
        learned: BTreeSet::new(),
        leads: BTreeSet::new(),
        replays: Vec::new(),
        roster_replays: Vec::new(),
        replayed: BTreeSet::new(),
        hosts: BTreeSet::new(),
        stopping: BTreeSet::new(),
        seq: 0,
        up: false,
    };
    let mut beat = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            biased;
            ev = broker.next_event() => match ev {
                Some(BrokerEvent::Up { .. }) => {
                    me.up = true;
                    broker.submit(BrokerOp::Declare(me.topology()));
                }
                Some(BrokerEvent::Down) => me.up = false,
                Some(BrokerEvent::Delivery { delivery, headers, body, .. }) => {
                    broker.submit(BrokerOp::Ack { delivery });
                    me.heard(&mut broker, headers, body);
                }
                Some(BrokerEvent::Published { .. }) => {}
                None => return Ok(()),
            },
            _ = beat.tick() => {
                if me.up {
                    me.beat(&mut broker);
                }
            }
        }
    }
}

impl Tap {
    /// Its tap queue, bound to every message and every presence.
    fn topology(&self) -> Topology {
        let tap = &self.tap;
        Topology {
            exchanges: Exchange::ALL.to_vec(),
            queues: vec![QueueSpec {
                name: tap.clone(),
                durable: false,
                exclusive: true,
                auto_delete: true,
                args: QueueArgs::default(),
            }],
            bindings: vec![
                Binding {
                    queue: tap.clone(),
                    exchange: Exchange::Msg,
                    key: "#".into(),
                },
                Binding {
                    queue: tap.clone(),
                    exchange: Exchange::Roster,
                    key: "roster.#".into(),
                },
            ],
            consumers: vec![Consume {
                queue: tap.clone(),
                exclusive: true,
                prefetch: 1_000,
            }],
        }
    }

    /// Signs and publishes `env` under its own key.
    fn publish(&mut self, broker: &mut SimBrokerClient, exchange: Exchange, mut env: Envelope) {
        self.keyring.sign(&mut env);
        self.next_publish += 1;
        broker.submit(BrokerOp::Publish {
            publish: PublishId(self.next_publish),
            exchange,
            key: env.to.clone(),
            mandatory: false,
            persistent: false,
            headers: env.to_headers(),
            body: env.body,
        });
    }

    /// Publishes a copy as is, with no key (a replay, a forged dead letter).
    fn publish_raw(
        &mut self,
        broker: &mut SimBrokerClient,
        exchange: Exchange,
        key: String,
        headers: fleet_core::envelope::Headers,
        body: Vec<u8>,
    ) {
        self.dead_publish += 1;
        broker.submit(BrokerOp::Publish {
            publish: PublishId(self.dead_publish),
            exchange,
            key,
            mandatory: false,
            persistent: false,
            headers,
            body,
        });
    }

    /// One delivery from its tap.
    fn heard(
        &mut self,
        broker: &mut SimBrokerClient,
        headers: fleet_core::envelope::Headers,
        body: Vec<u8>,
    ) {
        let Ok(brief) = Envelope::from_parts(&headers, body.clone()) else {
            return;
        };
        if brief.kind() == Kind::Presence {
            if brief.signer.as_str() != HOST {
                self.hosts.insert(brief.signer.clone());
            }
            // An honest host's delta, replayed unchanged while it is still valid.
            let honest = brief.signer.as_str() != HOST && brief.from.as_str() != GATEWAY_GID;
            if honest && self.replayed.insert(brief.msg_id) {
                let at = tokio::time::Instant::now()
                    + Duration::from_millis(1_000 + self.rng.next_u64() % 14_000);
                self.roster_replays
                    .push((at, brief.to.clone(), headers.clone(), body.clone()));
            }
            return;
        }
        // Bind every inbox it learns exists — a lead's that sent a brief, a member's that
        // replied — to every broadcast, as any client with credentials may: a copy in a lead's
        // inbox or outside a member's group must be refused, and a second copy in one inbox is
        // a replay.
        let exists = match brief.kind() {
            Kind::Send | Kind::Reply if brief.from != self.member => Some(brief.from.to_string()),
            _ => None,
        };
        if let Some(g) = exists.filter(|g| self.learned.insert(g.clone())) {
            let bindings = vec![Binding {
                queue: format!("{}.agent.{g}.inbox.v2", self.liar.namespace),
                exchange: Exchange::Msg,
                key: "broadcast.#".into(),
            }];
            broker.submit(BrokerOp::Declare(Topology {
                bindings,
                ..Topology::default()
            }));
        }
        if brief.kind() != Kind::Send || brief.re().is_some() || brief.from == self.member {
            return;
        }
        if !self.replayed.insert(brief.msg_id) {
            // Its own replay, heard back: answered and copied once already.
            return;
        }
        // Replay it, unchanged, 5–40 s from now: after a restart of the worker's gateway only a
        // replay record that survived it can tell.
        let at = tokio::time::Instant::now()
            + Duration::from_millis(5_000 + self.rng.next_u64() % 35_000);
        self.replays
            .push((at, brief.to.clone(), headers.clone(), body.clone()));
        // What any broker client can do without a key: copy the live brief into the DLX as if
        // the broker had dropped it from its inbox.
        if self.rng.next_u64().is_multiple_of(2) {
            let mut dead = headers;
            let inbox = format!("{}.agent.{}.inbox.v2", self.liar.namespace, brief.to);
            dead.insert(
                "x-first-death-reason".into(),
                HeaderValue::Str(format!("maxlen ({MARK})")),
            );
            dead.insert("x-first-death-queue".into(), HeaderValue::Str(inbox));
            self.publish_raw(broker, Exchange::Dlx, String::new(), dead, body);
        }
        self.leads.insert(brief.from.clone());
        self.stop_through_every_host(broker, &brief);
        self.answer_falsely(broker, &brief);
    }

    /// One member in three it sees work for, it tries to stop: a signed STOP from its own
    /// member to every honest host's control queue. No honest host allows it control; each
    /// must refuse (I12).
    fn stop_through_every_host(&mut self, broker: &mut SimBrokerClient, brief: &Envelope) {
        let now = unix_ms(self.liar.epoch_unix_ms);
        let target = SessionId::new(&brief.to);
        if self.rng.next_u64().is_multiple_of(3) && self.stopping.insert(target.clone()) {
            let body = serde_json::to_vec(&StopRequest { target }).unwrap_or_default();
            let hosts: Vec<HostId> = self.hosts.iter().cloned().collect();
            for host in hosts {
                let mut stop = forge(
                    &mut self.ids,
                    now,
                    |_| Payload::Stop,
                    &self.member,
                    host.to_string(),
                );
                stop.body = body.clone();
                self.publish(broker, Exchange::Control, stop);
            }
        }
    }

    /// A REPLY, FAILED, ABANDONED, INJECTED, ASK or TOO_LATE naming the brief, from its own
    /// member, to the brief's lead.
    fn answer_falsely(&mut self, broker: &mut SimBrokerClient, brief: &Envelope) {
        let now = unix_ms(self.liar.epoch_unix_ms);
        let kind = [
            Kind::Reply,
            Kind::Failed,
            Kind::Abandoned,
            Kind::Injected,
            Kind::Ask,
            Kind::TooLate,
        ][(self.rng.next_u64() % 6) as usize];
        let re = brief.msg_id;
        let payload = |ids: &mut IdMint| match kind {
            Kind::Reply => Payload::Reply {
                re: Some(re),
                outcome: Outcome::Replied,
            },
            Kind::Failed => Payload::Failed {
                re,
                outcome: Outcome::WorkerFailed,
                spawn_id: None,
            },
            Kind::Abandoned => Payload::Abandoned { re },
            Kind::Injected => Payload::Injected { re },
            Kind::Ask => Payload::Ask {
                re,
                turn: ids.turn(),
            },
            _ => Payload::TooLate { re, turn: None },
        };
        let mut env = forge(
            &mut self.ids,
            now,
            payload,
            &self.member,
            brief.from.to_string(),
        );
        env.body = format!("{MARK}: forged {kind} for {}", brief.to).into_bytes();
        self.publish(broker, Exchange::Msg, env);
    }

    /// Once a second: the replays now due, a flood of unsolicited replies to every lead it has
    /// seen (held at most `inbox_cap_per_target` for its member, refused beyond, never handed
    /// over), and its own presence.
    fn beat(&mut self, broker: &mut SimBrokerClient) {
        let now = tokio::time::Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.replays)
            .into_iter()
            .partition(|r| r.0 <= now);
        self.replays = later;
        let (due_roster, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.roster_replays)
            .into_iter()
            .partition(|r| r.0 <= now);
        self.roster_replays = later;
        let due = due
            .into_iter()
            .map(|r| (Exchange::Msg, r))
            .chain(due_roster.into_iter().map(|r| (Exchange::Roster, r)));
        for (exchange, (_, key, headers, body)) in due {
            self.publish_raw(broker, exchange, key, headers, body);
        }
        let now = unix_ms(self.liar.epoch_unix_ms);
        let leads: Vec<SessionId> = self.leads.iter().cloned().collect();
        for lead in leads {
            let mut env = forge(
                &mut self.ids,
                now,
                |_| Payload::Reply {
                    re: None,
                    outcome: Outcome::Replied,
                },
                &self.member,
                lead.to_string(),
            );
            env.body = format!("{MARK}: unsolicited").into_bytes();
            self.publish(broker, Exchange::Msg, env);
        }
        self.announce(broker, now);
    }

    /// Its own presence: a 1.1 snapshot in odd seeds, 1.0 heartbeats in even ones.
    fn announce(&mut self, broker: &mut SimBrokerClient, now: u64) {
        let host = HostId::new(HOST);
        let gateway = self.gateway.clone();
        let mut own = forge(
            &mut self.ids,
            now,
            |_| Payload::Presence,
            &gateway,
            presence_key(&host, &gateway),
        );
        if self.v1_1 {
            self.seq += 1;
            let at = Order {
                since: self.started,
                seq: self.seq,
            };
            let me = Listed::new(self.member.clone(), Entity::new(EntityKind::Member, None));
            own.body = Presence::snapshot(at, Vec::new(), vec![me]).to_body();
            self.publish(broker, Exchange::Roster, own);
        } else {
            own.body = Presence::v1_0(EntityKind::Gateway, None, None).to_body();
            self.publish(broker, Exchange::Roster, own);
            let member = self.member.clone();
            let mut me = forge(
                &mut self.ids,
                now,
                |_| Payload::Presence,
                &member,
                presence_key(&host, &member),
            );
            me.body = Presence::v1_0(EntityKind::Member, None, None).to_body();
            self.publish(broker, Exchange::Roster, me);
        }
    }
}
