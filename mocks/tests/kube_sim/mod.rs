//! The simulated control plane, end to end on the store: node failure, eviction,
//! the stuck volume, and the two ways out (out-of-service taint, Node deletion).
//! Every wait is bounded polling; simulated time runs hundreds of times faster.
//!
//! By theme: [`lifecycle`], [`release`], [`force_detach`].

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use nodefence_mocks::kube::deletion::{self, DeleteOptions};
use nodefence_mocks::kube::resources::{CORE_EVENTS, LEASES, NODES, PODS, VOLUME_ATTACHMENTS};
use nodefence_mocks::kube::sim::{
    MAX_WAIT_FOR_UNMOUNT, NodeSpec, SimConfig, SimEvent, SimEventKind, SimHandle, Simulation,
    WorkloadSpec,
};
use nodefence_mocks::kube::store::{Store, now_rfc3339};
use serde_json::{Value, json};
use tokio::time::Instant;

mod force_detach;
mod lifecycle;
mod release;

const OOS: &str = "node.kubernetes.io/out-of-service";
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// Simulated seconds as real time at `speed`.
fn secs(speed: f64, simulated: f64) -> Duration {
    Duration::from_secs_f64(simulated / speed)
}

async fn wait_for<T>(what: &str, timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
}

/// Asserts `probe` holds for the whole of `during`.
async fn holds(what: &str, during: Duration, mut probe: impl FnMut() -> bool) {
    let end = Instant::now() + during;
    while Instant::now() < end {
        assert!(probe(), "{what}");
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
}

fn get(
    store: &Store,
    rt: nodefence_mocks::kube::resources::ResourceType,
    ns: Option<&str>,
    name: &str,
) -> Option<Value> {
    store.get(rt, ns, name).ok()
}

fn condition<'a>(o: &'a Value, kind: &str) -> Option<&'a Value> {
    o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn status_of(o: &Value, kind: &str) -> String {
    condition(o, kind)
        .and_then(|c| c["status"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn has_taint(node: &Value, key: &str, effect: &str) -> bool {
    node["spec"]["taints"]
        .as_array()
        .is_some_and(|ts| ts.iter().any(|t| t["key"] == key && t["effect"] == effect))
}

fn running_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running" && status_of(pod, "Ready") == "True"
}

fn vas_on(store: &Store, node: &str) -> Vec<Value> {
    store
        .list(VOLUME_ATTACHMENTS, None)
        .0
        .into_iter()
        .filter(|v| v["spec"]["nodeName"] == node)
        .collect()
}

fn events(store: &Store, reason: &str) -> Vec<Value> {
    store
        .list(CORE_EVENTS, None)
        .0
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

fn add_oos_taint(store: &Store, node: &str) {
    store
        .modify(NODES, None, node, |n| {
            let taints = n["spec"]
                .as_object_mut()
                .unwrap()
                .entry("taints")
                .or_insert_with(|| json!([]));
            taints.as_array_mut().unwrap().push(json!({
                "key": OOS, "value": "nodeshutdown", "effect": "NoExecute", "timeAdded": now_rfc3339(),
            }));
            Ok(())
        })
        .unwrap();
}

/// The first of `kinds` missing from the timeline in this order (other events
/// between), if any.
fn first_out_of_order<'k>(
    timeline: &[SimEvent],
    kinds: &'k [(SimEventKind, Option<&'k str>)],
) -> Option<&'k (SimEventKind, Option<&'k str>)> {
    let mut rest = timeline.iter();
    kinds.iter().find(|(kind, node)| {
        !rest
            .by_ref()
            .any(|e| e.kind == *kind && node.is_none_or(|n| e.node.as_deref() == Some(n)))
    })
}

/// Waits up to `timeout` for `kinds` to appear in the timeline in this order: the
/// simulation records an event just after the write it tells of, so a test that saw
/// the write may look before the record is there.
async fn wait_in_order(sim: &SimHandle, kinds: &[(SimEventKind, Option<&str>)], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while first_out_of_order(&sim.timeline(), kinds).is_some() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    assert_in_order(&sim.timeline(), kinds);
}

/// Asserts `kinds` appear in the timeline in this order (other events between).
fn assert_in_order(timeline: &[SimEvent], kinds: &[(SimEventKind, Option<&str>)]) {
    if let Some((kind, node)) = first_out_of_order(timeline, kinds) {
        panic!(
            "{kind:?} (node {node:?}) missing or out of order in:\n{}",
            timeline
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// A control-plane node, two workers, and `db` (1 replica) Running on worker-1.
async fn cluster(cfg: SimConfig) -> (Store, SimHandle) {
    let store = Store::default();
    let sim = Simulation::start(store.clone(), cfg);
    sim.add_node(NodeSpec::new("cp-1").control_plane(true));
    sim.add_node(NodeSpec::new("worker-1").system_uuid("4C4C4544-0031-3510-8052-B2C04F503132"));
    sim.add_node(NodeSpec::new("worker-2"));
    sim.add_stateful_workload(WorkloadSpec::new("default", "db").replicas(1));
    let speed = cfg_speed(&sim);
    let pod = wait_for("db-0 Running", sim_timeout(speed, 60.0), || {
        get(&store, PODS, Some("default"), "db-0").filter(running_ready)
    })
    .await;
    assert_eq!(pod["spec"]["nodeName"], "worker-1", "spread: first worker");
    let vas = vas_on(&store, "worker-1");
    assert_eq!(vas.len(), 1);
    assert_eq!(vas[0]["status"]["attached"], true);
    (store, sim)
}

fn cfg_speed(sim: &SimHandle) -> f64 {
    sim.config().speed
}

/// A generous real-time bound for `secs` of simulated time.
fn sim_timeout(speed: f64, simulated: f64) -> Duration {
    secs(speed, simulated) * 3 + Duration::from_secs(2)
}
