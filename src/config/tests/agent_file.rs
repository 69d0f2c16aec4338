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
        Some("allowed keys in nodefence.toml: inventory, power, policy, remediation, security")
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
