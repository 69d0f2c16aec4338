//! Starting one of the crate's binaries as a script does: stdout piped for its ready
//! line (`<name> listening on <url>`), stderr into a [`ChildLog`] that failures name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use nodefence_mocks::child_log::ChildLog;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A started binary, the URL its ready line gave, and its log.
pub struct Started {
    pub child: Child,
    pub url: String,
    pub log: ChildLog,
}

/// Spawns `command` (the binary `name`, killed when dropped) and waits up to 20 s for
/// its ready line.
pub async fn start(mut command: Command, name: &str) -> Started {
    let log = ChildLog::create(env!("CARGO_TARGET_TMPDIR"), name);
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log.stdio())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {name}: {e}"));
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("{name} printed no ready line within 20 s; its log: {log}"))
        .expect("reading stdout")
        .unwrap_or_else(|| panic!("{name} exited before it was ready; its log: {log}"));
    let url = line
        .strip_prefix(&format!("{name} listening on "))
        .unwrap_or_else(|| panic!("unexpected ready line {line:?}; its log: {log}"))
        .to_owned();
    Started { child, url, log }
}
