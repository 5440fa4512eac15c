//! Agents report their own turns: the real agent CLIs, in a real herdr pane on another host,
//! with the hooks, notify program or plugin fleetd installs in their fresh config. Only the
//! model provider is stood in for (`model_endpoint`).
//!
//! Each kind runs twenty plain-text turns at a 100 ms poll with its screen's text patterns
//! emptied (`chrome_patterns`): each must end COMPLETED_UNREPLIED with exactly the model's text
//! within 2 s — a screen read would carry the agent's bullet and chrome, and an inferred end at
//! that poll comes before the answer is drawn (what made Codex wait out its whole timeout).
//! (`refine_*_patterns` stay: they say when a pane takes input, not how a turn ended.) Then a
//! refusal the agent reports shows on the member's health.
//!
//! Ignored without a real herdr (`HERDR_BIN`) or the agent's binary (`CLAUDE_BIN`,
//! `CODEX_BIN`, `OPENCODE_BIN`, else on `PATH`).

use fleet_tests::agents::{
    with_claude_profile, with_codex_profile, with_opencode_profile, AgentFleet,
};
use fleet_tests::fleetd_proc::{Mcp, Rest};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::time::Instant;

/// Turns per kind.
const TURNS: usize = 20;

/// The fleet's poll, fast: an end inferred from samples alone would come before the answer.
fn fast_and_blind(config: String) -> String {
    config
        .replace("poll_interval_ms = 500", "poll_interval_ms = 100")
        .replace("[core]\n", "[core]\nchrome_patterns = []\n")
}

async fn send(lead: &Mcp, gid: &str, message: &str) -> (Value, Duration) {
    let t = Instant::now();
    let (_, out) = lead
        .call(
            "fleet_send",
            json!({"sessionId": gid, "message": message, "timeoutMs": 60_000}),
        )
        .await;
    (out, t.elapsed())
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// Twenty plain turns, each ended by the agent's own report with the model's exact text.
async fn plain_turns_end_by_the_agents_word(kind: &str, configure: fn(String, &str) -> String) {
    let fleet = AgentFleet::start(kind, configure).await;
    let (lead, hosts) = (&fleet.lead, &fleet.hosts);
    let (ok, spawned) = lead
        .call("fleet_spawn", json!({"profile": kind, "host": "beta"}))
        .await;
    assert!(ok, "{spawned}\n{}", fleet.logs());
    let gid = spawned["gid"].as_str().unwrap_or_default().to_string();
    // Its first brief waits out the agent's own start (Claude Code shows working for seconds
    // after its prompt is drawn): not what is timed here.
    let (out, first) = send(lead, &gid, "[script:plain] warm up").await;
    assert_eq!(
        out["outcome"],
        "COMPLETED_UNREPLIED",
        "{out}\n{}",
        fleet.logs()
    );
    eprintln!("{kind}: first brief to COMPLETED_UNREPLIED {first:?}");
    let mut took = Vec::new();
    for i in 0..TURNS {
        let (out, t) = send(lead, &gid, &format!("[script:plain] say hello {i}")).await;
        if out["outcome"] != "COMPLETED_UNREPLIED"
            || out["body"] != format!("plain answer: say hello {i}")
        {
            panic!("turn {i}: {out}\n{}", fleet.diagnose(&gid).await);
        }
        assert!(t < Duration::from_secs(2), "turn {i} took {t:?}: {out}");
        took.push(t);
    }
    took.sort();
    eprintln!(
        "{kind}: {TURNS} plain turns at a 100 ms poll, brief to COMPLETED_UNREPLIED median {:?} p90 {:?}",
        percentile(&took, 50),
        percentile(&took, 90)
    );
    let beta = hosts[1].proc.log_text();
    let ended = beta.matches("turn_ended -> ended").count();
    assert!(ended >= TURNS, "{ended} turn ends reported\n{beta}");
    // The agent said which session it is (what resuming it needs).
    let (_, status) = lead.call("fleet_status", json!({"sessionId": gid})).await;
    eprintln!("{kind}: status {status}");
    usage_limit_shows_on_health(&fleet, &gid, kind).await;
    if kind == "claude" {
        permission_prompt_shows_on_health(&fleet, &gid).await;
    }
    fleet.finish().await;
}

/// The provider refuses on a usage limit: the send ends BACKEND_EXHAUSTED, and the member's
/// health names the limit in the agent's words (and raises a need).
async fn usage_limit_shows_on_health(fleet: &AgentFleet, gid: &str, kind: &str) {
    let (out, _) = send(&fleet.lead, gid, "[script:usage-limit] one more").await;
    assert_eq!(
        out["outcome"],
        "BACKEND_EXHAUSTED",
        "{out}\n{}",
        fleet.diagnose(gid).await
    );
    let row = health_until(fleet, gid, "USAGE_LIMITED").await;
    eprintln!("{kind} on a usage limit: health {row}");
}

/// `gid`'s row on beta once its health is `state` (within 20 s).
async fn health_until(fleet: &AgentFleet, gid: &str, state: &str) -> Value {
    let beta = Rest::new(&fleet.hosts[1].proc.url, Some(&fleet.hosts[1].token));
    let t = Instant::now();
    loop {
        let (_, members) = beta.get("/members").await;
        let row = members["rows"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["gid"] == gid).cloned())
            .unwrap_or_default();
        if row["health"] == state {
            return row;
        }
        if t.elapsed() > Duration::from_secs(20) {
            panic!(
                "{gid}'s health never said {state}: {row}\n{}",
                fleet.diagnose(gid).await
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A tool the member was not allowed (Claude Code in its `default` permission mode asks before
/// `Bash`): its health names the prompt in the agent's words, and a need waits on its lead.
async fn permission_prompt_shows_on_health(fleet: &AgentFleet, gid: &str) {
    let (ok, t) = fleet
        .lead
        .call(
            "fleet_send",
            json!({"sessionId": gid, "message": "[script:bash] touch a file", "wait": false}),
        )
        .await;
    assert!(ok, "{t}");
    let row = health_until(fleet, gid, "WAITING_ON_PERSON").await;
    let reason = row["health_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("permission"), "{row}");
    eprintln!("claude on a permission prompt: health {row}");
    // The need waits on the lead that spawned it, on alpha: its "needs you" counts it there.
    let t = Instant::now();
    loop {
        let (_, a) = fleet.lead.call("fleet_attention", json!({})).await;
        let beta = a["elsewhere"]
            .as_array()
            .and_then(|e| e.iter().find(|h| h["host"] == "beta").cloned());
        if beta.is_some_and(|b| b["waiting"].as_u64() >= Some(1)) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "alpha's lead never saw a need waiting on beta: {a}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg_attr(
    not(all(herdr_real, claude_code)),
    ignore = "needs a real herdr (HERDR_BIN) and Claude Code (CLAUDE_BIN, or claude on PATH)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_ends_plain_turns_by_its_own_hooks() {
    // Its `default` permission mode: it asks before a tool it was not allowed.
    plain_turns_end_by_the_agents_word("claude", |c, e| {
        fast_and_blind(with_claude_profile(c, e)).replace(
            "kind = \"claude-code\"\n",
            "kind = \"claude-code\"\nargs = [\"--permission-mode\", \"default\"]\n",
        )
    })
    .await;
}

#[cfg_attr(
    not(all(herdr_real, codex)),
    ignore = "needs a real herdr (HERDR_BIN) and Codex (CODEX_BIN, or codex on PATH)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_ends_plain_turns_by_its_own_notify() {
    plain_turns_end_by_the_agents_word("codex", |c, e| fast_and_blind(with_codex_profile(c, e)))
        .await;
}

#[cfg_attr(
    not(all(herdr_real, opencode)),
    ignore = "needs a real herdr (HERDR_BIN) and opencode (OPENCODE_BIN, or opencode on PATH)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_ends_plain_turns_by_its_own_plugin() {
    plain_turns_end_by_the_agents_word("opencode", |c, e| {
        fast_and_blind(with_opencode_profile(c, e))
    })
    .await;
}
