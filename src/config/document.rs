//! Parsing a TOML file into its spanned tree, and explaining syntax errors.
//!
//! `toml` parses into a [`DeTable`] whose every key and value carries its byte span;
//! the rest of the loader reads that tree key by key. Syntax errors are reported from
//! `Error::message()` and `Error::span()` only: `toml`'s `Display` prints the offending
//! line, which may contain a password. The parser recovers after an error, so several
//! syntax errors are reported at once; a file with any is not interpreted further (a
//! half-read node could produce misleading follow-up errors).
//!
//! The most likely "syntax" error in an inventory is a node written twice. `toml` says
//! only "duplicate key"; this module finds the first definition and says which node.

use toml::de::{DeTable, DeValue};

use super::diagnostic::{Diagnostics, Source, Span, Subject};

/// Parses `src`; on any syntax error reports all of them and returns None.
pub(crate) fn parse<'s>(src: &'s Source, diags: &mut Diagnostics) -> Option<DeTable<'s>> {
    let (table, errors) = DeTable::parse_recoverable(&src.text);
    if errors.is_empty() {
        return Some(table.into_inner());
    }
    for err in errors {
        let span = err.span();
        let line = span.as_ref().map(|s| src.line_of(s.start));
        let table = line.and_then(|l| enclosing_table(src, l));
        let subject = match table.as_ref().map(|(path, _)| path.as_slice()) {
            Some([top, name, ..]) if top == "nodes" => Subject::Node(name.clone()),
            Some([top, name, ..]) if top == "groups" => Subject::Group(name.clone()),
            Some([top, ..]) if top == "defaults" => Subject::Defaults,
            _ => Subject::File,
        };
        let (message, help) = match (err.message(), &span, line) {
            ("duplicate key", Some(span), Some(line)) => explain_duplicate(src, span, line),
            (message, _, _) => (
                format!("TOML syntax error: {message}"),
                Some("see https://toml.io for the syntax; strings need double quotes".into()),
            ),
        };
        diags.error(src, span.as_ref(), &subject, message, help);
    }
    None
}

/// Explains a "duplicate key" at `span` (on 1-based `line`).
fn explain_duplicate(src: &Source, span: &Span, line: usize) -> (String, Option<String>) {
    let key = src
        .text
        .get(span.clone())
        .unwrap_or("")
        .trim_matches(['"', '\''])
        .to_string();
    let here = src.line_text(line);
    if let Some(path) = header_path(here) {
        let first = (1..line).find(|l| header_path(src.line_text(*l)).as_ref() == Some(&path));
        let first = first
            .map(|l| format!(" (first at line {l})"))
            .unwrap_or_default();
        return match path.as_slice() {
            [top, name] if top == "nodes" => (
                format!("node \"{name}\" is defined twice{first}"),
                Some(format!(
                    "a node may appear only once: merge the two [nodes.{name}] tables into one"
                )),
            ),
            [top, name] if top == "groups" => (
                format!("group \"{name}\" is defined twice{first}"),
                Some(format!("merge the two [groups.{name}] tables into one")),
            ),
            _ => (
                format!("table [{}] is defined twice{first}", path.join(".")),
                Some("TOML allows each table only once: merge them".into()),
            ),
        };
    }
    let start = enclosing_table(src, line).map_or(1, |(_, l)| l + 1);
    let first = (start..line).find(|l| key_of_line(src.line_text(*l)) == Some(key.as_str()));
    let first = first
        .map(|l| format!(" (first at line {l})"))
        .unwrap_or_default();
    (
        format!("`{key}` is set twice in the same table{first}"),
        Some(format!("keep only one `{key}`")),
    )
}

/// The dotted path of the `[table]` header a 1-based line belongs to, and its line.
fn enclosing_table(src: &Source, line: usize) -> Option<(Vec<String>, usize)> {
    (1..=line)
        .rev()
        .find_map(|l| header_path(src.line_text(l)).map(|p| (p, l)))
}

/// The key path of a `[a.b]` (or `[[a.b]]`) header line.
fn header_path(line: &str) -> Option<Vec<String>> {
    let trimmed = line.trim();
    if !trimmed.starts_with('[') {
        return None;
    }
    let table = DeTable::parse(trimmed).ok()?;
    let mut path = Vec::new();
    let mut current = table.into_inner();
    loop {
        let mut entries = current.into_iter();
        let (key, value) = entries.next()?;
        path.push(key.into_inner().into_owned());
        match value.into_inner() {
            DeValue::Table(t) if !t.is_empty() => current = t,
            _ => return Some(path),
        }
    }
}

/// The first key of a `key = value` or `key.sub = value` line.
fn key_of_line(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    if trimmed.starts_with(['[', '#']) {
        return None;
    }
    let end = trimmed.find(['=', '.', ' ', '\t'])?;
    Some(trimmed.get(..end)?.trim_matches(['"', '\'']))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn errors_of(text: &str) -> Vec<crate::config::ConfigError> {
        let src = Source::new("inventory.toml".into(), text.into());
        let mut diags = Diagnostics::default();
        assert!(parse(&src, &mut diags).is_none());
        diags.finish(&[]).expect_err("syntax errors").0
    }

    #[test]
    fn a_node_defined_twice_names_the_node_and_both_lines() {
        let errs = errors_of(
            "[nodes.worker-1]\ndriver = \"aws\"\n\n[nodes.worker-2]\n\n[nodes.worker-1]\n",
        );
        assert_eq!(errs.len(), 1);
        let e = &errs[0];
        assert_eq!(e.line, Some(6));
        assert_eq!(e.node.as_deref(), Some("worker-1"));
        assert_eq!(
            e.message,
            "node \"worker-1\" is defined twice (first at line 1)"
        );
    }

    #[test]
    fn a_key_set_twice_names_the_key_and_the_first_line() {
        let errs = errors_of("[nodes.a]\nport = 1\nuser = \"x\"\nport = 2\n");
        assert_eq!(
            errs[0].message,
            "`port` is set twice in the same table (first at line 2)"
        );
        assert_eq!(errs[0].line, Some(4));
        assert_eq!(errs[0].node.as_deref(), Some("a"));
    }

    #[test]
    fn syntax_errors_never_quote_the_line_and_several_are_reported() {
        let errs = errors_of(
            "[nodes.a]\npassword = \"hunter2-secret\\q\"\n[nodes.b]\npassword = \"s3cr3t-unterminated\n",
        );
        assert_eq!(errs.len(), 2, "{errs:?}");
        for e in &errs {
            let text = e.to_string();
            assert!(
                !text.contains("hunter2") && !text.contains("s3cr3t"),
                "{text}"
            );
        }
        assert_eq!(errs[0].line, Some(2));
        assert_eq!(errs[1].node.as_deref(), Some("b"));
    }
}
