//! Spawn reservations (target side): each spawn entered before the launcher is asked, with
//! its readiness bound, its pane and its start gate, until it is ready or fails — and the
//! requester side (`SpawnRequests`) beside it. The hub reaches none of a reservation's state.

use super::spawn_requests::SpawnRequests;
use super::{Effects, TimerKind};
use crate::broker::DeliveryId;
use crate::ids::{CallId, MsgId, SessionId};
use crate::io::{Output, PaneError, Readiness, Sampled};
use crate::roster::Card;
use crate::spawn_spec::SpawnSpec;
use crate::start_gate::{Bounds, Look, StartGate};
use crate::time::Instant;
use std::collections::BTreeMap;

/// Who is told when a reserved spawn ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Reply {
    /// A caller on this host.
    Local(CallId),
    /// A requester on another host, answered by presence (ready) or FAILED (`re` = the SPAWN).
    /// The SPAWN stays unacked until then (`delivery`): a control message is at-least-once,
    /// and a redelivery is harmless by construction (registry + reservation).
    Remote {
        requester: SessionId,
        re: MsgId,
        delivery: DeliveryId,
    },
}

#[derive(Clone, Debug)]
pub(super) struct Reservation {
    reply: Reply,
    deadline: Instant,
    /// Who the member will be: its profile, role, group and owner.
    card: Card,
    /// The member connected while its gate still held it (before its pane was reported, or
    /// before its prompt was seen): opened when the gate is.
    connected: bool,
    /// Its readiness gate.
    gate: StartGate,
}

/// Both sides of spawning.
#[derive(Debug, Default)]
pub(super) struct Spawns {
    /// Target side: spawns entered before the launcher call, until ready or failed.
    reserved: BTreeMap<SessionId, Reservation>,
    /// Requester side: remote spawns awaiting the new member's presence.
    pub(super) requests: SpawnRequests,
}

impl Reservation {
    /// A spawn about to ask for its pane: answered as `reply`, reaped at `deadline`.
    pub(super) fn new(reply: Reply, deadline: Instant, card: Card) -> Reservation {
        Reservation {
            reply,
            deadline,
            card,
            connected: false,
            gate: StartGate::Launching,
        }
    }
}

impl Spawns {
    pub(super) fn reserved(&self) -> usize {
        self.reserved.len()
    }

    pub(super) fn is_reserved(&self, gid: &SessionId) -> bool {
        self.reserved.contains_key(gid)
    }

    /// Each reserved spawn's gid and profile.
    pub(super) fn reserved_profiles(&self) -> impl Iterator<Item = (&SessionId, Option<&str>)> {
        self.reserved
            .iter()
            .map(|(g, r)| (g, r.card.profile.as_deref()))
    }

    /// Enters `gid`'s reservation, arms its readiness bound and asks the launcher for its
    /// pane: the three happen together or not at all.
    pub(super) fn reserve(
        &mut self,
        fx: &mut Effects,
        gid: SessionId,
        r: Reservation,
        spec: SpawnSpec,
    ) {
        fx.wake(r.deadline, TimerKind::Spawn(gid.clone()));
        self.reserved.insert(gid.clone(), r);
        fx.emit(Output::SpawnPane { gid, spec });
    }

    /// The launcher reported `gid`'s pane, and how its readiness is known: who it will be,
    /// and whether its gate is open already (it connected, and nothing is left to look at).
    /// A gate that reads the pane takes its first look now. A pane for a spawn no longer
    /// reserved (reaped, called off) is closed.
    pub(super) fn launched(
        &mut self,
        fx: &mut Effects,
        now: Instant,
        gid: &SessionId,
        readiness: Readiness,
        bounds: Bounds,
    ) -> Option<(Card, bool)> {
        let Some(r) = self.reserved.get_mut(gid) else {
            fx.emit(Output::ClosePane { gid: gid.clone() });
            return None;
        };
        r.gate = StartGate::launched(now, readiness, bounds);
        if r.gate.is_looking() {
            fx.emit(Output::LookAtStart { gid: gid.clone() });
        }
        Some((r.card.clone(), r.gate == StartGate::Connect && r.connected))
    }

    /// A look at `gid`'s starting pane, judged by its gate: `Open` when typing may begin (an
    /// injectable status, or a prompt after the connection came); the next look is armed.
    pub(super) fn looked(
        &mut self,
        fx: &mut Effects,
        now: Instant,
        gid: &SessionId,
        look: Result<Sampled, PaneError>,
    ) -> Look {
        let Some(r) = self.reserved.get_mut(gid) else {
            return Look::Ignored;
        };
        match r.gate.look(now, look) {
            Look::Again(at) => {
                fx.wake(at, TimerKind::StartLook(gid.clone()));
                Look::Again(at)
            }
            Look::Prompted if r.connected => Look::Open,
            verdict => verdict,
        }
    }

    /// Whether `gid`'s gate is looking at its pane.
    pub(super) fn is_looking(&self, gid: &SessionId) -> bool {
        self.reserved.get(gid).is_some_and(|r| r.gate.is_looking())
    }

    /// `gid`'s next look is due: asked if its gate still reads the pane.
    pub(super) fn look_again(&self, fx: &mut Effects, gid: &SessionId) {
        if self.is_looking(gid) {
            fx.emit(Output::LookAtStart { gid: gid.clone() });
        }
    }

    /// `gid`'s readiness bound: a reservation past it is taken off and its pane closed.
    pub(super) fn reap(
        &mut self,
        fx: &mut Effects,
        now: Instant,
        gid: &SessionId,
    ) -> Option<(Reply, Waited)> {
        if self.reserved.get(gid).is_none_or(|r| r.deadline > now) {
            return None;
        }
        let r = self.reserved.remove(gid)?;
        fx.emit(Output::ClosePane { gid: gid.clone() });
        let waited = match r.gate {
            StartGate::Launching => Waited::Launcher,
            StartGate::Connect => Waited::Connection,
            StartGate::Prompt { .. } | StartGate::Injectable { .. } => Waited::Start,
        };
        Some((r.reply, waited))
    }

    /// A spawn called off while in its readiness gate: taken off, its pane closed.
    pub(super) fn cancel(&mut self, fx: &mut Effects, gid: &SessionId) -> Option<Reply> {
        let r = self.reserved.remove(gid)?;
        fx.emit(Output::ClosePane { gid: gid.clone() });
        Some(r.reply)
    }

    /// A SPAWN for `gid` again while its first copy is in the readiness gate: `None` if it
    /// is not. A redelivery (the first copy's tag died with its connection) takes over the
    /// ack; the copy it replaces is acked now if its connection still lives.
    pub(super) fn absorb(&mut self, gid: &SessionId, reply: &Reply) -> Option<Absorbed> {
        let r = self.reserved.get_mut(gid)?;
        let (Reply::Remote { delivery: held, .. }, Reply::Remote { delivery, .. }) =
            (&mut r.reply, reply)
        else {
            return Some(Absorbed::Kept);
        };
        let stale = std::mem::replace(held, *delivery);
        Some(if stale.generation == delivery.generation {
            Absorbed::AckStale(stale)
        } else {
            Absorbed::Kept
        })
    }

    /// Every spawn still in its readiness gate.
    pub(super) fn gids(&self) -> impl Iterator<Item = &SessionId> {
        self.reserved.keys()
    }

    /// `gid` connected: `Held` (and remembered) while its gate still holds it — its pane not
    /// reported yet, or its screen or status not seen ready.
    pub(super) fn connection(&mut self, gid: &SessionId) -> Connection {
        match self.reserved.get_mut(gid) {
            Some(r) if r.gate == StartGate::Connect => Connection::Open,
            Some(r) => {
                r.connected = true;
                Connection::Held
            }
            None => Connection::Unreserved,
        }
    }

    /// `gid`'s spawn ends with its pane left as it is: it passed its readiness gate, or it
    /// failed with no pane to close (the launcher made none, or it is gone). Whoever asked is
    /// answered as the returned `Reply` says.
    pub(super) fn end(&mut self, gid: &SessionId) -> Option<Reply> {
        self.reserved.remove(gid).map(|r| r.reply)
    }
}

/// What a reaped spawn was still waiting for, for the person told why it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Waited {
    /// The launcher never reported its pane.
    Launcher,
    /// Nothing but its connection to this gateway's MCP (its start screen, if it has one, was
    /// ready).
    Connection,
    /// Its start screen or status.
    Start,
}

/// What a member's connection means for its spawn (`Spawns::connection`).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Connection {
    /// Its gate still holds it: remembered, opened when the gate is.
    Held,
    /// Its gate waited only for this: typing may begin.
    Open,
    /// No spawn of it is in its gate here.
    Unreserved,
}

/// What `Spawns::absorb` did with a SPAWN seen again.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Absorbed {
    /// The first copy answers; nothing to ack now.
    Kept,
    /// The redelivery took over the ack: this (stale) delivery is acked now.
    AckStale(DeliveryId),
}

#[cfg(test)]
mod spawns_tests {
    //! `Spawns` alone: a reservation, its pane and its bound, from entry to each way out.

    use super::*;
    use crate::time::Duration;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn gid(n: u8) -> SessionId {
        SessionId::new(format!("00000000-0000-4000-8000-0000000000{n:02}"))
    }

    const BOUNDS: Bounds = Bounds {
        timeout: Duration::from_millis(5_000),
        poll: Duration::from_millis(250),
    };

    fn remote(generation: u32, tag: u64) -> Reply {
        Reply::Remote {
            requester: gid(99),
            re: MsgId::MIN,
            delivery: DeliveryId { generation, tag },
        }
    }

    /// One spawn of `gid(1)` reserved until 10 s, answered as `reply`; its outputs drained.
    fn reserved(reply: Reply) -> (Spawns, Effects) {
        let mut s = Spawns::default();
        let mut fx = Effects::default();
        let r = Reservation {
            reply,
            deadline: at(10_000),
            card: Card::default(),
            connected: false,
            gate: StartGate::Launching,
        };
        s.reserve(&mut fx, gid(1), r, SpawnSpec::of("claude"));
        assert!(
            matches!(fx.pop(), Some(Output::SpawnPane { gid: g, .. }) if g == gid(1)),
            "a reservation asks for its pane"
        );
        assert_eq!(fx.pop(), None);
        (s, fx)
    }

    #[test]
    fn a_reservation_arms_its_own_bound() {
        let (s, mut fx) = reserved(Reply::Local(CallId(1)));
        assert!(s.is_reserved(&gid(1)));
        assert_eq!(fx.take_due(at(9_999)), None);
        assert_eq!(fx.take_due(at(10_000)), Some(TimerKind::Spawn(gid(1))));
    }

    #[test]
    fn a_pane_reported_for_no_reservation_is_closed() {
        let (mut s, mut fx) = reserved(Reply::Local(CallId(1)));
        assert_eq!(
            s.launched(&mut fx, at(0), &gid(2), Readiness::OnConnect, BOUNDS),
            None
        );
        assert_eq!(fx.pop(), Some(Output::ClosePane { gid: gid(2) }));
        assert!(s
            .launched(&mut fx, at(0), &gid(1), Readiness::OnConnect, BOUNDS)
            .is_some_and(|(_, open)| !open));
        assert_eq!(fx.pop(), None, "its own pane stays");
    }

    #[test]
    fn the_bound_reaps_only_a_reservation_past_it() {
        let (mut s, mut fx) = reserved(Reply::Local(CallId(1)));
        assert_eq!(s.reap(&mut fx, at(9_999), &gid(1)), None);
        assert_eq!(fx.pop(), None);
        assert_eq!(
            s.reap(&mut fx, at(10_000), &gid(1)),
            Some((Reply::Local(CallId(1)), Waited::Launcher)),
            "its launcher never reported the pane"
        );
        assert_eq!(fx.pop(), Some(Output::ClosePane { gid: gid(1) }));
        assert!(!s.is_reserved(&gid(1)));
        assert_eq!(s.reap(&mut fx, at(20_000), &gid(1)), None, "reaped once");
        // One whose gate waited only for its connection says so.
        let (mut s, mut fx) = reserved(Reply::Local(CallId(2)));
        s.launched(&mut fx, at(0), &gid(1), Readiness::OnConnect, BOUNDS);
        assert_eq!(
            s.reap(&mut fx, at(10_000), &gid(1)).map(|(_, w)| w),
            Some(Waited::Connection)
        );
    }

    #[test]
    fn a_redelivered_spawn_takes_over_the_ack() {
        let (mut s, _) = reserved(remote(1, 1));
        assert_eq!(s.absorb(&gid(2), &remote(1, 2)), None, "not reserved");
        assert_eq!(
            s.absorb(&gid(1), &remote(1, 2)),
            Some(Absorbed::AckStale(DeliveryId {
                generation: 1,
                tag: 1
            })),
            "the copy it replaces is acked on its own connection"
        );
        assert_eq!(
            s.absorb(&gid(1), &remote(2, 5)),
            Some(Absorbed::Kept),
            "a dead connection's tag is not acked"
        );
        assert_eq!(
            s.end(&gid(1)),
            Some(remote(2, 5)),
            "the newest copy answers"
        );
    }

    #[test]
    fn a_member_that_connects_first_is_remembered_for_its_pane() {
        let (mut s, mut fx) = reserved(Reply::Local(CallId(1)));
        assert_eq!(s.connection(&gid(2)), Connection::Unreserved);
        assert_eq!(s.connection(&gid(1)), Connection::Held);
        assert!(s
            .launched(&mut fx, at(0), &gid(1), Readiness::OnConnect, BOUNDS)
            .is_some_and(|(_, open)| open));
        assert_eq!(s.connection(&gid(1)), Connection::Open);
    }

    /// An agent that connects before its prompt is drawn is held until the prompt is seen;
    /// every look that finds it still starting arms the next one.
    #[test]
    fn a_connection_before_the_prompt_is_held_until_the_prompt_is_seen() {
        use crate::agent_screen::StartRules;
        let (mut s, mut fx) = reserved(Reply::Local(CallId(1)));
        let rules = Readiness::OnPrompt(StartRules::ClaudeCode);
        assert!(s
            .launched(&mut fx, at(0), &gid(1), rules, BOUNDS)
            .is_some_and(|(_, open)| !open));
        assert_eq!(fx.pop(), Some(Output::LookAtStart { gid: gid(1) }));
        assert_eq!(
            s.connection(&gid(1)),
            Connection::Held,
            "no prompt seen yet"
        );
        let banner = Ok(Sampled::Status {
            status: crate::status::AgentStatus::Idle,
            screen: Some(" ▐▛███▛█   Claude Code v2.1.328".into()),
        });
        assert_eq!(
            s.looked(&mut fx, at(0), &gid(1), banner),
            Look::Again(at(250))
        );
        assert_eq!(fx.take_due(at(250)), Some(TimerKind::StartLook(gid(1))));
        s.look_again(&mut fx, &gid(1));
        assert_eq!(fx.pop(), Some(Output::LookAtStart { gid: gid(1) }));
        let rule = "─".repeat(20);
        let prompt = Ok(Sampled::Status {
            status: crate::status::AgentStatus::Idle,
            screen: Some(format!("{rule}\n❯ \n{rule}")),
        });
        assert_eq!(
            s.looked(&mut fx, at(250), &gid(1), prompt),
            Look::Open,
            "connected already"
        );
        s.look_again(&mut fx, &gid(1));
        assert_eq!(fx.pop(), None, "a gate that passed looks no more");
    }

    #[test]
    fn a_spawn_ends_once_and_only_a_cancel_closes_its_pane() {
        let (mut s, mut fx) = reserved(Reply::Local(CallId(1)));
        assert_eq!(s.end(&gid(1)), Some(Reply::Local(CallId(1))));
        assert_eq!(s.end(&gid(1)), None);
        assert_eq!(fx.pop(), None, "a ready member keeps its pane");
        assert_eq!(s.cancel(&mut fx, &gid(1)), None, "ended once");
        assert_eq!(fx.pop(), None);
        let (mut s, mut fx) = reserved(Reply::Local(CallId(3)));
        assert_eq!(s.cancel(&mut fx, &gid(1)), Some(Reply::Local(CallId(3))));
        assert_eq!(fx.pop(), Some(Output::ClosePane { gid: gid(1) }));
        assert_eq!(s.cancel(&mut fx, &gid(1)), None);
        assert_eq!(s.reserved(), 0);
    }
}
