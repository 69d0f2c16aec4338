//! Gauges: nodes by phase, the flags, BMC failures and identity, power levels, config
//! reloads, and those set from the engine, incidents included.

use std::time::SystemTime;

use super::*;
use crate::engine::{NodeFacts, Policy};

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

#[test]
fn companions_are_counted_by_state_and_silent_nodes_and_refusals_follow_the_table() {
    use crate::telemetry::CompanionSummary;
    let m = Metrics::new();
    for state in ["beating", "silent", "stopped"] {
        assert_eq!(
            value(&m, "nodefence_companions", &[("state", state)]),
            Some(0.0)
        );
    }
    let mut s = CompanionSummary {
        beating: 4,
        silent: vec!["w1".into(), "w2".into()],
        stopped: 1,
        armed: 3,
        oldest_beat_seconds: 0.7,
        refused: [5, 0, 2, 0, 1, 0],
        unarmed: vec!["w3".into(), "w4".into()],
    };
    m.observe_companions(&s);
    assert_eq!(
        value(&m, "nodefence_companions", &[("state", "silent")]),
        Some(2.0)
    );
    assert_eq!(
        value(&m, "nodefence_companion_watchdogs", &[("state", "none")]),
        Some(1.0)
    );
    assert_eq!(
        value(&m, "nodefence_companion_oldest_beat_age_seconds", &[]),
        Some(0.7)
    );
    assert_eq!(
        value(&m, "nodefence_companion_silent", &[("node", "w2")]),
        Some(1.0)
    );
    assert_eq!(
        value(&m, "nodefence_watchdog_unarmed", &[("node", "w3")]),
        Some(1.0)
    );
    // The table's totals become counters: only what is new is added.
    s.silent = vec!["w2".into()];
    s.unarmed = vec!["w4".into()];
    s.refused = [6, 0, 2, 0, 1, 0];
    m.observe_companions(&s);
    m.observe_companions(&s);
    assert_eq!(
        value(
            &m,
            "nodefence_companion_datagrams_refused_total",
            &[("reason", "not-a-beat")]
        ),
        Some(6.0)
    );
    assert_eq!(
        value(
            &m,
            "nodefence_companion_datagrams_refused_total",
            &[("reason", "seal")]
        ),
        Some(2.0)
    );
    assert_eq!(
        series(&m, "nodefence_companion_silent").len(),
        1,
        "w1 is back"
    );
    assert_eq!(
        series(&m, "nodefence_watchdog_unarmed").len(),
        1,
        "w3 armed since"
    );
}
