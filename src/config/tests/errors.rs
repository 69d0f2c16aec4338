//! Errors in what is written: keys, types, values, groups, drivers, node names.
//! Each names the node, the field, and has a line.

use super::*;

#[test]
fn three_broken_nodes_give_three_errors_at_once() {
    let errs = Fixture::new().errors(&lines(&[
        "[nodes.a]",                        // 1
        "driver = \"redfish\"",             // 2
        "username = \"fence\"",             // 3
        "password_file = \"secrets/nope\"", // 4
        "endpoint = \"https://a-bmc\"",     // 5
        "[nodes.b]",                        // 6
        "driver = \"ipmi\"",                // 7
        "address = \"b-ipmi\"",             // 8
        "username = \"fence\"",             // 9
        "password_file = \"secrets/bmc-password\"",
        "port = \"623\"", // 11
        "[nodes.c]",      // 12
        "driver = \"redfish\"",
        "username = \"fence\"",
        "password_file = \"secrets/bmc-password\"",
        "endpont = \"https://c-bmc\"", // 16
    ]));
    assert_eq!(errs.len(), 4, "{}", ConfigErrors(errs.clone()));
    assert_at(find(&errs, "does not exist"), Some("a"), 4, "password_file");
    assert_at(find(&errs, "must be an integer"), Some("b"), 11, "port");
    let unknown = find(&errs, "unknown key");
    assert_at(unknown, Some("c"), 16, "endpont");
    assert_eq!(unknown.help.as_deref(), Some("did you mean `endpoint`?"));
    // c has no endpoint (the key was misspelt): reported as well, at its header.
    assert_at(find(&errs, "needs `endpoint`"), Some("c"), 12, "endpoint");
}

#[test]
fn display_shows_file_line_column_node_and_help() {
    let f = Fixture::new();
    let errs = f.errors(&doc(&[node("worker-3", &["password_env = \"X\""])]));
    let text = ConfigErrors(errs).to_string();
    assert!(
        text.contains(
            "inventory.toml:6:1: node \"worker-3\": `password_file` and `password_env` are both set"
        ),
        "{text}"
    );
    assert!(text.contains("\n  help: "), "{text}");
}

#[test]
fn unknown_keys_list_allowed_keys_or_the_closest() {
    let errs = Fixture::new().errors(&lines(&[
        "[defaults]",
        "colour = \"blue\"", // 2
        "[groups.g]",
        "group = \"x\"", // 4
        "[nodes.a]",
        "driver = \"aws\"",
        "group = \"g\"",
        "password-file = \"x\"", // 8
        "[node.b]",              // 9
    ]));
    let colour = find(&errs, "`colour`");
    assert_at(colour, None, 2, "colour");
    assert!(colour.message.starts_with("[defaults]: "), "{colour}");
    assert!(
        colour
            .help
            .as_deref()
            .unwrap()
            .contains("allowed keys in [defaults]: driver, endpoint")
    );
    assert_at(find(&errs, "can only be set on a node"), None, 4, "group");
    let dash = find(&errs, "password-file");
    assert_eq!(dash.help.as_deref(), Some("did you mean `password_file`?"));
    let top = find(&errs, "`node`");
    assert_eq!(top.line, Some(9));
    assert_eq!(top.help.as_deref(), Some("did you mean `nodes`?"));
}

#[test]
fn wrong_types_and_bad_values_in_many_fields_are_all_reported() {
    let errs = Fixture::new().errors(&doc(&[node(
        "a",
        &[
            "insecure = \"yes\"",                    // 6
            "retries = 11",                          // 7
            "request_timeout = \"5\"",               // 8
            "connect_timeout = 30",                  // 9
            "operation_timeout = \"0s\"",            // 10
            "auth = \"digest\"",                     // 11
            "system_id = \"/redfish/v1/Systems/1\"", // 12
        ],
    )]));
    assert_eq!(errs.len(), 7, "{}", ConfigErrors(errs.clone()));
    assert_at(
        find(&errs, "must be true or false"),
        Some("a"),
        6,
        "insecure",
    );
    assert_at(find(&errs, "between 0 and 10"), Some("a"), 7, "retries");
    let bad = find(&errs, "not a valid duration");
    assert_at(bad, Some("a"), 8, "request_timeout");
    assert!(bad.help.as_deref().unwrap().contains("\"10s\""));
    assert_at(find(&errs, "bare number"), Some("a"), 9, "connect_timeout");
    assert_at(
        find(&errs, "greater than zero"),
        Some("a"),
        10,
        "operation_timeout",
    );
    assert_at(
        find(&errs, "\"auto\", \"session\" or \"basic\""),
        Some("a"),
        11,
        "auth",
    );
    assert_at(find(&errs, "not a path"), Some("a"), 12, "system_id");
}

#[test]
fn missing_group_lists_the_existing_ones() {
    let errs = Fixture::new().errors(&lines(&[
        "[groups.rack-a]",
        "[groups.rack-b]",
        "[nodes.a]",
        "group = \"rack-c\"", // 4
        "[nodes.b]",
        "group = \"rack_a\"", // 6
    ]));
    let c = find(&errs, "\"rack-c\" does not exist");
    assert_at(c, Some("a"), 4, "group");
    assert!(c.help.as_deref().unwrap().contains("rack-a, rack-b"));
    let typo = find(&errs, "\"rack_a\" does not exist");
    assert!(
        typo.help
            .as_deref()
            .unwrap()
            .starts_with("did you mean \"rack-a\"?")
    );
}

#[test]
fn missing_driver_and_required_fields_per_driver() {
    let f = Fixture::new();
    let errs = f.errors(&lines(&[
        "[nodes.a]", // 1: no driver
        "[nodes.b]", // 2
        "driver = \"redfish\"",
        "[nodes.c]", // 4
        "driver = \"ipmi\"",
        "[nodes.d]", // 6
        "driver = \"exec\"",
        "[nodes.e]", // 8
        "driver = \"exec\"",
        "agent = \"fence_nope\"", // 10
    ]));
    assert_at(find(&errs, "no `driver`"), Some("a"), 1, "driver");
    let b: Vec<_> = errs
        .iter()
        .filter(|e| e.node.as_deref() == Some("b"))
        .collect();
    assert_eq!(b.len(), 3, "endpoint, username, password: {b:?}");
    assert!(b.iter().all(|e| e.line == Some(2)));
    assert!(
        b.iter()
            .any(|e| e.message == "driver \"redfish\" needs `endpoint`")
    );
    assert!(
        b.iter()
            .any(|e| e.message == "no `username` for driver \"redfish\"")
    );
    assert!(
        b.iter()
            .any(|e| e.message == "no password for driver \"redfish\"")
    );
    assert_at(
        find(&errs, "driver \"ipmi\" needs `address`"),
        Some("c"),
        4,
        "address",
    );
    assert_at(
        find(&errs, "driver \"exec\" needs `agent`"),
        Some("d"),
        6,
        "agent",
    );
    let agent = find(&errs, "fence_nope does not exist");
    assert_at(agent, Some("e"), 10, "agent");
    assert!(
        agent
            .help
            .as_deref()
            .unwrap()
            .contains("/usr/sbin/fence_nope")
    );
}

#[test]
fn fields_that_do_not_apply_to_the_driver() {
    let errs = Fixture::new().errors(&lines(&[
        "[groups.ipmi]",
        "driver = \"ipmi\"",
        "ca_file = \"ca.pem\"", // 3: group sets driver → error
        "[groups.plain]",
        "cipher_suite = 17", // 5: no driver in group → ignored for redfish nodes
        "[nodes.a]",
        "group = \"plain\"",
        "driver = \"redfish\"",
        "endpoint = \"https://a\"",
        "username = \"u\"",
        "password_file = \"secrets/bmc-password\"",
        "port = 623", // 12: on the node → error
        "[nodes.b]",
        "group = \"ipmi\"",
        "address = \"b\"",
        "username = \"u\"",
        "password_file = \"secrets/bmc-password\"",
    ]));
    assert_eq!(errs.len(), 2, "{}", ConfigErrors(errs.clone()));
    let ca = find(&errs, "`ca_file` does not apply");
    assert_at(ca, None, 3, "ipmi");
    assert!(ca.message.starts_with("group \"ipmi\": "));
    let port = find(&errs, "`port` does not apply to driver \"redfish\"");
    assert_at(port, Some("a"), 12, "port");
    assert!(port.help.as_deref().unwrap().contains("used by: ipmi"));
}

#[test]
fn inherited_driver_is_named_when_a_node_field_does_not_apply() {
    let errs = Fixture::new().errors(&format!(
        "{DEFAULTS}[nodes.a]\nendpoint = \"https://a\"\ncipher_suite = 3\n"
    ));
    let e = find(&errs, "does not apply");
    assert_eq!(
        e.message,
        "`cipher_suite` does not apply to driver \"redfish\", from [defaults]"
    );
}

#[test]
fn invalid_node_names_suggest_the_lowercase_name() {
    let errs = Fixture::new().errors(&doc(&[node("Worker-1", &[])]));
    let e = find(&errs, "not a valid Kubernetes node name");
    assert_at(e, Some("Worker-1"), 1, "Worker-1");
    assert!(
        e.help.as_deref().unwrap().contains("[nodes.worker-1]"),
        "{e}"
    );
}

#[test]
fn a_duplicate_node_reads_well() {
    let mut parts = vec![node("a", &[]), node("b", &[]), node("a", &[])];
    parts[2].truncate(1);
    let errs = Fixture::new().errors(&doc(&parts));
    assert_eq!(errs.len(), 1, "{}", ConfigErrors(errs.clone()));
    let e = &errs[0];
    assert_eq!((e.line, e.column), (Some(11), Some(8)));
    assert_eq!(e.node.as_deref(), Some("a"));
    assert_eq!(e.message, "node \"a\" is defined twice (first at line 1)");
    let text = e.to_string();
    assert!(
        text.contains("inventory.toml:11:8: node \"a\": node \"a\" is defined twice"),
        "{text}"
    );
    assert!(
        e.help
            .as_deref()
            .unwrap()
            .contains("merge the two [nodes.a] tables")
    );
}

#[test]
fn an_empty_inventory_says_where_to_add_a_node() {
    for inv in ["", "[defaults]\ndriver = \"redfish\"\n", "[nodes]\n"] {
        let errs = Fixture::new().errors(inv);
        let e = find(&errs, "no nodes");
        assert!(
            e.help.as_deref().unwrap().contains("[nodes.worker-1]"),
            "{e}"
        );
    }
}

#[test]
fn nodes_and_groups_must_be_tables() {
    let errs = Fixture::new().errors("[nodes]\nworker-1 = \"rack-a\"\n[groups]\nrack-a = 1\n");
    assert_at(
        find(&errs, "a node must be a table"),
        Some("worker-1"),
        2,
        "string",
    );
    assert_at(find(&errs, "a group must be a table"), None, 4, "integer");
}

#[test]
fn an_unquoted_dotted_node_name_is_explained() {
    let errs = Fixture::new().errors("[nodes.ip-10-0-1-2.ec2.internal]\ndriver = \"aws\"\n");
    assert_eq!(errs.len(), 1, "{}", ConfigErrors(errs.clone()));
    let e = &errs[0];
    assert_at(e, Some("ip-10-0-1-2"), 1, "one node name");
    assert_eq!(
        e.help.as_deref(),
        Some("a node name containing dots must be quoted: [nodes.\"ip-10-0-1-2.ec2.internal\"]")
    );
}

#[test]
fn an_invalid_group_value_is_the_only_error_for_its_node() {
    let errs = Fixture::new().errors("[groups.g]\ndriver = \"aws\"\n[nodes.a]\ngroup = 5\n");
    assert_eq!(errs.len(), 1, "{}", ConfigErrors(errs.clone()));
    assert_at(&errs[0], Some("a"), 4, "`group` must be a string");
}
