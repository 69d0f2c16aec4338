//! kube-scheduler, reduced to the filters that decide where a replacement pod can go
//! after a node failure, and a sensible spread.
//!
//! Filters (plugin names as in the real scheduler): NodeUnschedulable
//! (`spec.unschedulable` unless tolerated), TaintToleration (every `NoSchedule` and
//! `NoExecute` taint tolerated: this keeps pods off a node tainted
//! `unreachable:NoSchedule` and off the control plane), NodeAffinity (`nodeSelector`),
//! VolumeBinding (claims must exist and be bound). Score: fewest pods of the same
//! owner, then fewest pods, then name. Binding sets `spec.nodeName` and the
//! `PodScheduled` condition, with the `Scheduled` event; a pod that fits nowhere gets
//! `PodScheduled=False/Unschedulable` and a `FailedScheduling` event in the real
//! format ("0/3 nodes are available: ...") and is retried on cluster changes.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

use super::super::resources::{NODES, PERSISTENT_VOLUME_CLAIMS, PODS};
use super::clock::Wake;
use super::config::SCHEDULER_RETRY;
use super::context::Ctx;
use super::events::{EventType, ObjectRef, Source};
use super::objects::At;
use super::objects::{self, set_condition, str_at};
use super::taints::{self, NO_EXECUTE, NO_SCHEDULE, UNSCHEDULABLE};
use super::timeline::SimEventKind;
use super::volumes::VolumeIndex;

const COMPONENT: &str = "default-scheduler";

/// Runs the scheduler until shutdown.
pub async fn run(mut ctx: Ctx) {
    let mut wake = Wake::new(&ctx.store, &[PODS, NODES, PERSISTENT_VOLUME_CLAIMS]);
    let mut last_failure: HashMap<String, String> = HashMap::new();
    loop {
        pass(&ctx, &mut last_failure);
        if !ctx.pause(Some(&mut wake), SCHEDULER_RETRY).await {
            return;
        }
    }
}

fn owner_uid(pod: &Value) -> Option<&str> {
    pod.at("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|o| o.get("controller") == Some(&json!(true)))
        .and_then(|o| o.get("uid"))
        .and_then(Value::as_str)
}

fn wants_scheduling(pod: &Value) -> bool {
    objects::pod_node(pod).is_none()
        && !objects::is_terminating(pod)
        && !objects::is_terminal(pod)
        && str_at(pod, "/spec/schedulerName").is_none_or(|s| s == COMPONENT)
}

fn pass(ctx: &Ctx, last_failure: &mut HashMap<String, String>) {
    let pods = ctx.list(PODS);
    if !pods.iter().any(wants_scheduling) {
        last_failure.clear();
        return;
    }
    let nodes = ctx.list(NODES);
    let index = VolumeIndex::load(&ctx.store);
    let mut load: HashMap<String, usize> = HashMap::new();
    let mut owned: HashMap<(String, String), usize> = HashMap::new();
    for p in pods.iter() {
        if let Some(n) = objects::pod_node(p)
            && !objects::is_terminal(p)
        {
            *load.entry(n.to_string()).or_default() += 1;
            if let Some(o) = owner_uid(p) {
                *owned.entry((o.to_string(), n.to_string())).or_default() += 1;
            }
        }
    }
    let mut still_failing = HashMap::new();
    for pod in pods.iter().filter(|p| wants_scheduling(p)) {
        let uid = objects::uid(pod).to_string();
        match choose(pod, &nodes, &index, &load, &owned) {
            Ok(node) => {
                if bind(ctx, pod, &node) {
                    *load.entry(node.clone()).or_default() += 1;
                    if let Some(o) = owner_uid(pod) {
                        *owned.entry((o.to_string(), node)).or_default() += 1;
                    }
                }
            }
            Err(message) => {
                unschedulable(ctx, pod, &message, last_failure.get(&uid) != Some(&message));
                still_failing.insert(uid, message);
            }
        }
    }
    *last_failure = still_failing;
}

/// The node for a pod, or the FailedScheduling message.
fn choose(
    pod: &Value,
    nodes: &[Value],
    index: &VolumeIndex,
    load: &HashMap<String, usize>,
    owned: &HashMap<(String, String), usize>,
) -> Result<String, String> {
    let total = nodes.len();
    let ns = objects::namespace(pod);
    for (_, claim) in objects::pod_claims(pod) {
        let reason = match index.claim(ns, &claim) {
            None => format!("persistentvolumeclaim \"{claim}\" not found"),
            Some(c) if str_at(c, "/spec/volumeName").is_none_or(str::is_empty) => {
                "pod has unbound immediate PersistentVolumeClaims".to_string()
            }
            Some(_) => continue,
        };
        return Err(format!(
            "0/{total} nodes are available: {reason}. preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling."
        ));
    }
    let tols = taints::tolerations(pod);
    let selector: BTreeMap<String, String> = pod
        .at("/spec/nodeSelector")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut feasible = Vec::new();
    for node in nodes {
        let node_taints = taints::taints(node);
        let unschedulable = node.at("/spec/unschedulable") == Some(&json!(true))
            && !tols.iter().any(|t| {
                t.tolerates(&taints::Taint {
                    key: UNSCHEDULABLE.into(),
                    value: String::new(),
                    effect: NO_SCHEDULE.into(),
                    time_added: None,
                })
            });
        let untolerated = node_taints
            .iter()
            .filter(|t| t.effect == NO_SCHEDULE || t.effect == NO_EXECUTE)
            .find(|t| !tols.iter().any(|tol| tol.tolerates(t)));
        let reason = if unschedulable {
            Some("node(s) were unschedulable".to_string())
        } else if let Some(t) = untolerated {
            Some(format!("node(s) had untolerated taint {}", t.display()))
        } else if !selector
            .iter()
            .all(|(k, v)| objects::label(node, k) == Some(v.as_str()))
        {
            Some("node(s) didn't match Pod's node affinity/selector".to_string())
        } else {
            None
        };
        match reason {
            Some(r) => *reasons.entry(r).or_default() += 1,
            None => feasible.push(objects::name(node).to_string()),
        }
    }
    let owner = owner_uid(pod).unwrap_or_default().to_string();
    feasible
        .into_iter()
        .min_by_key(|n| {
            (
                owned.get(&(owner.clone(), n.clone())).copied().unwrap_or(0),
                load.get(n).copied().unwrap_or(0),
                n.clone(),
            )
        })
        .ok_or_else(|| {
            let parts: Vec<String> = reasons.iter().map(|(r, c)| format!("{c} {r}")).collect();
            format!(
                "0/{total} nodes are available: {}. preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling.",
                parts.join(", ")
            )
        })
}

/// The binding subresource: `spec.nodeName` plus `PodScheduled=True`.
fn bind(ctx: &Ctx, pod: &Value, node: &str) -> bool {
    let uid = objects::uid(pod).to_string();
    let mut bound = false;
    let at = nodefence_clock::now();
    let result = ctx.store.modify(
        PODS,
        Some(objects::namespace(pod)),
        objects::name(pod),
        |p| {
            if objects::uid(p) != uid
                || objects::pod_node(p).is_some()
                || objects::is_terminating(p)
            {
                return Ok(());
            }
            objects::obj_mut(p, &["spec"]).insert("nodeName".into(), json!(node));
            set_condition(p, json!({"type": "PodScheduled", "status": "True"}));
            bound = true;
            Ok(())
        },
    );
    let Ok(p) = result else { return false };
    if !bound {
        return false;
    }
    let key = objects::key(&p);
    ctx.event(
        &ObjectRef::to(&p),
        &Source::controller(COMPONENT),
        EventType::Normal,
        "Scheduled",
        &format!("Successfully assigned {key} to {node}"),
    );
    ctx.record_at(
        at,
        SimEventKind::PodScheduled,
        Some(node),
        Some(&key),
        format!("scheduled to {node}"),
    );
    true
}

fn unschedulable(ctx: &Ctx, pod: &Value, message: &str, new: bool) {
    let uid = objects::uid(pod).to_string();
    let _ = ctx.store.modify(
        PODS,
        Some(objects::namespace(pod)),
        objects::name(pod),
        |p| {
            if objects::uid(p) == uid {
                set_condition(
                    p,
                    json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "message": message}),
                );
            }
            Ok(())
        },
    );
    if new {
        ctx.event(
            &ObjectRef::to(pod),
            &Source::controller(COMPONENT),
            EventType::Warning,
            "FailedScheduling",
            message,
        );
        ctx.record(
            SimEventKind::PodUnschedulable,
            None,
            Some(&objects::key(pod)),
            message,
        );
    }
}
