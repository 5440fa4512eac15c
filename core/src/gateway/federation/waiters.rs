//! The sender side's waiters: each brief or answer this gateway published, by its msgId, to the
//! delegation it waits for; and each question a remote worker asked through one of them, until
//! its lead answers or it is no longer worth remembering. The hub asks and tells; it never
//! reaches into the maps.

use crate::ids::{MsgId, SessionId, TicketId, TurnId};
use crate::time::Instant;
use std::collections::BTreeMap;

/// An ASK from a remote worker that resolved one of our waiters: where to send the answer,
/// and until when it is worth remembering.
#[derive(Clone, Debug)]
pub(crate) struct RemoteAsk {
    pub(crate) worker: SessionId,
    pub(crate) until: Instant,
    /// The lead the question was put to: only it may answer.
    pub(crate) lead: Option<SessionId>,
    pub(crate) question: String,
    pub(crate) at: Instant,
}

#[derive(Debug, Default)]
pub(crate) struct Waiters {
    by_msg: BTreeMap<MsgId, TicketId>,
    asks: BTreeMap<TurnId, RemoteAsk>,
}

impl Waiters {
    /// `msg` went out for delegation `ticket`: what answers it resolves that delegation.
    pub(crate) fn expect(&mut self, msg: MsgId, ticket: TicketId) {
        self.by_msg.insert(msg, ticket);
    }

    pub(crate) fn forget(&mut self, msg: MsgId) {
        self.by_msg.remove(&msg);
    }

    /// The delegation a message answering `re` resolves.
    pub(crate) fn ticket_of(&self, re: MsgId) -> Option<TicketId> {
        self.by_msg.get(&re).copied()
    }

    /// Each message out and the delegation it waits for (for the invariants).
    #[cfg(any(debug_assertions, feature = "invariants", test))]
    pub(crate) fn each(&self) -> impl Iterator<Item = (&MsgId, &TicketId)> {
        self.by_msg.iter()
    }

    /// A remote worker asked `turn` through one of our waiters.
    pub(crate) fn asked(&mut self, turn: TurnId, ask: RemoteAsk) {
        self.asks.insert(turn, ask);
    }

    /// Every question remote workers asked through our waiters, in turn order.
    pub(crate) fn asks(&self) -> impl Iterator<Item = (&TurnId, &RemoteAsk)> {
        self.asks.iter()
    }

    pub(crate) fn ask(&self, turn: TurnId) -> Option<&RemoteAsk> {
        self.asks.get(&turn)
    }

    /// Question `turn` is being answered: taken, so it is answered once.
    pub(crate) fn take_ask(&mut self, turn: TurnId) -> Option<RemoteAsk> {
        self.asks.remove(&turn)
    }

    /// Questions no longer worth remembering at `now` are dropped.
    pub(crate) fn expire_asks(&mut self, now: Instant) {
        self.asks.retain(|_, a| a.until > now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn ask(until: u64) -> RemoteAsk {
        RemoteAsk {
            worker: SessionId::new("w"),
            until: Instant::from_millis(until),
            lead: Some(SessionId::new("lead")),
            question: "q".into(),
            at: Instant::ZERO,
        }
    }

    #[test]
    fn a_message_resolves_its_delegation_until_forgotten() {
        let mut w = Waiters::default();
        let (msg, ticket) = (MsgId(Uuid::from_u128(1)), TicketId(Uuid::from_u128(2)));
        w.expect(msg, ticket);
        assert_eq!(w.ticket_of(msg), Some(ticket));
        assert_eq!(w.ticket_of(MsgId(Uuid::from_u128(3))), None);
        w.forget(msg);
        assert_eq!(w.ticket_of(msg), None);
        assert_eq!(w.each().count(), 0);
    }

    #[test]
    fn a_question_is_answered_once_and_expires_at_its_bound() {
        let mut w = Waiters::default();
        let (t1, t2) = (TurnId(Uuid::from_u128(1)), TurnId(Uuid::from_u128(2)));
        w.asked(t1, ask(1_000));
        w.asked(t2, ask(2_000));
        assert!(w.take_ask(t1).is_some());
        assert!(w.take_ask(t1).is_none(), "answered once");
        w.expire_asks(Instant::from_millis(1_999));
        assert!(w.ask(t2).is_some());
        w.expire_asks(Instant::from_millis(2_000));
        assert!(w.ask(t2).is_none());
    }
}
