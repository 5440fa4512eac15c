//! The trace vocabulary (`Event`), one line per thing that mattered, with its typed codes
//! (`RejectCode`, `Stale`).

use super::PaneError;
use crate::broker::DeliveryId;
use crate::envelope::Kind;
use crate::ids::{HostId, MsgId, ReplyId, SessionId, TicketId, TurnId};
use crate::injector::Cause;
use crate::outcome::{AskOutcome, Outcome};
use crate::session::SessionState;
use serde::{Deserialize, Serialize};
use std::fmt;

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
    /// An answer to a delegation, spawn or ask from someone other than its counterpart.
    NotCounterpart,
    /// The replay record is full of unexpired msgIds: refused rather than one forgotten.
    RecordFull,
    /// `expiresAt` further ahead than `max_expiry_ms`.
    ExpiryTooFar,
}

/// Why the broker dead-lettered a message, from the unsigned `x-first-death-reason` header:
/// RabbitMQ's reasons, and `other` for anything else, so a forged header cannot mint a metric
/// series (each distinct label value would be one, never freed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    Expired,
    Maxlen,
    DeliveryLimit,
    Other,
}

impl DropReason {
    pub fn parse(header: &str) -> DropReason {
        match header {
            "expired" => DropReason::Expired,
            "maxlen" => DropReason::Maxlen,
            "delivery_limit" => DropReason::DeliveryLimit,
            _ => DropReason::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Expired => "expired",
            DropReason::Maxlen => "maxlen",
            DropReason::DeliveryLimit => "delivery_limit",
            DropReason::Other => "other",
        }
    }
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
            RejectCode::NotCounterpart => "not_counterpart",
            RejectCode::RecordFull => "replay_record_full",
            RejectCode::ExpiryTooFar => "expiry_too_far",
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
    /// `target`'s agent reported `what` (its `seq`), taken as `verdict`
    /// (`agent_report::Verdict`: started, ended, failed, stale, foreign, noted).
    Reported {
        target: SessionId,
        seq: u64,
        what: String,
        verdict: String,
    },
    /// A turn end seen on the screen of an agent that reports its turns got no report within
    /// `report_grace_ms`: its screen is read instead.
    ReportMissing { target: SessionId, msg: MsgId },
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
    /// Its host's presence says a gid left (a leave delta, or absent from a newer snapshot).
    RosterLeft { gid: SessionId },
    /// A member served here is being stopped (its pane closed), and why: by its own lead, or
    /// by a STOP naming the lead and host that asked.
    Stopping { gid: SessionId, why: String },
    /// A quiet lead with work outstanding was reminded (CB-551).
    Heartbeat {
        lead: SessionId,
        msg: MsgId,
        open: usize,
        waiting: usize,
    },
    /// A member's backend refused on a usage limit: its credential is skipped by placement
    /// until then (Unix ms).
    Quarantined {
        credential: String,
        profile: String,
        until_unix_ms: u64,
    },
    /// A member's health changed (a log line for operators, never an audit record).
    HealthChanged {
        target: SessionId,
        from: Option<crate::health::Health>,
        to: crate::health::Health,
        reason: String,
    },
    /// Another host's gateway announced a later start: it restarted and lost its soft state.
    PeerRestarted { host: HostId },
    /// A report to another host could not be published (broker down, no inbox any more).
    Undelivered {
        kind: Kind,
        to: SessionId,
        why: String,
    },
    /// The replay record kept across a restart was taken back: `entries` unexpired msgIds
    /// (`expired` were past their expiry, or beyond the cap).
    ReplayRecordRestored { entries: usize, expired: usize },
    /// The broker dead-lettered a message of one of this gateway's queues for `reason` — as its
    /// unsigned headers say: a metric only.
    BrokerDropped { queue: String, reason: DropReason },
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
    /// A task of `lead`'s list moved to `state`.
    Task {
        lead: SessionId,
        task: crate::tasks::TaskId,
        state: crate::tasks::TaskState,
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
            Event::Reported { .. } => "reported",
            Event::ReportMissing { .. } => "report_missing",
            Event::Resolved { .. } => "resolved",
            Event::ReplyHeld { .. } => "reply_held",
            Event::Asked { .. } => "asked",
            Event::AskClosed { .. } => "ask_closed",
            Event::Nudged { .. } => "nudged",
            Event::TicketExpired { .. } => "ticket_expired",
            Event::Stale { .. } => "stale",
            Event::Rejected { .. } => "rejected",
            Event::RosterExpired { .. } => "roster_expired",
            Event::RosterLeft { .. } => "roster_left",
            Event::Stopping { .. } => "stopping",
            Event::HealthChanged { .. } => "health_changed",
            Event::Quarantined { .. } => "quarantined",
            Event::Heartbeat { .. } => "heartbeat",
            Event::PeerRestarted { .. } => "peer_restarted",
            Event::Undelivered { .. } => "undelivered",
            Event::BrokerDropped { .. } => "broker_dropped",
            Event::ReplayRecordRestored { .. } => "replay_record_restored",
            Event::Session { .. } => "session",
            Event::Reaped { .. } => "reaped",
            Event::Rebuilt { .. } => "rebuilt",
            Event::Task { .. } => "task",
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
            Event::Reported {
                target,
                seq,
                what,
                verdict,
            } => write!(f, "reported {target} seq={seq} {what} -> {verdict}"),
            Event::ReportMissing { target, msg } => {
                write!(f, "report_missing {target} msg={msg}")
            }
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
            Event::RosterLeft { gid } => write!(f, "roster_left {gid}"),
            Event::Stopping { gid, why } => write!(f, "stopping {gid} ({why})"),
            Event::Heartbeat {
                lead,
                msg,
                open,
                waiting,
            } => write!(
                f,
                "heartbeat {lead} msg={msg}: {open} open, {waiting} waiting"
            ),
            Event::Quarantined {
                credential,
                profile,
                until_unix_ms,
            } => write!(
                f,
                "quarantined credential {credential} (profile {profile}) until {until_unix_ms}"
            ),
            Event::HealthChanged {
                target,
                from,
                to,
                reason,
            } => match from {
                Some(from) => write!(f, "health {target} {from} -> {to} ({reason})"),
                None => write!(f, "health {target} {to} ({reason})"),
            },
            Event::PeerRestarted { host } => write!(f, "peer_restarted {host}"),
            Event::Undelivered { kind, to, why } => write!(f, "undelivered {kind} to {to}: {why}"),
            Event::ReplayRecordRestored { entries, expired } => {
                write!(
                    f,
                    "replay_record_restored {entries} msgId(s), {expired} dropped"
                )
            }
            Event::BrokerDropped { queue, reason } => {
                write!(f, "broker_dropped {queue}: {}", reason.as_str())
            }
            Event::Session { gid, from, to } => match from {
                Some(from) => write!(f, "session {gid} {from} -> {to}"),
                None => write!(f, "session {gid} -> {to}"),
            },
            Event::Reaped { gid, idle_ms } => write!(f, "reaped {gid} idle {idle_ms} ms"),
            Event::Rebuilt { gid, verdict } => write!(f, "rebuilt {gid} -> {verdict}"),
            Event::Task { lead, task, state } => {
                write!(f, "task {lead} {task} -> {}", state.as_str())
            }
        }
    }
}
