//! The release writes against the fake API server: what is written, what is kept,
//! and every refusal. Each refusal test asserts the Node is unchanged afterwards.
//!
//! By theme: [`writes`], [`refusals`], [`switches`].
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

mod refusals;
mod switches;
mod writes;

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

async fn assert_refused(result: Result<Released, ReleaseError>, words: &str) {
    match result {
        Err(ReleaseError::Refused(why)) => assert!(why.contains(words), "{why}"),
        other => panic!("expected a refusal mentioning {words:?}, got {other:?}"),
    }
}

/// The Node as it is now, for "unchanged" assertions.
async fn node_now(client: &Client, name: &str) -> Node {
    Api::<Node>::all(client.clone()).get(name).await.unwrap()
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
