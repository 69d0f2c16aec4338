//! `[policy]` in `nodefence.toml`: when nodefence powers machines off and releases
//! nodes (the engine's [`Policy`]).
//!
//! Every key is optional; the defaults are the documented, production-safe ones. The
//! confirmation settings (`confirm_readings`, `confirm_interval`) live in `[power]`
//! and are shared with `nodefence fence`, so a manual and an automatic fence prove
//! "off" the same way.

use std::time::Duration;

use super::fields::{Entry, Problem, Val, unknown_key};
use crate::engine::{MaxUnhealthy, OnPoweredOn, Policy, ReleaseMode};

const POLICY_KEYS: &[&str] = &[
    "release",
    "delete_volume_attachments",
    "release_off_after",
    "unhealthy_after",
    "on_powered_on",
    "fast_path",
    "lease_stale_after",
    "on_poll_interval",
    "power_off_retry_after",
    "max_power_off_attempts",
    "max_unhealthy",
    "max_concurrent_fences",
    "min_power_off_interval",
    "fence_control_plane",
    "skip_cordoned",
    "power_on_after_fence",
    "release_timeout",
    "recovered_after",
];

/// Reads `[policy]` into `out`, reporting every problem.
pub(crate) fn parse(
    out: &mut Policy,
    table: &toml::de::DeTable<'_>,
    report: &mut dyn FnMut(Problem),
) {
    let mut fast_path = true;
    let mut lease_stale_after = out.lease_stale_after.unwrap_or(Duration::from_secs(25));
    let mut release_span = None;
    let mut delete_va: Option<Val<bool>> = None;
    for entry in Entry::all(table) {
        let result: Result<(), Problem> = match entry.name {
            "release" => choice(&entry, &["out-of-service-taint", "delete-node"]).map(|v| {
                out.release = if v.value == "delete-node" {
                    ReleaseMode::DeleteNode
                } else {
                    ReleaseMode::OutOfServiceTaint
                };
                release_span = Some(v.key);
            }),
            "delete_volume_attachments" => entry.bool().map(|v| {
                out.delete_volume_attachments = v.value;
                delete_va = Some(v);
            }),
            "release_off_after" => entry.duration(true).map(|v| out.release_off_after = v.value),
            "unhealthy_after" => entry.duration(false).map(|v| out.unhealthy_after = v.value),
            "on_powered_on" => choice(&entry, &["power-off", "wait"]).map(|v| {
                out.on_powered_on = if v.value == "wait" {
                    OnPoweredOn::Wait
                } else {
                    OnPoweredOn::PowerOff
                };
            }),
            "fast_path" => entry.bool().map(|v| fast_path = v.value),
            "lease_stale_after" => entry.duration(false).and_then(|v| {
                if v.value < Duration::from_secs(15) {
                    Err(Problem::new(
                        &v.span,
                        format!(
                            "lease_stale_after ({}) is shorter than one and a half kubelet Lease renewals (10 s each)",
                            humantime::format_duration(v.value)
                        ),
                        Some("use at least \"20s\" (two missed renewals); the default is \"25s\"".into()),
                    ))
                } else {
                    lease_stale_after = v.value;
                    Ok(())
                }
            }),
            "on_poll_interval" => entry.duration(false).map(|v| out.on_poll_interval = v.value),
            "power_off_retry_after" => entry.duration(false).map(|v| out.power_off_retry_after = v.value),
            "max_power_off_attempts" => entry
                .integer(1, 100, 3)
                .map(|v| out.max_power_off_attempts = u32::try_from(v.value).unwrap_or(3)),
            "max_unhealthy" => max_unhealthy(&entry).map(|v| out.max_unhealthy = v),
            "max_concurrent_fences" => entry
                .integer(1, 10_000, 2)
                .map(|v| out.max_concurrent_fences = usize::try_from(v.value).unwrap_or(1)),
            "min_power_off_interval" => entry.duration(true).map(|v| out.min_power_off_interval = v.value),
            "fence_control_plane" => entry.bool().map(|v| out.fence_control_plane = v.value),
            "skip_cordoned" => entry.bool().map(|v| out.skip_cordoned = v.value),
            "power_on_after_fence" => entry.bool().map(|v| out.power_on_after_fence = v.value),
            "release_timeout" => entry.duration(false).map(|v| out.release_timeout = v.value),
            "recovered_after" => entry.duration(true).map(|v| out.recovered_after = v.value),
            other => Err(unknown_key(other, &entry.key, POLICY_KEYS, "in [policy]")),
        };
        if let Err(p) = result {
            report(p);
        }
    }
    out.lease_stale_after = fast_path.then_some(lease_stale_after);
    if let Some(v) = delete_va
        && v.value
        && out.release != ReleaseMode::DeleteNode
    {
        report(Problem::new(
            &v.span,
            "delete_volume_attachments applies only to release = \"delete-node\"",
            Some(
                "with the out-of-service taint the attach/detach controller detaches at once; \
                 set release = \"delete-node\" or remove delete_volume_attachments"
                    .into(),
            ),
        ));
    }
}

/// One of a fixed set of strings.
fn choice<'c>(entry: &Entry<'_, '_>, allowed: &[&'c str]) -> Result<Val<&'c str>, Problem> {
    let v = entry.string()?;
    match allowed.iter().find(|a| **a == v.value) {
        Some(a) => Ok(v.with(*a)),
        None => Err(Problem::new(
            &v.span,
            format!("`{}` must be one of {}", entry.name, quote_all(allowed)),
            Some(format!("write it like {} = \"{}\"", entry.name, allowed[0])),
        )),
    }
}

fn quote_all(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| format!("\"{v}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `max_unhealthy = 3` (nodes) or `max_unhealthy = "40%"`.
fn max_unhealthy(entry: &Entry<'_, '_>) -> Result<MaxUnhealthy, Problem> {
    if let Ok(v) = entry.integer(1, i64::MAX, 3) {
        return Ok(MaxUnhealthy::Count(
            usize::try_from(v.value).unwrap_or(usize::MAX),
        ));
    }
    let bad = |span: &super::diagnostic::Span| {
        Problem::new(
            span,
            "`max_unhealthy` must be a node count (e.g. 3) or a percentage string (e.g. \"40%\")",
            Some("write it like max_unhealthy = \"40%\"".into()),
        )
    };
    let v = entry.string().map_err(|p| bad(&p.span))?;
    let percent = v
        .value
        .trim()
        .strip_suffix('%')
        .and_then(|n| n.trim().parse::<f64>().ok())
        .filter(|p| (0.0..=100.0).contains(p) && *p > 0.0);
    percent
        .map(MaxUnhealthy::Percent)
        .ok_or_else(|| bad(&v.span))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> (Policy, Vec<String>) {
        let doc = toml::de::DeTable::parse(text).expect("valid toml");
        let mut policy = Policy::default();
        let mut problems = Vec::new();
        parse(&mut policy, doc.get_ref(), &mut |p| {
            problems.push(p.message)
        });
        (policy, problems)
    }

    #[test]
    fn every_key_is_read() {
        let (p, problems) = parse_str(
            "release = \"delete-node\"\ndelete_volume_attachments = true\nrelease_off_after = \"5s\"\n\
             unhealthy_after = \"2m\"\non_powered_on = \"wait\"\nlease_stale_after = \"30s\"\n\
             power_off_retry_after = \"90s\"\nmax_power_off_attempts = 5\nmax_unhealthy = \"25%\"\n\
             max_concurrent_fences = 4\nmin_power_off_interval = \"0s\"\nfence_control_plane = true\n\
             skip_cordoned = true\npower_on_after_fence = true\nrecovered_after = \"1m\"\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(p.release, ReleaseMode::DeleteNode);
        assert!(p.delete_volume_attachments);
        assert_eq!(p.release_off_after, Duration::from_secs(5));
        assert_eq!(p.unhealthy_after, Duration::from_secs(120));
        assert_eq!(p.on_powered_on, OnPoweredOn::Wait);
        assert_eq!(p.lease_stale_after, Some(Duration::from_secs(30)));
        assert_eq!(p.max_power_off_attempts, 5);
        assert_eq!(p.max_unhealthy, MaxUnhealthy::Percent(25.0));
        assert_eq!(p.max_concurrent_fences, 4);
        assert!(p.fence_control_plane && p.skip_cordoned && p.power_on_after_fence);
        assert_eq!(p.recovered_after, Duration::from_secs(60));
    }

    #[test]
    fn fast_path_can_be_turned_off_and_counts_work() {
        let (p, problems) = parse_str("fast_path = false\nmax_unhealthy = 3\n");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(p.lease_stale_after, None);
        assert_eq!(p.max_unhealthy, MaxUnhealthy::Count(3));
    }

    #[test]
    fn bad_values_are_named() {
        let (_, problems) = parse_str(
            "release = \"taint\"\non_powered_on = \"reboot\"\nmax_unhealthy = \"150%\"\n\
             lease_stale_after = \"5s\"\nunhealthy_after = \"0s\"\ndelete_volume_attachments = true\nreleas = 1\n",
        );
        let all = problems.join("\n");
        for expected in [
            "`release` must be one of \"out-of-service-taint\", \"delete-node\"",
            "`on_powered_on` must be one of",
            "`max_unhealthy` must be",
            "lease_stale_after (5s)",
            "unhealthy_after",
            "delete_volume_attachments applies only",
            "releas",
        ] {
            assert!(all.contains(expected), "missing {expected:?} in:\n{all}");
        }
        assert_eq!(problems.len(), 7, "{all}");
    }
}
