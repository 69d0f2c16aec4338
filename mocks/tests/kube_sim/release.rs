//! The two ways out for a dead node's volume: the out-of-service taint, and deleting
//! the Node (then, or together with, its VolumeAttachments).

use super::*;

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
            (SimEventKind::VolumeDetached, Some("worker-1")),
            (SimEventKind::VolumeAttached, Some("worker-2")),
            (SimEventKind::PodRunning, Some("worker-2")),
        ],
    );
    // The replacement's creation and scheduling race the detach (two controllers,
    // in no set order), but it attaches only after it.
    assert_in_order(
        &timeline,
        &[
            (SimEventKind::PodForceDeleted, Some("worker-1")),
            (SimEventKind::PodCreated, None),
            (SimEventKind::PodScheduled, Some("worker-2")),
            (SimEventKind::VolumeAttached, Some("worker-2")),
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
