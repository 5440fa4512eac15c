//! Everything `fleetd ctl` writes to the terminal goes through here. What it prints — reply
//! bodies, questions, roster cards, audit lines, error messages — comes from members, peers
//! and leads, any of which may try `ESC ]52;…` (set the operator's clipboard), `ESC [2J` or a
//! C1 `CSI`: human text is shown with its control characters in caret notation
//! (`fleet_core::pane_text`), JSON with every control character `\u`-escaped, as JSON allows.

use std::borrow::Cow;
use std::io::Write;

/// `s` safe for a terminal: newline and tab kept, every other control character shown.
pub fn text(s: &str) -> Cow<'_, str> {
    fleet_core::pane_text::neutralise(s)
}

/// JSON text safe for a terminal: control characters only ever stand inside JSON strings,
/// where `\uXXXX` means the same; serde_json escapes C0 but writes DEL and C1 raw.
pub fn json(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c.is_control() && c != '\n') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() && c != '\n' {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Writes `s` to stdout, made safe.
pub fn print(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text(s).as_bytes());
}

/// `print` and a newline.
pub fn println(s: &str) {
    print(&format!("{s}\n"));
}

/// JSON to stdout, made safe, and a newline.
pub fn println_json(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(json(s).as_bytes());
    let _ = o.write_all(b"\n");
}

/// `s` and a newline to stderr, made safe.
pub fn eprintln(s: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(text(s).as_bytes());
    let _ = e.write_all(b"\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_and_json_reach_the_terminal_inert() {
        let reply = "done \u{1b}]52;c;ZXZpbA==\u{7} \u{1b}[2J \u{9b}31m\u{7f}";
        let shown = text(reply);
        assert!(
            !shown.contains('\u{1b}') && !shown.contains('\u{9b}'),
            "{shown}"
        );
        let as_json =
            serde_json::to_string(&serde_json::json!({ "body": reply })).unwrap_or_default();
        let safe = json(&as_json);
        assert!(safe.chars().all(|c| !c.is_control()), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap_or_default();
        assert_eq!(back["body"], reply, "the same JSON value");
    }
}
