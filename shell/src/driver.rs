//! The driver loop: owns one `fleet_core::Gateway`, feeds it what happens — calls from the
//! north faces, broker events, finished pane operations, its own deadlines — and carries out
//! what it asks for through the ports. The daemon and the simulation run this same loop.
//!
//! One task, no locks: the gateway is only ever touched here. Pane operations run concurrently
//! as futures owned by the loop; their results come back as inputs as each finishes (a status
//! sample carries its ask's place back, and the core judges whether it is stale:
//! `fleet_core::sample_order`). The `select!` is `biased;` so, given the same events, the loop
//! takes them in the same order.

use crate::ports::{BrokerPort, Clock, HerdrError, HerdrPort, PortFuture};
use crate::replay_record::{InMemory, ReplayRecord};
use fleet_core::{
    CallId, Gateway, Input, Instant, Output, PaneError, Principal, Request, Response, Sampled,
};
use futures_util::stream::{FuturesUnordered, StreamExt};
use std::collections::BTreeMap;
use tokio::sync::{mpsc, oneshot};

/// A call from a north face: who is calling (already resolved from the connection), what
/// they ask, and where the one answer goes.
#[derive(Debug)]
pub struct Call {
    pub caller: Principal,
    pub request: Request,
    pub reply: oneshot::Sender<Response>,
}

/// What the rest of the daemon hands the loop: calls, and facts the core must hear about
/// that are not calls (a lead attached, a member's MCP connection opened, a pane exited).
#[derive(Debug)]
pub enum ToLoop {
    Call(Call),
    Tell(Input),
}

/// The north faces' handle on a running loop.
#[derive(Clone, Debug)]
pub struct Handle {
    calls: mpsc::Sender<ToLoop>,
}

/// The loop is gone (shut down); the call was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the gateway is shutting down")]
pub struct Gone;

impl Handle {
    /// Makes a call and waits for its one answer.
    pub async fn call(&self, caller: Principal, request: Request) -> Result<Response, Gone> {
        let (reply, answer) = oneshot::channel();
        self.calls
            .send(ToLoop::Call(Call {
                caller,
                request,
                reply,
            }))
            .await
            .map_err(|_| Gone)?;
        answer.await.map_err(|_| Gone)
    }

    /// Tells the loop something happened (`LeadAttached`, `MemberConnected`, `PaneGone`, …).
    pub async fn tell(&self, input: Input) -> Result<(), Gone> {
        self.calls.send(ToLoop::Tell(input)).await.map_err(|_| Gone)
    }
}

/// Sees every output before it is carried out: logs, metrics, the simulation's trace.
pub trait Observer {
    fn output(&mut self, now: Instant, output: &Output);
    /// Sees every input before the core does (deliveries carry the trace ids logs follow).
    fn input(&mut self, _now: Instant, _input: &Input) {}
    /// Called once the outputs of a step are carried out: gauges are read here.
    fn settled(&mut self, _now: Instant, _gw: &Gateway) {}
}

/// Observes nothing.
#[derive(Debug, Default)]
pub struct Quiet;

impl Observer for Quiet {
    fn output(&mut self, _now: Instant, _output: &Output) {}
}

/// How many calls may wait for the loop before callers are slowed down.
const CALL_QUEUE: usize = 1024;

/// A wall clock that moved this far against the monotonic one (NTP step, suspend, an operator)
/// is reported to the core (`Input::WallClock`), which stamps and judges expiry by it.
const WALL_JUMP_MS: u64 = 1_000;

pub struct Driver<H, B, C, O = Quiet> {
    gw: Gateway,
    herdr: H,
    broker: B,
    clock: C,
    observer: O,
    ops: FuturesUnordered<PortFuture<Option<Input>>>,
    waiting: BTreeMap<CallId, oneshot::Sender<Response>>,
    next_call: u64,
    /// The wall clock as last told to the core, and the monotonic instant it was read at.
    wall: (fleet_core::Instant, u64),
    /// Where `Output::Remember` is kept (memory only unless `with_record` says otherwise).
    record: Box<dyn ReplayRecord>,
    /// Where `Output::Notify` goes (nowhere unless `with_notices` says otherwise).
    notices: Box<dyn crate::ports::NoticePort>,
    /// Where `Output::KeepTasks` is kept (memory only unless `with_tasks` says otherwise).
    tasks: Box<dyn crate::task_store::TaskStore>,
    /// Why the loop stopped carrying anything out: something it must keep durably before
    /// what follows could not be kept (`halt`).
    halted: Option<String>,
    /// Told that reason, once (`with_halt`).
    on_halt: Option<oneshot::Sender<String>>,
}

/// What woke the loop.
enum Step {
    Shutdown,
    Done(Option<Input>),
    Broker(Option<fleet_core::broker::BrokerEvent>),
    Call(Option<ToLoop>),
    Deadline,
}

impl<H: HerdrPort, B: BrokerPort, C: Clock, O: Observer> Driver<H, B, C, O> {
    pub fn new(gw: Gateway, herdr: H, broker: B, clock: C, observer: O) -> Self {
        let wall = (clock.now(), clock.unix_ms());
        Driver {
            gw,
            herdr,
            broker,
            clock,
            observer,
            ops: FuturesUnordered::new(),
            waiting: BTreeMap::new(),
            next_call: 0,
            wall,
            record: Box::new(InMemory),
            notices: Box::new(crate::ports::NoNotices),
            tasks: Box::new(crate::task_store::NoTaskStore),
            halted: None,
            on_halt: None,
        }
    }

    /// Keeps the replay record in `record` (the daemon: a file under `state_dir`).
    pub fn with_record(mut self, record: impl ReplayRecord + 'static) -> Self {
        self.record = Box::new(record);
        self
    }

    /// Keeps task lists in `store` (the daemon: files under `state_dir/tasks`).
    pub fn with_tasks(mut self, store: impl crate::task_store::TaskStore + 'static) -> Self {
        self.tasks = Box::new(store);
        self
    }

    /// Tells `tx` why, if the loop halts: a replay-record entry or a task list it had to keep
    /// before the step's later outputs could not be kept, so it carried out none of them (a
    /// brief published or typed, a result acked, after a change the disk did not take could
    /// be typed twice or lost after a restart) and stopped.
    pub fn with_halt(mut self, tx: oneshot::Sender<String>) -> Self {
        self.on_halt = Some(tx);
        self
    }

    /// Carries notices out through `sinks` (the daemon's `[[notify]]`).
    pub fn with_notices(mut self, sinks: impl crate::ports::NoticePort + 'static) -> Self {
        self.notices = Box::new(sinks);
        self
    }

    /// A handle for the north faces and the loop's call queue, to pass to `run`.
    pub fn channel() -> (Handle, mpsc::Receiver<ToLoop>) {
        let (calls, rx) = mpsc::channel(CALL_QUEUE);
        (Handle { calls }, rx)
    }

    /// Runs until `shutdown` fires (or every handle is dropped), then tells the core
    /// (`Input::Shutdown`: open delegations from other hosts are abandoned), carries out what
    /// that produces, answers any call still waiting with an error-free drop, and returns the
    /// gateway for inspection.
    pub async fn run(
        mut self,
        mut calls: mpsc::Receiver<ToLoop>,
        mut shutdown: oneshot::Receiver<()>,
    ) -> Gateway {
        let mut calls_open = true;
        // The core dates what it reports (a member's `since`) by the wall clock it was told.
        let unix_ms = self.wall.1;
        self.feed(Input::WallClock { unix_ms });
        loop {
            self.flush();
            if let Some(why) = self.halted.take() {
                tracing::error!(%why, "the driver loop halted: nothing more is carried out");
                if let Some(tx) = self.on_halt.take() {
                    let _ = tx.send(why);
                }
                return self.gw;
            }
            let sleep: PortFuture<()> = match self.gw.poll_timeout() {
                Some((at, _)) => self.clock.sleep_until(at),
                None => Box::pin(std::future::pending()),
            };
            let step = tokio::select! {
                biased;
                _ = &mut shutdown => Step::Shutdown,
                Some(done) = self.ops.next(), if !self.ops.is_empty() => Step::Done(done),
                ev = self.broker.next_event() => Step::Broker(ev),
                call = calls.recv(), if calls_open => Step::Call(call),
                () = sleep => Step::Deadline,
            };
            match step {
                Step::Shutdown => break,
                Step::Done(Some(input)) => self.feed(input),
                Step::Done(None) => {}
                Step::Broker(Some(ev)) => self.feed(Input::Broker(ev)),
                // The broker port closed: it reports Down itself before that; nothing to do.
                Step::Broker(None) => {}
                Step::Call(Some(ToLoop::Call(call))) => self.take_call(call),
                Step::Call(Some(ToLoop::Tell(input))) => self.feed(input),
                Step::Call(None) => {
                    calls_open = false;
                    let idle = self.ops.is_empty();
                    if idle && self.gw.poll_timeout().is_none() {
                        break;
                    }
                }
                Step::Deadline => {
                    self.check_wall_clock();
                    self.feed(Input::Tick);
                }
            }
        }
        self.feed(Input::Shutdown);
        self.flush();
        self.gw
    }

    /// Tells the core when the wall clock jumped against the monotonic one.
    fn check_wall_clock(&mut self) {
        let (now, unix) = (self.clock.now(), self.clock.unix_ms());
        let expected = self.wall.1.saturating_add(
            u64::try_from(now.saturating_since(self.wall.0).as_millis()).unwrap_or(u64::MAX),
        );
        if unix.abs_diff(expected) >= WALL_JUMP_MS {
            self.wall = (now, unix);
            self.feed(Input::WallClock { unix_ms: unix });
        }
    }

    fn feed(&mut self, input: Input) {
        let now = self.clock.now();
        self.observer.input(now, &input);
        self.gw.handle(now, input);
    }

    fn take_call(&mut self, call: Call) {
        self.next_call += 1;
        let id = CallId(self.next_call);
        self.waiting.insert(id, call.reply);
        self.feed(Input::Call {
            call: id,
            caller: call.caller,
            request: call.request,
        });
    }

    /// Stops carrying anything out: the step's later outputs are dropped with the gateway.
    fn halt(&mut self, why: String) {
        while self.gw.poll_output().is_some() {}
        self.halted = Some(why);
    }

    /// Carries out everything the gateway asked for, in its order.
    fn flush(&mut self) {
        let now = self.clock.now();
        while let Some(out) = self.gw.poll_output() {
            self.observer.output(now, &out);
            match out {
                // Samples and typings are fed as they finish: the core tells a stale sample by
                // the place its ask carries (`sample_order`).
                Output::PollStatus { target, asked } => {
                    let op = self.herdr.sample(&target);
                    self.ops.push(Box::pin(async move {
                        match op.await {
                            Ok(s) => Some(Input::StatusSampled {
                                target,
                                status: s.status,
                                screen: s.screen,
                                asked,
                            }),
                            Err(HerdrError::PaneNotFound) => Some(Input::PaneGone { target }),
                            // No answer: the next poll samples again; the core's bounds count.
                            Err(HerdrError::Unavailable(_)) => None,
                        }
                    }));
                }
                Output::PollStatuses {
                    round,
                    targets,
                    asked,
                } => self.sample_all(round, targets, asked),
                Output::ProbeHealth { targets } => self.probe_health(targets),
                Output::Inject { target, msg, text } => {
                    let op = self.herdr.inject(&target, &text);
                    self.ops.push(Box::pin(async move {
                        let result = op.await.map_err(fleet_core::InjectError::from);
                        Some(Input::Injected {
                            target,
                            msg,
                            result,
                        })
                    }));
                }
                Output::ReadPane { target, msg } => {
                    let op = self.herdr.read(&target);
                    self.ops.push(Box::pin(async move {
                        let result = op.await.map_err(PaneError::from);
                        Some(Input::PaneRead {
                            target,
                            msg,
                            result,
                        })
                    }));
                }
                Output::SpawnPane { gid, spec } => {
                    let op = self.herdr.spawn(&gid, &spec);
                    self.ops.push(Box::pin(async move {
                        let result = op.await;
                        Some(Input::Spawned { gid, result })
                    }));
                }
                Output::ClosePane { gid } => {
                    let op = self.herdr.close(&gid);
                    self.ops.push(Box::pin(async move {
                        match op.await {
                            Ok(()) | Err(HerdrError::PaneNotFound) => {
                                Some(Input::PaneGone { target: gid })
                            }
                            Err(HerdrError::Unavailable(_)) => None,
                        }
                    }));
                }
                Output::LookAtStart { gid } => self.look_at_start(gid),
                Output::MemberReady { gid } => self.herdr.ready(&gid),
                Output::Respond { call, response } => {
                    if let Some(tx) = self.waiting.remove(&call) {
                        // The caller may have gone away (a dropped MCP request): nothing lost
                        // but the answer it no longer wants.
                        let _ = tx.send(response);
                    }
                }
                Output::Broker(op) => self.broker.submit(op),
                // Synchronously, before any later output of the step (its ack, its inject).
                Output::Remember(entries) => {
                    if let Err(why) = self.record.keep(&entries, self.clock.unix_ms()) {
                        return self.halt(format!("the replay record could not be kept: {why}"));
                    }
                }
                Output::Notify(n) => self.notices.notify(n, self.clock.unix_ms()),
                // Synchronously, before any later output of the step (the brief a start
                // publishes, the ack of a result).
                Output::KeepTasks(list) => {
                    if let Err(why) = self.tasks.keep(&list) {
                        return self.halt(format!(
                            "{}'s task list could not be kept: {why}",
                            list.lead
                        ));
                    }
                }
                Output::Audit(_) | Output::Event(_) => {}
            }
        }
        self.observer.settled(now, &self.gw);
    }

    /// A round's samples from one listing, answered as `StatusesSampled` with the same place.
    fn sample_all(
        &mut self,
        round: fleet_core::Round,
        targets: Vec<fleet_core::SessionId>,
        asked: fleet_core::Asked,
    ) {
        let op = self.herdr.sample_all(&targets);
        self.ops.push(Box::pin(async move {
            // No answer at all: the next round samples again.
            let samples = op.await.ok()?;
            let samples = samples
                .into_iter()
                .filter_map(|(target, s)| match s {
                    Ok(s) => Some((
                        target,
                        Sampled::Status {
                            status: s.status,
                            screen: s.screen,
                        },
                    )),
                    Err(HerdrError::PaneNotFound) => Some((target, Sampled::Gone)),
                    Err(HerdrError::Unavailable(_)) => None,
                })
                .collect();
            Some(Input::StatusesSampled {
                round,
                samples,
                asked,
            })
        }));
    }

    /// One look at a starting member for the core's readiness gate: its end if its program
    /// ended, else its status and screen. Always answered: no answer is an answer too.
    fn look_at_start(&mut self, gid: fleet_core::SessionId) {
        let (ended, sample) = (self.herdr.ended(&gid), self.herdr.sample(&gid));
        let (read, gone) = (self.herdr.read(&gid), self.herdr.ended(&gid));
        self.ops.push(Box::pin(async move {
            if let Some(why) = ended.await {
                let look = Ok(Sampled::Ended { why });
                return Some(Input::StartLooked { gid, look });
            }
            // A pane found gone by either ask: its program's end, if it recorded one.
            let looked = match sample.await {
                Ok(s) => read.await.map(|screen| Sampled::Status {
                    status: s.status,
                    screen: Some(screen_tail(&screen)),
                }),
                Err(e) => Err(e),
            };
            let look = match looked {
                Ok(seen) => Ok(seen),
                Err(HerdrError::PaneNotFound) => Ok(match gone.await {
                    Some(why) => Sampled::Ended { why },
                    None => Sampled::Gone,
                }),
                Err(e) => Err(PaneError::from(e)),
            };
            Some(Input::StartLooked { gid, look })
        }));
    }

    /// The health round: one listing, and the end of each member's screen read once.
    fn probe_health(&mut self, targets: Vec<fleet_core::SessionId>) {
        let op = self.herdr.sample_all(&targets);
        // Each screen is read once, sample or not (one a member, in turn).
        let mut reads: BTreeMap<fleet_core::SessionId, _> = targets
            .iter()
            .map(|t| (t.clone(), (self.herdr.read(t), self.herdr.ended(t))))
            .collect();
        self.ops.push(Box::pin(async move {
            // No answer at all: the next round probes again.
            let samples = op.await.ok()?;
            let mut probes = Vec::with_capacity(samples.len());
            for (target, s) in samples {
                let probe = match s {
                    Ok(s) => {
                        // The end of its screen, bounded; a read that fails
                        // leaves only the status to judge by.
                        let screen = match reads.remove(&target) {
                            Some((read, _)) => read.await.ok().map(|s: String| screen_tail(&s)),
                            None => None,
                        };
                        Sampled::Status {
                            status: s.status,
                            screen,
                        }
                    }
                    Err(HerdrError::PaneNotFound) => {
                        let ended = match reads.remove(&target) {
                            Some((_, ended)) => ended.await,
                            None => None,
                        };
                        match ended {
                            Some(why) => Sampled::Ended { why },
                            None => Sampled::Gone,
                        }
                    }
                    Err(HerdrError::Unavailable(_)) => continue,
                };
                probes.push((target, probe));
            }
            Some(Input::HealthProbed { probes })
        }));
    }
}

/// The most a health probe keeps of a screen: its last bytes, cut at a character boundary.
pub const PROBE_SCREEN_BYTES: usize = 8 * 1024;

fn screen_tail(screen: &str) -> String {
    let mut from = screen.len().saturating_sub(PROBE_SCREEN_BYTES);
    while !screen.is_char_boundary(from) {
        from += 1;
    }
    screen[from..].to_string()
}
