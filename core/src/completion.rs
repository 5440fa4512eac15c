//! Completion resolution and status refinement: pure functions over pane text
//! (the Java `CompletionResolver` and `StatusRefiner`).

use crate::config::Compiled;
use crate::status::AgentStatus;

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

/// Compares the post-turn scrape with the baseline taken just before the inject.
///
/// Only text the turn added is judged, so an old refusal still on screen from an earlier turn
/// cannot classify this one as exhausted.
pub fn resolve(scrape: &str, baseline: &str, compiled: &Compiled) -> Verdict {
    let fresh = new_text(scrape, baseline);
    if fresh.trim().is_empty() {
        return Verdict::Suppressed;
    }
    for re in &compiled.usage_limit {
        if let Some(m) = re.find(&fresh) {
            return Verdict::Exhausted {
                matched: m.as_str().to_string(),
            };
        }
    }
    Verdict::Completed {
        text: fresh.trim_end().to_string(),
    }
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

    #[test]
    fn a_scrape_equal_to_the_baseline_never_resolves() {
        let base = "> task one\nanswer one\n> \n";
        assert_eq!(resolve(base, base, &compiled()), Verdict::Suppressed);
        assert_eq!(
            resolve("> task one\nanswer one\n> \n\n\n", base, &compiled()),
            Verdict::Suppressed
        );
    }

    #[test]
    fn only_the_text_the_turn_added_is_returned() {
        let base = "> task one\nanswer one";
        let scrape = "> task one\nanswer one\n> task two\nanswer two";
        assert_eq!(
            resolve(scrape, base, &compiled()),
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
            "> ",
            &compiled(),
        );
        assert!(matches!(v, Verdict::Exhausted { .. }), "{v:?}");
    }

    #[test]
    fn an_old_usage_limit_left_from_an_earlier_turn_is_not_this_turns_verdict() {
        let base = "usage limit reached\n> ";
        let scrape = "usage limit reached\n> \nall done, tests pass";
        assert_eq!(
            resolve(scrape, base, &compiled()),
            Verdict::Completed {
                text: "all done, tests pass".into()
            }
        );
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
