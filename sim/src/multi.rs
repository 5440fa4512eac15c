//! The multi-host world on turmoil: a broker host running `SimBroker`, N gateway hosts each
//! running the real driver loop with simulated ports, one lead per host delegating, asking,
//! draining and spawning anywhere in the fleet, and faults chosen by the seed. After the
//! workload and the faults, a quiet phase with everything healed; then the oracle
//! (`judge`) checks the history.

use crate::adversary;
use crate::agent::Behaviour;
use crate::broker::SimBroker;
use crate::host::host_name;
use crate::host::{run_gateway, GatewaySpec, PaneLog, SimHerdr};
use crate::judge;
use crate::lead::{lead, lead_gid, LeadPlan, Ledger};
use crate::net::serve;
use crate::oracle::Violation;
use crate::trace::Trace;
use fleet_core::broker::QueueType;
use fleet_core::planted::PlantedBug;
use fleet_core::signing::Keyring;
use fleet_core::{CoreConfig, HostId, Instant, SessionId};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

const EPOCH_S: u64 = 1_790_000_000;

/// The quiet phase after the workload: faults healed, every bound expired before the oracle
/// looks — the longest chain is a send (≤ 65 s) that comes back a question, answered after
/// ≤ 9.3 s with a 60 s bound; then spawn readiness (30 s + 30 s) and the roster TTL (20 s).
const QUIET_SECS: u64 = 200;

/// turmoil's step: the grain of simulated time (link latencies, timers) and, since every step
/// runs every host's runtime once, the main cost of a quiet second.
const TICK_MS: u64 = 20;

/// Which faults a seed may inject (swarm testing: the profile first, then the events).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultProfile {
    None,
    /// The broker host crashes and restarts (durable state survives, transient does not).
    BrokerBounce,
    /// Gateways lose their broker link — both ways or one way — for a while, then get it back.
    Partitions,
    /// A gateway process crashes and restarts: its soft state is lost and rebuilt from the
    /// panes, which live on in herdr.
    GatewayRestart,
    /// A whole host goes down — gateway, panes, agents — and boots again empty.
    HostCrash,
    /// A gateway's link to the broker stalls (messages held, then released late), and host
    /// wall clocks jump within the configured skew allowance.
    SlowLinks,
    /// A little of everything.
    Chaos,
}

impl FaultProfile {
    pub const ALL: [FaultProfile; 7] = [
        FaultProfile::None,
        FaultProfile::BrokerBounce,
        FaultProfile::Partitions,
        FaultProfile::GatewayRestart,
        FaultProfile::HostCrash,
        FaultProfile::SlowLinks,
        FaultProfile::Chaos,
    ];
}

impl fmt::Display for FaultProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FaultProfile::None => "no-faults",
            FaultProfile::BrokerBounce => "broker-bounce",
            FaultProfile::Partitions => "partitions",
            FaultProfile::GatewayRestart => "gateway-restart",
            FaultProfile::HostCrash => "host-crash",
            FaultProfile::SlowLinks => "slow-links",
            FaultProfile::Chaos => "chaos",
        })
    }
}

/// Which way a partition cuts a gateway's link to the broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    Both,
    /// Gateway → broker lost (acks, publishes), broker → gateway still flowing.
    Up,
    /// Broker → gateway lost (deliveries, confirms).
    Down,
}

impl fmt::Display for Dir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dir::Both => "both-ways",
            Dir::Up => "gateway->broker",
            Dir::Down => "broker->gateway",
        })
    }
}

#[derive(Clone, Copy, Debug)]
enum FaultStep {
    BrokerBounce,
    Restart(usize),
    Crash(usize),
    /// A crash the machine never boots from: its members must leave every roster (I7).
    Lose(usize),
    Boot(usize),
    Cut(usize, Dir),
    Heal(usize, Dir),
    Hold(usize),
    Release(usize),
    /// Set a host's wall-clock error to this many ms.
    ClockJump(usize, i64),
}

/// The fault events of one seed, all inside the workload window (the quiet phase is clean).
fn schedule(
    profile: FaultProfile,
    cfg: &MultiConfig,
    rng: &mut ChaCha8Rng,
) -> Vec<(Duration, FaultStep)> {
    let window = cfg.sim_secs.saturating_sub(8).max(1) * 1000;
    let at = |rng: &mut ChaCha8Rng| Duration::from_millis(5_000 + rng.next_u64() % window);
    let host = |rng: &mut ChaCha8Rng| (rng.next_u64() % cfg.hosts as u64) as usize;
    let mut out = Vec::new();
    let one = |kind: FaultProfile, rng: &mut ChaCha8Rng, out: &mut Vec<(Duration, FaultStep)>| {
        let t = at(rng);
        match kind {
            FaultProfile::BrokerBounce => out.push((t, FaultStep::BrokerBounce)),
            FaultProfile::GatewayRestart => out.push((t, FaultStep::Restart(host(rng)))),
            FaultProfile::HostCrash => {
                let h = host(rng);
                let down = Duration::from_millis(2_000 + rng.next_u64() % 30_000);
                // One machine in four is lost for good: only roster expiry takes its members
                // out of the others' rosters (a restarted host's snapshot would replace them).
                if rng.next_u64().is_multiple_of(4) {
                    out.push((t, FaultStep::Lose(h)));
                } else {
                    out.push((t, FaultStep::Crash(h)));
                    out.push((t + down, FaultStep::Boot(h)));
                }
            }
            FaultProfile::Partitions => {
                let h = host(rng);
                let dir = [Dir::Both, Dir::Up, Dir::Down][(rng.next_u64() % 3) as usize];
                let len = Duration::from_millis(2_000 + rng.next_u64() % 30_000);
                out.push((t, FaultStep::Cut(h, dir)));
                out.push((t + len, FaultStep::Heal(h, dir)));
            }
            FaultProfile::SlowLinks => {
                let h = host(rng);
                if rng.next_u64().is_multiple_of(2) {
                    // Under the dead-peer bound (3 heartbeats): the connection survives, late.
                    let stall = Duration::from_millis(300 + rng.next_u64() % 4_500);
                    out.push((t, FaultStep::Hold(h)));
                    out.push((t + stall, FaultStep::Release(h)));
                } else {
                    // Within the skew allowance (`clock_skew_ms`, 2 s by default), either way.
                    let jump = (rng.next_u64() % 3_000) as i64 - 1_500;
                    out.push((t, FaultStep::ClockJump(h, jump)));
                }
            }
            FaultProfile::None | FaultProfile::Chaos => {}
        }
    };
    match profile {
        FaultProfile::None => {}
        FaultProfile::Chaos => {
            for _ in 0..2 + rng.next_u64() % 3 {
                let k = FaultProfile::ALL[1 + (rng.next_u64() % 5) as usize];
                one(k, rng, &mut out);
            }
        }
        FaultProfile::Partitions => {
            for _ in 0..1 + rng.next_u64() % 3 {
                one(profile, rng, &mut out);
            }
        }
        other => {
            for _ in 0..1 + rng.next_u64() % 2 {
                one(other, rng, &mut out);
            }
        }
    }
    out
}

/// The knobs of one multi-host run.
#[derive(Clone, Debug)]
pub struct MultiConfig {
    pub hosts: usize,
    pub members_per_host: usize,
    pub sim_secs: u64,
    /// A protocol bug to switch on (takes effect only in `planted-bugs` builds).
    pub planted: Option<PlantedBug>,
    /// Whether seeds may draw a lying gateway (`adversary`): one in four does.
    pub adversaries: bool,
    /// The gateways' durable queue type: the simulated broker keeps quorum queues' rules
    /// (single active consumer, the delivery limit) as RabbitMQ does.
    pub queue_type: QueueType,
}

impl Default for MultiConfig {
    fn default() -> Self {
        MultiConfig {
            hosts: 3,
            members_per_host: 2,
            sim_secs: 60,
            planted: None,
            adversaries: true,
            queue_type: QueueType::Classic,
        }
    }
}

/// What one multi-host seed did and whether it held.
#[derive(Clone, Debug)]
pub struct MultiReport {
    pub seed: u64,
    pub profile: FaultProfile,
    pub faults: Vec<String>,
    pub sends: usize,
    pub outcomes: BTreeMap<String, u64>,
    /// Health changes reported, by the state they went to.
    pub health: BTreeMap<String, u64>,
    pub violations: Vec<Violation>,
    pub trace_hash: u64,
    pub sim_ms: u64,
    /// The whole trace, one line per output of every host.
    pub trace: String,
    /// The same, per host, with traceIds (`replay --timeline`).
    pub timeline: String,
    /// msgId → traceId of every envelope published (`replay --flow`).
    pub trace_ids: BTreeMap<String, String>,
}

fn gid(host: usize, n: usize) -> SessionId {
    SessionId::new(format!("{host:08x}-0000-4000-8000-{n:012x}"))
}

/// The command that replays `seed` with `cfg`, as printed beside every failure.
pub fn replay_command(seed: u64, cfg: &MultiConfig) -> String {
    let honest = if cfg.adversaries {
        ""
    } else {
        " --no-adversaries"
    };
    let cmd = match cfg.planted {
        Some(bug) => format!(
            "cargo run --release -p fleet-sim --features planted-bugs -- replay --seed {seed} --hosts {} --workers {} --sim-secs {} --plant {bug}",
            cfg.hosts, cfg.members_per_host, cfg.sim_secs
        ),
        None => format!(
            "cargo run --release -p fleet-sim -- replay --seed {seed} --hosts {} --workers {} --sim-secs {}",
            cfg.hosts, cfg.members_per_host, cfg.sim_secs
        ),
    };
    let quorum = if cfg.queue_type.is_classic() {
        ""
    } else {
        " --queue-type quorum"
    };
    format!("{cmd}{honest}{quorum}")
}

/// The lying gateway a seed draws, if any: one seed in four when adversaries are on.
pub fn liar_of(seed: u64, cfg: &MultiConfig) -> Option<adversary::Liar> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0bad_c0de_1a12_0001);
    (cfg.adversaries && rng.next_u64() % 4 == 0).then(|| adversary::Liar {
        secret: [0xee; 32],
        seed: rng.next_u64(),
        epoch_unix_ms: EPOCH_S * 1000,
        namespace: "fleet".into(),
    })
}

/// The seed's fault profile: its first draw.
fn profile_of(rng: &mut ChaCha8Rng) -> FaultProfile {
    FaultProfile::ALL[(rng.next_u64() % FaultProfile::ALL.len() as u64) as usize]
}

fn world_rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed ^ 0x51ed_2701_a3c5_9b11)
}

/// Runs one seed on the turmoil world and judges it. A gateway whose own invariant check
/// fails (it panics at the step that broke it) ends the seed with an `internal` violation
/// carrying the check's message.
pub fn run_multi(seed: u64, cfg: &MultiConfig) -> Result<MultiReport, Box<dyn std::error::Error>> {
    match crate::internal::catch(|| run_world(seed, cfg)) {
        Ok(report) => report,
        Err(broken) => Ok(MultiReport {
            seed,
            profile: profile_of(&mut world_rng(seed)),
            faults: Vec::new(),
            sends: 0,
            outcomes: BTreeMap::new(),
            health: BTreeMap::new(),
            violations: vec![broken],
            trace_hash: 0,
            sim_ms: 0,
            trace: String::new(),
            timeline: String::new(),
            trace_ids: BTreeMap::new(),
        }),
    }
}

/// The core's config in every gateway of a multi-host world: bounds small enough that what
/// they guard (a negligent lead's window, forgotten tickets, a liar's flood, health changes)
/// is reached within a run.
fn core_config(cfg: &MultiConfig) -> CoreConfig {
    #[allow(unused_mut)]
    let mut core = CoreConfig {
        profiles: vec!["claude".into()],
        spawn_ready_timeout_ms: 30_000,
        // A small window, so a negligent lead's uncollected results fill it many times over
        // within a minute (with results held in the inbox, as the first build did, they wedge).
        // At fleet scale it grows with the fleet, and still fills many times over: a lead's
        // broadcast draws a reply from every member, each moved off the inbox within the window,
        // and 4 at a time a 12 x 100 fleet's replies took a minute of broker round trips to move
        // (a blocking call's reply queued behind them, I11) — a throughput fleetd's default of
        // 64 never shows.
        prefetch: (cfg.hosts * cfg.members_per_host / 16).max(4) as u16,
        held_prefetch: 16,
        // Tickets a negligent lead forgets expire within the run (what was held for them must
        // go with them); the ones it polls are polled in the quiet phase, before this.
        ticket_ttl_ms: 120_000,
        // The liar's flood of unsolicited replies reaches this within the run.
        inbox_cap_per_target: 64,
        // Probed every few seconds, so members' health changes within a run.
        health: fleet_core::health::HealthConfig {
            interval_ms: 3_000,
            stall_suspect_ms: 15_000,
            ..fleet_core::health::HealthConfig::default()
        },
        // One rule for every need, judged by I16; a budget no run exhausts.
        notify: vec![fleet_core::notify::NotifyRule {
            name: "pager".into(),
            grace_ms: crate::judge::NOTICE_GRACE_MS,
            quiet_ms: crate::judge::NOTICE_QUIET_MS,
            max_per_window: 1_000_000,
            ..fleet_core::notify::NotifyRule::default()
        }],
        ..CoreConfig::default()
    };
    #[cfg(feature = "planted-bugs")]
    {
        core.planted = cfg.planted;
    }
    core
}

/// What the faults did to the world so far, and the log of them.
#[derive(Default)]
struct Faults {
    log: Vec<String>,
    /// Hosts whose machine is down: a restart or another crash waits for the boot.
    down: BTreeSet<usize>,
    crashed: BTreeSet<usize>,
    restarted: BTreeSet<usize>,
}

/// What a fault acts on.
struct Targets<'a> {
    names: &'a [HostId],
    herdrs: &'a [SimHerdr],
    skews: &'a [Rc<std::cell::Cell<i64>>],
    ledger: &'a RefCell<Ledger>,
}

impl Faults {
    /// The log's first lines: who lies and who neglects, from the start.
    fn begin(liar: bool, negligent: &BTreeSet<usize>) -> Self {
        let mut log = Vec::new();
        if liar {
            log.push(format!(
                "0.0s a lying gateway ({}) taps the message exchange, answers every brief it sees and claims its target",
                adversary::HOST
            ));
        }
        for h in negligent {
            log.push(format!(
                "0.0s lead{h} is negligent: it collects nothing until the quiet phase, async work in bursts"
            ));
        }
        Faults {
            log,
            ..Faults::default()
        }
    }

    /// Runs the world to `end`, each scheduled fault applied at its time.
    fn play(
        &mut self,
        sim: &mut turmoil::Sim<'_>,
        mut events: Vec<(Duration, FaultStep)>,
        end: Duration,
        world: &Targets<'_>,
    ) -> Result<(), Box<dyn std::error::Error>> {
        events.sort_by_key(|(at, _)| *at);
        let mut next = 0;
        while sim.elapsed() < end {
            let now = sim.elapsed();
            while next < events.len() && events[next].0 <= now {
                let (_, step) = events[next];
                next += 1;
                self.apply(sim, step, now.as_secs_f64(), world);
            }
            sim.step()?;
        }
        Ok(())
    }

    /// One step of the seed's fault schedule, at `at` seconds.
    fn apply(&mut self, sim: &mut turmoil::Sim<'_>, step: FaultStep, at: f64, world: &Targets<'_>) {
        let Targets {
            names,
            herdrs,
            skews,
            ledger,
        } = world;
        let (down, crashed, restarted, fault_log) = (
            &mut self.down,
            &mut self.crashed,
            &mut self.restarted,
            &mut self.log,
        );
        match step {
            FaultStep::BrokerBounce => {
                sim.bounce("broker");
                fault_log.push(format!("{at:.1}s broker bounce"));
            }
            FaultStep::Restart(h) | FaultStep::Crash(h) | FaultStep::Lose(h)
                if down.contains(&h) => {}
            FaultStep::Boot(h) if !down.contains(&h) => {}
            FaultStep::Restart(h) => {
                restarted.insert(h);
                sim.bounce(names[h].to_string());
                fault_log.push(format!("{at:.1}s restart {}", names[h]));
            }
            FaultStep::Crash(h) | FaultStep::Lose(h) => {
                sim.crash(names[h].to_string());
                herdrs[h].crash();
                down.insert(h);
                crashed.insert(h);
                restarted.insert(h);
                ledger.borrow_mut().host_down(h);
                let how = if matches!(step, FaultStep::Lose(_)) {
                    "host lost for good"
                } else {
                    "host crash"
                };
                fault_log.push(format!("{at:.1}s {how} {}", names[h]));
            }
            FaultStep::Boot(h) => {
                down.remove(&h);
                sim.bounce(names[h].to_string());
                fault_log.push(format!("{at:.1}s host boot {}", names[h]));
            }
            FaultStep::Cut(h, dir) => {
                let (gw, b) = (names[h].to_string(), "broker");
                match dir {
                    Dir::Both => sim.partition(gw, b),
                    Dir::Up => sim.partition_oneway(gw, b),
                    Dir::Down => sim.partition_oneway(b, gw),
                }
                fault_log.push(format!("{at:.1}s partition {} {dir}", names[h]));
            }
            FaultStep::Hold(h) => {
                sim.hold(names[h].to_string(), "broker");
                fault_log.push(format!("{at:.1}s link stalls {}", names[h]));
            }
            FaultStep::Release(h) => {
                sim.release(names[h].to_string(), "broker");
                fault_log.push(format!("{at:.1}s link flows {}", names[h]));
            }
            FaultStep::ClockJump(h, ms) => {
                skews[h].set(ms);
                fault_log.push(format!("{at:.1}s clock of {} jumps to {ms:+} ms", names[h]));
            }
            FaultStep::Heal(h, dir) => {
                let (gw, b) = (names[h].to_string(), "broker");
                match dir {
                    Dir::Both => sim.repair(gw, b),
                    Dir::Up => sim.repair_oneway(gw, b),
                    Dir::Down => sim.repair_oneway(b, gw),
                }
                fault_log.push(format!("{at:.1}s repair {} {dir}", names[h]));
            }
        }
    }
}

/// Who a run was: its seed, fault profile, liar, hosts and their herdrs.
struct World<'a> {
    seed: u64,
    profile: FaultProfile,
    liar: bool,
    names: &'a [HostId],
    herdrs: &'a [SimHerdr],
}

/// The run judged: what herdr shows against what the leads were told, and the report.
fn report(
    w: World<'_>,
    elapsed: Duration,
    ledger: &RefCell<Ledger>,
    faults: Faults,
    trace: &Trace,
) -> MultiReport {
    let World {
        seed,
        profile,
        liar,
        names,
        herdrs,
    } = w;
    let at = Instant::from_millis(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX));
    let logs: Vec<PaneLog> = herdrs.iter().map(|h| h.log.borrow().clone()).collect();
    let truth: BTreeSet<(SessionId, HostId)> = herdrs
        .iter()
        .enumerate()
        .flat_map(|(h, herdr)| {
            let name = names[h].clone();
            herdr
                .ready_gids()
                .into_iter()
                .map(move |g| (g, name.clone()))
        })
        .collect();
    let ledger = ledger.borrow();
    let violations = judge::judge(&judge::Facts {
        at,
        ledger: &ledger,
        logs: &logs,
        truth: &truth,
        crashed: &faults.crashed,
        restarted: &faults.restarted,
        liar,
        quiet: profile == FaultProfile::None,
    });
    let mut outcomes = judge::outcomes(&ledger);
    // Every task move, by the state it went to.
    for (_, _, state, _) in logs.iter().flat_map(|l| &l.tasks) {
        *outcomes
            .entry(format!("task {}", state.as_str()))
            .or_default() += 1;
    }
    let mut health: BTreeMap<String, u64> = BTreeMap::new();
    for (_, state, _, _) in logs.iter().flat_map(|l| &l.health) {
        *health.entry(state.to_string()).or_default() += 1;
    }
    let text = trace.text();
    MultiReport {
        seed,
        profile,
        faults: faults.log,
        sends: ledger.sends.len(),
        outcomes,
        health,
        violations,
        trace_hash: crate::run::fnv1a(text.as_bytes()),
        sim_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        trace: text,
        timeline: trace.timeline(),
        trace_ids: trace.trace_ids(),
    }
}

/// Each member's behaviour on host `h`, drawn from the world's stream.
fn behaviours(h: usize, cfg: &MultiConfig, rng: &mut impl RngCore) -> Vec<(SessionId, Behaviour)> {
    (0..cfg.members_per_host)
        .map(|n| {
            let b = match rng.next_u64() % 16 {
                0 | 1 => Behaviour::CompletesSilently,
                2..=4 => Behaviour::Asks,
                5 => Behaviour::Wedges,
                6 => Behaviour::UsageLimit,
                7 => Behaviour::Dies,
                8 => Behaviour::Fast,
                _ => Behaviour::Replies,
            };
            (gid(h, n), b)
        })
        .collect()
}

/// Each host's name, its signing secret, and every host's public key.
type HostKeys = (Vec<HostId>, Vec<[u8; 32]>, BTreeMap<HostId, [u8; 32]>);

fn host_keys(cfg: &MultiConfig) -> Result<HostKeys, Box<dyn std::error::Error>> {
    let names: Vec<HostId> = (0..cfg.hosts).map(host_name).collect();
    let secrets: Vec<[u8; 32]> = (0..cfg.hosts).map(|i| [i as u8 + 1; 32]).collect();
    let mut publics = BTreeMap::new();
    for i in 0..cfg.hosts {
        let k = Keyring::new(names[i].clone(), secrets[i], &BTreeMap::new())?;
        publics.insert(names[i].clone(), k.public_key());
    }
    Ok((names, secrets, publics))
}

/// Host `plan.host`'s gateway and its lead; each restart is a new incarnation of the lead
/// (`plan.incarnation` counts from 1, its seed moved by it) and tells the ledger the host
/// went down.
fn add_host(
    sim: &mut turmoil::Sim<'_>,
    spec: GatewaySpec,
    plan: LeadPlan,
    ledger: Rc<RefCell<Ledger>>,
) {
    let name = spec.host.to_string();
    sim.host(name, move || {
        let h = plan.host;
        if *spec.starts.borrow() > 0 {
            ledger.borrow_mut().host_down(h);
        }
        let incarnation = *spec.starts.borrow() + 1;
        let plan = LeadPlan {
            incarnation,
            seed: plan.seed.wrapping_add(incarnation),
            hosts: plan.hosts.clone(),
            ..plan
        };
        let ledger = ledger.clone();
        run_gateway(spec.clone(), move |gateway, _herdr| async move {
            tokio::task::spawn_local(crate::task_lead::task_lead(
                plan.clone(),
                gateway.clone(),
                ledger.clone(),
            ));
            lead(plan, gateway, ledger).await;
        })
    });
}

fn run_world(seed: u64, cfg: &MultiConfig) -> Result<MultiReport, Box<dyn std::error::Error>> {
    let mut rng = world_rng(seed);
    let profile = profile_of(&mut rng);
    let trace = Trace::default();
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .epoch(SystemTime::UNIX_EPOCH + Duration::from_secs(EPOCH_S))
        .simulation_duration(Duration::from_secs(cfg.sim_secs + QUIET_SECS + 60))
        .tick_duration(Duration::from_millis(TICK_MS))
        .build();
    let broker = Rc::new(RefCell::new(SimBroker::new("fleet")));
    sim.host("broker", move || serve(broker.clone()));

    let (names, secrets, mut publics) = host_keys(cfg)?;
    // A lying gateway, from its own stream of the seed (the other draws stay as they were):
    // its key is trusted like any peer's.
    let liar = liar_of(seed, cfg);
    if let Some(l) = &liar {
        let k = Keyring::new(HostId::new(adversary::HOST), l.secret, &BTreeMap::new())?;
        publics.insert(HostId::new(adversary::HOST), k.public_key());
        let l = l.clone();
        sim.host(adversary::HOST, move || adversary::run(l.clone()));
    }
    let ledger: Rc<RefCell<Ledger>> = Rc::default();
    ledger.borrow_mut().targets = (0..cfg.hosts)
        .flat_map(|h| (0..cfg.members_per_host).map(move |n| (gid(h, n), h)))
        .collect();
    let herdrs: Vec<SimHerdr> = (0..cfg.hosts)
        .map(|h| SimHerdr::seeded(seed ^ (h as u64 + 1).wrapping_mul(0xa076_1d64_78bd_642f)))
        .collect();
    let skews: Vec<Rc<std::cell::Cell<i64>>> = (0..cfg.hosts).map(|_| Rc::default()).collect();
    let workload_until = Duration::from_secs(cfg.sim_secs);
    let settle_at = workload_until + Duration::from_secs(QUIET_SECS - 20);
    let core = core_config(cfg);

    for h in 0..cfg.hosts {
        let behaviours = behaviours(h, cfg, &mut rng);
        let spec = GatewaySpec {
            host: names[h].clone(),
            seed: seed.wrapping_mul(31).wrapping_add(h as u64),
            secret: secrets[h],
            peers: publics.clone(),
            allow: names.iter().cloned().collect::<BTreeSet<_>>(),
            queue_type: cfg.queue_type,
            epoch_unix_ms: EPOCH_S * 1000,
            cfg: core.clone(),
            leads: vec![lead_gid(h)],
            members: behaviours,
            trace: trace.clone(),
            herdr: herdrs[h].clone(),
            starts: Rc::default(),
            skew_ms: skews[h].clone(),
            disk: Default::default(),
        };
        let lead_seed = rng.next_u64();
        // One lead in three never collects while it works (from its own draw: no other moves).
        let negligent = lead_seed.is_multiple_of(3);
        if negligent {
            ledger.borrow_mut().negligent.insert(h);
        }
        let plan = LeadPlan {
            host: h,
            incarnation: 0,
            seed: lead_seed,
            hosts: names.clone(),
            until: workload_until,
            settle_at,
            negligent,
        };
        add_host(&mut sim, spec, plan, ledger.clone());
    }

    // Faults, chosen by the seed.
    let faults = schedule(profile, cfg, &mut rng);
    let end = workload_until + Duration::from_secs(QUIET_SECS);
    let mut played = Faults::begin(liar.is_some(), &ledger.borrow().negligent);
    let world = Targets {
        names: &names,
        herdrs: &herdrs,
        skews: &skews,
        ledger: &ledger,
    };
    played.play(&mut sim, faults, end, &world)?;

    let elapsed = sim.elapsed();
    Ok(report(
        World {
            seed,
            profile,
            liar: liar.is_some(),
            names: &names,
            herdrs: &herdrs,
        },
        elapsed,
        &ledger,
        played,
        &trace,
    ))
}
