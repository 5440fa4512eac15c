//! Samples in, through the gateway's `SampleOrder`: every ask (the hub's `poll_status`) got
//! its place, and a sample asked before its target's last typing (or before a sample already
//! heard of it) says nothing.

use super::Gateway;
use crate::ids::SessionId;
use crate::io::{Asked, Round, Sampled};
use crate::time::Instant;

impl Gateway {
    /// The newest place handed out: for a harness that samples without being asked, a sample
    /// as fresh as any ask so far.
    pub fn newest_ask(&self) -> Asked {
        self.samples.newest()
    }

    pub(super) fn on_statuses(
        &mut self,
        now: Instant,
        round: Round,
        samples: Vec<(SessionId, Sampled)>,
        asked: Asked,
    ) {
        for (target, sampled) in samples {
            if !self.samples.fresh(&target, asked) {
                continue;
            }
            // Asked while it was idle; it has work now. An idle sample taken before its brief
            // was typed would read as the turn over already.
            if round == Round::Idle && self.injector.is_active(&target) {
                continue;
            }
            match sampled {
                Sampled::Status { status, screen } => {
                    self.on_sample(now, &target, status, screen.as_deref())
                }
                Sampled::Gone | Sampled::Ended { .. } => self.on_pane_gone(now, &target),
            }
        }
    }
}
