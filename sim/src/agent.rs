//! Simulated agents: what a member in a herdr pane does with a turn.

use fleet_core::AgentStatus;
use std::fmt;

/// How an agent handles the turns typed into its pane. Chosen per pane by the seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Behaviour {
    /// Works, then calls `fleet_reply` with its result.
    Replies,
    /// Works, prints a result, never calls `fleet_reply`.
    CompletesSilently,
    /// Asks the lead mid-turn, waits for the answer, then replies.
    Asks,
    /// Finishes faster than a status poll: the injector must infer the turn.
    Fast,
    /// Goes UNKNOWN and stays there (CB-109).
    Wedges,
    /// Prints a usage-limit refusal and goes idle (CB-578).
    UsageLimit,
    /// The process exits mid-turn; the pane closes.
    Dies,
}

impl Behaviour {
    pub const ALL: [Behaviour; 7] = [
        Behaviour::Replies,
        Behaviour::CompletesSilently,
        Behaviour::Asks,
        Behaviour::Fast,
        Behaviour::Wedges,
        Behaviour::UsageLimit,
        Behaviour::Dies,
    ];
}

impl fmt::Display for Behaviour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Behaviour::Replies => "replies",
            Behaviour::CompletesSilently => "completes-silently",
            Behaviour::Asks => "asks",
            Behaviour::Fast => "fast",
            Behaviour::Wedges => "wedges",
            Behaviour::UsageLimit => "usage-limit",
            Behaviour::Dies => "dies",
        };
        f.write_str(s)
    }
}

/// The task an agent is working on: the text typed into its pane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    pub text: String,
}

/// One simulated herdr pane and the agent in it.
#[derive(Clone, Debug)]
pub struct Pane {
    pub behaviour: Behaviour,
    pub status: AgentStatus,
    pub screen: Vec<String>,
    pub task: Option<Task>,
    pub alive: bool,
    /// A lead's own pane: nudges land here and make the lead collect.
    pub is_lead: bool,
    /// A TUI that draws notices around a turn (as Claude Code does): a line that is not the
    /// turn's answer lands on screen after the baseline, above the echoed brief.
    pub chrome: bool,
    /// How it reports its own turns, if it does (`reporter`).
    pub reporter: Option<Reporter>,
}

/// How a simulated agent reports its own turns, as Claude Code's hooks or Codex's notify
/// program do for a real member (`fleetd member-report`). It lives in the pane (the agent's
/// config dir): a gateway restart keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reporter {
    /// Its turn-end reports name their prompt (Codex's notify); without, the gateway relies on
    /// its reported start (Claude Code's `Stop` hook).
    pub names_prompt: bool,
    /// It draws its answer on screen seconds after it goes idle (Codex on a loaded host).
    pub draws_late: bool,
    /// Its reports so far (the reporter's numbering file).
    pub seq: u64,
    /// Its previous turn's end report (prompt, text): what a stale re-send repeats.
    pub last_end: Option<(String, String)>,
}

impl Pane {
    pub fn new(behaviour: Behaviour, is_lead: bool) -> Self {
        Pane {
            behaviour,
            status: AgentStatus::Idle,
            screen: vec!["❯ ".to_string()],
            task: None,
            alive: true,
            is_lead,
            chrome: false,
            reporter: None,
        }
    }

    /// The last lines of the screen, as `pane.read source=recent` would return them.
    pub fn read(&self) -> String {
        let start = self.screen.len().saturating_sub(40);
        self.screen[start..].join("\n")
    }

    pub fn print(&mut self, line: impl Into<String>) {
        self.screen.push(line.into());
    }
}
