//! One seeded run: the seed picks a profile (which agent behaviours may appear), then the
//! workers' behaviours and the leads' workload; the world runs; the oracle judges.

use crate::agent::Behaviour;
use crate::oracle::Violation;
use crate::world::{Workload, World};
use fleet_core::{CoreConfig, Duration, Instant, Outcome};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::fmt;

/// The knobs of a batch; each seed derives everything else from itself.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub workers: usize,
    pub leads: usize,
    /// Simulated seconds of workload; the run then continues until every bound has passed.
    pub sim_secs: u64,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            workers: 5,
            leads: 2,
            sim_secs: 60,
        }
    }
}

/// What one seed did and whether it held.
#[derive(Clone, Debug)]
pub struct RunReport {
    pub seed: u64,
    /// The behaviours this seed allowed (swarm testing), printed with every failure.
    pub profile: Vec<Behaviour>,
    /// Whether panes went WORKING on their own now and then.
    pub busy_spells: bool,
    /// The agents draw notices around their turns (a TUI's chrome).
    pub chrome: bool,
    pub workers: Vec<(String, Behaviour)>,
    pub sends: u64,
    pub injections: u64,
    pub outcomes: BTreeMap<Outcome, u64>,
    /// Health changes reported, by the state they went to.
    pub health: BTreeMap<String, u64>,
    pub violations: Vec<Violation>,
    /// FNV-1a of the full trace: equal for equal seeds, byte for byte.
    pub trace_hash: u64,
    pub sim_ms: u64,
    pub trace: Vec<String>,
}

impl RunReport {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let profile: Vec<String> = self.profile.iter().map(|b| b.to_string()).collect();
        writeln!(
            f,
            "seed {} profile [{}]{}{}",
            self.seed,
            profile.join(", "),
            if self.busy_spells {
                " +busy-spells"
            } else {
                ""
            },
            if self.chrome { " +chrome" } else { "" }
        )?;
        for (w, b) in &self.workers {
            writeln!(f, "  worker {w}: {b}")?;
        }
        write!(
            f,
            "  sends {} injections {} sim {:.1}s trace {:016x}",
            self.sends,
            self.injections,
            self.sim_ms as f64 / 1000.0,
            self.trace_hash
        )
    }
}

/// The core config the simulation runs with: production defaults, but asks time out in a
/// minute so a run's tail stays short.
pub fn sim_core_config() -> CoreConfig {
    CoreConfig {
        ask_timeout_ms: 60_000,
        nudge_interval_ms: 10_000,
        // Probed every few seconds, so a run of a minute sees members' health change.
        health: fleet_core::health::HealthConfig {
            interval_ms: 3_000,
            stall_suspect_ms: 15_000,
            ..fleet_core::health::HealthConfig::default()
        },
        ..CoreConfig::default()
    }
}

/// Runs one seed to the end and judges it. A broken core invariant (a panic at the step it
/// broke) ends the seed with an `internal` violation.
pub fn run_seed(seed: u64, cfg: &RunConfig) -> RunReport {
    crate::internal::catch(|| run_world(seed, cfg)).unwrap_or_else(|broken| RunReport {
        seed,
        profile: Vec::new(),
        busy_spells: false,
        chrome: false,
        workers: Vec::new(),
        sends: 0,
        injections: 0,
        outcomes: BTreeMap::new(),
        health: BTreeMap::new(),
        violations: vec![broken],
        trace_hash: 0,
        sim_ms: 0,
        trace: Vec::new(),
    })
}

fn run_world(seed: u64, cfg: &RunConfig) -> RunReport {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
    // Swarm testing: first pick which behaviours this seed may use, then assign them.
    let mut profile: Vec<Behaviour> = Behaviour::ALL
        .into_iter()
        .filter(|_| rng.next_u64() % 2 == 0)
        .collect();
    if profile.is_empty() {
        profile.push(Behaviour::Replies);
    }
    let mut world = match World::new(seed, sim_core_config()) {
        Ok(w) => w,
        Err(e) => unreachable_config(e),
    };
    let mut workers = Vec::new();
    for i in 0..cfg.workers {
        let b = profile[(rng.next_u64() % profile.len() as u64) as usize];
        let name = format!("w{i}");
        world.add_worker(&name, b);
        workers.push((name, b));
    }
    for i in 0..cfg.leads {
        world.add_lead(&format!("lead{i}"));
    }
    let busy_spells = rng.next_u64() % 2 == 0;
    if busy_spells {
        world.enable_busy_spells();
    }
    let chrome = rng.next_u64() % 2 == 0;
    if chrome {
        world.enable_chrome();
    }
    let until = Instant::ZERO + Duration::from_secs(cfg.sim_secs);
    world.set_workload(Workload {
        until,
        mean_gap_ms: 4_000,
        timeout_ms_min: 5_000,
        timeout_ms_max: 90_000,
    });
    // Past the workload, every timeout (≤ 90 s sends, 60 s asks, answers) has room to fire.
    let end = until + Duration::from_secs(400);
    world.run_until(end);
    world.oracle.finish(world.now);
    let text = world.trace_text();
    RunReport {
        seed,
        profile,
        busy_spells,
        chrome,
        workers,
        sends: world.gw.stats().sends_total,
        injections: world.oracle.injections,
        outcomes: world.oracle.outcomes.clone(),
        health: world
            .oracle
            .health_seen
            .iter()
            .map(|(h, n)| (h.to_string(), *n))
            .collect(),
        violations: world.oracle.violations.clone(),
        trace_hash: fnv1a(text.as_bytes()),
        sim_ms: world.now.as_millis(),
        trace: world.trace,
    }
}

#[cold]
fn unreachable_config(e: fleet_core::ConfigError) -> ! {
    // The simulation's own config is a constant; if it is invalid the build is broken.
    panic!("the simulation's core config is invalid: {e}")
}

/// FNV-1a, 64 bit: a stable hash that does not depend on the platform or Rust version.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
