//! Finding a real peer program (ipmitool, a ClusterLabs fence agent) for the interop
//! tests. Without it a test prints a "skipped" line and returns, unless
//! `NODEFENCE_REQUIRE_PEERS=1` (CI), which makes its absence a failure.
#![allow(dead_code)]

use std::io::Write as _;
use std::path::PathBuf;

/// `binary` from `PATH` or `dirs`, or `None` after printing why the test is skipped.
///
/// # Panics
/// When it is missing and `NODEFENCE_REQUIRE_PEERS=1`.
pub fn find(binary: &str, dirs: &[&str], package: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .chain(dirs.iter().map(PathBuf::from))
        .map(|dir| dir.join(binary))
        .find(|p| p.is_file());
    if found.is_some() {
        return found;
    }
    let required = std::env::var("NODEFENCE_REQUIRE_PEERS").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{binary} is not installed but NODEFENCE_REQUIRE_PEERS=1 (apt-get install {package})"
    );
    // Written past libtest's capture so the skip is visible in every run.
    let _ = writeln!(
        std::io::stderr(),
        "skipped: {binary} not installed (apt-get install {package})"
    );
    None
}
