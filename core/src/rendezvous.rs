//! `Rendezvous`: forward waiters (a lead's send waiting on a member's turn) and reverse asks
//! (a member's question waiting on the lead's answer).
//!
//! A forward waiter is keyed by the message it waits on and is *captured* when that message is
//! delivered. Only events of that exact turn can resolve it, so a late completion of turn N can
//! never resolve turn N+1's waiter.

use crate::ids::{CallId, IdMint, MsgId, SessionId, TicketId, TurnId};
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// What resolved a waiter (Java `Rendezvous.Kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Kind {
    Reply,
    Completion,
    Failed,
    BackendExhausted,
    Question,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Reply => "REPLY",
            Kind::Completion => "COMPLETION",
            Kind::Failed => "FAILED",
            Kind::BackendExhausted => "BACKEND_EXHAUSTED",
            Kind::Question => "QUESTION",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter {
    pub ticket: TicketId,
    /// The pane text just before the inject; `Some` once the waiter is captured at delivery.
    pub baseline: Option<String>,
    /// The last line of what was typed for its turn (`completion::typed_tail`): the turn's
    /// output on screen starts after its echo.
    pub typed: Option<String>,
    /// Its turn ended (seen or inferred) and a scrape was asked for that end. A waiter opened
    /// since — an answer's continuation, the turn resumed — is not the scrape's to resolve.
    pub ended: bool,
    /// Its turn's end was inferred (a missed fast turn), not seen.
    pub inferred: bool,
}

/// A waiter that was resolved, handed back to the message service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolution {
    pub ticket: TicketId,
    pub session: SessionId,
    pub msg: MsgId,
    pub kind: Kind,
}

/// An open reverse ask; every `fleet_ask` call of the session rides it until it closes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask {
    pub session: SessionId,
    /// The turn the question was asked in; the answer continues exactly this turn.
    pub msg: MsgId,
    /// The captured baseline of that turn, carried over to the continuation waiter.
    pub baseline: Option<String>,
    pub question: String,
    pub calls: Vec<CallId>,
    /// When it was asked.
    pub at: Instant,
    pub deadline: Instant,
    /// The lead the question was put to (the lead of the delegation it paused): only it may
    /// answer. `None` until then, or when that delegation had no lead of its own.
    pub owner: Option<SessionId>,
}

/// The result of `open_ask`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AskOpen {
    /// A new ask: this turnId was minted for it.
    Fresh(TurnId),
    /// The session already had an open ask; this call rides it.
    Coalesced(TurnId),
}

#[derive(Debug, Default)]
pub struct Rendezvous {
    waiters: BTreeMap<(SessionId, MsgId), Waiter>,
    asks: BTreeMap<TurnId, Ask>,
    ask_by_session: BTreeMap<SessionId, TurnId>,
}

impl Rendezvous {
    pub fn new() -> Self {
        Self::default()
    }

    /// True if any waiter is open on `session` (a second delegation would be BUSY).
    pub fn has_waiter(&self, session: &SessionId) -> bool {
        self.waiters
            .range((session.clone(), MsgId::MIN)..=(session.clone(), MsgId::MAX))
            .next()
            .is_some()
    }

    /// Registers a waiter on `msg` before it is enqueued (so its delivery cannot be missed).
    pub fn open(&mut self, session: &SessionId, msg: MsgId, ticket: TicketId) {
        self.waiters.insert(
            (session.clone(), msg),
            Waiter {
                ticket,
                baseline: None,
                typed: None,
                ended: false,
                inferred: false,
            },
        );
    }

    /// Registers a waiter already captured by a running turn (an answer's continuation).
    pub fn open_captured(
        &mut self,
        session: &SessionId,
        msg: MsgId,
        ticket: TicketId,
        baseline: String,
    ) {
        self.waiters.insert(
            (session.clone(), msg),
            Waiter {
                ticket,
                baseline: Some(baseline),
                typed: None,
                ended: false,
                inferred: false,
            },
        );
    }

    /// Delivery of `msg`: capture its waiter with the pre-turn baseline.
    pub fn capture(&mut self, session: &SessionId, msg: MsgId, baseline: String) -> bool {
        match self.waiters.get_mut(&(session.clone(), msg)) {
            Some(w) => {
                w.baseline = Some(baseline);
                true
            }
            None => false,
        }
    }

    /// `text` is being typed for turn `msg`: its echo marks where the turn's output starts.
    pub fn typing(&mut self, session: &SessionId, msg: MsgId, text: &str) {
        if let Some(w) = self.waiters.get_mut(&(session.clone(), msg)) {
            w.typed = Some(crate::completion::typed_tail(text));
        }
    }

    /// Turn `msg` ended; `inferred` when no WORKING sample showed it.
    pub fn turn_ended(&mut self, session: &SessionId, msg: MsgId, inferred: bool) {
        if let Some(w) = self.waiters.get_mut(&(session.clone(), msg)) {
            w.ended = true;
            w.inferred = inferred;
        }
    }

    /// Turn `msg`'s end was not one after all (its scrape showed the brief taken and no
    /// answer yet): the waiter waits for a later end.
    pub fn turn_resumed(&mut self, session: &SessionId, msg: MsgId) {
        if let Some(w) = self.waiters.get_mut(&(session.clone(), msg)) {
            w.ended = false;
            w.inferred = false;
        }
    }

    pub fn waiter(&self, session: &SessionId, msg: MsgId) -> Option<&Waiter> {
        self.waiters.get(&(session.clone(), msg))
    }

    /// Resolves the waiter of turn `msg` — only if it was captured by that turn.
    pub fn resolve(&mut self, session: &SessionId, msg: MsgId, kind: Kind) -> Option<Resolution> {
        let key = (session.clone(), msg);
        // Uncaptured: its message was never delivered, so no turn event can be its own.
        self.waiters.get(&key)?.baseline.as_ref()?;
        self.take(session, msg, kind)
    }

    /// Resolves the waiter of `msg` whether or not it was delivered (a message that failed
    /// before delivery still ends its send).
    pub fn take(&mut self, session: &SessionId, msg: MsgId, kind: Kind) -> Option<Resolution> {
        let w = self.waiters.remove(&(session.clone(), msg))?;
        Some(Resolution {
            ticket: w.ticket,
            session: session.clone(),
            msg,
            kind,
        })
    }

    /// Opens or joins the session's reverse ask. A fresh ask mints its turnId from `ids`.
    pub fn open_ask(
        &mut self,
        ids: &mut IdMint,
        session: &SessionId,
        msg: MsgId,
        question: &str,
        call: CallId,
        (at, deadline): (Instant, Instant),
    ) -> AskOpen {
        if let Some(turn) = self.ask_by_session.get(session) {
            if let Some(ask) = self.asks.get_mut(turn) {
                ask.calls.push(call);
                return AskOpen::Coalesced(*turn);
            }
        }
        let turn = ids.turn();
        let baseline = self
            .waiters
            .get(&(session.clone(), msg))
            .and_then(|w| w.baseline.clone());
        self.asks.insert(
            turn,
            Ask {
                session: session.clone(),
                msg,
                baseline,
                question: question.to_string(),
                calls: vec![call],
                at,
                deadline,
                owner: None,
            },
        );
        self.ask_by_session.insert(session.clone(), turn);
        AskOpen::Fresh(turn)
    }

    /// Every open ask, in turn order.
    pub fn asks(&self) -> impl Iterator<Item = (&TurnId, &Ask)> {
        self.asks.iter()
    }

    pub fn ask(&self, turn: TurnId) -> Option<&Ask> {
        self.asks.get(&turn)
    }

    /// The question of `turn` was put to `lead`.
    pub fn set_owner(&mut self, turn: TurnId, lead: Option<SessionId>) {
        if let Some(a) = self.asks.get_mut(&turn) {
            a.owner = lead;
        }
    }

    pub fn ask_of(&self, session: &SessionId) -> Option<TurnId> {
        self.ask_by_session.get(session).copied()
    }

    /// Closes an ask (answered, timed out or abandoned) and hands back its calls.
    pub fn close_ask(&mut self, turn: TurnId) -> Option<Ask> {
        let ask = self.asks.remove(&turn)?;
        self.ask_by_session.remove(&ask.session);
        Some(ask)
    }

    /// Resolves every waiter on `session` (its pane is gone).
    pub fn take_all(&mut self, session: &SessionId, kind: Kind) -> Vec<Resolution> {
        let keys: Vec<MsgId> = self
            .waiters
            .range((session.clone(), MsgId::MIN)..=(session.clone(), MsgId::MAX))
            .map(|((_, m), _)| *m)
            .collect();
        keys.into_iter()
            .filter_map(|m| self.take(session, m, kind))
            .collect()
    }

    pub fn open_waiters(&self) -> usize {
        self.waiters.len()
    }

    pub fn open_asks(&self) -> usize {
        self.asks.len()
    }

    /// Every open waiter: the session and message it waits on, and its ticket.
    pub fn waiters(&self) -> impl Iterator<Item = (&SessionId, MsgId, TicketId)> + '_ {
        self.waiters.iter().map(|((s, m), w)| (s, *m, w.ticket))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> IdMint {
        IdMint::from_seed(3)
    }

    /// A completion of turn N arrives after turn N+1 was delivered: it names N's message,
    /// so it cannot resolve N+1's waiter.
    #[test]
    fn a_late_completion_of_turn_n_never_resolves_turn_n_plus_1() {
        let mut m = ids();
        let mut rv = Rendezvous::new();
        let s = SessionId::new("w1");
        let (n, n1) = (m.msg(), m.msg());
        let t1 = m.ticket();
        rv.open(&s, n1, t1);
        rv.capture(&s, n1, "base".into());
        assert_eq!(rv.resolve(&s, n, Kind::Completion), None);
        assert_eq!(
            rv.resolve(&s, n1, Kind::Completion).map(|r| r.ticket),
            Some(t1)
        );
    }

    #[test]
    fn an_uncaptured_waiter_is_not_resolved_by_a_turn_event() {
        let mut m = ids();
        let mut rv = Rendezvous::new();
        let s = SessionId::new("w1");
        let msg = m.msg();
        rv.open(&s, msg, m.ticket());
        assert_eq!(rv.resolve(&s, msg, Kind::Reply), None);
        assert!(rv.has_waiter(&s));
        assert!(rv.take(&s, msg, Kind::Failed).is_some());
        assert!(!rv.has_waiter(&s));
    }

    #[test]
    fn asks_from_one_session_coalesce_onto_one_turn_id() {
        let mut m = ids();
        let mut rv = Rendezvous::new();
        let s = SessionId::new("w1");
        let msg = m.msg();
        let first = rv.open_ask(
            &mut m,
            &s,
            msg,
            "which db?",
            CallId(1),
            (Instant::ZERO, Instant::ZERO),
        );
        let second = rv.open_ask(
            &mut m,
            &s,
            msg,
            "which db??",
            CallId(2),
            (Instant::ZERO, Instant::ZERO),
        );
        let AskOpen::Fresh(turn) = first else {
            panic!("first ask must be fresh")
        };
        assert_eq!(second, AskOpen::Coalesced(turn));
        let ask = rv.close_ask(turn).expect("ask is open");
        assert_eq!(ask.calls, vec![CallId(1), CallId(2)]);
        assert_eq!(rv.ask_of(&s), None);
        assert!(matches!(
            rv.open_ask(&mut m, &s, msg, "again", CallId(3), (Instant::ZERO, Instant::ZERO)),
            AskOpen::Fresh(t) if t != turn
        ));
    }
}
