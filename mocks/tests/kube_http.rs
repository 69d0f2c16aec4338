//! fake-kube over raw HTTP, for what kube-rs hides: response shapes, status codes
//! and `Status` reasons, content negotiation (Tables, aggregated discovery,
//! metadata), the status subresource, deletecollection and the request log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_common;

use kube_common::{get_json, send, start};
use nodefence_mocks::kube::resources::{NODES, PODS};
use reqwest::Method;
use serde_json::json;

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
const JSON: &str = "application/json";

fn seed(kube: &nodefence_mocks::kube::FakeKubeHandle) {
    let s = kube.store();
    s.create(NODES, None, json!({"metadata": {"name": "worker-1", "labels": {"node-role.kubernetes.io/worker": ""}},
        "spec": {"unschedulable": true},
        "status": {"conditions": [{"type": "Ready", "status": "False"}], "nodeInfo": {"kubeletVersion": "v1.33.4"}}}))
        .unwrap();
    s.create(PODS, Some("default"), json!({"metadata": {"name": "web-0"},
        "spec": {"nodeName": "worker-1", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}}))
        .unwrap();
}

#[tokio::test]
async fn lists_objects_and_tables_have_the_real_shapes() {
    let kube = start(false).await;
    seed(&kube);
    let (code, list) = get_json(&kube, "/api/v1/nodes", Some(JSON)).await;
    assert_eq!(code, 200);
    assert_eq!(
        (list["kind"].as_str(), list["apiVersion"].as_str()),
        (Some("NodeList"), Some("v1"))
    );
    assert!(list["metadata"]["resourceVersion"].as_str().is_some());
    assert_eq!(list["items"][0]["kind"], "Node");

    let (_, table) = get_json(&kube, "/api/v1/nodes", Some(TABLE)).await;
    assert_eq!(
        (table["kind"].as_str(), table["apiVersion"].as_str()),
        (Some("Table"), Some("meta.k8s.io/v1"))
    );
    let cols: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["priority"] == 0)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, ["Name", "Status", "Roles", "Age", "Version"]);
    let cells = &table["rows"][0]["cells"];
    assert_eq!(
        (cells[1].as_str(), cells[2].as_str()),
        (Some("NotReady,SchedulingDisabled"), Some("worker"))
    );
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");

    // Deleting a bound pod makes it Terminating, in the table too.
    let (code, _) = send(
        &kube,
        Method::DELETE,
        "/api/v1/namespaces/default/pods/web-0",
        JSON,
        "",
    )
    .await;
    assert_eq!(code, 200);
    let (_, pods) = get_json(
        &kube,
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dworker-1",
        Some(TABLE),
    )
    .await;
    assert_eq!(pods["rows"][0]["cells"][2], "Terminating");

    let (_, one) = get_json(
        &kube,
        "/api/v1/nodes/worker-1",
        Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"),
    )
    .await;
    assert_eq!(
        (one["kind"].as_str(), one["metadata"]["name"].as_str()),
        (Some("PartialObjectMetadata"), Some("worker-1"))
    );
    assert!(one.get("spec").is_none());
}

#[tokio::test]
async fn discovery_documents() {
    let kube = start(false).await;
    let resp = kube_common::http(&kube)
        .get(format!("{}/apis", kube.base_url()))
        .bearer_auth(kube.token())
        .header(
            "Accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
        )
        .send()
        .await
        .unwrap();
    let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert_eq!(
        ct,
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["kind"], "APIGroupDiscoveryList");
    let (_, legacy) = get_json(&kube, "/apis", Some(JSON)).await;
    assert_eq!(legacy["kind"], "APIGroupList");
    assert_eq!(legacy["groups"][0]["preferredVersion"]["version"], "v1");
    let (_, core) = get_json(&kube, "/api/v1", None).await;
    let names: Vec<&str> = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"pods/status") && names.contains(&"nodes"));
    let (code, _) = get_json(&kube, "/apis/storage.k8s.io/v1", None).await;
    assert_eq!(code, 200);
    let (code, body) = get_json(&kube, "/openapi/v2", None).await;
    assert_eq!((code, body["kind"].as_str()), (404, Some("Status")));
}

#[tokio::test]
async fn error_statuses() {
    let kube = start(false).await;
    seed(&kube);
    let reason = |b: &serde_json::Value| b["reason"].as_str().unwrap_or_default().to_owned();
    let (code, b) = get_json(&kube, "/api/v1/nodes/nope", None).await;
    assert_eq!(
        (code, reason(&b), b["message"].as_str()),
        (404, "NotFound".into(), Some("nodes \"nope\" not found"))
    );
    let (code, b) = get_json(&kube, "/apis/batch/v1/jobs", None).await;
    assert_eq!((code, reason(&b)), (404, "NotFound".into()));
    let (code, b) = send(&kube, Method::POST, "/api/v1/nodes/worker-1", JSON, "{}").await;
    assert_eq!((code, reason(&b)), (405, "MethodNotAllowed".into()));
    let (code, b) = send(
        &kube,
        Method::PATCH,
        "/api/v1/nodes/worker-1",
        "application/apply-patch+yaml",
        "{}",
    )
    .await;
    assert_eq!((code, reason(&b)), (415, "UnsupportedMediaType".into()));
    assert!(b["message"].as_str().unwrap().contains("fake-kube"));
    let (code, b) = send(
        &kube,
        Method::POST,
        "/api/v1/nodes",
        "application/yaml",
        "metadata: {}",
    )
    .await;
    assert_eq!((code, reason(&b)), (415, "UnsupportedMediaType".into()));
    let (code, b) = send(&kube, Method::POST, "/api/v1/nodes", JSON, "{not json").await;
    assert_eq!((code, reason(&b)), (400, "BadRequest".into()));
    let (code, b) = send(
        &kube,
        Method::POST,
        "/api/v1/nodes",
        JSON,
        r#"{"kind":"Pod","metadata":{"name":"x"}}"#,
    )
    .await;
    assert_eq!((code, reason(&b)), (400, "BadRequest".into()));
    let (code, b) = send(
        &kube,
        Method::POST,
        "/api/v1/nodes",
        JSON,
        r#"{"metadata":{"name":"Bad_Name"}}"#,
    )
    .await;
    assert_eq!((code, reason(&b)), (422, "Invalid".into()));
    let (code, b) = send(
        &kube,
        Method::POST,
        "/api/v1/nodes?dryRun=All",
        JSON,
        r#"{"metadata":{"name":"x"}}"#,
    )
    .await;
    assert_eq!((code, reason(&b)), (400, "BadRequest".into()));
    let (code, b) = get_json(&kube, "/api/v1/nodes?labelSelector=a%20in%20b", None).await;
    assert_eq!((code, reason(&b)), (400, "BadRequest".into()));
    let (code, b) = get_json(&kube, "/api/v1/nodes?fieldSelector=spec.taints%3Dx", None).await;
    assert_eq!(
        (code, b["message"].as_str()),
        (400, Some("field label not supported: spec.taints"))
    );
    let (code, _) = get_json(&kube, "/api/v1/nodes?continue=garbage", None).await;
    assert_eq!(code, 400);
    let (code, _) = get_json(
        &kube,
        "/api/v1/nodes",
        Some("application/vnd.kubernetes.protobuf"),
    )
    .await;
    assert_eq!(code, 406);
}

#[tokio::test]
async fn status_subresource_splits_writes() {
    let kube = start(false).await;
    seed(&kube);
    let (_, current) = get_json(&kube, "/api/v1/nodes/worker-1", None).await;
    let mut changed = current.clone();
    changed["spec"]["unschedulable"] = json!(false);
    changed["status"]["conditions"][0]["status"] = json!("True");
    let (code, main) = send(
        &kube,
        Method::PUT,
        "/api/v1/nodes/worker-1",
        JSON,
        &changed.to_string(),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        (
            main["spec"]["unschedulable"].as_bool(),
            main["status"]["conditions"][0]["status"].as_str()
        ),
        (Some(false), Some("False"))
    );
    let mut changed = main.clone();
    changed["spec"]["unschedulable"] = json!(true);
    changed["status"]["conditions"][0]["status"] = json!("True");
    let (code, status) = send(
        &kube,
        Method::PUT,
        "/api/v1/nodes/worker-1/status",
        JSON,
        &changed.to_string(),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        (
            status["spec"]["unschedulable"].as_bool(),
            status["status"]["conditions"][0]["status"].as_str()
        ),
        (Some(false), Some("True"))
    );
    let (code, _) = get_json(&kube, "/api/v1/namespaces/default/secrets/x/status", None).await;
    assert_eq!(code, 404, "no status subresource for secrets");
}

#[tokio::test]
async fn finalizers_hold_deletion_and_deletecollection_uses_selectors() {
    let kube = start(false).await;
    let body = json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"], "labels": {"g": "1"}}});
    send(
        &kube,
        Method::POST,
        "/api/v1/persistentvolumes",
        JSON,
        &body.to_string(),
    )
    .await;
    send(
        &kube,
        Method::POST,
        "/api/v1/persistentvolumes",
        JSON,
        r#"{"metadata":{"name":"free","labels":{"g":"1"}}}"#,
    )
    .await;
    send(
        &kube,
        Method::POST,
        "/api/v1/persistentvolumes",
        JSON,
        r#"{"metadata":{"name":"other"}}"#,
    )
    .await;
    let (code, list) = send(
        &kube,
        Method::DELETE,
        "/api/v1/persistentvolumes?labelSelector=g%3D1",
        JSON,
        "",
    )
    .await;
    assert_eq!(
        (code, list["kind"].as_str()),
        (200, Some("PersistentVolumeList"))
    );
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    let (code, held) = get_json(&kube, "/api/v1/persistentvolumes/held", None).await;
    assert_eq!(code, 200);
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        get_json(&kube, "/api/v1/persistentvolumes/free", None)
            .await
            .0,
        404
    );
    assert_eq!(
        get_json(&kube, "/api/v1/persistentvolumes/other", None)
            .await
            .0,
        200
    );
    // Removing the last finalizer completes the deletion.
    let (code, _) = send(
        &kube,
        Method::PATCH,
        "/api/v1/persistentvolumes/held",
        "application/merge-patch+json",
        r#"{"metadata":{"finalizers":null}}"#,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        get_json(&kube, "/api/v1/persistentvolumes/held", None)
            .await
            .0,
        404
    );
}

#[tokio::test]
async fn request_log_shows_what_clients_did() {
    let kube = start(false).await;
    seed(&kube);
    kube.clear_request_log();
    get_json(&kube, "/api/v1/nodes?limit=1", None).await;
    send(&kube, Method::DELETE, "/api/v1/nodes/nope", JSON, "").await;
    let log = kube.request_log();
    assert_eq!(
        log,
        [
            ("GET".to_owned(), "/api/v1/nodes?limit=1".to_owned(), 200),
            ("DELETE".to_owned(), "/api/v1/nodes/nope".to_owned(), 404),
        ]
    );
    assert!(
        !log.iter().any(|(m, _, s)| m != "GET" && *s < 300),
        "no mutation succeeded"
    );
}
