//! What a caller asks (`Request`) and is told (`Response`, `CallError`), and the wire views
//! answers carry — never a sub-machine's internals, never a monotonic instant.

use crate::authz::{Action, Role};
use crate::ids::{HostId, MsgId, ReplyId, SessionId, TicketId, TurnId};
use crate::inbox::HeldReply;
use crate::outcome::{AskOutcome, Outcome, Phase};
use crate::roster::{EntityKind, Liveness, RosterRow};
use crate::spawn_spec::MemberRole;
use crate::status::AgentStatus;
use serde::{Deserialize, Serialize};
use std::fmt;

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
    /// A member's agent says what it is doing (its hooks, notify program or plugin): the
    /// caller's own session reports itself (`agent_report`).
    Report {
        report: crate::agent_report::AgentReport,
    },
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
        /// The profile, and what else the member is: its group, role, worktree or cwd, ticket.
        spec: crate::spawn_spec::SpawnSpec,
    },
    /// `fleet_list`: the fleet-wide roster as this gateway sees it (U5).
    List,
    /// `fleet_profiles`: this host's placement — its strategy, each profile's load and
    /// credential cooldown.
    Profiles,
    /// `GET /overview`: each host's link and counts, the delegations open here, the results
    /// held here (the dashboard's and `fleetd ctl`'s view beside the roster).
    Overview,
    /// `GET /attention`, `fleet_attention`: what waits on the caller, oldest first, here and
    /// (as counts) on other hosts.
    Attention,
    /// `fleet_whoami`: the caller as the core authorises it — a member spawned ARCHITECT is
    /// one here, though the shell knows it only by its member token.
    Whoami,
    /// `fleet_send{coordId}`: a note for a peer lead, typed into its pane when it is ready —
    /// coordination, never a task: nothing waits on it.
    Coordinate { target: SessionId, content: String },
    /// `fleet_stop`: close a member's pane on this host; its inbox goes with it.
    Stop { target: SessionId },
    /// Broadcast (U8): the same text to every member, or to one group, fleet-wide.
    Broadcast {
        group: Option<String>,
        content: String,
    },
    /// `fleet_task_add`: a task on the caller's own list.
    TaskAdd { task: crate::tasks::NewTask },
    /// `fleet_task_list`: the caller's tasks, or one with its brief and result.
    Tasks { id: Option<crate::tasks::TaskId> },
    /// `fleet_task_review`: the caller's decision on one of its tasks.
    TaskReview {
        id: crate::tasks::TaskId,
        decision: crate::tasks::Decision,
    },
}

impl Request {
    /// The size of the text this request carries to a pane or a lead, if any.
    pub fn content_len(&self) -> Option<usize> {
        match self {
            Request::Send { content, .. }
            | Request::Answer { content, .. }
            | Request::Reply { content }
            | Request::Coordinate { content, .. }
            | Request::Broadcast { content, .. } => Some(content.len()),
            Request::TaskAdd { task } => Some(task.brief.len()),
            Request::Report { report } => Some(report.content_len()),
            Request::Ask { question, .. } => Some(question.len()),
            _ => None,
        }
    }

    pub fn action(&self) -> Action {
        match self {
            Request::Send { .. } | Request::Answer { .. } | Request::Poll { .. } => Action::Send,
            // A member's word on its own turn is the right it replies with.
            Request::Reply { .. } | Request::Report { .. } => Action::Reply,
            Request::Ask { .. } => Action::Ask,
            Request::Peek { .. } | Request::Ack { .. } | Request::Drain { .. } => Action::Drain,
            Request::Status { .. }
            | Request::List
            | Request::Profiles
            | Request::Overview
            | Request::Attention
            | Request::Tasks { .. }
            | Request::Whoami => Action::Read,
            Request::TaskAdd { .. } | Request::TaskReview { .. } => Action::Send,
            Request::Spawn { .. } => Action::Spawn,
            Request::Stop { .. } => Action::Stop,
            Request::Broadcast { .. } | Request::Coordinate { .. } => Action::Send,
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
    /// This host's placement.
    Profiles {
        strategy: crate::placement::Strategy,
        /// The profile `fixed` starts, if there is one.
        default_profile: Option<String>,
        profiles: Vec<crate::placement::ProfileView>,
    },
    /// What this gateway has in flight.
    Overview(Box<super::overview::Overview>),
    /// What waits on the caller.
    Attention(Box<crate::needs::Attention>),
    /// The caller's tasks (one, after an add or a review, or when asked by its id).
    Tasks {
        tasks: Vec<crate::tasks::TaskView>,
    },
    /// Who the caller is, as the core authorises it.
    Whoami {
        principal: crate::authz::Principal,
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
    /// A coordination note is on its way to a peer lead: queued for its pane here, or routed
    /// to its inbox on its host. Nothing else will come of it.
    Coordinated {
        target: SessionId,
        msg: MsgId,
    },
    /// A member's report was heard: which brief it spoke for (`agent_report::Verdict`).
    Reported {
        verdict: String,
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

/// One session as `fleet_status` shows it: its roster row (on any host), and what this
/// gateway itself holds for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusView {
    #[serde(flatten)]
    pub row: RosterEntry,
    /// Messages waiting here to be typed into it (`None`: it is on another host, whose
    /// gateway holds its queue).
    pub queued: Option<usize>,
    /// A turn is running (typed and not yet ended); on another host, as its presence says.
    pub in_turn: bool,
}

/// One entity of the fleet-wide roster (`fleet_list`, `GET /members`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RosterEntry {
    pub gid: SessionId,
    pub host: HostId,
    pub kind: EntityKind,
    /// `IDLE`, `WORKING`, `BLOCKED`, `DONE` or `UNKNOWN` for a member or lead; none for a
    /// gateway.
    pub status: Option<AgentStatus>,
    /// A turn is running in it.
    pub busy: bool,
    /// Past its readiness gate (a member still spawning is not).
    pub ready: bool,
    pub profile: Option<String>,
    pub role: Option<MemberRole>,
    pub group: Option<String>,
    /// The lead that spawned it.
    pub owner: Option<SessionId>,
    /// When it joined (Unix ms, its gateway's clock).
    pub since: Option<u64>,
    /// The work item it was spawned for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<String>,
    /// The directory it was started in, when its spawn named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The SHA-256 of the charter it was launched with (audit; never the text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charter: Option<String>,
    /// The profiles a host's gateway offers (its `_gateway` row only).
    pub profiles: Vec<String>,
    pub liveness: Liveness,
    /// A member's health (`docs/operations.md` lists the states): as its gateway last
    /// classified it, or CONTROL_LINK_DOWN for another host's member while this gateway's
    /// broker link is down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<crate::health::Health>,
    /// Why, for a member served by the gateway answering (bounded, control characters
    /// stripped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_reason: Option<String>,
}

impl From<RosterRow> for RosterEntry {
    fn from(r: RosterRow) -> Self {
        RosterEntry {
            gid: r.gid,
            host: r.host,
            kind: r.kind,
            status: r.status,
            busy: r.busy,
            ready: r.ready,
            profile: r.card.profile,
            role: r.card.role,
            group: r.card.group,
            owner: r.card.owner,
            since: r.card.since,
            ticket: r.card.ticket,
            cwd: r.card.cwd,
            charter: r.card.charter,
            profiles: r.profiles,
            liveness: r.liveness,
            health: r.health,
            health_reason: r.health_reason,
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
    #[error("{target} is not in the roster: no host serves it now")]
    NotFound {
        target: SessionId,
        /// A member that went from the gateway answering lately: GONE or NEVER_READY, and why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        departed: Option<crate::health::Tombstone>,
    },
    #[error("host {host} refused: {reason}")]
    NotAllowed { host: HostId, reason: String },
    #[error("no task {task} in this lead's list")]
    UnknownTask { task: crate::tasks::TaskId },
    #[error("{target} is no longer served here: its pane is gone (stopped or closed), and nothing it says now is delivered")]
    PaneGone { target: SessionId },
    #[error("host {host} did not confirm that {target} stopped within {waited_ms} ms: the STOP may still take effect; fleet_list shows whether it left")]
    StopUnconfirmed {
        target: SessionId,
        host: HostId,
        waited_ms: u64,
    },
}

impl CallError {
    /// The stable code (the serde tag), for summaries and error bodies.
    pub fn code(&self) -> &'static str {
        match self {
            CallError::Denied { .. } => "denied",
            CallError::NoSession => "no_session",
            CallError::UnknownTicket => "unknown_ticket",
            CallError::UnknownTask { .. } => "unknown_task",
            CallError::InboxFull { .. } => "inbox_full",
            CallError::InvalidArgument { .. } => "invalid_argument",
            CallError::BrokerUnavailable => "broker_unavailable",
            CallError::NoSuchRecipient { .. } => "no_such_recipient",
            CallError::NoSuchHost { .. } => "no_such_host",
            CallError::UnknownProfile { .. } => "unknown_profile",
            CallError::SpawnFailed { .. } => "spawn_failed",
            CallError::NotFound { .. } => "not_found",
            CallError::NotAllowed { .. } => "not_allowed",
            CallError::PaneGone { .. } => "pane_gone",
            CallError::StopUnconfirmed { .. } => "stop_unconfirmed",
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
            Response::Reported { verdict } => write!(f, "reported {verdict}"),
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
            Response::Status { target, view } => {
                write!(
                    f,
                    "status {target}@{} {} busy={} ready={} in_turn={}",
                    view.row.host,
                    view.row.status.map_or("-", |s| s.as_str()),
                    view.row.busy,
                    view.row.ready,
                    view.in_turn
                )?;
                match view.queued {
                    Some(q) => write!(f, " queued={q}"),
                    None => Ok(()),
                }
            }
            Response::Spawned { gid, host } => write!(f, "spawned {gid} on {host}"),
            Response::Profiles {
                strategy, profiles, ..
            } => {
                write!(f, "profiles {} x{}", strategy.as_str(), profiles.len())
            }
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
            Response::Overview(o) => write!(
                f,
                "overview {} host(s), {} delegation(s), {} held",
                o.hosts.len(),
                o.delegations.len(),
                o.held.len()
            ),
            Response::Attention(a) => write!(
                f,
                "attention {} need(s) here, {} host(s) elsewhere",
                a.needs.len(),
                a.elsewhere.len()
            ),
            Response::Tasks { tasks } => {
                write!(f, "tasks [")?;
                for (i, t) in tasks.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{} {}", t.id, t.state.as_str())?;
                }
                f.write_str("]")
            }
            Response::Whoami { principal } => {
                write!(f, "whoami {} {}", principal.role.as_str(), principal.name)
            }
            Response::Stopped { target } => write!(f, "stopped {target}"),
            Response::Broadcast { msg, key } => write!(f, "broadcast msg={msg} key={key}"),
            Response::Coordinated { target, msg } => write!(f, "coordinated {target} msg={msg}"),
            Response::Error(e) => write!(f, "error {e}"),
        }
    }
}
