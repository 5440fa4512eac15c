//! `Stops`: both sides of stopping a member on another host, as a sub-machine that owns its
//! state and answers with what the hub must do — never touching the gateway itself.
//!
//! Requester side: a stop waits for the member's leave (`seen_left` → `stopped`), a typed
//! refusal (`refused`), its publish's confirm (`confirmed`: unroutable is no such host), the
//! broker going down before the confirm (`broker_down`), or its bound (`due`:
//! `stop_unconfirmed`). Target side: STOP deliveries are held until the member's pane is gone
//! (`hold`, `pane_gone`), and a stopped gid is remembered for a while (`stopped_lately`) so a
//! late redelivery re-tells the leave instead of answering `not_found`.

pub(super) use super::answer::Answer;
use super::{Effects, TimerKind};
use crate::broker::{DeliveryId, PublishId, PublishResult};
use crate::control::{Refusal, RefusalCode};
use crate::ids::{CallId, HostId, MsgId, SessionId};
use crate::io::{CallError, Response};
use crate::time::{Duration, Instant};
use std::collections::BTreeMap;

/// How long a target remembers a member it stopped, so a late redelivery of the STOP re-tells
/// the leave instead of answering `not_found`.
pub(super) const REMEMBER_STOPPED: Duration = Duration::from_secs(600);
/// At most this many stopped members remembered (a churning host must not grow it).
pub(super) const REMEMBER_STOPPED_MAX: usize = 4096;

/// A requester's stop on its way: the call it answers, whom and where, and its bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Waiting {
    pub(super) call: CallId,
    pub(super) target: SessionId,
    pub(super) host: HostId,
    pub(super) deadline: Instant,
}

#[derive(Debug, Default)]
pub(super) struct Stops {
    /// Requester side: remote stops awaiting the member's leave, by STOP msgId.
    waiting: BTreeMap<MsgId, Waiting>,
    /// Requester side: STOP publishes awaiting their confirm.
    publishes: BTreeMap<PublishId, MsgId>,
    /// Target side: STOP deliveries held unacked until the member's pane is gone.
    closing: BTreeMap<SessionId, Vec<DeliveryId>>,
    /// Panes gone lately (stopped or closed), and when.
    stopped: BTreeMap<SessionId, Instant>,
}

impl Stops {
    /// Requester side: STOP `msg`, published as `publish`, waits as `w`, its bound armed at
    /// `w.deadline`.
    pub(super) fn wait(&mut self, fx: &mut Effects, msg: MsgId, publish: PublishId, w: Waiting) {
        fx.wake(w.deadline, TimerKind::Stop(msg));
        self.waiting.insert(msg, w);
        self.publishes.insert(publish, msg);
    }

    /// Requester side: `gid` left `host`'s roster — every stop waiting on it is `stopped`.
    pub(super) fn seen_left(&mut self, gid: &SessionId, host: &HostId) -> Vec<Answer> {
        let done: Vec<MsgId> = self
            .waiting
            .iter()
            .filter(|(_, w)| &w.target == gid && &w.host == host)
            .map(|(m, _)| *m)
            .collect();
        done.into_iter()
            .filter_map(|msg| self.finish(msg))
            .map(|w| Answer {
                call: w.call,
                response: Response::Stopped { target: w.target },
            })
            .collect()
    }

    /// Requester side: the host a stop waiting on STOP `re` was sent to.
    pub(super) fn host_of(&self, re: MsgId) -> Option<HostId> {
        self.waiting.get(&re).map(|w| w.host.clone())
    }

    /// Requester side: a FAILED answering STOP `re`, its body the target's typed refusal.
    /// `None` if `re` is not a waiting stop.
    pub(super) fn refused(&mut self, re: MsgId, body: &[u8]) -> Option<Answer> {
        let w = self.finish(re)?;
        let refusal = Refusal::parse(body);
        let err = match refusal.code {
            RefusalCode::NotFound => CallError::NotFound {
                target: w.target,
                departed: None,
            },
            RefusalCode::NotAllowed => CallError::NotAllowed {
                host: w.host,
                reason: refusal.reason,
            },
            RefusalCode::Invalid | RefusalCode::InvalidArgument => CallError::InvalidArgument {
                reason: refusal.reason,
            },
        };
        Some(Answer::error(w.call, err))
    }

    /// Requester side: the confirm of `publish`. `None` if it was not a STOP; otherwise the
    /// answer it ends (unroutable: no gateway serves that host; failed: the broker went away
    /// before taking it), if any.
    pub(super) fn confirmed(
        &mut self,
        publish: PublishId,
        result: &PublishResult,
    ) -> Option<Option<Answer>> {
        let msg = self.publishes.remove(&publish)?;
        let err = match result {
            PublishResult::Routed => return Some(None),
            PublishResult::Failed(_) => CallError::BrokerUnavailable,
            PublishResult::Unroutable => match self.waiting.get(&msg) {
                Some(w) => CallError::NoSuchHost {
                    host: w.host.clone(),
                },
                None => return Some(None),
            },
        };
        Some(
            self.waiting
                .remove(&msg)
                .map(|w| Answer::error(w.call, err)),
        )
    }

    /// Requester side: the broker went down. STOPs awaiting their confirm fail fast; one that
    /// was confirmed may still take effect, and waits for its leave or its bound.
    pub(super) fn broker_down(&mut self) -> Vec<Answer> {
        let msgs: Vec<MsgId> = std::mem::take(&mut self.publishes).into_values().collect();
        msgs.into_iter()
            .filter_map(|msg| self.waiting.remove(&msg))
            .map(|w| Answer::error(w.call, CallError::BrokerUnavailable))
            .collect()
    }

    /// Requester side: STOP `msg`'s bound at `now` (`waited_ms` is what it is told it
    /// waited). Nothing before its deadline, or for a stop already done.
    pub(super) fn due(&mut self, now: Instant, msg: MsgId, waited_ms: u64) -> Option<Answer> {
        if self.waiting.get(&msg).is_none_or(|w| w.deadline > now) {
            return None;
        }
        let w = self.finish(msg)?;
        let err = CallError::StopUnconfirmed {
            target: w.target,
            host: w.host,
            waited_ms,
        };
        Some(Answer::error(w.call, err))
    }

    fn finish(&mut self, msg: MsgId) -> Option<Waiting> {
        let w = self.waiting.remove(&msg)?;
        self.publishes.retain(|_, m| *m != msg);
        Some(w)
    }

    /// Target side: holds STOP `delivery` for `gid` until its pane is gone. True for the first
    /// one (the hub closes the member); a redelivery while it closes only asks herdr again.
    pub(super) fn hold(&mut self, gid: &SessionId, delivery: DeliveryId) -> bool {
        let held = self.closing.entry(gid.clone()).or_default();
        held.push(delivery);
        held.len() == 1
    }

    /// `gid`'s pane is gone at `now`: the STOPs held for it are done (to be acked) and it is
    /// remembered as stopped.
    pub(super) fn pane_gone(&mut self, now: Instant, gid: &SessionId) -> Vec<DeliveryId> {
        let held = self.closing.remove(gid).unwrap_or_default();
        self.remember(now, gid.clone());
        held
    }

    /// A spawn stopped before it was ready: remembered as stopped.
    pub(super) fn remember(&mut self, now: Instant, gid: SessionId) {
        self.stopped.retain(|_, at| *at + REMEMBER_STOPPED > now);
        while self.stopped.len() >= REMEMBER_STOPPED_MAX {
            let oldest = self
                .stopped
                .iter()
                .min_by_key(|(g, at)| (**at, (*g).clone()))
                .map(|(g, _)| g.clone());
            match oldest {
                Some(g) => self.stopped.remove(&g),
                None => break,
            };
        }
        self.stopped.insert(gid, now);
    }

    pub(super) fn stopped_lately(&self, now: Instant, gid: &SessionId) -> bool {
        self.stopped
            .get(gid)
            .is_some_and(|at| *at + REMEMBER_STOPPED > now)
    }

    /// Each waiting stop's bound is armed; each STOP awaiting its confirm is a waiting stop;
    /// a STOP is held only for a member being closed here.
    #[cfg(any(debug_assertions, feature = "invariants"))]
    pub(super) fn check(
        &self,
        armed: impl Fn(Instant, MsgId) -> bool,
        served: impl Fn(&SessionId) -> bool,
    ) -> Result<(), String> {
        for (msg, w) in &self.waiting {
            if !armed(w.deadline, *msg) {
                return Err(format!(
                    "the stop of {} ({msg}) has no bound armed",
                    w.target
                ));
            }
        }
        for msg in self.publishes.values() {
            if !self.waiting.contains_key(msg) {
                return Err(format!(
                    "STOP {msg} awaits its confirm but no call waits on it"
                ));
            }
        }
        for (gid, held) in &self.closing {
            if held.is_empty() || !served(gid) {
                return Err(format!(
                    "a STOP is held for {gid}, which is not closing here"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
