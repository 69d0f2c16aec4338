//! The NodeHealthCheck stand-in against fake-kube over real HTTP: remediation CRs
//! created after the unhealthy duration with NHC's exact name, annotations, owner and
//! spec, deleted when the node is healthy again; escalation on timeout and on
//! `Succeeded=False`; orphaned CRs; `minHealthy`, `pauseRequests` and one
//! control-plane node at a time. The remediator is a test kind of our own
//! (`test.example.com`), so nothing here depends on nodefence's CRDs.
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
use nodefence_mocks::remediation::nhc::{
    self, NodeHealthCheck, NodeHealthCheckController, NodeHealthCheckStatus, percent, template_ref,
};
use nodefence_mocks::remediation::{install_crds, remediator_crds};
use serde_json::{Value, json};

const GROUP: &str = "test.example.com";
const API_VERSION: &str = "test.example.com/v1alpha1";
const NS: &str = "remediators";
/// Generous bound for anything that should happen within seconds.
const WITHIN: Duration = Duration::from_secs(30);

struct Env {
    _kube: FakeKubeHandle,
    client: Client,
    _nhc: NodeHealthCheckController,
}

fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, "v1alpha1", kind))
}

fn crs(client: &Client, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), NS, &resource(kind))
}

fn nhcs(client: &Client) -> Api<NodeHealthCheck> {
    Api::all(client.clone())
}

/// fake-kube with the NHC CRD, two test remediators (`TestRemediation`,
/// `OtherRemediation`) and a template of each, `nodes` (Ready, with their labels),
/// and the NHC stand-in running.
async fn setup(nodes: &[(&str, Value)]) -> Env {
    let kube = start(false).await;
    let client = client(&kube).await;
    install_crds(&client, [nhc::nhc_crd()]).await.unwrap();
    install_crds(
        &client,
        remediator_crds(GROUP, "v1alpha1", "TestRemediation"),
    )
    .await
    .unwrap();
    install_crds(
        &client,
        remediator_crds(GROUP, "v1alpha1", "OtherRemediation"),
    )
    .await
    .unwrap();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    for (kind, name, spec) in [
        (
            "TestRemediationTemplate",
            "test-template",
            json!({"strategy": "reboot", "timeout": "5m"}),
        ),
        (
            "OtherRemediationTemplate",
            "other-template",
            json!({"mode": "reprovision"}),
        ),
    ] {
        let template: DynamicObject = serde_json::from_value(json!({
            "apiVersion": API_VERSION,
            "kind": kind,
            "metadata": {"name": name, "namespace": NS},
            "spec": {"template": {"spec": spec}},
        }))
        .unwrap();
        crs(&client, kind)
            .create(&PostParams::default(), &template)
            .await
            .unwrap();
    }
    let node_api: Api<Node> = Api::all(client.clone());
    for (name, labels) in nodes {
        node_api
            .create(&PostParams::default(), &node(name, labels.clone()))
            .await
            .unwrap();
    }
    let controller = NodeHealthCheckController::spawn(client.clone());
    Env {
        _kube: kube,
        client,
        _nhc: controller,
    }
}

fn workers(n: usize) -> Vec<(String, Value)> {
    (1..=n)
        .map(|i| (format!("worker-{i}"), json!({"role": "worker"})))
        .collect()
}

fn as_refs(v: &[(String, Value)]) -> Vec<(&str, Value)> {
    v.iter().map(|(n, l)| (n.as_str(), l.clone())).collect()
}

fn test_template() -> k8s_openapi::api::core::v1::ObjectReference {
    template_ref(API_VERSION, "TestRemediationTemplate", NS, "test-template")
}

fn other_template() -> k8s_openapi::api::core::v1::ObjectReference {
    template_ref(
        API_VERSION,
        "OtherRemediationTemplate",
        NS,
        "other-template",
    )
}

/// Sets the node's Ready condition to `status`, transitioned `ago` before now;
/// returns the transition time as written (whole seconds).
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

async fn set_cr_conditions(client: &Client, kind: &str, name: &str, conditions: &[(&str, &str)]) {
    let now = Timestamp::from_second(Timestamp::now().as_second())
        .unwrap()
        .to_string();
    let conditions: Vec<Value> = conditions
        .iter()
        .map(|(t, s)| json!({"type": t, "status": s, "reason": "Test", "message": "", "lastTransitionTime": now}))
        .collect();
    crs(client, kind)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": conditions}})),
        )
        .await
        .unwrap();
}

async fn cr(client: &Client, kind: &str, name: &str) -> Option<DynamicObject> {
    crs(client, kind).get_opt(name).await.unwrap()
}

async fn eventually_cr(client: &Client, kind: &str, name: &str) -> DynamicObject {
    eventually(WITHIN, &format!("{kind} {name}"), || cr(client, kind, name)).await
}

async fn eventually_no_cr(client: &Client, kind: &str, name: &str) {
    eventually(WITHIN, &format!("{kind} {name} deleted"), || async {
        cr(client, kind, name).await.is_none().then_some(())
    })
    .await;
}

async fn status(client: &Client, name: &str) -> NodeHealthCheckStatus {
    nhcs(client)
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

fn time_of(v: &Value) -> Timestamp {
    v.as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_not_ready_node_gets_its_cr_after_the_duration_and_loses_it_when_ready() {
    let nodes = workers(3);
    let env = setup(&as_refs(&nodes)).await;
    let c = &env.client;
    let created = nhcs(c)
        .create(
            &PostParams::default(),
            &NodeHealthCheck::new("workers")
                .select_labels([("role", "worker")])
                .unhealthy_condition("Ready", "False", Duration::from_secs(2))
                .min_healthy(percent(51))
                .remediation_template(test_template()),
        )
        .await
        .unwrap();
    eventually(WITHIN, "the NHC enabled", || async {
        let s = status(c, "workers").await;
        (s.phase.as_deref() == Some("Enabled") && s.healthy_nodes == Some(3)).then_some(())
    })
    .await;

    let since = set_ready(c, "worker-1", "False", Duration::ZERO).await;
    // The duration cannot have passed yet (the transition time is in whole seconds).
    assert!(cr(c, "TestRemediation", "worker-1").await.is_none());
    let remediation = eventually_cr(c, "TestRemediation", "worker-1").await;
    let doc = serde_json::to_value(&remediation).unwrap();
    assert!(
        time_of(&doc["metadata"]["creationTimestamp"]) >= since + SignedDuration::from_secs(2),
        "created before the condition had held for its duration: {doc}"
    );
    assert_eq!(doc["apiVersion"], API_VERSION);
    assert_eq!(doc["kind"], "TestRemediation");
    assert_eq!(doc["metadata"]["namespace"], NS);
    assert_eq!(
        doc["metadata"]["annotations"],
        json!({
            "remediation.medik8s.io/node-name": "worker-1",
            "remediation.medik8s.io/template-name": "test-template",
        })
    );
    assert_eq!(
        doc["metadata"]["labels"],
        json!({"app.kubernetes.io/part-of": "node-healthcheck-controller"})
    );
    assert_eq!(
        doc["metadata"]["ownerReferences"],
        json!([{
            "apiVersion": "remediation.medik8s.io/v1alpha1",
            "kind": "NodeHealthCheck",
            "name": "workers",
            "uid": created.uid().unwrap(),
            "controller": false,
        }])
    );
    assert_eq!(doc["spec"], json!({"strategy": "reboot", "timeout": "5m"}));

    let s = eventually(WITHIN, "the status to show the remediation", || async {
        let s = status(c, "workers").await;
        (s.phase.as_deref() == Some("Remediating")).then_some(s)
    })
    .await;
    assert_eq!((s.observed_nodes, s.healthy_nodes), (Some(3), Some(2)));
    assert_eq!(s.unhealthy_nodes.len(), 1);
    let r = &s.unhealthy_nodes[0].remediations[0];
    assert_eq!(s.unhealthy_nodes[0].name, "worker-1");
    assert_eq!(r.resource.name.as_deref(), Some("worker-1"));
    assert_eq!(r.resource.kind.as_deref(), Some("TestRemediation"));
    assert_eq!(r.resource.uid, remediation.uid());
    assert_eq!(r.template_name.as_deref(), Some("test-template"));
    assert!(r.timed_out.is_none());
    assert_eq!(s.reason.as_deref(), Some("NHC is remediating 1 nodes"));

    set_ready(c, "worker-1", "True", Duration::ZERO).await;
    eventually_no_cr(c, "TestRemediation", "worker-1").await;
    eventually(WITHIN, "the node healthy in the status", || async {
        let s = status(c, "workers").await;
        (s.unhealthy_nodes.is_empty()
            && s.healthy_nodes == Some(3)
            && s.phase.as_deref() == Some("Enabled"))
        .then_some(())
    })
    .await;
}

#[tokio::test]
async fn escalation_times_out_annotates_the_cr_and_creates_the_next() {
    let nodes = workers(3);
    let env = setup(&as_refs(&nodes)).await;
    let c = &env.client;
    nhcs(c)
        .create(
            &PostParams::default(),
            &NodeHealthCheck::new("escalating")
                .select_labels([("role", "worker")])
                .unhealthy_condition("Ready", "False", Duration::from_secs(1))
                .min_healthy(IntOrString::Int(1))
                .escalating_remediation(other_template(), 2, Duration::from_secs(600))
                .escalating_remediation(test_template(), 1, Duration::from_secs(3)),
        )
        .await
        .unwrap();
    set_ready(c, "worker-2", "False", Duration::ZERO).await;
    let first = eventually_cr(c, "TestRemediation", "worker-2").await;
    let first_created = first.creation_timestamp().unwrap().0;
    assert!(!first.annotations().contains_key(nhc::TIMED_OUT_ANNOTATION));
    let second = eventually_cr(c, "OtherRemediation", "worker-2").await;
    assert_eq!(second.data["spec"], json!({"mode": "reprovision"}));
    assert_eq!(
        second
            .annotations()
            .get(nhc::TEMPLATE_NAME_ANNOTATION)
            .map(String::as_str),
        Some("other-template")
    );
    let first = cr(c, "TestRemediation", "worker-2")
        .await
        .expect("the first CR stays");
    let timed_out: Timestamp = first
        .annotations()
        .get(nhc::TIMED_OUT_ANNOTATION)
        .expect("the timed-out annotation")
        .parse()
        .unwrap();
    assert!(
        timed_out >= first_created + SignedDuration::from_secs(3),
        "{timed_out} vs {first_created}"
    );
    assert!(second.creation_timestamp().unwrap().0 >= timed_out);

    let s = eventually(WITHIN, "both remediations in the status", || async {
        let s = status(c, "escalating").await;
        let n = s.unhealthy_nodes.iter().find(|n| n.name == "worker-2")?;
        (n.remediations.len() == 2).then(|| n.clone())
    })
    .await;
    assert_eq!(
        s.remediations[0].resource.kind.as_deref(),
        Some("TestRemediation")
    );
    assert!(s.remediations[0].timed_out.is_some());
    assert_eq!(
        s.remediations[1].resource.kind.as_deref(),
        Some("OtherRemediation")
    );
    assert!(s.remediations[1].timed_out.is_none());

    // Healthy again: every CR of the node goes.
    set_ready(c, "worker-2", "True", Duration::ZERO).await;
    eventually_no_cr(c, "TestRemediation", "worker-2").await;
    eventually_no_cr(c, "OtherRemediation", "worker-2").await;
}

#[tokio::test]
async fn succeeded_false_escalates_before_the_timeout() {
    let nodes = workers(3);
    let env = setup(&as_refs(&nodes)).await;
    let c = &env.client;
    set_ready(c, "worker-3", "False", Duration::from_secs(3600)).await;
    nhcs(c)
        .create(
            &PostParams::default(),
            &NodeHealthCheck::new("escalating")
                .select_labels([("role", "worker")])
                .unhealthy_condition("Ready", "False", Duration::from_secs(1))
                .min_healthy(IntOrString::Int(1))
                .escalating_remediation(test_template(), 1, Duration::from_secs(3600))
                .escalating_remediation(other_template(), 2, Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    eventually_cr(c, "TestRemediation", "worker-3").await;
    assert!(cr(c, "OtherRemediation", "worker-3").await.is_none());
    set_cr_conditions(
        c,
        "TestRemediation",
        "worker-3",
        &[("Processing", "False"), ("Succeeded", "False")],
    )
    .await;
    eventually_cr(c, "OtherRemediation", "worker-3").await;
    let first = cr(c, "TestRemediation", "worker-3").await.unwrap();
    assert!(first.annotations().contains_key(nhc::TIMED_OUT_ANNOTATION));
}

#[tokio::test]
async fn a_succeeded_cr_is_not_annotated_when_it_times_out() {
    let nodes = workers(3);
    let env = setup(&as_refs(&nodes)).await;
    let c = &env.client;
    set_ready(c, "worker-1", "False", Duration::from_secs(3600)).await;
    nhcs(c)
        .create(
            &PostParams::default(),
            &NodeHealthCheck::new("escalating")
                .select_labels([("role", "worker")])
                .unhealthy_condition("Ready", "False", Duration::from_secs(1))
                .min_healthy(IntOrString::Int(1))
                .escalating_remediation(test_template(), 1, Duration::from_secs(2))
                .escalating_remediation(other_template(), 2, Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    eventually_cr(c, "TestRemediation", "worker-1").await;
    set_cr_conditions(c, "TestRemediation", "worker-1", &[("Succeeded", "True")]).await;
    eventually_cr(c, "OtherRemediation", "worker-1").await;
    let first = cr(c, "TestRemediation", "worker-1").await.unwrap();
    assert!(!first.annotations().contains_key(nhc::TIMED_OUT_ANNOTATION));
}

#[tokio::test]
async fn orphaned_crs_go_unless_permanent_node_deletion_is_expected_and_not_done() {
    let nodes = workers(4);
    let env = setup(&as_refs(&nodes)).await;
    let c = &env.client;
    set_ready(c, "worker-1", "False", Duration::from_secs(3600)).await;
    set_ready(c, "worker-2", "False", Duration::from_secs(3600)).await;
    nhcs(c)
        .create(
            &PostParams::default(),
            &NodeHealthCheck::new("workers")
                .select_labels([("role", "worker")])
                .unhealthy_condition("Ready", "False", Duration::from_secs(1))
                .min_healthy(IntOrString::Int(1))
                .remediation_template(test_template()),
        )
        .await
        .unwrap();
    eventually_cr(c, "TestRemediation", "worker-1").await;
    eventually_cr(c, "TestRemediation", "worker-2").await;
    // worker-2's remediator will delete its node for good, and is not done yet.
    set_cr_conditions(
        c,
        "TestRemediation",
        "worker-2",
        &[
            ("PermanentNodeDeletionExpected", "True"),
            ("Succeeded", "Unknown"),
        ],
    )
    .await;
    let node_api: Api<Node> = Api::all(c.clone());
    node_api
        .delete("worker-2", &DeleteParams::default())
        .await
        .unwrap();
    node_api
        .delete("worker-1", &DeleteParams::default())
        .await
        .unwrap();
    // Both deletions were seen by the reconcile that removed worker-1's CR.
    eventually_no_cr(c, "TestRemediation", "worker-1").await;
    eventually(WITHIN, "worker-1 out of the status", || async {
        let s = status(c, "workers").await;
        (s.observed_nodes == Some(2) && !s.unhealthy_nodes.iter().any(|n| n.name == "worker-1"))
            .then_some(())
    })
    .await;
    assert!(
        cr(c, "TestRemediation", "worker-2").await.is_some(),
        "kept until Succeeded"
    );
    set_cr_conditions(
        c,
        "TestRemediation",
        "worker-2",
        &[
            ("PermanentNodeDeletionExpected", "True"),
            ("Succeeded", "True"),
        ],
    )
    .await;
    eventually_no_cr(c, "TestRemediation", "worker-2").await;
}

#[tokio::test]
async fn min_healthy_blocks_remediation_until_enough_nodes_are_healthy() {
    let nodes = workers(3);
    let env = setup(&as_refs(&nodes)).await;
    let c = &env.client;
    set_ready(c, "worker-1", "False", Duration::from_secs(3600)).await;
    set_ready(c, "worker-2", "Unknown", Duration::from_secs(3600)).await;
    nhcs(c)
        .create(
            &PostParams::default(),
            &NodeHealthCheck::new("workers")
                .select_labels([("role", "worker")])
                .unhealthy_condition("Ready", "False", Duration::from_secs(1))
                .unhealthy_condition("Ready", "Unknown", Duration::from_secs(1))
                .min_healthy(percent(51))
                .remediation_template(test_template()),
        )
        .await
        .unwrap();
    // The status is written at the end of the reconcile that decided.
    let s = eventually(WITHIN, "both nodes unhealthy in the status", || async {
        let s = status(c, "workers").await;
        (s.unhealthy_nodes.len() == 2).then_some(s)
    })
    .await;
    assert_eq!((s.observed_nodes, s.healthy_nodes), (Some(3), Some(1)));
    assert!(s.unhealthy_nodes.iter().all(|n| n.remediations.is_empty()));
    assert_eq!(s.phase.as_deref(), Some("Enabled"));
    assert!(cr(c, "TestRemediation", "worker-1").await.is_none());
    assert!(cr(c, "TestRemediation", "worker-2").await.is_none());

    set_ready(c, "worker-2", "True", Duration::ZERO).await;
    eventually_cr(c, "TestRemediation", "worker-1").await;
    assert!(cr(c, "TestRemediation", "worker-2").await.is_none());
}

#[tokio::test]
async fn pause_requests_block_new_remediations() {
    let mut nodes = workers(3);
    nodes.push(("infra-1".into(), json!({"role": "infra"})));
    let env = setup(&as_refs(&nodes)).await;
    let c = &env.client;
    set_ready(c, "worker-1", "False", Duration::from_secs(3600)).await;
    set_ready(c, "infra-1", "False", Duration::from_secs(3600)).await;
    let check = |name: &str, role: &str| {
        NodeHealthCheck::new(name)
            .select_labels([("role", role)])
            .unhealthy_condition("Ready", "False", Duration::from_secs(1))
            .min_healthy(IntOrString::Int(0))
            .remediation_template(test_template())
    };
    // Named so that the paused one comes first both in event order and in list order.
    nhcs(c)
        .create(
            &PostParams::default(),
            &check("a-workers", "worker").pause("cluster upgrade by @admin"),
        )
        .await
        .unwrap();
    nhcs(c)
        .create(&PostParams::default(), &check("b-infra", "infra"))
        .await
        .unwrap();
    // One reconcile at a time, in that order: once the unpaused one remediated, the
    // paused one has seen its unhealthy node.
    eventually_cr(c, "TestRemediation", "infra-1").await;
    let s = eventually(WITHIN, "the paused phase", || async {
        let s = status(c, "a-workers").await;
        (s.phase.as_deref() == Some("Paused")).then_some(s)
    })
    .await;
    assert_eq!(
        s.reason.as_deref(),
        Some("NHC is paused: cluster upgrade by @admin")
    );
    assert!(cr(c, "TestRemediation", "worker-1").await.is_none());

    nhcs(c)
        .patch(
            "a-workers",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"pauseRequests": null}})),
        )
        .await
        .unwrap();
    eventually_cr(c, "TestRemediation", "worker-1").await;
}

#[tokio::test]
async fn one_control_plane_node_at_a_time() {
    let cp = |i: u32| {
        (
            format!("cp-{i}"),
            json!({"node-role.kubernetes.io/control-plane": ""}),
        )
    };
    let nodes = vec![cp(1), cp(2), cp(3)];
    let env = setup(&as_refs(&nodes)).await;
    let c = &env.client;
    set_ready(c, "cp-1", "False", Duration::from_secs(3600)).await;
    set_ready(c, "cp-2", "False", Duration::from_secs(3600)).await;
    nhcs(c)
        .create(
            &PostParams::default(),
            &NodeHealthCheck::new("control-plane")
                .select_expression("node-role.kubernetes.io/control-plane", "Exists", &[])
                .unhealthy_condition("Ready", "False", Duration::from_secs(1))
                .min_healthy(IntOrString::Int(1))
                .remediation_template(test_template()),
        )
        .await
        .unwrap();
    let first = eventually(WITHIN, "one control-plane CR", || async {
        let list = crs(c, "TestRemediation")
            .list(&Default::default())
            .await
            .unwrap();
        list.items.into_iter().next()
    })
    .await;
    assert!(first.labels().contains_key(nhc::CONTROL_PLANE_CR_LABEL));
    let s = eventually(WITHIN, "both nodes in the status", || async {
        let s = status(c, "control-plane").await;
        (s.unhealthy_nodes.len() == 2).then_some(s)
    })
    .await;
    assert_eq!(
        s.unhealthy_nodes
            .iter()
            .filter(|n| !n.remediations.is_empty())
            .count(),
        1
    );
    assert_eq!(
        crs(c, "TestRemediation")
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    // The first one recovers; the other one's turn comes.
    let (done, next) = if first.name_any() == "cp-1" {
        ("cp-1", "cp-2")
    } else {
        ("cp-2", "cp-1")
    };
    set_ready(c, done, "True", Duration::ZERO).await;
    eventually_no_cr(c, "TestRemediation", done).await;
    eventually_cr(c, "TestRemediation", next).await;
}

#[tokio::test]
async fn a_missing_template_disables_the_nhc() {
    let nodes = workers(1);
    let env = setup(&as_refs(&nodes)).await;
    let c = &env.client;
    nhcs(c)
        .create(
            &PostParams::default(),
            &NodeHealthCheck::new("workers")
                .select_labels([("role", "worker")])
                .min_healthy(IntOrString::Int(0))
                .remediation_template(template_ref(
                    API_VERSION,
                    "TestRemediationTemplate",
                    NS,
                    "nope",
                )),
        )
        .await
        .unwrap();
    let s = eventually(WITHIN, "the NHC disabled", || async {
        let s = status(c, "workers").await;
        (s.phase.as_deref() == Some("Disabled")).then_some(s)
    })
    .await;
    let disabled = s
        .conditions
        .iter()
        .find(|c| c.type_ == nhc::DISABLED_CONDITION)
        .unwrap();
    assert_eq!(
        (disabled.status.as_str(), disabled.reason.as_str()),
        ("True", "RemediationTemplateNotFound")
    );
    // The default unhealthy conditions were filled in (by the CRD's default).
    let spec = nhcs(c).get("workers").await.unwrap().spec;
    assert_eq!(spec.unhealthy_conditions.map(|u| u.len()), Some(2));
}
