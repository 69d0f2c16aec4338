//! Per-type write rules of the real registry ("strategies"): which types have a
//! `status` subresource, what a create resets, what an update may not change, and
//! whether a delete answers with the object or a `Status`.
//!
//! These are what make the fake server disagree with a careless client the way a
//! real one does: a PUT of a Node cannot change its conditions (only `/status`
//! can), a Pod is created `Pending` whatever status the client sent, and
//! `kubectl delete node` gets a `Status` back while `kubectl delete pod` gets the Pod.
//! A Secret's `stringData` is merged into `data` on every write and never read back.
//!
//! Custom resources follow the apiextensions-apiserver's strategy: `generation` 1 on
//! create, then one more for every change outside `metadata` (and outside `status`
//! when the version declares the status subresource, whose writes keep everything
//! but `status`); a create drops `status` when that subresource is declared.

use serde_json::{Map, Value, json};

use super::resources::ResourceType;
use super::store::{StoreError, metadata_mut};

/// Types whose `status` is only written through `/status`.
pub fn has_status_subresource(rt: ResourceType) -> bool {
    if let Some(custom) = rt.custom {
        return custom.status_subresource;
    }
    matches!(
        (rt.group, rt.plural),
        (
            "",
            "nodes" | "pods" | "namespaces" | "persistentvolumes" | "persistentvolumeclaims"
        ) | ("storage.k8s.io", "volumeattachments")
            | ("", "services")
            | ("apps", "deployments" | "daemonsets")
            | ("policy", "poddisruptionbudgets")
            | ("apiextensions.k8s.io", "customresourcedefinitions")
    )
}

/// Whether a delete that removes the object answers with it (the registry's
/// `ReturnDeletedObject`) rather than a `Status` with `details`.
pub fn returns_deleted_object(rt: ResourceType) -> bool {
    matches!(
        (rt.group, rt.plural),
        (
            "",
            "pods" | "namespaces" | "persistentvolumes" | "persistentvolumeclaims"
        )
    )
}

/// Checks `kind`/`apiVersion` of a request body against the URL's type, as the
/// decoder does (400 when they disagree; absent is fine).
pub fn check_type_meta(rt: ResourceType, body: &Value) -> Result<(), StoreError> {
    if let Some(kind) = body.get("kind").and_then(Value::as_str)
        && !kind.is_empty()
        && kind != rt.kind
    {
        return Err(StoreError::BadRequest(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    if let Some(av) = body.get("apiVersion").and_then(Value::as_str)
        && !av.is_empty()
        && av != rt.api_version()
    {
        return Err(StoreError::BadRequest(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    Ok(())
}

/// What is wrong with `name` as a DNS-1123 subdomain (`metadata.name` of most
/// types), in the apiserver's words; `None` when nothing is.
pub fn name_error(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    (!ok).then(|| {
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_owned()
    })
}

/// Validates `metadata.name` as a DNS-1123 subdomain (422 otherwise).
pub fn validate_name(rt: ResourceType, object: &Value) -> Result<(), StoreError> {
    let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str) else {
        return Ok(());
    };
    if name_error(name).is_none() {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "{} \"{name}\" is invalid: metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            rt.kind
        )))
    }
}

/// What a create resets (`PrepareForCreate`): server-owned metadata and, for most
/// types with a status subresource, the status. Node status is kept (the kubelet
/// registers its Node with one). Namespaces get their `kubernetes.io/metadata.name`
/// label (but no `spec.finalizers`: there is no namespace controller to remove it).
pub fn prepare_for_create(rt: ResourceType, object: &mut Value) {
    merge_string_data(rt, object);
    let meta = metadata_mut(object);
    if !rt.namespaced {
        meta.remove("namespace");
    }
    for k in [
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "selfLink",
    ] {
        meta.remove(k);
    }
    meta.remove("generation");
    if (rt.group.is_empty() && rt.plural == "pods") || rt.custom.is_some() {
        // Pods carry a generation since 1.33, custom resources always did; the
        // other built-in types served here have none (CRDs get theirs from
        // `crd::definition`).
        meta.insert("generation".into(), json!(1));
    }
    if rt.group.is_empty()
        && rt.plural == "namespaces"
        && let Some(name) = meta.get("name").and_then(Value::as_str).map(str::to_owned)
    {
        // The apiserver labels every namespace with its own name.
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if let Value::Object(labels) = labels {
            labels.insert("kubernetes.io/metadata.name".into(), json!(name));
        }
    }
    let status = match (rt.group, rt.plural) {
        ("", "pods" | "persistentvolumeclaims" | "persistentvolumes") => {
            Some(json!({"phase": "Pending"}))
        }
        ("", "namespaces") => Some(json!({"phase": "Active"})),
        ("storage.k8s.io", "volumeattachments") => Some(json!({"attached": false})),
        _ => None,
    };
    if let (Some(status), Value::Object(map)) = (status, &mut *object) {
        map.insert("status".into(), status);
    }
    if rt.custom.is_some()
        && has_status_subresource(rt)
        && let Value::Object(map) = object
    {
        // "create cannot set status".
        map.remove("status");
    }
}

/// Which part of the object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The main resource: everything but `status` (for types with a subresource).
    Main,
    /// `/status`: only `status`.
    Status,
}

/// Builds the object to store from the client's `next` and the stored `current`
/// (`PrepareForUpdate`): the deletion fields are the server's, and the status
/// subresource splits what each endpoint may change. A `generation` (pods, custom
/// resources, CRDs) goes up when anything but metadata changes, and but status for
/// the types with a status subresource.
pub fn prepare_for_update(rt: ResourceType, part: Part, current: &Value, next: &mut Value) {
    if part == Part::Status {
        let status = next.get("status").cloned();
        let mut merged = current.clone();
        if let Value::Object(map) = &mut merged {
            match status {
                Some(s) => map.insert("status".into(), s),
                None => map.remove("status"),
            };
        }
        if let Some(rv) = next.pointer("/metadata/resourceVersion").cloned() {
            metadata_mut(&mut merged).insert("resourceVersion".into(), rv);
        } else {
            metadata_mut(&mut merged).remove("resourceVersion");
        }
        *next = merged;
        return;
    }
    merge_string_data(rt, next);
    if has_status_subresource(rt)
        && let Value::Object(map) = next
    {
        match current.get("status") {
            Some(s) => map.insert("status".into(), s.clone()),
            None => map.remove("status"),
        };
    }
    let keep = |k: &str| current.pointer(&format!("/metadata/{k}")).cloned();
    let deletion_ts = keep("deletionTimestamp");
    let deletion_grace = keep("deletionGracePeriodSeconds");
    let generation = keep("generation");
    let with_status = !has_status_subresource(rt);
    let spec_changed =
        strip_meta_status(current, with_status) != strip_meta_status(next, with_status);
    let meta = metadata_mut(next);
    for (k, v) in [
        ("deletionTimestamp", deletion_ts),
        ("deletionGracePeriodSeconds", deletion_grace),
    ] {
        match v {
            Some(v) => meta.insert(k.into(), v),
            None => meta.remove(k),
        };
    }
    match generation.and_then(|g| g.as_i64()) {
        Some(g) => {
            let next = if spec_changed { g + 1 } else { g };
            meta.insert("generation".into(), json!(next));
        }
        None => {
            meta.remove("generation");
        }
    }
}

/// A Secret's `stringData` merged into `data` (base64; a key in both takes the
/// `stringData` value), then dropped: the API server's conversion of a Secret to its
/// internal type does this on every write (create, update, patch), so `stringData` is
/// never read back. (A value that is not a string fails to decode there, 400; the
/// clients of this crate send strings, and such a value is left out here.)
fn merge_string_data(rt: ResourceType, object: &mut Value) {
    use base64::Engine as _;
    if !(rt.group.is_empty() && rt.plural == "secrets") {
        return;
    }
    let Value::Object(map) = object else {
        return;
    };
    let Some(Value::Object(strings)) = map.remove("stringData") else {
        return;
    };
    let data = map.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    if let Value::Object(data) = data {
        for (key, value) in strings {
            if let Value::String(text) = value {
                let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                data.insert(key, Value::String(encoded));
            }
        }
    }
}

/// The object without what never counts as a spec change (`status` kept when
/// `keep_status`: without a status subresource it is data like any other).
fn strip_meta_status(object: &Value, keep_status: bool) -> Map<String, Value> {
    let mut map = object.as_object().cloned().unwrap_or_default();
    for k in ["metadata", "kind", "apiVersion"] {
        map.remove(k);
    }
    if !keep_status {
        map.remove("status");
    }
    map
}

#[cfg(test)]
mod tests {
    use super::super::resources::{LEASES, NODES, PODS, SECRETS};
    use super::*;

    #[test]
    fn a_secrets_string_data_is_merged_into_data_and_dropped() {
        // "cGFzcw==" is base64 for "pass".
        let mut secret = json!({"metadata": {"name": "s"},
            "data": {"password": "b2xk", "user": "dQ=="},
            "stringData": {"password": "pass", "extra": "x"}});
        prepare_for_create(SECRETS, &mut secret);
        assert_eq!(
            secret,
            json!({"metadata": {"name": "s"},
                "data": {"password": "cGFzcw==", "user": "dQ==", "extra": "eA=="}})
        );
        let current = secret.clone();
        let mut next = json!({"metadata": {"name": "s"}, "stringData": {"password": "pass"}});
        prepare_for_update(SECRETS, Part::Main, &current, &mut next);
        assert_eq!(next["data"], json!({"password": "cGFzcw=="}));
        assert!(next.get("stringData").is_none());
        // Other types keep a field of that name as it is.
        let mut map = json!({"metadata": {"name": "c"}, "stringData": {"a": "b"}});
        prepare_for_create(LEASES, &mut map);
        assert_eq!(map["stringData"]["a"], "b");
    }

    #[test]
    fn main_resource_keeps_status_and_status_keeps_the_rest() {
        let current = json!({"metadata": {"name": "n", "resourceVersion": "5", "generation": 1, "labels": {"a": "1"}},
            "spec": {"unschedulable": false}, "status": {"phase": "Running"}});
        let mut main = json!({"metadata": {"name": "n", "resourceVersion": "5"},
            "spec": {"unschedulable": true}, "status": {"phase": "Failed"}});
        prepare_for_update(NODES, Part::Main, &current, &mut main);
        assert_eq!(main["status"]["phase"], "Running");
        assert_eq!(main["spec"]["unschedulable"], true);
        assert_eq!(main["metadata"]["generation"], 2);

        let mut status = json!({"metadata": {"name": "n", "resourceVersion": "5"},
            "spec": {"unschedulable": true}, "status": {"phase": "Failed"}});
        prepare_for_update(NODES, Part::Status, &current, &mut status);
        assert_eq!(status["status"]["phase"], "Failed");
        assert_eq!(status["spec"]["unschedulable"], false);
        assert_eq!(status["metadata"]["labels"]["a"], "1");

        let mut lease = json!({"metadata": {"name": "l"}, "status": {"x": 1}});
        prepare_for_update(LEASES, Part::Main, &json!({}), &mut lease);
        assert_eq!(
            lease["status"]["x"], 1,
            "no subresource: status is plain data"
        );
    }

    #[test]
    fn create_resets_pod_status_but_not_node_status() {
        let mut pod = json!({"metadata": {"name": "p", "deletionTimestamp": "x"}, "status": {"phase": "Running"}});
        prepare_for_create(PODS, &mut pod);
        assert_eq!(pod["status"], json!({"phase": "Pending"}));
        assert!(pod["metadata"].get("deletionTimestamp").is_none());
        let mut node = json!({"metadata": {"name": "n"}, "status": {"conditions": []}});
        prepare_for_create(NODES, &mut node);
        assert_eq!(node["status"]["conditions"], json!([]));
    }

    #[test]
    fn names_and_type_meta_are_checked() {
        assert!(validate_name(NODES, &json!({"metadata": {"name": "worker-1.example"}})).is_ok());
        assert_eq!(
            validate_name(NODES, &json!({"metadata": {"name": "Worker_1"}}))
                .unwrap_err()
                .code(),
            422
        );
        assert_eq!(
            check_type_meta(NODES, &json!({"kind": "Pod"}))
                .unwrap_err()
                .code(),
            400
        );
        assert!(check_type_meta(NODES, &json!({"kind": "Node", "apiVersion": "v1"})).is_ok());
    }
}
