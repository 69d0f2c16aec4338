//! fake-kube through kube-rs, the client nodefence uses: discovery, CRUD, the
//! status subresource, the three patch kinds, optimistic concurrency, graceful pod
//! deletion, selectors, pagination and authentication, all over real HTTP(S).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_common;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Pod};
use k8s_openapi::api::events::v1::Event as EventsV1;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::Discovery;
use kube::{Error, ResourceExt};
use kube_common::{client, node, pod, start};
use serde_json::json;

fn api_code(e: &Error) -> u16 {
    match e {
        Error::Api(s) => s.code,
        other => panic!("not an API error: {other:?}"),
    }
}

fn taint_keys(n: &Node) -> Vec<String> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|t| t.iter().map(|t| t.key.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn version_and_both_discovery_flavours() {
    let kube = start(true).await;
    let c = client(&kube).await;
    let v = c.apiserver_version().await.unwrap();
    assert_eq!((v.major.as_str(), v.minor.as_str()), ("1", "33"));
    for discovery in [
        Discovery::new(c.clone()).run().await.unwrap(),
        Discovery::new(c.clone()).run_aggregated().await.unwrap(),
    ] {
        let groups: Vec<String> = discovery.groups().map(|g| g.name().to_owned()).collect();
        for g in ["", "coordination.k8s.io", "storage.k8s.io", "events.k8s.io"] {
            assert!(groups.contains(&g.to_owned()), "{g} in {groups:?}");
        }
        let (_, caps) = discovery
            .groups()
            .find(|g| g.name() == "storage.k8s.io")
            .unwrap()
            .recommended_kind("VolumeAttachment")
            .unwrap();
        assert_eq!(caps.scope, kube::discovery::Scope::Cluster);
    }
}

#[tokio::test]
async fn node_crud_and_delete_answers_with_a_status() {
    let kube = start(false).await;
    let nodes: Api<Node> = Api::all(client(&kube).await);
    let created = nodes
        .create(&PostParams::default(), &node("worker-1", json!({"a": "1"})))
        .await
        .unwrap();
    assert!(created.uid().is_some() && created.resource_version().is_some());
    assert_eq!(
        nodes
            .create(&PostParams::default(), &node("worker-1", json!({})))
            .await
            .map(|_| ())
            .map_err(|e| api_code(&e)),
        Err(409)
    );
    let mut got = nodes.get("worker-1").await.unwrap();
    got.labels_mut().insert("b".into(), "2".into());
    let replaced = nodes
        .replace("worker-1", &PostParams::default(), &got)
        .await
        .unwrap();
    assert_eq!(replaced.labels().get("b").map(String::as_str), Some("2"));
    let list = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert!(list.metadata.resource_version.is_some());
    // A Node delete answers with a Status (no ReturnDeletedObject for nodes).
    let deleted = nodes
        .delete("worker-1", &DeleteParams::default())
        .await
        .unwrap();
    let status = deleted.right().expect("a Status");
    assert_eq!(status.details.unwrap().name, "worker-1");
    assert_eq!(api_code(&nodes.get("worker-1").await.unwrap_err()), 404);
}

#[tokio::test]
async fn stale_replace_is_a_conflict() {
    let kube = start(false).await;
    let nodes: Api<Node> = Api::all(client(&kube).await);
    let first = nodes
        .create(&PostParams::default(), &node("n", json!({})))
        .await
        .unwrap();
    let mut fresh = first.clone();
    fresh.labels_mut().insert("x".into(), "1".into());
    nodes
        .replace("n", &PostParams::default(), &fresh)
        .await
        .unwrap();
    let mut stale = first;
    stale.labels_mut().insert("y".into(), "1".into());
    let err = nodes
        .replace("n", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), 409);
    let Error::Api(s) = err else { unreachable!() };
    assert_eq!(s.reason, "Conflict");
    // A write aimed at an object that was deleted and re-created is refused by uid.
    let old = nodes.get("n").await.unwrap();
    nodes.delete("n", &DeleteParams::default()).await.unwrap();
    nodes
        .create(&PostParams::default(), &node("n", json!({})))
        .await
        .unwrap();
    let mut unconditional = old;
    unconditional.metadata.resource_version = None;
    let err = nodes
        .replace("n", &PostParams::default(), &unconditional)
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), 409);
}

#[tokio::test]
async fn strategic_merge_replaces_taints_and_merges_conditions() {
    let kube = start(false).await;
    let nodes: Api<Node> = Api::all(client(&kube).await);
    let mut n = node("worker-1", json!({}));
    n.spec.get_or_insert_default().taints = Some(
        serde_json::from_value(json!([
        {"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]))
        .unwrap(),
    );
    nodes.create(&PostParams::default(), &n).await.unwrap();
    let pp = PatchParams::default();

    // spec.taints has no merge key: the patch's list is the new list.
    let patched = nodes
        .patch(
            "worker-1",
            &pp,
            &Patch::Strategic(json!({"spec": {"taints": [
                {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(taint_keys(&patched), ["node.kubernetes.io/out-of-service"]);

    // status.conditions merge by type, and only through /status.
    let patch = Patch::Strategic(json!({"status": {"conditions": [
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]}}));
    let ignored = nodes.patch("worker-1", &pp, &patch).await.unwrap();
    let ready = |n: &Node| {
        let c = n.status.as_ref().unwrap().conditions.as_ref().unwrap();
        (
            c.len(),
            c.iter()
                .find(|c| c.type_ == "Ready")
                .unwrap()
                .status
                .clone(),
        )
    };
    assert_eq!(
        ready(&ignored),
        (2, "True".to_owned()),
        "main resource keeps status"
    );
    let patched = nodes.patch_status("worker-1", &pp, &patch).await.unwrap();
    assert_eq!(ready(&patched), (2, "Unknown".to_owned()));

    // Merge patch: labels merge, null deletes.
    let merged = nodes
        .patch(
            "worker-1",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(merged.labels().get("x").map(String::as_str), Some("1"));

    // JSON patch: a failing test op is 422 and changes nothing.
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/unschedulable", "value": true},
        {"op": "add", "path": "/spec/unschedulable", "value": true}]))
    .unwrap();
    let err = nodes
        .patch("worker-1", &pp, &Patch::<()>::Json(ops))
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), 422);
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/spec/unschedulable", "value": true}]))
    .unwrap();
    let cordoned = nodes
        .patch("worker-1", &pp, &Patch::<()>::Json(ops))
        .await
        .unwrap();
    assert_eq!(cordoned.spec.unwrap().unschedulable, Some(true));

    // A resourceVersion in the patch body is a precondition.
    let stale = Patch::Merge(json!({"metadata": {"resourceVersion": "1", "labels": {"y": "1"}}}));
    assert_eq!(
        api_code(&nodes.patch("worker-1", &pp, &stale).await.unwrap_err()),
        409
    );
}

#[tokio::test]
async fn a_bound_pod_terminates_until_force_deleted() {
    let kube = start(false).await;
    let pods: Api<Pod> = Api::namespaced(client(&kube).await, "default");
    pods.create(
        &PostParams::default(),
        &pod("web-0", Some("worker-1"), json!({})),
    )
    .await
    .unwrap();
    let graceful = pods
        .delete("web-0", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("the pod, kept");
    assert!(graceful.metadata.deletion_timestamp.is_some());
    assert_eq!(graceful.metadata.deletion_grace_period_seconds, Some(30));
    // Nobody (no kubelet) confirms: it stays Terminating.
    assert!(
        pods.get("web-0")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let forced = pods
        .delete("web-0", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert!(forced.is_left(), "pods answer with the deleted object");
    assert_eq!(api_code(&pods.get("web-0").await.unwrap_err()), 404);

    // An unscheduled pod goes at once, whatever the grace period.
    pods.create(&PostParams::default(), &pod("pending", None, json!({})))
        .await
        .unwrap();
    pods.delete("pending", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(api_code(&pods.get("pending").await.unwrap_err()), 404);
    // Creation in a missing namespace is a 404, as on a real server.
    let elsewhere: Api<Pod> = Api::namespaced(client(&kube).await, "nope");
    let err = elsewhere
        .create(&PostParams::default(), &pod("p", None, json!({})))
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), 404);
}

#[tokio::test]
async fn leases_have_optimistic_concurrency() {
    let kube = start(true).await;
    let leases: Api<Lease> = Api::namespaced(client(&kube).await, "kube-node-lease");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "worker-1"},
        "spec": {"holderIdentity": "worker-1", "leaseDurationSeconds": 40}}))
    .unwrap();
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    // Two contenders read the same version; only the first write wins.
    let mut a = created.clone();
    a.spec.as_mut().unwrap().holder_identity = Some("nodefence-a".into());
    let mut b = created;
    b.spec.as_mut().unwrap().holder_identity = Some("nodefence-b".into());
    leases
        .replace("worker-1", &PostParams::default(), &a)
        .await
        .unwrap();
    let lost = leases
        .replace("worker-1", &PostParams::default(), &b)
        .await
        .unwrap_err();
    assert_eq!(api_code(&lost), 409);
    let now = leases.get("worker-1").await.unwrap();
    assert_eq!(
        now.spec.unwrap().holder_identity.as_deref(),
        Some("nodefence-a")
    );
}

#[tokio::test]
async fn volume_attachments_and_both_event_apis() {
    let kube = start(false).await;
    let c = client(&kube).await;
    let vas: Api<VolumeAttachment> = Api::all(c.clone());
    let va: VolumeAttachment = serde_json::from_value(json!({
        "metadata": {"name": "csi-1"},
        "spec": {"attacher": "ebs.csi.aws.com", "nodeName": "worker-1",
                 "source": {"persistentVolumeName": "pv-1"}},
        "status": {"attached": true}}))
    .unwrap();
    let created = vas.create(&PostParams::default(), &va).await.unwrap();
    assert!(!created.status.unwrap().attached, "create resets status");
    let attached = vas
        .patch_status(
            "csi-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"attached": true}})),
        )
        .await
        .unwrap();
    assert!(attached.status.unwrap().attached);
    vas.delete("csi-1", &DeleteParams::default()).await.unwrap();
    assert!(
        vas.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    let core: Api<CoreEvent> = Api::namespaced(c.clone(), "default");
    let ev: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "worker-1.fenced"},
        "involvedObject": {"kind": "Node", "name": "worker-1"},
        "reason": "Fenced", "type": "Normal", "message": "powered off"}))
    .unwrap();
    core.create(&PostParams::default(), &ev).await.unwrap();
    let by_object = core
        .list(&ListParams::default().fields("involvedObject.name=worker-1,reason=Fenced"))
        .await
        .unwrap();
    assert_eq!(by_object.items.len(), 1);
    // events.k8s.io is a separate type here (the real server shares storage).
    let v1: Api<EventsV1> = Api::namespaced(c, "default");
    assert!(
        v1.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let ev: EventsV1 = serde_json::from_value(json!({
        "metadata": {"name": "e2"}, "eventTime": "2025-01-01T00:00:00.000000Z",
        "reason": "Fenced", "action": "PowerOff", "reportingController": "nodefence",
        "reportingInstance": "nodefence-0", "regarding": {"kind": "Node", "name": "worker-1"}}))
    .unwrap();
    v1.create(&PostParams::default(), &ev).await.unwrap();
    let listed = v1
        .list(&ListParams::default().fields("regarding.name=worker-1"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
}

#[tokio::test]
async fn selectors_and_pagination() {
    let kube = start(false).await;
    let c = client(&kube).await;
    let nodes: Api<Node> = Api::all(c.clone());
    for i in 0..5 {
        let role = if i == 0 { "control-plane" } else { "worker" };
        nodes
            .create(
                &PostParams::default(),
                &node(&format!("n{i}"), json!({"role": role})),
            )
            .await
            .unwrap();
    }
    let mut names = Vec::new();
    let mut lp = ListParams::default().limit(2);
    let mut pages = 0;
    loop {
        let page = nodes.list(&lp).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 2);
        names.extend(page.items.iter().map(|n| n.name_any()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp = lp.continue_token(&token),
            None => break,
        }
    }
    assert_eq!((pages, names.len()), (3, 5));
    let workers = nodes
        .list(&ListParams::default().labels("role in (worker),role!=control-plane"))
        .await
        .unwrap();
    assert_eq!(workers.items.len(), 4);
    let meta = nodes
        .list_metadata(&ListParams::default().labels("role=control-plane"))
        .await
        .unwrap();
    assert_eq!(meta.items[0].name_any(), "n0");

    let pods: Api<Pod> = Api::all(c.clone());
    let in_default: Api<Pod> = Api::namespaced(c.clone(), "default");
    in_default
        .create(&PostParams::default(), &pod("a", Some("n1"), json!({})))
        .await
        .unwrap();
    in_default
        .create(&PostParams::default(), &pod("b", Some("n2"), json!({})))
        .await
        .unwrap();
    let on_n1 = pods
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .unwrap();
    assert_eq!(
        on_n1.items.iter().map(|p| p.name_any()).collect::<Vec<_>>(),
        ["a"]
    );
    let err = pods
        .list(&ListParams::default().fields("spec.nodeNam=n1"))
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), 400);
}

#[tokio::test]
async fn a_wrong_or_missing_token_is_401() {
    let kube = start(true).await;
    let yaml = kube.kubeconfig_yaml().replace(&kube.token(), "wrong");
    let nodes: Api<Node> = Api::all(kube_common::client_from_yaml(&yaml).await);
    assert_eq!(
        api_code(&nodes.list(&ListParams::default()).await.unwrap_err()),
        401
    );
    let anonymous = kube_common::http(&kube)
        .get(format!("{}/api/v1/nodes", kube.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let body: serde_json::Value = anonymous.json().await.unwrap();
    assert_eq!(
        (body["kind"].as_str(), body["reason"].as_str()),
        (Some("Status"), Some("Unauthorized"))
    );
    // Health and version stay public.
    for path in ["/healthz", "/livez", "/readyz", "/version"] {
        let r = kube_common::http(&kube)
            .get(format!("{}{path}", kube.base_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}");
    }
}

/// A projected token bound to a pod on a node, reviewed as the API server reviews
/// it: authenticated only for an audience it carries (`status.audiences` the
/// intersection), the pod and node in `status.user.extra`; revoked, not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_tokens_review_names_its_audiences_pod_and_node() {
    use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
    use nodefence_mocks::kube::BoundToken;

    let kube = start(false).await;
    let client = client(&kube).await;
    kube.issue_token(BoundToken {
        token: "companion-token".into(),
        user: "system:serviceaccount:nodefence:nodefence-companion".into(),
        audiences: vec!["nodefence-companion".into()],
        pod: Some(("nodefence-companion-x7k2p".into(), "pod-uid-1".into())),
        node: Some(("worker-1".into(), "node-uid-1".into())),
    });
    let reviews: Api<TokenReview> = Api::all(client);
    let review = |token: &str, audiences: Option<Vec<String>>| {
        let reviews = reviews.clone();
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.into()),
                audiences,
            },
            ..Default::default()
        };
        async move {
            reviews
                .create(&PostParams::default(), &review)
                .await
                .unwrap()
                .status
                .unwrap()
        }
    };
    let ok = review(
        "companion-token",
        Some(vec!["nodefence-companion".into(), "other".into()]),
    )
    .await;
    assert_eq!(ok.authenticated, Some(true));
    assert_eq!(ok.audiences, Some(vec!["nodefence-companion".to_string()]));
    let user = ok.user.unwrap();
    assert_eq!(
        user.username.as_deref(),
        Some("system:serviceaccount:nodefence:nodefence-companion")
    );
    let extra = user.extra.unwrap();
    assert_eq!(
        extra["authentication.kubernetes.io/node-name"],
        ["worker-1"]
    );
    assert_eq!(
        extra["authentication.kubernetes.io/node-uid"],
        ["node-uid-1"]
    );
    assert_eq!(
        extra["authentication.kubernetes.io/pod-name"],
        ["nodefence-companion-x7k2p"]
    );
    // Another audience, or none (the API server's own): not authenticated.
    for audiences in [Some(vec!["someone-else".to_string()]), None] {
        let no = review("companion-token", audiences).await;
        assert_ne!(no.authenticated, Some(true));
        assert!(
            no.error
                .unwrap()
                .contains("is invalid for the target audiences")
        );
    }
    kube.revoke_token("companion-token");
    let gone = review("companion-token", Some(vec!["nodefence-companion".into()])).await;
    assert_ne!(gone.authenticated, Some(true));
    kube.shutdown().await;
}
