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
//! `starting`) is adopted only by its own connection: herdr calls an agent idle once its TUI is
//! drawn, seconds before it takes input (Claude Code 2.1 drops what is typed then), so a live
//! status proves nothing about it. One that never connects within the bound is half-built and
//! closed.

use crate::ids::SessionId;
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

#[derive(Clone, Copy, Debug)]
struct Pending {
    deadline: Instant,
    /// herdr answered about it at least once (with `unknown`, or with anything for a
    /// member still starting).
    answered: bool,
    /// Listed as still starting: only its connection adopts it.
    starting: bool,
}

#[derive(Debug, Default)]
pub struct Adoption {
    pending: BTreeMap<SessionId, Pending>,
}

impl Adoption {
    /// `gid` was listed at start (`starting`: its launch had not seen it ready): it is decided
    /// by `deadline`.
    pub fn begin(&mut self, gid: &SessionId, starting: bool, deadline: Instant) {
        self.pending.entry(gid.clone()).or_insert(Pending {
            deadline,
            answered: false,
            starting,
        });
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
        if status == AgentStatus::Unknown || p.starting {
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
        let p = *self.pending.get(gid)?;
        if p.deadline > now {
            return None;
        }
        self.pending.remove(gid);
        Some(if p.answered {
            AdoptVerdict::Reaped
        } else {
            AdoptVerdict::Undecided
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    /// Any status but unknown adopts — working included: a busy member is never killed.
    #[test]
    fn a_live_agent_is_adopted_whatever_it_is_doing() {
        let mut a = Adoption::default();
        let g = SessionId::new("m");
        a.begin(&g, false, at(1_000));
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
        a.begin(&g, false, at(1_000));
        a.sampled(&g, AgentStatus::Unknown);
        assert_eq!(a.due(&g, at(999)), None);
        assert_eq!(a.due(&g, at(1_000)), Some(AdoptVerdict::Reaped));
    }

    /// Without a single answer from herdr nothing is closed: undecided.
    #[test]
    fn silence_from_herdr_leaves_it_undecided() {
        let mut a = Adoption::default();
        let g = SessionId::new("m");
        a.begin(&g, false, at(1_000));
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
        a.begin(&g, true, at(1_000));
        a.begin(&h, true, at(1_000));
        assert_eq!(a.sampled(&g, AgentStatus::Idle), None);
        assert_eq!(a.sampled(&g, AgentStatus::Working), None);
        assert!(a.settled(&g));
        assert_eq!(a.sampled(&h, AgentStatus::Idle), None);
        assert_eq!(a.due(&h, at(1_000)), Some(AdoptVerdict::Reaped));
    }

    /// A member that connects (or whose pane goes) is settled and never decided again.
    #[test]
    fn a_connect_settles_it() {
        let mut a = Adoption::default();
        let g = SessionId::new("m");
        a.begin(&g, false, at(1_000));
        assert!(a.settled(&g));
        assert!(!a.settled(&g));
        assert_eq!(a.due(&g, at(5_000)), None);
    }
}
