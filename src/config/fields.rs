//! Typed reading of TOML values, with our own messages.
//!
//! The loader does not hand whole files to serde: serde stops at the first bad field of
//! a table and its messages quote the offending value ("invalid type: integer `12345`,
//! expected a string"), which for a `password` is the secret itself. Instead every key
//! of the spanned document tree (`toml::de::DeTable`) is read here, one at a time, so
//! every bad key of every node is reported, each with its own span, and a message that
//! names the key and the expected type but never repeats the value.

use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::diagnostic::Span;

/// A value read from the file, with where its key and its value are.
#[derive(Debug, Clone)]
pub(crate) struct Val<T> {
    pub value: T,
    /// Span of the key (for "this key ..." errors).
    pub key: Span,
    /// Span of the value (for "this value ..." errors).
    pub span: Span,
}

impl<T> Val<T> {
    pub fn new(value: T, key: Span, span: Span) -> Self {
        Self { value, key, span }
    }

    /// The same place with another value.
    pub fn with<U>(&self, value: U) -> Val<U> {
        Val {
            value,
            key: self.key.clone(),
            span: self.span.clone(),
        }
    }
}

/// A problem with one value: message, optional help, where.
#[derive(Debug, Clone)]
pub(crate) struct Problem {
    pub span: Span,
    pub message: String,
    pub help: Option<String>,
}

impl Problem {
    pub fn new(span: &Span, message: impl Into<String>, help: Option<String>) -> Self {
        Self {
            span: span.clone(),
            message: message.into(),
            help,
        }
    }
}

/// One `key = value` of a table.
pub(crate) struct Entry<'a, 'i> {
    pub name: &'a str,
    pub key: Span,
    pub value: &'a Spanned<DeValue<'i>>,
}

impl<'a, 'i> Entry<'a, 'i> {
    /// Every entry of `table`, in file order.
    pub fn all(table: &'a DeTable<'i>) -> Vec<Self> {
        let mut entries: Vec<_> = table
            .iter()
            .map(|(k, v)| Entry {
                name: k.get_ref().as_ref(),
                key: k.span(),
                value: v,
            })
            .collect();
        entries.sort_by_key(|e| e.key.start);
        entries
    }

    fn span(&self) -> Span {
        self.value.span()
    }

    fn wrong_type(&self, expected: &str, example: &str) -> Problem {
        let found = self.value.get_ref().type_str();
        Problem::new(
            &self.span(),
            format!("`{}` must be {expected}, found {found}", self.name),
            Some(format!("write it like {} = {example}", self.name)),
        )
    }

    /// A string value.
    pub fn string(&self) -> Result<Val<String>, Problem> {
        match self.value.get_ref() {
            DeValue::String(s) => Ok(Val::new(s.to_string(), self.key.clone(), self.span())),
            _ => Err(self.wrong_type("a string", "\"...\"")),
        }
    }

    /// A non-empty string value.
    pub fn non_empty_string(&self) -> Result<Val<String>, Problem> {
        let v = self.string()?;
        if v.value.trim().is_empty() {
            return Err(Problem::new(
                &v.span,
                format!("`{}` is empty", self.name),
                Some(format!("give a value or remove `{}`", self.name)),
            ));
        }
        Ok(v)
    }

    /// A boolean value.
    pub fn bool(&self) -> Result<Val<bool>, Problem> {
        match self.value.get_ref() {
            DeValue::Boolean(b) => Ok(Val::new(*b, self.key.clone(), self.span())),
            _ => Err(self.wrong_type("true or false", "true")),
        }
    }

    /// An integer in `min..=max`.
    pub fn integer(&self, min: i64, max: i64, example: i64) -> Result<Val<i64>, Problem> {
        let DeValue::Integer(i) = self.value.get_ref() else {
            return Err(self.wrong_type("an integer", &example.to_string()));
        };
        let n = i64::from_str_radix(i.as_str(), i.radix()).ok();
        match n {
            Some(n) if (min..=max).contains(&n) => Ok(Val::new(n, self.key.clone(), self.span())),
            _ if max == i64::MAX => Err(Problem::new(
                &self.span(),
                format!("`{}` must be at least {min}", self.name),
                None,
            )),
            _ => Err(Problem::new(
                &self.span(),
                format!("`{}` must be between {min} and {max}", self.name),
                None,
            )),
        }
    }

    /// A humantime duration string ("10s", "2m", "1h 30m"); zero only if `allow_zero`.
    pub fn duration(&self, allow_zero: bool) -> Result<Val<Duration>, Problem> {
        let help = Some(DURATION_HELP.to_string());
        let DeValue::String(s) = self.value.get_ref() else {
            let found = self.value.get_ref().type_str();
            return Err(Problem::new(
                &self.span(),
                format!(
                    "`{}` must be a duration string, found {found} (a bare number has no unit)",
                    self.name
                ),
                help,
            ));
        };
        match humantime::parse_duration(s.trim()) {
            Ok(d) if d.is_zero() && !allow_zero => Err(Problem::new(
                &self.span(),
                format!("`{}` must be greater than zero", self.name),
                help,
            )),
            Ok(d) if d > MAX_DURATION => Err(Problem::new(
                &self.span(),
                format!(
                    "`{}` is {}, above the longest nodefence accepts ({})",
                    self.name,
                    humantime::format_duration(d),
                    max_duration_text()
                ),
                Some(
                    "a setting this long is a typo (a missing or extra digit, or the wrong unit); \
                     no timer nodefence keeps needs more than a year"
                        .to_string(),
                ),
            )),
            Ok(d) => Ok(Val::new(d, self.key.clone(), self.span())),
            Err(e) => Err(Problem::new(
                &self.span(),
                format!("`{}` is not a valid duration: {e}", self.name),
                help,
            )),
        }
    }

    /// A table value.
    pub fn table(&self) -> Result<&'a DeTable<'i>, Problem> {
        match self.value.get_ref() {
            DeValue::Table(t) => Ok(t),
            _ => Err(self.wrong_type("a table", "{ ... }")),
        }
    }
}

/// The longest duration any setting accepts. Every timer is `Instant + setting`
/// (or a small multiple of it), which cannot overflow below this bound; a longer
/// value is a typo.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// [`MAX_DURATION`] as an operator reads it ("366 days").
pub fn max_duration_text() -> String {
    format!("{} days", MAX_DURATION.as_secs() / 86_400)
}

/// Accepted duration forms, shown with every duration error.
pub(crate) const DURATION_HELP: &str = "write a number with a unit, e.g. \"500ms\", \"10s\", \"2m\", \"1h 30m\" \
     (units: ms, s, m, h, d; also sec, min, hour)";

/// "unknown key" with the closest allowed key, or the list of allowed keys.
pub(crate) fn unknown_key(name: &str, key: &Span, allowed: &[&str], place: &str) -> Problem {
    let help = match closest(name, allowed) {
        Some(best) => format!("did you mean `{best}`?"),
        None => format!("allowed keys {place}: {}", allowed.join(", ")),
    };
    Problem::new(key, format!("unknown key `{name}` {place}"), Some(help))
}

/// The candidate closest to `word`, if it is close enough to be a likely typo.
pub(crate) fn closest<'c>(word: &str, candidates: &[&'c str]) -> Option<&'c str> {
    let norm = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    let word_n = norm(word);
    let limit = (word.chars().count() / 3).clamp(1, 3);
    candidates
        .iter()
        .map(|c| (edit_distance(&word_n, &norm(c)), *c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn with_entry<R>(doc: &str, f: impl FnOnce(&Entry) -> R) -> R {
        let table = DeTable::parse(doc).expect("valid toml");
        let entries = Entry::all(table.get_ref());
        f(&entries[0])
    }

    #[test]
    fn closest_match_catches_typos_and_dashes() {
        let allowed = ["password_file", "password_env", "endpoint"];
        assert_eq!(closest("password-file", &allowed), Some("password_file"));
        assert_eq!(closest("endpont", &allowed), Some("endpoint"));
        assert_eq!(closest("colour", &allowed), None);
    }

    #[test]
    fn wrong_type_names_key_and_types_but_not_the_value() {
        let p = with_entry("password = 8675309\n", |e| e.string().unwrap_err());
        assert_eq!(p.message, "`password` must be a string, found integer");
        assert!(!p.message.contains("8675309"));
        assert!(!p.help.unwrap_or_default().contains("8675309"));
    }

    #[test]
    fn durations_need_a_unit_and_zero_only_where_allowed() {
        let p = with_entry("t = 5\n", |e| e.duration(false).unwrap_err());
        assert!(
            p.message.contains("bare number has no unit"),
            "{}",
            p.message
        );
        assert!(p.help.unwrap_or_default().contains("\"10s\""));
        let p = with_entry("t = \"5\"\n", |e| e.duration(false).unwrap_err());
        assert!(p.message.contains("not a valid duration"), "{}", p.message);
        let p = with_entry("t = \"0s\"\n", |e| e.duration(false).unwrap_err());
        assert!(p.message.contains("greater than zero"), "{}", p.message);
        let d = with_entry("t = \"0s\"\n", |e| e.duration(true).unwrap());
        assert!(d.value.is_zero());
        let d = with_entry("t = \"1h 30m\"\n", |e| e.duration(false).unwrap());
        assert_eq!(d.value, Duration::from_secs(5400));
    }

    #[test]
    fn integers_are_range_checked_in_any_radix() {
        let v = with_entry("p = 0x26f\n", |e| e.integer(1, 65535, 623).unwrap());
        assert_eq!(v.value, 623);
        let p = with_entry("p = 70000\n", |e| e.integer(1, 65535, 623).unwrap_err());
        assert_eq!(p.message, "`p` must be between 1 and 65535");
        let p = with_entry("p = \"623\"\n", |e| e.integer(1, 65535, 623).unwrap_err());
        assert_eq!(p.help.as_deref(), Some("write it like p = 623"));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Any duration written in seconds (or its humantime rendering) is accepted
            /// exactly when it is within the bound, and then read back unchanged; a
            /// timer built from an accepted one never overflows.
            #[test]
            fn durations_are_bounded_and_exact(secs in 0u64..(2 * MAX_DURATION.as_secs()), formatted: bool) {
                let d = Duration::from_secs(secs);
                let text = if formatted {
                    humantime::format_duration(d).to_string()
                } else {
                    format!("{secs}s")
                };
                let got = with_entry(&format!("t = \"{text}\"\n"), |e| e.duration(true));
                match got {
                    Ok(v) => {
                        prop_assert!(d <= MAX_DURATION);
                        prop_assert_eq!(v.value, d);
                        prop_assert!(std::time::Instant::now().checked_add(v.value * 16).is_some());
                    }
                    Err(p) => {
                        prop_assert!(d > MAX_DURATION, "{} refused: {}", text, p.message);
                        prop_assert!(p.message.contains("above the longest"), "{}", p.message);
                    }
                }
            }

            /// Whatever the string, reading it as a duration returns (an error or a
            /// value within the bound), never panics.
            #[test]
            fn any_string_is_an_answer(raw in "\\PC{0,30}") {
                let doc = format!("t = {}\n", toml::Value::String(raw));
                if let Ok(v) = with_entry(&doc, |e| e.duration(true)) {
                    prop_assert!(v.value <= MAX_DURATION);
                }
            }
        }
    }
}
