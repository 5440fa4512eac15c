//! The message-service vocabulary: how a delegation, a ticket and an ask end.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How a `fleet_send` ended (Java `MessageService.Outcome`, all nine values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Outcome {
    /// The member called `fleet_reply` during the turn the send was delivered into.
    Replied,
    /// The turn ended without a reply; the body is what the turn left on screen.
    CompletedUnreplied,
    /// The turn wedged, the pane died, or the message could not be typed.
    WorkerFailed,
    /// A healthy pane whose backend refused on a usage limit (CB-578).
    BackendExhausted,
    /// The member asked a question mid-turn; answer it by sending with its `turnId`.
    Question,
    /// Delivered, but no end of turn within the timeout.
    TimedOutWorking,
    /// Never delivered within the timeout; the message was withdrawn from the queue.
    TimedOutQueued,
    /// Another delegation to this session is still open.
    Busy,
    /// An answer named a turn that is no longer asking.
    StaleTurn,
}

impl Outcome {
    pub const ALL: [Outcome; 9] = [
        Outcome::Replied,
        Outcome::CompletedUnreplied,
        Outcome::WorkerFailed,
        Outcome::BackendExhausted,
        Outcome::Question,
        Outcome::TimedOutWorking,
        Outcome::TimedOutQueued,
        Outcome::Busy,
        Outcome::StaleTurn,
    ];

    /// The outcome a wire name stands for (`REPLIED`, …); `None` for anything else.
    pub fn from_wire(s: &str) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|o| o.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Replied => "REPLIED",
            Outcome::CompletedUnreplied => "COMPLETED_UNREPLIED",
            Outcome::WorkerFailed => "WORKER_FAILED",
            Outcome::BackendExhausted => "BACKEND_EXHAUSTED",
            Outcome::Question => "QUESTION",
            Outcome::TimedOutWorking => "TIMED_OUT_WORKING",
            Outcome::TimedOutQueued => "TIMED_OUT_QUEUED",
            Outcome::Busy => "BUSY",
            Outcome::StaleTurn => "STALE_TURN",
        }
    }

    /// The async-ticket phase an outcome puts a ticket in.
    pub fn phase(self) -> Phase {
        match self {
            Outcome::Replied | Outcome::CompletedUnreplied => Phase::Done,
            Outcome::Question => Phase::Asking,
            _ => Phase::Failed,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An async (`wait:false`) ticket's lifecycle (Java `MessageService.Phase`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Phase {
    Pending,
    /// The member paused mid-turn in `fleet_ask`; the poll shows the open question.
    Asking,
    Done,
    Failed,
}

impl Phase {
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Done | Phase::Failed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "PENDING",
            Phase::Asking => "ASKING",
            Phase::Done => "DONE",
            Phase::Failed => "FAILED",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a member's `fleet_ask` ended (Java `MessageService.AskOutcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AskOutcome {
    Answered,
    /// No delegation was waiting on this member's turn, so nobody could answer.
    NoWaiter,
    TimedOut,
}

impl AskOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AskOutcome::Answered => "ANSWERED",
            AskOutcome::NoWaiter => "NO_WAITER",
            AskOutcome::TimedOut => "TIMED_OUT",
        }
    }
}

impl fmt::Display for AskOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_use_the_spec_names_on_the_wire() {
        assert_eq!(Outcome::CompletedUnreplied.as_str(), "COMPLETED_UNREPLIED");
        assert_eq!(Outcome::TimedOutQueued.to_string(), "TIMED_OUT_QUEUED");
        for o in Outcome::ALL {
            assert_eq!(Outcome::from_wire(o.as_str()), Some(o));
        }
        assert_eq!(Outcome::from_wire("replied"), None);
    }

    #[test]
    fn a_question_leaves_a_ticket_asking_and_failures_fail_it() {
        assert_eq!(Outcome::Question.phase(), Phase::Asking);
        assert_eq!(Outcome::Replied.phase(), Phase::Done);
        assert_eq!(Outcome::BackendExhausted.phase(), Phase::Failed);
        assert!(!Phase::Asking.is_terminal());
    }
}
