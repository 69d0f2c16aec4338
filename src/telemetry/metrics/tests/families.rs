//! Every family declared with its type, unit and help, the values present from the
//! start, build info, and the text format: parsed back and escaped.

use super::*;

#[test]
fn metrics_are_send_sync_and_shareable() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<Metrics>();
    assert_send_sync::<std::sync::Arc<Metrics>>();
}

#[test]
fn every_family_is_declared_with_its_type_and_unit() {
    let m = Metrics::new();
    // Families keyed by driver, reason or node are omitted until their first series.
    m.power_query("redfish", "on", Duration::from_millis(100));
    m.power_command("redfish", "off", "ok");
    m.notice("Released", false);
    m.set_bmc_failing("worker-1", "redfish", false);
    m.set_bmc_identity("worker-1", "match");
    m.set_power_levels("worker-1", &[("redfish", false), ("exec", false)]);
    m.release_step("released", Duration::from_secs(14));
    let text = m.encode();
    assert!(text.ends_with("# EOF\n"), "{text}");
    let types = types(&m);
    let expected = [
        ("nodefence_nodes", "gauge"),
        ("nodefence_nodes_not_in_inventory", "gauge"),
        ("nodefence_power_queries", "counter"),
        ("nodefence_power_query_duration_seconds", "histogram"),
        ("nodefence_power_commands", "counter"),
        ("nodefence_releases", "counter"),
        ("nodefence_proof_contradicted", "counter"),
        ("nodefence_watchdog_marks", "counter"),
        ("nodefence_unhealthy_to_release_seconds", "histogram"),
        ("nodefence_release_step_seconds", "histogram"),
        ("nodefence_notices", "counter"),
        ("nodefence_storm_protection_active", "gauge"),
        ("nodefence_is_leader", "gauge"),
        ("nodefence_paused", "gauge"),
        ("nodefence_bmc_monitor_failures", "gauge"),
        ("nodefence_bmc_identity", "gauge"),
        ("nodefence_power_level_failures", "gauge"),
        ("nodefence_config_reloads", "counter"),
        ("nodefence_config_last_reload_successful", "gauge"),
        (
            "nodefence_config_last_reload_success_timestamp_seconds",
            "gauge",
        ),
        ("nodefence_companions", "gauge"),
        ("nodefence_companion_watchdogs", "gauge"),
        ("nodefence_companion_oldest_beat_age_seconds", "gauge"),
        ("nodefence_companion_datagrams_refused", "counter"),
        ("nodefence_metrics_scrapes_refused", "counter"),
        ("nodefence_build", "info"),
    ];
    for (name, ty) in expected {
        assert!(
            types.contains(&(name.to_string(), ty.to_string())),
            "missing # TYPE {name} {ty} in\n{text}"
        );
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "no HELP for {name}"
        );
    }
    assert_eq!(types.len(), expected.len(), "{types:?}");
    assert!(text.contains("# UNIT nodefence_power_query_duration_seconds seconds"));
    assert!(text.contains("# UNIT nodefence_unhealthy_to_release_seconds seconds"));
}

#[test]
fn fresh_metrics_show_zeros_where_alerts_need_them() {
    let m = Metrics::new();
    for phase in ["healthy", "incident", "released"] {
        assert_eq!(value(&m, "nodefence_nodes", &[("phase", phase)]), Some(0.0));
    }
    for name in [
        "nodefence_nodes_not_in_inventory",
        "nodefence_storm_protection_active",
        "nodefence_is_leader",
        "nodefence_paused",
    ] {
        assert_eq!(value(&m, name, &[]), Some(0.0), "{name}");
    }
    let releases = series(&m, "nodefence_releases_total");
    // Taint and delete-node by proof (off-readings, watchdog) and result; untaint by result.
    assert_eq!(releases.len(), 20, "{releases:?}");
    assert!(releases.iter().all(|(_, v)| *v == 0.0));
    for result in ["ok", "refused"] {
        assert_eq!(
            value(&m, "nodefence_watchdog_marks_total", &[("result", result)]),
            Some(0.0)
        );
    }
    assert_eq!(
        value(&m, "nodefence_unhealthy_to_release_seconds_count", &[]),
        Some(0.0)
    );
    // Families keyed by driver, reason or node appear with their first value.
    assert!(series(&m, "nodefence_power_queries_total").is_empty());
    assert!(series(&m, "nodefence_bmc_monitor_failures").is_empty());
    assert!(series(&m, "nodefence_power_level_failures").is_empty());
}

#[test]
fn build_info_carries_the_version() {
    let m = Metrics::new();
    assert_eq!(
        value(
            &m,
            "nodefence_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        Some(1.0)
    );
}

#[test]
fn parse_samples_reads_labels_escapes_and_values() {
    let text = "# HELP x y\nx_total{a=\"1\",b=\"q\\\"u\\\\o\\nte\"} 3\ny 2.5\nz{} 1e3\n# EOF\n";
    let s = parse_samples(text).unwrap();
    assert_eq!(s.len(), 3);
    assert_eq!(s[0].name, "x_total");
    assert_eq!(s[0].label("a"), "1");
    assert_eq!(s[0].label("b"), "q\"u\\o\nte");
    assert_eq!(s[0].value, 3.0);
    assert_eq!((s[1].name.as_str(), s[1].value), ("y", 2.5));
    assert!(s[1].labels.is_empty());
    assert_eq!((s[2].name.as_str(), s[2].value), ("z", 1000.0));
    assert!(parse_samples("x{a=\"1\" 3").is_err());
    assert!(parse_samples("x{a=1} 3").is_err());
    assert!(parse_samples("x nope").is_err());
    assert!(parse_samples("x{a=\"1\"b=\"2\"} 3").is_err());
    let trailing = parse_samples("x{a=\"1\",} 3").unwrap();
    assert_eq!((trailing[0].label("a"), trailing[0].value), ("1", 3.0));
}

#[test]
fn label_values_are_escaped_in_the_exposition() {
    let m = Metrics::new();
    m.set_bmc_failing("a\"b\\c", "redfish", true);
    assert_eq!(
        value(
            &m,
            "nodefence_bmc_monitor_failures",
            &[("node", "a\"b\\c"), ("driver", "redfish")]
        ),
        Some(1.0)
    );
}
