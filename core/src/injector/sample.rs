//! One status sample's transition of a target's track: at rest, typed and awaiting pickup,
//! or seen working and awaiting completion. The hottest path of the core.

use super::{Bounds, Cause, Injector, InjectorEvent, Track, Turn, TurnEnd};
use crate::ids::{MsgId, SessionId};
use crate::status::AgentStatus;
use crate::time::Instant;
use std::collections::{BTreeSet, VecDeque};

/// What a turn was waiting for pickup with (`Turn::AwaitingPickup`'s fields).
#[derive(Clone, Copy)]
pub(super) struct Pickup {
    pub(super) msg: MsgId,
    pub(super) injectable_polls: u32,
    pub(super) unknown_polls: u32,
    pub(super) injectable_since: Option<Instant>,
}

/// One sample's context: the parts of the injector a track's transition writes to.
pub(super) struct Step<'a> {
    pub(super) now: Instant,
    pub(super) b: Bounds,
    pub(super) target: &'a SessionId,
    pub(super) events: &'a mut VecDeque<InjectorEvent>,
    pub(super) deadlines: &'a mut BTreeSet<(Instant, SessionId)>,
}

impl Step<'_> {
    /// At rest: type the next message if the pane takes input and the gate is open; drop the
    /// queue if the gate stays shut past its bound.
    pub(super) fn quiescent(&mut self, t: &mut Track, gate_open: bool, status: AgentStatus) {
        if t.queue.is_empty() || t.asking {
            // nothing to deliver, or the pane is mid-ask for another turn
        } else if !gate_open {
            t.not_ready_polls += 1;
            if t.not_ready_polls >= self.b.readiness_grace_polls {
                t.not_ready_polls = 0;
                for q in t.queue.drain(..) {
                    self.events.push_back(InjectorEvent::Dropped {
                        target: self.target.clone(),
                        msg: q.msg,
                        cause: Cause::NeverReady,
                    });
                }
            }
        } else if status.injectable() {
            t.not_ready_polls = 0;
            if let Some(job) = t.queue.pop_front() {
                let deadline = self.now + self.b.io_timeout;
                self.deadlines.insert((deadline, self.target.clone()));
                self.events.push_back(InjectorEvent::Inject {
                    target: self.target.clone(),
                    msg: job.msg,
                    text: job.text.clone(),
                });
                t.turn = Turn::Injecting { job, deadline };
            }
        }
    }

    /// Typed, not yet seen working: WORKING picks it up; enough injectable samples spanning
    /// enough time mean a turn too fast to see (a missed fast turn); UNKNOWN too long stalls.
    pub(super) fn awaiting_pickup(&mut self, t: &mut Track, p: Pickup, status: AgentStatus) {
        let Pickup {
            msg,
            injectable_polls,
            unknown_polls,
            injectable_since,
        } = p;
        match status {
            AgentStatus::Working => {
                t.turn = Turn::AwaitingCompletion {
                    msg,
                    unknown_polls: 0,
                }
            }
            AgentStatus::Unknown if !t.asking => {
                // Deviation from Figure 6: a turn that goes UNKNOWN before pickup would
                // otherwise hold the queue forever, so the stall bound applies here too.
                let unknown_polls = unknown_polls + 1;
                if unknown_polls >= self.b.stall_grace_polls {
                    self.stalled(t, msg);
                } else {
                    t.turn = Turn::AwaitingPickup {
                        msg,
                        injectable_polls,
                        unknown_polls,
                        injectable_since,
                    };
                }
            }
            s if s.injectable() && !t.asking => {
                let injectable_polls = injectable_polls + 1;
                let since = injectable_since.unwrap_or(self.now);
                let long_enough = self.now.saturating_since(since) >= self.b.pickup_grace_span;
                if injectable_polls >= self.b.pickup_grace_polls && long_enough {
                    self.complete(t, msg, true);
                } else {
                    t.turn = Turn::AwaitingPickup {
                        msg,
                        injectable_polls,
                        unknown_polls: 0,
                        injectable_since: Some(since),
                    };
                }
            }
            _ => {}
        }
    }

    /// Seen working: the first injectable sample ends the turn; UNKNOWN too long stalls it.
    pub(super) fn awaiting_completion(
        &mut self,
        t: &mut Track,
        msg: MsgId,
        unknown_polls: u32,
        status: AgentStatus,
    ) {
        match status {
            AgentStatus::Working => {
                t.turn = Turn::AwaitingCompletion {
                    msg,
                    unknown_polls: 0,
                }
            }
            AgentStatus::Unknown if !t.asking => {
                let unknown_polls = unknown_polls + 1;
                if unknown_polls >= self.b.stall_grace_polls {
                    self.stalled(t, msg);
                } else {
                    t.turn = Turn::AwaitingCompletion { msg, unknown_polls };
                }
            }
            s if s.injectable() && !t.asking => self.complete(t, msg, false),
            _ => {}
        }
    }

    fn stalled(&mut self, t: &mut Track, msg: MsgId) {
        t.turn = Turn::Quiescent;
        self.events.push_back(InjectorEvent::TurnFailed {
            target: self.target.clone(),
            msg,
            cause: Cause::Stalled,
        });
    }

    fn complete(&mut self, t: &mut Track, msg: MsgId, missed_fast_turn: bool) {
        let end = TurnEnd {
            target: self.target,
            msg,
            missed_fast_turn,
        };
        Injector::complete(t, self.events, self.deadlines, self.now, self.b, end);
    }
}
