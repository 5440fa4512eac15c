//! The herdr a test `fleetd` runs against: the double, or a real `herdr server` when
//! `HERDR_BIN` names one. The end-to-end tests see panes only through this, so the same
//! scenario runs on both; the real one is driven through herdr's socket API alone (labels,
//! `pane.read`, `pane.report_agent`), as a member agent would report itself.

use crate::herdr_double::HerdrDouble;
use crate::herdr_real::{self, RealHerdr};
use fleetd::herdr::{Api, NewPane, ReportedState, Socket};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The `command` member (and lead pane) program: prints each line typed into it once (the
/// terminal's own echo is off, so a real pane's screen shows each line once).
pub const ECHO: [&str; 3] = ["sh", "-c", "stty -echo 2>/dev/null; exec cat"];

/// A member pane as the test's played agent sees it.
#[derive(Clone, Debug)]
pub struct MemberPane {
    pub pane: String,
    pub gid: String,
    pub status: String,
    /// What was typed into it, in order.
    pub typed: Vec<String>,
}

#[derive(Clone)]
pub enum Panes {
    Double(Arc<HerdrDouble>),
    Real(Arc<RealHerdr>),
}

impl Panes {
    /// A real herdr under `dir` when `HERDR_BIN` is set, else the double.
    pub async fn start(dir: &Path) -> Panes {
        match herdr_real::bin() {
            Some(bin) => {
                let root = dir.join("herdr");
                let h = RealHerdr::start(&bin, &root)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                h.workspace().await.unwrap_or_else(|e| panic!("{e}"));
                Panes::Real(Arc::new(h))
            }
            None => Panes::Double(Arc::new(
                HerdrDouble::start(dir)
                    .await
                    .unwrap_or_else(|e| panic!("{e}")),
            )),
        }
    }

    /// The double, whatever `HERDR_BIN` says: for scenarios whose members are played from
    /// outside (`play_members`). A real herdr weighs a state reported from outside against
    /// what it sees of the pane's own program, and may call a pane idle the player just
    /// called working — seen here as a 6 s brief ending after 0.3 s, in 1 run of 6 without
    /// the health probe and more often with it. The real herdr's own scenarios use members
    /// that report themselves (the README quickstart, `contained`, `failed_start`).
    pub async fn start_double(dir: &Path) -> Panes {
        Panes::Double(Arc::new(
            HerdrDouble::start(dir)
                .await
                .unwrap_or_else(|e| panic!("{e}")),
        ))
    }

    pub fn is_real(&self) -> bool {
        matches!(self, Panes::Real(_))
    }

    /// The socket `fleetd`'s `[herdr] socket` names.
    pub fn path(&self) -> PathBuf {
        match self {
            Panes::Double(d) => d.path.clone(),
            Panes::Real(r) => r.path.clone(),
        }
    }

    fn api(&self) -> Api {
        Api::new(Socket::new(self.path(), Duration::from_secs(5)))
    }

    /// A lead's own pane (nudges and lead-to-lead notes are typed there), idle.
    pub async fn add_lead_pane(&self, label: &str) -> String {
        match self {
            Panes::Double(d) => d.add_pane(Some(label), "idle"),
            Panes::Real(_) => {
                let api = self.api();
                let new = NewPane {
                    label: label.into(),
                    command: ECHO.iter().map(|s| s.to_string()).collect(),
                    tab_label: Some("leads".into()),
                    ..NewPane::default()
                };
                let pane = api
                    .layout_apply(&new)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                self.set_status(&pane, "idle").await;
                pane
            }
        }
    }

    /// What was typed into pane `pane`, line by line.
    pub async fn typed_into(&self, pane: &str) -> Vec<String> {
        match self {
            Panes::Double(d) => d
                .state()
                .panes
                .get(pane)
                .map(|p| p.typed.clone())
                .unwrap_or_default(),
            Panes::Real(_) => {
                let screen = self.api().pane_read(pane, 400).await.unwrap_or_default();
                screen
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_string)
                    .collect()
            }
        }
    }

    /// How many typed lines of pane `pane` contain `needle`.
    pub async fn typed(&self, pane: &str, needle: &str) -> usize {
        let lines = self.typed_into(pane).await;
        lines.iter().filter(|t| t.contains(needle)).count()
    }

    /// The pane labelled `fleet:<gid>`, if herdr has one.
    pub async fn member_pane(&self, gid: &str) -> Option<String> {
        let label = format!("fleet:{gid}");
        self.listed()
            .await
            .into_iter()
            .find(|(_, l, _)| l.as_deref() == Some(label.as_str()))
            .map(|(pane, _, _)| pane)
    }

    /// How many typed lines of member `gid`'s pane contain `needle`.
    pub async fn member_typed(&self, gid: &str, needle: &str) -> usize {
        match self.member_pane(gid).await {
            Some(pane) => self.typed(&pane, needle).await,
            None => 0,
        }
    }

    /// Every pane's label (unlabelled panes left out).
    pub async fn labels(&self) -> Vec<String> {
        let listed = self.listed().await;
        listed
            .into_iter()
            .filter_map(|(_, label, _)| label)
            .collect()
    }

    /// Every pane herdr has: its id, label and status.
    async fn listed(&self) -> Vec<(String, Option<String>, String)> {
        match self {
            Panes::Double(d) => d
                .state()
                .panes
                .iter()
                .map(|(id, p)| (id.clone(), p.label.clone(), p.status.clone()))
                .collect(),
            Panes::Real(_) => self
                .api()
                .pane_list()
                .await
                .unwrap_or_default()
                .into_iter()
                .map(|p| (p.pane_id, p.label, p.agent_status))
                .collect(),
        }
    }

    /// Every `fleet:<gid>` pane with its status and what was typed into it.
    pub async fn members(&self) -> Vec<MemberPane> {
        let mut out = Vec::new();
        for (pane, label, status) in self.listed().await {
            let Some(gid) = label.as_deref().and_then(|l| l.strip_prefix("fleet:")) else {
                continue;
            };
            let typed = self.typed_into(&pane).await;
            out.push(MemberPane {
                gid: gid.to_string(),
                pane,
                status,
                typed,
            });
        }
        out
    }

    /// The agent in `pane` reports `status` (`idle`, `working`), as `pane.report_agent` lets a
    /// custom agent do.
    pub async fn set_status(&self, pane: &str, status: &str) {
        match self {
            Panes::Double(d) => d.set_status(pane, status),
            Panes::Real(_) => {
                let state = match status {
                    "working" => ReportedState::Working,
                    "blocked" => ReportedState::Blocked,
                    "idle" => ReportedState::Idle,
                    _ => ReportedState::Unknown,
                };
                if let Err(e) = self.api().report_agent(pane, "fleet-test", state).await {
                    eprintln!("report_agent {pane} {status}: {e}");
                }
            }
        }
    }

    /// The double's protocol record (no violations), or the real server stopped.
    pub async fn finish(self) {
        match self {
            Panes::Double(d) => {
                let v = d.state().violations.clone();
                assert!(v.is_empty(), "herdr protocol violations: {v:?}");
            }
            Panes::Real(r) => match Arc::try_unwrap(r) {
                Ok(r) => {
                    if let Err(e) = r.stop().await {
                        eprintln!("{e}");
                    }
                }
                Err(_) => eprintln!("herdr still shared at the end; dropped with its last user"),
            },
        }
    }
}
