//! `Gateway`: the one machine per host. It composes the injector, the rendezvous, the reply
//! inbox, the push rule and authz, and turns their decisions into `Output`s.

use crate::authz::{self, Principal};
use crate::completion::{self, Verdict};
use crate::config::{Compiled, ConfigError, CoreConfig};
use crate::ids::{CallId, HostId, IdMint, MsgId, SessionId, TicketId, TurnId};
use crate::inbox::{HeldReply, ReplyInbox};
use crate::injector::{Bounds, Cause, Injector, InjectorEvent};
use crate::io::{CallError, Event, Input, Output, Request, Response, TicketView};
use crate::outcome::{AskOutcome, Outcome, Phase};
use crate::push::{Attention, Push};
use crate::rendezvous::{AskOpen, Kind, Rendezvous};
use crate::session::{SessionState, Sessions};
use crate::time::{Duration, Instant};
use sessions::IDLE;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

mod federation;
mod sessions;
mod spawn;
use federation::Fed;
pub use federation::Federation;
use spawn::Spawns;
pub use spawn::{SpawnSpec, Worktree};

/// Why the gateway wants to be woken up.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TimerKind {
    /// Sample every active target's status.
    StatusPoll,
    /// An injector bound (an inject result or a post-turn settle is due).
    Injector,
    /// A send reaches its timeout.
    SendDeadline(TicketId),
    /// A member's ask reaches its timeout.
    AskDeadline(TurnId),
    /// A finished ticket's retention ends.
    TicketExpiry(TicketId),
    /// A lead's next reminder is due.
    Nudge,
    /// Cross-host: a remote brief's INJECTED is due.
    InjectBy(TicketId),
    /// Cross-host: heartbeat presence, expire the roster.
    Presence,
    /// Cross-host: ack held reply-path deliveries past their `expiresAt`.
    HeldSweep,
    /// A spawn's readiness bound (target side) or answer bound (requester side).
    Spawn(SessionId),
    /// The idle reaper's round.
    Reap,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Mode {
    /// A blocking call that is answered once, with the outcome.
    Blocking(CallId),
    /// A `wait:false` ticket the lead polls.
    Async,
    /// The worker-side half of a delegation from another host (CB-308 §7.7): this gateway
    /// owns the turn; the outcome goes back to `reply_to` as a message answering `re`.
    Remote { reply_to: SessionId, re: MsgId },
}

/// One open delegation: a send (or an answer's continuation) that has not ended yet.
#[derive(Clone, Debug)]
struct Delegation {
    target: SessionId,
    msg: MsgId,
    lead: Option<SessionId>,
    mode: Mode,
    deadline: Instant,
    /// Set while an async delegation is paused on this turnId.
    asking: Option<TurnId>,
    /// Sender side of a cross-host delegation: how far the worker's gateway has taken it.
    remote: Option<RemoteBrief>,
}

/// A cross-host delegation as its sender knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RemoteBrief {
    /// Published; no INJECTED yet.
    Sent,
    /// The worker's gateway typed it (or, for an answer, it needs no typing) at this Unix ms
    /// on that gateway's clock — so a restart announced as starting later cannot have lost it.
    Typed { at_unix: u64 },
}

/// An async ticket as the lead will see it.
#[derive(Clone, Debug)]
struct Ticket {
    target: SessionId,
    lead: Option<SessionId>,
    phase: Phase,
    outcome: Option<Outcome>,
    body: Option<String>,
    question: Option<String>,
    turn_id: Option<TurnId>,
    completed_at: Option<Instant>,
}

/// Running counters for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub sends_total: u64,
    pub replies_total: u64,
    pub push_nudges_total: u64,
    pub auth_failures_total: u64,
    pub injections_total: u64,
    pub spawns_total: u64,
}

/// The single-host delivery core.
///
/// Run loop: after every `handle`, drain `poll_output` until `None`, carry each output out,
/// then sleep until `poll_timeout` (or the next input) and `handle(now, Input::Tick)`.
///
/// ```no_run
/// use fleet_core::{CoreConfig, Gateway, Input, Instant};
/// let mut gw = Gateway::new(CoreConfig::default(), 42, Instant::ZERO).expect("valid config");
/// loop {
///     while let Some(out) = gw.poll_output() { /* carry it out; results come back as inputs */ let _ = out; }
///     let Some((at, _why)) = gw.poll_timeout() else { break };
///     gw.handle(at, Input::Tick);
/// }
/// ```
#[derive(Debug)]
pub struct Gateway {
    cfg: CoreConfig,
    compiled: Compiled,
    ids: IdMint,
    now: Instant,
    injector: Injector,
    rendezvous: Rendezvous,
    inbox: ReplyInbox,
    push: Push,
    delegations: BTreeMap<TicketId, Delegation>,
    tickets: BTreeMap<TicketId, Ticket>,
    /// Async tickets paused on a question, by the turnId that answers them.
    asking_tickets: BTreeMap<TurnId, TicketId>,
    /// The message of each session's latest delivered turn: what a reply or an ask belongs to.
    turns: BTreeMap<SessionId, MsgId>,
    /// The lead pane that last delegated to each target (CB-532): who to nudge.
    last_delegator: BTreeMap<SessionId, SessionId>,
    /// Who sent each queued message: it becomes its target's `last_delegator` only when typed,
    /// so a turn still running an older brief does not hand its reply to a newer sender.
    delegator_of: BTreeMap<MsgId, SessionId>,
    /// Nudge messages in the injector, by the lead they remind.
    nudges: BTreeMap<MsgId, SessionId>,
    timers: BTreeSet<(Instant, TimerKind)>,
    sessions: Sessions,
    /// Single-host mode: this host's name (`local` unless `named`), and the entities it serves
    /// (federation keeps its own, announced, set).
    host: HostId,
    solo: BTreeMap<SessionId, crate::roster::EntityKind>,
    reap_armed: bool,
    next_poll: Option<Instant>,
    out: VecDeque<Output>,
    stats: Stats,
    /// Cross-host state; `None` in single-host mode, where every path is local.
    fed: Option<Fed>,
    spawns: Spawns,
}

impl Gateway {
    /// A gateway whose ids come from `seed` and whose clock starts at `now`. Ids are dedup keys
    /// across hosts: a daemon must draw a fresh seed on every start (only the simulation
    /// reuses one, to replay a run).
    pub fn new(cfg: CoreConfig, seed: u64, now: Instant) -> Result<Self, ConfigError> {
        let compiled = cfg.validate()?;
        let bounds = Bounds {
            pickup_grace_polls: cfg.pickup_grace_polls,
            stall_grace_polls: cfg.stall_grace_polls,
            readiness_grace_polls: cfg.readiness_grace_polls,
            post_turn_settle: Duration::from_millis(cfg.post_turn_settle_ms),
            io_timeout: Duration::from_millis(cfg.io_timeout_ms),
        };
        Ok(Gateway {
            inbox: ReplyInbox::new(cfg.inbox_cap_per_target),
            push: Push::new(
                cfg.nudge_max_reminders,
                Duration::from_millis(cfg.nudge_interval_ms),
            ),
            injector: Injector::new(bounds),
            rendezvous: Rendezvous::new(),
            compiled,
            cfg,
            ids: IdMint::from_seed(seed),
            now,
            delegations: BTreeMap::new(),
            tickets: BTreeMap::new(),
            asking_tickets: BTreeMap::new(),
            turns: BTreeMap::new(),
            last_delegator: BTreeMap::new(),
            delegator_of: BTreeMap::new(),
            nudges: BTreeMap::new(),
            timers: BTreeSet::new(),
            sessions: Sessions::default(),
            host: HostId::new("local"),
            solo: BTreeMap::new(),
            reap_armed: false,
            next_poll: None,
            out: VecDeque::new(),
            stats: Stats::default(),
            fed: None,
            spawns: Spawns::default(),
        })
    }

    /// Names a single-host gateway's host (roster rows, spawn answers). A federated gateway's
    /// host is its federation's.
    pub fn named(mut self, host: HostId) -> Self {
        self.host = host;
        self
    }

    pub fn config(&self) -> &CoreConfig {
        &self.cfg
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Held replies across all targets (`fleet_inbox_depth`).
    pub fn inbox_depth(&self) -> usize {
        self.inbox.total()
    }

    /// Member sessions by state (`fleet_sessions{state}`).
    pub fn sessions(&self) -> BTreeMap<SessionState, usize> {
        self.sessions.counts()
    }

    /// Member `gid`'s session state, if it is a member here.
    pub fn session(&self, gid: &SessionId) -> Option<SessionState> {
        self.sessions.state(gid)
    }

    /// Spawns reserved and not yet ready or failed (`fleet_sessions{state="spawning"}`).
    pub fn spawns_in_flight(&self) -> usize {
        self.spawns.reserved()
    }

    /// Open delegations (sends not yet ended).
    pub fn open_delegations(&self) -> usize {
        self.delegations.len()
    }

    /// Something happened at `now`. Time never runs backwards here: an earlier `now` is
    /// treated as the latest one seen.
    pub fn handle(&mut self, now: Instant, input: Input) {
        let now = now.max(self.now);
        self.now = now;
        match input {
            Input::Call {
                call,
                caller,
                request,
            } => self.on_call(now, call, caller, request),
            Input::StatusSampled {
                target,
                status,
                screen,
            } => {
                let status = completion::refine(status, screen.as_deref(), &self.compiled);
                self.injector.on_sample(now, &target, status);
            }
            Input::StatusHint { target } => {
                if self.injector.is_active(&target) {
                    self.out.push_back(Output::PollStatus { target });
                }
            }
            Input::Injected {
                target,
                msg,
                result,
            } => self.on_injected(&target, msg, result),
            Input::PaneRead {
                target,
                msg,
                result,
            } => self.on_pane_read(now, &target, msg, result),
            Input::MemberStarted { target } => {
                self.injector.gate(&target);
                self.local_entity(&target, crate::roster::EntityKind::Member, false);
            }
            Input::MemberConnected { target } => self.member_connected(&target),
            Input::Spawned { gid, result } => self.on_spawned(now, gid, result),
            Input::LeadAttached { lead } => {
                self.local_entity(&lead, crate::roster::EntityKind::Lead, true)
            }
            Input::Broker(ev) => self.on_broker(now, ev),
            Input::WallClock { unix_ms } => self.on_wall_clock(now, unix_ms),
            Input::PaneGone { target } => self.on_pane_gone(now, &target),
            Input::Shutdown => self.abandon_all(now),
            Input::Tick => self.on_tick(now),
        }
        self.settle(now);
    }

    /// The next thing to do, in the order decided.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// When to call `handle(_, Input::Tick)` even if nothing arrives.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<(Instant, TimerKind)> {
        let mut best = self.timers.first().cloned();
        for (at, kind) in [
            (self.next_poll, TimerKind::StatusPoll),
            (self.injector.next_deadline(), TimerKind::Injector),
        ] {
            if let Some(at) = at {
                if best.as_ref().is_none_or(|(b, _)| at < *b) {
                    best = Some((at, kind));
                }
            }
        }
        best
    }

    // ---- after every input -------------------------------------------------------------

    fn settle(&mut self, now: Instant) {
        self.drain_injector(now);
        self.pump_nudges(now);
        self.drain_injector(now);
        if self.next_poll.is_none() && self.injector.has_active() {
            self.next_poll = Some(now + self.cfg.poll_interval());
        }
    }

    fn drain_injector(&mut self, now: Instant) {
        while let Some(ev) = self.injector.poll_event() {
            match ev {
                InjectorEvent::Inject { target, msg, text } => {
                    self.stats.injections_total += 1;
                    self.out.push_back(Output::Inject { target, msg, text });
                }
                InjectorEvent::Delivered { target, msg } => {
                    if let Some(lead) = self.delegator_of.remove(&msg) {
                        self.last_delegator.insert(target.clone(), lead);
                    }
                    self.turns.insert(target.clone(), msg);
                    self.session_to(&target, IDLE, SessionState::Busy);
                    self.remote_injected(now, &target, msg);
                    if let Some(lead) = self.nudges.remove(&msg) {
                        if let Some(at) = self.push.delivered(now, &lead, msg) {
                            self.timers.insert((at, TimerKind::Nudge));
                        }
                    }
                    self.event(Event::Delivered { target, msg });
                }
                InjectorEvent::TurnComplete {
                    target,
                    msg,
                    missed_fast_turn,
                } => {
                    self.event(Event::TurnComplete {
                        target: target.clone(),
                        msg,
                        missed_fast_turn,
                    });
                    self.session_to(&target, &[SessionState::Busy], SessionState::Done);
                    // A missed fast turn is inferred, not seen (Figure 6 takes it straight back to
                    // Quiescent): its waiter stays open for a reply or the timeout.
                    let captured = self
                        .rendezvous
                        .waiter(&target, msg)
                        .is_some_and(|w| w.baseline.is_some());
                    if captured && !missed_fast_turn {
                        self.injector.hold(now, &target, msg);
                        self.out.push_back(Output::ReadPane { target, msg });
                    }
                }
                InjectorEvent::TurnFailed { target, msg, cause } => {
                    let why = cause.to_string();
                    self.event(Event::TurnFailed {
                        target: target.clone(),
                        msg,
                        cause,
                    });
                    self.session_to(&target, &[SessionState::Busy], SessionState::Failed);
                    if let Some(r) = self.rendezvous.resolve(&target, msg, Kind::Failed) {
                        self.finish(now, r.ticket, Outcome::WorkerFailed, Some(why), None);
                    }
                }
                InjectorEvent::Dropped { target, msg, cause } => {
                    self.delegator_of.remove(&msg);
                    if let Some(lead) = self.nudges.remove(&msg) {
                        if let Some(at) = self.push.failed(now, &lead, msg) {
                            self.timers.insert((at, TimerKind::Nudge));
                        }
                    }
                    let why = cause.to_string();
                    let sender_gave_up = cause == Cause::SenderTimedOut;
                    self.event(Event::Dropped {
                        target: target.clone(),
                        msg,
                        cause,
                    });
                    if !sender_gave_up {
                        if let Some(r) = self.rendezvous.take(&target, msg, Kind::Failed) {
                            self.finish(now, r.ticket, Outcome::WorkerFailed, Some(why), None);
                        }
                    }
                }
            }
        }
    }

    fn pump_nudges(&mut self, now: Instant) {
        for (lead, pending) in self.push.due(now) {
            let msg = self.ids.msg();
            let text = format!(
                "[fleet] {pending} item(s) are waiting for you: call fleet_poll to collect them."
            );
            self.injector.enqueue(&lead, msg, text);
            self.push.queued(&lead, msg);
            self.nudges.insert(msg, lead.clone());
            self.stats.push_nudges_total += 1;
            self.event(Event::Nudged {
                lead: lead.clone(),
                msg,
                pending,
            });
            self.out.push_back(Output::PollStatus { target: lead });
        }
    }

    // ---- calls -------------------------------------------------------------------------

    fn on_call(&mut self, now: Instant, call: CallId, caller: Principal, request: Request) {
        let target = match &request {
            Request::Send { target, .. }
            | Request::Peek { target }
            | Request::Ack { target, .. }
            | Request::Drain { target }
            | Request::Status { target } => Some(target.clone()),
            Request::Reply { .. } | Request::Ask { .. } => caller.session.clone(),
            Request::Answer { turn_id, .. } => {
                self.rendezvous.ask(*turn_id).map(|a| a.session.clone())
            }
            Request::Poll { ticket } => self.tickets.get(ticket).map(|t| t.target.clone()),
            Request::Stop { target } => Some(target.clone()),
            Request::Spawn { .. } | Request::Broadcast { .. } | Request::List => None,
        };
        let action = request.action();
        let decision = authz::permits(&caller, action, target.as_ref());
        let allowed = decision.allowed;
        self.out.push_back(Output::Audit(decision));
        if !allowed {
            self.stats.auth_failures_total += 1;
            let err = if matches!(request, Request::Reply { .. } | Request::Ask { .. })
                && caller.session.is_none()
                && caller.role != authz::Role::Anonymous
            {
                CallError::NoSession
            } else {
                CallError::Denied {
                    role: caller.role.as_str().to_string(),
                    action,
                }
            };
            return self.respond(call, Response::Error(err));
        }
        if let Some(len) = request.content_len() {
            if len > self.cfg.max_body_bytes {
                let why = format!(
                    "the message is {len} bytes; this gateway takes at most {} (core.max_body_bytes)",
                    self.cfg.max_body_bytes
                );
                return self.invalid(call, &why);
            }
        }
        match request {
            Request::Send {
                target,
                content,
                wait,
                timeout_ms,
            } => self.on_send(now, call, &caller, target, content, wait, timeout_ms),
            Request::Answer {
                turn_id,
                content,
                wait,
                timeout_ms,
                asked_by,
            } => {
                let owner = self
                    .rendezvous
                    .ask(turn_id)
                    .map(|a| a.session.clone())
                    .or_else(|| self.remote_asker(turn_id));
                if let (Some(named), Some(owner)) = (asked_by, owner) {
                    if named != owner {
                        let why = format!("turn {turn_id} was asked by {owner}, not {named}");
                        return self.invalid(call, &why);
                    }
                }
                self.on_answer(now, call, &caller, turn_id, content, wait, timeout_ms)
            }
            Request::Reply { content } => match caller.session {
                Some(s) => self.on_reply(now, call, s, content),
                None => self.respond(call, Response::Error(CallError::NoSession)),
            },
            Request::Ask {
                question,
                timeout_ms,
            } => match caller.session {
                Some(s) => self.on_ask(now, call, s, question, timeout_ms),
                None => self.respond(call, Response::Error(CallError::NoSession)),
            },
            Request::Poll { ticket } => self.on_poll(call, ticket),
            Request::Peek { target } => {
                let replies = self.inbox.peek(&target);
                self.respond(call, Response::Replies { replies });
            }
            Request::Ack { target, ids } => {
                let acked = self.inbox.ack(&target, &ids);
                self.collected(&acked);
                self.respond(call, Response::Acked { count: acked.len() });
            }
            Request::Drain { target } => {
                let replies = self.inbox.drain(&target);
                self.collected(&replies);
                self.respond(call, Response::Replies { replies });
            }
            Request::Status { target } => {
                let view = self.injector.view(&target);
                self.respond(call, Response::Status { target, view });
            }
            Request::List => {
                let rows = self.roster();
                self.respond(call, Response::Roster { rows });
            }
            Request::Spawn {
                host,
                profile,
                group,
                worktree,
            } => {
                let spec = SpawnSpec {
                    profile,
                    group,
                    worktree,
                };
                self.on_spawn(now, call, caller.session.clone(), host, spec)
            }
            Request::Stop { target } => self.on_stop(now, call, target),
            Request::Broadcast { group, content } => {
                self.on_broadcast(call, &caller, group, content)
            }
        }
    }

    fn timeout(&self, timeout_ms: Option<u64>, default_ms: u64) -> Result<Duration, CallError> {
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

    #[allow(clippy::too_many_arguments)]
    fn on_send(
        &mut self,
        now: Instant,
        call: CallId,
        caller: &Principal,
        target: SessionId,
        content: String,
        wait: bool,
        timeout_ms: Option<u64>,
    ) {
        let timeout = match self.timeout(timeout_ms, self.cfg.send_timeout_ms) {
            Ok(t) => t,
            Err(e) => return self.respond(call, Response::Error(e)),
        };
        if content.trim().is_empty() {
            return self.invalid(call, "content must not be empty");
        }
        if caller.session.as_ref() == Some(&target) {
            return self.invalid(call, "a caller cannot delegate to its own session");
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
            return self.send_remote(now, call, caller, target, content, wait, timeout);
        }
        self.stats.sends_total += 1;
        let ticket = self.ids.ticket();
        let msg = self.ids.msg();
        if let Some(lead) = &caller.session {
            self.delegator_of.insert(msg, lead.clone());
        }
        self.rendezvous.open(&target, msg, ticket);
        self.injector.enqueue(&target, msg, content);
        self.open_delegation(now, call, ticket, &target, msg, caller, wait, timeout);
        self.event(Event::Enqueued {
            ticket: Some(ticket),
            target: target.clone(),
            msg,
        });
        self.out.push_back(Output::PollStatus { target });
    }

    #[allow(clippy::too_many_arguments)]
    fn open_delegation(
        &mut self,
        now: Instant,
        call: CallId,
        ticket: TicketId,
        target: &SessionId,
        msg: MsgId,
        caller: &Principal,
        wait: bool,
        timeout: Duration,
    ) {
        let deadline = now + timeout;
        self.delegations.insert(
            ticket,
            Delegation {
                target: target.clone(),
                msg,
                lead: caller.session.clone(),
                mode: if wait {
                    Mode::Blocking(call)
                } else {
                    Mode::Async
                },
                deadline,
                asking: None,
                remote: None,
            },
        );
        self.timers
            .insert((deadline, TimerKind::SendDeadline(ticket)));
        if !wait {
            let t = Ticket {
                target: target.clone(),
                lead: caller.session.clone(),
                phase: Phase::Pending,
                outcome: None,
                body: None,
                question: None,
                turn_id: None,
                completed_at: None,
            };
            let view = ticket_view(ticket, &t);
            self.tickets.insert(ticket, t);
            self.respond(call, Response::Ticket(view));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_answer(
        &mut self,
        now: Instant,
        call: CallId,
        caller: &Principal,
        turn_id: TurnId,
        content: String,
        wait: bool,
        timeout_ms: Option<u64>,
    ) {
        let timeout = match self.timeout(timeout_ms, self.cfg.send_timeout_ms) {
            Ok(t) => t,
            Err(e) => return self.respond(call, Response::Error(e)),
        };
        if self.is_remote_ask(turn_id) {
            return self.answer_remote(now, call, caller, turn_id, content, wait, timeout);
        }
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
        self.end_ask(&ask, turn_id, AskOutcome::Answered, Some(content.clone()));
        let baseline = ask.baseline.unwrap_or_default();
        if let Some(ticket) = self.asking_tickets.remove(&turn_id) {
            // The async delegation that asked resumes on the same turn.
            self.resume_ticket(now, ticket, &session, ask.msg, baseline, Some(timeout));
            if let Some(t) = self.tickets.get(&ticket) {
                let view = ticket_view(ticket, t);
                self.respond(call, Response::Ticket(view));
            }
            return;
        }
        self.stats.sends_total += 1;
        let ticket = self.ids.ticket();
        self.rendezvous
            .open_captured(&session, ask.msg, ticket, baseline);
        self.open_delegation(now, call, ticket, &session, ask.msg, caller, wait, timeout);
    }

    /// An async delegation to `target` is paused on a question: still open, though it has no
    /// waiter until the answer.
    fn paused_ticket_on(&self, target: &SessionId) -> bool {
        self.rendezvous
            .ask_of(target)
            .is_some_and(|turn| self.asking_tickets.contains_key(&turn))
    }

    /// Puts a paused async ticket back on its turn: PENDING, with a captured waiter again.
    fn resume_ticket(
        &mut self,
        now: Instant,
        ticket: TicketId,
        session: &SessionId,
        msg: MsgId,
        baseline: String,
        timeout: Option<Duration>,
    ) {
        let Some(d) = self.delegations.get_mut(&ticket) else {
            return;
        };
        d.asking = None;
        if let Some(timeout) = timeout {
            d.deadline = now + timeout;
            self.timers
                .insert((d.deadline, TimerKind::SendDeadline(ticket)));
        }
        let lead = d.lead.clone();
        self.rendezvous
            .open_captured(session, msg, ticket, baseline);
        if let Some(t) = self.tickets.get_mut(&ticket) {
            t.phase = Phase::Pending;
            t.question = None;
            t.turn_id = None;
        }
        if let Some(lead) = lead {
            self.uncollect(&lead, &Attention::Ticket(ticket));
        }
    }

    fn on_reply(&mut self, now: Instant, call: CallId, session: SessionId, content: String) {
        self.stats.replies_total += 1;
        let resolved = self
            .turns
            .get(&session)
            .and_then(|m| self.rendezvous.resolve(&session, *m, Kind::Reply));
        if let Some(r) = resolved {
            let remote = matches!(
                self.delegations.get(&r.ticket).map(|d| &d.mode),
                Some(Mode::Remote { .. })
            );
            if remote {
                // Accepted only once the broker has it (answered at the report's confirm).
                self.answer_reply_on_confirm(call);
                return self.finish(now, r.ticket, Outcome::Replied, Some(content), None);
            }
            self.finish(now, r.ticket, Outcome::Replied, Some(content), None);
            return self.respond(call, Response::ReplyAccepted { held: None });
        }
        if self.retry_unsent_reply(call, &session, &content) {
            return;
        }
        let lead = self.last_delegator.get(&session).cloned();
        if let Some(remote_lead) = lead.clone().filter(|l| self.is_remote(l)) {
            return self.reply_to_remote_lead(now, call, &session, &remote_lead, content);
        }
        let id = self.ids.reply();
        let held = HeldReply {
            id,
            target: session.clone(),
            lead: lead.clone(),
            content,
            at: now,
        };
        match self.inbox.push(held) {
            Ok(()) => {
                self.event(Event::ReplyHeld {
                    target: session.clone(),
                    reply: id,
                    lead: lead.clone(),
                });
                if let Some(lead) = lead {
                    self.push.add(
                        &lead,
                        Attention::Reply {
                            target: session,
                            id,
                        },
                    );
                }
                self.respond(call, Response::ReplyAccepted { held: Some(id) });
            }
            Err(full) => self.respond(
                call,
                Response::Error(CallError::InboxFull {
                    target: session,
                    cap: full.cap,
                }),
            ),
        }
    }

    fn on_ask(
        &mut self,
        now: Instant,
        call: CallId,
        session: SessionId,
        question: String,
        timeout_ms: Option<u64>,
    ) {
        let timeout = match self.timeout(timeout_ms, self.cfg.ask_timeout_ms) {
            Ok(t) => t,
            Err(e) => return self.respond(call, Response::Error(e)),
        };
        if let Some(turn_id) = self.rendezvous.ask_of(&session) {
            let msg = self.rendezvous.ask(turn_id).map(|a| a.msg);
            if let Some(msg) = msg {
                self.rendezvous
                    .open_ask(&mut self.ids, &session, msg, &question, call, now);
                self.event(Event::Asked {
                    target: session,
                    turn_id,
                    coalesced: true,
                });
                return;
            }
        }
        let captured = self.turns.get(&session).copied().filter(|m| {
            self.rendezvous
                .waiter(&session, *m)
                .is_some_and(|w| w.baseline.is_some())
        });
        let Some(msg) = captured else {
            return self.respond(
                call,
                Response::Ask {
                    outcome: AskOutcome::NoWaiter,
                    turn_id: None,
                    answer: None,
                },
            );
        };
        let deadline = now + timeout;
        let (AskOpen::Fresh(turn_id) | AskOpen::Coalesced(turn_id)) =
            self.rendezvous
                .open_ask(&mut self.ids, &session, msg, &question, call, deadline);
        self.timers
            .insert((deadline, TimerKind::AskDeadline(turn_id)));
        self.injector.set_asking(&session, true);
        self.event(Event::Asked {
            target: session.clone(),
            turn_id,
            coalesced: false,
        });
        if let Some(r) = self.rendezvous.take(&session, msg, Kind::Question) {
            self.question(now, r.ticket, question, turn_id);
        }
    }

    /// The waiter of `ticket` was resolved by a question.
    fn question(&mut self, now: Instant, ticket: TicketId, question: String, turn_id: TurnId) {
        let Some(d) = self.delegations.get(&ticket) else {
            return;
        };
        match &d.mode {
            Mode::Blocking(_) => self.finish(
                now,
                ticket,
                Outcome::Question,
                Some(question),
                Some(turn_id),
            ),
            Mode::Remote { reply_to, re } => {
                let (reply_to, re, target) = (reply_to.clone(), *re, d.target.clone());
                if let Some(d) = self.delegations.get_mut(&ticket) {
                    d.asking = Some(turn_id);
                }
                self.asking_tickets.insert(turn_id, ticket);
                self.event(Event::Resolved {
                    ticket,
                    target: target.clone(),
                    outcome: Outcome::Question,
                });
                self.publish_ask(now, &target, &reply_to, re, turn_id, question);
            }
            Mode::Async => {
                let (target, lead) = (d.target.clone(), d.lead.clone());
                if let Some(t) = self.tickets.get_mut(&ticket) {
                    t.phase = Phase::Asking;
                    t.question = Some(question);
                    t.turn_id = Some(turn_id);
                }
                self.asking_tickets.insert(turn_id, ticket);
                if let Some(d) = self.delegations.get_mut(&ticket) {
                    d.asking = Some(turn_id);
                }
                self.event(Event::Resolved {
                    ticket,
                    target,
                    outcome: Outcome::Question,
                });
                if let Some(lead) = lead {
                    self.push.add(&lead, Attention::Ticket(ticket));
                }
            }
        }
    }

    fn on_poll(&mut self, call: CallId, ticket: TicketId) {
        let Some(t) = self.tickets.get(&ticket) else {
            return self.respond(call, Response::Error(CallError::UnknownTicket));
        };
        let view = ticket_view(ticket, t);
        if let Some(lead) = t.lead.clone() {
            if t.phase != Phase::Pending {
                self.uncollect(&lead, &Attention::Ticket(ticket));
            }
        }
        if view.phase.is_terminal() {
            self.ticket_collected(ticket);
        }
        self.respond(call, Response::Ticket(view));
    }

    /// The lead collected these held replies: stop nudging about them.
    fn collected(&mut self, replies: &[HeldReply]) {
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

    fn uncollect(&mut self, lead: &SessionId, item: &Attention) {
        if let Some(nudge) = self.push.remove(lead, item) {
            self.injector.withdraw(lead, nudge, Cause::Drained);
        }
    }

    // ---- driver answers ----------------------------------------------------------------

    fn on_injected(&mut self, target: &SessionId, msg: MsgId, result: Result<String, String>) {
        let (ack, baseline) = match result {
            Ok(baseline) => (Ok(()), Some(baseline)),
            Err(why) => (Err(why), None),
        };
        if !self.injector.on_injected(target, msg, ack) {
            return self.event(Event::Stale {
                what: format!("injected msg={msg}"),
                target: target.clone(),
            });
        }
        if let Some(baseline) = baseline {
            self.rendezvous.capture(target, msg, baseline);
        }
    }

    fn on_pane_read(
        &mut self,
        now: Instant,
        target: &SessionId,
        msg: MsgId,
        result: Result<String, String>,
    ) {
        if !self.injector.release(now, target, msg) {
            // The hold expired and the next turn may be running: this text is not turn `msg`'s.
            return self.event(Event::Stale {
                what: format!("pane read msg={msg}"),
                target: target.clone(),
            });
        }
        let Some(baseline) = self
            .rendezvous
            .waiter(target, msg)
            .and_then(|w| w.baseline.clone())
        else {
            // Already resolved (a reply raced the scrape) or timed out: nothing to do.
            return;
        };
        let scrape = match result {
            Ok(s) => s,
            Err(why) => {
                // The waiter stays open: a reply or the timeout still ends it.
                return self.event(Event::Stale {
                    what: format!("pane read failed: {why}"),
                    target: target.clone(),
                });
            }
        };
        match completion::resolve(&scrape, &baseline, &self.compiled) {
            Verdict::Suppressed => self.event(Event::Suppressed {
                target: target.clone(),
                msg,
            }),
            Verdict::Exhausted { matched } => {
                if let Some(r) = self.rendezvous.resolve(target, msg, Kind::BackendExhausted) {
                    self.finish(
                        now,
                        r.ticket,
                        Outcome::BackendExhausted,
                        Some(matched),
                        None,
                    );
                }
            }
            Verdict::Completed { text } => {
                if let Some(r) = self.rendezvous.resolve(target, msg, Kind::Completion) {
                    self.finish(now, r.ticket, Outcome::CompletedUnreplied, Some(text), None);
                }
            }
        }
    }

    fn on_pane_gone(&mut self, now: Instant, target: &SessionId) {
        self.injector.abort_target(target, Cause::PaneGone);
        self.drain_injector(now);
        if let Some(turn_id) = self.rendezvous.ask_of(target) {
            self.close_ask_timed_out(now, turn_id, false);
        }
        for r in self.rendezvous.take_all(target, Kind::Failed) {
            self.finish(
                now,
                r.ticket,
                Outcome::WorkerFailed,
                Some(Cause::PaneGone.to_string()),
                None,
            );
        }
        let asking: Vec<TicketId> = self
            .delegations
            .iter()
            .filter(|(_, d)| &d.target == target)
            .map(|(t, _)| *t)
            .collect();
        for ticket in asking {
            self.finish(
                now,
                ticket,
                Outcome::WorkerFailed,
                Some(Cause::PaneGone.to_string()),
                None,
            );
        }
        self.turns.remove(target);
        self.sessions.remove(target);
        self.local_entity_gone(target);
        self.last_delegator.remove(target);
        if self.push.forget(target) {
            // A lead pane died: nothing can be typed into it; its items stay collectable.
            self.last_delegator.retain(|_, lead| lead != target);
        }
    }

    // ---- time --------------------------------------------------------------------------

    fn on_tick(&mut self, now: Instant) {
        self.injector.on_timer(now);
        while let Some((at, kind)) = self.timers.first().cloned() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            match kind {
                TimerKind::SendDeadline(ticket) => self.on_send_deadline(now, ticket),
                TimerKind::AskDeadline(turn_id) => {
                    let due = self
                        .rendezvous
                        .ask(turn_id)
                        .is_some_and(|a| a.deadline <= now);
                    if due {
                        self.close_ask_timed_out(now, turn_id, true);
                    }
                }
                TimerKind::TicketExpiry(ticket) => {
                    let expired = self
                        .tickets
                        .get(&ticket)
                        .is_some_and(|t| t.completed_at.is_some_and(|c| c + self.ttl() <= now));
                    if expired {
                        if let Some(t) = self.tickets.remove(&ticket) {
                            if let Some(lead) = t.lead {
                                self.uncollect(&lead, &Attention::Ticket(ticket));
                            }
                        }
                        self.event(Event::TicketExpired { ticket });
                    }
                }
                TimerKind::Nudge => self.push.wake(),
                TimerKind::InjectBy(ticket) => self.on_inject_by(now, ticket),
                TimerKind::Presence => self.on_presence_tick(now),
                TimerKind::HeldSweep => self.on_held_sweep(now),
                TimerKind::Spawn(gid) => self.on_spawn_timer(now, gid),
                TimerKind::Reap => self.on_reap(now),
                TimerKind::StatusPoll | TimerKind::Injector => {}
            }
        }
        if self.next_poll.is_some_and(|p| p <= now) {
            self.next_poll = None;
            let targets: Vec<SessionId> = self.injector.active_targets().cloned().collect();
            for target in targets {
                self.out.push_back(Output::PollStatus { target });
            }
        }
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(self.cfg.ticket_ttl_ms)
    }

    fn on_send_deadline(&mut self, now: Instant, ticket: TicketId) {
        let Some(d) = self.delegations.get(&ticket) else {
            return;
        };
        if d.deadline > now {
            return;
        }
        let (target, msg) = (d.target.clone(), d.msg);
        let proxy = matches!(d.mode, Mode::Remote { .. });
        let remote = d.remote;
        let withdrawn = self.injector.withdraw(&target, msg, Cause::SenderTimedOut);
        if proxy {
            // Worker side: once typed, the turn runs to its end (the sender owns the timeout);
            // still queued at the brief's expiry, it is withdrawn — never typed late — and the
            // sender hears a failure, not a timeout.
            if withdrawn {
                self.rendezvous.take(&target, msg, Kind::Failed);
                let why = "not injected before the brief expired (the worker stayed busy or \
                           unready): withdrawn, never typed"
                    .to_string();
                self.finish(now, ticket, Outcome::WorkerFailed, Some(why), None);
            }
            return;
        }
        let outcome = match remote {
            Some(RemoteBrief::Sent) => Outcome::TimedOutQueued,
            Some(RemoteBrief::Typed { .. }) => Outcome::TimedOutWorking,
            None if withdrawn => Outcome::TimedOutQueued,
            None => Outcome::TimedOutWorking,
        };
        self.rendezvous.take(&target, msg, Kind::Failed);
        self.finish(now, ticket, outcome, None, None);
    }

    /// An ask ended without an answer. An async ticket paused on it resumes its turn.
    fn close_ask_timed_out(&mut self, now: Instant, turn_id: TurnId, resume: bool) {
        let Some(ask) = self.rendezvous.close_ask(turn_id) else {
            return;
        };
        self.end_ask(&ask, turn_id, AskOutcome::TimedOut, None);
        if let Some(ticket) = self.asking_tickets.remove(&turn_id) {
            if resume {
                let baseline = ask.baseline.unwrap_or_default();
                self.resume_ticket(now, ticket, &ask.session, ask.msg, baseline, None);
            }
        }
    }

    // ---- endings -----------------------------------------------------------------------

    /// A closed ask ends: every coalesced `fleet_ask` call gets the same answer, and the
    /// member's paused turn resumes.
    fn end_ask(
        &mut self,
        ask: &crate::rendezvous::Ask,
        turn_id: TurnId,
        outcome: AskOutcome,
        answer: Option<String>,
    ) {
        for c in &ask.calls {
            self.respond(
                *c,
                Response::Ask {
                    outcome,
                    turn_id: Some(turn_id),
                    answer: answer.clone(),
                },
            );
        }
        self.event(Event::AskClosed {
            target: ask.session.clone(),
            turn_id,
            outcome,
        });
        self.injector.set_asking(&ask.session, false);
    }

    /// Ends a delegation with its one outcome.
    fn finish(
        &mut self,
        now: Instant,
        ticket: TicketId,
        outcome: Outcome,
        body: Option<String>,
        turn_id: Option<TurnId>,
    ) {
        let Some(d) = self.delegations.remove(&ticket) else {
            return;
        };
        if let Some(turn) = d.asking {
            self.asking_tickets.remove(&turn);
        }
        self.forget_remote_waiter(d.msg);
        self.event(Event::Resolved {
            ticket,
            target: d.target.clone(),
            outcome,
        });
        match d.mode {
            Mode::Blocking(call) => self.respond(
                call,
                Response::Outcome {
                    ticket: Some(ticket),
                    outcome,
                    body,
                    turn_id,
                },
            ),
            Mode::Remote { reply_to, re } => {
                self.late_ack(d.msg);
                self.publish_outcome(now, &d.target, &reply_to, re, outcome, body)
            }
            Mode::Async => {
                let ttl = self.ttl();
                if let Some(t) = self.tickets.get_mut(&ticket) {
                    t.phase = outcome.phase();
                    t.outcome = Some(outcome);
                    t.body = body;
                    t.question = None;
                    t.turn_id = None;
                    t.completed_at = Some(now);
                    self.timers
                        .insert((now + ttl, TimerKind::TicketExpiry(ticket)));
                }
                if let Some(lead) = d.lead {
                    self.push.add(&lead, Attention::Ticket(ticket));
                }
            }
        }
    }

    fn respond(&mut self, call: CallId, response: Response) {
        self.out.push_back(Output::Respond { call, response });
    }

    fn invalid(&mut self, call: CallId, reason: &str) {
        self.respond(
            call,
            Response::Error(CallError::InvalidArgument {
                reason: reason.to_string(),
            }),
        );
    }

    fn event(&mut self, e: Event) {
        self.out.push_back(Output::Event(e));
    }
}

fn ticket_view(ticket: TicketId, t: &Ticket) -> TicketView {
    TicketView {
        ticket,
        target: t.target.clone(),
        phase: t.phase,
        outcome: t.outcome,
        body: t.body.clone(),
        question: t.question.clone(),
        turn_id: t.turn_id,
    }
}
