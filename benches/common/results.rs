//! A bench's results as JSON, for `cargo xtask charts` (the schema is in
//! `docs/benchmarks.md`, "Results as JSON"): one file per bench, `<bench>.json`, in
//! `$NODEFENCE_BENCH_JSON_DIR`, else `$CARGO_TARGET_DIR/bench-results`, else
//! `target/bench-results` in the checkout.
//!
//! Every file has the same envelope: `schema` (this module's [`SCHEMA`]), `bench`,
//! `measured` (when, at which commit, on how many cores), `settings` (the bench's
//! shape) and `results` (its own fields: raw samples, not only summaries).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

/// The version of the envelope and of every bench's `results`; `cargo xtask charts`
/// refuses any other. Bump it when a field changes meaning or goes away.
pub const SCHEMA: u64 = 1;

/// Where the results go (see the module doc).
pub fn results_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NODEFENCE_BENCH_JSON_DIR") {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("bench-results")
}

/// Writes `<bench>.json` (the envelope around `settings` and `results`) and prints
/// where. A file that cannot be written is reported, not fatal: the measurements
/// are printed above it.
pub fn write(bench: &str, settings: Value, results: Value) {
    let document = json!({
        "schema": SCHEMA,
        "bench": bench,
        "measured": measured(),
        "settings": settings,
        "results": results,
    });
    let dir = results_dir();
    let path = dir.join(format!("{bench}.json"));
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        let text = serde_json::to_string_pretty(&document).map_err(std::io::Error::other)?;
        // Written whole or not at all: a chart never reads half a file.
        let partial = dir.join(format!(".{bench}.json.partial"));
        std::fs::write(&partial, text + "\n")?;
        std::fs::rename(&partial, &path)
    });
    match written {
        Ok(()) => println!("results as JSON: {}", path.display()),
        Err(e) => eprintln!("could not write {}: {e}", path.display()),
    }
}

/// When and where: UTC date and time, the commit (and whether the work tree had
/// changes) when git can tell, and the cores this machine offers.
fn measured() -> Value {
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(env!("CARGO_MANIFEST_DIR"))
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=7", "HEAD"]);
    let dirty = commit
        .as_ref()
        .and_then(|_| git(&["status", "--porcelain", "--untracked-files=no"]))
        .map(|changes| !changes.is_empty());
    json!({
        "date": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        "commit": commit,
        "dirty": dirty,
        "cores": std::thread::available_parallelism().map_or(0, usize::from),
    })
}
