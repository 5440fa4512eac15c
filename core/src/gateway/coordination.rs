//! Lead to lead (`fleet_send{coordId}`): coordination only — never a task, never a brief. A
//! note is typed into the peer lead's pane when that pane is ready (status-gated, like every
//! inject), with no delegation behind it: no BUSY, no waiter, no scrape of the peer's screen,
//! no outcome to wait for. The caller is answered once the note is queued here or the broker
//! has routed it to the peer's inbox.

use super::federation::Draft;
use super::Gateway;
use crate::authz::Principal;
use crate::broker::{DeliveryId, Exchange};
use crate::envelope::Address;
use crate::envelope::Envelope;
use crate::ids::{CallId, MsgId, SessionId};
use crate::io::{CallError, Event, RejectCode, Response};
use crate::roster::EntityKind;
use crate::time::Instant;

/// How the note reads in the peer lead's pane: who sent it, from where, and that it asks for
/// no reply through the fleet.
pub fn note_text(from: &SessionId, host: &str, content: &str) -> String {
    format!("[fleet] coordination from lead {from} on {host} (no reply expected): {content}")
}

impl Gateway {
    /// `fleet_send{coordId}` from `caller`.
    pub(super) fn on_coordinate(
        &mut self,
        now: Instant,
        call: CallId,
        caller: &Principal,
        target: SessionId,
        content: String,
    ) {
        if content.trim().is_empty() {
            return self.invalid(call, "message must not be empty");
        }
        let Some(from) = caller.session.clone() else {
            return self.invalid(call, "a note names its sender: this caller has no session");
        };
        if from == target {
            return self.invalid(call, "a lead cannot coordinate with itself");
        }
        // Lead to lead only: a note is typed into a lead's unsandboxed agent, so a member —
        // an architect included — may not write one.
        if self.local_kind(&from) != Some(EntityKind::Lead) {
            let why = format!("{from} is not a lead: coordination is between leads");
            return self.invalid(call, &why);
        }
        match self.kind_of(now, &target) {
            Some(EntityKind::Lead) => {}
            Some(k) => {
                let why = format!(
                    "{target} is a {}: coordId names a peer lead (send a member work with sessionId)",
                    k.as_str()
                );
                return self.invalid(call, &why);
            }
            None => {
                return self.respond(
                    call,
                    Response::Error(CallError::NotFound {
                        target,
                        departed: None,
                    }),
                )
            }
        }
        if !self.is_remote(&target) {
            let host = self.own_host().to_string();
            let msg = self.queue_note(&target, note_text(&from, &host, &content));
            return self.respond(call, Response::Coordinated { target, msg });
        }
        if !self.broker_is_up() {
            return self.respond(call, Response::Error(CallError::BrokerUnavailable));
        }
        let draft = Draft::new(
            crate::envelope::Payload::Coord,
            &from,
            Address::Entity(target.clone()),
            self.cfg.reply_ttl_ms,
        )
        .body(content.into_bytes());
        let env = self.seal(draft);
        let msg = env.msg_id;
        match self.publish(Exchange::Msg, env) {
            Some(publish) => self.expect_coordination(publish, call, target, msg),
            None => self.respond(call, Response::Error(CallError::BrokerUnavailable)),
        }
    }

    /// What `gid` is: served here, or as the roster says of another host's.
    pub(super) fn kind_of(&self, now: Instant, gid: &SessionId) -> Option<EntityKind> {
        self.local_kind(gid).or_else(|| {
            self.link.fleet().and_then(|f| {
                f.roster
                    .row(now, gid, f.broker_up)
                    .filter(|r| &r.host != f.host())
                    .map(|r| r.kind)
            })
        })
    }

    /// Text for a pane served here with nothing waiting on it (a coordination note, a
    /// broadcast copy): queued like any inject, status-gated and in order.
    pub(super) fn queue_note(&mut self, pane: &SessionId, text: String) -> MsgId {
        let msg = self.ids.msg();
        self.injector.enqueue(pane, msg, text);
        self.event(Event::Enqueued {
            ticket: None,
            target: pane.clone(),
            msg,
        });
        self.poll_status(pane.clone());
        msg
    }

    /// A COORD for a lead served here (its inbox), acked before it is queued: at most once, as
    /// every forward-path message.
    pub(super) fn on_coord_message(
        &mut self,
        delivery: DeliveryId,
        queue: &str,
        lead: &SessionId,
        env: Envelope,
    ) {
        if self.local_kind(lead) != Some(EntityKind::Lead) {
            let why = format!("{lead} is not a lead: coordination goes to leads only");
            return self.reject(delivery, queue, RejectCode::Misrouted, why);
        }
        let now = self.now;
        if self.kind_of(now, &env.from) != Some(EntityKind::Lead) {
            let why = format!(
                "{} is not a lead: coordination comes from leads only",
                env.from
            );
            return self.reject(delivery, queue, RejectCode::NotAllowed, why);
        }
        let Ok(content) = String::from_utf8(env.body) else {
            return self.reject(
                delivery,
                queue,
                RejectCode::Malformed,
                "body is not UTF-8".into(),
            );
        };
        self.ack(delivery);
        if content.trim().is_empty() {
            return;
        }
        self.queue_note(lead, note_text(&env.from, env.signer.as_str(), &content));
    }
}
