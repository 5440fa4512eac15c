//! Gateways on a real RabbitMQ, in one test process: each is the production driver loop with
//! fleetd's lapin port and the simulation's herdr double (`fleet_sim::host::SimHerdr` and its
//! agents, on real time). The double stands in for herdr because this issue is about the
//! broker; the herdr socket client has its own tests. Every fleet gets a namespace of its own,
//! and deletes its queues when it finishes.

use crate::conformance::amqp_side::{delete_all, kill_connection};
use fleet_core::broker::{BrokerEvent, BrokerOp, DeliveryId, Names};
use fleet_core::signing::Keyring;
use fleet_core::{CoreConfig, Federation, Gateway, HostId, Input, Principal, SessionId};
use fleet_sim::agent::Behaviour;
use fleet_sim::host::{agents, SimHerdr};
use fleetd::amqp::Status;
use fleetd::{AmqpBroker, AmqpConfig, BrokerPort, Driver, Handle, HerdrPort, Quiet, TokioClock};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};

pub fn amqp_uri() -> String {
    std::env::var("FLEET_AMQP_URI")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_string())
}

/// The broker's nodes: `FLEET_AMQP_URIS` (comma-separated: a cluster), else `amqp_uri()`.
pub fn amqp_uris() -> Vec<String> {
    match std::env::var("FLEET_AMQP_URIS") {
        Ok(list) if !list.trim().is_empty() => list
            .split(',')
            .map(|u| u.trim().to_string())
            .filter(|u| !u.is_empty())
            .collect(),
        _ => vec![amqp_uri()],
    }
}

/// The durable queues' type for in-process gateways: `FLEET_QUEUE_TYPE=quorum`, else classic.
pub fn queue_type_from_env() -> fleet_core::broker::QueueType {
    match std::env::var("FLEET_QUEUE_TYPE").as_deref() {
        Ok("quorum") => fleet_core::broker::QueueType::Quorum,
        _ => fleet_core::broker::QueueType::Classic,
    }
}

/// Timeouts scaled for tests: agents poll fast, presence converges in seconds, and inbox
/// queues left by a crashed test expire within a minute.
pub fn test_config() -> CoreConfig {
    CoreConfig {
        poll_interval_ms: 200,
        presence_interval_ms: 1_000,
        presence_ttl_ms: 4_000,
        profiles: vec!["claude".into()],
        spawn_ready_timeout_ms: 60_000,
        worker_inbox_expires_ms: 60_000,
        lead_inbox_expires_ms: 60_000,
        ..CoreConfig::default()
    }
}

pub fn host(i: usize) -> HostId {
    HostId::new(format!("gw{i}"))
}

pub fn lead(i: usize) -> SessionId {
    SessionId::new(format!("{i:08x}-1111-4111-8111-111111111111"))
}

pub fn member(i: usize, n: usize) -> SessionId {
    SessionId::new(format!("{i:08x}-0000-4000-8000-{n:012x}"))
}

pub fn lead_principal(i: usize) -> Principal {
    Principal::primary(&format!("lead{i}"), Some(lead(i)))
}

/// The lapin port, recording what it hands the core and what the core settles.
/// `next_event` stays cancel-safe: the record is made in the same poll that takes the event.
pub struct Watched {
    inner: AmqpBroker,
    pub seen: Rc<RefCell<Seen>>,
}

/// What a `Watched` port saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Every delivery handed to the core: (queue, redelivered).
    pub deliveries: Vec<(String, bool)>,
    /// Deliveries of the current generation the core has not acked or rejected yet, and
    /// their queues.
    pub held: BTreeMap<DeliveryId, String>,
    /// The most ever held at once from each queue (each consumer has its own prefetch).
    pub max_held: BTreeMap<String, usize>,
    pub publishes: u64,
}

impl BrokerPort for Watched {
    fn submit(&mut self, op: BrokerOp) {
        {
            let mut seen = self.seen.borrow_mut();
            match &op {
                BrokerOp::Ack { delivery } | BrokerOp::Reject { delivery } => {
                    seen.held.remove(delivery);
                }
                BrokerOp::Publish { .. } => seen.publishes += 1,
                _ => {}
            }
        }
        self.inner.submit(op);
    }

    async fn next_event(&mut self) -> Option<BrokerEvent> {
        let ev = self.inner.next_event().await;
        let mut seen = self.seen.borrow_mut();
        match &ev {
            Some(BrokerEvent::Delivery {
                delivery,
                queue,
                redelivered,
                ..
            }) => {
                seen.deliveries.push((queue.clone(), *redelivered));
                seen.held.insert(*delivery, queue.clone());
                let now = seen.held.values().filter(|q| *q == queue).count();
                let max = seen.max_held.entry(queue.clone()).or_default();
                *max = (*max).max(now);
            }
            Some(BrokerEvent::Down) => seen.held.clear(),
            _ => {}
        }
        drop(seen);
        ev
    }
}

/// A gateway's loop, running: what `TestFleet::boot` returns for any herdr double.
pub struct Booted {
    pub handle: Handle,
    pub status: watch::Receiver<Status>,
    pub seen: Rc<RefCell<Seen>>,
    pub connection_name: String,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<Gateway>>,
}

impl Booted {
    /// The broker closes this gateway's current connection, as an operator or a dying network
    /// would.
    pub async fn kill_connection(&self) -> Result<(), String> {
        let generation = self.status.borrow().generation;
        kill_connection(&format!("{}#{generation}", self.connection_name)).await
    }

    /// Stops the loop (SIGTERM-like) and returns the gateway for inspection.
    pub async fn shutdown(&mut self) -> Option<Gateway> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.done.take() {
            Some(done) => done.await.ok(),
            None => None,
        }
    }

    /// Waits until the port is connected (bounded).
    pub async fn connected(&self) -> Result<(), String> {
        let mut st = self.status.clone();
        let up = tokio::time::timeout(Duration::from_secs(20), st.wait_for(|s| s.connected))
            .await
            .is_ok_and(|r| r.is_ok());
        if up {
            Ok(())
        } else {
            Err(format!(
                "{} never connected: {:?}",
                self.connection_name,
                self.status.borrow().last_error
            ))
        }
    }
}

/// One running gateway with the simulation's herdr double and its agents.
pub struct TestGateway {
    pub index: usize,
    pub herdr: SimHerdr,
    pub run: Booted,
}

impl std::ops::Deref for TestGateway {
    type Target = Booted;
    fn deref(&self) -> &Booted {
        &self.run
    }
}

impl std::ops::DerefMut for TestGateway {
    fn deref_mut(&mut self) -> &mut Booted {
        &mut self.run
    }
}

/// Gateways sharing one broker namespace. Must live inside a `tokio::task::LocalSet`.
pub struct TestFleet {
    pub ns: String,
    pub gateways: Vec<TestGateway>,
    secrets: Vec<[u8; 32]>,
    publics: BTreeMap<HostId, [u8; 32]>,
    hosts: usize,
    members: BTreeMap<usize, Vec<(SessionId, Behaviour)>>,
    cfg: CoreConfig,
    /// The durable queues' type (from `FLEET_QUEUE_TYPE`, or set before launching).
    pub queue_type: fleet_core::broker::QueueType,
}

impl TestFleet {
    /// Starts `members.len()` gateways; host `i` serves `members[i]` and one lead.
    pub async fn start(
        tag: &str,
        cfg: CoreConfig,
        members: Vec<Vec<Behaviour>>,
    ) -> Result<TestFleet, String> {
        let mut fleet = TestFleet::new(tag, cfg, members)?;
        for i in 0..fleet.hosts {
            let herdr = SimHerdr::default();
            for (gid, b) in fleet.members.get(&i).cloned().unwrap_or_default() {
                herdr.add(&gid, b);
            }
            let g = fleet.launch(i, herdr, 1).await?;
            fleet.gateways.push(g);
        }
        Ok(fleet)
    }

    /// Keys and names for `members.len()` gateways, none started yet.
    pub fn new(
        tag: &str,
        cfg: CoreConfig,
        members: Vec<Vec<Behaviour>>,
    ) -> Result<TestFleet, String> {
        let hosts = members.len();
        let ns = format!("it{}{tag}", std::process::id());
        let secrets: Vec<[u8; 32]> = (0..hosts).map(|i| [i as u8 + 1; 32]).collect();
        let mut publics = BTreeMap::new();
        for (i, secret) in secrets.iter().enumerate() {
            let k = Keyring::new(host(i), *secret, &BTreeMap::new()).map_err(|e| e.to_string())?;
            publics.insert(host(i), k.public_key());
        }
        let members = members
            .into_iter()
            .enumerate()
            .map(|(i, bs)| {
                let gids = bs
                    .into_iter()
                    .enumerate()
                    .map(|(n, b)| (member(i, n), b))
                    .collect();
                (i, gids)
            })
            .collect();
        Ok(TestFleet {
            ns,
            gateways: Vec::new(),
            secrets,
            publics,
            hosts,
            members,
            cfg,
            queue_type: queue_type_from_env(),
        })
    }

    /// Starts (or restarts, with the same herdr and its panes) gateway `i` with the
    /// simulation's herdr double and its agents.
    pub async fn launch(
        &self,
        i: usize,
        herdr: SimHerdr,
        start: u64,
    ) -> Result<TestGateway, String> {
        let run = self
            .boot(i, herdr.clone(), start, &herdr.gids(), &herdr.ready_gids())
            .await?;
        tokio::task::spawn_local(agents(herdr.clone(), run.handle.clone()));
        Ok(TestGateway {
            index: i,
            herdr,
            run,
        })
    }

    /// Gateway `i`'s identity in this fleet: its host, keys, namespace and allowlist.
    pub fn federation(&self, i: usize) -> Result<Federation, String> {
        let secret = self
            .secrets
            .get(i)
            .ok_or_else(|| format!("no gateway {i} in this fleet"))?;
        let keyring = Keyring::new(host(i), *secret, &self.publics).map_err(|e| e.to_string())?;
        Ok(Federation {
            host: host(i),
            keyring,
            namespace: self.ns.clone(),
            control_allowlist: (0..self.hosts).map(host).collect::<BTreeSet<_>>(),
            queue_type: self.queue_type,
        })
    }

    /// Starts gateway `i`'s loop on `herdr` with the lapin port, its lead attached and
    /// `members` started (`ready` ones connected). Must run inside a `LocalSet`.
    pub async fn boot<H: HerdrPort + 'static>(
        &self,
        i: usize,
        herdr: H,
        start: u64,
        members: &[SessionId],
        ready: &[SessionId],
    ) -> Result<Booted, String> {
        let federation = self.federation(i)?;
        let clock = TokioClock::new();
        let gw = Gateway::federated(
            self.cfg.clone(),
            federation,
            (i as u64) << 32 | start,
            fleetd::Clock::now(&clock),
            fleetd::Clock::unix_ms(&clock),
        )
        .map_err(|e| e.to_string())?;
        let mut amqp = AmqpConfig::cluster(amqp_uris(), &self.ns);
        amqp.connection_name = format!("it/{}/gw{i}/start{start}", self.ns);
        amqp.backoff_max = Duration::from_secs(1);
        let broker = AmqpBroker::start(amqp.clone()).map_err(|e| e.to_string())?;
        let status = broker.status();
        let seen: Rc<RefCell<Seen>> = Rc::default();
        let broker = Watched {
            inner: broker,
            seen: seen.clone(),
        };
        let driver = Driver::new(gw, herdr, broker, clock, Quiet);
        let (handle, calls) = Driver::<H, Watched, TokioClock, Quiet>::channel();
        let (stop, stopped) = oneshot::channel();
        let done = tokio::task::spawn_local(driver.run(calls, stopped));
        let tell = |input| {
            let h = handle.clone();
            async move { h.tell(input).await.map_err(|e| e.to_string()) }
        };
        tell(Input::LeadAttached { lead: lead(i) }).await?;
        for gid in members {
            tell(Input::MemberStarted {
                target: gid.clone(),
            })
            .await?;
        }
        for gid in ready {
            tell(Input::MemberConnected {
                target: gid.clone(),
            })
            .await?;
        }
        Ok(Booted {
            handle,
            status,
            seen,
            connection_name: amqp.connection_name,
            stop: Some(stop),
            done: Some(done),
        })
    }

    /// Waits until every gateway is connected (bounded).
    pub async fn connected(&self) -> Result<(), String> {
        for g in &self.gateways {
            g.run.connected().await?;
        }
        Ok(())
    }

    /// Every text typed into any pane of this fleet, with the pane.
    pub fn typed(&self) -> Vec<(SessionId, String)> {
        self.gateways
            .iter()
            .flat_map(|g| g.herdr.log.borrow().typed.clone())
            .collect()
    }

    /// Stops every gateway and deletes this fleet's queues and exchanges.
    pub async fn finish(mut self) {
        self.finish_with(&[]).await;
    }

    /// `finish`, also deleting the inboxes of `extra` gids (members a caller started itself).
    pub async fn finish_with(&mut self, extra: &[SessionId]) {
        for g in &mut self.gateways {
            g.shutdown().await;
        }
        let names = Names::new(&self.ns);
        let mut queues = vec![names.dlq()];
        let mut gids: Vec<SessionId> = Vec::new();
        for i in 0..self.hosts {
            queues.push(names.control(&host(i)));
            queues.push(names.dead_letters(&host(i)));
            gids.push(lead(i));
        }
        for members in self.members.values() {
            gids.extend(members.iter().map(|(g, _)| g.clone()));
        }
        for g in &self.gateways {
            gids.extend(g.herdr.gids());
        }
        gids.extend(extra.iter().cloned());
        for g in &gids {
            queues.push(names.inbox(g));
            queues.push(names.held(g));
        }
        delete_all(&amqp_uri(), &queues, &names).await;
    }
}

/// Deletes what a fleet under `ns` declared: the dead-letter queues, each host's control
/// queue, the inboxes and held queues of `gids`, and the exchanges (others expire by
/// `x-expires`).
pub async fn delete_namespace(ns: &str, hosts: &[&str], gids: &[&str]) {
    let names = Names::new(ns);
    let mut queues = vec![names.dlq()];
    for h in hosts.iter().map(HostId::new) {
        queues.push(names.control(&h));
        queues.push(names.dead_letters(&h));
    }
    for g in gids.iter().map(SessionId::new) {
        queues.push(names.inbox(&g));
        queues.push(names.held(&g));
    }
    delete_all(&amqp_uri(), &queues, &names).await;
}
