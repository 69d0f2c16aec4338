//! The pod garbage collector (`pkg/controller/podgc`), every 20s:
//!
//! - `gcTerminating`: a pod with a `deletionTimestamp` on a Node that is not Ready
//!   and carries the `node.kubernetes.io/out-of-service` taint (any effect) is
//!   force-deleted: phase set `Failed`, then deleted with grace 0. This is the
//!   non-graceful node shutdown path nodefence triggers.
//! - `gcOrphaned`: pods bound to a Node that does not exist are quarantined 40s
//!   (the Node may just not be in the cache yet), then, if a GET confirms the Node is
//!   gone, marked `Failed` with condition `DisruptionTarget`/`DeletionByPodGC`
//!   ("PodGC: node no longer exists") and deleted with grace 0. The path of
//!   "delete the Node object".
//! - `gcUnscheduledTerminating`: terminating pods never bound are deleted.
//!
//! PodGC records no Events (only logs); its deletions appear in the timeline.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};
use tokio::time::Instant;

use super::super::deletion::{DeleteOptions, Preconditions};
use super::super::resources::{NODES, PODS};
use super::config::{POD_GC_PERIOD, POD_GC_QUARANTINE};
use super::context::Ctx;
use super::objects::{self, set_condition};
use super::taints::{self, OUT_OF_SERVICE};
use super::timeline::SimEventKind;

/// Runs PodGC until shutdown.
pub async fn run(mut ctx: Ctx) {
    let mut quarantine: HashMap<String, Instant> = HashMap::new();
    loop {
        gc(&ctx, &mut quarantine);
        if !ctx.pause(None, POD_GC_PERIOD).await {
            return;
        }
    }
}

fn gc(ctx: &Ctx, quarantine: &mut HashMap<String, Instant>) {
    let pods = ctx.list(PODS);
    let node_list = ctx.list(NODES);
    let nodes: HashMap<&str, &Value> = node_list.iter().map(|n| (objects::name(n), n)).collect();
    // gcTerminating
    for pod in pods.iter().filter(|p| objects::is_terminating(p)) {
        let Some(node) = objects::pod_node(pod).and_then(|n| nodes.get(n)) else {
            continue;
        };
        if !objects::node_ready(node) && taints::has_key(node, OUT_OF_SERVICE) {
            force_delete(
                ctx,
                pod,
                None,
                "force-deleted: terminating on a node tainted node.kubernetes.io/out-of-service",
            );
        }
    }
    // gcOrphaned
    for pod in pods.iter() {
        if let Some(node) = objects::pod_node(pod)
            && !nodes.contains_key(node)
        {
            quarantine
                .entry(node.to_string())
                .or_insert_with(|| ctx.clock.after(POD_GC_QUARANTINE));
        }
    }
    let now = Instant::now();
    let ready: Vec<String> = quarantine
        .iter()
        .filter(|(_, at)| **at <= now)
        .map(|(n, _)| n.clone())
        .collect();
    let mut deleted_nodes = HashSet::new();
    for node in ready {
        quarantine.remove(&node);
        if !nodes.contains_key(node.as_str()) && ctx.get(NODES, None, &node).is_none() {
            deleted_nodes.insert(node);
        }
    }
    for pod in pods.iter() {
        if objects::pod_node(pod).is_some_and(|n| deleted_nodes.contains(n)) {
            let condition = json!({"type": "DisruptionTarget", "status": "True",
                "reason": "DeletionByPodGC", "message": "PodGC: node no longer exists"});
            force_delete(
                ctx,
                pod,
                Some(condition),
                "force-deleted: orphaned (its Node no longer exists)",
            );
        }
    }
    // gcUnscheduledTerminating
    for pod in pods.iter() {
        if objects::is_terminating(pod) && objects::pod_node(pod).is_none() {
            force_delete(ctx, pod, None, "deleted: terminating and never scheduled");
        }
    }
}

/// `markFailedAndDeletePodWithCondition`.
fn force_delete(ctx: &Ctx, pod: &Value, condition: Option<Value>, why: &str) {
    let ns = objects::namespace(pod);
    let name = objects::name(pod);
    let uid = objects::uid(pod).to_string();
    let key = objects::key(pod);
    let node = objects::pod_node(pod).map(str::to_string);
    tracing::info!("PodGC is force deleting Pod {key}");
    let at = nodefence_clock::now();
    if !objects::is_terminal(pod) {
        let patched = ctx.store.modify(PODS, Some(ns), name, |p| {
            if objects::uid(p) != uid {
                return Ok(());
            }
            objects::obj_mut(p, &["status"]).insert("phase".into(), json!("Failed"));
            if let Some(c) = &condition {
                set_condition(p, c.clone());
            }
            Ok(())
        });
        if patched.is_err() {
            return;
        }
    }
    // The UID precondition keeps a replacement created meanwhile (same name) safe.
    let opts = DeleteOptions {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteOptions::default()
    };
    match ctx.delete(PODS, Some(ns), name, &opts) {
        Ok(Some(_)) => ctx.record_at(
            at,
            SimEventKind::PodForceDeleted,
            node.as_deref(),
            Some(&key),
            why,
        ),
        Ok(None) => {}
        Err(e) => tracing::debug!("PodGC deleting {key}: {e}"),
    }
}
