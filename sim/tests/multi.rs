//! Seeded multi-host runs on the turmoil world: each seed picks a fault profile and a
//! workload; the oracle must find nothing, and a seed must replay byte for byte.

use fleet_sim::multi::{run_multi, MultiConfig};

#[test]
fn a_batch_of_multi_host_seeds_holds_the_invariants() {
    let cfg = MultiConfig {
        hosts: 3,
        members_per_host: 2,
        sim_secs: 40,
        planted: None,
        adversaries: true,
    };
    let mut total = 0;
    for seed in 0..6 {
        let r = run_multi(seed, &cfg).expect("the simulation ran");
        eprintln!(
            "seed {seed} {} faults {:?} sends {} outcomes {:?}",
            r.profile, r.faults, r.sends, r.outcomes
        );
        total += r.sends;
        assert!(
            r.violations.is_empty(),
            "seed {seed} ({}, faults {:?}): {:?}",
            r.profile,
            r.faults,
            r.violations
        );
    }
    assert!(total > 40, "a real workload: {total} sends in 6 seeds");
}

#[test]
fn a_multi_host_seed_replays_byte_for_byte() {
    let cfg = MultiConfig {
        hosts: 3,
        members_per_host: 2,
        sim_secs: 30,
        planted: None,
        adversaries: true,
    };
    let one = run_multi(2, &cfg).expect("ran");
    let two = run_multi(2, &cfg).expect("ran");
    assert!(one.trace.lines().count() > 50);
    assert_eq!(one.trace_hash, two.trace_hash);
}
