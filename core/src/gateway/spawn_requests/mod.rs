//! `SpawnRequests`: the requester's side of a spawn on another host, as a sub-machine that owns
//! its state and answers with what the hub must say.
//!
//! A SPAWN waits, by the gid it minted, for the new member's presence from the host it asked
//! (`seen` → `spawned`), a typed refusal (`failed`), its publish's confirm (`confirmed`:
//! unroutable is no such host, failed is the broker), the broker going down before the confirm
//! (`broker_down`), or its bound (`due`: the host never reported it ready).

use super::answer::Answer;
use super::{Effects, TimerKind};
use crate::broker::{PublishId, PublishResult};
use crate::control::{Refusal, RefusalCode};
use crate::ids::{CallId, HostId, MsgId, SessionId};
use crate::io::{CallError, Response};
use crate::time::Instant;
use std::collections::BTreeMap;

/// A spawn on its way: the call it answers, the host asked, and its bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Waiting {
    pub(super) call: CallId,
    pub(super) host: HostId,
    pub(super) deadline: Instant,
}

#[derive(Debug, Default)]
pub(super) struct SpawnRequests {
    /// Spawns awaiting the new member's presence, by gid.
    waiting: BTreeMap<SessionId, Waiting>,
    /// The SPAWN msgId of each waiting gid (a FAILED answers it).
    by_msg: BTreeMap<MsgId, SessionId>,
    /// SPAWN publishes awaiting their confirm.
    publishes: BTreeMap<PublishId, SessionId>,
}

impl SpawnRequests {
    /// SPAWN `msg` for `gid`, published as `publish`, waits as `w`, its bound armed at
    /// `w.deadline`.
    pub(super) fn wait(
        &mut self,
        fx: &mut Effects,
        gid: SessionId,
        msg: MsgId,
        publish: PublishId,
        w: Waiting,
    ) {
        fx.wake(w.deadline, TimerKind::Spawn(gid.clone()));
        self.by_msg.insert(msg, gid.clone());
        self.publishes.insert(publish, gid.clone());
        self.waiting.insert(gid, w);
    }

    /// `gid`'s presence from `host`: if a spawn asked `host` for it, it is `spawned`.
    pub(super) fn seen(&mut self, gid: &SessionId, host: &HostId) -> Option<Answer> {
        if self.waiting.get(gid).is_none_or(|w| &w.host != host) {
            return None;
        }
        let w = self.finish(gid)?;
        Some(Answer {
            call: w.call,
            response: Response::Spawned {
                gid: gid.clone(),
                host: host.clone(),
            },
        })
    }

    /// The host a spawn waiting on SPAWN `re` was sent to.
    pub(super) fn host_of(&self, re: MsgId) -> Option<HostId> {
        let gid = self.by_msg.get(&re)?;
        Some(self.waiting.get(gid)?.host.clone())
    }

    /// A FAILED answering SPAWN `re`, its body the target's refusal. `None` if `re` is not a
    /// SPAWN of ours; otherwise the answer it ends, if its spawn still waited.
    pub(super) fn failed(&mut self, re: MsgId, body: &[u8]) -> Option<Option<Answer>> {
        let gid = self.by_msg.remove(&re)?;
        let Some(w) = self.finish(&gid) else {
            return Some(None);
        };
        let refusal = Refusal::parse(body);
        let err = match refusal.code {
            RefusalCode::NotAllowed => CallError::NotAllowed {
                host: w.host,
                reason: refusal.reason,
            },
            RefusalCode::NotFound | RefusalCode::Invalid => CallError::SpawnFailed {
                reason: refusal.reason,
            },
            RefusalCode::InvalidArgument => CallError::InvalidArgument {
                reason: refusal.reason,
            },
        };
        Some(Some(Answer::error(w.call, err)))
    }

    /// The confirm of `publish`. `None` if it was not a SPAWN; otherwise the answer it ends,
    /// if any: routed, the spawn waits for the member's presence; unroutable, no gateway
    /// serves that host; failed, the spawn fails fast rather than waiting out its bound.
    pub(super) fn confirmed(
        &mut self,
        publish: PublishId,
        result: &PublishResult,
    ) -> Option<Option<Answer>> {
        let gid = self.publishes.remove(&publish)?;
        Some(match result {
            PublishResult::Routed => None,
            PublishResult::Failed(_) => self
                .finish(&gid)
                .map(|w| Answer::error(w.call, CallError::BrokerUnavailable)),
            PublishResult::Unroutable => self
                .finish(&gid)
                .map(|w| Answer::error(w.call, CallError::NoSuchHost { host: w.host })),
        })
    }

    /// The broker went down: SPAWNs awaiting their confirm fail fast.
    pub(super) fn broker_down(&mut self) -> Vec<Answer> {
        let gids: Vec<SessionId> = std::mem::take(&mut self.publishes).into_values().collect();
        gids.iter()
            .filter_map(|g| self.finish(g))
            .map(|w| Answer::error(w.call, CallError::BrokerUnavailable))
            .collect()
    }

    /// `gid`'s bound at `now`: the host never reported the member ready. Nothing before its
    /// deadline, or for a spawn already done.
    pub(super) fn due(&mut self, now: Instant, gid: &SessionId) -> Option<Answer> {
        if self.waiting.get(gid).is_none_or(|w| w.deadline > now) {
            return None;
        }
        let w = self.finish(gid)?;
        let reason = format!("host {} never reported the member ready", w.host);
        Some(Answer::error(w.call, CallError::SpawnFailed { reason }))
    }

    /// Its waiting entry and SPAWN msgId go (a publish awaiting its confirm stays, and its
    /// confirm then finds nothing to answer).
    fn finish(&mut self, gid: &SessionId) -> Option<Waiting> {
        let w = self.waiting.remove(gid)?;
        self.by_msg.retain(|_, g| g != gid);
        Some(w)
    }

    /// Each waiting spawn has its bound armed and its SPAWN msgId; each msgId names a waiting
    /// spawn.
    #[cfg(any(debug_assertions, feature = "invariants", test))]
    pub(super) fn check(&self, armed: impl Fn(Instant, &SessionId) -> bool) -> Result<(), String> {
        for (gid, w) in &self.waiting {
            if !armed(w.deadline, gid) {
                return Err(format!(
                    "the spawn of {gid} on {} has no bound armed",
                    w.host
                ));
            }
            if !self.by_msg.values().any(|g| g == gid) {
                return Err(format!("the spawn of {gid} waits with no SPAWN msgId"));
            }
        }
        for (msg, gid) in &self.by_msg {
            if !self.waiting.contains_key(gid) {
                return Err(format!("SPAWN {msg} names {gid}, which no spawn waits on"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
