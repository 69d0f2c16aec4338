//! Checks that need the whole chain or the machine: endpoints, credentials, CA files,
//! timeouts, and two nodes on one machine.

use super::*;
use crate::config::{IpmiPrivilege, PowerSource};

#[test]
fn ipmi_cipher_suites_and_limits() {
    let f = Fixture::new().env("LONG_PW", "123456789012345678901");
    let errs = f.errors(&lines(&[
        "[nodes.a]",
        "driver = \"ipmi\"",
        "address = \"10.0.0.1\"",
        "username = \"a-very-long-user-name\"", // 4
        "password_env = \"LONG_PW\"",           // 5
        "cipher_suite = 1",                     // 6
    ]));
    let cs = find(&errs, "cipher suite 1 is not supported");
    assert_at(cs, Some("a"), 6, "cipher suite");
    assert!(cs.help.as_deref().unwrap().contains("3 and 17"));
    assert_at(
        find(&errs, "IPMI v2.0 allows at most 16"),
        Some("a"),
        4,
        "username",
    );
    assert_at(
        find(&errs, "longer than IPMI v2.0 allows (20 bytes"),
        Some("a"),
        5,
        "LONG_PW",
    );
}

#[test]
fn ipmi_privilege_and_bmc_key() {
    let f = Fixture::new().env("KG_HEX", "0x0102030405060708090a0b0c0d0e0f1011121314");
    f.secret("secrets/kg", "text-key\n");
    let config = f.ok(&lines(&[
        "[defaults]",
        "driver = \"ipmi\"",
        "username = \"fence\"",
        "password_file = \"secrets/bmc-password\"",
        "[nodes.a]",
        "address = \"10.0.0.1\"",
        "[nodes.b]",
        "address = \"10.0.0.2\"",
        "privilege = \"OPERATOR\"",
        "kg_env = \"KG_HEX\"",
        "[nodes.c]",
        "address = \"10.0.0.3\"",
        "kg_file = \"secrets/kg\"",
    ]));
    let ipmi = |n: &str| match &config.inventory.nodes[n].power {
        PowerSource::Ipmi(t) => t.clone(),
        other => panic!("{other:?}"),
    };
    let (a, b, c) = (ipmi("a"), ipmi("b"), ipmi("c"));
    assert_eq!(a.privilege, IpmiPrivilege::Administrator);
    assert!(a.kg.is_none() && a.cipher_suite.is_none());
    assert_eq!(b.privilege, IpmiPrivilege::Operator);
    assert_eq!(
        b.kg.as_ref().unwrap().expose(),
        (1..=20).collect::<Vec<u8>>()
    );
    assert_eq!(c.kg.as_ref().unwrap().expose(), b"text-key");
    assert!(!format!("{:?}", config.inventory).contains("text-key"));

    let f = Fixture::new().env("KG_LONG", "0123456789abcdefghijk");
    let errs = f.errors(&lines(&[
        "[nodes.a]",
        "driver = \"ipmi\"",
        "address = \"10.0.0.1\"",
        "username = \"u\"",
        "password_file = \"secrets/bmc-password\"",
        "privilege = \"user\"", // 6
        "kg_env = \"KG_LONG\"", // 7
        "kg_file = \"k\"",      // 8
        "[nodes.b]",
        "driver = \"redfish\"",
        "endpoint = \"https://b\"",
        "username = \"u\"",
        "password_file = \"secrets/bmc-password\"",
        "kg_env = \"KG_LONG\"", // 14
    ]));
    assert_at(
        find(&errs, "\"operator\" or \"administrator\""),
        Some("a"),
        6,
        "privilege",
    );
    assert_at(find(&errs, "they are one setting"), Some("a"), 8, "kg_file");
    assert!(
        errs.iter()
            .all(|e| !e.to_string().contains("0123456789abcdefghijk"))
    );
    assert_at(
        find(&errs, "the BMC key is 21 bytes"),
        Some("a"),
        7,
        "KG_LONG",
    );
    assert_at(
        find(&errs, "does not apply to driver \"redfish\""),
        Some("b"),
        14,
        "kg_env",
    );
}

#[test]
fn aws_instance_tag() {
    let f = Fixture::new();
    let config = f.ok(&lines(&[
        "[groups.ec2]",
        "driver = \"aws\"",
        "region = \"eu-central-1\"",
        "instance_tag = { key = \"kubernetes.io/node\", value = \"{node}\" }",
        "[nodes.db-1]",
        "group = \"ec2\"",
    ]));
    match &config.inventory.nodes["db-1"].power {
        PowerSource::Aws(t) => assert_eq!(
            t.instance_tag,
            Some(("kubernetes.io/node".to_string(), "db-1".to_string()))
        ),
        other => panic!("{other:?}"),
    }
    let errs = f.errors(&lines(&[
        "[nodes.a]",
        "driver = \"aws\"",
        "instance_tag = { key = \"Name\" }", // 3
        "[nodes.b]",
        "driver = \"aws\"",
        "instance_tag = { key = \"Name\", value = \"x\", vaule = \"y\" }", // 6
    ]));
    assert_at(
        find(&errs, "needs both `key` and `value`"),
        Some("a"),
        3,
        "instance_tag",
    );
    assert_at(find(&errs, "unknown key `vaule`"), Some("b"), 6, "vaule");
}

#[test]
fn endpoint_errors() {
    let errs = Fixture::new().errors(&doc(&[
        node("a", &[])
            .into_iter()
            .take(4)
            .chain(["endpoint = \"https://bmc/redfish/v1\"".to_string()])
            .collect(),
        node("b", &[])
            .into_iter()
            .take(4)
            .chain(["endpoint = \"bmc-b.example.com\"".to_string()])
            .collect(),
        node("c", &[])
            .into_iter()
            .take(4)
            .chain(["endpoint = \"https://c?x=1\"".to_string()])
            .collect(),
    ]));
    assert_at(find(&errs, "adds it itself"), Some("a"), 5, "/redfish/v1");
    assert_at(
        find(&errs, "starting with https://"),
        Some("b"),
        10,
        "endpoint",
    );
    assert_at(find(&errs, "query"), Some("c"), 15, "endpoint");
}

#[test]
fn two_nodes_on_one_machine_is_an_error_naming_both() {
    let errs = Fixture::new().errors(&lines(&[
        "[defaults]",
        "driver = \"redfish\"",
        "username = \"fence\"",
        "password_file = \"secrets/bmc-password\"",
        "[groups.rack]",
        "endpoint = \"https://rack-bmc.example.com\"", // 6: no {node}
        "[nodes.a]",
        "group = \"rack\"",
        "[nodes.b]", // 8
        "group = \"rack\"",
        "[nodes.c]", // 11
        "driver = \"ipmi\"",
        "address = \"10.0.0.9\"",
        "[nodes.d]", // 14
        "driver = \"ipmi\"",
        "address = \"10.0.0.9\"",
        "port = 623",
        "[nodes.e]",
        "endpoint = \"https://RACK-bmc.example.com:443/\"",
        "system_id = \"1\"", // different system: fine
    ]));
    assert_eq!(errs.len(), 2, "{}", ConfigErrors(errs.clone()));
    let rf = find(&errs, "same machine as node \"a\"");
    assert_at(rf, Some("b"), 9, "rack-bmc.example.com:443");
    assert!(rf.message.contains("no system_id"));
    assert!(rf.help.as_deref().unwrap().contains("{node}"));
    assert_at(
        find(&errs, "same machine as node \"c\""),
        Some("d"),
        14,
        "IPMI BMC 10.0.0.9:623",
    );
}

#[test]
fn credential_errors() {
    let f = Fixture::new();
    f.secret("secrets/empty", "\n");
    f.secret("secrets/two-lines", "one\ntwo\n");
    let errs = f.errors(&lines(&[
        "[defaults]",
        "driver = \"redfish\"",
        "username = \"fence\"",
        "[nodes.a]",
        "endpoint = \"https://a\"",
        "password_file = \"secrets/empty\"", // 6
        "[nodes.b]",
        "endpoint = \"https://b\"",
        "password_file = \"secrets/two-lines\"", // 9
        "[nodes.c]",
        "endpoint = \"https://c\"",
        "password_env = \"UNSET_VAR\"", // 12
        "[nodes.d]",
        "endpoint = \"https://d\"",
        "password_env = \"$BMC_PW\"", // 15
        "[nodes.e]",
        "endpoint = \"https://e\"",
        "username = \"\"", // 18
        "password_file = \"secrets/bmc-password\"",
    ]));
    assert_at(
        find(&errs, "secrets/empty is empty"),
        Some("a"),
        6,
        "password_file",
    );
    assert_at(
        find(&errs, "more than one line"),
        Some("b"),
        9,
        "password_file",
    );
    let unset = find(&errs, "UNSET_VAR (password_env) is not set");
    assert_at(unset, Some("c"), 12, "UNSET_VAR");
    let dollar = find(&errs, "not an environment variable name");
    assert_at(dollar, Some("d"), 15, "password_env");
    assert!(dollar.help.as_deref().unwrap().contains("without `$`"));
    assert_at(
        find(&errs, "`username` is empty"),
        Some("e"),
        18,
        "username",
    );
}

#[test]
fn an_inherited_problem_is_reported_once_where_it_is_written() {
    let mut inv = lines(&[
        "[groups.rack]",
        "driver = \"redfish\"",
        "endpoint = \"https://{node}-bmc\"",
        "username = \"fence\"",
        "password_file = \"secrets/missing\"", // 5
    ]);
    for i in 0..20 {
        inv.push_str(&format!("[nodes.n{i}]\ngroup = \"rack\"\n"));
    }
    let errs = Fixture::new().errors(&inv);
    assert_eq!(errs.len(), 1, "{}", ConfigErrors(errs.clone()));
    assert_at(&errs[0], None, 5, "password_file");
    assert!(
        errs[0]
            .message
            .starts_with("group \"rack\": password_file ")
    );
    assert!(errs[0].help.as_deref().unwrap().contains("password_env"));
}

#[test]
fn ca_file_and_insecure() {
    let f = Fixture::new();
    f.write("not-a-ca.pem", "hello\n");
    let errs = f.errors(&doc(&[
        node("a", &["ca_file = \"not-a-ca.pem\""]), // 6
        node("b", &["ca_file = \"ca.pem\"", "insecure = true"]), // 13
        node("c", &["ca_file = \"missing.pem\""]),  // 19
    ]));
    assert_at(
        find(&errs, "contains no PEM certificate"),
        Some("a"),
        6,
        "ca_file",
    );
    assert_at(find(&errs, "contradict"), Some("b"), 13, "ca_file");
    assert_at(
        find(&errs, "missing.pem does not exist"),
        Some("c"),
        19,
        "ca_file",
    );
}

#[test]
fn timeouts_must_nest_and_name_where_each_comes_from() {
    let errs = Fixture::new().errors(&lines(&[
        "[defaults]",
        "driver = \"aws\"",
        "connect_timeout = \"20s\"", // 3 > default request 10s
        "[nodes.a]",
        "operation_timeout = \"15s\"", // 5
        "request_timeout = \"30s\"",   // 6
    ]));
    // The defaults alone (20s > 10s built-in) are overridden by node a's 30s request.
    assert_eq!(errs.len(), 1, "{}", ConfigErrors(errs.clone()));
    let e = &errs[0];
    assert_at(
        e,
        Some("a"),
        5,
        "request_timeout (30s) is longer than operation_timeout (15s)",
    );

    let errs = Fixture::new().errors(
        "[defaults]\ndriver = \"aws\"\nconnect_timeout = \"20s\"\nrequest_timeout = \"10s\"\n\
         [nodes.a]\n[nodes.b]\n",
    );
    assert_eq!(
        errs.len(),
        1,
        "reported once for both nodes: {}",
        ConfigErrors(errs.clone())
    );
    assert_eq!(
        errs[0].message,
        "[defaults]: connect_timeout (20s) is longer than request_timeout (10s)"
    );

    let errs = Fixture::new().errors(
        "[groups.g]\ndriver = \"aws\"\nconnect_timeout = \"2m\"\n\
         [nodes.a]\ngroup = \"g\"\noperation_timeout = \"1m\"\n",
    );
    assert_eq!(
        errs[0].message,
        "connect_timeout (2m, from group \"g\") is longer than operation_timeout (1m)"
    );
}

#[test]
fn unset_timeouts_adapt_to_the_written_ones() {
    let config = Fixture::new().ok("[defaults]\ndriver = \"aws\"\n\
         [nodes.a]\nrequest_timeout = \"3s\"\n\
         [nodes.b]\nconnect_timeout = \"20s\"\n\
         [nodes.c]\noperation_timeout = \"4s\"\n\
         [nodes.d]\nrequest_timeout = \"90s\"\n");
    let t = |n: &str| match &config.inventory.nodes[n].power {
        crate::config::PowerSource::Aws(a) => {
            let t = a.timeouts;
            [t.connect, t.request, t.operation].map(|d| d.as_secs())
        }
        _ => panic!("aws"),
    };
    assert_eq!(t("a"), [3, 3, 60]);
    assert_eq!(t("b"), [20, 20, 60]);
    assert_eq!(t("c"), [4, 4, 4]);
    assert_eq!(t("d"), [5, 90, 90]);
}

#[test]
fn an_invalid_timeout_is_not_compared_with_a_default() {
    let errs = Fixture::new().errors(
        "[nodes.a]\ndriver = \"aws\"\nconnect_timeout = \"20s\"\nrequest_timeout = \"15\"\n",
    );
    assert_eq!(errs.len(), 1, "{}", ConfigErrors(errs.clone()));
    assert_at(&errs[0], Some("a"), 4, "request_timeout");
}

#[test]
fn exec_options_never_hold_a_password() {
    let errs = Fixture::new().errors(
        "[nodes.a]\ndriver = \"exec\"\nagent = \"/bin/sh\"\noptions = { ip = \"pdu\", passwd = \"pdu-secret\" }\n",
    );
    let e = find(&errs, "would hold a password");
    assert_at(e, Some("a"), 4, "passwd");
    assert!(
        !ConfigErrors(errs.clone())
            .to_string()
            .contains("pdu-secret")
    );
}

#[test]
fn exec_options_that_cannot_reach_the_agent_intact_are_refused_at_load() {
    // Each of these once passed `validate` and failed only when the agent ran.
    let cases = [
        ("plug = \"7\\nreboot\"", "plug", "line break"),
        ("plug = \"7\\r\"", "plug", "line break"),
        ("plug = \" 7\"", "plug", "white space"),
        ("plug = '\"7\"'", "plug", "double quotes"),
        ("\"bad name\" = \"7\"", "bad name", "not an option name"),
        ("action = \"off\"", "action", "set by nodefence itself"),
    ];
    for (option, key, why) in cases {
        let errs = Fixture::new().errors(&format!(
            "[nodes.a]\ndriver = \"exec\"\nagent = \"/bin/sh\"\noptions = {{ ip = \"pdu\", {option} }}\n"
        ));
        assert_eq!(errs.len(), 1, "{option}: {}", ConfigErrors(errs.clone()));
        assert_at(&errs[0], Some("a"), 4, why);
        assert!(
            errs[0].message.contains(key),
            "{option}: {}",
            errs[0].message
        );
    }
}

#[test]
fn same_machine_is_reported_even_when_the_nodes_have_other_problems() {
    let errs = Fixture::new().errors(&lines(&[
        "[groups.rack-b]",
        "driver = \"redfish\"",
        "username = \"fence\"",
        "endpoint = \"https://rack-b-chassis\"",
        "password_env = \"RACK_B_PW\"", // 5: not set
        "[nodes.a]",
        "group = \"rack-b\"",
        "[nodes.b]", // 8
        "group = \"rack-b\"",
    ]));
    assert_eq!(errs.len(), 2, "{}", ConfigErrors(errs.clone()));
    assert_at(find(&errs, "RACK_B_PW"), None, 5, "is not set");
    assert_at(
        find(&errs, "same machine as node \"a\""),
        Some("b"),
        8,
        "rack-b-chassis:443",
    );
}

#[test]
fn two_exec_or_tagged_aws_nodes_on_one_machine_are_errors_too() {
    let errs = Fixture::new().errors(&lines(&[
        "[groups.pdu]",
        "driver = \"exec\"",
        "agent = \"/bin/sh\"",
        "options = { ip = \"pdu-1\", plug = \"{node}\" }",
        "[nodes.a]",
        "group = \"pdu\"",
        "[nodes.b]", // 7: its own options override the group's plug
        "group = \"pdu\"",
        "options = { plug = \"a\" }",
        "[nodes.c]",
        "driver = \"aws\"",
        "instance_tag = { key = \"Name\", value = \"db\" }",
        "[nodes.d]", // 13
        "driver = \"aws\"",
        "instance_tag = { key = \"Name\", value = \"db\" }",
        "[nodes.e]",
        "driver = \"aws\"",
        "instance_tag = { key = \"Name\", value = \"{node}\" }",
    ]));
    let exec = find(&errs, "same machine as node \"a\"");
    assert_at(exec, Some("b"), 7, "fence agent sh with ip=pdu-1 plug=a");
    let tag = find(&errs, "same machine as node \"c\"");
    assert_at(tag, Some("d"), 13, "EC2 instance tagged Name=db");
    assert_eq!(errs.len(), 2, "{}", ConfigErrors(errs.clone()));
}

#[test]
fn a_fence_ipmilan_entry_and_an_ipmi_entry_for_one_bmc_are_one_machine() {
    let f = Fixture::new();
    // Any executable will do: the check compares what the entries reach.
    let agent = f.path("fence_idrac");
    std::fs::copy("/bin/sh", &agent).unwrap();
    let errs = f.errors(&lines(&[
        DEFAULTS.trim_end(),
        "[nodes.a]",
        "driver = \"ipmi\"",
        "address = \"10.0.9.21\"",
        "[nodes.b]", // 8
        "driver = \"exec\"",
        "agent = \"fence_idrac\"",
        "options = { ip = \"10.0.9.21\", lanplus = \"1\" }",
        "[nodes.c]", // another port of that host: another BMC
        "driver = \"exec\"",
        "agent = \"fence_idrac\"",
        "options = { ip = \"10.0.9.21\", ipport = \"6230\" }",
    ]));
    let same = find(&errs, "same machine as node \"a\"");
    assert_at(same, Some("b"), 8, "IPMI BMC 10.0.9.21:623");
    assert_eq!(errs.len(), 1, "{}", ConfigErrors(errs.clone()));
}

const PIN: &str = "sha256:3A:7B:00:FF:10:20:30:40:50:60:70:80:90:A0:B0:C0:D0:E0:F0:01:02:03:04:05:06:07:08:09:0A:0B:0C:0D";

fn tls_of(config: &Config, node: &str) -> crate::config::TlsSettings {
    match &config.inventory.nodes[node].power {
        PowerSource::Redfish(r) => r.tls.clone(),
        other => panic!("{node} is {}", other.driver_name()),
    }
}

#[test]
fn tls_fingerprint_pins_a_bmc_and_a_node_pin_replaces_its_groups_ca_file() {
    let inv = lines(&[
        "[groups.rack]",
        "ca_file = \"ca.pem\"",
        "[nodes.a]",
        "group = \"rack\"",
        NODE_OK[0],
        NODE_OK[1],
        NODE_OK[2],
        NODE_OK[3],
        &format!("tls_fingerprint = \"{PIN}\""),
        "[nodes.b]",
        "group = \"rack\"",
        NODE_OK[0],
        NODE_OK[1],
        NODE_OK[2],
        NODE_OK[3],
        "[nodes.c]",
        NODE_OK[0],
        NODE_OK[1],
        NODE_OK[2],
        NODE_OK[3],
        // openssl's own output line is accepted as written.
        &format!("tls_fingerprint = \"sha256 Fingerprint={}\"", &PIN[7..]),
    ]);
    let config = Fixture::new().ok(&inv);
    let a = tls_of(&config, "a");
    assert_eq!(a.fingerprint.map(|f| f.to_string()).as_deref(), Some(PIN));
    assert_eq!(
        a.ca_file, None,
        "the node's pin replaces the group's CA file"
    );
    let b = tls_of(&config, "b");
    assert!(b.ca_file.is_some() && b.fingerprint.is_none(), "{b:?}");
    assert_eq!(tls_of(&config, "c").fingerprint, a.fingerprint);
}

#[test]
fn tls_fingerprint_conflicts_and_bad_values_are_errors_at_their_line() {
    let errs = Fixture::new().errors(&doc(&[
        node(
            "a",
            &[&format!("tls_fingerprint = \"{PIN}\""), "insecure = true"],
        ), // 6, 7
        node(
            "b",
            &[
                "ca_file = \"ca.pem\"",
                &format!("tls_fingerprint = \"{PIN}\""),
            ],
        ), // 13, 14
        node("c", &["tls_fingerprint = \"SHA1 Fingerprint=AA:BB\""]), // 20
        node("d", &["tls_fingerprint = \"sha256:AB:CD\""]),           // 26
    ]));
    assert_eq!(errs.len(), 4, "{}", ConfigErrors(errs.clone()));
    assert_at(
        find(&errs, "`insecure = true` and `tls_fingerprint`"),
        Some("a"),
        7,
        "insecure",
    );
    assert_at(
        find(&errs, "at the same level"),
        Some("b"),
        14,
        "tls_fingerprint",
    );
    let sha1 = find(&errs, "only SHA-256");
    assert_at(sha1, Some("c"), 20, "tls_fingerprint");
    assert!(
        sha1.help
            .as_deref()
            .unwrap()
            .contains("nodefence tls-fingerprint")
    );
    assert_at(
        find(&errs, "64 hex digits"),
        Some("d"),
        26,
        "tls_fingerprint",
    );
}

#[test]
fn tls_fingerprint_does_not_apply_to_ipmi() {
    let errs = Fixture::new().errors(&lines(&[
        "[nodes.a]",
        "driver = \"ipmi\"",
        "address = \"10.0.0.1\"",
        "username = \"fence\"",
        "password_file = \"secrets/bmc-password\"",
        &format!("tls_fingerprint = \"{PIN}\""),
    ]));
    assert_eq!(errs.len(), 1, "{}", ConfigErrors(errs.clone()));
    assert_at(&errs[0], Some("a"), 6, "tls_fingerprint");
}
