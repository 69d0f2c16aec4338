//! The Cluster API MachineHealthCheck stand-in against fake-kube over real HTTP: the
//! external remediation request CAPI clones for an unhealthy Machine (name,
//! namespace, owner, labels, annotations, spec), the Machine conditions, deletion once
//! the Node is healthy, deleted Nodes, short-circuiting, owner remediation and a
//! paused Cluster. The remediator is a test kind of our own (`test.example.com`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use kube_common::{client, eventually, node, start};
use nodefence_mocks::kube::FakeKubeHandle;
use nodefence_mocks::remediation::mhc::{
    self, Cluster, Machine, MachineHealthCheck, MachineHealthCheckController,
    MachineHealthCheckStatus,
};
use nodefence_mocks::remediation::{install_crds, remediator_crds};
use serde_json::json;

const GROUP: &str = "test.example.com";
const API_VERSION: &str = "test.example.com/v1alpha1";
const NS: &str = "capi";
const CLUSTER: &str = "c1";
/// Generous bound for anything that should happen within seconds (beyond CAPI's
/// 15 s rate limit where it applies).
const WITHIN: Duration = Duration::from_secs(30);

struct Env {
    _kube: FakeKubeHandle,
    client: Client,
}

fn requests(client: &Client) -> Api<DynamicObject> {
    let r = ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, "v1alpha1", "TestRemediation"));
    Api::namespaced_with(client.clone(), NS, &r)
}

fn machines(client: &Client) -> Api<Machine> {
    Api::namespaced(client.clone(), NS)
}

fn mhcs(client: &Client) -> Api<MachineHealthCheck> {
    Api::namespaced(client.clone(), NS)
}

/// fake-kube with the CAPI CRDs and a test remediator, a ready Cluster, three Nodes
/// and three Machines (`m1`..`m3`, pool `a`) whose nodeRefs name them, and a
/// remediation template.
async fn setup() -> Env {
    let kube = start(false).await;
    let client = client(&kube).await;
    install_crds(
        &client,
        [
            mhc::cluster_crd(),
            mhc::machine_crd(),
            mhc::machine_health_check_crd(),
        ],
    )
    .await
    .unwrap();
    install_crds(
        &client,
        remediator_crds(GROUP, "v1alpha1", "TestRemediation"),
    )
    .await
    .unwrap();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    mhc::create_ready_cluster(&client, NS, CLUSTER)
        .await
        .unwrap();
    let template: DynamicObject = serde_json::from_value(json!({
        "apiVersion": API_VERSION,
        "kind": "TestRemediationTemplate",
        "metadata": {"name": "fence", "namespace": NS},
        "spec": {"template": {
            "metadata": {"labels": {"remediator": "test"}},
            "spec": {"strategy": "power-off"},
        }},
    }))
    .unwrap();
    let templates = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            GROUP,
            "v1alpha1",
            "TestRemediationTemplate",
        )),
    );
    templates
        .create(&PostParams::default(), &template)
        .await
        .unwrap();
    for i in 1..=3 {
        Api::<Node>::all(client.clone())
            .create(
                &PostParams::default(),
                &node(&format!("node-{i}"), json!({})),
            )
            .await
            .unwrap();
        machines(&client)
            .create(
                &PostParams::default(),
                &Machine::new(NS, &format!("m{i}"), CLUSTER).with_labels([("pool", "a")]),
            )
            .await
            .unwrap();
        mhc::set_node_ref(&client, NS, &format!("m{i}"), &format!("node-{i}"))
            .await
            .unwrap();
    }
    Env {
        _kube: kube,
        client,
    }
}

fn check(name: &str) -> MachineHealthCheck {
    MachineHealthCheck::new(NS, name, CLUSTER)
        .select_labels([("pool", "a")])
        .unhealthy_node_condition("Ready", "False", Duration::from_secs(1))
        .unhealthy_node_condition("Ready", "Unknown", Duration::from_secs(1))
}

async fn set_ready(client: &Client, node: &str, status: &str, ago: Duration) -> Timestamp {
    let at = Timestamp::now() - SignedDuration::try_from(ago).unwrap();
    let at = Timestamp::from_second(at.as_second()).unwrap();
    Api::<Node>::all(client.clone())
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{
                "type": "Ready",
                "status": status,
                "reason": if status == "True" { "KubeletReady" } else { "KubeletNotReady" },
                "lastTransitionTime": at.to_string(),
            }]}})),
        )
        .await
        .unwrap();
    at
}

async fn request(client: &Client, name: &str) -> Option<DynamicObject> {
    requests(client).get_opt(name).await.unwrap()
}

async fn eventually_request(client: &Client, name: &str, within: Duration) -> DynamicObject {
    eventually(within, &format!("remediation request {name}"), || {
        request(client, name)
    })
    .await
}

/// `(status, reason, message)` of a Machine condition.
async fn machine_condition(
    client: &Client,
    machine: &str,
    type_: &str,
) -> Option<(String, String, String)> {
    let m = machines(client).get(machine).await.unwrap();
    m.condition(type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn status(client: &Client, name: &str) -> MachineHealthCheckStatus {
    mhcs(client)
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

fn condition<'a>(s: &'a MachineHealthCheckStatus, type_: &str) -> Option<(&'a str, &'a str)> {
    s.conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.as_str(), c.reason.as_str()))
}

/// With CAPI's own 15 s rate limit: the request appears, shaped as CAPI clones it,
/// and goes once the Node is Ready again.
#[tokio::test]
async fn an_unhealthy_machine_gets_an_external_remediation_request_until_its_node_is_ready() {
    let env = setup().await;
    let c = &env.client;
    let _mhc = MachineHealthCheckController::spawn(c.clone());
    let created = mhcs(c)
        .create(
            &PostParams::default(),
            &check("pool-a").remediation_template(API_VERSION, "TestRemediationTemplate", "fence"),
        )
        .await
        .unwrap();
    eventually(WITHIN, "the MHC counting its targets", || async {
        let s = status(c, "pool-a").await;
        (s.current_healthy == Some(3)).then_some(())
    })
    .await;
    let since = set_ready(c, "node-1", "False", Duration::ZERO).await;
    let req = eventually_request(c, "m1", WITHIN * 2).await;
    let m1 = machines(c).get("m1").await.unwrap();
    let doc = serde_json::to_value(&req).unwrap();
    let created_at: Timestamp = doc["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(created_at >= since + SignedDuration::from_secs(1), "{doc}");
    assert_eq!(doc["apiVersion"], API_VERSION);
    assert_eq!(doc["kind"], "TestRemediation");
    assert_eq!(doc["metadata"]["namespace"], NS);
    assert_eq!(
        doc["metadata"]["labels"],
        json!({"remediator": "test", "cluster.x-k8s.io/cluster-name": CLUSTER})
    );
    assert_eq!(
        doc["metadata"]["annotations"],
        json!({
            "cluster.x-k8s.io/cloned-from-name": "fence",
            "cluster.x-k8s.io/cloned-from-groupkind": "TestRemediationTemplate.test.example.com",
        })
    );
    assert_eq!(
        doc["metadata"]["ownerReferences"],
        json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "m1", "uid": m1.uid().unwrap()}])
    );
    assert_eq!(doc["spec"], json!({"strategy": "power-off"}));

    let (s, reason, message) = machine_condition(c, "m1", mhc::HEALTH_CHECK_SUCCEEDED_CONDITION)
        .await
        .unwrap();
    assert_eq!((s.as_str(), reason.as_str()), ("False", "UnhealthyNode"));
    assert_eq!(
        message,
        "Health check failed:\n  * Condition Ready on Node is reporting status False with reason KubeletNotReady for more than 1s"
    );
    let (s, reason, _) = machine_condition(c, "m1", mhc::EXTERNALLY_REMEDIATED_CONDITION)
        .await
        .unwrap();
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("False", "WaitingForRemediation")
    );
    assert!(
        machine_condition(c, "m1", mhc::OWNER_REMEDIATED_CONDITION)
            .await
            .is_none()
    );

    let mhc_now = mhcs(c).get("pool-a").await.unwrap();
    let s = mhc_now.status.clone().unwrap();
    assert_eq!(
        (
            s.expected_machines,
            s.current_healthy,
            s.remediations_allowed
        ),
        (Some(3), Some(2), Some(2))
    );
    assert_eq!(s.targets, ["m1", "m2", "m3"]);
    assert_eq!(s.observed_generation, created.metadata.generation);
    assert_eq!(
        condition(&s, mhc::REMEDIATION_ALLOWED_CONDITION),
        Some(("True", "RemediationAllowed"))
    );
    assert_eq!(
        condition(&s, mhc::PAUSED_CONDITION),
        Some(("False", "NotPaused"))
    );
    assert_eq!(
        mhc_now
            .labels()
            .get(mhc::CLUSTER_NAME_LABEL)
            .map(String::as_str),
        Some(CLUSTER)
    );
    assert_eq!(mhc_now.owner_references()[0].kind, "Cluster");

    set_ready(c, "node-1", "True", Duration::ZERO).await;
    eventually(WITHIN * 2, "the request deleted", || async {
        request(c, "m1").await.is_none().then_some(())
    })
    .await;
    let (s, reason, _) = eventually(WITHIN, "m1 healthy", || async {
        machine_condition(c, "m1", mhc::HEALTH_CHECK_SUCCEEDED_CONDITION)
            .await
            .filter(|(s, ..)| s == "True")
    })
    .await;
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "HealthCheckSucceeded")
    );
}

#[tokio::test]
async fn a_deleted_node_makes_its_machine_unhealthy_at_once() {
    let env = setup().await;
    let c = &env.client;
    let _mhc = MachineHealthCheckController::with_rate_limit(c.clone(), Duration::from_secs(1));
    mhcs(c)
        .create(
            &PostParams::default(),
            &check("pool-a").remediation_template(API_VERSION, "TestRemediationTemplate", "fence"),
        )
        .await
        .unwrap();
    eventually(WITHIN, "the MHC counting its targets", || async {
        (status(c, "pool-a").await.current_healthy == Some(3)).then_some(())
    })
    .await;
    Api::<Node>::all(c.clone())
        .delete("node-2", &DeleteParams::default())
        .await
        .unwrap();
    eventually_request(c, "m2", WITHIN).await;
    let (s, reason, message) = machine_condition(c, "m2", mhc::HEALTH_CHECK_SUCCEEDED_CONDITION)
        .await
        .unwrap();
    assert_eq!(
        (s.as_str(), reason.as_str(), message.as_str()),
        (
            "False",
            "NodeDeleted",
            "Health check failed:\n  * Node node-2 has been deleted"
        )
    );
}

#[tokio::test]
async fn too_many_unhealthy_machines_short_circuit_remediation() {
    let env = setup().await;
    let c = &env.client;
    set_ready(c, "node-1", "False", Duration::from_secs(3600)).await;
    set_ready(c, "node-2", "Unknown", Duration::from_secs(3600)).await;
    let _mhc = MachineHealthCheckController::with_rate_limit(c.clone(), Duration::from_secs(1));
    mhcs(c)
        .create(
            &PostParams::default(),
            &check("pool-a")
                .unhealthy_less_than_or_equal_to(IntOrString::Int(1))
                .remediation_template(API_VERSION, "TestRemediationTemplate", "fence"),
        )
        .await
        .unwrap();
    let s = eventually(WITHIN, "remediation not allowed", || async {
        let s = status(c, "pool-a").await;
        (condition(&s, mhc::REMEDIATION_ALLOWED_CONDITION) == Some(("False", "TooManyUnhealthy")))
            .then_some(s)
    })
    .await;
    assert_eq!(
        (
            s.expected_machines,
            s.current_healthy,
            s.remediations_allowed
        ),
        (Some(3), Some(1), Some(0))
    );
    let message = &s
        .conditions
        .iter()
        .find(|c| c.type_ == mhc::REMEDIATION_ALLOWED_CONDITION)
        .unwrap()
        .message;
    assert_eq!(
        message,
        "Remediation is not allowed, the number of not started or unhealthy machines exceeds maxUnhealthy (total: 3, unhealthy: 2, maxUnhealthy: 1)"
    );
    // The Machines are marked, but no request was made.
    for m in ["m1", "m2"] {
        let (s, ..) = machine_condition(c, m, mhc::HEALTH_CHECK_SUCCEEDED_CONDITION)
            .await
            .unwrap();
        assert_eq!(s, "False");
        assert!(request(c, m).await.is_none());
    }
    set_ready(c, "node-2", "True", Duration::ZERO).await;
    eventually_request(c, "m1", WITHIN).await;
    assert!(request(c, "m2").await.is_none());
}

#[tokio::test]
async fn without_a_template_the_machine_owner_is_asked_to_remediate() {
    let env = setup().await;
    let c = &env.client;
    set_ready(c, "node-3", "False", Duration::from_secs(3600)).await;
    let _mhc = MachineHealthCheckController::with_rate_limit(c.clone(), Duration::from_secs(1));
    mhcs(c)
        .create(&PostParams::default(), &check("pool-a"))
        .await
        .unwrap();
    let (s, reason, message) = eventually(WITHIN, "OwnerRemediated on m3", || {
        machine_condition(c, "m3", mhc::OWNER_REMEDIATED_CONDITION)
    })
    .await;
    assert_eq!(
        (s.as_str(), reason.as_str(), message.as_str()),
        ("False", "WaitingForRemediation", "Waiting for remediation")
    );
    assert!(
        machine_condition(c, "m3", mhc::EXTERNALLY_REMEDIATED_CONDITION)
            .await
            .is_none()
    );
    assert!(request(c, "m3").await.is_none());
}

#[tokio::test]
async fn a_paused_cluster_pauses_the_health_check() {
    let env = setup().await;
    let c = &env.client;
    Api::<Cluster>::namespaced(c.clone(), NS)
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    set_ready(c, "node-1", "False", Duration::from_secs(3600)).await;
    let _mhc = MachineHealthCheckController::with_rate_limit(c.clone(), Duration::from_secs(1));
    mhcs(c)
        .create(
            &PostParams::default(),
            &check("pool-a").remediation_template(API_VERSION, "TestRemediationTemplate", "fence"),
        )
        .await
        .unwrap();
    let s = eventually(WITHIN, "the MHC paused", || async {
        let s = status(c, "pool-a").await;
        (condition(&s, mhc::PAUSED_CONDITION) == Some(("True", "Paused"))).then_some(s)
    })
    .await;
    assert_eq!(
        s.conditions
            .iter()
            .find(|c| c.type_ == "Paused")
            .unwrap()
            .message,
        "Cluster spec.paused is set to true"
    );
    assert!(s.expected_machines.is_none());
    assert!(
        machine_condition(c, "m1", mhc::HEALTH_CHECK_SUCCEEDED_CONDITION)
            .await
            .is_none()
    );
    assert!(request(c, "m1").await.is_none());

    Api::<Cluster>::namespaced(c.clone(), NS)
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": false}})),
        )
        .await
        .unwrap();
    eventually_request(c, "m1", WITHIN).await;
    let s = status(c, "pool-a").await;
    assert_eq!(
        condition(&s, mhc::PAUSED_CONDITION),
        Some(("False", "NotPaused"))
    );
}

#[tokio::test]
async fn the_remediate_machine_annotation_asks_for_remediation() {
    let env = setup().await;
    let c = &env.client;
    let _mhc = MachineHealthCheckController::with_rate_limit(c.clone(), Duration::from_secs(1));
    mhcs(c)
        .create(
            &PostParams::default(),
            &check("pool-a").remediation_template(API_VERSION, "TestRemediationTemplate", "fence"),
        )
        .await
        .unwrap();
    machines(c)
        .patch(
            "m3",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {mhc::REMEDIATE_MACHINE_ANNOTATION: ""}}}),
            ),
        )
        .await
        .unwrap();
    eventually_request(c, "m3", WITHIN).await;
    let (_, reason, _) = machine_condition(c, "m3", mhc::HEALTH_CHECK_SUCCEEDED_CONDITION)
        .await
        .unwrap();
    assert_eq!(reason, "HasRemediateAnnotation");
}
