//! The ports the driver loop talks through. Production plugs in herdr's socket client and
//! lapin (their issues); the simulation plugs in its simulated herdr and broker. Port
//! operations return `'static` futures, so the loop keeps many in flight without borrowing
//! the port, and a slow pane never stalls the others.

use fleet_core::broker::{BrokerEvent, BrokerOp};
use fleet_core::{AgentStatus, Instant, Launched, SessionId, SpawnError, SpawnSpec};
use std::future::Future;
use std::pin::Pin;

/// A port operation in flight.
pub type PortFuture<T> = Pin<Box<dyn Future<Output = T> + 'static>>;

/// What herdr said when a pane was sampled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub status: AgentStatus,
    /// The pane's text, attached when the status is unknown so the core can refine it.
    pub screen: Option<String>,
}

/// Why a herdr operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HerdrError {
    /// The pane is gone (herdr's `pane_not_found`): the core is told the pane died.
    #[error("pane_not_found")]
    PaneNotFound,
    /// herdr did not answer or refused; the operation may be retried by the core's own bounds.
    #[error("herdr unavailable: {0}")]
    Unavailable(String),
}

impl From<HerdrError> for fleet_core::SpawnError {
    fn from(e: HerdrError) -> Self {
        match e {
            HerdrError::PaneNotFound => fleet_core::SpawnError::PaneGone,
            HerdrError::Unavailable(why) => fleet_core::SpawnError::Herdr(why),
        }
    }
}

impl From<HerdrError> for fleet_core::io::PaneError {
    fn from(e: HerdrError) -> Self {
        match e {
            HerdrError::PaneNotFound => fleet_core::io::PaneError::NotFound,
            HerdrError::Unavailable(why) => fleet_core::io::PaneError::Unavailable(why),
        }
    }
}

/// Why a brief was not typed, or is not known to be: the core may type the first kind again on
/// a later sample, never the second.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InjectFailure {
    /// Nothing reached the pane: the pane check or the baseline read failed, or herdr refused
    /// the input.
    #[error("{0}")]
    NotTyped(#[from] HerdrError),
    /// The text was sent and herdr did not confirm it (no answer in time, or not the protocol).
    #[error("unconfirmed: {0}")]
    Unconfirmed(String),
}

impl From<InjectFailure> for fleet_core::InjectError {
    fn from(e: InjectFailure) -> Self {
        match e {
            InjectFailure::NotTyped(e) => fleet_core::InjectError::NotTyped(e.into()),
            InjectFailure::Unconfirmed(why) => fleet_core::InjectError::Unconfirmed(why),
        }
    }
}

/// What herdr said of each member in one listing: a sample, or the pane gone.
pub type Samples = Vec<(SessionId, Result<Sample, HerdrError>)>;

/// Every pane operation fleetd performs, one request each (`sample_all`: one for them all).
pub trait HerdrPort {
    fn sample(&self, target: &SessionId) -> PortFuture<Result<Sample, HerdrError>>;
    /// Sample every one of `targets` at once. The default asks one by one (test doubles);
    /// herdr's client lists its panes once. A target herdr did not answer for is left out;
    /// `Err` only when nothing could be asked at all.
    fn sample_all(&self, targets: &[SessionId]) -> PortFuture<Result<Samples, HerdrError>> {
        let each: Vec<_> = targets
            .iter()
            .map(|t| (t.clone(), self.sample(t)))
            .collect();
        Box::pin(async move {
            let mut out = Vec::with_capacity(each.len());
            for (target, op) in each {
                match op.await {
                    Err(HerdrError::Unavailable(_)) => {}
                    answer => out.push((target, answer)),
                }
            }
            Ok(out)
        })
    }
    /// Read the pane (the baseline), then type `text` and submit it. Returns the baseline.
    fn inject(&self, target: &SessionId, text: &str) -> PortFuture<Result<String, InjectFailure>>;
    fn read(&self, target: &SessionId) -> PortFuture<Result<String, HerdrError>>;
    /// Why member `target`'s program ended, if this port learned it (its exit status and last
    /// screen lines), whether or not its pane is still there. None by default (test doubles,
    /// the simulation).
    fn ended(&self, _target: &SessionId) -> PortFuture<Option<String>> {
        Box::pin(async { None })
    }
    /// Start a member pane labelled `fleet:<gid>` from `profile`.
    /// Launches member `gid` as `spec` says (its profile; a worktree to cut or a cwd to start
    /// in), labelled `fleet:<gid>`.
    fn spawn(&self, gid: &SessionId, spec: &SpawnSpec) -> PortFuture<Result<Launched, SpawnError>>;
    fn close(&self, gid: &SessionId) -> PortFuture<Result<(), HerdrError>>;
    /// Member `gid` passed its readiness gate: drop the mark its launch left, so a restart
    /// adopts it by its samples. Nothing by default (test doubles launch nothing).
    fn ready(&self, _gid: &SessionId) {}
}

/// The broker, as the core sees it: operations go in, events come out.
pub trait BrokerPort {
    /// Carry out one operation. Results (confirms, deliveries) come back as events.
    fn submit(&mut self, op: BrokerOp);
    /// The next thing the broker did. Must be cancel-safe: the loop drops it when another
    /// branch wins and calls again.
    fn next_event(&mut self) -> impl Future<Output = Option<BrokerEvent>>;
}

/// Single-host mode: no broker. Nothing is ever submitted (the core produces no broker
/// output without federation) and no event ever arrives.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoBroker;

impl BrokerPort for NoBroker {
    fn submit(&mut self, _op: BrokerOp) {}

    fn next_event(&mut self) -> impl Future<Output = Option<BrokerEvent>> {
        std::future::pending()
    }
}

/// Where `Output::Notify` goes: the daemon's `[[notify]]` sinks. Taking a notice must not
/// block the loop: a sink queues it and carries it out on its own task.
pub trait NoticePort {
    fn notify(&mut self, notice: fleet_core::notify::Notice, unix_ms: u64);
}

/// No sinks (the simulation, and a daemon with no `[[notify]]`): a notice is only observed.
pub struct NoNotices;

impl NoticePort for NoNotices {
    fn notify(&mut self, _notice: fleet_core::notify::Notice, _unix_ms: u64) {}
}

/// Where time enters: monotonic time for the core, wall time for stamps, and sleeping.
pub trait Clock {
    fn now(&self) -> Instant;
    fn unix_ms(&self) -> u64;
    fn sleep_until(&self, at: Instant) -> PortFuture<()>;
}
