//! Stopping members (U4's other half): on this host by closing the pane, on another through a
//! STOP over `fleet.control`.
//!
//! The requester's answer is the roster's truth, not the target's word: a remote stop is
//! `stopped` once the member's own host announces it left (the leave a pane's closing always
//! publishes), `not_found`/`not_allowed` when the target refuses with a typed FAILED, and
//! `stop_unconfirmed` at its bound. The target holds the STOP unacked until the pane is gone,
//! so a crash in between redelivers it; a redelivery finds the member already closing (or
//! recently stopped, and re-tells its leave) — a stop is idempotent without a ledger.

use super::federation::Draft;
use super::{Gateway, TimerKind};
use crate::broker::{DeliveryId, Exchange, PublishId, PublishResult};
use crate::control::{Refusal, RefusalCode, StopRequest};
use crate::envelope::{Envelope, Kind};
use crate::ids::{CallId, HostId, MsgId, SessionId};
use crate::io::{CallError, Event, Output, Response};
use crate::outcome::Outcome;
use crate::roster::{EntityKind, GATEWAY_GID};
use crate::time::{Duration, Instant};
use std::collections::BTreeMap;

/// How long a target remembers a member it stopped, so a late redelivery of the STOP re-tells
/// the leave instead of answering `not_found`.
const REMEMBER_STOPPED: Duration = Duration::from_secs(600);
/// At most this many stopped members remembered (a churning host must not grow it).
const REMEMBER_STOPPED_MAX: usize = 4096;

#[derive(Clone, Debug)]
struct Waiting {
    call: CallId,
    target: SessionId,
    host: HostId,
    deadline: Instant,
}

/// Both sides of stopping.
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

    fn remember(&mut self, now: Instant, gid: SessionId) {
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
}

impl Gateway {
    fn stop_timeout(&self) -> Duration {
        Duration::from_millis(self.cfg.stop_timeout_ms)
    }

    /// What this host serves `gid` as, in either mode.
    pub(super) fn local_kind(&self, gid: &SessionId) -> Option<EntityKind> {
        match &self.fed {
            Some(f) => f.local.get(gid).map(|s| s.kind),
            None => self.solo.get(gid).map(|s| s.kind),
        }
    }

    /// `fleet_stop` / `DELETE /members/{id}`: a member here is closed at once; one on another
    /// host is asked to stop through its gateway.
    pub(super) fn on_stop(
        &mut self,
        now: Instant,
        call: CallId,
        caller_gid: Option<SessionId>,
        target: SessionId,
    ) {
        if self.spawns.is_reserved(&target) {
            self.cancel_spawn(&target, "stopped by its lead before it was ready");
            return self.respond(call, Response::Stopped { target });
        }
        match self.local_kind(&target) {
            Some(EntityKind::Member) => {
                self.stop_member(now, &target, "stopped by its lead");
                return self.respond(call, Response::Stopped { target });
            }
            Some(kind) => return self.not_a_member(call, &target, kind),
            None => {}
        }
        let row = self.fed.as_ref().and_then(|f| {
            f.roster
                .row(now, &target, f.broker_up)
                .filter(|r| &r.host != f.host())
        });
        let Some(row) = row else {
            return self.respond(
                call,
                Response::Error(CallError::NotFound {
                    target,
                    departed: None,
                }),
            );
        };
        if row.kind != EntityKind::Member {
            return self.not_a_member(call, &target, row.kind);
        }
        let Some(from) = caller_gid.filter(|g| !self.is_remote(g)) else {
            return self.invalid(
                call,
                "this caller is not attached to the gateway, so it cannot stop a member on \
                 another host",
            );
        };
        if !self.broker_is_up() {
            return self.respond(call, Response::Error(CallError::BrokerUnavailable));
        }
        let body = serde_json::to_vec(&StopRequest {
            target: target.clone(),
        })
        .unwrap_or_default();
        let draft = Draft::new(
            Kind::Stop,
            &from,
            row.host.to_string(),
            self.cfg.stop_timeout_ms,
        )
        .body(body);
        let env = self.seal(draft);
        let msg = env.msg_id;
        let Some(publish) = self.publish(Exchange::Control, env) else {
            return self.respond(call, Response::Error(CallError::BrokerUnavailable));
        };
        let deadline = now + self.stop_timeout();
        self.stops.waiting.insert(
            msg,
            Waiting {
                call,
                target,
                host: row.host,
                deadline,
            },
        );
        self.stops.publishes.insert(publish, msg);
        self.timers.insert((deadline, TimerKind::Stop(msg)));
    }

    fn not_a_member(&mut self, call: CallId, target: &SessionId, kind: EntityKind) {
        let why = format!(
            "{target} is a {}: fleet_stop stops members (a lead's pane is its own)",
            kind.as_str()
        );
        self.invalid(call, &why);
    }

    /// Closes a member served here: what is open on it ends (ABANDONED to another host's
    /// sender, WORKER_FAILED here), nothing more is typed into it, and its pane is closed —
    /// whose going (`PaneGone`) deletes its inbox and announces its leave.
    fn stop_member(&mut self, now: Instant, gid: &SessionId, why: &str) {
        self.abandon(now, |d| &d.target == gid, why);
        self.event(Event::Stopping {
            gid: gid.clone(),
            why: why.to_string(),
        });
        self.out.push_back(Output::ClosePane { gid: gid.clone() });
    }

    /// Target side: a verified STOP from an allowed gateway. `Err` is the refusal its
    /// requester is told (the caller acks the delivery).
    pub(super) fn on_stop_message(
        &mut self,
        now: Instant,
        delivery: DeliveryId,
        env: &Envelope,
    ) -> Result<(), Refusal> {
        let req: StopRequest = serde_json::from_slice(&env.body)
            .map_err(|e| Refusal::new(RefusalCode::Invalid, format!("STOP body: {e}")))?;
        let target = req.target;
        let why = format!("stopped by {} on {}", env.from, env.signer);
        if self.spawns.is_reserved(&target) {
            // Never announced: no leave will tell the requester, and none needs to (it could
            // only have named a gid its roster showed).
            self.ack(delivery);
            self.cancel_spawn(&target, &why);
            self.stops.remember(now, target);
            return Ok(());
        }
        match self.local_kind(&target) {
            Some(EntityKind::Member) => {
                let first = !self.stops.closing.contains_key(&target);
                self.stops
                    .closing
                    .entry(target.clone())
                    .or_default()
                    .push(delivery);
                if first {
                    self.stop_member(now, &target, &why);
                } else {
                    // A redelivery while the pane is closing: ask herdr again (the first close
                    // may have found it unavailable).
                    self.out.push_back(Output::ClosePane { gid: target });
                }
                Ok(())
            }
            Some(kind) => Err(Refusal::new(
                RefusalCode::Invalid,
                format!(
                    "{target} is a {} on {}: only members are stopped",
                    kind.as_str(),
                    self.own_host()
                ),
            )),
            None if self.stops.stopped_lately(now, &target) => {
                // A redelivery after the pane went: its leave is told again, in case the first
                // telling was lost with the requester's link.
                self.ack(delivery);
                self.announce_left(&target);
                Ok(())
            }
            None => Err(Refusal::new(
                RefusalCode::NotFound,
                format!("{target} is not served by {}", self.own_host()),
            )),
        }
    }

    /// Target side: a FAILED naming the control message `env`, from this host's gateway, saying
    /// why it was not done.
    pub(super) fn refuse_control(&mut self, env: &Envelope, refusal: Refusal) {
        let gateway = SessionId::new(GATEWAY_GID);
        let draft = Draft::new(
            Kind::Failed,
            &gateway,
            env.from.to_string(),
            self.cfg.reply_ttl_ms,
        )
        .re(Some(env.msg_id))
        .outcome(Outcome::WorkerFailed)
        .body(refusal.to_body());
        let draft = match &env.spawn_id {
            Some(gid) => draft.spawn_id(gid.clone()),
            None => draft,
        };
        let failed = self.seal(draft);
        self.publish(Exchange::Msg, failed);
    }

    /// A pane is gone: a STOP held for it is done, and the gid is remembered as gone (a late
    /// STOP re-tells its leave; a call from a process that outlived its pane is refused).
    pub(super) fn stop_pane_gone(&mut self, now: Instant, gid: &SessionId) {
        if let Some(deliveries) = self.stops.closing.remove(gid) {
            for d in deliveries {
                self.ack_if_current(d);
            }
        }
        self.stops.remember(now, gid.clone());
    }

    /// `gid` was a pane here and is gone: not served (federated), or closed lately (single
    /// host, where a member's calls need no registration).
    pub(super) fn is_gone(&self, gid: &SessionId) -> bool {
        match &self.fed {
            Some(f) => !f.local.contains_key(gid),
            None => !self.solo.contains_key(gid) && self.stops.stopped_lately(self.now, gid),
        }
    }

    /// Requester side: `gid` left `host`'s roster. A stop waiting on it is done.
    pub(super) fn stop_seen_left(&mut self, gid: &SessionId, host: &HostId) {
        let done: Vec<MsgId> = self
            .stops
            .waiting
            .iter()
            .filter(|(_, w)| &w.target == gid && &w.host == host)
            .map(|(m, _)| *m)
            .collect();
        for msg in done {
            if let Some(w) = self.stops.waiting.remove(&msg) {
                self.stops.publishes.retain(|_, m| *m != msg);
                self.respond(w.call, Response::Stopped { target: w.target });
            }
        }
    }

    /// Requester side: the host a stop waiting on STOP `re` was sent to.
    pub(super) fn stop_host(&self, re: MsgId) -> Option<HostId> {
        self.stops.waiting.get(&re).map(|w| w.host.clone())
    }

    /// Requester side: FAILED answering a STOP. Returns false if `re` is not a waiting stop.
    pub(super) fn stop_refused(&mut self, re: MsgId, body: &[u8]) -> bool {
        let Some(w) = self.stops.waiting.remove(&re) else {
            return false;
        };
        self.stops.publishes.retain(|_, m| *m != re);
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
        self.respond(w.call, Response::Error(err));
        true
    }

    /// Requester side: the confirm of `publish`, if it was a STOP. Unroutable: no gateway
    /// serves that host; failed: the broker went away before taking it. Returns false for any
    /// other publish.
    pub(super) fn stop_confirmed(&mut self, publish: PublishId, result: &PublishResult) -> bool {
        let Some(msg) = self.stops.publishes.remove(&publish) else {
            return false;
        };
        let err = match result {
            PublishResult::Routed => return true,
            PublishResult::Failed(_) => CallError::BrokerUnavailable,
            PublishResult::Unroutable => match self.stops.waiting.get(&msg) {
                Some(w) => CallError::NoSuchHost {
                    host: w.host.clone(),
                },
                None => return true,
            },
        };
        if let Some(w) = self.stops.waiting.remove(&msg) {
            self.respond(w.call, Response::Error(err));
        }
        true
    }

    /// The broker went down: STOPs awaiting their confirm fail fast (one that was confirmed
    /// may still take effect: it waits for its leave, or its bound).
    pub(super) fn stops_broker_down(&mut self) {
        let msgs: Vec<MsgId> = std::mem::take(&mut self.stops.publishes)
            .into_values()
            .collect();
        for msg in msgs {
            if let Some(w) = self.stops.waiting.remove(&msg) {
                self.respond(w.call, Response::Error(CallError::BrokerUnavailable));
            }
        }
    }

    /// Requester side: a stop's bound.
    pub(super) fn on_stop_timer(&mut self, now: Instant, msg: MsgId) {
        if self
            .stops
            .waiting
            .get(&msg)
            .is_none_or(|w| w.deadline > now)
        {
            return;
        }
        let Some(w) = self.stops.waiting.remove(&msg) else {
            return;
        };
        self.stops.publishes.retain(|_, m| *m != msg);
        let err = CallError::StopUnconfirmed {
            target: w.target,
            host: w.host,
            waited_ms: self.cfg.stop_timeout_ms,
        };
        self.respond(w.call, Response::Error(err));
    }
}
