//! What one fence agent run means: the exit code read by the ClusterLabs rules, with
//! the agent's output as corroboration, and error messages made from a short,
//! redacted excerpt of that output.
//!
//! `status`: exit 0 is On and exit 2 is Off, but exit 2 is also what `python3` returns
//! when it cannot open the script and what `sh` returns for a syntax error. So Off
//! is believed only when the agent also printed `Status: OFF` (every fencing.py agent
//! does) and nothing contradicts it. Everything else is an error, never Off.

use secrecy::{ExposeSecret, SecretString};

use super::process::{Captured, Finished};
use crate::power::{PowerError, PowerErrorKind, PowerState};

/// Longest excerpt of agent output put into an error message.
const EXCERPT_CHARS: usize = 300;
/// Shown instead of the password wherever the agent echoed it.
const REDACTED: &str = "<redacted>";

/// Removes the password from agent output, in the forms agents print it: as is,
/// percent-encoded (URLs) and escaped as in a Python repr.
#[derive(Default)]
pub(crate) struct Redactor {
    needles: Vec<SecretString>,
}

impl Redactor {
    pub(crate) fn new(password: Option<&str>) -> Self {
        let Some(password) = password.filter(|p| !p.is_empty()) else {
            return Self::default();
        };
        let mut needles = vec![password.to_string()];
        let encoded: String = url::form_urlencoded::byte_serialize(password.as_bytes()).collect();
        let percent_space = encoded.replace('+', "%20");
        let repr = password.replace('\\', "\\\\").replace('\'', "\\'");
        for form in [encoded, percent_space, repr] {
            if !needles.contains(&form) {
                needles.push(form);
            }
        }
        // Longest first, so a form containing another is replaced whole.
        needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
        Self {
            needles: needles.into_iter().map(SecretString::from).collect(),
        }
    }

    pub(crate) fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for needle in &self.needles {
            let needle = needle.expose_secret();
            if out.contains(needle) {
                out = out.replace(needle, REDACTED);
            }
        }
        out
    }
}

/// The captured text, redacted. When output was cut at the cap, the last (partial)
/// line is dropped: it could end in the first characters of the password.
pub(crate) fn text(captured: &Captured, redactor: &Redactor) -> String {
    let raw = String::from_utf8_lossy(&captured.bytes);
    let whole = if captured.incomplete {
        raw.rfind('\n').map_or("", |end| &raw[..end])
    } else {
        &raw
    };
    redactor.redact(whole)
}

/// A one-line excerpt for an error message: the agent's error lines if it logged
/// any (fencing.py: `<time> ERROR: <message>`), else its last lines; stderr first,
/// then stdout.
pub(crate) fn excerpt(done: &Finished, redactor: &Redactor) -> String {
    let stderr = text(&done.stderr, redactor);
    let stdout = text(&done.stdout, redactor);
    let pick = |text: &str| -> Vec<String> {
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !is_noise(l))
            .collect();
        let errors: Vec<String> = lines
            .iter()
            .filter(|l| {
                let lower = l.to_ascii_lowercase();
                lower.contains("error") || lower.contains("fail")
            })
            .map(|l| strip_timestamp(l).to_string())
            .collect();
        if errors.is_empty() {
            let skip = lines.len().saturating_sub(3);
            lines[skip..]
                .iter()
                .map(|l| strip_timestamp(l).to_string())
                .collect()
        } else {
            errors
        }
    };
    // A Python agent that crashed: its last line names the exception.
    let crash = stderr.contains("Traceback (most recent call last)");
    let mut lines = match stderr.lines().map(str::trim).rfind(|l| !l.is_empty()) {
        Some(last) if crash => vec![format!("Python traceback ending in {last}")],
        _ => pick(&stderr),
    };
    if lines.is_empty() {
        lines = pick(&stdout);
    }
    lines.dedup();
    let joined = lines.join(" | ");
    let clean: String = joined
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.is_empty() {
        return "no output".to_string();
    }
    match clean.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &clean[..cut]),
        None => clean,
    }
}

/// Lines that explain nothing: fencing.py's usage hint, Python deprecation warnings
/// (fence_ipmilan prints one on every run) and the source line that follows them.
fn is_noise(line: &str) -> bool {
    line.contains("Please use '-h' for usage")
        || line.contains("DeprecationWarning")
        || line.starts_with("from pipes import")
}

/// `2024-05-01 12:00:00,123 ERROR: x` → `ERROR: x`.
fn strip_timestamp(line: &str) -> &str {
    let bytes = line.as_bytes();
    let stamped = bytes.len() > 24
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes[10] == b' '
        && bytes[13] == b':'
        && bytes[19] == b','
        && bytes[..4].iter().all(u8::is_ascii_digit);
    if stamped {
        line.get(24..).unwrap_or(line).trim_start()
    } else {
        line
    }
}

/// The kind of a failed run, from what the agent said.
pub(crate) fn kind(done: &Finished, redactor: &Redactor) -> PowerErrorKind {
    let said = format!(
        "{}\n{}",
        text(&done.stderr, redactor),
        text(&done.stdout, redactor)
    )
    .to_ascii_lowercase();
    const AUTH: &[&str] = &[
        "unauthorized",
        " 401",
        "authentication failed",
        "invalid credentials",
        "incorrect password",
        "invalid password",
        "access denied",
        "login incorrect",
    ];
    const UNREACHABLE: &[&str] = &[
        "connection refused",
        "timed out",
        "no route to host",
        "name or service not known",
        "temporary failure in name resolution",
        "network is unreachable",
        "connection lost",
        "connection reset",
        "unable to connect",
        "failed to establish a new connection",
        "max retries exceeded",
        "unable to establish",
    ];
    if AUTH.iter().any(|s| said.contains(s)) {
        PowerErrorKind::Auth
    } else if UNREACHABLE.iter().any(|s| said.contains(s)) {
        PowerErrorKind::Unreachable
    } else {
        PowerErrorKind::Protocol
    }
}

/// `Status: ON` / `Status: OFF` lines the agent printed on stdout.
fn status_lines(stdout: &str) -> (bool, bool) {
    let mut on = false;
    let mut off = false;
    for line in stdout.lines() {
        let Some((key, value)) = line.trim().split_once(':') else {
            continue;
        };
        if !key.trim().eq_ignore_ascii_case("status") {
            continue;
        }
        match value.trim().to_ascii_uppercase().as_str() {
            "ON" => on = true,
            "OFF" => off = true,
            _ => {}
        }
    }
    (on, off)
}

/// How the run ended, for messages.
pub(crate) fn ending(done: &Finished) -> String {
    match done.status.code() {
        Some(code) => format!("exited with {code}"),
        None => "was killed by a signal".to_string(),
    }
}

/// The power state an `action=status` run reports, or why it cannot be trusted.
pub(crate) fn status(
    agent: &str,
    done: &Finished,
    redactor: &Redactor,
) -> Result<PowerState, PowerError> {
    let fail = |kind: PowerErrorKind, why: &str| {
        PowerError::new(
            kind,
            format!(
                "fence agent {agent} (action status) {}{why}: {}",
                ending(done),
                excerpt(done, redactor)
            ),
        )
    };
    if let Some(e) = &done.stdin_error {
        return Err(fail(
            PowerErrorKind::Protocol,
            &format!(" without taking its options on standard input ({e})"),
        ));
    }
    if done.stdout.incomplete {
        return Err(fail(
            PowerErrorKind::Protocol,
            " after printing more than the output cap (or its output could not be read), so its answer is not trusted",
        ));
    }
    let (said_on, said_off) = status_lines(&text(&done.stdout, redactor));
    match done.status.code() {
        Some(0) if said_off => Err(fail(
            PowerErrorKind::Protocol,
            " (On) but printed `Status: OFF`: contradicting answer",
        )),
        Some(0) => Ok(PowerState::On),
        Some(2) if said_off && !said_on => Ok(PowerState::Off),
        Some(2) if said_on => Err(fail(
            PowerErrorKind::Protocol,
            " (Off) but printed `Status: ON`: contradicting answer",
        )),
        Some(2) => Err(fail(
            PowerErrorKind::Protocol,
            " (Off) without printing `Status: OFF`; exit 2 alone is not trusted (interpreters and shells exit 2 on their own errors)",
        )),
        _ => Err(fail(kind(done, redactor), "")),
    }
}

/// Whether an `off`/`on`/`reboot` run says it succeeded (the caller confirms the
/// state itself).
pub(crate) fn command(
    agent: &str,
    action: &str,
    done: &Finished,
    redactor: &Redactor,
) -> Result<(), PowerError> {
    if let Some(e) = &done.stdin_error {
        return Err(PowerError::protocol(format!(
            "fence agent {agent} (action {action}) {} without taking its options on standard input ({e}): {}",
            ending(done),
            excerpt(done, redactor)
        )));
    }
    if done.status.success() {
        return Ok(());
    }
    Err(PowerError::new(
        kind(done, redactor),
        format!(
            "fence agent {agent} (action {action}) {}: {}",
            ending(done),
            excerpt(done, redactor)
        ),
    ))
}
