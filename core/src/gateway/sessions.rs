//! The gateway's side of member sessions (`crate::session`): transitions as events, and the
//! idle reaper's rounds.

use super::Gateway;
use crate::ids::SessionId;
use crate::io::Event;
use crate::session::SessionState;
use crate::time::{Duration, Instant};

/// The states a new turn may start from.
pub(super) const IDLE: &[SessionState] = &[
    SessionState::Ready,
    SessionState::Done,
    SessionState::Failed,
];

impl Gateway {
    /// Enters `gid`'s session into `to` (creating it), and arms the reaper.
    pub(super) fn session_set(&mut self, gid: &SessionId, to: SessionState) {
        let now = self.now;
        if let Some((from, to)) = self.sessions.set(now, gid, to) {
            self.session_event(gid, from, to);
        }
        self.arm_reaper(now);
    }

    /// Moves `gid`'s session to `to` if it is in one of `from` (members only: leads have none).
    pub(super) fn session_to(&mut self, gid: &SessionId, from: &[SessionState], to: SessionState) {
        let now = self.now;
        if let Some((from, to)) = self.sessions.advance(now, gid, from, to) {
            self.session_event(gid, from, to);
        }
    }

    /// A member passed its gate: a new or spawning session is READY; one already working
    /// (a member that reconnected) keeps its state.
    pub(super) fn session_ready(&mut self, gid: &SessionId) {
        match self.sessions.state(gid) {
            None | Some(SessionState::Spawning) => self.session_set(gid, SessionState::Ready),
            Some(_) => {}
        }
    }

    /// A spawn that never got ready: its session ends with it.
    pub(super) fn session_abandoned(&mut self, gid: &SessionId) {
        if self.sessions.state(gid) == Some(SessionState::Spawning) {
            self.sessions.remove(gid);
        }
    }

    fn session_event(&mut self, gid: &SessionId, from: Option<SessionState>, to: SessionState) {
        let busy = |s: Option<SessionState>| s == Some(SessionState::Busy);
        if busy(from) != busy(Some(to)) {
            self.busy_changed(gid);
        }
        self.event(Event::Session {
            gid: gid.clone(),
            from,
            to,
        });
    }

    pub(super) fn idle_ttl(&self) -> Option<Duration> {
        (self.cfg.member_idle_ttl_ms > 0)
            .then(|| Duration::from_millis(self.cfg.member_idle_ttl_ms))
    }

    /// Closes every member idle past its TTL with nothing queued for it. Its session ends
    /// here; the pane's going (`PaneGone`) takes its inbox with it.
    pub(super) fn on_reap(&mut self, now: Instant) {
        let Some(ttl) = self.idle_ttl() else { return };
        for (gid, idle) in self.sessions.idle_past(now, ttl) {
            let view = self.injector.view(&gid);
            if view.queued > 0 || view.in_turn {
                continue;
            }
            self.sessions.remove(&gid);
            self.event(Event::Reaped {
                gid: gid.clone(),
                idle_ms: u64::try_from(idle.as_millis()).unwrap_or(u64::MAX),
            });
            self.close_pane(gid);
        }
        self.arm_reaper(now);
    }
}
