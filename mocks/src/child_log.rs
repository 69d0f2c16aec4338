//! A log file of its own for a mock binary (`mock-redfish`, `mock-ipmi`, `fake-kube`)
//! that a test spawns, so its INFO lines stay out of the test run's output and a
//! failure about that process can name the file to read.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The file a spawned binary's stderr (or stdout) goes to.
#[derive(Debug)]
pub struct ChildLog {
    path: PathBuf,
    file: File,
}

impl ChildLog {
    /// Creates `<dir>/mock-logs/<binary>-<test>-<pid>-<n>.log`: `dir` is the test
    /// crate's `env!("CARGO_TARGET_TMPDIR")`, `<test>` the running test (libtest's
    /// thread name), `<pid>` the test process, `<n>` counts this process's logs.
    ///
    /// # Panics
    /// When the file cannot be created.
    pub fn create(dir: impl AsRef<Path>, binary: &str) -> ChildLog {
        static CREATED: AtomicUsize = AtomicUsize::new(0);
        let dir = dir.as_ref().join("mock-logs");
        let test: String = crate::peers::current_test_name()
            .replace("::", ".")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '.'
                }
            })
            .collect();
        let n = CREATED.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("{binary}-{test}-{}-{n}.log", std::process::id()));
        let file = std::fs::create_dir_all(&dir)
            .and_then(|()| File::create(&path))
            .unwrap_or_else(|e| panic!("creating the log file {}: {e}", path.display()));
        ChildLog { path, file }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A handle on the file for `Command::stderr` (or `stdout`).
    ///
    /// # Panics
    /// When the file handle cannot be duplicated.
    pub fn stdio(&self) -> Stdio {
        let file = self
            .file
            .try_clone()
            .unwrap_or_else(|e| panic!("duplicating the handle of {}: {e}", self.path.display()));
        Stdio::from(file)
    }

    /// What the binary has written so far (empty if unreadable).
    pub fn contents(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap_or_default()
    }
}

impl std::fmt::Display for ChildLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.path.display())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_child_writes_to_its_own_file_named_after_the_binary_and_the_test() {
        let dir = tempfile::tempdir().unwrap();
        let log = ChildLog::create(dir.path(), "mock-redfish");
        let name = log
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            name.starts_with(&format!(
                "mock-redfish-child_log.tests.a_child_writes_to_its_own_file_named_after_the_binary_and_the_test-{}-",
                std::process::id()
            )),
            "{name}"
        );
        assert!(log.path().starts_with(dir.path().join("mock-logs")));
        let status = std::process::Command::new("sh")
            .args(["-c", "echo INFO listening >&2"])
            .stderr(log.stdio())
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(log.contents(), "INFO listening\n");
        let other = ChildLog::create(dir.path(), "mock-redfish");
        assert_ne!(other.path(), log.path(), "a second child gets its own file");
    }
}
