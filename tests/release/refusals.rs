//! What the releaser refuses, leaving the Node as it was: a node alive again, a
//! Lease renewed since the proof (on any clock), a replaced Node, an old proof, a
//! follower, a proof from another machine; and the byte-swapped UUID it accepts.

use super::*;

#[tokio::test]
async fn a_node_ready_again_is_refused_and_untouched() {
    let (kube, client) = setup().await;
    let died = died();
    let node = dead_node(&client, "w1", died).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let back = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
        "lastHeartbeatTime": rfc3339(SystemTime::now()), "lastTransitionTime": rfc3339(SystemTime::now())}]}});
    nodes
        .patch_status("w1", &PatchParams::default(), &Patch::Merge(&back))
        .await
        .unwrap();
    let before = nodes.get("w1").await.unwrap();
    let releaser = Releaser::new(client.clone(), Leadership::always());
    assert_refused(
        releaser
            .taint("w1", &uid(&node), &proof(died + Duration::from_secs(50)))
            .await,
        "sign of life",
    )
    .await;
    assert_eq!(
        nodes.get("w1").await.unwrap().metadata.resource_version,
        before.metadata.resource_version
    );
    kube.shutdown().await;
}

/// A kubelet whose clock runs behind: its renewal's renewTime is older than the last
/// sign of life, yet it is a renewal all the same, and readings older than when
/// nodefence saw the previous one prove nothing.
#[tokio::test]
async fn a_renewal_from_a_clock_behind_and_readings_before_the_seen_renewal_are_refused() {
    let (kube, client) = setup().await;
    let died = died();
    let node = dead_node(&client, "w1", died).await;
    let sign = died + Duration::from_secs(50);
    let releaser = Releaser::new(client.clone(), Leadership::always());
    let renewed_at_death = proof(sign);
    let seen_late = OffProof {
        // nodefence saw the renewal after the first reading was taken: the kubelet's
        // clock wrote it more than 110 s behind.
        readings_after: sign + Duration::from_secs(61),
        ..renewed_at_death.clone()
    };
    assert_refused(
        releaser.taint("w1", &uid(&node), &seen_late).await,
        "older than",
    )
    .await;

    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let renew_time = |lease: Lease| {
        lease
            .spec
            .and_then(|s| s.renew_time)
            .map(|t| SystemTime::from(t.0))
    };
    let seen = renew_time(leases.get("w1").await.unwrap());
    let behind = json!({"spec": {"renewTime": rfc3339(died + Duration::from_secs(10))}});
    leases
        .patch("w1", &PatchParams::default(), &Patch::Merge(&behind))
        .await
        .unwrap();
    let renewed_since = OffProof {
        lease_renewed: seen,
        ..renewed_at_death.clone()
    };
    assert_refused(
        releaser.taint("w1", &uid(&node), &renewed_since).await,
        "renewed its Lease",
    )
    .await;
    assert_eq!(
        taint_keys(&Api::<Node>::all(client.clone()).get("w1").await.unwrap()).len(),
        1,
        "nothing released"
    );
    // The renewal the proof already knew of is no contradiction.
    let known = OffProof {
        lease_renewed: renew_time(leases.get("w1").await.unwrap()),
        ..renewed_at_death
    };
    assert_eq!(
        releaser.taint("w1", &uid(&node), &known).await.unwrap(),
        Released::Tainted
    );
    kube.shutdown().await;
}

#[tokio::test]
async fn a_lease_renewed_after_the_proof_began_is_refused() {
    let (kube, client) = setup().await;
    let died = died();
    let node = dead_node(&client, "w1", died).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let renew = json!({"spec": {"renewTime": rfc3339(SystemTime::now())}});
    leases
        .patch("w1", &PatchParams::default(), &Patch::Merge(&renew))
        .await
        .unwrap();
    let releaser = Releaser::new(client.clone(), Leadership::always());
    assert_refused(
        releaser
            .taint("w1", &uid(&node), &proof(died + Duration::from_secs(50)))
            .await,
        "renewed its Lease",
    )
    .await;
    assert_eq!(
        taint_keys(&Api::<Node>::all(client.clone()).get("w1").await.unwrap()).len(),
        1
    );
    kube.shutdown().await;
}

#[tokio::test]
async fn a_replaced_node_an_old_proof_and_a_non_leader_are_refused() {
    let (kube, client) = setup().await;
    let died = died();
    let node = dead_node(&client, "w1", died).await;
    let sign = died + Duration::from_secs(50);
    let releaser = Releaser::new(client.clone(), Leadership::always());
    assert_refused(
        releaser.taint("w1", "another-uid", &proof(sign)).await,
        "uid changed",
    )
    .await;

    let stale = OffProof {
        readings: vec![sign - Duration::from_secs(1), sign + Duration::from_secs(1)],
        ..proof(sign)
    };
    assert_refused(
        releaser.taint("w1", &uid(&node), &stale).await,
        "older than",
    )
    .await;

    // Readings newer than the failure but older than the proof may be: the machine
    // may have been switched on since.
    // (Its newest reading was taken about 8 s ago.)
    let aged = OffProof {
        max_age: Duration::from_secs(2),
        ..proof(sign)
    };
    assert_refused(
        releaser.taint("w1", &uid(&node), &aged).await,
        "the machine is read again first",
    )
    .await;

    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let (_never_run, follower) =
        LeaderElector::new(leases, "nodefence", "me", LeaderTimings::default());
    let follower = Releaser::new(client.clone(), follower);
    assert_refused(
        follower.taint("w1", &uid(&node), &proof(sign)).await,
        "not the leader",
    )
    .await;
    assert_refused(
        follower.delete("w1", &uid(&node), &proof(sign), true).await,
        "not the leader",
    )
    .await;
    assert!(
        Api::<Node>::all(client.clone())
            .get_opt("w1")
            .await
            .unwrap()
            .is_some()
    );
    kube.shutdown().await;
}

#[tokio::test]
async fn a_proof_from_another_machine_is_refused_whatever_it_says() {
    let (kube, client) = setup().await;
    let died = died();
    let node = dead_node(&client, "w1", died).await;
    let releaser = Releaser::new(client.clone(), Leadership::always());
    let sign = died + Duration::from_secs(50);
    // The inventory pointed w1 at w2's BMC.
    let mut wrong = proof_from(sign, Some(MachineIdentity::Uuid(uuid_of("w2"))));
    assert_refused(
        releaser.taint("w1", &uid(&node), &wrong).await,
        "not proven to control this node's machine",
    )
    .await;
    wrong.require_identity = false;
    assert_refused(
        releaser.taint("w1", &uid(&node), &wrong).await,
        "not proven",
    )
    .await;
    // Unknown identity: refused unless the policy accepts it.
    let mut unknown = proof_from(sign, None);
    assert_refused(
        releaser.taint("w1", &uid(&node), &unknown).await,
        "not proven",
    )
    .await;
    assert_eq!(
        node_now(&client, "w1").await.metadata.resource_version,
        node.metadata.resource_version,
        "nothing written"
    );
    unknown.require_identity = false;
    releaser
        .taint("w1", &uid(&node), &unknown)
        .await
        .expect("require_identity = false accepts an unprovable source");
    kube.shutdown().await;
}

#[tokio::test]
async fn a_byte_swapped_uuid_from_the_bmc_is_accepted() {
    let (kube, client) = setup().await;
    let died = died();
    let node = dead_node(&client, "w1", died).await;
    let own = uuid::Uuid::parse_str(&uuid_of("w1")).unwrap();
    let swapped = uuid::Uuid::from_bytes_le(*own.as_bytes()).to_string();
    let releaser = Releaser::new(client.clone(), Leadership::always());
    let p = proof_from(
        died + Duration::from_secs(50),
        Some(MachineIdentity::Uuid(swapped)),
    );
    releaser.taint("w1", &uid(&node), &p).await.unwrap();
    kube.shutdown().await;
}
