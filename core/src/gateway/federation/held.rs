//! `HeldDeliveries`: reply-path deliveries held unacked until their lead has the message (the
//! at-least-once half of the reply path), and the record of those already handed over, so a
//! redelivered copy is recognised by msgId and acked, never taken as new.

use crate::admission::SeenSet;
use crate::broker::DeliveryId;
use crate::ids::{MsgId, ReplyId, SessionId, TicketId};
use std::collections::BTreeMap;

/// What a held delivery waits for: the lead polling the async ticket the reply ended, or
/// collecting the stranded reply from `member`'s inbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HeldFor {
    Ticket(TicketId),
    Inbox { reply: ReplyId, member: SessionId },
}

/// The key a lead's collection releases a hold by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Holder {
    Ticket(TicketId),
    Inbox(ReplyId),
}

impl HeldFor {
    pub(crate) fn holder(&self) -> Holder {
        match self {
            HeldFor::Ticket(t) => Holder::Ticket(*t),
            HeldFor::Inbox { reply, .. } => Holder::Inbox(*reply),
        }
    }
}

#[derive(Clone, Debug)]
struct Held {
    /// `None` after a reconnect: the broker will redeliver it with a new tag.
    delivery: Option<DeliveryId>,
    expires_unix: u64,
    what: HeldFor,
}

/// How a REPLY delivery relates to what is held or handed over already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// Never seen: the caller decides what it resolves.
    New,
    /// A second copy within one connection: the held one stays, this one is to be acked.
    Duplicate,
    /// Redelivered after a reconnect: the hold adopted the new tag; nothing to ack now.
    Adopted,
    /// Already handed to its lead: a benign duplicate, to be acked.
    Handed,
}

#[derive(Debug)]
pub(crate) struct HeldDeliveries {
    held: BTreeMap<MsgId, Held>,
    by_holder: BTreeMap<Holder, MsgId>,
    /// Reply-path msgIds already handed to a lead.
    done: SeenSet,
    /// The planted `HeldIndexSkew` bug: a release leaves its index entry behind.
    skew_index: bool,
}

impl HeldDeliveries {
    pub(crate) fn new(done_capacity: usize) -> Self {
        HeldDeliveries {
            held: BTreeMap::new(),
            by_holder: BTreeMap::new(),
            done: SeenSet::new(done_capacity),
            skew_index: false,
        }
    }

    /// Switches the planted `HeldIndexSkew` bug on (simulation builds only).
    pub(crate) fn with_skewed_index(mut self, on: bool) -> Self {
        self.skew_index = on;
        self
    }

    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }

    /// A REPLY `msg` arrived as `delivery`.
    pub(crate) fn arrived(&mut self, msg: MsgId, delivery: DeliveryId) -> Arrival {
        if let Some(h) = self.held.get_mut(&msg) {
            return match h.delivery {
                Some(d) if d.generation == delivery.generation => Arrival::Duplicate,
                _ => {
                    h.delivery = Some(delivery);
                    Arrival::Adopted
                }
            };
        }
        if self.done.contains(msg) {
            return Arrival::Handed;
        }
        Arrival::New
    }

    /// Keeps `delivery` unacked until `what` is collected (or `expires_unix` passes).
    pub(crate) fn hold(
        &mut self,
        msg: MsgId,
        delivery: DeliveryId,
        expires_unix: u64,
        what: HeldFor,
    ) {
        self.by_holder.insert(what.holder(), msg);
        self.held.insert(
            msg,
            Held {
                delivery: Some(delivery),
                expires_unix,
                what,
            },
        );
    }

    /// `msg` reached its lead without being held (a blocking call's answer).
    pub(crate) fn handed(&mut self, msg: MsgId, expires_unix: u64, unix_now: u64) {
        self.done.insert(msg, expires_unix, unix_now);
    }

    /// The lead has what `holder` held: its delivery is handed over. Returns the tag to ack,
    /// if the hold still has one of this connection.
    pub(crate) fn release(&mut self, holder: Holder, unix_now: u64) -> Option<DeliveryId> {
        let msg = if self.skew_index {
            *self.by_holder.get(&holder)?
        } else {
            self.by_holder.remove(&holder)?
        };
        let h = self.held.remove(&msg)?;
        self.done.insert(msg, h.expires_unix, unix_now);
        h.delivery
    }

    /// The connection closed: every held tag died with it (the broker requeues the messages).
    pub(crate) fn disconnected(&mut self) {
        for h in self.held.values_mut() {
            h.delivery = None;
        }
    }

    /// What is held past its `expiresAt`, in msgId order.
    pub(crate) fn expired(&self, unix_now: u64) -> Vec<HeldFor> {
        self.held
            .values()
            .filter(|h| h.expires_unix < unix_now)
            .map(|h| h.what.clone())
            .collect()
    }

    /// The tags held now, for the invariant that each belongs to the live connection.
    #[cfg(any(debug_assertions, feature = "invariants", test))]
    pub(crate) fn tags(&self) -> impl Iterator<Item = DeliveryId> + '_ {
        self.held.values().filter_map(|h| h.delivery)
    }

    /// The stranded replies held, by member: each must still be in the reply inbox.
    #[cfg(any(debug_assertions, feature = "invariants", test))]
    pub(crate) fn inbox_holds(&self) -> impl Iterator<Item = (&SessionId, ReplyId)> + '_ {
        self.held.values().filter_map(|h| match &h.what {
            HeldFor::Inbox { reply, member } => Some((member, *reply)),
            HeldFor::Ticket(_) => None,
        })
    }

    /// The index and the holds are inverse maps of each other.
    #[cfg(any(debug_assertions, feature = "invariants", test))]
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.held.len() != self.by_holder.len() {
            return Err(format!(
                "{} held deliveries but {} holder index entries",
                self.held.len(),
                self.by_holder.len()
            ));
        }
        for (holder, msg) in &self.by_holder {
            match self.held.get(msg) {
                Some(h) if h.what.holder() == *holder => {}
                Some(h) => {
                    return Err(format!(
                        "index says {holder:?} holds {msg}, but {:?} does",
                        h.what.holder()
                    ))
                }
                None => {
                    return Err(format!(
                        "index names {holder:?} for {msg}, which is not held"
                    ))
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(generation: u32, tag: u64) -> DeliveryId {
        DeliveryId { generation, tag }
    }

    fn msg(n: u128) -> MsgId {
        MsgId(uuid::Uuid::from_u128(n))
    }

    /// A reply held for a ticket is acked once the lead polls it, and a later copy of it is
    /// recognised as handed over.
    #[test]
    fn a_released_hold_acks_its_tag_and_remembers_the_message() {
        let mut h = HeldDeliveries::new(16);
        assert_eq!(h.arrived(msg(1), d(1, 7)), Arrival::New);
        h.hold(msg(1), d(1, 7), 1_000, HeldFor::Ticket(TicketId(msg(9).0)));
        assert_eq!(h.len(), 1);
        assert_eq!(
            h.release(Holder::Ticket(TicketId(msg(9).0)), 10),
            Some(d(1, 7))
        );
        assert_eq!(h.len(), 0);
        assert_eq!(h.arrived(msg(1), d(2, 3)), Arrival::Handed);
        assert!(h.check().is_ok());
    }

    /// Within one connection a second copy is a duplicate to ack; after a reconnect the hold
    /// adopts the redelivered tag, which is then the one acked.
    #[test]
    fn a_redelivery_after_a_reconnect_is_adopted() {
        let mut h = HeldDeliveries::new(16);
        let member = crate::ids::SessionId::new("m");
        let what = HeldFor::Inbox {
            reply: ReplyId(msg(5).0),
            member,
        };
        h.hold(msg(1), d(1, 7), 1_000, what.clone());
        assert_eq!(h.arrived(msg(1), d(1, 8)), Arrival::Duplicate);
        h.disconnected();
        assert_eq!(h.tags().count(), 0);
        assert_eq!(h.arrived(msg(1), d(2, 1)), Arrival::Adopted);
        assert_eq!(h.release(what.holder(), 10), Some(d(2, 1)));
    }

    /// A hold voided by a reconnect and never redelivered releases with nothing to ack.
    #[test]
    fn a_voided_hold_releases_without_a_tag() {
        let mut h = HeldDeliveries::new(16);
        h.hold(msg(1), d(1, 7), 1_000, HeldFor::Ticket(TicketId(msg(2).0)));
        h.disconnected();
        assert_eq!(h.release(Holder::Ticket(TicketId(msg(2).0)), 10), None);
        assert_eq!(h.release(Holder::Ticket(TicketId(msg(2).0)), 10), None);
    }

    /// Expiry lists what is past its `expiresAt`, in msgId order, and leaves it held.
    #[test]
    fn expiry_lists_past_holds_in_order() {
        let mut h = HeldDeliveries::new(16);
        h.hold(msg(2), d(1, 2), 50, HeldFor::Ticket(TicketId(msg(20).0)));
        h.hold(msg(1), d(1, 1), 50, HeldFor::Ticket(TicketId(msg(10).0)));
        h.hold(msg(3), d(1, 3), 500, HeldFor::Ticket(TicketId(msg(30).0)));
        assert_eq!(
            h.expired(100),
            vec![
                HeldFor::Ticket(TicketId(msg(10).0)),
                HeldFor::Ticket(TicketId(msg(20).0))
            ]
        );
        assert_eq!(h.len(), 3);
    }

    /// The planted skew leaves an index entry behind, and `check` names it.
    #[test]
    fn check_catches_a_skewed_index() {
        let mut h = HeldDeliveries::new(16).with_skewed_index(true);
        h.hold(msg(1), d(1, 7), 1_000, HeldFor::Ticket(TicketId(msg(9).0)));
        assert!(h.check().is_ok());
        h.release(Holder::Ticket(TicketId(msg(9).0)), 10);
        assert!(h.check().is_err());
    }
}
