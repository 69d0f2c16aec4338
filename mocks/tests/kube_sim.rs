//! The simulated control plane, end to end on the store: node failure, eviction,
//! the stuck volume, and the two ways out (out-of-service taint, Node deletion).
//! Every wait is bounded polling; simulated time runs hundreds of times faster.
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

/// Asserts `kinds` appear in the timeline in this order (other events between).
fn assert_in_order(timeline: &[SimEvent], kinds: &[(SimEventKind, Option<&str>)]) {
    let mut rest = timeline.iter();
    for (kind, node) in kinds {
        let found = rest
            .by_ref()
            .any(|e| e.kind == *kind && node.is_none_or(|n| e.node.as_deref() == Some(n)));
        assert!(
            found,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_heartbeat_grace_period_and_recovery() {
    let speed = 200.0;
    let store = Store::default();
    let sim = Simulation::start(
        store.clone(),
        SimConfig {
            speed,
            ..SimConfig::default()
        },
    );
    sim.add_node(NodeSpec::new("worker-1").system_uuid("uuid-1"));
    sim.add_node(NodeSpec::new("worker-2"));
    let node = get(&store, NODES, None, "worker-1").unwrap();
    assert_eq!(node["status"]["nodeInfo"]["systemUUID"], "uuid-1");
    assert_eq!(
        node["metadata"]["labels"]["kubernetes.io/hostname"],
        "worker-1"
    );
    assert_eq!(status_of(&node, "Ready"), "True");
    assert_eq!(condition(&node, "Ready").unwrap()["reason"], "KubeletReady");
    let lease = get(&store, LEASES, Some("kube-node-lease"), "worker-1").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "worker-1");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
    assert_eq!(lease["metadata"]["ownerReferences"][0]["kind"], "Node");
    let renew = |s: &Store| {
        get(s, LEASES, Some("kube-node-lease"), "worker-1").unwrap()["spec"]["renewTime"].clone()
    };

    // Renewals happen (every 10s simulated).
    let first = renew(&store);
    wait_for("a lease renewal", sim_timeout(speed, 20.0), || {
        (renew(&store) != first).then_some(())
    })
    .await;

    // Power loss: renewals stop.
    sim.set_kubelet("worker-1", false);
    assert_eq!(sim.kubelet_running("worker-1"), Some(false));
    tokio::time::sleep(Duration::from_millis(5)).await;
    let last = renew(&store);
    let stopped = Instant::now();
    // Within the 50s grace the node stays Ready and untainted.
    holds("Ready during the grace period", secs(speed, 40.0), || {
        let n = get(&store, NODES, None, "worker-1").unwrap();
        renew(&store) == last
            && status_of(&n, "Ready") == "True"
            && !has_taint(&n, UNREACHABLE, "NoSchedule")
    })
    .await;
    let node = wait_for("Ready=Unknown", sim_timeout(speed, 60.0), || {
        get(&store, NODES, None, "worker-1").filter(|n| status_of(n, "Ready") == "Unknown")
    })
    .await;
    assert!(
        stopped.elapsed() >= secs(speed, 50.0),
        "not before the grace period"
    );
    for kind in ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"] {
        let c = condition(&node, kind).unwrap();
        assert_eq!(c["status"], "Unknown", "{kind}");
        assert_eq!(c["reason"], "NodeStatusUnknown");
        assert_eq!(c["message"], "Kubelet stopped posting node status.");
    }
    // nodefence fences it meanwhile: its taint must survive everything below.
    add_oos_taint(&store, "worker-1");
    let node = wait_for("unreachable taints", sim_timeout(speed, 15.0), || {
        get(&store, NODES, None, "worker-1").filter(|n| {
            has_taint(n, UNREACHABLE, "NoSchedule") && has_taint(n, UNREACHABLE, "NoExecute")
        })
    })
    .await;
    let no_exec = node["spec"]["taints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["key"] == UNREACHABLE && t["effect"] == "NoExecute")
        .unwrap();
    assert!(no_exec["timeAdded"].is_string());
    assert!(has_taint(&node, OOS, "NoExecute"));
    let worker2 = get(&store, NODES, None, "worker-2").unwrap();
    assert_eq!(
        status_of(&worker2, "Ready"),
        "True",
        "the other node is fine"
    );
    assert_eq!(renew(&store), last, "no renewal while stopped");

    // The kubelet comes back: Ready, unreachable taints gone, out-of-service kept.
    sim.set_kubelet("worker-1", true);
    let node = wait_for("Ready and untainted", sim_timeout(speed, 15.0), || {
        get(&store, NODES, None, "worker-1").filter(|n| {
            status_of(n, "Ready") == "True"
                && !has_taint(n, UNREACHABLE, "NoSchedule")
                && !has_taint(n, UNREACHABLE, "NoExecute")
        })
    })
    .await;
    assert!(
        has_taint(&node, OOS, "NoExecute"),
        "someone else's taint preserved"
    );
    assert!(!events(&store, "Rebooted").is_empty());
    assert!(
        events(&store, "NodeNotReady")
            .iter()
            .any(|e| e["message"] == "Node worker-1 status is now: NodeNotReady")
    );
    assert_in_order(
        &sim.timeline(),
        &[
            (SimEventKind::KubeletStopped, Some("worker-1")),
            (SimEventKind::NodeNotReady, Some("worker-1")),
            (SimEventKind::NodeTainted, Some("worker-1")),
            (SimEventKind::OutOfServiceTaintAdded, Some("worker-1")),
            (SimEventKind::KubeletStarted, Some("worker-1")),
            (SimEventKind::NodeReady, Some("worker-1")),
            (SimEventKind::NodeUntainted, Some("worker-1")),
        ],
    );
    sim.shutdown().await;
}

/// Seed 000: power loss, pod stuck Terminating, volume stuck attached, released by
/// the out-of-service taint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_stuck_until_out_of_service_taint() {
    let speed = 300.0;
    let (store, sim) = cluster(SimConfig {
        speed,
        ..SimConfig::default()
    })
    .await;
    let old = get(&store, PODS, Some("default"), "db-0").unwrap();
    let old_uid = old["metadata"]["uid"].as_str().unwrap().to_string();
    let old_va = vas_on(&store, "worker-1")[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let pv = old["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"].clone();
    assert_eq!(pv, "data-db-0");
    let tol: Vec<&Value> = old["spec"]["tolerations"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    assert!(
        tol.iter()
            .any(|t| t["key"] == UNREACHABLE && t["tolerationSeconds"] == 300)
    );

    sim.set_kubelet("worker-1", false);
    let stopped = Instant::now();
    wait_for("NotReady", sim_timeout(speed, 60.0), || {
        get(&store, NODES, None, "worker-1").filter(|n| {
            status_of(n, "Ready") == "Unknown" && has_taint(n, UNREACHABLE, "NoSchedule")
        })
    })
    .await;
    let pod = wait_for(
        "eviction after the toleration",
        sim_timeout(speed, 330.0),
        || {
            get(&store, PODS, Some("default"), "db-0")
                .filter(|p| p["metadata"]["deletionTimestamp"].is_string())
        },
    )
    .await;
    assert!(
        stopped.elapsed() >= secs(speed, 300.0),
        "evicted only after tolerationSeconds"
    );
    assert_eq!(pod["metadata"]["uid"], old_uid.as_str());
    assert_eq!(status_of(&pod, "Ready"), "False", "marked not ready");
    assert_eq!(status_of(&pod, "DisruptionTarget"), "True");

    // Stuck: Terminating forever, volume attached, no replacement.
    holds(
        "pod stays Terminating and the volume attached",
        secs(speed, 180.0),
        || {
            let p = get(&store, PODS, Some("default"), "db-0");
            p.is_some_and(|p| p["metadata"]["uid"] == old_uid.as_str())
                && get(&store, VOLUME_ATTACHMENTS, None, &old_va).is_some()
                && vas_on(&store, "worker-2").is_empty()
        },
    )
    .await;

    // nodefence confirmed the machine is off: out-of-service taint.
    add_oos_taint(&store, "worker-1");
    let new = wait_for(
        "replacement Running on worker-2",
        sim_timeout(speed, 60.0),
        || {
            get(&store, PODS, Some("default"), "db-0")
                .filter(|p| p["metadata"]["uid"] != old_uid.as_str() && running_ready(p))
        },
    )
    .await;
    assert_eq!(new["spec"]["nodeName"], "worker-2");
    assert!(
        get(&store, VOLUME_ATTACHMENTS, None, &old_va).is_none(),
        "old attachment gone"
    );
    let vas = vas_on(&store, "worker-2");
    assert_eq!(vas.len(), 1);
    assert_eq!(vas[0]["status"]["attached"], true);
    let node2 = get(&store, NODES, None, "worker-2").unwrap();
    assert_eq!(
        node2["status"]["volumesAttached"].as_array().unwrap().len(),
        1
    );

    let timeline = sim.timeline();
    assert_in_order(
        &timeline,
        &[
            (SimEventKind::KubeletStopped, Some("worker-1")),
            (SimEventKind::NodeNotReady, Some("worker-1")),
            (SimEventKind::NodeTainted, Some("worker-1")),
            (SimEventKind::PodEvictionScheduled, Some("worker-1")),
            (SimEventKind::PodEvicted, Some("worker-1")),
            (SimEventKind::PodForceDeleted, Some("worker-1")),
            (SimEventKind::PodCreated, None),
            (SimEventKind::PodScheduled, Some("worker-2")),
            (SimEventKind::VolumeDetached, Some("worker-1")),
            (SimEventKind::VolumeAttached, Some("worker-2")),
            (SimEventKind::PodRunning, Some("worker-2")),
        ],
    );
    assert!(
        timeline
            .iter()
            .any(|e| e.kind == SimEventKind::OutOfServiceTaintAdded)
    );
    let detach = timeline
        .iter()
        .find(|e| e.kind == SimEventKind::VolumeDetached)
        .unwrap();
    assert!(detach.message.contains("out-of-service"), "{detach}");
    // The old pod was gone before the replacement existed (same name): the attach
    // waited for the detach instead of failing.
    assert!(
        !timeline
            .iter()
            .any(|e| e.kind == SimEventKind::MultiAttachError)
    );
    for reason in [
        "TaintManagerEviction",
        "NodeNotReady",
        "SuccessfulAttachVolume",
        "Scheduled",
    ] {
        assert!(!events(&store, reason).is_empty(), "event {reason}");
    }
    sim.shutdown().await;
}

/// Seed 001: deleting the Node orphans the pod, the replacement hits Multi-Attach
/// until the stale VolumeAttachment is deleted too; the kubelet re-registers later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_deletion_then_volume_attachment_deletion() {
    let speed = 300.0;
    let (store, sim) = cluster(SimConfig {
        speed,
        ..SimConfig::default()
    })
    .await;
    let old_uid = get(&store, PODS, Some("default"), "db-0").unwrap()["metadata"]["uid"].clone();
    let old_va = vas_on(&store, "worker-1")[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let pv = get(&store, VOLUME_ATTACHMENTS, None, &old_va).unwrap()["spec"]["source"]["persistentVolumeName"]
        .as_str()
        .unwrap()
        .to_string();
    sim.set_kubelet("worker-1", false);
    wait_for("NotReady", sim_timeout(speed, 60.0), || {
        get(&store, NODES, None, "worker-1").filter(|n| {
            status_of(n, "Ready") == "Unknown" && has_taint(n, UNREACHABLE, "NoSchedule")
        })
    })
    .await;
    deletion::delete(&store, NODES, None, "worker-1", &DeleteOptions::default()).unwrap();

    // PodGC: orphan after its 40s quarantine; the replacement lands on worker-2 and
    // the attach is refused.
    let new = wait_for("replacement scheduled", sim_timeout(speed, 90.0), || {
        get(&store, PODS, Some("default"), "db-0")
            .filter(|p| p["metadata"]["uid"] != old_uid && p["spec"]["nodeName"] == "worker-2")
    })
    .await;
    let expected = format!(
        "Multi-Attach error for volume \"{pv}\" Volume is already exclusively attached to one node and can't be attached to another"
    );
    let ev = wait_for("Multi-Attach event", sim_timeout(speed, 10.0), || {
        events(&store, "FailedAttachVolume")
            .into_iter()
            .find(|e| e["involvedObject"]["uid"] == new["metadata"]["uid"])
    })
    .await;
    assert_eq!(ev["message"], expected.as_str());
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["source"]["component"], "attachdetach-controller");
    holds(
        "stuck while the old attachment exists",
        secs(speed, 120.0),
        || {
            get(&store, VOLUME_ATTACHMENTS, None, &old_va).is_some()
                && get(&store, PODS, Some("default"), "db-0").is_some_and(|p| !running_ready(&p))
        },
    )
    .await;
    assert!(
        get(&store, LEASES, Some("kube-node-lease"), "worker-1").is_none(),
        "the Lease followed its Node"
    );

    // nodefence deletes the VolumeAttachment too.
    deletion::delete(
        &store,
        VOLUME_ATTACHMENTS,
        None,
        &old_va,
        &DeleteOptions::default(),
    )
    .unwrap();
    wait_for(
        "replacement Running on worker-2",
        sim_timeout(speed, 90.0),
        || {
            get(&store, PODS, Some("default"), "db-0")
                .filter(|p| p["metadata"]["uid"] != old_uid && running_ready(p))
        },
    )
    .await;
    assert!(get(&store, VOLUME_ATTACHMENTS, None, &old_va).is_none());
    assert_eq!(vas_on(&store, "worker-2").len(), 1);

    // The machine comes back: its kubelet registers the Node again.
    sim.set_kubelet("worker-1", true);
    let node = wait_for("Node re-registered", sim_timeout(speed, 15.0), || {
        get(&store, NODES, None, "worker-1").filter(|n| status_of(n, "Ready") == "True")
    })
    .await;
    assert_eq!(
        node["status"]["nodeInfo"]["systemUUID"],
        "4C4C4544-0031-3510-8052-B2C04F503132"
    );
    wait_for("Lease back", sim_timeout(speed, 15.0), || {
        get(&store, LEASES, Some("kube-node-lease"), "worker-1")
    })
    .await;
    assert_in_order(
        &sim.timeline(),
        &[
            (SimEventKind::KubeletStopped, Some("worker-1")),
            (SimEventKind::NodeNotReady, Some("worker-1")),
            (SimEventKind::NodeDeleted, Some("worker-1")),
            (SimEventKind::PodForceDeleted, Some("worker-1")),
            (SimEventKind::PodScheduled, Some("worker-2")),
            (SimEventKind::MultiAttachError, Some("worker-2")),
            (SimEventKind::VolumeDetached, Some("worker-1")),
            (SimEventKind::VolumeAttached, Some("worker-2")),
            (SimEventKind::PodRunning, Some("worker-2")),
            (SimEventKind::NodeRegistered, Some("worker-1")),
        ],
    );
    sim.shutdown().await;
}

/// Pod force-deleted by hand on a dead node (no out-of-service taint): the volume
/// moves only through the force-detach timeout, and only when it is enabled.
async fn force_deleted_pod_on_dead_node(force_detach: bool) {
    let speed = if force_detach { 300.0 } else { 600.0 };
    let (store, sim) = cluster(SimConfig {
        speed,
        force_detach_after: force_detach.then_some(MAX_WAIT_FOR_UNMOUNT),
        ..SimConfig::default()
    })
    .await;
    let old_uid = get(&store, PODS, Some("default"), "db-0").unwrap()["metadata"]["uid"].clone();
    let old_va = vas_on(&store, "worker-1")[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    sim.set_kubelet("worker-1", false);
    wait_for("NotReady", sim_timeout(speed, 60.0), || {
        get(&store, NODES, None, "worker-1").filter(|n| {
            status_of(n, "Ready") == "Unknown" && has_taint(n, UNREACHABLE, "NoSchedule")
        })
    })
    .await;
    // `kubectl delete pod db-0 --force --grace-period=0`
    deletion::delete(
        &store,
        PODS,
        Some("default"),
        "db-0",
        &DeleteOptions::grace(0),
    )
    .unwrap();
    let deleted = Instant::now();
    wait_for(
        "Multi-Attach on the replacement",
        sim_timeout(speed, 30.0),
        || {
            sim.timeline()
                .into_iter()
                .find(|e| e.kind == SimEventKind::MultiAttachError)
        },
    )
    .await;
    if force_detach {
        wait_for(
            "replacement Running after the force detach",
            sim_timeout(speed, 400.0),
            || {
                get(&store, PODS, Some("default"), "db-0")
                    .filter(|p| p["metadata"]["uid"] != old_uid && running_ready(p))
            },
        )
        .await;
        assert!(
            deleted.elapsed() >= secs(speed, 360.0),
            "not before maxWaitForUnmountDuration"
        );
        assert!(get(&store, VOLUME_ATTACHMENTS, None, &old_va).is_none());
        let detach = sim
            .timeline()
            .into_iter()
            .find(|e| e.kind == SimEventKind::VolumeDetached)
            .unwrap();
        assert!(
            detach.message.contains("maxWaitForUnmountDuration"),
            "{detach}"
        );
    } else {
        holds("never force-detached", secs(speed, 600.0), || {
            get(&store, VOLUME_ATTACHMENTS, None, &old_va).is_some()
                && vas_on(&store, "worker-2").is_empty()
                && get(&store, PODS, Some("default"), "db-0").is_some_and(|p| !running_ready(&p))
        })
        .await;
    }
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_detach_after_timeout_when_enabled() {
    force_deleted_pod_on_dead_node(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_force_detach_when_disabled() {
    force_deleted_pod_on_dead_node(false).await;
}

/// A healthy node's pod deleted normally (node cordoned so it moves): the kubelet
/// finishes the deletion, unmounts, and the volume follows without any forcing. A
/// Multi-Attach refusal can appear for the few seconds until the kubelet reports the
/// unmount (as on real clusters), never longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_pod_moves_without_forcing() {
    let speed = 300.0;
    let (store, sim) = cluster(SimConfig {
        speed,
        ..SimConfig::default()
    })
    .await;
    let old_uid = get(&store, PODS, Some("default"), "db-0").unwrap()["metadata"]["uid"].clone();
    store
        .modify(NODES, None, "worker-1", |n| {
            n["spec"]["unschedulable"] = json!(true);
            Ok(())
        })
        .unwrap();
    deletion::delete(
        &store,
        PODS,
        Some("default"),
        "db-0",
        &DeleteOptions::default(),
    )
    .unwrap();
    let new = wait_for("moved and Running", sim_timeout(speed, 40.0), || {
        get(&store, PODS, Some("default"), "db-0")
            .filter(|p| p["metadata"]["uid"] != old_uid && running_ready(p))
    })
    .await;
    assert_eq!(new["spec"]["nodeName"], "worker-2");
    assert!(vas_on(&store, "worker-1").is_empty());
    let timeline = sim.timeline();
    assert_in_order(
        &timeline,
        &[
            (SimEventKind::VolumeUnmounted, Some("worker-1")),
            (SimEventKind::PodTerminated, Some("worker-1")),
            (SimEventKind::VolumeDetached, Some("worker-1")),
            (SimEventKind::VolumeAttached, Some("worker-2")),
            (SimEventKind::PodRunning, Some("worker-2")),
        ],
    );
    let detach = timeline
        .iter()
        .find(|e| e.kind == SimEventKind::VolumeDetached)
        .unwrap();
    assert!(detach.message.contains("kubelet unmounted"), "{detach}");
    for kind in [
        SimEventKind::NodeNotReady,
        SimEventKind::PodForceDeleted,
        SimEventKind::PodEvicted,
    ] {
        assert!(!timeline.iter().any(|e| e.kind == kind), "{kind:?}");
    }
    // Any Multi-Attach refusal was transient: resolved within one kubelet status
    // period (10s) plus the detach.
    if let Some(ma) = timeline
        .iter()
        .find(|e| e.kind == SimEventKind::MultiAttachError)
    {
        let attached = timeline
            .iter()
            .find(|e| {
                e.kind == SimEventKind::VolumeAttached && e.node.as_deref() == Some("worker-2")
            })
            .unwrap();
        let took = attached.at.duration_since(ma.at).unwrap();
        assert!(took <= secs(speed, 15.0), "Multi-Attach lasted {took:?}");
    }
    sim.shutdown().await;
}

/// A kubelet whose status loop runs `status_after_lease` after its Lease renewals
/// reports a new pod's volume in `volumesInUse` at that phase of its renewal cycle,
/// not together with a renewal: the wait a replacement pod sees for its mount depends
/// on it (the recovery bench sweeps it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_loop_runs_its_offset_after_the_lease() {
    let speed = 5.0;
    let offset = 4.0;
    let store = Store::default();
    let sim = Simulation::start(
        store.clone(),
        SimConfig {
            speed,
            ..SimConfig::default()
        },
    );
    sim.add_node(NodeSpec::new("cp-1").control_plane(true));
    sim.add_node(NodeSpec::new("worker-1"));
    sim.add_node(NodeSpec::new("worker-2").status_after_lease(Duration::from_secs_f64(offset)));
    store
        .modify(NODES, None, "worker-1", |n| {
            n["spec"]["unschedulable"] = json!(true);
            Ok(())
        })
        .unwrap();
    let renewal = |s: &Store| {
        get(s, LEASES, Some("kube-node-lease"), "worker-2").unwrap()["spec"]["renewTime"].clone()
    };
    // Watch worker-2's renewals for one, then create the workload and see when its
    // volume shows up in worker-2's status.
    let mut last = renewal(&store);
    let mut renewed_at = None;
    let mut created = false;
    let deadline = Instant::now() + sim_timeout(speed, 40.0);
    let since_renewal = loop {
        assert!(Instant::now() < deadline, "no volumesInUse on worker-2");
        let now = renewal(&store);
        if now != last {
            last = now;
            renewed_at = Some(Instant::now());
            if !created {
                sim.add_stateful_workload(WorkloadSpec::new("default", "db").replicas(1));
                created = true;
            }
        }
        let in_use = get(&store, NODES, None, "worker-2")
            .and_then(|n| n["status"]["volumesInUse"].as_array().map(Vec::len))
            .unwrap_or(0);
        if in_use > 0 {
            break renewed_at.unwrap().elapsed().as_secs_f64() * speed;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(
        (since_renewal - offset).abs() <= 1.0,
        "volumesInUse posted {since_renewal:.1}s (simulated) after a Lease renewal; expected {offset}s"
    );
    sim.shutdown().await;
}

/// All nodes of the (single) zone down: the node lifecycle controller enters
/// "master disruption mode" and adds no NoExecute taint, so nothing is evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_zone_down_is_not_evicted() {
    let speed = 300.0;
    let store = Store::default();
    let sim = Simulation::start(
        store.clone(),
        SimConfig {
            speed,
            ..SimConfig::default()
        },
    );
    sim.add_node(NodeSpec::new("only-1"));
    sim.add_stateful_workload(WorkloadSpec::new("default", "db"));
    wait_for("db-0 Running", sim_timeout(speed, 60.0), || {
        get(&store, PODS, Some("default"), "db-0").filter(running_ready)
    })
    .await;
    sim.set_kubelet("only-1", false);
    wait_for("NotReady + NoSchedule", sim_timeout(speed, 60.0), || {
        get(&store, NODES, None, "only-1").filter(|n| has_taint(n, UNREACHABLE, "NoSchedule"))
    })
    .await;
    holds(
        "no NoExecute taint, no eviction",
        secs(speed, 400.0),
        || {
            let n = get(&store, NODES, None, "only-1").unwrap();
            !has_taint(&n, UNREACHABLE, "NoExecute")
                && get(&store, PODS, Some("default"), "db-0")
                    .is_some_and(|p| p["metadata"]["deletionTimestamp"].is_null())
        },
    )
    .await;
    sim.shutdown().await;
}

/// nodefence's "delete the Node and its VolumeAttachments" in one go: the volume is
/// released and the replacement runs on the surviving node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_and_volume_attachments_deleted_together() {
    let speed = 300.0;
    let (store, sim) = cluster(SimConfig {
        speed,
        ..SimConfig::default()
    })
    .await;
    let old_uid = get(&store, PODS, Some("default"), "db-0").unwrap()["metadata"]["uid"].clone();
    sim.set_kubelet("worker-1", false);
    wait_for("NotReady", sim_timeout(speed, 60.0), || {
        get(&store, NODES, None, "worker-1").filter(|n| status_of(n, "Ready") == "Unknown")
    })
    .await;
    deletion::delete(&store, NODES, None, "worker-1", &DeleteOptions::default()).unwrap();
    for va in vas_on(&store, "worker-1") {
        let name = va["metadata"]["name"].as_str().unwrap();
        deletion::delete(
            &store,
            VOLUME_ATTACHMENTS,
            None,
            name,
            &DeleteOptions::default(),
        )
        .unwrap();
    }
    let new = wait_for("replacement Running", sim_timeout(speed, 400.0), || {
        get(&store, PODS, Some("default"), "db-0")
            .filter(|p| p["metadata"]["uid"] != old_uid && running_ready(p))
    })
    .await;
    assert_eq!(new["spec"]["nodeName"], "worker-2");
    // If the attach/detach controller noticed the deleted attachment before PodGC
    // removed the orphan, it tried to re-attach to the deleted node (as the real one
    // does); that attachment never succeeds.
    for va in vas_on(&store, "worker-1") {
        assert_ne!(va["status"]["attached"], true);
    }
    sim.shutdown().await;
}

/// nodefence usually fences long before the pods' 300s toleration: the
/// out-of-service taint is tolerated by nothing, so the taint eviction controller
/// deletes the pod at once and PodGC then force-deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_service_before_the_toleration_expires() {
    let speed = 300.0;
    let (store, sim) = cluster(SimConfig {
        speed,
        ..SimConfig::default()
    })
    .await;
    let old_uid = get(&store, PODS, Some("default"), "db-0").unwrap()["metadata"]["uid"].clone();
    sim.set_kubelet("worker-1", false);
    wait_for("NotReady", sim_timeout(speed, 60.0), || {
        get(&store, NODES, None, "worker-1").filter(|n| status_of(n, "Ready") == "Unknown")
    })
    .await;
    let fenced = Instant::now();
    add_oos_taint(&store, "worker-1");
    let new = wait_for("replacement Running", sim_timeout(speed, 60.0), || {
        get(&store, PODS, Some("default"), "db-0")
            .filter(|p| p["metadata"]["uid"] != old_uid && running_ready(p))
    })
    .await;
    assert_eq!(new["spec"]["nodeName"], "worker-2");
    assert!(
        fenced.elapsed() < secs(speed, 120.0),
        "recovered well within the 300s toleration: {:?}",
        fenced.elapsed()
    );
    assert!(
        events(&store, "TaintManagerEviction")
            .iter()
            .any(|e| e["message"] == "Marking for deletion Pod default/db-0")
    );
    assert_in_order(
        &sim.timeline(),
        &[
            (SimEventKind::PodEvicted, Some("worker-1")),
            (SimEventKind::PodForceDeleted, Some("worker-1")),
            (SimEventKind::PodRunning, Some("worker-2")),
        ],
    );
    sim.shutdown().await;
}
