//! What a release writes and keeps: the taint beside the administrator's, a Node
//! deletion with only its own VolumeAttachments, the untaint, the forced deletion of
//! the node's pods, and nothing at all after a refusal.

use super::*;

#[tokio::test]
async fn taint_adds_ours_and_keeps_the_administrators() {
    let (kube, client) = setup().await;
    let died = died();
    let node = dead_node(&client, "w1", died).await;
    let releaser = Releaser::new(client.clone(), Leadership::always());
    let sign = died + Duration::from_secs(50);
    assert_eq!(
        releaser
            .taint("w1", &uid(&node), &proof(sign))
            .await
            .unwrap(),
        Released::Tainted
    );
    let after = Api::<Node>::all(client.clone()).get("w1").await.unwrap();
    assert_eq!(
        taint_keys(&after),
        vec![
            "example.com/maintenance=x:NoSchedule".to_string(),
            "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute".to_string()
        ]
    );
    assert!(
        after
            .metadata
            .annotations
            .unwrap()
            .contains_key("nodefence.io/out-of-service-added")
    );
    kube.shutdown().await;
}

#[tokio::test]
async fn delete_node_removes_the_node_and_only_its_attachments() {
    let (kube, client) = setup().await;
    let died = died();
    let node = dead_node(&client, "w1", died).await;
    let vas: Api<VolumeAttachment> = Api::all(client.clone());
    for (name, on) in [("va-w1", "w1"), ("va-w2", "w2")] {
        let va: VolumeAttachment = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"attacher": "csi.fake", "nodeName": on, "source": {"persistentVolumeName": format!("pv-{on}")}},
        }))
        .unwrap();
        vas.create(&PostParams::default(), &va).await.unwrap();
    }
    let releaser = Releaser::new(client.clone(), Leadership::always());
    let done = releaser
        .delete(
            "w1",
            &uid(&node),
            &proof(died + Duration::from_secs(50)),
            true,
        )
        .await
        .unwrap();
    assert_eq!(
        done,
        Released::Deleted {
            volume_attachments: 1
        }
    );
    assert!(
        Api::<Node>::all(client.clone())
            .get_opt("w1")
            .await
            .unwrap()
            .is_none()
    );
    assert!(vas.get_opt("va-w1").await.unwrap().is_none());
    assert!(
        vas.get_opt("va-w2").await.unwrap().is_some(),
        "another node's attachment stays"
    );
    kube.shutdown().await;
}

#[tokio::test]
async fn untaint_removes_only_a_taint_nodefence_added() {
    let (kube, client) = setup().await;
    let died = died();
    let node = dead_node(&client, "w1", died).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let releaser = Releaser::new(client.clone(), Leadership::always());
    releaser
        .taint("w1", &uid(&node), &proof(died + Duration::from_secs(50)))
        .await
        .unwrap();
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
        "lastHeartbeatTime": rfc3339(SystemTime::now()), "lastTransitionTime": rfc3339(SystemTime::now())}]}});
    nodes
        .patch_status("w1", &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .unwrap();
    assert!(releaser.untaint("w1").await.unwrap());
    let after = nodes.get("w1").await.unwrap();
    assert_eq!(
        taint_keys(&after),
        vec!["example.com/maintenance=x:NoSchedule".to_string()]
    );
    let annotations = after.metadata.annotations.clone().unwrap_or_default();
    assert!(!annotations.contains_key("nodefence.io/out-of-service-added"));
    // The release that ended is recorded: a request made during it that no replica
    // saw then is served by it (simulation seed 7104).
    let (added, ended) = annotations
        .get("nodefence.io/last-release")
        .and_then(|v| nodefence::cluster::facts::parse_last_release(v))
        .expect("the last release recorded");
    assert!(added.is_some_and(|a| a <= ended));
    assert!(ended <= SystemTime::now() && ended + Duration::from_secs(60) > SystemTime::now());
    assert_eq!(
        nodefence::cluster::facts::node_facts(&after, None, true).last_release_ended,
        Some(ended)
    );

    // An administrator's out-of-service taint (no annotation) is never removed.
    let admin = json!({"spec": {"taints": [{"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}]}});
    nodes
        .patch("w1", &PatchParams::default(), &Patch::Merge(&admin))
        .await
        .unwrap();
    assert!(!releaser.untaint("w1").await.unwrap());
    assert_eq!(taint_keys(&nodes.get("w1").await.unwrap()).len(), 1);
    kube.shutdown().await;
}

#[tokio::test]
async fn the_fast_path_plan_taints_and_force_deletes_only_that_nodes_pods() {
    let (kube, client) = setup().await;
    let died = died();
    let node = dead_node(&client, "w1", died).await;
    pod(&client, "db-0", "w1", false).await;
    pod(&client, "web-1", "w1", false).await;
    pod(&client, "kube-proxy-w1", "w1", true).await;
    pod(&client, "db-1", "w2", false).await;
    attachment(&client, "va-w1", "w1").await;
    let releaser = Releaser::new(client.clone(), Leadership::always());
    assert!(!releaser.drained("w1").await.unwrap(), "pods still bound");
    let plan = taint_plan(true, false);
    let done = releaser
        .release(
            "w1",
            &uid(&node),
            &proof(died + Duration::from_secs(50)),
            &plan,
        )
        .await
        .unwrap();
    assert_eq!(done.released, Released::Tainted);
    assert_eq!(done.pods_deleted, 2);
    assert_eq!(done.volume_attachments_deleted, 0);
    assert_eq!(
        pod_names(&client).await,
        vec!["db-1".to_string(), "kube-proxy-w1".to_string()],
        "another node's pod and the mirror pod stay"
    );
    assert!(
        Api::<VolumeAttachment>::all(client.clone())
            .get_opt("va-w1")
            .await
            .unwrap()
            .is_some(),
        "the attach/detach controller detaches; the plan did not ask"
    );
    assert!(
        !releaser.drained("w1").await.unwrap(),
        "a VolumeAttachment remains"
    );
    kube.shutdown().await;
}

#[tokio::test]
async fn the_forced_deletion_fallback_removes_pods_and_attachments_after_the_taint() {
    let (kube, client) = setup().await;
    let died = died();
    let node = dead_node(&client, "w1", died).await;
    pod(&client, "db-0", "w1", false).await;
    attachment(&client, "va-w1", "w1").await;
    attachment(&client, "va-w2", "w2").await;
    let releaser = Releaser::new(client.clone(), Leadership::always());
    let plan = taint_plan(true, true);
    let done = releaser
        .release(
            "w1",
            &uid(&node),
            &proof(died + Duration::from_secs(50)),
            &plan,
        )
        .await
        .unwrap();
    assert_eq!((done.pods_deleted, done.volume_attachments_deleted), (1, 1));
    assert!(releaser.drained("w1").await.unwrap());
    assert!(
        !releaser.drained("w2").await.unwrap(),
        "w2 keeps its attachment"
    );
    kube.shutdown().await;
}

#[tokio::test]
async fn a_refused_release_deletes_no_pod() {
    let (kube, client) = setup().await;
    let died = died();
    let node = dead_node(&client, "w1", died).await;
    pod(&client, "db-0", "w1", false).await;
    attachment(&client, "va-w1", "w1").await;
    let releaser = Releaser::new(client.clone(), Leadership::always());
    let plan = taint_plan(true, true);
    // Off readings older than the last sign of life: refused before anything.
    let stale = OffProof {
        readings: vec![died],
        ..proof(died + Duration::from_secs(50))
    };
    assert!(matches!(
        releaser.release("w1", &uid(&node), &stale, &plan).await,
        Err(ReleaseError::Refused(_))
    ));
    let wrong_machine = proof_from(
        died + Duration::from_secs(50),
        Some(MachineIdentity::Uuid(uuid_of("w2"))),
    );
    assert!(matches!(
        releaser
            .release("w1", &uid(&node), &wrong_machine, &plan)
            .await,
        Err(ReleaseError::Refused(_))
    ));
    assert_eq!(pod_names(&client).await, vec!["db-0".to_string()]);
    assert!(!releaser.drained("w1").await.unwrap());
    kube.shutdown().await;
}

/// The check on return, where it writes: the taint carries the boot it ended; a
/// Node back with that boot keeps it whatever asks (a contradicted release), one back
/// with another boot loses it, and an operator's check lets a contradicted one back,
/// every record of the release removed with the taint.
#[tokio::test]
async fn a_taint_is_removed_only_from_a_node_back_with_another_boot_or_checked() {
    use nodefence::cluster::facts::{
        PROOF_CHECKED_ANNOTATION, PROOF_CONTRADICTED_ANNOTATION, RELEASED_BOOT_ANNOTATION,
    };
    let (kube, client) = setup().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let releaser = Releaser::new(client.clone(), Leadership::always());
    let back = |boot: &str| {
        json!({"status": {"nodeInfo": {"bootID": boot}, "conditions": [{"type": "Ready", "status": "True",
            "lastHeartbeatTime": rfc3339(SystemTime::now()), "lastTransitionTime": rfc3339(SystemTime::now())}]}})
    };
    let annotations = |n: &Node| n.metadata.annotations.clone().unwrap_or_default();
    for (name, returns_with, checked) in [
        ("w1", "boot-1", false),
        ("w2", "boot-2", false),
        ("w3", "boot-1", true),
    ] {
        let died = died();
        dead_node(&client, name, died).await;
        nodes
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"nodeInfo": {"bootID": "boot-1"}}})),
            )
            .await
            .unwrap();
        let node = nodes.get(name).await.unwrap();
        let sign = died + Duration::from_secs(50);
        let machine = Some(nodefence::identity::MachineIdentity::Uuid(uuid_of(name)));
        releaser
            .taint(name, &uid(&node), &proof_from(sign, machine))
            .await
            .unwrap();
        let ended = annotations(&nodes.get(name).await.unwrap())
            .get(RELEASED_BOOT_ANNOTATION)
            .and_then(|v| nodefence::engine::returned::EndedBoot::parse(v))
            .expect("the boot it ended is recorded with the taint");
        assert_eq!(ended.boot.as_deref(), Some("boot-1"));
        assert_eq!(ended.proof.label(), "off-readings");
        nodes
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&back(returns_with)),
            )
            .await
            .unwrap();
        let same_boot = returns_with == "boot-1";
        if same_boot {
            releaser
                .record_contradiction(name, "2026-12-02T15:00:00Z proof off-readings boot boot-1")
                .await
                .unwrap();
        }
        if checked {
            nodes
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"metadata": {"annotations": {PROOF_CHECKED_ANNOTATION: "alice: data checked"}}})),
                )
                .await
                .unwrap();
        }
        let result = releaser.untaint(name).await;
        let after = nodes.get(name).await.unwrap();
        if same_boot && !checked {
            let why = result.expect_err("refused").to_string();
            assert!(why.contains("contradicted"), "{why}");
            assert_eq!(taint_keys(&after).len(), 2, "the taint stays");
            assert!(annotations(&after).contains_key(PROOF_CONTRADICTED_ANNOTATION));
        } else {
            assert!(result.unwrap(), "{name}: removed");
            assert_eq!(
                taint_keys(&after),
                vec!["example.com/maintenance=x:NoSchedule".to_string()]
            );
            let left = annotations(&after);
            for key in [
                RELEASED_BOOT_ANNOTATION,
                PROOF_CONTRADICTED_ANNOTATION,
                PROOF_CHECKED_ANNOTATION,
            ] {
                assert!(!left.contains_key(key), "{name}: {key} left behind");
            }
        }
    }
    // Without the contradiction recorded, the boot alone refuses.
    let died = died();
    dead_node(&client, "w4", died).await;
    nodes
        .patch_status(
            "w4",
            &PatchParams::default(),
            &Patch::Merge(&back("boot-7")),
        )
        .await
        .unwrap();
    let stale = json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown",
        "lastHeartbeatTime": rfc3339(died), "lastTransitionTime": rfc3339(died + Duration::from_secs(50))}]}});
    nodes
        .patch_status("w4", &PatchParams::default(), &Patch::Merge(&stale))
        .await
        .unwrap();
    let node = nodes.get("w4").await.unwrap();
    let machine = Some(nodefence::identity::MachineIdentity::Uuid(uuid_of("w4")));
    releaser
        .taint(
            "w4",
            &uid(&node),
            &proof_from(died + Duration::from_secs(50), machine),
        )
        .await
        .unwrap();
    nodes
        .patch_status(
            "w4",
            &PatchParams::default(),
            &Patch::Merge(&back("boot-7")),
        )
        .await
        .unwrap();
    let why = releaser
        .untaint("w4")
        .await
        .expect_err("refused")
        .to_string();
    assert!(why.contains("boot-7"), "{why}");
    kube.shutdown().await;
}
