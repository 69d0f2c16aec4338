//! The BMC monitor: every `monitor_interval`, read each inventory node's power state,
//! so a BMC that is unreachable or refuses the credentials is found before a node
//! needs fencing; and cross-check that each BMC controls its node's own machine.
//!
//! A failure sets `nodefence_bmc_monitor_failures{node,driver}` to 1 and raises one
//! Warning Event (`BmcCheckFailed`) on the Node; the recovery sets it back to 0 and
//! raises a Normal Event (`BmcCheckRecovered`). Only transitions produce Events. The
//! check is read-only; requests share the drivers' concurrency bound with fencing.
//!
//! # Pacing
//!
//! A pass starts every `monitor_interval`, counted from the previous pass's start (a
//! fixed rate), and spreads its checks evenly over the interval ([`spacing`]): at 5,000
//! nodes every 5 min, one check every 60 ms, all the time, so no stretch of the cycle
//! holds more than its share of the TLS handshakes (a pass over half the interval, then
//! a whole interval's wait, put the monitor's CPU into a third of the cycle). A
//! small cluster's checks are [`MAX_SPACING`] apart at most: its pass is over in
//! seconds. Each check is spawned at its turn, at most `concurrency` at once, and its
//! outcome is judged (metrics, Events) as soon as it ends. A pass that outlasts the
//! interval (slow or unreachable BMCs) is followed by the next at once, paced the same
//! way: passes never overlap and never burst. A check that could not start at its turn
//! (every slot busy) moves the later turns back rather than letting them catch up at
//! once.
//!
//! # Fencing topologies
//!
//! A node with `fallback` methods ([`crate::power::topology`]) has every level checked
//! on its own, as Pacemaker monitors each fence device: a dead fallback, or a dead
//! primary behind a working fallback, is found before it is needed. Each level is
//! read once per pass (concurrently), and the node's own outcome is derived from those
//! readings exactly as the topology's `status` would answer
//! ([`topology::overall`](crate::power::topology::overall)), so `BmcCheckFailed` still
//! means that no level can read the node. Per level:
//! `nodefence_power_level_failures{node,level,driver}` (level "1" is the primary) and,
//! on transitions only, a Warning `PowerLevelFailed` (the level, its driver and
//! endpoint, the error) or a Normal `PowerLevelRecovered`. Nodes with a single method
//! have no level series and no level Events.
//!
//! # Identity cross-check
//!
//! For every node whose power reading succeeded and whose identity the cluster has
//! told us (the `identities` channel: node name → [`NodeIdentity`], fed by the
//! controller from the Node objects), the driver's
//! [`machine_identity`](crate::power::PowerDriver::machine_identity) is compared with
//! [`identity::check`]. The result sets `nodefence_bmc_identity{node,result}` and is
//! kept in [`MonitorState`]. Events, on transitions only:
//! - `IdentityMismatch` (Warning): entering a mismatch, or a mismatch between other
//!   values than before; names both values; releases stay blocked until the
//!   inventory is fixed.
//! - `IdentityUnknown` (Normal): entering "unknown" (no systemUUID, a placeholder,
//!   a source that cannot tell...), once, whatever the reason.
//! - `IdentityMatch` (Normal): a node that was in mismatch matches again.
//!
//! Nodes absent from the channel are not checked (no Event, no metric): the cluster
//! has not told us about them yet. When the channel changes, during a pass or between
//! two, the nodes whose identity changed are re-checked at once from the drivers'
//! remembered identity (no BMC request for Redfish once its system was read); in the
//! first pass, only the nodes it has reached (the others are read at their turn: a
//! change is not a burst of requests to BMCs never read).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::events::{Event, EventType, Recorder};
use k8s_openapi::api::core::v1::ObjectReference;
use tokio::sync::watch;

use crate::identity::{self, IdentityCheck, MachineIdentity, NodeIdentity};
use crate::power::registry::NodeDrivers;
use crate::power::{PowerDriver, PowerError};
use crate::telemetry::Metrics;

/// Node name → what the cluster says about the node's machine.
pub type NodeIdentities = BTreeMap<String, NodeIdentity>;

/// What the monitor remembers between passes: the identity cross-check results and the
/// failing levels of fencing topologies (so their Events are raised on transitions).
#[derive(Debug, Clone, Default)]
pub struct MonitorState {
    /// node → latest result.
    results: BTreeMap<String, IdentityCheck>,
    /// node → the cluster's identity that result was computed against, hashed (to tell
    /// a changed one; a copy per node would cost 5,000 of them), with `hasher`'s keys
    /// (random per process: a Node cannot be written to collide).
    against: BTreeMap<String, u64>,
    hasher: std::hash::RandomState,
    /// node → level number (1 = primary) → error text, for the levels of topology
    /// nodes whose last check failed.
    levels: BTreeMap<String, BTreeMap<usize, String>>,
}

impl MonitorState {
    /// The latest cross-check of `node`, if it was checked.
    pub fn result(&self, node: &str) -> Option<&IdentityCheck> {
        self.results.get(node)
    }

    /// Every node's latest cross-check.
    pub fn results(&self) -> &BTreeMap<String, IdentityCheck> {
        &self.results
    }

    fn hash(&self, identity: &NodeIdentity) -> u64 {
        std::hash::BuildHasher::hash_one(&self.hasher, identity)
    }

    /// The levels (1 = primary) of topology node `node` whose last check failed.
    pub fn failing_levels(&self, node: &str) -> Vec<usize> {
        self.levels
            .get(node)
            .map(|l| l.keys().copied().collect())
            .unwrap_or_default()
    }
}

/// One pass over every node, all at once (at most `concurrency` in flight). `failing`
/// carries the previous outcomes (node → error text) between passes, `identity` the
/// cross-check results; `identities` is what the cluster says about each node.
/// Returns how many nodes failed the power check.
pub async fn check_all(
    drivers: &NodeDrivers,
    failing: &mut BTreeMap<String, String>,
    identities: &watch::Receiver<NodeIdentities>,
    identity: &mut MonitorState,
    metrics: &Metrics,
    recorder: Option<&Recorder>,
    concurrency: usize,
) -> usize {
    let mut pass = Pass::new(
        entries(drivers),
        Probe::PowerAndIdentity,
        concurrency,
        Duration::ZERO,
    );
    let mut failed = 0;
    while let Some(outcome) = pass.next().await {
        failed += judge(outcome, failing, identities, identity, metrics, recorder).await;
    }
    failed
}

/// The longest wait between two nodes' checks in a pass: a small cluster's pass is
/// over in seconds (20 nodes: 2 s), whatever the interval. Below `interval /
/// MAX_SPACING` nodes (3,000 every 5 min) it sets the rate: 10 checks a second,
/// fewer than the 17 a second of 5,000 nodes over the default interval.
pub const MAX_SPACING: Duration = Duration::from_millis(100);

/// The wait between two nodes' checks in a pass every `interval` over `nodes`: the
/// pass is spread evenly over the whole interval (5,000 nodes every 5 min: 60 ms),
/// at most [`MAX_SPACING`]. Never a burst: a burst over thousands of BMCs holds
/// thousands of TLS connections at once (220 MiB at 5,000 nodes), and a pass over
/// part of the interval concentrates the monitor's CPU in that part.
pub fn spacing(interval: Duration, nodes: usize) -> Duration {
    let nodes = u32::try_from(nodes.max(1)).unwrap_or(u32::MAX);
    (interval / nodes).min(MAX_SPACING)
}

/// Each node and its driver, in name order (the order of a pass).
fn entries(drivers: &NodeDrivers) -> Vec<Entry> {
    drivers
        .iter()
        .map(|(node, driver)| (node.clone(), driver.clone()))
        .collect()
}

/// Records one node's check: its power (gauge, Events on transitions), its topology's
/// levels, its identity. Returns 1 when its power check failed.
async fn judge(
    outcome: Outcome,
    failing: &mut BTreeMap<String, String>,
    identities: &watch::Receiver<NodeIdentities>,
    identity: &mut MonitorState,
    metrics: &Metrics,
    recorder: Option<&Recorder>,
) -> usize {
    let Outcome {
        node,
        driver,
        power,
        machine,
        levels,
    } = outcome;
    let mut failed = 0;
    if let Some(result) = power {
        failed += usize::from(result.is_err());
        power_transition(&node, driver, result, failing, metrics, recorder).await;
    }
    if !levels.is_empty() {
        level_transitions(&node, &levels, identity, metrics, recorder).await;
    }
    if let Some(machine) = machine {
        let known = known_identity(identities, &node);
        judge_identity(&node, driver, machine, known, identity, metrics, recorder).await;
    }
    failed
}

/// Re-checks the identity of the nodes whose cluster identity changed since their last
/// check (or that were never checked), skipping nodes whose power check is failing.
/// Asks only `machine_identity()`, which the Redfish driver answers from its last
/// reading. Returns how many nodes were checked.
pub async fn recheck_identities(
    drivers: &NodeDrivers,
    failing: &BTreeMap<String, String>,
    identities: &watch::Receiver<NodeIdentities>,
    identity: &mut MonitorState,
    metrics: &Metrics,
    recorder: Option<&Recorder>,
    concurrency: usize,
) -> usize {
    recheck_identities_of(
        drivers,
        failing,
        identities,
        identity,
        metrics,
        recorder,
        concurrency,
        |_| true,
    )
    .await
}

/// [`recheck_identities`] of the nodes `read` says were read already (the others are
/// left to their turn in the pass).
#[allow(clippy::too_many_arguments)]
async fn recheck_identities_of(
    drivers: &NodeDrivers,
    failing: &BTreeMap<String, String>,
    identities: &watch::Receiver<NodeIdentities>,
    identity: &mut MonitorState,
    metrics: &Metrics,
    recorder: Option<&Recorder>,
    concurrency: usize,
    read: impl Fn(&str) -> bool,
) -> usize {
    let entries: Vec<Entry> = {
        let known = identities.borrow();
        drivers
            .iter()
            .filter(|(node, driver)| {
                driver.is_ok()
                    && read(node)
                    && !failing.contains_key(*node)
                    && known
                        .get(*node)
                        .is_some_and(|id| identity.against.get(*node) != Some(&identity.hash(id)))
            })
            .map(|(node, driver)| (node.clone(), driver.clone()))
            .collect()
    };
    let checked = entries.len();
    for outcome in probe(entries, Probe::IdentityOnly, concurrency, Duration::ZERO).await {
        if let Some(machine) = outcome.machine {
            judge_identity(
                &outcome.node,
                outcome.driver,
                machine,
                known_identity(identities, &outcome.node),
                identity,
                metrics,
                recorder,
            )
            .await;
        }
    }
    checked
}

type Entry = (String, Result<Arc<dyn PowerDriver + 'static>, PowerError>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    PowerAndIdentity,
    IdentityOnly,
}

struct Outcome {
    node: String,
    driver: &'static str,
    /// The power check's result; `None` when it was not made.
    power: Option<Result<(), String>>,
    /// The machine's identity; `None` when it was not asked (power check failed).
    machine: Option<Result<MachineIdentity, PowerError>>,
    /// Each level's check, in order, for a node with more than one power method
    /// (empty otherwise, and when the power check was not made).
    levels: Vec<LevelOutcome>,
}

/// The check of one level of a fencing topology.
struct LevelOutcome {
    driver: &'static str,
    /// Where the level is, for humans (never a credential).
    endpoint: String,
    result: Result<(), String>,
}

/// What the cluster says about `node`'s machine now (one node's copy: the whole map is
/// not cloned for a pass).
fn known_identity(
    identities: &watch::Receiver<NodeIdentities>,
    node: &str,
) -> Option<NodeIdentity> {
    identities.borrow().get(node).cloned()
}

/// Every outcome of a pass over `entries` ([`Pass`]), in node name order.
async fn probe(
    entries: Vec<Entry>,
    what: Probe,
    concurrency: usize,
    spacing: Duration,
) -> Vec<Outcome> {
    let mut results = Vec::with_capacity(entries.len());
    let mut pass = Pass::new(entries, what, concurrency, spacing);
    while let Some(outcome) = pass.next().await {
        results.push(outcome);
    }
    results.sort_by(|a, b| a.node.cmp(&b.node));
    results
}

/// One pass's checks, run concurrently (at most `concurrency` at once), one starting
/// every `spacing` from the pass's start. A check is spawned when its turn comes and
/// collected when it ends, so at most `concurrency` tasks exist at once (spawning a
/// whole pass up front kept one task per node alive for the pass). A turn that could
/// not be kept (every slot busy) moves the later ones back: they do not catch up in
/// a burst.
struct Pass {
    /// The checks not started yet, in order.
    entries: std::vec::IntoIter<Entry>,
    what: Probe,
    concurrency: usize,
    spacing: Duration,
    /// When the next check is due.
    due: tokio::time::Instant,
    checks: tokio::task::JoinSet<Outcome>,
}

impl Pass {
    /// Starts now: the first check is due at once.
    fn new(entries: Vec<Entry>, what: Probe, concurrency: usize, spacing: Duration) -> Self {
        Self {
            entries: entries.into_iter(),
            what,
            concurrency: concurrency.max(1),
            spacing,
            due: tokio::time::Instant::now(),
            checks: tokio::task::JoinSet::new(),
        }
    }

    /// Whether `node`'s turn has come (entries are in name order).
    fn reached(&self, node: &str) -> bool {
        self.entries
            .as_slice()
            .first()
            .is_none_or(|(next, _)| node < next.as_str())
    }

    /// The next check to end, starting the others at their turns meanwhile; `None`
    /// once every check has ended. Cancel-safe: dropped while it waits, nothing is
    /// lost (a check is spawned, and its turn counted, in one step).
    async fn next(&mut self) -> Option<Outcome> {
        loop {
            while let Some(done) = self.checks.try_join_next() {
                if let Ok(outcome) = done {
                    return Some(outcome);
                }
            }
            if self.entries.len() == 0 || self.checks.len() >= self.concurrency {
                match self.checks.join_next().await {
                    None => return None,
                    Some(Ok(outcome)) => return Some(outcome),
                    Some(Err(_)) => continue,
                }
            }
            tokio::select! {
                () = tokio::time::sleep_until(self.due) => {
                    if let Some(entry) = self.entries.next() {
                        self.checks.spawn(check_one(entry, self.what));
                    }
                    // Late by more than a turn (every slot was busy): the next turn is
                    // a spacing from now, not from the turn missed.
                    let now = tokio::time::Instant::now();
                    self.due = if now > self.due + self.spacing {
                        now + self.spacing
                    } else {
                        self.due + self.spacing
                    };
                }
                Some(done) = self.checks.join_next(), if !self.checks.is_empty() => {
                    if let Ok(outcome) = done {
                        return Some(outcome);
                    }
                }
            }
        }
    }
}

async fn check_one((node, driver): Entry, what: Probe) -> Outcome {
    let d = match driver {
        Ok(d) => d,
        Err(e) => {
            return Outcome {
                node,
                driver: "none",
                power: (what == Probe::PowerAndIdentity).then(|| Err(e.to_string())),
                machine: None,
                levels: Vec::new(),
            };
        }
    };
    let (power, levels) = match what {
        Probe::PowerAndIdentity => {
            let (power, levels) = read_power(d.as_ref()).await;
            (Some(power), levels)
        }
        Probe::IdentityOnly => (None, Vec::new()),
    };
    let machine = match &power {
        Some(Err(_)) => None,
        _ => Some(d.machine_identity().await),
    };
    Outcome {
        node,
        driver: d.driver_name(),
        power,
        machine,
        levels,
    }
}

/// Reads the node's power state. A fencing topology has each level read once
/// (concurrently), and its overall answer derived from those readings as its
/// `status` would (no level is read twice).
async fn read_power(d: &dyn PowerDriver) -> (Result<(), String>, Vec<LevelOutcome>) {
    let levels = d.levels();
    if levels.len() < 2 {
        return (
            d.status().await.map(|_| ()).map_err(|e| e.to_string()),
            Vec::new(),
        );
    }
    let readings = futures::future::join_all(levels.iter().map(|l| l.status())).await;
    let outcomes = levels
        .iter()
        .zip(&readings)
        .map(|(level, reading)| LevelOutcome {
            driver: level.driver_name(),
            endpoint: level.endpoint(),
            result: reading.as_ref().map(|_| ()).map_err(|e| e.to_string()),
        })
        .collect();
    let power = crate::power::topology::overall(levels, readings)
        .map(|_| ())
        .map_err(|e| e.to_string());
    (power, outcomes)
}

/// Records each level of a topology node (the gauge, every pass) and reports the
/// levels that started or stopped failing (Events, on transitions only).
async fn level_transitions(
    node: &str,
    levels: &[LevelOutcome],
    state: &mut MonitorState,
    metrics: &Metrics,
    recorder: Option<&Recorder>,
) {
    let gauge: Vec<(&str, bool)> = levels
        .iter()
        .map(|l| (l.driver, l.result.is_err()))
        .collect();
    metrics.set_power_levels(node, &gauge);
    let working: Vec<String> = levels
        .iter()
        .enumerate()
        .filter(|(_, l)| l.result.is_ok())
        .map(|(i, _)| (i + 1).to_string())
        .collect();
    let failing = state.levels.entry(node.to_string()).or_default();
    // Levels beyond the node's current count (a shorter topology) are forgotten.
    failing.retain(|n, _| *n <= levels.len());
    for (i, level) in levels.iter().enumerate() {
        let n = i + 1;
        let (driver, endpoint) = (level.driver, &level.endpoint);
        match (&level.result, failing.contains_key(&n)) {
            (Err(e), false) => {
                let consequence = if working.is_empty() {
                    "no level of this node can read its power state now, so it could not be \
                     fenced"
                        .to_string()
                } else {
                    format!(
                        "the node can still be fenced through level{} {}; fix this one before \
                         it is needed",
                        if working.len() > 1 { "s" } else { "" },
                        working.join(", ")
                    )
                };
                tracing::warn!(node, level = n, driver, endpoint = %endpoint, error = %e, "power method level failed its check");
                publish_as(
                    recorder,
                    node,
                    EventType::Warning,
                    "PowerLevelFailed",
                    format!(
                        "level {n} of this node's fencing topology ({driver} {endpoint}) failed \
                         its periodic check: {e}; {consequence}"
                    ),
                    &level_action(n),
                )
                .await;
                failing.insert(n, e.clone());
            }
            (Err(e), true) => {
                failing.insert(n, e.clone());
            }
            (Ok(()), true) => {
                tracing::info!(node, level = n, driver, endpoint = %endpoint, "power method level passes its check again");
                publish_as(
                    recorder,
                    node,
                    EventType::Normal,
                    "PowerLevelRecovered",
                    format!(
                        "level {n} of this node's fencing topology ({driver} {endpoint}) answers \
                         again"
                    ),
                    &level_action(n),
                )
                .await;
                failing.remove(&n);
            }
            (Ok(()), false) => {}
        }
    }
    if failing.is_empty() {
        state.levels.remove(node);
    }
}

async fn power_transition(
    node: &str,
    driver: &'static str,
    result: Result<(), String>,
    failing: &mut BTreeMap<String, String>,
    metrics: &Metrics,
    recorder: Option<&Recorder>,
) {
    metrics.set_bmc_failing(node, driver, result.is_err());
    let before = failing.get(node).cloned();
    match (result, before) {
        (Err(e), None) => {
            tracing::warn!(node, driver, error = %e, "BMC check failed: this node could not be fenced now");
            publish(recorder, node, EventType::Warning, "BmcCheckFailed", format!(
                "the {driver} power source of this node failed its periodic check: {e}; it could not be fenced now"
            ))
            .await;
            failing.insert(node.to_string(), e);
        }
        (Err(e), Some(_)) => {
            failing.insert(node.to_string(), e);
        }
        (Ok(()), Some(_)) => {
            tracing::info!(node, driver, "BMC check passes again");
            publish(
                recorder,
                node,
                EventType::Normal,
                "BmcCheckRecovered",
                format!("the {driver} power source of this node answers again"),
            )
            .await;
            failing.remove(node);
        }
        (Ok(()), None) => {}
    }
}

/// Compares, records and reports one node's identity (transitions only).
async fn judge_identity(
    node: &str,
    driver: &'static str,
    machine: Result<MachineIdentity, PowerError>,
    known: Option<NodeIdentity>,
    state: &mut MonitorState,
    metrics: &Metrics,
    recorder: Option<&Recorder>,
) {
    let Some(node_identity) = known else {
        return;
    };
    let result = match machine {
        Ok(m) => identity::check(&node_identity, &m),
        Err(e) => IdentityCheck::Unknown(format!(
            "the {driver} power source could not report the machine's identity: {e}"
        )),
    };
    metrics.set_bmc_identity(node, result.label());
    let hash = state.hash(&node_identity);
    state.against.insert(node.to_string(), hash);
    let before = state.results.insert(node.to_string(), result.clone());
    match (&result, before.as_ref()) {
        (IdentityCheck::Mismatch { .. }, Some(b)) if *b == result => {}
        (
            IdentityCheck::Mismatch {
                node: ours,
                machine,
            },
            _,
        ) => {
            tracing::error!(
                node,
                driver,
                node_uuid = %ours,
                machine_uuid = %machine,
                "BMC identity mismatch: the inventory points this node at another machine; its volumes will not be released until the inventory is fixed"
            );
            publish(
                recorder,
                node,
                EventType::Warning,
                "IdentityMismatch",
                format!(
                    "the {driver} power source of this node controls another machine: {}. Releasing this node's volumes is blocked until the inventory is fixed",
                    result.describe()
                ),
            )
            .await;
        }
        (IdentityCheck::Unknown(_), Some(IdentityCheck::Unknown(_))) => {}
        (IdentityCheck::Unknown(why), _) => {
            tracing::info!(node, driver, reason = %why, "BMC identity cannot be verified");
            publish(
                recorder,
                node,
                EventType::Normal,
                "IdentityUnknown",
                format!(
                    "nodefence cannot verify that the {driver} power source controls this node's machine: {why}"
                ),
            )
            .await;
        }
        (IdentityCheck::Match(_), Some(IdentityCheck::Mismatch { .. })) => {
            tracing::info!(node, driver, "BMC identity matches again");
            publish(
                recorder,
                node,
                EventType::Normal,
                "IdentityMatch",
                format!("the {driver} power source of this node now controls the node's own machine: {}", result.describe()),
            )
            .await;
        }
        (IdentityCheck::Match(_), _) => {}
    }
}

async fn publish(
    recorder: Option<&Recorder>,
    node: &str,
    type_: EventType,
    reason: &str,
    note: String,
) {
    publish_as(recorder, node, type_, reason, note, "MonitorBmc").await;
}

/// The Event `action` of a level's check. One per level: the recorder folds Events
/// with the same node, type, reason and action into one series (the note is not
/// part of that key), which would hide a second failing level behind the first.
fn level_action(n: usize) -> String {
    format!("MonitorPowerLevel{n}")
}

async fn publish_as(
    recorder: Option<&Recorder>,
    node: &str,
    type_: EventType,
    reason: &str,
    note: String,
    action: &str,
) {
    let Some(recorder) = recorder else { return };
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(node.to_string()),
        ..Default::default()
    };
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(crate::untrusted::event_note(&note)),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &reference).await {
        tracing::debug!(error = %e, "could not publish a Kubernetes Event");
    }
}

/// Runs a pass every `interval` (from one pass's start to the next's; at once after a
/// pass that took longer) until the task is dropped (aborted with its term). A change
/// on `identities`, during a pass or between two, re-checks the identity of the nodes
/// it changed (see [`recheck_identities`]); during the first pass, of those it has
/// reached.
pub async fn run(
    drivers: Arc<NodeDrivers>,
    interval: Duration,
    metrics: Arc<Metrics>,
    recorder: Option<Recorder>,
    concurrency: usize,
    mut identities: watch::Receiver<NodeIdentities>,
) {
    let mut failing = BTreeMap::new();
    let mut identity = MonitorState::default();
    let mut channel_open = true;
    let spacing = spacing(interval, drivers.len());
    // The pass reads every node's identity as it goes: what the channel holds now is
    // not a change to re-check at once.
    identities.mark_unchanged();
    let mut first = true;
    loop {
        let start = tokio::time::Instant::now();
        let mut pass = Pass::new(
            entries(&drivers),
            Probe::PowerAndIdentity,
            concurrency,
            spacing,
        );
        loop {
            tokio::select! {
                outcome = pass.next() => {
                    let Some(outcome) = outcome else { break };
                    judge(
                        outcome,
                        &mut failing,
                        &identities,
                        &mut identity,
                        &metrics,
                        recorder.as_ref(),
                    )
                    .await;
                }
                changed = identities.changed(), if channel_open => {
                    if changed.is_err() {
                        channel_open = false;
                        continue;
                    }
                    recheck_identities_of(
                        &drivers,
                        &failing,
                        &identities,
                        &mut identity,
                        &metrics,
                        recorder.as_ref(),
                        concurrency,
                        |node| !first || pass.reached(node),
                    )
                    .await;
                }
            }
        }
        first = false;
        let next = start + interval;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next) => break,
                changed = identities.changed(), if channel_open => {
                    if changed.is_err() {
                        channel_open = false;
                        continue;
                    }
                    recheck_identities(
                        &drivers,
                        &failing,
                        &identities,
                        &mut identity,
                        &metrics,
                        recorder.as_ref(),
                        concurrency,
                    )
                    .await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
