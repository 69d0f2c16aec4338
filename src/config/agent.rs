//! `nodefence.toml`: the agent's own settings.
//!
//! Only `inventory` is required: which machines the agent may power off must be
//! written down, never guessed. Everything else has a default that is safe for a
//! production cluster (three consecutive Off readings half a second apart, two
//! minutes to get them, at most 16 BMC requests in flight, inline passwords refused). Unknown
//! keys are errors: a misspelt `confirm_reading` silently falling back to a default is
//! exactly the kind of surprise a fencing daemon must not have.

use super::diagnostic::{Diagnostics, Source, Span, Subject};
use super::fields::{Entry, Problem, Val, unknown_key};
use super::model::{Metal3Settings, PowerSettings, RemediationSettings, SecuritySettings};
use super::paths::{BaseDir, FilePath};
use super::policy::{ClusterPolicy, Scope};
use crate::power::confirm::ConfirmPolicy;

const TOP_KEYS: &[&str] = &[
    "inventory",
    "power",
    "policy",
    "remediation",
    "security",
    "metal3",
];
const METAL3_KEYS: &[&str] = &[
    "hosts",
    "namespaces",
    "allow_insecure",
    "ca_file",
    "resync_interval",
];
const REMEDIATION_KEYS: &[&str] = &["requests"];
const POWER_KEYS: &[&str] = &[
    "confirm_readings",
    "confirm_interval",
    "confirm_timeout",
    "max_concurrent_requests",
    "monitor_interval",
];
const SECURITY_KEYS: &[&str] = &["allow_inline_passwords"];

/// Default for `[power] monitor_interval`.
pub(crate) const DEFAULT_MONITOR_INTERVAL: std::time::Duration =
    std::time::Duration::from_secs(300);

/// Default for `[power] max_concurrent_requests`.
pub(crate) const DEFAULT_MAX_CONCURRENT_REQUESTS: usize = 16;

/// `nodefence.toml` as far as it could be read.
pub(crate) struct AgentDraft {
    /// The inventory file and where `inventory = ...` is written.
    pub inventory: Option<(FilePath, Span)>,
    pub power: PowerSettings,
    pub security: SecuritySettings,
    pub remediation: RemediationSettings,
    /// `[policy]` as written; group and node overrides are merged over it.
    pub policy: ClusterPolicy,
    /// `[metal3]` (its `policy` is filled in at the end of the load).
    pub metal3: Metal3Settings,
}

/// Reads the agent settings from the parsed `nodefence.toml`, reporting every problem.
pub(crate) fn parse(
    src: &Source,
    table: &toml::de::DeTable<'_>,
    base: &BaseDir,
    diags: &mut Diagnostics,
) -> AgentDraft {
    let mut draft = AgentDraft {
        inventory: None,
        power: PowerSettings {
            confirm: ConfirmPolicy::default(),
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            monitor_interval: DEFAULT_MONITOR_INTERVAL,
        },
        security: SecuritySettings::default(),
        remediation: RemediationSettings::default(),
        policy: ClusterPolicy::default(),
        metal3: Metal3Settings::default(),
    };
    let mut metal3_at: Option<Span> = None;
    let mut report =
        |p: Problem| diags.error(src, Some(&p.span), &Subject::File, p.message, p.help);
    for entry in Entry::all(table) {
        let result = match entry.name {
            "inventory" => entry.non_empty_string().map(|v| {
                draft.inventory = Some((base.join(&v.value), v.span));
            }),
            "power" => entry
                .table()
                .map(|t| power(&mut draft.power, t, &mut report)),
            "security" => entry
                .table()
                .map(|t| security(&mut draft.security, t, &mut report)),
            "remediation" => entry
                .table()
                .map(|t| remediation(&mut draft.remediation, t, &mut report)),
            "metal3" => entry.table().map(|t| {
                metal3_at = Some(entry.key.clone());
                metal3(&mut draft.metal3, t, base, &mut report);
            }),
            "policy" => entry
                .table()
                .map(|t| draft.policy.draft = super::policy::parse(t, Scope::Cluster, &mut report)),
            other => Err(unknown_key(
                other,
                &entry.key,
                TOP_KEYS,
                "in nodefence.toml",
            )),
        };
        if let Err(p) = result {
            report(p);
        }
    }
    if draft.metal3.hosts && draft.metal3.namespaces.is_empty() {
        diags.error(
            src,
            metal3_at.as_ref(),
            &Subject::File,
            "[metal3] hosts = true needs `namespaces`",
            Some(
                "name the namespaces whose BareMetalHosts nodefence may power off, e.g. \
                 namespaces = [\"metal3\"]"
                    .into(),
            ),
        );
    }
    if draft.metal3.allow_insecure && draft.metal3.hosts {
        diags.warn(
            src,
            metal3_at.as_ref(),
            &Subject::File,
            "[metal3] allow_insecure = true: the BMCs of BareMetalHosts with \
             disableCertificateVerification are used without verifying their TLS \
             certificates; anyone on the management network could impersonate them. Prefer \
             ca_file",
        );
    }
    let inventory_optional = draft.metal3.hosts;
    if draft.inventory.is_none()
        && !inventory_optional
        && !table.iter().any(|(k, _)| k.get_ref() == "inventory")
    {
        diags.error(
            src,
            None,
            &Subject::File,
            "`inventory` is not set",
            Some(
                "name the inventory file at the top of nodefence.toml, e.g. \
                 inventory = \"inventory.toml\" (relative to nodefence.toml's directory)"
                    .into(),
            ),
        );
    }
    // The engine proves "off" exactly as `nodefence fence` does.
    draft.policy.base.confirm_readings = draft.power.confirm.readings;
    draft.policy.base.confirm_interval = draft.power.confirm.interval;
    draft
}

fn power(out: &mut PowerSettings, table: &toml::de::DeTable<'_>, report: &mut dyn FnMut(Problem)) {
    let mut interval: Option<Val<std::time::Duration>> = None;
    let mut timeout: Option<Val<std::time::Duration>> = None;
    let mut readings: Option<Val<i64>> = None;
    let mut problems = 0;
    for entry in Entry::all(table) {
        let result = match entry.name {
            "confirm_readings" => entry.integer(1, 1000, 3).map(|v| {
                out.confirm.readings = u32::try_from(v.value).unwrap_or(u32::MAX);
                readings = Some(v);
            }),
            "confirm_interval" => entry.duration(true).map(|v| {
                out.confirm.interval = v.value;
                interval = Some(v);
            }),
            "confirm_timeout" => entry.duration(false).map(|v| {
                out.confirm.timeout = v.value;
                timeout = Some(v);
            }),
            "max_concurrent_requests" => entry.integer(1, 100_000, 16).map(|v| {
                out.max_concurrent_requests = usize::try_from(v.value).unwrap_or(1);
            }),
            "monitor_interval" => entry.duration(true).map(|v| {
                out.monitor_interval = v.value;
            }),
            other => Err(unknown_key(other, &entry.key, POWER_KEYS, "in [power]")),
        };
        if let Err(p) = result {
            problems += 1;
            report(p);
        }
    }
    if problems > 0 {
        // Defaults stand in for the invalid values: comparing them would mislead.
        return;
    }
    // The confirm loop takes a reading, then waits `interval` before the next; N
    // readings need (N - 1) intervals to fit before the deadline.
    let policy = out.confirm;
    let needed = policy
        .interval
        .saturating_mul(policy.readings.saturating_sub(1));
    if needed >= policy.timeout {
        let at = (timeout.map(|v| v.key))
            .or(interval.map(|v| v.key))
            .or(readings.map(|v| v.key));
        if let Some(span) = at {
            let fmt = |d| humantime::format_duration(d).to_string();
            report(Problem::new(
                &span,
                format!(
                    "confirm_timeout ({}) is too short to take {} readings {} apart",
                    fmt(policy.timeout),
                    policy.readings,
                    fmt(policy.interval)
                ),
                Some(format!(
                    "make confirm_timeout well above (confirm_readings - 1) x confirm_interval \
                     = {}, leaving room for slow BMCs",
                    fmt(needed)
                )),
            ));
        }
    }
}

fn metal3(
    out: &mut Metal3Settings,
    table: &toml::de::DeTable<'_>,
    base: &BaseDir,
    report: &mut dyn FnMut(Problem),
) {
    for entry in Entry::all(table) {
        let result = match entry.name {
            "hosts" => entry.bool().map(|v| out.hosts = v.value),
            "allow_insecure" => entry.bool().map(|v| out.allow_insecure = v.value),
            "namespaces" => namespaces(&entry).map(|v| out.namespaces = v),
            "resync_interval" => entry
                .duration(true)
                .map(|v| out.resync_interval = Some(v.value)),
            "ca_file" => entry.non_empty_string().and_then(|v| {
                let path = base.join(&v.value);
                super::files::check_ca_file(&path)
                    .map_err(|p| Problem::new(&v.span, p.message, p.help))?;
                out.ca_file = Some(path.abs);
                Ok(())
            }),
            other => Err(unknown_key(other, &entry.key, METAL3_KEYS, "in [metal3]")),
        };
        if let Err(p) = result {
            report(p);
        }
    }
}

/// `namespaces = ["metal3", ...]`: Kubernetes namespace names, each once.
fn namespaces(entry: &Entry<'_, '_>) -> Result<Vec<String>, Problem> {
    let help = Some("write it like namespaces = [\"metal3\"]".to_string());
    let toml::de::DeValue::Array(items) = entry.value.get_ref() else {
        return Err(Problem::new(
            &entry.value.span(),
            format!(
                "`namespaces` must be an array of strings, found {}",
                entry.value.get_ref().type_str()
            ),
            help,
        ));
    };
    let mut out = Vec::new();
    for item in items {
        let toml::de::DeValue::String(ns) = item.get_ref() else {
            return Err(Problem::new(
                &item.span(),
                "`namespaces` must hold strings (namespace names)",
                help,
            ));
        };
        let valid = !ns.is_empty()
            && ns.len() <= 63
            && ns
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !ns.starts_with('-')
            && !ns.ends_with('-');
        if !valid {
            return Err(Problem::new(
                &item.span(),
                format!("{ns:?} is not a Kubernetes namespace name"),
                Some("lowercase letters, digits and '-', e.g. \"metal3\"".into()),
            ));
        }
        if out.iter().any(|o: &String| o == ns.as_ref()) {
            return Err(Problem::new(
                &item.span(),
                format!("namespace {ns:?} is listed twice"),
                Some("list each namespace once".into()),
            ));
        }
        out.push(ns.to_string());
    }
    if out.is_empty() {
        return Err(Problem::new(
            &entry.value.span(),
            "`namespaces` is empty",
            Some("name at least one namespace whose BareMetalHosts nodefence may power off".into()),
        ));
    }
    Ok(out)
}

fn remediation(
    out: &mut RemediationSettings,
    table: &toml::de::DeTable<'_>,
    report: &mut dyn FnMut(Problem),
) {
    for entry in Entry::all(table) {
        let result = match entry.name {
            "requests" => entry.bool().map(|v| {
                out.requests = v.value;
            }),
            other => Err(unknown_key(
                other,
                &entry.key,
                REMEDIATION_KEYS,
                "in [remediation]",
            )),
        };
        if let Err(p) = result {
            report(p);
        }
    }
}

fn security(
    out: &mut SecuritySettings,
    table: &toml::de::DeTable<'_>,
    report: &mut dyn FnMut(Problem),
) {
    for entry in Entry::all(table) {
        let result = match entry.name {
            "allow_inline_passwords" => entry.bool().map(|v| {
                out.allow_inline_passwords = v.value;
            }),
            other => Err(unknown_key(
                other,
                &entry.key,
                SECURITY_KEYS,
                "in [security]",
            )),
        };
        if let Err(p) = result {
            report(p);
        }
    }
}
