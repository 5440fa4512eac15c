//! `Adoption`: a starting gateway's members, rebuilt from herdr alone (CB-308 §7.8). Every pane
//! herdr lists with a `fleet:<gid>` label is a member of this gateway and is gated at once
//! (nothing is typed into it). One whose agent shows alive within the readiness bound — any
//! status but `unknown`, working included, or its MCP connecting — is adopted as it is; one
//! herdr kept answering `unknown` about through the bound is half-built (its spawn never got
//! ready) or dead (herdr restarted and its process is gone) and is closed; one herdr never
//! answered about stays gated and undecided, since a member is only closed on herdr's word. A
//! busy member is never killed by a restart.
//!
//! A member whose launch was still waiting for it when the last process stopped (listed
//! `starting`, with the gate its launch recorded) is adopted only through that gate — its
//! connection, its prompt on screen, its status — as at launch: herdr calls an agent idle once
//! its TUI is drawn, seconds before it takes input (Claude Code 2.1 drops what is typed then),
//! so a live status proves nothing about it. One that never passes within the bound is
//! half-built and closed.

use crate::ids::SessionId;
use crate::io::{PaneError, Sampled};
use crate::start_gate::{Look, StartGate};
use crate::status::AgentStatus;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// How a listed member's adoption ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdoptVerdict {
    /// Alive: kept as it is, its gate open.
    Adopted,
    /// herdr said `unknown` through the whole bound: its pane is closed.
    Reaped,
    /// herdr never answered within the bound: left gated, neither adopted nor closed.
    Undecided,
}

impl fmt::Display for AdoptVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AdoptVerdict::Adopted => "adopted",
            AdoptVerdict::Reaped => "reaped",
            AdoptVerdict::Undecided => "undecided",
        })
    }
}

#[derive(Clone, Debug)]
struct Pending {
    deadline: Instant,
    /// herdr answered about it at least once (with `unknown`, or with anything for a
    /// member still starting).
    answered: bool,
    /// Listed as still starting: only its own gate adopts it.
    starting: Option<Starting>,
}

/// A member listed as still starting: its gate, and whether it connected while the gate
/// still looked at its pane.
#[derive(Clone, Debug)]
struct Starting {
    gate: StartGate,
    connected: bool,
}

#[derive(Debug, Default)]
pub struct Adoption {
    pending: BTreeMap<SessionId, Pending>,
}

impl Adoption {
    /// `gid` was listed at start (`starting`: its launch had not seen it ready): it is decided
    /// by `deadline`.
    pub(crate) fn begin(
        &mut self,
        gid: &SessionId,
        starting: Option<StartGate>,
        deadline: Instant,
    ) {
        self.pending.entry(gid.clone()).or_insert(Pending {
            deadline,
            answered: false,
            starting: starting.map(|gate| Starting {
                gate,
                connected: false,
            }),
        });
    }

    /// Whether `gid` is still starting and its gate looks at its pane.
    pub(crate) fn is_looking(&self, gid: &SessionId) -> bool {
        self.pending
            .get(gid)
            .and_then(|p| p.starting.as_ref())
            .is_some_and(|s| s.gate.is_looking())
    }

    /// `gid` connected: true (and remembered) while its gate still looks at its pane.
    pub(crate) fn holds_connection(&mut self, gid: &SessionId) -> bool {
        match self.pending.get_mut(gid).and_then(|p| p.starting.as_mut()) {
            Some(s) if s.gate.is_looking() => {
                s.connected = true;
                true
            }
            _ => false,
        }
    }

    /// A look at starting `gid`'s pane, judged by its gate: `Open` when it may be adopted
    /// (an injectable status, or its prompt once it connected). `None`: not looking.
    pub(crate) fn looked(
        &mut self,
        gid: &SessionId,
        now: Instant,
        look: Result<Sampled, PaneError>,
    ) -> Option<Look> {
        let p = self.pending.get_mut(gid)?;
        let s = p.starting.as_mut().filter(|s| s.gate.is_looking())?;
        p.answered = true;
        Some(match s.gate.look(now, look) {
            Look::Prompted if s.connected => Look::Open,
            verdict => verdict,
        })
    }

    pub fn is_pending(&self, gid: &SessionId) -> bool {
        self.pending.contains_key(gid)
    }

    pub fn any(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The members still undecided, to be sampled.
    pub fn pending(&self) -> impl Iterator<Item = &SessionId> {
        self.pending.keys()
    }

    /// Each undecided member with the bound it is decided by.
    pub fn deadlines(&self) -> impl Iterator<Item = (&SessionId, Instant)> {
        self.pending.iter().map(|(g, p)| (g, p.deadline))
    }

    /// herdr's raw status for `gid`: `Adopted` once it shows a live agent (never for one still
    /// starting, whose connection decides).
    pub fn sampled(&mut self, gid: &SessionId, status: AgentStatus) -> Option<AdoptVerdict> {
        let p = self.pending.get_mut(gid)?;
        if status == AgentStatus::Unknown || p.starting.is_some() {
            p.answered = true;
            return None;
        }
        self.pending.remove(gid);
        Some(AdoptVerdict::Adopted)
    }

    /// `gid` connected, or its pane is gone: nothing is left to decide.
    pub fn settled(&mut self, gid: &SessionId) -> bool {
        self.pending.remove(gid).is_some()
    }

    /// `gid`'s bound passed at `now`: reaped on herdr's word, or undecided without it.
    pub fn due(&mut self, gid: &SessionId, now: Instant) -> Option<AdoptVerdict> {
        let p = self.pending.get(gid)?;
        if p.deadline > now {
            return None;
        }
        let answered = p.answered;
        self.pending.remove(gid);
        Some(if answered {
            AdoptVerdict::Reaped
        } else {
            AdoptVerdict::Undecided
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::start_gate::Bounds;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    const BOUNDS: Bounds = Bounds {
        timeout: crate::time::Duration::from_millis(1_000),
        poll: crate::time::Duration::from_millis(250),
    };

    /// The gate of an agent that is ready when it connects.
    fn connects() -> StartGate {
        StartGate::launched(at(0), crate::io::Readiness::OnConnect, BOUNDS)
    }

    /// Any status but unknown adopts — working included: a busy member is never killed.
    #[test]
    fn a_live_agent_is_adopted_whatever_it_is_doing() {
        let mut a = Adoption::default();
        let g = SessionId::new("m");
        a.begin(&g, None, at(1_000));
        assert_eq!(a.sampled(&g, AgentStatus::Unknown), None);
        assert_eq!(
            a.sampled(&g, AgentStatus::Working),
            Some(AdoptVerdict::Adopted)
        );
        assert!(!a.is_pending(&g));
        assert_eq!(a.due(&g, at(2_000)), None);
    }

    /// Unknown through the bound is herdr's word that nothing lives there: reaped.
    #[test]
    fn unknown_through_the_bound_is_reaped() {
        let mut a = Adoption::default();
        let g = SessionId::new("m");
        a.begin(&g, None, at(1_000));
        a.sampled(&g, AgentStatus::Unknown);
        assert_eq!(a.due(&g, at(999)), None);
        assert_eq!(a.due(&g, at(1_000)), Some(AdoptVerdict::Reaped));
    }

    /// Without a single answer from herdr nothing is closed: undecided.
    #[test]
    fn silence_from_herdr_leaves_it_undecided() {
        let mut a = Adoption::default();
        let g = SessionId::new("m");
        a.begin(&g, None, at(1_000));
        assert_eq!(a.due(&g, at(1_000)), Some(AdoptVerdict::Undecided));
        assert!(!a.any());
    }

    /// A member listed as still starting is not adopted by a live status — herdr calls its
    /// agent idle before it takes input — only by its connection; never connecting within the
    /// bound, it is half-built and reaped.
    #[test]
    fn a_member_still_starting_is_adopted_only_by_its_connection() {
        let mut a = Adoption::default();
        let (g, h) = (SessionId::new("m"), SessionId::new("n"));
        a.begin(&g, Some(connects()), at(1_000));
        a.begin(&h, Some(connects()), at(1_000));
        assert_eq!(a.sampled(&g, AgentStatus::Idle), None);
        assert_eq!(a.sampled(&g, AgentStatus::Working), None);
        assert!(a.settled(&g));
        assert_eq!(a.sampled(&h, AgentStatus::Idle), None);
        assert_eq!(a.due(&h, at(1_000)), Some(AdoptVerdict::Reaped));
    }

    /// A starting agent gated on its prompt that connects first is held until a look sees its
    /// prompt; one that never draws it fails its gate at the gate's bound.
    #[test]
    fn a_starting_agent_is_adopted_at_its_prompt_not_at_its_connection() {
        use crate::agent_screen::StartRules;
        use crate::io::Readiness;
        let mut a = Adoption::default();
        let g = SessionId::new("m");
        let gate = StartGate::launched(at(0), Readiness::OnPrompt(StartRules::ClaudeCode), BOUNDS);
        a.begin(&g, Some(gate), at(10_000));
        assert!(a.is_looking(&g));
        assert!(a.holds_connection(&g), "connected before its prompt");
        let screen = |s: &str| {
            Ok(Sampled::Status {
                status: AgentStatus::Idle,
                screen: Some(s.into()),
            })
        };
        assert_eq!(
            a.looked(&g, at(0), screen("Claude Code v2.1.328")),
            Some(Look::Again(at(250)))
        );
        let rule = "─".repeat(20);
        let prompt = format!("{rule}\n❯ \n{rule}");
        assert_eq!(a.looked(&g, at(250), screen(&prompt)), Some(Look::Open));
        assert!(!a.is_looking(&g));
        assert!(!a.holds_connection(&g));
        assert!(a.settled(&g));
        let h = SessionId::new("n");
        let gate = StartGate::launched(at(0), Readiness::OnPrompt(StartRules::ClaudeCode), BOUNDS);
        a.begin(&h, Some(gate), at(10_000));
        assert!(matches!(
            a.looked(&h, at(1_000), screen("Claude Code v2.1.328")),
            Some(Look::Failed(_))
        ));
        assert_eq!(a.looked(&SessionId::new("x"), at(0), screen("")), None);
    }

    /// A member that connects (or whose pane goes) is settled and never decided again.
    #[test]
    fn a_connect_settles_it() {
        let mut a = Adoption::default();
        let g = SessionId::new("m");
        a.begin(&g, None, at(1_000));
        assert!(a.settled(&g));
        assert!(!a.settled(&g));
        assert_eq!(a.due(&g, at(5_000)), None);
    }
}
