//! A small in-test fleet: gateways wired by hand through an in-memory broker that does what
//! these rules need — topic/direct/fanout routing, bindings, mandatory returns, manual acks,
//! reject to the dead-letter exchange, queue deletion, connection loss with redelivery — and a
//! scripted herdr per gateway. It stands in for RabbitMQ only in these unit tests of the core's
//! rules; the real broker and the simulated one are tested against each other elsewhere.

use fleet_core::broker::{
    BrokerEvent, BrokerOp, DeliveryId, Exchange, ExchangeType, PublishResult, Topology,
};
use fleet_core::envelope::{HeaderValue, Headers};
use fleet_core::signing::Keyring;
use fleet_core::{
    AgentStatus, CallId, CoreConfig, Duration, Federation, Gateway, HostId, Input, Instant, Output,
    PaneError, Principal, Request, Response, SessionId,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub const T0_UNIX: u64 = 1_790_000_000_000;

#[derive(Clone, Debug)]
pub struct Msg {
    pub routing_key: String,
    pub headers: Headers,
    pub body: Vec<u8>,
    pub redelivered: bool,
}

#[derive(Default)]
pub struct Broker {
    pub up: bool,
    pub queues: BTreeMap<String, VecDeque<Msg>>,
    pub bindings: Vec<(Exchange, String, String)>,
    /// queue → consuming gateway
    pub consumers: BTreeMap<String, usize>,
    /// (gateway, tag) → (queue, message) delivered and not yet settled
    pub unacked: BTreeMap<(usize, u64), (String, Msg)>,
    pub next_tag: u64,
    pub generation: u32,
    pub dlq: Option<String>,
    pub rejected: Vec<Msg>,
}

fn topic_match(pattern: &str, key: &str) -> bool {
    match pattern.strip_suffix(".#") {
        Some(prefix) => key == prefix || key.starts_with(&format!("{prefix}.")),
        None => pattern == key,
    }
}

impl Broker {
    fn declare(&mut self, gw: usize, t: Topology) {
        for q in t.queues {
            self.queues.entry(q.name.clone()).or_default();
            if q.name.ends_with(".dlq") {
                self.dlq = Some(q.name);
            }
        }
        for b in t.bindings {
            let entry = (b.exchange, b.key, b.queue);
            if !self.bindings.contains(&entry) {
                self.bindings.push(entry);
            }
        }
        for c in t.consumers {
            if !c.queue.ends_with(".dlq") || !self.consumers.contains_key(&c.queue) {
                self.consumers.insert(c.queue, gw);
            }
        }
    }

    fn route(&mut self, exchange: Exchange, key: &str, msg: Msg) -> bool {
        let targets: Vec<String> = self
            .bindings
            .iter()
            .filter(|(e, pattern, _)| {
                *e == exchange
                    && match exchange.kind() {
                        ExchangeType::Fanout => true,
                        ExchangeType::Direct => pattern == key,
                        ExchangeType::Topic => topic_match(pattern, key),
                    }
            })
            .map(|(_, _, q)| q.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for q in &targets {
            if let Some(queue) = self.queues.get_mut(q) {
                queue.push_back(msg.clone());
            }
        }
        !targets.is_empty()
    }
}

/// What a scripted pane does.
#[derive(Clone, Debug)]
pub struct Pane {
    pub status: AgentStatus,
    pub screen: String,
    pub typed: Vec<String>,
}

pub struct Host {
    pub gw: Gateway,
    pub panes: BTreeMap<SessionId, Pane>,
    pub responses: BTreeMap<CallId, Response>,
    pub trace: Vec<String>,
}

pub struct Fleet {
    pub now: Instant,
    pub hosts: Vec<Host>,
    pub broker: Broker,
    next_call: u64,
    /// Publishes confirmed back to their gateway on the next step.
    confirms: VecDeque<(usize, BrokerEvent)>,
    /// Hosts cut off from the broker.
    pub partitioned: BTreeSet<usize>,
    /// The scripted launcher: members connect as soon as their pane exists.
    pub auto_ready: bool,
    /// The scripted launcher fails every spawn.
    pub launcher_fails: bool,
    /// Every pane the launcher started, by host.
    pub spawned: Vec<(usize, SessionId)>,
    /// How each host's gateway was made, to make it again in `restart`.
    cfg: CoreConfig,
    federations: Vec<Federation>,
}

pub fn host_name(i: usize) -> HostId {
    HostId::new(["a", "b", "c"][i])
}

pub fn core_config() -> CoreConfig {
    CoreConfig {
        poll_interval_ms: 500,
        injected_timeout_ms: 20_000,
        presence_interval_ms: 5_000,
        presence_ttl_ms: 20_000,
        ask_timeout_ms: 60_000,
        profiles: vec!["claude".into()],
        spawn_ready_timeout_ms: 30_000,
        ..CoreConfig::default()
    }
}

impl Fleet {
    /// `n` gateways that trust each other's keys; every one allows control from every other.
    pub fn new(n: usize) -> Fleet {
        Self::with(n, core_config())
    }

    pub fn with(n: usize, cfg: CoreConfig) -> Fleet {
        Self::with_control(n, cfg, |_| (0..n).map(host_name).collect())
    }

    /// `allow(i)`: the gateways host `i` accepts control from.
    pub fn with_control(
        n: usize,
        cfg: CoreConfig,
        allow: impl Fn(usize) -> BTreeSet<HostId>,
    ) -> Fleet {
        let secrets: Vec<[u8; 32]> = (0..n).map(|i| [i as u8 + 1; 32]).collect();
        let publics: BTreeMap<HostId, [u8; 32]> = (0..n)
            .map(|i| {
                let k = Keyring::new(host_name(i), secrets[i], &BTreeMap::new())
                    .expect("a key from 32 bytes");
                (host_name(i), k.public_key())
            })
            .collect();
        let federations: Vec<Federation> = (0..n)
            .map(|i| {
                let keyring =
                    Keyring::new(host_name(i), secrets[i], &publics).expect("peer keys are valid");
                Federation {
                    host: host_name(i),
                    keyring,
                    namespace: "test".into(),
                    control_allowlist: allow(i),
                }
            })
            .collect();
        let hosts = (0..n)
            .map(|i| {
                let fed = federations[i].clone();
                Host {
                    gw: Gateway::federated(
                        cfg.clone(),
                        fed,
                        100 + i as u64,
                        Instant::ZERO,
                        T0_UNIX,
                    )
                    .expect("valid config"),
                    panes: BTreeMap::new(),
                    responses: BTreeMap::new(),
                    trace: Vec::new(),
                }
            })
            .collect();
        let mut f = Fleet {
            now: Instant::ZERO,
            hosts,
            broker: Broker {
                up: true,
                ..Broker::default()
            },
            next_call: 0,
            confirms: VecDeque::new(),
            partitioned: BTreeSet::new(),
            auto_ready: true,
            launcher_fails: false,
            spawned: Vec::new(),
            cfg,
            federations,
        };
        f.broker.generation = 1;
        for i in 0..n {
            f.input(i, Input::Broker(BrokerEvent::Up { generation: 1 }));
        }
        f.settle();
        f
    }

    pub fn input(&mut self, h: usize, input: Input) {
        self.hosts[h].gw.handle(self.now, input);
        self.drain(h);
    }

    fn drain(&mut self, h: usize) {
        while let Some(out) = self.hosts[h].gw.poll_output() {
            let line = format!("{:>8} {} {out}", self.now.to_string(), host_name(h));
            self.hosts[h].trace.push(line);
            match out {
                Output::Broker(op) => self.broker_op(h, op),
                Output::Respond { call, response } => {
                    let previous = self.hosts[h].responses.insert(call, response);
                    assert!(previous.is_none(), "{} answered {call} twice", host_name(h));
                }
                Output::PollStatus { target } => {
                    let input = match self.hosts[h].panes.get(&target) {
                        Some(p) => Input::StatusSampled {
                            target,
                            status: p.status,
                            screen: None,
                        },
                        // herdr: pane_not_found.
                        None => Input::PaneGone { target },
                    };
                    self.hosts[h].gw.handle(self.now, input);
                }
                Output::Inject { target, msg, text } => {
                    let result = match self.hosts[h].panes.get_mut(&target) {
                        Some(p) => {
                            let base = p.screen.clone();
                            p.typed.push(text.clone());
                            p.screen.push_str(&format!("\n❯ {text}"));
                            Ok(base)
                        }
                        None => Err(PaneError::NotFound),
                    };
                    self.hosts[h].gw.handle(
                        self.now,
                        Input::Injected {
                            target,
                            msg,
                            result,
                        },
                    );
                }
                Output::ReadPane { target, msg } => {
                    let screen = self.hosts[h].panes.get(&target).map(|p| p.screen.clone());
                    self.hosts[h].gw.handle(
                        self.now,
                        Input::PaneRead {
                            target,
                            msg,
                            result: screen.ok_or(PaneError::NotFound),
                        },
                    );
                }
                Output::SpawnPane { gid, .. } => {
                    if self.launcher_fails {
                        self.hosts[h].gw.handle(
                            self.now,
                            Input::Spawned {
                                gid,
                                result: Err("profile binary not found".into()),
                            },
                        );
                    } else {
                        self.hosts[h].panes.insert(
                            gid.clone(),
                            Pane {
                                status: AgentStatus::Idle,
                                screen: "❯ ".into(),
                                typed: Vec::new(),
                            },
                        );
                        self.hosts[h].gw.handle(
                            self.now,
                            Input::Spawned {
                                gid: gid.clone(),
                                result: Ok(fleet_core::Readiness::OnConnect),
                            },
                        );
                        self.spawned.push((h, gid.clone()));
                        if self.auto_ready {
                            self.hosts[h]
                                .gw
                                .handle(self.now, Input::MemberConnected { target: gid });
                        }
                    }
                }
                Output::ClosePane { gid } => {
                    self.hosts[h].panes.remove(&gid);
                    self.hosts[h]
                        .gw
                        .handle(self.now, Input::PaneGone { target: gid });
                }
                Output::Audit(_) | Output::Event(_) => {}
            }
        }
    }

    fn broker_op(&mut self, h: usize, op: BrokerOp) {
        if !self.broker.up || self.partitioned.contains(&h) {
            return;
        }
        match op {
            BrokerOp::Declare(t) => self.broker.declare(h, t),
            BrokerOp::DeleteQueue { name } => {
                self.broker.queues.remove(&name);
                self.broker.bindings.retain(|(_, _, q)| q != &name);
                self.broker.consumers.remove(&name);
            }
            BrokerOp::Publish {
                publish,
                exchange,
                key,
                mandatory,
                headers,
                body,
                ..
            } => {
                let msg = Msg {
                    routing_key: key.clone(),
                    headers,
                    body,
                    redelivered: false,
                };
                let routed = self.broker.route(exchange, &key, msg);
                let result = if routed || !mandatory {
                    PublishResult::Routed
                } else {
                    PublishResult::Unroutable
                };
                self.confirms
                    .push_back((h, BrokerEvent::Published { publish, result }));
            }
            BrokerOp::Ack { delivery } => {
                // An ack of an old generation would be a channel error on a real broker; an
                // ack of an unknown tag (twice, or never delivered) too.
                assert_eq!(
                    delivery.generation,
                    self.broker.generation,
                    "{} acked a tag of an old connection",
                    host_name(h)
                );
                let known = self.broker.unacked.remove(&(h, delivery.tag)).is_some();
                assert!(
                    known || delivery.tag > 10_000,
                    "{} acked {delivery} twice or unknown",
                    host_name(h)
                );
            }
            BrokerOp::Reject { delivery } => {
                assert_eq!(
                    delivery.generation, self.broker.generation,
                    "reject of an old tag"
                );
                if let Some((_, mut m)) = self.broker.unacked.remove(&(h, delivery.tag)) {
                    self.broker.rejected.push(m.clone());
                    // As RabbitMQ stamps the first dead-lettering.
                    m.headers
                        .entry("x-first-death-reason".into())
                        .or_insert(HeaderValue::Str("rejected".into()));
                    self.broker.route(Exchange::Dlx, "", m);
                }
            }
        }
    }

    /// Delivers everything deliverable and confirms every publish, until quiet.
    pub fn settle(&mut self) {
        for _ in 0..10_000 {
            let mut progressed = false;
            if let Some((h, ev)) = self.confirms.pop_front() {
                self.input(h, Input::Broker(ev));
                progressed = true;
            }
            let ready: Vec<(String, usize)> = self
                .broker
                .consumers
                .iter()
                .filter(|(q, g)| {
                    !self.partitioned.contains(g)
                        && self.broker.queues.get(*q).is_some_and(|m| !m.is_empty())
                })
                .map(|(q, g)| (q.clone(), *g))
                .collect();
            for (q, g) in ready {
                let Some(m) = self.broker.queues.get_mut(&q).and_then(VecDeque::pop_front) else {
                    continue;
                };
                self.broker.next_tag += 1;
                let tag = self.broker.next_tag;
                self.broker.unacked.insert((g, tag), (q.clone(), m.clone()));
                let delivery = DeliveryId {
                    generation: self.broker.generation,
                    tag,
                };
                self.input(
                    g,
                    Input::Broker(BrokerEvent::Delivery {
                        delivery,
                        queue: q,
                        routing_key: m.routing_key.clone(),
                        redelivered: m.redelivered,
                        headers: m.headers,
                        body: m.body,
                    }),
                );
                progressed = true;
            }
            if !progressed {
                return;
            }
        }
        panic!("the fleet never went quiet");
    }

    /// Advances time in small steps, firing timers and delivering as it goes.
    pub fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            let next = self
                .hosts
                .iter()
                .filter_map(|h| h.gw.poll_timeout().map(|(at, _)| at))
                .min()
                .unwrap_or(end)
                .min(end)
                .max(self.now + Duration::from_millis(1));
            self.now = next.min(end);
            for h in 0..self.hosts.len() {
                if self.hosts[h]
                    .gw
                    .poll_timeout()
                    .is_some_and(|(at, _)| at <= self.now)
                {
                    self.input(h, Input::Tick);
                }
            }
            self.settle();
        }
    }

    pub fn call(&mut self, h: usize, caller: Principal, request: Request) -> CallId {
        self.next_call += 1;
        let call = CallId(self.next_call);
        self.input(
            h,
            Input::Call {
                call,
                caller,
                request,
            },
        );
        self.settle();
        call
    }

    pub fn response(&self, h: usize, call: CallId) -> Option<&Response> {
        self.hosts[h].responses.get(&call)
    }

    /// A lead on host `h`, attached so it has an inbox and is in the roster.
    pub fn lead(&mut self, h: usize, gid: &str) -> Principal {
        let gid = SessionId::new(gid);
        self.input(h, Input::LeadAttached { lead: gid.clone() });
        self.settle();
        Principal::primary(&gid.to_string(), Some(gid))
    }

    /// A ready member on host `h` with an idle pane.
    pub fn member(&mut self, h: usize, gid: &str) -> SessionId {
        let gid = SessionId::new(gid);
        self.hosts[h].panes.insert(
            gid.clone(),
            Pane {
                status: AgentStatus::Idle,
                screen: "❯ ".into(),
                typed: Vec::new(),
            },
        );
        self.input(
            h,
            Input::MemberStarted {
                target: gid.clone(),
            },
        );
        self.input(
            h,
            Input::MemberConnected {
                target: gid.clone(),
            },
        );
        self.settle();
        gid
    }

    pub fn set_status(&mut self, h: usize, pane: &SessionId, status: AgentStatus) {
        if let Some(p) = self.hosts[h].panes.get_mut(pane) {
            p.status = status;
        }
    }

    /// The broker drops every connection; unacked deliveries go back to their queues marked
    /// redelivered, under a new generation.
    pub fn bounce_broker(&mut self) {
        for h in 0..self.hosts.len() {
            self.input(h, Input::Broker(BrokerEvent::Down));
        }
        let unacked = std::mem::take(&mut self.broker.unacked);
        for (_, (q, mut m)) in unacked.into_iter().rev() {
            m.redelivered = true;
            if let Some(queue) = self.broker.queues.get_mut(&q) {
                queue.push_front(m);
            }
        }
        self.broker.generation += 1;
        let generation = self.broker.generation;
        for h in 0..self.hosts.len() {
            self.input(h, Input::Broker(BrokerEvent::Up { generation }));
        }
        self.settle();
    }

    /// Host `h` loses its broker connection (a partition): it is told Down, and what it held
    /// unacked goes back to the queues, redelivered, for when it reconnects.
    pub fn cut(&mut self, h: usize) {
        if self.partitioned.contains(&h) {
            return;
        }
        self.input(h, Input::Broker(BrokerEvent::Down));
        self.partitioned.insert(h);
        let mine: Vec<(usize, u64)> = self
            .broker
            .unacked
            .keys()
            .filter(|(g, _)| *g == h)
            .copied()
            .collect();
        for key in mine.into_iter().rev() {
            if let Some((q, mut m)) = self.broker.unacked.remove(&key) {
                m.redelivered = true;
                if let Some(queue) = self.broker.queues.get_mut(&q) {
                    queue.push_front(m);
                }
            }
        }
        // Its exclusive roster queue dies with the connection.
        let roster = format!("test.roster.{}", host_name(h));
        self.broker.consumers.remove(&roster);
        self.broker.queues.remove(&roster);
    }

    /// Host `h` reconnects (a new generation for everyone, as a reconnect is seen here).
    pub fn heal(&mut self, h: usize) {
        if self.partitioned.remove(&h) {
            self.bounce_broker();
        }
    }

    /// Host `h`'s gateway is killed and started again: its connection dies (what it held
    /// unacked is redelivered), its soft state is gone, and the new process rebuilds its
    /// members from the panes (herdr labels) and its leads from its config.
    pub fn restart(&mut self, h: usize, leads: &[SessionId]) {
        self.cut(h);
        let unix = T0_UNIX + self.now.as_millis();
        self.hosts[h].gw = Gateway::federated(
            self.cfg.clone(),
            self.federations[h].clone(),
            1_000 + h as u64,
            self.now,
            unix,
        )
        .expect("valid config");
        self.hosts[h].trace.push(format!(
            "{:>8} {} restarted",
            self.now.to_string(),
            host_name(h)
        ));
        self.partitioned.remove(&h);
        let generation = self.broker.generation;
        self.input(h, Input::Broker(BrokerEvent::Up { generation }));
        for lead in leads {
            self.input(h, Input::LeadAttached { lead: lead.clone() });
        }
        let panes: Vec<SessionId> = self.hosts[h].panes.keys().cloned().collect();
        for target in panes {
            self.input(
                h,
                Input::MemberStarted {
                    target: target.clone(),
                },
            );
            self.input(h, Input::MemberConnected { target });
        }
        self.settle();
    }

    /// The whole trace of host `h`, one line per output.
    pub fn trace(&self, h: usize) -> String {
        self.hosts[h].trace.join("\n")
    }
}
