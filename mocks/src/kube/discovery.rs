//! Discovery and server information: `/version`, `/api`, `/apis`, the per-version
//! resource lists, and the aggregated (`apidiscovery.k8s.io/v2`) documents.
//!
//! kubectl cannot run a single command without discovery: it maps `nodes`, `no`
//! or `volumeattachments` to a group, version and scope from these documents (and
//! caches them). It first asks for the aggregated v2 document and falls back to the
//! legacy per-group documents when the answer's Content-Type does not announce v2;
//! both are served here. kube-rs's `Discovery::run()` reads the legacy ones,
//! `run_aggregated()` the v2 ones. Everything is derived from
//! [`super::resources::ALL`], so a new served type shows up everywhere at once.

use serde_json::{Value, json};

use super::resources::{ALL, ResourceType};
use super::strategy::has_status_subresource;

/// The Kubernetes version fake-kube claims (matches k8s-openapi's `v1_33`).
pub const GIT_VERSION: &str = "v1.33.4";

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-08-01T00:00:00Z",
        "goVersion": "go1.24.5",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// The groups other than core, each with its one version, in discovery order.
fn groups() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for rt in ALL.iter().filter(|r| !r.group.is_empty()) {
        if !out.contains(&(rt.group, rt.version)) {
            out.push((rt.group, rt.version));
        }
    }
    out
}

fn in_group_version<'a>(
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = ResourceType> + 'a {
    ALL.iter()
        .copied()
        .filter(move |r| r.group == group && r.version == version)
}

/// Whether `/apis/{group}` or `/apis/{group}/{version}` (version `None`) exists.
pub fn serves(group: &str, version: Option<&str>) -> bool {
    groups()
        .iter()
        .any(|(g, v)| *g == group && version.is_none_or(|want| want == *v))
}

/// `/api` (legacy).
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_version_ref(group: &str, version: &str) -> Value {
    json!({"groupVersion": format!("{group}/{version}"), "version": version})
}

fn api_group(group: &str, version: &str) -> Value {
    json!({
        "name": group,
        "versions": [group_version_ref(group, version)],
        "preferredVersion": group_version_ref(group, version),
    })
}

/// `/apis` (legacy).
pub fn group_list() -> Value {
    let groups: Vec<Value> = groups().into_iter().map(|(g, v)| api_group(g, v)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}` (legacy), if served.
pub fn group(group: &str) -> Option<Value> {
    let (g, v) = groups().into_iter().find(|(g, _)| *g == group)?;
    let mut doc = api_group(g, v);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// `/api/v1` or `/apis/{group}/{version}` (legacy `APIResourceList`).
pub fn resource_list(group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for rt in in_group_version(group, version) {
        resources.push(json!({
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": rt.verbs,
            "shortNames": rt.short_names,
        }));
        if has_status_subresource(rt) {
            resources.push(json!({
                "name": format!("{}/status", rt.plural),
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": STATUS_VERBS,
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}

fn response_kind(rt: ResourceType) -> Value {
    json!({"group": rt.group, "version": rt.version, "kind": rt.kind})
}

fn version_discovery(group: &str, version: &str) -> Value {
    let resources: Vec<Value> = in_group_version(group, version)
        .map(|rt| {
            let subresources: Vec<Value> = if has_status_subresource(rt) {
                vec![json!({
                    "subresource": "status",
                    "responseKind": response_kind(rt),
                    "verbs": STATUS_VERBS,
                })]
            } else {
                Vec::new()
            };
            let mut r = json!({
                "resource": rt.plural,
                "responseKind": response_kind(rt),
                "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
                "singularResource": rt.singular,
                "verbs": rt.verbs,
                "subresources": subresources,
            });
            if !rt.short_names.is_empty() {
                r["shortNames"] = json!(rt.short_names);
            }
            if rt.plural == "pods" {
                r["categories"] = json!(["all"]);
            }
            r
        })
        .collect();
    json!({"version": version, "resources": resources, "freshness": "Current"})
}

fn discovery_list(items: Vec<Value>) -> Value {
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

/// `/api` as aggregated discovery: one group with an empty name.
pub fn core_aggregated() -> Value {
    discovery_list(vec![json!({
        "metadata": {"creationTimestamp": null},
        "versions": [version_discovery("", "v1")],
    })])
}

/// `/apis` as aggregated discovery.
pub fn groups_aggregated() -> Value {
    let items = groups()
        .into_iter()
        .map(|(g, v)| {
            json!({
                "metadata": {"name": g, "creationTimestamp": null},
                "versions": [version_discovery(g, v)],
            })
        })
        .collect();
    discovery_list(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_served_type_is_discoverable_with_its_status_subresource() {
        let core = resource_list("", "v1");
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"nodes") && names.contains(&"nodes/status"));
        assert!(names.contains(&"pods/status") && !names.contains(&"secrets/status"));
        let storage = resource_list("storage.k8s.io", "v1");
        assert_eq!(storage["resources"][1]["name"], "volumeattachments/status");
        let groups = group_list();
        let gs: Vec<&str> = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            gs,
            ["events.k8s.io", "coordination.k8s.io", "storage.k8s.io"]
        );
        assert!(serves("coordination.k8s.io", Some("v1")) && !serves("apps", None));
        let agg = groups_aggregated();
        assert_eq!(agg["items"].as_array().unwrap().len(), 3);
        let core = core_aggregated();
        let nodes = &core["items"][0]["versions"][0]["resources"][1];
        assert_eq!(nodes["resource"], "nodes");
        assert_eq!(nodes["scope"], "Cluster");
        assert_eq!(nodes["subresources"][0]["subresource"], "status");
    }
}
