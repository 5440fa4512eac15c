//! Real coding agents as members, end to end: the agent CLI a user installs, in a real herdr
//! pane, spawned on another host by its profile from a fresh config dir, behind two fleetd on
//! RabbitMQ. Only the model provider is stood in for (`model_endpoint`: this machine has no
//! route to one, and a user's CI has none either).
//!
//! Ignored without a real herdr (`HERDR_BIN`) or without the agent's binary (`CLAUDE_BIN` or
//! `claude` on `PATH`: `npm install -g @anthropic-ai/claude-code@2.1.328`; `CODEX_BIN` or
//! `codex`: `npm install -g @openai/codex@0.171.0`; `OPENCODE_BIN` or `opencode`: `npm install -g
//! opencode-ai@1.18.33`).

use fleet_tests::agents::{
    with_claude_profile, with_codex_profile, with_opencode_profile, AgentFleet,
};
use fleet_tests::fleetd_proc::{Host, Mcp, Rest};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::time::Instant;

async fn send(lead: &Mcp, gid: &str, message: &str, timeout_ms: u64) -> (Value, Duration) {
    let t = Instant::now();
    let (_, out) = lead
        .call(
            "fleet_send",
            json!({"sessionId": gid, "message": message, "timeoutMs": timeout_ms}),
        )
        .await;
    (out, t.elapsed())
}

fn body(v: &Value) -> &str {
    v["body"].as_str().unwrap_or_default()
}

/// An agent kind under test: its profile on beta, and what of its screen is chrome.
struct Agent {
    profile: &'static str,
    configure: fn(String, &str) -> String,
    /// Text of the agent's screen that is never part of a turn's answer.
    chrome: &'static [&'static str],
    /// What the agent must have sent its model by its first reply (how it offers or loads the
    /// fleet tools).
    sent: Option<&'static str>,
}

/// The whole scenario for one agent kind, from a fresh config dir, spawned on beta by alpha's
/// lead: a brief typed the moment the spawn returns is REPLIED through `fleet_reply`; a brief
/// that asks comes back QUESTION and the answer REPLIED; a brief answered in plain text is
/// COMPLETED_UNREPLIED with that text alone, within 10 s; a provider's usage limit is
/// BACKEND_EXHAUSTED and the profile's credential cools down.
/// One real agent at a time: three TUIs, two fleetd and a broker at once on a 2-core machine
/// starve the agents, and a starved opencode or Codex shows idle between a model step and its
/// tool call — a turn's end fleetd cannot tell from a real one (seen in CI; docs/members.md).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn end_to_end(agent: Agent) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let kind = agent.profile;
    let fleet = AgentFleet::start(kind, agent.configure).await;
    let (lead, hosts, model) = (&fleet.lead, &fleet.hosts, &fleet.model);
    let logs = |_: &[Host]| fleet.logs();

    let t = Instant::now();
    let (ok, spawned) = lead
        .call("fleet_spawn", json!({"profile": kind, "host": "beta"}))
        .await;
    let ready_in = t.elapsed();
    assert!(ok, "{spawned}\n{}", logs(hosts));
    let gid = spawned["gid"].as_str().unwrap_or_default().to_string();

    // Typed the moment the spawn returns: not lost to a TUI still drawing.
    let (out, replied_in) = send(lead, &gid, "[script:reply] list the files", 60_000).await;
    assert_eq!(out["outcome"], "REPLIED", "{out}\n{}", logs(hosts));
    assert_eq!(body(&out), "done: [script:reply] list the files", "{out}");
    if let Some(sent) = agent.sent {
        let seen = model
            .seen()
            .iter()
            .any(|s| s.body.to_string().contains(sent));
        assert!(seen, "{kind} never sent its model {sent:?}");
    }

    // A member's question reaches the lead; the answer goes back into the same turn.
    let (q, _) = send(lead, &gid, "[script:ask] pick a side", 60_000).await;
    assert_eq!(q["outcome"], "QUESTION", "{q}\n{}", logs(hosts));
    assert!(body(&q).contains("which way?"), "{q}");
    let turn = q["turn_id"].as_str().unwrap_or_default().to_string();
    let (ok, a) = lead
        .call("fleet_send", json!({"turnId": turn, "message": "left"}))
        .await;
    assert!(ok, "{a}");
    assert_eq!(a["outcome"], "REPLIED", "{a}\n{}", logs(hosts));
    assert!(
        body(&a).contains("answered:") && body(&a).contains("left"),
        "{a}"
    );

    // Answered in plain text, no fleet_reply: the turn's own text, fast, no chrome.
    let (plain, plain_in) = send(lead, &gid, "[script:plain] say hello", 60_000).await;
    assert_eq!(
        plain["outcome"],
        "COMPLETED_UNREPLIED",
        "{plain}\n{}",
        logs(hosts)
    );
    assert!(
        plain_in < Duration::from_secs(10),
        "COMPLETED_UNREPLIED took {plain_in:?}"
    );
    let text = body(&plain);
    // The answer alone, behind the agent's own bullet (`●`, `•`) if it draws one.
    let answer = text.trim_start_matches(['●', '•', ' ']);
    assert_eq!(
        answer, "plain answer: say hello",
        "the answer alone: {plain}"
    );
    for chrome in agent.chrome {
        assert!(!text.contains(chrome), "{chrome:?} in {text:?}");
    }

    // The provider refuses on a usage limit: BACKEND_EXHAUSTED, and the credential cools down.
    usage_limit(&fleet, &gid, kind).await;

    // In its sandbox where the host has one (CI installs bubblewrap).
    let launched = hosts[1].proc.log_text();
    let launch = launched
        .lines()
        .find(|l| l.contains("member launched"))
        .unwrap_or_default()
        .to_string();
    if std::path::Path::new("/usr/bin/bwrap").is_file() {
        assert!(launch.contains("sandboxed=true"), "{launch}");
    }
    eprintln!("{launch}");
    eprintln!(
        "{kind}: spawn to READY {ready_in:?}, brief to REPLIED {replied_in:?}, plain brief to COMPLETED_UNREPLIED {plain_in:?}"
    );
    let briefs = model.briefs();
    assert!(
        briefs
            .iter()
            .any(|b| b.contains("[script:plain] say hello")),
        "the model never saw the plain brief: {briefs:?}"
    );
    fleet.finish().await;
}

/// A brief the provider refuses on a usage limit ends BACKEND_EXHAUSTED, and the profile's
/// credential cools down.
async fn usage_limit(fleet: &AgentFleet, gid: &str, kind: &str) {
    let (lead, hosts) = (&fleet.lead, &fleet.hosts);
    let (limit, _) = send(lead, gid, "[script:usage-limit] one more", 60_000).await;
    if limit["outcome"] != "BACKEND_EXHAUSTED" {
        panic!(
            "{limit}: not BACKEND_EXHAUSTED\n{}",
            fleet.diagnose(gid).await
        );
    }
    eprintln!("{kind} on its provider's usage limit: {:?}", body(&limit));
    let beta = Rest::new(&hosts[1].proc.url, Some(&hosts[1].token));
    let cooling = format!("fleet_credential_cooling{{credential=\"{kind}\"}} 1");
    beta.metrics_until(|m| m.contains(&cooling)).await;
}

/// Claude Code 2.1.328: the scenario above, the fleet tools loaded through `ToolSearch` (they
/// are deferred in 2.x).
// One attribute: two `ignore`s at once would be an unused attribute.
#[cfg_attr(
    not(all(herdr_real, claude_code)),
    ignore = "needs a real herdr (HERDR_BIN, scripts/herdr/build-herdr.sh) and Claude Code, npm install -g @anthropic-ai/claude-code@2.1.328 (or set CLAUDE_BIN)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_from_a_fresh_config_replies_asks_answers_plainly_and_cools_down() {
    end_to_end(Agent {
        profile: "claude",
        configure: with_claude_profile,
        chrome: &["Claude Code v", "auto mode on", "────", "✻", "❯"],
        sent: Some("select:mcp__fleet__fleet_reply"),
    })
    .await;
}

/// Codex 0.171.0: the scenario above, the fleet tools called in their MCP namespace.
// One attribute: two `ignore`s at once would be an unused attribute.
#[cfg_attr(
    not(all(herdr_real, codex)),
    ignore = "needs a real herdr (HERDR_BIN, scripts/herdr/build-herdr.sh) and Codex, npm install -g @openai/codex@0.171.0 (or set CODEX_BIN)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_from_a_fresh_home_replies_asks_answers_plainly_and_cools_down() {
    end_to_end(Agent {
        profile: "codex",
        configure: with_codex_profile,
        chrome: &["OpenAI Codex", "Worked for", "? for shortcuts", "›"],
        // Its MCP tools are offered to the model as one namespace tool.
        sent: Some("\"name\":\"mcp__fleet\""),
    })
    .await;
}

/// opencode 1.18.33: the scenario above, on Chat Completions, its tools `fleet_<tool>`, typed
/// into only once its home screen is drawn (it drops what comes before). It retries a usage
/// limit for ever, the limit shown in its status line: the health probe sees it mid-turn.
// One attribute: two `ignore`s at once would be an unused attribute.
#[cfg_attr(
    not(all(herdr_real, opencode)),
    ignore = "needs a real herdr (HERDR_BIN, scripts/herdr/build-herdr.sh) and opencode, npm install -g opencode-ai@1.18.33 (or set OPENCODE_BIN)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_from_a_fresh_config_replies_asks_answers_plainly_and_cools_down() {
    end_to_end(Agent {
        profile: "opencode",
        configure: with_opencode_profile,
        chrome: &["OpenCode", "▣", "┃", "Ask anything", "Context", "tokens"],
        sent: Some("fleet_fleet_reply"),
    })
    .await;
}
