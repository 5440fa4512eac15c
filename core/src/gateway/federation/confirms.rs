//! `Confirms`: publishes numbered by the core, and what each one's confirm decides. A publish
//! nothing depends on is numbered and forgotten; the others wait here until the broker routes,
//! returns or fails them — or the connection closes, which fails them all.

use crate::broker::PublishId;
use crate::envelope::Kind;
use crate::ids::{CallId, MsgId, ReplyId, SessionId, TicketId, TraceId};
use std::collections::BTreeMap;

/// What a publish's confirm decides.
#[derive(Clone, Debug)]
pub(crate) enum Pending {
    /// A delegation's brief or answer: unroutable is "no such recipient" at once.
    Delegation(TicketId),
    /// A member's `fleet_reply` that goes to another host: the member is answered only once
    /// the broker has the reply (a reply is accepted when it is safe, never before).
    MemberReply {
        call: CallId,
        held: Option<ReplyId>,
        member: SessionId,
        sent: Unsent,
    },
    /// A turn's ending reported to its sender; a failure here is loud.
    Report { to: SessionId, kind: Kind },
    /// A result's copy on its lead's held queue: the inbox delivery is acked at the confirm.
    Move(MsgId),
    /// A coordination note for a peer lead: its call is answered at the confirm.
    Coordination {
        call: CallId,
        target: SessionId,
        msg: MsgId,
    },
}

/// A member's reply to another host, as published: if the publish fails, the member is told the
/// broker is unavailable and this is kept, so its retry in the same turn goes out under the same
/// msgId and `re`. The lead's waiter then resolves with it (the delegation on this side already
/// ended at the first try), and a first copy that did reach the broker before the connection
/// died is dropped at the lead as a duplicate msgId. Only ids are kept, never the body: the
/// gateway does not buffer on the broker's behalf.
#[derive(Clone, Debug)]
pub(crate) struct Unsent {
    /// The member's turn (its brief's msgId) the reply belongs to; a retry in a later turn is a
    /// new reply.
    pub(crate) turn: Option<MsgId>,
    pub(crate) to: SessionId,
    pub(crate) re: Option<MsgId>,
    pub(crate) msg_id: MsgId,
    pub(crate) trace_id: TraceId,
}

#[derive(Debug, Default)]
pub(crate) struct Confirms {
    last: u64,
    pending: BTreeMap<PublishId, Pending>,
}

impl Confirms {
    /// The id of the next publish.
    pub(crate) fn next(&mut self) -> PublishId {
        self.last += 1;
        PublishId(self.last)
    }

    /// `publish`'s confirm decides `what`.
    pub(crate) fn expect(&mut self, publish: PublishId, what: Pending) {
        self.pending.insert(publish, what);
    }

    /// The confirm of `publish` came: what it decides, if anything.
    pub(crate) fn take(&mut self, publish: PublishId) -> Option<Pending> {
        self.pending.remove(&publish)
    }

    /// The connection closed before these confirms: all of them, in publish order.
    pub(crate) fn take_all(&mut self) -> Vec<Pending> {
        std::mem::take(&mut self.pending).into_values().collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    /// Every pending publish was numbered by `next`.
    #[cfg(any(debug_assertions, feature = "invariants", test))]
    pub(crate) fn check(&self) -> Result<(), String> {
        match self.pending.last_key_value() {
            Some((p, _)) if p.0 > self.last => Err(format!(
                "publish {} awaits a confirm but only {} were numbered",
                p.0, self.last
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticket(n: u128) -> TicketId {
        TicketId(uuid::Uuid::from_u128(n))
    }

    /// Ids count up from 1; only an expected publish's confirm decides something, once.
    #[test]
    fn only_expected_confirms_decide_and_only_once() {
        let mut c = Confirms::default();
        let (a, b) = (c.next(), c.next());
        assert_eq!((a, b), (PublishId(1), PublishId(2)));
        c.expect(b, Pending::Delegation(ticket(7)));
        assert!(c.take(a).is_none());
        assert!(matches!(c.take(b), Some(Pending::Delegation(t)) if t == ticket(7)));
        assert!(c.take(b).is_none());
        assert!(c.check().is_ok());
    }

    /// A closed connection fails every pending publish, oldest first, and empties the table.
    #[test]
    fn a_closed_connection_takes_every_pending_publish_in_order() {
        let mut c = Confirms::default();
        for n in 1..=3 {
            let p = c.next();
            c.expect(p, Pending::Delegation(ticket(n)));
        }
        let order: Vec<TicketId> = c
            .take_all()
            .into_iter()
            .filter_map(|p| match p {
                Pending::Delegation(t) => Some(t),
                _ => None,
            })
            .collect();
        assert_eq!(order, vec![ticket(1), ticket(2), ticket(3)]);
        assert_eq!(c.len(), 0);
    }
}
