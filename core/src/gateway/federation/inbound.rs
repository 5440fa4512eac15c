//! Everything the broker says: the link coming and going, publish confirms, and deliveries —
//! each admitted (size, signature, sender's host, routing key, expiry, replay) and then
//! dispatched by kind and queue to the side of the protocol it concerns.

use super::confirms::Pending;
use super::parking::PARKED_BODIES_PER_MAX;
use super::Draft;
use crate::admission::{admit_checked, record, Arrived, Rejection};
use crate::broker::{BrokerEvent, BrokerOp, DeliveryId, Exchange, Names, PublishResult};
use crate::control::{Refusal, RefusalCode};
use crate::envelope::{Address, Payload};
use crate::envelope::{Envelope, HeaderValue, Headers, Kind};
use crate::gateway::delegation::{RemoteBrief, Side};
use crate::gateway::Gateway;
use crate::gateway::Link;
use crate::ids::SessionId;
use crate::io::{CallError, Event, RejectCode, Response, Stale};
use crate::outcome::{AskOutcome, Outcome};
use crate::planted::PlantedBug;
use crate::roster::GATEWAY_GID;
use crate::time::{Duration, Instant};

/// One delivery of the live connection, as the broker handed it over.
#[derive(Clone, Debug)]
pub(crate) struct Delivery {
    pub(crate) delivery: DeliveryId,
    pub(crate) queue: String,
    pub(crate) routing_key: String,
    pub(crate) redelivered: bool,
    pub(crate) headers: Headers,
    pub(crate) body: Vec<u8>,
}

impl Gateway {
    pub(in crate::gateway) fn on_broker(&mut self, now: Instant, ev: BrokerEvent) {
        match ev {
            BrokerEvent::Up { generation } => self.on_broker_up(now, generation),
            BrokerEvent::Down => self.on_broker_down(now),
            BrokerEvent::Published { publish, result } => {
                if self.spawn_confirmed(publish, &result) || self.stop_confirmed(publish, &result) {
                    return;
                }
                let what = self.link.fleet_mut().and_then(|f| f.confirms.take(publish));
                if let Some(what) = what {
                    self.confirmed(now, what, result);
                }
            }
            BrokerEvent::Delivery {
                delivery,
                queue,
                routing_key,
                redelivered,
                headers,
                body,
            } => {
                let current = self.link.fleet().is_some_and(|f| f.is_current(delivery));
                if !current {
                    // A delivery of a dead connection: its tag is void and the broker has
                    // requeued it for the next generation.
                    return self.event(Event::Stale {
                        what: Stale::OldDelivery { delivery },
                        target: SessionId::new(&queue),
                    });
                }
                self.on_delivery(
                    now,
                    Delivery {
                        delivery,
                        queue,
                        routing_key,
                        redelivered,
                        headers,
                        body,
                    },
                )
            }
        }
    }

    fn on_broker_up(&mut self, now: Instant, generation: u32) {
        let Link::Fleet(f) = &mut self.link else {
            return;
        };
        f.broker_up = true;
        f.link_since = now;
        f.generation = generation;
        f.roster.heard_again(now);
        let gids: Vec<(SessionId, crate::roster::EntityKind)> = self
            .served
            .iter()
            .map(|(g, s)| (g.clone(), s.kind))
            .collect();
        let t = super::topology::slice(
            &self.cfg,
            f,
            &self.cards,
            &gids,
            super::topology::Part::Whole,
        );
        self.broker(BrokerOp::Declare(t));
        let sweep_at = now + Duration::from_millis(self.cfg.held_sweep_interval_ms);
        super::Fed::rounds_begin(&mut self.fx, now, sweep_at);
    }

    /// Held deliveries lose their tags (the broker requeues them for the next generation);
    /// publishes awaiting a confirm are failed — nothing is buffered on the broker's behalf.
    fn on_broker_down(&mut self, now: Instant) {
        let Link::Fleet(f) = &mut self.link else {
            return;
        };
        if f.broker_up {
            f.link_since = now;
        }
        f.broker_up = false;
        f.parking.disconnected();
        f.held.disconnected();
        for what in f.confirms.take_all() {
            self.confirmed(
                now,
                what,
                PublishResult::Failed("the connection closed".into()),
            );
        }
        self.spawns_broker_down();
        self.stops_broker_down();
    }

    /// A publish's fate, as the confirm (or its absence) tells it.
    fn confirmed(&mut self, now: Instant, what: Pending, result: PublishResult) {
        match (what, result) {
            (Pending::Move(msg), r) => self.result_moved(msg, r == PublishResult::Routed),
            (Pending::MemberReply { call, held, .. }, PublishResult::Routed) => {
                self.respond(call, Response::ReplyAccepted { held })
            }
            (Pending::Coordination { call, target, msg }, r) => {
                let response = match r {
                    PublishResult::Routed => Response::Coordinated { target, msg },
                    PublishResult::Unroutable => {
                        Response::Error(CallError::NoSuchRecipient { target })
                    }
                    PublishResult::Failed(_) => Response::Error(CallError::BrokerUnavailable),
                };
                self.respond(call, response)
            }
            (_, PublishResult::Routed) => {}
            (Pending::Delegation(ticket), PublishResult::Unroutable) => {
                let target = self.delegations.get(&ticket).map(|d| d.target.clone());
                if let Some(target) = target {
                    self.fail_call(now, ticket, CallError::NoSuchRecipient { target });
                }
            }
            (Pending::Delegation(ticket), PublishResult::Failed(_)) => {
                self.fail_call(now, ticket, CallError::BrokerUnavailable)
            }
            (Pending::MemberReply { call, sent, .. }, PublishResult::Unroutable) => self.respond(
                call,
                Response::Error(CallError::NoSuchRecipient { target: sent.to }),
            ),
            (
                Pending::MemberReply {
                    call, member, sent, ..
                },
                PublishResult::Failed(_),
            ) => self.reply_unsent(call, &member, sent),
            (Pending::Report { to, kind }, r) => self.event(Event::Undelivered {
                kind,
                to,
                why: match r {
                    PublishResult::Unroutable => "no inbox is bound to its sender any more".into(),
                    PublishResult::Failed(why) => why,
                    PublishResult::Routed => String::new(),
                },
            }),
        }
    }

    fn on_delivery(&mut self, now: Instant, d: Delivery) {
        let unix = self.unix_now();
        let Link::Fleet(f) = &mut self.link else {
            return;
        };
        if d.queue == f.names.dead_letters(&f.cfg.host) {
            return self.on_dead_letter(d);
        }
        // Checked first: a body this size is refused before anything hashes or copies it.
        if d.body.len() > self.cfg.max_body_bytes {
            let why = format!(
                "a body of {} bytes exceeds max_body_bytes ({})",
                d.body.len(),
                self.cfg.max_body_bytes
            );
            return self.reject(d.delivery, &d.queue, RejectCode::Oversized, why);
        }
        let (roster, keyring) = (&f.roster, &f.cfg.keyring);
        let roster_queue = d.queue == f.names.roster(&f.cfg.host);
        let kept = (!roster_queue).then(|| d.body.clone());
        // A result's copy on its lead's held queue travels under `held.<gid>`; it is addressed
        // to that gid all the same.
        let held_key = f
            .names
            .held_gid(&d.queue)
            .filter(|g| d.routing_key == Names::held_key(g))
            .map(|g| g.to_string());
        let arrived = Arrived {
            headers: &d.headers,
            body: d.body,
            routing_key: held_key.as_deref().unwrap_or(&d.routing_key),
            queue: &d.queue,
        };
        let admitted = admit_checked(
            keyring,
            arrived,
            unix,
            self.cfg.max_expiry_ms,
            |g| roster.host_of(now, g),
            (!d.redelivered).then_some(&f.seen),
        );
        let env = match admitted {
            Ok(env) => env,
            // Nothing binds the sender to a host *yet*: wait for its presence (bounded).
            Err(Rejection::NotOnSigningHost {
                from, roster: None, ..
            }) if kept.is_some() => {
                let body = kept.unwrap_or_default();
                let budget = self
                    .cfg
                    .max_body_bytes
                    .saturating_mul(PARKED_BODIES_PER_MAX);
                if f.parking.bytes().saturating_add(body.len()) > budget {
                    let why = format!(
                        "no signed presence binds {from} to a host yet, and the deliveries \
                         waiting for one already hold {} of {budget} bytes",
                        f.parking.bytes()
                    );
                    return self.reject(
                        d.delivery,
                        &d.queue,
                        RejectCode::SenderNotOnSigningHost,
                        why,
                    );
                }
                let parked = Delivery { body, ..d };
                f.parking.park(from, now, parked);
                return;
            }
            Err(r) => return self.reject(d.delivery, &d.queue, r.code(), r.to_string()),
        };
        let (delivery, queue) = (d.delivery, d.queue);
        // SPAWN and STOP are at-least-once (acked once done): a broker redelivery of one goes
        // to its own dedup (the spawn's registry and reservation, the stop's closing set), not
        // here.
        if d.redelivered
            && env.kind().replay_guarded()
            && !env.kind().is_control()
            && !self.cfg.planted(PlantedBug::AckAfterInject)
        {
            return self.on_forward_redelivery(delivery, &queue, env);
        }
        self.dispatch(now, delivery, &queue, env, d.redelivered);
    }

    /// An admitted envelope, to the side of the protocol its kind and queue say: where it
    /// arrived, the rules of that queue, then its handler.
    fn dispatch(
        &mut self,
        now: Instant,
        delivery: DeliveryId,
        queue: &str,
        env: Envelope,
        redelivered: bool,
    ) {
        let Some(at) = self.arrival(queue, &env) else {
            return;
        };
        if let Err((code, why)) = self.queue_rules(&at, queue, &env, redelivered) {
            return self.reject(delivery, queue, code, why);
        }
        self.route(now, delivery, queue, env, at);
    }

    /// Which of this gateway's queues `queue` is, and whether `env` is addressed to it.
    fn arrival(&self, queue: &str, env: &Envelope) -> Option<Arrival> {
        let Link::Fleet(f) = &self.link else {
            return None;
        };
        let held = f
            .names
            .held_gid(queue)
            .filter(|g| self.served.contains_key(g));
        let held_queue = held.is_some();
        let inbox_of = f
            .names
            .inbox_gid(queue)
            .filter(|g| self.served.contains_key(g))
            .or(held);
        // Point-to-point kinds must be addressed to the inbox they arrived in.
        let addressed = env.address().ok();
        let inbox =
            inbox_of.is_some() && addressed.as_ref().and_then(Address::entity) == inbox_of.as_ref();
        Some(Arrival {
            control: queue == f.names.control(&f.cfg.host),
            roster: queue == f.names.roster(&f.cfg.host),
            held_queue,
            inbox_of,
            inbox,
        })
    }

    /// The rules of the queue `env` arrived on, in order: only results on a held queue, the
    /// control allowlist, the counterpart of an inbox message, and the replay record last.
    fn queue_rules(
        &mut self,
        at: &Arrival,
        queue: &str,
        env: &Envelope,
        redelivered: bool,
    ) -> Result<(), (RejectCode, String)> {
        if at.held_queue && env.kind() != Kind::Reply {
            let why = format!(
                "{} has no meaning on {queue}: only results wait there",
                env.kind()
            );
            return Err((RejectCode::Misrouted, why));
        }
        let unchecked =
            env.kind() == Kind::Stop && self.cfg.planted(PlantedBug::StopWithoutAllowlist);
        if let Link::Fleet(f) = &self.link {
            if at.control && !f.cfg.control_allowlist.contains(&env.signer) && !unchecked {
                let why = format!("{} may not send control to {}", env.signer, f.cfg.host);
                // The requester's call hears why at once instead of waiting out its bound.
                if env.kind().is_control() {
                    self.refuse_control(env, Refusal::new(RefusalCode::NotAllowed, why.clone()));
                }
                return Err((RejectCode::NotAllowed, why));
            }
        }
        if at.inbox {
            self.check_counterpart(env)
                .map_err(|why| (RejectCode::NotCounterpart, why))?;
        }
        // Recorded against replay only now, past every rule above and on the queue its kind
        // is handled on: a sender those refuse cannot fill the record (a peer off the
        // allowlist once could, with STOPs, for as long as their `expiresAt`).
        let handled_here = match env.kind() {
            Kind::Spawn | Kind::Stop => at.control,
            Kind::Broadcast => at.inbox_of.is_some(),
            Kind::Send | Kind::Coord | Kind::Answer => at.inbox,
            _ => false,
        };
        if handled_here && !redelivered {
            self.remember(env, queue)
                .map_err(|r| (r.code(), r.to_string()))?;
        }
        Ok(())
    }

    /// `env`, past its queue's rules, to the handler of its kind on that queue.
    fn route(
        &mut self,
        now: Instant,
        delivery: DeliveryId,
        queue: &str,
        env: Envelope,
        at: Arrival,
    ) {
        // The member whose inbox it is, checked against the envelope's Address.
        let to = at.inbox_of.clone().filter(|_| at.inbox);
        match (env.kind(), to) {
            (Kind::Spawn, _) if at.control => {
                if let Err(why) = self.on_spawn_message(now, delivery, env) {
                    self.ack(delivery);
                    self.event(Event::Rejected {
                        queue: queue.to_string(),
                        code: RejectCode::Malformed,
                        detail: why,
                    });
                }
            }
            (Kind::Stop, _) if at.control => {
                if let Err(refusal) = self.on_stop_message(now, delivery, &env) {
                    self.ack(delivery);
                    self.refuse_control(&env, refusal);
                }
            }
            (Kind::Broadcast, _) => match at.inbox_of {
                Some(member) => self.on_broadcast_copy(delivery, queue, &member, env),
                None => self.unhandled(delivery, queue, env.kind(), at.control),
            },
            (Kind::Presence, _) if at.roster => self.on_presence(now, delivery, queue, env),
            (Kind::Send, Some(to)) => self.on_brief(now, delivery, queue, to, env),
            (Kind::Coord, Some(lead)) => self.on_coord_message(delivery, queue, &lead, env),
            (Kind::Answer, Some(worker)) => {
                self.ack(delivery);
                self.on_answer_message(worker, env);
            }
            (Kind::Reply, Some(lead)) => {
                self.on_reply_message(now, delivery, at.held_queue, &lead, env)
            }
            // Acked once what it ends is kept (a task's list is written before this ack).
            (Kind::Failed | Kind::Abandoned, Some(_)) => {
                self.on_failed_message(now, env);
                self.ack(delivery);
            }
            (Kind::Injected, Some(_)) => {
                self.ack(delivery);
                self.on_injected_message(&env);
            }
            (Kind::Ask, Some(lead)) => {
                self.ack(delivery);
                self.on_ask_message(now, &lead, env);
            }
            (Kind::NoWaiter, Some(_)) => {
                self.ack(delivery);
                if let Some(turn) = env.turn_id() {
                    self.close_remote_ask(turn, AskOutcome::NoWaiter);
                }
            }
            (Kind::TooLate, Some(_)) => {
                self.ack(delivery);
                self.on_too_late_message(now, &env);
            }
            (kind, _) => self.unhandled(delivery, queue, kind, at.control),
        }
    }

    /// A kind this gateway does not handle on `queue`.
    fn unhandled(&mut self, delivery: DeliveryId, queue: &str, kind: Kind, control: bool) {
        let why = if control {
            format!("{kind} on the control queue is not handled yet")
        } else {
            format!("{kind} has no meaning on {queue}")
        };
        let code = if control {
            RejectCode::Unsupported
        } else {
            RejectCode::Misrouted
        };
        self.reject(delivery, queue, code, why);
    }

    /// Records `env` in the replay record and keeps the entry durably (`Remember`) before the
    /// ack and inject it leads to.
    pub(super) fn remember(&mut self, env: &Envelope, queue: &str) -> Result<(), Rejection> {
        let unix = self.unix_now();
        let Link::Fleet(f) = &mut self.link else {
            return Ok(());
        };
        let recorded = record(&mut f.seen, env, queue, unix);
        let journal = f.seen.take_journal();
        self.keep_durably(journal);
        recorded
    }

    /// A forward-path message the broker redelivers: our ack was lost with a connection (or
    /// this gateway restarted). It may already have been typed, so it is never typed again:
    /// acked, and — unless we know we handled it — its sender is told it may have been lost.
    fn on_forward_redelivery(&mut self, delivery: DeliveryId, queue: &str, env: Envelope) {
        self.ack(delivery);
        let handled = self
            .link
            .fleet()
            .is_some_and(|f| f.seen.contains_scoped(env.msg_id, queue));
        if handled {
            return;
        }
        // Admission refused a point-to-point kind not addressed to a member.
        let Some(to) = env.address().ok().and_then(|a| a.entity().cloned()) else {
            return;
        };
        let why = "redelivered after a lost ack: it may already have been typed, so it was not \
                   typed again"
            .to_string();
        match env.kind() {
            Kind::Send => {
                self.publish_outcome(
                    &to,
                    &env.from,
                    env.msg_id,
                    Outcome::WorkerFailed,
                    Some(why),
                    None,
                );
            }
            Kind::Answer => {
                let ttl = self.cfg.reply_ttl_ms;
                let late = Payload::TooLate {
                    re: env.msg_id,
                    turn: env.turn_id(),
                };
                let draft = Draft::new(late, &to, Address::Entity(env.from.clone()), ttl)
                    .body(why.into_bytes())
                    .trace(env.trace_id);
                let late = self.seal(draft);
                self.publish(Exchange::Msg, late);
            }
            _ => {}
        }
    }

    /// The replay record kept across the restart: every unexpired msgId admitted before it
    /// is a replay again.
    pub(in crate::gateway) fn restore_replay_record(
        &mut self,
        entries: &[crate::admission::Remembered],
    ) {
        if self.cfg.planted(PlantedBug::ReplayRecordForgotten) {
            return;
        }
        let unix = self.unix_now();
        let Link::Fleet(f) = &mut self.link else {
            return;
        };
        let taken = f.seen.restore(entries, unix);
        self.event(Event::ReplayRecordRestored {
            entries: taken,
            expired: entries.len() - taken,
        });
    }

    /// `gid`'s presence arrived: what waited for it is admitted again, in arrival order.
    pub(super) fn unpark(&mut self, now: Instant, gid: &SessionId) {
        let Link::Fleet(f) = &mut self.link else {
            return;
        };
        for p in f.parking.take_for(gid) {
            let d = p.delivery;
            self.on_broker(
                now,
                BrokerEvent::Delivery {
                    delivery: d.delivery,
                    queue: d.queue,
                    routing_key: d.routing_key,
                    redelivered: d.redelivered,
                    headers: d.headers,
                    body: d.body,
                },
            );
        }
    }

    /// Parked deliveries whose sender never showed up within the presence TTL are rejected
    /// with the reason they were parked for.
    pub(super) fn expire_parked(&mut self, now: Instant) {
        let ttl = Duration::from_millis(self.cfg.presence_ttl_ms);
        let Link::Fleet(f) = &mut self.link else {
            return;
        };
        for p in f.parking.take_expired(now, ttl) {
            let why = format!(
                "no signed presence binds {} to a host within {} ms",
                p.from, self.cfg.presence_ttl_ms
            );
            self.reject(
                p.delivery.delivery,
                &p.delivery.queue,
                RejectCode::SenderNotOnSigningHost,
                why,
            );
        }
    }

    /// A dead letter on this host's copy of the DLX: counted, when it names one of this
    /// gateway's queues, as a broker drop by reason — and nothing more. The broker's headers
    /// are unsigned (any client with credentials can publish into the DLX with a forged
    /// `x-first-death-reason`), so they are hints for a metric, never grounds to fail or end a
    /// delegation (DESIGN §8): a brief the broker really dropped ends at its sender's deadline.
    /// Drops this gateway caused itself (`rejected`) were counted when it rejected them.
    fn on_dead_letter(&mut self, d: Delivery) {
        self.ack(d.delivery);
        let hint = |k: &str| match d.headers.get(k) {
            Some(HeaderValue::Str(s)) => Some(s.clone()),
            _ => None,
        };
        let (Some(reason), Some(queue)) =
            (hint("x-first-death-reason"), hint("x-first-death-queue"))
        else {
            return;
        };
        if reason == "rejected" {
            return;
        }
        let Link::Fleet(f) = &self.link else { return };
        let host = &f.cfg.host;
        let ours = queue == f.names.control(host)
            || queue == f.names.roster(host)
            || f.names
                .inbox_gid(&queue)
                .or_else(|| f.names.held_gid(&queue))
                .is_some_and(|g| self.served.contains_key(&g));
        if !ours {
            return;
        }
        if self.cfg.planted(PlantedBug::DlqTrustsBrokerHeaders) {
            self.report_dead_letter(&d, &reason);
        }
        let reason = crate::io::DropReason::parse(&reason);
        self.event(Event::BrokerDropped { queue, reason });
    }

    /// The planted `DlqTrustsBrokerHeaders` bug: the first build's DLQ report, which believed
    /// the broker's unsigned headers and failed the brief's delegation.
    fn report_dead_letter(&mut self, d: &Delivery, reason: &str) {
        let Ok(env) = Envelope::from_parts(&d.headers, d.body.clone()) else {
            return;
        };
        let genuine = self
            .link
            .fleet()
            .is_some_and(|f| f.cfg.keyring.check(&env).is_ok());
        if !genuine || env.kind() != Kind::Send {
            return;
        }
        let ttl = self.cfg.reply_ttl_ms;
        let gateway = SessionId::new(GATEWAY_GID);
        let failed = Payload::Failed {
            re: env.msg_id,
            outcome: Outcome::WorkerFailed,
            spawn_id: None,
        };
        let draft = Draft::new(failed, &gateway, Address::Entity(env.from.clone()), ttl)
            .body(format!("dead-lettered before delivery to {} ({reason})", env.to).into_bytes())
            .trace(env.trace_id);
        let report = self.seal(draft);
        self.publish(Exchange::Msg, report);
    }

    /// INJECTED: the worker's gateway typed our brief.
    fn on_injected_message(&mut self, env: &Envelope) {
        let Payload::Injected { re } = env.payload else {
            return;
        };
        let ticket = self.link.fleet().and_then(|f| f.waiters.ticket_of(re));
        if let Some(d) = ticket.and_then(|t| self.delegations.get_mut(&t)) {
            if let Side::Sender { brief, .. } = &mut d.side {
                *brief = RemoteBrief::Typed { at_unix: env.ts };
            }
        }
    }

    /// TOO_LATE: our answer reached a turn that no longer waited.
    fn on_too_late_message(&mut self, now: Instant, env: &Envelope) {
        let Payload::TooLate { re, .. } = env.payload else {
            return;
        };
        let ticket = self.link.fleet().and_then(|f| f.waiters.ticket_of(re));
        if let Some(ticket) = ticket {
            let why = "the turn was no longer waiting when the answer arrived".to_string();
            self.finish(now, ticket, Outcome::StaleTurn, Some(why), env.turn_id());
        }
    }
}

/// Where a delivery arrived, as the rules of its queue see it.
struct Arrival {
    /// This host's control queue.
    control: bool,
    /// This host's roster queue.
    roster: bool,
    /// A served member's held-results queue.
    held_queue: bool,
    /// The served member whose inbox (or held queue) it is.
    inbox_of: Option<SessionId>,
    /// An inbox, and the envelope addressed to the member it belongs to.
    inbox: bool,
}
