//! Every text typed into a pane passes through here first (`Injector::enqueue`, the one way
//! text reaches `Output::Inject`). A brief, an answer or a note comes from a lead, a peer or a
//! member — any of which may have been talked into attacking the pane's agent — and a terminal
//! acts on control bytes: `ESC [201~` ends a bracketed paste early and what follows is typed as
//! keys, `ESC ]52;c;…` sets the clipboard, a carriage return submits. So only newline and tab
//! are kept; every other C0 control, DEL and every C1 control is shown in caret or `<U+…>`
//! notation instead, visible to the agent and inert to its terminal.

use std::borrow::Cow;

/// Whether `c` is typed as it is: printable, or a newline or tab.
pub fn is_typeable(c: char) -> bool {
    c == '\n' || c == '\t' || !c.is_control()
}

/// `text` with every control character other than newline and tab made visible and inert:
/// C0 and DEL in caret notation (`ESC` → `^[`, `CR` → `^M`, `DEL` → `^?`), C1 as `<U+009B>`.
pub fn neutralise(text: &str) -> Cow<'_, str> {
    if text.chars().all(is_typeable) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if is_typeable(c) => out.push(c),
            '\u{7f}' => out.push_str("^?"),
            c if (c as u32) < 0x20 => {
                out.push('^');
                out.push(char::from(b'@' + c as u8));
            }
            c => out.push_str(&format!("<U+{:04X}>", c as u32)),
        }
    }
    Cow::Owned(out)
}

/// The last `lines` non-empty lines of a screen, control characters stripped, at most `bytes`
/// (cut at a character boundary from the front): what an error or a log line may carry of
/// text a member printed. The launch script's own exit line is left out.
pub fn last_screen(screen: &str, lines: usize, bytes: usize) -> String {
    let clean: Vec<String> = screen
        .lines()
        .map(|l| {
            l.chars()
                .filter(|c| !c.is_control() || *c == '\t')
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .filter(|l| !l.is_empty() && !l.starts_with("[fleetd] the member exited"))
        .collect();
    let start = clean.len().saturating_sub(lines);
    let mut text = clean[start..].join("\n");
    if text.len() > bytes {
        let mut cut = text.len() - bytes;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text = format!("…{}", &text[cut..]);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bracketed-paste end, an OSC 52 clipboard write, a carriage return, a C1 CSI: each
    /// arrives as visible text, and nothing below 0x20 but newline and tab is left.
    #[test]
    fn control_bytes_are_shown_not_typed() {
        let hostile = "fix it\x1b[201~rm -rf ~\r\x1b]52;c;ZXZpbA==\x07\u{9b}31m\x7f\n\tdone";
        let typed = neutralise(hostile);
        assert_eq!(
            typed,
            "fix it^[[201~rm -rf ~^M^[]52;c;ZXZpbA==^G<U+009B>31m^?\n\tdone"
        );
        assert!(typed
            .bytes()
            .all(|b| b >= 0x20 && b != 0x7f || b == b'\n' || b == b'\t'));
        assert!(!typed.contains('\u{9b}'));
    }

    #[test]
    fn plain_text_is_typed_as_it_is() {
        let brief = "list the files\n\twith sizes — über, 日本, emoji 🚀";
        assert!(matches!(neutralise(brief), Cow::Borrowed(b) if b == brief));
    }
}
