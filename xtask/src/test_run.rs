//! `cargo xtask test [ARGS]`: the README's test command. It runs
//! `cargo test --workspace ARGS` with its output passed through as it comes, and
//! `NODEFENCE_SKIP_DIR` pointing at a fresh directory under the target directory.
//! A test whose peer program is missing writes one record there
//! (`nodefence_mocks::peers::skip`: one file, one line, the test, its binary, the
//! missing peer and the command that installs it, separated by tabs). At the end the
//! run lists every skipped test (or says none was), adds up cargo's
//! `test result:` lines with the skips taken out of "passed", and exits with cargo's
//! exit code.
//!
//! Unless `RUST_TEST_THREADS` is set, each test binary runs
//! [`TEST_THREADS_PER_CORE`] tests per core: the end-to-end tests mostly wait (on
//! cluster time, on mock BMCs, on the daemon's own timers), so cores sit idle at one
//! test each.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::Context as _;

/// The variable the skip sites read (`nodefence_mocks::peers::SKIP_DIR`).
const SKIP_DIR_VARIABLE: &str = "NODEFENCE_SKIP_DIR";
/// Tests run at once per core when `RUST_TEST_THREADS` is not set. At 2 the
/// integration binary (`tests/integration.rs`) takes 270 s on 2 cores, down from 560 s
/// at one per core, with the CPU 45% busy. At 4 (170 s) a wait with a 30 s deadline
/// timed out under the load: their deadlines are for a machine that is not saturated.
const TEST_THREADS_PER_CORE: usize = 2;

/// The extension of a record file (`nodefence_mocks::peers::RECORD_EXTENSION`).
const RECORD_EXTENSION: &str = "skip";

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Passed on to `cargo test --workspace`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub cargo_args: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // What followed `test` on the command line, as typed: clap (which answers
    // `--help`) drops a `--` that comes first (`cargo xtask test -- --nocapture`), and
    // cargo test needs it.
    let cargo_args: Vec<OsString> = std::env::args_os()
        .skip_while(|a| a != "test")
        .skip(1)
        .collect();
    debug_assert!(cargo_args.len() >= args.cargo_args.len());
    let skip_dir = fresh_skip_dir()?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut command = Command::new(&cargo);
    for (name, _) in std::env::vars_os() {
        if set_by_cargo_run(&name.to_string_lossy()) {
            command.env_remove(name);
        }
    }
    let mut child = command
        .args(["test", "--workspace"])
        .args(&cargo_args)
        .env(SKIP_DIR_VARIABLE, &skip_dir)
        .envs(default_test_threads())
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", Path::new(&cargo).display()))?;
    let mut totals = Totals::default();
    if let Some(mut stdout) = child.stdout.take() {
        let mut out = std::io::stdout();
        let mut forwarding = true;
        let mut line = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = stdout
                .read(&mut buf)
                .context("reading cargo test's output")?;
            if n == 0 {
                break;
            }
            // Passed through as it comes (a test's name before its result, too); once
            // stdout is closed (`| head`), the run goes on and is still counted.
            if forwarding {
                forwarding = out.write_all(&buf[..n]).and_then(|()| out.flush()).is_ok();
            }
            for &byte in &buf[..n] {
                if byte == b'\n' {
                    totals.add_line(&String::from_utf8_lossy(&line));
                    line.clear();
                } else {
                    line.push(byte);
                }
            }
        }
        totals.add_line(&String::from_utf8_lossy(&line));
    }
    let status = child.wait().context("waiting for cargo test")?;
    let skips = read_skips(&skip_dir)?;
    let _ = std::io::stdout().write_all(summary(&skips, &totals).as_bytes());
    std::fs::remove_dir_all(&skip_dir)
        .with_context(|| format!("removing {}", skip_dir.display()))?;
    // A test binary killed by a signal: cargo itself was, or reports 101.
    let code = status.code().unwrap_or(101);
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// `RUST_TEST_THREADS` for cargo test, unless the caller set it.
fn default_test_threads() -> Option<(&'static str, String)> {
    if std::env::var_os("RUST_TEST_THREADS").is_some() {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    Some((
        "RUST_TEST_THREADS",
        (cores * TEST_THREADS_PER_CORE).to_string(),
    ))
}

/// Whether `cargo run` set this variable for xtask itself (`CARGO_PKG_NAME=xtask`,
/// ...). The `cargo test` started here must not inherit them: cargo compares a build
/// script's `rerun-if-env-changed` variables (ring's include `CARGO_PKG_NAME` and
/// `CARGO_MANIFEST_DIR`) with its own environment, so they would rebuild ring and
/// everything above it, and a plain `cargo test` after that once more.
fn set_by_cargo_run(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_MANIFEST_")
        || matches!(
            name,
            "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE" | "OUT_DIR"
        )
}

/// `<target dir>/xtask-test/skips-<pid>`, empty.
fn fresh_skip_dir() -> anyhow::Result<PathBuf> {
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => {
            std::path::absolute(PathBuf::from(dir)).context("making CARGO_TARGET_DIR absolute")?
        }
        // This program is `<target dir>/<profile>/xtask`.
        None => {
            let exe = std::env::current_exe().context("finding xtask's own path")?;
            exe.parent()
                .and_then(Path::parent)
                .map(Path::to_path_buf)
                .with_context(|| format!("no target directory above {}", exe.display()))?
        }
    };
    let dir = target
        .join("xtask-test")
        .join(format!("skips-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// One skipped test, as read back from its record.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Skip {
    binary: String,
    test: String,
    peer: String,
    install: String,
}

impl Skip {
    /// A record's line: test, binary, peer, install, separated by tabs.
    fn parse(line: &str) -> Option<Skip> {
        let mut fields = line.trim_end_matches(['\n', '\r']).split('\t');
        let skip = Skip {
            test: fields.next()?.to_string(),
            binary: fields.next()?.to_string(),
            peer: fields.next()?.to_string(),
            install: fields.next()?.to_string(),
        };
        (fields.next().is_none() && !skip.test.is_empty()).then_some(skip)
    }
}

/// Every record in `dir`, sorted by binary and test, duplicates once.
fn read_skips(dir: &Path) -> anyhow::Result<Vec<Skip>> {
    let mut skips = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry
            .with_context(|| format!("reading {}", dir.display()))?
            .path();
        if path.extension().is_none_or(|e| e != RECORD_EXTENSION) {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let skip = Skip::parse(line)
                .with_context(|| format!("{}: not a skip record: {line:?}", path.display()))?;
            skips.push(skip);
        }
    }
    skips.sort();
    skips.dedup();
    Ok(skips)
}

/// cargo's `test result:` lines added up.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Totals {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl Totals {
    /// Adds `test result: ok. 12 passed; 0 failed; 1 ignored; ...` (libtest's last
    /// line per binary); other lines change nothing.
    fn add_line(&mut self, line: &str) {
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            return;
        };
        let Some((_, counts)) = rest.split_once(". ") else {
            return;
        };
        for part in counts.split(';') {
            let mut words = part.split_whitespace();
            let (Some(n), Some(what)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            match what {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                "ignored" => self.ignored += n,
                _ => {}
            }
        }
    }
}

/// The end of the run: the skipped tests (each with its peer), the commands that
/// install those peers, and one closing line of counts.
fn summary(skips: &[Skip], totals: &Totals) -> String {
    let mut out = String::from("\n");
    if skips.is_empty() {
        out.push_str("cargo xtask test: no test skipped\n");
    } else {
        out.push_str(&format!(
            "cargo xtask test: {} skipped (a peer they check against is not installed; \
             cargo counted them as passed):\n",
            count(skips.len(), "test")
        ));
        let header = ("binary", "test", "missing peer");
        let binary_width = skips
            .iter()
            .map(|s| s.binary.len())
            .chain([header.0.len()])
            .max()
            .unwrap_or(0);
        let test_width = skips
            .iter()
            .map(|s| s.test.len())
            .chain([header.1.len()])
            .max()
            .unwrap_or(0);
        out.push_str(&format!(
            "  {:binary_width$}  {:test_width$}  {}\n",
            header.0, header.1, header.2
        ));
        for s in skips {
            out.push_str(&format!(
                "  {:binary_width$}  {:test_width$}  {}\n",
                s.binary, s.test, s.peer
            ));
        }
        // Each install command once, with the peers it brings.
        let mut installs: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for s in skips {
            let peers = installs.entry(s.install.as_str()).or_default();
            if !peers.contains(&s.peer.as_str()) {
                peers.push(&s.peer);
            }
        }
        out.push_str("To install them:\n");
        for (install, peers) in installs {
            out.push_str(&format!("  {}: {install}\n", peers.join(", ")));
        }
    }
    if totals.ignored > 0 {
        out.push_str(&format!(
            "({} not run: #[ignore])\n",
            count(
                usize::try_from(totals.ignored).unwrap_or(usize::MAX),
                "test"
            )
        ));
    }
    let skipped = u64::try_from(skips.len()).unwrap_or(u64::MAX);
    out.push_str(&format!(
        "tests: {} passed, {} failed, {} skipped\n",
        totals.passed.saturating_sub(skipped),
        totals.failed,
        skipped
    ));
    out
}

fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn skip(binary: &str, test: &str, peer: &str, install: &str) -> Skip {
        Skip {
            binary: binary.into(),
            test: test.into(),
            peer: peer.into(),
            install: install.into(),
        }
    }

    #[test]
    fn what_cargo_run_set_for_xtask_is_not_passed_on_and_the_rest_is() {
        for set in [
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_CRATE_NAME",
            "CARGO_BIN_NAME",
            "CARGO_PRIMARY_PACKAGE",
        ] {
            assert!(set_by_cargo_run(set), "{set}");
        }
        for kept in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
            "CARGO_TERM_COLOR",
            "NODEFENCE_REQUIRE_PEERS",
            "PATH",
        ] {
            assert!(!set_by_cargo_run(kept), "{kept}");
        }
    }

    #[test]
    fn a_record_line_has_four_fields() {
        assert_eq!(
            Skip::parse("t::a\tipmitool\tipmitool\tapt-get install ipmitool\n"),
            Some(skip(
                "ipmitool",
                "t::a",
                "ipmitool",
                "apt-get install ipmitool"
            ))
        );
        assert_eq!(Skip::parse("t::a\tbin\tpeer"), None, "a field missing");
        assert_eq!(Skip::parse("t::a\tbin\tpeer\tinstall\textra"), None);
        assert_eq!(Skip::parse("\tbin\tpeer\tinstall"), None, "no test name");
    }

    #[test]
    fn the_records_of_a_directory_are_read_sorted_and_once() {
        let dir = std::env::temp_dir().join(format!("xtask-skips-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("b-1-0.skip"), "z::t\tb\tpeer\tinstall\n").unwrap();
        std::fs::write(dir.join("a-1-0.skip"), "y::t\ta\tpeer\tinstall\n").unwrap();
        std::fs::write(dir.join("a-1-1.skip"), "y::t\ta\tpeer\tinstall\n").unwrap();
        std::fs::write(dir.join("notes.txt"), "not a record").unwrap();
        let read = read_skips(&dir);
        std::fs::write(dir.join("bad-1-0.skip"), "only one field\n").unwrap();
        let bad = read_skips(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            read.unwrap(),
            [
                skip("a", "y::t", "peer", "install"),
                skip("b", "z::t", "peer", "install")
            ]
        );
        let error = format!("{:#}", bad.unwrap_err());
        assert!(error.contains("bad-1-0.skip: not a skip record"), "{error}");
    }

    #[test]
    fn result_lines_are_added_up_and_other_lines_ignored() {
        let mut totals = Totals::default();
        for line in [
            "running 3 tests",
            "test a ... ok",
            "test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s",
            "",
            "test result: FAILED. 10 passed; 2 failed; 0 ignored; 0 measured; 5 filtered out; finished in 9.50s",
            "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s",
            "a test printing test result: nothing",
        ] {
            totals.add_line(line);
        }
        assert_eq!(
            totals,
            Totals {
                passed: 13,
                failed: 2,
                ignored: 1
            }
        );
    }

    #[test]
    fn the_summary_names_each_skip_its_peer_and_the_install_command_once() {
        let skips = [
            skip(
                "aws_driver",
                "status_reads_instances",
                "moto_server",
                "pip install moto",
            ),
            skip(
                "aws_driver",
                "fence_stops_an_instance",
                "moto_server",
                "pip install moto",
            ),
            skip(
                "prometheus",
                "alerts_evaluate",
                "prometheus",
                "apt-get install prometheus",
            ),
        ];
        let totals = Totals {
            passed: 10,
            failed: 1,
            ignored: 0,
        };
        assert_eq!(
            summary(&skips, &totals),
            "\n\
             cargo xtask test: 3 tests skipped (a peer they check against is not installed; cargo counted them as passed):\n\
             \x20 binary      test                     missing peer\n\
             \x20 aws_driver  status_reads_instances   moto_server\n\
             \x20 aws_driver  fence_stops_an_instance  moto_server\n\
             \x20 prometheus  alerts_evaluate          prometheus\n\
             To install them:\n\
             \x20 prometheus: apt-get install prometheus\n\
             \x20 moto_server: pip install moto\n\
             tests: 7 passed, 1 failed, 3 skipped\n"
        );
    }

    #[test]
    fn a_run_without_skips_says_so() {
        let totals = Totals {
            passed: 5,
            failed: 0,
            ignored: 2,
        };
        assert_eq!(
            summary(&[], &totals),
            "\ncargo xtask test: no test skipped\n(2 tests not run: #[ignore])\ntests: 5 passed, 0 failed, 0 skipped\n"
        );
    }
}
