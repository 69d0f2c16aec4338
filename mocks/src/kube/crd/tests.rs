#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::super::deletion::{DeleteOptions, finalize_if_done};
use super::super::resources::CUSTOM_RESOURCE_DEFINITIONS as CRDS;
use super::super::store::Store;
use super::*;

fn crd(plural: &str, kind: &str, short: &[&str]) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.com")},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": plural, "kind": kind, "shortNames": short},
            "versions": [
                {"name": "v1beta1", "served": true, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                {"name": "v1", "served": true, "storage": true,
                 "subresources": {"status": {}},
                 "selectableFields": [{"jsonPath": ".spec.color"}],
                 "additionalPrinterColumns": [
                    {"name": "Ready", "type": "string",
                     "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Wide", "type": "boolean", "jsonPath": ".spec.on", "priority": 1},
                    {"name": "Since", "type": "date", "jsonPath": ".status.since"},
                 ],
                 "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "integer"}, "color": {"type": "string"},
                        "on": {"type": "boolean"}}},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}},
                {"name": "v1alpha1", "served": false, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object"}}},
            ],
        },
    })
}

fn created(store: &Store, mut crd: Value) -> Value {
    let (all, _) = store.list(CRDS, None);
    definition::prepare_create(&all, &mut crd).unwrap();
    store.create(CRDS, None, crd).unwrap()
}

fn condition<'a>(crd: &'a Value, ty: &str) -> &'a Value {
    crd["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == ty)
        .unwrap()
}

#[test]
fn a_created_crd_is_established_with_its_names_accepted() {
    let store = Store::default();
    let c = created(&store, crd("widgets", "Widget", &["wd"]));
    assert_eq!(c["spec"]["names"]["singular"], "widget");
    assert_eq!(c["spec"]["names"]["listKind"], "WidgetList");
    assert_eq!(c["spec"]["conversion"]["strategy"], "None");
    assert_eq!(c["metadata"]["generation"], 1);
    assert_eq!(
        c["status"]["acceptedNames"],
        json!({"plural": "widgets", "singular": "widget", "kind": "Widget",
               "listKind": "WidgetList", "shortNames": ["wd"]})
    );
    assert_eq!(c["status"]["storedVersions"], json!(["v1"]));
    let names = condition(&c, "NamesAccepted");
    assert_eq!(
        (&names["status"], &names["reason"], &names["message"]),
        (
            &json!("True"),
            &json!("NoConflicts"),
            &json!("no conflicts found")
        )
    );
    let est = condition(&c, "Established");
    assert_eq!(
        (&est["status"], &est["reason"], &est["message"]),
        (
            &json!("True"),
            &json!("InitialNamesAccepted"),
            &json!("the initial names have been accepted")
        )
    );
    assert!(est["lastTransitionTime"].is_string());
}

#[test]
fn served_versions_become_types() {
    let store = Store::default();
    created(&store, crd("widgets", "Widget", &["wd"]));
    let reg = Registry::from_crds(&store.list(CRDS, None).0);
    let versions: Vec<&str> = reg.types().map(|t| t.version).collect();
    assert_eq!(versions, ["v1", "v1beta1"], "v1alpha1 is not served");
    let v1 = reg.find("example.com", "v1", "widgets").unwrap();
    assert_eq!(v1.rt.kind, "Widget");
    assert_eq!(v1.rt.list_kind(), "WidgetList");
    assert!(v1.rt.namespaced);
    assert_eq!(v1.rt.short_names, ["wd"]);
    let custom = v1.rt.custom.unwrap();
    assert!(custom.status_subresource);
    assert_eq!(custom.selectable_fields, ["spec.color"]);
    let beta = reg.find("example.com", "v1beta1", "widgets").unwrap();
    assert!(!beta.rt.custom.unwrap().status_subresource);
    assert!(beta.rt.same_storage(&v1.rt));
    assert_eq!(beta.columns.len(), 1, "the default Age column");
    assert_eq!(beta.columns[0].name, "Age");
    assert_eq!(beta.columns[0].ty, "date");

    let now = SystemTime::now();
    let since = humantime::format_rfc3339_seconds(now - Duration::from_secs(300)).to_string();
    let o = json!({"metadata": {"name": "w1"}, "spec": {"size": 3.0, "on": "yes"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "since": since}});
    assert_eq!(
        cells(v1, &o, now),
        [
            json!("w1"),
            json!("True"),
            json!(3),
            Value::Null,
            json!("5m")
        ]
    );
    let defs = column_definitions(v1);
    assert_eq!(defs[0]["name"], "Name");
    assert_eq!(defs[0]["format"], "name");
    assert_eq!(defs[3]["priority"], 1);
    assert_eq!(
        defs[2]["description"],
        "Custom resource definition column (in JSONPath format): .spec.size"
    );
}

#[test]
fn conflicting_names_are_not_accepted_and_not_served() {
    let store = Store::default();
    created(&store, crd("widgets", "Widget", &["wd"]));
    let mut other = crd("gadgets", "Gadget", &["wd"]);
    other["spec"]["names"]["kind"] = json!("Widget");
    let c = created(&store, other);
    let names = condition(&c, "NamesAccepted");
    assert_eq!(names["status"], "False");
    // Kind and list kind (defaulted from it) both conflict: the last one is said.
    assert_eq!(names["reason"], "ListKindConflict");
    assert_eq!(names["message"], "\"WidgetList\" is already in use");
    let est = condition(&c, "Established");
    assert_eq!(
        (&est["status"], &est["reason"], &est["message"]),
        (
            &json!("False"),
            &json!("NotAccepted"),
            &json!("not all names are accepted")
        )
    );
    assert_eq!(c["status"]["acceptedNames"]["plural"], "gadgets");
    assert!(c["status"]["acceptedNames"].get("shortNames").is_none());
    let reg = Registry::from_crds(&store.list(CRDS, None).0);
    assert!(reg.find("example.com", "v1", "gadgets").is_none());

    let mut short = crd("gizmos", "Gizmo", &["wd"]);
    short["metadata"]["name"] = json!("gizmos.example.com");
    let c = created(&store, short);
    let names = condition(&c, "NamesAccepted");
    assert_eq!(
        (&names["reason"], &names["message"]),
        (
            &json!("ShortNamesConflict"),
            &json!("\"wd\" is already in use")
        )
    );

    // A built-in type's names are taken too.
    let mut lease = crd("leases", "Lease", &[]);
    lease["spec"]["group"] = json!("coordination.k8s.io");
    lease["metadata"]["name"] = json!("leases.coordination.k8s.io");
    let c = created(&store, lease);
    assert_eq!(condition(&c, "NamesAccepted")["status"], "False");
    assert_eq!(c["status"]["acceptedNames"]["plural"], "");
}

#[test]
fn invalid_crds_are_refused_naming_each_field() {
    let mut bad = crd("widgets", "Widget", &[]);
    bad["metadata"]["name"] = json!("widgets.other.com");
    bad["spec"]["scope"] = json!("Galaxy");
    bad["spec"]["versions"][0]["storage"] = json!(true);
    bad["spec"]["versions"][2]
        .as_object_mut()
        .unwrap()
        .remove("schema");
    bad["spec"]["versions"][1]["additionalPrinterColumns"][1]["type"] = json!("text");
    let err = definition::prepare_create(&[], &mut bad).unwrap_err();
    assert_eq!(err.code(), 422);
    let status = err.to_status();
    let fields: Vec<&str> = status["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "metadata.name",
            "spec.scope",
            "spec.versions[2].schema.openAPIV3Schema",
            "spec.versions[1].additionalPrinterColumns[1].type",
            "spec.versions",
        ]
    );
    let msg = status["message"].as_str().unwrap();
    assert!(
        msg.starts_with("CustomResourceDefinition.apiextensions.k8s.io \"widgets.other.com\" is invalid: [metadata.name: Invalid value: \"widgets.other.com\": must be spec.names.plural+\".\"+spec.group, spec.scope: Unsupported value: \"Galaxy\": supported values: \"Cluster\", \"Namespaced\""),
        "{msg}"
    );
    assert_eq!(status["details"]["group"], "apiextensions.k8s.io");
    assert_eq!(status["details"]["kind"], "CustomResourceDefinition");

    let mut no_versions = crd("widgets", "Widget", &[]);
    no_versions["spec"]["versions"] = json!([]);
    no_versions["spec"]["names"]
        .as_object_mut()
        .unwrap()
        .remove("kind");
    let err = definition::prepare_create(&[], &mut no_versions).unwrap_err();
    let m = err.to_string();
    assert!(
        m.contains("spec.versions: Invalid value: []: must have exactly one version marked as storage version")
            && m.contains("spec.names.kind: Required value"),
        "{m}"
    );
}

#[test]
fn updates_keep_immutable_fields_and_stored_versions() {
    let store = Store::default();
    let c = created(&store, crd("widgets", "Widget", &["wd"]));
    let mut next = c.clone();
    next["spec"]["scope"] = json!("Cluster");
    next["spec"]["versions"][1]["storage"] = json!(false);
    next["spec"]["versions"][0]["storage"] = json!(true);
    next["spec"]["versions"]
        .as_array_mut()
        .unwrap()
        .retain(|v| v["name"] != "v1");
    let err = definition::finish_update(&[], &c, &mut next).unwrap_err();
    let m = err.to_string();
    assert!(
        m.contains("spec.scope: Invalid value: \"Cluster\": field is immutable"),
        "{m}"
    );
    assert!(
        m.contains("status.storedVersions[0]: Invalid value: \"v1\": missing from spec.versions"),
        "{m}"
    );

    let mut next = c.clone();
    next["spec"]["versions"][0]["storage"] = json!(true);
    next["spec"]["versions"][1]["storage"] = json!(false);
    next["spec"]["names"]["shortNames"] = json!(["wd", "wdg"]);
    definition::finish_update(&[], &c, &mut next).unwrap();
    assert_eq!(next["status"]["storedVersions"], json!(["v1", "v1beta1"]));
    assert_eq!(
        next["status"]["acceptedNames"]["shortNames"],
        json!(["wd", "wdg"])
    );
}

fn widget(store: &Store, reg: &Registry, name: &str, finalizers: &[&str]) {
    let rt = reg.find("example.com", "v1", "widgets").unwrap().rt;
    store
        .create(
            rt,
            Some("default"),
            json!({"metadata": {"name": name, "finalizers": finalizers}, "spec": {"size": 1}}),
        )
        .unwrap();
}

#[test]
fn deleting_a_crd_deletes_its_objects_first() {
    let store = Store::default();
    created(&store, crd("widgets", "Widget", &[]));
    let reg = Registry::from_crds(&store.list(CRDS, None).0);
    widget(&store, &reg, "a", &[]);
    widget(&store, &reg, "held", &["example.com/hold"]);
    let rt = reg.find("example.com", "v1", "widgets").unwrap().rt;

    let out = definition::delete(&store, "widgets.example.com", &DeleteOptions::default()).unwrap();
    assert!(out.object()["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        out.object()["metadata"]["finalizers"],
        json!([CLEANUP_FINALIZER])
    );
    // The object with a finalizer holds the CRD (Terminating), the other is gone.
    let (left, _) = store.list(rt, None);
    assert_eq!(left.len(), 1);
    assert!(left[0]["metadata"]["deletionTimestamp"].is_string());
    let c = store.get(CRDS, None, "widgets.example.com").unwrap();
    assert_eq!(
        condition(&c, "Terminating")["reason"],
        "InstanceDeletionInProgress"
    );
    let reg = Registry::from_crds(&store.list(CRDS, None).0);
    assert!(
        reg.find("example.com", "v1", "widgets")
            .unwrap()
            .terminating
    );

    store
        .modify(rt, Some("default"), "held", |o| {
            o["metadata"]["finalizers"] = json!([]);
            Ok(())
        })
        .unwrap();
    finalize_if_done(&store, rt, Some("default"), "held").unwrap();
    definition::cleanup(&store, "widgets.example.com").unwrap();
    assert_eq!(
        store
            .get(CRDS, None, "widgets.example.com")
            .unwrap_err()
            .code(),
        404
    );
    assert!(Registry::from_crds(&store.list(CRDS, None).0).is_empty());
}

#[test]
fn a_crd_freeing_names_lets_a_waiting_one_in() {
    let store = Store::default();
    created(&store, crd("widgets", "Widget", &["wd"]));
    let waiting = created(&store, crd("gadgets", "Gadget", &["wd"]));
    assert_eq!(condition(&waiting, "Established")["status"], "False");
    definition::delete(&store, "widgets.example.com", &DeleteOptions::default()).unwrap();
    let now = store.get(CRDS, None, "gadgets.example.com").unwrap();
    assert_eq!(condition(&now, "NamesAccepted")["status"], "True");
    assert_eq!(condition(&now, "Established")["status"], "True");
    assert_eq!(now["status"]["acceptedNames"]["shortNames"], json!(["wd"]));
}

#[test]
fn decoding_prunes_defaults_and_validation_names_fields() {
    let store = Store::default();
    let mut c = crd("widgets", "Widget", &[]);
    c["spec"]["versions"][1]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["color"] =
        json!({"type": "string", "default": "red", "enum": ["red", "blue"]});
    created(&store, c);
    let reg = Registry::from_crds(&store.list(CRDS, None).0);
    let cv = reg.find("example.com", "v1", "widgets").unwrap();
    let mut o = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"size": 2, "bogus": true}, "junk": 1});
    let unknown = decode(cv, &mut o);
    assert_eq!(unknown, ["junk", "spec.bogus"]);
    assert_eq!(o["spec"], json!({"size": 2, "color": "red"}));
    validate(cv, &o, None, Part::Main).unwrap();
    o["spec"]["color"] = json!("green");
    let e = validate(cv, &o, None, Part::Main).unwrap_err();
    assert_eq!(
        e.to_string(),
        "Widget.example.com \"w\" is invalid: spec.color: Unsupported value: \"green\": supported values: \"red\", \"blue\""
    );
    // /status validates only status (here: anything goes).
    validate(cv, &o, Some(&o.clone()), Part::Status).unwrap();
}
