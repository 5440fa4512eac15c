//! Real agent CLIs as members, for the end-to-end tests and the agents bench: where each
//! binary is, the profile a test host offers for it (its model the scripted endpoint), and the
//! two-host fleet they run in.

use crate::fleetd_proc::{logs, start_host_edited, stop_all, Dir, Host, Mcp};
use crate::model_endpoint::ModelEndpoint;
use serde_json::json;
use std::time::Duration;

/// The key a test profile hands its member (the scripted endpoint takes any).
pub const API_KEY: &str = "sk-ant-test-0123456789abcdefghijklmnop";

/// The Claude Code release the tests pin (`.ci/run` installs it from npm).
pub const CLAUDE_CODE_VERSION: &str = "2.1.328";

/// Claude Code's binary: `CLAUDE_BIN`, or `claude` on `PATH`.
pub fn claude_bin() -> String {
    std::env::var("CLAUDE_BIN")
        .ok()
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| "claude".into())
}

/// A host config (`fleetd_proc::cross_config`) that also offers a `claude` profile whose model
/// is the scripted endpoint at `endpoint`, with readiness bounds for a real agent's start.
pub fn with_claude_profile(config: String, endpoint: &str) -> String {
    let section = format!(
        r#"
[profiles.claude]
kind = "claude-code"
bin = "{bin}"
base_url = "{endpoint}"
charter = "You are a fleet member. The fleet tools are deferred: load them with ToolSearch (select:mcp__fleet__fleet_reply,mcp__fleet__fleet_ask), then finish every task with fleet_reply."
env = {{ ANTHROPIC_API_KEY = "{API_KEY}" }}
"#,
        bin = claude_bin(),
    );
    with_profile(config, endpoint, &section, (20_000, 25_000))
}

/// The Codex release the tests pin (`.ci/run` installs it from npm).
pub const CODEX_VERSION: &str = "0.171.0";

/// Codex's binary: `CODEX_BIN`, or `codex` on `PATH`.
pub fn codex_bin() -> String {
    std::env::var("CODEX_BIN")
        .ok()
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| "codex".into())
}

/// A host config that also offers a `codex` profile whose model is the scripted endpoint at
/// `endpoint` (its Responses API under `/v1`).
pub fn with_codex_profile(config: String, endpoint: &str) -> String {
    let base = format!("{endpoint}/v1");
    let section = format!(
        r#"
[profiles.codex]
kind = "codex"
bin = "{bin}"
base_url = "{base}"
model = "scripted-model"
charter = "You are a fleet member: finish every task with the fleet_reply tool; ask the lead with fleet_ask when blocked."
env = {{ OPENAI_API_KEY = "{API_KEY}" }}
"#,
        bin = codex_bin(),
    );
    // Codex's plain answer can be seen only as idle samples (no working between): at the
    // fleet's 100 ms poll the pickup bound is 0.7 s, and under load Codex 0.171 took longer
    // than that to draw its answer — the scrape saw only the echo and the lead waited out its
    // timeout (twice in CI-like runs). At the default poll (500 ms) the bound is 3.5 s.
    with_profile(config, &base, &section, (20_000, 25_000))
        .replace("poll_interval_ms = 100", "poll_interval_ms = 500")
}

/// The opencode release the tests pin (`.ci/run` installs it from npm).
pub const OPENCODE_VERSION: &str = "1.18.33";

/// opencode's binary: `OPENCODE_BIN`, or `opencode` on `PATH`.
pub fn opencode_bin() -> String {
    std::env::var("OPENCODE_BIN")
        .ok()
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| "opencode".into())
}

/// A host config that also offers an `opencode` profile whose model is the scripted endpoint
/// at `endpoint` (its Chat Completions under `/v1`).
pub fn with_opencode_profile(config: String, endpoint: &str) -> String {
    let base = format!("{endpoint}/v1");
    let section = format!(
        r#"
[profiles.opencode]
kind = "opencode"
bin = "{bin}"
base_url = "{base}"
model = "scripted-model"
charter = "You are a fleet member: finish every task with the fleet_reply tool; ask the lead with fleet_ask when blocked."
env = {{ OPENAI_API_KEY = "{API_KEY}" }}
"#,
        bin = opencode_bin(),
    );
    // herdr 0.8.2 never reports opencode 1.18 working, so each turn's end is inferred at the
    // pickup bound (8 polls): at the default poll (500 ms) that is 4 s, longer than opencode's
    // turns here take; the fleet's 100 ms would infer it before opencode has answered.
    with_profile(config, &base, &section, (40_000, 45_000))
        .replace("poll_interval_ms = 100", "poll_interval_ms = 500")
}

/// `config` (`fleetd_proc::cross_config`) with the profile `section` added, `endpoint` on
/// `base_url_allow`, and the readiness bounds in ms (herdr's gate, the core's spawn deadline)
/// a real agent's start needs.
fn with_profile(config: String, endpoint: &str, section: &str, bounds: (u64, u64)) -> String {
    let (ready, spawn) = bounds;
    config
        .replace(
            "ready_timeout_ms = 7000",
            &format!("ready_timeout_ms = {ready}\nbase_url_allow = [\"{endpoint}\"]"),
        )
        .replace(
            "spawn_ready_timeout_ms = 8000",
            &format!("spawn_ready_timeout_ms = {spawn}"),
        )
        + section
}

/// Two gateways on RabbitMQ (alpha, beta), beta offering an agent profile whose model is a
/// scripted endpoint, and alpha's lead connected over MCP once beta's profile reached it.
pub struct AgentFleet {
    pub model: ModelEndpoint,
    pub hosts: Vec<Host>,
    pub lead: Mcp,
    ns: String,
    _dir: Dir,
    /// One fleet of real agents at a time in a test process: three TUIs, six fleetd and
    /// herdrs starting at once on a two-core machine starve herdr past its answer bound.
    _alone: tokio::sync::MutexGuard<'static, ()>,
}

static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl AgentFleet {
    /// Starts it for `profile`, which `configure` adds to beta's config.
    pub async fn start(profile: &str, configure: fn(String, &str) -> String) -> AgentFleet {
        let alone = ALONE.lock().await;
        let model = ModelEndpoint::start()
            .await
            .unwrap_or_else(|e| panic!("the scripted model endpoint: {e}"));
        let dir = Dir::new(&format!("agents-{profile}"));
        let ns = format!("ag{}{}", profile.len(), std::process::id());
        let alpha = start_host_edited(&dir, &ns, 0, |c| c).await;
        let url = model.url.clone();
        let beta = start_host_edited(&dir, &ns, 1, |c| configure(c, &url)).await;
        let hosts = vec![alpha, beta];
        // The agent is the member here: no played member answers for it.
        for h in &hosts {
            h.members.task.abort();
        }
        let lead = Mcp::connect(&format!("{}/mcp", hosts[0].proc.url), Some(&hosts[0].token))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut offered = false;
        for _ in 0..100 {
            let (_, p) = lead.call("fleet_profiles", json!({})).await;
            if p["hosts"]["beta"].to_string().contains(profile) {
                offered = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            offered,
            "beta never offered its {profile} profile\n{}",
            logs(&hosts)
        );
        AgentFleet {
            model,
            hosts,
            lead,
            ns,
            _dir: dir,
            _alone: alone,
        }
    }

    /// Every host's log, for a failing assertion.
    pub fn logs(&self) -> String {
        logs(&self.hosts)
    }

    /// Why a step failed, most telling last (a long CI log is cut in its middle): every host's
    /// log, then the member's screen on beta as herdr holds it now.
    pub async fn diagnose(&self, gid: &str) -> String {
        let beta = &self.hosts[1].herdr;
        let screen = match beta.member_pane(gid).await {
            Some(pane) => beta.typed_into(&pane).await.join("\n"),
            None => format!("(no pane of {gid} on beta)"),
        };
        format!(
            "{}\n==== {gid}'s screen on beta, now ====\n{screen}",
            self.logs()
        )
    }

    /// Stops both gateways (each must exit 0) and their herdrs, and deletes the namespace's
    /// queues, which do not expire.
    pub async fn finish(self) {
        let AgentFleet {
            lead,
            mut hosts,
            ns,
            _dir,
            ..
        } = self;
        lead.close().await;
        stop_all(&mut hosts).await;
        for h in hosts {
            h.herdr.finish().await;
        }
        crate::gateways::delete_namespace(&ns, &["alpha", "beta"], &["lead-alpha", "lead-beta"])
            .await;
    }
}
