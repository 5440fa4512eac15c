//! A gateway host of the turmoil world: the real driver loop (`fleetd::Driver`) with simulated
//! ports — `SimBrokerClient` over turmoil TCP, `SimHerdr` for the host's panes, `SimClock` on
//! the host's simulated time — plus the agents living in those panes, who call back into their
//! gateway as members do.

use crate::agent::{Behaviour, Pane, Task};
use crate::net::SimBrokerClient;
use crate::trace::{HostTrace, Trace};
use fleet_core::broker::QueueType;
use fleet_core::signing::Keyring;
use fleet_core::{
    AgentStatus, CallError, CoreConfig, Federation, Gateway, HostId, Input, Instant, Principal,
    Readiness, Request, Response, SessionId,
};
use fleetd::{
    Clock, Driver, Handle, HerdrError, HerdrPort, InjectFailure, PortFuture, Sample, Samples,
};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

/// Time on this host: tokio's clock, which turmoil drives, measured from this gateway's start;
/// wall time is the simulation's own (its epoch plus all the time it has run, across restarts),
/// so every run stamps the same instants.
#[derive(Clone, Debug)]
pub struct SimClock {
    origin: tokio::time::Instant,
    epoch_unix_ms: u64,
    /// How far this host's wall clock is off the simulation's (a clock-jump fault sets it).
    skew_ms: Rc<std::cell::Cell<i64>>,
}

impl SimClock {
    pub fn new(epoch_unix_ms: u64, skew_ms: Rc<std::cell::Cell<i64>>) -> Self {
        SimClock {
            origin: tokio::time::Instant::now(),
            epoch_unix_ms,
            skew_ms,
        }
    }
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        Instant::from_millis(u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX))
    }

    fn unix_ms(&self) -> u64 {
        let true_ms = match turmoil::since_epoch() {
            Some(d) => u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            None => self.epoch_unix_ms + self.now().as_millis(),
        };
        true_ms.saturating_add_signed(self.skew_ms.get())
    }

    fn sleep_until(&self, at: Instant) -> PortFuture<()> {
        let deadline = self.origin + Duration::from_millis(at.as_millis());
        Box::pin(tokio::time::sleep_until(deadline))
    }
}

/// The panes of one host. Labels survive a gateway restart (they live in herdr), not a host
/// crash (the panes die with it).
#[derive(Clone, Debug, Default)]
pub struct SimHerdr {
    panes: Rc<RefCell<BTreeMap<SessionId, Pane>>>,
    /// Spawned panes whose agent has not connected yet (their readiness gate): when herdr
    /// starts calling it idle, and when it connects and takes input.
    booting: Rc<RefCell<BTreeMap<SessionId, Boot>>>,
    /// The launcher's marks in the members' files (`STARTING_FILE` in fleetd): launched, and
    /// not yet called ready by the gateway (`Output::MemberReady`). A gateway restart keeps
    /// them; a host crash takes them with the panes.
    starting: Rc<RefCell<BTreeMap<SessionId, Readiness>>>,
    /// The oracle's record, which no crash wipes: every text typed, every duplicate launch.
    pub log: Rc<RefCell<PaneLog>>,
    /// A fixed launch time instead of the gid-chosen 1–6 s (tests that must act mid-launch).
    launch_delay: Rc<std::cell::Cell<Option<Duration>>>,
    /// The seeded stream that says how late each status answer is (`answer_delay`).
    answers: Rc<RefCell<Option<ChaCha8Rng>>>,
    /// The seeded stream that says which injects herdr fails (`inject_fault`).
    injects: Rc<RefCell<Option<ChaCha8Rng>>>,
    /// The seeded stream of the agents' own reports (`reporter`): which agents report, and
    /// what befalls each report; and whether this host's agents report at all.
    reports: Rc<RefCell<Option<ChaCha8Rng>>>,
    host_reports: Rc<std::cell::Cell<bool>>,
}

/// A spawned agent on its way up. Like Claude Code 2.1 in a real herdr, its pane reads idle
/// for seconds before the agent takes input (herdr calls a TUI still drawing idle), and what
/// is typed then is lost. One whose gate is its prompt (`Readiness::OnPrompt`) connects to
/// its gateway's MCP seconds before it draws its prompt and takes input, as the real one can.
#[derive(Clone, Copy, Debug)]
struct Boot {
    idle_at: Duration,
    connect_at: Duration,
    /// When it takes input: its connection for an `OnConnect` agent, its prompt for one
    /// gated on its prompt.
    input_at: Duration,
    /// Its gate is its prompt on screen: drawn at `input_at`.
    prompt: bool,
    connected: bool,
}

/// What a Claude Code-like agent shows while it starts (its banner) and once it takes input
/// (its input box between two rules), as the core's start rules read them.
const BANNER: &str = " ▐▛███▛█   Claude Code v2.1.328";
const RULE: &str = "────────────────────────────────────────";

/// How herdr fails an inject, as seen on a loaded host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InjectFault {
    /// The baseline read misses its answer bound: nothing is typed.
    Stalled,
    /// The text is typed, and the answer to `pane.send_input` never comes.
    Unconfirmed,
}

/// What happened to this host's panes, for the oracle.
#[derive(Clone, Debug, Default)]
pub struct PaneLog {
    /// (pane, text) for every successful inject, in order.
    pub typed: Vec<(SessionId, String)>,
    /// Gids launched into a second pane while their first one still lived.
    pub duplicates: Vec<SessionId>,
    /// (task text, sim ms) for every `fleet_reply` the gateway accepted — for a reply to
    /// another host, once the broker confirmed it.
    pub replied: Vec<(String, u64)>,
    /// (pane, sim ms) for every pane the gateway closed while it lived.
    pub closed: Vec<(SessionId, u64)>,
    /// (pane, state, whether its pane lived then, sim ms) for every health change reported.
    pub health: Vec<(SessionId, fleet_core::health::Health, bool, u64)>,
    /// (pane, text, what the pane was doing, sim ms) for every inject into a pane whose agent
    /// was busy or had not finished the task typed before (one message per turn).
    pub mid_turn: Vec<(SessionId, String, String, u64)>,
    /// (pane, task text, sim ms) for every turn an agent ended without `fleet_reply` (I14).
    pub ended_unreplied: Vec<(SessionId, String, u64)>,
    /// (pane, text, sim ms) for every text typed into an agent not taking input yet (I15).
    pub lost: Vec<(SessionId, String, u64)>,
    /// (notice, sim ms) for every notification the gateway gave its sinks (I16).
    pub notices: Vec<(fleet_core::notify::Notice, u64)>,
    /// Every turn's end an agent reported and the gateway answered (I18).
    pub reported_ends: Vec<crate::reporter::ReportedEnd>,
    /// (member, reply text) for every `fleet_reply` an agent made that was not refused outright
    /// (accepted, or its call died with its gateway): what a lead may receive, at most (I3).
    pub reply_attempts: Vec<(SessionId, String)>,
    /// (lead, task, its new state, sim ms) for every move of a task on this host's lists (I17).
    pub tasks: Vec<(
        SessionId,
        fleet_core::tasks::TaskId,
        fleet_core::tasks::TaskState,
        u64,
    )>,
}

const HERDR_LATENCY: Duration = Duration::from_millis(3);

/// One status answer in `LATE_ONE_IN` reaches the gateway up to `LATE_MAX_MS` late: herdr
/// evaluates a status when it answers, but on a loaded host the answer can take hundreds of
/// milliseconds to be read — after newer answers, and after a brief was typed.
const LATE_ONE_IN: u64 = 8;
const LATE_MAX_MS: u64 = 1_500;

/// One inject in `STALL_ONE_IN` stalls before typing, one in `UNCONFIRMED_ONE_IN` is typed
/// and never confirmed; each answers after `INJECT_FAULT_MS` (herdr's answer bound).
const STALL_ONE_IN: u64 = 24;
const UNCONFIRMED_ONE_IN: u64 = 97;
const INJECT_FAULT_MS: u64 = 2_000;

impl SimHerdr {
    /// A host's panes, whose status answers run late as `seed` draws.
    pub fn seeded(seed: u64) -> SimHerdr {
        let h = SimHerdr::default();
        *h.answers.borrow_mut() = Some(ChaCha8Rng::seed_from_u64(seed));
        *h.injects.borrow_mut() = Some(ChaCha8Rng::seed_from_u64(!seed));
        // Its own stream, so the other draws of a seed stay as they were.
        let mut reports = ChaCha8Rng::seed_from_u64(seed ^ 0x7265_706f_7274_7321);
        h.host_reports.set(reports.next_u64().is_multiple_of(2));
        *h.reports.borrow_mut() = Some(reports);
        h
    }

    /// The next draw of the reports' stream (0 on an unseeded herdr).
    pub(crate) fn report_draw(&self) -> u64 {
        self.reports
            .borrow_mut()
            .as_mut()
            .map_or(0, |r| r.next_u64())
    }

    /// `f` on `gid`'s agent's reporter, if it reports.
    pub(crate) fn with_reporter<T>(
        &self,
        gid: &SessionId,
        f: impl FnOnce(&mut crate::agent::Reporter) -> T,
    ) -> Option<T> {
        let mut panes = self.panes.borrow_mut();
        panes.get_mut(gid)?.reporter.as_mut().map(f)
    }

    /// Whether herdr fails the next inject, and how: the same seed, the same faults. An
    /// unseeded herdr never fails one.
    fn inject_fault(&self) -> Option<InjectFault> {
        let rng = self.injects.borrow_mut().as_mut().map(|r| r.next_u64())?;
        if rng.is_multiple_of(STALL_ONE_IN) {
            Some(InjectFault::Stalled)
        } else if (rng >> 16).is_multiple_of(UNCONFIRMED_ONE_IN) {
            Some(InjectFault::Unconfirmed)
        } else {
            None
        }
    }

    /// How long the next status answer takes to reach the gateway: the same seed, the same
    /// delays. An unseeded herdr is never late.
    fn answer_delay(&self) -> Duration {
        let Some(rng) = self.answers.borrow_mut().as_mut().map(|r| r.next_u64()) else {
            return HERDR_LATENCY;
        };
        if rng.is_multiple_of(LATE_ONE_IN) {
            HERDR_LATENCY + Duration::from_millis((rng >> 8) % LATE_MAX_MS)
        } else {
            HERDR_LATENCY
        }
    }

    pub fn add(&self, gid: &SessionId, behaviour: Behaviour) {
        let mut pane = Pane::new(behaviour, false);
        let draw = self.report_draw();
        pane.reporter = crate::reporter::choose(draw, self.host_reports.get());
        self.panes.borrow_mut().insert(gid.clone(), pane);
    }

    pub fn typed(&self, gid: &SessionId) -> Vec<String> {
        self.panes
            .borrow()
            .get(gid)
            .map(|p| {
                p.screen
                    .iter()
                    .filter_map(|l| l.strip_prefix("❯ ").map(str::to_string))
                    .filter(|l| !l.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn gids(&self) -> Vec<SessionId> {
        self.panes.borrow().keys().cloned().collect()
    }

    /// The member panes as a starting gateway lists them, each with its launch mark.
    pub fn listed(&self) -> Vec<fleet_core::ListedMember> {
        let starting = self.starting.borrow();
        self.gids()
            .into_iter()
            .map(|gid| fleet_core::ListedMember {
                starting: starting.get(&gid).copied(),
                gid,
            })
            .collect()
    }

    /// Panes whose agent is up (spawned ones after their boot).
    pub fn ready_gids(&self) -> Vec<SessionId> {
        let booting = self.booting.borrow();
        self.gids()
            .into_iter()
            .filter(|g| !booting.contains_key(g))
            .collect()
    }

    /// Every launch from now on takes `d`.
    pub fn set_launch_delay(&self, d: Duration) {
        self.launch_delay.set(Some(d));
    }

    /// What herdr says of `target`'s pane right now.
    fn sample_now(&self, target: &SessionId) -> Result<Sample, HerdrError> {
        let panes = self.panes.borrow();
        let p = panes
            .get(target)
            .filter(|p| p.alive)
            .ok_or(HerdrError::PaneNotFound)?;
        // An agent still booting has not reported itself to herdr yet, and once its TUI is
        // drawn herdr calls it idle — before it takes input.
        let status = match self.booting.borrow().get(target) {
            Some(b) if sim_now() >= b.idle_at => AgentStatus::Idle,
            Some(_) => AgentStatus::Unknown,
            None => p.status,
        };
        Ok(Sample {
            status,
            screen: (status == AgentStatus::Unknown).then(|| p.read()),
        })
    }

    /// A health change its gateway reported, beside the truth about the pane then (I13).
    pub(crate) fn record_health(&self, target: &SessionId, to: fleet_core::health::Health) {
        let alive = self.panes.borrow().get(target).is_some_and(|p| p.alive);
        let at = u64::try_from(sim_now().as_millis()).unwrap_or(u64::MAX);
        self.log
            .borrow_mut()
            .health
            .push((target.clone(), to, alive, at));
    }

    pub(crate) fn record_task(
        &self,
        lead: &SessionId,
        task: fleet_core::tasks::TaskId,
        state: fleet_core::tasks::TaskState,
    ) {
        let at = u64::try_from(sim_now().as_millis()).unwrap_or(u64::MAX);
        self.log
            .borrow_mut()
            .tasks
            .push((lead.clone(), task, state, at));
    }

    pub(crate) fn record_notice(&self, notice: &fleet_core::notify::Notice) {
        let at = u64::try_from(sim_now().as_millis()).unwrap_or(u64::MAX);
        self.log.borrow_mut().notices.push((notice.clone(), at));
    }

    /// The whole host went down: every pane and its agent died with it.
    pub fn crash(&self) {
        self.panes.borrow_mut().clear();
        self.booting.borrow_mut().clear();
        self.starting.borrow_mut().clear();
    }
}

impl HerdrPort for SimHerdr {
    /// Served when asked, answered `answer_delay` later.
    fn sample(&self, target: &SessionId) -> PortFuture<Result<Sample, HerdrError>> {
        let served = self.sample_now(target);
        let late = self.answer_delay();
        Box::pin(async move {
            tokio::time::sleep(late).await;
            served
        })
    }

    /// One listing for them all: one herdr round trip, served when asked.
    fn sample_all(&self, targets: &[SessionId]) -> PortFuture<Result<Samples, HerdrError>> {
        let served: Samples = targets
            .iter()
            .map(|t| (t.clone(), self.sample_now(t)))
            .collect();
        let late = self.answer_delay();
        Box::pin(async move {
            tokio::time::sleep(late).await;
            Ok(served)
        })
    }

    fn inject(&self, target: &SessionId, text: &str) -> PortFuture<Result<String, InjectFailure>> {
        let (panes, target, text) = (self.panes.clone(), target.clone(), text.to_string());
        let (log, booting) = (self.log.clone(), self.booting.clone());
        let fault = self.inject_fault();
        let bound = Duration::from_millis(INJECT_FAULT_MS);
        Box::pin(async move {
            tokio::time::sleep(HERDR_LATENCY).await;
            if fault == Some(InjectFault::Stalled) {
                tokio::time::sleep(bound).await;
                let why = format!("herdr did not answer pane.read within {INJECT_FAULT_MS} ms");
                return Err(HerdrError::Unavailable(why).into());
            }
            let baseline = {
                let mut panes = panes.borrow_mut();
                let p = panes
                    .get_mut(&target)
                    .filter(|p| p.alive)
                    .ok_or(HerdrError::PaneNotFound)?;
                let baseline = p.read();
                if booting.borrow().contains_key(&target) {
                    // Not taking input yet: herdr types it, the agent never sees it.
                    let at = u64::try_from(sim_now().as_millis()).unwrap_or(u64::MAX);
                    log.borrow_mut().lost.push((target, text, at));
                    return Ok(baseline);
                }
                let busy = match &p.task {
                    Some(t) => Some(format!("still on {:?}", t.text)),
                    None => (!p.status.injectable()).then(|| p.status.to_string()),
                };
                if let Some(busy) = busy {
                    let at = u64::try_from(sim_now().as_millis()).unwrap_or(u64::MAX);
                    log.borrow_mut()
                        .mid_turn
                        .push((target.clone(), text.clone(), busy, at));
                }
                if p.screen.last().is_some_and(|l| l.trim_end() == "❯") {
                    p.screen.pop();
                }
                p.print(format!("❯ {text}"));
                p.task = Some(Task { text: text.clone() });
                log.borrow_mut().typed.push((target, text));
                baseline
            };
            if fault == Some(InjectFault::Unconfirmed) {
                tokio::time::sleep(bound).await;
                let why =
                    format!("herdr did not answer pane.send_input within {INJECT_FAULT_MS} ms");
                return Err(InjectFailure::Unconfirmed(why));
            }
            Ok(baseline)
        })
    }

    fn read(&self, target: &SessionId) -> PortFuture<Result<String, HerdrError>> {
        let (panes, target) = (self.panes.clone(), target.clone());
        Box::pin(async move {
            tokio::time::sleep(HERDR_LATENCY).await;
            let panes = panes.borrow();
            Ok(panes
                .get(&target)
                .filter(|p| p.alive)
                .ok_or(HerdrError::PaneNotFound)?
                .read())
        })
    }

    fn spawn(
        &self,
        gid: &SessionId,
        _spec: &fleet_core::SpawnSpec,
    ) -> PortFuture<Result<fleet_core::Launched, fleet_core::SpawnError>> {
        let (me, gid) = (self.clone(), gid.clone());
        let salt = gid
            .as_str()
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        let launch = self
            .launch_delay
            .get()
            .unwrap_or(Duration::from_millis(1_000 + salt % 5_000));
        Box::pin(async move {
            // The launcher provisions the worktree and opens the pane: 1–6 s, chosen by the gid.
            tokio::time::sleep(launch).await;
            if me.panes.borrow().contains_key(&gid) {
                me.log.borrow_mut().duplicates.push(gid.clone());
            }
            me.add(&gid, Behaviour::Replies);
            // The agent boots, then takes input: 3–15 s, as a coding agent and its MCP
            // connection take. herdr calls it idle 1–4 s before that. Half of them are gated
            // on their prompt, and connect 1–4 s before they draw it.
            let boot = 3_000 + (salt >> 16) % 12_000;
            let drawn = boot.saturating_sub(1_000 + (salt >> 32) % 3_000);
            let prompt = (salt >> 44) % 2 == 0;
            let early = if prompt {
                1_000 + (salt >> 48) % 3_000
            } else {
                0
            };
            let boot = Boot {
                idle_at: sim_now() + Duration::from_millis(drawn),
                connect_at: sim_now() + Duration::from_millis(boot.saturating_sub(early)),
                input_at: sim_now() + Duration::from_millis(boot),
                prompt,
                connected: false,
            };
            if prompt {
                if let Some(p) = me.panes.borrow_mut().get_mut(&gid) {
                    p.screen = vec![BANNER.to_string()];
                }
            }
            me.booting.borrow_mut().insert(gid.clone(), boot);
            let readiness = match prompt {
                true => Readiness::OnPrompt(fleet_core::agent_screen::StartRules::ClaudeCode),
                false => Readiness::OnConnect,
            };
            let reports = me.with_reporter(&gid, |_| ()).is_some();
            me.starting.borrow_mut().insert(gid, readiness);
            Ok(fleet_core::Launched {
                reports,
                ..readiness.into()
            })
        })
    }

    fn close(&self, gid: &SessionId) -> PortFuture<Result<(), HerdrError>> {
        let (panes, gid) = (self.panes.clone(), gid.clone());
        let (booting, log) = (self.booting.clone(), self.log.clone());
        let starting = self.starting.clone();
        Box::pin(async move {
            if panes.borrow_mut().remove(&gid).is_some() {
                let at = u64::try_from(sim_now().as_millis()).unwrap_or(u64::MAX);
                log.borrow_mut().closed.push((gid.clone(), at));
            }
            booting.borrow_mut().remove(&gid);
            starting.borrow_mut().remove(&gid);
            Ok(())
        })
    }

    fn ready(&self, gid: &SessionId) {
        self.starting.borrow_mut().remove(gid);
    }
}

/// Simulated time since the world began: the same on every host and across restarts.
pub(crate) fn sim_now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_else(|| {
        // Outside turmoil: the broker integration tests run this herdr double on real time.
        static ORIGIN: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
        ORIGIN.get_or_init(tokio::time::Instant::now).elapsed()
    })
}

pub use agents::agents;

mod agents;

/// What one gateway host runs with.
#[derive(Clone, Debug)]
pub struct GatewaySpec {
    pub host: HostId,
    pub seed: u64,
    pub secret: [u8; 32],
    pub peers: BTreeMap<HostId, [u8; 32]>,
    pub allow: BTreeSet<HostId>,
    pub queue_type: QueueType,
    pub epoch_unix_ms: u64,
    pub cfg: CoreConfig,
    pub leads: Vec<SessionId>,
    pub members: Vec<(SessionId, Behaviour)>,
    pub trace: Trace,
    /// This host's herdr: it outlives a gateway restart (its panes and their labels stay).
    pub herdr: SimHerdr,
    /// How many times this gateway has started; each start draws a fresh id seed.
    pub starts: Rc<RefCell<u64>>,
    /// This host's wall-clock error, in ms (clock-jump faults move it).
    pub skew_ms: Rc<std::cell::Cell<i64>>,
    /// This host's disk: the replay record, which outlives gateway restarts and host crashes.
    pub disk: SimDisk,
}

/// The replay record and the task lists on a simulated host's disk (written synchronously,
/// like the daemon's synced files: what was kept is there after any crash).
#[derive(Clone, Debug, Default)]
pub struct SimDisk {
    record: Rc<RefCell<Vec<fleet_core::admission::Remembered>>>,
    tasks: Rc<RefCell<std::collections::BTreeMap<SessionId, fleet_core::tasks::TaskList>>>,
}

impl fleetd::task_store::TaskStore for SimDisk {
    fn keep(&mut self, list: &fleet_core::tasks::TaskList) -> Result<(), String> {
        self.tasks
            .borrow_mut()
            .insert(list.lead.clone(), list.clone());
        Ok(())
    }
}

impl fleetd::ReplayRecord for SimDisk {
    fn keep(
        &mut self,
        entries: &[fleet_core::admission::Remembered],
        now_unix_ms: u64,
    ) -> Result<(), String> {
        let mut r = self.record.borrow_mut();
        r.extend_from_slice(entries);
        if r.len() > 4_096 {
            r.retain(|e| e.expires_at >= now_unix_ms);
        }
        Ok(())
    }
}

/// The gateway host's program: the driver loop with simulated ports, its agents, and
/// `script` (the host's leads), until the host is crashed.
pub async fn run_gateway<F, Fut>(spec: GatewaySpec, script: F) -> turmoil::Result
where
    F: FnOnce(Handle, SimHerdr) -> Fut,
    Fut: Future<Output = ()> + 'static,
{
    let clock = SimClock::new(spec.epoch_unix_ms, spec.skew_ms.clone());
    let start = {
        let mut n = spec.starts.borrow_mut();
        *n += 1;
        *n
    };
    let keyring = Keyring::new(spec.host.clone(), spec.secret, &spec.peers)?;
    let federation = Federation {
        host: spec.host.clone(),
        keyring,
        namespace: "fleet".into(),
        control_allowlist: spec.allow.clone(),
        queue_type: spec.queue_type,
    };
    let mut gw = Gateway::federated(
        spec.cfg.clone(),
        federation,
        spec.seed.wrapping_add(start.wrapping_mul(0x9e37_79b9)),
        clock.now(),
        clock.unix_ms(),
    )?;
    let entries = spec.disk.record.borrow().clone();
    gw.handle(clock.now(), Input::ReplayRecord { entries });
    let lists: Vec<_> = spec.disk.tasks.borrow().values().cloned().collect();
    if !lists.is_empty() {
        gw.handle(clock.now(), Input::TasksRestored { lists });
    }
    let herdr = spec.herdr.clone();
    if start == 1 {
        for (gid, b) in &spec.members {
            herdr.add(gid, *b);
        }
    }
    let broker = SimBrokerClient::start("broker");
    let observer = HostTrace {
        host: spec.host.clone(),
        trace: spec.trace.clone(),
        herdr: herdr.clone(),
    };
    let driver = Driver::new(gw, herdr.clone(), broker, clock, observer)
        .with_record(spec.disk.clone())
        .with_tasks(spec.disk.clone());
    let (handle, calls) = Driver::<SimHerdr, SimBrokerClient, SimClock, HostTrace>::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    for lead in &spec.leads {
        handle
            .tell(Input::LeadAttached { lead: lead.clone() })
            .await?;
    }
    // The registry is rebuilt from the panes herdr still has (their `fleet:<gid>` labels),
    // not from memory, by the core's own restart rule — the one fleetd runs: each is adopted
    // on its first live sample (or its agent connecting, for one still booting through
    // `agents`), or closed if herdr calls it `unknown` through the readiness bound.
    handle
        .tell(Input::MembersListed {
            members: herdr.listed(),
        })
        .await?;
    tokio::task::spawn_local(agents(herdr.clone(), handle.clone()));
    tokio::task::spawn_local(script(handle, herdr));
    driver.run(calls, stopped).await;
    drop(stop);
    Ok(())
}

/// Host `i`'s gateway name in a multi-host world.
pub fn host_name(i: usize) -> HostId {
    HostId::new(format!("gw{i}"))
}
