//! The node lifecycle controller (kube-controller-manager, 1.32+), as far as a
//! fencing tool can observe it.
//!
//! Every `node_monitor_period` (5s) it checks each Node's health signals: a new
//! `lastHeartbeatTime` on the Ready condition, or a newer `renewTime` on the Lease
//! `kube-node-lease/<node>`. The clock it compares is its own *observation* time,
//! not the timestamps' values. When neither moved for `node_monitor_grace_period`
//! (50s; 60s `node_startup_grace_period` for a Node that never posted Ready):
//! - Ready, MemoryPressure, DiskPressure, PIDPressure become `Unknown`, reason
//!   `NodeStatusUnknown`, "Kubelet stopped posting node status.", `lastTransitionTime`
//!   now, `lastHeartbeatTime` kept;
//! - events `NodeNotReady` on the Node and (Warning, "Node is not ready") on each pod
//!   whose Ready condition it sets False;
//! - `unreachable:NoSchedule` at once (taint-by-condition, [`condition_taints`]) and
//!   `unreachable:NoExecute` one monitor pass later through the zone's rate-limited
//!   queue ([`zones`], which also implements the disruption modes).
//!
//! When the kubelet posts Ready again the NoExecute taints go (`markNodeAsReachable`)
//! and the NoSchedule one follows its condition. Other taints (the control-plane
//! taint, nodefence's out-of-service taint) are never touched. It also records
//! `RegisteredNode`/`RemovingNode` as Nodes appear and disappear.
//!
//! [`condition_taints`]: super::condition_taints
//! [`zones`]: super::zones

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use tokio::time::Instant;

use super::super::resources::{LEASES, NODES, PODS};
use super::super::store::now_rfc3339;
use super::clock::Wake;
use super::condition_taints;
use super::config::{NODE_EVICTION_PERIOD, NODE_LEASE_NAMESPACE};
use super::context::Ctx;
use super::events::{EventType, ObjectRef, Source};
use super::objects::{self, condition, condition_status, set_condition};
use super::taints::{self, NO_EXECUTE, NOT_READY, OUT_OF_SERVICE, UNREACHABLE};
use super::timeline::SimEventKind;
use super::zones::{Disruption, Zones, zone_key};

const COMPONENT: &str = "node-controller";
const EXCLUDE_DISRUPTION: &str = "node.kubernetes.io/exclude-disruption";

/// What the controller remembers of a Node's health.
#[derive(Debug, Clone)]
struct Health {
    probe: Instant,
    heartbeat: Option<String>,
    has_ready: bool,
    lease_renew: Option<String>,
}

struct Lifecycle {
    ctx: Ctx,
    known: BTreeMap<String, String>,
    health: HashMap<String, Health>,
    zones: Zones,
    out_of_service: HashSet<String>,
    pods_seen: HashMap<String, String>,
}

/// Runs the controller until shutdown.
pub async fn run(mut ctx: Ctx) {
    let mut wake = Wake::new(&ctx.store, &[NODES, PODS]);
    let mut lc = Lifecycle {
        ctx: ctx.clone(),
        known: BTreeMap::new(),
        health: HashMap::new(),
        zones: Zones::default(),
        out_of_service: HashSet::new(),
        pods_seen: HashMap::new(),
    };
    let mut next_monitor = Instant::now();
    loop {
        let nodes = lc.ctx.list(NODES);
        condition_taints::sync_all(&lc.ctx, &nodes);
        lc.observe_out_of_service(&nodes);
        if Instant::now() >= next_monitor {
            next_monitor = lc.ctx.clock.after(lc.ctx.config.node_monitor_period);
            lc.monitor();
        }
        lc.process_new_pods();
        lc.no_execute_pass();
        let until_monitor = lc.ctx.clock.until(next_monitor);
        let sleep = if lc.zones.has_pending() {
            NODE_EVICTION_PERIOD.min(until_monitor)
        } else {
            until_monitor
        };
        if !ctx.pause(Some(&mut wake), sleep).await {
            return;
        }
    }
}

fn parse_time(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(s).ok()
}

impl Lifecycle {
    fn node_event(&self, node: &Value, kind: EventType, reason: &str, message: &str) {
        let about = ObjectRef::node(objects::name(node), objects::uid(node));
        self.ctx.event(
            &about,
            &Source::controller(COMPONENT),
            kind,
            reason,
            message,
        );
    }

    /// `monitorNodeHealth`.
    fn monitor(&mut self) {
        let nodes = self.ctx.list(NODES);
        let names: HashSet<&str> = nodes.iter().map(objects::name).collect();
        for node in nodes.iter() {
            let name = objects::name(node);
            if !self.known.contains_key(name) {
                let msg = format!("Node {name} event: Registered Node {name} in Controller");
                self.node_event(node, EventType::Normal, "RegisteredNode", &msg);
                self.known
                    .insert(name.to_string(), objects::uid(node).to_string());
                self.zones.ensure(&zone_key(node));
                self.mark_reachable(node);
            }
        }
        let deleted: Vec<(String, String)> = self
            .known
            .iter()
            .filter(|(n, _)| !names.contains(n.as_str()))
            .map(|(n, u)| (n.clone(), u.clone()))
            .collect();
        for (name, uid) in deleted {
            let about = ObjectRef::node(&name, &uid);
            let msg = format!("Node {name} event: Removing Node {name} from Controller");
            self.ctx.event(
                &about,
                &Source::controller(COMPONENT),
                EventType::Normal,
                "RemovingNode",
                &msg,
            );
            self.ctx.record(
                SimEventKind::NodeDeleted,
                Some(&name),
                None,
                "Node object deleted",
            );
            self.known.remove(&name);
            self.health.remove(&name);
            for tainter in self.zones.tainters() {
                tainter.remove(&name);
            }
        }
        let mut zone_ready: HashMap<String, Vec<bool>> = HashMap::new();
        for node in nodes.iter() {
            // Taken before the status write: nodefence may react to the NotReady (and
            // record its reaction) before this loop records it.
            let written_at = nodefence_clock::now();
            let (observed, current) = self.update_health(node);
            if objects::label(node, EXCLUDE_DISRUPTION).is_none() {
                zone_ready
                    .entry(zone_key(node))
                    .or_default()
                    .push(current.as_deref() == Some("True"));
            }
            let Some(current) = current else { continue };
            self.taint_based_eviction(node, observed.as_deref());
            if current != "True" && observed.as_deref() == Some("True") {
                let name = objects::name(node);
                let msg = format!("Node {name} status is now: NodeNotReady");
                self.node_event(node, EventType::Normal, "NodeNotReady", &msg);
                self.ctx.record_at(
                    written_at,
                    SimEventKind::NodeNotReady,
                    Some(name),
                    None,
                    "Ready=Unknown: kubelet stopped posting node status",
                );
                self.mark_pods_not_ready(name);
            }
        }
        match self.zones.handle_disruption(&zone_ready, self.ctx.clock) {
            Disruption::Nothing => {}
            Disruption::MarkAllReachable => {
                tracing::info!(
                    "node lifecycle: all nodes are not Ready: entering master disruption mode"
                );
                for node in nodes.iter() {
                    self.mark_reachable(node);
                }
            }
            Disruption::ResetProbes => {
                for h in self.health.values_mut() {
                    h.probe = Instant::now();
                }
            }
        }
    }

    /// `tryUpdateNodeHealth`: returns the Ready status observed, and the one after
    /// this controller's update.
    fn update_health(&mut self, node: &Value) -> (Option<String>, Option<String>) {
        let name = objects::name(node).to_string();
        let ready = condition(node, "Ready");
        let heartbeat = ready
            .and_then(|c| c.get("lastHeartbeatTime"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let observed = condition_status(node, "Ready").map(str::to_string);
        let now = Instant::now();
        let health = self.health.entry(name.clone()).or_insert_with(|| Health {
            probe: now,
            heartbeat: heartbeat.clone(),
            has_ready: ready.is_some(),
            lease_renew: None,
        });
        let has_ready = ready.is_some();
        if has_ready != health.has_ready || (has_ready && health.heartbeat != heartbeat) {
            health.probe = now;
        }
        health.has_ready = has_ready;
        health.heartbeat = heartbeat;
        let lease_renew = self
            .ctx
            .get(LEASES, Some(NODE_LEASE_NAMESPACE), &name)
            .and_then(|l| objects::str_at(&l, "/spec/renewTime").map(str::to_string));
        if let Some(renew) = lease_renew {
            let newer = match (&health.lease_renew, parse_time(&renew)) {
                (None, _) => true,
                (Some(old), Some(new)) => parse_time(old).is_none_or(|o| o < new),
                (Some(old), None) => *old != renew,
            };
            if newer {
                health.lease_renew = Some(renew);
                health.probe = now;
            }
        }
        let grace = if has_ready {
            self.ctx.config.node_monitor_grace_period
        } else {
            self.ctx.config.node_startup_grace_period
        };
        if self.ctx.clock.since(health.probe) <= grace {
            return (observed.clone(), observed);
        }
        let created = objects::str_at(node, "/metadata/creationTimestamp")
            .unwrap_or_default()
            .to_string();
        let result = self.ctx.store.modify(NODES, None, &name, |n| {
            if condition_status(n, "Ready") == Some("Unknown") {
                return Ok(());
            }
            for kind in ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"] {
                match condition(n, kind).cloned() {
                    None => {
                        objects::arr_mut(n, &["status", "conditions"]).push(json!({
                            "type": kind, "status": "Unknown", "reason": "NodeStatusNeverUpdated",
                            "message": "Kubelet never posted node status.",
                            "lastHeartbeatTime": created, "lastTransitionTime": now_rfc3339(),
                        }));
                    }
                    Some(c) if c.get("status").and_then(Value::as_str) != Some("Unknown") => {
                        let mut c = c;
                        c["status"] = json!("Unknown");
                        c["reason"] = json!("NodeStatusUnknown");
                        c["message"] = json!("Kubelet stopped posting node status.");
                        set_condition(n, c);
                    }
                    Some(_) => {}
                }
            }
            Ok(())
        });
        match result {
            Ok(n) => (observed, condition_status(&n, "Ready").map(str::to_string)),
            Err(_) => (observed.clone(), observed),
        }
    }

    /// `processTaintBaseEviction`.
    fn taint_based_eviction(&mut self, node: &Value, observed: Option<&str>) {
        let name = objects::name(node);
        let zone = zone_key(node);
        match observed {
            Some("False") => {
                if taints::has(node, UNREACHABLE, NO_EXECUTE) {
                    self.swap_taint(name, NOT_READY, UNREACHABLE);
                } else {
                    self.mark_for_tainting(node, &zone, NOT_READY);
                }
            }
            Some("Unknown") => {
                if taints::has(node, NOT_READY, NO_EXECUTE) {
                    self.swap_taint(name, UNREACHABLE, NOT_READY);
                } else {
                    self.mark_for_tainting(node, &zone, UNREACHABLE);
                }
            }
            Some("True") => self.mark_reachable(node),
            _ => {}
        }
    }

    /// `markNodeForTainting`.
    fn mark_for_tainting(&mut self, node: &Value, zone: &str, key: &str) {
        let name = objects::name(node);
        let tainter = self.zones.tainter(zone);
        if !taints::has(node, key, NO_EXECUTE) {
            tainter.remove(name);
        }
        tainter.add(name);
    }

    /// `SwapNodeControllerTaint` for the NoExecute pair.
    fn swap_taint(&self, name: &str, add: &str, remove: &str) {
        swap_no_execute(&self.ctx, name, add, remove);
    }

    /// `markNodeAsReachable`: removes both NoExecute taints and dequeues the node.
    fn mark_reachable(&mut self, node: &Value) {
        let name = objects::name(node);
        if taints::has(node, UNREACHABLE, NO_EXECUTE) || taints::has(node, NOT_READY, NO_EXECUTE) {
            let mut removed = Vec::new();
            let _ = self.ctx.store.modify(NODES, None, name, |n| {
                for key in [UNREACHABLE, NOT_READY] {
                    if taints::remove(n, key, NO_EXECUTE) {
                        removed.push(key);
                    }
                }
                Ok(())
            });
            for key in removed {
                self.ctx.record(
                    SimEventKind::NodeUntainted,
                    Some(name),
                    None,
                    format!("removed taint {key}:NoExecute"),
                );
            }
        }
        self.zones.tainter(&zone_key(node)).remove(name);
    }

    /// `doNoExecuteTaintingPass`.
    fn no_execute_pass(&mut self) {
        let ctx = self.ctx.clone();
        let clock = ctx.clock;
        for tainter in self.zones.tainters() {
            tainter.try_each(clock, |name| {
                let Some(node) = ctx.get(NODES, None, name) else {
                    return Ok(());
                };
                match condition_status(&node, "Ready") {
                    None => Err(Duration::from_millis(50)),
                    Some("False") => {
                        swap_no_execute(&ctx, name, NOT_READY, UNREACHABLE);
                        Ok(())
                    }
                    Some("Unknown") => {
                        swap_no_execute(&ctx, name, UNREACHABLE, NOT_READY);
                        Ok(())
                    }
                    Some(_) => Ok(()),
                }
            });
        }
    }

    /// `MarkPodsNotReady`.
    fn mark_pods_not_ready(&self, node: &str) {
        for pod in self.ctx.list(PODS).iter() {
            if objects::pod_node(pod) == Some(node) {
                self.mark_pod_not_ready(pod, node);
            }
        }
    }

    fn mark_pod_not_ready(&self, pod: &Value, node: &str) {
        let Some(cond) = condition(pod, "Ready").cloned() else {
            return;
        };
        if cond.get("status").and_then(Value::as_str) == Some("False") {
            return;
        }
        let uid = objects::uid(pod).to_string();
        let updated = self.ctx.store.modify(
            PODS,
            Some(objects::namespace(pod)),
            objects::name(pod),
            |p| {
                if objects::uid(p) == uid {
                    let mut c = cond.clone();
                    c["status"] = json!("False");
                    set_condition(p, c);
                }
                Ok(())
            },
        );
        if let Ok(p) = updated {
            self.ctx.event(
                &ObjectRef::to(&p),
                &Source::controller(COMPONENT),
                EventType::Warning,
                "NodeNotReady",
                "Node is not ready",
            );
            self.ctx.record(
                SimEventKind::PodNotReady,
                Some(node),
                Some(&objects::key(&p)),
                "pod marked not ready: its node is not ready",
            );
        }
    }

    /// `processPod`: a pod newly bound to a node that is not Ready is marked too.
    fn process_new_pods(&mut self) {
        let pods = self.ctx.list(PODS);
        let mut seen = HashMap::new();
        for pod in pods.iter() {
            let Some(node) = objects::pod_node(pod) else {
                continue;
            };
            let uid = objects::uid(pod).to_string();
            if self.pods_seen.get(&uid).map(String::as_str) != Some(node)
                && self.health.contains_key(node)
                && let Some(n) = self.ctx.get(NODES, None, node)
                && !objects::node_ready(&n)
            {
                self.mark_pod_not_ready(pod, node);
            }
            seen.insert(uid, node.to_string());
        }
        self.pods_seen = seen;
    }

    /// Notes nodefence's out-of-service taint coming and going.
    fn observe_out_of_service(&mut self, nodes: &[Value]) {
        let mut now = HashSet::new();
        for node in nodes {
            let name = objects::name(node);
            if taints::has_key(node, OUT_OF_SERVICE) {
                now.insert(name.to_string());
                if !self.out_of_service.contains(name) {
                    self.ctx.record(
                        SimEventKind::OutOfServiceTaintAdded,
                        Some(name),
                        None,
                        "node.kubernetes.io/out-of-service taint observed",
                    );
                }
            }
        }
        for name in self.out_of_service.difference(&now) {
            if nodes.iter().any(|n| objects::name(n) == name) {
                self.ctx.record(
                    SimEventKind::OutOfServiceTaintRemoved,
                    Some(name),
                    None,
                    "node.kubernetes.io/out-of-service taint removed",
                );
            }
        }
        self.out_of_service = now;
    }
}

/// Adds the NoExecute taint `add` (with `timeAdded`) and removes `remove`.
fn swap_no_execute(ctx: &Ctx, name: &str, add: &str, remove: &str) {
    let mut added = false;
    let mut removed = false;
    let at = nodefence_clock::now();
    let _ = ctx.store.modify(NODES, None, name, |n| {
        added = taints::add(n, add, NO_EXECUTE, &now_rfc3339());
        removed = taints::remove(n, remove, NO_EXECUTE);
        Ok(())
    });
    if added {
        ctx.record_at(
            at,
            SimEventKind::NodeTainted,
            Some(name),
            None,
            format!("tainted {add}:NoExecute"),
        );
    }
    if removed {
        ctx.record(
            SimEventKind::NodeUntainted,
            Some(name),
            None,
            format!("removed taint {remove}:NoExecute"),
        );
    }
}
