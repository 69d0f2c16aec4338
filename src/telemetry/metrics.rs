//! The Prometheus registry and one method per thing nodefence counts.
//!
//! See the [module table](super) for each metric's meaning and the alert to write on
//! it. Call sites pass plain strings; this module keeps the label values bounded:
//!
//! - closed sets (`phase`, `result`, `action`, `mode`, `type`): a value outside the
//!   documented set is recorded as `unknown` and logged, so a caller's typo shows up
//!   on a dashboard instead of vanishing or multiplying series;
//! - code-defined names (`driver`, `reason`): accepted when they look like one
//!   (`redfish`, `PowerQueryFailed`), and at most [`MAX_DRIVERS`] / [`MAX_REASONS`]
//!   distinct values; anything else is `unknown`;
//! - node names appear only in `nodefence_bmc_monitor_failures` (one series per
//!   inventory node), `nodefence_bmc_identity` (three per inventory node) and
//!   `nodefence_power_level_failures` (one per power method of the nodes that have
//!   more than one); [`Metrics::forget_bmc`] drops a node that left the inventory.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use crate::engine::{Engine, Phase};

pub mod companions;
mod incidents;
mod labels;

use self::labels::*;
pub use self::labels::{power_error_result, power_query_result, release_mode_label};

/// BMC round trips: a healthy Redfish answers in 50–500 ms, a loaded iLO in seconds,
/// and the request timeout caps it at tens of seconds.
const POWER_QUERY_BUCKETS: [f64; 11] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0];
/// Last sign of life → volumes released: seconds (a fast policy) to 15 minutes.
const RELEASE_BUCKETS: [f64; 14] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 450.0, 600.0, 900.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DriverLabels {
    driver: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PowerQueryLabels {
    driver: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PowerCommandLabels {
    driver: String,
    action: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReleaseLabels {
    mode: &'static str,
    /// What the release rests on: `off-readings`, `watchdog`; `none` for `untaint`.
    proof: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProofLabel {
    /// What the contradicted release rested on: `off-readings`, `watchdog`.
    proof: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NoticeLabels {
    reason: String,
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BmcLabels {
    node: String,
    driver: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LevelLabels {
    node: String,
    level: String,
    driver: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IdentityLabels {
    node: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    reason: &'static str,
}

/// Why a `/metrics` scrape was refused (see [`super::access::Verdict`]).
const REFUSAL_REASONS: [&str; 3] = ["unauthenticated", "forbidden", "review_failed"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabels {
    step: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

fn power_query_histogram() -> Histogram {
    Histogram::new(POWER_QUERY_BUCKETS)
}

fn release_histogram() -> Histogram {
    Histogram::new(RELEASE_BUCKETS)
}

/// nodefence's Prometheus metrics. Cheap to record into from any thread; share it
/// as `Arc<Metrics>`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    nodes: Family<PhaseLabels, Gauge>,
    not_in_inventory: Gauge,
    power_queries: Family<PowerQueryLabels, Counter>,
    power_query_duration: HistogramFamily<DriverLabels>,
    power_commands: Family<PowerCommandLabels, Counter>,
    releases: Family<ReleaseLabels, Counter>,
    proofs_contradicted: Family<ProofLabel, Counter>,
    watchdog_marks: Family<ResultLabel, Counter>,
    time_to_release: Histogram,
    release_steps: HistogramFamily<StepLabels>,
    notices: Family<NoticeLabels, Counter>,
    storm: Gauge,
    leader: Gauge,
    paused: Gauge,
    bmc_failing: Family<BmcLabels, Gauge>,
    /// node → driver of its `nodefence_bmc_monitor_failures` series.
    bmc_drivers: Mutex<HashMap<String, String>>,
    bmc_identity: Family<IdentityLabels, Gauge>,
    power_levels: Family<LevelLabels, Gauge>,
    /// node → the label sets of its `nodefence_power_level_failures` series.
    level_series: Mutex<HashMap<String, Vec<LevelLabels>>>,
    drivers: OpenLabel,
    reasons: OpenLabel,
    rejections: Rejections,
    config_reloads: Family<ReloadLabels, Counter>,
    config_last_reload_successful: Gauge,
    config_last_reload_success: Gauge<f64, std::sync::atomic::AtomicU64>,
    incidents: incidents::IncidentGauges,
    companions: companions::CompanionGauges,
    scrapes_refused: Family<RefusalLabels, Counter>,
}

/// Seconds since the Unix epoch, now.
fn unix_now() -> f64 {
    crate::clock::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("nodefence");

        let nodes = Family::<PhaseLabels, Gauge>::default();
        for phase in PHASES {
            nodes.get_or_create(&PhaseLabels { phase }).set(0);
        }
        registry.register(
            "nodes",
            "Nodes per fencing phase: healthy, incident (unhealthy, machine not yet proven off), released (volumes released, waiting for the machine to come back)",
            nodes.clone(),
        );

        let not_in_inventory = Gauge::default();
        registry.register(
            "nodes_not_in_inventory",
            "Cluster nodes without an inventory entry: nodefence cannot fence them",
            not_in_inventory.clone(),
        );

        let power_queries = Family::<PowerQueryLabels, Counter>::default();
        registry.register(
            "power_queries",
            "Power-state readings by driver and outcome (on, off, other = transitional or unknown state, error_<kind>)",
            power_queries.clone(),
        );

        let power_query_duration: HistogramFamily<DriverLabels> =
            Family::new_with_constructor(power_query_histogram);
        registry.register_with_unit(
            "power_query_duration",
            "Time a power-state reading took, end to end, retries included",
            Unit::Seconds,
            power_query_duration.clone(),
        );

        let power_commands = Family::<PowerCommandLabels, Counter>::default();
        registry.register(
            "power_commands",
            "Power commands sent, by driver, action and whether the BMC accepted them (acceptance is never proof: the state is read back)",
            power_commands.clone(),
        );

        let releases = Family::<ReleaseLabels, Counter>::default();
        for mode in RELEASE_MODES {
            let proofs: &[&'static str] = if mode == "untaint" {
                &["none"]
            } else {
                &RELEASE_PROOFS
            };
            for proof in proofs {
                for result in RELEASE_RESULTS {
                    // Present from the start, so `increase()` sees the first event.
                    drop(releases.get_or_create(&ReleaseLabels {
                        mode,
                        proof,
                        result,
                    }));
                }
            }
        }
        registry.register(
            "releases",
            "Volume releases (out-of-service taint, Node deletion) and taint removals, by outcome",
            releases.clone(),
        );

        let proofs_contradicted = Family::<ProofLabel, Counter>::default();
        for proof in RELEASE_PROOFS {
            drop(proofs_contradicted.get_or_create(&ProofLabel { proof }));
        }
        registry.register(
            "proof_contradicted",
            "Released nodes that came back with the boot their release ended: the machine never went down, the release was false (critical: check the application's data and the BMC), by what the release rested on",
            proofs_contradicted.clone(),
        );

        let watchdog_marks = Family::<ResultLabel, Counter>::default();
        for result in ["ok", "refused"] {
            drop(watchdog_marks.get_or_create(&ResultLabel { result }));
        }
        registry.register(
            "watchdog_marks",
            "Fencing marks of the watchdog level (a node none of whose power methods can be read, told to stop feeding its hardware watchdog), by whether they were written",
            watchdog_marks.clone(),
        );

        let time_to_release = Histogram::new(RELEASE_BUCKETS);
        registry.register_with_unit(
            "unhealthy_to_release",
            "Time from a node's last sign of life (Ready or Lease renewal) to its volumes released",
            Unit::Seconds,
            time_to_release.clone(),
        );
        let release_steps: HistogramFamily<StepLabels> =
            Family::new_with_constructor(release_histogram);
        registry.register_with_unit(
            "release_step",
            "Per released node, when each step happened after its last sign of life: \
             detected, first_reading, power_off_sent (when nodefence sent one), fencing_marked (the watchdog level's mark), off_proven (or proven reset by the watchdog), released",
            Unit::Seconds,
            release_steps.clone(),
        );

        let notices = Family::<NoticeLabels, Counter>::default();
        registry.register(
            "notices",
            "Events raised, by reason and type (Normal, Warning)",
            notices.clone(),
        );

        let storm = Gauge::default();
        registry.register(
            "storm_protection_active",
            "1 while too many nodes are unhealthy at once: no power-off commands are sent",
            storm.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "is_leader",
            "1 while this replica holds the leader Lease and acts",
            leader.clone(),
        );
        let paused = Gauge::default();
        registry.register(
            "paused",
            "1 while an operator has paused fencing",
            paused.clone(),
        );

        let bmc_failing = Family::<BmcLabels, Gauge>::default();
        registry.register(
            "bmc_monitor_failures",
            "1 while the background BMC check cannot read this node's power state: the node could not be fenced",
            bmc_failing.clone(),
        );

        let bmc_identity = Family::<IdentityLabels, Gauge>::default();
        registry.register(
            "bmc_identity",
            "Latest identity cross-check of the node's power source against its systemUUID: 1 on the current result (match, mismatch = the inventory points this node at another machine, unknown = nothing proven), 0 on the others",
            bmc_identity.clone(),
        );

        let power_levels = Family::<LevelLabels, Gauge>::default();
        registry.register(
            "power_level_failures",
            "1 while this power method (level 1 = the primary, 2... = its fallbacks) of a node with several failed its last background check",
            power_levels.clone(),
        );

        let config_reloads = Family::<ReloadLabels, Counter>::default();
        for result in RELOAD_RESULTS {
            drop(config_reloads.get_or_create(&ReloadLabels { result }));
        }
        registry.register(
            "config_reloads",
            "Changed configurations read from disk: applied, or refused whole (the running one kept)",
            config_reloads.clone(),
        );
        let config_last_reload_successful = Gauge::default();
        config_last_reload_successful.set(1);
        registry.register(
            "config_last_reload_successful",
            "0 while the newest configuration on disk was refused and an older one runs (see the ConfigRejected Event)",
            config_last_reload_successful.clone(),
        );
        let config_last_reload_success = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        config_last_reload_success.set(unix_now());
        registry.register_with_unit(
            "config_last_reload_success_timestamp",
            "When the running configuration was applied (start-up or reload)",
            Unit::Seconds,
            config_last_reload_success.clone(),
        );

        let incidents = incidents::IncidentGauges::register(&mut registry);
        let companions = companions::CompanionGauges::register(&mut registry);

        let scrapes_refused = Family::<RefusalLabels, Counter>::default();
        for reason in REFUSAL_REASONS {
            drop(scrapes_refused.get_or_create(&RefusalLabels { reason }));
        }
        registry.register(
            "metrics_scrapes_refused",
            "Scrapes of /metrics refused: unauthenticated (no token, or one the API server does not know), forbidden (not bound to nodefence-metrics-reader), review_failed (the API server did not answer)",
            scrapes_refused.clone(),
        );

        registry.register(
            "build",
            "nodefence build information",
            Info::new(BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            }),
        );

        Self {
            registry,
            nodes,
            not_in_inventory,
            power_queries,
            power_query_duration,
            power_commands,
            releases,
            proofs_contradicted,
            watchdog_marks,
            time_to_release,
            release_steps,
            notices,
            storm,
            leader,
            paused,
            bmc_failing,
            bmc_drivers: Mutex::new(HashMap::new()),
            bmc_identity,
            power_levels,
            level_series: Mutex::new(HashMap::new()),
            drivers: OpenLabel::new("driver", MAX_DRIVERS, valid_driver),
            reasons: OpenLabel::new("reason", MAX_REASONS, valid_reason),
            rejections: Rejections::default(),
            config_reloads,
            config_last_reload_successful,
            config_last_reload_success,
            incidents,
            scrapes_refused,
            companions,
        }
    }

    /// A `/metrics` scrape was refused, for `reason` (`unauthenticated`, `forbidden` or
    /// `review_failed`: [`super::access::Verdict::refusal_reason`]).
    pub fn scrape_refused(&self, reason: &str) {
        let reason = self.closed("reason", reason, &REFUSAL_REASONS);
        self.scrapes_refused
            .get_or_create(&RefusalLabels { reason })
            .inc();
    }

    /// A changed configuration was applied (`true`) or refused (`false`).
    pub fn config_reload(&self, applied: bool) {
        let result = if applied { "applied" } else { "refused" };
        self.config_reloads
            .get_or_create(&ReloadLabels { result })
            .inc();
        self.config_last_reload_successful.set(i64::from(applied));
        if applied {
            self.config_last_reload_success.set(unix_now());
        }
    }

    /// `value` as the matching member of `set`, or `unknown` (logged once).
    fn closed(&self, label: &'static str, value: &str, set: &[&'static str]) -> &'static str {
        match set.iter().find(|v| **v == value) {
            Some(v) => v,
            None => {
                self.rejections.note(label, value, "outside its set");
                UNKNOWN
            }
        }
    }

    /// `value` if `label` admits it, or `unknown` (logged once).
    fn open(&self, label: &OpenLabel, value: &str) -> String {
        label.admit(value).unwrap_or_else(|| {
            self.rejections.note(
                label.name,
                value,
                "malformed or one distinct value too many",
            );
            UNKNOWN.to_string()
        })
    }

    /// `nodefence_nodes{phase}`: set from the engine after every step.
    pub fn set_nodes_by_phase(&self, healthy: i64, incident: i64, released: i64) {
        for (phase, n) in PHASES.into_iter().zip([healthy, incident, released]) {
            self.nodes.get_or_create(&PhaseLabels { phase }).set(n);
        }
    }

    /// `nodefence_nodes_not_in_inventory`.
    pub fn set_nodes_not_in_inventory(&self, n: i64) {
        self.not_in_inventory.set(n);
    }

    /// Sets every engine-derived gauge at once: nodes per phase, nodes not in the
    /// inventory, storm protection and pause.
    pub fn observe_engine(&self, engine: &Engine) {
        let (mut healthy, mut incident, mut released, mut unlisted) = (0, 0, 0, 0);
        for node in engine.nodes() {
            match node.phase {
                Phase::Healthy => healthy += 1,
                Phase::Incident(_) => incident += 1,
                Phase::Released(_) => released += 1,
            }
            if !node.facts.in_inventory {
                unlisted += 1;
            }
        }
        self.set_nodes_by_phase(healthy, incident, released);
        self.set_nodes_not_in_inventory(unlisted);
        self.set_storm(engine.storm_active());
        self.set_paused(engine.paused());
        self.incidents.observe(engine);
    }

    /// One power-state reading: `nodefence_power_queries_total{driver, result}` and
    /// `nodefence_power_query_duration_seconds{driver}`. `result` is one of `on`,
    /// `off`, `other`, `error_unreachable`, `error_auth`, `error_protocol`,
    /// `error_unsupported`, `error_config`, `error_identity`, `error_refused` (see [`power_query_result`]).
    pub fn power_query(&self, driver: &str, result: &str, latency: Duration) {
        let driver = self.open(&self.drivers, driver);
        let result = self.closed("result", result, &POWER_QUERY_RESULTS);
        self.power_queries
            .get_or_create(&PowerQueryLabels {
                driver: driver.clone(),
                result,
            })
            .inc();
        self.power_query_duration
            .get_or_create(&DriverLabels { driver })
            .observe(latency.as_secs_f64());
    }

    /// One power command: `nodefence_power_commands_total{driver, action, result}`,
    /// `action` = `off` | `on`, `result` = `ok` | `error` | `refused` (not sent: the
    /// pre-command read failed or did not prove the machine is the node's own).
    pub fn power_command(&self, driver: &str, action: &str, result: &str) {
        let labels = PowerCommandLabels {
            driver: self.open(&self.drivers, driver),
            action: self.closed("action", action, &POWER_ACTIONS),
            result: self.closed("result", result, &COMMAND_RESULTS),
        };
        self.power_commands.get_or_create(&labels).inc();
    }

    /// One taint removal: `nodefence_releases_total{mode="untaint", proof="none"}`
    /// (or any `mode` without a proof).
    pub fn release(&self, mode: &str, result: &str) {
        self.release_with(mode, "none", result);
    }

    /// One release: `nodefence_releases_total{mode, proof, result}`, `mode` =
    /// `out-of-service-taint` | `delete-node` | `untaint`, `proof` = `off-readings` |
    /// `watchdog` | `none`, `result` = `ok` | `refused` | `conflict` | `api_error`.
    pub fn release_with(&self, mode: &str, proof: &str, result: &str) {
        let proof = if proof == "none" {
            "none"
        } else {
            self.closed("proof", proof, &RELEASE_PROOFS)
        };
        let labels = ReleaseLabels {
            mode: self.closed("mode", mode, &RELEASE_MODES),
            proof,
            result: self.closed("result", result, &RELEASE_RESULTS),
        };
        self.releases.get_or_create(&labels).inc();
    }

    /// A released node back with the boot its release ended:
    /// `nodefence_proof_contradicted_total{proof}`, `proof` = `off-readings` |
    /// `watchdog`.
    pub fn proof_contradicted(&self, proof: &str) {
        let labels = ProofLabel {
            proof: self.closed("proof", proof, &RELEASE_PROOFS),
        };
        self.proofs_contradicted.get_or_create(&labels).inc();
    }

    /// One fencing mark of the watchdog level: `nodefence_watchdog_marks_total{result}`,
    /// `result` = `ok` | `refused` (not written: no armed watchdog, the API server).
    pub fn watchdog_mark(&self, result: &str) {
        let labels = ResultLabel {
            result: self.closed("result", result, &["ok", "refused"]),
        };
        self.watchdog_marks.get_or_create(&labels).inc();
    }

    /// `nodefence_unhealthy_to_release_seconds`: last sign of life → release done.
    pub fn time_to_release(&self, d: Duration) {
        self.time_to_release.observe(d.as_secs_f64());
    }

    /// `nodefence_release_step_seconds{step}`: one step of a released node's
    /// incident, measured from its last sign of life ([`crate::engine::Steps`]).
    pub fn release_step(&self, step: &'static str, after: Duration) {
        self.release_steps
            .get_or_create(&StepLabels { step })
            .observe(after.as_secs_f64());
    }

    /// `nodefence_notices_total{reason, type}`: one per engine notice.
    pub fn notice(&self, reason: &str, warning: bool) {
        let labels = NoticeLabels {
            reason: self.open(&self.reasons, reason),
            r#type: if warning { "Warning" } else { "Normal" },
        };
        self.notices.get_or_create(&labels).inc();
    }

    /// `nodefence_storm_protection_active` 0/1.
    pub fn set_storm(&self, active: bool) {
        self.storm.set(flag(active));
    }

    /// `nodefence_is_leader` 0/1.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(flag(leader));
    }

    /// `nodefence_paused` 0/1.
    pub fn set_paused(&self, paused: bool) {
        self.paused.set(flag(paused));
    }

    /// `nodefence_bmc_monitor_failures{node, driver}` 0/1. A node keeps one series:
    /// when its driver changes, the old series goes.
    pub fn set_bmc_failing(&self, node: &str, driver: &str, failing: bool) {
        let driver = self.open(&self.drivers, driver);
        let mut drivers = lock(&self.bmc_drivers);
        if let Some(old) = drivers.insert(node.to_string(), driver.clone())
            && old != driver
        {
            self.bmc_failing.remove(&BmcLabels {
                node: node.to_string(),
                driver: old,
            });
        }
        self.bmc_failing
            .get_or_create(&BmcLabels {
                node: node.to_string(),
                driver,
            })
            .set(flag(failing));
    }

    /// `nodefence_power_level_failures{node, level, driver}` 0/1 for every level of a
    /// node with several power methods: `levels[i]` is level `i + 1`'s (driver,
    /// failing). The node's series are exactly these afterwards (a level that is gone,
    /// or whose driver changed, loses its old series); an empty slice drops them all.
    pub fn set_power_levels(&self, node: &str, levels: &[(&str, bool)]) {
        let labels: Vec<LevelLabels> = levels
            .iter()
            .enumerate()
            .map(|(i, (driver, _))| LevelLabels {
                node: node.to_string(),
                level: (i + 1).to_string(),
                driver: self.open(&self.drivers, driver),
            })
            .collect();
        let mut series = lock(&self.level_series);
        for old in series.remove(node).unwrap_or_default() {
            if !labels.contains(&old) {
                self.power_levels.remove(&old);
            }
        }
        for (l, (_, failing)) in labels.iter().zip(levels) {
            self.power_levels.get_or_create(l).set(flag(*failing));
        }
        if !labels.is_empty() {
            series.insert(node.to_string(), labels);
        }
    }

    /// Drops `node`'s `nodefence_bmc_monitor_failures`, `nodefence_bmc_identity` and
    /// `nodefence_power_level_failures` series (the node left the inventory or the
    /// cluster).
    pub fn forget_bmc(&self, node: &str) {
        self.set_power_levels(node, &[]);
        if let Some(driver) = lock(&self.bmc_drivers).remove(node) {
            self.bmc_failing.remove(&BmcLabels {
                node: node.to_string(),
                driver,
            });
        }
        for result in IDENTITY_RESULTS {
            self.bmc_identity.remove(&IdentityLabels {
                node: node.to_string(),
                result,
            });
        }
    }

    /// `nodefence_bmc_identity{node, result}`: 1 on `result` (`match` | `mismatch` |
    /// `unknown`, see [`crate::identity::IdentityCheck::label`]), 0 on the other two,
    /// so an alert on `{result="mismatch"} == 1` sees the series before and after.
    pub fn set_bmc_identity(&self, node: &str, result: &str) {
        let current = self.closed("result", result, &IDENTITY_RESULTS);
        for result in IDENTITY_RESULTS {
            self.bmc_identity
                .get_or_create(&IdentityLabels {
                    node: node.to_string(),
                    result,
                })
                .set(flag(result == current));
        }
    }

    /// The companions' heartbeat: `nodefence_companion*`.
    pub fn observe_companions(&self, summary: &companions::CompanionSummary) {
        self.companions.observe(summary);
    }

    /// The OpenMetrics text exposition, `# EOF` included.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = encode(&mut out, &self.registry) {
            // Writing to a String cannot fail; a label encoder could, and then the
            // partial text would be invalid: say so where the scraper looks.
            tracing::error!(error = %e, "encoding metrics failed");
            out.clear();
            let _ = writeln!(out, "# encoding metrics failed: {e}\n# EOF");
        }
        out
    }
}

/// One sample line of an OpenMetrics text exposition.
#[cfg(test)]
mod tests;
