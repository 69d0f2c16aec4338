//! The closing summary: one row per scenario (outcome, time to release, time to db-0
//! Running elsewhere, power commands sent), as an aligned table or as JSON.

use std::time::Duration;

use serde::Serialize;

use super::scenarios::{Outcome, Scenario};
use super::style::Style;

fn short_outcome(o: &Outcome) -> String {
    if !o.ok {
        return "FAILED".to_string();
    }
    match o.scenario {
        Scenario::PowerLoss => "ok: confirmed Off, released".to_string(),
        Scenario::NetworkCut => "ok: forced off, released".to_string(),
        Scenario::BmcDown => "ok: held while the BMC was silent, then released".to_string(),
        Scenario::Recovery => match o.untainted_after {
            Some(d) => format!("ok: Ready, taint removed at {}", at(Some(d))),
            None => "ok: Ready, taint removed".to_string(),
        },
        Scenario::Nhc => "ok: requested, forced off, released, Succeeded".to_string(),
        Scenario::VspherePowerLoss => "ok: VM poweredOff confirmed, released".to_string(),
        Scenario::VsphereNetworkCut => "ok: PowerOffVM_Task, released".to_string(),
        Scenario::RackPower => {
            "ok: held without the watchdog level, released on the watchdog with it".to_string()
        }
    }
}

fn at(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".to_string(), |d| format!("+{:.1}s", d.as_secs_f64()))
}

fn commands(o: &Outcome) -> String {
    if o.power_commands.is_empty() {
        "none".to_string()
    } else {
        o.power_commands
            .iter()
            .map(|(node, reset)| format!("{reset} {node}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The table, aligned; "ok" green and "FAILED" red when colour is on.
pub fn table(outcomes: &[Outcome], style: Style) -> String {
    let headers = [
        "SCENARIO",
        "NODE",
        "OUTCOME",
        "RELEASED",
        "DB-0 RUNNING",
        "POWER COMMANDS",
    ];
    let rows: Vec<[String; 6]> = outcomes
        .iter()
        .map(|o| {
            [
                o.scenario.name().to_string(),
                o.node.clone().unwrap_or_else(|| "-".into()),
                short_outcome(o),
                at(o.released_after),
                at(o.running_after),
                commands(o),
            ]
        })
        .collect();
    let mut widths = headers.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let pad = |cell: &str, w: usize| format!("{cell}{}", " ".repeat(w - cell.chars().count()));
    let mut out = String::new();
    let head: Vec<String> = headers.iter().zip(widths).map(|(h, w)| pad(h, w)).collect();
    out.push_str(&format!("  {}\n", style.bold(head.join("  ").trim_end())));
    for (row, o) in rows.iter().zip(outcomes) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (cell, w))| {
                let padded = pad(cell, w);
                match (i, o.ok) {
                    (2, true) => style.green(&padded),
                    (2, false) => style.red(&padded),
                    _ => padded,
                }
            })
            .collect();
        out.push_str(&format!("  {}\n", cells.join("  ").trim_end()));
    }
    out
}

#[derive(Serialize)]
struct JsonSummary<'a> {
    ok: bool,
    speed: f64,
    /// How long the demo ran (real time).
    demo_seconds: f64,
    /// Times below are cluster time since the scenario's first action.
    scenarios: Vec<JsonOutcome<'a>>,
}

#[derive(Serialize)]
struct JsonOutcome<'a> {
    scenario: &'static str,
    ok: bool,
    node: Option<&'a str>,
    outcome: &'a str,
    released_after_s: Option<f64>,
    pod_running_after_s: Option<f64>,
    taint_removed_after_s: Option<f64>,
    power_commands: Vec<String>,
    /// The remediation request (`nhc`).
    #[serde(skip_serializing_if = "Option::is_none")]
    request: Option<JsonRequest<'a>>,
    /// Whether the out-of-service taint was still on the node at the end (`nhc`).
    #[serde(skip_serializing_if = "Option::is_none")]
    taint_left: Option<bool>,
    /// What the watchdog level did (`rack-power`).
    #[serde(skip_serializing_if = "Option::is_none")]
    watchdog: Option<JsonWatchdog>,
    /// What the companions and a standby showed (`power-loss --companions`).
    #[serde(skip_serializing_if = "Option::is_none")]
    companions: Option<JsonCompanions<'a>>,
    /// The scenario's story, in time order (what the benches chart).
    steps: Vec<JsonStep<'a>>,
}

#[derive(Serialize)]
struct JsonStep<'a> {
    at_s: f64,
    node: &'a str,
    actor: &'a str,
    /// One word: the simulation's event kind, nodefence's Event reason, the Reset type...
    what: &'a str,
    text: &'a str,
}

/// `rack-power`'s two acts, each timed from its own power loss.
#[derive(Serialize)]
struct JsonWatchdog {
    /// Act 1, without the watchdog level: nodefence said it cannot read the machine.
    unreadable_after_s: Option<f64>,
    /// Act 1: nothing released for this long.
    held_s: Option<f64>,
    /// Act 2: suspect (its companion silent).
    suspect_after_s: Option<f64>,
    /// Act 2: the fencing mark stored.
    marked_after_s: Option<f64>,
    /// Act 2: the wait the Events stated, after the mark.
    stated_wait_s: f64,
    /// Act 2: from the mark stored to the out-of-service taint stored.
    mark_to_release_s: Option<f64>,
}

/// `power-loss --companions`, timed from the power loss.
#[derive(Serialize)]
struct JsonCompanions<'a> {
    /// The node turned suspect.
    suspect_after_s: Option<f64>,
    /// For its companion's silence (not its Lease).
    suspect_by_companion: bool,
    /// `--kill-leader-after`: when the leader was killed.
    leader_killed_after_s: Option<f64>,
    /// When the standby acquired the leader Lease.
    new_leader_after_s: Option<f64>,
    /// Whether the release came after the kill.
    released_by_standby: Option<bool>,
    /// Machines a watchdog reset while they should have run on (none expected).
    watchdog_resets: &'a [String],
}

#[derive(Serialize)]
struct JsonRequest<'a> {
    /// `namespace/name`.
    name: &'a str,
    created_after_s: Option<f64>,
    /// Each change of its `Processing` and `Succeeded` conditions, in order.
    conditions: &'a [String],
    succeeded_after_s: Option<f64>,
    /// When its requester (NodeHealthCheck) deleted it.
    deleted_after_s: Option<f64>,
    /// When it was gone (nodefence's finalizer removed).
    gone_after_s: Option<f64>,
}

/// Seconds to the 0.1 ms, rounded up.
fn tenths_of_ms(d: Duration) -> f64 {
    let tenths = u64::try_from(d.as_nanos().div_ceil(100_000)).unwrap_or(u64::MAX);
    tenths as f64 / 10_000.0
}

/// The summary as pretty JSON.
pub fn json(outcomes: &[Outcome], speed: f64, demo: Duration) -> String {
    let secs = |d: Option<Duration>| d.map(|d| (d.as_secs_f64() * 10.0).round() / 10.0);
    let summary = JsonSummary {
        ok: !outcomes.is_empty() && outcomes.iter().all(|o| o.ok),
        speed,
        demo_seconds: (demo.as_secs_f64() * 10.0).round() / 10.0,
        scenarios: outcomes
            .iter()
            .map(|o| JsonOutcome {
                scenario: o.scenario.name(),
                ok: o.ok,
                node: o.node.as_deref(),
                outcome: &o.summary,
                released_after_s: secs(o.released_after),
                pod_running_after_s: secs(o.running_after),
                taint_removed_after_s: secs(o.untainted_after),
                power_commands: o
                    .power_commands
                    .iter()
                    .map(|(node, reset)| format!("{reset} {node}"))
                    .collect(),
                request: o.request.as_ref().map(|r| JsonRequest {
                    name: &r.name,
                    created_after_s: secs(r.created_after),
                    conditions: &r.conditions,
                    succeeded_after_s: secs(r.succeeded_after),
                    deleted_after_s: secs(r.deleted_after),
                    gone_after_s: secs(r.gone_after),
                }),
                taint_left: o.taint_left,
                watchdog: o.watchdog.as_ref().map(|w| JsonWatchdog {
                    unreadable_after_s: secs(w.unreadable_after),
                    held_s: secs(Some(w.held_for)),
                    suspect_after_s: secs(w.suspect_after),
                    marked_after_s: secs(w.marked_after),
                    // To the 0.1 ms, rounded up, as the Events state it (12.7425 s).
                    stated_wait_s: tenths_of_ms(w.stated_wait),
                    mark_to_release_s: w
                        .mark_to_release
                        .map(|d| (d.as_secs_f64() * 1000.0).round() / 1000.0),
                }),
                companions: o.companions.as_ref().map(|c| JsonCompanions {
                    suspect_after_s: secs(c.suspect_after),
                    suspect_by_companion: c.suspect_by_companion,
                    leader_killed_after_s: secs(c.leader_killed_after),
                    new_leader_after_s: secs(c.new_leader_after),
                    released_by_standby: c.released_by_standby,
                    watchdog_resets: &c.watchdog_resets,
                }),
                steps: o
                    .steps
                    .iter()
                    .map(|s| JsonStep {
                        at_s: (s.after.as_secs_f64() * 10.0).round() / 10.0,
                        node: &s.node,
                        actor: s.actor,
                        what: &s.what,
                        text: &s.text,
                    })
                    .collect(),
            })
            .collect(),
    };
    serde_json::to_string_pretty(&summary).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(ok: bool) -> Outcome {
        Outcome {
            scenario: Scenario::NetworkCut,
            ok,
            node: Some("worker-2".into()),
            summary: "done".into(),
            released_after: Some(Duration::from_millis(112_340)),
            running_after: None,
            untainted_after: None,
            power_commands: vec![("worker-2".into(), "ForceOff".into())],
            request: None,
            taint_left: None,
            watchdog: None,
            companions: None,
            steps: vec![crate::demo::scenarios::StepRecord {
                after: Duration::from_millis(71_960),
                node: "worker-2".into(),
                actor: "BMC",
                what: "ForceOff".into(),
                text: "ResetType=ForceOff".into(),
            }],
        }
    }

    #[test]
    fn table_rows() {
        let t = table(&[outcome(true), outcome(false)], Style::new(false));
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].trim_start().starts_with("SCENARIO"));
        assert!(
            lines[1].contains("ok: forced off, released  +112.3s"),
            "{t}"
        );
        assert!(lines[1].ends_with("ForceOff worker-2"));
        assert!(lines[2].contains("FAILED"));
    }

    #[test]
    fn json_fields() {
        let j: serde_json::Value =
            serde_json::from_str(&json(&[outcome(true)], 10.0, Duration::from_secs(60))).unwrap();
        assert_eq!(j["ok"], true);
        assert_eq!(j["scenarios"][0]["scenario"], "network-cut");
        assert_eq!(j["scenarios"][0]["released_after_s"], 112.3);
        assert_eq!(j["scenarios"][0]["power_commands"][0], "ForceOff worker-2");
        let step = &j["scenarios"][0]["steps"][0];
        assert_eq!(step["at_s"], 72.0);
        assert_eq!(step["what"], "ForceOff");
        assert_eq!(step["actor"], "BMC");
        assert_eq!(step["node"], "worker-2");
        assert!(
            j["scenarios"][0].get("request").is_none(),
            "no request field where there was none"
        );
        assert!(j["scenarios"][0].get("watchdog").is_none());
        assert!(j["scenarios"][0].get("companions").is_none());
        let mut beating = outcome(true);
        beating.scenario = Scenario::PowerLoss;
        beating.companions = Some(crate::demo::scenarios::CompanionOutcome {
            suspect_after: Some(Duration::from_millis(2_040)),
            suspect_by_companion: true,
            leader_killed_after: Some(Duration::from_secs(3)),
            released_by_standby: Some(true),
            ..Default::default()
        });
        let j: serde_json::Value =
            serde_json::from_str(&json(&[beating], 1.0, Duration::from_secs(60))).unwrap();
        let c = &j["scenarios"][0]["companions"];
        assert_eq!(c["suspect_after_s"], 2.0);
        assert_eq!(c["suspect_by_companion"], true);
        assert_eq!(c["leader_killed_after_s"], 3.0);
        assert_eq!(c["new_leader_after_s"], serde_json::Value::Null);
        assert_eq!(c["released_by_standby"], true);
        assert_eq!(c["watchdog_resets"], serde_json::json!([]));
        let mut rack = outcome(true);
        rack.scenario = Scenario::RackPower;
        rack.watchdog = Some(crate::demo::scenarios::WatchdogOutcome {
            stated_wait: crate::watchdog::timing::Timing::default()
                .wait(Duration::from_secs(10))
                .total(),
            mark_to_release: Some(Duration::from_millis(12_801)),
            ..Default::default()
        });
        let j: serde_json::Value =
            serde_json::from_str(&json(&[rack], 1.0, Duration::from_secs(60))).unwrap();
        let w = &j["scenarios"][0]["watchdog"];
        assert_eq!(w["stated_wait_s"], 12.7425);
        assert_eq!(w["mark_to_release_s"], 12.801);
        assert_eq!(w["marked_after_s"], serde_json::Value::Null);
        let mut nhc = outcome(true);
        nhc.scenario = Scenario::Nhc;
        nhc.taint_left = Some(false);
        nhc.request = Some(crate::demo::scenarios::RequestOutcome {
            name: "nodefence/worker-2".into(),
            succeeded_after: Some(Duration::from_secs(120)),
            conditions: vec!["Succeeded=True (Released)".into()],
            ..Default::default()
        });
        let j: serde_json::Value =
            serde_json::from_str(&json(&[nhc], 10.0, Duration::from_secs(60))).unwrap();
        let s = &j["scenarios"][0];
        assert_eq!(s["scenario"], "nhc");
        assert_eq!(s["taint_left"], false);
        assert_eq!(s["request"]["name"], "nodefence/worker-2");
        assert_eq!(s["request"]["succeeded_after_s"], 120.0);
        assert_eq!(s["request"]["gone_after_s"], serde_json::Value::Null);
    }
}
