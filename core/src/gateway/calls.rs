//! A caller's request: authorization first, then the lead-facing calls — sends, answers,
//! polls, drains, status, the roster, spawns, stops and broadcasts. A member's own calls
//! (`fleet_reply`, `fleet_ask`) are in `members`.

use super::delegation::{Answer, Delegation, RemoteBrief, Side, Ticket};
use super::Gateway;
use crate::authz::{self, Principal};
use crate::broker::Exchange;
use crate::ids::{CallId, MsgId, SessionId, TicketId, TurnId};
use crate::inbox::HeldReply;
use crate::io::{CallError, Event, Request, Response};
use crate::outcome::{AskOutcome, Outcome};
use crate::push::Attention;
use crate::roster::EntityKind;
use crate::time::{Duration, Instant};

/// A lead's `fleet_send`, with its timeout checked.
#[derive(Clone, Debug)]
pub(super) struct Send {
    pub(super) target: SessionId,
    pub(super) content: String,
    pub(super) wait: bool,
    pub(super) timeout: Duration,
}

/// A lead's `fleet_send` with a `turnId`: the answer to a member's question.
#[derive(Clone, Debug)]
pub(super) struct Answering {
    pub(super) turn: TurnId,
    pub(super) content: String,
    pub(super) wait: bool,
    pub(super) timeout: Duration,
}

/// A delegation about to open, as `open_delegation` records it.
#[derive(Clone, Debug)]
pub(super) struct Opening {
    pub(super) ticket: TicketId,
    pub(super) target: SessionId,
    pub(super) msg: MsgId,
    pub(super) wait: bool,
    pub(super) timeout: Duration,
    /// `Some` for a cross-host delegation: how far the worker's gateway has taken it.
    pub(super) brief: Option<RemoteBrief>,
}

impl Gateway {
    pub(super) fn on_call(
        &mut self,
        now: Instant,
        call: CallId,
        caller: Principal,
        request: Request,
    ) {
        if let Some(s) = &caller.session {
            self.beats.active(now, s);
        }
        let target = self.call_target(&caller, &request);
        let caller = self.as_its_role(caller);
        if !self.admitted(call, &caller, &request, target.as_ref()) {
            return;
        }
        match request {
            Request::Send {
                target,
                content,
                wait,
                timeout_ms,
            } => {
                let send = Send {
                    target,
                    content,
                    wait,
                    timeout: Duration::ZERO,
                };
                self.on_send_request(now, call, &caller, send, timeout_ms)
            }
            Request::Answer {
                turn_id,
                content,
                wait,
                timeout_ms,
                asked_by,
            } => {
                let answer = Answering {
                    turn: turn_id,
                    content,
                    wait,
                    timeout: Duration::ZERO,
                };
                self.on_answer_request(now, call, &caller, answer, timeout_ms, asked_by)
            }
            Request::Reply { content } => match caller.session {
                Some(s) => self.on_reply(now, call, s, content),
                None => self.respond(call, Response::Error(CallError::NoSession)),
            },
            Request::Report { report } => match caller.session {
                Some(s) => self.on_report(now, call, s, report),
                None => self.respond(call, Response::Error(CallError::NoSession)),
            },
            Request::Ask {
                question,
                timeout_ms,
            } => match caller.session {
                Some(s) => self.on_ask(now, call, s, question, timeout_ms),
                None => self.respond(call, Response::Error(CallError::NoSession)),
            },
            // Each lead collects only its own work: another lead's ticket is unknown to it, and
            // its held results are not shown.
            Request::Poll { ticket } => self.on_poll(call, caller.session.as_ref(), ticket),
            Request::Peek { target } => self.on_collect(call, &caller, Collect::Peek(target)),
            Request::Ack { target, ids } => {
                self.on_collect(call, &caller, Collect::Ack(target, ids))
            }
            Request::Drain { target } => self.on_collect(call, &caller, Collect::Drain(target)),
            Request::Status { target } => self.on_status(call, target),
            Request::List => {
                let rows = self.roster().into_iter().map(Into::into).collect();
                self.respond(call, Response::Roster { rows });
            }
            Request::Overview => {
                let view = self.overview(now, &caller);
                self.respond(call, Response::Overview(Box::new(view)));
            }
            Request::Attention => {
                let view = self.attention(now, &caller);
                self.respond(call, Response::Attention(Box::new(view)));
            }
            Request::Whoami => self.respond(
                call,
                Response::Whoami {
                    principal: caller.clone(),
                },
            ),
            Request::Profiles => {
                let profiles = self.profiles();
                self.respond(call, profiles);
            }
            Request::Spawn { host, spec } => {
                self.on_spawn(now, call, caller.session.clone(), host, spec)
            }
            Request::Stop { target } => self.on_stop(now, call, caller.session.clone(), target),
            Request::Coordinate { target, content } => {
                self.on_coordinate(now, call, &caller, target, content)
            }
            Request::Broadcast { group, content } => {
                self.on_broadcast(call, &caller, group, content)
            }
            request @ (Request::TaskAdd { .. }
            | Request::Tasks { .. }
            | Request::TaskReview { .. }) => self.on_task_call(now, call, &caller, request),
        }
    }

    /// A task's start: its lead's own `wait:false` send, admitted and audited as the lead's.
    pub(super) fn own_send(
        &mut self,
        now: Instant,
        call: CallId,
        owner: Principal,
        target: SessionId,
        content: String,
        timeout_ms: Option<u64>,
    ) {
        let caller = self.as_its_role(owner);
        let request = Request::Send {
            target: target.clone(),
            content,
            wait: false,
            timeout_ms,
        };
        if !self.admitted(call, &caller, &request, Some(&target)) {
            return;
        }
        if let Request::Send { content, .. } = request {
            let send = Send {
                target,
                content,
                wait: false,
                timeout: Duration::ZERO,
            };
            self.on_send_request(now, call, &caller, send, timeout_ms);
        }
    }

    /// `fleet_send`, once its timeout is sane.
    fn on_send_request(
        &mut self,
        now: Instant,
        call: CallId,
        caller: &Principal,
        send: Send,
        timeout_ms: Option<u64>,
    ) {
        match self.timeout(timeout_ms, self.cfg.send_timeout_ms) {
            Ok(timeout) => self.on_send(now, call, caller, Send { timeout, ..send }),
            Err(e) => self.respond(call, Response::Error(e)),
        }
    }

    /// `fleet_profiles`: the placement policy and the profiles it chooses from.
    fn profiles(&self) -> Response {
        let (strategy, default_profile, profiles) = self.placement_view();
        Response::Profiles {
            strategy,
            default_profile,
            profiles,
        }
    }

    /// `fleet_answer`, once its caller may answer `answer.turn` and its timeout is sane.
    fn on_answer_request(
        &mut self,
        now: Instant,
        call: CallId,
        caller: &Principal,
        answer: Answering,
        timeout_ms: Option<u64>,
        asked_by: Option<SessionId>,
    ) {
        if let Some(refused) = self.answer_refused(caller, answer.turn, asked_by) {
            return self.respond(call, refused);
        }
        match self.timeout(timeout_ms, self.cfg.send_timeout_ms) {
            Ok(timeout) => self.on_answer(now, call, caller, Answering { timeout, ..answer }),
            Err(e) => self.respond(call, Response::Error(e)),
        }
    }

    /// Held results, as the caller may see them: each lead collects only its own work, and
    /// another lead's held results are not shown.
    fn on_collect(&mut self, call: CallId, caller: &Principal, how: Collect) {
        let by = caller.session.as_ref();
        let response = match how {
            Collect::Peek(target) => {
                let replies = self.inbox.peek_by(&target, by);
                let replies = replies.into_iter().map(Into::into).collect();
                Response::Replies { replies }
            }
            Collect::Ack(target, ids) => {
                let acked = self.inbox.ack_by(&target, &ids, by);
                self.collected(&acked);
                Response::Acked { count: acked.len() }
            }
            Collect::Drain(target) => {
                let replies = self.inbox.drain_by(&target, by);
                self.collected(&replies);
                let replies = replies.into_iter().map(Into::into).collect();
                Response::Replies { replies }
            }
        };
        self.respond(call, response);
    }

    /// Whom a call is about, for the authorisation check: the member it names, the caller
    /// itself for a member's own calls, the member a turn or ticket belongs to.
    fn call_target(&self, caller: &Principal, request: &Request) -> Option<SessionId> {
        match request {
            Request::Send { target, .. }
            | Request::Peek { target }
            | Request::Ack { target, .. }
            | Request::Drain { target }
            | Request::Status { target }
            | Request::Stop { target }
            | Request::Coordinate { target, .. } => Some(target.clone()),
            Request::Reply { .. } | Request::Ask { .. } | Request::Report { .. } => {
                caller.session.clone()
            }
            Request::Answer { turn_id, .. } => {
                self.rendezvous.ask(*turn_id).map(|a| a.session.clone())
            }
            Request::Poll { ticket } => self.tickets.get(ticket).map(|t| t.target.clone()),
            Request::TaskAdd { task } => Some(task.assignee.clone()),
            Request::Tasks { .. } | Request::TaskReview { .. } => None,
            Request::Spawn { .. }
            | Request::Broadcast { .. }
            | Request::List
            | Request::Profiles
            | Request::Overview
            | Request::Attention
            | Request::Whoami => None,
        }
    }

    /// Whether a call may go on: its caller may take its action (audited either way), a
    /// member's own call comes from a member this host still serves, and its content is
    /// within the body bound. Refused calls are answered here.
    fn admitted(
        &mut self,
        call: CallId,
        caller: &Principal,
        request: &Request,
        target: Option<&SessionId>,
    ) -> bool {
        let action = request.action();
        let decision = authz::permits(caller, action, target);
        let allowed = decision.allowed;
        self.audit(decision);
        let own = matches!(
            request,
            Request::Reply { .. } | Request::Ask { .. } | Request::Report { .. }
        );
        if !allowed {
            self.stats.auth_failures_total += 1;
            let err = if own && caller.session.is_none() && caller.role != authz::Role::Anonymous {
                CallError::NoSession
            } else {
                CallError::Denied {
                    role: caller.role,
                    action,
                }
            };
            self.respond(call, Response::Error(err));
            return false;
        }
        // A member's own calls come only from a member this host serves: one whose pane is
        // gone (stopped, reaped) may still hold its token — a process that outlived its pane —
        // and a reply or question from it now would be an orphan nobody asked for.
        if let (true, Some(s)) = (own, &caller.session) {
            if caller.role != authz::Role::Primary && self.is_gone(s) {
                let gone = CallError::PaneGone { target: s.clone() };
                self.respond(call, Response::Error(gone));
                return false;
            }
        }
        if let Some(len) = request.content_len() {
            if len > self.cfg.max_body_bytes {
                let why = format!(
                    "the message is {len} bytes; this gateway takes at most {} (core.max_body_bytes)",
                    self.cfg.max_body_bytes
                );
                self.invalid(call, &why);
                return false;
            }
        }
        true
    }

    /// Why an answer to `turn_id` is not this caller's to give, as its response: the turn was
    /// asked by another than the one named, or its question waits on another lead.
    fn answer_refused(
        &self,
        caller: &Principal,
        turn_id: TurnId,
        asked_by: Option<SessionId>,
    ) -> Option<Response> {
        let owner = self
            .rendezvous
            .ask(turn_id)
            .map(|a| a.session.clone())
            .or_else(|| self.remote_asker(turn_id));
        if let (Some(named), Some(owner)) = (asked_by, owner) {
            if named != owner {
                let reason = format!("turn {turn_id} was asked by {owner}, not {named}");
                return Some(Response::Error(CallError::InvalidArgument { reason }));
            }
        }
        // A question put to another lead is not this one's to answer: to it the turn is as
        // unknown as one that no longer waits.
        let asked_of = self
            .rendezvous
            .ask(turn_id)
            .and_then(|a| a.owner.clone())
            .or_else(|| self.remote_ask_lead(turn_id));
        // A question a member here asks of a lead on another host is that lead's: a local
        // answer would close the turn and leave this call with no one to answer it.
        let remote_lead = self
            .delegations
            .paused_on(turn_id)
            .and_then(|t| self.delegations.get(&t))
            .is_some_and(|d| d.side.is_worker());
        (remote_lead || (asked_of.is_some() && asked_of != caller.session)).then(|| {
            Response::Outcome {
                ticket: None,
                outcome: Outcome::StaleTurn,
                body: Some(format!("turn {turn_id} is not waiting on this lead")),
                turn_id: Some(turn_id),
            }
        })
    }

    fn on_status(&mut self, call: CallId, target: SessionId) {
        match self.status_view(&target) {
            Some(view) => self.respond(call, Response::Status { target, view }),
            None => {
                let departed = self.departed(&target);
                let missing = CallError::NotFound { target, departed };
                self.respond(call, Response::Error(missing))
            }
        }
    }

    /// A member spawned as an ARCHITECT is authorised as one (ch. 9: it may delegate, never
    /// spawn, stop or drain); the shell knows it only as a member's token.
    fn as_its_role(&self, caller: Principal) -> Principal {
        let architect = caller.role == authz::Role::Worker
            && caller
                .session
                .as_ref()
                .and_then(|s| self.cards.get(s))
                .is_some_and(|c| c.role == Some(crate::spawn_spec::MemberRole::Architect));
        if architect {
            Principal {
                role: authz::Role::Architect,
                ..caller
            }
        } else {
            caller
        }
    }

    pub(super) fn timeout(
        &self,
        timeout_ms: Option<u64>,
        default_ms: u64,
    ) -> Result<Duration, CallError> {
        let ms = timeout_ms.unwrap_or(default_ms);
        if ms == 0 || ms > self.cfg.send_timeout_max_ms {
            return Err(CallError::InvalidArgument {
                reason: format!(
                    "timeout_ms must be between 1 and {}, got {ms}",
                    self.cfg.send_timeout_max_ms
                ),
            });
        }
        Ok(Duration::from_millis(ms))
    }

    fn on_send(&mut self, now: Instant, call: CallId, caller: &Principal, send: Send) {
        if send.content.trim().is_empty() {
            return self.invalid(call, "content must not be empty");
        }
        let target = send.target.clone();
        if caller.session.as_ref() == Some(&target) {
            return self.invalid(call, "a caller cannot delegate to its own session");
        }
        // A member (an architect) delegates to members only: a brief typed into a lead's pane
        // would reach an unsandboxed agent.
        let from_member = caller
            .session
            .as_ref()
            .is_some_and(|s| self.local_kind(s) == Some(EntityKind::Member));
        let to_member = matches!(self.kind_of(now, &target), Some(EntityKind::Member) | None);
        if from_member && !to_member {
            let why = format!("{target} is not a member: a member delegates to members only");
            return self.invalid(call, &why);
        }
        if self.rendezvous.has_waiter(&target) || self.paused_ticket_on(&target) {
            return self.respond(
                call,
                Response::Outcome {
                    ticket: None,
                    outcome: Outcome::Busy,
                    body: Some(format!("{target} already has an open delegation")),
                    turn_id: None,
                },
            );
        }
        if self.is_remote(&target) {
            return self.send_remote(now, call, caller, send);
        }
        self.stats.sends_total += 1;
        let ticket = self.ids.ticket();
        let msg = self.ids.msg();
        if let Some(lead) = &caller.session {
            self.delegator_of.insert(msg, lead.clone());
        }
        self.rendezvous.open(&target, msg, ticket);
        self.injector.enqueue(&target, msg, send.content);
        let opening = Opening {
            ticket,
            target: target.clone(),
            msg,
            wait: send.wait,
            timeout: send.timeout,
            brief: None,
        };
        self.open_delegation(now, call, caller, opening);
        self.event(Event::Enqueued {
            ticket: Some(ticket),
            target: target.clone(),
            msg,
        });
        self.poll_status(target);
    }

    /// Records a delegation a lead opened: its deadline armed, and for `wait:false` its ticket
    /// answered at once.
    pub(super) fn open_delegation(
        &mut self,
        now: Instant,
        call: CallId,
        caller: &Principal,
        o: Opening,
    ) {
        let deadline = now + o.timeout;
        let answer = if o.wait {
            Answer::Blocking(call)
        } else {
            Answer::Async
        };
        let side = match o.brief {
            None => Side::Local(answer),
            Some(brief) => Side::Sender { answer, brief },
        };
        let d = Delegation::new(
            o.target.clone(),
            o.msg,
            caller.session.clone(),
            side,
            deadline,
        );
        self.delegations.insert(&mut self.fx, o.ticket, d);
        if !o.wait {
            let t = Ticket {
                target: o.target,
                lead: caller.session.clone(),
                ended: None,
            };
            let view = t.view(o.ticket, self.delegations.get(&o.ticket));
            self.tickets.insert(o.ticket, t);
            self.respond(call, Response::Ticket(view));
        }
    }

    fn on_answer(&mut self, now: Instant, call: CallId, caller: &Principal, a: Answering) {
        if a.content.trim().is_empty() {
            // Refused before the ask is touched: the question stays open for a real answer.
            return self.invalid(call, "an answer must not be empty");
        }
        if self.is_remote_ask(a.turn) {
            return self.answer_remote(now, call, caller, a);
        }
        let turn_id = a.turn;
        let Some(ask) = self.rendezvous.close_ask(turn_id) else {
            return self.respond(
                call,
                Response::Outcome {
                    ticket: None,
                    outcome: Outcome::StaleTurn,
                    body: None,
                    turn_id: Some(turn_id),
                },
            );
        };
        let session = ask.session.clone();
        self.end_ask(&ask, turn_id, AskOutcome::Answered, Some(a.content.clone()));
        let baseline = ask.baseline.unwrap_or_default();
        if let Some(ticket) = self.delegations.unpause(turn_id) {
            // The async delegation that asked resumes on the same turn.
            self.resume_ticket(now, ticket, &session, ask.msg, baseline, Some(a.timeout));
            if let Some(view) = self.ticket_view(ticket) {
                self.respond(call, Response::Ticket(view));
            }
            return;
        }
        self.stats.sends_total += 1;
        let ticket = self.ids.ticket();
        self.rendezvous
            .open_captured(&session, ask.msg, ticket, baseline);
        let opening = Opening {
            ticket,
            target: session,
            msg: ask.msg,
            wait: a.wait,
            timeout: a.timeout,
            brief: None,
        };
        self.open_delegation(now, call, caller, opening);
    }

    /// Puts a delegation that was paused on a question back on its turn, with a captured
    /// waiter again (and, for an answer, a new deadline).
    pub(super) fn resume_ticket(
        &mut self,
        now: Instant,
        ticket: TicketId,
        session: &SessionId,
        msg: MsgId,
        baseline: String,
        timeout: Option<Duration>,
    ) {
        let d = match timeout {
            Some(timeout) => self.delegations.extend(&mut self.fx, ticket, now + timeout),
            None => self.delegations.get_mut(&ticket),
        };
        let Some(d) = d else {
            return;
        };
        let lead = d.lead.clone();
        self.rendezvous
            .open_captured(session, msg, ticket, baseline);
        if let Some(lead) = lead {
            self.uncollect(&lead, &Attention::Ticket(ticket));
        }
    }

    /// `fleet_poll` of an async ticket as its lead sees it now.
    pub(super) fn ticket_view(&self, ticket: TicketId) -> Option<crate::io::TicketView> {
        let t = self.tickets.get(&ticket)?;
        Some(t.view(ticket, self.delegations.get(&ticket)))
    }

    fn on_poll(&mut self, call: CallId, by: Option<&SessionId>, ticket: TicketId) {
        let lead = self.tickets.get(&ticket).and_then(|t| t.lead.clone());
        if lead.as_ref().is_some_and(|l| Some(l) != by) {
            return self.respond(call, Response::Error(CallError::UnknownTicket));
        }
        let Some(view) = self.ticket_view(ticket) else {
            return self.respond(call, Response::Error(CallError::UnknownTicket));
        };
        if let Some(lead) = lead {
            if view.phase != crate::outcome::Phase::Pending {
                self.uncollect(&lead, &Attention::Ticket(ticket));
            }
        }
        if view.phase.is_terminal() {
            self.ticket_collected(ticket);
        }
        self.respond(call, Response::Ticket(view));
    }

    /// The lead collected these held replies: stop nudging about them.
    pub(super) fn collected(&mut self, replies: &[HeldReply]) {
        for r in replies {
            self.reply_collected(r.id);
            if let Some(lead) = &r.lead {
                self.uncollect(
                    lead,
                    &Attention::Reply {
                        target: r.target.clone(),
                        id: r.id,
                    },
                );
            }
        }
    }

    pub(super) fn uncollect(&mut self, lead: &SessionId, item: &Attention) {
        if let Some(nudge) = self.push.remove(lead, item) {
            self.injector
                .withdraw(lead, nudge, crate::injector::Cause::Drained);
        }
    }

    /// U8: one publish to `broadcast.all` (or a group); the broker copies it into every bound
    /// inbox and each copy follows the per-recipient rules. Not mandatory: an empty group is
    /// legal silence.
    fn on_broadcast(
        &mut self,
        call: CallId,
        caller: &Principal,
        group: Option<String>,
        content: String,
    ) {
        if self.link.is_solo() {
            return self.invalid(call, "broadcast runs over the broker; none is configured");
        }
        if content.trim().is_empty() {
            return self.invalid(call, "content must not be empty");
        }
        if let Some(why) = group.as_deref().and_then(crate::spawn_spec::invalid_group) {
            return self.invalid(call, &why);
        }
        let Some(from) = caller.session.clone().filter(|s| !self.is_remote(s)) else {
            return self.invalid(call, "this caller is not attached to the gateway");
        };
        if !self.broker_is_up() {
            return self.respond(call, Response::Error(CallError::BrokerUnavailable));
        }
        let to = crate::envelope::Address::Broadcast(group.clone());
        let key = to.key();
        let ttl = self.cfg.injected_timeout_ms;
        let draft =
            super::federation::Draft::new(crate::envelope::Payload::Broadcast, &from, to, ttl)
                .body(content.into_bytes());
        let env = self.seal(draft);
        let msg = env.msg_id;
        match self.publish(Exchange::Msg, env) {
            Some(_) => self.respond(call, Response::Broadcast { msg, key }),
            None => self.respond(call, Response::Error(CallError::BrokerUnavailable)),
        }
    }
}

/// The three ways a lead collects held results.
enum Collect {
    Peek(SessionId),
    Ack(SessionId, Vec<crate::ids::ReplyId>),
    Drain(SessionId),
}
