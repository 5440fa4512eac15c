//! Notification rules (`[[notify]]`): which needs (`needs`) are worth telling a person about
//! away from the terminal, and when. Pure: each scan takes the needs that hold now and says
//! which notices are due; the shell's sinks carry them out.
//!
//! Per rule and need: a raise once the need has held for the rule's grace (one answered
//! sooner is never sent), a reminder every quiet period while it still holds, and one resolve
//! when it clears. A need that clears and comes back within the quiet period after a notice
//! is not raised again before that period ends. Raises and reminders count against the rule's
//! budget per target (the lead a need waits on, or the host); a resolve always goes, so no one
//! is left believing a cleared need still waits. No words of a brief, reply or question leave
//! unless the rule says `include_text`.

use crate::ids::SessionId;
use crate::needs::{Need, NeedKind};
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// One `[[notify]]` rule as the core judges it (its sink's settings stay in the shell).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotifyRule {
    /// Names the rule in notices, metrics and logs; unique.
    pub name: String,
    /// The kinds of need it tells about; empty: every kind.
    pub on: Vec<NeedKind>,
    /// Only needs waiting on these leads; empty: every need, host-wide ones included.
    pub leads: Vec<SessionId>,
    /// A need must hold this long before it is sent: one that clears sooner never is.
    pub grace_ms: u64,
    /// At most one raise or reminder per need in this long.
    pub quiet_ms: u64,
    /// At most this many raises and reminders per target in `window_ms`; the rest wait for
    /// the budget (counted as limited).
    pub max_per_window: u32,
    pub window_ms: u64,
    /// Carry the question's or result's words; off, a notice says only who and what.
    pub include_text: bool,
}

impl Default for NotifyRule {
    fn default() -> Self {
        NotifyRule {
            name: String::new(),
            on: Vec::new(),
            leads: Vec::new(),
            grace_ms: 30_000,
            quiet_ms: 15 * 60_000,
            max_per_window: 30,
            window_ms: 60 * 60_000,
            include_text: false,
        }
    }
}

impl NotifyRule {
    fn matches(&self, need: &Need) -> bool {
        let kind = self.on.is_empty() || self.on.contains(&need.kind);
        let lead = self.leads.is_empty()
            || need
                .waits_on
                .as_ref()
                .is_some_and(|l| self.leads.contains(l));
        kind && lead
    }

    /// What is wrong with it, if anything (the daemon's `check-config` says it).
    pub fn problem(&self) -> Option<String> {
        if self.name.trim().is_empty() {
            return Some("a rule needs a name".into());
        }
        if self.quiet_ms == 0 {
            return Some("quiet_ms must be above 0: a need would be sent on every scan".into());
        }
        if self.max_per_window == 0 || self.window_ms == 0 {
            return Some("max_per_window and window_ms must be above 0".into());
        }
        None
    }
}

/// Where a notice stands in its need's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticePhase {
    /// The need has held for the rule's grace.
    Raised,
    /// It still holds a quiet period after the last notice.
    Reminder,
    /// It cleared after a raise.
    Resolved,
}

/// One notification to carry out through rule `rule`'s sink.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    pub rule: String,
    pub phase: NoticePhase,
    /// The need, without its words unless the rule allows them.
    pub need: Need,
    /// The n-th notice of this stretch of the need under this rule (from 1).
    pub seq: u32,
    /// When this stretch of the need began (Unix ms): a need that clears and comes back, or
    /// outlives a restart, starts a new stretch — with the rule, the need's id and `seq`, a
    /// receiver's dedup key.
    pub opened_unix_ms: u64,
}

/// One need as one rule tracks it.
#[derive(Clone, Debug)]
struct Tracked {
    need: Need,
    /// Held since (the latest stretch).
    since: Instant,
    /// Seen in the latest scan.
    holds: bool,
    /// The scan that saw it last.
    seen_in: u64,
    /// A raise went out and no resolve yet.
    raised: bool,
    last_sent: Option<Instant>,
    seq: u32,
    /// Its notice is waiting for the budget (counted once per wait).
    limited: bool,
}

/// Counters for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NotifyStats {
    /// Notices due that waited for their rule's budget.
    pub limited: u64,
}

#[derive(Debug, Default)]
pub struct Notifier {
    rules: Vec<NotifyRule>,
    /// By need id, then rule index (looked up by a need's id without copying it: a scan
    /// meets every need each time).
    tracked: BTreeMap<String, BTreeMap<usize, Tracked>>,
    /// Scans made, numbering each.
    scans: u64,
    /// Raises and reminders sent, by rule index and target (none: the host), oldest first.
    sent: BTreeMap<(usize, Option<SessionId>), VecDeque<Instant>>,
    stats: NotifyStats,
    /// Planted bugs (`fleet_core::planted`), for proving the simulation's oracle.
    planted: Planted,
}

/// What the planted notification bugs turn off (never set outside the simulation's `prove`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Planted {
    pub quiet_ignored: bool,
    pub text_leaks: bool,
    pub grace_ignored: bool,
    pub resolve_kept_open: bool,
}

impl Notifier {
    pub fn new(rules: Vec<NotifyRule>) -> Notifier {
        Notifier {
            rules,
            ..Notifier::default()
        }
    }

    /// With planted bugs switched on (`CoreConfig::planted`).
    pub fn planted(mut self, planted: Planted) -> Notifier {
        self.planted = planted;
        self
    }

    pub fn has_rules(&self) -> bool {
        !self.rules.is_empty()
    }

    pub fn stats(&self) -> NotifyStats {
        self.stats
    }

    /// Needs tracked by some rule (held, or remembered for their quiet period).
    pub fn tracked(&self) -> usize {
        self.tracked.values().map(BTreeMap::len).sum()
    }

    /// Whether some rule may carry a need's words (only then need the needs carry them).
    pub fn wants_words(&self) -> bool {
        self.planted.text_leaks || self.rules.iter().any(|r| r.include_text)
    }

    /// The notices due at `now`, given every need that holds now; `unix_of` dates an instant
    /// on the wall clock.
    pub fn scan(
        &mut self,
        now: Instant,
        needs: &[Need],
        unix_of: impl Fn(Instant) -> u64,
    ) -> Vec<Notice> {
        self.scans += 1;
        let scan = self.scans;
        for need in needs {
            for (r, rule) in self.rules.iter().enumerate() {
                if !rule.matches(need) {
                    continue;
                }
                let keep_words = rule.include_text || self.planted.text_leaks;
                if !self.tracked.contains_key(need.id.as_str()) {
                    self.tracked.insert(need.id.clone(), BTreeMap::new());
                }
                let Some(by_rule) = self.tracked.get_mut(need.id.as_str()) else {
                    continue;
                };
                let t = by_rule.entry(r).or_insert_with(|| Tracked {
                    need: need.clone(),
                    since: now,
                    holds: false,
                    seen_in: 0,
                    raised: false,
                    last_sent: None,
                    seq: 0,
                    limited: false,
                });
                if !t.holds {
                    // New, or back after it cleared: a new stretch.
                    t.since = need.since.min(now);
                    t.seq = 0;
                }
                t.holds = true;
                t.seen_in = scan;
                // Words no notice of this rule may carry are not kept either.
                let same = (keep_words || need.text.is_none()) && t.need == *need;
                if !same {
                    t.need = need.clone();
                    if !keep_words {
                        t.need.text = None;
                    }
                }
            }
        }
        for t in self.tracked.values_mut().flat_map(BTreeMap::values_mut) {
            t.holds = t.seen_in == scan;
        }
        // New raises before reminders, the oldest first: a spent budget delays the newest
        // news last. Only what may be due now is looked at again.
        let mut keys: Vec<(bool, Instant, (usize, String))> = Vec::new();
        for (id, by_rule) in &self.tracked {
            for (r, t) in by_rule {
                if self.due(now, *r, t).is_some() {
                    keys.push((t.raised, t.since, (*r, id.clone())));
                }
            }
        }
        keys.sort();
        let mut out = Vec::new();
        for (_, _, key) in keys {
            if let Some(mut n) = self.step(now, &key) {
                n.opened_unix_ms = self.get(&key).map_or(0, |t| unix_of(t.since));
                out.push(n);
            }
        }
        let rules = &self.rules;
        self.tracked.retain(|_, by_rule| {
            by_rule.retain(|r, t| {
                let quiet = Duration::from_millis(rules[*r].quiet_ms);
                t.holds || t.raised || t.last_sent.is_some_and(|at| now < at + quiet)
            });
            !by_rule.is_empty()
        });
        self.sent.retain(|(r, _), sent| {
            let window = Duration::from_millis(rules[*r].window_ms);
            sent.back().is_some_and(|at| now < *at + window)
        });
        out
    }

    fn get(&self, key: &(usize, String)) -> Option<&Tracked> {
        self.tracked.get(&key.1)?.get(&key.0)
    }

    fn get_mut(&mut self, key: &(usize, String)) -> Option<&mut Tracked> {
        self.tracked.get_mut(&key.1)?.get_mut(&key.0)
    }

    /// The phase of the notice `t` is due under rule `r`, budget aside.
    fn due(&self, now: Instant, r: usize, t: &Tracked) -> Option<NoticePhase> {
        let rule = &self.rules[r];
        let grace = match self.planted.grace_ignored {
            true => Duration::ZERO,
            false => Duration::from_millis(rule.grace_ms),
        };
        let quiet = Duration::from_millis(rule.quiet_ms);
        let quiet_over =
            self.planted.quiet_ignored || t.last_sent.is_none_or(|at| now >= at + quiet);
        match (t.holds, t.raised) {
            (false, true) => Some(NoticePhase::Resolved),
            (false, false) => None,
            (true, false) if now >= t.since + grace && quiet_over => Some(NoticePhase::Raised),
            (true, true) if quiet_over => Some(NoticePhase::Reminder),
            (true, _) => None,
        }
    }

    /// The notice one tracked need is due, if any.
    fn step(&mut self, now: Instant, key: &(usize, String)) -> Option<Notice> {
        let t = self.get(key)?;
        let phase = self.due(now, key.0, t)?;
        let target = t.need.waits_on.clone();
        if phase != NoticePhase::Resolved && !self.budget(now, key.0, &target) {
            if let Some(t) = self.get_mut(key) {
                if !t.limited {
                    t.limited = true;
                    self.stats.limited += 1;
                }
            }
            return None;
        }
        let rule_name = self.rules[key.0].name.clone();
        let resolve_kept_open = self.planted.resolve_kept_open;
        let t = self.get_mut(key)?;
        t.limited = false;
        t.seq += 1;
        match phase {
            NoticePhase::Resolved => t.raised = resolve_kept_open,
            _ => {
                t.raised = true;
                t.last_sent = Some(now);
            }
        }
        // Words this rule may not send were never kept (`scan`).
        Some(Notice {
            rule: rule_name,
            phase,
            need: t.need.clone(),
            seq: t.seq,
            opened_unix_ms: 0,
        })
    }

    /// Whether rule `r` may send one more raise or reminder to `target` at `now` (and, if
    /// so, counts it).
    fn budget(&mut self, now: Instant, r: usize, target: &Option<SessionId>) -> bool {
        let rule = &self.rules[r];
        let window = Duration::from_millis(rule.window_ms);
        let sent = self.sent.entry((r, target.clone())).or_default();
        while sent.front().is_some_and(|at| *at + window <= now) {
            sent.pop_front();
        }
        if sent.len() >= rule.max_per_window as usize {
            return false;
        }
        sent.push_back(now);
        true
    }
}

#[cfg(test)]
mod tests;
