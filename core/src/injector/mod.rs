//! `Injector`: per-target FIFO queues, at most one message per turn, serialized per target,
//! status-gated (ch. 9, Figure 6).
//!
//! A turn is judged complete only from a confirmed WORKING → injectable boundary, or from a
//! reply its member sent during the turn followed by an injectable sample (the reply proves
//! the brief was picked up, as WORKING would). Three grace bounds, counted in status samples,
//! close the failure paths: pickup (a missed fast turn), stall (a wedged turn) and readiness
//! (a member that never connected).
//!
//! Delivery is event-driven: a target that can take its next message again asks for a fresh
//! sample at once (`WantSample`) rather than waiting for the next poll round.

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
use sample::{Pickup, Step};
use std::fmt;

/// The injector's bounds, lifted from `CoreConfig`.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub pickup_grace_polls: u32,
    /// How long a turn must have looked injectable, from its first such sample, before its
    /// end is inferred (the pickup bound as time: `pickup_grace_polls - 1` polls). Samples
    /// come faster than polls when herdr's events hint at every redraw; counted alone they
    /// would call a turn missed within a second (Codex 0.171 in CI: 0.7 s after the typing,
    /// its answer not yet drawn).
    pub pickup_grace_span: Duration,
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
    /// herdr took the text and never confirmed it: it may be in the pane.
    Unconfirmed(String),
    /// The pane closed or its process exited.
    PaneGone,
    /// The sender gave up before delivery; the message is withdrawn, never typed late.
    SenderTimedOut,
    /// Nothing is left to say (a nudge whose items were all collected).
    Drained,
}

impl Cause {
    /// The message may be in the pane although it was never confirmed typed: its turn may run,
    /// and a reply from it is its sender's.
    pub fn maybe_typed(&self) -> bool {
        matches!(self, Cause::IoTimedOut | Cause::Unconfirmed(_))
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Stalled => f.write_str("stalled"),
            Cause::NeverReady => f.write_str("never_ready"),
            Cause::InjectFailed(why) => write!(f, "inject_failed({why})"),
            Cause::IoTimedOut => f.write_str("io_timed_out"),
            Cause::Unconfirmed(why) => write!(f, "inject_unconfirmed({why})"),
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
    /// `target` can take its next queued message: sample it now. Only a fresh injectable
    /// sample types it, so this asks for one instead of waiting for the next poll round.
    WantSample { target: SessionId },
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Queued {
    msg: MsgId,
    text: String,
    /// Times herdr failed before typing it (`InjectResult::NotTyped`).
    failed: u32,
}

/// Tries at typing one message that herdr failed before any of it reached the pane: a loaded
/// host's herdr can miss its answer bound once without the send being lost.
pub const INJECT_TRIES: u32 = 3;

/// The driver's answer to `Inject`, as the injector needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InjectResult {
    Typed,
    /// Nothing reached the pane; `gone` when herdr said the pane does not exist.
    NotTyped {
        why: String,
        gone: bool,
    },
    /// The text was sent and not confirmed: it may be in the pane.
    Unconfirmed(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Turn {
    Quiescent,
    /// `Inject` went out; waiting for the driver's result.
    Injecting {
        job: Queued,
        deadline: Instant,
    },
    AwaitingPickup {
        msg: MsgId,
        injectable_polls: u32,
        unknown_polls: u32,
        /// When the first injectable sample of this wait was heard.
        injectable_since: Option<Instant>,
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

    /// Free for its next message, with one queued and no ask open.
    fn takes_next(&self) -> bool {
        let free = matches!(
            self.turn,
            Turn::Quiescent | Turn::Settling { hold: None, .. }
        );
        free && !self.queue.is_empty() && !self.asking
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

    /// Queues `text` for `target`, its control characters made inert (`pane_text`): this is
    /// the one way text reaches a pane. Delivery waits for a fresh injectable sample.
    pub fn enqueue(&mut self, target: &SessionId, msg: MsgId, text: String) {
        let text = match crate::pane_text::neutralise(&text) {
            std::borrow::Cow::Borrowed(_) => text,
            std::borrow::Cow::Owned(safe) => safe,
        };
        self.tracks
            .entry(target.clone())
            .or_insert_with(Track::new)
            .queue
            .push_back(Queued {
                msg,
                text,
                failed: 0,
            });
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
                        injectable_since: None,
                    };
                }
                // An ask that ended with no turn of its own here leaves the queue free.
                Self::want_sample(t, &mut self.events, target);
            }
        } else if asking {
            let mut t = Track::new();
            t.asking = true;
            self.tracks.insert(target.clone(), t);
        }
        self.forget_if_idle(target);
    }

    /// The member replied during turn `msg`: the brief was picked up, as a WORKING sample would
    /// have shown, so the turn no longer waits out the pickup bound — it ends at the next
    /// injectable sample. Returns false (and changes nothing) unless `msg` is the running turn.
    ///
    /// A sample herdr took before the pickup but that reaches the core only after the reply
    /// would end the turn early; that needs one herdr answer to outlast the member's whole turn
    /// up to `fleet_reply` (docs/invariants.md, I1).
    pub fn replied(&mut self, target: &SessionId, msg: MsgId) -> bool {
        let Some(t) = self.tracks.get_mut(target) else {
            return false;
        };
        match t.turn {
            Turn::AwaitingPickup { msg: m, .. } if m == msg && !t.asking => {
                t.turn = Turn::AwaitingCompletion {
                    msg,
                    unknown_polls: 0,
                };
                true
            }
            Turn::AwaitingCompletion { msg: m, .. } => m == msg,
            _ => false,
        }
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
            Turn::Injecting { job, .. } => self.events.push_back(InjectorEvent::Dropped {
                target: target.clone(),
                msg: job.msg,
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
        let mut step = Step {
            now,
            b: self.bounds,
            target,
            events: &mut self.events,
            deadlines: &mut self.deadlines,
        };
        match t.turn {
            Turn::Quiescent => {
                let gate_open = self.gates.get(target).copied().unwrap_or(true);
                step.quiescent(t, gate_open, status)
            }
            Turn::Injecting { .. } | Turn::Settling { .. } => {}
            Turn::AwaitingPickup {
                msg,
                injectable_polls,
                unknown_polls,
                injectable_since,
            } => step.awaiting_pickup(
                t,
                Pickup {
                    msg,
                    injectable_polls,
                    unknown_polls,
                    injectable_since,
                },
                status,
            ),
            Turn::AwaitingCompletion { msg, unknown_polls } => {
                step.awaiting_completion(t, msg, unknown_polls, status)
            }
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
        if ready_at <= now {
            // The sample that ended the turn does not also type the next message: the gateway
            // may hold the pane for the turn's scrape first.
            Self::want_sample(t, events, target);
        }
    }

    /// `t` can take its next message (or will, at its next sample): ask for that sample now
    /// rather than at the next poll round.
    fn want_sample(t: &Track, events: &mut VecDeque<InjectorEvent>, target: &SessionId) {
        if t.takes_next() {
            events.push_back(InjectorEvent::WantSample {
                target: target.clone(),
            });
        }
    }

    /// Whether `target` would take its next queued message on an injectable sample now (a
    /// `WantSample` may have been overtaken: the turn's scrape holds the pane since).
    pub fn takes_next(&self, target: &SessionId) -> bool {
        self.tracks.get(target).is_some_and(Track::takes_next)
    }

    /// The post-turn action of turn `msg` (its completion scrape) must finish before the next
    /// delivery; it holds the target until `release(msg)` or `io_timeout`, whichever is first.
    pub fn hold(&mut self, now: Instant, target: &SessionId, msg: MsgId) {
        self.hold_until(target, msg, now + self.bounds.io_timeout);
    }

    /// As `hold`, until `until`: a turn end seen on the screen of an agent that reports its
    /// own turns waits that long for its report before anything else is typed.
    pub fn hold_until(&mut self, target: &SessionId, msg: MsgId, until: Instant) {
        if let Some(t) = self.tracks.get_mut(target) {
            if let Turn::Settling { hold, .. } = &mut t.turn {
                *hold = Some((msg, until));
                self.deadlines.insert((until, target.clone()));
            }
        }
    }

    /// The turn whose post-turn action holds `target`, if one does.
    pub fn held_for(&self, target: &SessionId) -> Option<MsgId> {
        match self.tracks.get(target)?.turn {
            Turn::Settling {
                hold: Some((msg, _)),
                ..
            } => Some(msg),
            _ => None,
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
            Self::want_sample(t, &mut self.events, target);
        }
        self.forget_if_idle(target);
        true
    }

    /// The agent itself said turn `msg` ended (its own report, docs/delivery.md "Reports"):
    /// the turn completes now, whatever the samples said so far. Returns false (and changes
    /// nothing) unless `msg` is the running turn and no ask pauses it.
    pub fn end_reported(&mut self, now: Instant, target: &SessionId, msg: MsgId) -> bool {
        let Some(t) = self.tracks.get_mut(target) else {
            return false;
        };
        let running = matches!(t.turn,
            Turn::AwaitingPickup { msg: m, .. } | Turn::AwaitingCompletion { msg: m, .. } if m == msg);
        if !running || t.asking {
            return false;
        }
        let end = TurnEnd {
            target,
            msg,
            missed_fast_turn: false,
        };
        Self::complete(
            t,
            &mut self.events,
            &mut self.deadlines,
            now,
            self.bounds,
            end,
        );
        true
    }

    /// The agent said it took turn `msg`'s brief: as a WORKING sample would, this proves the
    /// pickup, so the turn no longer waits out the pickup bound.
    pub fn picked_up(&mut self, target: &SessionId, msg: MsgId) -> bool {
        self.replied(target, msg)
    }

    /// Turn `msg`'s inferred end was not one (its scrape, just released, showed the brief
    /// taken and no answer yet): `target` waits for its pickup again, so its next end — seen,
    /// or inferred after another pickup bound — is scraped in turn, and nothing else is typed
    /// into it meanwhile. Returns false if the target has moved on (a turn or typing since).
    pub fn reopen(&mut self, target: &SessionId, msg: MsgId) -> bool {
        // Released with nothing queued, its track was forgotten: it is taken up again.
        let t = self.tracks.entry(target.clone()).or_insert_with(Track::new);
        if !matches!(t.turn, Turn::Quiescent | Turn::Settling { hold: None, .. }) {
            return false;
        }
        t.turn = Turn::AwaitingPickup {
            msg,
            injectable_polls: 0,
            unknown_polls: 0,
            injectable_since: None,
        };
        true
    }

    /// The driver's answer to `Inject`. Returns false if `msg` is not the one in flight.
    ///
    /// A message herdr failed before typing goes back to the head of its queue, to be typed
    /// on a later injectable sample (at most `INJECT_TRIES` times in all); one that may be in
    /// the pane is never typed again, and the pane is treated as if its turn began.
    pub fn on_injected(&mut self, target: &SessionId, msg: MsgId, result: InjectResult) -> bool {
        let Some(t) = self.tracks.get_mut(target) else {
            return false;
        };
        let job = match &t.turn {
            Turn::Injecting { job, .. } if job.msg == msg => job.clone(),
            _ => return false,
        };
        match result {
            InjectResult::NotTyped { gone: false, .. } if job.failed + 1 < INJECT_TRIES => {
                t.turn = Turn::Quiescent;
                t.queue.push_front(Queued {
                    failed: job.failed + 1,
                    ..job
                });
                Self::want_sample(t, &mut self.events, target);
            }
            InjectResult::Unconfirmed(why) => {
                t.turn = Turn::AwaitingPickup {
                    msg,
                    injectable_polls: 0,
                    unknown_polls: 0,
                    injectable_since: None,
                };
                self.events.push_back(InjectorEvent::Dropped {
                    target: target.clone(),
                    msg,
                    cause: Cause::Unconfirmed(why),
                });
            }
            InjectResult::Typed => {
                t.turn = Turn::AwaitingPickup {
                    msg,
                    injectable_polls: 0,
                    unknown_polls: 0,
                    injectable_since: None,
                };
                self.events.push_back(InjectorEvent::Delivered {
                    target: target.clone(),
                    msg,
                });
            }
            InjectResult::NotTyped { why, .. } => {
                t.turn = Turn::Quiescent;
                self.events.push_back(InjectorEvent::Dropped {
                    target: target.clone(),
                    msg,
                    cause: Cause::InjectFailed(why),
                });
                Self::want_sample(t, &mut self.events, target);
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
                Turn::Injecting { ref job, deadline } if deadline <= now => {
                    let msg = job.msg;
                    // No answer: the text may or may not be in the pane. The send fails, but
                    // the pane is treated as if the turn began, so nothing else is typed until
                    // a turn boundary (or the pickup bound) has been seen.
                    t.turn = Turn::AwaitingPickup {
                        msg,
                        injectable_polls: 0,
                        unknown_polls: 0,
                        injectable_since: None,
                    };
                    self.events.push_back(InjectorEvent::Dropped {
                        target: target.clone(),
                        msg,
                        cause: Cause::IoTimedOut,
                    });
                }
                Turn::Settling { ready_at, hold } if settled(now, ready_at, hold) => {
                    t.turn = Turn::Quiescent;
                    Self::want_sample(t, &mut self.events, &target);
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

mod sample;
#[cfg(test)]
mod tests;
