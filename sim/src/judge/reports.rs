//! I18: an agent's word on its turn is that turn's. A delegation ends with its own brief's
//! result, never another brief's (a late or re-sent report of an earlier turn believed for a
//! later one would end it with the earlier answer); and in a world with no faults, a turn
//! whose agent reported its end as it ended ends COMPLETED_UNREPLIED with exactly the agent's
//! text — not its screen, and never at its timeout.

use super::{Facts, Verdicts};
use crate::invariant::Invariant;
use fleet_core::{Outcome, Response};

/// A simulated agent's answers start so (`reporter::answer`), behind a `● ` on its screen.
const ANSWER: &str = "finished: ";

pub(super) fn reports_speak_for_their_own_turn(f: &Facts<'_>, out: &mut Verdicts) {
    for s in &f.ledger.sends {
        for (r, at) in &s.responses {
            let (outcome, body) = match r {
                Response::Outcome { outcome, body, .. } => (*outcome, body.as_deref()),
                Response::Ticket(v) => (v.outcome.unwrap_or(Outcome::Question), v.body.as_deref()),
                _ => continue,
            };
            if outcome != Outcome::CompletedUnreplied {
                continue;
            }
            let body = body.unwrap_or_default();
            for line in body.lines() {
                let Some(of) = line.trim_start_matches("● ").strip_prefix(ANSWER) else {
                    continue;
                };
                if of != s.brief {
                    out.violate(
                        Invariant::I18,
                        format!(
                            "{:?} ended COMPLETED_UNREPLIED at +{at} ms with another brief's answer: {body:?}",
                            s.brief
                        ),
                    );
                }
            }
        }
    }
    if !f.quiet {
        return;
    }
    // Turns that ended without `fleet_reply` (a reply is its own delegation's end).
    let unreplied: std::collections::BTreeSet<&str> = f
        .logs
        .iter()
        .flat_map(|l| l.ended_unreplied.iter().map(|(_, t, _)| t.as_str()))
        .collect();
    for e in f
        .logs
        .iter()
        .flat_map(|l| &l.reported_ends)
        .filter(|e| e.prompt && e.verdict == "ended" && unreplied.contains(e.task.as_str()))
    {
        let expected = crate::reporter::answer(&e.task);
        for s in f
            .ledger
            .sends
            .iter()
            .filter(|s| s.brief == e.task && !s.lost)
        {
            let outcome = s.responses.last().and_then(|(r, _)| match r {
                Response::Outcome { outcome, body, .. } => Some((*outcome, body.clone())),
                Response::Ticket(v) => v.outcome.map(|o| (o, v.body.clone())),
                _ => None,
            });
            // Reported while its delegation still waited on it (not after a timeout).
            if e.at < s.last_call_ms || e.at >= s.last_call_ms + s.last_timeout_ms {
                continue;
            }
            match outcome {
                Some((Outcome::CompletedUnreplied, body)) if body.as_deref() != Some(&expected) => {
                    out.violate(
                        Invariant::I18,
                        format!(
                            "{:?}: its agent reported its end at {} ms with {expected:?}; it ended with {body:?}",
                            s.brief, e.at
                        ),
                    )
                }
                Some((Outcome::TimedOutWorking, _)) => out.violate(
                    Invariant::I18,
                    format!(
                        "{:?} timed out working, though its agent reported its end at {} ms",
                        s.brief, e.at
                    ),
                ),
                _ => {}
            }
        }
    }
}
