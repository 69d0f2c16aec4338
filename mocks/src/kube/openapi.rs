//! `/openapi/v3`: just enough OpenAPI for kubectl to send `fieldValidation`.
//!
//! `kubectl apply`, `create` and `replace` validate with `--validate=strict` by
//! default: before sending anything they read `/openapi/v3` to learn whether the
//! server validates fields itself (a `fieldValidation` query parameter on the PATCH
//! operation of the object's path, tagged with `x-kubernetes-group-version-kind`)
//! and fail with "failed to download openapi" when it is missing. fake-kube serves
//! that index (`/openapi/v3`, one path per served group-version, built-in and
//! custom) and per-group-version documents listing each type's object path with
//! its operations and the query parameters fake-kube reads, without schemas: the
//! server's own validation (custom resources, see [`super::crd::schema`]) is what
//! kubectl then relies on. `kubectl explain` finds nothing to explain, and PATCH
//! operations declare no request body, so `kubectl apply` computes its patches from
//! its compiled-in types (built-ins) or as JSON merge patches (custom resources),
//! as it does against servers without OpenAPI. `/openapi/v2` stays 404.

use serde_json::{Map, Value, json};

use super::crd::Registry;
use super::discovery::{self, GIT_VERSION};
use super::resources::ResourceType;

/// The prefix of a group-version's path: `api/v1` or `apis/group/version`.
fn prefix(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// A stable, content-derived `hash` parameter (FNV-1a): clients cache documents
/// by their URL.
fn hash(doc: &Value) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in doc.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016X}")
}

/// `/openapi/v3`: the served group-versions and where their documents are.
pub fn index(reg: &Registry) -> Value {
    let mut paths = Map::new();
    for (group, version) in discovery::group_versions(reg) {
        let doc = group_version(reg, &group, &version);
        let p = prefix(&group, &version);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={}", hash(&doc))}),
        );
    }
    json!({"paths": paths})
}

fn query_param(name: &str) -> Value {
    json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}})
}

fn operation(rt: ResourceType, id: &str, params: &[&str]) -> Value {
    let parameters: Vec<Value> = params.iter().map(|p| query_param(p)).collect();
    json!({
        "operationId": format!("{id}{}", rt.kind),
        "x-kubernetes-group-version-kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "parameters": parameters,
        "responses": {"200": {"description": "OK"}},
    })
}

/// The document of one group-version (`/openapi/v3/apis/{group}/{version}`), or
/// `None` when it is not served. `path` is what follows `/openapi/v3/`.
pub fn document(reg: &Registry, path: &str) -> Option<Value> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version) = match segs.as_slice() {
        ["api", v] => ("", *v),
        ["apis", g, v] => (*g, *v),
        _ => return None,
    };
    discovery::group_versions(reg)
        .iter()
        .any(|(g, v)| g == group && v == version)
        .then(|| group_version(reg, group, version))
}

fn group_version(reg: &Registry, group: &str, version: &str) -> Value {
    let mut paths = Map::new();
    let writes = ["dryRun", "fieldManager", "fieldValidation", "pretty"];
    for rt in discovery::types_in(reg, group, version) {
        let base = format!("/{}", prefix(group, version));
        let scope = if rt.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", rt.plural)
        } else {
            format!("{base}/{}", rt.plural)
        };
        paths.insert(
            scope.clone(),
            json!({
                "get": operation(rt, "list", &["labelSelector", "fieldSelector", "limit", "continue", "watch", "resourceVersion"]),
                "post": operation(rt, "create", &writes),
            }),
        );
        paths.insert(
            format!("{scope}/{{name}}"),
            json!({
                "get": operation(rt, "read", &["pretty"]),
                "put": operation(rt, "replace", &writes),
                "patch": operation(rt, "patch", &["dryRun", "fieldManager", "fieldValidation", "force", "pretty"]),
                "delete": operation(rt, "delete", &["dryRun", "gracePeriodSeconds", "propagationPolicy"]),
            }),
        );
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "components": {"schemas": {}},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_group_version_is_indexed_with_a_patch_taking_field_validation() {
        let reg = Registry::default();
        let idx = index(&reg);
        let url = idx["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap();
        assert!(url.starts_with("/openapi/v3/api/v1?hash="));
        assert!(idx["paths"]["apis/apiextensions.k8s.io/v1"].is_object());
        let doc = document(&reg, "api/v1").unwrap();
        let patch = &doc["paths"]["/api/v1/nodes/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Node");
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
        );
        assert!(doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"].is_object());
        assert!(document(&reg, "apis/apps/v1").is_some());
        assert!(document(&reg, "apis/batch/v1").is_none());
    }
}
