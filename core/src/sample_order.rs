//! Which status samples may still speak (a sub-machine of the gateway, with its own state).
//!
//! herdr serves a sample at once, but on a loaded host its answer can reach the core late,
//! after newer ones. A `working` served during one turn but heard after the `idle` that ended
//! it — and after the next brief was typed — reads as that brief's pickup, and the next `idle`
//! ends a turn the member has not started (COMPLETED_UNREPLIED; the single-host e2e found it on
//! a loaded machine). So every ask and every typing gets a place in one sequence ([`Asked`]),
//! the answer carries its ask's place back, and a sample says nothing of a target when it was
//! asked before that target's last typing or before a sample already heard of it. The driver
//! may then feed answers as they finish: what is stale is judged here, where both worlds of
//! the simulation run it.

use crate::ids::SessionId;
use crate::io::Asked;
use indexmap::IndexMap;
use rustc_hash::FxBuildHasher;

/// Looked up on every sample (the hottest path of the core, with the injector's tracks): hashed
/// with a fixed hasher, as the injector's tracks are — a map of gids ordered by string costs
/// the gateway half its throughput at a thousand targets. Its order depends only on the
/// operations, and the one walk (the eviction below) takes a minimum over a total order.
type Places = IndexMap<SessionId, u64, FxBuildHasher>;

/// Targets kept at most: past it the one whose floor is oldest goes (a target sampled long
/// ago and never seen gone; its stale answer would long have come).
const KEPT: usize = 16_384;

#[derive(Clone, Debug, Default)]
pub struct SampleOrder {
    /// The place of the newest ask or typing.
    last: u64,
    /// Per target, the place of a typing on its way (asked, not yet answered).
    typing: Places,
    /// Per target, what a sample must be newer than: its last typing's place, or the newest
    /// sample heard of it. Kept while the target is served; `forget` drops it.
    floor: Places,
    /// Planted `samples-out-of-order`: every sample speaks, stale or not.
    believe_all: bool,
}

impl SampleOrder {
    pub fn new(believe_all: bool) -> Self {
        SampleOrder {
            believe_all,
            ..SampleOrder::default()
        }
    }

    /// The place of a new status ask.
    pub fn ask(&mut self) -> Asked {
        self.last += 1;
        Asked(self.last)
    }

    /// The newest place handed out: a sample claiming it is as fresh as any ask so far (for
    /// a harness that answers without having been asked).
    pub fn newest(&self) -> Asked {
        Asked(self.last)
    }

    /// A typing into `target` asked: its place, remembered until its answer.
    pub fn typing(&mut self, target: &SessionId) {
        self.last += 1;
        self.typing.insert(target.clone(), self.last);
    }

    /// The typing into `target` answered: no sample asked before it speaks of `target` now
    /// (herdr may have served it before the text landed).
    pub fn typed(&mut self, target: &SessionId) {
        if let Some(at) = self.typing.swap_remove(target) {
            self.raise(target, at);
        }
    }

    /// Whether a sample of `target` asked at `asked` may speak; if so, it is the newest heard.
    pub fn fresh(&mut self, target: &SessionId, asked: Asked) -> bool {
        // One lookup, and no key cloned, for a target already known (nearly every sample).
        if let Some(floor) = self.floor.get_mut(target) {
            if asked.0 < *floor && !self.believe_all {
                return false;
            }
            *floor = (*floor).max(asked.0);
            return true;
        }
        self.raise(target, asked.0);
        true
    }

    /// `target` is served no more.
    pub fn forget(&mut self, target: &SessionId) {
        self.typing.swap_remove(target);
        self.floor.swap_remove(target);
    }

    /// Entries kept (for the gateway's bounds check).
    pub fn len(&self) -> usize {
        self.typing.len() + self.floor.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn raise(&mut self, target: &SessionId, to: u64) {
        if let Some(f) = self.floor.get_mut(target) {
            *f = (*f).max(to);
            return;
        }
        self.floor.insert(target.clone(), to);
        if self.floor.len() > KEPT {
            let oldest = self
                .floor
                .iter()
                .min_by_key(|(t, at)| (**at, (*t).clone()))
                .map(|(t, _)| t.clone());
            if let Some(t) = oldest {
                self.floor.swap_remove(&t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(n: &str) -> SessionId {
        SessionId::new(n)
    }

    #[test]
    fn a_sample_asked_before_a_typing_and_heard_after_it_says_nothing() {
        let mut o = SampleOrder::new(false);
        let before = o.ask();
        o.typing(&w("w1"));
        let during = o.ask();
        o.typed(&w("w1"));
        assert!(!o.fresh(&w("w1"), before), "asked before the typing");
        assert!(o.fresh(&w("w2"), before), "another target's is untouched");
        // Asked after the typing was: herdr took it after the text.
        assert!(o.fresh(&w("w1"), during));
    }

    #[test]
    fn an_older_sample_heard_after_a_newer_one_says_nothing() {
        let mut o = SampleOrder::new(false);
        let (old, new) = (o.ask(), o.ask());
        assert!(o.fresh(&w("w1"), new));
        assert!(!o.fresh(&w("w1"), old));
        // One round answers several targets at one place.
        let round = o.ask();
        assert!(o.fresh(&w("w1"), round) && o.fresh(&w("w2"), round));
    }

    #[test]
    fn a_sample_heard_before_its_targets_typing_is_answered_still_speaks() {
        let mut o = SampleOrder::new(false);
        let before = o.ask();
        o.typing(&w("w1"));
        assert!(o.fresh(&w("w1"), before));
    }

    #[test]
    fn planted_every_sample_speaks() {
        let mut o = SampleOrder::new(true);
        let before = o.ask();
        o.typing(&w("w1"));
        o.typed(&w("w1"));
        assert!(o.fresh(&w("w1"), before));
    }

    #[test]
    fn a_forgotten_target_keeps_nothing() {
        let mut o = SampleOrder::new(false);
        let a = o.ask();
        o.typing(&w("w1"));
        assert!(o.fresh(&w("w1"), a));
        o.forget(&w("w1"));
        assert!(o.is_empty());
    }
}
