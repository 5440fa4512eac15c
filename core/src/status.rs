//! `AgentStatus`: a member's herdr-reported lifecycle state (ch. 9, Figure 5).

use serde::{Deserialize, Serialize};
use std::fmt;

/// What herdr says an agent in a pane is doing.
///
/// Only IDLE, BLOCKED and DONE are injectable: typing into a WORKING agent would land mid-turn,
/// and UNKNOWN means nobody can tell, so it wedges delivery until refined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AgentStatus {
    Idle,
    Working,
    Blocked,
    Done,
    Unknown,
}

impl AgentStatus {
    pub const ALL: [AgentStatus; 5] = [
        AgentStatus::Idle,
        AgentStatus::Working,
        AgentStatus::Blocked,
        AgentStatus::Done,
        AgentStatus::Unknown,
    ];

    /// Maps herdr's wire value (`idle|working|blocked|done|unknown`); anything else folds to
    /// UNKNOWN so a newer herdr can never make us inject on a state we do not understand.
    pub fn from_wire(s: &str) -> AgentStatus {
        match s {
            "idle" => AgentStatus::Idle,
            "working" => AgentStatus::Working,
            "blocked" => AgentStatus::Blocked,
            "done" => AgentStatus::Done,
            _ => AgentStatus::Unknown,
        }
    }

    pub fn as_wire(self) -> &'static str {
        match self {
            AgentStatus::Idle => "idle",
            AgentStatus::Working => "working",
            AgentStatus::Blocked => "blocked",
            AgentStatus::Done => "done",
            AgentStatus::Unknown => "unknown",
        }
    }

    /// IDLE, BLOCKED or DONE — never WORKING, never UNKNOWN.
    pub fn injectable(self) -> bool {
        matches!(
            self,
            AgentStatus::Idle | AgentStatus::Blocked | AgentStatus::Done
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AgentStatus::Idle => "IDLE",
            AgentStatus::Working => "WORKING",
            AgentStatus::Blocked => "BLOCKED",
            AgentStatus::Done => "DONE",
            AgentStatus::Unknown => "UNKNOWN",
        }
    }
}

impl fmt::Display for AgentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_values_round_trip_and_strangers_fold_to_unknown() {
        for s in AgentStatus::ALL {
            assert_eq!(AgentStatus::from_wire(s.as_wire()), s);
        }
        assert_eq!(AgentStatus::from_wire("thinking"), AgentStatus::Unknown);
        assert_eq!(AgentStatus::from_wire("IDLE"), AgentStatus::Unknown);
        assert_eq!(AgentStatus::from_wire(""), AgentStatus::Unknown);
    }

    #[test]
    fn only_idle_blocked_and_done_are_injectable() {
        let injectable: Vec<_> = AgentStatus::ALL
            .into_iter()
            .filter(|s| s.injectable())
            .collect();
        assert_eq!(
            injectable,
            [AgentStatus::Idle, AgentStatus::Blocked, AgentStatus::Done]
        );
    }
}
