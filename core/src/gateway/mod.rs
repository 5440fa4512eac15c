//! `Gateway`: the one machine per host. A hub that owns the sub-machines — the injector, the
//! rendezvous, the reply inbox, the push rule, the delegations, the spawns, and (cross-host)
//! the federation with its held deliveries, parking lot and confirms — routes each input to the
//! ones it concerns, and turns their decisions into `Output`s. Each concern has a file named
//! after it; `docs/architecture.md` maps inputs to them.

use crate::adoption::Adoption;
use crate::config::{Compiled, ConfigError, CoreConfig};
use crate::ids::{CallId, HostId, IdMint, MsgId, SessionId};
use crate::inbox::ReplyInbox;
use crate::injector::{Bounds, Injector};
use crate::io::{CallError, Event, Input, Output, RejectCode, Response};
use crate::push::Push;
use crate::rendezvous::Rendezvous;
use crate::sample_order::SampleOrder;
use crate::session::{SessionState, Sessions};
use crate::time::{Duration, Instant};
use std::collections::BTreeMap;

mod answer;
mod calls;
mod coordination;
mod delegation;
mod effects;
mod endings;
mod entities;
mod federation;
mod health;
mod heartbeat;
#[cfg(any(debug_assertions, feature = "invariants"))]
mod invariants;
mod members;
mod needs;
mod overview;
mod placement;
mod rebuild;
mod reports;
mod samples;
mod sessions;
mod spawn;
mod spawn_requests;
mod spawns;

mod stop;
mod stops;
mod tasks;
mod timer_table;
mod timers;
mod turns;

use delegation::{Delegations, Tickets};
pub(crate) use effects::Effects;
use federation::Fed;
pub use federation::Federation;
pub use heartbeat::HeartbeatConfig;
use spawns::Spawns;
use stops::Stops;
pub(crate) use timer_table::Once;
pub use timers::TimerKind;

/// How a gateway reaches other hosts: not at all (single-host mode, where every path is
/// local), or through the broker as one host of a fleet.
#[derive(Debug)]
enum Link {
    Solo,
    Fleet(Box<Fed>),
}

impl Link {
    fn fleet(&self) -> Option<&Fed> {
        match self {
            Link::Solo => None,
            Link::Fleet(f) => Some(f),
        }
    }

    fn fleet_mut(&mut self) -> Option<&mut Fed> {
        match self {
            Link::Solo => None,
            Link::Fleet(f) => Some(f),
        }
    }

    fn is_solo(&self) -> bool {
        matches!(self, Link::Solo)
    }
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
    /// Heartbeat reminders typed into quiet leads' panes (CB-551).
    pub heartbeat_nudges_total: u64,
    /// Deliveries rejected to the dead-letter exchange.
    pub dead_letters_total: u64,
    /// Messages of this host's queues the broker dead-lettered itself.
    pub broker_drops_total: u64,
}

/// The single-host delivery core.
///
/// Run loop: after every `handle`, drain `poll_output` until `None`, carry each output out,
/// then sleep until `poll_timeout` (or the next input) and `handle(now, Input::Tick)`.
///
/// In debug builds and with the `invariants` feature (the simulation's), every `handle` ends
/// with `check_invariants`: a broken internal invariant panics at the step that broke it.
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
    /// Which status samples may still speak (`sample_order`).
    samples: SampleOrder,
    rendezvous: Rendezvous,
    inbox: ReplyInbox,
    push: Push,
    delegations: Delegations,
    tickets: Tickets,
    /// The message of each session's latest delivered turn: what a reply or an ask belongs to.
    turns: BTreeMap<SessionId, MsgId>,
    /// The lead pane that last delegated to each target (CB-532): who to nudge.
    last_delegator: BTreeMap<SessionId, SessionId>,
    /// Who sent each queued message: it becomes its target's `last_delegator` only when typed,
    /// so a turn still running an older brief does not hand its reply to a newer sender.
    delegator_of: BTreeMap<MsgId, SessionId>,
    /// Nudge messages in the injector, by the lead they remind.
    nudges: BTreeMap<MsgId, SessionId>,
    sessions: Sessions,
    /// This host's name: its federation's, or `local` unless `named`.
    host: HostId,
    /// The entities served here, in either mode (a federated host announces them).
    served: BTreeMap<SessionId, federation::Served>,
    /// Who each local member (and lead) is, for its roster row.
    cards: BTreeMap<SessionId, crate::roster::Card>,
    /// The wall clock as the last `WallClock` input set it (federation starts with one), and
    /// when on the monotonic clock.
    wall_at: Instant,
    wall_unix: Option<u64>,
    /// What each step decided: outputs, and when to wake (`effects`).
    fx: Effects,
    stats: Stats,
    /// How this gateway reaches other hosts.
    link: Link,
    spawns: Spawns,
    stops: Stops,
    /// Members listed at start, until adopted, closed or undecided.
    adoption: Adoption,
    /// Each member's health, and the members that went (`health`).
    health: crate::health::Monitor,
    /// What each agent that reports its own turns has said (`agent_report`).
    reports: crate::agent_report::Reports,
    /// Which profile a spawn that names none starts; credentials cooling down.
    placement: crate::placement::Placement,
    /// Each lead with a heartbeat: when it last called, reminders since.
    beats: heartbeat::Heartbeats,
    /// The notification rules and what each has sent (`needs`).
    notifier: crate::notify::Notifier,
    /// Each lead's task list (`tasks`), and the calls the gateway makes for it.
    tasks: crate::tasks::Tasks,
    own_calls: tasks::OwnCalls,
    /// The held results' needs (without words) as of an inbox revision on this host: the
    /// notification round lists every need twice a second, and formatting each held result
    /// again was a third of a 12×100 simulation's CPU.
    result_needs: Option<needs::ResultNeeds>,
    /// Calls asked and not yet answered, while invariants are checked: a call answered twice
    /// or answered without being asked is caught at the step it happens.
    #[cfg(any(debug_assertions, feature = "invariants"))]
    open_calls: invariants::OpenCalls,
    /// What the reply-path check last read (it walks again only once that has changed).
    #[cfg(any(debug_assertions, feature = "invariants"))]
    reply_path_read: Option<invariants::ReplyPathRead>,
}

impl Gateway {
    /// No invariant check after each step, in a build that makes them (debug, or the
    /// simulation's `invariants` feature, which every crate beside the simulation's inherits
    /// through Cargo's feature unification): for a benchmark that must measure the gateway as
    /// the daemon's release build runs it. Does nothing in a build without the checks.
    pub fn skip_invariant_checks(&mut self) {
        #[cfg(any(debug_assertions, feature = "invariants"))]
        {
            self.open_calls.skipped = true;
        }
    }

    /// A gateway whose ids come from `seed` and whose clock starts at `now`. Ids are dedup keys
    /// across hosts: a daemon must draw a fresh seed on every start (only the simulation
    /// reuses one, to replay a run).
    pub fn new(cfg: CoreConfig, seed: u64, now: Instant) -> Result<Self, ConfigError> {
        let compiled = cfg.validate()?;
        let bounds = Bounds {
            pickup_grace_polls: cfg.pickup_grace_polls,
            pickup_grace_span: cfg.poll_interval() * cfg.pickup_grace_polls.saturating_sub(1),
            stall_grace_polls: cfg.stall_grace_polls,
            readiness_grace_polls: cfg.readiness_grace_polls,
            post_turn_settle: Duration::from_millis(cfg.post_turn_settle_ms),
            io_timeout: Duration::from_millis(cfg.io_timeout_ms),
        };
        let health = crate::health::Monitor::new(&cfg.health, compiled.fatal.clone());
        let placement = crate::placement::Placement::new(cfg.placement.clone());
        let samples = SampleOrder::new(cfg.planted(crate::planted::PlantedBug::SamplesOutOfOrder));
        let notifier =
            crate::notify::Notifier::new(cfg.notify.clone()).planted(crate::notify::Planted {
                quiet_ignored: cfg.planted(crate::planted::PlantedBug::NoticeEveryScan),
                text_leaks: cfg.planted(crate::planted::PlantedBug::NoticeCarriesText),
                grace_ignored: cfg.planted(crate::planted::PlantedBug::NoticeIgnoresGrace),
                resolve_kept_open: cfg.planted(crate::planted::PlantedBug::NoticeResolvedTwice),
            });
        let tasks = crate::tasks::Tasks::default()
            .planted(cfg.planted(crate::planted::PlantedBug::TaskDepsIgnored));
        let reports = crate::agent_report::Reports::default()
            .planted(cfg.planted(crate::planted::PlantedBug::StaleReportBelieved));
        let mut gw = Gateway {
            inbox: ReplyInbox::new(cfg.inbox_cap_per_target, cfg.held_bytes_per_target),
            push: Push::new(
                cfg.nudge_max_reminders,
                Duration::from_millis(cfg.nudge_interval_ms),
            ),
            injector: Injector::new(bounds),
            samples,
            rendezvous: Rendezvous::new(),
            compiled,
            cfg,
            ids: IdMint::from_seed(seed),
            now,
            delegations: Delegations::default(),
            tickets: Tickets::default(),
            turns: BTreeMap::new(),
            last_delegator: BTreeMap::new(),
            delegator_of: BTreeMap::new(),
            nudges: BTreeMap::new(),
            sessions: Sessions::default(),
            host: HostId::new("local"),
            served: BTreeMap::new(),
            cards: BTreeMap::new(),
            wall_at: now,
            wall_unix: None,
            fx: Effects::default(),
            stats: Stats::default(),
            link: Link::Solo,
            spawns: Spawns::default(),
            stops: Stops::default(),
            adoption: Adoption::default(),
            health,
            reports,
            placement,
            beats: heartbeat::Heartbeats::default(),
            notifier,
            tasks,
            own_calls: tasks::OwnCalls::default(),
            result_needs: None,
            #[cfg(any(debug_assertions, feature = "invariants"))]
            open_calls: invariants::OpenCalls::default(),
            #[cfg(any(debug_assertions, feature = "invariants"))]
            reply_path_read: None,
        };
        gw.beats = heartbeat::Heartbeats::start(&mut gw.fx, &gw.cfg.heartbeats, now);
        Ok(gw)
    }

    /// Names a single-host gateway's host (roster rows, spawn answers). A federated gateway's
    /// host is its federation's.
    pub fn named(mut self, host: HostId) -> Self {
        self.host = host;
        self
    }

    /// The wall clock now, in Unix ms, if a `WallClock` input has set it.
    fn wall_now(&self) -> Option<u64> {
        let unix = self.wall_unix?;
        Some(unix.saturating_add(self.now.saturating_since(self.wall_at).as_millis() as u64))
    }

    /// The wall clock now, in Unix ms (0 before any `WallClock`; a federated gateway starts
    /// with one).
    fn unix_now(&self) -> u64 {
        self.wall_now().unwrap_or(0)
    }

    fn on_wall_clock(&mut self, now: Instant, unix_ms: u64) {
        self.wall_at = now;
        self.wall_unix = Some(unix_ms);
    }

    pub fn config(&self) -> &CoreConfig {
        &self.cfg
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The notification rules' counters.
    pub fn notify_stats(&self) -> crate::notify::NotifyStats {
        self.notifier.stats()
    }

    /// The ed25519 work this gateway has done (none without federation).
    pub fn crypto_counts(&self) -> crate::signing::CryptoCounts {
        self.link
            .fleet()
            .map(|f| f.cfg.keyring.counts())
            .unwrap_or_default()
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

    /// Whether member `gid`'s readiness gate is open; `None` when no member pane is known here
    /// by that gid.
    pub fn member_ready(&self, gid: &SessionId) -> Option<bool> {
        self.injector.gate_state(gid)
    }

    /// The native session id member `gid`'s agent last reported (what resuming it needs).
    pub fn reported_session(&self, gid: &SessionId) -> Option<&str> {
        self.reports.session(gid)
    }

    /// Spawns reserved and not yet ready or failed (`fleet_sessions{state="spawning"}`).
    pub fn spawns_in_flight(&self) -> usize {
        self.spawns.reserved()
    }

    /// Every lead's task list here.
    pub fn tasks(&self) -> &crate::tasks::Tasks {
        &self.tasks
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
        #[cfg(any(debug_assertions, feature = "invariants"))]
        let step = input.name();
        match input {
            Input::Call {
                call,
                caller,
                request,
            } => {
                #[cfg(any(debug_assertions, feature = "invariants"))]
                self.open_calls.asked(call);
                self.on_call(now, call, caller, request)
            }
            Input::StatusSampled {
                target,
                status,
                screen,
                asked,
            } => {
                if self.samples.fresh(&target, asked) {
                    self.on_sample(now, &target, status, screen.as_deref())
                }
            }
            Input::StatusesSampled {
                round,
                samples,
                asked,
            } => self.on_statuses(now, round, samples, asked),
            Input::StatusHint { target } => {
                if self.injector.is_active(&target) {
                    self.poll_status(target);
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
                self.local_entity(
                    &target,
                    crate::roster::EntityKind::Member,
                    entities::Announce::Later,
                );
            }
            Input::MembersListed { members } => self.on_members_listed(now, members),
            Input::MemberConnected { target } => self.member_connected(&target),
            Input::Spawned { gid, result } => self.on_spawned(now, gid, result),
            Input::StartLooked { gid, look } => self.on_start_looked(now, gid, look),
            Input::LeadAttached { lead } => self.local_entity(
                &lead,
                crate::roster::EntityKind::Lead,
                entities::Announce::Now,
            ),
            Input::Broker(ev) => self.on_broker(now, ev),
            Input::WallClock { unix_ms } => self.on_wall_clock(now, unix_ms),
            Input::PaneGone { target } => self.on_pane_gone(now, &target),
            Input::Shutdown => self.abandon_all(now),
            Input::Tick => self.on_tick(now),
            Input::ReplayRecord { entries } => self.restore_replay_record(&entries),
            Input::TasksRestored { lists } => self.restore_tasks(lists),
            Input::HealthProbed { probes } => self.on_health_probed(now, probes),
        }
        self.settle(now);
        #[cfg(any(debug_assertions, feature = "invariants"))]
        self.assert_invariants(step);
    }

    /// herdr's answer for one pane: the restart rule's verdict, the injector's gate and the
    /// roster all read the same sample.
    fn on_sample(
        &mut self,
        now: Instant,
        target: &SessionId,
        status: crate::AgentStatus,
        screen: Option<&str>,
    ) {
        self.adoption_sampled(target, status);
        let status = crate::completion::refine(status, screen, &self.compiled);
        self.injector.on_sample(now, target, status);
        self.status_sampled(target, status);
    }

    /// The next thing to do, in the order decided.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.fx.pop()
    }

    /// When to call `handle(_, Input::Tick)` even if nothing arrives.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<(Instant, TimerKind)> {
        let mut best = self.fx.earliest();
        for (at, kind) in [(self.injector.next_deadline(), TimerKind::Injector)] {
            if let Some(at) = at {
                if best.as_ref().is_none_or(|(b, _)| at < *b) {
                    best = Some((at, kind));
                }
            }
        }
        best
    }

    /// After every input: what the injector and the push rule decided, then the next poll.
    fn settle(&mut self, now: Instant) {
        self.run_tasks(now);
        self.drain_injector(now);
        self.pump_nudges(now);
        self.drain_injector(now);
        if !self.fx.is_set(Once::StatusPoll) && (self.injector.has_active() || self.adoption.any())
        {
            self.fx
                .set(Once::StatusPoll, now + self.cfg.poll_interval());
        }
        self.arm_health(now);
        self.arm_notify(now);
    }

    fn respond(&mut self, call: CallId, response: Response) {
        #[cfg(any(debug_assertions, feature = "invariants"))]
        self.open_calls.answered(call);
        if call.is_own() {
            return self.own_calls.answered(call, response);
        }
        self.fx.emit(Output::Respond { call, response });
    }

    /// Responds to what a sub-machine is done with.
    fn answer(&mut self, answers: impl IntoIterator<Item = answer::Answer>) {
        for a in answers {
            self.respond(a.call, a.response);
        }
    }

    fn invalid(&mut self, call: CallId, reason: &str) {
        self.respond(
            call,
            Response::Error(CallError::InvalidArgument {
                reason: reason.to_string(),
            }),
        );
    }

    /// Types `text` into `target` as `msg`: its baseline for the reply scrape and its floor for
    /// status samples are set with it, so no sample taken before the typing can speak after.
    fn type_into(&mut self, target: SessionId, msg: MsgId, text: String) {
        self.stats.injections_total += 1;
        self.rendezvous.typing(&target, msg, &text);
        self.reports.typed(&target, msg, &text);
        self.samples.typing(&target);
        self.fx.emit(Output::Inject { target, msg, text });
    }

    /// Reads `target`'s screen for `msg`'s turn (`Input::PaneRead` answers).
    fn read_pane(&mut self, target: SessionId, msg: MsgId) {
        self.fx.emit(Output::ReadPane { target, msg });
    }

    /// Opens `gid`'s readiness gate and tells the driver, together: typing may begin.
    fn open_member(&mut self, gid: &SessionId) {
        self.injector.open_gate(gid);
        self.fx.emit(Output::MemberReady { gid: gid.clone() });
    }

    /// Asks the driver to close `gid`'s pane; its going comes back as `PaneGone`.
    fn close_pane(&mut self, gid: SessionId) {
        self.fx.emit(Output::ClosePane { gid });
    }

    /// Looks at member `gid`, listed as still starting, for its start gate (`StartLooked`
    /// answers). A spawn's reservation asks for its own looks (`Spawns`).
    fn look_at_start(&mut self, gid: SessionId) {
        self.fx.emit(Output::LookAtStart { gid });
    }

    /// Asks for `target`'s status (`Input::StatusSampled` answers), in its place in the
    /// sample order.
    fn poll_status(&mut self, target: SessionId) {
        let asked = self.samples.ask();
        self.fx.emit(Output::PollStatus { target, asked });
    }

    /// Asks for every one of `targets` from one listing (`Input::StatusesSampled` answers).
    fn poll_statuses(&mut self, round: crate::io::Round, targets: Vec<SessionId>) {
        let asked = self.samples.ask();
        self.fx.emit(Output::PollStatuses {
            round,
            targets,
            asked,
        });
    }

    /// Probes `targets`' health (`Input::HealthProbed` answers).
    fn probe_health(&mut self, targets: Vec<SessionId>) {
        if !targets.is_empty() {
            self.fx.emit(Output::ProbeHealth { targets });
        }
    }

    /// Something for the broker to do (cross-host only).
    fn broker(&mut self, op: crate::broker::BrokerOp) {
        self.fx.emit(Output::Broker(op));
    }

    /// One authorisation decision for the audit log.
    fn audit(&mut self, decision: crate::authz::AuditEvent) {
        self.fx.emit(Output::Audit(decision));
    }

    /// Replay-record entries to keep durably before what they lead to is carried out.
    fn keep_durably(&mut self, journal: Vec<crate::io::Remembered>) {
        if !journal.is_empty() {
            self.fx.emit(Output::Remember(journal));
        }
    }

    /// The push rule's next reminder, if it named one.
    fn nudge_at(&mut self, at: Option<Instant>) {
        if let Some(at) = at {
            self.fx.wake(at, TimerKind::Nudge);
        }
    }

    /// Arms the health round while there is a member to watch, or a tombstone to expire.
    fn arm_health(&mut self, now: Instant) {
        let watching = self
            .served
            .values()
            .any(|s| s.kind == crate::roster::EntityKind::Member)
            || self.health.has_tombstones();
        if self.fx.is_set(Once::Health) || !watching {
            return;
        }
        let at = now + Duration::from_millis(self.cfg.health.interval_ms);
        self.fx.set(Once::Health, at);
    }

    fn event(&mut self, e: Event) {
        match &e {
            // A claimed gid is refused by name, its presence acked: not a dead letter.
            Event::Rejected { code, .. } if *code != RejectCode::GidClaimed => {
                self.stats.dead_letters_total += 1
            }
            Event::BrokerDropped { .. } => self.stats.broker_drops_total += 1,
            _ => {}
        }
        self.fx.emit(Output::Event(e));
    }
}
