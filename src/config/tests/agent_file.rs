//! `nodefence.toml` errors.

use super::*;

const ONE_NODE: &str = "[nodes.a]\ndriver = \"aws\"\n";

fn agent_errors(agent: &str) -> Vec<ConfigError> {
    let f = Fixture::new();
    f.agent(agent);
    f.errors(ONE_NODE)
}

#[test]
fn unknown_keys_are_rejected_in_every_section() {
    let errs = agent_errors(
        "inventory = \"inventory.toml\"\ninventroy_dir = \"x\"\n[power]\nconfirm_reading = 3\n\
         [security]\nallow_inline_password = true\n[metrics]\n[remediation]\nrequest = true\n",
    );
    assert_eq!(errs.len(), 5, "{}", ConfigErrors(errs.clone()));
    assert_eq!(
        find(&errs, "request`").help.as_deref(),
        Some("did you mean `requests`?")
    );
    assert_eq!(
        find(&errs, "confirm_reading`").help.as_deref(),
        Some("did you mean `confirm_readings`?")
    );
    assert_eq!(
        find(&errs, "allow_inline_password`").help.as_deref(),
        Some("did you mean `allow_inline_passwords`?")
    );
    let metrics = find(&errs, "`metrics`");
    assert_eq!(metrics.line, Some(7));
    assert_eq!(
        metrics.help.as_deref(),
        Some(
            "allowed keys in nodefence.toml: inventory, power, policy, remediation, security, \
             metal3"
        )
    );
    assert!(errs.iter().all(|e| e.file.ends_with("nodefence.toml")));
}

#[test]
fn bad_durations_name_the_field_and_show_accepted_forms() {
    let errs = agent_errors(
        "inventory = \"inventory.toml\"\n[power]\nconfirm_interval = \"5\"\nconfirm_timeout = 30\n",
    );
    assert_eq!(errs.len(), 2, "{}", ConfigErrors(errs.clone()));
    let interval = find(&errs, "`confirm_interval` is not a valid duration");
    assert_eq!((interval.line, interval.column), (Some(3), Some(20)));
    assert!(
        interval
            .help
            .as_deref()
            .unwrap()
            .contains("\"500ms\", \"10s\", \"2m\"")
    );
    let timeout = find(&errs, "`confirm_timeout` must be a duration string");
    assert_eq!(timeout.line, Some(4));
}

#[test]
fn absurd_durations_are_refused_at_load_not_when_a_timer_overflows() {
    // `confirm_timeout = "200000000000000d"` once passed validate and made `fence`
    // panic adding it to an Instant. Every duration field shares the bound.
    let errs = agent_errors(
        "inventory = \"inventory.toml\"\n[power]\nconfirm_timeout = \"200000000000000d\"\n\
         monitor_interval = \"367d\"\n[policy]\nunhealthy_after = \"9999999999h\"\n",
    );
    assert_eq!(errs.len(), 3, "{}", ConfigErrors(errs.clone()));
    for (field, line) in [
        ("confirm_timeout", 3),
        ("monitor_interval", 4),
        ("unhealthy_after", 6),
    ] {
        let e = find(&errs, &format!("`{field}` is "));
        assert_eq!(e.line, Some(line), "{e}");
        assert!(e.message.contains("above the longest"), "{e}");
    }
    // A year is still a setting someone may mean.
    let f = Fixture::new();
    f.agent("inventory = \"inventory.toml\"\n[power]\nmonitor_interval = \"365d\"\n");
    if let Err(errs) = f.load(ONE_NODE) {
        assert!(!errs.to_string().contains("monitor_interval"), "{errs}");
    }
}

#[test]
fn zero_interval_is_fine_but_zero_timeout_and_readings_are_not() {
    let errs = agent_errors(
        "inventory = \"inventory.toml\"\n[power]\nconfirm_interval = \"0s\"\nconfirm_timeout = \"0s\"\n\
         confirm_readings = 0\nmax_concurrent_requests = 0\n",
    );
    assert_eq!(errs.len(), 3, "{}", ConfigErrors(errs.clone()));
    assert_eq!(
        find(&errs, "`confirm_timeout` must be greater than zero").line,
        Some(4)
    );
    assert_eq!(
        find(&errs, "`confirm_readings` must be between 1").line,
        Some(5)
    );
    assert_eq!(
        find(&errs, "`max_concurrent_requests` must be between 1").line,
        Some(6)
    );
}

#[test]
fn a_timeout_too_short_for_the_readings_is_an_error() {
    let errs = agent_errors(
        "inventory = \"inventory.toml\"\n[power]\nconfirm_readings = 5\nconfirm_interval = \"10s\"\n\
         confirm_timeout = \"30s\"\n",
    );
    let e = find(&errs, "too short to take 5 readings 10s apart");
    assert_eq!(e.line, Some(5));
    assert!(e.help.as_deref().unwrap().contains("= 40s"));
}

#[test]
fn inventory_is_required_and_must_exist() {
    let errs = agent_errors("[power]\nconfirm_readings = 2\n");
    let e = find(&errs, "`inventory` is not set");
    assert_eq!(e.line, None);
    assert!(
        e.help
            .as_deref()
            .unwrap()
            .contains("inventory = \"inventory.toml\"")
    );

    let errs = agent_errors("# comment\ninventory = \"nowhere/inv.toml\"\n");
    let e = find(&errs, "nowhere/inv.toml: file does not exist");
    assert_eq!((e.line, e.column), (Some(2), Some(13)));
    assert!(e.file.ends_with("nodefence.toml"));
}

#[test]
fn a_missing_or_broken_agent_file() {
    let f = Fixture::new();
    let err = load_with_env(&f.path("nope.toml"), &|_| None).expect_err("missing");
    assert_eq!(err.len(), 1);
    assert!(
        err.to_string().ends_with("nope.toml: file does not exist"),
        "{err}"
    );

    f.agent("inventory = \"inventory.toml\n");
    let err = load_with_env(&f.path("nodefence.toml"), &|_| None).expect_err("syntax");
    assert!(err.0[0].message.starts_with("TOML syntax error"), "{err}");
    assert_eq!(err.0[0].line, Some(1));
}

#[test]
fn errors_in_both_files_come_together_agent_file_first() {
    let f = Fixture::new();
    f.agent("inventory = \"inventory.toml\"\n[security]\nallow_inline_passwords = \"yes\"\n");
    let errs = f.errors("[nodes.A]\ndriver = \"aws\"\n");
    assert_eq!(errs.len(), 2, "{}", ConfigErrors(errs.clone()));
    assert!(errs[0].file.ends_with("nodefence.toml"));
    assert!(
        errs[0]
            .message
            .contains("`allow_inline_passwords` must be true or false")
    );
    assert!(errs[1].file.ends_with("inventory.toml"));
    assert_eq!(errs[1].node.as_deref(), Some("A"));
}

#[test]
fn metal3_settings_are_read_and_checked_like_the_rest() {
    let errs = agent_errors(
        "inventory = \"inventory.toml\"\n[metal3]\nhost = true\nnamespaces = [\"Metal3\"]\n\
         allow_insecure = \"yes\"\nca_file = \"missing.pem\"\n",
    );
    assert_eq!(errs.len(), 4, "{}", ConfigErrors(errs.clone()));
    let unknown = find(&errs, "unknown key `host` in [metal3]");
    assert_eq!(unknown.line, Some(3));
    assert_eq!(unknown.help.as_deref(), Some("did you mean `hosts`?"));
    let ns = find(&errs, "\"Metal3\" is not a Kubernetes namespace name");
    assert_eq!((ns.line, ns.column), (Some(4), Some(15)));
    find(&errs, "`allow_insecure` must be true or false");
    find(&errs, "missing.pem does not exist");

    // hosts = true needs namespaces: which machines may be powered off is written down.
    let errs = agent_errors("inventory = \"inventory.toml\"\n[metal3]\nhosts = true\n");
    let e = find(&errs, "[metal3] hosts = true needs `namespaces`");
    assert_eq!(e.line, Some(2));
    assert!(
        e.help
            .as_deref()
            .unwrap()
            .contains("namespaces = [\"metal3\"]")
    );
    let errs = agent_errors(
        "inventory = \"inventory.toml\"\n[metal3]\nhosts = true\nnamespaces = [\"a\", \"a\"]\n",
    );
    find(&errs, "namespace \"a\" is listed twice");
}

#[test]
fn metal3_hosts_alone_or_beside_the_inventory() {
    let f = Fixture::new();
    f.agent(
        "inventory = \"inventory.toml\"\n[metal3]\nhosts = true\nnamespaces = [\"metal3\", \"rack-b\"]\n\
         allow_insecure = true\nca_file = \"ca.pem\"\n",
    );
    // Beside an inventory that may hold no node of its own.
    let config = f.ok("[defaults]\ndriver = \"redfish\"\n");
    assert!(config.inventory.nodes.is_empty());
    let m = &config.agent.metal3;
    assert!(m.hosts && m.allow_insecure);
    assert_eq!(m.namespaces, ["metal3", "rack-b"]);
    assert!(m.ca_file.as_ref().unwrap().ends_with("ca.pem"));
    assert!(m.policy.require_identity, "a BMC driver's default");
    assert_eq!(
        m.resync(),
        Some(crate::config::DEFAULT_METAL3_RESYNC),
        "listed again every minute by default"
    );
    assert!(
        config
            .warnings
            .iter()
            .any(|w| w.contains("allow_insecure = true")),
        "{:?}",
        config.warnings
    );
    // Alone: no inventory file at all.
    f.agent("[metal3]\nhosts = true\nnamespaces = [\"metal3\"]\n");
    let env = |_: &str| None;
    let config = load_with_env(&f.path("nodefence.toml"), &env).unwrap();
    assert!(config.inventory.nodes.is_empty());
    assert_eq!(config.inventory_path, config.config_path);
    // Without [metal3], an inventory stays required and must hold nodes.
    f.agent("[metal3]\nhosts = false\n");
    let errs = load_with_env(&f.path("nodefence.toml"), &env).unwrap_err();
    find(&errs.0, "`inventory` is not set");
    // An inventory entry's origin is its file and line.
    f.agent("inventory = \"inventory.toml\"\n");
    let config = f.ok("[nodes.a]\ndriver = \"aws\"\n\n[nodes.b]\ndriver = \"aws\"\n");
    assert!(
        config.inventory.nodes["b"]
            .origin
            .to_string()
            .ends_with("inventory.toml:4")
    );
}

#[test]
fn metal3_resync_interval_is_a_duration_and_zero_turns_it_off() {
    let f = Fixture::new();
    let env = |_: &str| None;
    let load = |resync: &str| {
        f.agent(&format!(
            "[metal3]\nhosts = true\nnamespaces = [\"metal3\"]\nresync_interval = {resync}\n"
        ));
        load_with_env(&f.path("nodefence.toml"), &env)
    };
    let config = load("\"30s\"").unwrap();
    assert_eq!(
        config.agent.metal3.resync(),
        Some(std::time::Duration::from_secs(30))
    );
    assert_eq!(load("\"0s\"").unwrap().agent.metal3.resync(), None);
    let errs = load("30").unwrap_err();
    assert!(
        errs.0.iter().any(
            |e| e.to_string().contains("resync_interval") || e.to_string().contains("duration")
        ),
        "{errs}"
    );
    // Without hosts, nothing is listed.
    let m = crate::config::Metal3Settings {
        resync_interval: Some(std::time::Duration::from_secs(30)),
        ..Default::default()
    };
    assert_eq!(m.resync(), None);
}
