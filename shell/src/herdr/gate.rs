//! The readiness gate a launch waits on: the agent's prompt on its screen (`agent_screen`), or
//! an injectable status for a `command` member, within the readiness bound.

use super::*;

/// Why a pane did not pass a status gate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GateError {
    /// herdr answered, and the status never passed within the bound (or the pane closed).
    NotReady(String),
    /// herdr did not answer at the end: nothing is known about the pane.
    Herdr(String),
}

impl std::fmt::Display for GateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GateError::NotReady(why) | GateError::Herdr(why) => f.write_str(why),
        }
    }
}

/// Waits, within the readiness bound, for the agent's prompt (`agent_screen`): a dialog on
/// its screen fails at once, naming it, and is never typed into; a program that ended fails
/// with its exit and last screen. The error reads after the agent's kind ("claude-code …").
pub(super) async fn screen_within(
    api: &Api,
    pane: &str,
    cfg: &LaunchConfig,
    dir: &std::path::Path,
    rules: fleet_core::agent_screen::StartRules,
) -> Result<(), GateError> {
    use fleet_core::agent_screen::{start_screen, StartScreen};
    let deadline = tokio::time::Instant::now() + cfg.ready_timeout;
    let bound = cfg.ready_timeout.as_millis();
    loop {
        if let Some(why) = exit_report(api, Some(pane), dir, 80).await {
            return Err(GateError::NotReady(format!("did not start: {why}")));
        }
        let last = match api.pane_read(pane, SCREEN_GATE_LINES).await {
            Ok(screen) => match start_screen(rules, &screen) {
                StartScreen::Ready => return Ok(()),
                StartScreen::Dialog(d) => {
                    return Err(GateError::NotReady(format!(
                        "{d}; fleetd prepares its config so it never should (docs/members.md), and types nothing into a dialog"
                    )))
                }
                StartScreen::Starting => GateError::NotReady(format!(
                    "did not show its prompt within {bound} ms; its screen ended:\n{}",
                    last_screen(&screen, 12, 1024)
                )),
            },
            Err(e) if e.code() == Some("pane_not_found") => {
                return Err(GateError::NotReady(
                    "closed its pane before it was ready".into(),
                ))
            }
            Err(e) => GateError::Herdr(format!("was not seen ready within {bound} ms ({e})")),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(last);
        }
        tokio::time::sleep(cfg.ready_poll).await;
    }
}

/// How much of a starting agent's screen the gate reads.
const SCREEN_GATE_LINES: u32 = 60;

/// Waits, within the readiness bound, for the pane's status to pass `accept` (for a `command`
/// member's gate: injectable, as herdr reports it or the program reports itself).
pub(super) async fn status_within(
    api: &Api,
    pane: &str,
    cfg: &LaunchConfig,
    dir: &std::path::Path,
    accept: fn(AgentStatus) -> bool,
) -> Result<(), GateError> {
    let deadline = tokio::time::Instant::now() + cfg.ready_timeout;
    let bound = cfg.ready_timeout.as_millis();
    loop {
        // A program that already ended fails the gate now, saying how, not at the bound.
        if let Some(why) = exit_report(api, Some(pane), dir, 80).await {
            return Err(GateError::NotReady(format!("not ready: {why}")));
        }
        let last = match api.pane_get(pane).await {
            Ok(info) if accept(AgentStatus::from_wire(&info.agent_status)) => return Ok(()),
            Ok(info) => GateError::NotReady(format!(
                "not ready within {bound} ms (status {})",
                info.agent_status
            )),
            Err(e) if e.code() == Some("pane_not_found") => {
                return Err(GateError::NotReady(
                    "the member's pane closed before it was ready".into(),
                ))
            }
            Err(e) => GateError::Herdr(format!("not ready within {bound} ms ({e})")),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(last);
        }
        tokio::time::sleep(cfg.ready_poll).await;
    }
}
