//! The gateway's vocabulary: what happened (`Input`), what to do (`Output`), what a caller
//! asked (`Request`) and is told (`Response`), and the trace (`Event`).

use crate::authz::{AuditEvent, Principal};
use crate::broker::{BrokerEvent, BrokerOp};
use crate::ids::{CallId, MsgId, SessionId};
use crate::status::AgentStatus;
use serde::{Deserialize, Serialize};
use std::fmt;

mod call;
mod event;
mod overview;
pub use call::{CallError, ReplyView, Request, Response, RosterEntry, StatusView, TicketView};
pub use event::{DropReason, Event, RejectCode, Stale};
pub use overview::{DelegationView, FlowPhase, Half, HeldView, HostView, Link, Overview};

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
        /// The ask's place, as `Output::PollStatus` gave it.
        asked: Asked,
    },
    /// The answer to `Output::PollStatuses`: each target herdr answered for, from one listing
    /// of its panes (a target it did not answer for is left out, as a `PollStatus` that got no
    /// answer is).
    StatusesSampled {
        round: Round,
        samples: Vec<(SessionId, Sampled)>,
        /// The ask's place, as `Output::PollStatuses` gave it.
        asked: Asked,
    },
    /// The answer to `Output::Inject`: the baseline read just before typing, or why it failed.
    Injected {
        target: SessionId,
        msg: MsgId,
        result: Result<String, InjectError>,
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
    MembersListed { members: Vec<ListedMember> },
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
        result: Result<Launched, SpawnError>,
    },
    /// The answer to `Output::LookAtStart`: the starting member's program ended (why), its
    /// pane is gone, or its status and screen; `Err` when herdr did not answer.
    StartLooked {
        gid: SessionId,
        look: Result<Sampled, PaneError>,
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
    /// The answer to `Output::ProbeHealth`: each member herdr answered for, with the end of its
    /// screen attached whenever it could be read (a member it did not answer for is left out).
    HealthProbed { probes: Vec<(SessionId, Sampled)> },
    /// The replay record kept from before this process started (`Output::Remember`): fed
    /// once, before the broker comes up, so no brief admitted before a restart is admitted
    /// again within its expiry.
    ReplayRecord { entries: Vec<Remembered> },
    /// The task lists kept before this process started (`Output::KeepTasks`): fed once,
    /// before the broker comes up, so a result that arrives for a task finds it.
    TasksRestored { lists: Vec<crate::tasks::TaskList> },
}

impl Input {
    /// The variant's name, for traces and invariant reports.
    pub fn name(&self) -> &'static str {
        match self {
            Input::Call { .. } => "call",
            Input::StatusSampled { .. } => "status_sampled",
            Input::StatusesSampled { .. } => "statuses_sampled",
            Input::Injected { .. } => "injected",
            Input::PaneRead { .. } => "pane_read",
            Input::MemberStarted { .. } => "member_started",
            Input::MembersListed { .. } => "members_listed",
            Input::MemberConnected { .. } => "member_connected",
            Input::PaneGone { .. } => "pane_gone",
            Input::StatusHint { .. } => "status_hint",
            Input::LeadAttached { .. } => "lead_attached",
            Input::Spawned { .. } => "spawned",
            Input::StartLooked { .. } => "start_looked",
            Input::Broker(BrokerEvent::Up { .. }) => "broker_up",
            Input::Broker(BrokerEvent::Down) => "broker_down",
            Input::Broker(BrokerEvent::Delivery { .. }) => "broker_delivery",
            Input::Broker(BrokerEvent::Published { .. }) => "broker_published",
            Input::WallClock { .. } => "wall_clock",
            Input::Shutdown => "shutdown",
            Input::Tick => "tick",
            Input::ReplayRecord { .. } => "replay_record",
            Input::TasksRestored { .. } => "tasks_restored",
            Input::HealthProbed { .. } => "health_probed",
        }
    }
}

/// Which round a batch of samples was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Round {
    /// A presence round's idle members. A member given work since the round asked is not
    /// judged by it: its sample may predate the brief typed into it (a real herdr lists slowly
    /// enough for that), and the injector samples it itself.
    Idle,
    /// The injector's poll round: members with work, and members being adopted.
    Work,
}

/// A status ask's place in the sequence of asks and typings (`sample_order`): its answer
/// carries it back, so the core can tell a sample asked before a typing from one asked after.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Asked(pub u64);

/// One pane's answer within `Input::StatusesSampled`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sampled {
    /// Its status, with the pane text when herdr said `unknown` (as `StatusSampled`'s).
    Status {
        status: AgentStatus,
        screen: Option<String>,
    },
    /// No pane carries its label any more (as `PaneGone`).
    Gone,
    /// Its program ended, and why (its exit status and last screen lines): its pane is gone
    /// or going. Only the health probe and a look at a starting member say this; a spawn
    /// still in its gate fails with it.
    Ended { why: String },
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

/// Why a member's launch failed (`Input::Spawned`), as the launcher saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum SpawnError {
    /// The launcher could not start it as asked — no such profile here, a file it could not
    /// write, the sandbox, the worktree — said for a person.
    #[error("{0}")]
    Refused(String),
    /// herdr did not answer, or refused: nothing is known of a pane.
    #[error("herdr unavailable: {0}")]
    Herdr(String),
    /// The pane closed under the launch (herdr's `pane_not_found`).
    #[error("pane_not_found")]
    PaneGone,
    /// The member's program ended before it was ready: its exit and last screen.
    #[error("the member ended before it was ready: {0}")]
    Ended(String),
}

/// Why a brief was not (known to be) typed. The core acts on the difference: a brief that
/// never reached the pane may be typed on a later sample; one that may be in it never again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "error", content = "detail", rename_all = "snake_case")]
pub enum InjectError {
    /// Nothing was typed: the pane check or the baseline read failed first, or herdr refused
    /// the input.
    #[error("{0}")]
    NotTyped(PaneError),
    /// The text was sent and herdr did not confirm it: it may be in the pane.
    #[error("unconfirmed: {0}")]
    Unconfirmed(String),
}

/// How a new member's readiness gate (CB-306) opens. The launcher says which at once; the
/// core looks at the pane (`Output::LookAtStart`) on its own clock, so the simulation runs
/// the same gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Readiness {
    /// When the member connects to this gateway's MCP (`Input::MemberConnected`).
    OnConnect,
    /// When its screen shows its prompt, judged by its kind's rules (an agent may connect
    /// seconds before it takes input, and text typed before is lost), and it has connected.
    OnPrompt(crate::agent_screen::StartRules),
    /// When herdr, or the program itself, reports an injectable status (a `command`
    /// profile, which has no MCP connection to wait for).
    OnInjectable,
}

/// A member pane listed at start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedMember {
    pub gid: SessionId,
    /// Its launch had not seen it ready when the last process stopped (the launcher's mark,
    /// kept with its files), and how its readiness is known, as the launch recorded it:
    /// herdr calls a starting agent idle seconds before it takes input, so only its own gate
    /// — its connection, its prompt, its status — adopts it. `None`: past its gate.
    pub starting: Option<Readiness>,
}

impl ListedMember {
    /// A member whose launch had seen it ready (or that predates the mark).
    pub fn ready(gid: SessionId) -> Self {
        ListedMember {
            gid,
            starting: None,
        }
    }
}

/// A launched member: how its readiness will be known, and the charter it was given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launched {
    pub readiness: Readiness,
    /// The SHA-256 (hex) of the exact charter text it was launched with, if it got one: shown
    /// in its roster row for audit, never the text.
    pub charter: Option<String>,
    /// Its agent's own lifecycle reports were installed (hooks, notify, plugin): its turns end
    /// when it says so, and a turn end seen on its screen waits a bound for its report.
    pub reports: bool,
}

impl From<Readiness> for Launched {
    fn from(readiness: Readiness) -> Launched {
        Launched {
            readiness,
            charter: None,
            reports: false,
        }
    }
}

/// Please do this. Drained with `Gateway::poll_output` after every `handle`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Sample `target`'s status and answer with `Input::StatusSampled`, carrying `asked` back.
    PollStatus { target: SessionId, asked: Asked },
    /// Sample every one of `targets` from one listing of herdr's panes and answer with
    /// `Input::StatusesSampled` for the same `round`: one request a round — a presence round's
    /// idle members, the injector's poll round — not one per member.
    PollStatuses {
        round: Round,
        targets: Vec<SessionId>,
        asked: Asked,
    },
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
    /// Keep these replay-record entries durably before carrying out any later output of
    /// this step (the ack and the inject that follow the admission they record), and give
    /// them back after a restart (`Input::ReplayRecord`).
    Remember(Vec<Remembered>),
    /// Start a member from `profile` in a new pane labelled `fleet:<gid>`; answer with
    /// `Input::Spawned`, then report `MemberConnected` when it is ready.
    SpawnPane {
        gid: SessionId,
        /// The profile; a worktree to cut first (the member starts in it) or a cwd; the rest
        /// (group, role, ticket) is the gateway's, carried for the launcher's log.
        spec: crate::spawn_spec::SpawnSpec,
    },
    /// Close a member's pane (a spawn that never became ready is reaped).
    ClosePane { gid: SessionId },
    /// Look at starting member `gid` once for its readiness gate: whether its program ended
    /// (why), else its status and its screen; answer with `Input::StartLooked`, always.
    LookAtStart { gid: SessionId },
    /// Member `gid` passed its readiness gate here: the launcher drops the mark its launch
    /// left with its files, so a later restart adopts it by its samples
    /// (`ListedMember::starting`).
    MemberReady { gid: SessionId },
    /// The health round: sample every one of `targets` (one listing of herdr's panes) and
    /// read the end of each one's screen (bounded); answer with `Input::HealthProbed`.
    /// Nothing here is judged by the injector: it keeps its own samples.
    ProbeHealth { targets: Vec<SessionId> },
    /// Tell a person through a notification rule's sink (`[[notify]]`): carried out at most
    /// once, never retried by the core (the sink retries within its own bounds).
    Notify(crate::notify::Notice),
    /// Keep this lead's whole task list durably, replacing what was kept, before carrying out
    /// any later output of this step (the brief a start publishes, the ack of a result), and
    /// give it back after a restart (`Input::TasksRestored`).
    KeepTasks(crate::tasks::TaskList),
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Output::PollStatus { target, .. } => write!(f, "poll_status {target}"),
            Output::PollStatuses { round, targets, .. } => {
                write!(f, "poll_statuses {round:?} {} pane(s)", targets.len())
            }
            Output::Inject { target, msg, text } => {
                write!(f, "inject {target} msg={msg} text={text:?}")
            }
            Output::ReadPane { target, msg } => write!(f, "read_pane {target} msg={msg}"),
            Output::Respond { call, response } => write!(f, "respond {call} {response}"),
            Output::Audit(a) => write!(f, "{a}"),
            Output::Event(e) => write!(f, "event {e}"),
            Output::Broker(op) => write!(f, "broker {op}"),
            Output::Remember(entries) => write!(f, "remember {} msgId(s)", entries.len()),
            Output::KeepTasks(list) => {
                write!(f, "keep_tasks {} [", list.lead)?;
                for (i, t) in list.tasks.values().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{} {}", t.id, t.stage.state().as_str())?;
                }
                f.write_str("]")
            }
            Output::Notify(n) => write!(
                f,
                "notify {} {:?} {} #{}",
                n.rule, n.phase, n.need.id, n.seq
            ),
            Output::SpawnPane { gid, spec } => {
                write!(
                    f,
                    "spawn_pane {gid} profile={} group={}",
                    spec.profile,
                    spec.group.as_deref().unwrap_or("-")
                )?;
                if let Some(cwd) = &spec.cwd {
                    write!(f, " cwd={cwd}")?;
                }
                match &spec.worktree {
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
            Output::LookAtStart { gid } => write!(f, "look_at_start {gid}"),
            Output::MemberReady { gid } => write!(f, "member_ready {gid}"),
            Output::ProbeHealth { targets } => {
                write!(f, "probe_health {} member(s)", targets.len())
            }
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

/// One entry of the replay record: a msgId, the scope (queue) it was admitted in, and when it
/// stops mattering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Remembered {
    pub msg: MsgId,
    pub scope: u64,
    pub expires_at: u64,
}
