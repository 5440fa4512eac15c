//! `Request::Overview`'s answer: what this gateway has in flight, for the operators' dashboard
//! and `fleetd ctl`. The roster itself is `Response::Roster`; this is the rest of the picture
//! — each host's link and counts, the delegations open here, the results held here.

use crate::authz::{Action, Principal};
use crate::ids::{HostId, MsgId, SessionId, TicketId, TraceId, TurnId};
use crate::outcome::Outcome;
use crate::roster::HostOps;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overview {
    /// The host answering.
    pub host: HostId,
    /// Every host this gateway can see: itself first, then the others by name.
    pub hosts: Vec<HostView>,
    /// Delegations this gateway holds a half of, and async tickets ended and still kept.
    pub delegations: Vec<DelegationView>,
    /// Replies held here for a lead to collect, per member.
    pub held: Vec<HeldView>,
    /// The actions the caller may take (`STOP`, `SEND`, …): a page offers no other.
    pub may: Vec<Action>,
    /// Who the caller is, as its credential says: a page shows whose token it acts with.
    pub caller: Principal,
}

/// The broker link as this gateway sees a host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Link {
    /// Single-host: no broker is configured.
    None,
    /// This gateway's connection is up; for another host, its presence is fresh.
    Up,
    /// This gateway's own connection is down.
    Down,
    /// Another host, while this gateway's link is down: nobody here can tell.
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostView {
    pub host: HostId,
    pub link: Link,
    /// How long since its presence was heard (none for this host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heard_ms_ago: Option<u64>,
    /// Its counts: this gateway's own, live; another's as its last snapshot said (none from a
    /// peer that does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops: Option<HostOps>,
}

/// Which half of a delegation this gateway holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Half {
    /// Lead and member both here.
    Local,
    /// The lead is here; the member on another host.
    Sender,
    /// The member is here; the lead on another host.
    Worker,
}

/// How far a delegation has gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FlowPhase {
    /// Not typed yet: waiting for the member to be ready (or, sent to another host, not
    /// confirmed typed there).
    Queued,
    /// Typed into the member's pane: its turn is running.
    Typed,
    /// The member asked a question and waits for the lead's answer.
    Asking,
    /// Ended: an async ticket, shown while it is kept for its lead to poll.
    Done,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelegationView {
    pub ticket: TicketId,
    pub target: SessionId,
    /// The lead that delegated (on this host), or the sender on another host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lead: Option<SessionId>,
    pub half: Half,
    pub phase: FlowPhase,
    /// The brief's message: the same id on both hosts of a cross-host delegation (none once
    /// DONE: an ended ticket keeps only its outcome).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msg: Option<MsgId>,
    /// The flow's trace id where one was minted (a cross-host delegation): the id its log
    /// lines carry on every host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceId>,
    /// While ASKING: the question and the turn that answers it, shown only to the caller
    /// who may answer — the delegation's own lead (any lead, for one opened without a lead
    /// session); never for a question a member here asks of a lead on another host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    /// Once DONE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// Until the delegation's deadline (none once DONE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends_in_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldView {
    /// The member that replied.
    pub target: SessionId,
    /// The lead the replies are held for, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lead: Option<SessionId>,
    pub count: usize,
    pub bytes: usize,
    /// How long the oldest has waited.
    pub oldest_ms: u64,
}
