//! Real agents as members, timed: per agent kind (Claude Code, Codex, opencode), the time from `fleet_spawn` (on another host,
//! over RabbitMQ) to READY (N rounds of spawn, stop), then — on one member with its own
//! lifecycle reports off (its screen read, as before they existed) and one with them on — N
//! briefs to REPLIED through the agent's own `fleet_reply` and N plain-text briefs to
//! COMPLETED_UNREPLIED, each with median, p90, min and max, in the same run. The agent is the
//! real CLI in a real herdr pane; its model is the scripted endpoint (`model_endpoint`), which
//! answers at once, so what is timed is the agent's start and turn plus fleetd's path.
//!
//! Needs a real herdr and the agent's binary, and the release `fleetd`:
//! `cargo build --release -p fleetd && HERDR_BIN=/tmp/herdr-bin/herdr cargo bench -p
//! fleet-tests --bench agents [-- --rounds N] [--only claude|codex|opencode]` (default: 20
//! rounds of each kind whose binary is installed).

use fleet_tests::agents::{
    claude_bin, codex_bin, opencode_bin, with_claude_profile, with_codex_profile,
    with_opencode_profile, AgentFleet, CLAUDE_CODE_VERSION, CODEX_VERSION, OPENCODE_VERSION,
};
use serde_json::json;
use std::time::Duration;
use tokio::time::Instant;

/// `--rounds N` (default 20) and `--only <profile>` (claude, codex, opencode).
fn args() -> (usize, Option<String>) {
    let argv: Vec<String> = std::env::args().collect();
    let (mut rounds, mut only) = (20, None);
    let mut i = 1;
    while i < argv.len() {
        match (argv[i].as_str(), argv.get(i + 1)) {
            ("--rounds", Some(n)) if n.parse::<usize>().is_ok() => {
                rounds = n.parse().unwrap_or(20);
                i += 2;
            }
            ("--only", Some(p)) => {
                only = Some(p.clone());
                i += 2;
            }
            ("--bench", _) => i += 1,
            (other, _) => {
                eprintln!("unknown or incomplete argument {other:?}; see the file's doc comment");
                std::process::exit(2);
            }
        }
    }
    (rounds, only)
}

fn summary(what: &str, mut xs: Vec<Duration>) -> String {
    xs.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| xs[((xs.len() - 1) as f64 * q).round() as usize];
    format!(
        "{what}: median {:.0} ms, p90 {:.0} ms, min {:.0} ms, max {:.0} ms ({} rounds)",
        ms(at(0.5)),
        ms(at(0.9)),
        ms(xs[0]),
        ms(xs[xs.len() - 1]),
        xs.len()
    )
}

/// One agent kind to time: its profile on beta, its binary and the version pinned.
struct Kind {
    profile: &'static str,
    bin: String,
    pinned: &'static str,
    configure: fn(String, &str) -> String,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (rounds, only) = args();
    let rounds = rounds.max(1);
    if fleet_tests::herdr_real::bin().is_none() {
        eprintln!("agents bench: needs a real herdr (HERDR_BIN); nothing measured");
        return;
    }
    let kinds = [
        Kind {
            profile: "claude",
            bin: claude_bin(),
            pinned: CLAUDE_CODE_VERSION,
            configure: with_claude_profile,
        },
        Kind {
            profile: "codex",
            bin: codex_bin(),
            pinned: CODEX_VERSION,
            configure: with_codex_profile,
        },
        Kind {
            profile: "opencode",
            bin: opencode_bin(),
            pinned: OPENCODE_VERSION,
            configure: with_opencode_profile,
        },
    ];
    for kind in kinds {
        if only.as_deref().is_some_and(|o| o != kind.profile) {
            continue;
        }
        let version = std::process::Command::new(&kind.bin)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        match version {
            Ok(v) => {
                println!(
                    "{} {v} (pinned {}), {rounds} rounds",
                    kind.profile, kind.pinned
                );
                time_kind(&kind, rounds).await;
            }
            Err(e) => eprintln!("agents bench: no {} ({e}); not measured", kind.bin),
        }
    }
}

async fn time_kind(kind: &Kind, rounds: usize) {
    let fleet = AgentFleet::start(kind.profile, kind.configure).await;
    let lead = &fleet.lead;
    let mut ready = Vec::new();
    for i in 0..rounds.min(5) {
        let t = Instant::now();
        let (ok, spawned) = lead
            .call(
                "fleet_spawn",
                json!({"profile": kind.profile, "host": "beta"}),
            )
            .await;
        assert!(ok, "round {i}: {spawned}");
        ready.push(t.elapsed());
        let gid = spawned["gid"].as_str().unwrap_or_default().to_string();
        let (ok, stopped) = lead.call("fleet_stop", json!({"sessionId": gid})).await;
        assert!(ok, "round {i}: {stopped}");
    }
    println!(
        "{}",
        summary(&format!("{} spawn to READY", kind.profile), ready)
    );
    fleet.finish().await;
    for reports in [false, true] {
        turns(kind, rounds, reports).await;
    }
}

/// `rounds` briefs to REPLIED and `rounds` plain ones to COMPLETED_UNREPLIED on one member of
/// a profile whose agent reports its own turns, or not (`reports = false`: its screen is read).
async fn turns(kind: &Kind, rounds: usize, reports: bool) {
    let configure: fn(String, &str) -> String = match (kind.profile, reports) {
        (_, true) => kind.configure,
        ("claude", false) => |c, e| unreported(with_claude_profile(c, e)),
        ("codex", false) => |c, e| unreported(with_codex_profile(c, e)),
        _ => |c, e| unreported(with_opencode_profile(c, e)),
    };
    let fleet = AgentFleet::start(kind.profile, configure).await;
    let lead = &fleet.lead;
    let (ok, spawned) = lead
        .call(
            "fleet_spawn",
            json!({"profile": kind.profile, "host": "beta"}),
        )
        .await;
    assert!(ok, "{spawned}");
    let gid = spawned["gid"].as_str().unwrap_or_default().to_string();
    let send = |message: String| {
        let gid = gid.clone();
        async move {
            let t = Instant::now();
            let (_, out) = lead
                .call(
                    "fleet_send",
                    json!({"sessionId": gid, "message": message, "timeoutMs": 60000}),
                )
                .await;
            (out, t.elapsed())
        }
    };
    // The agent's first turn waits out its own start: not timed.
    let (out, _) = send("[script:plain] warm up".into()).await;
    assert_eq!(out["outcome"], "COMPLETED_UNREPLIED", "{out}");
    let (mut replied, mut plain) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let (out, t) = send(format!("[script:reply] round {i}")).await;
        assert_eq!(out["outcome"], "REPLIED", "round {i}: {out}");
        replied.push(t);
        let (out, t) = send(format!("[script:plain] round {i}")).await;
        assert_eq!(out["outcome"], "COMPLETED_UNREPLIED", "round {i}: {out}");
        plain.push(t);
    }
    let mode = if reports { "reports" } else { "screen" };
    println!(
        "{}",
        summary(
            &format!("{} ({mode}) brief to REPLIED", kind.profile),
            replied
        )
    );
    println!(
        "{}",
        summary(
            &format!("{} ({mode}) brief to COMPLETED_UNREPLIED", kind.profile),
            plain
        )
    );
    fleet.finish().await;
}

/// A host config whose agent profile reads its member's screen only.
fn unreported(config: String) -> String {
    config.replace("\nbase_url = ", "\nreports = false\nbase_url = ")
}
