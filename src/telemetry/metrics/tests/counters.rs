//! Counters and histograms: power queries and commands, releases and their timing,
//! notices; and their label values kept within bounds.

use std::collections::BTreeSet;

use super::*;

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
    m.release_with("out-of-service-taint", "off-readings", "ok");
    m.release_with("out-of-service-taint", "watchdog", "refused");
    m.release_with("delete-node", "off-readings", "conflict");
    m.release_with("delete-node", "watchdog", "ok");
    m.release("untaint", "api_error");
    m.release("untaint", "api_error");
    let r = "nodefence_releases_total";
    let at = |mode, proof, result| {
        value(
            &m,
            r,
            &[("mode", mode), ("proof", proof), ("result", result)],
        )
    };
    assert_eq!(at("out-of-service-taint", "off-readings", "ok"), Some(1.0));
    assert_eq!(at("out-of-service-taint", "watchdog", "refused"), Some(1.0));
    assert_eq!(at("delete-node", "off-readings", "conflict"), Some(1.0));
    assert_eq!(at("delete-node", "watchdog", "ok"), Some(1.0));
    assert_eq!(at("untaint", "none", "api_error"), Some(2.0));
    assert_eq!(at("delete-node", "off-readings", "ok"), Some(0.0));
    assert_eq!(at("out-of-service-taint", "watchdog", "ok"), Some(0.0));
    let total: f64 = series(&m, r).iter().map(|(_, v)| v).sum();
    assert_eq!(total, 6.0);
    // A proof outside its set is `unknown`, never read as Off.
    m.release_with("delete-node", "guess", "ok");
    assert_eq!(at("delete-node", "unknown", "ok"), Some(1.0));
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
        value(
            &m,
            r,
            &[("mode", "unknown"), ("proof", "none"), ("result", "ok")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &m,
            r,
            &[
                ("mode", "untaint"),
                ("proof", "none"),
                ("result", "unknown")
            ]
        ),
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
