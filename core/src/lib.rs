//! # fleet-core
//!
//! Every delivery decision of fleetd as a pure state machine: no I/O, no clock, no OS
//! randomness. One [`Gateway`] per host takes what happened ([`Input`], with the time it
//! happened) and says what to do ([`Output`]). The shell carries outputs out against herdr and
//! the north faces; the simulation carries them out against simulated ones. Same inputs, same
//! seed: same outputs, byte for byte.
//!
//! Contract: after every [`Gateway::handle`], drain [`Gateway::poll_output`] until it returns
//! `None`, then wait until [`Gateway::poll_timeout`] (or the next input) and call
//! `handle(now, Input::Tick)`.

pub mod admission;
pub mod adoption;
pub mod agent_report;
pub mod agent_screen;
pub mod authz;
pub mod broker;
pub mod completion;
pub mod config;
pub mod control;
pub mod envelope;
pub mod gateway;
pub mod health;
pub mod ids;
pub mod inbox;
pub mod injector;
pub mod io;
pub mod needs;
pub mod notify;
pub mod outcome;
pub mod pane_text;
pub mod patterns;
pub mod placement;
pub mod planted;
pub mod push;
pub mod rendezvous;
pub mod revision;
pub mod roster;
pub mod sample_order;
pub mod session;
pub mod signing;
pub mod spawn_spec;
pub(crate) mod start_gate;
pub mod status;
pub mod tasks;
#[cfg(feature = "testing")]
pub mod testing;
pub mod time;

pub use authz::{Action, AuditEvent, Principal, Role};
pub use config::{ConfigError, CoreConfig};
pub use gateway::{Federation, Gateway, Stats, TimerKind};
pub use ids::{CallId, HostId, MsgId, ReplyId, SessionId, TicketId, TraceId, TurnId};
pub use io::{
    Asked, CallError, DelegationView, DropReason, Event, FlowPhase, Half, HeldView, HostView,
    InjectError, Input, Launched, Link, ListedMember, Output, Overview, PaneError, Readiness,
    RejectCode, Request, Response, RosterEntry, Round, Sampled, SpawnError, Stale, StatusView,
    TicketView,
};
pub use outcome::{AskOutcome, Outcome, Phase};
pub use session::SessionState;
pub use spawn_spec::{MemberRole, SpawnSpec, Worktree};
pub use status::AgentStatus;
pub use time::{Duration, Instant};
