//! nodefence as the remediator of the cluster's own health checkers, end to end: the
//! real daemon against fake-kube serving the CRDs of `deploy/components/remediation`,
//! with the stand-ins of the medik8s NodeHealthCheck operator and of Cluster API's
//! MachineHealthCheck (`nodefence_mocks::remediation`) creating, escalating and
//! deleting the requests as those components do.
//!
//! The daemon's `unhealthy_after` is ten minutes here: a machine powered off within
//! the test was powered off because a request asked for it, never on nodefence's own
//! clock. Every release is still checked by the daemon against a fresh Off proof
//! (the BMC is the mock's; assertions are on its reset log and the cluster's state).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::deploy_common::{deploy_rbac, kubectl};

use std::path::Path;
use std::time::Duration;

use common::world::*;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nodefence::remediation::{
    NodeFenceRemediation, NodeFenceRemediationTemplate, TAINT_FINALIZER, condition,
};
use nodefence_mocks::redfish::MockPower;
use nodefence_mocks::remediation::{install_crds, mhc, nhc, remediator_crds};
use serde_json::{Value, json};

const NAMESPACE: &str = "nodefence";
const TEMPLATE: &str = "nodefence";

fn component(file: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/components/remediation")
        .join(file);
    serde_saphyr::from_multiple::<Value>(&std::fs::read_to_string(path).unwrap())
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// Three workers, nodefence answering requests, `unhealthy_after` ten minutes; the
/// replica starts once the component (CRDs, template) is applied.
async fn world_with(tweak: impl Fn(&mut nodefence::engine::Policy) + Send + 'static) -> World {
    start(WorldBuilder::new().policy(tweak)).await
}

async fn start(builder: WorldBuilder) -> World {
    let mut w = builder
        .agent_toml("[remediation]\nrequests = true\n")
        .policy(|p| p.unhealthy_after = Duration::from_secs(600))
        .replicas(&[])
        .start()
        .await;
    let crds: Vec<CustomResourceDefinition> = component("crds.yaml")
        .into_iter()
        .map(|d| serde_json::from_value(d).unwrap())
        .collect();
    install_crds(&w.client, crds).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(w.client.clone());
    if namespaces.get_opt(NAMESPACE).await.unwrap().is_none() {
        let ns = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }
    for doc in component("template.yaml") {
        let template: NodeFenceRemediationTemplate = serde_json::from_value(doc).unwrap();
        Api::<NodeFenceRemediationTemplate>::namespaced(w.client.clone(), NAMESPACE)
            .create(&PostParams::default(), &template)
            .await
            .unwrap();
    }
    w.start_replica("test-replica");
    w
}

fn template_ref() -> k8s_openapi::api::core::v1::ObjectReference {
    nhc::template_ref(
        "remediation.nodefence.io/v1alpha1",
        "NodeFenceRemediationTemplate",
        NAMESPACE,
        TEMPLATE,
    )
}

/// As NodeHealthCheck's documentation configures it (`minHealthy: 51%`), with its
/// durations short: Ready False or Unknown for 3 s makes a node unhealthy.
fn node_health_check() -> nhc::NodeHealthCheck {
    nhc::NodeHealthCheck::new("workers")
        .min_healthy(nhc::percent(51))
        .unhealthy_condition("Ready", "False", Duration::from_secs(3))
        .unhealthy_condition("Ready", "Unknown", Duration::from_secs(3))
}

async fn create_nhc(w: &World, check: nhc::NodeHealthCheck) {
    install_crds(&w.client, [nhc::nhc_crd()]).await.unwrap();
    Api::<nhc::NodeHealthCheck>::all(w.client.clone())
        .create(&PostParams::default(), &check)
        .await
        .unwrap();
}

fn requests(w: &World, namespace: &str) -> Api<NodeFenceRemediation> {
    Api::namespaced(w.client.clone(), namespace)
}

async fn request(w: &World, namespace: &str, name: &str) -> Option<NodeFenceRemediation> {
    requests(w, namespace).get_opt(name).await.unwrap()
}

/// `(status, reason)` of a request's condition.
fn condition_of(r: &NodeFenceRemediation, kind: &str) -> Option<(String, String)> {
    r.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

async fn wait_condition(w: &World, namespace: &str, name: &str, kind: &str, want: (&str, &str)) {
    eventually(
        &format!("{namespace}/{name}: {kind}={} ({})", want.0, want.1),
        Duration::from_secs(60),
        || async {
            request(w, namespace, name).await.is_some_and(|r| {
                condition_of(&r, kind) == Some((want.0.to_string(), want.1.to_string()))
            })
        },
    )
    .await;
}

fn force_offs(w: &World, node: &str) -> usize {
    w.resets_of(node)
        .iter()
        .filter(|r| r.as_str() == "ForceOff")
        .count()
}

/// `nodefence explain NODE` against the world's API server.
async fn explain(w: &World, node: &str) -> String {
    let kubeconfig = w._dir.path().join("kubeconfig");
    w.kube.write_kubeconfig(&kubeconfig).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_nodefence"))
        .arg("--config")
        .arg(w._dir.path().join("nodefence.toml"))
        .args([
            "explain",
            node,
            "--namespace",
            "kube-system",
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .output()
        .await
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_health_check_has_a_cut_off_node_fenced_released_and_brought_back() {
    let w = world_with(|p| {
        p.power_on_after_fence = true;
        p.release_timeout = Duration::from_secs(3);
    })
    .await;
    create_nhc(&w, node_health_check().remediation_template(template_ref())).await;
    let _nhc = nhc::NodeHealthCheckController::spawn(w.client.clone());
    let victim = "worker-2";
    w.cut_network(victim);
    // NodeHealthCheck creates the request, named after the node, in the template's
    // namespace; nodefence powers the machine off at once (not after ten minutes).
    eventually("the request", Duration::from_secs(60), || async {
        request(&w, NAMESPACE, victim).await.is_some()
    })
    .await;
    eventually("ForceOff", Duration::from_secs(30), || async {
        force_offs(&w, victim) == 1
    })
    .await;
    eventually("released", Duration::from_secs(30), || async {
        w.has_out_of_service_taint(victim)
    })
    .await;
    wait_condition(
        &w,
        NAMESPACE,
        victim,
        condition::SUCCEEDED,
        ("True", "Released"),
    )
    .await;
    let r = request(&w, NAMESPACE, victim).await.unwrap();
    assert_eq!(
        condition_of(&r, condition::PROCESSING),
        Some(("False".into(), "Released".into()))
    );
    assert_eq!(
        condition_of(&r, condition::PERMANENT_NODE_DELETION_EXPECTED),
        Some(("False".into(), "OutOfServiceTaintRelease".into()))
    );
    assert_eq!(
        r.status.as_ref().unwrap().node_name.as_deref(),
        Some(victim)
    );
    eventually(
        "the finalizer while the taint is on",
        Duration::from_secs(10),
        || async {
            request(&w, NAMESPACE, victim).await.is_some_and(|r| {
                r.metadata
                    .finalizers
                    .unwrap_or_default()
                    .iter()
                    .any(|f| f == TAINT_FINALIZER)
            })
        },
    )
    .await;
    let text = explain(&w, victim).await;
    assert!(
        text.contains(&format!("NodeFenceRemediation {NAMESPACE}/{victim}"))
            && text.contains("Succeeded=True Released"),
        "{text}"
    );
    // Reboot-style: powered back on; the network heals; the node is Ready again and
    // NodeHealthCheck deletes the request. The finalizer holds it until nodefence's
    // taint is gone.
    eventually("powered back on", Duration::from_secs(60), || async {
        w.power_of(victim) == Some(MockPower::On)
    })
    .await;
    w.sim.set_kubelet(victim, true);
    eventually("the request gone", Duration::from_secs(60), || async {
        request(&w, NAMESPACE, victim).await.is_none()
    })
    .await;
    assert!(!w.has_out_of_service_taint(victim), "no taint left behind");
    assert_eq!(force_offs(&w, victim), 1, "one request, one fence");
    w.expect_event(victim, "TaintRemoved").await;
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_a_node_released_on_its_own_succeeds_at_once() {
    let w = world_with(|_| {}).await;
    let victim = "worker-1";
    w.pull_plug(victim);
    eventually(
        "released on the Lease fast path",
        Duration::from_secs(30),
        || async { w.has_out_of_service_taint(victim) },
    )
    .await;
    // What NodeHealthCheck creates once its duration has passed.
    let mut r = NodeFenceRemediation::new(victim, Default::default());
    r.metadata.annotations =
        Some([(nhc::NODE_NAME_ANNOTATION.to_string(), victim.to_string())].into());
    requests(&w, NAMESPACE)
        .create(&PostParams::default(), &r)
        .await
        .unwrap();
    wait_condition(
        &w,
        NAMESPACE,
        victim,
        condition::SUCCEEDED,
        ("True", "Released"),
    )
    .await;
    assert_eq!(force_offs(&w, victim), 0, "an Off machine needs no command");
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalation_timeout_stops_power_commands_and_is_reported() {
    let w = world_with(|p| p.unhealthy_after = Duration::from_secs(6)).await;
    install_crds(
        &w.client,
        remediator_crds("test.example.com", "v1alpha1", "ReprovisionRemediation"),
    )
    .await
    .unwrap();
    let mut next: Value = json!({
        "apiVersion": "test.example.com/v1alpha1",
        "kind": "ReprovisionRemediationTemplate",
        "metadata": {"name": "reprovision", "namespace": NAMESPACE},
        "spec": {"template": {"spec": {}}},
    });
    let gvk = kube::core::GroupVersionKind::gvk(
        "test.example.com",
        "v1alpha1",
        "ReprovisionRemediationTemplate",
    );
    let resource = kube::api::ApiResource::from_gvk(&gvk);
    let dynamic: Api<kube::api::DynamicObject> =
        Api::namespaced_with(w.client.clone(), NAMESPACE, &resource);
    dynamic
        .create(
            &PostParams::default(),
            &serde_json::from_value(next.take()).unwrap(),
        )
        .await
        .unwrap();
    // nodefence first for 5 s (50 s stock), then reprovisioning.
    let check = node_health_check()
        .escalating_remediation(template_ref(), 1, Duration::from_secs(5))
        .escalating_remediation(
            nhc::template_ref(
                "test.example.com/v1alpha1",
                "ReprovisionRemediationTemplate",
                NAMESPACE,
                "reprovision",
            ),
            2,
            Duration::from_secs(60),
        );
    // Paused: nodefence holds the request (and says so) until NodeHealthCheck moves on.
    nodefence_pause(&w, true).await;
    create_nhc(&w, check).await;
    let _nhc = nhc::NodeHealthCheckController::spawn(w.client.clone());
    let victim = "worker-3";
    w.cut_network(victim);
    wait_condition(
        &w,
        NAMESPACE,
        victim,
        condition::PROCESSING,
        ("True", "Paused"),
    )
    .await;
    eventually(
        "the timeout annotation",
        Duration::from_secs(60),
        || async {
            request(&w, NAMESPACE, victim).await.is_some_and(|r| {
                r.metadata
                    .annotations
                    .unwrap_or_default()
                    .contains_key(nodefence::remediation::TIMED_OUT_ANNOTATION)
            })
        },
    )
    .await;
    wait_condition(
        &w,
        NAMESPACE,
        victim,
        condition::PROCESSING,
        ("False", "TimedOut"),
    )
    .await;
    // Resumed, and long past unhealthy_after: still no power command for this node.
    nodefence_pause(&w, false).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        force_offs(&w, victim),
        0,
        "NodeHealthCheck moved on: no ForceOff"
    );
    assert!(!w.has_out_of_service_taint(victim));
    let reprovision = Api::<kube::api::DynamicObject>::namespaced_with(
        w.client.clone(),
        NAMESPACE,
        &kube::api::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "test.example.com",
            "v1alpha1",
            "ReprovisionRemediation",
        )),
    );
    assert!(
        reprovision.get_opt(victim).await.unwrap().is_some(),
        "the next remediator's request"
    );
    let text = explain(&w, victim).await;
    assert!(text.contains("TIMED OUT"), "{text}");
    w.stop().await;
}

async fn nodefence_pause(w: &World, paused: bool) {
    let kubeconfig = w._dir.path().join("kubeconfig");
    w.kube.write_kubeconfig(&kubeconfig).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_nodefence"));
    cmd.arg("--config")
        .arg(w._dir.path().join("nodefence.toml"));
    if paused {
        cmd.args(["pause", "--reason", "test"]);
    } else {
        cmd.args(["resume"]);
    }
    let out = cmd
        .args(["--namespace", "kube-system", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_an_opted_out_node_is_held_and_reported() {
    let w = world_with(|_| {}).await;
    let victim = "worker-1";
    Api::<k8s_openapi::api::core::v1::Node>::all(w.client.clone())
        .patch(
            victim,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"nodefence.io/exclude": "true"}}})),
        )
        .await
        .unwrap();
    create_nhc(&w, node_health_check().remediation_template(template_ref())).await;
    let _nhc = nhc::NodeHealthCheckController::spawn(w.client.clone());
    w.cut_network(victim);
    wait_condition(
        &w,
        NAMESPACE,
        victim,
        condition::PROCESSING,
        ("True", "OptedOut"),
    )
    .await;
    let r = request(&w, NAMESPACE, victim).await.unwrap();
    assert_eq!(
        condition_of(&r, condition::SUCCEEDED),
        Some(("Unknown".into(), "OptedOut".into()))
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(force_offs(&w, victim), 0);
    assert!(!w.has_out_of_service_taint(victim));
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_node_release_expects_the_deletion_and_the_orphaned_request_is_deleted() {
    let w = world_with(|p| p.release = nodefence::engine::ReleaseMode::DeleteNode).await;
    create_nhc(&w, node_health_check().remediation_template(template_ref())).await;
    let _nhc = nhc::NodeHealthCheckController::spawn(w.client.clone());
    let victim = "worker-2";
    w.cut_network(victim);
    wait_condition(
        &w,
        NAMESPACE,
        victim,
        condition::PERMANENT_NODE_DELETION_EXPECTED,
        ("True", "DeleteNodeRelease"),
    )
    .await;
    eventually("the Node deleted", Duration::from_secs(60), || async {
        w.node(victim).is_none()
    })
    .await;
    assert_eq!(force_offs(&w, victim), 1);
    // NodeHealthCheck deletes a request whose Node is gone once it Succeeded (it
    // waits for that when PermanentNodeDeletionExpected is True); nodefence does not
    // delete it itself (NHC's workflow.md: the remediator should not).
    eventually(
        "the orphaned request deleted",
        Duration::from_secs(60),
        || async { request(&w, NAMESPACE, victim).await.is_none() },
    )
    .await;
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_health_check_has_the_machines_node_fenced() {
    let w = world_with(|_| {}).await;
    let ns = "capi";
    let namespaces: Api<Namespace> = Api::all(w.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    install_crds(
        &w.client,
        [
            mhc::cluster_crd(),
            mhc::machine_crd(),
            mhc::machine_health_check_crd(),
        ],
    )
    .await
    .unwrap();
    // The template lives with the MachineHealthCheck (templateRef has no namespace).
    let mut template: NodeFenceRemediationTemplate =
        serde_json::from_value(component("template.yaml").remove(0)).unwrap();
    template.metadata.namespace = Some(ns.into());
    Api::<NodeFenceRemediationTemplate>::namespaced(w.client.clone(), ns)
        .create(&PostParams::default(), &template)
        .await
        .unwrap();
    mhc::create_ready_cluster(&w.client, ns, "prod")
        .await
        .unwrap();
    let machines: Api<mhc::Machine> = Api::namespaced(w.client.clone(), ns);
    for (i, node) in ["worker-1", "worker-2", "worker-3"].iter().enumerate() {
        let machine =
            mhc::Machine::new(ns, &format!("md-0-{i}"), "prod").with_labels([("pool", "md-0")]);
        machines
            .create(&PostParams::default(), &machine)
            .await
            .unwrap();
        mhc::set_node_ref(&w.client, ns, &format!("md-0-{i}"), node)
            .await
            .unwrap();
    }
    let check = mhc::MachineHealthCheck::new(ns, "md-0", "prod")
        .select_labels([("pool", "md-0")])
        .unhealthy_node_condition("Ready", "Unknown", Duration::from_secs(2))
        .unhealthy_node_condition("Ready", "False", Duration::from_secs(2))
        .remediation_template(
            "remediation.nodefence.io/v1alpha1",
            "NodeFenceRemediationTemplate",
            TEMPLATE,
        );
    Api::<mhc::MachineHealthCheck>::namespaced(w.client.clone(), ns)
        .create(&PostParams::default(), &check)
        .await
        .unwrap();
    let _mhc = mhc::MachineHealthCheckController::with_rate_limit(
        w.client.clone(),
        Duration::from_secs(1),
    );
    let victim = "worker-2";
    w.cut_network(victim);
    // The request is named after the Machine and owned by it; nodefence finds the
    // node through the Machine's status.nodeRef.
    eventually("the Machine's request", Duration::from_secs(60), || async {
        request(&w, ns, "md-0-1").await.is_some()
    })
    .await;
    eventually("released", Duration::from_secs(60), || async {
        w.has_out_of_service_taint(victim)
    })
    .await;
    assert_eq!(force_offs(&w, victim), 1);
    wait_condition(&w, ns, "md-0-1", condition::SUCCEEDED, ("True", "Released")).await;
    let r = request(&w, ns, "md-0-1").await.unwrap();
    assert_eq!(r.status.unwrap().node_name.as_deref(), Some(victim));
    for other in ["worker-1", "worker-3"] {
        assert_eq!(force_offs(&w, other), 0);
        assert!(!w.has_out_of_service_taint(other));
    }
    let _ = requests(&w, ns)
        .delete("md-0-1", &DeleteParams::default())
        .await;
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_component_grants_exactly_what_answering_a_request_needs() {
    // The daemon runs as the ServiceAccount with the base's and the component's RBAC
    // only (fake-kube answers 403 to anything else); NodeHealthCheck as an admin.
    let w = start(WorldBuilder::new().rbac(deploy_rbac(&["remediation"]))).await;
    create_nhc(&w, node_health_check().remediation_template(template_ref())).await;
    let _nhc = nhc::NodeHealthCheckController::spawn(w.client.clone());
    let victim = "worker-3";
    w.cut_network(victim);
    eventually("released", Duration::from_secs(60), || async {
        w.has_out_of_service_taint(victim)
    })
    .await;
    wait_condition(
        &w,
        NAMESPACE,
        victim,
        condition::SUCCEEDED,
        ("True", "Released"),
    )
    .await;
    eventually("the finalizer", Duration::from_secs(10), || async {
        request(&w, NAMESPACE, victim).await.is_some_and(|r| {
            r.metadata
                .finalizers
                .unwrap_or_default()
                .iter()
                .any(|f| f == TAINT_FINALIZER)
        })
    })
    .await;
    assert_eq!(w.forbidden_requests(), Vec::<String>::new());
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_the_component_and_shows_requests_with_their_conditions() {
    let Some(kubectl) = kubectl() else { return };
    // The replica starts before the CRDs exist (the component applied after
    // nodefence): it goes on without requests until the watch finds them.
    let w = WorldBuilder::new()
        .kube_tls()
        .agent_toml("[remediation]\nrequests = true\n")
        .start()
        .await;
    let kubeconfig = w._dir.path().join("kubeconfig");
    w.kube.write_kubeconfig(&kubeconfig).unwrap();
    let run = |args: Vec<String>, stdin: Option<String>| {
        let kubectl = kubectl.clone();
        let kubeconfig = kubeconfig.clone();
        async move {
            use tokio::io::AsyncWriteExt as _;
            let mut child = tokio::process::Command::new(&kubectl)
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(&args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut input = child.stdin.take().unwrap();
            input
                .write_all(stdin.unwrap_or_default().as_bytes())
                .await
                .unwrap();
            drop(input);
            let out = child.wait_with_output().await.unwrap();
            assert!(
                out.status.success(),
                "kubectl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/components/remediation");
    let namespace = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: nodefence\n";
    run(
        vec!["apply".into(), "-f".into(), "-".into()],
        Some(namespace.into()),
    )
    .await;
    for file in ["crds.yaml", "template.yaml"] {
        let out = run(
            vec![
                "apply".into(),
                "-f".into(),
                dir.join(file).display().to_string(),
            ],
            None,
        )
        .await;
        assert!(out.contains("created"), "{out}");
    }
    let crds = run(vec!["get".into(), "crds".into()], None).await;
    assert!(
        crds.contains("nodefenceremediations.remediation.nodefence.io")
            && crds.contains("nodefenceremediationtemplates.remediation.nodefence.io"),
        "{crds}"
    );
    let templates = run(
        vec!["get".into(), "nfrt".into(), "-n".into(), NAMESPACE.into()],
        None,
    )
    .await;
    assert!(templates.contains("nodefence"), "{templates}");
    // A request as NodeHealthCheck writes it (a generated name, the node in the
    // annotation), for a node that has lost power.
    let victim = "worker-2";
    w.pull_plug(victim);
    let request = format!(
        "apiVersion: remediation.nodefence.io/v1alpha1\nkind: NodeFenceRemediation\n\
         metadata:\n  name: {victim}-x7k2p\n  namespace: {NAMESPACE}\n  annotations:\n    \
         remediation.medik8s.io/node-name: {victim}\nspec: {{}}\n"
    );
    run(vec!["apply".into(), "-f".into(), "-".into()], Some(request)).await;
    wait_condition(
        &w,
        NAMESPACE,
        &format!("{victim}-x7k2p"),
        condition::SUCCEEDED,
        ("True", "Released"),
    )
    .await;
    let table = run(vec!["get".into(), "nfr".into(), "-A".into()], None).await;
    let header = table.lines().next().unwrap_or_default().to_string();
    for column in [
        "NAMESPACE",
        "NAME",
        "NODE",
        "PROCESSING",
        "SUCCEEDED",
        "AGE",
    ] {
        assert!(header.contains(column), "{table}");
    }
    let row = table
        .lines()
        .find(|l| l.contains(&format!("{victim}-x7k2p")))
        .unwrap_or_else(|| panic!("{table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cells[..5],
        [
            NAMESPACE,
            &format!("{victim}-x7k2p"),
            victim,
            "Released",
            "True"
        ],
        "{table}"
    );
    let yaml = run(
        vec![
            "get".into(),
            "nfr".into(),
            format!("{victim}-x7k2p"),
            "-n".into(),
            NAMESPACE.into(),
            "-o".into(),
            "yaml".into(),
        ],
        None,
    )
    .await;
    assert!(
        yaml.contains("type: PermanentNodeDeletionExpected"),
        "{yaml}"
    );
    w.stop().await;
}
