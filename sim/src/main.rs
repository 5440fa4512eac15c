//! `fleet-sim`: run seeded simulations of fleetd and replay any one of them.

use clap::{Parser, Subcommand};
use fleet_sim::{run_seed, RunConfig, RunReport};
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
    },
}

/// The shape of each simulated world; a seed derives everything else.
#[derive(clap::Args)]
struct WorldArgs {
    /// Workers (member panes) per world.
    #[arg(long, default_value_t = 5)]
    workers: usize,
    /// Leads per world.
    #[arg(long, default_value_t = 2)]
    leads: usize,
    /// Simulated seconds of workload per seed.
    #[arg(long, default_value_t = 60)]
    sim_secs: u64,
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

fn main() -> ExitCode {
    match Cli::parse().cmd {
        Cmd::Run {
            seeds,
            jobs,
            world,
            check_determinism,
        } => run(seeds, jobs.max(1), world.into(), check_determinism),
        Cmd::Replay { seed, world, trace } => replay(seed, world.into(), trace),
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
    println!(
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
                if n % 50 == 0 || n == total {
                    print!("\r  {n}/{total} seeds");
                    let _ = std::io::stdout().flush();
                }
            });
        }
    });
    println!();
    let elapsed = started.elapsed().as_secs_f64();
    let totals = totals.into_inner().unwrap_or_default();
    let mut failures = failures.into_inner().unwrap_or_default();
    failures.sort_by_key(|(r, _)| r.seed);
    println!("{}", totals.table(elapsed));
    for (report, problems) in &failures {
        println!("\nFAILED {report}");
        for p in problems {
            println!("  {p}");
        }
        let tail = report.trace.len().saturating_sub(15);
        println!("  last events:");
        for line in &report.trace[tail..] {
            println!("    {line}");
        }
        println!("  replay: {}", replay_cmd(report.seed, &cfg));
    }
    if failures.is_empty() {
        println!("{total} passed, 0 failed");
        ExitCode::SUCCESS
    } else {
        println!(
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
        for v in &r.violations {
            *self.violations.entry(v.invariant).or_default() += 1;
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
    println!("{report}");
    let text = {
        let mut t = report.trace.join("\n");
        t.push('\n');
        t
    };
    match trace {
        Some(path) => match std::fs::write(&path, &text) {
            Ok(()) => println!("trace written to {}", path.display()),
            Err(e) => {
                eprintln!("cannot write the trace to {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        },
        None => print!("{text}"),
    }
    for v in &report.violations {
        println!("VIOLATION {v}");
    }
    if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
