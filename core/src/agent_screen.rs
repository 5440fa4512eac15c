//! What an agent CLI's screen says while it starts: at its prompt and taking input, still
//! drawing, or stopped on a dialog a person would have to answer. Pure rules over the screen
//! text, per agent kind, from screens recorded with the real programs (the versions are in
//! docs/members.md); the readiness gate calls them before anything is typed.
//!
//! herdr may call a pane injectable seconds before its agent takes input (Claude Code 2.1 drops
//! an Enter typed before its prompt is drawn), and a dialog's default answer is often the one
//! that exits or refuses — so a dialog is never typed into: the spawn fails, naming it.

use std::fmt;

/// The agents whose start screens fleetd knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StartRules {
    /// Claude Code (checked against 2.1.328).
    ClaudeCode,
    /// OpenAI's Codex CLI (checked against 0.171.0).
    Codex,
    /// opencode (checked against 1.18.33).
    OpenCode,
}

/// A dialog on an agent's start screen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dialog {
    /// "Accessing workspace: <path> … Is this a project you created or one you trust?"
    Trust { path: Option<String> },
    /// "Detected a custom API key in your environment … Do you want to use this API key?"
    ApiKey,
    /// The first-run onboarding (theme picker, security notes).
    Onboarding { step: &'static str },
    /// The onboarding's connectivity check, which fails with no route to the provider.
    Unreachable,
    /// Not logged in: its key was refused.
    NotLoggedIn,
    /// A tool call waits for a person's approval.
    ToolApproval,
}

impl fmt::Display for StartRules {
    /// The agent's kind, as a profile names it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StartRules::ClaudeCode => "claude-code",
            StartRules::Codex => "codex",
            StartRules::OpenCode => "opencode",
        })
    }
}

impl fmt::Display for Dialog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dialog::Trust { path: Some(p) } => write!(f, "is asking whether to trust {p}"),
            Dialog::Trust { path: None } => f.write_str("is asking whether to trust its folder"),
            Dialog::ApiKey => {
                f.write_str("is asking whether to use the API key in its environment")
            }
            Dialog::Onboarding { step } => write!(f, "is on its first-run onboarding ({step})"),
            Dialog::Unreachable => {
                f.write_str("is on its first-run connectivity check and cannot reach its provider")
            }
            Dialog::NotLoggedIn => f.write_str("is not logged in (its API key was refused)"),
            Dialog::ToolApproval => f.write_str("is asking a person to approve a tool call"),
        }
    }
}

/// Where an agent's start is, from its screen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartScreen {
    /// Its prompt is drawn: a typed brief is taken.
    Ready,
    /// Still drawing (or something fleetd does not know): wait, within the gate's bound.
    Starting,
    /// A dialog waits for a person.
    Dialog(Dialog),
}

/// Judges `screen` (the pane's text) by the rules of `rules`.
pub fn start_screen(rules: StartRules, screen: &str) -> StartScreen {
    match rules {
        StartRules::ClaudeCode => claude_code(screen),
        StartRules::Codex => codex(screen),
        StartRules::OpenCode => opencode(screen),
    }
}

/// opencode draws nothing for seconds, then its home screen; text typed before that is
/// dropped. Ready at its input box's placeholder.
fn opencode(screen: &str) -> StartScreen {
    if screen.contains("Permission required") {
        return StartScreen::Dialog(Dialog::ToolApproval);
    }
    if screen.contains("Ask anything") {
        StartScreen::Ready
    } else {
        StartScreen::Starting
    }
}

fn codex(screen: &str) -> StartScreen {
    let has = |s: &str| screen.contains(s);
    if has("Trust this folder?") {
        return StartScreen::Dialog(Dialog::Trust {
            path: line_after(screen, "Folder access"),
        });
    }
    if has("MCP server to run tool") {
        return StartScreen::Dialog(Dialog::ToolApproval);
    }
    // Its input line (`› Ask Codex to do anything`) and the footer under it.
    let prompt = screen.lines().any(|l| l.trim_start().starts_with('›'));
    if prompt && has("? for shortcuts") {
        StartScreen::Ready
    } else {
        StartScreen::Starting
    }
}

fn claude_code(screen: &str) -> StartScreen {
    let has = |s: &str| screen.contains(s);
    if has("Do you want to use this API key?") || has("Detected a custom API key") {
        return StartScreen::Dialog(Dialog::ApiKey);
    }
    if has("Is this a project you created or one you trust?")
        || has("Do you trust the files in this folder?")
        || has("folder isn't trusted")
    {
        return StartScreen::Dialog(Dialog::Trust {
            path: line_after(screen, "Accessing workspace:"),
        });
    }
    if has("Unable to connect to Anthropic services") {
        return StartScreen::Dialog(Dialog::Unreachable);
    }
    if has("Choose the text style") {
        return StartScreen::Dialog(Dialog::Onboarding {
            step: "the theme picker",
        });
    }
    if has("Security notes:") && has("Press Enter to continue") {
        return StartScreen::Dialog(Dialog::Onboarding {
            step: "the security notes",
        });
    }
    if has("Not logged in") && has("/login") {
        return StartScreen::Dialog(Dialog::NotLoggedIn);
    }
    if input_box(screen) {
        StartScreen::Ready
    } else {
        StartScreen::Starting
    }
}

/// Claude Code's input box: a prompt line (`❯`) between two horizontal rules.
fn input_box(screen: &str) -> bool {
    let lines: Vec<&str> = screen.lines().map(str::trim).collect();
    let rule = |l: &str| l.chars().count() >= 10 && l.chars().all(|c| c == '─');
    lines
        .windows(3)
        .any(|w| rule(w[0]) && w[1].starts_with('❯') && rule(w[2]))
}

/// The first non-blank line after the one holding `marker`, trimmed.
fn line_after(screen: &str, marker: &str) -> Option<String> {
    let mut lines = screen.lines().skip_while(|l| !l.contains(marker)).skip(1);
    lines
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> String {
        "─".repeat(80)
    }

    /// Recorded from Claude Code 2.1.328 with a prepared config (screens shortened).
    #[test]
    fn claude_codes_prompt_is_ready_and_its_banner_alone_is_not() {
        let head = " ▐▛███▛█   Claude Code v2.1.328\n▝▜██████▀  Opus 5.5 · API Usage Billing\n ▝▝   ▝▝   /srv/app\n\n";
        assert_eq!(
            start_screen(StartRules::ClaudeCode, head),
            StartScreen::Starting
        );
        assert_eq!(
            start_screen(StartRules::ClaudeCode, ""),
            StartScreen::Starting
        );
        let ready = format!(
            "{head}{}\n❯ \n{}\n  ⏵⏵ auto mode on (shift+tab to cycle) · ← for agents",
            rule(),
            rule()
        );
        assert_eq!(
            start_screen(StartRules::ClaudeCode, &ready),
            StartScreen::Ready
        );
    }

    /// Each first-run screen names itself, and none is ever ready: its default answer exits
    /// or refuses.
    #[test]
    fn claude_codes_first_run_screens_are_dialogs_named_for_a_person() {
        let trust = format!(
            "{}\n Accessing workspace:\n\n /srv/app\n\n Quick safety check: Is this a project you created or one you trust? (Like your own code…)\n\n ❯ No, exit\n   Yes, I trust this folder\n\n Enter to confirm · Esc to cancel",
            rule()
        );
        let key = "  Detected a custom API key in your environment\n\n  ANTHROPIC_API_KEY: sk-ant-...6789abcdefghijklmnop\n\n  Do you want to use this API key?\n\n    Yes\n  ❯ No (recommended)\n";
        let theme = " Let's get started.\n\n Choose the text style that looks best with your terminal\n ❯ ✔ Auto (match terminal)\n";
        let notes = " Security notes:\n 1. Claude can make mistakes.\n Press Enter to continue\n";
        let offline = "Welcome to Claude Code v2.1.328\n Unable to connect to Anthropic services\n\n Failed to connect to api.anthropic.com: EAI_AGAIN\n";
        let said = |s: &str| match start_screen(StartRules::ClaudeCode, s) {
            StartScreen::Dialog(d) => d.to_string(),
            other => panic!("{other:?} for {s:?}"),
        };
        assert_eq!(said(&trust), "is asking whether to trust /srv/app");
        assert_eq!(
            said(key),
            "is asking whether to use the API key in its environment"
        );
        assert_eq!(
            said(theme),
            "is on its first-run onboarding (the theme picker)"
        );
        assert_eq!(
            said(notes),
            "is on its first-run onboarding (the security notes)"
        );
        assert!(said(offline).contains("cannot reach its provider"));
        let refused = format!("{}\n❯ \n{}\n  Not logged in · run /login", rule(), rule());
        assert_eq!(said(&refused), "is not logged in (its API key was refused)");
    }

    /// Recorded from Codex 0.171.0 (screens shortened).
    #[test]
    fn codexs_prompt_is_ready_and_its_dialogs_are_named() {
        let codex = |s: &str| start_screen(StartRules::Codex, s);
        let early = "WARNING: proceeding, even though we could not create PATH aliases";
        assert_eq!(codex(early), StartScreen::Starting);
        let ready = "  >_ OpenAI Codex (v0.171.0)\n     /srv/app\n  permissions: YOLO mode\n\n› Ask Codex to do anything\n\n  gpt-5 default · /srv/app\n  ← for agents · ? for shortcuts";
        assert_eq!(codex(ready), StartScreen::Ready);
        let trust = "  Folder access\n  /srv/app\n  Trust this folder? Codex can read, edit, and run files here…\n› 1. Trust and continue\n  2. Back to Agent Command Center\n  enter continue · esc back";
        assert_eq!(
            codex(trust),
            StartScreen::Dialog(Dialog::Trust {
                path: Some("/srv/app".into())
            })
        );
        let approve = "• Calling fleet.fleet_reply\n  Allow the fleet MCP server to run tool \"fleet_reply\"?\n  › 1. Allow\n  enter to submit | esc to cancel";
        assert_eq!(codex(approve), StartScreen::Dialog(Dialog::ToolApproval));
    }

    /// Recorded from opencode 1.18.33: blank for seconds, then its home screen.
    #[test]
    fn opencodes_home_screen_is_ready_and_a_permission_prompt_is_not() {
        let oc = |s: &str| start_screen(StartRules::OpenCode, s);
        assert_eq!(oc("\n\n\n"), StartScreen::Starting);
        let home = "   █▀▀█ █▀▀█\n   ┃\n   ┃  Ask anything… \"Fix broken tests\"\n   ┃\n   ┃  Build · gpt-5 fleet\n  /srv/app  ⊙ 1 MCP /status   1.18.33";
        assert_eq!(oc(home), StartScreen::Ready);
        let ask = "  ┃  △ Permission required\n  ┃    ⚙ Call tool fleet_fleet_reply\n  ┃   Allow once   Allow always   Reject";
        assert_eq!(oc(ask), StartScreen::Dialog(Dialog::ToolApproval));
    }
}
