//! Simulation speed: seeds per second per core and the sim-time speed-up of the multi-host
//! world (a broker host + gateway hosts on turmoil, faults chosen by each seed), and how the
//! cost grows with hosts and agents per host. One thread: the figures are per core.
//!
//! Run: `cargo bench -p fleet-sim --bench scale` (add `-- --seeds N`, `--sim-secs S`,
//! `--grid` for the whole hosts × agents grid, `--big` to add 12 hosts × 1,000 agents,
//! `--shape HxM` for one shape alone, e.g. under a profiler).

use fleet_sim::multi::{run_multi, MultiConfig};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn text(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// Runs `seeds` seeds of one world shape; returns (wall seconds per seed, sim seconds per seed,
/// broker-visible trace lines per seed).
#[allow(clippy::disallowed_methods)] // a benchmark measures wall time; it never feeds a run
fn cell(hosts: usize, agents: usize, seeds: u64, sim_secs: u64) -> (f64, f64, f64) {
    let cfg = MultiConfig {
        hosts,
        members_per_host: agents,
        sim_secs,
        planted: None,
        adversaries: true,
        queue_type: Default::default(),
    };
    let started = std::time::Instant::now();
    let (mut sim_ms, mut lines) = (0u64, 0usize);
    for seed in 0..seeds {
        match run_multi(seed, &cfg) {
            Ok(r) => {
                sim_ms += r.sim_ms;
                lines += r.trace.lines().count();
                if !r.violations.is_empty() {
                    eprintln!("seed {seed} ({hosts}x{agents}): {:?}", r.violations);
                }
            }
            Err(e) => eprintln!("seed {seed} ({hosts}x{agents}) failed to run: {e}"),
        }
    }
    let wall = started.elapsed().as_secs_f64() / seeds as f64;
    (
        wall,
        sim_ms as f64 / 1000.0 / seeds as f64,
        lines as f64 / seeds as f64,
    )
}

fn main() {
    let seeds = arg("--seeds", 10).max(1);
    let sim_secs = arg("--sim-secs", 60);
    println!(
        "fleet-sim scale: {sim_secs} sim-s of workload per seed (+ the quiet phase), one thread"
    );
    println!(
        "{:>5} {:>12} {:>6} {:>12} {:>12} {:>14} {:>12}",
        "hosts", "agents/host", "seeds", "wall s/seed", "seeds/s", "speed-up (x)", "lines/seed"
    );
    let mut shapes = vec![(3, 2, seeds)];
    if let Some(one) = text("--shape") {
        let parsed = one
            .split_once('x')
            .and_then(|(h, m)| Some((h.parse().ok()?, m.parse().ok()?)));
        let Some((hosts, agents)) = parsed else {
            eprintln!("--shape takes HOSTSxAGENTS, e.g. 12x100; got {one:?}");
            std::process::exit(2);
        };
        shapes = vec![(hosts, agents, seeds)];
    } else if flag("--grid") {
        let few = (seeds / 5).max(1);
        shapes.extend([
            (3, 10, seeds),
            (6, 10, seeds),
            (12, 10, few),
            (3, 100, few),
            (6, 100, 1),
            (12, 100, 1),
            (3, 1000, 1),
        ]);
        if flag("--big") {
            shapes.extend([(6, 1000, 1), (12, 1000, 1)]);
        }
    }
    let mut summary = Vec::new();
    for (hosts, agents, n) in shapes {
        let (wall, sim, lines) = cell(hosts, agents, n, sim_secs);
        println!(
            "{hosts:>5} {agents:>12} {n:>6} {wall:>12.3} {:>12.2} {:>14.0} {lines:>12.0}",
            1.0 / wall,
            sim / wall
        );
        summary.push(format!("{hosts}x{agents} {:.0}x", sim / wall));
    }
    // One line a CI log can be grepped for: each shape's speed-up over real time.
    println!("scale-summary: {}", summary.join(" | "));
}
