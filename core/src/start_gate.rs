//! A starting member's readiness gate, read by the core. The launcher says at once how the
//! member will be known ready (`Readiness`); where that takes a look at its pane — an agent's
//! prompt on its screen, a `command` program's injectable status — the gateway asks for one
//! (`Output::LookAtStart`) every poll, on its own clock, until the pane passes, shows a dialog
//! a person would have to answer, ends, or runs out of its bound. The simulation runs the same
//! rule: an agent that connects before it takes input is not typed into.

use crate::agent_screen::{start_screen, StartRules, StartScreen};
use crate::io::{PaneError, Readiness, Sampled};
use crate::time::{Duration, Instant};

/// How long a starting program may take to pass, and how often it is looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub(crate) timeout: Duration,
    pub(crate) poll: Duration,
}

/// Where one reserved spawn's gate stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StartGate {
    /// The launcher has not reported the pane yet.
    Launching,
    /// Open when the member connects: nothing left to look at.
    Connect,
    /// Looking at its screen until it shows its prompt (then `Connect`).
    Prompt { rules: StartRules, looking: Looking },
    /// Looking at its status until it is injectable (then open).
    Injectable { looking: Looking },
}

/// A gate that looks at the pane: its bound, its cadence, and what the last look saw (for
/// the error when the bound passes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Looking {
    until: Instant,
    bounds: Bounds,
    last: String,
}

/// What a look at a starting pane decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Look {
    /// This gate is not looking (an answer for a gate that moved on): nothing to do.
    Ignored,
    /// Still starting: look again at this time.
    Again(Instant),
    /// Its prompt is drawn: it now waits for its connection.
    Prompted,
    /// It passed: typing may begin.
    Open,
    /// It failed, said for a person: its pane is closed and the spawn fails.
    Failed(String),
}

impl StartGate {
    /// The gate the launcher's answer names, and whether a look is wanted now.
    pub(crate) fn launched(now: Instant, readiness: Readiness, bounds: Bounds) -> StartGate {
        let looking = Looking {
            until: now + bounds.timeout,
            bounds,
            last: "nothing was read of it".into(),
        };
        match readiness {
            Readiness::OnConnect => StartGate::Connect,
            Readiness::OnPrompt(rules) => StartGate::Prompt { rules, looking },
            Readiness::OnInjectable => StartGate::Injectable { looking },
        }
    }

    /// Whether the gate reads the pane (and so holds a connection back until it passes).
    pub(crate) fn is_looking(&self) -> bool {
        matches!(
            self,
            StartGate::Prompt { .. } | StartGate::Injectable { .. }
        )
    }

    /// Judges one look at the pane at `now`.
    pub(crate) fn look(&mut self, now: Instant, look: Result<Sampled, PaneError>) -> Look {
        let (who, looking) = match self {
            StartGate::Prompt { rules, looking } => (rules.to_string(), looking),
            StartGate::Injectable { looking } => ("the member".to_string(), looking),
            StartGate::Launching | StartGate::Connect => return Look::Ignored,
        };
        let bound = looking.bounds.timeout.as_millis();
        let status = match look {
            Ok(Sampled::Ended { why }) => {
                return Look::Failed(format!("{who} did not start: {why}"))
            }
            Ok(Sampled::Gone) | Err(PaneError::NotFound) => {
                return Look::Failed(format!("{who} closed its pane before it was ready"))
            }
            Err(e) => {
                looking.last = format!("{who} was not seen ready within {bound} ms ({e})");
                None
            }
            Ok(Sampled::Status { status, screen }) => Some((status, screen.unwrap_or_default())),
        };
        if let Some((status, screen)) = status {
            match self {
                StartGate::Prompt { rules, looking } => match start_screen(*rules, &screen) {
                    StartScreen::Ready => {
                        *self = StartGate::Connect;
                        return Look::Prompted;
                    }
                    StartScreen::Dialog(d) => {
                        return Look::Failed(format!(
                            "{who} {d}; fleetd prepares its config so it never should (docs/members.md), and types nothing into a dialog"
                        ))
                    }
                    StartScreen::Starting => {
                        looking.last = format!(
                            "{who} did not show its prompt within {bound} ms; its screen ended:\n{}",
                            crate::pane_text::last_screen(&screen, 12, 1024)
                        );
                    }
                },
                StartGate::Injectable { looking } => {
                    if status.injectable() {
                        return Look::Open;
                    }
                    looking.last = format!("{who} was not ready within {bound} ms (status {status})");
                }
                StartGate::Launching | StartGate::Connect => return Look::Ignored,
            }
        }
        let (StartGate::Prompt { looking, .. } | StartGate::Injectable { looking }) = self else {
            return Look::Ignored;
        };
        if now >= looking.until {
            return Look::Failed(looking.last.clone());
        }
        Look::Again(now + looking.bounds.poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::AgentStatus;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    const BOUNDS: Bounds = Bounds {
        timeout: Duration::from_millis(1_000),
        poll: Duration::from_millis(250),
    };

    fn screen(text: &str) -> Result<Sampled, PaneError> {
        Ok(Sampled::Status {
            status: AgentStatus::Idle,
            screen: Some(text.into()),
        })
    }

    const BANNER: &str = " ▐▛███▛█   Claude Code v2.1.328\n";

    fn prompt() -> String {
        let rule = "─".repeat(40);
        format!("{BANNER}{rule}\n❯ \n{rule}\n")
    }

    /// Claude Code's banner is drawn (herdr calls it idle) before its input box: the gate
    /// looks again until the box is there, and then waits for the connection.
    #[test]
    fn an_agent_passes_at_its_prompt_not_at_its_banner() {
        let mut g = StartGate::launched(at(0), Readiness::OnPrompt(StartRules::ClaudeCode), BOUNDS);
        assert!(g.is_looking());
        assert_eq!(g.look(at(0), screen(BANNER)), Look::Again(at(250)));
        assert_eq!(g.look(at(250), screen(&prompt())), Look::Prompted);
        assert_eq!(g, StartGate::Connect);
        assert!(!g.is_looking());
        assert_eq!(g.look(at(500), screen(&prompt())), Look::Ignored);
    }

    /// A dialog fails at once, named; nothing waits for the bound.
    #[test]
    fn a_dialog_fails_the_gate_at_once_naming_it() {
        let mut g = StartGate::launched(at(0), Readiness::OnPrompt(StartRules::ClaudeCode), BOUNDS);
        let trust =
            "Accessing workspace:\n\n /srv/app\n\n Is this a project you created or one you trust?";
        let Look::Failed(why) = g.look(at(0), screen(trust)) else {
            panic!("a dialog passed or waited");
        };
        assert!(
            why.starts_with("claude-code is asking whether to trust /srv/app"),
            "{why}"
        );
    }

    /// Past its bound, the gate fails with the last screen it saw.
    #[test]
    fn a_prompt_never_drawn_fails_at_the_bound_with_its_last_screen() {
        let mut g = StartGate::launched(at(0), Readiness::OnPrompt(StartRules::Codex), BOUNDS);
        assert_eq!(g.look(at(750), screen("booting…")), Look::Again(at(1_000)));
        let Look::Failed(why) = g.look(at(1_000), screen("still booting…")) else {
            panic!("not failed at the bound");
        };
        assert!(
            why.starts_with("codex did not show its prompt within 1000 ms"),
            "{why}"
        );
        assert!(why.ends_with("still booting…"), "{why}");
    }

    /// A program that ended, or a pane that went, fails now; herdr not answering waits.
    #[test]
    fn an_end_fails_at_once_and_no_answer_waits() {
        let mut g = StartGate::launched(at(0), Readiness::OnInjectable, BOUNDS);
        assert_eq!(
            g.look(at(0), Err(PaneError::Unavailable("timeout".into()))),
            Look::Again(at(250))
        );
        let ended = Ok(Sampled::Ended {
            why: "its program exited with status 3".into(),
        });
        assert_eq!(
            g.look(at(250), ended),
            Look::Failed("the member did not start: its program exited with status 3".into())
        );
        let mut g = StartGate::launched(at(0), Readiness::OnInjectable, BOUNDS);
        assert!(
            matches!(g.look(at(0), Ok(Sampled::Gone)), Look::Failed(w) if w.contains("closed its pane"))
        );
    }

    /// A `command` member opens on an injectable status, and fails at the bound naming the
    /// status it had.
    #[test]
    fn a_command_member_opens_when_injectable() {
        let busy = |s| {
            Ok(Sampled::Status {
                status: s,
                screen: None,
            })
        };
        let mut g = StartGate::launched(at(0), Readiness::OnInjectable, BOUNDS);
        assert_eq!(
            g.look(at(0), busy(AgentStatus::Unknown)),
            Look::Again(at(250))
        );
        assert_eq!(g.look(at(250), busy(AgentStatus::Idle)), Look::Open);
        let mut g = StartGate::launched(at(0), Readiness::OnInjectable, BOUNDS);
        let Look::Failed(why) = g.look(at(1_000), busy(AgentStatus::Working)) else {
            panic!("not failed at the bound");
        };
        assert_eq!(
            why,
            "the member was not ready within 1000 ms (status WORKING)"
        );
    }

    #[test]
    fn a_connect_gate_never_looks() {
        let mut g = StartGate::launched(at(0), Readiness::OnConnect, BOUNDS);
        assert!(!g.is_looking());
        assert_eq!(g.look(at(0), screen(&prompt())), Look::Ignored);
        assert_eq!(StartGate::Launching.look(at(0), screen("")), Look::Ignored);
    }
}
