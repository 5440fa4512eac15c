//! `HeldDeliveries`: reply-path deliveries held unacked until their lead has the message (the
//! at-least-once half of the reply path), and the record of those already handed over, so a
//! redelivered copy is recognised by msgId and acked, never taken as new.
//!
//! A result that waits for its lead does not wait in the inbox: its signed bytes are copied to
//! the lead's held queue (`<ns>.agent.<gid>.held.v1`, consumed with a window of its own) and
//! the inbox delivery is acked at that copy's confirm, so however many results a lead leaves
//! uncollected, its inbox's prefetch keeps carrying its other traffic (DESIGN §8).

use crate::admission::SeenSet;
use crate::broker::DeliveryId;
use crate::ids::{MsgId, ReplyId, SessionId, TicketId};
use crate::revision::Revision;
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
    /// The delivery acked once the lead has the message: its copy on the lead's held queue,
    /// or the inbox delivery itself where the move failed. `None` after a reconnect (the
    /// broker will redeliver it with a new tag) and while the copy is on its way.
    tag: Option<DeliveryId>,
    /// The inbox delivery, unacked until its copy on the held queue is confirmed: the inbox's
    /// window is freed as soon as the broker has the copy.
    moving: Option<DeliveryId>,
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
    /// Its held-queue copy (after a move, or redelivered after a reconnect): the hold adopted
    /// this tag; nothing to ack now.
    Adopted,
    /// Held, but neither copy has a live tag (a reconnect voided them) and this one came on
    /// the inbox: it is to be moved again.
    Stray,
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
    rev: Revision,
}

impl HeldDeliveries {
    pub(crate) fn new(done_capacity: usize) -> Self {
        HeldDeliveries {
            held: BTreeMap::new(),
            by_holder: BTreeMap::new(),
            done: SeenSet::new(done_capacity),
            skew_index: false,
            rev: Revision::default(),
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

    /// Changed since a check last read it?
    #[cfg(any(debug_assertions, feature = "invariants", test))]
    pub(crate) fn revision(&self) -> Revision {
        self.rev
    }

    /// A REPLY `msg` arrived as `delivery`, on the lead's held queue or (`held_queue` false)
    /// on its inbox.
    pub(crate) fn arrived(
        &mut self,
        msg: MsgId,
        delivery: DeliveryId,
        held_queue: bool,
    ) -> Arrival {
        let live = |d: Option<DeliveryId>| d.is_some_and(|d| d.generation == delivery.generation);
        if let Some(h) = self.held.get_mut(&msg) {
            if live(h.tag) || (!held_queue && live(h.moving)) {
                return Arrival::Duplicate;
            }
            if held_queue {
                h.tag = Some(delivery);
                self.rev.bump();
                return Arrival::Adopted;
            }
            return Arrival::Stray;
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
        self.rev.bump();
        self.insert(msg, Some(delivery), None, expires_unix, what);
    }

    /// Holds `what` while inbox `delivery`'s copy is published to the held queue: the inbox
    /// delivery is acked at that publish's confirm (`moved`).
    pub(crate) fn hold_moving(
        &mut self,
        msg: MsgId,
        delivery: DeliveryId,
        expires_unix: u64,
        what: HeldFor,
    ) {
        self.rev.bump();
        self.insert(msg, None, Some(delivery), expires_unix, what);
    }

    /// The planted `ResultsHeldInInbox` bug: a `Stray` inbox delivery is held where it is.
    pub(crate) fn adopt(&mut self, msg: MsgId, delivery: DeliveryId) {
        self.rev.bump();
        if let Some(h) = self.held.get_mut(&msg) {
            h.tag = Some(delivery);
        }
    }

    /// A `Stray` inbox `delivery` of a held `msg` is being moved again.
    pub(crate) fn move_again(&mut self, msg: MsgId, delivery: DeliveryId) {
        self.rev.bump();
        if let Some(h) = self.held.get_mut(&msg) {
            h.moving = Some(delivery);
        }
    }

    fn insert(
        &mut self,
        msg: MsgId,
        tag: Option<DeliveryId>,
        moving: Option<DeliveryId>,
        expires_unix: u64,
        what: HeldFor,
    ) {
        self.rev.bump();
        self.by_holder.insert(what.holder(), msg);
        self.held.insert(
            msg,
            Held {
                tag,
                moving,
                expires_unix,
                what,
            },
        );
    }

    /// The copy of `msg` on the held queue is confirmed (`routed`) or not: returns the inbox
    /// delivery to ack now. A move that failed keeps the inbox delivery as the hold's tag —
    /// it holds a slot of the inbox's window again, but nothing is lost.
    pub(crate) fn moved(&mut self, msg: MsgId, routed: bool) -> Option<DeliveryId> {
        self.rev.bump();
        let h = self.held.get_mut(&msg)?;
        let inbox = h.moving.take()?;
        if routed || h.tag.is_some() {
            return Some(inbox);
        }
        h.tag = Some(inbox);
        None
    }

    /// `msg` reached its lead without being held (a blocking call's answer).
    pub(crate) fn handed(&mut self, msg: MsgId, expires_unix: u64, unix_now: u64) {
        // (The record of what was handed over is not read by the checks: no bump.)
        self.done.insert(msg, expires_unix, unix_now);
    }

    /// The lead has what `holder` held: its deliveries are handed over. Returns the tags to
    /// ack (the held copy's, and the inbox one if its move is not confirmed yet).
    pub(crate) fn release(&mut self, holder: Holder, unix_now: u64) -> Vec<DeliveryId> {
        let msg = if self.skew_index {
            self.by_holder.get(&holder).copied()
        } else {
            self.by_holder.remove(&holder)
        };
        if msg.is_some() {
            self.rev.bump();
        }
        let Some(h) = msg.and_then(|m| self.held.remove(&m).map(|h| (m, h))) else {
            return Vec::new();
        };
        let (msg, h) = h;
        self.done.insert(msg, h.expires_unix, unix_now);
        h.tag.into_iter().chain(h.moving).collect()
    }

    /// The connection closed: every held tag died with it (the broker requeues the messages).
    pub(crate) fn disconnected(&mut self) {
        self.rev.bump();
        for h in self.held.values_mut() {
            h.tag = None;
            h.moving = None;
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
        self.held
            .values()
            .flat_map(|h| h.tag.into_iter().chain(h.moving))
    }

    /// The tickets results are held for: each must still be a ticket.
    #[cfg(any(debug_assertions, feature = "invariants", test))]
    pub(crate) fn ticket_holds(&self) -> impl Iterator<Item = TicketId> + '_ {
        self.held.values().filter_map(|h| match &h.what {
            HeldFor::Ticket(t) => Some(*t),
            HeldFor::Inbox { .. } => None,
        })
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

    fn ticket(n: u128) -> HeldFor {
        HeldFor::Ticket(TicketId(msg(n).0))
    }

    /// A reply held for a ticket is acked once the lead polls it, and a later copy of it is
    /// recognised as handed over.
    #[test]
    fn a_released_hold_acks_its_tag_and_remembers_the_message() {
        let mut h = HeldDeliveries::new(16);
        assert_eq!(h.arrived(msg(1), d(1, 7), false), Arrival::New);
        h.hold(msg(1), d(1, 7), 1_000, ticket(9));
        assert_eq!(h.len(), 1);
        assert_eq!(h.release(ticket(9).holder(), 10), vec![d(1, 7)]);
        assert_eq!(h.len(), 0);
        assert_eq!(h.arrived(msg(1), d(2, 3), true), Arrival::Handed);
        assert!(h.check().is_ok());
    }

    /// A moved reply frees its inbox delivery at the copy's confirm; the copy's delivery is
    /// adopted and is what the lead's collection acks.
    #[test]
    fn a_move_acks_the_inbox_at_its_confirm_and_holds_the_copy() {
        let mut h = HeldDeliveries::new(16);
        h.hold_moving(msg(1), d(1, 7), 1_000, ticket(9));
        assert_eq!(h.arrived(msg(1), d(1, 7), false), Arrival::Duplicate);
        assert_eq!(h.moved(msg(1), true), Some(d(1, 7)));
        assert_eq!(h.arrived(msg(1), d(1, 40), true), Arrival::Adopted);
        assert_eq!(h.arrived(msg(1), d(1, 41), true), Arrival::Duplicate);
        assert_eq!(h.release(ticket(9).holder(), 10), vec![d(1, 40)]);
    }

    /// A move the broker refused keeps the inbox delivery held in its place: nothing is lost.
    #[test]
    fn a_failed_move_holds_the_inbox_delivery() {
        let mut h = HeldDeliveries::new(16);
        h.hold_moving(msg(1), d(1, 7), 1_000, ticket(9));
        assert_eq!(h.moved(msg(1), false), None);
        assert_eq!(h.tags().collect::<Vec<_>>(), vec![d(1, 7)]);
        assert_eq!(h.release(ticket(9).holder(), 10), vec![d(1, 7)]);
    }

    /// Collected before its copy was confirmed: both deliveries are acked, and the copy that
    /// arrives later is a handed-over duplicate.
    #[test]
    fn a_collection_during_a_move_acks_the_inbox_delivery() {
        let mut h = HeldDeliveries::new(16);
        h.hold_moving(msg(1), d(1, 7), 1_000, ticket(9));
        assert_eq!(h.release(ticket(9).holder(), 10), vec![d(1, 7)]);
        assert_eq!(h.moved(msg(1), true), None);
        assert_eq!(h.arrived(msg(1), d(1, 40), true), Arrival::Handed);
    }

    /// After a reconnect the held copy's redelivery is adopted, and an inbox redelivery with
    /// no live copy is moved again.
    #[test]
    fn redeliveries_after_a_reconnect_are_adopted_or_moved_again() {
        let mut h = HeldDeliveries::new(16);
        let member = crate::ids::SessionId::new("m");
        let what = HeldFor::Inbox {
            reply: ReplyId(msg(5).0),
            member,
        };
        h.hold_moving(msg(1), d(1, 7), 1_000, what.clone());
        h.disconnected();
        assert_eq!(h.tags().count(), 0);
        assert_eq!(h.arrived(msg(1), d(2, 1), false), Arrival::Stray);
        h.move_again(msg(1), d(2, 1));
        assert_eq!(h.arrived(msg(1), d(2, 2), true), Arrival::Adopted);
        assert_eq!(h.moved(msg(1), true), Some(d(2, 1)));
        assert_eq!(h.release(what.holder(), 10), vec![d(2, 2)]);
    }

    /// A hold voided by a reconnect and never redelivered releases with nothing to ack.
    #[test]
    fn a_voided_hold_releases_without_a_tag() {
        let mut h = HeldDeliveries::new(16);
        h.hold(msg(1), d(1, 7), 1_000, ticket(2));
        h.disconnected();
        assert!(h.release(ticket(2).holder(), 10).is_empty());
        assert!(h.release(ticket(2).holder(), 10).is_empty());
    }

    /// Expiry lists what is past its `expiresAt`, in msgId order, and leaves it held.
    #[test]
    fn expiry_lists_past_holds_in_order() {
        let mut h = HeldDeliveries::new(16);
        h.hold(msg(2), d(1, 2), 50, ticket(20));
        h.hold(msg(1), d(1, 1), 50, ticket(10));
        h.hold(msg(3), d(1, 3), 500, ticket(30));
        assert_eq!(h.expired(100), vec![ticket(10), ticket(20)]);
        assert_eq!(h.len(), 3);
    }

    /// The planted skew leaves an index entry behind, and `check` names it.
    #[test]
    fn check_catches_a_skewed_index() {
        let mut h = HeldDeliveries::new(16).with_skewed_index(true);
        h.hold(msg(1), d(1, 7), 1_000, ticket(9));
        assert!(h.check().is_ok());
        h.release(ticket(9).holder(), 10);
        assert!(h.check().is_err());
    }
}
