//! A small in-test fleet: gateways wired by hand through the workspace's one broker model
//! (`fleet_core::testing::broker::SimBroker`, held to RabbitMQ by the conformance suite) and a
//! scripted herdr per gateway (`ScriptedPanes`). Time moves only when a test moves it; every
//! output each gateway makes is kept, typed, for the assertions, and rendered for the trace
//! snapshots.

use fleet_core::broker::DeliveryId;
use fleet_core::broker::{BrokerEvent, BrokerOp};
use fleet_core::signing::Keyring;
use fleet_core::testing::broker::{BrokerError, ConnId, Raw, SimBroker};
use fleet_core::testing::panes::{ScriptedPane, ScriptedPanes};
use fleet_core::{
    AgentStatus, CallId, CoreConfig, Duration, Event, Federation, Gateway, HostId, Input, Instant,
    ListedMember, Output, Principal, RejectCode, Request, Response, SessionId, SpawnError,
};
use std::collections::{BTreeMap, BTreeSet};

pub const T0_UNIX: u64 = 1_790_000_000_000;

pub struct Host {
    pub gw: Gateway,
    pub panes: ScriptedPanes,
    pub responses: BTreeMap<CallId, Response>,
    /// Every output, rendered with its time, for the trace snapshots.
    pub trace: Vec<String>,
    /// Every output, typed, for the assertions.
    pub outputs: Vec<Output>,
}

pub struct Fleet {
    pub now: Instant,
    pub hosts: Vec<Host>,
    pub broker: SimBroker,
    next_call: u64,
    /// Hosts whose link to the broker is stalled: what they send is lost, what the broker
    /// sends them waits in `stalled` until the link flows again (the connection stays up).
    pub partitioned: BTreeSet<usize>,
    stalled: Vec<(usize, BrokerEvent)>,
    /// Hosts cut off (`cut`): their connection is closed until `heal`.
    cut_off: BTreeSet<usize>,
    /// Each host's current connection generation.
    generation: BTreeMap<usize, u32>,
    next_forged: u64,
    /// The scripted launcher: members connect as soon as their pane exists.
    pub auto_ready: bool,
    /// The scripted launcher fails every spawn.
    pub launcher_fails: bool,
    /// The charter receipt (SHA-256 hex) the scripted launcher reports for each spawn.
    pub charter: Option<String>,
    /// Every pane the launcher started, by host.
    pub spawned: Vec<(usize, SessionId)>,
    /// How each host's gateway was made, to make it again in `restart`.
    cfg: CoreConfig,
    federations: Vec<Federation>,
}

pub fn host_name(i: usize) -> HostId {
    HostId::new(["a", "b", "c"][i])
}

fn conn(h: usize) -> ConnId {
    ConnId(h as u32)
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

    /// `n` gateways whose durable queues are of type `qt`.
    pub fn with_queue_type(n: usize, qt: fleet_core::broker::QueueType) -> Fleet {
        Self::build(n, core_config(), |_| (0..n).map(host_name).collect(), qt)
    }

    /// `allow(i)`: the gateways host `i` accepts control from.
    pub fn with_control(
        n: usize,
        cfg: CoreConfig,
        allow: impl Fn(usize) -> BTreeSet<HostId>,
    ) -> Fleet {
        Self::build(n, cfg, allow, fleet_core::broker::QueueType::Classic)
    }

    fn build(
        n: usize,
        cfg: CoreConfig,
        allow: impl Fn(usize) -> BTreeSet<HostId>,
        queue_type: fleet_core::broker::QueueType,
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
                    queue_type,
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
                    panes: ScriptedPanes::default(),
                    responses: BTreeMap::new(),
                    trace: Vec::new(),
                    outputs: Vec::new(),
                }
            })
            .collect();
        let mut f = Fleet {
            now: Instant::ZERO,
            hosts,
            broker: SimBroker::new("test"),
            next_call: 0,
            partitioned: BTreeSet::new(),
            stalled: Vec::new(),
            cut_off: BTreeSet::new(),
            generation: BTreeMap::new(),
            next_forged: 10_000,
            auto_ready: true,
            launcher_fails: false,
            charter: None,
            spawned: Vec::new(),
            cfg,
            federations,
        };
        for i in 0..n {
            let generation = f.broker.connect(conn(i));
            f.generation.insert(i, generation);
            f.input(i, Input::Broker(BrokerEvent::Up { generation }));
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
            self.hosts[h].outputs.push(out.clone());
            if let Some(answer) = self.hosts[h].panes.answer(&out) {
                self.hosts[h].gw.handle(self.now, answer);
                continue;
            }
            match out {
                Output::Broker(op) => self.broker_op(h, op),
                Output::Respond { call, response } => {
                    let previous = self.hosts[h].responses.insert(call, response);
                    assert!(previous.is_none(), "{} answered {call} twice", host_name(h));
                }
                Output::SpawnPane { gid, .. } => {
                    if self.launcher_fails {
                        self.hosts[h].gw.handle(
                            self.now,
                            Input::Spawned {
                                gid,
                                result: Err(SpawnError::Refused("profile binary not found".into())),
                            },
                        );
                    } else {
                        self.hosts[h].panes.add(&gid, ScriptedPane::idle());
                        self.hosts[h].gw.handle(
                            self.now,
                            Input::Spawned {
                                gid: gid.clone(),
                                result: Ok(fleet_core::Launched {
                                    readiness: fleet_core::Readiness::OnConnect,
                                    charter: self.charter.clone(),
                                    reports: false,
                                }),
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
                _ => {}
            }
        }
    }

    /// Carries one operation to the broker, unless the host's link is down or stalled. A
    /// broker error is a bug here (a real broker would close the channel), except an ack of a
    /// tag a test forged (over 10,000) into a delivery the broker never made.
    fn broker_op(&mut self, h: usize, op: BrokerOp) {
        if self.partitioned.contains(&h) || self.cut_off.contains(&h) {
            return;
        }
        let forged = matches!(&op, BrokerOp::Ack { delivery } | BrokerOp::Reject { delivery } if delivery.tag > 10_000);
        match self.broker.apply(conn(h), op) {
            Ok(()) => {}
            Err(BrokerError::UnknownDelivery(_)) if forged => {}
            Err(e) => panic!("{}: the broker refused: {e}", host_name(h)),
        }
    }

    /// Hands every broker event to its gateway (an event for a stalled host waits), until
    /// quiet.
    pub fn settle(&mut self) {
        for _ in 0..100_000 {
            let flowing: Vec<(usize, BrokerEvent)> = {
                let (ready, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.stalled)
                    .into_iter()
                    .partition(|(h, _)| !self.partitioned.contains(h));
                self.stalled = wait;
                ready
            };
            let next = match flowing.is_empty() {
                false => flowing,
                true => match self.broker.poll_event() {
                    Some((c, ev)) => vec![(c.0 as usize, ev)],
                    None => return,
                },
            };
            for (h, ev) in next {
                if self.partitioned.contains(&h) {
                    self.stalled.push((h, ev));
                } else {
                    self.input(h, Input::Broker(ev));
                }
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
            self.broker.tick(self.now);
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
        self.hosts[h].panes.add(&gid, ScriptedPane::idle());
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
        self.hosts[h].panes.set_status(pane, status);
    }

    /// Every connection drops at once (the broker's listener bounced, its state kept):
    /// unacked deliveries go back to their queues marked redelivered, and each gateway
    /// reconnects under a new generation.
    pub fn bounce_broker(&mut self) {
        for h in 0..self.hosts.len() {
            self.input(h, Input::Broker(BrokerEvent::Down));
            self.broker.disconnect(conn(h));
        }
        self.stalled.clear();
        for h in 0..self.hosts.len() {
            if self.cut_off.contains(&h) {
                continue;
            }
            let generation = self.broker.connect(conn(h));
            self.generation.insert(h, generation);
            self.input(h, Input::Broker(BrokerEvent::Up { generation }));
        }
        self.settle();
    }

    /// Host `h` loses its broker connection: it is told Down, and what it held unacked goes
    /// back to the queues, redelivered, for when it reconnects (its exclusive roster queue
    /// dies with the connection).
    pub fn cut(&mut self, h: usize) {
        if !self.cut_off.insert(h) {
            return;
        }
        self.input(h, Input::Broker(BrokerEvent::Down));
        self.broker.disconnect(conn(h));
        self.stalled.retain(|(g, _)| *g != h);
    }

    /// Host `h` reconnects, under a new generation.
    pub fn heal(&mut self, h: usize) {
        if self.cut_off.remove(&h) {
            let generation = self.broker.connect(conn(h));
            self.generation.insert(h, generation);
            self.input(h, Input::Broker(BrokerEvent::Up { generation }));
            self.settle();
        }
    }

    /// Host `h`'s gateway is killed and started again: its connection dies (what it held
    /// unacked is redelivered), its soft state is gone, and the new process rebuilds its
    /// members from the panes (herdr labels, by the core's restart rule) and its leads from
    /// its config.
    pub fn restart(&mut self, h: usize, leads: &[SessionId]) {
        self.restart_keeping(h, leads, Vec::new());
    }

    /// `restart`, the new process given back the replay record `kept` before its broker
    /// comes up, as the daemon does from its state directory.
    pub fn restart_keeping(
        &mut self,
        h: usize,
        leads: &[SessionId],
        kept: Vec<fleet_core::admission::Remembered>,
    ) {
        self.restart_with(h, leads, kept, Vec::new());
    }

    /// `restart_keeping`, the new process also given back the task lists `lists`.
    pub fn restart_with(
        &mut self,
        h: usize,
        leads: &[SessionId],
        kept: Vec<fleet_core::admission::Remembered>,
        lists: Vec<fleet_core::tasks::TaskList>,
    ) {
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
        self.cut_off.remove(&h);
        self.input(h, Input::ReplayRecord { entries: kept });
        if !lists.is_empty() {
            self.input(h, Input::TasksRestored { lists });
        }
        let generation = self.broker.connect(conn(h));
        self.generation.insert(h, generation);
        self.input(h, Input::Broker(BrokerEvent::Up { generation }));
        for lead in leads {
            self.input(h, Input::LeadAttached { lead: lead.clone() });
        }
        let members = self.hosts[h]
            .panes
            .keys()
            .map(|g| ListedMember::ready(g.clone()))
            .collect();
        self.input(h, Input::MembersListed { members });
        self.settle();
    }

    /// Everything host `h` asked to keep in its replay record so far.
    pub fn kept(&self, h: usize) -> Vec<fleet_core::admission::Remembered> {
        self.hosts[h]
            .outputs
            .iter()
            .filter_map(|o| match o {
                Output::Remember(e) => Some(e.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// The task lists host `h` last asked to keep, one per lead.
    pub fn kept_tasks(&self, h: usize) -> Vec<fleet_core::tasks::TaskList> {
        let mut by_lead = BTreeMap::new();
        for o in &self.hosts[h].outputs {
            if let Output::KeepTasks(l) = o {
                by_lead.insert(l.lead.clone(), l.clone());
            }
        }
        by_lead.into_values().collect()
    }

    /// The whole trace of host `h`, one line per output.
    pub fn trace(&self, h: usize) -> String {
        self.hosts[h].trace.join("\n")
    }

    /// Every event host `h` reported.
    pub fn events(&self, h: usize) -> impl Iterator<Item = &Event> {
        self.hosts[h].outputs.iter().filter_map(|o| match o {
            Output::Event(e) => Some(e),
            _ => None,
        })
    }

    /// Every rejection host `h` reported: its code and detail.
    pub fn rejections(&self, h: usize) -> Vec<(RejectCode, &str)> {
        self.events(h)
            .filter_map(|e| match e {
                Event::Rejected { code, detail, .. } => Some((*code, detail.as_str())),
                _ => None,
            })
            .collect()
    }

    /// The first delivery from `queue` waiting for stalled host `h`, taken away: `h` never
    /// gets it (as if a client with broker access had consumed it first).
    pub fn take_stalled(&mut self, h: usize, queue: &str) -> Option<Raw> {
        let i = self.stalled.iter().position(|(g, ev)| {
            *g == h && matches!(ev, BrokerEvent::Delivery { queue: q, .. } if q == queue)
        })?;
        match self.stalled.remove(i).1 {
            BrokerEvent::Delivery {
                routing_key,
                headers,
                body,
                ..
            } => Some(Raw {
                routing_key,
                headers,
                body,
            }),
            _ => None,
        }
    }

    /// A copy of the first delivery from `queue` waiting for stalled host `h` (a capture of
    /// live traffic), left in place.
    pub fn stalled_copy(&self, h: usize, queue: &str) -> Option<Raw> {
        self.stalled.iter().find_map(|(g, ev)| match ev {
            BrokerEvent::Delivery {
                queue: q,
                routing_key,
                headers,
                body,
                ..
            } if *g == h && q == queue => Some(Raw {
                routing_key: routing_key.clone(),
                headers: headers.clone(),
                body: body.clone(),
            }),
            _ => None,
        })
    }

    /// Hands `m` to host `h` as a delivery from `queue` the broker did not make itself (a tag
    /// over 10,000), marked `redelivered` as asked: what a redelivery after a lost ack looks
    /// like to the gateway.
    pub fn deliver_forged(&mut self, h: usize, queue: &str, m: Raw, redelivered: bool) {
        self.next_forged += 1;
        let delivery = DeliveryId {
            generation: self.generation.get(&h).copied().unwrap_or(0),
            tag: self.next_forged,
        };
        self.input(
            h,
            Input::Broker(BrokerEvent::Delivery {
                delivery,
                queue: queue.to_string(),
                routing_key: m.routing_key,
                redelivered,
                headers: m.headers,
                body: m.body,
            }),
        );
        self.settle();
    }

    /// Every broker operation host `h` asked for.
    pub fn broker_ops(&self, h: usize) -> impl Iterator<Item = &BrokerOp> {
        self.hosts[h].outputs.iter().filter_map(|o| match o {
            Output::Broker(op) => Some(op),
            _ => None,
        })
    }
}
