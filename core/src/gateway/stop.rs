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
use super::stops::Waiting;
use super::Gateway;
use crate::broker::{DeliveryId, Exchange, PublishId, PublishResult};
use crate::control::{Refusal, RefusalCode, StopRequest};
use crate::envelope::Address;
use crate::envelope::Envelope;
use crate::gateway::Link;
use crate::ids::{CallId, HostId, MsgId, SessionId};
use crate::io::{CallError, Event, Response};
use crate::outcome::Outcome;
use crate::roster::{EntityKind, GATEWAY_GID};
use crate::time::{Duration, Instant};

impl Gateway {
    fn stop_timeout(&self) -> Duration {
        Duration::from_millis(self.cfg.stop_timeout_ms)
    }

    /// What this host serves `gid` as, in either mode.
    pub(super) fn local_kind(&self, gid: &SessionId) -> Option<EntityKind> {
        self.served.get(gid).map(|s| s.kind)
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
        let row = self.link.fleet().and_then(|f| {
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
            crate::envelope::Payload::Stop,
            &from,
            Address::Host(row.host.clone()),
            self.cfg.stop_timeout_ms,
        )
        .body(body);
        let env = self.seal(draft);
        let msg = env.msg_id;
        let Some(publish) = self.publish(Exchange::Control, env) else {
            return self.respond(call, Response::Error(CallError::BrokerUnavailable));
        };
        let deadline = now + self.stop_timeout();
        let waiting = Waiting {
            call,
            target,
            host: row.host,
            deadline,
        };
        self.stops.wait(&mut self.fx, msg, publish, waiting);
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
        self.close_pane(gid.clone());
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
                if self.stops.hold(&target, delivery) {
                    self.stop_member(now, &target, &why);
                } else {
                    // A redelivery while the pane is closing: ask herdr again (the first close
                    // may have found it unavailable).
                    self.close_pane(target);
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
        let failed = crate::envelope::Payload::Failed {
            re: env.msg_id,
            outcome: Outcome::WorkerFailed,
            spawn_id: env.spawn_id().cloned(),
        };
        let to = Address::Entity(env.from.clone());
        let draft = Draft::new(failed, &gateway, to, self.cfg.reply_ttl_ms).body(refusal.to_body());
        let failed = self.seal(draft);
        self.publish(Exchange::Msg, failed);
    }

    /// A pane is gone: a STOP held for it is done, and the gid is remembered as gone (a late
    /// STOP re-tells its leave; a call from a process that outlived its pane is refused).
    pub(super) fn stop_pane_gone(&mut self, now: Instant, gid: &SessionId) {
        for d in self.stops.pane_gone(now, gid) {
            self.ack_if_current(d);
        }
    }

    /// `gid` was a pane here and is gone: not served (federated), or closed lately (single
    /// host, where a member's calls need no registration).
    pub(super) fn is_gone(&self, gid: &SessionId) -> bool {
        match &self.link {
            Link::Fleet(_) => !self.served.contains_key(gid),
            Link::Solo => {
                !self.served.contains_key(gid) && self.stops.stopped_lately(self.now, gid)
            }
        }
    }

    /// Requester side: `gid` left `host`'s roster. A stop waiting on it is done.
    pub(super) fn stop_seen_left(&mut self, gid: &SessionId, host: &HostId) {
        let answers = self.stops.seen_left(gid, host);
        self.answer(answers);
    }

    /// Requester side: the host a stop waiting on STOP `re` was sent to.
    pub(super) fn stop_host(&self, re: MsgId) -> Option<HostId> {
        self.stops.host_of(re)
    }

    /// Requester side: FAILED answering a STOP. Returns false if `re` is not a waiting stop.
    pub(super) fn stop_refused(&mut self, re: MsgId, body: &[u8]) -> bool {
        let answer = self.stops.refused(re, body);
        let ours = answer.is_some();
        self.answer(answer);
        ours
    }

    /// Requester side: the confirm of `publish`, if it was a STOP. Returns false for any
    /// other publish.
    pub(super) fn stop_confirmed(&mut self, publish: PublishId, result: &PublishResult) -> bool {
        match self.stops.confirmed(publish, result) {
            Some(answer) => {
                self.answer(answer);
                true
            }
            None => false,
        }
    }

    /// The broker went down: STOPs awaiting their confirm fail fast.
    pub(super) fn stops_broker_down(&mut self) {
        let answers = self.stops.broker_down();
        self.answer(answers);
    }

    /// Requester side: a stop's bound.
    pub(super) fn on_stop_timer(&mut self, now: Instant, msg: MsgId) {
        let answer = self.stops.due(now, msg, self.cfg.stop_timeout_ms);
        self.answer(answer);
    }
}
