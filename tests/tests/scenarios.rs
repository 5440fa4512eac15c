//! Named single-host scenarios, each a short story whose full trace is snapshotted.
//! Worlds are seeded, so each trace is exact; ids are redacted to `#n`.

use fleet_core::Duration;
use fleet_sim::agent::Behaviour;
use fleet_sim::run::sim_core_config;
use fleet_sim::World;
use fleet_tests::redact_ids;

fn world(seed: u64) -> World {
    match World::new(seed, sim_core_config()) {
        Ok(w) => w,
        Err(e) => panic!("the simulation config is valid: {e}"),
    }
}

fn finish(w: &mut World) -> String {
    w.run_for(Duration::from_secs(600));
    w.oracle.finish(w.now);
    assert!(
        w.oracle.violations.is_empty(),
        "seed {}: {:?}",
        w.seed,
        w.oracle.violations
    );
    redact_ids(&w.trace_text())
}

/// A lead delegates; the worker does the task and calls `fleet_reply`; the blocking send
/// returns REPLIED with the reply.
#[test]
fn delegate_and_reply() {
    let mut w = world(1);
    w.add_worker("w1", Behaviour::Replies);
    let lead = w.add_lead("lead");
    w.send(lead, "w1", "write the tests", true, 60_000);
    let trace = finish(&mut w);
    assert!(trace.contains("REPLIED body=\"done: write the tests\""));
    insta::assert_snapshot!(trace);
}

/// The send times out while the worker is still at it; the reply arrives with no waiter, is
/// held, the lead is nudged in its own pane, and collects it with a drain.
#[test]
fn stranded_reply_then_drain() {
    let mut w = world(2);
    w.add_worker("w1", Behaviour::Replies);
    let lead = w.add_lead("lead");
    w.send(lead, "w1", "refactor the parser", true, 300);
    let trace = finish(&mut w);
    assert!(trace.contains("TIMED_OUT_WORKING"));
    assert!(trace.contains("reply_held w1"));
    assert!(trace.contains("nudged lead-pane"));
    assert!(trace.contains("replies [\"done: refactor the parser\"]"));
    insta::assert_snapshot!(trace);
}

/// The worker asks mid-turn; the lead's send returns QUESTION with a turnId; the lead answers
/// it; the worker's ask returns the answer, it resumes the same turn and replies.
#[test]
fn ask_answer_reply() {
    let mut w = world(3);
    w.add_worker("w1", Behaviour::Asks);
    let lead = w.add_lead("lead");
    w.send(lead, "w1", "migrate the schema", true, 60_000);
    let trace = finish(&mut w);
    assert!(trace.contains("QUESTION"));
    assert!(trace.contains("ask ANSWERED"));
    assert!(trace.contains("REPLIED body=\"done: migrate the schema (answer for"));
    insta::assert_snapshot!(trace);
}

/// The worker wedges (herdr reports UNKNOWN and the screen says nothing useful); after the
/// stall bound the turn fails and the send ends WORKER_FAILED, not a timeout.
#[test]
fn wedge_fails_the_turn() {
    let mut w = world(4);
    w.add_worker("w1", Behaviour::Wedges);
    let lead = w.add_lead("lead");
    w.send(lead, "w1", "bump the deps", true, 180_000);
    let trace = finish(&mut w);
    assert!(trace.contains("turn_failed w1"));
    assert!(trace.contains("cause=stalled"));
    assert!(trace.contains("WORKER_FAILED"));
    insta::assert_snapshot!(trace);
}

/// The worker's backend refuses on a usage limit; the completion scrape classifies it and the
/// send ends BACKEND_EXHAUSTED, kept apart from WORKER_FAILED.
#[test]
fn usage_limit_is_backend_exhausted() {
    let mut w = world(5);
    w.add_worker("w1", Behaviour::UsageLimit);
    let lead = w.add_lead("lead");
    w.send(lead, "w1", "write the docs", true, 60_000);
    let trace = finish(&mut w);
    assert!(trace.contains("BACKEND_EXHAUSTED body=\"usage limit reached\""));
    insta::assert_snapshot!(trace);
}

/// A fixed seed of the randomized batch, summarised: pins the whole single-host world.
#[test]
fn fixed_seed_summary() {
    let report = fleet_sim::run_seed(42, &fleet_sim::RunConfig::default());
    assert!(report.ok(), "{:?}", report.violations);
    let mut summary = format!("{report}\n");
    for (o, n) in &report.outcomes {
        summary.push_str(&format!("  {o}: {n}\n"));
    }
    insta::assert_snapshot!(summary);
}
