//! The fencing policy: `[policy]` in `nodefence.toml`, and its overrides in the
//! inventory (`[groups.<name>.policy]`, `[nodes.<name>.policy]` or an inline
//! `policy = { ... }` on a group or node). Together they become the engine's
//! [`Policy`]: one for the whole cluster ([`super::AgentConfig::policy`]) and one per
//! node ([`super::NodeTarget::policy`]).
//!
//! Every key is optional; the defaults are the documented, production-safe ones. A
//! node's policy is resolved key by key: the node's `policy` table, then its group's,
//! then `[policy]`, then the default. `require_identity` has no single default: unset
//! at every level it is true for drivers that can report which machine they control
//! (redfish, ipmi, aws) and false for `exec` (a fence agent cannot).
//!
//! Some keys describe the whole cluster and cannot be overridden ([`CLUSTER_WIDE`]):
//! storm protection and rate limits count every node at once, and the release mechanism
//! is gated on the cluster's Kubernetes version at start-up.
//!
//! The confirmation settings (`confirm_readings`, `confirm_interval`) live in `[power]`
//! and are shared with `nodefence fence`, so a manual and an automatic fence prove
//! "off" the same way.

use std::time::Duration;

use super::fields::{Entry, Problem, unknown_key};
use super::layer::Driver;
use crate::engine::{
    ForceDeletePods, LeaseStaleAfter, MaxUnhealthy, OnPoweredOn, Policy, ReleaseMode,
};

/// Every policy key, in documentation order.
const POLICY_KEYS: &[&str] = &[
    "release",
    "delete_volume_attachments",
    "force_delete_pods",
    "release_off_after",
    "unhealthy_after",
    "on_powered_on",
    "fast_path",
    "lease_stale_after",
    "on_poll_interval",
    "power_off_retry_after",
    "remind_every",
    "max_power_off_attempts",
    "max_unhealthy",
    "max_concurrent_fences",
    "min_power_off_interval",
    "fence_control_plane",
    "skip_cordoned",
    "power_on_after_fence",
    "release_timeout",
    "recovered_after",
    "unfence_without_boot_id",
    "require_identity",
    "watchdog_fencing",
    "watchdog_fencing_on_vm",
];

/// Keys that describe the whole cluster: only `[policy]` may set them.
pub(crate) const CLUSTER_WIDE: &[&str] = &[
    // How a node is released: gated on the cluster's Kubernetes version at start-up.
    "release",
    "delete_volume_attachments",
    "force_delete_pods",
    // Storm protection and rate limits count every node at once.
    "max_unhealthy",
    "max_concurrent_fences",
    "min_power_off_interval",
];

/// Where a policy table is written; decides which keys it may set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// `[policy]` in `nodefence.toml`.
    Cluster,
    /// `policy` of a `[groups.<name>]`.
    Group,
    /// `policy` of a `[nodes.<name>]`.
    Node,
}

impl Scope {
    fn place(self) -> &'static str {
        match self {
            Scope::Cluster => "in [policy]",
            Scope::Group => "in a group's policy",
            Scope::Node => "in a node's policy",
        }
    }
}

/// Declares [`PolicyDraft`] with the keys that map one to one onto a [`Policy`] field.
macro_rules! policy_draft {
    ($($field:ident: $ty:ty),* $(,)?) => {
        /// One policy table as written: `None` for every key it does not set.
        #[derive(Debug, Clone, Default, PartialEq)]
        pub(crate) struct PolicyDraft {
            $(pub $field: Option<$ty>,)*
            /// `fast_path` (false: `Policy::lease_stale_after` is None).
            pub fast_path: Option<bool>,
            /// `lease_stale_after` (used only while the fast path is on).
            pub lease_stale_after: Option<LeaseStaleAfter>,
        }

        impl PolicyDraft {
            /// These settings where set, else `base`'s: key by key.
            pub fn over(&self, base: &PolicyDraft) -> PolicyDraft {
                PolicyDraft {
                    $($field: self.$field.clone().or_else(|| base.$field.clone()),)*
                    fast_path: self.fast_path.or(base.fast_path),
                    lease_stale_after: self.lease_stale_after.or(base.lease_stale_after),
                }
            }

            /// `base` with every key set here written over it.
            pub fn apply(&self, mut base: Policy) -> Policy {
                $(if let Some(v) = self.$field.clone() {
                    base.$field = v;
                })*
                let default_stale = base
                    .lease_stale_after
                    .unwrap_or(LeaseStaleAfter::MissedRenewal);
                let fast_path = self.fast_path.unwrap_or(base.lease_stale_after.is_some());
                base.lease_stale_after =
                    fast_path.then(|| self.lease_stale_after.unwrap_or(default_stale));
                base
            }
        }
    };
}

policy_draft! {
    release: ReleaseMode,
    delete_volume_attachments: bool,
    force_delete_pods: ForceDeletePods,
    release_off_after: Duration,
    unhealthy_after: Duration,
    on_powered_on: OnPoweredOn,
    on_poll_interval: Duration,
    power_off_retry_after: Duration,
    remind_every: Duration,
    max_power_off_attempts: u32,
    max_unhealthy: MaxUnhealthy,
    max_concurrent_fences: usize,
    min_power_off_interval: Duration,
    fence_control_plane: bool,
    skip_cordoned: bool,
    power_on_after_fence: bool,
    release_timeout: Duration,
    recovered_after: Duration,
    unfence_without_boot_id: bool,
    require_identity: bool,
    watchdog_fencing: bool,
    watchdog_fencing_on_vm: Option<String>,
}

/// `[policy]` as written, and what every policy starts from.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClusterPolicy {
    /// `[policy]` as written.
    pub draft: PolicyDraft,
    /// The built-in defaults, with the confirmation settings of `[power]`.
    pub base: Policy,
}

impl ClusterPolicy {
    /// The cluster-wide policy (what the engine's cluster-wide gates use).
    pub fn global(&self) -> Policy {
        self.draft.apply(self.base.clone())
    }

    /// One node's policy: its own `policy`, its group's, `[policy]`, the defaults.
    pub fn for_node(
        &self,
        node: Option<&PolicyDraft>,
        group: Option<&PolicyDraft>,
        driver: Driver,
    ) -> Policy {
        let empty = PolicyDraft::default();
        let merged = node
            .unwrap_or(&empty)
            .over(group.unwrap_or(&empty))
            .over(&self.draft);
        let mut base = self.base.clone();
        base.require_identity = identity_default(driver);
        merged.apply(base)
    }
}

/// `require_identity` when no level sets it: only a driver that can report which
/// machine it controls can pass the identity cross-check.
pub(crate) fn identity_default(driver: Driver) -> bool {
    !matches!(driver, Driver::Exec)
}

/// Reads one policy table, reporting every problem. Keys that only `[policy]` may set
/// are refused in a group or node.
pub(crate) fn parse(
    table: &toml::de::DeTable<'_>,
    scope: Scope,
    report: &mut dyn FnMut(Problem),
) -> PolicyDraft {
    let mut out = PolicyDraft::default();
    let mut delete_va = None;
    for entry in Entry::all(table) {
        if scope != Scope::Cluster && CLUSTER_WIDE.contains(&entry.name) {
            report(cluster_wide(&entry, scope));
            continue;
        }
        let result: Result<(), Problem> = match entry.name {
            "release" => choice(&entry, &["out-of-service-taint", "delete-node"]).map(|v| {
                out.release = Some(if v == "delete-node" {
                    ReleaseMode::DeleteNode
                } else {
                    ReleaseMode::OutOfServiceTaint
                });
            }),
            "delete_volume_attachments" => entry.bool().map(|v| {
                out.delete_volume_attachments = Some(v.value);
                delete_va = Some(v);
            }),
            "force_delete_pods" => choice(&entry, &["fast-path", "always", "never"]).map(|v| {
                out.force_delete_pods = Some(match v {
                    "always" => ForceDeletePods::Always,
                    "never" => ForceDeletePods::Never,
                    _ => ForceDeletePods::FastPath,
                });
            }),
            "release_off_after" => entry
                .duration(true)
                .map(|v| out.release_off_after = Some(v.value)),
            "unhealthy_after" => entry
                .duration(false)
                .map(|v| out.unhealthy_after = Some(v.value)),
            "on_powered_on" => choice(&entry, &["power-off", "wait"]).map(|v| {
                out.on_powered_on = Some(if v == "wait" {
                    OnPoweredOn::Wait
                } else {
                    OnPoweredOn::PowerOff
                });
            }),
            "fast_path" => entry.bool().map(|v| out.fast_path = Some(v.value)),
            "lease_stale_after" => {
                lease_stale_after(&entry).map(|v| out.lease_stale_after = Some(v))
            }
            "on_poll_interval" => entry
                .duration(false)
                .map(|v| out.on_poll_interval = Some(v.value)),
            "power_off_retry_after" => entry
                .duration(false)
                .map(|v| out.power_off_retry_after = Some(v.value)),
            "remind_every" => entry
                .duration(true)
                .map(|v| out.remind_every = Some(v.value)),
            "max_power_off_attempts" => entry.integer(1, 100, 3).map(|v| {
                out.max_power_off_attempts = Some(u32::try_from(v.value).unwrap_or(3));
            }),
            "max_unhealthy" => max_unhealthy(&entry).map(|v| out.max_unhealthy = Some(v)),
            "max_concurrent_fences" => entry.integer(1, 10_000, 2).map(|v| {
                out.max_concurrent_fences = Some(usize::try_from(v.value).unwrap_or(1));
            }),
            "min_power_off_interval" => entry
                .duration(true)
                .map(|v| out.min_power_off_interval = Some(v.value)),
            "fence_control_plane" => entry
                .bool()
                .map(|v| out.fence_control_plane = Some(v.value)),
            "skip_cordoned" => entry.bool().map(|v| out.skip_cordoned = Some(v.value)),
            "unfence_without_boot_id" => entry
                .bool()
                .map(|v| out.unfence_without_boot_id = Some(v.value)),
            "power_on_after_fence" => entry
                .bool()
                .map(|v| out.power_on_after_fence = Some(v.value)),
            "release_timeout" => entry
                .duration(false)
                .map(|v| out.release_timeout = Some(v.value)),
            "recovered_after" => entry
                .duration(true)
                .map(|v| out.recovered_after = Some(v.value)),
            "require_identity" => entry.bool().map(|v| out.require_identity = Some(v.value)),
            "watchdog_fencing" => entry.bool().map(|v| out.watchdog_fencing = Some(v.value)),
            "watchdog_fencing_on_vm" => entry
                .non_empty_string()
                .map(|v| out.watchdog_fencing_on_vm = Some(Some(v.value.trim().to_string()))),
            other => Err(unknown_key(
                other,
                &entry.key,
                &allowed_keys(scope),
                scope.place(),
            )),
        };
        if let Err(p) = result {
            report(p);
        }
    }
    if let Some(v) = delete_va
        && v.value
        && out.release != Some(ReleaseMode::DeleteNode)
        && out.force_delete_pods != Some(ForceDeletePods::Always)
    {
        report(Problem::new(
            &v.span,
            "delete_volume_attachments applies only to release = \"delete-node\", or to the forced-deletion fallback",
            Some(
                "with the out-of-service taint the attach/detach controller detaches at once; \
                 set release = \"delete-node\", remove delete_volume_attachments, or (clusters \
                 without non-graceful node shutdown) also set force_delete_pods = \"always\""
                    .into(),
            ),
        ));
    }
    out
}

/// The keys a policy table in `scope` may set.
fn allowed_keys(scope: Scope) -> Vec<&'static str> {
    POLICY_KEYS
        .iter()
        .copied()
        .filter(|k| scope == Scope::Cluster || !CLUSTER_WIDE.contains(k))
        .collect()
}

/// A cluster-wide key written in a group's or node's policy.
fn cluster_wide(entry: &Entry<'_, '_>, scope: Scope) -> Problem {
    let whose = if scope == Scope::Group {
        "a group"
    } else {
        "one node"
    };
    Problem::new(
        &entry.key,
        format!(
            "`{}` cannot be set for {whose}: it applies to the whole cluster",
            entry.name
        ),
        Some(format!(
            "set {} in [policy] in nodefence.toml; it applies to the whole cluster",
            entry.name
        )),
    )
}

fn lease_stale_after(entry: &Entry<'_, '_>) -> Result<LeaseStaleAfter, Problem> {
    if entry.string().is_ok_and(|v| v.value.trim() == "auto") {
        return Ok(LeaseStaleAfter::MissedRenewal);
    }
    let v = entry.duration(false).map_err(|mut p| {
        p.help = Some(
            "write \"auto\" (the first missed renewal, from each Lease's leaseDurationSeconds: \
             12s by default) or a duration such as \"25s\""
                .into(),
        );
        p
    })?;
    if v.value < Duration::from_secs(15) {
        return Err(Problem::new(
            &v.span,
            format!(
                "lease_stale_after ({}) is shorter than one and a half kubelet Lease renewals (10 s each)",
                humantime::format_duration(v.value)
            ),
            Some(
                "use \"auto\" (the default: the first missed renewal, derived from each Lease) \
                 or at least \"20s\" (two missed renewals)"
                    .into(),
            ),
        ));
    }
    Ok(LeaseStaleAfter::Fixed(v.value))
}

/// One of a fixed set of strings.
fn choice<'c>(entry: &Entry<'_, '_>, allowed: &[&'c str]) -> Result<&'c str, Problem> {
    let v = entry.string()?;
    match allowed.iter().find(|a| **a == v.value) {
        Some(a) => Ok(*a),
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
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn draft(text: &str, scope: Scope) -> (PolicyDraft, Vec<Problem>) {
        let doc = toml::de::DeTable::parse(text).expect("valid toml");
        let mut problems = Vec::new();
        let draft = parse(doc.get_ref(), scope, &mut |p| problems.push(p));
        (draft, problems)
    }

    fn parse_str(text: &str) -> (Policy, Vec<String>) {
        let (draft, problems) = draft(text, Scope::Cluster);
        let cluster = ClusterPolicy {
            draft,
            base: Policy::default(),
        };
        (
            cluster.global(),
            problems.into_iter().map(|p| p.message).collect(),
        )
    }

    #[test]
    fn every_key_is_read() {
        let (p, problems) = parse_str(
            "release = \"delete-node\"\ndelete_volume_attachments = true\nrelease_off_after = \"5s\"\n\
             unhealthy_after = \"2m\"\non_powered_on = \"wait\"\nlease_stale_after = \"30s\"\n\
             power_off_retry_after = \"90s\"\nmax_power_off_attempts = 5\nmax_unhealthy = \"25%\"\n\
             max_concurrent_fences = 4\nmin_power_off_interval = \"0s\"\nfence_control_plane = true\n\
             skip_cordoned = true\npower_on_after_fence = true\nrecovered_after = \"1m\"\n\
             require_identity = false\nforce_delete_pods = \"always\"\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(p.force_delete_pods, ForceDeletePods::Always);
        assert_eq!(p.release, ReleaseMode::DeleteNode);
        assert!(p.delete_volume_attachments);
        assert_eq!(p.release_off_after, Duration::from_secs(5));
        assert_eq!(p.unhealthy_after, Duration::from_secs(120));
        assert_eq!(p.on_powered_on, OnPoweredOn::Wait);
        assert_eq!(
            p.lease_stale_after,
            Some(LeaseStaleAfter::Fixed(Duration::from_secs(30)))
        );
        assert_eq!(p.max_power_off_attempts, 5);
        assert_eq!(p.max_unhealthy, MaxUnhealthy::Percent(25.0));
        assert_eq!(p.max_concurrent_fences, 4);
        assert!(p.fence_control_plane && p.skip_cordoned && p.power_on_after_fence);
        assert_eq!(p.recovered_after, Duration::from_secs(60));
        assert!(!p.require_identity);
    }

    #[test]
    fn the_forced_deletion_fallback_allows_attachment_deletion_with_the_taint() {
        let (p, problems) =
            parse_str("delete_volume_attachments = true\nforce_delete_pods = \"always\"\n");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(p.release, ReleaseMode::OutOfServiceTaint);
        assert!(p.delete_volume_attachments);
        let (_, problems) = parse_str("force_delete_pods = \"sometimes\"\n");
        assert!(
            problems[0].contains("`force_delete_pods` must be one of"),
            "{problems:?}"
        );
    }

    #[test]
    fn nothing_written_is_the_default() {
        let (p, problems) = parse_str("");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(p, Policy::default());
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

    #[test]
    fn lease_stale_after_is_auto_unless_a_duration_is_written() {
        let (p, problems) = parse_str("");
        assert!(problems.is_empty());
        assert_eq!(p.lease_stale_after, Some(LeaseStaleAfter::MissedRenewal));
        let (p, problems) = parse_str("lease_stale_after = \"auto\"\n");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(p.lease_stale_after, Some(LeaseStaleAfter::MissedRenewal));
        let (p, _) = parse_str("fast_path = false\n");
        assert_eq!(p.lease_stale_after, None);
        let (draft, problems) = draft("lease_stale_after = \"soon\"\n", Scope::Cluster);
        assert_eq!(draft.lease_stale_after, None);
        let help = problems[0].help.clone().unwrap_or_default();
        assert!(
            problems[0].message.contains("lease_stale_after") && help.contains("\"auto\""),
            "{problems:?}"
        );
    }

    #[test]
    fn overrides_merge_key_by_key_and_the_fast_path_keeps_its_two_keys_apart() {
        let (global, _) = draft(
            "unhealthy_after = \"2m\"\nfast_path = false\nlease_stale_after = \"40s\"\n\
             max_concurrent_fences = 5\n",
            Scope::Cluster,
        );
        let (group, p1) = draft(
            "unhealthy_after = \"5m\"\non_powered_on = \"wait\"\nfast_path = true\n",
            Scope::Group,
        );
        let (node, p2) = draft("unhealthy_after = \"30s\"\n", Scope::Node);
        assert!(p1.is_empty() && p2.is_empty(), "{p1:?} {p2:?}");
        let cluster = ClusterPolicy {
            draft: global,
            base: Policy::default(),
        };
        let p = cluster.for_node(Some(&node), Some(&group), Driver::Redfish);
        assert_eq!(p.unhealthy_after, Duration::from_secs(30));
        assert_eq!(p.on_powered_on, OnPoweredOn::Wait);
        // The group turns the fast path on again; the threshold still comes from [policy].
        assert_eq!(
            p.lease_stale_after,
            Some(LeaseStaleAfter::Fixed(Duration::from_secs(40)))
        );
        assert_eq!(p.max_concurrent_fences, 5);
        let g = cluster.global();
        assert_eq!(g.lease_stale_after, None);
        assert_eq!(g.unhealthy_after, Duration::from_secs(120));
        let without = cluster.for_node(None, None, Driver::Redfish);
        assert_eq!(without, g);
    }

    #[test]
    fn require_identity_defaults_by_driver_unless_written() {
        let cluster = ClusterPolicy::default();
        for (driver, want) in [
            (Driver::Redfish, true),
            (Driver::Ipmi, true),
            (Driver::Aws, true),
            (Driver::Vsphere, true),
            (Driver::Exec, false),
        ] {
            let p = cluster.for_node(None, None, driver);
            assert_eq!(p.require_identity, want, "{driver:?}");
        }
        let (global, _) = draft("require_identity = true\n", Scope::Cluster);
        let cluster = ClusterPolicy {
            draft: global,
            base: Policy::default(),
        };
        assert!(cluster.for_node(None, None, Driver::Exec).require_identity);
        let (node, _) = draft("require_identity = false\n", Scope::Node);
        assert!(
            !cluster
                .for_node(Some(&node), None, Driver::Redfish)
                .require_identity
        );
    }

    #[test]
    fn cluster_wide_keys_are_refused_outside_policy() {
        let text = "max_unhealthy = 3\nmax_concurrent_fences = 1\nmin_power_off_interval = \"1s\"\n\
                    release = \"delete-node\"\ndelete_volume_attachments = true\nskip_cordoned = true\n\
                    force_delete_pods = \"never\"\n";
        for scope in [Scope::Group, Scope::Node] {
            let (d, problems) = draft(text, scope);
            assert_eq!(problems.len(), CLUSTER_WIDE.len(), "{problems:?}");
            for p in &problems {
                assert!(
                    p.message.contains("it applies to the whole cluster"),
                    "{p:?}"
                );
                assert!(
                    p.help
                        .as_deref()
                        .unwrap()
                        .contains("in [policy] in nodefence.toml"),
                    "{p:?}"
                );
            }
            assert_eq!(d.max_unhealthy, None);
            assert_eq!(d.skip_cordoned, Some(true));
        }
        let (_, problems) = draft("max_unhealthy = 3\n", Scope::Node);
        assert_eq!(
            problems[0].message,
            "`max_unhealthy` cannot be set for one node: it applies to the whole cluster"
        );
        let (_, problems) = draft("unhealthy_afte = \"1m\"\n", Scope::Group);
        assert_eq!(
            problems[0].message,
            "unknown key `unhealthy_afte` in a group's policy"
        );
        assert_eq!(
            problems[0].help.as_deref(),
            Some("did you mean `unhealthy_after`?")
        );
    }
}
