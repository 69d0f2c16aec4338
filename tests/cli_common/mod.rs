//! Shared helpers for the tests that run the `nodefence` binary against a config
//! directory on disk (`cli.rs`, `identity.rs`, `exec_driver.rs`, `ipmi_driver.rs`
//! through `ipmi_common`, `ipmi_peers.rs` through `peers`): running the binary,
//! reading its output, and writing a 0600 secret file and the agent's
//! `nodefence.toml`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

/// Runs `nodefence --config <config> <args>` with stdin closed and waits for it.
pub async fn nodefence(config: &Path, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_nodefence"))
        .arg("--config")
        .arg(config)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("nodefence runs")
}

/// [`nodefence`], failing the test (and killing the process) after `limit`.
pub async fn nodefence_within(config: &Path, args: &[&str], limit: Duration) -> Output {
    tokio::time::timeout(limit, nodefence(config, args))
        .await
        .unwrap_or_else(|_| panic!("nodefence finishes within {limit:?}"))
}

/// Standard output followed by standard error, lossily decoded.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Writes a file holding `content` on one line (a trailing newline is added), mode
/// 0600 on Unix as nodefence requires of secret files.
pub fn write_secret(path: &Path, content: &str) {
    std::fs::write(path, format!("{content}\n")).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

/// Writes `dir/nodefence.toml`: `inventory = "inventory.toml"` and a `[power]`
/// section with the given confirmation settings (durations as TOML strings'
/// contents, e.g. `"50ms"`). Returns its path.
pub fn write_agent_config(
    dir: &Path,
    confirm_readings: u32,
    confirm_interval: &str,
    confirm_timeout: &str,
) -> PathBuf {
    let path = dir.join("nodefence.toml");
    std::fs::write(
        &path,
        format!(
            "inventory = \"inventory.toml\"\n[power]\nconfirm_readings = {confirm_readings}\n\
             confirm_interval = \"{confirm_interval}\"\nconfirm_timeout = \"{confirm_timeout}\"\n"
        ),
    )
    .unwrap();
    path
}

/// The installed ClusterLabs fence agent `name` (Debian `fence-agents`), or `None`
/// after the test is reported skipped; with `NODEFENCE_REQUIRE_PEERS=1` (CI) a
/// missing agent fails the test instead.
pub fn fence_agent(name: &str) -> Option<PathBuf> {
    nodefence_mocks::peers::fence_agent(name)
}
