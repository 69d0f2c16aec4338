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
//!   inventory node; [`Metrics::forget_bmc`] drops a node that left it).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use crate::engine::{Engine, Phase, ReleaseMode};
use crate::power::{PowerError, PowerErrorKind, PowerReading};

/// Recorded instead of a label value outside the metric's set.
const UNKNOWN: &str = "unknown";

/// Distinct `driver` label values kept before new ones become `unknown`.
const MAX_DRIVERS: usize = 16;
/// Distinct `reason` label values kept before new ones become `unknown`.
const MAX_REASONS: usize = 64;

const PHASES: [&str; 3] = ["healthy", "incident", "released"];
const POWER_QUERY_RESULTS: [&str; 8] = [
    "on",
    "off",
    "other",
    "error_unreachable",
    "error_auth",
    "error_protocol",
    "error_unsupported",
    "error_config",
];
const POWER_ACTIONS: [&str; 2] = ["off", "on"];
const COMMAND_RESULTS: [&str; 2] = ["ok", "error"];
const RELEASE_MODES: [&str; 3] = ["out-of-service-taint", "delete-node", "untaint"];
const RELEASE_RESULTS: [&str; 4] = ["ok", "refused", "conflict", "api_error"];

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
struct BuildLabels {
    version: &'static str,
}

type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

fn power_query_histogram() -> Histogram {
    Histogram::new(POWER_QUERY_BUCKETS)
}

/// A set of label values defined by code (driver names, Event reasons): accepted
/// while they look valid, up to `max` distinct ones.
#[derive(Debug)]
struct OpenLabel {
    name: &'static str,
    max: usize,
    valid: fn(&str) -> bool,
    seen: Mutex<BTreeSet<String>>,
}

impl OpenLabel {
    fn new(name: &'static str, max: usize, valid: fn(&str) -> bool) -> Self {
        Self {
            name,
            max,
            valid,
            seen: Mutex::new(BTreeSet::new()),
        }
    }

    /// `value`, or `None` when it is malformed or one too many.
    fn admit(&self, value: &str) -> Option<String> {
        if !(self.valid)(value) {
            return None;
        }
        let mut seen = lock(&self.seen);
        if !seen.contains(value) {
            if seen.len() >= self.max {
                return None;
            }
            seen.insert(value.to_string());
        }
        Some(value.to_string())
    }
}

/// Label values refused so far, so each is logged once (at most [`MAX_REJECTIONS_LOGGED`]).
#[derive(Debug, Default)]
struct Rejections(Mutex<BTreeSet<(&'static str, String)>>);

/// Distinct refused label values logged; later ones are only counted as `unknown`.
const MAX_REJECTIONS_LOGGED: usize = 32;

impl Rejections {
    fn note(&self, label: &'static str, value: &str, why: &str) {
        let mut seen = lock(&self.0);
        if seen.len() < MAX_REJECTIONS_LOGGED && seen.insert((label, value.to_string())) {
            tracing::warn!(
                label,
                value,
                "metric label value {why}: recorded as \"unknown\" (a bug at the call site)"
            );
        }
    }
}

fn valid_driver(s: &str) -> bool {
    (1..=32).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

fn valid_reason(s: &str) -> bool {
    (1..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A poisoned lock only means another thread panicked while counting; the data
/// (a set of names) is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn flag(b: bool) -> i64 {
    i64::from(b)
}

/// The `result` label of `nodefence_power_queries_total` for a power reading.
pub fn power_query_result(result: &Result<PowerReading, PowerError>) -> &'static str {
    match result {
        Ok(r) if r.state.is_on() => "on",
        Ok(r) if r.state.is_off() => "off",
        Ok(_) => "other",
        Err(e) => power_error_result(e.kind),
    }
}

/// The `result` label of `nodefence_power_queries_total` for a failed query.
pub fn power_error_result(kind: PowerErrorKind) -> &'static str {
    match kind {
        PowerErrorKind::Unreachable => "error_unreachable",
        PowerErrorKind::Auth => "error_auth",
        PowerErrorKind::Protocol => "error_protocol",
        PowerErrorKind::Unsupported => "error_unsupported",
        PowerErrorKind::Config => "error_config",
    }
}

/// The `mode` label of `nodefence_releases_total` for a release.
pub fn release_mode_label(mode: ReleaseMode) -> &'static str {
    match mode {
        ReleaseMode::OutOfServiceTaint => "out-of-service-taint",
        ReleaseMode::DeleteNode => "delete-node",
    }
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
    time_to_release: Histogram,
    notices: Family<NoticeLabels, Counter>,
    storm: Gauge,
    leader: Gauge,
    paused: Gauge,
    bmc_failing: Family<BmcLabels, Gauge>,
    /// node → driver of its `nodefence_bmc_monitor_failures` series.
    bmc_drivers: Mutex<HashMap<String, String>>,
    drivers: OpenLabel,
    reasons: OpenLabel,
    rejections: Rejections,
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
            for result in RELEASE_RESULTS {
                // Present from the start, so `increase()` sees the first event.
                drop(releases.get_or_create(&ReleaseLabels { mode, result }));
            }
        }
        registry.register(
            "releases",
            "Volume releases (out-of-service taint, Node deletion) and taint removals, by outcome",
            releases.clone(),
        );

        let time_to_release = Histogram::new(RELEASE_BUCKETS);
        registry.register_with_unit(
            "unhealthy_to_release",
            "Time from a node's last sign of life (Ready or Lease renewal) to its volumes released",
            Unit::Seconds,
            time_to_release.clone(),
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
            time_to_release,
            notices,
            storm,
            leader,
            paused,
            bmc_failing,
            bmc_drivers: Mutex::new(HashMap::new()),
            drivers: OpenLabel::new("driver", MAX_DRIVERS, valid_driver),
            reasons: OpenLabel::new("reason", MAX_REASONS, valid_reason),
            rejections: Rejections::default(),
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
    }

    /// One power-state reading: `nodefence_power_queries_total{driver, result}` and
    /// `nodefence_power_query_duration_seconds{driver}`. `result` is one of `on`,
    /// `off`, `other`, `error_unreachable`, `error_auth`, `error_protocol`,
    /// `error_unsupported`, `error_config` (see [`power_query_result`]).
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
    /// `action` = `off` | `on`, `result` = `ok` | `error`.
    pub fn power_command(&self, driver: &str, action: &str, result: &str) {
        let labels = PowerCommandLabels {
            driver: self.open(&self.drivers, driver),
            action: self.closed("action", action, &POWER_ACTIONS),
            result: self.closed("result", result, &COMMAND_RESULTS),
        };
        self.power_commands.get_or_create(&labels).inc();
    }

    /// One release or taint removal: `nodefence_releases_total{mode, result}`,
    /// `mode` = `out-of-service-taint` | `delete-node` | `untaint`, `result` = `ok` |
    /// `refused` | `conflict` | `api_error`.
    pub fn release(&self, mode: &str, result: &str) {
        let labels = ReleaseLabels {
            mode: self.closed("mode", mode, &RELEASE_MODES),
            result: self.closed("result", result, &RELEASE_RESULTS),
        };
        self.releases.get_or_create(&labels).inc();
    }

    /// `nodefence_unhealthy_to_release_seconds`: last sign of life → release done.
    pub fn time_to_release(&self, d: Duration) {
        self.time_to_release.observe(d.as_secs_f64());
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

    /// Drops `node`'s `nodefence_bmc_monitor_failures` series (the node left the
    /// inventory or the cluster).
    pub fn forget_bmc(&self, node: &str) {
        if let Some(driver) = lock(&self.bmc_drivers).remove(node) {
            self.bmc_failing.remove(&BmcLabels {
                node: node.to_string(),
                driver,
            });
        }
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
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Full sample name, suffix included (`nodefence_releases_total`,
    /// `nodefence_power_query_duration_seconds_bucket`).
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    /// The label's value, or `""` when absent.
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

/// Parses the samples of an OpenMetrics (or Prometheus) text exposition, skipping
/// comments; for tests and tools that read nodefence's own `/metrics`.
pub fn parse_samples(text: &str) -> Result<Vec<Sample>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        out.push(parse_line(line).map_err(|e| format!("line {}: {e}: {line:?}", i + 1))?);
    }
    Ok(out)
}

fn parse_line(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = line[..name_end].to_string();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices();
        'labels: loop {
            let mut key = String::new();
            loop {
                match chars.next().ok_or("unterminated labels")? {
                    (i, '}') if key.is_empty() => {
                        rest = &body[i + 1..];
                        break 'labels;
                    }
                    (_, '=') => break,
                    (_, c) => key.push(c),
                }
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err(format!("value of label {key} not quoted"));
            }
            let mut value = String::new();
            loop {
                match chars.next().ok_or("unterminated label value")?.1 {
                    '"' => break,
                    '\\' => match chars.next().ok_or("dangling escape")?.1 {
                        'n' => value.push('\n'),
                        c => value.push(c),
                    },
                    c => value.push(c),
                }
            }
            labels.insert(key, value);
            match chars.next() {
                Some((_, ',')) => {}
                Some((i, '}')) => {
                    rest = &body[i + 1..];
                    break;
                }
                _ => return Err("expected ',' or '}' after a label".into()),
            }
        }
    }
    let value = rest
        .split_whitespace()
        .next()
        .ok_or("no value")?
        .parse::<f64>()
        .map_err(|e| e.to_string())?;
    Ok(Sample {
        name,
        labels,
        value,
    })
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::engine::{NodeFacts, Policy};
    use crate::power::PowerState;

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
            ("nodefence_notices", "counter"),
            ("nodefence_storm_protection_active", "gauge"),
            ("nodefence_is_leader", "gauge"),
            ("nodefence_paused", "gauge"),
            ("nodefence_bmc_monitor_failures", "gauge"),
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
    fn result_labels_from_power_outcomes() {
        let reading = |state| {
            Ok(PowerReading {
                state,
                at: SystemTime::UNIX_EPOCH,
                latency: Duration::ZERO,
            })
        };
        assert_eq!(power_query_result(&reading(PowerState::On)), "on");
        assert_eq!(power_query_result(&reading(PowerState::Off)), "off");
        assert_eq!(
            power_query_result(&reading(PowerState::PoweringOff)),
            "other"
        );
        assert_eq!(
            power_query_result(&reading(PowerState::Unknown(String::new()))),
            "other"
        );
        assert_eq!(
            power_query_result(&Err(PowerError::auth("no"))),
            "error_auth"
        );
        for kind in [
            PowerErrorKind::Unreachable,
            PowerErrorKind::Auth,
            PowerErrorKind::Protocol,
            PowerErrorKind::Unsupported,
            PowerErrorKind::Config,
        ] {
            let label = power_error_result(kind);
            assert_eq!(label, format!("error_{}", kind.as_str()));
            assert!(POWER_QUERY_RESULTS.contains(&label));
        }
        for mode in [ReleaseMode::OutOfServiceTaint, ReleaseMode::DeleteNode] {
            assert!(RELEASE_MODES.contains(&release_mode_label(mode)));
        }
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
}
