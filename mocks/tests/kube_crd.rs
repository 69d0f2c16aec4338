//! CustomResourceDefinitions through kube-rs and raw HTTP: a CRD becomes
//! `Established` and its served versions real resource types (discovery, REST
//! paths, watches, patches, graceful deletion, tables), their objects are pruned,
//! defaulted and validated against the schema, the status subresource isolates
//! what each endpoint writes, and deleting the CRD takes its objects and routes
//! with it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_common;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::discovery::Discovery;
use kube::{Client, Error, ResourceExt};
use kube_common::{client, get_json, send, start};
use nodefence_mocks::kube::FakeKubeHandle;
use reqwest::Method;
use serde_json::{Value, json};

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

fn api_status(e: &Error) -> (u16, String) {
    match e {
        Error::Api(s) => (s.code, s.message.clone()),
        other => panic!("not an API error: {other:?}"),
    }
}

/// A namespaced `Widget` with a status subresource, printer columns, a schema
/// exercising types, required fields, enums, defaults and maps, and a second
/// served version.
fn widget_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [
                {
                    "name": "v1",
                    "served": true,
                    "storage": true,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                        {"name": "Ready", "type": "string",
                         "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
                        {"name": "Color", "type": "string", "jsonPath": ".spec.color", "priority": 1},
                    ],
                    "schema": {"openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1},
                                    "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "phase": {"type": "string"},
                                    "conditions": {"type": "array", "items": {
                                        "type": "object",
                                        "properties": {"type": {"type": "string"}, "status": {"type": "string"}},
                                    }},
                                },
                            },
                        },
                    }},
                },
                {
                    "name": "v1beta1",
                    "served": true,
                    "storage": false,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                },
            ],
        },
    }))
    .unwrap()
}

fn widget_resource(version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", version, "Widget"),
        "widgets",
    )
}

fn widgets(c: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(c.clone(), "default", &widget_resource("v1"))
}

fn widget(name: &str, spec: Value) -> DynamicObject {
    DynamicObject::new(name, &widget_resource("v1")).data(json!({"spec": spec}))
}

/// A server with the Widget CRD created (and checked Established).
async fn with_widgets() -> (FakeKubeHandle, Client) {
    let kube = start(false).await;
    let c = client(&kube).await;
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let created = crds
        .create(&PostParams::default(), &widget_crd())
        .await
        .unwrap();
    let established = created
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
    assert!(established, "{:?}", created.status);
    (kube, c)
}

#[tokio::test]
async fn a_created_crd_is_established_and_its_type_discoverable() {
    let (kube, c) = with_widgets().await;
    let crd: Api<CustomResourceDefinition> = Api::all(c.clone());
    let got = crd.get("widgets.example.com").await.unwrap();
    let status = got.status.unwrap();
    let conditions = status.conditions.unwrap();
    let names = conditions
        .iter()
        .find(|c| c.type_ == "NamesAccepted")
        .unwrap();
    assert_eq!(
        (
            names.status.as_str(),
            names.reason.as_deref(),
            names.message.as_deref()
        ),
        ("True", Some("NoConflicts"), Some("no conflicts found"))
    );
    let est = conditions
        .iter()
        .find(|c| c.type_ == "Established")
        .unwrap();
    assert_eq!(
        (est.reason.as_deref(), est.message.as_deref()),
        (
            Some("InitialNamesAccepted"),
            Some("the initial names have been accepted")
        )
    );
    assert!(est.last_transition_time.is_some());
    let accepted = status.accepted_names.unwrap();
    assert_eq!(accepted.kind, "Widget");
    assert_eq!(accepted.list_kind.as_deref(), Some("WidgetList"));
    assert_eq!(accepted.singular.as_deref(), Some("widget"));
    assert_eq!(accepted.short_names, Some(vec!["wd".to_owned()]));
    assert_eq!(status.stored_versions, Some(vec!["v1".to_owned()]));
    assert_eq!(got.metadata.generation, Some(1));

    for discovery in [
        Discovery::new(c.clone()).run().await.unwrap(),
        Discovery::new(c.clone()).run_aggregated().await.unwrap(),
    ] {
        let group = discovery
            .get("example.com")
            .expect("example.com discovered");
        assert_eq!(group.preferred_version_or_latest(), "v1");
        let (ar, caps) = group.recommended_kind("Widget").unwrap();
        assert_eq!((ar.plural.as_str(), ar.version.as_str()), ("widgets", "v1"));
        assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
        assert!(
            caps.subresources
                .iter()
                .any(|(s, _)| s.plural == "widgets/status" || s.plural == "status")
        );
        let gvk = GroupVersionKind::gvk("example.com", "v1beta1", "Widget");
        assert!(discovery.resolve_gvk(&gvk).is_some(), "v1beta1 served too");
    }
    let (code, group) = get_json(&kube, "/apis/example.com", None).await;
    assert_eq!(code, 200);
    assert_eq!(group["preferredVersion"]["version"], "v1");
    assert_eq!(group["versions"][1]["version"], "v1beta1");
    let (_, list) = get_json(&kube, "/apis/example.com/v1", None).await;
    let resources: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(resources, ["widgets", "widgets/status"]);
    assert_eq!(list["resources"][0]["shortNames"], json!(["wd"]));
    assert_eq!(list["resources"][0]["kind"], "Widget");
    let (_, openapi) = get_json(&kube, "/openapi/v3", None).await;
    assert!(openapi["paths"]["apis/example.com/v1"].is_object());
}

#[tokio::test]
async fn custom_resources_through_kube_rs() {
    let (_kube, c) = with_widgets().await;
    let api = widgets(&c);
    let mut stream = api
        .watch(&WatchParams::default().timeout(30), "0")
        .await
        .unwrap()
        .boxed();

    let mut w = widget("w1", json!({"size": 3}));
    w.labels_mut().insert("tier".into(), "front".into());
    let created = api.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(created.data["spec"]["color"], "red", "defaulted");
    assert!(created.uid().is_some());
    let generated = DynamicObject {
        metadata: kube::api::ObjectMeta {
            generate_name: Some("w-".into()),
            ..Default::default()
        },
        ..widget("", json!({"size": 1}))
    };
    let generated = api
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    assert!(generated.name_any().starts_with("w-") && generated.name_any().len() > 2);

    let got = api.get("w1").await.unwrap();
    assert_eq!(got.data["spec"]["size"], 3);
    assert_eq!(got.types.as_ref().unwrap().api_version, "example.com/v1");
    let front = api
        .list(&ListParams::default().labels("tier=front"))
        .await
        .unwrap();
    assert_eq!(front.items.len(), 1);
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=w1"))
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 1);
    let err = api
        .list(&ListParams::default().fields("spec.size=3"))
        .await
        .unwrap_err();
    assert_eq!(
        api_status(&err),
        (400, "field label not supported: spec.size".to_owned())
    );
    let everywhere: Api<DynamicObject> = Api::all_with(c.clone(), &widget_resource("v1"));
    assert_eq!(
        everywhere
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );

    let merged = api
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 4}})),
        )
        .await
        .unwrap();
    assert_eq!(merged.data["spec"]["size"], 4);
    assert_eq!(merged.metadata.generation, Some(2));
    let json_patched = api
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "test", "path": "/spec/size", "value": 4},
                    {"op": "replace", "path": "/spec/color", "value": "blue"},
                    {"op": "add", "path": "/metadata/finalizers", "value": ["example.com/hold"]},
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(json_patched.data["spec"]["color"], "blue");
    assert_eq!(json_patched.metadata.generation, Some(3));

    // Graceful deletion: the finalizer holds it, Terminating, until it is removed.
    api.delete("w1", &DeleteParams::default()).await.unwrap();
    let held = api.get("w1").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    api.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(api_status(&api.get("w1").await.unwrap_err()).0, 404);

    let mut seen = Vec::new();
    while seen.len() < 7 {
        let event = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
            .await
            .expect("watch event in time")
            .unwrap()
            .expect("stream open");
        let (kind, o) = match event {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            other => panic!("unexpected {other:?}"),
        };
        if o.name_any() == "w1" {
            seen.push(kind);
        } else {
            assert_eq!(kind, "ADDED");
            seen.push("ADDED-generated");
        }
    }
    assert_eq!(
        seen,
        [
            "ADDED",
            "ADDED-generated",
            "MODIFIED",
            "MODIFIED",
            "MODIFIED",
            "MODIFIED",
            "DELETED"
        ]
    );
    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn the_status_subresource_isolates_status_and_spec() {
    let (_kube, c) = with_widgets().await;
    let api = widgets(&c);
    let mut w = widget("w1", json!({"size": 1}));
    w.data["status"] = json!({"phase": "Ignored"});
    let created = api.create(&PostParams::default(), &w).await.unwrap();
    assert!(
        created.data.get("status").is_none(),
        "create cannot set status"
    );

    // /status writes status only.
    let s = api
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"size": 9}, "metadata": {"labels": {"x": "y"}},
                "status": {"phase": "Ready", "conditions": [{"type": "Ready", "status": "True"}]}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(s.data["status"]["phase"], "Ready");
    assert_eq!(s.data["spec"]["size"], 1, "spec unchanged through /status");
    assert!(
        s.labels().get("x").is_none(),
        "metadata unchanged through /status"
    );
    assert_eq!(
        s.metadata.generation,
        Some(1),
        "status changes keep the generation"
    );

    // The main resource keeps the stored status.
    let mut current = api.get("w1").await.unwrap();
    current.data["status"] = json!({"phase": "Overwritten"});
    current.data["spec"]["size"] = json!(2);
    current.labels_mut().insert("x".into(), "y".into());
    let replaced = api
        .replace("w1", &PostParams::default(), &current)
        .await
        .unwrap();
    assert_eq!(replaced.data["status"]["phase"], "Ready");
    assert_eq!(replaced.data["spec"]["size"], 2);
    assert_eq!(replaced.labels().get("x").map(String::as_str), Some("y"));
    assert_eq!(replaced.metadata.generation, Some(2));

    // No unconditional updates of custom resources.
    let mut blind = api.get("w1").await.unwrap();
    blind.metadata.resource_version = None;
    let err = api
        .replace("w1", &PostParams::default(), &blind)
        .await
        .unwrap_err();
    assert_eq!(
        api_status(&err),
        (
            422,
            "widgets.example.com \"w1\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update".to_owned()
        )
    );

    // Metadata-only changes keep the generation.
    let labelled = api
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"z": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(labelled.metadata.generation, Some(2));

    // replace_status with a stale spec changes only the status.
    let mut st = api.get_status("w1").await.unwrap();
    st.data["status"]["phase"] = json!("Done");
    st.data["spec"]["size"] = json!(100);
    let done = api
        .replace_status("w1", &PostParams::default(), &st)
        .await
        .unwrap();
    assert_eq!(done.data["status"]["phase"], "Done");
    assert_eq!(done.data["spec"]["size"], 2);

    // The status is validated against the schema's status, named from `status`.
    let err = api
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": 7}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        api_status(&err),
        (
            422,
            "Widget.example.com \"w1\" is invalid: status.phase: Invalid value: \"integer\": phase in body must be of type string: \"integer\"".to_owned()
        )
    );
}

#[tokio::test]
async fn schema_validation_names_the_fields_and_pruning_is_silent() {
    let (kube, c) = with_widgets().await;
    let api = widgets(&c);
    let err = api
        .create(
            &PostParams::default(),
            &widget("bad", json!({"size": "big", "color": "green"})),
        )
        .await
        .unwrap_err();
    let (code, message) = api_status(&err);
    assert_eq!(code, 422);
    assert_eq!(
        message,
        "Widget.example.com \"bad\" is invalid: [spec.color: Unsupported value: \"green\": supported values: \"red\", \"blue\", spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\"]"
    );
    let err = api
        .create(
            &PostParams::default(),
            &widget("bad", json!({"color": "blue"})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        api_status(&err),
        (
            422,
            "Widget.example.com \"bad\" is invalid: spec.size: Required value".to_owned()
        )
    );
    let err = api
        .create(&PostParams::default(), &widget("bad", json!({"size": 0})))
        .await
        .unwrap_err();
    assert!(
        api_status(&err).1.ends_with(
            "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"
        ),
        "{err:?}"
    );

    // The causes name each field, as controllers read them.
    let body = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "bad"}, "spec": {"size": "big", "labels": {"a": 1}}});
    let (code, status) = send(
        &kube,
        Method::POST,
        WIDGETS,
        "application/json",
        &body.to_string(),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["group"], "example.com");
    assert_eq!(status["details"]["kind"], "Widget");
    assert_eq!(status["details"]["name"], "bad");
    let causes: Vec<(&str, &str)> = status["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["field"].as_str().unwrap(), c["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        causes,
        [
            ("spec.labels.a", "FieldValueTypeInvalid"),
            ("spec.size", "FieldValueTypeInvalid")
        ]
    );

    // Unknown fields are dropped (with a warning by default), preserved where the
    // schema says so; metadata keeps only ObjectMeta.
    let body = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "pruned", "bogus": true},
        "spec": {"size": 2, "unknown": "x", "extra": {"anything": [1, {"a": 2}]}},
        "topLevel": 1});
    let resp = kube_common::http(&kube)
        .post(format!("{}{WIDGETS}", kube.base_url()))
        .bearer_auth(kube.token())
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let warnings: Vec<String> = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        warnings,
        [
            "299 - \"unknown field \\\"metadata.bogus\\\"\"",
            "299 - \"unknown field \\\"spec.unknown\\\"\"",
            "299 - \"unknown field \\\"topLevel\\\"\"",
        ]
    );
    let stored = api.get("pruned").await.unwrap();
    assert!(stored.data.get("topLevel").is_none());
    assert!(stored.data["spec"].get("unknown").is_none());
    assert_eq!(
        stored.data["spec"]["extra"],
        json!({"anything": [1, {"a": 2}]})
    );

    // fieldValidation=Strict refuses them instead.
    let body = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "strict"}, "spec": {"size": 2, "unknown": "x"}});
    let (code, status) = send(
        &kube,
        Method::POST,
        &format!("{WIDGETS}?fieldValidation=Strict"),
        "application/json",
        &body.to_string(),
    )
    .await;
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")));
    assert_eq!(
        status["message"],
        "Widget in version \"v1\" cannot be handled as a Widget: strict decoding error: unknown field \"spec.unknown\""
    );
    let (code, status) = send(
        &kube,
        Method::PATCH,
        &format!("{WIDGETS}/pruned?fieldValidation=Strict"),
        "application/merge-patch+json",
        r#"{"spec":{"nope":1}}"#,
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(status["details"]["causes"][0]["field"], "patch");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .ends_with("strict decoding error: unknown field \"spec.nope\""),
        "{status}"
    );
    // A patch that breaks the schema is refused like a create.
    let err = api
        .patch(
            "pruned",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": null}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        api_status(&err),
        (
            422,
            "Widget.example.com \"pruned\" is invalid: spec.size: Required value".to_owned()
        )
    );
}

#[tokio::test]
async fn strategic_merge_patch_is_refused_with_415() {
    let (kube, c) = with_widgets().await;
    let api = widgets(&c);
    api.create(&PostParams::default(), &widget("w1", json!({"size": 1})))
        .await
        .unwrap();
    let err = api
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        api_status(&err),
        (
            415,
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".to_owned()
        )
    );
    let (_, status) = send(
        &kube,
        Method::PATCH,
        &format!("{WIDGETS}/w1"),
        "application/strategic-merge-patch+json",
        "{}",
    )
    .await;
    assert_eq!(status["reason"], "UnsupportedMediaType");
    assert_eq!(api.get("w1").await.unwrap().data["spec"]["size"], 1);
}

#[tokio::test]
async fn tables_show_the_printer_columns() {
    let (kube, c) = with_widgets().await;
    let api = widgets(&c);
    api.create(&PostParams::default(), &widget("w1", json!({"size": 5})))
        .await
        .unwrap();
    api.patch_status(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": [
            {"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]}})),
    )
    .await
    .unwrap();
    let (code, table) = get_json(&kube, WIDGETS, Some(TABLE)).await;
    assert_eq!(code, 200);
    assert_eq!(table["kind"], "Table");
    let columns: Vec<(&str, &str, i64)> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["type"].as_str().unwrap(),
                c["priority"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        columns,
        [
            ("Name", "string", 0),
            ("Size", "integer", 0),
            ("Ready", "string", 0),
            ("Color", "string", 1)
        ]
    );
    assert_eq!(table["rows"][0]["cells"], json!(["w1", 5, "True", "red"]));
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");

    // A version without printer columns: Name and Age.
    let beta = "/apis/example.com/v1beta1/namespaces/default/widgets/w1";
    let (_, table) = get_json(&kube, beta, Some(TABLE)).await;
    let names: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Name", "Age"]);
    assert_eq!(table["columnDefinitions"][1]["type"], "date");
    let age = table["rows"][0]["cells"][1].as_str().unwrap();
    assert!(age.ends_with('s'), "{age}");
}

#[tokio::test]
async fn versions_share_objects_and_generation_counts_status_without_subresource() {
    let (kube, c) = with_widgets().await;
    let v1 = widgets(&c);
    let beta: Api<DynamicObject> =
        Api::namespaced_with(c.clone(), "default", &widget_resource("v1beta1"));
    v1.create(&PostParams::default(), &widget("w1", json!({"size": 1})))
        .await
        .unwrap();
    let through_beta = beta.get("w1").await.unwrap();
    assert_eq!(
        through_beta.types.as_ref().unwrap().api_version,
        "example.com/v1beta1"
    );
    assert_eq!(through_beta.data["spec"]["size"], 1);
    // v1beta1 has no status subresource: status is written with the object and
    // counts as a change.
    let patched = beta
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Via beta"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["status"]["phase"], "Via beta");
    assert_eq!(patched.metadata.generation, Some(2));
    let (code, _) = get_json(
        &kube,
        "/apis/example.com/v1beta1/namespaces/default/widgets/w1/status",
        None,
    )
    .await;
    assert_eq!(code, 404, "no status subresource in v1beta1");
    let back = v1.get("w1").await.unwrap();
    assert_eq!(back.types.unwrap().api_version, "example.com/v1");
    assert_eq!(back.data["status"]["phase"], "Via beta");
}

#[tokio::test]
async fn cluster_scoped_crds_and_invalid_definitions() {
    let kube = start(false).await;
    let c = client(&kube).await;
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let mut bad = widget_crd();
    bad.metadata.name = Some("widgets.wrong.com".into());
    let err = crds.create(&PostParams::default(), &bad).await.unwrap_err();
    assert_eq!(
        api_status(&err),
        (
            422,
            "CustomResourceDefinition.apiextensions.k8s.io \"widgets.wrong.com\" is invalid: metadata.name: Invalid value: \"widgets.wrong.com\": must be spec.names.plural+\".\"+spec.group".to_owned()
        )
    );
    let mut no_schema = serde_json::to_value(widget_crd()).unwrap();
    no_schema["spec"]["versions"][0]
        .as_object_mut()
        .unwrap()
        .remove("schema");
    no_schema["spec"]["versions"][1]["storage"] = json!(true);
    let (code, status) = send(
        &kube,
        Method::POST,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "application/json",
        &no_schema.to_string(),
    )
    .await;
    assert_eq!(code, 422);
    let fields: Vec<&str> = status["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        ["spec.versions[0].schema.openAPIV3Schema", "spec.versions"]
    );

    let gadget: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Cluster",
            "names": {"plural": "gadgets", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
    }))
    .unwrap();
    crds.create(&PostParams::default(), &gadget).await.unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Gadget"),
        "gadgets",
    );
    let gadgets: Api<DynamicObject> = Api::all_with(c.clone(), &ar);
    let g = DynamicObject::new("g1", &ar).data(json!({"spec": {"free": {"form": true}}}));
    let created = gadgets.create(&PostParams::default(), &g).await.unwrap();
    assert!(created.metadata.namespace.is_none());
    assert_eq!(created.data["spec"]["free"]["form"], true);
    let (code, _) = get_json(&kube, "/apis/example.com/v1/gadgets/g1", None).await;
    assert_eq!(code, 200);
    let err = gadgets
        .list(&ListParams::default().fields("metadata.namespace=default"))
        .await
        .unwrap_err();
    assert_eq!(
        api_status(&err),
        (
            400,
            "field label not supported: metadata.namespace".to_owned()
        )
    );
    let (code, _) = get_json(
        &kube,
        "/apis/example.com/v1/namespaces/default/gadgets",
        None,
    )
    .await;
    assert_eq!(code, 404, "a cluster-scoped type has no namespaced paths");
}

#[tokio::test]
async fn deleting_the_crd_deletes_its_objects_and_its_type() {
    let (kube, c) = with_widgets().await;
    let api = widgets(&c);
    for name in ["a", "b"] {
        api.create(&PostParams::default(), &widget(name, json!({"size": 1})))
            .await
            .unwrap();
    }
    let mut stream = api
        .watch(&WatchParams::default().timeout(30), "0")
        .await
        .unwrap()
        .boxed();
    for _ in 0..2 {
        let e = stream.try_next().await.unwrap().unwrap();
        assert!(matches!(e, WatchEvent::Added(_)));
    }

    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        api_status(&crds.get("widgets.example.com").await.unwrap_err()).0,
        404
    );
    // The watcher sees both objects go, then the stream ends with the type.
    let mut deleted = Vec::new();
    while let Some(e) = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .expect("watch ends in time")
        .unwrap()
    {
        match e {
            WatchEvent::Deleted(o) => deleted.push(o.name_any()),
            other => panic!("unexpected {other:?}"),
        }
    }
    deleted.sort();
    assert_eq!(deleted, ["a", "b"]);

    let (code, status) = get_json(&kube, WIDGETS, None).await;
    assert_eq!((code, status["reason"].as_str()), (404, Some("NotFound")));
    let (code, _) = get_json(&kube, "/apis/example.com", None).await;
    assert_eq!(code, 404);
    let discovery = Discovery::new(c.clone()).run_aggregated().await.unwrap();
    assert!(discovery.get("example.com").is_none());
    // Created again, it starts empty.
    crds.create(&PostParams::default(), &widget_crd())
        .await
        .unwrap();
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn a_crd_with_objects_holding_finalizers_stays_terminating() {
    let (kube, c) = with_widgets().await;
    let api = widgets(&c);
    let mut held = widget("held", json!({"size": 1}));
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &held).await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = crds.get("widgets.example.com").await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());
    let cond = terminating
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Terminating")
        .unwrap();
    assert_eq!(cond.reason.as_deref(), Some("InstanceDeletionInProgress"));
    // No new objects while it goes.
    let err = api
        .create(&PostParams::default(), &widget("late", json!({"size": 1})))
        .await
        .unwrap_err();
    assert_eq!(
        api_status(&err),
        (
            403,
            "widgets.example.com \"late\" is forbidden: create not allowed while custom resource definition is terminating".to_owned()
        )
    );
    // The last finalizer removed: the object, then the CRD, are gone.
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(
        api_status(&crds.get("widgets.example.com").await.unwrap_err()).0,
        404
    );
    let (code, _) = get_json(&kube, WIDGETS, None).await;
    assert_eq!(code, 404);
}
