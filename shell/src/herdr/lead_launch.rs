//! `LeadLauncher`: starts each configured lead (`[[leads]] launch = { … }`) in the leads'
//! herdr when no pane carries its label, and labels the pane so nudges find it. A lead is a
//! person's agent on the primary account: never sandboxed, never given a member's charter or
//! token, never reaped, and started through `env -u` so no member-only variable the herdr
//! server's environment may carry (`ANTHROPIC_BASE_URL`, `FLEET_MCP_TOKEN`, `FLEET_GID`)
//! reaches it.

use super::api::NewPane;
use super::HerdrClient;
use crate::metrics::Counter;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Variables only members may have: removed from a launched lead's environment, refused in
/// its `launch.env`.
pub const MEMBER_ONLY_ENV: [&str; 3] = ["ANTHROPIC_BASE_URL", "FLEET_MCP_TOKEN", "FLEET_GID"];

/// `[[leads]] launch`: how to start the lead when none is running.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchSection {
    /// The program and its arguments (for Claude Code: `["claude"]`).
    pub argv: Vec<String>,
    /// The directory it starts in (absolute); herdr's default when absent.
    pub cwd: Option<String>,
    /// More environment for it (never a member-only variable).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The herdr tab it opens in.
    #[serde(default = "default_tab")]
    pub tab: String,
}

fn default_tab() -> String {
    "leads".into()
}

impl LaunchSection {
    /// Why this launch cannot be used, if it cannot.
    pub fn invalid(&self) -> Option<String> {
        if self.argv.first().is_none_or(|p| p.trim().is_empty()) {
            return Some("argv must name a program".into());
        }
        if let Some(cwd) = &self.cwd {
            if !cwd.starts_with('/') {
                return Some(format!("cwd {cwd:?} must be an absolute path"));
            }
        }
        let forbidden = self
            .env
            .keys()
            .find(|k| MEMBER_ONLY_ENV.contains(&k.as_str()));
        forbidden.map(|k| format!("env may not set {k}: only members may have it"))
    }

    /// The pane to create: labelled, its argv behind `env -u` for each member-only variable.
    pub fn pane(&self, label: &str, mcp_url: &str) -> NewPane {
        let mut command = vec!["env".to_string()];
        for k in MEMBER_ONLY_ENV {
            command.push("-u".into());
            command.push(k.into());
        }
        command.push("--".into());
        command.extend(self.argv.iter().cloned());
        let mut env = self.env.clone();
        env.insert("FLEET_MCP_URL".into(), mcp_url.to_string());
        NewPane {
            label: label.to_string(),
            cwd: self.cwd.clone(),
            command,
            env,
            workspace_id: None,
            tab_label: Some(self.tab.clone()),
        }
    }
}

/// One lead the launcher keeps running.
#[derive(Clone, Debug)]
pub struct LeadToLaunch {
    pub name: String,
    pub label: String,
    pub launch: LaunchSection,
}

/// Checks every `every` that each lead's pane exists and starts the ones that do not, until
/// the task is dropped. A lead whose program keeps ending is started at most once a check.
pub async fn keep_running(
    client: HerdrClient,
    leads: Vec<LeadToLaunch>,
    mcp_url: String,
    every: Duration,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
) {
    if leads.is_empty() {
        return;
    }
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for l in &leads {
            match client.ensure_lead(&l.launch.pane(&l.label, &mcp_url)).await {
                Ok(Some(pane)) => {
                    metrics.inc(Counter::LeadsLaunched, &[("lead", l.name.as_str())]);
                    tracing::info!(lead = %l.name, label = %l.label, %pane, "lead launched (none was running)")
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(lead = %l.name, label = %l.label, error = %e, "could not launch the lead")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lead_starts_without_member_only_variables_and_knows_its_gateway() {
        let l = LaunchSection {
            argv: vec!["claude".into(), "--continue".into()],
            cwd: Some("/work".into()),
            env: [("EDITOR".to_string(), "vi".to_string())]
                .into_iter()
                .collect(),
            tab: default_tab(),
        };
        assert_eq!(l.invalid(), None);
        let p = l.pane("lead-main", "http://127.0.0.1:8765/mcp");
        assert_eq!(
            p.command,
            [
                "env",
                "-u",
                "ANTHROPIC_BASE_URL",
                "-u",
                "FLEET_MCP_TOKEN",
                "-u",
                "FLEET_GID",
                "--",
                "claude",
                "--continue"
            ]
        );
        assert_eq!(p.label, "lead-main");
        assert_eq!(
            p.env.get("FLEET_MCP_URL").map(String::as_str),
            Some("http://127.0.0.1:8765/mcp")
        );
        assert_eq!(p.env.get("EDITOR").map(String::as_str), Some("vi"));
    }

    #[test]
    fn a_launch_that_would_give_a_lead_a_members_variable_is_refused() {
        let l = LaunchSection {
            argv: vec!["claude".into()],
            env: [("ANTHROPIC_BASE_URL".to_string(), "http://x".to_string())]
                .into_iter()
                .collect(),
            ..LaunchSection::default()
        };
        assert_eq!(
            l.invalid().as_deref(),
            Some("env may not set ANTHROPIC_BASE_URL: only members may have it")
        );
        let empty = LaunchSection::default();
        assert_eq!(empty.invalid().as_deref(), Some("argv must name a program"));
    }
}
