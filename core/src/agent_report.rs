//! What an agent says about itself: the report its hooks, notify program or plugin post to its
//! own gateway (fleetd installs them in the member's prepared config), and `Reports`, which
//! decides which typed brief a report speaks for.
//!
//! An agent's own word on its turn outranks its screen (docs/delivery.md, "Reports"): a turn
//! ends when its agent says so, with the agent's own final text. A report is believed only in
//! order (each carries the reporter's sequence number: a late, repeated or reordered one is
//! old news) and only for the brief fleetd typed (the prompt it names is that brief's text, or
//! the agent said it took that brief): a person typing in the pane, or a report from an
//! earlier turn, ends nothing.

use crate::ids::{MsgId, SessionId};
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most a report's `session` may hold: an agent's session ids are UUIDs or short names.
pub const SESSION_MAX: usize = 128;
/// The most a report's `words` (a prompt's or an error's) may hold.
pub const WORDS_MAX: usize = 4096;

/// One report, as a member posts it (`POST /sessions/{gid}/report`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentReport {
    /// The reporter's own count, rising with every report of this member: a report at or
    /// below one already heard is old news.
    pub seq: u64,
    /// The agent's native session id (Claude Code's `session_id`, Codex's `thread-id`), when
    /// the report carries one: what resuming its conversation needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(flatten)]
    pub event: AgentEvent,
}

/// What happened, in the agent's words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AgentEvent {
    /// Its session is up and takes input.
    Ready,
    /// It took `prompt`: a turn begins.
    TurnStarted { prompt: String },
    /// Its turn ended; `text` is its final message. `prompt` is the turn's prompt when the
    /// agent can tell it (absent, the turn must have been reported started).
    TurnEnded {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt: Option<String>,
        #[serde(default)]
        text: String,
    },
    /// Its turn ended on its provider's refusal: a usage or rate limit (`limit`), or another
    /// error, in `words`.
    TurnFailed {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt: Option<String>,
        #[serde(default)]
        limit: bool,
        #[serde(default)]
        words: String,
    },
    /// It waits on a person (a permission prompt, a question of its own), in `words`.
    Waiting {
        #[serde(default)]
        words: String,
    },
    /// Its provider refused and it retries (a usage or rate limit when `limit`): its turn goes
    /// on, busy, until it ends or fails.
    ProviderError {
        #[serde(default)]
        limit: bool,
        #[serde(default)]
        words: String,
    },
}

/// What an agent said stands in its way, until its next turn: its health shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trouble {
    /// It waits on a person (a permission prompt, an elicitation).
    WaitingOnPerson(String),
    /// Its provider refused on a usage or rate limit (retrying, or its last turn ended so).
    UsageLimited(String),
    /// Its provider failed otherwise.
    ProviderError(String),
}

impl AgentEvent {
    /// The event's name, for traces.
    pub fn name(&self) -> &'static str {
        match self {
            AgentEvent::Ready => "ready",
            AgentEvent::TurnStarted { .. } => "turn_started",
            AgentEvent::TurnEnded { .. } => "turn_ended",
            AgentEvent::TurnFailed { .. } => "turn_failed",
            AgentEvent::Waiting { .. } => "waiting",
            AgentEvent::ProviderError { .. } => "provider_error",
        }
    }
}

impl AgentReport {
    /// The size of the text it carries (a turn's final text, a prompt), for the body bound.
    pub fn content_len(&self) -> usize {
        match &self.event {
            AgentEvent::Ready => 0,
            AgentEvent::TurnStarted { prompt } => prompt.len(),
            AgentEvent::TurnEnded { prompt, text } => {
                text.len() + prompt.as_ref().map_or(0, String::len)
            }
            AgentEvent::TurnFailed { prompt, words, .. } => {
                words.len() + prompt.as_ref().map_or(0, String::len)
            }
            AgentEvent::Waiting { words } | AgentEvent::ProviderError { words, .. } => words.len(),
        }
    }

    /// Why this report cannot be taken, if it cannot: a member may have been talked into
    /// sending anything.
    pub fn refused(&self) -> Option<String> {
        if self.seq == 0 {
            return Some("seq starts at 1".into());
        }
        if let Some(s) = &self.session {
            if s.is_empty() || s.len() > SESSION_MAX || s.chars().any(char::is_control) {
                return Some(format!(
                    "session must be 1-{SESSION_MAX} bytes without control characters"
                ));
            }
        }
        let words = match &self.event {
            AgentEvent::TurnFailed { words, .. }
            | AgentEvent::Waiting { words }
            | AgentEvent::ProviderError { words, .. } => words.len(),
            _ => 0,
        };
        (words > WORDS_MAX).then(|| format!("words hold at most {WORDS_MAX} bytes"))
    }
}

/// A brief's text reduced to what survives typing: every run of whitespace goes (a pane's
/// paste turns newlines and tabs as it likes), then FNV-1a. Equal briefs typed twice digest
/// alike; the reports' order tells them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digest(u64);

impl Digest {
    pub fn of(text: &str) -> Digest {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in text.chars().filter(|c| !c.is_whitespace()).flat_map(|c| {
            let mut buf = [0u8; 4];
            let n = c.encode_utf8(&mut buf).len();
            buf.into_iter().take(n)
        }) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        Digest(h)
    }
}

impl Trouble {
    /// The health state it is, and why, in the agent's words.
    pub fn health(&self) -> (crate::health::Health, String) {
        use crate::health::Health;
        match self {
            Trouble::WaitingOnPerson(w) => (
                Health::WaitingOnPerson,
                format!("its agent waits on a person: {w}"),
            ),
            Trouble::UsageLimited(w) => (
                Health::UsageLimited,
                format!("its agent's provider refused on a limit: {w}"),
            ),
            Trouble::ProviderError(w) => (
                Health::ProviderError,
                format!("its agent's provider failed: {w}"),
            ),
        }
    }
}

/// Which brief a report speaks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// At or below a sequence number already heard: a late, repeated or reordered report.
    Stale,
    /// For a prompt fleetd did not type (a person typed in the pane), or before any brief.
    Foreign,
    /// The agent took brief `msg`.
    Started(MsgId),
    /// The agent ended brief `msg`'s turn with `text`.
    Ended { msg: MsgId, text: String },
    /// The agent's turn on brief `msg` ended on a provider's refusal.
    Failed {
        msg: MsgId,
        limit: bool,
        words: String,
    },
    /// Taken, and nothing ends: ready, waiting, or a second end of one brief.
    Noted,
}

impl Verdict {
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Stale => "stale",
            Verdict::Foreign => "foreign",
            Verdict::Started(_) => "started",
            Verdict::Ended { .. } => "ended",
            Verdict::Failed { .. } => "failed",
            Verdict::Noted => "noted",
        }
    }
}

/// How a reported turn end was kept for the turn fleetd typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    Text(String),
    Failed { limit: bool, words: String },
}

#[derive(Clone, Debug, Default)]
struct Track {
    /// Launched with its reports installed, or heard from: its turn ends wait for them.
    reporting: bool,
    /// The highest sequence number heard.
    seq: u64,
    /// The agent's native session id, as it last said.
    session: Option<String>,
    /// The last brief typed into it, and its digest.
    typed: Option<(MsgId, Digest)>,
    /// The agent said it took that brief.
    started: bool,
    /// What it said at that brief's end, once it has.
    ended: Option<Ending>,
    /// What it said stands in its way, until its next turn.
    trouble: Option<Trouble>,
    /// It said its provider refused and it retries (since then): its turn goes on, whatever
    /// its screen shows, until it says the turn ended or failed — or `RETRY_BELIEVED` passed.
    retrying: Option<Instant>,
}

/// How long an agent's word that it retries its provider keeps its turn running with no word
/// since (Claude Code retries a 429 for ≈ 3 min): past it, its screen decides again.
pub const RETRY_BELIEVED: crate::time::Duration = crate::time::Duration::from_millis(300_000);

/// The members that report their own turns, and what each has said.
#[derive(Debug, Default)]
pub struct Reports {
    members: BTreeMap<SessionId, Track>,
    /// Turn ends seen on a screen, each waiting for its report until then (few at a time:
    /// kept apart so the per-step check walks only them).
    waits: BTreeMap<SessionId, (MsgId, Instant)>,
    /// Planted bug `stale-report-believed`: order and prompt are not checked.
    believe_any: bool,
}

impl Reports {
    pub fn planted(mut self, believe_any: bool) -> Self {
        self.believe_any = believe_any;
        self
    }

    /// `gid` was launched with its reports installed: its turn ends wait for them.
    pub fn launched(&mut self, gid: &SessionId) {
        self.members.entry(gid.clone()).or_default().reporting = true;
    }

    /// Whether `gid` reports its turns (launched so, or heard from).
    pub fn reports(&self, gid: &SessionId) -> bool {
        self.members.get(gid).is_some_and(|t| t.reporting)
    }

    pub fn forget(&mut self, gid: &SessionId) {
        self.members.remove(gid);
        self.waits.remove(gid);
    }

    /// The agent's native session id, as it last reported it.
    pub fn session(&self, gid: &SessionId) -> Option<&str> {
        self.members.get(gid)?.session.as_deref()
    }

    /// What the gateway saw stand in `gid`'s way itself (a usage limit on its screen): shown
    /// as the agent's own word would be, until its next turn.
    pub fn seen(&mut self, gid: &SessionId, trouble: Trouble) {
        self.members.entry(gid.clone()).or_default().trouble = Some(trouble);
    }

    /// What `gid`'s agent said stands in its way, since its last turn began.
    pub fn trouble(&self, gid: &SessionId) -> Option<&Trouble> {
        self.members.get(gid)?.trouble.as_ref()
    }

    /// Brief `msg` (`text`) was typed into `gid`: reports from here on speak for it. Kept for
    /// every target, so a member adopted after a restart is matched by its first report.
    pub fn typed(&mut self, gid: &SessionId, msg: MsgId, text: &str) {
        let t = self.members.entry(gid.clone()).or_default();
        t.typed = Some((msg, Digest::of(text)));
        t.started = false;
        t.ended = None;
        t.trouble = None;
        t.retrying = None;
        self.waits.remove(gid);
    }

    /// Whether `gid`'s agent said, within `RETRY_BELIEVED` of `now`, that it retries its
    /// provider within its turn.
    pub fn retrying(&self, gid: &SessionId, now: Instant) -> bool {
        self.members
            .get(gid)
            .and_then(|t| t.retrying)
            .is_some_and(|since| now.saturating_since(since) < RETRY_BELIEVED)
    }

    /// Takes one report from `gid` (already checked with `AgentReport::refused`), heard at
    /// `now`.
    pub fn take(&mut self, now: Instant, gid: &SessionId, report: AgentReport) -> Verdict {
        let believe_any = self.believe_any;
        let t = self.members.entry(gid.clone()).or_default();
        t.reporting = true;
        if report.seq <= t.seq && !believe_any {
            return Verdict::Stale;
        }
        t.seq = t.seq.max(report.seq);
        if report.session.is_some() {
            t.session = report.session;
        }
        let ours = |t: &Track, prompt: Option<&String>| -> Option<MsgId> {
            let (msg, digest) = t.typed?;
            let matches = match prompt {
                Some(p) => Digest::of(p) == digest,
                None => t.started,
            };
            (matches || believe_any).then_some(msg)
        };
        match report.event {
            AgentEvent::Ready => Verdict::Noted,
            AgentEvent::Waiting { words } => {
                t.trouble = Some(Trouble::WaitingOnPerson(words));
                Verdict::Noted
            }
            AgentEvent::ProviderError { limit, words } => {
                t.retrying = (t.typed.is_some() && t.ended.is_none()).then_some(now);
                t.trouble = Some(match limit {
                    true => Trouble::UsageLimited(words),
                    false => Trouble::ProviderError(words),
                });
                Verdict::Noted
            }
            AgentEvent::TurnStarted { prompt } => match ours(t, Some(&prompt)) {
                Some(_) if t.started => Verdict::Noted,
                Some(msg) => {
                    t.started = true;
                    Verdict::Started(msg)
                }
                None => Verdict::Foreign,
            },
            AgentEvent::TurnEnded { prompt, text } => match ours(t, prompt.as_ref()) {
                Some(_) if t.ended.is_some() && !believe_any => Verdict::Noted,
                Some(msg) => {
                    t.ended = Some(Ending::Text(text.clone()));
                    t.trouble = None;
                    t.retrying = None;
                    Verdict::Ended { msg, text }
                }
                None => Verdict::Foreign,
            },
            AgentEvent::TurnFailed {
                prompt,
                limit,
                words,
            } => match ours(t, prompt.as_ref()) {
                Some(_) if t.ended.is_some() && !believe_any => Verdict::Noted,
                Some(msg) => {
                    t.retrying = None;
                    t.ended = Some(Ending::Failed {
                        limit,
                        words: words.clone(),
                    });
                    t.trouble = Some(match limit {
                        true => Trouble::UsageLimited(words.clone()),
                        false => Trouble::ProviderError(words.clone()),
                    });
                    Verdict::Failed { msg, limit, words }
                }
                None => Verdict::Foreign,
            },
        }
    }

    /// How the agent said brief `msg`'s turn ended, if it has.
    pub fn ending(&self, gid: &SessionId, msg: MsgId) -> Option<&Ending> {
        let t = self.members.get(gid)?;
        match t.typed {
            Some((m, _)) if m == msg => t.ended.as_ref(),
            _ => None,
        }
    }

    /// Brief `msg`'s turn looked over on `gid`'s screen: its report is awaited until `until`.
    pub fn await_end(&mut self, gid: &SessionId, msg: MsgId, until: Instant) {
        if self.members.contains_key(gid) {
            self.waits.insert(gid.clone(), (msg, until));
        }
    }

    /// Stops waiting for brief `msg`'s report: true if it was awaited.
    pub fn stop_waiting(&mut self, gid: &SessionId, msg: MsgId) -> bool {
        match self.waits.get(gid) {
            Some((m, _)) if *m == msg => {
                self.waits.remove(gid);
                true
            }
            _ => false,
        }
    }

    /// The brief whose report `gid` waited for until `now` or earlier, if it waits no more.
    pub fn wait_over(&mut self, gid: &SessionId, now: Instant) -> Option<MsgId> {
        match self.waits.get(gid) {
            Some((msg, until)) if *until <= now => {
                let msg = *msg;
                self.waits.remove(gid);
                Some(msg)
            }
            _ => None,
        }
    }

    /// Every turn end waiting for its report: (member, brief, until when).
    pub fn waits(&self) -> impl Iterator<Item = (&SessionId, MsgId, Instant)> {
        self.waits.iter().map(|(g, (m, u))| (g, *m, *u))
    }

    /// Targets known here, for the invariants.
    pub fn count(&self) -> usize {
        self.members.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid() -> SessionId {
        SessionId::new("m1")
    }

    fn msg(n: u128) -> MsgId {
        MsgId(uuid::Uuid::from_u128(n))
    }

    fn report(seq: u64, event: AgentEvent) -> AgentReport {
        AgentReport {
            seq,
            session: None,
            event,
        }
    }

    fn ended(seq: u64, prompt: Option<&str>, text: &str) -> AgentReport {
        report(
            seq,
            AgentEvent::TurnEnded {
                prompt: prompt.map(str::to_string),
                text: text.into(),
            },
        )
    }

    #[test]
    fn an_end_speaks_for_the_brief_it_names_and_only_once() {
        let mut r = Reports::default();
        r.launched(&gid());
        let (m1, m2) = (msg(1), msg(2));
        r.typed(&gid(), m1, "fix the\nparser");
        // Whitespace as the pane turned it is not a difference.
        assert_eq!(
            r.take(
                Instant::ZERO,
                &gid(),
                ended(1, Some("fix the parser "), "done")
            ),
            Verdict::Ended {
                msg: m1,
                text: "done".into()
            }
        );
        assert_eq!(r.ending(&gid(), m1), Some(&Ending::Text("done".into())));
        // A second end of the same brief ends nothing more.
        assert_eq!(
            r.take(
                Instant::ZERO,
                &gid(),
                ended(2, Some("fix the parser"), "again")
            ),
            Verdict::Noted
        );
        r.typed(&gid(), m2, "next");
        // The previous turn's end, late and re-sent with a new number, names another prompt.
        assert_eq!(
            r.take(
                Instant::ZERO,
                &gid(),
                ended(3, Some("fix the parser"), "done")
            ),
            Verdict::Foreign
        );
        // A person typed in the pane: not fleetd's brief.
        assert_eq!(
            r.take(
                Instant::ZERO,
                &gid(),
                report(
                    4,
                    AgentEvent::TurnStarted {
                        prompt: "ls".into()
                    }
                )
            ),
            Verdict::Foreign
        );
        assert_eq!(r.ending(&gid(), m2), None);
    }

    #[test]
    fn a_late_or_repeated_report_is_old_news() {
        let mut r = Reports::default();
        r.launched(&gid());
        let m1 = msg(1);
        r.typed(&gid(), m1, "go");
        let started = report(
            5,
            AgentEvent::TurnStarted {
                prompt: "go".into(),
            },
        );
        assert_eq!(
            r.take(Instant::ZERO, &gid(), started.clone()),
            Verdict::Started(m1)
        );
        assert_eq!(r.take(Instant::ZERO, &gid(), started), Verdict::Stale);
        // Reordered: an end numbered before the start already heard.
        assert_eq!(
            r.take(Instant::ZERO, &gid(), ended(4, None, "x")),
            Verdict::Stale
        );
        // With no prompt, an end is the started brief's.
        assert_eq!(
            r.take(Instant::ZERO, &gid(), ended(6, None, "y")),
            Verdict::Ended {
                msg: m1,
                text: "y".into()
            }
        );
    }

    #[test]
    fn an_end_with_no_prompt_needs_its_start() {
        let mut r = Reports::default();
        r.launched(&gid());
        r.typed(&gid(), msg(1), "go");
        assert_eq!(
            r.take(Instant::ZERO, &gid(), ended(1, None, "x")),
            Verdict::Foreign
        );
    }

    #[test]
    fn a_planted_believer_takes_any_end_for_the_running_brief() {
        let mut r = Reports::default().planted(true);
        r.launched(&gid());
        let m2 = msg(2);
        r.typed(&gid(), m2, "second");
        assert_eq!(
            r.take(Instant::ZERO, &gid(), ended(1, Some("first"), "old")),
            Verdict::Ended {
                msg: m2,
                text: "old".into()
            }
        );
    }

    #[test]
    fn the_wire_form_is_flat_and_refuses_what_it_must() {
        let r: AgentReport = serde_json::from_str(
            r#"{"seq": 3, "session": "abc", "event": "turn_ended", "prompt": "p", "text": "t"}"#,
        )
        .expect("parses");
        assert_eq!(r.session.as_deref(), Some("abc"));
        assert_eq!(
            r.event,
            AgentEvent::TurnEnded {
                prompt: Some("p".into()),
                text: "t".into()
            }
        );
        assert_eq!(r.refused(), None);
        let bad = AgentReport {
            seq: 1,
            session: Some("a\u{1b}[2J".into()),
            event: AgentEvent::Ready,
        };
        assert!(bad.refused().is_some());
        assert!(serde_json::from_str::<AgentReport>(r#"{"seq": 1, "event": "reboot"}"#).is_err());
    }
}
