//! Helpers the benches share (`mod common;` in each): settings from the environment,
//! percentiles, milliseconds, files and peers, a process's CPU and memory, the results
//! as JSON ([`results`]), and companions on a network of their own ([`remote`]).
#![allow(dead_code, clippy::unwrap_used)]

#[cfg(target_os = "linux")]
pub mod remote;
pub mod results;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// The environment variable `name` parsed, or `default` when unset or unparsable (a
/// bench's shape: `NODES`, `CONCURRENCY`, ...).
pub fn env_or<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `p` quantile (0.0–1.0) of `sorted`, nearest rank; `sorted` must not be empty.
pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Writes `content` to `path`, readable by its owner only (as the loader asks of a
/// file that holds a password).
pub fn write_secret(path: &Path, content: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, content).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// A ClusterLabs fence agent (`fence_redfish`, ...) where Debian installs it.
pub fn find_agent(name: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/sbin", "/usr/local/sbin"]
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
}

/// `(utime + stime)` of process `pid` in seconds, and its RSS and peak RSS in MiB
/// (Linux: `/proc`).
pub fn process_usage(pid: u32) -> (f64, f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // Fields after the `(comm)`, which may hold spaces: state is field 3, utime 14.
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib = |key: &str| -> f64 {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    (
        ticks / clock_ticks(),
        kib("VmRSS:") / 1024.0,
        kib("VmHWM:") / 1024.0,
    )
}

/// The kernel's clock ticks a second (`getconf CLK_TCK`; 100 if it cannot say).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}
