//! A pod force-deleted by hand on a dead node: the volume moves only through the
//! attach-detach controller's force-detach timeout, and only when it is enabled.

use super::*;

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
