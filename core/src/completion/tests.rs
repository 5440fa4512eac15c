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
    // Echoed, nothing after it: taken, and no answer drawn yet — not an end.
    let echo_only = "❯ do the thing\n❯ ";
    assert_eq!(
        resolve(echo_only, turn(true), &compiled()),
        Verdict::Unanswered
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
