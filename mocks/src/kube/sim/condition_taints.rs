//! Taint-nodes-by-condition: the node lifecycle controller's `doNoScheduleTaintingPass`.
//!
//! On every Node change it maps conditions to `NoSchedule` taints (Ready=False →
//! `not-ready`, Ready=Unknown → `unreachable`, MemoryPressure/DiskPressure/
//! PIDPressure/NetworkUnavailable=True → the matching pressure taint,
//! `spec.unschedulable` → `unschedulable`) and adds or removes only those keys, with
//! `timeAdded`. This is what keeps the scheduler off a node the moment it is declared
//! unreachable, while the `NoExecute` twin waits for the rate-limited queue.

use serde_json::Value;

use super::super::resources::NODES;
use super::super::store::now_rfc3339;
use super::context::Ctx;
use super::objects::At;
use super::objects::{self, condition_status};
use super::taints::{self, NO_SCHEDULE};
use super::timeline::SimEventKind;

/// `(condition, status, taint key)`.
const CONDITION_TAINTS: [(&str, &str, &str); 6] = [
    ("Ready", "False", taints::NOT_READY),
    ("Ready", "Unknown", taints::UNREACHABLE),
    (
        "MemoryPressure",
        "True",
        "node.kubernetes.io/memory-pressure",
    ),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    (
        "NetworkUnavailable",
        "True",
        "node.kubernetes.io/network-unavailable",
    ),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
];

/// Every key this pass manages.
fn managed(key: &str) -> bool {
    key == taints::UNSCHEDULABLE || CONDITION_TAINTS.iter().any(|(_, _, k)| *k == key)
}

/// The NoSchedule taint keys a Node's conditions call for.
fn wanted(node: &Value) -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = CONDITION_TAINTS
        .iter()
        .filter(|(cond, status, _)| condition_status(node, cond) == Some(*status))
        .map(|(_, _, key)| *key)
        .collect();
    if node.at("/spec/unschedulable") == Some(&Value::Bool(true)) {
        keys.push(taints::UNSCHEDULABLE);
    }
    keys
}

/// Brings one Node's condition taints in line with its conditions.
pub fn sync_node(ctx: &Ctx, name: &str) {
    let mut added = Vec::new();
    let mut removed = Vec::new();
    let result = ctx.store.modify(NODES, None, name, |node| {
        let want = wanted(node);
        let have: Vec<String> = taints::taints(node)
            .into_iter()
            .filter(|t| t.effect == NO_SCHEDULE && managed(&t.key))
            .map(|t| t.key)
            .collect();
        let now = now_rfc3339();
        for key in &want {
            if !have.iter().any(|h| h == key) && taints::add(node, key, NO_SCHEDULE, &now) {
                added.push(key.to_string());
            }
        }
        for key in have {
            if !want.contains(&key.as_str()) && taints::remove(node, &key, NO_SCHEDULE) {
                removed.push(key);
            }
        }
        Ok(())
    });
    if result.is_err() {
        return;
    }
    for key in added {
        ctx.record(
            SimEventKind::NodeTainted,
            Some(name),
            None,
            format!("tainted {key}:NoSchedule"),
        );
    }
    for key in removed {
        ctx.record(
            SimEventKind::NodeUntainted,
            Some(name),
            None,
            format!("removed taint {key}:NoSchedule"),
        );
    }
}

/// [`sync_node`] for every Node.
pub fn sync_all(ctx: &Ctx, nodes: &[Value]) {
    for node in nodes {
        let want = wanted(node);
        let have: Vec<String> = taints::taints(node)
            .into_iter()
            .filter(|t| t.effect == NO_SCHEDULE && managed(&t.key))
            .map(|t| t.key)
            .collect();
        let in_line = want.len() == have.len() && want.iter().all(|w| have.iter().any(|h| h == w));
        if !in_line {
            sync_node(ctx, objects::name(node));
        }
    }
}
