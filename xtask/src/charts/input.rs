//! Reading a bench's JSON results (`benches/common/results.rs` writes them): the
//! envelope every file shares, checked before anything else (a file of another schema
//! is refused as such, not as a pile of missing fields), then the bench's own
//! `settings` and `results` into the chart's types. Every error names the file and
//! the field (`results.power_loss[2].pod_running_s`).

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// The schema this xtask reads (`benches/common/results.rs`: `SCHEMA`).
pub const SCHEMA: u64 = 1;

/// When and where the bench ran.
#[derive(Debug, Clone, Deserialize)]
pub struct Measured {
    /// RFC 3339, UTC.
    pub date: String,
    pub commit: Option<String>,
    /// Whether the work tree had changes beside the commit.
    pub dirty: Option<bool>,
    pub cores: u64,
}

/// A bench's results file, read and checked.
#[derive(Debug, Clone)]
pub struct BenchFile<S, R> {
    pub path: PathBuf,
    pub measured: Measured,
    /// A word on where the figures come from (the fixture says it is one).
    pub note: Option<String>,
    pub settings: S,
    pub results: R,
}

#[derive(Deserialize)]
struct Envelope<S, R> {
    measured: Measured,
    #[serde(default)]
    note: Option<String>,
    settings: S,
    results: R,
}

/// An error about `field` of `path`.
pub fn field_error(path: &Path, field: &str, what: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("{}: field `{field}`: {what}", path.display())
}

/// Reads `path`, the results of `bench`.
pub fn read<S: DeserializeOwned, R: DeserializeOwned>(
    path: &Path,
    bench: &str,
) -> anyhow::Result<BenchFile<S, R>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| anyhow!("{}: not valid JSON: {e}", path.display()))?;
    if !value.is_object() {
        bail!("{}: not a bench result (a JSON object)", path.display());
    }
    match value.get("schema") {
        None => return Err(field_error(path, "schema", "missing")),
        Some(schema) => match schema.as_u64() {
            Some(SCHEMA) => {}
            Some(other) => {
                return Err(field_error(
                    path,
                    "schema",
                    format!(
                        "unknown schema {other}: this xtask reads schema {SCHEMA} \
                         (re-run the bench, or update xtask/src/charts)"
                    ),
                ));
            }
            None => {
                return Err(field_error(
                    path,
                    "schema",
                    format!("expected a whole number, found {schema}"),
                ));
            }
        },
    }
    match value.get("bench").and_then(serde_json::Value::as_str) {
        Some(name) if name == bench => {}
        Some(name) => {
            return Err(field_error(
                path,
                "bench",
                format!("{name:?}, expected {bench:?} (the file's name)"),
            ));
        }
        None => return Err(field_error(path, "bench", "missing, or not a string")),
    }
    let envelope: Envelope<S, R> = serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        field_error(path, &field, e.into_inner())
    })?;
    Ok(BenchFile {
        path: path.to_path_buf(),
        measured: envelope.measured,
        note: envelope.note,
        settings: envelope.settings,
        results: envelope.results,
    })
}

impl<S, R> BenchFile<S, R> {
    /// An error about `field` of this file.
    pub fn error(&self, field: &str, what: impl std::fmt::Display) -> anyhow::Error {
        field_error(&self.path, field, what)
    }

    /// The footnote: when, at which commit, on how many cores, and the note.
    pub fn footnote(&self, command: &str) -> String {
        let m = &self.measured;
        let commit = match (&m.commit, m.dirty) {
            (Some(c), Some(true)) => format!(" at {c} (with local changes)"),
            (Some(c), _) => format!(" at {c}"),
            (None, _) => String::new(),
        };
        let note = self
            .note
            .as_ref()
            .map_or(String::new(), |n| format!(" · {n}"));
        format!(
            "measured {}{commit}, {} cores · {command}{note}",
            m.date, m.cores
        )
    }
}
