//! The worker's side of a cross-host delegation: a brief from another host (acked first, then
//! the status-gated inject — at most once), its turn owned here, answers to its questions, and
//! its ending reported back to the sender's gateway. Also a member's replies that go to a lead
//! on another host, and broadcast copies.

use super::confirms::{Pending, Unsent};
use super::Draft;
use crate::broker::{DeliveryId, Exchange, Names};
use crate::envelope::Envelope;
use crate::envelope::{Address, Payload};
use crate::gateway::delegation::{Delegation, Side};
use crate::gateway::Gateway;
use crate::gateway::Link;
use crate::gateway::TimerKind;
use crate::ids::{CallId, MsgId, ReplyId, SessionId, TicketId, TurnId};
use crate::io::{CallError, Event, RejectCode, Response};
use crate::outcome::{AskOutcome, Outcome};
use crate::planted::PlantedBug;
use crate::roster::EntityKind;
use crate::time::{Duration, Instant};

impl Gateway {
    /// The forward path (at-most-once): ack first — a redelivered brief can never be typed
    /// twice — then the status-gated inject; INJECTED follows once it lands.
    pub(super) fn on_brief(
        &mut self,
        now: Instant,
        delivery: DeliveryId,
        queue: &str,
        target: SessionId,
        env: Envelope,
    ) {
        let Ok(text) = String::from_utf8(env.body.clone()) else {
            return self.reject(
                delivery,
                queue,
                RejectCode::Malformed,
                "body is not UTF-8".into(),
            );
        };
        if self.cfg.planted(PlantedBug::AckAfterInject) {
            self.ack_late(env.msg_id, delivery);
        } else {
            self.ack(delivery);
        }
        // A member delegates to members only (its gateway refuses it too; one that lies does
        // not): a brief from another host's member is never typed into a lead here.
        let from_member = self.kind_of(now, &env.from) == Some(EntityKind::Member);
        if from_member && self.local_kind(&target) != Some(EntityKind::Member) {
            let why = format!("{} is a member: it delegates to members only", env.from);
            return self.reject(delivery, queue, RejectCode::NotAllowed, why);
        }
        let busy = self.rendezvous.has_waiter(&target) || self.paused_ticket_on(&target);
        if busy || text.trim().is_empty() {
            let (outcome, why) = if busy {
                (
                    Outcome::Busy,
                    format!("{target} already has an open delegation"),
                )
            } else {
                (Outcome::WorkerFailed, "empty brief".to_string())
            };
            return self.publish_outcome(&target, &env.from, env.msg_id, outcome, Some(why), None);
        }
        let ticket = self.ids.ticket();
        let msg = env.msg_id;
        // Typed by the brief's own lifetime, measured from its arrival on this host's clock
        // (never from the two hosts' wall clocks against each other), less the skew
        // allowance, and never longer than this host's own bound.
        let lifetime = env
            .expires_at
            .saturating_sub(env.ts)
            .min(self.cfg.injected_timeout_ms)
            .saturating_sub(self.cfg.clock_skew_ms);
        let deadline = now + Duration::from_millis(lifetime);
        self.delegator_of.insert(msg, env.from.clone());
        self.rendezvous.open(&target, msg, ticket);
        self.injector.enqueue(&target, msg, text);
        let side = Side::Worker {
            reply_to: env.from.clone(),
            re: env.msg_id,
        };
        let mut d = Delegation::new(target.clone(), msg, None, side, deadline);
        d.trace = Some(env.trace_id);
        self.delegations.insert(&mut self.fx, ticket, d);
        self.event(Event::Enqueued {
            ticket: Some(ticket),
            target: target.clone(),
            msg,
        });
        self.poll_status(target);
    }

    /// One copy of a broadcast, in one member's inbox: the forward path's rules (ack first,
    /// status-gated, FIFO with everything else queued for it) without a waiter — replies to a
    /// broadcast are ordinary replies to its sender.
    pub(super) fn on_broadcast_copy(
        &mut self,
        delivery: DeliveryId,
        queue: &str,
        member: &SessionId,
        env: Envelope,
    ) {
        // Only a member's inbox takes broadcasts, and only those for all or for its own group:
        // a queue someone else bound to `broadcast.#` (a lead's, or any inbox) gets nothing.
        let group = self.cards.get(member).and_then(|c| c.group.as_ref());
        let addressed = match env.address() {
            Ok(Address::Broadcast(None)) => true,
            Ok(Address::Broadcast(Some(g))) => group == Some(&g),
            _ => false,
        };
        if !self.is_live_member(member) || !addressed {
            let why = format!("{} is not a broadcast for {member}", env.to);
            return self.reject(delivery, queue, RejectCode::Misrouted, why);
        }
        let Ok(text) = String::from_utf8(env.body.clone()) else {
            return self.reject(
                delivery,
                queue,
                RejectCode::Malformed,
                "body is not UTF-8".into(),
            );
        };
        self.ack(delivery);
        if text.trim().is_empty() {
            return;
        }
        let msg = self.queue_note(member, text);
        self.delegator_of.insert(msg, env.from.clone());
    }

    /// ANSWER for a member's ask: delivered into the ask only if that turn still waits, and
    /// only from the lead it was asked of; otherwise dropped and the sender told TOO_LATE.
    pub(super) fn on_answer_message(&mut self, worker: SessionId, env: Envelope) {
        let waiting = env.turn_id().and_then(|turn| {
            let ask = self.rendezvous.ask(turn)?;
            let ticket = self.delegations.paused_on(turn)?;
            let asked_of = match &self.delegations.get(&ticket)?.side {
                Side::Worker { reply_to, .. } => reply_to.clone(),
                _ => return None,
            };
            (ask.session == worker && asked_of == env.from).then_some((turn, ticket))
        });
        let Some((turn, ticket)) = waiting else {
            if self.cfg.planted(PlantedBug::AnswerWithoutTurnCheck) && self.is_live_member(&worker)
            {
                let answer = String::from_utf8_lossy(&env.body).into_owned();
                self.injector.enqueue(&worker, env.msg_id, answer);
                self.poll_status(worker);
                return;
            }
            let ttl = self.cfg.reply_ttl_ms;
            let late = Payload::TooLate {
                re: env.msg_id,
                turn: env.turn_id(),
            };
            let draft = Draft::new(late, &worker, Address::Entity(env.from.clone()), ttl)
                .trace(env.trace_id);
            let late = self.seal(draft);
            self.publish(Exchange::Msg, late);
            return;
        };
        let Some(ask) = self.rendezvous.close_ask(turn) else {
            return;
        };
        let answer = String::from_utf8_lossy(&env.body).into_owned();
        self.end_ask(&ask, turn, AskOutcome::Answered, Some(answer));
        self.delegations.unpause(turn);
        // The proxy continues the same turn; its ending now answers the ANSWER.
        if let Some(d) = self.delegations.get_mut(&ticket) {
            if let Side::Worker { re, .. } = &mut d.side {
                *re = env.msg_id;
            }
        }
        let baseline = ask.baseline.unwrap_or_default();
        self.rendezvous
            .open_captured(&worker, ask.msg, ticket, baseline);
    }

    /// A brief from another host was typed: tell its sender — after `injected_defer_ms`, so
    /// that a turn ending sooner sends only its REPLY or FAILED, which says typed too.
    pub(in crate::gateway) fn remote_injected(&mut self, target: &SessionId, msg: MsgId) {
        let Some(ticket) = self.rendezvous.waiter(target, msg).map(|w| w.ticket) else {
            return;
        };
        let defer = self.cfg.injected_defer_ms;
        if defer == 0 {
            return self.publish_injected(ticket);
        }
        let at = self.now + Duration::from_millis(defer);
        if let Link::Fleet(f) = &mut self.link {
            f.untold.insert(msg, (ticket, at));
            self.fx.wake(at, TimerKind::TellInjected(msg));
        }
    }

    /// The deferred INJECTED of brief `msg` is due, unless its turn's ending said it first.
    pub(in crate::gateway) fn tell_injected(&mut self, msg: &MsgId) {
        let untold = self.link.fleet_mut().and_then(|f| f.untold.remove(msg));
        if let Some((ticket, _)) = untold {
            self.publish_injected(ticket);
        }
    }

    /// Brief `re`'s turn ended (its REPLY or FAILED says typed), or asks (INJECTED goes out
    /// first, in order): nothing is left to tell later.
    fn injected_told(&mut self, re: MsgId, now: bool) {
        let untold = self.link.fleet_mut().and_then(|f| f.untold.remove(&re));
        if let (Some((ticket, _)), true) = (untold, now) {
            self.publish_injected(ticket);
        }
    }

    fn publish_injected(&mut self, ticket: TicketId) {
        let Some((target, Side::Worker { reply_to, re })) = self
            .delegations
            .get(&ticket)
            .map(|d| (d.target.clone(), d.side.clone()))
        else {
            return;
        };
        let ttl = self.cfg.reply_ttl_ms;
        let draft = Draft::new(
            Payload::Injected { re },
            &target,
            Address::Entity(reply_to.clone()),
            ttl,
        );
        let env = self.seal(draft);
        self.publish(Exchange::Msg, env);
    }

    /// The worker-side delegation ended: REPLY for a reply or a completion, FAILED otherwise.
    /// `member_call` is the member's `fleet_reply` that ended it, answered at the confirm.
    pub(in crate::gateway) fn publish_outcome(
        &mut self,
        worker: &SessionId,
        reply_to: &SessionId,
        re: MsgId,
        outcome: Outcome,
        body: Option<String>,
        member_call: Option<CallId>,
    ) {
        let payload = match outcome {
            Outcome::Replied | Outcome::CompletedUnreplied => Payload::Reply {
                re: Some(re),
                outcome,
            },
            _ => Payload::Failed {
                re,
                outcome,
                spawn_id: None,
            },
        };
        let ttl = self.cfg.reply_ttl_ms;
        let draft = Draft::new(payload, worker, Address::Entity(reply_to.clone()), ttl)
            .body(body.unwrap_or_default().into_bytes());
        let env = self.seal(draft);
        let kind = env.kind();
        let sent = Unsent {
            turn: self.turns.get(worker).copied(),
            to: reply_to.clone(),
            re: Some(re),
            msg_id: env.msg_id,
            trace_id: env.trace_id,
        };
        let published = self.publish(Exchange::Msg, env);
        if published.is_some() {
            self.injected_told(re, false);
        }
        match (published, member_call) {
            (Some(publish), Some(call)) => self.expect_confirm(
                publish,
                Pending::MemberReply {
                    call,
                    held: None,
                    member: worker.clone(),
                    sent,
                },
            ),
            (Some(publish), None) => self.expect_confirm(
                publish,
                Pending::Report {
                    to: reply_to.clone(),
                    kind,
                },
            ),
            (None, Some(call)) => self.reply_unsent(call, worker, sent),
            (None, None) => self.event(Event::Undelivered {
                kind,
                to: reply_to.clone(),
                why: "the broker is down".into(),
            }),
        }
    }

    pub(super) fn expect_confirm(&mut self, publish: crate::broker::PublishId, what: Pending) {
        if let Link::Fleet(f) = &mut self.link {
            f.confirms.expect(publish, what);
        }
    }

    /// The member asked mid-turn in a delegation from another host: ASK goes to the lead;
    /// the member stays parked until ANSWER, NO_WAITER or its ask timeout.
    pub(in crate::gateway) fn publish_ask(
        &mut self,
        worker: &SessionId,
        reply_to: &SessionId,
        re: MsgId,
        turn: TurnId,
        question: String,
    ) {
        // The question lives as long as its member waits for the answer (its own timeout, at
        // most `ask_timeout_ms`): the lead's gateway tells a person about it no longer.
        let waits = self
            .rendezvous
            .ask(turn)
            .map_or(self.cfg.ask_timeout_ms, |a| {
                a.deadline.saturating_since(self.now).as_millis() as u64
            });
        let ttl = waits.clamp(1, self.cfg.ask_timeout_ms);
        self.injected_told(re, true);
        let ask = Payload::Ask { re, turn };
        let draft = Draft::new(ask, worker, Address::Entity(reply_to.clone()), ttl)
            .body(question.into_bytes());
        let env = self.seal(draft);
        if self.publish(Exchange::Msg, env).is_none() {
            // Nobody can be asked: close the ask as NO_WAITER so the member is not left parked.
            self.close_remote_ask(turn, AskOutcome::NoWaiter);
        }
    }

    /// A member replied with no waiter, and the lead that last delegated to it is on another
    /// host: the reply goes to that lead's inbox, where it is held until drained (U3).
    pub(in crate::gateway) fn reply_to_remote_lead(
        &mut self,
        call: CallId,
        member: &SessionId,
        lead: &SessionId,
        content: String,
    ) {
        let sent = Unsent {
            turn: self.turns.get(member).copied(),
            to: lead.clone(),
            re: None,
            msg_id: self.ids.msg(),
            trace_id: self.ids.trace(),
        };
        self.publish_member_reply(call, member, sent, content);
    }

    /// A member's reply retried after its publish failed: true if this turn has one (see
    /// `Unsent`), which then goes out again under its first msgId.
    pub(in crate::gateway) fn retry_unsent_reply(
        &mut self,
        call: CallId,
        member: &SessionId,
        content: &str,
    ) -> bool {
        let turn = self.turns.get(member).copied();
        let Link::Fleet(f) = &mut self.link else {
            return false;
        };
        let Some(sent) = f.unsent.remove(member) else {
            return false;
        };
        if sent.turn != turn {
            return false;
        }
        self.publish_member_reply(call, member, sent, content.to_string());
        true
    }

    /// Publishes a member's REPLY as `sent` names it; the member is answered at the confirm.
    fn publish_member_reply(
        &mut self,
        call: CallId,
        member: &SessionId,
        sent: Unsent,
        content: String,
    ) {
        let ttl = self.cfg.reply_ttl_ms;
        let reply = Payload::Reply {
            re: sent.re,
            outcome: Outcome::Replied,
        };
        let draft = Draft::new(reply, member, Address::Entity(sent.to.clone()), ttl)
            .body(content.into_bytes())
            .trace(sent.trace_id)
            .msg_id(sent.msg_id);
        let env = self.seal(draft);
        // A reply to a delegation resolved its waiter here already: nothing is held.
        let held = sent.re.is_none().then_some(ReplyId(sent.msg_id.0));
        // To a lead on this host it goes straight to the lead's held queue.
        let key = if self.is_remote(&sent.to) {
            sent.to.to_string()
        } else {
            Names::held_key(&sent.to)
        };
        match self.publish_keyed(Exchange::Msg, key, env) {
            Some(publish) => self.expect_confirm(
                publish,
                Pending::MemberReply {
                    call,
                    held,
                    member: member.clone(),
                    sent,
                },
            ),
            None => self.reply_unsent(call, member, sent),
        }
    }

    /// The broker does not have the member's reply: the member hears so, and may try again.
    pub(super) fn reply_unsent(&mut self, call: CallId, member: &SessionId, sent: Unsent) {
        if let Link::Fleet(f) = &mut self.link {
            // A failed reply to the delegation outranks a failed stranded one of the same turn
            // (a second `fleet_reply` made while the first awaited its confirm): the retry
            // must still carry `re`.
            let keep = f
                .unsent
                .get(member)
                .is_some_and(|old| old.re.is_some() && sent.re.is_none() && old.turn == sent.turn);
            if !keep {
                f.unsent.insert(member.clone(), sent);
            }
        }
        self.respond(call, Response::Error(CallError::BrokerUnavailable));
    }

    /// A remote ask closed with no answer coming: the member hears `outcome`, and the
    /// worker-side delegation paused on it ends without a message (nobody waits on it).
    pub(super) fn close_remote_ask(&mut self, turn: TurnId, outcome: AskOutcome) {
        let Some(ask) = self.rendezvous.close_ask(turn) else {
            return;
        };
        self.end_ask(&ask, turn, outcome, None);
        if let Some(ticket) = self.delegations.unpause(turn) {
            self.delegations.remove(&ticket);
        }
    }
}
