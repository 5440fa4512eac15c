//! `Injector`: per-target FIFO queues, at most one message per turn, serialized per target,
//! status-gated (ch. 9, Figure 6).
//!
//! A turn is judged complete only from a confirmed WORKING → injectable boundary. Three grace
//! bounds, counted in status samples, close the failure paths: pickup (a missed fast turn),
//! stall (a wedged turn) and readiness (a member that never connected).

use crate::ids::{MsgId, SessionId};
use crate::status::AgentStatus;
use crate::time::{Duration, Instant};
use indexmap::IndexMap;
use rustc_hash::FxBuildHasher;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Tracks by target: hashed for the per-sample lookup (the hottest path of the core), and
/// iterated in insertion order, which depends only on the sequence of operations — never on
/// hash values — so the polls it drives stay deterministic. The hasher is fixed (no OS seed).
type Tracks = IndexMap<SessionId, Track, FxBuildHasher>;
use std::fmt;

/// The injector's bounds, lifted from `CoreConfig`.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub pickup_grace_polls: u32,
    pub stall_grace_polls: u32,
    pub readiness_grace_polls: u32,
    pub post_turn_settle: Duration,
    pub io_timeout: Duration,
}

/// Why a message or a turn ended without completing.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// `stall_grace_polls` consecutive UNKNOWN samples inside the turn (CB-109).
    Stalled,
    /// The member never became ready within `readiness_grace_polls` samples.
    NeverReady,
    /// The driver could not type the message into the pane.
    InjectFailed(String),
    /// The driver never reported the inject's result within `io_timeout`.
    IoTimedOut,
    /// The pane closed or its process exited.
    PaneGone,
    /// The sender gave up before delivery; the message is withdrawn, never typed late.
    SenderTimedOut,
    /// Nothing is left to say (a nudge whose items were all collected).
    Drained,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Stalled => f.write_str("stalled"),
            Cause::NeverReady => f.write_str("never_ready"),
            Cause::InjectFailed(why) => write!(f, "inject_failed({why})"),
            Cause::IoTimedOut => f.write_str("io_timed_out"),
            Cause::PaneGone => f.write_str("pane_gone"),
            Cause::SenderTimedOut => f.write_str("sender_timed_out"),
            Cause::Drained => f.write_str("drained"),
        }
    }
}

/// What the injector tells the gateway. Events are drained after every call, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InjectorEvent {
    /// Please read the baseline and type `text` into `target`, then report `Injected`.
    Inject {
        target: SessionId,
        msg: MsgId,
        text: String,
    },
    /// The text is in the pane: the turn has begun (Java `onDelivered`).
    Delivered { target: SessionId, msg: MsgId },
    /// A WORKING → injectable boundary, or a missed fast turn (`onTurnComplete`).
    TurnComplete {
        target: SessionId,
        msg: MsgId,
        missed_fast_turn: bool,
    },
    /// A delivered turn failed (`onTurnFailed`).
    TurnFailed {
        target: SessionId,
        msg: MsgId,
        cause: Cause,
    },
    /// A message that was never delivered ended with `cause`.
    Dropped {
        target: SessionId,
        msg: MsgId,
        cause: Cause,
    },
}

#[derive(Clone, Debug)]
struct Queued {
    msg: MsgId,
    text: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Turn {
    Quiescent,
    /// `Inject` went out; waiting for the driver's result.
    Injecting {
        msg: MsgId,
        deadline: Instant,
    },
    AwaitingPickup {
        msg: MsgId,
        injectable_polls: u32,
        unknown_polls: u32,
    },
    AwaitingCompletion {
        msg: MsgId,
        unknown_polls: u32,
    },
    /// After a completion: no delivery before `ready_at`, nor while the post-turn action of
    /// turn `msg` holds the target (until the instant given, at the latest).
    Settling {
        ready_at: Instant,
        hold: Option<(MsgId, Instant)>,
    },
}

#[derive(Clone, Debug)]
struct Track {
    queue: VecDeque<Queued>,
    turn: Turn,
    status: Option<AgentStatus>,
    not_ready_polls: u32,
    asking: bool,
}

impl Track {
    fn new() -> Self {
        Track {
            queue: VecDeque::new(),
            turn: Turn::Quiescent,
            status: None,
            not_ready_polls: 0,
            asking: false,
        }
    }

    fn idle(&self) -> bool {
        self.queue.is_empty() && self.turn == Turn::Quiescent && !self.asking
    }
}

/// A read-only view of one target for `fleet_status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetView {
    pub status: Option<AgentStatus>,
    pub ready: bool,
    pub queued: usize,
    pub in_turn: bool,
}

/// A turn that just ended, as `complete` reports it.
struct TurnEnd<'a> {
    target: &'a SessionId,
    msg: MsgId,
    /// Inferred from a pickup that never showed, not seen.
    missed_fast_turn: bool,
}

#[derive(Debug)]
pub struct Injector {
    bounds: Bounds,
    tracks: Tracks,
    /// Readiness-gated targets (members): `false` until the member connects.
    gates: BTreeMap<SessionId, bool>,
    /// Injecting and settling deadlines; stale entries are skipped when they fire.
    deadlines: BTreeSet<(Instant, SessionId)>,
    events: VecDeque<InjectorEvent>,
}

impl Injector {
    pub fn new(bounds: Bounds) -> Self {
        Injector {
            bounds,
            tracks: Tracks::default(),
            gates: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            events: VecDeque::new(),
        }
    }

    #[must_use]
    pub fn poll_event(&mut self) -> Option<InjectorEvent> {
        self.events.pop_front()
    }

    /// Queues `text` for `target`. Delivery waits for a fresh injectable sample.
    pub fn enqueue(&mut self, target: &SessionId, msg: MsgId, text: String) {
        self.tracks
            .entry(target.clone())
            .or_insert_with(Track::new)
            .queue
            .push_back(Queued { msg, text });
    }

    /// Marks `target` as a member that must connect before anything is typed into it. A member
    /// that already connected stays open (the two reports can arrive in either order).
    pub fn gate(&mut self, target: &SessionId) {
        self.gates.entry(target.clone()).or_insert(false);
    }

    /// The member connected: deliveries may proceed.
    pub fn open_gate(&mut self, target: &SessionId) {
        self.gates.insert(target.clone(), true);
        if let Some(t) = self.tracks.get_mut(target) {
            t.not_ready_polls = 0;
        }
    }

    /// `None` for a target with no gate (a lead), else whether its member has connected.
    pub fn gate_state(&self, target: &SessionId) -> Option<bool> {
        self.gates.get(target).copied()
    }

    pub fn is_ready(&self, target: &SessionId) -> bool {
        self.gates.get(target).copied().unwrap_or(true)
    }

    /// While a member is inside `fleet_ask` its turn is paused, not over: injectable samples
    /// must not end it, and nothing else may be typed into it.
    ///
    /// When the ask ends the turn resumes, so it needs a fresh WORKING sample (or the pickup
    /// bound) before it can end: a sample taken while it was still paused must not complete it.
    pub fn set_asking(&mut self, target: &SessionId, asking: bool) {
        if let Some(t) = self.tracks.get_mut(target) {
            t.asking = asking;
            if !asking {
                if let Turn::AwaitingPickup { msg, .. } | Turn::AwaitingCompletion { msg, .. } =
                    t.turn
                {
                    t.turn = Turn::AwaitingPickup {
                        msg,
                        injectable_polls: 0,
                        unknown_polls: 0,
                    };
                }
            }
        } else if asking {
            let mut t = Track::new();
            t.asking = true;
            self.tracks.insert(target.clone(), t);
        }
        self.forget_if_idle(target);
    }

    /// The message whose turn is running in `target`, once it is delivered.
    pub fn current_turn(&self, target: &SessionId) -> Option<MsgId> {
        match self.tracks.get(target).map(|t| &t.turn) {
            Some(Turn::AwaitingPickup { msg, .. } | Turn::AwaitingCompletion { msg, .. }) => {
                Some(*msg)
            }
            _ => None,
        }
    }

    /// True while `msg` waits in `target`'s queue (not yet handed to the driver).
    pub fn is_queued(&self, target: &SessionId, msg: MsgId) -> bool {
        self.tracks
            .get(target)
            .is_some_and(|t| t.queue.iter().any(|q| q.msg == msg))
    }

    pub fn view(&self, target: &SessionId) -> TargetView {
        let t = self.tracks.get(target);
        TargetView {
            status: t.and_then(|t| t.status),
            ready: self.is_ready(target),
            queued: t.map_or(0, |t| t.queue.len()),
            in_turn: t.is_some_and(|t| !matches!(t.turn, Turn::Quiescent | Turn::Settling { .. })),
        }
    }

    /// Targets with work in hand: the ones whose status must be sampled.
    pub fn active_targets(&self) -> impl Iterator<Item = &SessionId> {
        self.tracks.keys()
    }

    /// Whether `target` has work in hand (and is sampled).
    pub fn is_active(&self, target: &SessionId) -> bool {
        self.tracks.contains_key(target)
    }

    pub fn has_active(&self) -> bool {
        !self.tracks.is_empty()
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// Removes a still-queued message. Returns false if it is not queued (already handed on).
    pub fn withdraw(&mut self, target: &SessionId, msg: MsgId, cause: Cause) -> bool {
        let Some(t) = self.tracks.get_mut(target) else {
            return false;
        };
        let Some(pos) = t.queue.iter().position(|q| q.msg == msg) else {
            return false;
        };
        t.queue.remove(pos);
        self.events.push_back(InjectorEvent::Dropped {
            target: target.clone(),
            msg,
            cause,
        });
        self.forget_if_idle(target);
        true
    }

    /// The pane is gone: fail the running turn and every queued message.
    pub fn abort_target(&mut self, target: &SessionId, cause: Cause) {
        self.gates.remove(target);
        let Some(mut t) = self.tracks.swap_remove(target) else {
            return;
        };
        match t.turn {
            Turn::Injecting { msg, .. } => self.events.push_back(InjectorEvent::Dropped {
                target: target.clone(),
                msg,
                cause: cause.clone(),
            }),
            Turn::AwaitingPickup { msg, .. } | Turn::AwaitingCompletion { msg, .. } => {
                self.events.push_back(InjectorEvent::TurnFailed {
                    target: target.clone(),
                    msg,
                    cause: cause.clone(),
                })
            }
            Turn::Quiescent | Turn::Settling { .. } => {}
        }
        for q in t.queue.drain(..) {
            self.events.push_back(InjectorEvent::Dropped {
                target: target.clone(),
                msg: q.msg,
                cause: cause.clone(),
            });
        }
    }

    /// A status sample (one poll). `status` is already refined.
    pub fn on_sample(&mut self, now: Instant, target: &SessionId, status: AgentStatus) {
        let b = self.bounds;
        // One search of `tracks` per sample: this is the hottest path of the core.
        let Some(t) = self.tracks.get_mut(target) else {
            return;
        };
        t.status = Some(status);
        if let Turn::Settling { ready_at, hold } = t.turn {
            if settled(now, ready_at, hold) {
                t.turn = Turn::Quiescent;
            }
        }
        match t.turn {
            Turn::Quiescent => {
                if t.queue.is_empty() || t.asking {
                    // nothing to deliver, or the pane is mid-ask for another turn
                } else if !self.gates.get(target).copied().unwrap_or(true) {
                    t.not_ready_polls += 1;
                    if t.not_ready_polls >= b.readiness_grace_polls {
                        t.not_ready_polls = 0;
                        for q in t.queue.drain(..) {
                            self.events.push_back(InjectorEvent::Dropped {
                                target: target.clone(),
                                msg: q.msg,
                                cause: Cause::NeverReady,
                            });
                        }
                    }
                } else if status.injectable() {
                    t.not_ready_polls = 0;
                    if let Some(q) = t.queue.pop_front() {
                        let deadline = now + b.io_timeout;
                        t.turn = Turn::Injecting {
                            msg: q.msg,
                            deadline,
                        };
                        self.deadlines.insert((deadline, target.clone()));
                        self.events.push_back(InjectorEvent::Inject {
                            target: target.clone(),
                            msg: q.msg,
                            text: q.text,
                        });
                    }
                }
            }
            Turn::Injecting { .. } | Turn::Settling { .. } => {}
            Turn::AwaitingPickup {
                msg,
                injectable_polls,
                unknown_polls,
            } => match status {
                AgentStatus::Working => {
                    t.turn = Turn::AwaitingCompletion {
                        msg,
                        unknown_polls: 0,
                    }
                }
                AgentStatus::Unknown if !t.asking => {
                    // Deviation from Figure 6: a turn that goes UNKNOWN before pickup would
                    // otherwise hold the queue forever, so the stall bound applies here too.
                    let unknown_polls = unknown_polls + 1;
                    if unknown_polls >= b.stall_grace_polls {
                        t.turn = Turn::Quiescent;
                        self.events.push_back(InjectorEvent::TurnFailed {
                            target: target.clone(),
                            msg,
                            cause: Cause::Stalled,
                        });
                    } else {
                        t.turn = Turn::AwaitingPickup {
                            msg,
                            injectable_polls,
                            unknown_polls,
                        };
                    }
                }
                s if s.injectable() && !t.asking => {
                    let injectable_polls = injectable_polls + 1;
                    if injectable_polls >= b.pickup_grace_polls {
                        let end = TurnEnd {
                            target,
                            msg,
                            missed_fast_turn: true,
                        };
                        Self::complete(t, &mut self.events, &mut self.deadlines, now, b, end);
                    } else {
                        t.turn = Turn::AwaitingPickup {
                            msg,
                            injectable_polls,
                            unknown_polls: 0,
                        };
                    }
                }
                _ => {}
            },
            Turn::AwaitingCompletion { msg, unknown_polls } => match status {
                AgentStatus::Working => {
                    t.turn = Turn::AwaitingCompletion {
                        msg,
                        unknown_polls: 0,
                    }
                }
                AgentStatus::Unknown if !t.asking => {
                    let unknown_polls = unknown_polls + 1;
                    if unknown_polls >= b.stall_grace_polls {
                        t.turn = Turn::Quiescent;
                        self.events.push_back(InjectorEvent::TurnFailed {
                            target: target.clone(),
                            msg,
                            cause: Cause::Stalled,
                        });
                    } else {
                        t.turn = Turn::AwaitingCompletion { msg, unknown_polls };
                    }
                }
                s if s.injectable() && !t.asking => {
                    let end = TurnEnd {
                        target,
                        msg,
                        missed_fast_turn: false,
                    };
                    Self::complete(t, &mut self.events, &mut self.deadlines, now, b, end);
                }
                _ => {}
            },
        }
        if t.idle() {
            self.tracks.swap_remove(target);
        }
    }

    /// The turn `end` names is over: the target settles for the post-turn bound.
    fn complete(
        t: &mut Track,
        events: &mut VecDeque<InjectorEvent>,
        deadlines: &mut BTreeSet<(Instant, SessionId)>,
        now: Instant,
        b: Bounds,
        end: TurnEnd<'_>,
    ) {
        let TurnEnd {
            target,
            msg,
            missed_fast_turn,
        } = end;
        let ready_at = now + b.post_turn_settle;
        t.turn = Turn::Settling {
            ready_at,
            hold: None,
        };
        if ready_at > now {
            deadlines.insert((ready_at, target.clone()));
        }
        events.push_back(InjectorEvent::TurnComplete {
            target: target.clone(),
            msg,
            missed_fast_turn,
        });
    }

    /// The post-turn action of turn `msg` (its completion scrape) must finish before the next
    /// delivery; it holds the target until `release(msg)` or `io_timeout`, whichever is first.
    pub fn hold(&mut self, now: Instant, target: &SessionId, msg: MsgId) {
        let until = now + self.bounds.io_timeout;
        if let Some(t) = self.tracks.get_mut(target) {
            if let Turn::Settling { hold, .. } = &mut t.turn {
                *hold = Some((msg, until));
                self.deadlines.insert((until, target.clone()));
            }
        }
    }

    /// The post-turn action of turn `msg` finished. Returns false if the target was not being
    /// held for that turn (the hold expired, or it belongs to another turn): the caller must
    /// then treat the action's result as stale, since the next turn may already be running.
    pub fn release(&mut self, now: Instant, target: &SessionId, msg: MsgId) -> bool {
        let Some(t) = self.tracks.get_mut(target) else {
            return false;
        };
        let Turn::Settling { ready_at, hold } = &mut t.turn else {
            return false;
        };
        if !matches!(hold, Some((m, _)) if *m == msg) {
            return false;
        }
        *hold = None;
        if *ready_at <= now {
            t.turn = Turn::Quiescent;
        }
        self.forget_if_idle(target);
        true
    }

    /// The driver's answer to `Inject`. Returns false if `msg` is not the one in flight.
    pub fn on_injected(
        &mut self,
        target: &SessionId,
        msg: MsgId,
        result: Result<(), String>,
    ) -> bool {
        let Some(t) = self.tracks.get_mut(target) else {
            return false;
        };
        match t.turn {
            Turn::Injecting { msg: m, .. } if m == msg => {}
            _ => return false,
        }
        match result {
            Ok(()) => {
                t.turn = Turn::AwaitingPickup {
                    msg,
                    injectable_polls: 0,
                    unknown_polls: 0,
                };
                self.events.push_back(InjectorEvent::Delivered {
                    target: target.clone(),
                    msg,
                });
            }
            Err(why) => {
                t.turn = Turn::Quiescent;
                self.events.push_back(InjectorEvent::Dropped {
                    target: target.clone(),
                    msg,
                    cause: Cause::InjectFailed(why),
                });
            }
        }
        self.forget_if_idle(target);
        true
    }

    /// Fires injecting and settling deadlines that are due.
    pub fn on_timer(&mut self, now: Instant) {
        while let Some((at, target)) = self.deadlines.first().cloned() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            let Some(t) = self.tracks.get_mut(&target) else {
                continue;
            };
            match t.turn {
                Turn::Injecting { msg, deadline } if deadline <= now => {
                    // No answer: the text may or may not be in the pane. The send fails, but
                    // the pane is treated as if the turn began, so nothing else is typed until
                    // a turn boundary (or the pickup bound) has been seen.
                    t.turn = Turn::AwaitingPickup {
                        msg,
                        injectable_polls: 0,
                        unknown_polls: 0,
                    };
                    self.events.push_back(InjectorEvent::Dropped {
                        target: target.clone(),
                        msg,
                        cause: Cause::IoTimedOut,
                    });
                }
                Turn::Settling { ready_at, hold } if settled(now, ready_at, hold) => {
                    t.turn = Turn::Quiescent
                }
                _ => {}
            }
            self.forget_if_idle(&target);
        }
    }

    fn forget_if_idle(&mut self, target: &SessionId) {
        if self.tracks.get(target).is_some_and(Track::idle) {
            self.tracks.swap_remove(target);
        }
    }
}

fn settled(now: Instant, ready_at: Instant, hold: Option<(MsgId, Instant)>) -> bool {
    ready_at <= now && hold.is_none_or(|(_, until)| until <= now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::IdMint;
    use AgentStatus::{Blocked, Done, Idle, Unknown, Working};

    const T0: Instant = Instant::from_millis(1_000);

    fn bounds() -> Bounds {
        Bounds {
            pickup_grace_polls: 3,
            stall_grace_polls: 4,
            readiness_grace_polls: 5,
            post_turn_settle: Duration::ZERO,
            io_timeout: Duration::from_secs(10),
        }
    }

    struct Fixture {
        inj: Injector,
        ids: IdMint,
        w: SessionId,
    }

    impl Fixture {
        fn new(b: Bounds) -> Self {
            Fixture {
                inj: Injector::new(b),
                ids: IdMint::from_seed(9),
                w: SessionId::new("w1"),
            }
        }

        fn enqueue(&mut self, text: &str) -> MsgId {
            let m = self.ids.msg();
            self.inj.enqueue(&self.w, m, text.into());
            m
        }

        fn sample(&mut self, s: AgentStatus) -> Vec<InjectorEvent> {
            self.inj.on_sample(T0, &self.w.clone(), s);
            self.events()
        }

        fn events(&mut self) -> Vec<InjectorEvent> {
            std::iter::from_fn(|| self.inj.poll_event()).collect()
        }

        /// Enqueue, sample injectable, confirm the inject: the turn is delivered.
        fn deliver(&mut self, text: &str) -> MsgId {
            let m = self.enqueue(text);
            let ev = self.sample(Idle);
            assert!(matches!(&ev[..], [InjectorEvent::Inject { msg, .. }] if *msg == m));
            assert!(self.inj.on_injected(&self.w.clone(), m, Ok(())));
            assert_eq!(
                self.events(),
                vec![InjectorEvent::Delivered {
                    target: self.w.clone(),
                    msg: m
                }]
            );
            m
        }
    }

    /// Nothing is typed into a WORKING or UNKNOWN pane; the first injectable sample delivers.
    #[test]
    fn delivery_waits_for_an_injectable_sample() {
        let mut f = Fixture::new(bounds());
        let m = f.enqueue("task");
        assert!(f.sample(Working).is_empty());
        assert!(f.sample(Unknown).is_empty());
        for s in [Idle, Blocked, Done] {
            let mut g = Fixture::new(bounds());
            g.enqueue("task");
            assert_eq!(g.sample(s).len(), 1, "{s} is injectable");
        }
        let ev = f.sample(Done);
        assert!(
            matches!(&ev[..], [InjectorEvent::Inject { msg, text, .. }] if *msg == m && text == "task")
        );
    }

    /// Two queued messages: the second waits for the first turn's WORKING → IDLE boundary.
    #[test]
    fn one_message_per_turn_in_fifo_order() {
        let mut f = Fixture::new(bounds());
        let first = f.deliver("one");
        let second = f.enqueue("two");
        assert!(f.sample(Idle).is_empty(), "first turn not picked up yet");
        assert!(f.sample(Working).is_empty());
        assert_eq!(
            f.sample(Idle),
            vec![InjectorEvent::TurnComplete {
                target: f.w.clone(),
                msg: first,
                missed_fast_turn: false
            }]
        );
        let ev = f.sample(Idle);
        assert!(matches!(&ev[..], [InjectorEvent::Inject { msg, .. }] if *msg == second));
    }

    /// The agent ran the whole turn between two polls: after the pickup bound of injectable
    /// samples with no WORKING seen, the turn is taken as complete.
    #[test]
    fn a_missed_fast_turn_completes_after_the_pickup_bound() {
        let mut f = Fixture::new(bounds());
        let m = f.deliver("quick");
        assert!(f.sample(Idle).is_empty());
        assert!(f.sample(Idle).is_empty());
        assert_eq!(
            f.sample(Idle),
            vec![InjectorEvent::TurnComplete {
                target: f.w.clone(),
                msg: m,
                missed_fast_turn: true
            }]
        );
    }

    /// A wedged turn (consecutive UNKNOWN samples) fails at the stall bound; a WORKING sample
    /// in between restarts the count.
    #[test]
    fn a_wedged_turn_fails_at_the_stall_bound() {
        let mut f = Fixture::new(bounds());
        let m = f.deliver("task");
        f.sample(Working);
        for _ in 0..3 {
            assert!(f.sample(Unknown).is_empty());
        }
        f.sample(Working);
        for _ in 0..3 {
            assert!(f.sample(Unknown).is_empty());
        }
        assert_eq!(
            f.sample(Unknown),
            vec![InjectorEvent::TurnFailed {
                target: f.w.clone(),
                msg: m,
                cause: Cause::Stalled
            }]
        );
    }

    /// A member that never connects: its queued messages fail after the readiness bound.
    #[test]
    fn a_member_that_never_becomes_ready_fails_its_queue() {
        let mut f = Fixture::new(bounds());
        f.inj.gate(&f.w.clone());
        let a = f.enqueue("a");
        let b = f.enqueue("b");
        for _ in 0..4 {
            assert!(
                f.sample(Idle).is_empty(),
                "never typed into an unready member"
            );
        }
        assert_eq!(
            f.sample(Idle),
            vec![
                InjectorEvent::Dropped {
                    target: f.w.clone(),
                    msg: a,
                    cause: Cause::NeverReady
                },
                InjectorEvent::Dropped {
                    target: f.w.clone(),
                    msg: b,
                    cause: Cause::NeverReady
                },
            ]
        );
    }

    #[test]
    fn a_connect_reported_before_the_start_keeps_the_gate_open() {
        let mut f = Fixture::new(bounds());
        f.inj.open_gate(&f.w.clone());
        f.inj.gate(&f.w.clone());
        assert!(f.inj.is_ready(&f.w.clone()));
    }

    #[test]
    fn a_member_that_connects_in_time_is_delivered_to() {
        let mut f = Fixture::new(bounds());
        f.inj.gate(&f.w.clone());
        f.enqueue("a");
        for _ in 0..4 {
            assert!(f.sample(Idle).is_empty());
        }
        f.inj.open_gate(&f.w.clone());
        assert_eq!(f.sample(Idle).len(), 1);
    }

    /// `drop(cause)`: a queued message can be withdrawn; a pane that dies fails its running
    /// turn and everything behind it.
    #[test]
    fn withdraw_and_abort_end_messages_with_their_cause() {
        let mut f = Fixture::new(bounds());
        let running = f.deliver("running");
        let queued = f.enqueue("queued");
        let later = f.enqueue("later");
        assert!(f.inj.withdraw(&f.w.clone(), queued, Cause::SenderTimedOut));
        assert!(
            !f.inj.withdraw(&f.w.clone(), running, Cause::SenderTimedOut),
            "in flight"
        );
        f.events();
        f.inj.abort_target(&f.w.clone(), Cause::PaneGone);
        assert_eq!(
            f.events(),
            vec![
                InjectorEvent::TurnFailed {
                    target: f.w.clone(),
                    msg: running,
                    cause: Cause::PaneGone
                },
                InjectorEvent::Dropped {
                    target: f.w.clone(),
                    msg: later,
                    cause: Cause::PaneGone
                },
            ]
        );
    }

    /// A failed or unanswered inject ends the message; the next one may go.
    #[test]
    fn inject_failures_and_io_timeouts_drop_the_message() {
        let mut f = Fixture::new(bounds());
        let a = f.enqueue("a");
        let b = f.enqueue("b");
        f.sample(Idle);
        assert!(f
            .inj
            .on_injected(&f.w.clone(), a, Err("pane_not_found".into())));
        assert_eq!(
            f.events(),
            vec![InjectorEvent::Dropped {
                target: f.w.clone(),
                msg: a,
                cause: Cause::InjectFailed("pane_not_found".into())
            }]
        );
        f.sample(Idle);
        f.inj.on_timer(T0 + Duration::from_secs(10));
        assert_eq!(
            f.events(),
            vec![InjectorEvent::Dropped {
                target: f.w.clone(),
                msg: b,
                cause: Cause::IoTimedOut
            }]
        );
        assert!(
            !f.inj.on_injected(&f.w.clone(), b, Ok(())),
            "a late answer is stale"
        );
        // b may be in the pane: c waits for a turn boundary (here the pickup bound).
        let c = f.enqueue("c");
        assert!(f.sample(Idle).is_empty());
        assert!(f.sample(Idle).is_empty());
        assert!(matches!(
            &f.sample(Idle)[..],
            [InjectorEvent::TurnComplete {
                missed_fast_turn: true,
                ..
            }]
        ));
        assert!(matches!(&f.sample(Idle)[..], [InjectorEvent::Inject { msg, .. }] if *msg == c));
    }

    /// After a turn, the next delivery waits for the post-turn settle and for any post-turn
    /// action (the completion scrape) to release the target.
    #[test]
    fn the_next_delivery_waits_for_settle_and_release() {
        let mut f = Fixture::new(Bounds {
            post_turn_settle: Duration::from_secs(2),
            ..bounds()
        });
        f.deliver("one");
        f.enqueue("two");
        let one = f.inj.current_turn(&f.w.clone()).expect("turn one runs");
        f.sample(Working);
        f.sample(Idle);
        f.inj.hold(T0, &f.w.clone(), one);
        assert!(f.sample(Idle).is_empty(), "settling");
        let later = T0 + Duration::from_secs(3);
        f.inj.on_timer(later);
        f.inj.on_sample(later, &f.w.clone(), Idle);
        assert!(f.events().is_empty(), "held by the completion scrape");
        assert!(
            !f.inj.release(later, &f.w.clone(), f.ids.msg()),
            "another turn's read"
        );
        assert!(f.inj.release(later, &f.w.clone(), one));
        f.inj.on_sample(later, &f.w.clone(), Idle);
        assert_eq!(f.events().len(), 1);
        assert!(!f.inj.release(later, &f.w.clone(), one), "released once");
    }

    /// While the member is inside `fleet_ask`, injectable samples do not end its turn.
    #[test]
    fn an_asking_turn_is_paused_not_complete() {
        let mut f = Fixture::new(bounds());
        let m = f.deliver("task");
        f.sample(Working);
        f.inj.set_asking(&f.w.clone(), true);
        for _ in 0..10 {
            assert!(f.sample(Blocked).is_empty());
        }
        f.inj.set_asking(&f.w.clone(), false);
        assert!(
            f.sample(Blocked).is_empty(),
            "a sample from before the answer ends nothing"
        );
        f.sample(Working);
        assert_eq!(
            f.sample(Idle),
            vec![InjectorEvent::TurnComplete {
                target: f.w.clone(),
                msg: m,
                missed_fast_turn: false
            }]
        );
    }
}
