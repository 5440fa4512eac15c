//! Fleet health (ch. 9 `health.FleetHealth`): one state per member, decided by a pure
//! classifier from evidence the gateway already has — the status herdr reports, the turn the
//! injector is running, how the last turns ended, replies nobody will collect, delegations
//! whose lead is gone, the broker link — plus a bounded read of the member's screen.
//!
//! The classifier ([`classify`]) is a function: evidence and the prior verdict in, a verdict
//! with every reason that held out. The gateway's [`Monitor`] keeps what the classifier
//! needs between rounds (the screen's last change, the turn boundaries, the [`MuteCounter`])
//! and the members that went, as tombstones, for a while.

use crate::ids::SessionId;
use crate::status::AgentStatus;
use crate::time::{Duration, Instant};
use regex::RegexSet;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A member's health. Each state names what an operator should know first; the order of
/// [`Health::ALL`] is the classifier's precedence (the first that holds wins).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Health {
    /// Its pane closed or its process exited after it was ready.
    Gone,
    /// It never passed its readiness gate: past the bound, or its pane went before.
    NeverReady,
    /// Started, readiness gate not passed yet.
    Starting,
    /// Its agent says it waits on a person: a permission prompt, a question of its own. (The
    /// agent's own word outranks what its screen shows.)
    WaitingOnPerson,
    /// Its agent says its provider refused on a usage or rate limit (retrying, or its last
    /// turn ended so).
    UsageLimited,
    /// Its agent says its provider failed.
    ProviderError,
    /// Not working, and its screen shows a fatal line (its profile's patterns).
    ErrorOnScreen,
    /// This gateway's broker link is down: nothing of it reaches other hosts.
    ControlLinkDown,
    /// A delegation is open on it whose lead is in no roster any more.
    DelegationOrphaned,
    /// A reply of its is held with no lead to collect it.
    ReplyStranded,
    /// In a turn, and UNKNOWN, or WORKING with a screen that has not changed for the bound.
    StallSuspected,
    /// BLOCKED with no `fleet_ask` open (a prompt fleetd did not make), or UNKNOWN outside
    /// a turn: it waits on something nobody here can see.
    BlockedAmbiguous,
    /// herdr says it is working.
    Working,
    /// Work is queued for it and not typed yet.
    WorkPending,
    /// Its last turn's end was inferred (a missed fast turn or a stall), not seen.
    TurnBoundaryLost,
    /// Its last turns ended without a `fleet_reply` (the completion fallback took them).
    Mute,
    /// Ready and at rest.
    Idle,
}

impl Health {
    /// Every state, in precedence order.
    pub const ALL: [Health; 17] = [
        Health::Gone,
        Health::NeverReady,
        Health::Starting,
        Health::WaitingOnPerson,
        Health::UsageLimited,
        Health::ProviderError,
        Health::ErrorOnScreen,
        Health::ControlLinkDown,
        Health::DelegationOrphaned,
        Health::ReplyStranded,
        Health::StallSuspected,
        Health::BlockedAmbiguous,
        Health::Working,
        Health::WorkPending,
        Health::TurnBoundaryLost,
        Health::Mute,
        Health::Idle,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Health::Gone => "GONE",
            Health::NeverReady => "NEVER_READY",
            Health::Starting => "STARTING",
            Health::ErrorOnScreen => "ERROR_ON_SCREEN",
            Health::WaitingOnPerson => "WAITING_ON_PERSON",
            Health::UsageLimited => "USAGE_LIMITED",
            Health::ProviderError => "PROVIDER_ERROR",
            Health::ControlLinkDown => "CONTROL_LINK_DOWN",
            Health::DelegationOrphaned => "DELEGATION_ORPHANED",
            Health::ReplyStranded => "REPLY_STRANDED",
            Health::StallSuspected => "STALL_SUSPECTED",
            Health::BlockedAmbiguous => "BLOCKED_AMBIGUOUS",
            Health::Working => "WORKING",
            Health::WorkPending => "WORK_PENDING",
            Health::TurnBoundaryLost => "TURN_BOUNDARY_LOST",
            Health::Mute => "MUTE",
            Health::Idle => "IDLE",
        }
    }

    /// Reads a peer's value; one this build does not know is none (never an error that
    /// would cost the peer its whole snapshot).
    pub fn lenient<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Health>, D::Error> {
        let raw = Option::<serde_json::Value>::deserialize(d)?;
        Ok(raw.and_then(|v| serde_json::from_value(v).ok()))
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The health knobs (`[health]` in the daemon's config).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthConfig {
    /// How often every member is probed (its status and the end of its screen). Slower than
    /// delivery polling on purpose: health is for people, not for typing.
    pub interval_ms: u64,
    /// A WORKING member in a turn whose screen has not changed for this long is suspected
    /// stalled.
    pub stall_suspect_ms: u64,
    /// Consecutive turns ended by the completion fallback before a member is MUTE.
    pub mute_after_turns: u32,
    /// How long a member that went stays visible (as GONE or NEVER_READY).
    pub tombstone_ms: u64,
    /// Regexes over the last lines of a member's screen that mean it cannot go on, for every
    /// profile; a profile adds its own (`fatal_patterns`).
    pub fatal_patterns: Vec<String>,
    /// Per profile: its own fatal patterns (filled from `[profiles.<name>] fatal_patterns`).
    #[serde(skip)]
    pub profile_fatal_patterns: BTreeMap<String, Vec<String>>,
}

/// How many trailing non-blank lines of a screen the fatal patterns are matched against.
pub const FATAL_TAIL_LINES: usize = 15;
/// The longest fatal line kept in a reason (characters).
pub const REASON_LINE_CHARS: usize = 200;
/// Tombstones kept at most, oldest dropped first.
pub const MAX_TOMBSTONES: usize = 1_024;

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            interval_ms: 15_000,
            stall_suspect_ms: 10 * 60_000,
            mute_after_turns: 2,
            tombstone_ms: 10 * 60_000,
            fatal_patterns: vec![
                r"(?i)\bAPI Error: ?\d{3}\b".into(),
                r"(?i)\binvalid api key\b".into(),
                r"(?i)\bauthentication_error\b".into(),
                r"(?i)please run /login".into(),
                r"(?i)credit balance is too low".into(),
                r"(?i)unable to connect to (the )?(anthropic )?api".into(),
                r"(?i)usage limit (reached|exceeded)".into(),
                r"(?i)you('ve| have) (hit|reached) your (usage )?limit".into(),
                // Claude Code 2.1: a rejected key retries for minutes, then says so.
                r"(?i)\b401 invalid x-api-key\b".into(),
                r"(?i)not logged in · run /login".into(),
                r"(?i)invalid api key · fix external api key".into(),
                r"(?i)reached your specified API usage limits?".into(),
            ],
            profile_fatal_patterns: BTreeMap::new(),
        }
    }
}

/// The fatal patterns, compiled once: per profile one set of everyone's patterns and its own,
/// so a line is read once however many patterns there are.
#[derive(Clone, Debug, Default)]
pub struct FatalPatterns {
    all: Option<Arc<RegexSet>>,
    by_profile: BTreeMap<String, Arc<RegexSet>>,
}

impl FatalPatterns {
    pub fn compile(cfg: &HealthConfig) -> Result<FatalPatterns, crate::ConfigError> {
        let set = |key: &'static str, ps: &[String]| -> Result<Arc<RegexSet>, crate::ConfigError> {
            let bad = |index, e: regex::Error| crate::ConfigError::BadPattern {
                key,
                index,
                reason: e.to_string(),
            };
            for (index, p) in ps.iter().enumerate() {
                crate::patterns::regex(p).map_err(|e| bad(index, e))?;
            }
            crate::patterns::set(ps).map_err(|e| bad(0, e))
        };
        let mut by_profile = BTreeMap::new();
        for (profile, ps) in &cfg.profile_fatal_patterns {
            set("profiles.*.fatal_patterns", ps)?;
            let both: Vec<String> = cfg.fatal_patterns.iter().chain(ps).cloned().collect();
            by_profile.insert(profile.clone(), set("profiles.*.fatal_patterns", &both)?);
        }
        Ok(FatalPatterns {
            all: Some(set("health.fatal_patterns", &cfg.fatal_patterns)?),
            by_profile,
        })
    }

    /// The first fatal line in the last lines of `screen`, control characters stripped and
    /// bounded, for `profile`'s patterns and everyone's.
    pub fn find(&self, profile: Option<&str>, screen: &str) -> Option<String> {
        let own = profile.and_then(|p| self.by_profile.get(p));
        let set = own.or(self.all.as_ref()).filter(|s| !s.is_empty())?;
        let mut tail = [""; FATAL_TAIL_LINES];
        let mut n = 0;
        for l in screen.lines().rev().filter(|l| !l.trim().is_empty()) {
            if n == FATAL_TAIL_LINES {
                break;
            }
            tail[n] = l;
            n += 1;
        }
        tail[..n].iter().rev().find_map(|l| {
            let clean = clean_line_cow(l);
            set.is_match(&clean).then(|| clean.into_owned())
        })
    }
}

/// [`clean_line`], borrowing a line that needs no cleaning (most do not).
fn clean_line_cow(line: &str) -> std::borrow::Cow<'_, str> {
    let plain = line.len() <= REASON_LINE_CHARS && !line.chars().any(char::is_control);
    if plain {
        std::borrow::Cow::Borrowed(line.trim())
    } else {
        std::borrow::Cow::Owned(clean_line(line))
    }
}

/// A line fit for a log and a roster row: no control characters, at most
/// [`REASON_LINE_CHARS`] characters.
pub fn clean_line(line: &str) -> String {
    let mut out = String::new();
    let mut kept = 0;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // An escape sequence: CSI (`ESC [` … final byte) or a two-byte escape.
            if chars.next_if_eq(&'[').is_some() {
                while chars
                    .next()
                    .is_some_and(|c| !('\u{40}'..='\u{7e}').contains(&c))
                {}
            } else {
                chars.next();
            }
            continue;
        }
        if c.is_control() {
            continue;
        }
        out.push(c);
        kept += 1;
        if kept >= REASON_LINE_CHARS {
            break;
        }
    }
    out.trim().to_string()
}

/// Where a member stands with its readiness gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    Open,
    /// Not yet, for `waited` of `bound`.
    Closed {
        waited: Duration,
        bound: Duration,
    },
}

/// What the gateway knows of one member at one probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evidence {
    pub gate: Gate,
    /// Its status in this probe, refined as the injector would.
    pub status: AgentStatus,
    /// A turn is running in it (typed, not yet ended).
    pub in_turn: bool,
    /// Messages waiting to be typed into it.
    pub queued: usize,
    /// It is inside `fleet_ask`.
    pub asking: bool,
    /// The fatal line its screen ends with, if any.
    pub fatal_line: Option<String>,
    /// How long its screen has read the same.
    pub screen_still_for: Duration,
    /// Its last turn ended on an inferred boundary.
    pub boundary_lost: bool,
    /// Consecutive turns ended by the completion fallback.
    pub mute_turns: u32,
    /// Replies of its held with no lead.
    pub stranded: usize,
    /// Delegations open on it whose lead is in no roster.
    pub orphaned: usize,
    /// The broker link (always up on a single-host gateway).
    pub link_up: bool,
    /// What its agent said stands in its way (`agent_report`), in its words.
    pub reported: Option<crate::agent_report::Trouble>,
}

/// One state that held, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub state: Health,
    pub why: String,
}

/// The classifier's decision: the state shown (the first finding) and every finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub state: Health,
    /// Since when it has been in `state` (its gateway's monotonic clock).
    #[serde(skip)]
    pub since: Option<Instant>,
    pub reasons: Vec<Finding>,
}

impl Verdict {
    /// The reason of the state shown.
    pub fn reason(&self) -> &str {
        self.reasons.first().map_or("", |f| f.why.as_str())
    }
}

/// The thresholds the classifier reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    pub stall_suspect: Duration,
    pub mute_after_turns: u32,
}

impl From<&HealthConfig> for Thresholds {
    fn from(c: &HealthConfig) -> Self {
        Thresholds {
            stall_suspect: Duration::from_millis(c.stall_suspect_ms),
            mute_after_turns: c.mute_after_turns,
        }
    }
}

/// What the readiness gate says, if it is still shut.
fn gate_finding(gate: Gate) -> Option<Finding> {
    let (state, why) = match gate {
        Gate::Closed { waited, bound } if waited >= bound => (
            Health::NeverReady,
            format!(
                "not ready after {} ms (bound {} ms)",
                waited.as_millis(),
                bound.as_millis()
            ),
        ),
        Gate::Closed { waited, .. } => (
            Health::Starting,
            format!(
                "waiting for it to connect, {} ms so far",
                waited.as_millis()
            ),
        ),
        Gate::Open => return None,
    };
    Some(Finding { state, why })
}

/// Every state the evidence supports, besides `Idle`.
fn findings(e: &Evidence, t: Thresholds) -> Vec<Finding> {
    let mut found: Vec<Finding> = gate_finding(e.gate).into_iter().collect();
    let mut hold = |state: Health, why: String| found.push(Finding { state, why });
    if let Some(line) = e
        .fatal_line
        .as_ref()
        .filter(|_| e.status != AgentStatus::Working)
    {
        hold(Health::ErrorOnScreen, format!("its screen says: {line}"));
    }
    if let Some((state, why)) = e
        .reported
        .as_ref()
        .map(crate::agent_report::Trouble::health)
    {
        hold(state, why);
    }
    if !e.link_up {
        hold(
            Health::ControlLinkDown,
            "this gateway's broker link is down".into(),
        );
    }
    if e.orphaned > 0 {
        hold(
            Health::DelegationOrphaned,
            format!("{} delegation(s) on it whose lead is gone", e.orphaned),
        );
    }
    if e.stranded > 0 {
        hold(
            Health::ReplyStranded,
            format!("{} reply(ies) held with no lead to collect", e.stranded),
        );
    }
    if e.in_turn && !e.asking {
        if e.status == AgentStatus::Unknown {
            hold(
                Health::StallSuspected,
                "in a turn and herdr cannot tell its state".into(),
            );
        } else if e.status == AgentStatus::Working && e.screen_still_for >= t.stall_suspect {
            hold(
                Health::StallSuspected,
                format!(
                    "working with an unchanged screen for {} ms",
                    e.screen_still_for.as_millis()
                ),
            );
        }
    }
    if e.status == AgentStatus::Blocked && !e.asking {
        hold(
            Health::BlockedAmbiguous,
            "blocked on a prompt that is not a fleet_ask".into(),
        );
    } else if e.status == AgentStatus::Unknown && !e.in_turn {
        hold(
            Health::BlockedAmbiguous,
            "herdr cannot tell its state and no turn is running".into(),
        );
    }
    if e.status == AgentStatus::Working {
        hold(Health::Working, "herdr says it is working".into());
    }
    if e.queued > 0 && !e.in_turn {
        hold(
            Health::WorkPending,
            format!("{} message(s) queued for it", e.queued),
        );
    }
    if e.boundary_lost {
        hold(
            Health::TurnBoundaryLost,
            "its last turn's end was inferred, not seen".into(),
        );
    }
    if e.mute_turns >= t.mute_after_turns {
        hold(
            Health::Mute,
            format!(
                "its last {} turn(s) ended without fleet_reply",
                e.mute_turns
            ),
        );
    }
    found
}

/// Decides a member's health from `e`. Pure: the same evidence and prior give the same
/// verdict; the prior only carries `since` over while the state stays.
pub fn classify(now: Instant, e: &Evidence, t: Thresholds, prior: Option<&Verdict>) -> Verdict {
    let mut found = findings(e, t);
    found.push(Finding {
        state: Health::Idle,
        why: "ready".into(),
    });
    // Precedence is `Health::ALL`'s order; findings were pushed in it, bar the gate's.
    found.sort_by_key(|f| Health::ALL.iter().position(|h| *h == f.state));
    let state = found.first().map_or(Health::Idle, |f| f.state);
    if found.len() > 1 {
        found.retain(|f| f.state != Health::Idle);
    }
    let since = match prior {
        Some(p) if p.state == state => p.since.or(Some(now)),
        _ => Some(now),
    };
    Verdict {
        state,
        since,
        reasons: found,
    }
}

/// Turns ended by the completion fallback instead of a `fleet_reply`: consecutive per member,
/// and in all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MuteCounter {
    pub streak: u32,
}

impl MuteCounter {
    /// A turn ended by the fallback.
    pub fn mute_turn(&mut self) {
        self.streak = self.streak.saturating_add(1);
    }

    /// It called `fleet_reply`.
    pub fn replied(&mut self) {
        self.streak = 0;
    }
}

/// A member that went, kept for a while so an operator can see why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    pub state: Health,
    pub reason: String,
    #[serde(skip)]
    pub at: Instant,
}

/// What the monitor keeps of one member between probes.
#[derive(Clone, Debug, Default)]
struct Watch {
    verdict: Option<Verdict>,
    /// The screen's hash, since when it has read so, and its fatal line (read once per
    /// screen: most probes see the screen they saw before).
    screen: Option<(u64, Instant, Option<String>)>,
    boundary_lost: bool,
    mute: MuteCounter,
    /// When it started (its pane was reported), for the readiness gate's wait.
    started: Option<Instant>,
    /// Why it is failing, when that is known before its pane goes (a failed start's exit
    /// status and last screen lines): its tombstone says so.
    last_words: Option<String>,
    /// The turn whose screen showed a usage limit at the last probe.
    limit_in: Option<crate::ids::MsgId>,
}

/// A change of state, for the log and the presence delta.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub from: Option<Health>,
    pub to: Health,
    pub reason: String,
}

/// `FleetHealthMonitor`: the classifier's memory for the members served here.
#[derive(Clone, Debug)]
pub struct Monitor {
    thresholds: Thresholds,
    tombstone_for: Duration,
    fatal: FatalPatterns,
    watches: BTreeMap<SessionId, Watch>,
    tombstones: BTreeMap<SessionId, Tombstone>,
    /// Tombstones in the order they were made, for expiry and the cap.
    graves: VecDeque<(Instant, SessionId)>,
    /// Turns ended by the completion fallback, in all (`fleet_mute_turns_total`).
    pub mute_turns_total: u64,
}

impl Monitor {
    pub fn new(cfg: &HealthConfig, fatal: FatalPatterns) -> Monitor {
        Monitor {
            thresholds: Thresholds::from(cfg),
            tombstone_for: Duration::from_millis(cfg.tombstone_ms),
            fatal,
            watches: BTreeMap::new(),
            tombstones: BTreeMap::new(),
            graves: VecDeque::new(),
            mute_turns_total: 0,
        }
    }

    /// Member `gid` started now (a fresh pane, or one found at start): a tombstone of an
    /// earlier one with its gid is gone.
    pub fn started(&mut self, now: Instant, gid: &SessionId) {
        self.tombstones.remove(gid);
        self.watches.entry(gid.clone()).or_default().started = Some(now);
    }

    /// How long `gid` has waited for its readiness gate.
    pub fn waited(&self, now: Instant, gid: &SessionId) -> Duration {
        self.watches
            .get(gid)
            .and_then(|w| w.started)
            .map_or(Duration::ZERO, |at| now.saturating_since(at))
    }

    /// Why `gid` is failing, for its tombstone when its pane goes.
    pub fn last_words(&mut self, gid: &SessionId, why: String) {
        self.watches.entry(gid.clone()).or_default().last_words = Some(why);
    }

    /// What `gid`'s screen says: its fatal line for `profile`, and how long it has read as it
    /// does now (zero for a change). An unchanged screen is not read again.
    pub fn read_screen(
        &mut self,
        now: Instant,
        gid: &SessionId,
        profile: Option<&str>,
        screen: &str,
    ) -> (Option<String>, Duration) {
        let mut h = rustc_hash::FxHasher::default();
        profile.hash(&mut h);
        screen.hash(&mut h);
        let hash = h.finish();
        let w = self.watches.entry(gid.clone()).or_default();
        match &w.screen {
            Some((old, since, fatal)) if *old == hash => {
                (fatal.clone(), now.saturating_since(*since))
            }
            _ => {
                let fatal = self.fatal.find(profile, screen);
                w.screen = Some((hash, now, fatal.clone()));
                (fatal, Duration::ZERO)
            }
        }
    }

    /// Whether turn `msg` of `gid` showed a usage limit at this probe (`shown`) and at the one
    /// before: a limit an agent recovers from between two probes (a rate limit it retries
    /// through) is not taken as the credential spent.
    pub fn limit_persists(&mut self, gid: &SessionId, msg: crate::ids::MsgId, shown: bool) -> bool {
        let w = self.watches.entry(gid.clone()).or_default();
        let before = w.limit_in == Some(msg);
        w.limit_in = shown.then_some(msg);
        shown && before
    }

    /// A turn of `gid` ended: on a boundary seen, or one inferred.
    pub fn turn_ended(&mut self, gid: &SessionId, inferred: bool) {
        self.watches.entry(gid.clone()).or_default().boundary_lost = inferred;
    }

    /// A turn of `gid` was ended by the completion fallback; `member`: it is a member
    /// watched here (a pane typed into without being one is only counted).
    pub fn mute_turn(&mut self, gid: &SessionId, member: bool) {
        self.mute_turns_total += 1;
        if member {
            self.watches
                .entry(gid.clone())
                .or_default()
                .mute
                .mute_turn();
        }
    }

    /// `gid` called `fleet_reply`.
    pub fn replied(&mut self, gid: &SessionId) {
        if let Some(w) = self.watches.get_mut(gid) {
            w.mute.replied();
        }
    }

    pub fn boundary_lost(&self, gid: &SessionId) -> bool {
        self.watches.get(gid).is_some_and(|w| w.boundary_lost)
    }

    pub fn mute_streak(&self, gid: &SessionId) -> u32 {
        self.watches.get(gid).map_or(0, |w| w.mute.streak)
    }

    /// Classifies `gid` from `e`; the change, if its state changed.
    pub fn judge(&mut self, now: Instant, gid: &SessionId, e: &Evidence) -> Option<Change> {
        let w = self.watches.entry(gid.clone()).or_default();
        let v = classify(now, e, self.thresholds, w.verdict.as_ref());
        let from = w.verdict.as_ref().map(|p| p.state);
        let change = (from != Some(v.state)).then(|| Change {
            from,
            to: v.state,
            reason: v.reason().to_string(),
        });
        w.verdict = Some(v);
        change
    }

    /// Puts a verdict in place as it is (a planted misclassification, in test builds).
    pub fn overrule(&mut self, gid: &SessionId, v: Verdict) {
        self.watches.entry(gid.clone()).or_default().verdict = Some(v);
    }

    pub fn verdict(&self, gid: &SessionId) -> Option<&Verdict> {
        self.watches.get(gid).and_then(|w| w.verdict.as_ref())
    }

    /// `gid` went: it is kept as a tombstone (GONE, or NEVER_READY if it never became ready).
    pub fn went(
        &mut self,
        now: Instant,
        gid: &SessionId,
        ever_ready: bool,
        reason: String,
    ) -> Change {
        let w = self.watches.remove(gid).unwrap_or_default();
        let from = w.verdict.map(|v| v.state);
        let reason = w.last_words.unwrap_or(reason);
        let state = if ever_ready {
            Health::Gone
        } else {
            Health::NeverReady
        };
        self.bury(now, gid, state, reason.clone());
        Change {
            from,
            to: state,
            reason,
        }
    }

    fn bury(&mut self, now: Instant, gid: &SessionId, state: Health, reason: String) {
        self.tombstones.insert(
            gid.clone(),
            Tombstone {
                state,
                reason,
                at: now,
            },
        );
        self.graves.push_back((now, gid.clone()));
        while self.graves.len() > MAX_TOMBSTONES {
            self.drop_oldest();
        }
    }

    fn drop_oldest(&mut self) {
        if let Some((at, gid)) = self.graves.pop_front() {
            if self.tombstones.get(&gid).is_some_and(|t| t.at == at) {
                self.tombstones.remove(&gid);
            }
        }
    }

    /// Forgets tombstones older than the bound.
    pub fn expire(&mut self, now: Instant) {
        while let Some((at, _)) = self.graves.front() {
            if now.saturating_since(*at) < self.tombstone_for {
                break;
            }
            self.drop_oldest();
        }
    }

    pub fn has_tombstones(&self) -> bool {
        !self.tombstones.is_empty()
    }

    pub fn tombstone(&self, gid: &SessionId) -> Option<&Tombstone> {
        self.tombstones.get(gid)
    }

    /// Each member's state now and since when, the tombstones' included, in gid order (a
    /// member both watched and gone reads as watched).
    pub fn states(&self) -> Vec<(&SessionId, Health, Option<Instant>, &str)> {
        let live = self.watches.iter().filter_map(|(g, w)| {
            w.verdict
                .as_ref()
                .map(|v| (g, v.state, v.since, v.reason()))
        });
        let gone = self
            .tombstones
            .iter()
            .filter(|(g, _)| !self.watches.contains_key(*g))
            .map(|(g, t)| (g, t.state, Some(t.at), t.reason.as_str()));
        let mut all: Vec<_> = live.chain(gone).collect();
        all.sort_by(|a, b| a.0.cmp(b.0));
        all
    }

    /// The members watched, in gid order (the gateway checks each is one it serves).
    pub fn watched(&self) -> impl Iterator<Item = &SessionId> {
        self.watches.keys()
    }

    /// Members by state, the tombstones' included (`fleet_member_health{state}`); every state
    /// is present, zero or not.
    pub fn counts(&self) -> BTreeMap<Health, usize> {
        let mut c: BTreeMap<Health, usize> = Health::ALL.iter().map(|h| (*h, 0)).collect();
        let live = self.watches.values().filter_map(|w| w.verdict.as_ref());
        for state in live
            .map(|v| v.state)
            .chain(self.tombstones.values().map(|t| t.state))
        {
            *c.entry(state).or_default() += 1;
        }
        c
    }
}

#[cfg(test)]
mod tests;
