//! Text from the far side, made safe to show.
//!
//! A BMC, a cloud API, a fence agent or another Kubernetes component can put anything
//! in a string: an `ESC[2J` that clears the operator's terminal, a `\r\n` that forges a
//! log line ("FAKE: worker-1 confirmed Off"), a right-to-left override that reorders
//! what is read, or a megabyte of text. Every such string is passed through [`field`]
//! (or [`text`] with its own cap) where it enters nodefence, before it can reach a
//! terminal, a log line or an Event; the table, Event and error printers escape again
//! ([`line`](fn@line)) so a string that slipped past the first gate is still shown inert.
//!
//! Escaping, not deleting: `\n`, `\r` and `\t` become those two characters, every other
//! control, bidirectional or line-separator character becomes `\u{..}`, so an operator
//! can still see that the far side sent something odd.

/// How many characters of one remote field (a message, a state, an id) are kept.
pub const FIELD_CHARS: usize = 300;

/// The longest Kubernetes Event note the API server accepts, in bytes.
pub const EVENT_NOTE_BYTES: usize = 1024;

/// True for characters that change how a terminal, a log or a reader renders what
/// follows: C0 and C1 controls and DEL, bidirectional embeddings, overrides, isolates
/// and marks, and the Unicode line and paragraph separators.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200e}' | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{2028}' | '\u{2029}'
                | '\u{061c}'
        )
}

/// One remote field: escaped and capped at [`FIELD_CHARS`].
pub fn field(s: &str) -> String {
    text(s, FIELD_CHARS)
}

/// Escaped and capped at `max_chars` characters of *output* (an ellipsis marks a cut).
pub fn text(s: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max_chars * 2));
    let mut count = 0usize;
    for c in s.chars() {
        let piece = escape(c);
        let len = piece.chars().count();
        if count + len > max_chars {
            out.push('…');
            return out;
        }
        out.push_str(&piece);
        count += len;
    }
    out
}

/// Escaped, not capped: for text nodefence composed around remote fields that were
/// already capped (a table cell, an error line).
pub fn line(s: &str) -> String {
    if !s.chars().any(is_unsafe) {
        return s.to_string();
    }
    s.chars().map(escape).collect()
}

/// An Event note: escaped and cut (at a character boundary) to what the API server
/// accepts.
pub fn event_note(s: &str) -> String {
    let escaped = line(s);
    if escaped.len() <= EVENT_NOTE_BYTES {
        return escaped;
    }
    let ellipsis = '…';
    let mut cut = EVENT_NOTE_BYTES - ellipsis.len_utf8();
    while !escaped.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = escaped[..cut].to_string();
    out.push(ellipsis);
    out
}

fn escape(c: char) -> std::borrow::Cow<'static, str> {
    use std::borrow::Cow;
    match c {
        '\n' => Cow::Borrowed("\\n"),
        '\r' => Cow::Borrowed("\\r"),
        '\t' => Cow::Borrowed("\\t"),
        c if is_unsafe(c) => Cow::Owned(format!("\\u{{{:x}}}", u32::from(c))),
        c => Cow::Owned(c.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str =
        "\u{1b}[2J\u{1b}[H\r\nFAKE: worker-1 confirmed Off\r\n\u{202e}ffO\u{9b}31m";

    #[test]
    fn hostile_text_comes_out_inert_and_visible() {
        let out = field(HOSTILE);
        assert!(!out.chars().any(is_unsafe), "{out:?}");
        assert_eq!(
            out,
            "\\u{1b}[2J\\u{1b}[H\\r\\nFAKE: worker-1 confirmed Off\\r\\n\\u{202e}ffO\\u{9b}31m"
        );
        assert_eq!(line(HOSTILE), out);
    }

    #[test]
    fn ordinary_text_is_unchanged() {
        for s in ["On", "Base.1.8.GeneralError: try again", "größe 🙂", ""] {
            assert_eq!(field(s), s);
            assert_eq!(line(s), s);
            assert_eq!(event_note(s), s);
        }
    }

    #[test]
    fn long_text_is_capped_with_a_mark_never_inside_an_escape() {
        let long = "x".repeat(10_000);
        let out = field(&long);
        assert_eq!(out.chars().count(), FIELD_CHARS + 1);
        assert!(out.ends_with('…'));
        // An escape that would cross the cap is left out whole.
        let s = format!("{}\u{1b}", "a".repeat(FIELD_CHARS - 2));
        let out = field(&s);
        assert!(out.ends_with("a…"), "{out:?}");
    }

    #[test]
    fn event_notes_fit_the_api_servers_limit_in_bytes() {
        let note = event_note(&"é".repeat(2000));
        assert!(note.len() <= EVENT_NOTE_BYTES, "{}", note.len());
        assert!(note.ends_with('…'));
        let note = event_note(&"\u{1b}".repeat(500));
        assert!(note.len() <= EVENT_NOTE_BYTES);
        assert!(!note.chars().any(is_unsafe));
    }
}
