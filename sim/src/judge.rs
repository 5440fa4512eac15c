//! The multi-host oracle: judges one run's history — what the leads did and were told
//! ([`Ledger`]), what every pane had typed into it and any launch that doubled a live pane
//! ([`PaneLog`], which no crash wipes), and the truth about which agents are alive — against
//! the invariants of `docs/invariants.md`. Safety is judged over the whole run; liveness
//! (every send ended, rosters converged) after the quiet phase.

use crate::adversary;
use crate::host::PaneLog;
use crate::invariant::Invariant;
use crate::lead::Ledger;
use crate::oracle::Violation;
use fleet_core::{CallError, HostId, Instant, Outcome, Response, RosterEntry, SessionId};
use std::collections::{BTreeMap, BTreeSet};

mod reports;

/// A remote send that fails for the broker must fail fast: within the time the connection
/// needs to notice a silent peer (three missed heartbeats, checked on each beat) and a second.
const FAIL_FAST_MS: u64 = 4 * crate::net::HEARTBEAT.as_millis() as u64 + 1_000;

pub struct Facts<'a> {
    pub at: Instant,
    pub ledger: &'a Ledger,
    pub logs: &'a [PaneLog],
    /// Every agent alive and connected at the end: (gid, its host).
    pub truth: &'a BTreeSet<(SessionId, HostId)>,
    /// Hosts whose machine went down at some point (their panes died).
    pub crashed: &'a BTreeSet<usize>,
    /// Hosts whose gateway lost its soft state at some point (a restart or a crash).
    pub restarted: &'a BTreeSet<usize>,
    /// A lying gateway was in the world. Its tap binds `#` on the message exchange, so every
    /// key is routable while it runs: a send to a gid that never existed cannot fail fast as
    /// unknown (it still ends within its bound — it is slowed, not changed).
    pub liar: bool,
    /// No fault was scheduled: every link and process stayed up (liveness is judged tight).
    pub quiet: bool,
}

/// How long before a blocking send's deadline its reply must have been accepted for the
/// oracle to expect it delivered in a world with no faults: the hops from the worker's
/// gateway through the broker to the lead's take milliseconds.
const REPLY_SLACK_MS: u64 = 2_000;

/// How long after a member's turn ended without `fleet_reply` its delegation may still time
/// out: an inferred end waits out the pickup bound (8 polls of 500 ms), a status answer may
/// run 1.5 s late, and the result crosses the broker.
const TURN_END_BOUND_MS: u64 = 8_000;

/// The world's notification rule (`multi::core_config`): a need is told after this…
pub const NOTICE_GRACE_MS: u64 = 2_000;
/// …and at most once in this long.
pub const NOTICE_QUIET_MS: u64 = 20_000;
/// A question left open past its grace is raised within this of it: the rules' round runs
/// every 500 ms, and a lead hears a question in the step its gateway learns it.
const NOTICE_LATE_MS: u64 = 1_000;

/// Judges one run against every invariant, in a fixed order (the first violation found is the
/// one a failing seed reports).
pub fn judge(f: &Facts<'_>) -> Vec<Violation> {
    let mut out = Verdicts {
        at: f.at,
        found: Vec::new(),
    };
    health_is_truthful(f, &mut out);
    typed_once_and_only_as_sent(f, &mut out);
    never_typed_mid_turn(f, &mut out);
    never_typed_before_input(f, &mut out);
    no_forged_outcome(f, &mut out);
    every_send_ends_with_its_own_outcome(f, &mut out);
    results_never_delay_other_flows(f, &mut out);
    unreplied_turns_end_their_delegation(f, &mut out);
    replies_reach_their_lead_once(f, &mut out);
    one_pane_per_spawn(f, &mut out);
    members_stop_only_when_asked(f, &mut out);
    rosters_converge_truthfully(f, &mut out);
    notices_tell_the_truth(f, &mut out);
    tasks_wait_for_their_dependencies(f, &mut out);
    reports::reports_speak_for_their_own_turn(f, &mut out);
    out.found
}

/// What the judge found, in the order it looked.
struct Verdicts {
    at: Instant,
    found: Vec<Violation>,
}

impl Verdicts {
    fn violate(&mut self, invariant: Invariant, detail: String) {
        self.found.push(Violation {
            invariant,
            at: self.at,
            detail,
        });
    }
}

/// I13: health tells the truth — a member reported GONE is gone. (WORKING is judged in
/// the single-host world, where a probe's sample and its verdict share an instant.)
fn health_is_truthful(f: &Facts<'_>, out: &mut Verdicts) {
    for log in f.logs {
        for (pane, state, alive, at) in &log.health {
            if *state == fleet_core::health::Health::Gone && *alive {
                out.violate(
                    Invariant::I13,
                    format!("{pane} was reported GONE at {at} ms while its pane lived"),
                );
            }
        }
    }
}

/// I16: notifications tell the truth. Every notice: no words (the world's rule allows none);
/// a raise or reminder of one need at least a quiet period after the last, and one resolve
/// per raise, after it (on a gateway that kept its state); a question's raise only once it
/// waited its grace, and not after its lead answered it. In a world with no faults, a
/// question left open past its grace is raised.
fn notices_tell_the_truth(f: &Facts<'_>, out: &mut Verdicts) {
    use fleet_core::notify::NoticePhase;
    let questions = &f.ledger.questions;
    for (h, log) in f.logs.iter().enumerate() {
        let kept_state = !f.restarted.contains(&h);
        let mut last: BTreeMap<(&str, &str), u64> = BTreeMap::new();
        // Whether each need has a raise out that no resolve has answered yet.
        let mut open: BTreeMap<(&str, &str), bool> = BTreeMap::new();
        for (n, at) in &log.notices {
            let (rule, id) = (n.rule.as_str(), n.need.id.as_str());
            if n.need.text.is_some() {
                out.violate(
                    Invariant::I16,
                    format!("host {h}: rule {rule} told {id} at {at} ms with its words"),
                );
            }
            let was_open = open.insert((rule, id), n.phase != NoticePhase::Resolved);
            if n.phase == NoticePhase::Resolved {
                if kept_state && was_open != Some(true) {
                    out.violate(
                        Invariant::I16,
                        format!("host {h}: rule {rule} resolved {id} at {at} ms, but no raise of it was out"),
                    );
                }
                continue;
            }
            if let Some(prev) = last.insert((rule, id), *at) {
                if kept_state && *at < prev + NOTICE_QUIET_MS {
                    out.violate(
                        Invariant::I16,
                        format!(
                            "host {h}: rule {rule} told {id} at {prev} ms and again at {at} ms, \
                             within its quiet period"
                        ),
                    );
                }
            }
            let asked = questions
                .iter()
                .find(|q| q.host == h && format!("question:{}", q.turn) == id);
            if let (NoticePhase::Raised, Some(q)) = (n.phase, asked) {
                if *at + 100 < q.asked_ms + NOTICE_GRACE_MS {
                    out.violate(
                        Invariant::I16,
                        format!(
                            "host {h}: {id}, asked at {} ms, raised at {at} ms: before its grace",
                            q.asked_ms
                        ),
                    );
                }
                if q.answered_ms.is_some_and(|a| a + 50 < *at) {
                    out.violate(
                        Invariant::I16,
                        format!("host {h}: {id} raised at {at} ms, after its lead answered"),
                    );
                }
            }
        }
        if !f.quiet {
            continue;
        }
        for q in questions.iter().filter(|q| q.host == h) {
            let due = q.asked_ms + NOTICE_GRACE_MS + NOTICE_LATE_MS;
            let open_past_due = q.answered_ms.unwrap_or(u64::MAX) > due && due < f.at.as_millis();
            let id = format!("question:{}", q.turn);
            let raised = log
                .notices
                .iter()
                .any(|(n, at)| n.need.id == id && n.phase == NoticePhase::Raised && *at <= due);
            if open_past_due && !raised {
                out.violate(
                    Invariant::I16,
                    format!(
                        "host {h}: {id}, asked at {} ms and open past {due} ms, was never raised",
                        q.asked_ms
                    ),
                );
            }
        }
    }
}

/// I17: a task starts (goes `running`) only once every task it depends on has gone `done` on
/// its lead's list. Its list outlives a restart of its gateway, so this holds across one.
fn tasks_wait_for_their_dependencies(f: &Facts<'_>, out: &mut Verdicts) {
    use fleet_core::tasks::TaskState;
    for (h, log) in f.logs.iter().enumerate() {
        let mut done: BTreeSet<(&SessionId, fleet_core::tasks::TaskId)> = BTreeSet::new();
        for (lead, task, state, at) in &log.tasks {
            match state {
                TaskState::Done => {
                    done.insert((lead, *task));
                }
                TaskState::Running => {
                    let Some(rec) = f
                        .ledger
                        .tasks
                        .iter()
                        .find(|r| r.host == h && &r.lead == lead && r.id == *task)
                    else {
                        continue;
                    };
                    for dep in &rec.deps {
                        if !done.contains(&(lead, *dep)) {
                            out.violate(
                                Invariant::I17,
                                format!(
                                    "host {h}: {lead}'s {task} started at {at} ms before {dep}, which it depends on, was done"
                                ),
                            );
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

/// I1, I5, I8 over what was typed.
fn typed_once_and_only_as_sent(f: &Facts<'_>, out: &mut Verdicts) {
    let briefs: BTreeSet<&str> = f
        .ledger
        .sends
        .iter()
        .map(|s| s.brief.as_str())
        .chain(f.ledger.broadcasts.iter().map(String::as_str))
        .chain(f.ledger.tasks.iter().map(|t| t.brief.as_str()))
        .collect();
    let mut typed: BTreeMap<(&SessionId, &str), u32> = BTreeMap::new();
    for log in f.logs {
        for (pane, text) in &log.typed {
            *typed.entry((pane, text.as_str())).or_default() += 1;
            if text.starts_with("answer for ") {
                out.violate(Invariant::I5,
                    format!("an answer was typed into {pane} as a task ({text:?}): it reached no asking turn"),
                );
            } else if !briefs.contains(text.as_str()) {
                out.violate(
                    Invariant::I8,
                    format!("{pane} was typed {text:?}, which no lead sent"),
                );
            }
        }
    }
    for ((pane, text), n) in &typed {
        if *n > 1 {
            out.violate(
                Invariant::I1,
                format!("{pane} was typed {text:?} {n} times"),
            );
        }
    }
}

/// I1: never typed into a busy pane, and one message per turn.
fn never_typed_mid_turn(f: &Facts<'_>, out: &mut Verdicts) {
    for log in f.logs {
        for (pane, text, busy, at) in &log.mid_turn {
            out.violate(
                Invariant::I1,
                format!("{pane} was typed {text:?} at {at} ms while its agent was {busy}"),
            );
        }
    }
}

/// I15: readiness means the agent takes input — nothing is typed into a member whose
/// agent is still starting (its pane may read idle for seconds before), where it is lost.
fn never_typed_before_input(f: &Facts<'_>, out: &mut Verdicts) {
    for log in f.logs {
        for (pane, text, at) in &log.lost {
            out.violate(
                Invariant::I15,
                format!(
                    "{pane} was typed {text:?} at {at} ms, before its agent took input: it is lost"
                ),
            );
        }
    }
}

/// I8 in the hostile world: an adversary changes no outcome. Whatever the lying gateway
/// writes carries its mark; no answer, reply or question a lead is told may.
fn no_forged_outcome(f: &Facts<'_>, out: &mut Verdicts) {
    let forged = |body: Option<&str>| body.is_some_and(|b| b.contains(adversary::MARK));
    for s in &f.ledger.sends {
        for (r, _) in &s.responses {
            let body = match r {
                Response::Outcome { body, .. } => body.as_deref(),
                Response::Ticket(t) => t.body.as_deref().or(t.question.as_deref()),
                _ => None,
            };
            if forged(body) {
                out.violate(
                    Invariant::I8,
                    format!(
                        "{:?} was ended or answered by the adversary: {r:?}",
                        s.brief
                    ),
                );
            }
        }
    }
    for r in &f.ledger.received {
        if forged(Some(&r.body)) {
            out.violate(
                Invariant::I8,
                format!("lead{} was handed the adversary's {:?}", r.host, r.body),
            );
        }
    }
}

/// I2, I5, I9 over what each send was told.
fn every_send_ends_with_its_own_outcome(f: &Facts<'_>, out: &mut Verdicts) {
    for s in &f.ledger.sends {
        if s.lost || s.forgotten {
            continue;
        }
        let last = s.responses.last().map(|(r, _)| r);
        match last {
            None => out.violate(
                Invariant::I2,
                format!("{:?} to {} never ended", s.brief, s.target),
            ),
            Some(_) if !s.ended => out.violate(
                Invariant::I2,
                format!(
                    "{:?} to {} was left open: {:?}",
                    s.brief, s.target, s.responses
                ),
            ),
            Some(Response::Outcome { .. } | Response::Ticket(_)) if s.unknown && !f.liar => out
                .violate(
                    Invariant::I2,
                    format!(
                        "{:?} to a recipient that never existed ended {last:?}",
                        s.brief
                    ),
                ),
            _ => {}
        }
        for (r, took) in &s.responses {
            let body = match r {
                Response::Outcome {
                    outcome: Outcome::Replied,
                    body,
                    ..
                } => body.as_deref(),
                Response::Ticket(t) if t.outcome == Some(Outcome::Replied) => t.body.as_deref(),
                _ => None,
            };
            let own = format!("done: {}", s.brief);
            if body.is_some_and(|b| b != own) {
                out.violate(
                    Invariant::I5,
                    format!(
                        "{:?} ended REPLIED with {body:?}, not its own reply",
                        s.brief
                    ),
                );
            }
            if let Response::Error(CallError::BrokerUnavailable) = r {
                // (A member that died is no longer local: a send to it may fail either way.)
                let alive = f.truth.iter().any(|(g, _)| g == &s.target);
                if s.local && alive && !f.crashed.contains(&s.host) {
                    out.violate(
                        Invariant::I9,
                        format!(
                            "{:?} to {} on its own host failed for the broker",
                            s.brief, s.target
                        ),
                    );
                }
                if *took > FAIL_FAST_MS {
                    out.violate(
                        Invariant::I9,
                        format!(
                            "{:?} failed for the broker after {took} ms, not fast",
                            s.brief
                        ),
                    );
                }
            }
        }
    }
}

/// I11: uncollected results never delay a lead's other flows. In a world with no faults, a
/// blocking call whose reply the worker's gateway accepted well before the call's deadline
/// does not time out — whatever results its lead has left uncollected (a window full of
/// them wedged the first build's inbox, and this is how the planted
/// `results-held-in-inbox` shows).
fn results_never_delay_other_flows(f: &Facts<'_>, out: &mut Verdicts) {
    if f.quiet {
        let replied: BTreeMap<&str, u64> = f
            .logs
            .iter()
            .flat_map(|l| l.replied.iter().map(|(t, at)| (t.as_str(), *at)))
            .collect();
        for s in f.ledger.sends.iter().filter(|s| !s.lost) {
            let Some((Response::Outcome { outcome, .. }, _)) = s.responses.last() else {
                continue;
            };
            if !matches!(outcome, Outcome::TimedOutQueued | Outcome::TimedOutWorking) {
                continue;
            }
            let deadline = s.last_call_ms.saturating_add(s.last_timeout_ms);
            if let Some(at) = replied.get(s.brief.as_str()) {
                if *at >= s.last_call_ms && at + REPLY_SLACK_MS <= deadline {
                    out.violate(Invariant::I11,
                        format!(
                            "{:?} ended {outcome} at its deadline ({deadline} ms) although its reply was accepted at {at} ms{}",
                            s.brief,
                            if f.ledger.negligent.contains(&s.host) { ", behind its negligent lead's uncollected results" } else { "" }
                        ),
                    );
                }
            }
        }
    }
}

/// I14: a delegation typed into a member whose turn then ended without `fleet_reply` ends
/// with its completion, not a timeout — unless the deadline came before the end could be
/// known (an inferred end waits out the pickup bound). Judged in worlds with no faults: a
/// partition or a restart may keep any outcome from its lead.
fn unreplied_turns_end_their_delegation(f: &Facts<'_>, out: &mut Verdicts) {
    if f.quiet {
        let ended: BTreeMap<&str, u64> = f
            .logs
            .iter()
            .flat_map(|l| l.ended_unreplied.iter().map(|(_, t, at)| (t.as_str(), *at)))
            .collect();
        for s in f.ledger.sends.iter().filter(|s| !s.lost) {
            let outcome = match s.responses.last() {
                Some((Response::Outcome { outcome, .. }, _)) => Some(*outcome),
                Some((Response::Ticket(view), _)) => view.outcome,
                _ => None,
            };
            let (Some(Outcome::TimedOutWorking), Some(at)) = (outcome, ended.get(s.brief.as_str()))
            else {
                continue;
            };
            let deadline = s.last_call_ms.saturating_add(s.last_timeout_ms);
            if *at >= s.last_call_ms && at + TURN_END_BOUND_MS <= deadline {
                out.violate(Invariant::I14,
                    format!(
                        "{:?} timed out working at {deadline} ms, though its agent ended the turn at {at} ms",
                        s.brief
                    ),
                );
            }
        }
    }
}

/// I3: a reply reaches the lead that sent its brief, at most once per incarnation of that
/// lead's gateway (a restarted gateway has lost its dedup memory and may hand a reply over
/// again; within one it may not).
fn replies_reach_their_lead_once(f: &Facts<'_>, out: &mut Verdicts) {
    let host_of: BTreeMap<&str, usize> = f
        .ledger
        .targets
        .iter()
        .map(|(g, h)| (g.as_str(), *h))
        .collect();
    let mut got: BTreeMap<(usize, u64, &SessionId, &str), Vec<&str>> = BTreeMap::new();
    for r in &f.ledger.received {
        got.entry((r.host, r.incarnation, &r.from, r.body.as_str()))
            .or_default()
            .push(r.via);
        // A worker gateway that restarted forgot whose turn its agent was in: a reply to a turn
        // begun before that is an orphan, held on the worker's host for whoever collects it.
        let orphaned = r
            .body
            .rsplit(" for ")
            .next()
            .and_then(|g| host_of.get(g))
            .is_some_and(|h| f.restarted.contains(h));
        let ours = format!(" from lead{} for ", r.host);
        if r.body.starts_with("done: brief ") && !r.body.contains(&ours) && !orphaned {
            out.violate(
                Invariant::I3,
                format!(
                    "lead{} was handed {:?}, another lead's reply",
                    r.host, r.body
                ),
            );
        }
    }
    // A member may have replied more than once (its first call died with its gateway, and it
    // ran again after the restart): a lead may receive a reply as often as it was made.
    let mut made: BTreeMap<(&SessionId, &str), usize> = BTreeMap::new();
    for (member, body) in f.logs.iter().flat_map(|l| &l.reply_attempts) {
        *made.entry((member, body.as_str())).or_default() += 1;
    }
    for ((host, inc, from, body), via) in &got {
        let allowed = made.get(&(*from, *body)).copied().unwrap_or(0).max(1);
        if via.len() > allowed {
            out.violate(Invariant::I3,
                format!(
                    "lead{host} (gateway start {inc}) received {body:?} from {from} {} times, via {via:?}; it was made {allowed} time(s)",
                    via.len()
                ),
            );
        }
    }
}

/// I6: never two panes for one spawn id at once (a pane that died with its host before its
/// readiness gate may be relaunched by the redelivered SPAWN, under the same gid); a spawn
/// lands where it was asked to.
fn one_pane_per_spawn(f: &Facts<'_>, out: &mut Verdicts) {
    for log in f.logs {
        for gid in &log.duplicates {
            out.violate(
                Invariant::I6,
                format!("spawn id {gid} was launched into a second pane while the first lived"),
            );
        }
    }
    for s in &f.ledger.spawns {
        match &s.response {
            None if !s.lost => out.violate(
                Invariant::I2,
                format!("a spawn on {} was never answered", s.on),
            ),
            Some(Response::Spawned { host, gid }) if host != &s.on => out.violate(
                Invariant::I6,
                format!("a spawn asked of {} answered {gid} on {host}", s.on),
            ),
            Some(Response::Spawned { gid, .. }) if s.profile != "claude" => out.violate(
                Invariant::I6,
                format!(
                    "profile {:?}, which no host offers, spawned {gid}",
                    s.profile
                ),
            ),
            _ => {}
        }
    }
}

/// I12: a member stops only when a lead that may stop it asks. Every pane a gateway closed
/// of a member that was ready (an initial one, or one whose spawn was answered) was asked
/// to stop by an honest lead before it closed — on a host that never restarted or crashed
/// (a restarted gateway closes members it could not adopt). A stop answered `stopped` left
/// its member dead at the end; every stop is answered.
fn members_stop_only_when_asked(f: &Facts<'_>, out: &mut Verdicts) {
    let mut asked: BTreeMap<&SessionId, u64> = BTreeMap::new();
    for s in &f.ledger.stops {
        let t = asked.entry(&s.target).or_insert(s.asked_ms);
        *t = (*t).min(s.asked_ms);
    }
    for (h, log) in f.logs.iter().enumerate() {
        if f.restarted.contains(&h) || f.crashed.contains(&h) {
            continue;
        }
        for (gid, at) in &log.closed {
            if !f.ledger.targets.iter().any(|(t, _)| t == gid) {
                continue;
            }
            if asked.get(gid).is_none_or(|t| t > at) {
                out.violate(
                    Invariant::I12,
                    format!(
                        "{gid} on host {h} was closed at {at} ms, and no lead had asked to stop it"
                    ),
                );
            }
        }
    }
    for s in &f.ledger.stops {
        match &s.response {
            None if !s.lost => out.violate(
                Invariant::I2,
                format!("a stop of {} was never answered", s.target),
            ),
            Some(Response::Stopped { target }) if f.truth.iter().any(|(g, _)| g == target) => out
                .violate(
                    Invariant::I12,
                    format!(
                        "lead{} was told {target} stopped, but it is alive at the end",
                        s.host
                    ),
                ),
            _ => {}
        }
    }
}

/// I7: after the quiet phase every lead's view is exactly the agents that are alive. The
/// lying gateway's own member is its own business; any other gid believed on its host is
/// a takeover (I8).
fn rosters_converge_truthfully(f: &Facts<'_>, out: &mut Verdicts) {
    let liar = HostId::new(adversary::HOST);
    // What each member's own host says of it: its lead's view reads that host's rows from
    // what the gateway serves, not from presence.
    let own_rows: BTreeMap<&SessionId, &RosterEntry> = f
        .ledger
        .views
        .iter()
        .flat_map(|(host, view)| {
            let me = crate::host::host_name(*host);
            view.iter()
                .filter(move |r| r.host == me)
                .map(|r| (&r.gid, r))
        })
        .collect();
    for (host, view) in &f.ledger.views {
        let honest = |g: &SessionId| f.ledger.targets.iter().any(|(t, _)| t == g);
        for r in view.iter().filter(|r| r.host == liar && honest(&r.gid)) {
            out.violate(
                Invariant::I8,
                format!(
                    "lead{host}'s roster believes the adversary's claim to {}",
                    r.gid
                ),
            );
        }
        // The roster is truthful on every host: a member reads with the card (profile, role,
        // group, owner, since) its own host gives it.
        for r in view.iter().filter(|r| r.host != liar) {
            let Some(own) = own_rows.get(&r.gid).filter(|o| o.host == r.host) else {
                continue;
            };
            let card = |e: &RosterEntry| {
                (
                    e.profile.clone(),
                    e.role,
                    e.group.clone(),
                    e.owner.clone(),
                    e.since,
                )
            };
            if card(r) != card(own) {
                out.violate(
                    Invariant::I7,
                    format!(
                        "lead{host}'s roster says {} is {:?}; its own host says {:?}",
                        r.gid,
                        card(r),
                        card(own)
                    ),
                );
            }
        }
        let seen: BTreeSet<(SessionId, HostId)> = view
            .iter()
            .filter(|r| r.host != liar)
            .map(|r| (r.gid.clone(), r.host.clone()))
            .collect();
        let stale: Vec<_> = seen.difference(f.truth).collect();
        let missing: Vec<_> = f.truth.difference(&seen).collect();
        if !stale.is_empty() || !missing.is_empty() {
            out.violate(
                Invariant::I7,
                format!(
                    "lead{host}'s roster did not converge: stale {stale:?}, missing {missing:?}"
                ),
            );
        }
    }
}

/// How the sends ended, by name, for the summary.
pub fn outcomes(ledger: &Ledger) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for s in &ledger.sends {
        let name = if s.lost {
            "lost with its lead's gateway".to_string()
        } else if s.forgotten {
            "ticket forgotten by its lead".to_string()
        } else {
            match s.responses.last().map(|(r, _)| r) {
                Some(Response::Outcome { outcome, .. }) => outcome.to_string(),
                Some(Response::Ticket(t)) => t
                    .outcome
                    .map_or_else(|| "open".to_string(), |o| o.to_string()),
                Some(Response::Error(e)) => format!("error: {}", e.code()),
                Some(other) => other.to_string(),
                None => "unanswered".into(),
            }
        };
        *out.entry(name).or_insert(0) += 1;
    }
    for s in &ledger.stops {
        let name = match &s.response {
            Some(Response::Stopped { .. }) => "stop: ok".to_string(),
            Some(Response::Error(e)) => format!("stop: {}", e.code()),
            Some(other) => format!("stop: {other}"),
            None => "stop: lost".into(),
        };
        *out.entry(name).or_insert(0) += 1;
    }
    for s in &ledger.spawns {
        let name = match &s.response {
            Some(Response::Spawned { .. }) => "spawn: ok".to_string(),
            Some(Response::Error(e)) => format!("spawn: {}", e.code()),
            Some(other) => format!("spawn: {other}"),
            None => "spawn: lost".into(),
        };
        *out.entry(name).or_insert(0) += 1;
    }
    if !ledger.broadcasts.is_empty() {
        out.insert("broadcasts".into(), ledger.broadcasts.len() as u64);
    }
    if ledger.answers > 0 {
        out.insert("answers given".into(), ledger.answers);
        out.insert("answers late by design".into(), ledger.late_answers);
    }
    out
}
