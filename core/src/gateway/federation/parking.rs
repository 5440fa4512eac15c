//! `Parking`: deliveries whose sender no fresh signed presence binds to a host yet — the backlog
//! a reconnect or a restart receives before the first heartbeats. Each waits unacked until that
//! presence arrives (then it is admitted again, in arrival order) or the presence TTL passes
//! (then it is rejected with the reason it waited for). What waits is bounded in bytes
//! (`PARKED_BODIES_PER_MAX`): only a peer holding a key can park anything (the signature is
//! checked first), but a leaked key must not make this host keep a gigabyte of bodies.

use super::inbound::Delivery;
use crate::ids::SessionId;
use crate::revision::Revision;
use crate::time::{Duration, Instant};

/// One delivery waiting for its sender's presence, kept as it came.
#[derive(Debug)]
pub(crate) struct Parked {
    pub(crate) from: SessionId,
    pub(crate) since: Instant,
    pub(crate) delivery: Delivery,
}

/// What may wait, in largest bodies (`max_body_bytes`): a backlog of ordinary briefs fits
/// many times over; the prefetch window of largest bodies (1,024 MiB at the defaults) does not.
pub(crate) const PARKED_BODIES_PER_MAX: usize = 16;

#[derive(Debug, Default)]
pub(crate) struct Parking {
    parked: Vec<Parked>,
    rev: Revision,
}

impl Parking {
    pub(crate) fn len(&self) -> usize {
        self.parked.len()
    }

    /// The bytes of every body parked.
    pub(crate) fn bytes(&self) -> usize {
        self.parked.iter().map(|p| p.delivery.body.len()).sum()
    }

    /// Changed since a check last read it?
    #[cfg(any(debug_assertions, feature = "invariants", test))]
    pub(crate) fn revision(&self) -> Revision {
        self.rev
    }

    pub(crate) fn park(&mut self, from: SessionId, since: Instant, delivery: Delivery) {
        self.rev.bump();
        self.parked.push(Parked {
            from,
            since,
            delivery,
        });
    }

    /// `gid`'s presence arrived: what waited for it, in arrival order.
    pub(crate) fn take_for(&mut self, gid: &SessionId) -> Vec<Parked> {
        self.rev.bump();
        if !self.parked.iter().any(|p| &p.from == gid) {
            return Vec::new();
        }
        let (ready, rest) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|p| &p.from == gid);
        self.parked = rest;
        ready
    }

    /// What has waited `ttl` or longer at `now`, in arrival order.
    pub(crate) fn take_expired(&mut self, now: Instant, ttl: Duration) -> Vec<Parked> {
        self.rev.bump();
        let (late, rest) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|p| p.since + ttl <= now);
        self.parked = rest;
        late
    }

    /// The connection closed: every parked tag died with it, and the broker redelivers.
    pub(crate) fn disconnected(&mut self) {
        self.rev.bump();
        self.parked.clear();
    }

    /// The parked tags, for the invariant that each belongs to the live connection.
    #[cfg(any(debug_assertions, feature = "invariants", test))]
    pub(crate) fn tags(&self) -> impl Iterator<Item = crate::broker::DeliveryId> + '_ {
        self.parked.iter().map(|p| p.delivery.delivery)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::DeliveryId;
    use crate::envelope::Headers;

    fn delivery(tag: u64) -> Delivery {
        Delivery {
            delivery: DeliveryId { generation: 1, tag },
            queue: "fleet.inbox.x".into(),
            routing_key: "x".into(),
            redelivered: false,
            headers: Headers::new(),
            body: Vec::new(),
        }
    }

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    /// A sender's presence releases its deliveries in arrival order and leaves the others.
    #[test]
    fn a_presence_releases_its_senders_deliveries_in_order() {
        let (a, b) = (SessionId::new("a"), SessionId::new("b"));
        let mut p = Parking::default();
        p.park(a.clone(), at(0), delivery(1));
        p.park(b.clone(), at(1), delivery(2));
        p.park(a.clone(), at(2), delivery(3));
        let tags: Vec<u64> = p
            .take_for(&a)
            .iter()
            .map(|p| p.delivery.delivery.tag)
            .collect();
        assert_eq!(tags, vec![1, 3]);
        assert_eq!(p.len(), 1);
        assert!(p.take_for(&a).is_empty());
    }

    /// Only what has waited the whole TTL expires.
    #[test]
    fn only_deliveries_past_the_ttl_expire() {
        let mut p = Parking::default();
        p.park(SessionId::new("a"), at(0), delivery(1));
        p.park(SessionId::new("a"), at(500), delivery(2));
        let late = p.take_expired(at(1_000), Duration::from_millis(1_000));
        assert_eq!(late.len(), 1);
        assert_eq!(late[0].delivery.delivery.tag, 1);
        assert_eq!(p.len(), 1);
        p.disconnected();
        assert_eq!(p.len(), 0);
    }
}
