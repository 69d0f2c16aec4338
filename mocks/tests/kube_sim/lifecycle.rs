//! Kubelets and the node lifecycle: Lease heartbeats, the grace period and recovery,
//! the status loop's phase, a whole zone down, and a healthy pod that moves unforced.

use super::*;

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

    // Power loss: renewals stop. The grace period counts from the stop itself (taken
    // before it, so a slow test thread never makes the node look early).
    let stopped = Instant::now();
    sim.set_kubelet("worker-1", false);
    assert_eq!(sim.kubelet_running("worker-1"), Some(false));
    tokio::time::sleep(Duration::from_millis(5)).await;
    let last = renew(&store);
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

    // The simulation notes the taint on its node controller's next pass, not when it
    // is written: the kubelet comes back only once it has (under load, that pass came
    // after the restart and the timeline's order below was not the story's).
    wait_for(
        "the out-of-service taint observed",
        sim_timeout(speed, 15.0),
        || {
            sim.timeline()
                .iter()
                .any(|e| {
                    e.kind == SimEventKind::OutOfServiceTaintAdded
                        && e.node.as_deref() == Some("worker-1")
                })
                .then_some(())
        },
    )
    .await;

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
    // The kubelet writes its Rebooted event just after the status that says Ready.
    wait_for("the Rebooted event", sim_timeout(speed, 15.0), || {
        (!events(&store, "Rebooted").is_empty()).then_some(())
    })
    .await;
    assert!(
        events(&store, "NodeNotReady")
            .iter()
            .any(|e| e["message"] == "Node worker-1 status is now: NodeNotReady")
    );
    wait_in_order(
        &sim,
        &[
            (SimEventKind::KubeletStopped, Some("worker-1")),
            (SimEventKind::NodeNotReady, Some("worker-1")),
            (SimEventKind::NodeTainted, Some("worker-1")),
            (SimEventKind::OutOfServiceTaintAdded, Some("worker-1")),
            (SimEventKind::KubeletStarted, Some("worker-1")),
            (SimEventKind::NodeReady, Some("worker-1")),
            (SimEventKind::NodeUntainted, Some("worker-1")),
        ],
        sim_timeout(speed, 15.0),
    )
    .await;
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
    // period (10s) plus the detach, and a scheduling allowance: the simulation's
    // timers run on the wall clock, 300 times faster, and a loaded machine delays
    // each by milliseconds (a CI run beside a long simulation: 50.25 ms against the
    // 50 of 15 s). The six-minute force detach would take 1.2 s.
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
        assert!(
            took <= secs(speed, 15.0) + Duration::from_millis(400),
            "Multi-Attach lasted {took:?}"
        );
    }
    sim.shutdown().await;
}
