//! `ScriptedPanes`: a herdr that answers the gateway's pane operations from a script — each
//! pane a status the test sets, a screen that grows with what is typed, and the list of texts
//! typed into it — the way the driver feeds herdr's answers back as inputs.

use crate::ids::SessionId;
use crate::io::{Input, Output, PaneError, Sampled};
use crate::status::AgentStatus;
use std::collections::BTreeMap;

/// One scripted pane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptedPane {
    pub status: AgentStatus,
    pub screen: String,
    /// Every text typed into it, in order.
    pub typed: Vec<String>,
}

impl ScriptedPane {
    /// An agent at its prompt.
    pub fn idle() -> Self {
        ScriptedPane {
            status: AgentStatus::Idle,
            screen: "❯ ".into(),
            typed: Vec::new(),
        }
    }
}

/// The panes of one host, by gid; a map underneath, so a test reads and edits them directly.
#[derive(Clone, Debug, Default)]
pub struct ScriptedPanes {
    pub panes: BTreeMap<SessionId, ScriptedPane>,
}

impl std::ops::Deref for ScriptedPanes {
    type Target = BTreeMap<SessionId, ScriptedPane>;
    fn deref(&self) -> &Self::Target {
        &self.panes
    }
}

impl std::ops::DerefMut for ScriptedPanes {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.panes
    }
}

impl ScriptedPanes {
    pub fn add(&mut self, gid: &SessionId, pane: ScriptedPane) {
        self.panes.insert(gid.clone(), pane);
    }

    pub fn set_status(&mut self, gid: &SessionId, status: AgentStatus) {
        if let Some(p) = self.panes.get_mut(gid) {
            p.status = status;
        }
    }

    pub fn typed(&self, gid: &SessionId) -> &[String] {
        self.panes.get(gid).map_or(&[], |p| p.typed.as_slice())
    }

    /// herdr's answer to a pane operation, as the driver feeds it back: a sample, an inject's
    /// baseline, a scrape, or the pane gone (`pane_not_found`). `None` for an output that is
    /// not a pane operation, or a spawn (the launcher is the test's to script).
    pub fn answer(&mut self, out: &Output) -> Option<Input> {
        match out {
            Output::PollStatus { target, asked } => Some(match self.panes.get(target) {
                Some(p) => Input::StatusSampled {
                    target: target.clone(),
                    status: p.status,
                    screen: None,
                    asked: *asked,
                },
                None => Input::PaneGone {
                    target: target.clone(),
                },
            }),
            Output::PollStatuses {
                round,
                targets,
                asked,
            } => Some(Input::StatusesSampled {
                round: *round,
                asked: *asked,
                samples: targets
                    .iter()
                    .map(|t| {
                        let sampled = match self.panes.get(t) {
                            Some(p) => Sampled::Status {
                                status: p.status,
                                screen: None,
                            },
                            None => Sampled::Gone,
                        };
                        (t.clone(), sampled)
                    })
                    .collect(),
            }),
            Output::Inject { target, msg, text } => {
                let result = match self.panes.get_mut(target) {
                    Some(p) => {
                        let base = p.screen.clone();
                        p.typed.push(text.clone());
                        p.screen.push_str(&format!("\n❯ {text}"));
                        Ok(base)
                    }
                    None => Err(crate::io::InjectError::NotTyped(PaneError::NotFound)),
                };
                Some(Input::Injected {
                    target: target.clone(),
                    msg: *msg,
                    result,
                })
            }
            Output::ReadPane { target, msg } => Some(Input::PaneRead {
                target: target.clone(),
                msg: *msg,
                result: self
                    .panes
                    .get(target)
                    .map(|p| p.screen.clone())
                    .ok_or(PaneError::NotFound),
            }),
            Output::ProbeHealth { targets } => Some(Input::HealthProbed {
                probes: targets
                    .iter()
                    .map(|t| {
                        let sampled = match self.panes.get(t) {
                            Some(p) => Sampled::Status {
                                status: p.status,
                                screen: Some(p.screen.clone()),
                            },
                            None => Sampled::Gone,
                        };
                        (t.clone(), sampled)
                    })
                    .collect(),
            }),
            Output::ClosePane { gid } => {
                self.panes.remove(gid);
                Some(Input::PaneGone {
                    target: gid.clone(),
                })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::MsgId;

    /// A typed text lands on the screen and in the record; the baseline is the screen before.
    #[test]
    fn an_inject_answers_with_the_screen_before_it() {
        let mut p = ScriptedPanes::default();
        let g = SessionId::new("m");
        p.add(&g, ScriptedPane::idle());
        let msg = MsgId(uuid::Uuid::from_u128(1));
        let out = Output::Inject {
            target: g.clone(),
            msg,
            text: "task".into(),
        };
        assert_eq!(
            p.answer(&out),
            Some(Input::Injected {
                target: g.clone(),
                msg,
                result: Ok("❯ ".into())
            })
        );
        assert_eq!(p.typed(&g), ["task".to_string()]);
        let gone = Output::PollStatus {
            target: SessionId::new("x"),
            asked: crate::io::Asked(1),
        };
        assert!(matches!(p.answer(&gone), Some(Input::PaneGone { .. })));
    }
}
