//! Member sessions (ch. 9's `SessionManager`): the lifecycle of every member this gateway runs,
//! driven by the spawn gate and the injector's turn boundaries, and the idle reaper.
//!
//! SPAWNING → READY → BUSY → DONE, or FAILED when a turn fails. Unlike the Java daemon's
//! one-shot members, a DONE or FAILED member takes its next brief (→ BUSY): the fleet addresses
//! members by gid across hosts and leads send follow-ups, so a member ends by the reaper (idle
//! past its TTL), `fleet_stop`, or its pane going — never by finishing one turn.

use crate::ids::SessionId;
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SessionState {
    /// Launched, its readiness gate not yet passed.
    Spawning,
    /// Ready and has not worked yet.
    Ready,
    /// A turn is running.
    Busy,
    /// Its last turn completed.
    Done,
    /// Its last turn failed (usage limit, wedged, …).
    Failed,
}

impl SessionState {
    /// Idle, so the reaper may end it once its TTL has passed.
    pub fn reapable(self) -> bool {
        matches!(
            self,
            SessionState::Ready | SessionState::Done | SessionState::Failed
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Spawning => "SPAWNING",
            SessionState::Ready => "READY",
            SessionState::Busy => "BUSY",
            SessionState::Done => "DONE",
            SessionState::Failed => "FAILED",
        }
    }
}

impl fmt::Display for SessionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Session {
    state: SessionState,
    /// When it entered `state`: an idle session's idle time counts from here.
    since: Instant,
}

/// Every local member's session, by gid.
#[derive(Debug, Default)]
pub struct Sessions {
    map: BTreeMap<SessionId, Session>,
}

impl Sessions {
    pub fn state(&self, gid: &SessionId) -> Option<SessionState> {
        self.map.get(gid).map(|s| s.state)
    }

    /// Moves `gid` to `to` (creating it). Returns the state change, if it was one.
    pub fn set(
        &mut self,
        now: Instant,
        gid: &SessionId,
        to: SessionState,
    ) -> Option<(Option<SessionState>, SessionState)> {
        let from = self.state(gid);
        if from == Some(to) {
            return None;
        }
        self.map.insert(
            gid.clone(),
            Session {
                state: to,
                since: now,
            },
        );
        Some((from, to))
    }

    /// Moves `gid` to `to` only if it has a session in one of `from`.
    pub fn advance(
        &mut self,
        now: Instant,
        gid: &SessionId,
        from: &[SessionState],
        to: SessionState,
    ) -> Option<(Option<SessionState>, SessionState)> {
        let s = self.state(gid)?;
        if !from.contains(&s) {
            return None;
        }
        self.set(now, gid, to)
    }

    pub fn remove(&mut self, gid: &SessionId) -> Option<SessionState> {
        self.map.remove(gid).map(|s| s.state)
    }

    /// Idle sessions whose TTL has passed at `now`, with how long each has been idle.
    pub fn idle_past(&self, now: Instant, ttl: Duration) -> Vec<(SessionId, Duration)> {
        self.map
            .iter()
            .filter(|(_, s)| s.state.reapable() && s.since + ttl <= now)
            .map(|(g, s)| (g.clone(), now.saturating_since(s.since)))
            .collect()
    }

    /// How many sessions are in each state (`fleet_sessions{state}`).
    pub fn counts(&self) -> BTreeMap<SessionState, usize> {
        let mut c = BTreeMap::new();
        for s in self.map.values() {
            *c.entry(s.state).or_default() += 1;
        }
        c
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SessionState::*;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn a_member_goes_spawning_ready_busy_done_and_takes_its_next_brief() {
        let mut s = Sessions::default();
        let g = SessionId::new("g");
        assert_eq!(s.set(at(0), &g, Spawning), Some((None, Spawning)));
        assert_eq!(
            s.advance(at(1), &g, &[Spawning], Ready),
            Some((Some(Spawning), Ready))
        );
        assert_eq!(
            s.advance(at(2), &g, &[Ready, Done, Failed], Busy),
            Some((Some(Ready), Busy))
        );
        assert_eq!(
            s.advance(at(3), &g, &[Busy], Done),
            Some((Some(Busy), Done))
        );
        assert_eq!(
            s.advance(at(4), &g, &[Ready, Done, Failed], Busy),
            Some((Some(Done), Busy))
        );
        assert_eq!(s.set(at(5), &g, Busy), None, "no change, no event");
        assert_eq!(s.advance(at(6), &SessionId::new("x"), &[Busy], Done), None);
    }

    #[test]
    fn only_idle_sessions_past_their_ttl_are_reaped() {
        let mut s = Sessions::default();
        let ttl = Duration::from_millis(100);
        for (g, st) in [
            ("a", Ready),
            ("b", Busy),
            ("c", Done),
            ("d", Spawning),
            ("e", Failed),
        ] {
            s.set(at(0), &SessionId::new(g), st);
        }
        s.set(at(50), &SessionId::new("c"), Busy);
        s.set(at(60), &SessionId::new("c"), Done);
        let idle: Vec<_> = s
            .idle_past(at(100), ttl)
            .into_iter()
            .map(|(g, _)| g)
            .collect();
        assert_eq!(idle, vec![SessionId::new("a"), SessionId::new("e")]);
        assert_eq!(
            s.idle_past(at(160), ttl).len(),
            3,
            "c's idle time counts from DONE"
        );
        assert_eq!(s.counts()[&Busy], 1);
    }
}
