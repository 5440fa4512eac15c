//! The gateway's vocabulary: what happened (`Input`), what to do (`Output`), what a caller
//! asked (`Request`) and is told (`Response`), and the trace (`Event`).

use crate::authz::{Action, AuditEvent, Principal, Role};
use crate::broker::{BrokerEvent, BrokerOp, DeliveryId};
use crate::envelope::Kind;
use crate::ids::{CallId, HostId, MsgId, ReplyId, SessionId, TicketId, TurnId};
use crate::inbox::HeldReply;
use crate::injector::{Cause, TargetView};
use crate::outcome::{AskOutcome, Outcome, Phase};
use crate::roster::{EntityKind, Liveness, RosterRow};
use crate::session::SessionState;
use crate::status::AgentStatus;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Something that happened. Fed to `Gateway::handle` with the time it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// A north-face call (MCP or REST) from an already-resolved principal.
    Call {
        call: CallId,
        caller: Principal,
        request: Request,
    },
    /// The answer to `Output::PollStatus`. `screen` is the pane text, which the driver attaches
    /// when herdr says `unknown` so the core can refine it.
    StatusSampled {
        target: SessionId,
        status: AgentStatus,
        screen: Option<String>,
    },
    /// The answer to `Output::Inject`: the baseline read just before typing, or why it failed.
    Injected {
        target: SessionId,
        msg: MsgId,
        result: Result<String, PaneError>,
    },
    /// The answer to `Output::ReadPane`: the post-turn scrape of turn `msg`.
    PaneRead {
        target: SessionId,
        msg: MsgId,
        result: Result<String, PaneError>,
    },
    /// A member pane was started; nothing is typed into it until `MemberConnected`.
    MemberStarted { target: SessionId },
    /// At start: every member pane herdr lists (its `fleet:<gid>` label). Each is gated, then
    /// adopted or closed by the core's restart rule (`gateway::adoption`).
    MembersListed { members: Vec<SessionId> },
    /// The member connected to this gateway's MCP: the real readiness signal (CB-306).
    MemberConnected { target: SessionId },
    /// The pane closed or its process exited.
    PaneGone { target: SessionId },
    /// herdr's event stream says the pane's status changed: sample it now instead of at the
    /// next poll. Only a hint — the sample it triggers is what the injector judges, so an
    /// event arriving late or out of order decides nothing.
    StatusHint { target: SessionId },
    /// A lead (or architect) with this gid is served by this gateway: it gets an inbox and
    /// is announced in the roster.
    LeadAttached { lead: SessionId },
    /// The answer to `Output::SpawnPane`: the pane exists (labelled `fleet:<gid>`) and how its
    /// readiness will be known, or why not.
    Spawned {
        gid: SessionId,
        result: Result<Readiness, String>,
    },
    /// Something the broker did (cross-host mode only).
    Broker(BrokerEvent),
    /// The wall clock read `unix_ms` at this `now` (for envelope stamps and expiry). Fed at
    /// start and whenever the driver notices the wall clock moved against the monotonic one.
    WallClock { unix_ms: u64 },
    /// The daemon is shutting down gracefully: delegations from other hosts still open here
    /// are reported ABANDONED to their senders (nothing will feed their waiters now).
    Shutdown,
    /// `poll_timeout` was reached.
    Tick,
}

impl Input {
    /// The variant's name, for traces and invariant reports.
    pub fn name(&self) -> &'static str {
        match self {
            Input::Call { .. } => "call",
            Input::StatusSampled { .. } => "status_sampled",
            Input::Injected { .. } => "injected",
            Input::PaneRead { .. } => "pane_read",
            Input::MemberStarted { .. } => "member_started",
            Input::MembersListed { .. } => "members_listed",
            Input::MemberConnected { .. } => "member_connected",
            Input::PaneGone { .. } => "pane_gone",
            Input::StatusHint { .. } => "status_hint",
            Input::LeadAttached { .. } => "lead_attached",
            Input::Spawned { .. } => "spawned",
            Input::Broker(BrokerEvent::Up { .. }) => "broker_up",
            Input::Broker(BrokerEvent::Down) => "broker_down",
            Input::Broker(BrokerEvent::Delivery { .. }) => "broker_delivery",
            Input::Broker(BrokerEvent::Published { .. }) => "broker_published",
            Input::WallClock { .. } => "wall_clock",
            Input::Shutdown => "shutdown",
            Input::Tick => "tick",
        }
    }
}

/// Why herdr could not do what an output asked of a pane. The core acts on the difference:
/// a pane that is gone is not one that did not answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "error", content = "detail", rename_all = "snake_case")]
pub enum PaneError {
    /// herdr answered that no such pane exists (closed, or never was).
    #[error("pane_not_found")]
    NotFound,
    /// herdr did not answer, or refused: the pane's state is unknown.
    #[error("herdr unavailable: {0}")]
    Unavailable(String),
}

/// How a new member's readiness gate (CB-306) opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Readiness {
    /// When the member connects to this gateway's MCP (`Input::MemberConnected`).
    OnConnect,
    /// It already has: the launcher saw the pane's program reach an injectable status within
    /// the gate's bound (a `command` profile, which has no MCP connection to wait for).
    Ready,
}

/// A caller's request. Identity is the `Principal` beside it, never a field here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// `fleet_send`: delegate `content` to `target`; block until an outcome unless `wait` is false.
    Send {
        target: SessionId,
        content: String,
        wait: bool,
        timeout_ms: Option<u64>,
    },
    /// `fleet_send` with a `turnId`: answer a member's open question.
    Answer {
        turn_id: TurnId,
        content: String,
        wait: bool,
        timeout_ms: Option<u64>,
        /// The member the caller names as the asker (REST's `/sessions/{id}/message` path):
        /// an open turn asked by anyone else is refused, not answered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        asked_by: Option<SessionId>,
    },
    /// `fleet_reply`: the caller's own session replies to its current turn.
    Reply { content: String },
    /// `fleet_ask`: the caller's own session asks the lead waiting on its turn.
    Ask {
        question: String,
        timeout_ms: Option<u64>,
    },
    /// `fleet_poll(ticket)`: an async send's phase and, once done, its outcome.
    Poll { ticket: TicketId },
    /// Look at held replies without removing them.
    Peek { target: SessionId },
    /// Remove held replies after a peek.
    Ack {
        target: SessionId,
        ids: Vec<ReplyId>,
    },
    /// `fleet_poll(target)` / `GET /sessions/{id}/replies`: peek + ack.
    Drain { target: SessionId },
    /// `fleet_status`.
    Status { target: SessionId },
    /// `fleet_spawn`: start a member from `profile` on `host` (this host when absent).
    Spawn {
        host: Option<HostId>,
        profile: String,
        /// The broadcast group the member joins (`broadcast.<group>`), if any.
        group: Option<String>,
        /// A git worktree for the member to work in, if any.
        #[serde(default)]
        worktree: Option<crate::spawn_spec::Worktree>,
    },
    /// `fleet_list`: the fleet-wide roster as this gateway sees it (U5).
    List,
    /// `fleet_stop`: close a member's pane on this host; its inbox goes with it.
    Stop { target: SessionId },
    /// Broadcast (U8): the same text to every member, or to one group, fleet-wide.
    Broadcast {
        group: Option<String>,
        content: String,
    },
}

impl Request {
    /// The size of the text this request carries to a pane or a lead, if any.
    pub fn content_len(&self) -> Option<usize> {
        match self {
            Request::Send { content, .. }
            | Request::Answer { content, .. }
            | Request::Reply { content }
            | Request::Broadcast { content, .. } => Some(content.len()),
            Request::Ask { question, .. } => Some(question.len()),
            _ => None,
        }
    }

    pub fn action(&self) -> Action {
        match self {
            Request::Send { .. } | Request::Answer { .. } | Request::Poll { .. } => Action::Send,
            Request::Reply { .. } => Action::Reply,
            Request::Ask { .. } => Action::Ask,
            Request::Peek { .. } | Request::Ack { .. } | Request::Drain { .. } => Action::Drain,
            Request::Status { .. } | Request::List => Action::Read,
            Request::Spawn { .. } => Action::Spawn,
            Request::Stop { .. } => Action::Stop,
            Request::Broadcast { .. } => Action::Send,
        }
    }
}

/// What a call is told. Every call gets exactly one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Response {
    /// A blocking send or answer ended.
    Outcome {
        ticket: Option<TicketId>,
        outcome: Outcome,
        body: Option<String>,
        turn_id: Option<TurnId>,
    },
    /// An async ticket's state: the answer to `wait:false` and to `Poll`.
    Ticket(TicketView),
    /// A reply reached its waiter, or was held for the lead.
    ReplyAccepted {
        held: Option<ReplyId>,
    },
    /// A member's ask ended.
    Ask {
        outcome: AskOutcome,
        turn_id: Option<TurnId>,
        answer: Option<String>,
    },
    Replies {
        replies: Vec<ReplyView>,
    },
    Acked {
        count: usize,
    },
    Status {
        target: SessionId,
        view: StatusView,
    },
    /// A spawned member passed its readiness gate and is in the roster.
    Spawned {
        gid: SessionId,
        host: HostId,
    },
    /// `fleet_list`: the union view, one row per entity (and one per host's gateway).
    Roster {
        rows: Vec<RosterEntry>,
    },
    /// The member's pane is being closed; its open delegations ended.
    Stopped {
        target: SessionId,
    },
    /// A broadcast was published; each copy then follows the per-recipient rules.
    Broadcast {
        msg: MsgId,
        key: String,
    },
    Error(CallError),
}

/// A held reply as a lead collects it. The core's own record (`inbox::HeldReply`) also keeps
/// when it arrived on this gateway's monotonic clock, which means nothing to a caller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyView {
    pub id: ReplyId,
    /// The member that replied.
    pub target: SessionId,
    /// The lead that last delegated to `target`, if known.
    pub lead: Option<SessionId>,
    pub content: String,
}

impl From<HeldReply> for ReplyView {
    fn from(r: HeldReply) -> Self {
        ReplyView {
            id: r.id,
            target: r.target,
            lead: r.lead,
            content: r.content,
        }
    }
}

/// A target's delivery state as `fleet_status` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusView {
    /// The last status sampled, if any.
    pub status: Option<AgentStatus>,
    /// Past its readiness gate (leads always are).
    pub ready: bool,
    /// Messages waiting to be typed.
    pub queued: usize,
    /// A turn is running (typed and not yet ended).
    pub in_turn: bool,
}

impl From<TargetView> for StatusView {
    fn from(v: TargetView) -> Self {
        StatusView {
            status: v.status,
            ready: v.ready,
            queued: v.queued,
            in_turn: v.in_turn,
        }
    }
}

/// One entity of the fleet-wide roster (`fleet_list`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RosterEntry {
    pub gid: SessionId,
    pub host: HostId,
    pub kind: EntityKind,
    pub status: Option<AgentStatus>,
    /// The profiles a host's gateway offers (its `_gateway` row only).
    pub profiles: Vec<String>,
    pub liveness: Liveness,
}

impl From<RosterRow> for RosterEntry {
    fn from(r: RosterRow) -> Self {
        RosterEntry {
            gid: r.gid,
            host: r.host,
            kind: r.kind,
            status: r.status,
            profiles: r.profiles,
            liveness: r.liveness,
        }
    }
}

/// An async ticket as `fleet_poll` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TicketView {
    pub ticket: TicketId,
    pub target: SessionId,
    pub phase: Phase,
    pub outcome: Option<Outcome>,
    pub body: Option<String>,
    /// The open question and the turnId to answer it with, while ASKING.
    pub question: Option<String>,
    pub turn_id: Option<TurnId>,
}

/// A refused call, with a stable code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum CallError {
    #[error("{role} may not {action}")]
    Denied { role: Role, action: Action },
    #[error("this caller has no session of its own")]
    NoSession,
    #[error("unknown or expired ticket")]
    UnknownTicket,
    #[error("the reply inbox of {target} is full ({cap}); the lead must collect replies first")]
    InboxFull { target: SessionId, cap: usize },
    #[error("invalid argument: {reason}")]
    InvalidArgument { reason: String },
    #[error("the broker is unreachable: remote sends fail fast and nothing is buffered; local sessions still work")]
    BrokerUnavailable,
    #[error("no such recipient: nothing on the broker is bound to {target}")]
    NoSuchRecipient { target: SessionId },
    #[error("no gateway for host {host} is listening on the control exchange")]
    NoSuchHost { host: HostId },
    #[error("host {host} has no profile {profile:?} (it offers: {offered:?})")]
    UnknownProfile {
        host: HostId,
        profile: String,
        offered: Vec<String>,
    },
    #[error("the spawn failed: {reason}")]
    SpawnFailed { reason: String },
}

impl CallError {
    /// The stable code (the serde tag), for summaries and error bodies.
    pub fn code(&self) -> &'static str {
        match self {
            CallError::Denied { .. } => "denied",
            CallError::NoSession => "no_session",
            CallError::UnknownTicket => "unknown_ticket",
            CallError::InboxFull { .. } => "inbox_full",
            CallError::InvalidArgument { .. } => "invalid_argument",
            CallError::BrokerUnavailable => "broker_unavailable",
            CallError::NoSuchRecipient { .. } => "no_such_recipient",
            CallError::NoSuchHost { .. } => "no_such_host",
            CallError::UnknownProfile { .. } => "unknown_profile",
            CallError::SpawnFailed { .. } => "spawn_failed",
        }
    }
}

/// Please do this. Drained with `Gateway::poll_output` after every `handle`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Sample `target`'s status and answer with `Input::StatusSampled`.
    PollStatus { target: SessionId },
    /// Read the pane (the baseline), then type `text` and submit it; answer with
    /// `Input::Injected`. Do it at most once: this message must never be typed twice.
    Inject {
        target: SessionId,
        msg: MsgId,
        text: String,
    },
    /// Read the pane after turn `msg`; answer with `Input::PaneRead`.
    ReadPane { target: SessionId, msg: MsgId },
    /// Answer call `call`.
    Respond { call: CallId, response: Response },
    /// An authorization decision, for the audit log. Never carries content.
    Audit(AuditEvent),
    /// A trace event, for logs, metrics and snapshots.
    Event(Event),
    /// Do this against the broker (cross-host mode only).
    Broker(BrokerOp),
    /// Start a member from `profile` in a new pane labelled `fleet:<gid>`; answer with
    /// `Input::Spawned`, then report `MemberConnected` when it is ready.
    SpawnPane {
        gid: SessionId,
        profile: String,
        group: Option<String>,
        /// Cut a worktree first; the member starts in it.
        worktree: Option<crate::spawn_spec::Worktree>,
    },
    /// Close a member's pane (a spawn that never became ready is reaped).
    ClosePane { gid: SessionId },
}

/// Why a delivery was rejected to the DLX: the stable code of events and metrics
/// (`fleet_dead_letters_total{code}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectCode {
    /// Admission: the headers or body do not decode.
    Malformed,
    /// Admission: a schema major this gateway does not speak.
    NewerMajor,
    /// Admission: no key for the signing host.
    UnknownSigner,
    /// Admission: the signature does not verify.
    BadSignature,
    /// Admission: no fresh signed presence binds the sender to the signing host.
    SenderNotOnSigningHost,
    /// Admission: `to` differs from the routing key it arrived by.
    WrongRoutingKey,
    /// Admission: past its `expiresAt`.
    Expired,
    /// Admission: a msgId already admitted on this queue.
    Replayed,
    /// Larger than `max_body_bytes`: refused before it is hashed or copied.
    Oversized,
    /// Control from a host not on this host's allowlist.
    NotAllowed,
    /// A kind the control queue does not handle.
    Unsupported,
    /// A kind with no meaning on the queue it arrived on.
    Misrouted,
    /// Presence from another host for a gid served here.
    GidClaimed,
    /// A stranded reply for a lead whose reply inbox is full.
    InboxFull,
}

impl RejectCode {
    pub fn as_str(self) -> &'static str {
        match self {
            RejectCode::Malformed => "malformed",
            RejectCode::NewerMajor => "newer_major",
            RejectCode::UnknownSigner => "unknown_signer",
            RejectCode::BadSignature => "bad_signature",
            RejectCode::SenderNotOnSigningHost => "sender_not_on_signing_host",
            RejectCode::WrongRoutingKey => "wrong_routing_key",
            RejectCode::Expired => "expired",
            RejectCode::Replayed => "replayed",
            RejectCode::Oversized => "oversized",
            RejectCode::NotAllowed => "not_allowed",
            RejectCode::Unsupported => "unsupported",
            RejectCode::Misrouted => "misrouted",
            RejectCode::GidClaimed => "gid_claimed",
            RejectCode::InboxFull => "inbox_full",
        }
    }
}

impl fmt::Display for RejectCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An input that no longer matches any state: what it was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "input", rename_all = "snake_case")]
pub enum Stale {
    /// An inject result the injector no longer waits for.
    Injected { msg: MsgId },
    /// A post-turn scrape whose hold had expired: the next turn may be running.
    PaneRead { msg: MsgId },
    /// The post-turn scrape failed; the waiter stays open for a reply or the timeout.
    PaneReadFailed { error: PaneError },
    /// A delivery of a connection that has closed since: its tag is void.
    OldDelivery { delivery: DeliveryId },
    /// A member connected for which no pane is known (a token that outlived its pane): not
    /// announced.
    UnknownMember,
}

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stale::Injected { msg } => write!(f, "injected msg={msg}"),
            Stale::PaneRead { msg } => write!(f, "pane read msg={msg}"),
            Stale::PaneReadFailed { error } => write!(f, "pane read failed: {error}"),
            Stale::OldDelivery { delivery } => {
                write!(f, "delivery {delivery} of an old connection")
            }
            Stale::UnknownMember => f.write_str("member connect for no known pane"),
        }
    }
}

/// The trace vocabulary: one line per thing that mattered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A message was queued for `target` (a brief, with its ticket; a broadcast copy or a
    /// nudge, without).
    Enqueued {
        ticket: Option<TicketId>,
        target: SessionId,
        msg: MsgId,
    },
    /// `msg` was typed into `target` and its turn began.
    Delivered { target: SessionId, msg: MsgId },
    /// `target`'s turn on `msg` ended (seen, or inferred for a turn too fast to see).
    TurnComplete {
        target: SessionId,
        msg: MsgId,
        missed_fast_turn: bool,
    },
    /// `target`'s turn on `msg` failed (the pane wedged, died, or stayed unready).
    TurnFailed {
        target: SessionId,
        msg: MsgId,
        cause: Cause,
    },
    /// `msg` left `target`'s queue untyped.
    Dropped {
        target: SessionId,
        msg: MsgId,
        cause: Cause,
    },
    /// A completion scrape equal to its baseline: no resolution.
    Suppressed { target: SessionId, msg: MsgId },
    /// A delegation ended (or, for QUESTION, paused) with this outcome.
    Resolved {
        ticket: TicketId,
        target: SessionId,
        outcome: Outcome,
    },
    /// A reply with no waiter was held for its lead (U3).
    ReplyHeld {
        target: SessionId,
        reply: ReplyId,
        lead: Option<SessionId>,
    },
    /// `target` asked mid-turn; a coalesced ask rides the open one.
    Asked {
        target: SessionId,
        turn_id: TurnId,
        coalesced: bool,
    },
    /// `target`'s open question closed.
    AskClosed {
        target: SessionId,
        turn_id: TurnId,
        outcome: AskOutcome,
    },
    /// A reminder was queued for `lead` about `pending` uncollected items.
    Nudged {
        lead: SessionId,
        msg: MsgId,
        pending: usize,
    },
    /// A finished ticket nobody polled was forgotten at the end of its retention.
    TicketExpired { ticket: TicketId },
    /// An input that no longer matches any state (a late driver answer): ignored.
    Stale { what: Stale, target: SessionId },
    /// A delivery failed admission or made no sense on its queue: rejected to the DLX.
    Rejected {
        queue: String,
        code: RejectCode,
        detail: String,
    },
    /// A roster entry's heartbeats stopped.
    RosterExpired { gid: SessionId },
    /// Another host's gateway announced a later start: it restarted and lost its soft state.
    PeerRestarted { host: HostId },
    /// A report to another host could not be published (broker down, no inbox any more).
    Undelivered {
        kind: Kind,
        to: SessionId,
        why: String,
    },
    /// A dead-lettered forward brief was reported to its sender as FAILED.
    DeadLetterReported { msg: MsgId, sender: SessionId },
    /// A member's session changed state (`from` is none for a new session).
    Session {
        gid: SessionId,
        from: Option<SessionState>,
        to: SessionState,
    },
    /// The idle reaper closes a member that sat idle past `member_idle_ttl_ms`.
    Reaped { gid: SessionId, idle_ms: u64 },
    /// A member listed at start was adopted, closed or left undecided (`gateway::adoption`).
    Rebuilt {
        gid: SessionId,
        verdict: crate::adoption::AdoptVerdict,
    },
}

impl Event {
    /// The event's stable name (the serde tag), for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Enqueued { .. } => "enqueued",
            Event::Delivered { .. } => "delivered",
            Event::TurnComplete { .. } => "turn_complete",
            Event::TurnFailed { .. } => "turn_failed",
            Event::Dropped { .. } => "dropped",
            Event::Suppressed { .. } => "suppressed",
            Event::Resolved { .. } => "resolved",
            Event::ReplyHeld { .. } => "reply_held",
            Event::Asked { .. } => "asked",
            Event::AskClosed { .. } => "ask_closed",
            Event::Nudged { .. } => "nudged",
            Event::TicketExpired { .. } => "ticket_expired",
            Event::Stale { .. } => "stale",
            Event::Rejected { .. } => "rejected",
            Event::RosterExpired { .. } => "roster_expired",
            Event::PeerRestarted { .. } => "peer_restarted",
            Event::Undelivered { .. } => "undelivered",
            Event::DeadLetterReported { .. } => "dead_letter_reported",
            Event::Session { .. } => "session",
            Event::Reaped { .. } => "reaped",
            Event::Rebuilt { .. } => "rebuilt",
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Enqueued {
                ticket,
                target,
                msg,
            } => match ticket {
                Some(t) => write!(f, "enqueued {target} msg={msg} ticket={t}"),
                None => write!(f, "enqueued {target} msg={msg}"),
            },
            Event::Delivered { target, msg } => write!(f, "delivered {target} msg={msg}"),
            Event::TurnComplete {
                target,
                msg,
                missed_fast_turn,
            } => write!(
                f,
                "turn_complete {target} msg={msg}{}",
                if *missed_fast_turn {
                    " (missed fast turn)"
                } else {
                    ""
                }
            ),
            Event::TurnFailed { target, msg, cause } => {
                write!(f, "turn_failed {target} msg={msg} cause={cause}")
            }
            Event::Dropped { target, msg, cause } => {
                write!(f, "dropped {target} msg={msg} cause={cause}")
            }
            Event::Suppressed { target, msg } => write!(f, "suppressed {target} msg={msg}"),
            Event::Resolved {
                ticket,
                target,
                outcome,
            } => write!(f, "resolved {target} ticket={ticket} -> {outcome}"),
            Event::ReplyHeld {
                target,
                reply,
                lead,
            } => write!(
                f,
                "reply_held {target} reply={reply} lead={}",
                lead.as_ref().map_or("-", |l| l.as_str())
            ),
            Event::Asked {
                target,
                turn_id,
                coalesced,
            } => write!(
                f,
                "asked {target} turn={turn_id}{}",
                if *coalesced { " (coalesced)" } else { "" }
            ),
            Event::AskClosed {
                target,
                turn_id,
                outcome,
            } => write!(f, "ask_closed {target} turn={turn_id} -> {outcome}"),
            Event::Nudged { lead, msg, pending } => {
                write!(f, "nudged {lead} msg={msg} pending={pending}")
            }
            Event::TicketExpired { ticket } => write!(f, "ticket_expired {ticket}"),
            Event::Stale { what, target } => write!(f, "stale {what} {target}"),
            Event::Rejected {
                queue,
                code,
                detail,
            } => write!(f, "rejected {queue} {code}: {detail}"),
            Event::RosterExpired { gid } => write!(f, "roster_expired {gid}"),
            Event::PeerRestarted { host } => write!(f, "peer_restarted {host}"),
            Event::Undelivered { kind, to, why } => write!(f, "undelivered {kind} to {to}: {why}"),
            Event::DeadLetterReported { msg, sender } => {
                write!(f, "dead_letter_reported msg={msg} to {sender}")
            }
            Event::Session { gid, from, to } => match from {
                Some(from) => write!(f, "session {gid} {from} -> {to}"),
                None => write!(f, "session {gid} -> {to}"),
            },
            Event::Reaped { gid, idle_ms } => write!(f, "reaped {gid} idle {idle_ms} ms"),
            Event::Rebuilt { gid, verdict } => write!(f, "rebuilt {gid} -> {verdict}"),
        }
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Output::PollStatus { target } => write!(f, "poll_status {target}"),
            Output::Inject { target, msg, text } => {
                write!(f, "inject {target} msg={msg} text={text:?}")
            }
            Output::ReadPane { target, msg } => write!(f, "read_pane {target} msg={msg}"),
            Output::Respond { call, response } => write!(f, "respond {call} {response}"),
            Output::Audit(a) => write!(f, "{a}"),
            Output::Event(e) => write!(f, "event {e}"),
            Output::Broker(op) => write!(f, "broker {op}"),
            Output::SpawnPane {
                gid,
                profile,
                group,
                worktree,
            } => {
                write!(
                    f,
                    "spawn_pane {gid} profile={profile} group={}",
                    group.as_deref().unwrap_or("-")
                )?;
                match worktree {
                    Some(w) => write!(
                        f,
                        " worktree={}@{}",
                        w.repo,
                        w.commit.as_deref().unwrap_or("HEAD")
                    ),
                    None => Ok(()),
                }
            }
            Output::ClosePane { gid } => write!(f, "close_pane {gid}"),
        }
    }
}

impl fmt::Display for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Response::Outcome {
                outcome,
                body,
                turn_id,
                ..
            } => {
                write!(f, "{outcome}")?;
                if let Some(t) = turn_id {
                    write!(f, " turn={t}")?;
                }
                if let Some(b) = body {
                    write!(f, " body={b:?}")?;
                }
                Ok(())
            }
            Response::Ticket(t) => {
                write!(f, "ticket={} {}", t.ticket, t.phase)?;
                if let Some(o) = t.outcome {
                    write!(f, " {o}")?;
                }
                if let Some(q) = &t.question {
                    write!(f, " question={q:?}")?;
                }
                if let Some(b) = &t.body {
                    write!(f, " body={b:?}")?;
                }
                Ok(())
            }
            Response::ReplyAccepted { held } => match held {
                Some(id) => write!(f, "reply held={id}"),
                None => f.write_str("reply delivered"),
            },
            Response::Ask {
                outcome,
                turn_id,
                answer,
            } => {
                write!(f, "ask {outcome}")?;
                if let Some(t) = turn_id {
                    write!(f, " turn={t}")?;
                }
                if let Some(a) = answer {
                    write!(f, " answer={a:?}")?;
                }
                Ok(())
            }
            Response::Replies { replies } => {
                write!(f, "replies [")?;
                for (i, r) in replies.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{:?}", r.content)?;
                }
                f.write_str("]")
            }
            Response::Acked { count } => write!(f, "acked {count}"),
            Response::Status { target, view } => write!(
                f,
                "status {target} {} ready={} queued={} in_turn={}",
                view.status.map_or("-", |s| s.as_str()),
                view.ready,
                view.queued,
                view.in_turn
            ),
            Response::Spawned { gid, host } => write!(f, "spawned {gid} on {host}"),
            Response::Roster { rows } => {
                write!(f, "roster [")?;
                for (i, r) in rows.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}@{}", r.gid, r.host)?;
                }
                f.write_str("]")
            }
            Response::Stopped { target } => write!(f, "stopped {target}"),
            Response::Broadcast { msg, key } => write!(f, "broadcast msg={msg} key={key}"),
            Response::Error(e) => write!(f, "error {e}"),
        }
    }
}

impl fmt::Display for BrokerOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::envelope::HeaderValue;
        match self {
            BrokerOp::Declare(t) => write!(
                f,
                "declare {} exchange(s), queues [{}], {} binding(s), consume [{}]",
                t.exchanges.len(),
                t.queues
                    .iter()
                    .map(|q| q.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                t.bindings.len(),
                t.consumers
                    .iter()
                    .map(|c| c.queue.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            BrokerOp::DeleteQueue { name } => write!(f, "delete_queue {name}"),
            BrokerOp::Publish {
                publish,
                exchange,
                key,
                headers,
                body,
                ..
            } => {
                let get = |k: &str| match headers.get(k) {
                    Some(HeaderValue::Str(s)) => s.as_str(),
                    _ => "-",
                };
                write!(
                    f,
                    "publish#{} {exchange:?} key={key} {} msg={} from={}",
                    publish.0,
                    get("kind"),
                    get("msgId"),
                    get("from"),
                )?;
                for extra in ["re", "turnId", "outcome"] {
                    if headers.contains_key(extra) {
                        write!(f, " {extra}={}", get(extra))?;
                    }
                }
                write!(f, " body={:?}", String::from_utf8_lossy(body))
            }
            BrokerOp::Ack { delivery } => write!(f, "ack {delivery}"),
            BrokerOp::Reject { delivery } => write!(f, "reject {delivery}"),
        }
    }
}
