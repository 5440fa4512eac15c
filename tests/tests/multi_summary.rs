//! The trace summary of one fixed multi-host seed, snapshotted: any change in what the fleet
//! does on that seed — a different outcome, a fault landing elsewhere, one more or one fewer
//! broker action — shows up here as a reviewable diff.

use fleet_sim::multi::{run_multi, MultiConfig};
use std::fmt::Write;

#[test]
fn a_fixed_three_host_seed_summary() {
    let cfg = MultiConfig {
        hosts: 3,
        members_per_host: 2,
        sim_secs: 40,
        planted: None,
        adversaries: true,
        queue_type: Default::default(),
    };
    let seed = 25;
    let r = run_multi(seed, &cfg).expect("the simulation ran");
    let mut s = String::new();
    let _ = writeln!(
        s,
        "seed {seed}: {} hosts x {} members, {} sim-s",
        cfg.hosts, cfg.members_per_host, cfg.sim_secs
    );
    let _ = writeln!(s, "profile {}", r.profile);
    for f in &r.faults {
        let _ = writeln!(s, "  fault {f}");
    }
    let _ = writeln!(s, "sends {}", r.sends);
    for (o, n) in &r.outcomes {
        let _ = writeln!(s, "  {o}: {n}");
    }
    let _ = writeln!(
        s,
        "trace {} lines, hash {:016x}",
        r.trace.lines().count(),
        r.trace_hash
    );
    let _ = writeln!(s, "violations {}", r.violations.len());
    for v in &r.violations {
        let _ = writeln!(s, "  {v}");
    }
    insta::assert_snapshot!(s);
}
