//! The multi-host world on turmoil: a broker host running `SimBroker`, N gateway hosts each
//! running the real driver loop with simulated ports, one lead per host delegating to members
//! anywhere in the fleet, and faults chosen by the seed. After the workload and the faults, a
//! quiet phase with everything healed; then the oracle judges the history.

use crate::agent::Behaviour;
use crate::broker::SimBroker;
use crate::host::{run_gateway, GatewaySpec, SimHerdr, Trace};
use crate::net::serve;
use crate::oracle::Violation;
use fleet_core::signing::Keyring;
use fleet_core::{CoreConfig, HostId, Instant, Outcome, Principal, Request, Response, SessionId};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

const EPOCH_S: u64 = 1_790_000_000;

/// Which faults a seed may inject (swarm testing: the profile first, then the events).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultProfile {
    None,
    /// The broker host crashes and restarts (durable state survives).
    BrokerBounce,
    /// Gateways lose their broker link for a while, then get it back.
    Partitions,
    /// A gateway process crashes and restarts: its soft state is lost and rebuilt from the
    /// panes, which live on in herdr.
    GatewayRestart,
}

impl fmt::Display for FaultProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FaultProfile::None => "no-faults",
            FaultProfile::BrokerBounce => "broker-bounce",
            FaultProfile::Partitions => "partitions",
            FaultProfile::GatewayRestart => "gateway-restart",
        })
    }
}

/// The knobs of one multi-host run.
#[derive(Clone, Debug)]
pub struct MultiConfig {
    pub hosts: usize,
    pub members_per_host: usize,
    pub sim_secs: u64,
}

impl Default for MultiConfig {
    fn default() -> Self {
        MultiConfig {
            hosts: 3,
            members_per_host: 2,
            sim_secs: 60,
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
    pub violations: Vec<Violation>,
    pub trace_hash: u64,
    pub sim_ms: u64,
    /// The whole trace, one line per output of every host.
    pub trace: String,
}

/// One delegation as its lead saw it.
#[derive(Clone, Debug)]
struct SendRecord {
    host: usize,
    brief: String,
    answers: u32,
    response: Option<Response>,
    /// The lead's own gateway crashed while the call was open: the call died with its
    /// connection (the lead sees a dropped MCP request), so no outcome is owed to it.
    lost: bool,
}

fn gid(host: usize, n: usize) -> SessionId {
    SessionId::new(format!("{host:08x}-0000-4000-8000-{n:012x}"))
}

fn lead_gid(host: usize) -> SessionId {
    SessionId::new(format!("{host:08x}-1111-4111-8111-111111111111"))
}

/// Runs one seed on the turmoil world and judges it.
pub fn run_multi(seed: u64, cfg: &MultiConfig) -> Result<MultiReport, Box<dyn std::error::Error>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x51ed_2701_a3c5_9b11);
    let profile = match rng.next_u64() % 4 {
        0 => FaultProfile::None,
        1 => FaultProfile::BrokerBounce,
        2 => FaultProfile::Partitions,
        _ => FaultProfile::GatewayRestart,
    };
    let trace = Trace::default();
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .epoch(SystemTime::UNIX_EPOCH + Duration::from_secs(EPOCH_S))
        .simulation_duration(Duration::from_secs(cfg.sim_secs + 600))
        .tick_duration(Duration::from_millis(10))
        .build();
    let broker = Rc::new(RefCell::new(SimBroker::new("fleet")));
    sim.host("broker", move || serve(broker.clone()));

    let names: Vec<HostId> = (0..cfg.hosts)
        .map(|i| HostId::new(format!("gw{i}")))
        .collect();
    let secrets: Vec<[u8; 32]> = (0..cfg.hosts).map(|i| [i as u8 + 1; 32]).collect();
    let mut publics = BTreeMap::new();
    for i in 0..cfg.hosts {
        let k = Keyring::new(names[i].clone(), secrets[i], &BTreeMap::new())?;
        publics.insert(names[i].clone(), k.public_key());
    }
    let members: Vec<SessionId> = (0..cfg.hosts)
        .flat_map(|h| (0..cfg.members_per_host).map(move |n| gid(h, n)))
        .collect();
    let sends: Rc<RefCell<Vec<SendRecord>>> = Rc::default();
    let herdrs: Vec<SimHerdr> = (0..cfg.hosts).map(|_| SimHerdr::default()).collect();
    let workload_until = Duration::from_secs(cfg.sim_secs);

    for h in 0..cfg.hosts {
        let behaviours = (0..cfg.members_per_host)
            .map(|n| {
                let b = if rng.next_u64() % 4 == 0 {
                    Behaviour::CompletesSilently
                } else {
                    Behaviour::Replies
                };
                (gid(h, n), b)
            })
            .collect();
        let spec = GatewaySpec {
            host: names[h].clone(),
            seed: seed.wrapping_mul(31).wrapping_add(h as u64),
            secret: secrets[h],
            peers: publics.clone(),
            allow: names.iter().cloned().collect::<BTreeSet<_>>(),
            epoch_unix_ms: EPOCH_S * 1000,
            cfg: CoreConfig {
                profiles: vec!["claude".into()],
                ..CoreConfig::default()
            },
            leads: vec![lead_gid(h)],
            members: behaviours,
            trace: trace.clone(),
            herdr: herdrs[h].clone(),
            starts: Rc::default(),
        };
        let lead_seed = rng.next_u64();
        let (sends, targets) = (sends.clone(), members.clone());
        sim.host(names[h].to_string(), move || {
            if *spec.starts.borrow() > 0 {
                for s in sends.borrow_mut().iter_mut() {
                    if s.host == h && s.answers == 0 {
                        s.lost = true;
                    }
                }
            }
            let (sends, targets) = (sends.clone(), targets.clone());
            let incarnation = *spec.starts.borrow() + 1;
            let seed = lead_seed.wrapping_add(incarnation);
            run_gateway(spec.clone(), move |gateway, _herdr| async move {
                lead(
                    h,
                    incarnation,
                    seed,
                    gateway,
                    targets,
                    sends,
                    workload_until,
                )
                .await;
            })
        });
    }

    // Faults, chosen by the seed.
    let mut faults: Vec<(Duration, Duration, Option<usize>)> = Vec::new();
    match profile {
        FaultProfile::None => {}
        FaultProfile::BrokerBounce => {
            let at = Duration::from_millis(5_000 + rng.next_u64() % (cfg.sim_secs * 800));
            faults.push((at, at, None));
        }
        FaultProfile::GatewayRestart => {
            let h = (rng.next_u64() % cfg.hosts as u64) as usize;
            let at = Duration::from_millis(5_000 + rng.next_u64() % (cfg.sim_secs * 800));
            faults.push((at, at, Some(usize::MAX - h)));
        }
        FaultProfile::Partitions => {
            for _ in 0..1 + rng.next_u64() % 3 {
                let h = (rng.next_u64() % cfg.hosts as u64) as usize;
                let at = Duration::from_millis(5_000 + rng.next_u64() % (cfg.sim_secs * 800));
                let len = Duration::from_millis(2_000 + rng.next_u64() % 30_000);
                faults.push((at, at + len, Some(h)));
            }
        }
    }
    let mut fault_log = Vec::new();
    let end = workload_until + Duration::from_secs(400);
    let mut applied = vec![(false, false); faults.len()];
    while sim.elapsed() < end {
        let now = sim.elapsed();
        for (i, (start, stop, target)) in faults.iter().enumerate() {
            if !applied[i].0 && now >= *start {
                applied[i].0 = true;
                match target {
                    None => {
                        sim.bounce("broker");
                        fault_log.push(format!("{:.1}s broker bounce", now.as_secs_f64()));
                    }
                    Some(r) if *r > cfg.hosts => {
                        let h = usize::MAX - r;
                        sim.bounce(names[h].to_string());
                        fault_log.push(format!("{:.1}s restart {}", now.as_secs_f64(), names[h]));
                    }
                    Some(h) => {
                        sim.partition(names[*h].to_string(), "broker");
                        fault_log.push(format!(
                            "{:.1}s partition {}",
                            now.as_secs_f64(),
                            names[*h]
                        ));
                    }
                }
            }
            if !applied[i].1 && now >= *stop {
                applied[i].1 = true;
                if let Some(h) = target.filter(|r| *r < cfg.hosts) {
                    sim.repair(names[h].to_string(), "broker");
                    fault_log.push(format!("{:.1}s repair {}", now.as_secs_f64(), names[h]));
                }
            }
        }
        sim.step()?;
    }

    let mut violations = Vec::new();
    let at = Instant::from_millis(u64::try_from(sim.elapsed().as_millis()).unwrap_or(u64::MAX));
    // I1: no brief typed twice into any pane.
    for herdr in &herdrs {
        for g in herdr.gids() {
            let typed = herdr.typed(&g);
            let unique: BTreeSet<&String> = typed.iter().collect();
            if unique.len() != typed.len() {
                violations.push(Violation {
                    invariant: "I1",
                    at,
                    detail: format!("{g} was typed {typed:?}"),
                });
            }
        }
    }
    let mut outcomes = BTreeMap::new();
    for s in sends.borrow().iter() {
        // I2: every send ended, exactly once.
        match (&s.response, s.answers) {
            (None, 0) if s.lost => {
                *outcomes
                    .entry("lost with its lead's gateway".into())
                    .or_insert(0) += 1;
            }
            (Some(r), 1) => {
                let name = match r {
                    Response::Outcome { outcome, .. } => outcome.to_string(),
                    Response::Error(e) => format!("error: {}", error_code(e)),
                    other => format!("{other}"),
                };
                *outcomes.entry(name).or_insert(0) += 1;
                // I5: a reply is its own brief's.
                if let Response::Outcome {
                    outcome: Outcome::Replied,
                    body,
                    ..
                } = r
                {
                    if body.as_deref() != Some(format!("done: {}", s.brief).as_str()) {
                        violations.push(Violation {
                            invariant: "I5",
                            at,
                            detail: format!("{} answered with {body:?}", s.brief),
                        });
                    }
                }
            }
            (_, n) => violations.push(Violation {
                invariant: "I2",
                at,
                detail: format!("{} ended {n} times", s.brief),
            }),
        }
    }
    let text = trace.text();
    let send_count = sends.borrow().len();
    Ok(MultiReport {
        seed,
        profile,
        faults: fault_log,
        sends: send_count,
        outcomes,
        violations,
        trace_hash: crate::run::fnv1a(text.as_bytes()),
        sim_ms: u64::try_from(sim.elapsed().as_millis()).unwrap_or(u64::MAX),
        trace: text,
    })
}

fn error_code(e: &fleet_core::CallError) -> &'static str {
    use fleet_core::CallError::*;
    match e {
        BrokerUnavailable => "broker_unavailable",
        NoSuchRecipient { .. } => "no_such_recipient",
        _ => "other",
    }
}

/// A lead: delegates, one blocking send at a time, to a member chosen by its seed anywhere in
/// the fleet, until the workload ends; records every answer.
async fn lead(
    host: usize,
    incarnation: u64,
    seed: u64,
    gateway: fleetd::Handle,
    targets: Vec<SessionId>,
    sends: Rc<RefCell<Vec<SendRecord>>>,
    until: Duration,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let me = Principal::primary(&format!("lead{host}"), Some(lead_gid(host)));
    let started = tokio::time::Instant::now();
    let mut n = 0;
    tokio::time::sleep(Duration::from_secs(3)).await;
    while started.elapsed() < until {
        n += 1;
        let target = targets[(rng.next_u64() % targets.len() as u64) as usize].clone();
        // Unique across the lead's restarts: I1 is judged on the text typed.
        let brief = format!("brief {incarnation}.{n} from lead{host} for {target}");
        let index = {
            let mut s = sends.borrow_mut();
            s.push(SendRecord {
                host,
                brief: brief.clone(),
                answers: 0,
                response: None,
                lost: false,
            });
            s.len() - 1
        };
        let r = gateway
            .call(
                me.clone(),
                Request::Send {
                    target,
                    content: brief,
                    wait: true,
                    timeout_ms: Some(5_000 + rng.next_u64() % 60_000),
                },
            )
            .await;
        if let Ok(r) = r {
            let mut s = sends.borrow_mut();
            s[index].answers += 1;
            s[index].response = Some(r);
        }
        tokio::time::sleep(Duration::from_millis(500 + rng.next_u64() % 4_000)).await;
    }
}
