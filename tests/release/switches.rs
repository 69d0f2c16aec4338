//! The records and switches around the writes: release records and leadership, the
//! pause switch read again before each command, and the opt-out at the power-off's
//! write-ahead record.

use super::*;

#[tokio::test]
async fn release_records_round_trip_and_need_leadership() {
    let (kube, client) = setup().await;
    let store = RecordStore::new(client.clone(), "kube-system", Leadership::always());
    assert!(store.load().await.unwrap().is_empty(), "no ConfigMap yet");
    let record = ReleaseRecord {
        released_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        mode: ReleaseMode::DeleteNode,
        power_on_pending: true,
        identity: NodeIdentity {
            system_uuid: Some("4c4c4544-0042-3510-8056-b4c04f4d5331".into()),
            provider_id: Some("metal://rack1/w1".into()),
        },
        rests_on: None,
    };
    store.put("w1", Some(&record)).await.unwrap();
    store.put("w2", Some(&record)).await.unwrap();
    let loaded = store.load().await.unwrap();
    assert_eq!(loaded.get("w1"), Some(&record));
    assert_eq!(loaded.len(), 2, "one key per node, none clobbered");
    store.put("w1", None).await.unwrap();
    let loaded = store.load().await.unwrap();
    assert!(!loaded.contains_key("w1"));
    assert!(loaded.contains_key("w2"));
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let (_never_run, not_leader) =
        LeaderElector::new(leases, "nodefence", "me", LeaderTimings::default());
    let follower = RecordStore::new(client.clone(), "kube-system", not_leader);
    assert!(follower.put("w3", Some(&record)).await.is_err());
    assert!(!store.load().await.unwrap().contains_key("w3"));
    kube.shutdown().await;
}

/// The executor's last look at the pause switch before a power command or a release:
/// a switch the watch has not delivered yet is read from the API server, the watch's
/// own view refuses without asking, and a switch that cannot be read refuses too.
#[tokio::test]
async fn the_pause_switch_is_read_again_before_each_command_and_an_unreadable_one_refuses() {
    use nodefence::cluster::pause::{self, PauseCheck};
    let (kube, client) = setup().await;
    let check = PauseCheck::new(client.clone(), "kube-system");
    // No switch at all: fencing is active.
    check.allows("power-off not sent").await.unwrap();

    // An operator pauses; the controller's watch has not shown it yet.
    pause::set(
        client.clone(),
        "kube-system",
        true,
        Some("BMC firmware update"),
        "alice",
    )
    .await
    .unwrap();
    assert!(!check.seen_paused());
    let why = check.allows("power-off not sent").await.unwrap_err();
    assert!(why.starts_with("fencing is PAUSED since "), "{why}");
    assert!(why.contains("by alice: BMC firmware update"), "{why}");
    assert!(why.ends_with(": power-off not sent"), "{why}");
    // What was read is kept until the watch says otherwise.
    assert!(check.seen_paused());

    // Resumed, and the watch shows it: allowed again.
    pause::set(client.clone(), "kube-system", false, None, "alice")
        .await
        .unwrap();
    check.saw(false);
    check.allows("nothing released").await.unwrap();

    // The watch shows a pause the API server no longer has (or not yet): refused.
    check.saw(true);
    let why = check.allows("nothing released").await.unwrap_err();
    assert_eq!(why, "fencing is paused cluster-wide: nothing released");

    // The API server cannot be reached: nothing is sent on a switch nobody can read.
    check.saw(false);
    kube.shutdown().await;
    let why = check.allows("power-off not sent").await.unwrap_err();
    assert!(
        why.starts_with("the pause switch (ConfigMap nodefence-pause) could not be read"),
        "{why}"
    );
    assert!(why.ends_with("power-off not sent"), "{why}");
}

/// The write-ahead record of a power-off reads the Node back from the API server:
/// a Node an operator has opted out gets no power-off, even when the controller's
/// watch has not shown the opt-out yet (seed 6386).
#[tokio::test]
async fn a_power_off_is_refused_for_a_node_opted_out_since_the_decision() {
    let (kube, client) = setup().await;
    dead_node(&client, "w1", died()).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let boot = json!({"status": {"nodeInfo": {"bootID": "3f1c-boot-1"}}});
    nodes
        .patch_status("w1", &PatchParams::default(), &Patch::Merge(&boot))
        .await
        .unwrap();
    let releaser = Releaser::new(client.clone(), Leadership::always());
    releaser.record_power_off("w1", 1).await.unwrap();
    let recorded = |n: &Node| {
        n.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(nodefence::cluster::facts::POWER_OFF_ANNOTATION))
            .cloned()
    };
    let first = recorded(&nodes.get("w1").await.unwrap()).expect("the first record is written");
    // It names the boot it went to: a sign of life from that boot after it is the
    // machine still going down (seed 5340).
    assert!(first.ends_with("attempt 1 boot 3f1c-boot-1"), "{first}");
    let facts = nodefence::cluster::facts::node_facts(&nodes.get("w1").await.unwrap(), None, true);
    assert!(facts.power_off_this_boot && facts.power_off_recorded.is_some_and(|(_, a)| a == 1));

    let optout = json!({"metadata": {"annotations": {"nodefence.io/exclude": " True "}}});
    nodes
        .patch("w1", &PatchParams::default(), &Patch::Merge(&optout))
        .await
        .unwrap();
    match releaser.record_power_off("w1", 2).await {
        Err(ReleaseError::Refused(why)) => assert!(
            why.contains("w1 is opted out (nodefence.io/exclude"),
            "{why}"
        ),
        other => panic!("a power-off for an opted-out node must be refused: {other:?}"),
    }
    // The opt-out itself is untouched.
    let now = nodes.get("w1").await.unwrap();
    assert!(nodefence::cluster::facts::opted_out(&now));
    kube.shutdown().await;
}

/// The executor's last look at the remediation requests before a power command: a
/// request NodeHealthCheck timed out that the controller's watch has not shown yet
/// (seed 1219) is read from the API server and refuses the command, for its node
/// only; a request being deleted no longer stands; no CRD means no request.
#[tokio::test]
async fn a_timed_out_request_the_watch_has_not_shown_refuses_the_power_command() {
    use kube::CustomResourceExt;
    use nodefence::remediation::gate::TimedOutRequests;
    use nodefence::remediation::{NodeFenceRemediation, TIMED_OUT_ANNOTATION};
    let (kube, client) = setup().await;
    let gate = TimedOutRequests::new(client.clone());
    gate.allows("worker-1", "power-on not sent")
        .await
        .expect("no CRD installed: no request can stand");
    nodefence_mocks::remediation::install_crds(&client, [NodeFenceRemediation::crd()])
        .await
        .unwrap();
    let requests: Api<NodeFenceRemediation> = Api::namespaced(client.clone(), "kube-system");
    let request: NodeFenceRemediation = serde_json::from_value(json!({
        "apiVersion": "remediation.nodefence.io/v1alpha1",
        "kind": "NodeFenceRemediation",
        "metadata": {"name": "worker-1", "namespace": "kube-system"},
        "spec": {},
    }))
    .unwrap();
    requests
        .create(&PostParams::default(), &request)
        .await
        .unwrap();
    gate.allows("worker-1", "power-on not sent")
        .await
        .expect("a request that has not timed out leaves power to nodefence");

    // NodeHealthCheck gives up on nodefence and moves on to the next remediator.
    let timed_out =
        json!({"metadata": {"annotations": {TIMED_OUT_ANNOTATION: "2026-11-28T10:00:00Z"}}});
    requests
        .patch(
            "worker-1",
            &PatchParams::default(),
            &Patch::Merge(&timed_out),
        )
        .await
        .unwrap();
    let why = gate
        .allows("worker-1", "power-on not sent")
        .await
        .unwrap_err();
    assert_eq!(
        why,
        "NodeFenceRemediation kube-system/worker-1 timed out (remediation.medik8s.io/nhc-timed-out): its requester moved on to another remediator: power-on not sent"
    );
    gate.allows("worker-2", "power-off not sent")
        .await
        .expect("another node's request does not stop this node's power");

    // NodeHealthCheck deletes it (the node is healthy again): it no longer stands.
    let finalizer = json!({"metadata": {"finalizers": ["example.com/keep"]}});
    requests
        .patch(
            "worker-1",
            &PatchParams::default(),
            &Patch::Merge(&finalizer),
        )
        .await
        .unwrap();
    requests
        .delete("worker-1", &Default::default())
        .await
        .unwrap();
    gate.allows("worker-1", "power-on not sent")
        .await
        .expect("a request being deleted no longer stands");
    kube.shutdown().await;
}
