//! Per-group and per-node policy overrides: inheritance key by key, the keys only
//! `[policy]` may set, and `require_identity`'s driver-dependent default.

use std::time::Duration;

use super::*;
use crate::engine::{MaxUnhealthy, OnPoweredOn, Policy};

const AGENT: &str = "inventory = \"inventory.toml\"\n\
    [power]\nconfirm_readings = 4\n\
    [policy]\nunhealthy_after = \"2m\"\non_poll_interval = \"7s\"\nmax_unhealthy = 5\n";

fn with_agent(agent: &str) -> Fixture {
    let f = Fixture::new();
    f.agent(agent);
    f
}

fn executable(f: &Fixture, name: &str) {
    f.write(name, "#!/bin/sh\n");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(f.path(name), fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[test]
fn node_beats_group_beats_policy_key_by_key() {
    let config = with_agent(AGENT).ok(&lines(&[
        DEFAULTS.trim_end(),
        "[groups.gpu]",
        "endpoint = \"https://{node}-bmc\"",
        "[groups.gpu.policy]",
        "on_powered_on = \"wait\"",
        "unhealthy_after = \"5m\"",
        "fast_path = false",
        "[nodes.gpu-1]",
        "group = \"gpu\"",
        "policy = { unhealthy_after = \"30s\", skip_cordoned = true }",
        "[nodes.gpu-2]",
        "group = \"gpu\"",
        "[nodes.plain]",
        "endpoint = \"https://plain-bmc\"",
        "[nodes.plain.policy]",
        "recovered_after = \"1m\"",
    ]));
    let global = &config.agent.policy;
    assert_eq!(global.unhealthy_after, Duration::from_secs(120));
    assert_eq!(global.max_unhealthy, MaxUnhealthy::Count(5));
    assert_eq!(global.confirm_readings, 4);

    let gpu1 = &config.inventory.nodes["gpu-1"].policy;
    assert_eq!(gpu1.unhealthy_after, Duration::from_secs(30), "node wins");
    assert!(gpu1.skip_cordoned);
    assert_eq!(gpu1.on_powered_on, OnPoweredOn::Wait, "from the group");
    assert_eq!(
        gpu1.lease_stale_after, None,
        "the group turned the fast path off"
    );
    assert_eq!(
        gpu1.on_poll_interval,
        Duration::from_secs(7),
        "from [policy]"
    );
    assert_eq!(gpu1.max_unhealthy, MaxUnhealthy::Count(5), "cluster-wide");
    assert_eq!(gpu1.confirm_readings, 4, "from [power]");
    assert_eq!(gpu1.recovered_after, Policy::default().recovered_after);

    let gpu2 = &config.inventory.nodes["gpu-2"].policy;
    assert_eq!(gpu2.unhealthy_after, Duration::from_secs(300));
    assert!(!gpu2.skip_cordoned);

    let plain = &config.inventory.nodes["plain"].policy;
    assert_eq!(plain.recovered_after, Duration::from_secs(60));
    let mut expected = global.clone();
    expected.recovered_after = Duration::from_secs(60);
    assert_eq!(plain, &expected, "everything else is [policy]'s");
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
}

#[test]
fn cluster_wide_keys_are_refused_in_groups_and_nodes_with_where_and_how() {
    let errs = Fixture::new().errors(&lines(&[
        DEFAULTS.trim_end(),                            // 1-4
        "[groups.g]",                                   // 5
        "endpoint = \"https://{node}-bmc\"",            // 6
        "[groups.g.policy]",                            // 7
        "max_concurrent_fences = 1",                    // 8
        "[nodes.a]",                                    // 9
        "group = \"g\"",                                // 10
        "[nodes.a.policy]",                             // 11
        "unhealthy_after = \"5m\"",                     // 12
        "max_unhealthy = \"10%\"",                      // 13
        "release = \"delete-node\"",                    // 14
        "[nodes.b]",                                    // 15
        "endpoint = \"https://b-bmc\"",                 // 16
        "policy = { min_power_off_interval = \"1s\" }", // 17
    ]));
    assert_eq!(errs.len(), 4, "{}", ConfigErrors(errs.clone()));
    let group = find(&errs, "`max_concurrent_fences` cannot be set for a group");
    assert_at(group, None, 8, "group \"g\"");
    assert_eq!(
        group.help.as_deref(),
        Some(
            "set max_concurrent_fences in [policy] in nodefence.toml; it applies to the whole cluster"
        )
    );
    let node = find(&errs, "`max_unhealthy` cannot be set for one node");
    assert_at(node, Some("a"), 13, "it applies to the whole cluster");
    assert!(errs.iter().all(|e| e.file.ends_with("inventory.toml")));
    assert_at(
        find(&errs, "`release` cannot be set"),
        Some("a"),
        14,
        "release",
    );
    assert_at(
        find(&errs, "`min_power_off_interval` cannot be set"),
        Some("b"),
        17,
        "min_power_off_interval",
    );
    let text = ConfigErrors(errs).to_string();
    assert!(
        text.contains("inventory.toml:13:1: node \"a\": `max_unhealthy`"),
        "{text}"
    );
}

#[test]
fn policy_problems_in_the_inventory_are_all_reported() {
    let errs = Fixture::new().errors(&lines(&[
        DEFAULTS.trim_end(),            // 1-4
        "[defaults.policy]",            // 5
        "unhealthy_after = \"5m\"",     // 6
        "[nodes.a]",                    // 7
        "endpoint = \"https://a-bmc\"", // 8
        "policy = \"strict\"",          // 9
        "[nodes.b]",                    // 10
        "endpoint = \"https://b-bmc\"", // 11
        "[nodes.b.policy]",             // 12
        "unhealthy_afte = \"5m\"",      // 13
        "lease_stale_after = \"5s\"",   // 14
        "on_powered_on = \"reboot\"",   // 15
    ]));
    assert_eq!(errs.len(), 5, "{}", ConfigErrors(errs.clone()));
    let defaults = find(&errs, "`policy` cannot be set in [defaults]");
    assert!(
        defaults
            .help
            .as_deref()
            .unwrap()
            .contains("[policy] in nodefence.toml")
    );
    assert_at(
        find(&errs, "`policy` must be a table"),
        Some("a"),
        9,
        "policy",
    );
    let typo = find(&errs, "unknown key `unhealthy_afte` in a node's policy");
    assert_at(typo, Some("b"), 13, "unhealthy_afte");
    assert_eq!(
        typo.help.as_deref(),
        Some("did you mean `unhealthy_after`?")
    );
    assert_at(
        find(&errs, "lease_stale_after (5s)"),
        Some("b"),
        14,
        "lease_stale_after",
    );
    assert_at(
        find(&errs, "`on_powered_on` must be one of"),
        Some("b"),
        15,
        "on_powered_on",
    );
}

#[test]
fn require_identity_defaults_to_what_the_driver_can_prove() {
    let f = Fixture::new();
    executable(&f, "fence_test");
    let inv = lines(&[
        DEFAULTS.trim_end(),
        "[nodes.rf]",
        "endpoint = \"https://rf-bmc\"",
        "[nodes.ip]",
        "driver = \"ipmi\"",
        "address = \"10.0.0.9\"",
        "[nodes.cloud]",
        "driver = \"aws\"",
        "[nodes.pdu]",
        "driver = \"exec\"",
        "agent = \"fence_test\"",
        "[nodes.pdu-strict]",
        "driver = \"exec\"",
        "agent = \"fence_test\"",
        "policy = { require_identity = true }",
        "[nodes.rf-lax]",
        "endpoint = \"https://rf-lax-bmc\"",
        "policy = { require_identity = false }",
    ]);
    let config = f.ok(&inv);
    let identity = |n: &str| config.inventory.nodes[n].policy.require_identity;
    assert!(identity("rf") && identity("ip") && identity("cloud"));
    assert!(!identity("pdu"), "a fence agent cannot report identity");
    assert!(identity("pdu-strict"), "explicit wins");
    assert!(!identity("rf-lax"));
    assert!(config.agent.policy.require_identity, "Policy::default()");
    // An exec node that requires identity can never be fenced: said once, on the node.
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(
        config.warnings[0].contains("node \"pdu-strict\": require_identity is true"),
        "{}",
        config.warnings[0]
    );

    // Written in [policy] it applies to every driver, exec included.
    f.agent("inventory = \"inventory.toml\"\n[policy]\nrequire_identity = true\n");
    let config = f.ok(&inv);
    assert!(config.inventory.nodes["pdu"].policy.require_identity);
    assert!(!config.inventory.nodes["rf-lax"].policy.require_identity);
}

/// `watchdog_fencing_on_vm`: the operator's reason for trusting a virtual machine's
/// watchdog, set for a node or a group (inherited key by key); an empty one is refused.
#[test]
fn a_virtual_machines_watchdog_is_opted_in_with_a_reason() {
    let config = with_agent(AGENT).ok(&lines(&[
        DEFAULTS.trim_end(),
        "[nodes.vm-1]",
        "endpoint = \"https://vm-1-bmc\"",
        "policy = { watchdog_fencing = true, watchdog_fencing_on_vm = \" no live migration \" }",
        "[nodes.metal-1]",
        "endpoint = \"https://metal-1-bmc\"",
        "policy = { watchdog_fencing = true }",
    ]));
    let vm = &config.inventory.nodes["vm-1"].policy;
    assert_eq!(
        vm.watchdog_fencing_on_vm.as_deref(),
        Some("no live migration")
    );
    assert_eq!(
        config.inventory.nodes["metal-1"]
            .policy
            .watchdog_fencing_on_vm,
        None
    );
    let errors = with_agent(AGENT).errors(&lines(&[
        DEFAULTS.trim_end(),
        "[nodes.vm-1]",
        "endpoint = \"https://vm-1-bmc\"",
        "policy = { watchdog_fencing_on_vm = \"  \" }",
    ]));
    let e = find(&errors, "watchdog_fencing_on_vm");
    assert!(e.message.contains("empty"), "{e:?}");
}
