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

/// The lines of `scrape` after the longest run of lines it shares with the start of
/// `baseline`'s tail. Trailing blanks are ignored on both sides so a redraw is no news.
pub fn new_text(scrape: &str, baseline: &str) -> String {
    let scrape_lines: Vec<&str> = scrape.lines().map(str::trim_end).collect();
    let base_lines: Vec<&str> = baseline.lines().map(str::trim_end).collect();
    let base_trimmed = trim_blank_tail(&base_lines);
    let scrape_trimmed = trim_blank_tail(&scrape_lines);
    if scrape_trimmed == base_trimmed {
        return String::new();
    }
    // The screen scrolls: find the largest k such that the last k baseline lines appear
    // in the scrape, in order, starting at some position; everything after them is new.
    let mut best_end = 0usize;
    if !base_trimmed.is_empty() {
        for k in (1..=base_trimmed.len()).rev() {
            let tail = &base_trimmed[base_trimmed.len() - k..];
            if let Some(pos) = scrape_trimmed.windows(k).rposition(|w| w == tail) {
                best_end = pos + k;
                break;
            }
        }
    }
    scrape_trimmed[best_end..].join("\n")
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
