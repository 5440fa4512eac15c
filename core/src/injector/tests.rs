//! The injector's rules, one scenario each, with small grace bounds and a fixed clock.
use super::*;
use crate::ids::IdMint;
use AgentStatus::{Blocked, Done, Idle, Unknown, Working};

const T0: Instant = Instant::from_millis(1_000);

fn bounds() -> Bounds {
    Bounds {
        pickup_grace_polls: 3,
        pickup_grace_span: Duration::ZERO,
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
        assert!(self
            .inj
            .on_injected(&self.w.clone(), m, InjectResult::Typed));
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

fn gone(why: &str) -> InjectResult {
    InjectResult::NotTyped {
        why: why.into(),
        gone: true,
    }
}

fn stalled(why: &str) -> InjectResult {
    InjectResult::NotTyped {
        why: why.into(),
        gone: false,
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
        vec![
            InjectorEvent::TurnComplete {
                target: f.w.clone(),
                msg: first,
                missed_fast_turn: false
            },
            InjectorEvent::WantSample {
                target: f.w.clone()
            },
        ],
        "the next message asks for its fresh sample at once"
    );
    let ev = f.sample(Idle);
    assert!(matches!(&ev[..], [InjectorEvent::Inject { msg, .. }] if *msg == second));
}

/// A member that replied during its turn has picked the brief up, even if no sample ever saw
/// it WORKING: the turn ends at the next injectable sample, not after the pickup bound — and
/// a sample that reads it busy still types nothing.
#[test]
fn a_reply_proves_pickup() {
    let mut f = Fixture::new(bounds());
    let first = f.deliver("one");
    let second = f.enqueue("two");
    assert!(f.sample(Idle).is_empty(), "not picked up yet");
    assert!(
        !f.inj.replied(&f.w.clone(), second),
        "a reply names the running turn"
    );
    assert!(f.inj.replied(&f.w.clone(), first));
    assert!(f.events().is_empty(), "a reply ends nothing by itself");
    assert!(f.sample(Working).is_empty(), "still finishing its turn");
    assert_eq!(
        f.sample(Idle),
        vec![
            InjectorEvent::TurnComplete {
                target: f.w.clone(),
                msg: first,
                missed_fast_turn: false
            },
            InjectorEvent::WantSample {
                target: f.w.clone()
            },
        ]
    );
    let ev = f.sample(Idle);
    assert!(matches!(&ev[..], [InjectorEvent::Inject { msg, .. }] if *msg == second));
    assert!(
        !f.inj.replied(&f.w.clone(), first),
        "the turn it named is over"
    );
}

/// An ask that ends with messages queued and no turn running here (the member asked from a
/// turn this gateway did not type) leaves the pane free: the queue asks for its sample at once.
#[test]
fn an_ask_that_ends_frees_the_queue_at_once() {
    let mut f = Fixture::new(bounds());
    f.inj.set_asking(&f.w.clone(), true);
    let m = f.enqueue("waits for the ask");
    assert!(f.sample(Idle).is_empty(), "nothing typed while asking");
    f.inj.set_asking(&f.w.clone(), false);
    assert_eq!(
        f.events(),
        vec![InjectorEvent::WantSample {
            target: f.w.clone()
        }]
    );
    let ev = f.sample(Idle);
    assert!(matches!(&ev[..], [InjectorEvent::Inject { msg, .. }] if *msg == m));
}

/// A reply while the member is inside `fleet_ask` proves nothing new: the paused turn still
/// needs a WORKING sample (or the pickup bound) once the ask ends.
#[test]
fn a_reply_during_an_ask_does_not_end_the_pause() {
    let mut f = Fixture::new(bounds());
    let m = f.deliver("task");
    f.inj.set_asking(&f.w.clone(), true);
    assert!(!f.inj.replied(&f.w.clone(), m));
    for _ in 0..5 {
        assert!(f.sample(Idle).is_empty());
    }
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

/// The pickup bound is time as well as samples: injectable samples that come fast (herdr
/// hints at every redraw) do not infer a missed turn before the span has passed since the
/// first of them — the agent may simply not have drawn its answer yet.
#[test]
fn fast_samples_do_not_shorten_the_pickup_bound() {
    let mut f = Fixture::new(Bounds {
        pickup_grace_span: Duration::from_secs(2),
        ..bounds()
    });
    let m = f.deliver("quick");
    let w = f.w.clone();
    for ms in [0, 100, 200, 300, 1_999] {
        f.inj.on_sample(T0 + Duration::from_millis(ms), &w, Idle);
        assert_eq!(f.events(), vec![], "at {ms} ms");
    }
    f.inj.on_sample(T0 + Duration::from_secs(2), &w, Idle);
    assert_eq!(
        f.events(),
        vec![InjectorEvent::TurnComplete {
            target: w,
            msg: m,
            missed_fast_turn: true
        }]
    );
}

/// An inferred end found not to be one (its scrape showed the brief and no answer) is
/// reopened: the next message waits, and the turn's next end is inferred again at the pickup
/// bound — even once its released track was forgotten. One that moved on is not reopened.
#[test]
fn a_reopened_turn_waits_for_its_pickup_again() {
    let mut f = Fixture::new(bounds());
    let m = f.deliver("slow to draw");
    let w = f.w.clone();
    for _ in 0..2 {
        assert!(f.sample(Idle).is_empty());
    }
    assert!(matches!(
        f.sample(Idle).as_slice(),
        [InjectorEvent::TurnComplete {
            missed_fast_turn: true,
            ..
        }]
    ));
    f.inj.hold(T0, &w, m);
    assert!(f.inj.release(T0, &w, m));
    assert!(f.inj.reopen(&w, m), "released, the turn is taken up again");
    let next = f.enqueue("next");
    for _ in 0..2 {
        assert_eq!(f.sample(Idle), vec![], "nothing typed while it is reopened");
    }
    let ended = f.sample(Idle);
    assert_eq!(
        ended.first(),
        Some(&InjectorEvent::TurnComplete {
            target: w.clone(),
            msg: m,
            missed_fast_turn: true
        }),
        "{ended:?}"
    );
    assert!(f.inj.is_queued(&w, next));
    f.inj.hold(T0, &w, m);
    assert!(f.inj.release(T0, &w, m));
    let typed = f.sample(Idle);
    assert!(
        typed
            .iter()
            .any(|e| matches!(e, InjectorEvent::Inject { msg, .. } if *msg == next)),
        "{typed:?}"
    );
    assert!(!f.inj.reopen(&w, m), "a turn that moved on is not reopened");
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
    assert!(f.inj.on_injected(&f.w.clone(), a, gone("pane_not_found")));
    assert_eq!(
        f.events(),
        vec![
            InjectorEvent::Dropped {
                target: f.w.clone(),
                msg: a,
                cause: Cause::InjectFailed("pane_not_found".into())
            },
            InjectorEvent::WantSample {
                target: f.w.clone()
            },
        ]
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
        !f.inj.on_injected(&f.w.clone(), b, InjectResult::Typed),
        "a late answer is stale"
    );
    // b may be in the pane: c waits for a turn boundary (here the pickup bound).
    let c = f.enqueue("c");
    assert!(f.sample(Idle).is_empty());
    assert!(f.sample(Idle).is_empty());
    assert!(matches!(
        &f.sample(Idle)[..],
        [
            InjectorEvent::TurnComplete {
                missed_fast_turn: true,
                ..
            },
            InjectorEvent::WantSample { .. }
        ]
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
    assert!(
        matches!(&f.sample(Idle)[..], [InjectorEvent::TurnComplete { .. }]),
        "no sample is wanted before the settle"
    );
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
    assert_eq!(
        f.events(),
        vec![InjectorEvent::WantSample {
            target: f.w.clone()
        }],
        "released: the next message asks for its sample"
    );
    f.inj.on_sample(later, &f.w.clone(), Idle);
    assert!(matches!(&f.events()[..], [InjectorEvent::Inject { .. }]));
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

/// herdr missed its bound before typing (the baseline read): the message goes back to the head
/// of its queue and is typed on the next injectable sample, ahead of the ones behind it; after
/// `INJECT_TRIES` such failures it is dropped.
#[test]
fn a_brief_herdr_failed_before_typing_is_typed_on_a_later_sample() {
    let mut f = Fixture::new(bounds());
    let a = f.enqueue("a");
    let b = f.enqueue("b");
    for _ in 1..INJECT_TRIES {
        assert!(matches!(&f.sample(Idle)[..], [InjectorEvent::Inject { msg, .. }] if *msg == a));
        assert!(f
            .inj
            .on_injected(&f.w.clone(), a, stalled("pane.read timed out")));
        assert_eq!(
            f.events(),
            vec![InjectorEvent::WantSample {
                target: f.w.clone()
            }],
            "nothing ends: a is queued again"
        );
        assert!(f.inj.is_queued(&f.w, a));
        assert!(
            f.sample(Working).is_empty(),
            "still only on an injectable sample"
        );
    }
    assert!(matches!(&f.sample(Idle)[..], [InjectorEvent::Inject { msg, .. }] if *msg == a));
    assert!(f
        .inj
        .on_injected(&f.w.clone(), a, stalled("pane.read timed out")));
    assert_eq!(
        f.events(),
        vec![
            InjectorEvent::Dropped {
                target: f.w.clone(),
                msg: a,
                cause: Cause::InjectFailed("pane.read timed out".into())
            },
            InjectorEvent::WantSample {
                target: f.w.clone()
            },
        ]
    );
    assert!(matches!(&f.sample(Idle)[..], [InjectorEvent::Inject { msg, .. }] if *msg == b));
}

/// Sent but not confirmed: the brief may be in the pane, so it is never typed again, and
/// nothing else is typed until a turn boundary (here the pickup bound) has been seen.
#[test]
fn an_unconfirmed_brief_is_never_typed_again() {
    let mut f = Fixture::new(bounds());
    let a = f.enqueue("a");
    let b = f.enqueue("b");
    f.sample(Idle);
    assert!(f.inj.on_injected(
        &f.w.clone(),
        a,
        InjectResult::Unconfirmed("send_input timed out".into())
    ));
    assert_eq!(
        f.events(),
        vec![InjectorEvent::Dropped {
            target: f.w.clone(),
            msg: a,
            cause: Cause::Unconfirmed("send_input timed out".into())
        }]
    );
    assert!(!f.inj.is_queued(&f.w, a));
    assert!(f.sample(Idle).is_empty());
    assert!(f.sample(Idle).is_empty());
    let ev = f.sample(Idle);
    assert!(
        ev.iter()
            .all(|e| !matches!(e, InjectorEvent::Inject { msg, .. } if *msg == a)),
        "a is never typed again: {ev:?}"
    );
    let next = std::iter::repeat_with(|| f.sample(Idle))
        .take(3)
        .flatten()
        .chain(ev)
        .find_map(|e| match e {
            InjectorEvent::Inject { msg, .. } => Some(msg),
            _ => None,
        });
    assert_eq!(next, Some(b));
}

/// Whatever is queued for a pane reaches it with its control characters made inert: this is
/// the one way text is typed, briefs, answers and notes alike.
#[test]
fn a_queued_text_is_typed_with_its_control_bytes_inert() {
    let mut f = Fixture::new(bounds());
    f.enqueue("ok\u{1b}[201~\rgo");
    let ev = f.sample(Idle);
    assert!(
        matches!(&ev[..], [InjectorEvent::Inject { text, .. }] if text == "ok^[[201~^Mgo"),
        "{ev:?}"
    );
}
