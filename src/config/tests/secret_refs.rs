//! `password_secret`: what the loader accepts and leaves pending (the Secret itself is
//! read later, with cluster access, by `resolve_secrets`).

use super::*;
use crate::config::{PowerSource, SecretRef, SecretSource};

fn secret_of(config: &Config, node: &str) -> SecretRef {
    let target = &config.inventory.nodes[node];
    let credential = target.credential().expect("has a credential");
    assert!(credential.is_pending(), "{node}: {:?}", credential.source);
    match &credential.source {
        SecretSource::SecretPending(r) => r.clone(),
        other => panic!("{node}: {other:?}"),
    }
}

#[test]
fn a_secret_reference_is_pending_with_its_keys_and_where_it_is_written() {
    let config = Fixture::new().ok(&lines(&[
        "[defaults]",                                      // 1
        "driver = \"redfish\"",                            // 2
        "username = \"fence\"",                            // 3
        "password_secret = \"nodefence/bmc-credentials\"", // 4
        "[groups.rack-b]",                                 // 5
        "password_secret = \"bmc-rack-b\"",                // 6
        "password_secret_key = \"bmc-password\"",          // 7
        "username_secret_key = \"bmc-user\"",              // 8
        "[nodes.a]",                                       // 9
        "endpoint = \"https://a-bmc\"",                    // 10
        "[nodes.b]",                                       // 11
        "group = \"rack-b\"",                              // 12
        "endpoint = \"https://b-bmc\"",                    // 13
        "[nodes.c]",                                       // 14
        "group = \"rack-b\"",                              // 15
        "endpoint = \"https://c-bmc\"",                    // 16
        "username = \"admin\"",                            // 17
        "[nodes.d]",                                       // 18
        "endpoint = \"https://d-bmc\"",                    // 19
        "password_file = \"secrets/bmc-password\"",        // 20
    ]));
    let a = secret_of(&config, "a");
    assert_eq!(a.namespace.as_deref(), Some("nodefence"));
    assert_eq!(a.name, "bmc-credentials");
    assert_eq!(a.password_key, "password", "the default key");
    assert_eq!(a.username_key, None);
    assert!(
        a.written_at.ends_with("inventory.toml:4:19"),
        "{}",
        a.written_at
    );
    assert_eq!(
        config.inventory.nodes["a"].credential().unwrap().username,
        "fence"
    );

    // A bare name: nodefence's own namespace, decided when the Secret is read.
    let b = secret_of(&config, "b");
    assert_eq!(
        (b.namespace.as_deref(), b.name.as_str()),
        (None, "bmc-rack-b")
    );
    assert_eq!(b.password_key, "bmc-password");
    assert_eq!(b.username_key.as_deref(), Some("bmc-user"));
    assert_eq!(
        config.inventory.nodes["b"].credential().unwrap().username,
        ""
    );

    // `username` on the node is more specific than the group's username_secret_key.
    let c = secret_of(&config, "c");
    assert_eq!(c.username_key, None);
    assert_eq!(
        config.inventory.nodes["c"].credential().unwrap().username,
        "admin"
    );

    // A node's own source replaces the inherited Secret entirely.
    let d = config.inventory.nodes["d"].credential().unwrap();
    assert!(!d.is_pending());
    assert!(matches!(d.source, SecretSource::File(_)));
    assert!(config.inventory.nodes["d"].pending_secret().is_none());

    let shown = SecretSource::SecretPending(a).to_string();
    assert_eq!(
        shown,
        "Kubernetes Secret nodefence/bmc-credentials, key \"password\" (not read yet)"
    );
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
}

#[test]
fn secret_settings_are_checked_where_they_are_written() {
    let errs = Fixture::new().errors(&lines(&[
        "[defaults]",                               // 1
        "driver = \"redfish\"",                     // 2
        "username = \"fence\"",                     // 3
        "[nodes.a]",                                // 4
        "endpoint = \"https://a-bmc\"",             // 5
        "password_secret = \"not/a/secret\"",       // 6
        "[nodes.b]",                                // 7
        "endpoint = \"https://b-bmc\"",             // 8
        "password_file = \"secrets/bmc-password\"", // 9
        "password_secret = \"bmc\"",                // 10
        "[nodes.c]",                                // 11
        "endpoint = \"https://c-bmc\"",             // 12
        "password_file = \"secrets/bmc-password\"", // 13
        "password_secret_key = \"pw\"",             // 14
        "[nodes.d]",                                // 15
        "endpoint = \"https://d-bmc\"",             // 16
        "password_secret = \"bmc\"",                // 17
        "username = \"admin\"",                     // 18
        "username_secret_key = \"user\"",           // 19
        "password_secret_key = \"pass word\"",      // 20
        "[nodes.e]",                                // 21
        "endpoint = \"https://e-bmc\"",             // 22
        "password_secret = \"BadNamespace/bmc\"",   // 23
    ]));
    assert_eq!(errs.len(), 6, "{}", ConfigErrors(errs.clone()));
    let name = find(&errs, "is not the name of a Kubernetes Secret");
    assert_at(name, Some("a"), 6, "password_secret");
    assert!(
        name.help
            .as_deref()
            .unwrap()
            .contains("\"<namespace>/<name>\"")
    );
    assert_at(
        find(&errs, "`password_file` and `password_secret` are both set"),
        Some("b"),
        10,
        "password_secret",
    );
    assert_at(
        find(
            &errs,
            "`password_secret_key` applies only to password_secret",
        ),
        Some("c"),
        14,
        "password_file",
    );
    assert_at(
        find(&errs, "`username` and `username_secret_key` are both set"),
        Some("d"),
        19,
        "username_secret_key",
    );
    assert_at(
        find(&errs, "`password_secret_key` is not a valid key"),
        Some("d"),
        20,
        "password_secret_key",
    );
    assert_at(
        find(&errs, "does not start with a valid namespace name"),
        Some("e"),
        23,
        "password_secret",
    );
}

#[test]
fn inherited_secret_keys_a_node_does_not_use_are_ignored_but_its_own_are_not() {
    let f = Fixture::new();
    let config = f.ok(&lines(&[
        "[defaults]",
        "driver = \"redfish\"",
        "username = \"fence\"",
        "password_file = \"secrets/bmc-password\"",
        "[groups.g]",
        "password_secret_key = \"bmc-password\"",
        "[nodes.a]",
        "group = \"g\"",
        "endpoint = \"https://a-bmc\"",
        "[nodes.b]",
        "group = \"g\"",
        "endpoint = \"https://b-bmc\"",
        "password_secret = \"other/bmc\"",
    ]));
    assert!(
        !config.inventory.nodes["a"]
            .credential()
            .unwrap()
            .is_pending()
    );
    assert_eq!(secret_of(&config, "b").password_key, "bmc-password");

    let errs = f.errors(&lines(&[
        "[defaults]",                               // 1
        "driver = \"redfish\"",                     // 2
        "username = \"fence\"",                     // 3
        "password_file = \"secrets/bmc-password\"", // 4
        "[nodes.a]",                                // 5
        "endpoint = \"https://a-bmc\"",             // 6
        "username_secret_key = \"user\"",           // 7
    ]));
    assert_eq!(errs.len(), 1, "{}", ConfigErrors(errs.clone()));
    assert_at(
        &errs[0],
        Some("a"),
        7,
        "`username_secret_key` applies only to password_secret",
    );
}

#[test]
fn a_secret_needs_a_username_from_somewhere_and_ipmi_limits_still_apply_to_a_written_one() {
    let errs = Fixture::new().errors(&lines(&[
        "[nodes.a]",                            // 1
        "driver = \"redfish\"",                 // 2
        "endpoint = \"https://a-bmc\"",         // 3
        "password_secret = \"bmc\"",            // 4
        "[nodes.b]",                            // 5
        "driver = \"ipmi\"",                    // 6
        "address = \"10.0.0.2\"",               // 7
        "username = \"a-very-long-user-name\"", // 8
        "password_secret = \"bmc\"",            // 9
    ]));
    assert_eq!(errs.len(), 2, "{}", ConfigErrors(errs.clone()));
    let missing = find(&errs, "no `username` for driver \"redfish\"");
    assert_eq!(missing.node.as_deref(), Some("a"));
    assert!(
        missing
            .help
            .as_deref()
            .unwrap()
            .contains("username_secret_key")
    );
    assert_at(
        find(&errs, "IPMI v2.0 allows at most 16"),
        Some("b"),
        8,
        "username",
    );
}

#[test]
fn exec_and_ipmi_nodes_can_use_secrets_and_no_password_is_made_up() {
    let f = Fixture::new();
    f.write("fence_test", "#!/bin/sh\n");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(f.path("fence_test"), fs::Permissions::from_mode(0o755)).unwrap();
    }
    let config = f.ok(&lines(&[
        "[defaults]",
        "password_secret = \"bmc\"",
        "username_secret_key = \"username\"",
        "[nodes.pdu]",
        "driver = \"exec\"",
        "agent = \"fence_test\"",
        "[nodes.db]",
        "driver = \"ipmi\"",
        "address = \"10.0.0.3\"",
    ]));
    for node in ["pdu", "db"] {
        let r = secret_of(&config, node);
        assert_eq!(r.username_key.as_deref(), Some("username"));
        let c = config.inventory.nodes[node].credential().unwrap();
        use secrecy::ExposeSecret;
        assert_eq!(
            c.password.expose_secret(),
            "",
            "nothing until the Secret is read"
        );
    }
    assert!(matches!(
        config.inventory.nodes["db"].power,
        PowerSource::Ipmi(_)
    ));
}
