//! Completion resolution and status refinement: pure functions over pane text
//! (the Java `CompletionResolver` and `StatusRefiner`).

use crate::config::Compiled;
use crate::status::AgentStatus;
use std::collections::BTreeMap;

/// What a completion scrape means for the waiter captured at delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The scrape shows nothing new since the pre-turn baseline: it must never resolve, or a
    /// late completion of turn N could answer turn N+1 with N's text (CB-116).
    Suppressed,
    /// An inferred end whose screen shows the brief taken (its echo) and nothing after it: the
    /// agent may still be drawing its answer — a loaded host draws a fast turn's answer seconds
    /// after herdr last called it working, or never shows it working at all. Not an end.
    Unanswered,
    /// The turn's new text matches a usage-limit pattern (CB-578).
    Exhausted { matched: String },
    /// The turn ended without `fleet_reply`; this is the new text it left on screen.
    Completed { text: String },
}

/// What a completion scrape is judged against.
#[derive(Clone, Copy, Debug)]
pub struct TurnText<'a> {
    /// The pane text just before the typing.
    pub baseline: &'a str,
    /// The last line of what was typed for the turn ([`typed_tail`]), when known.
    pub typed: Option<&'a str>,
    /// The turn's end was inferred (no WORKING sample before it went idle), not seen.
    pub inferred: bool,
}

/// Compares the post-turn scrape with the baseline taken just before the inject.
///
/// Only text the turn added is judged, so an old refusal still on screen from an earlier turn
/// cannot classify this one as exhausted. Where the typed text shows in what the turn added,
/// the turn's output is what follows it — an agent's banner or notices drawn above the echoed
/// brief are not its answer. An inferred turn end is believed only when the screen shows the
/// brief was taken and answered: its echo with nothing after it is `Unanswered` (not an end
/// yet), and no echo at all (a brief typed into a program that was not taking input yet)
/// resolves nothing.
pub fn resolve(scrape: &str, turn: TurnText<'_>, compiled: &Compiled) -> Verdict {
    let fresh = new_text(&without_sidebar(scrape), &without_sidebar(turn.baseline));
    let clean = |t: &str| without_chrome(&without_input_box(t), compiled);
    let after = turn.typed.and_then(|t| after_typed(&fresh, t));
    // A limit may be shown in a status line under the input box (opencode's retry notice),
    // which the cleaning cuts: it is looked for in the turn's raw text.
    if after.is_some() || !turn.inferred {
        if let Some(matched) = usage_limit(after.as_deref().unwrap_or(&fresh), compiled) {
            return Verdict::Exhausted { matched };
        }
    }
    let judged = match after {
        Some(after) if !clean(&after).trim().is_empty() => clean(&after),
        Some(_) if turn.inferred => return Verdict::Unanswered,
        None if turn.inferred => return Verdict::Suppressed,
        // Seen, and nothing after its echo: the echo is all the turn left (a silent tool run)
        // — never the banner above it.
        Some(_) => {
            let echo = turn.typed.and_then(|t| echo_line(&fresh, t));
            return Verdict::Completed {
                text: echo.unwrap_or_default(),
            };
        }
        None => clean(&fresh),
    };
    if judged.trim().is_empty() {
        return Verdict::Suppressed;
    }
    Verdict::Completed {
        text: trim_blank_lines(&judged),
    }
}

/// A provider's usage limit shown while a turn is still running — an agent that retries it
/// for ever (opencode retries OpenAI's `insufficient_quota` with no end) never ends the turn
/// for the scrape to see it. Believed after the turn's echoed brief, in text new since the
/// typing; or, wherever the echo went (scrolled off, drawn elsewhere, past the probe's tail),
/// when the screen before the typing showed no limit at all — then any limit now is news
/// since this turn began. A limit left from an earlier turn is never this one's.
pub fn exhausted_mid_turn(screen: &str, turn: TurnText<'_>, compiled: &Compiled) -> Option<String> {
    let fresh = new_text(&without_sidebar(screen), &without_sidebar(turn.baseline));
    match after_typed(&fresh, turn.typed?) {
        Some(after) => usage_limit(&after, compiled),
        None if usage_limit(turn.baseline, compiled).is_none() => usage_limit(&fresh, compiled),
        None => None,
    }
}

pub(crate) fn usage_limit(text: &str, compiled: &Compiled) -> Option<String> {
    compiled
        .usage_limit
        .iter()
        .find_map(|re| re.find(text))
        .map(|m| m.as_str().to_string())
}

/// A screen without the sidebar a TUI draws right of its transcript on a wide pane (opencode
/// 1.18's session, tokens, MCP and LSP panel): a column, right of the middle of the screen, at
/// which at least three lines hold text and nothing left of it. Every line is cut there.
fn without_sidebar(screen: &str) -> String {
    const MIN_COLUMN: usize = 40;
    const MIN_LINES: usize = 3;
    let mut votes: BTreeMap<usize, usize> = BTreeMap::new();
    for line in screen.lines() {
        let lead = line.chars().take_while(|c| *c == ' ').count();
        if lead >= MIN_COLUMN && lead < line.chars().count() {
            *votes.entry(lead).or_default() += 1;
        }
    }
    let Some((&column, _)) = votes
        .iter()
        .filter(|(_, n)| **n >= MIN_LINES)
        .min_by_key(|(c, _)| **c)
    else {
        return screen.to_string();
    };
    screen
        .lines()
        .map(|l| {
            l.chars()
                .take(column)
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A turn's text without the agent's input box at its end. Agents draw their prompt below the
/// transcript with a footer under it that changes between turns (a notice, the session's
/// title), so it is not always set aside as common footer: the last prompt line (`❯` in Claude
/// Code 2.1, between two rules; `›` in Codex 0.171) with at most three lines of footer after it
/// opens the box, and the text ends above it (and above a rule drawn over it).
fn without_input_box(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let is_rule = |l: &str| {
        let t = l.trim();
        t.chars().count() >= 20 && t.chars().all(|c| matches!(c, '─' | '━' | '═'))
    };
    let is_prompt = |l: &str| {
        let t = l.trim_start();
        t.starts_with('❯') || t.starts_with('›') || t.starts_with("│ >")
    };
    let footer = |i: usize| {
        lines[i + 1..]
            .iter()
            .filter(|l| !l.trim().is_empty())
            .count()
            <= 3
    };
    // opencode 1.18: a run of `┃` lines closed by a `╹▀▀▀` border.
    let is_border = |l: &str| l.trim_start().starts_with("╹▀");
    let is_bar = |l: &str| l.trim_start().starts_with('┃');
    if let Some(b) = (0..lines.len())
        .rev()
        .find(|&i| is_border(lines[i]) && footer(i))
    {
        let mut top = b;
        while top > 0 && is_bar(lines[top - 1]) {
            top -= 1;
        }
        if top < b {
            return lines[..top].join("\n");
        }
    }
    // Something must lie above the box: a bare prompt at the top of the turn's text is the
    // one the typing consumed, and what follows it is the turn's.
    let above = |i: usize| lines[..i].iter().any(|l| !l.trim().is_empty());
    let Some(mut cut) = (0..lines.len())
        .rev()
        .find(|&i| is_prompt(lines[i]) && footer(i) && above(i))
    else {
        return text.to_string();
    };
    if cut > 0 && is_rule(lines[cut - 1]) {
        cut -= 1;
    }
    lines[..cut].join("\n")
}

/// A turn's text without the lines that are the agent's chrome (`chrome_patterns`).
fn without_chrome(text: &str, compiled: &Compiled) -> String {
    text.lines()
        .filter(|l| !compiled.chrome.iter().any(|re| re.is_match(l)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The most of a typed text's last line kept to find its echo on screen (characters).
pub const TYPED_TAIL_CHARS: usize = 120;

/// The part of a typed text its echo is found by: its last non-blank line, whitespace
/// collapsed, at most [`TYPED_TAIL_CHARS`] from its end.
pub fn typed_tail(text: &str) -> String {
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let norm = collapse(last);
    let skip = norm.chars().count().saturating_sub(TYPED_TAIL_CHARS);
    norm.chars().skip(skip).collect()
}

/// The shortest piece of a wrapped echo believed to end the typed text (characters), unless
/// the whole tail is shorter: a short screen line such as `ok` ends too many texts.
const MIN_ECHO_CHARS: usize = 12;

/// The lines of `fresh` after the first one that ends the typed text's echo, or `None` when
/// no line does. A long brief wraps, so the echo's last lines, joined as a terminal wrapped
/// them (at a space or mid-word), end its last line; the agent's prompt marker or box border
/// around them is set aside.
fn after_typed(fresh: &str, tail: &str) -> Option<String> {
    let at = echo_at(fresh, tail)?;
    Some(fresh.lines().skip(at + 1).collect::<Vec<_>>().join("\n"))
}

/// The line of `fresh` that ends the echo of `tail`, trimmed.
fn echo_line(fresh: &str, tail: &str) -> Option<String> {
    let at = echo_at(fresh, tail)?;
    fresh.lines().nth(at).map(|l| l.trim().to_string())
}

/// The index of the first line of `fresh` that ends the echo of `tail`.
fn echo_at(fresh: &str, tail: &str) -> Option<usize> {
    if tail.is_empty() {
        return None;
    }
    let lines: Vec<String> = fresh.lines().map(|l| collapse(strip_chrome(l))).collect();
    let enough = MIN_ECHO_CHARS.min(tail.chars().count());
    let ends_echo = |i: usize| {
        // Joined back over at most `MAX_ECHO_LINES` lines, both ways a wrap may have cut.
        let mut spaced = lines[i].clone();
        let mut tight = lines[i].clone();
        if spaced.is_empty() {
            return false;
        }
        for j in (i.saturating_sub(MAX_ECHO_LINES)..=i).rev() {
            if j < i {
                spaced = format!("{} {spaced}", lines[j]);
                tight = format!("{}{tight}", lines[j]);
            }
            let hit = |s: &String| tail.ends_with(s.as_str()) && s.chars().count() >= enough;
            if hit(&spaced) || hit(&tight) {
                return true;
            }
            if !tail.ends_with(spaced.as_str()) && !tail.ends_with(tight.as_str()) {
                return false;
            }
        }
        false
    };
    (0..lines.len()).find(|&i| ends_echo(i))
}

/// How many screen lines a wrapped echo is joined back over.
const MAX_ECHO_LINES: usize = 8;

/// A screen line without the prompt markers and box borders agents draw around an echo.
fn strip_chrome(line: &str) -> &str {
    const MARKS: &[char] = &[
        '❯', '>', '│', '┃', '|', '⏺', '●', '•', '›', '▌', ' ', '\t', '\u{a0}',
    ];
    line.trim_start_matches(MARKS).trim_end_matches(MARKS)
}

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` without blank lines at either end and without trailing spaces.
fn trim_blank_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    let start = lines
        .iter()
        .position(|l| !l.is_empty())
        .unwrap_or(lines.len());
    let end = lines
        .iter()
        .rposition(|l| !l.is_empty())
        .map_or(start, |i| i + 1);
    // The indent every line shares is the TUI's margin, not the answer's (opencode's 5).
    let indent = lines[start..end]
        .iter()
        .filter(|l| !l.is_empty())
        .map(|l| l.len() - l.trim_start_matches(' ').len())
        .min()
        .unwrap_or(0);
    lines[start..end]
        .iter()
        .map(|l| l.get(indent..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text the turn added: the lines of `scrape` between the end of the baseline's body and
/// the screen's footer.
///
/// Agent screens keep a footer (the prompt line, an input box, a status line) below the
/// conversation, and typing edits it in place: the baseline's prompt line is consumed by the
/// text typed into it and a fresh one is drawn at the bottom when the turn ends. So the run of
/// trailing lines common to both screens is set aside as footer, the baseline's remaining body is
/// anchored in the scrape (where the longest tail of it ends, leftmost on ties), and what lies
/// between is new. With no anchor — the turn scrolled the old text off the screen — everything
/// above the footer is new. Identical screens (trailing blanks ignored) are never news. When the
/// turn's last lines repeat the last lines of the history the split is ambiguous; the new text
/// then still holds every line the turn added, in a rotated order.
pub fn new_text(scrape: &str, baseline: &str) -> String {
    let scrape_lines: Vec<&str> = scrape.lines().map(str::trim_end).collect();
    let base_lines: Vec<&str> = baseline.lines().map(str::trim_end).collect();
    let base = trim_blank_tail(&base_lines);
    let now = trim_blank_tail(&scrape_lines);
    if base == now {
        return String::new();
    }
    let footer = base
        .iter()
        .rev()
        .zip(now.iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let base_body = &base[..base.len() - footer];
    let now_body = &now[..now.len() - footer];
    let (_, start) = anchor(now_body, base_body).unwrap_or((0, 0));
    now_body[start..].join("\n")
}

/// Where the baseline body ends inside the scrape body: `(overlap, end)`, one past the line at
/// which the longest tail of `base` ends in `now` (leftmost among equals); `(0, 0)` for an empty
/// baseline body; `None` if its last line is nowhere on screen.
fn anchor(now: &[&str], base: &[&str]) -> Option<(usize, usize)> {
    let Some(last) = base.last() else {
        return Some((0, 0));
    };
    let mut best: Option<(usize, usize)> = None;
    for (p, line) in now.iter().enumerate() {
        if line != last {
            continue;
        }
        let overlap = now[..=p]
            .iter()
            .rev()
            .zip(base.iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        if best.is_none_or(|(o, _)| overlap > o) {
            best = Some((overlap, p + 1));
        }
    }
    best
}

fn trim_blank_tail<'a>(lines: &'a [&'a str]) -> &'a [&'a str] {
    let end = lines
        .iter()
        .rposition(|l| !l.trim().is_empty())
        .map_or(0, |i| i + 1);
    &lines[..end]
}

/// Reclassifies UNKNOWN from the pane's real content; every other status passes through.
pub fn refine(status: AgentStatus, screen: Option<&str>, compiled: &Compiled) -> AgentStatus {
    let (AgentStatus::Unknown, Some(screen)) = (status, screen) else {
        return status;
    };
    if compiled.refine_working.iter().any(|re| re.is_match(screen)) {
        return AgentStatus::Working;
    }
    let last = screen.lines().rev().find(|l| !l.trim().is_empty());
    match last {
        Some(line) if compiled.refine_idle.iter().any(|re| re.is_match(line)) => AgentStatus::Idle,
        _ => AgentStatus::Unknown,
    }
}

#[cfg(test)]
mod tests;
