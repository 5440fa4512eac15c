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
/// brief was taken and answered: its echo with nothing after it, or no echo at all (a brief
/// typed into a program that was not taking input yet), resolves nothing.
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
        _ if turn.inferred => return Verdict::Suppressed,
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

fn usage_limit(text: &str, compiled: &Compiled) -> Option<String> {
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
mod tests {
    use super::*;
    use crate::config::CoreConfig;

    fn compiled() -> Compiled {
        CoreConfig::default()
            .validate()
            .expect("defaults are valid")
    }

    /// A turn whose end was seen, typed text unknown (as before the echo rule).
    fn seen(baseline: &str) -> TurnText<'_> {
        TurnText {
            baseline,
            typed: None,
            inferred: false,
        }
    }

    /// Claude Code 2.1's screen after a plain-text turn: a banner and a notice drawn since the
    /// baseline (the TUI was still starting), the echoed brief, the answer, the input box.
    const CLAUDE_SCREEN: &str = "╭───────────────────────────╮\n\
        │ ✻ Welcome to Claude Code! │\n\
        ╰───────────────────────────╯\n\
        \n\
        ※ Tip: Auto mode is now Claude Code's default permission mode\n\
        \n\
        > summarise the change in\n\
        \x20 three lines please\n\
        \n\
        ⏺ It adds a readiness check.\n\
        \n\
        ╭──────────────╮\n\
        │ >            │\n\
        ╰──────────────╯\n\
        \x20 ? for shortcuts";

    #[test]
    fn a_scrape_equal_to_the_baseline_never_resolves() {
        let base = "> task one\nanswer one\n> \n";
        assert_eq!(resolve(base, seen(base), &compiled()), Verdict::Suppressed);
        assert_eq!(
            resolve("> task one\nanswer one\n> \n\n\n", seen(base), &compiled()),
            Verdict::Suppressed
        );
    }

    #[test]
    fn only_the_text_the_turn_added_is_returned() {
        let base = "> task one\nanswer one";
        let scrape = "> task one\nanswer one\n> task two\nanswer two";
        assert_eq!(
            resolve(scrape, seen(base), &compiled()),
            Verdict::Completed {
                text: "> task two\nanswer two".into()
            }
        );
    }

    #[test]
    fn a_scrolled_screen_still_finds_where_the_baseline_ended() {
        let base = "l1\nl2\nl3\nl4";
        let scrape = "l3\nl4\nnew a\nnew b";
        assert_eq!(new_text(scrape, base), "new a\nnew b");
    }

    /// Typing edits the prompt line in place and the prompt comes back at the bottom: the
    /// footer is set aside, and the turn's text is what lies between.
    #[test]
    fn a_prompt_edited_in_place_and_redrawn_is_footer_not_news() {
        let base = "● old answer\n❯ ";
        let scrape = "● old answer\n❯ do task\n● done, 3 files changed\n❯ ";
        assert_eq!(new_text(scrape, base), "❯ do task\n● done, 3 files changed");
    }

    /// A Claude Code style input box below the conversation is the same before and after.
    #[test]
    fn an_input_box_footer_is_set_aside() {
        let base = "● old\n╭────╮\n│ >  │\n╰────╯\n  ? for shortcuts";
        let scrape = "● old\n> fix it\n● fixed\n╭────╮\n│ >  │\n╰────╯\n  ? for shortcuts";
        assert_eq!(new_text(scrape, base), "> fix it\n● fixed");
        assert_eq!(new_text(base, base), "");
    }

    /// New output that repeats the baseline's last line is still news: the anchor is the
    /// longest overlap, leftmost on ties.
    #[test]
    fn repeated_lines_do_not_hide_new_output() {
        assert_eq!(new_text("h\na\nx\nb\n❯", "h\na\n❯"), "x\nb");
        // Ambiguous: the turn ends with the history's last lines. Every new line is kept.
        assert_eq!(new_text("h\na\nx\na\n❯", "h\na\n❯"), "a\nx");
        assert_eq!(new_text("p\nq\nr\np\nq\n❯", "p\nq\n❯"), "p\nq\nr");
    }

    /// A fresh pane whose only line is the prompt: the prompt is consumed by the typing, so it
    /// must not anchor on a prompt drawn later (found by seed 488 of the simulation).
    #[test]
    fn a_consumed_prompt_is_not_an_anchor() {
        let base = "❯ ";
        let scrape = "❯ task-2\n● finished: task-2\n❯ \n(someone is typing…)\n❯ ";
        assert_eq!(
            new_text(scrape, base),
            "❯ task-2\n● finished: task-2\n❯\n(someone is typing…)"
        );
    }

    /// A long turn scrolls the whole baseline away: everything above the footer is new.
    #[test]
    fn a_screen_scrolled_past_the_baseline_is_all_new() {
        assert_eq!(new_text("n1\nn2\n❯", "o1\no2\n❯"), "n1\nn2");
    }

    #[test]
    fn a_usage_limit_in_the_new_text_is_backend_exhausted() {
        let v = resolve(
            "> go\nClaude usage limit reached. Resets at 5pm",
            seen("> "),
            &compiled(),
        );
        assert!(matches!(v, Verdict::Exhausted { .. }), "{v:?}");
    }

    /// opencode 1.18.33 on an OpenAI `insufficient_quota`, as real herdr read it: the turn goes
    /// on (it retries for ever), the limit shows only in the status line under its input box.
    const OPENCODE_RETRYING: &str = "\
                                                   ▄
                  █▀▀█ █▀▀█ █▀▀█ █▀▀▄ █▀▀▀ █▀▀█ █▀▀█ █▀▀█

  ┃
  ┃  [script:usage-limit] go
  ┃
     ▣  Build · scripted-model
  ┃
  ┃
  ┃  Build · scripted-model fleetd's model endpoint
  ╹▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀
   ■■⬝⬝⬝You exceeded your current quota, please check your plan and billing details. [retrying
        attempt #4]";

    /// A limit under the input box is this turn's, mid-turn or at its end; the banner above
    /// the echo is never a turn's text.
    #[test]
    fn a_usage_limit_in_a_status_line_is_seen_while_the_turn_still_runs() {
        let typed = typed_tail("[script:usage-limit] go");
        let turn = |inferred| TurnText {
            baseline: "",
            typed: Some(&typed),
            inferred,
        };
        let limit = Some("exceeded your current quota".to_string());
        assert_eq!(
            exhausted_mid_turn(OPENCODE_RETRYING, turn(false), &compiled()),
            limit
        );
        assert!(matches!(
            resolve(OPENCODE_RETRYING, turn(false), &compiled()),
            Verdict::Exhausted { .. }
        ));
        // Without it, the seen turn left nothing after its echo: the echo, not the banner.
        let quiet = OPENCODE_RETRYING.replace("You exceeded your current quota", "Thinking");
        assert_eq!(exhausted_mid_turn(&quiet, turn(false), &compiled()), None);
        assert_eq!(
            resolve(&quiet, turn(false), &compiled()),
            Verdict::Completed {
                text: "┃  [script:usage-limit] go".into()
            }
        );
        // A limit already on screen before the typing is not this turn's.
        let before = TurnText {
            baseline: OPENCODE_RETRYING,
            typed: Some(&typed),
            inferred: false,
        };
        assert_eq!(
            exhausted_mid_turn(OPENCODE_RETRYING, before, &compiled()),
            None
        );
        // With the echo out of sight, a limit is this turn's only if none was shown before
        // the typing.
        let other = typed_tail("another brief entirely");
        let unechoed = TurnText {
            baseline: "",
            typed: Some(&other),
            inferred: false,
        };
        assert_eq!(
            exhausted_mid_turn(OPENCODE_RETRYING, unechoed, &compiled()),
            limit
        );
        let earlier = "  ┃  [script:usage-limit] earlier\n   ■■⬝⬝⬝You exceeded your current quota";
        let unechoed_after_a_limit = TurnText {
            baseline: earlier,
            typed: Some(&other),
            inferred: false,
        };
        assert_eq!(
            exhausted_mid_turn(OPENCODE_RETRYING, unechoed_after_a_limit, &compiled()),
            None
        );
    }

    #[test]
    fn an_old_usage_limit_left_from_an_earlier_turn_is_not_this_turns_verdict() {
        let base = "usage limit reached\n> ";
        let scrape = "usage limit reached\n> \nall done, tests pass";
        assert_eq!(
            resolve(scrape, seen(base), &compiled()),
            Verdict::Completed {
                text: "all done, tests pass".into()
            }
        );
    }

    /// The turn's output is what follows the echoed brief — wrapped over two lines here — not
    /// the banner and notice drawn above it, nor the input box below.
    #[test]
    fn the_turns_text_starts_after_the_echoed_brief() {
        let typed = typed_tail("summarise the change in three lines please");
        for inferred in [false, true] {
            // Taken while the TUI had drawn only its input box.
            let turn = TurnText {
                baseline: "╭──────────────╮\n│ >            │\n╰──────────────╯\n  ? for shortcuts",
                typed: Some(&typed),
                inferred,
            };
            assert_eq!(
                resolve(CLAUDE_SCREEN, turn, &compiled()),
                Verdict::Completed {
                    text: "⏺ It adds a readiness check.".into()
                }
            );
        }
    }

    /// Claude Code 2.1.328's screens as captured before and after a plain-text turn (200
    /// columns; rules shortened): the footer gained a notice, the turn left a "done" line.
    #[test]
    fn claude_codes_input_box_and_done_line_are_not_the_answer() {
        let rule = "─".repeat(60);
        let head = " ▐▛███▛█   Claude Code v2.1.328\n▝▜██████▀  Opus 5.5 · API Usage Billing\n\n";
        let baseline = format!(
            "{head}{rule}\n❯ \n{rule}\n  ⏵⏵ auto mode on (shift+tab to cycle) · ← for agents    ◐ medium · /effort"
        );
        let scrape = format!(
            "{head}❯ Say hi please\n\n● hello from the scripted model\n\n✻ Brewed for 0s · done 8:12 AM\n\n{rule}\n❯ \n{rule}\n  ⏵⏵ auto mode on (shift+tab to cycle)      tmux focus-events off · add 'set -g focus-events on'"
        );
        let typed = typed_tail("Say hi please");
        for inferred in [false, true] {
            let turn = TurnText {
                baseline: &baseline,
                typed: Some(&typed),
                inferred,
            };
            assert_eq!(
                resolve(&scrape, turn, &compiled()),
                Verdict::Completed {
                    text: "● hello from the scripted model".into()
                }
            );
        }
        let limit = format!(
            "{head}❯ go\n\n● API Error: 400 You have reached your specified API usage limits. You will regain access on 2026-01-01 at 00:00 UTC.\n\n{rule}\n❯ \n{rule}"
        );
        let turn = TurnText {
            baseline: &baseline,
            typed: Some("go"),
            inferred: true,
        };
        assert!(matches!(
            resolve(&limit, turn, &compiled()),
            Verdict::Exhausted { .. }
        ));
    }

    /// Codex 0.171's screens before and after a plain-text turn: its footer gained the
    /// session's title, the turn left a "Worked for" line above the input line.
    #[test]
    fn codexs_input_line_and_worked_line_are_not_the_answer() {
        let head = "  >_ OpenAI Codex (v0.171.0)\n     /srv/app\n  permissions: YOLO mode\n";
        let baseline = format!(
            "{head}\n› Ask Codex to do anything\n\n  gpt-5 default · /srv/app\n  ← for agents · ? for shortcuts"
        );
        let scrape = format!(
            "{head}\n› say hello please\n\n• hello from the scripted model\n\n  Worked for <1s • 08:25\n\n\n› Ask Codex to do anything\n\n  gpt-5 default · /srv/app · say hello please\n  ← for agents · ? for shortcuts          ⚠ 1 warning · f2 to view"
        );
        let typed = typed_tail("say hello please");
        let turn = TurnText {
            baseline: &baseline,
            typed: Some(&typed),
            inferred: true,
        };
        assert_eq!(
            resolve(&scrape, turn, &compiled()),
            Verdict::Completed {
                text: "• hello from the scripted model".into()
            }
        );
    }

    /// opencode 1.18.33's session screen after a plain-text turn (captured at 200 columns):
    /// a sidebar right of the transcript, the answer as indented text, a `▣` line, the input
    /// box as `┃` lines over a `╹▀▀▀` border. The baseline was its home screen.
    #[test]
    fn opencodes_sidebar_box_and_build_line_are_not_the_answer() {
        let pad = |n: usize| " ".repeat(n);
        let side = |left: &str, right: &str| {
            let n = left.chars().count();
            format!("{left}{}{right}", pad(160 - n))
        };
        let baseline = format!(
            "{p}┃\n{p}┃  Ask anything… \"Fix broken tests\"\n{p}┃\n{p}┃  Build · Scripted model Fleet local\n\n  /tmp/w:master  ⊙ 1 MCP /status{q}1.18.33",
            p = pad(63),
            q = pad(100)
        );
        let scrape = [
            side("  ┃", "hello from the scripted model"),
            "  ┃  say hello please".to_string(),
            side("  ┃", "Context"),
            side("", "15 tokens"),
            side("     hello from the scripted model", "0% used"),
            side("", "$0.00 spent"),
            "     ▣  Build · Scripted model · 2.2s".to_string(),
            side("", "MCP"),
            side("", "• fleet Connected"),
            String::new(),
            "  ┃".to_string(),
            "  ┃".to_string(),
            side("  ┃  Build · Scripted model Fleet local", "/tmp/w:master"),
            format!("  ╹{}", "▀".repeat(150)),
            "   /tmp/w       15  ctrl+p commands    • OpenCode 1.18.33".to_string(),
        ]
        .join("\n");
        let typed = typed_tail("say hello please");
        let turn = TurnText {
            baseline: &baseline,
            typed: Some(&typed),
            inferred: true,
        };
        assert_eq!(
            resolve(&scrape, turn, &compiled()),
            Verdict::Completed {
                text: "hello from the scripted model".into()
            }
        );
        // A table in an answer keeps its columns: text left of them on every line.
        let table = "name                                          value\nalpha                                         1\nbeta                                          2\n";
        assert_eq!(without_sidebar(table), table);
    }

    /// An inferred turn end is believed only on a screen that shows the brief answered.
    #[test]
    fn an_inferred_turn_with_no_answer_after_its_echo_resolves_nothing() {
        let typed = typed_tail("do the thing");
        let turn = |inferred| TurnText {
            baseline: "❯ ",
            typed: Some(&typed),
            inferred,
        };
        // Echoed, nothing after it: the agent never took it up.
        let echo_only = "❯ do the thing\n❯ ";
        assert_eq!(
            resolve(echo_only, turn(true), &compiled()),
            Verdict::Suppressed
        );
        // No echo at all: typed into a program that was not taking input yet.
        let startup = "Welcome!\nloading…\n❯ ";
        assert_eq!(
            resolve(startup, turn(true), &compiled()),
            Verdict::Suppressed
        );
        // A seen turn still completes with what it added.
        assert_eq!(
            resolve(echo_only, turn(false), &compiled()),
            Verdict::Completed {
                text: "❯ do the thing".into()
            }
        );
        // Answered: the inferred end completes with the answer alone.
        assert_eq!(
            resolve("❯ do the thing\n● done\n❯ ", turn(true), &compiled()),
            Verdict::Completed {
                text: "● done".into()
            }
        );
    }

    /// A short screen line that happens to end the brief is not its echo.
    #[test]
    fn a_short_line_is_not_taken_for_the_echo() {
        let typed = typed_tail("please reply ok");
        assert_eq!(after_typed("ok\nmore", &typed), None);
        assert_eq!(
            after_typed("> please reply ok\nok", &typed).as_deref(),
            Some("ok")
        );
        assert_eq!(typed_tail("first\n  second   line \n\n"), "second line");
        let long = "x".repeat(500);
        assert_eq!(typed_tail(&long).chars().count(), TYPED_TAIL_CHARS);
    }

    proptest::proptest! {
        /// history + new + footer against history + footer gives exactly the new lines,
        /// whatever the sizes; a screen is never news against itself; nothing panics.
        #[test]
        fn the_new_text_is_what_the_turn_added(
            h in 0..30usize, n in 1..30usize, f in 0..6usize,
            junk_a in "[a-c\n ]{0,60}", junk_b in "[a-c\n ]{0,60}",
        ) {
            let lines = |p: &str, k: usize| (0..k).map(|i| format!("{p}{i}")).collect::<Vec<_>>();
            let (hist, new, foot) = (lines("h", h), lines("n", n), lines("f", f));
            let base = [hist.clone(), foot.clone()].concat().join("\n");
            let scrape = [hist, new.clone(), foot].concat().join("\n");
            proptest::prop_assert_eq!(new_text(&scrape, &base), new.join("\n"));
            proptest::prop_assert_eq!(new_text(&scrape, &scrape), "");
            let _ = new_text(&junk_a, &junk_b);
        }
    }

    #[test]
    fn unknown_is_refined_from_the_screen_and_known_statuses_pass_through() {
        let c = compiled();
        assert_eq!(
            refine(
                AgentStatus::Unknown,
                Some("✻ Thinking… (esc to interrupt)"),
                &c
            ),
            AgentStatus::Working
        );
        assert_eq!(
            refine(AgentStatus::Unknown, Some("done.\n❯ \n\n"), &c),
            AgentStatus::Idle
        );
        assert_eq!(
            refine(AgentStatus::Unknown, Some("garbage"), &c),
            AgentStatus::Unknown
        );
        assert_eq!(refine(AgentStatus::Unknown, None, &c), AgentStatus::Unknown);
        assert_eq!(
            refine(AgentStatus::Working, Some("❯ "), &c),
            AgentStatus::Working
        );
    }
}
