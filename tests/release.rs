//! The release writes against the fake API server: what is written, what is kept,
//! and every refusal. Each refusal test asserts the Node is unchanged afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use nodefence::cluster::leader::{LeaderElector, LeaderTimings, Leadership};
use nodefence::cluster::release::{ReleaseError, Released, Releaser};
use nodefence::engine::OffProof;
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
    let status = json!({"status": {"conditions": [{
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

fn proof(last_sign_of_life: SystemTime) -> OffProof {
    let base = last_sign_of_life + Duration::from_secs(60);
    OffProof {
        last_sign_of_life,
        readings: (0..3).map(|i| base + Duration::from_secs(i)).collect(),
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
        last_sign_of_life: sign,
        readings: vec![sign - Duration::from_secs(1), sign + Duration::from_secs(1)],
    };
    assert_refused(
        releaser.taint("w1", &uid(&node), &stale).await,
        "older than",
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
