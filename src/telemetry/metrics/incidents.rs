//! Per-node gauges of the incidents under way: when each started, and what blocks it.
//!
//! An operator's first question at 3 a.m. is "which node is stuck, for how long, and
//! why": `nodefence_incident_start_timestamp_seconds{node}` (so `time() - ...` is the
//! age, as Prometheus conventions prefer timestamps to durations) and
//! `nodefence_incident_blocked{node, reason}` = 1 for the one reason that holds the
//! node back now, with `nodefence_incident_blocked_since_timestamp_seconds{node, reason}`
//! (`time() - ...`: how long that reason has held it back). Series exist only while a node is in an incident: their number is
//! bounded by the inventory, and a node that recovers or is released leaves none.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use crate::engine::{Block, Engine, Phase};

/// The `reason` label of `nodefence_incident_blocked` for a block (a closed set, one
/// value per kind of block).
pub fn block_reason(block: &Block) -> &'static str {
    block.kind()
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BlockedLabels {
    node: String,
    reason: &'static str,
}

/// The two families, and which series are set (to remove them when they end).
#[derive(Debug)]
pub struct IncidentGauges {
    started: Family<NodeLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    blocked: Family<BlockedLabels, Gauge>,
    blocked_since: Family<BlockedLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    set: Mutex<HashMap<String, Option<&'static str>>>,
}

impl IncidentGauges {
    pub fn register(registry: &mut Registry) -> Self {
        let started = Family::default();
        registry.register_with_unit(
            "incident_start_timestamp",
            "When each node in an incident (unhealthy, volumes not yet released) became unhealthy; time() minus it is the incident's age",
            Unit::Seconds,
            started.clone(),
        );
        let blocked = Family::default();
        registry.register(
            "incident_blocked",
            "1 for the reason an incident's node is held back now (storm, paused, identity_unproven, power_query_failing, waiting_unhealthy_after, ...); absent when nothing blocks it",
            blocked.clone(),
        );
        let blocked_since = Family::default();
        registry.register_with_unit(
            "incident_blocked_since_timestamp",
            "Since when the reason in incident_blocked has held the node back; time() minus it is how long (a BMC unreachable for an hour shows here)",
            Unit::Seconds,
            blocked_since.clone(),
        );
        Self {
            started,
            blocked,
            blocked_since,
            set: Mutex::new(HashMap::new()),
        }
    }

    /// Sets the series from the engine's nodes, removing those that ended.
    pub fn observe(&self, engine: &Engine) {
        let mut set = self.set.lock().unwrap_or_else(PoisonError::into_inner);
        let mut now: HashMap<String, Option<&'static str>> = HashMap::new();
        for node in engine.nodes() {
            let Phase::Incident(incident) = &node.phase else {
                continue;
            };
            let name = node.facts.name.clone();
            self.started
                .get_or_create(&NodeLabels { node: name.clone() })
                .set(unix(incident.started));
            let reason = incident.block.as_ref().map(block_reason);
            if let Some(reason) = reason {
                let labels = BlockedLabels {
                    node: name.clone(),
                    reason,
                };
                self.blocked.get_or_create(&labels).set(1);
                if let Some(b) = incident.blocked.filter(|b| b.kind == reason) {
                    self.blocked_since.get_or_create(&labels).set(unix(b.since));
                }
            }
            now.insert(name, reason);
        }
        for (node, reason) in set.iter() {
            let current = now.get(node);
            if current.is_none() {
                self.started.remove(&NodeLabels { node: node.clone() });
            }
            if let Some(reason) = reason
                && current != Some(&Some(*reason))
            {
                let labels = BlockedLabels {
                    node: node.clone(),
                    reason,
                };
                self.blocked.remove(&labels);
                self.blocked_since.remove(&labels);
            }
        }
        *set = now;
    }
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
