//! The release writes against the fake API server: what is written, what is kept,
//! and every refusal. Each refusal test asserts the Node is unchanged afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use nodefence::cluster::leader::{LeaderElector, LeaderTimings, Leadership};
use nodefence::cluster::records::RecordStore;
use nodefence::cluster::release::{ReleaseError, Released, Releaser};
use nodefence::engine::{OffProof, ReleaseMode, ReleasePlan, ReleaseRecord};
use nodefence::identity::{MachineIdentity, NodeIdentity};
use nodefence_mocks::kube::{FakeKube, FakeKubeHandle};
use serde_json::json;

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_micros(t).to_string()
}

async fn setup() -> (FakeKubeHandle, Client) {
    nodefence::tls::install_crypto_provider();
    let kube = FakeKube::builder().start().await.expect("fake-kube starts");
    let kubeconfig = Kubeconfig::from_yaml(&kube.kubeconfig_yaml()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = Client::try_from(config).unwrap();
    (kube, client)
}

/// A node whose kubelet died at `died`: Ready=Unknown since `died + 50s`, heartbeat and
/// Lease renewal at `died`, an administrator's taint already on it.
async fn dead_node(client: &Client, name: &str, died: SystemTime) -> Node {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": [{"key": "example.com/maintenance", "value": "x", "effect": "NoSchedule"}]},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let status = json!({"status": {"nodeInfo": {"systemUUID": uuid_of(name)}, "conditions": [{
        "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
        "lastHeartbeatTime": humantime::format_rfc3339_seconds(died).to_string(),
        "lastTransitionTime": humantime::format_rfc3339_seconds(died + Duration::from_secs(50)).to_string(),
    }]}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": rfc3339(died)},
    }))
    .unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    nodes.get(name).await.unwrap()
}

/// Each test node's SMBIOS UUID (what its kubelet reports and its BMC says).
fn uuid_of(node: &str) -> String {
    let n = node
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    format!("{n:08x}-1111-4222-8333-444455556666")
}

/// Three Off readings after the last sign of life, from w1's own machine.
fn proof(last_sign_of_life: SystemTime) -> OffProof {
    proof_from(
        last_sign_of_life,
        Some(MachineIdentity::Uuid(uuid_of("w1"))),
    )
}

fn proof_from(last_sign_of_life: SystemTime, machine: Option<MachineIdentity>) -> OffProof {
    let base = last_sign_of_life + Duration::from_secs(60);
    OffProof {
        last_sign_of_life,
        readings_after: last_sign_of_life,
        lease_renewed: None,
        readings: (0..3).map(|i| base + Duration::from_secs(i)).collect(),
        machine,
        require_identity: true,
        max_age: Duration::from_secs(600),
    }
}

fn uid(n: &Node) -> String {
    n.metadata.uid.clone().unwrap()
}

fn died() -> SystemTime {
    SystemTime::now() - Duration::from_secs(120)
}

fn taint_keys(n: &Node) -> Vec<String> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| format!("{}={}:{}", t.key, t.value.unwrap_or_default(), t.effect))
        .collect()
}

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

async fn assert_refused(result: Result<Released, ReleaseError>, words: &str) {
    match result {
        Err(ReleaseError::Refused(why)) => assert!(why.contains(words), "{why}"),
        other => panic!("expected a refusal mentioning {words:?}, got {other:?}"),
    }
}

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
    assert!(
        !after
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("nodefence.io/out-of-service-added")
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

/// The Node as it is now, for "unchanged" assertions.
async fn node_now(client: &Client, name: &str) -> Node {
    Api::<Node>::all(client.clone()).get(name).await.unwrap()
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

/// A taint release, with or without the forced deletions.
fn taint_plan(force_delete_pods: bool, delete_volume_attachments: bool) -> ReleasePlan {
    ReleasePlan {
        mode: ReleaseMode::OutOfServiceTaint,
        delete_volume_attachments,
        force_delete_pods,
    }
}

async fn pod(client: &Client, name: &str, node: &str, mirror: bool) {
    let mut meta = json!({"name": name, "namespace": "default"});
    if mirror {
        meta["annotations"] = json!({"kubernetes.io/config.mirror": "abc"});
    }
    let pod: Pod = serde_json::from_value(json!({
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

async fn pod_names(client: &Client) -> Vec<String> {
    let mut names: Vec<String> = Api::<Pod>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    names
}

async fn attachment(client: &Client, name: &str, node: &str) {
    let va: VolumeAttachment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"attacher": "csi.fake", "nodeName": node, "source": {"persistentVolumeName": format!("pv-{name}")}},
    }))
    .unwrap();
    Api::<VolumeAttachment>::all(client.clone())
        .create(&PostParams::default(), &va)
        .await
        .unwrap();
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
    let releaser = Releaser::new(client.clone(), Leadership::always());
    releaser.record_power_off("w1", 1).await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let recorded = |n: &Node| {
        n.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(nodefence::cluster::facts::POWER_OFF_ANNOTATION))
            .cloned()
    };
    let first = recorded(&nodes.get("w1").await.unwrap()).expect("the first record is written");
    assert!(first.ends_with("attempt 1"), "{first}");

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
