//! `fleet-sim`: run seeded simulations of fleetd and replay any one of them.

use clap::{Parser, Subcommand};
use fleet_sim::multi::{run_multi, MultiConfig, MultiReport};
use fleet_sim::{run_seed, say, say_raw, RunConfig, RunReport};
use std::collections::BTreeMap;
use std::io::Write;
use std::ops::Range;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Parser)]
#[command(
    name = "fleet-sim",
    about = "Seeded, replayable simulations of fleetd that check its delivery invariants",
    long_about = "Each seed builds a world — a gateway running the real fleet-core, simulated \
herdr panes whose agents reply, complete silently, ask mid-turn, wedge, hit usage limits or \
die, and leads that delegate, answer, poll and drain — runs it in virtual time and checks the \
invariants of docs/invariants.md. Same seed, same trace, byte for byte."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a batch of seeds and summarise; exits 1 if any seed breaks an invariant.
    Run {
        /// Seeds to run, as START..END (end exclusive).
        #[arg(long, default_value = "0..200", value_parser = parse_range)]
        seeds: Range<u64>,
        /// Worker threads (seeds are independent; each is deterministic on its own).
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        #[command(flatten)]
        world: WorldArgs,
        /// Also run every seed a second time and compare trace hashes.
        #[arg(long)]
        check_determinism: bool,
        /// Run the batch once per shape, as HOSTSxMEMBERS,… (for example `3x2,4x5,3x10`),
        /// instead of `--hosts`/`--workers`.
        #[arg(long, value_delimiter = ',', value_parser = parse_shape)]
        shapes: Vec<(usize, usize)>,
        /// Run only this machine's share of the seeds, as I/N: the seeds whose remainder
        /// modulo N is I (so N machines with I = 0..N cover the range once).
        #[arg(long, value_parser = parse_shard)]
        shard: Option<(u64, u64)>,
    },
    /// Run one seed and print its timeline.
    Replay {
        /// The seed to run, as printed by `run` with its failure.
        #[arg(long)]
        seed: u64,
        #[command(flatten)]
        world: WorldArgs,
        /// Write the trace to this file instead of standard output.
        #[arg(long)]
        trace: Option<std::path::PathBuf>,
        /// Print a per-host timeline with the traceId on every line (multi-host world).
        #[arg(long)]
        timeline: bool,
        /// Print one flow across every host in time order: the lines about the messages whose
        /// traceId (or, for a local message, msgId) starts with this (from `--timeline`'s
        /// `[trace …]` tags). Multi-host world.
        #[arg(long, value_name = "TRACE_ID")]
        flow: Option<String>,
    },
    /// Prove the oracle can fail: for each planted protocol bug, run seeds in order until one
    /// is caught, and print that seed with its replay command. Exits 1 if a bug goes uncaught.
    #[cfg(feature = "planted-bugs")]
    Prove {
        /// Seeds to try per bug, as START..END.
        #[arg(long, default_value = "0..1000", value_parser = parse_range)]
        seeds: Range<u64>,
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        /// Gateway hosts.
        #[arg(long, default_value_t = 3)]
        hosts: usize,
        /// Members per host.
        #[arg(long, default_value_t = 2)]
        workers: usize,
        #[arg(long, default_value_t = 60)]
        sim_secs: u64,
        /// Only this bug (default: all of them).
        #[arg(long, value_parser = parse_bug)]
        bug: Option<fleet_core::planted::PlantedBug>,
    },
}

#[cfg(feature = "planted-bugs")]
fn parse_bug(s: &str) -> Result<fleet_core::planted::PlantedBug, String> {
    fleet_core::planted::PlantedBug::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = fleet_core::planted::PlantedBug::ALL
            .iter()
            .map(|b| b.name())
            .collect();
        format!("unknown bug {s:?}; one of: {}", names.join(", "))
    })
}

/// The shape of each simulated world; a seed derives everything else.
#[derive(clap::Args)]
struct WorldArgs {
    /// Gateway hosts. 1: the single-host world (fast, no broker). 2 or more: the turmoil
    /// world — a broker host and gateway hosts running the real driver loop, with faults.
    #[arg(long, default_value_t = 1)]
    hosts: usize,
    /// Workers (member panes) per world (per host in the multi-host world).
    #[arg(long, default_value_t = 5)]
    workers: usize,
    /// Leads per world.
    #[arg(long, default_value_t = 2)]
    leads: usize,
    /// Simulated seconds of workload per seed.
    #[arg(long, default_value_t = 60)]
    sim_secs: u64,
    /// Switch on a planted protocol bug (multi-host world; `planted-bugs` builds only).
    #[cfg(feature = "planted-bugs")]
    #[arg(long, value_parser = parse_bug)]
    plant: Option<fleet_core::planted::PlantedBug>,
    /// Keep the world honest: no seed draws a lying gateway (by default one in four does).
    #[arg(long)]
    no_adversaries: bool,
    /// The gateways' durable queue type (multi-host world): `quorum` runs the broker with
    /// quorum queues' rules — one active consumer, the delivery limit, all messages kept.
    #[arg(long, default_value = "classic", value_parser = parse_queue_type)]
    queue_type: fleet_core::broker::QueueType,
}

fn parse_queue_type(s: &str) -> Result<fleet_core::broker::QueueType, String> {
    match s {
        "classic" => Ok(fleet_core::broker::QueueType::Classic),
        "quorum" => Ok(fleet_core::broker::QueueType::Quorum),
        _ => Err(format!("unknown queue type {s:?}; classic or quorum")),
    }
}

impl WorldArgs {
    fn multi(&self) -> MultiConfig {
        MultiConfig {
            hosts: self.hosts,
            members_per_host: self.workers,
            sim_secs: self.sim_secs,
            #[cfg(feature = "planted-bugs")]
            planted: self.plant,
            #[cfg(not(feature = "planted-bugs"))]
            planted: None,
            adversaries: !self.no_adversaries,
            queue_type: self.queue_type,
        }
    }
}

impl From<WorldArgs> for RunConfig {
    fn from(a: WorldArgs) -> Self {
        RunConfig {
            workers: a.workers,
            leads: a.leads,
            sim_secs: a.sim_secs,
        }
    }
}

fn parse_range(s: &str) -> Result<Range<u64>, String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("expected START..END, got {s:?}"))?;
    let a: u64 = a
        .trim()
        .parse()
        .map_err(|e| format!("bad start {a:?}: {e}"))?;
    let b: u64 = b
        .trim()
        .parse()
        .map_err(|e| format!("bad end {b:?}: {e}"))?;
    if b <= a {
        return Err(format!("empty range {s:?}: END must be greater than START"));
    }
    Ok(a..b)
}

/// `HOSTSxMEMBERS`, a multi-host shape.
fn parse_shape(s: &str) -> Result<(usize, usize), String> {
    let (h, w) = s
        .split_once('x')
        .ok_or_else(|| format!("shape {s:?} is not HOSTSxMEMBERS (like 4x5)"))?;
    let hosts: usize = h
        .trim()
        .parse()
        .map_err(|e| format!("bad hosts in {s:?}: {e}"))?;
    let members: usize = w
        .trim()
        .parse()
        .map_err(|e| format!("bad members in {s:?}: {e}"))?;
    if hosts < 2 || members == 0 {
        return Err(format!("shape {s:?}: at least 2 hosts and 1 member"));
    }
    Ok((hosts, members))
}

/// `I/N`, a shard of the seeds.
fn parse_shard(s: &str) -> Result<(u64, u64), String> {
    let (i, n) = s
        .split_once('/')
        .ok_or_else(|| format!("shard {s:?} is not I/N (like 0/4)"))?;
    let i: u64 = i
        .trim()
        .parse()
        .map_err(|e| format!("bad I in {s:?}: {e}"))?;
    let n: u64 = n
        .trim()
        .parse()
        .map_err(|e| format!("bad N in {s:?}: {e}"))?;
    if n == 0 || i >= n {
        return Err(format!("shard {s:?}: need 0 <= I < N"));
    }
    Ok((i, n))
}

fn main() -> ExitCode {
    match Cli::parse().cmd {
        Cmd::Run {
            seeds,
            jobs,
            world,
            check_determinism,
            shapes,
            shard,
        } if !shapes.is_empty() => {
            let mut failed = false;
            for (hosts, members) in shapes {
                let cfg = MultiConfig {
                    hosts,
                    members_per_host: members,
                    ..world.multi()
                };
                let code = multi_run(seeds.clone(), jobs.max(1), cfg, check_determinism, shard);
                failed |= code != ExitCode::SUCCESS;
            }
            if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Cmd::Run {
            seeds,
            jobs,
            world,
            check_determinism,
            shard,
            ..
        } if world.hosts > 1 => {
            multi_run(seeds, jobs.max(1), world.multi(), check_determinism, shard)
        }
        Cmd::Replay {
            seed,
            world,
            trace,
            timeline,
            flow,
        } if world.hosts > 1 => multi_replay(seed, world.multi(), trace, timeline, flow),
        Cmd::Run {
            seeds,
            jobs,
            world,
            check_determinism,
            ..
        } => run(seeds, jobs.max(1), world.into(), check_determinism),
        Cmd::Replay {
            seed, world, trace, ..
        } => replay(seed, world.into(), trace),
        #[cfg(feature = "planted-bugs")]
        Cmd::Prove {
            seeds,
            jobs,
            hosts,
            workers,
            sim_secs,
            bug,
        } => {
            let cfg = MultiConfig {
                hosts: hosts.max(2),
                members_per_host: workers,
                sim_secs,
                planted: None,
                adversaries: true,
                queue_type: Default::default(),
            };
            let bugs = bug.map_or_else(
                || fleet_core::planted::PlantedBug::ALL.to_vec(),
                |b| vec![b],
            );
            fleet_sim::prove::prove(&bugs, seeds, jobs.max(1), &cfg)
        }
    }
}

fn replay_cmd(seed: u64, cfg: &RunConfig) -> String {
    format!(
        "cargo run --release -p fleet-sim -- replay --seed {seed} --workers {} --leads {} --sim-secs {}",
        cfg.workers, cfg.leads, cfg.sim_secs
    )
}

#[allow(clippy::disallowed_methods)] // wall-clock speed-up is reported, never fed to a run
fn run(seeds: Range<u64>, jobs: usize, cfg: RunConfig, determinism: bool) -> ExitCode {
    let started = std::time::Instant::now();
    let total = seeds.end - seeds.start;
    say!(
        "fleet-sim: seeds {}..{} ({total}), {jobs} job(s), {} workers, {} leads, {} sim-s each{}",
        seeds.start,
        seeds.end,
        cfg.workers,
        cfg.leads,
        cfg.sim_secs,
        if determinism {
            ", determinism check"
        } else {
            ""
        }
    );
    let next = AtomicU64::new(seeds.start);
    let done = AtomicU64::new(0);
    let failures: Mutex<Vec<(RunReport, Vec<String>)>> = Mutex::new(Vec::new());
    let totals: Mutex<Totals> = Mutex::new(Totals::default());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::SeqCst);
                if seed >= seeds.end {
                    break;
                }
                let report = run_seed(seed, &cfg);
                let mut problems: Vec<String> =
                    report.violations.iter().map(|v| v.to_string()).collect();
                if determinism {
                    let again = run_seed(seed, &cfg);
                    if again.trace_hash != report.trace_hash {
                        problems.push(format!(
                            "determinism: trace hash {:016x} then {:016x}",
                            report.trace_hash, again.trace_hash
                        ));
                    }
                }
                if let Ok(mut t) = totals.lock() {
                    t.add(&report);
                }
                if !problems.is_empty() {
                    if let Ok(mut f) = failures.lock() {
                        f.push((report, problems));
                    }
                }
                let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                if n.is_multiple_of(50) || n == total {
                    say_raw!("\r  {n}/{total} seeds");
                    let _ = std::io::stdout().flush();
                }
            });
        }
    });
    say!();
    let elapsed = started.elapsed().as_secs_f64();
    let totals = totals.into_inner().unwrap_or_default();
    let mut failures = failures.into_inner().unwrap_or_default();
    failures.sort_by_key(|(r, _)| r.seed);
    say!("{}", totals.table(elapsed));
    for (report, problems) in &failures {
        say!("\nFAILED {report}");
        for p in problems {
            say!("  {p}");
        }
        let tail = report.trace.len().saturating_sub(15);
        say!("  last events:");
        for line in &report.trace[tail..] {
            say!("    {line}");
        }
        say!("  replay: {}", replay_cmd(report.seed, &cfg));
    }
    if failures.is_empty() {
        say!("{total} passed, 0 failed");
        ExitCode::SUCCESS
    } else {
        say!(
            "{} passed, {} failed",
            total - failures.len() as u64,
            failures.len()
        );
        ExitCode::FAILURE
    }
}

#[derive(Default)]
struct Totals {
    seeds: u64,
    sends: u64,
    injections: u64,
    sim_ms: u64,
    outcomes: BTreeMap<String, u64>,
    health: BTreeMap<String, u64>,
    violations: BTreeMap<&'static str, u64>,
}

impl Totals {
    fn add(&mut self, r: &RunReport) {
        self.seeds += 1;
        self.sends += r.sends;
        self.injections += r.injections;
        self.sim_ms += r.sim_ms;
        for (o, n) in &r.outcomes {
            *self.outcomes.entry(o.to_string()).or_default() += n;
        }
        for (h, n) in &r.health {
            *self.health.entry(h.clone()).or_default() += n;
        }
        for v in &r.violations {
            *self.violations.entry(v.invariant.name()).or_default() += 1;
        }
    }

    fn table(&self, elapsed_s: f64) -> String {
        let mut s = String::new();
        let speedup = if elapsed_s > 0.0 {
            self.sim_ms as f64 / 1000.0 / elapsed_s
        } else {
            0.0
        };
        s.push_str(&format!(
            "seeds {:>8}   sends {:>8}   injections {:>8}   wall {:.2}s   sim-time speed-up {:.0}x\n",
            self.seeds, self.sends, self.injections, elapsed_s, speedup
        ));
        s.push_str("outcomes:");
        for (o, n) in &self.outcomes {
            s.push_str(&format!(" {o}={n}"));
        }
        s.push_str("\nhealth changes:");
        for (h, n) in &self.health {
            s.push_str(&format!(" {h}={n}"));
        }
        s.push_str("\nviolations:");
        if self.violations.is_empty() {
            s.push_str(" none");
        }
        for (i, n) in &self.violations {
            s.push_str(&format!(" {i}={n}"));
        }
        s
    }
}

fn replay(seed: u64, cfg: RunConfig, trace: Option<std::path::PathBuf>) -> ExitCode {
    let report = run_seed(seed, &cfg);
    say!("{report}");
    let text = {
        let mut t = report.trace.join("\n");
        t.push('\n');
        t
    };
    let violations: Vec<String> = report.violations.iter().map(|v| v.to_string()).collect();
    finish_replay(&text, trace, &violations)
}

fn multi_replay_cmd(seed: u64, cfg: &MultiConfig) -> String {
    fleet_sim::multi::replay_command(seed, cfg)
}

fn describe_multi(r: &MultiReport) -> String {
    format!(
        "seed {} profile {} faults {:?} sends {} trace {:016x}",
        r.seed, r.profile, r.faults, r.sends, r.trace_hash
    )
}

/// One seed of a multi-host batch: its report (or why the simulation itself failed) and any
/// determinism problem.
type SeedOutcome = (u64, Result<MultiReport, String>, Vec<String>);

/// Runs every seed of the batch (this shard's) on `jobs` threads, each twice when
/// `determinism` asks, with progress on stdout; the outcomes in seed order.
fn run_batch(
    seeds: &Range<u64>,
    jobs: usize,
    cfg: &MultiConfig,
    determinism: bool,
    mine: &(dyn Fn(u64) -> bool + Sync),
    total: u64,
) -> Vec<SeedOutcome> {
    let next = AtomicU64::new(seeds.start);
    let done = AtomicU64::new(0);
    let results: Mutex<Vec<SeedOutcome>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::SeqCst);
                if seed >= seeds.end {
                    break;
                }
                if !mine(seed) {
                    continue;
                }
                let report = run_multi(seed, cfg).map_err(|e| e.to_string());
                let mut problems = Vec::new();
                if let (true, Ok(r)) = (determinism, &report) {
                    match run_multi(seed, cfg) {
                        Ok(again) if again.trace_hash != r.trace_hash => problems.push(format!(
                            "determinism: trace hash {:016x} then {:016x}",
                            r.trace_hash, again.trace_hash
                        )),
                        Ok(_) => {}
                        Err(e) => problems.push(format!("the replay failed: {e}")),
                    }
                }
                if let Ok(mut v) = results.lock() {
                    v.push((seed, report, problems));
                }
                let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                if n.is_multiple_of(10) || n == total {
                    say_raw!("\r  {n}/{total} seeds");
                    let _ = std::io::stdout().flush();
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_default();
    results.sort_by_key(|(s, _, _)| *s);
    results
}

/// A failed seed: its violations, the problems of its replay, its last events and how to
/// replay it.
fn say_failed(seed: u64, r: &MultiReport, problems: &[String], cfg: &MultiConfig) {
    say!("\nFAILED {}", describe_multi(r));
    for v in &r.violations {
        say!("  {v}");
    }
    for p in problems {
        say!("  {p}");
    }
    let lines: Vec<&str> = r.trace.lines().collect();
    say!("  last events:");
    for l in &lines[lines.len().saturating_sub(15)..] {
        say!("    {l}");
    }
    say!("  replay: {}", multi_replay_cmd(seed, cfg));
}

/// The multi-host batch: each seed on its own turmoil world (worlds are independent, so
/// seeds run on parallel threads; each is deterministic on its own).
#[allow(clippy::disallowed_methods)] // wall-clock speed-up is reported, never fed to a run
fn multi_run(
    seeds: Range<u64>,
    jobs: usize,
    cfg: MultiConfig,
    determinism: bool,
    shard: Option<(u64, u64)>,
) -> ExitCode {
    let started = std::time::Instant::now();
    let mine = |seed: u64| shard.is_none_or(|(i, n)| seed % n == i);
    let total = seeds.clone().filter(|s| mine(*s)).count() as u64;
    say!(
        "fleet-sim: seeds {}..{}{} ({total}), {jobs} job(s), {} hosts x {} members on turmoil, {} sim-s each{}{}{}",
        seeds.start,
        seeds.end,
        shard.map_or_else(String::new, |(i, n)| format!(" shard {i}/{n}")),
        cfg.hosts,
        cfg.members_per_host,
        cfg.sim_secs,
        if determinism { ", determinism check" } else { "" },
        if cfg.adversaries { ", adversaries" } else { ", no adversaries" },
        if cfg.queue_type.is_classic() { "" } else { ", quorum queues" }
    );
    let results = run_batch(&seeds, jobs, &cfg, determinism, &mine, total);
    say!();
    let (mut sends, mut sim_ms, mut failed, mut fault_events) = (0usize, 0u64, 0u64, 0usize);
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut health: BTreeMap<String, u64> = BTreeMap::new();
    let mut by_invariant: BTreeMap<String, u64> = BTreeMap::new();
    let mut profiles: BTreeMap<String, u64> = BTreeMap::new();
    for (seed, report, problems) in &results {
        match report {
            Ok(r) => {
                sends += r.sends;
                sim_ms += r.sim_ms;
                fault_events += r.faults.len();
                *profiles.entry(r.profile.to_string()).or_default() += 1;
                for (o, n) in &r.outcomes {
                    *outcomes.entry(o.clone()).or_default() += n;
                }
                for (h, n) in &r.health {
                    *health.entry(h.clone()).or_default() += n;
                }
                for v in &r.violations {
                    *by_invariant.entry(v.invariant.to_string()).or_default() += 1;
                }
                if !r.violations.is_empty() || !problems.is_empty() {
                    failed += 1;
                    say_failed(*seed, r, problems, &cfg);
                }
            }
            Err(e) => {
                failed += 1;
                say!("\nFAILED seed {seed}: the simulation itself failed: {e}");
                say!("  replay: {}", multi_replay_cmd(*seed, &cfg));
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    say!(
        "seeds {:>6}   sends {:>7}   wall {:.2}s   sim-time speed-up {:.0}x",
        results.len(),
        sends,
        elapsed,
        if elapsed > 0.0 {
            sim_ms as f64 / 1000.0 / elapsed
        } else {
            0.0
        }
    );
    say!("fault profiles: {profiles:?}, {fault_events} fault events");
    say!("outcomes: {outcomes:?}");
    say!("health changes: {health:?}");
    say!(
        "violations: {}",
        if by_invariant.is_empty() {
            "none".to_string()
        } else {
            format!("{by_invariant:?}")
        }
    );
    say!("{} passed, {failed} failed", total - failed);
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn multi_replay(
    seed: u64,
    cfg: MultiConfig,
    trace: Option<std::path::PathBuf>,
    timeline: bool,
    flow: Option<String>,
) -> ExitCode {
    let report = match run_multi(seed, &cfg) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("the simulation failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    say!("{}", describe_multi(&report));
    if let Some(id) = flow {
        let lines = fleet_sim::timeline::flow(report.trace.lines(), &report.trace_ids, &id);
        if lines.is_empty() {
            eprintln!("no line of seed {seed} is about a trace or message starting {id:?} (see --timeline for the ids)");
            return ExitCode::FAILURE;
        }
        say!(
            "== flow {id}: {} line(s), every host, in simulation order",
            lines.len()
        );
        for l in lines {
            say!("{l}");
        }
        return ExitCode::SUCCESS;
    }
    let violations: Vec<String> = report.violations.iter().map(|v| v.to_string()).collect();
    if timeline {
        say_raw!("{}", report.timeline);
        if trace.is_none() {
            for v in &violations {
                say!("VIOLATION {v}");
            }
            return if violations.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
    }
    finish_replay(&report.trace, trace, &violations)
}

/// Writes a replayed trace (to `path`, or standard output), prints its violations, and turns
/// them into the exit code.
fn finish_replay(text: &str, path: Option<std::path::PathBuf>, violations: &[String]) -> ExitCode {
    match path {
        Some(path) => match std::fs::write(&path, text) {
            Ok(()) => say!("trace written to {}", path.display()),
            Err(e) => {
                eprintln!("cannot write the trace to {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        },
        None => say_raw!("{text}"),
    }
    for v in violations {
        say!("VIOLATION {v}");
    }
    if violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
