//! Errors and warnings that point at a file, a line and a column.
//!
//! A fencing inventory that is wrong in twenty places must say so in one run, and each
//! message must lead the operator to the exact spot and the fix. The loader therefore
//! never stops at the first problem: it records every one here ([`Diagnostics`]) with a
//! byte span of the TOML source, and turns spans into `line:column` only when the
//! report is built.
//!
//! Messages are composed by the loader from field names, paths and counts. They are
//! never built from `toml`'s `Display` (which quotes the offending source line, and that
//! line may hold a password) nor from the values of secret fields.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A byte range in a TOML source.
pub(crate) type Span = Range<usize>;

/// One problem in a config or inventory file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file, as given on the command line or relative to it.
    pub file: PathBuf,
    /// 1-based line, when the problem has a place in the file.
    pub line: Option<usize>,
    /// 1-based column (in characters), when the problem has a place in the file.
    pub column: Option<usize>,
    /// The Kubernetes node the problem belongs to, when it belongs to exactly one.
    pub node: Option<String>,
    /// What is wrong. Never contains a secret.
    pub message: String,
    /// How to fix it.
    pub help: Option<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        f.write_str(": ")?;
        if let Some(node) = &self.node {
            write!(f, "node \"{node}\": ")?;
        }
        f.write_str(&self.message)?;
        if let Some(help) = &self.help {
            write!(f, "\n  help: {}", help.replace('\n', "\n        "))?;
        }
        Ok(())
    }
}

/// Every problem found in one load, in file and line order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The number of problems.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are none (never the case for a returned error).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Iterates the problems in report order.
    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.0.iter()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, err) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{err}")?;
        }
        Ok(())
    }
}

/// The text of one file plus what is needed to turn byte offsets into line:column.
pub(crate) struct Source {
    /// The path shown to humans.
    pub display: PathBuf,
    pub text: String,
    line_starts: Vec<usize>,
}

impl Source {
    pub fn new(display: PathBuf, text: String) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Self {
            display,
            text,
            line_starts,
        }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn locate(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&start| start <= offset);
        let start = self
            .line_starts
            .get(line.saturating_sub(1))
            .copied()
            .unwrap_or(0);
        let column = self
            .text
            .get(start..offset)
            .map(|s| s.chars().count())
            .unwrap_or(0);
        (line.max(1), column + 1)
    }

    /// The 1-based line of a byte offset.
    pub fn line_of(&self, offset: usize) -> usize {
        self.locate(offset).0
    }

    /// The text of a 1-based line, without its line ending.
    pub fn line_text(&self, line: usize) -> &str {
        let start = self.line_starts.get(line.wrapping_sub(1)).copied();
        let Some(start) = start else { return "" };
        let end = self
            .line_starts
            .get(line)
            .copied()
            .unwrap_or(self.text.len());
        self.text
            .get(start..end)
            .unwrap_or("")
            .trim_end_matches(['\n', '\r'])
    }
}

/// Who a problem belongs to; decides the prefix of the message.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Subject {
    /// Nothing more specific than the file.
    File,
    /// `[defaults]` of the inventory.
    Defaults,
    /// `[groups.<name>]`.
    Group(String),
    /// `[nodes.<name>]`: goes into [`ConfigError::node`].
    Node(String),
    /// Entry `n` (1-based) of the `fallback` array of a node or a group.
    Fallback(Box<Subject>, usize),
}

impl Subject {
    fn split(&self, message: String) -> (Option<String>, String) {
        match self {
            Subject::File => (None, message),
            Subject::Defaults => (None, format!("[defaults]: {message}")),
            Subject::Group(g) => (None, format!("group \"{g}\": {message}")),
            Subject::Node(n) => (Some(n.clone()), message),
            Subject::Fallback(owner, n) => owner.split(format!("fallback {n}: {message}")),
        }
    }
}

/// Collects errors and warnings of one load.
#[derive(Default)]
pub(crate) struct Diagnostics {
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
}

impl Diagnostics {
    fn build(
        src: &Source,
        span: Option<&Span>,
        subject: &Subject,
        message: String,
        help: Option<String>,
    ) -> ConfigError {
        let (line, column) = match span.map(|s| src.locate(s.start)) {
            Some((l, c)) => (Some(l), Some(c)),
            None => (None, None),
        };
        let (node, message) = subject.split(message);
        ConfigError {
            file: src.display.clone(),
            line,
            column,
            node,
            message,
            help,
        }
    }

    /// Records an error at `span` of `src` (or at the whole file when `span` is None).
    pub fn error(
        &mut self,
        src: &Source,
        span: Option<&Span>,
        subject: &Subject,
        message: impl Into<String>,
        help: Option<String>,
    ) {
        let err = Self::build(src, span, subject, message.into(), help);
        self.errors.push(err);
    }

    /// Records an error about a file that has no text to point into.
    pub fn file_error(&mut self, file: &Path, message: impl Into<String>, help: Option<String>) {
        self.errors.push(ConfigError {
            file: file.to_path_buf(),
            line: None,
            column: None,
            node: None,
            message: message.into(),
            help,
        });
    }

    /// Records a warning (allowed, but worth an operator's eye).
    pub fn warn(
        &mut self,
        src: &Source,
        span: Option<&Span>,
        subject: &Subject,
        message: impl Into<String>,
    ) {
        let warning = Self::build(src, span, subject, message.into(), None);
        self.warnings.push(warning);
    }

    /// True when at least one error was recorded.
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// The number of errors recorded so far.
    pub fn error_count(&self) -> usize {
        self.errors.len()
    }

    /// Sorts (agent config before inventory, then by line) and removes duplicates (an
    /// inherited value reported once per node becomes one report).
    pub fn finish(self, file_order: &[&Path]) -> Result<Vec<String>, ConfigErrors> {
        let order = |e: &ConfigError| {
            let file = file_order
                .iter()
                .position(|f| *f == e.file.as_path())
                .unwrap_or(file_order.len());
            (file, e.line, e.column)
        };
        let tidy = |mut list: Vec<ConfigError>| {
            list.sort_by_key(|e| order(e));
            let mut seen = Vec::new();
            list.retain(|e| {
                if seen.contains(e) {
                    false
                } else {
                    seen.push(e.clone());
                    true
                }
            });
            list
        };
        if self.errors.is_empty() {
            Ok(tidy(self.warnings)
                .iter()
                .map(ToString::to_string)
                .collect())
        } else {
            Err(ConfigErrors(tidy(self.errors)))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn locate_counts_lines_and_characters_from_one() {
        let src = Source::new("x.toml".into(), "a = 1\nbé = \"x\"\n".into());
        assert_eq!(src.locate(0), (1, 1));
        assert_eq!(src.locate(6), (2, 1));
        // "é" is two bytes but one column.
        assert_eq!(src.locate(9), (2, 3));
        assert_eq!(src.line_text(2), "bé = \"x\"");
        assert_eq!(src.line_text(9), "");
    }

    #[test]
    fn display_reads_like_a_compiler_message() {
        let err = ConfigError {
            file: "inventory.toml".into(),
            line: Some(14),
            column: Some(1),
            node: Some("worker-3".into()),
            message: "password_file /etc/x does not exist".into(),
            help: Some("create it with the BMC password on one line, or use password_env".into()),
        };
        assert_eq!(
            err.to_string(),
            "inventory.toml:14:1: node \"worker-3\": password_file /etc/x does not exist\n  \
             help: create it with the BMC password on one line, or use password_env"
        );
        let errs = ConfigErrors(vec![err.clone(), err]);
        assert_eq!(errs.to_string().matches("help:").count(), 2);
    }

    #[test]
    fn duplicates_collapse_and_order_follows_files_then_lines() {
        let src = Source::new("inv.toml".into(), "a\nb\nc\n".into());
        let mut d = Diagnostics::default();
        let g = Subject::Group("rack-a".into());
        d.error(&src, Some(&(4..4)), &g, "late", None);
        d.error(&src, Some(&(0..1)), &g, "early", None);
        d.error(&src, Some(&(0..1)), &g, "early", None);
        d.file_error(Path::new("agent.toml"), "agent", None);
        let errs = d
            .finish(&[Path::new("agent.toml"), Path::new("inv.toml")])
            .expect_err("errors were recorded");
        let text: Vec<_> = errs.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(
            text,
            ["agent", "group \"rack-a\": early", "group \"rack-a\": late"]
        );
    }
}
