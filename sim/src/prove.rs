//! `fleet-sim prove`: the proof that the oracle can fail. Each planted bug (see
//! `fleet_core::planted`) is switched on in turn and seeds run in order until one breaks an
//! invariant; the first such seed is printed with its replay command.

use crate::multi::{replay_command, run_multi, MultiConfig};
use crate::say;
use fleet_core::planted::PlantedBug;
use std::collections::BTreeSet;
use std::ops::Range;
use std::process::ExitCode;
use std::sync::Mutex;

/// What proving one bug found.
#[derive(Clone, Debug)]
pub struct Caught {
    pub seed: u64,
    pub tried: u64,
    pub invariants: BTreeSet<&'static str>,
    pub first: String,
}

/// Runs seeds of `range` in order (`jobs` at a time) until one breaks an invariant with `bug`
/// switched on; the smallest such seed wins.
pub fn first_catch(
    bug: PlantedBug,
    range: Range<u64>,
    jobs: usize,
    cfg: &MultiConfig,
) -> Option<Caught> {
    let cfg = MultiConfig {
        planted: Some(bug),
        ..cfg.clone()
    };
    let mut start = range.start;
    while start < range.end {
        let end = (start + jobs as u64).min(range.end);
        let found: Mutex<Vec<Caught>> = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for seed in start..end {
                let (cfg, found) = (&cfg, &found);
                s.spawn(move || {
                    let Ok(r) = run_multi(seed, cfg) else { return };
                    if let (Some(v), Ok(mut f)) = (r.violations.first(), found.lock()) {
                        f.push(Caught {
                            seed,
                            tried: seed - range.start + 1,
                            invariants: r.violations.iter().map(|v| v.invariant.name()).collect(),
                            first: v.to_string(),
                        });
                    }
                });
            }
        });
        let mut found = found.into_inner().unwrap_or_default();
        found.sort_by_key(|c| c.seed);
        if let Some(c) = found.into_iter().next() {
            return Some(c);
        }
        start = end;
    }
    None
}

pub fn prove(bugs: &[PlantedBug], range: Range<u64>, jobs: usize, cfg: &MultiConfig) -> ExitCode {
    say!(
        "fleet-sim prove: {} planted bug(s), seeds {}..{}, {} hosts x {} members, {} sim-s each",
        bugs.len(),
        range.start,
        range.end,
        cfg.hosts,
        cfg.members_per_host,
        cfg.sim_secs
    );
    let mut missed = 0;
    for &bug in bugs {
        match first_catch(bug, range.clone(), jobs, cfg) {
            Some(c) => {
                let expected = if c.invariants.contains(bug.breaks()) {
                    ""
                } else {
                    " (not the invariant it breaks!)"
                };
                say!(
                    "{bug:<26} breaks {}: caught by seed {} after {} seed(s), as {:?}{expected}",
                    bug.breaks(),
                    c.seed,
                    c.tried,
                    c.invariants
                );
                say!("  {}", c.first);
                let with = MultiConfig {
                    planted: Some(bug),
                    ..cfg.clone()
                };
                say!("  replay: {}", replay_command(c.seed, &with));
                if !expected.is_empty() {
                    missed += 1;
                }
            }
            None => {
                missed += 1;
                say!(
                    "{bug:<26} breaks {}: NOT caught in seeds {}..{}",
                    bug.breaks(),
                    range.start,
                    range.end
                );
            }
        }
    }
    say!(
        "{} of {} planted bugs caught",
        bugs.len() - missed,
        bugs.len()
    );
    if missed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
