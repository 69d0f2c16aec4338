//! Label values: the closed sets each metric accepts, the open ones (driver names,
//! Event reasons) bounded in number, and the values derived from power results.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};

use crate::engine::ReleaseMode;
use crate::power::{PowerError, PowerErrorKind, PowerReading};

/// Recorded instead of a label value outside the metric's set.
pub(super) const UNKNOWN: &str = "unknown";

/// Distinct `driver` label values kept before new ones become `unknown`.
pub(super) const MAX_DRIVERS: usize = 16;
/// Distinct `reason` label values kept before new ones become `unknown`.
pub(super) const MAX_REASONS: usize = 64;

pub(super) const PHASES: [&str; 3] = ["healthy", "incident", "released"];
pub(super) const POWER_QUERY_RESULTS: [&str; 12] = [
    "on",
    "off",
    "other",
    "error_unreachable",
    "error_auth",
    "error_privilege",
    "error_tls",
    "error_protocol",
    "error_unsupported",
    "error_config",
    "error_identity",
    "error_refused",
];
pub(super) const RELOAD_RESULTS: [&str; 2] = ["applied", "refused"];
pub(super) const POWER_ACTIONS: [&str; 2] = ["off", "on"];
pub(super) const COMMAND_RESULTS: [&str; 3] = ["ok", "error", "refused"];
pub(super) const RELEASE_MODES: [&str; 3] = ["out-of-service-taint", "delete-node", "untaint"];
pub(super) const RELEASE_PROOFS: [&str; 2] = ["off-readings", "watchdog"];
pub(super) const RELEASE_RESULTS: [&str; 4] = ["ok", "refused", "conflict", "api_error"];
pub(super) const IDENTITY_RESULTS: [&str; 3] = ["match", "mismatch", "unknown"];

/// A set of label values defined by code (driver names, Event reasons): accepted
/// while they look valid, up to `max` distinct ones.
#[derive(Debug)]
pub(super) struct OpenLabel {
    pub(super) name: &'static str,
    max: usize,
    valid: fn(&str) -> bool,
    seen: Mutex<BTreeSet<String>>,
}

impl OpenLabel {
    pub(super) fn new(name: &'static str, max: usize, valid: fn(&str) -> bool) -> Self {
        Self {
            name,
            max,
            valid,
            seen: Mutex::new(BTreeSet::new()),
        }
    }

    /// `value`, or `None` when it is malformed or one too many.
    pub(super) fn admit(&self, value: &str) -> Option<String> {
        if !(self.valid)(value) {
            return None;
        }
        let mut seen = lock(&self.seen);
        if !seen.contains(value) {
            if seen.len() >= self.max {
                return None;
            }
            seen.insert(value.to_string());
        }
        Some(value.to_string())
    }
}

/// Label values refused so far, so each is logged once (at most [`MAX_REJECTIONS_LOGGED`]).
#[derive(Debug, Default)]
pub(super) struct Rejections(Mutex<BTreeSet<(&'static str, String)>>);

/// Distinct refused label values logged; later ones are only counted as `unknown`.
const MAX_REJECTIONS_LOGGED: usize = 32;

impl Rejections {
    pub(super) fn note(&self, label: &'static str, value: &str, why: &str) {
        let mut seen = lock(&self.0);
        if seen.len() < MAX_REJECTIONS_LOGGED && seen.insert((label, value.to_string())) {
            tracing::warn!(
                label,
                value,
                "metric label value {why}: recorded as \"unknown\" (a bug at the call site)"
            );
        }
    }
}

pub(super) fn valid_driver(s: &str) -> bool {
    (1..=32).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

pub(super) fn valid_reason(s: &str) -> bool {
    (1..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A poisoned lock only means another thread panicked while counting; the data
/// (a set of names) is still usable.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn flag(b: bool) -> i64 {
    i64::from(b)
}

/// The `result` label of `nodefence_power_queries_total` for a power reading.
pub fn power_query_result(result: &Result<PowerReading, PowerError>) -> &'static str {
    match result {
        Ok(r) if r.state.is_on() => "on",
        Ok(r) if r.state.is_off() => "off",
        Ok(_) => "other",
        Err(e) => power_error_result(e.kind),
    }
}

/// The `result` label of `nodefence_power_queries_total` for a failed query.
pub fn power_error_result(kind: PowerErrorKind) -> &'static str {
    match kind {
        PowerErrorKind::Unreachable => "error_unreachable",
        PowerErrorKind::Auth => "error_auth",
        PowerErrorKind::Privilege => "error_privilege",
        PowerErrorKind::Tls => "error_tls",
        PowerErrorKind::Protocol => "error_protocol",
        PowerErrorKind::Unsupported => "error_unsupported",
        PowerErrorKind::Config => "error_config",
        PowerErrorKind::Identity => "error_identity",
        PowerErrorKind::Refused => "error_refused",
    }
}

/// The `mode` label of `nodefence_releases_total` for a release.
pub fn release_mode_label(mode: ReleaseMode) -> &'static str {
    match mode {
        ReleaseMode::OutOfServiceTaint => "out-of-service-taint",
        ReleaseMode::DeleteNode => "delete-node",
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::power::PowerState;

    #[test]
    fn result_labels_from_power_outcomes() {
        let reading = |state| {
            Ok(PowerReading {
                state,
                at: SystemTime::UNIX_EPOCH,
                latency: Duration::ZERO,
            })
        };
        assert_eq!(power_query_result(&reading(PowerState::On)), "on");
        assert_eq!(power_query_result(&reading(PowerState::Off)), "off");
        assert_eq!(
            power_query_result(&reading(PowerState::PoweringOff)),
            "other"
        );
        assert_eq!(
            power_query_result(&reading(PowerState::Unknown(String::new()))),
            "other"
        );
        assert_eq!(
            power_query_result(&Err(PowerError::auth("no"))),
            "error_auth"
        );
        for kind in [
            PowerErrorKind::Unreachable,
            PowerErrorKind::Auth,
            PowerErrorKind::Privilege,
            PowerErrorKind::Tls,
            PowerErrorKind::Protocol,
            PowerErrorKind::Unsupported,
            PowerErrorKind::Config,
            PowerErrorKind::Identity,
            PowerErrorKind::Refused,
        ] {
            let label = power_error_result(kind);
            assert_eq!(label, format!("error_{}", kind.as_str()));
            assert!(POWER_QUERY_RESULTS.contains(&label));
        }
        for mode in [ReleaseMode::OutOfServiceTaint, ReleaseMode::DeleteNode] {
            assert!(RELEASE_MODES.contains(&release_mode_label(mode)));
        }
    }
}
