//! `fallback`: a node's further power methods (its fencing topology).

use super::*;
use crate::config::PowerSource;

/// A fixture with an executable `fence_test` agent.
fn with_agent() -> Fixture {
    let f = Fixture::new().env("PDU_PASSWORD", "pdu-pw-1e4a");
    f.write("fence_test", "#!/bin/sh\n");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(f.path("fence_test"), fs::Permissions::from_mode(0o755)).unwrap();
    }
    f
}

#[test]
fn a_node_with_two_levels_resolves_each_entry_on_its_own() {
    let f = with_agent();
    let config = f.ok(&lines(&[
        "[defaults]",
        "request_timeout = \"4s\"", // not inherited by the entries
        "[groups.rack]",
        "fallback = [{ driver = \"ipmi\", address = \"{node}-ipmi\", username = \"g\", \
         password_env = \"PDU_PASSWORD\" }]",
        "[nodes.db-1]",
        "driver = \"redfish\"",
        "username = \"fence\"",
        "password_file = \"secrets/bmc-password\"",
        "endpoint = \"https://{node}-bmc\"",
        "group = \"rack\"",
        "fallback = [",
        "  { driver = \"exec\", agent = \"fence_test\", options = { ip = \"pdu-1\", plug = \"{node}\" }, \
         username = \"apc\", password_env = \"PDU_PASSWORD\" },",
        "  { driver = \"ipmi\", address = \"{node}-ipmi\", username = \"admin\", \
         password_file = \"secrets/bmc-password\", operation_timeout = \"20s\" },",
        "]",
        "[nodes.db-2]",
        "driver = \"redfish\"",
        "username = \"fence\"",
        "password_file = \"secrets/bmc-password\"",
        "endpoint = \"https://{node}-bmc\"",
        "group = \"rack\"",
        "[nodes.db-3]",
        "driver = \"redfish\"",
        "username = \"fence\"",
        "password_file = \"secrets/bmc-password\"",
        "endpoint = \"https://{node}-bmc\"",
    ]));
    let n = &config.inventory.nodes["db-1"];
    assert!(matches!(n.power, PowerSource::Redfish(_)));
    assert_eq!(
        n.fallback.len(),
        2,
        "the node's fallback replaces the group's"
    );
    let PowerSource::Exec(pdu) = &n.fallback[0] else {
        panic!("fallback 1 is {}", n.fallback[0].driver_name());
    };
    assert!(pdu.agent.is_absolute() && pdu.agent.ends_with("fence_test"));
    assert_eq!(pdu.options["plug"], "db-1");
    assert_eq!(pdu.credential.as_ref().unwrap().username, "apc");
    // Nothing is inherited from [defaults]: the built-in request timeout.
    assert_eq!(
        pdu.timeouts.request,
        crate::config::Timeouts::default().request
    );
    let PowerSource::Ipmi(ipmi) = &n.fallback[1] else {
        panic!("fallback 2 is {}", n.fallback[1].driver_name());
    };
    assert_eq!(ipmi.address, "db-1-ipmi");
    assert_eq!(ipmi.timeouts.operation, std::time::Duration::from_secs(20));
    // db-2 takes its group's fallback, with its own name substituted.
    let n2 = &config.inventory.nodes["db-2"];
    match n2.fallback.as_slice() {
        [PowerSource::Ipmi(t)] => assert_eq!(t.address, "db-2-ipmi"),
        other => panic!("db-2 fallback: {other:?}"),
    }
    assert!(config.inventory.nodes["db-3"].fallback.is_empty());
    assert_eq!(n.sources().count(), 3);
    // Default timeouts: 3 readings behind a hung 60s primary exceed the 120s
    // confirm_timeout. db-1 has two methods ahead of its last one.
    let slow: Vec<_> = config
        .warnings
        .iter()
        .filter(|w| w.contains("while an earlier power method hangs"))
        .collect();
    assert_eq!(slow.len(), 2, "{slow:?}");
    assert!(
        slow.iter()
            .any(|w| w.contains("node \"db-1\"") && w.contains("x 2m")),
        "{slow:?}"
    );
}

#[test]
fn short_enough_timeouts_are_not_warned_about() {
    let f = with_agent();
    let config = f.ok(&lines(&[
        "[nodes.db-1]",
        "driver = \"redfish\"",
        "username = \"fence\"",
        "password_file = \"secrets/bmc-password\"",
        "endpoint = \"https://db-1-bmc\"",
        "request_timeout = \"5s\"",
        "operation_timeout = \"20s\"",
        "fallback = [{ driver = \"exec\", agent = \"fence_test\" }]",
    ]));
    assert!(
        !config
            .warnings
            .iter()
            .any(|w| w.contains("earlier power method hangs")),
        "{:?}",
        config.warnings
    );
}

#[test]
fn a_bad_entry_names_the_node_the_entry_and_the_line() {
    let errs = with_agent().errors(&lines(&[
        "[nodes.db-1]",                                     // 1
        "driver = \"redfish\"",                             // 2
        "username = \"fence\"",                             // 3
        "password_file = \"secrets/bmc-password\"",         // 4
        "endpoint = \"https://db-1-bmc\"",                  // 5
        "fallback = [",                                     // 6
        "  { driver = \"exec\", agent = \"fence_test\" },", // 7
        "  { driver = \"ipmi\", port = 99999, username = \"x\", password_env = \"PDU_PASSWORD\" },", // 8
        "  { agent = \"fence_test\" },", // 9
        "]",
    ]));
    let port = find(&errs, "`port` must be between");
    assert_at(port, Some("db-1"), 8, "fallback 2: ");
    let text = ConfigErrors(vec![port.clone()]).to_string();
    assert!(text.contains(":8:"), "{text}");
    assert!(text.contains("node \"db-1\": fallback 2: `port`"), "{text}");
    let driver = find(&errs, "no `driver` is set");
    assert_at(driver, Some("db-1"), 9, "fallback 3: ");
    // The invalid port is not reported a second time as a missing address... but the
    // missing address is: it is missing.
    let address = find(&errs, "needs `address`");
    assert_at(address, Some("db-1"), 8, "fallback 2: ");
    assert_eq!(errs.len(), 3, "{}", ConfigErrors(errs.clone()));
}

#[test]
fn policy_and_fallback_inside_an_entry_are_refused() {
    let errs = with_agent().errors(&lines(&[
        "[nodes.db-1]",
        "driver = \"redfish\"",
        "username = \"fence\"",
        "password_file = \"secrets/bmc-password\"",
        "endpoint = \"https://db-1-bmc\"",
        "fallback = [{ driver = \"exec\", agent = \"fence_test\", policy = { require_identity = false } }]", // 6
        "[nodes.db-2]",
        "driver = \"redfish\"",
        "username = \"fence\"",
        "password_file = \"secrets/bmc-password\"",
        "endpoint = \"https://db-2-bmc\"",
        "fallback = [{ driver = \"exec\", agent = \"fence_test\", fallback = [], group = \"g\" }]", // 12
    ]));
    let policy = find(&errs, "`policy` cannot be set inside a fallback entry");
    assert_at(policy, Some("db-1"), 6, "fallback 1: ");
    let nested = find(&errs, "`fallback` cannot be set inside a fallback entry");
    assert_at(nested, Some("db-2"), 12, "fallback 1: ");
    let group = find(&errs, "`group` can only be set on a node");
    assert_at(group, Some("db-2"), 12, "in a fallback entry");
}

#[test]
fn fallback_in_defaults_or_of_the_wrong_shape_is_refused() {
    let errs = with_agent().errors(&lines(&[
        "[defaults]",
        "fallback = [{ driver = \"exec\", agent = \"fence_test\" }]", // 2
        "[nodes.db-1]",
        "driver = \"redfish\"",
        "username = \"fence\"",
        "password_file = \"secrets/bmc-password\"",
        "endpoint = \"https://db-1-bmc\"",
        "fallback = { driver = \"exec\" }", // 8
        "[nodes.db-2]",
        "driver = \"redfish\"",
        "username = \"fence\"",
        "password_file = \"secrets/bmc-password\"",
        "endpoint = \"https://db-2-bmc\"",
        "fallback = [\"fence_apc\"]", // 14
    ]));
    let defaults = find(&errs, "`fallback` cannot be set in [defaults]");
    assert_at(defaults, None, 2, "[defaults]");
    assert_at(
        find(&errs, "must be an array of tables"),
        Some("db-1"),
        8,
        "fallback",
    );
    assert_at(
        find(&errs, "fallback 1 must be a table"),
        Some("db-2"),
        14,
        "fallback 1",
    );
    assert_eq!(errs.len(), 3, "{}", ConfigErrors(errs.clone()));
}

#[test]
fn an_empty_fallback_on_a_node_removes_its_groups() {
    let config = with_agent().ok(&lines(&[
        "[groups.rack]",
        "fallback = [{ driver = \"exec\", agent = \"fence_test\" }]",
        "[nodes.db-1]",
        "driver = \"redfish\"",
        "username = \"fence\"",
        "password_file = \"secrets/bmc-password\"",
        "endpoint = \"https://db-1-bmc\"",
        "group = \"rack\"",
        "fallback = []",
    ]));
    assert!(config.inventory.nodes["db-1"].fallback.is_empty());
}

/// A redfish node with a fallback, as inventory lines after `[nodes.<name>]`.
fn with_fallback(name: &str, fallback: &str) -> Vec<String> {
    node(name, &[&format!("fallback = [{fallback}]")])
}

#[test]
fn two_nodes_whose_fallbacks_reach_one_machine_is_an_error_naming_both() {
    let errs = with_agent().errors(&doc(&[
        vec![
            "[groups.rack]".to_string(),
            // 2: no {node} in the plug: every node of the group gets outlet 7.
            "fallback = [{ driver = \"exec\", agent = \"fence_test\", \
             options = { ip = \"pdu-1\", plug = \"7\" } }]"
                .to_string(),
        ],
        node("a", &["group = \"rack\""]),                // 3..8
        node("b", &["group = \"rack\""]),                // 9..14
        with_fallback(
            "c", // 15..20
            "{ driver = \"exec\", agent = \"fence_test\", options = { ip = \"PDU-2\", port = \"3\", power_timeout = \"20\" } }",
        ),
        with_fallback(
            "d", // 21..26: the same outlet, written with fencing.py's aliases
            "{ driver = \"exec\", agent = \"fence_test\", options = { ipaddr = \"pdu-2\", plug = \"3\" } }",
        ),
        with_fallback(
            "e", // 27..32: the next outlet: fine
            "{ driver = \"exec\", agent = \"fence_test\", options = { ip = \"pdu-2\", plug = \"4\" } }",
        ),
        vec![
            "[nodes.f]".to_string(), // 33
            "driver = \"ipmi\"".to_string(),
            "address = \"10.0.0.9\"".to_string(),
            "username = \"fence\"".to_string(),
            "password_file = \"secrets/bmc-password\"".to_string(),
        ],
        with_fallback(
            "g", // 38..43: its fallback is f's own BMC
            "{ driver = \"ipmi\", address = \"10.0.0.9\", username = \"x\", password_env = \"PDU_PASSWORD\" }",
        ),
    ]));
    assert_eq!(errs.len(), 3, "{}", ConfigErrors(errs.clone()));

    let group = find(&errs, "same machine as node \"a\"'s fallback 1");
    assert_at(group, Some("b"), 2, "fallback 1: ");
    assert!(
        group.message.contains("from group \"rack\", line 2"),
        "{group}"
    );
    assert!(
        group
            .message
            .contains("fence agent fence_test with ip=pdu-1 plug=7"),
        "{group}"
    );
    let help = group.help.as_deref().unwrap();
    assert!(
        help.contains("wrong machine") && help.contains("{node}"),
        "{help}"
    );
    // `node "b": fallback 1: ...` at the line where the shared entry is written.
    let text = ConfigErrors(vec![group.clone()]).to_string();
    assert!(text.contains("inventory.toml:2:"), "{text}");
    assert!(text.contains("node \"b\": fallback 1: resolves"), "{text}");

    let aliases = find(&errs, "same machine as node \"c\"'s fallback 1");
    assert_at(aliases, Some("d"), 26, "fallback 1: ");
    assert!(aliases.message.contains("(line 20)"), "{aliases}");
    assert!(aliases.message.contains("ip=pdu-2 plug=3"), "{aliases}");

    // A fallback reaching another node's primary BMC.
    let cross = find(&errs, "same machine as node \"f\" (line 33)");
    assert_at(cross, Some("g"), 43, "IPMI BMC 10.0.0.9:623");
}

#[test]
fn a_fallback_that_reaches_its_own_primary_is_only_a_warning() {
    let config = with_agent().ok(&doc(&[
        vec![
            "[groups.rack]".to_string(),
            // No option selects a machine: the agent cannot be compared, no error.
            "fallback = [{ driver = \"exec\", agent = \"fence_test\" }]".to_string(),
        ],
        vec![
            "[nodes.a]".to_string(), // 3
            "driver = \"ipmi\"".to_string(),
            "address = \"10.0.0.9\"".to_string(),
            "username = \"fence\"".to_string(),
            "password_file = \"secrets/bmc-password\"".to_string(),
            // 8: the same BMC again, with another account
            "fallback = [{ driver = \"ipmi\", address = \"10.0.0.9\", username = \"x\", \
             password_env = \"PDU_PASSWORD\" }]"
                .to_string(),
        ],
        // Redfish and IPMI on one BMC for one node: its own machine twice, no warning.
        with_fallback(
            "b",
            "{ driver = \"ipmi\", address = \"b-bmc\", username = \"x\", password_env = \"PDU_PASSWORD\" }",
        ),
        node("c", &["group = \"rack\""]),
        node("d", &["group = \"rack\""]),
    ]));
    let same: Vec<&String> = config
        .warnings
        .iter()
        .filter(|w| w.contains("same machine") || w.contains("same BMC host"))
        .collect();
    assert_eq!(same.len(), 1, "{:?}", config.warnings);
    let w = same[0];
    assert!(w.contains(":8:"), "{w}");
    assert!(
        w.contains(
            "node \"a\": fallback 1: reaches the same machine as this node's primary method \
             (line 3): IPMI BMC 10.0.0.9:623"
        ),
        "{w}"
    );
    assert!(w.contains("no independent way"), "{w}");
    assert_eq!(config.inventory.nodes["a"].fallback.len(), 1);
}

#[test]
fn one_bmc_host_shared_through_a_fallback_is_a_warning() {
    let config = with_agent().ok(&doc(&[
        // a's primary: Redfish on host "chassis", no system_id.
        vec![
            "[nodes.a]".to_string(), // 1
            "driver = \"redfish\"".to_string(),
            "username = \"fence\"".to_string(),
            "password_file = \"secrets/bmc-password\"".to_string(),
            "endpoint = \"https://chassis\"".to_string(),
        ],
        // b's fallback: IPMI on the same host.
        with_fallback(
            "b",
            "{ driver = \"ipmi\", address = \"CHASSIS\", username = \"x\", password_env = \"PDU_PASSWORD\" }",
        ),
    ]));
    let shared: Vec<&String> = config
        .warnings
        .iter()
        .filter(|w| w.contains("same BMC host") || w.contains("same machine"))
        .collect();
    assert_eq!(shared.len(), 1, "{:?}", config.warnings);
    let w = shared[0];
    assert!(
        w.contains("node \"b\": fallback 1: uses the same BMC host as node \"a\" (line 1)"),
        "{w}"
    );
    assert!(
        w.contains("one through Redfish and one through IPMI"),
        "{w}"
    );
}
