//! The single-host world's record of a call in flight: what it was for, so the world can act
//! on its response and the oracle can judge it.

use fleet_core::{Instant, SessionId};

/// What a call was for, so its response can be acted on.
#[derive(Clone, Debug)]
pub enum Pending {
    Send {
        lead: usize,
        task: String,
        wait: bool,
        deadline: Instant,
    },
    Answer {
        lead: usize,
        task: String,
        wait: bool,
        deadline: Instant,
    },
    Poll {
        lead: usize,
    },
    Drain,
    Reply {
        pane: SessionId,
    },
    Ask {
        pane: SessionId,
    },
}
