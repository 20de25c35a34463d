//! The control-character rule for every text a client sends (SPEC §2): a value
//! holding NUL or any other control character (C0, DEL, C1) is refused at the
//! edge, the same on both databases. Tab, CR and LF are allowed only in the
//! free-text fields that may span lines (`note`, `about`).

/// Whether a text field may hold line breaks and tabs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// One-line values: ids, names, addresses, OAuth parameters, queries.
    Single,
    /// Free text: `note` and `about`.
    Multi,
}

/// True when `value` holds a control character the rule refuses.
pub fn has_forbidden_control(value: &str, lines: Lines) -> bool {
    value
        .chars()
        .any(|c| c.is_control() && !(lines == Lines::Multi && matches!(c, '\t' | '\r' | '\n')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_refused_and_line_breaks_only_in_free_text() {
        for bad in ["a\0b", "\u{1}", "x\u{7f}", "\u{85}", "\u{9f}"] {
            assert!(has_forbidden_control(bad, Lines::Single), "{bad:?}");
            assert!(has_forbidden_control(bad, Lines::Multi), "{bad:?}");
        }
        for breaks in ["a\tb", "a\r\nb", "a\nb"] {
            assert!(has_forbidden_control(breaks, Lines::Single), "{breaks:?}");
            assert!(!has_forbidden_control(breaks, Lines::Multi), "{breaks:?}");
        }
        for fine in [
            "",
            "héllo wörld",
            "💸 rent",
            "\u{a0}non-breaking",
            "\u{200b}",
        ] {
            assert!(!has_forbidden_control(fine, Lines::Single), "{fine:?}");
        }
    }
}
