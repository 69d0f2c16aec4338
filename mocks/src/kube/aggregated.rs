//! Aggregated APIs: a group-version served by another program behind an APIService
//! (KubeVirt's `subresources.kubevirt.io`, served by virt-api), as kube-apiserver's
//! aggregator proxies it.
//!
//! A test registers one with [`super::FakeKube::aggregated_api`]. Requests under
//! `/apis/{group}/{version}/...` are then, after fake-kube's own authentication,
//! request log and RBAC authorization, handed to the [`AggregatedApi`]: the real
//! apiserver authorizes them the same way, from the RequestInfo of the path (PUT
//! `.../namespaces/NS/virtualmachines/NAME/stop` is `update` on
//! `virtualmachines/stop` in the group, namespace `NS`, name `NAME`; see
//! [`super::authz::attributes`]). Discovery lists the group: `/apis` (legacy and
//! aggregated v2), `/apis/{group}` (answered by the aggregator from the APIService)
//! and `/apis/{group}/{version}` (the resource list the API declares, as the
//! aggregated server answers it).

use std::sync::Arc;

use axum::body::Body;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use serde_json::{Value, json};

/// One entry of an aggregated API's `APIResourceList` (`metav1.APIResource`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiResource {
    /// Plural with `/subresource` (`virtualmachines/stop`).
    pub name: String,
    pub namespaced: bool,
    /// `""` when the server declares none (virt-api declares none).
    pub kind: String,
    /// Empty when the server declares none (virt-api declares none: `null`).
    pub verbs: Vec<String>,
}

/// A request for an aggregated API, as the aggregator forwards it.
#[derive(Debug, Clone)]
pub struct AggregatedRequest {
    pub method: String,
    /// The path after `/apis/{group}/{version}` (starts with `/`, or is empty).
    pub path: String,
    /// The query string, without `?` (empty when none).
    pub query: String,
    pub namespace: Option<String>,
    /// Plural resource (`virtualmachines`).
    pub resource: Option<String>,
    pub name: Option<String>,
    /// What follows the name (`stop`, `vnc/screenshot`).
    pub subresource: Option<String>,
    /// The user the apiserver authenticated (`None`: the main token's admin).
    pub user: Option<String>,
    pub body: Vec<u8>,
}

/// The body of an [`AggregatedResponse`].
#[derive(Debug, Clone, PartialEq)]
pub enum AggregatedBody {
    /// None (virt-api's `202 Accepted`).
    Empty,
    Json(Value),
    /// `text/plain` (Go's `http.Error`, as the aggregator's own errors).
    Text(String),
}

/// What an aggregated API answers.
#[derive(Debug, Clone, PartialEq)]
pub struct AggregatedResponse {
    pub code: StatusCode,
    pub body: AggregatedBody,
}

impl AggregatedResponse {
    /// A status with no body.
    pub fn empty(code: StatusCode) -> Self {
        Self {
            code,
            body: AggregatedBody::Empty,
        }
    }

    /// What kube-aggregator answers while an APIService has no available endpoint
    /// (`proxyError(w, req, "service unavailable", 503)`: Go's `http.Error`, plain
    /// text).
    pub fn service_unavailable() -> Self {
        Self {
            code: StatusCode::SERVICE_UNAVAILABLE,
            body: AggregatedBody::Text("service unavailable\n".to_owned()),
        }
    }

    /// A metav1 `Status` failure (`reason` as the apiserver's `StatusReason`).
    pub fn failure(code: StatusCode, reason: &str, message: &str, details: Value) -> Self {
        Self {
            code,
            body: AggregatedBody::Json(json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": message,
                "reason": reason,
                "details": details,
                "code": code.as_u16(),
            })),
        }
    }

    pub(crate) fn into_response(self) -> Response {
        let (body, content_type) = match self.body {
            AggregatedBody::Empty => return (self.code, Body::empty()).into_response(),
            AggregatedBody::Json(v) => (format!("{v}\n"), "application/json"),
            AggregatedBody::Text(t) => (t, "text/plain; charset=utf-8"),
        };
        let mut resp = (self.code, Body::from(body)).into_response();
        resp.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        resp
    }
}

/// A program serving one group-version behind the aggregator.
pub trait AggregatedApi: Send + Sync + 'static {
    /// The resources `/apis/{group}/{version}` lists.
    fn resources(&self) -> Vec<ApiResource>;
    /// Answers one request (already authenticated and authorized).
    fn handle(&self, request: AggregatedRequest) -> BoxFuture<'static, AggregatedResponse>;
}

/// A registered aggregated API.
#[derive(Clone)]
pub struct Registration {
    pub group: String,
    pub version: String,
    pub api: Arc<dyn AggregatedApi>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("group", &self.group)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// The registration serving `/apis/{group}/{version}`, if any.
pub fn find<'a>(apis: &'a [Registration], group: &str, version: &str) -> Option<&'a Registration> {
    apis.iter()
        .find(|r| r.group == group && r.version == version)
}

/// The groups of `apis`, with their versions in registration order.
fn groups(apis: &[Registration]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for r in apis {
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) => versions.push(r.version.clone()),
            None => out.push((r.group.clone(), vec![r.version.clone()])),
        }
    }
    out
}

fn api_group(group: &str, versions: &[String]) -> Value {
    let refs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": refs,
        "preferredVersion": refs.first().cloned().unwrap_or(Value::Null),
    })
}

/// Adds the aggregated groups to a legacy `/apis` `APIGroupList`.
pub fn extend_group_list(doc: &mut Value, apis: &[Registration]) {
    if let Some(list) = doc["groups"].as_array_mut() {
        for (g, versions) in groups(apis) {
            list.push(api_group(&g, &versions));
        }
    }
}

/// `/apis/{group}` for an aggregated group.
pub fn group(apis: &[Registration], group: &str) -> Option<Value> {
    let (g, versions) = groups(apis).into_iter().find(|(g, _)| g == group)?;
    let mut doc = api_group(&g, &versions);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// `/apis/{group}/{version}`: the `APIResourceList` the API declares.
pub fn resource_list(reg: &Registration) -> Value {
    let resources: Vec<Value> = reg
        .api
        .resources()
        .into_iter()
        .map(|r| {
            json!({
                "name": r.name,
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": if r.verbs.is_empty() { Value::Null } else { json!(r.verbs) },
            })
        })
        .collect();
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{}/{}", reg.group, reg.version),
        "resources": resources,
    })
}

/// Adds the aggregated groups to an aggregated (`apidiscovery.k8s.io/v2`) `/apis`,
/// converted from their legacy lists as the aggregator does for a server without
/// aggregated discovery: a `parent/sub` entry is a subresource of `parent` (a
/// placeholder parent when the list has none).
pub fn extend_aggregated(doc: &mut Value, apis: &[Registration]) {
    let Some(items) = doc["items"].as_array_mut() else {
        return;
    };
    for (g, versions) in groups(apis) {
        let docs: Vec<Value> = versions
            .iter()
            .filter_map(|v| find(apis, &g, v))
            .map(version_discovery)
            .collect();
        items.push(json!({
            "metadata": {"name": g, "creationTimestamp": null},
            "versions": docs,
        }));
    }
}

fn version_discovery(reg: &Registration) -> Value {
    let mut parents: Vec<Value> = Vec::new();
    for r in reg.api.resources() {
        let scope = if r.namespaced {
            "Namespaced"
        } else {
            "Cluster"
        };
        let (parent, sub) = match r.name.split_once('/') {
            Some((p, s)) => (p.to_owned(), Some(s.to_owned())),
            None => (r.name.clone(), None),
        };
        let idx = match parents
            .iter()
            .position(|p| p["resource"] == parent.as_str())
        {
            Some(i) => i,
            None => {
                parents.push(json!({
                    "resource": parent,
                    "scope": scope,
                    "singularResource": "",
                    "verbs": [],
                    "subresources": [],
                }));
                parents.len() - 1
            }
        };
        if let Some(sub) = sub
            && let Some(subs) = parents[idx]["subresources"].as_array_mut()
        {
            subs.push(json!({"subresource": sub, "verbs": r.verbs}));
        } else if !r.verbs.is_empty() {
            parents[idx]["verbs"] = json!(r.verbs);
        }
    }
    json!({"version": reg.version, "resources": parents, "freshness": "Current"})
}

/// Splits the path after `/apis/{group}/{version}` into namespace, resource, name
/// and subresource, as the apiserver's RequestInfo does.
pub fn request_info(
    rest: &[&str],
) -> (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
) {
    let own = |s: &&str| (*s).to_owned();
    let (namespace, rest) = match rest {
        ["namespaces", ns, tail @ ..] if !tail.is_empty() => (Some((*ns).to_owned()), tail),
        other => (None, other),
    };
    let resource = rest.first().map(own);
    let name = rest.get(1).map(own);
    let subresource = (rest.len() > 2).then(|| rest[2..].join("/"));
    (namespace, resource, name, subresource)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_info_of_a_subresource_path() {
        let (ns, res, name, sub) =
            request_info(&["namespaces", "vms", "virtualmachines", "vm1", "stop"]);
        assert_eq!(ns.as_deref(), Some("vms"));
        assert_eq!(res.as_deref(), Some("virtualmachines"));
        assert_eq!(name.as_deref(), Some("vm1"));
        assert_eq!(sub.as_deref(), Some("stop"));
        let (_, _, _, sub) = request_info(&[
            "namespaces",
            "vms",
            "virtualmachineinstances",
            "v",
            "vnc",
            "screenshot",
        ]);
        assert_eq!(sub.as_deref(), Some("vnc/screenshot"));
    }
}
