//! Unit tests of the metrics: every family, its labels and values, parsed back.

use std::time::SystemTime;

use super::*;
use crate::engine::{NodeFacts, Policy};

use std::collections::{BTreeMap, BTreeSet};

use crate::telemetry::exposition::{Sample, parse_samples};

/// The samples of `m.encode()`, parsed.
fn samples(m: &Metrics) -> Vec<Sample> {
    parse_samples(&m.encode()).unwrap()
}

/// Every sample named `name`, as (labels, value).
fn series(m: &Metrics, name: &str) -> Vec<(Vec<(String, String)>, f64)> {
    samples(m)
        .into_iter()
        .filter(|s| s.name == name)
        .map(|s| (s.labels.into_iter().collect(), s.value))
        .collect()
}

/// The value of the one sample with exactly these labels.
fn value(m: &Metrics, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let want: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<BTreeMap<_, _>>()
        .into_iter()
        .collect();
    let found: Vec<f64> = series(m, name)
        .into_iter()
        .filter(|(l, _)| *l == want)
        .map(|(_, v)| v)
        .collect();
    assert!(
        found.len() <= 1,
        "{name}{labels:?} appears {} times",
        found.len()
    );
    found.first().copied()
}

fn types(m: &Metrics) -> Vec<(String, String)> {
    m.encode()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect()
}

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
    assert_eq!(releases.len(), 12, "{releases:?}");
    assert!(releases.iter().all(|(_, v)| *v == 0.0));
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
fn nodes_by_phase_and_not_in_inventory_are_set_not_added() {
    let m = Metrics::new();
    m.set_nodes_by_phase(7, 2, 1);
    m.set_nodes_by_phase(8, 1, 1);
    m.set_nodes_not_in_inventory(3);
    assert_eq!(
        value(&m, "nodefence_nodes", &[("phase", "healthy")]),
        Some(8.0)
    );
    assert_eq!(
        value(&m, "nodefence_nodes", &[("phase", "incident")]),
        Some(1.0)
    );
    assert_eq!(
        value(&m, "nodefence_nodes", &[("phase", "released")]),
        Some(1.0)
    );
    assert_eq!(series(&m, "nodefence_nodes").len(), 3);
    assert_eq!(
        value(&m, "nodefence_nodes_not_in_inventory", &[]),
        Some(3.0)
    );
}

#[test]
fn power_queries_count_by_driver_and_result_and_time_by_driver() {
    let m = Metrics::new();
    m.power_query("redfish", "off", Duration::from_millis(40));
    m.power_query("redfish", "off", Duration::from_millis(300));
    m.power_query("redfish", "error_unreachable", Duration::from_secs(12));
    m.power_query("ipmi", "on", Duration::from_secs(45));
    let q = "nodefence_power_queries_total";
    assert_eq!(
        value(&m, q, &[("driver", "redfish"), ("result", "off")]),
        Some(2.0)
    );
    assert_eq!(
        value(
            &m,
            q,
            &[("driver", "redfish"), ("result", "error_unreachable")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&m, q, &[("driver", "ipmi"), ("result", "on")]),
        Some(1.0)
    );
    assert_eq!(series(&m, q).len(), 3);

    let h = "nodefence_power_query_duration_seconds";
    let redfish = [("driver", "redfish")];
    assert_eq!(value(&m, &format!("{h}_count"), &redfish), Some(3.0));
    let sum = value(&m, &format!("{h}_sum"), &redfish).unwrap();
    assert!((sum - 12.34).abs() < 1e-9, "{sum}");
    let bucket = |driver: &str, le: &str| {
        value(
            &m,
            &format!("{h}_bucket"),
            &[("driver", driver), ("le", le)],
        )
    };
    assert_eq!(bucket("redfish", "0.05"), Some(1.0));
    assert_eq!(bucket("redfish", "0.5"), Some(2.0));
    assert_eq!(bucket("redfish", "10.0"), Some(2.0));
    assert_eq!(bucket("redfish", "20.0"), Some(3.0));
    assert_eq!(bucket("redfish", "+Inf"), Some(3.0));
    // Beyond the last bucket (30 s): only +Inf holds it.
    assert_eq!(bucket("ipmi", "30.0"), Some(0.0));
    assert_eq!(bucket("ipmi", "+Inf"), Some(1.0));
    let bounds: Vec<String> = samples(&m)
        .into_iter()
        .filter(|s| s.name == format!("{h}_bucket") && s.label("driver") == "ipmi")
        .map(|s| s.label("le").to_string())
        .collect();
    assert_eq!(bounds.first().map(String::as_str), Some("0.05"));
    assert_eq!(bounds.len(), POWER_QUERY_BUCKETS.len() + 1, "{bounds:?}");
}

#[test]
fn power_commands_count_by_driver_action_and_result() {
    let m = Metrics::new();
    m.power_command("redfish", "off", "ok");
    m.power_command("redfish", "off", "error");
    m.power_command("redfish", "off", "error");
    m.power_command("redfish", "on", "ok");
    let c = "nodefence_power_commands_total";
    let at = |action, result| {
        value(
            &m,
            c,
            &[
                ("driver", "redfish"),
                ("action", action),
                ("result", result),
            ],
        )
    };
    assert_eq!(at("off", "ok"), Some(1.0));
    assert_eq!(at("off", "error"), Some(2.0));
    assert_eq!(at("on", "ok"), Some(1.0));
    assert_eq!(at("on", "error"), None);
}

#[test]
fn releases_count_by_mode_and_result() {
    let m = Metrics::new();
    m.release("out-of-service-taint", "ok");
    m.release("out-of-service-taint", "refused");
    m.release("delete-node", "conflict");
    m.release("untaint", "api_error");
    m.release("untaint", "api_error");
    let r = "nodefence_releases_total";
    let at = |mode, result| value(&m, r, &[("mode", mode), ("result", result)]);
    assert_eq!(at("out-of-service-taint", "ok"), Some(1.0));
    assert_eq!(at("out-of-service-taint", "refused"), Some(1.0));
    assert_eq!(at("delete-node", "conflict"), Some(1.0));
    assert_eq!(at("untaint", "api_error"), Some(2.0));
    assert_eq!(at("delete-node", "ok"), Some(0.0));
    let total: f64 = series(&m, r).iter().map(|(_, v)| v).sum();
    assert_eq!(total, 5.0);
}

#[test]
fn time_to_release_fills_its_buckets() {
    let m = Metrics::new();
    m.time_to_release(Duration::from_secs(75));
    m.time_to_release(Duration::from_millis(500));
    m.time_to_release(Duration::from_secs(3600));
    let h = "nodefence_unhealthy_to_release_seconds";
    assert_eq!(value(&m, &format!("{h}_count"), &[]), Some(3.0));
    assert_eq!(value(&m, &format!("{h}_sum"), &[]), Some(3675.5));
    let bucket = |le| value(&m, &format!("{h}_bucket"), &[("le", le)]);
    assert_eq!(bucket("1.0"), Some(1.0));
    assert_eq!(bucket("60.0"), Some(1.0));
    assert_eq!(bucket("90.0"), Some(2.0));
    assert_eq!(bucket("900.0"), Some(2.0));
    assert_eq!(bucket("+Inf"), Some(3.0));
}

#[test]
fn release_steps_are_one_histogram_per_step() {
    let m = Metrics::new();
    m.release_step("detected", Duration::from_secs(12));
    m.release_step("off_proven", Duration::from_secs(14));
    m.release_step("released", Duration::from_millis(14_100));
    m.release_step("released", Duration::from_secs(80));
    let h = "nodefence_release_step_seconds";
    assert_eq!(
        value(&m, &format!("{h}_count"), &[("step", "released")]),
        Some(2.0)
    );
    assert_eq!(
        value(&m, &format!("{h}_sum"), &[("step", "detected")]),
        Some(12.0)
    );
    assert_eq!(
        value(
            &m,
            &format!("{h}_bucket"),
            &[("step", "released"), ("le", "60.0")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&m, &format!("{h}_count"), &[("step", "power_off_sent")]),
        None
    );
}

#[test]
fn notices_count_by_reason_and_type() {
    let m = Metrics::new();
    m.notice("PowerQueryFailed", true);
    m.notice("PowerQueryFailed", true);
    m.notice("Released", false);
    m.notice(crate::engine::Reason::Blocked.as_str(), true);
    let n = "nodefence_notices_total";
    assert_eq!(
        value(
            &m,
            n,
            &[("reason", "PowerQueryFailed"), ("type", "Warning")]
        ),
        Some(2.0)
    );
    assert_eq!(
        value(&m, n, &[("reason", "Released"), ("type", "Normal")]),
        Some(1.0)
    );
    assert_eq!(
        value(&m, n, &[("reason", "FenceBlocked"), ("type", "Warning")]),
        Some(1.0)
    );
}

#[test]
fn flags_are_zero_or_one() {
    let m = Metrics::new();
    m.set_storm(true);
    m.set_leader(true);
    m.set_paused(true);
    assert_eq!(
        value(&m, "nodefence_storm_protection_active", &[]),
        Some(1.0)
    );
    assert_eq!(value(&m, "nodefence_is_leader", &[]), Some(1.0));
    assert_eq!(value(&m, "nodefence_paused", &[]), Some(1.0));
    m.set_storm(false);
    m.set_leader(false);
    m.set_paused(true);
    assert_eq!(
        value(&m, "nodefence_storm_protection_active", &[]),
        Some(0.0)
    );
    assert_eq!(value(&m, "nodefence_is_leader", &[]), Some(0.0));
    assert_eq!(value(&m, "nodefence_paused", &[]), Some(1.0));
}

#[test]
fn bmc_failures_keep_one_series_per_node() {
    let m = Metrics::new();
    let g = "nodefence_bmc_monitor_failures";
    m.set_bmc_failing("worker-1", "redfish", true);
    m.set_bmc_failing("worker-2", "redfish", false);
    assert_eq!(
        value(&m, g, &[("node", "worker-1"), ("driver", "redfish")]),
        Some(1.0)
    );
    assert_eq!(
        value(&m, g, &[("node", "worker-2"), ("driver", "redfish")]),
        Some(0.0)
    );
    m.set_bmc_failing("worker-1", "redfish", false);
    assert_eq!(
        value(&m, g, &[("node", "worker-1"), ("driver", "redfish")]),
        Some(0.0)
    );
    // The inventory moved worker-1 to IPMI: the Redfish series goes.
    m.set_bmc_failing("worker-1", "ipmi", true);
    assert_eq!(
        value(&m, g, &[("node", "worker-1"), ("driver", "redfish")]),
        None
    );
    assert_eq!(
        value(&m, g, &[("node", "worker-1"), ("driver", "ipmi")]),
        Some(1.0)
    );
    m.forget_bmc("worker-1");
    m.forget_bmc("never-seen");
    assert_eq!(series(&m, g).len(), 1);
    assert_eq!(
        value(&m, g, &[("node", "worker-2"), ("driver", "redfish")]),
        Some(0.0)
    );
}

#[test]
fn bmc_identity_is_one_on_the_current_result_and_zero_on_the_others() {
    let m = Metrics::new();
    let g = "nodefence_bmc_identity";
    assert!(series(&m, g).is_empty(), "no node, no series");
    let of = |m: &Metrics, node: &str| -> Vec<(String, f64)> {
        ["match", "mismatch", "unknown"]
            .into_iter()
            .map(|r| {
                (
                    r.to_string(),
                    value(m, g, &[("node", node), ("result", r)]).unwrap_or(-1.0),
                )
            })
            .collect()
    };
    m.set_bmc_identity("worker-1", "mismatch");
    m.set_bmc_identity("worker-2", "match");
    assert_eq!(
        of(&m, "worker-1"),
        [
            ("match".to_string(), 0.0),
            ("mismatch".to_string(), 1.0),
            ("unknown".to_string(), 0.0)
        ]
    );
    assert_eq!(of(&m, "worker-2")[0], ("match".to_string(), 1.0));
    m.set_bmc_identity("worker-1", "match");
    assert_eq!(of(&m, "worker-1")[1], ("mismatch".to_string(), 0.0));
    assert_eq!(of(&m, "worker-1")[0], ("match".to_string(), 1.0));
    // A value outside the set is recorded as unknown, never as a new series.
    m.set_bmc_identity("worker-1", "Match");
    assert_eq!(of(&m, "worker-1")[2], ("unknown".to_string(), 1.0));
    assert_eq!(series(&m, g).len(), 6);
    m.forget_bmc("worker-1");
    assert_eq!(series(&m, g).len(), 3);
    assert!(
        series(&m, g)
            .iter()
            .all(|(l, _)| l.contains(&("node".to_string(), "worker-2".to_string())))
    );
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
fn label_values_outside_their_set_become_unknown() {
    let m = Metrics::new();
    m.power_query("redfish", "unreachable", Duration::ZERO);
    m.power_command("redfish", "reboot", "maybe");
    m.release("evict", "ok");
    m.release("untaint", "timeout");
    assert_eq!(
        value(
            &m,
            "nodefence_power_queries_total",
            &[("driver", "redfish"), ("result", "unknown")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &m,
            "nodefence_power_commands_total",
            &[
                ("driver", "redfish"),
                ("action", "unknown"),
                ("result", "unknown")
            ]
        ),
        Some(1.0)
    );
    let r = "nodefence_releases_total";
    assert_eq!(
        value(&m, r, &[("mode", "unknown"), ("result", "ok")]),
        Some(1.0)
    );
    assert_eq!(
        value(&m, r, &[("mode", "untaint"), ("result", "unknown")]),
        Some(1.0)
    );
}

#[test]
fn driver_and_reason_labels_are_bounded() {
    let m = Metrics::new();
    // Malformed: a node name or a URL passed by mistake.
    m.power_query("https://worker-1-bmc/", "on", Duration::ZERO);
    m.notice("node worker-1 is gone", true);
    let q = "nodefence_power_queries_total";
    assert_eq!(
        value(&m, q, &[("driver", "unknown"), ("result", "on")]),
        Some(1.0)
    );
    let n = "nodefence_notices_total";
    assert_eq!(
        value(&m, n, &[("reason", "unknown"), ("type", "Warning")]),
        Some(1.0)
    );
    // Many distinct (valid-looking) drivers: the first MAX_DRIVERS keep their name.
    for i in 0..MAX_DRIVERS + 10 {
        m.power_query(&format!("driver{i}"), "on", Duration::ZERO);
    }
    let drivers: BTreeSet<String> = samples(&m)
        .into_iter()
        .filter(|s| s.name == q)
        .map(|s| s.label("driver").to_string())
        .collect();
    assert_eq!(drivers.len(), MAX_DRIVERS + 1, "{drivers:?}");
    assert!(drivers.contains("unknown"));
    assert_eq!(
        value(&m, q, &[("driver", "unknown"), ("result", "on")]),
        Some(11.0)
    );
    // A driver already admitted keeps its name.
    m.power_query("driver0", "on", Duration::ZERO);
    assert_eq!(
        value(&m, q, &[("driver", "driver0"), ("result", "on")]),
        Some(2.0)
    );
}

#[test]
fn observe_engine_sets_the_engine_gauges() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let mut engine = Engine::new(Policy::default());
    engine.observe(NodeFacts::ready("worker-1", now), now);
    engine.observe(NodeFacts::ready("worker-2", now), now);
    let mut unlisted = NodeFacts::ready("worker-3", now);
    unlisted.in_inventory = false;
    engine.observe(unlisted, now);
    engine.set_paused(true, now);
    let m = Metrics::new();
    m.observe_engine(&engine);
    assert_eq!(
        value(&m, "nodefence_nodes", &[("phase", "healthy")]),
        Some(3.0)
    );
    assert_eq!(
        value(&m, "nodefence_nodes", &[("phase", "incident")]),
        Some(0.0)
    );
    assert_eq!(
        value(&m, "nodefence_nodes", &[("phase", "released")]),
        Some(0.0)
    );
    assert_eq!(
        value(&m, "nodefence_nodes_not_in_inventory", &[]),
        Some(1.0)
    );
    assert_eq!(value(&m, "nodefence_paused", &[]), Some(1.0));
    assert_eq!(
        value(&m, "nodefence_storm_protection_active", &[]),
        Some(0.0)
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

#[test]
fn power_level_failures_follow_the_nodes_levels() {
    let m = Metrics::new();
    let g = "nodefence_power_level_failures";
    let at = |m: &Metrics, node: &str, level: &str, driver: &str| {
        value(
            m,
            g,
            &[("node", node), ("level", level), ("driver", driver)],
        )
    };
    m.set_power_levels("db-1", &[("redfish", false), ("exec", true)]);
    m.set_power_levels("db-2", &[("ipmi", true), ("exec", false), ("exec", false)]);
    assert_eq!(at(&m, "db-1", "1", "redfish"), Some(0.0));
    assert_eq!(at(&m, "db-1", "2", "exec"), Some(1.0));
    assert_eq!(at(&m, "db-2", "1", "ipmi"), Some(1.0));
    assert_eq!(at(&m, "db-2", "3", "exec"), Some(0.0));
    assert_eq!(series(&m, g).len(), 5);
    // Set, not added; a level that is gone or changed driver loses its old series.
    m.set_power_levels("db-1", &[("redfish", false), ("exec", false)]);
    assert_eq!(at(&m, "db-1", "2", "exec"), Some(0.0));
    m.set_power_levels("db-2", &[("redfish", false), ("exec", true)]);
    assert_eq!(at(&m, "db-2", "1", "ipmi"), None);
    assert_eq!(at(&m, "db-2", "3", "exec"), None);
    assert_eq!(at(&m, "db-2", "1", "redfish"), Some(0.0));
    assert_eq!(at(&m, "db-2", "2", "exec"), Some(1.0));
    assert_eq!(series(&m, g).len(), 4);
    // A node that left the inventory loses them all; the others keep theirs.
    m.forget_bmc("db-2");
    assert_eq!(series(&m, g).len(), 2);
    m.set_power_levels("db-1", &[]);
    assert!(series(&m, g).is_empty());
}

#[test]
fn config_reloads_count_applied_and_refused_and_the_gauge_follows_the_newest() {
    let m = Metrics::new();
    let reloads = |result| value(&m, "nodefence_config_reloads_total", &[("result", result)]);
    assert_eq!(reloads("applied"), Some(0.0), "present from the start");
    assert_eq!(reloads("refused"), Some(0.0));
    assert_eq!(
        value(&m, "nodefence_config_last_reload_successful", &[]),
        Some(1.0)
    );
    let started = value(
        &m,
        "nodefence_config_last_reload_success_timestamp_seconds",
        &[],
    )
    .unwrap();
    assert!(started > 1.7e9, "{started}");

    m.config_reload(false);
    assert_eq!(reloads("refused"), Some(1.0));
    assert_eq!(
        value(&m, "nodefence_config_last_reload_successful", &[]),
        Some(0.0)
    );
    assert_eq!(
        value(
            &m,
            "nodefence_config_last_reload_success_timestamp_seconds",
            &[]
        ),
        Some(started),
        "a refusal leaves the time of the running version"
    );
    m.config_reload(true);
    assert_eq!(reloads("applied"), Some(1.0));
    assert_eq!(
        value(&m, "nodefence_config_last_reload_successful", &[]),
        Some(1.0)
    );
}

#[test]
fn incident_gauges_follow_each_node_and_vanish_when_its_incident_ends() {
    use crate::engine::Readiness;
    use crate::power::{PowerReading, PowerState};
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000);
    let now = t0 + Duration::from_secs(90);
    let mut engine = Engine::new(Policy {
        require_identity: false,
        ..Policy::default()
    });
    engine.observe(NodeFacts::ready("worker-2", now), now);
    let mut down = NodeFacts::ready("worker-1", t0);
    down.readiness = Readiness::NotReady { since: t0 };
    down.lease_renewed = Some(t0);
    engine.set_paused(true, now);
    engine.observe(down, now);
    let m = Metrics::new();
    m.observe_engine(&engine);
    let started = value(
        &m,
        "nodefence_incident_start_timestamp_seconds",
        &[("node", "worker-1")],
    )
    .expect("worker-1 is in an incident");
    assert!(started >= 2_000_000.0, "{started}");
    assert_eq!(
        series(&m, "nodefence_incident_start_timestamp_seconds").len(),
        1,
        "healthy nodes have no series"
    );
    assert!(
        series(&m, "nodefence_incident_blocked").is_empty(),
        "nothing blocks it before a reading"
    );

    // The machine reads On, past unhealthy_after, while fencing is paused.
    let reading = PowerReading {
        state: PowerState::On,
        at: now,
        latency: Duration::from_millis(10),
    };
    engine.power_read("worker-1", Ok(reading), now);
    m.observe_engine(&engine);
    assert_eq!(
        value(
            &m,
            "nodefence_incident_blocked",
            &[("node", "worker-1"), ("reason", "paused")]
        ),
        Some(1.0)
    );
    assert_eq!(series(&m, "nodefence_incident_blocked").len(), 1);
    assert_eq!(
        value(
            &m,
            "nodefence_incident_blocked_since_timestamp_seconds",
            &[("node", "worker-1"), ("reason", "paused")]
        ),
        Some(2_000_090.0),
        "blocked since the reading"
    );
    // Still paused a minute later: the same since.
    let minute = now + Duration::from_secs(60);
    engine.observe(NodeFacts::ready("worker-2", minute), minute);
    engine.tick(minute);
    m.observe_engine(&engine);
    assert_eq!(
        value(
            &m,
            "nodefence_incident_blocked_since_timestamp_seconds",
            &[("node", "worker-1"), ("reason", "paused")]
        ),
        Some(2_000_090.0)
    );

    // Recovered: nothing left for the node.
    let later = minute + Duration::from_secs(1);
    engine.observe(NodeFacts::ready("worker-2", later), later);
    engine.observe(NodeFacts::ready("worker-1", later), later);
    m.observe_engine(&engine);
    assert!(series(&m, "nodefence_incident_start_timestamp_seconds").is_empty());
    assert!(series(&m, "nodefence_incident_blocked").is_empty());
    assert!(series(&m, "nodefence_incident_blocked_since_timestamp_seconds").is_empty());
}
