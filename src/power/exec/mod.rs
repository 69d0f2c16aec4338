//! The external fence agent driver (`driver = "exec"`): runs a ClusterLabs fence agent
//! (`fence_redfish`, `fence_ipmilan`, `fence_apc`, ...) the way Pacemaker does.
//!
//! Every call is one agent run, with no arguments and its options on standard input,
//! one `key=value` a line: `action=` (status, off, on or reboot), the inventory's
//! `options`, `username=` from the credential (unless the options name the user) and
//! `password=`. Nothing secret is on a command line or in the environment, which
//! holds only `PATH` and `LANG=C`. How exit codes and output are read: `verdict`;
//! how the process is run, bounded and killed: `process`. One run at a time per
//! driver, each holding a permit of the shared limiter, the whole call bounded by the
//! operation timeout. The agent's success is not proof of anything:
//! [`crate::power::confirm`] reads the state back with `status`.
//!
//! The agent's own timeouts (`power_timeout`, `login_timeout`, `shell_timeout`) are
//! passed only when the inventory's `options` set them; a fence agent cannot tell the
//! machine's identity, so [`PowerDriver::machine_identity`] keeps its default.

mod process;
mod verdict;

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use secrecy::{ExposeSecret, SecretSlice, SecretString};
use tokio::sync::{Mutex, Semaphore};
use tokio::time::{Instant, timeout_at};

use self::process::{Finished, RunError};
use self::verdict::Redactor;
use crate::config::ExecTarget;
use crate::power::{PowerDriver, PowerError, PowerReading};

pub use self::process::{AGENT_PATH, OUTPUT_CAP};

/// Option names nodefence writes itself (compared with `_` as `-`, lowercase).
const RESERVED: &[&str] = &[
    "action",
    "password",
    "passwd",
    "pass",
    "password-script",
    "passwd-script",
];

/// One machine behind one fence agent.
pub struct ExecDriver {
    agent: PathBuf,
    /// The agent's file name, for messages.
    name: String,
    options: Vec<(String, String)>,
    /// Sent as `username=` (None when the options name the user themselves).
    username: Option<String>,
    password: Option<SecretString>,
    redactor: Redactor,
    operation: Duration,
    limiter: Arc<Semaphore>,
    /// Held for a whole agent run: never two actions on one machine at once.
    serial: Mutex<()>,
    endpoint: String,
}

impl ExecDriver {
    /// A driver for `target`; `limiter` bounds agent runs (and other BMC requests) in
    /// flight across all nodes. Fails (kind Config) on options or credentials that
    /// cannot be passed intact as `key=value` lines.
    pub fn new(target: &ExecTarget, limiter: Arc<Semaphore>) -> Result<Self, PowerError> {
        let name = target
            .agent
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| target.agent.display().to_string());
        let mut options = Vec::with_capacity(target.options.len());
        for (key, value) in &target.options {
            check_option(key, value)?;
            options.push((key.clone(), value.clone()));
        }
        let names_user = options
            .iter()
            .any(|(k, _)| matches!(normalized(k).as_str(), "username" | "login"));
        let (username, password) = match &target.credential {
            Some(cred) => {
                let username =
                    (!names_user && !cred.username.is_empty()).then(|| cred.username.clone());
                if let Some(u) = &username {
                    check_value(u).map_err(|why| {
                        PowerError::config(format!(
                            "the username {why}; fence agents read it as one `username=` line"
                        ))
                    })?;
                }
                check_value(cred.password.expose_secret()).map_err(|why| {
                    PowerError::config(format!(
                        "the password (from {}) {why}; fence agents read it as one `password=` line and would not get it intact",
                        cred.source
                    ))
                })?;
                (username, Some(cred.password.clone()))
            }
            None => (None, None),
        };
        let endpoint = endpoint(&name, &options);
        Ok(Self {
            agent: target.agent.clone(),
            name,
            options,
            username,
            redactor: Redactor::new(password.as_ref().map(|p| p.expose_secret())),
            password,
            operation: target.timeouts.operation,
            limiter,
            serial: Mutex::new(()),
            endpoint,
        })
    }

    /// The agent's standard input for `action`.
    fn input(&self, action: &str) -> SecretSlice<u8> {
        let mut lines: Vec<(&str, &str)> = vec![("action", action)];
        lines.extend(self.options.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        if let Some(user) = &self.username {
            lines.push(("username", user));
        }
        if let Some(password) = &self.password {
            lines.push(("password", password.expose_secret()));
        }
        // Sized exactly, so the buffer holding the password is never reallocated
        // (and left behind) before it is wrapped to be zeroed on drop.
        let len = lines.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
        let mut buf = Vec::with_capacity(len);
        for (key, value) in lines {
            buf.extend_from_slice(key.as_bytes());
            buf.push(b'=');
            buf.extend_from_slice(value.as_bytes());
            buf.push(b'\n');
        }
        buf.into()
    }

    /// One agent run of `action`, serialized, within the limiter and the deadline.
    async fn run(&self, action: &'static str) -> Result<Finished, PowerError> {
        let deadline = Instant::now() + self.operation;
        let limit = humantime::format_duration(self.operation);
        let agent = &self.name;
        let _serial = timeout_at(deadline, self.serial.lock())
            .await
            .map_err(|_| {
                PowerError::unreachable(format!(
                    "fence agent {agent} (action {action}) did not start in {limit}: the previous run for this machine had not finished"
                ))
            })?;
        let _permit = timeout_at(deadline, self.limiter.acquire())
            .await
            .map_err(|_| {
                PowerError::unreachable(format!(
                    "fence agent {agent} (action {action}) did not start in {limit}: too many power requests in flight (max_concurrent_requests)"
                ))
            })?
            .map_err(|_| PowerError::config("internal: the request limiter is closed"))?;
        let input = self.input(action);
        match process::run(&self.agent, input.expose_secret(), deadline).await {
            Ok(done) => {
                tracing::debug!(
                    agent = %self.agent.display(),
                    action,
                    code = ?done.status.code(),
                    elapsed_ms = done.elapsed.as_millis() as u64,
                    "fence agent finished"
                );
                let stderr = verdict::text(&done.stderr, &self.redactor);
                for line in stderr.lines().filter(|l| l.contains("Parse error")) {
                    tracing::warn!(agent = %self.agent.display(), "fence agent: {}", line.trim());
                }
                Ok(done)
            }
            Err(RunError::Spawn(e)) => Err(PowerError::config(format!(
                "cannot run fence agent {}: {e}",
                self.agent.display()
            ))),
            Err(RunError::TimedOut(elapsed)) => Err(PowerError::unreachable(format!(
                "fence agent {agent} (action {action}) did not finish in {limit} (operation_timeout; ran {}); it was killed",
                humantime::format_duration(Duration::from_millis(elapsed.as_millis() as u64))
            ))),
            Err(RunError::Wait(e)) => Err(PowerError::protocol(format!(
                "fence agent {agent} (action {action}): waiting for it failed: {e}; it was killed"
            ))),
        }
    }

    /// Runs a power command; success means only that the agent said so.
    async fn command(&self, action: &'static str) -> Result<(), PowerError> {
        tracing::info!(agent = %self.agent.display(), endpoint = %self.endpoint, action, "running fence agent");
        let done = self.run(action).await?;
        verdict::command(&self.name, action, &done, &self.redactor)
    }
}

#[async_trait]
impl PowerDriver for ExecDriver {
    fn driver_name(&self) -> &'static str {
        "exec"
    }

    fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    async fn status(&self) -> Result<PowerReading, PowerError> {
        let started = Instant::now();
        let done = self.run("status").await?;
        let state = verdict::status(&self.name, &done, &self.redactor)?;
        Ok(PowerReading {
            state,
            at: crate::clock::now(),
            latency: started.elapsed(),
        })
    }

    async fn power_off(&self) -> Result<(), PowerError> {
        self.command("off").await
    }

    async fn power_on(&self) -> Result<(), PowerError> {
        self.command("on").await
    }

    async fn reboot(&self) -> Result<(), PowerError> {
        self.command("reboot").await
    }
}

/// [`crate::fuzzing::fence_agent_output`]: `bytes` as what an agent printed (stdout,
/// then stderr after the first NUL) when it exited with `exit_code`, judged as a
/// `status` run and as a command, with a password to redact.
pub(crate) fn judge_for_fuzzing(bytes: &[u8], exit_code: i32) {
    use std::os::unix::process::ExitStatusExt;
    let (out, err) = match bytes.iter().position(|b| *b == 0) {
        Some(i) => (&bytes[..i], &bytes[i + 1..]),
        None => (bytes, &[][..]),
    };
    let done = process::Finished {
        status: std::process::ExitStatus::from_raw((exit_code & 0xff) << 8),
        stdout: process::Captured {
            bytes: out.to_vec(),
            incomplete: false,
        },
        stderr: process::Captured {
            bytes: err.to_vec(),
            incomplete: exit_code < 0,
        },
        stdin_error: None,
        elapsed: Duration::from_millis(5),
    };
    let redactor = verdict::Redactor::new(Some("fuzz-Secret-1"));
    let judged = verdict::status("fence_fuzz", &done, &redactor);
    if let Err(e) = &judged {
        assert!(
            !e.to_string().contains("fuzz-Secret-1"),
            "password not redacted: {e}"
        );
    }
    let _ = verdict::kind(&done, &redactor);
    let _ = verdict::excerpt(&done, &redactor);
    let _ = verdict::command("fence_fuzz", "off", &done, &redactor);
}

/// An option name as fencing.py matches it: lowercase, `_` as `-`.
fn normalized(key: &str) -> String {
    key.to_ascii_lowercase().replace('_', "-")
}

fn check_option(key: &str, value: &str) -> Result<(), PowerError> {
    match option_problem(key, value) {
        Some(why) => Err(PowerError::config(why)),
        None => Ok(()),
    }
}

/// Why the option `key = value` cannot be passed to a fence agent, if it cannot. The
/// one rule set for both the inventory loader (so `validate` refuses it, naming the
/// line) and the driver.
pub(crate) fn option_problem(key: &str, value: &str) -> Option<String> {
    let valid_name = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid_name {
        return Some(format!(
            "fence agent option {key:?} is not an option name (letters, digits, `_`, `-`)"
        ));
    }
    if RESERVED.contains(&normalized(key).as_str()) {
        return Some(format!(
            "fence agent option `{key}` is set by nodefence itself (the action, and the password from the credential); remove it from options"
        ));
    }
    if let Err(why) = check_value(value) {
        return Some(format!(
            "fence agent option `{key}` {why}; options are passed one `key=value` line each and must arrive intact"
        ));
    }
    None
}

/// Why `value` cannot be sent as one `key=value` line that fencing.py reads back
/// unchanged (it strips the line and removes one pair of surrounding double quotes).
fn check_value(value: &str) -> Result<(), &'static str> {
    if value.contains(['\n', '\r', '\0']) {
        return Err("holds a line break or NUL");
    }
    if value.trim() != value {
        return Err("begins or ends with white space, which agents strip");
    }
    if value.len() >= 2 && value.starts_with('"') && value.ends_with('"') {
        return Err("is enclosed in double quotes, which agents remove");
    }
    Ok(())
}

/// `fence_apc ip=pdu-1 plug=7`: the agent and where it points, never a secret.
fn endpoint(name: &str, options: &[(String, String)]) -> String {
    let mut out = name.to_string();
    for wanted in ["ip", "ipaddr", "ipport", "plug", "port"] {
        if let Some((key, value)) = options.iter().find(|(k, _)| normalized(k) == wanted) {
            out.push_str(&format!(" {key}={value}"));
        }
    }
    out
}
