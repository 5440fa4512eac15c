//! `ReplyInbox`: replies that arrived when no waiter was open are held per target until the
//! lead collects them (peek, ack, drain). Nothing is dropped silently: a full inbox refuses
//! the reply and the member is told.

use crate::ids::{ReplyId, SessionId};
use crate::revision::Revision;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// A reply waiting for its lead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldReply {
    pub id: ReplyId,
    /// The member that replied.
    pub target: SessionId,
    /// The lead pane that last delegated to `target`, if known: the one to nudge.
    pub lead: Option<SessionId>,
    pub content: String,
    pub at: Instant,
}

impl HeldReply {
    /// Each lead collects its own results; one held for no lead, anyone who may drain.
    pub fn visible_to(&self, by: Option<&SessionId>) -> bool {
        self.lead.is_none() || self.lead.as_ref() == by
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the reply inbox for this session is full (at most {cap} replies and {bytes_cap} bytes held); collect replies first")]
pub struct InboxFull {
    pub cap: usize,
    pub bytes_cap: usize,
}

#[derive(Debug)]
pub struct ReplyInbox {
    held: BTreeMap<SessionId, VecDeque<HeldReply>>,
    cap_per_target: usize,
    bytes_per_target: usize,
    total: usize,
    rev: Revision,
}

impl ReplyInbox {
    pub fn new(cap_per_target: usize, bytes_per_target: usize) -> Self {
        ReplyInbox {
            held: BTreeMap::new(),
            cap_per_target,
            bytes_per_target,
            total: 0,
            rev: Revision::default(),
        }
    }

    pub fn push(&mut self, reply: HeldReply) -> Result<(), InboxFull> {
        self.rev.bump();
        let q = self.held.entry(reply.target.clone()).or_default();
        // At most `cap_per_target` entries: summed on each push rather than kept beside them.
        let bytes: usize = q.iter().map(|r| r.content.len()).sum();
        if q.len() >= self.cap_per_target
            || bytes.saturating_add(reply.content.len()) > self.bytes_per_target
        {
            if q.is_empty() {
                self.held.remove(&reply.target);
            }
            return Err(InboxFull {
                cap: self.cap_per_target,
                bytes_cap: self.bytes_per_target,
            });
        }
        q.push_back(reply);
        self.total += 1;
        Ok(())
    }

    /// The held replies of `target`, oldest first, without removing them.
    pub fn peek(&self, target: &SessionId) -> Vec<HeldReply> {
        self.held
            .get(target)
            .map(|q| q.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Removes the named replies of `target`; returns the ones that were held.
    pub fn ack(&mut self, target: &SessionId, ids: &[ReplyId]) -> Vec<HeldReply> {
        let Some(q) = self.held.get_mut(target) else {
            return Vec::new();
        };
        let mut acked = Vec::new();
        q.retain(|r| {
            if ids.contains(&r.id) {
                acked.push(r.clone());
                false
            } else {
                true
            }
        });
        if q.is_empty() {
            self.held.remove(target);
        }
        self.total -= acked.len();
        if !acked.is_empty() {
            self.rev.bump();
        }
        acked
    }

    /// What `by` may collect of `target`'s held replies: those for it, and those for no lead
    /// (an orphan, whose turn's lead was forgotten), oldest first, without removing them.
    pub fn peek_by(&self, target: &SessionId, by: Option<&SessionId>) -> Vec<HeldReply> {
        self.held
            .get(target)
            .map(|q| q.iter().filter(|r| r.visible_to(by)).cloned().collect())
            .unwrap_or_default()
    }

    /// Removes the named replies of `target` that `by` may collect.
    pub fn ack_by(
        &mut self,
        target: &SessionId,
        ids: &[ReplyId],
        by: Option<&SessionId>,
    ) -> Vec<HeldReply> {
        let mine: Vec<ReplyId> = self
            .peek_by(target, by)
            .into_iter()
            .map(|r| r.id)
            .filter(|id| ids.contains(id))
            .collect();
        self.ack(target, &mine)
    }

    /// Peek and ack in one step, of what `by` may collect.
    pub fn drain_by(&mut self, target: &SessionId, by: Option<&SessionId>) -> Vec<HeldReply> {
        let mine: Vec<ReplyId> = self.peek_by(target, by).into_iter().map(|r| r.id).collect();
        self.ack(target, &mine)
    }

    /// Peek and ack in one step.
    pub fn drain(&mut self, target: &SessionId) -> Vec<HeldReply> {
        let drained: Vec<HeldReply> = self.held.remove(target).map(Vec::from).unwrap_or_default();
        self.total -= drained.len();
        if !drained.is_empty() {
            self.rev.bump();
        }
        drained
    }

    pub fn depth(&self, target: &SessionId) -> usize {
        self.held.get(target).map_or(0, VecDeque::len)
    }

    /// Replies of `target` held for no lead: no one is nudged to collect them.
    pub fn stranded(&self, target: &SessionId) -> usize {
        self.held
            .get(target)
            .map_or(0, |q| q.iter().filter(|r| r.lead.is_none()).count())
    }

    /// Each target's held replies, in target order.
    pub fn iter(&self) -> impl Iterator<Item = (&SessionId, &VecDeque<HeldReply>)> {
        self.held.iter()
    }

    /// All held replies: the `fleet_inbox_depth` gauge.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Changed since a check last read it?
    pub fn revision(&self) -> Revision {
        self.rev
    }

    /// Whether `target`'s inbox still holds reply `id`.
    pub fn contains(&self, target: &SessionId, id: ReplyId) -> bool {
        self.held
            .get(target)
            .is_some_and(|q| q.iter().any(|r| r.id == id))
    }

    /// Every inbox within its cap, none empty, and the total right.
    pub fn check(&self) -> Result<(), String> {
        let mut total = 0;
        for (target, q) in &self.held {
            if q.is_empty() || q.len() > self.cap_per_target {
                return Err(format!(
                    "the reply inbox of {target} holds {} (cap {})",
                    q.len(),
                    self.cap_per_target
                ));
            }
            total += q.len();
        }
        if total != self.total {
            return Err(format!(
                "inbox total says {} but {total} are held",
                self.total
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::IdMint;

    fn reply(m: &mut IdMint, target: &str, content: &str) -> HeldReply {
        HeldReply {
            id: m.reply(),
            target: SessionId::new(target),
            lead: None,
            content: content.into(),
            at: Instant::ZERO,
        }
    }

    #[test]
    fn peek_keeps_ack_removes_and_drain_empties_one_target_only() {
        let mut m = IdMint::from_seed(1);
        let mut inbox = ReplyInbox::new(8, 1 << 20);
        let a = reply(&mut m, "w1", "one");
        let b = reply(&mut m, "w1", "two");
        inbox.push(a.clone()).unwrap();
        inbox.push(b.clone()).unwrap();
        inbox.push(reply(&mut m, "w2", "other")).unwrap();
        assert_eq!(inbox.peek(&"w1".into()), vec![a.clone(), b.clone()]);
        assert_eq!(inbox.total(), 3);
        assert_eq!(inbox.ack(&"w1".into(), &[a.id]), vec![a]);
        assert_eq!(inbox.drain(&"w1".into()), vec![b]);
        assert_eq!(inbox.depth(&"w1".into()), 0);
        assert_eq!(inbox.depth(&"w2".into()), 1);
        assert_eq!(inbox.total(), 1);
    }

    #[test]
    fn each_lead_collects_only_its_own_and_the_orphans() {
        let mut m = IdMint::from_seed(1);
        let mut inbox = ReplyInbox::new(8, 1 << 20);
        let (a, b) = (SessionId::new("lead-a"), SessionId::new("lead-b"));
        let for_a = HeldReply {
            lead: Some(a.clone()),
            ..reply(&mut m, "w1", "for a")
        };
        let for_b = HeldReply {
            lead: Some(b.clone()),
            ..reply(&mut m, "w1", "for b")
        };
        let orphan = reply(&mut m, "w1", "for nobody");
        for r in [&for_a, &for_b, &orphan] {
            inbox.push(r.clone()).unwrap();
        }
        assert_eq!(
            inbox.peek_by(&"w1".into(), Some(&a)),
            vec![for_a.clone(), orphan.clone()]
        );
        assert!(inbox.ack_by(&"w1".into(), &[for_b.id], Some(&a)).is_empty());
        assert_eq!(inbox.drain_by(&"w1".into(), Some(&a)), vec![for_a, orphan]);
        assert_eq!(inbox.drain_by(&"w1".into(), Some(&b)), vec![for_b]);
        assert_eq!(inbox.total(), 0);
    }

    #[test]
    fn a_full_inbox_refuses_instead_of_dropping() {
        let mut m = IdMint::from_seed(1);
        let mut inbox = ReplyInbox::new(1, 1 << 20);
        inbox.push(reply(&mut m, "w1", "kept")).unwrap();
        assert_eq!(
            inbox.push(reply(&mut m, "w1", "refused")),
            Err(InboxFull {
                cap: 1,
                bytes_cap: 1 << 20
            })
        );
        assert_eq!(inbox.peek(&"w1".into())[0].content, "kept");
    }

    #[test]
    fn held_bytes_are_bounded_per_target_too() {
        let mut m = IdMint::from_seed(1);
        let mut inbox = ReplyInbox::new(8, 10);
        inbox.push(reply(&mut m, "w1", "123456")).unwrap();
        let over = inbox.push(reply(&mut m, "w1", "12345"));
        assert_eq!(over.map_err(|e| e.bytes_cap), Err(10));
        inbox.push(reply(&mut m, "w1", "1234")).unwrap();
        // Another member's bound is its own.
        inbox.push(reply(&mut m, "w2", "1234567890")).unwrap();
        assert_eq!((inbox.depth(&"w1".into()), inbox.total()), (2, 3));
    }
}
