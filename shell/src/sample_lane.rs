//! Status samples and typings between the loop and herdr, kept from misleading the core.
//!
//! herdr serves a sample at once, but on a loaded host its answer can reach the loop late,
//! after newer ones. A `working` served during one turn but heard after the `idle` that ended
//! it — and after the next brief's `Injected` — reads as that brief's pickup, and the next
//! `idle` ends a turn the member has not started (COMPLETED_UNREPLIED; the single-host e2e
//! found it on a loaded machine). So samples are fed in the order they were asked, and a
//! sample asked before a typing but answered after it says nothing of that target (herdr may
//! have served it before the text landed; the next poll samples again). Typings are fed as
//! soon as they finish, never behind a slow sample of some other pane: a member quick to reply
//! must find its brief already known as typed (held back, its reply was an orphan, held as
//! stranded — the three-gateway e2e on real herdr).

use crate::ports::PortFuture;
use fleet_core::{Input, SessionId};
use futures_util::stream::{FuturesOrdered, FuturesUnordered, StreamExt};
use std::collections::BTreeMap;

/// An answer with its place in the order things were asked.
type Numbered = PortFuture<(u64, Option<Input>)>;

#[derive(Default)]
pub struct SampleLane {
    samples: FuturesOrdered<Numbered>,
    typings: FuturesUnordered<Numbered>,
    asked: u64,
    /// Per target, the place of its last answered typing — kept only while a sample asked
    /// before it may still be on its way.
    typed_at: BTreeMap<SessionId, u64>,
    /// Planted `samples-out-of-order`: samples fed as they finish, stale or not.
    #[cfg(feature = "planted-bugs")]
    pub as_they_finish: bool,
}

impl SampleLane {
    /// A status sample (`StatusSampled`, `StatusesSampled`, or `PaneGone` from one).
    pub fn sample(&mut self, op: PortFuture<Option<Input>>) {
        let n = self.next_place();
        #[cfg(feature = "planted-bugs")]
        if self.as_they_finish {
            self.typings.push(Box::pin(async move { (n, op.await) }));
            return;
        }
        self.samples
            .push_back(Box::pin(async move { (n, op.await) }));
    }

    /// A typing (`Injected`).
    pub fn typing(&mut self, op: PortFuture<Option<Input>>) {
        let n = self.next_place();
        self.typings.push(Box::pin(async move { (n, op.await) }));
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty() && self.typings.is_empty()
    }

    /// The next finished answer and what the core may hear of it (`None`: nothing). Pends
    /// forever when nothing is on its way; the loop asks only when something is.
    pub async fn next(&mut self) -> Option<Input> {
        tokio::select! {
            biased;
            Some((n, input)) = self.typings.next(), if !self.typings.is_empty() => {
                self.typed(n, input)
            }
            Some((n, input)) = self.samples.next(), if !self.samples.is_empty() => {
                self.judged(n, input)
            }
            else => std::future::pending().await,
        }
    }

    fn next_place(&mut self) -> u64 {
        self.asked += 1;
        self.asked
    }

    fn typed(&mut self, n: u64, input: Option<Input>) -> Option<Input> {
        if let Some(Input::Injected { target, .. }) = &input {
            // A sample asked after this typing cannot be older than it; only one already on
            // its way can.
            if !self.samples.is_empty() {
                let at = self.typed_at.entry(target.clone()).or_insert(n);
                *at = (*at).max(n);
            }
        }
        input
    }

    fn judged(&mut self, n: u64, input: Option<Input>) -> Option<Input> {
        let judged = self.drop_stale(n, input);
        if self.samples.is_empty() {
            self.typed_at.clear();
        }
        judged
    }

    fn drop_stale(&self, n: u64, input: Option<Input>) -> Option<Input> {
        let stale = |t: &SessionId| self.typed_at.get(t).is_some_and(|at| *at > n);
        match input? {
            Input::StatusSampled { target, .. } if stale(&target) => None,
            Input::StatusesSampled { round, mut samples } => {
                samples.retain(|(t, _)| !stale(t));
                Some(Input::StatusesSampled { round, samples })
            }
            other => Some(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_core::{AgentStatus, MsgId, Round, Sampled};
    use std::time::Duration;

    fn sampled(t: &SessionId, status: AgentStatus) -> Input {
        Input::StatusSampled {
            target: t.clone(),
            status,
            screen: None,
        }
    }

    fn injected(t: &SessionId) -> Input {
        Input::Injected {
            target: t.clone(),
            msg: MsgId(uuid::Uuid::from_u128(1)),
            result: Ok(String::new()),
        }
    }

    fn after(ms: u64, input: Input) -> PortFuture<Option<Input>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Some(input)
        })
    }

    /// Takes `n` answers, nothing included, in the order the core would hear them.
    async fn take(lane: &mut SampleLane, n: usize) -> Vec<Option<Input>> {
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(lane.next().await);
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn a_sample_asked_before_a_typing_and_answered_after_it_says_nothing() {
        let (w1, w2) = (SessionId::new("w1"), SessionId::new("w2"));
        let mut lane = SampleLane::default();
        lane.sample(after(400, sampled(&w1, AgentStatus::Working)));
        lane.sample(after(
            450,
            Input::StatusesSampled {
                round: Round::Work,
                samples: vec![
                    (w1.clone(), Sampled::Gone),
                    (
                        w2.clone(),
                        Sampled::Status {
                            status: AgentStatus::Working,
                            screen: None,
                        },
                    ),
                ],
            },
        ));
        lane.typing(after(5, injected(&w1)));
        lane.sample(after(10, sampled(&w1, AgentStatus::Idle)));
        let heard = take(&mut lane, 4).await;
        assert_eq!(
            heard,
            vec![
                // The typing at once, not behind the slow samples.
                Some(injected(&w1)),
                // w1's samples asked before it say nothing; w2's still counts.
                None,
                Some(Input::StatusesSampled {
                    round: Round::Work,
                    samples: vec![(
                        w2.clone(),
                        Sampled::Status {
                            status: AgentStatus::Working,
                            screen: None,
                        }
                    )],
                }),
                // Asked after the typing: judged, and only after the older ones.
                Some(sampled(&w1, AgentStatus::Idle)),
            ]
        );
        assert!(lane.is_empty());
        assert!(
            lane.typed_at.is_empty(),
            "nothing kept once no sample is on its way"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn samples_are_judged_in_the_order_asked() {
        let w1 = SessionId::new("w1");
        let mut lane = SampleLane::default();
        lane.sample(after(300, sampled(&w1, AgentStatus::Working)));
        lane.sample(after(5, sampled(&w1, AgentStatus::Idle)));
        assert_eq!(
            take(&mut lane, 2).await,
            vec![
                Some(sampled(&w1, AgentStatus::Working)),
                Some(sampled(&w1, AgentStatus::Idle)),
            ]
        );
    }
}
