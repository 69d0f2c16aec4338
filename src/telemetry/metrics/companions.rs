//! The companions' heartbeat as Prometheus sees it: how many companions beat, fell
//! silent or stopped cleanly; how many of the beating ones have an armed hardware
//! watchdog; the oldest beat among those beating; the datagrams refused, by reason;
//! and `nodefence_companion_silent{node}` = 1 for each node whose companion fell
//! silent (series only while it is: bounded by the inventory);
//! `nodefence_watchdog_unarmed{node}` = 1 for each node whose policy has the watchdog
//! level and whose companion is not beating with an armed watchdog.
//!
//! "Nodes without a companion" is `sum(nodefence_nodes) -
//! sum(nodefence_companions{state="beating"})`; the alert in deploy/ says so.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// The `state` label of `nodefence_companions`.
pub const STATES: [&str; 3] = ["beating", "silent", "stopped"];
/// The `state` label of `nodefence_companion_watchdogs`.
pub const WATCHDOG_STATES: [&str; 2] = ["armed", "none"];
/// The `reason` label of `nodefence_companion_datagrams_refused_total`.
pub const REFUSALS: [&str; 6] = [
    "not-a-beat",
    "no-session",
    "seal",
    "session",
    "replayed",
    "unknown",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node: String,
}

/// What the heartbeat table says, summed up ([`crate::heartbeat::table::Table::summary`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompanionSummary {
    pub beating: i64,
    pub silent: Vec<String>,
    pub stopped: i64,
    /// Among the beating ones.
    pub armed: i64,
    /// The oldest last beat among the beating ones, in seconds.
    pub oldest_beat_seconds: f64,
    /// Datagrams refused since start, by reason, in the order of the `reason` labels.
    pub refused: [u64; 6],
    /// Nodes whose policy has the watchdog level and whose companion is not beating
    /// with an armed watchdog (the leader's view; empty on a standby).
    pub unarmed: Vec<String>,
}

#[derive(Debug)]
pub struct CompanionGauges {
    companions: Family<StateLabels, Gauge>,
    watchdogs: Family<StateLabels, Gauge>,
    oldest_beat: Gauge<f64, std::sync::atomic::AtomicU64>,
    refused: Family<ReasonLabels, Counter>,
    silent: Family<NodeLabels, Gauge>,
    unarmed: Family<NodeLabels, Gauge>,
    /// The silent nodes set, and the refusals counted so far.
    last: Mutex<(BTreeSet<String>, [u64; 6])>,
    /// The unarmed nodes set.
    last_unarmed: Mutex<BTreeSet<String>>,
}

impl CompanionGauges {
    pub fn register(registry: &mut Registry) -> Self {
        let companions = Family::<StateLabels, Gauge>::default();
        registry.register(
            "companions",
            "Nodes' companions (nodefence companion) by state: beating, silent (was beating, silent for heartbeat_timeout: the node is suspect), stopped (said so: a rolling update)",
            companions.clone(),
        );
        let watchdogs = Family::<StateLabels, Gauge>::default();
        registry.register(
            "companion_watchdogs",
            "Beating companions by hardware watchdog: armed (a device, its timeout granted), none (no device, or one refused, such as softdog)",
            watchdogs.clone(),
        );
        let oldest_beat = Gauge::default();
        registry.register_with_unit(
            "companion_oldest_beat_age",
            "The age of the oldest last beat among beating companions (at most heartbeat_timeout)",
            Unit::Seconds,
            oldest_beat.clone(),
        );
        let refused = Family::<ReasonLabels, Counter>::default();
        for reason in REFUSALS {
            drop(refused.get_or_create(&ReasonLabels { reason }));
        }
        registry.register(
            "companion_datagrams_refused",
            "Datagrams at the heartbeat port that got no answer, by reason: not-a-beat (garbage, oversized), no-session, seal (forged or corrupted), replayed, session, unknown",
            refused.clone(),
        );
        let silent = Family::<NodeLabels, Gauge>::default();
        registry.register(
            "companion_silent",
            "1 for each node whose companion was beating and has fallen silent (absent otherwise)",
            silent.clone(),
        );
        let unarmed = Family::<NodeLabels, Gauge>::default();
        registry.register(
            "watchdog_unarmed",
            "1 for each node whose policy has the watchdog level (watchdog_fencing) and whose companion is not beating with an armed hardware watchdog: the level cannot fence it (absent otherwise; reported by the leader)",
            unarmed.clone(),
        );
        for state in STATES {
            companions.get_or_create(&StateLabels { state }).set(0);
        }
        for state in WATCHDOG_STATES {
            watchdogs.get_or_create(&StateLabels { state }).set(0);
        }
        Self {
            companions,
            watchdogs,
            oldest_beat,
            refused,
            silent,
            unarmed,
            last: Mutex::new((BTreeSet::new(), [0; 6])),
            last_unarmed: Mutex::new(BTreeSet::new()),
        }
    }

    pub fn observe(&self, s: &CompanionSummary) {
        let silent = i64::try_from(s.silent.len()).unwrap_or(i64::MAX);
        for (state, n) in STATES.into_iter().zip([s.beating, silent, s.stopped]) {
            self.companions.get_or_create(&StateLabels { state }).set(n);
        }
        for (state, n) in WATCHDOG_STATES
            .into_iter()
            .zip([s.armed, s.beating - s.armed])
        {
            self.watchdogs.get_or_create(&StateLabels { state }).set(n);
        }
        self.oldest_beat.set(s.oldest_beat_seconds);
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let now: BTreeSet<String> = s.silent.iter().cloned().collect();
        for gone in last.0.difference(&now) {
            self.silent.remove(&NodeLabels { node: gone.clone() });
        }
        for node in &now {
            self.silent
                .get_or_create(&NodeLabels { node: node.clone() })
                .set(1);
        }
        for (i, reason) in REFUSALS.into_iter().enumerate() {
            let delta = s.refused[i].saturating_sub(last.1[i]);
            if delta > 0 {
                self.refused
                    .get_or_create(&ReasonLabels { reason })
                    .inc_by(delta);
            }
        }
        *last = (now, s.refused);
        drop(last);
        let mut last_unarmed = self
            .last_unarmed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let unarmed: BTreeSet<String> = s.unarmed.iter().cloned().collect();
        for gone in last_unarmed.difference(&unarmed) {
            self.unarmed.remove(&NodeLabels { node: gone.clone() });
        }
        for node in &unarmed {
            self.unarmed
                .get_or_create(&NodeLabels { node: node.clone() })
                .set(1);
        }
        *last_unarmed = unarmed;
    }
}
