//! Discovery and server information: `/version`, `/api`, `/apis`, the per-version
//! resource lists, and the aggregated (`apidiscovery.k8s.io/v2`) documents.
//!
//! kubectl cannot run a single command without discovery: it maps `nodes`, `no`
//! or `volumeattachments` to a group, version and scope from these documents (and
//! caches them). It first asks for the aggregated v2 document and falls back to the
//! legacy per-group documents when the answer's Content-Type does not announce v2;
//! both are served here. kube-rs's `Discovery::run()` reads the legacy ones,
//! `run_aggregated()` the v2 ones. Everything is derived from
//! [`super::resources::ALL`] and the CRD [`Registry`], so a new served type (or an
//! established CRD) shows up everywhere at once; a CRD's group lists its served
//! versions by Kubernetes' version priority (`v1`, `v1beta1`, `v1alpha1`, others),
//! the first being the preferred one, and groups only CRDs serve come after the
//! built-in ones, by name. Custom resources carry their categories and short names.

use std::cmp::Ordering;

use serde_json::{Value, json};

use super::crd::Registry;
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

/// Every served type in discovery order: the built-in ones, then each established
/// CRD's served versions.
fn all_types(reg: &Registry) -> Vec<ResourceType> {
    ALL.iter().copied().chain(reg.types()).collect()
}

/// Kubernetes' version priority (`version.CompareKubeAwareVersionStrings`): GA
/// before beta before alpha, higher numbers first, other names last, by name.
fn version_priority(a: &str, b: &str) -> Ordering {
    fn parse(v: &str) -> Option<(u8, u64, u64)> {
        let rest = v.strip_prefix('v')?;
        let split = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let major: u64 = rest[..split].parse().ok()?;
        let tail = &rest[split..];
        if tail.is_empty() {
            return Some((0, major, 0));
        }
        let (rank, minor) = if let Some(m) = tail.strip_prefix("beta") {
            (1, m)
        } else if let Some(m) = tail.strip_prefix("alpha") {
            (2, m)
        } else {
            return None;
        };
        if minor.is_empty() || !minor.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some((rank, major, minor.parse().ok()?))
    }
    match (parse(a), parse(b)) {
        (Some((ra, ma, na)), Some((rb, mb, nb))) => ra.cmp(&rb).then(mb.cmp(&ma)).then(nb.cmp(&na)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// The groups other than core with their versions, preferred first: the built-in
/// groups in discovery order, then the groups only CRDs serve, by name.
fn groups(reg: &Registry) -> Vec<(&'static str, Vec<&'static str>)> {
    type Groups = Vec<(&'static str, Vec<&'static str>)>;
    fn add(out: &mut Groups, group: &'static str, version: &'static str) {
        match out.iter_mut().find(|(g, _)| *g == group) {
            Some((_, versions)) => {
                if !versions.contains(&version) {
                    versions.push(version);
                }
            }
            None => out.push((group, vec![version])),
        }
    }
    let mut out: Groups = Vec::new();
    for rt in ALL.iter().filter(|r| !r.group.is_empty()) {
        add(&mut out, rt.group, rt.version);
    }
    let builtin = out.len();
    let mut custom: Vec<ResourceType> = reg.types().collect();
    custom.sort_by(|a, b| a.group.cmp(b.group));
    for rt in custom {
        add(&mut out, rt.group, rt.version);
    }
    out[builtin..].sort_by(|a, b| a.0.cmp(b.0));
    for (_, versions) in &mut out {
        versions.sort_by(|a, b| version_priority(a, b));
    }
    out
}

fn in_group_version(reg: &Registry, group: &str, version: &str) -> Vec<ResourceType> {
    all_types(reg)
        .into_iter()
        .filter(|r| r.group == group && r.version == version)
        .collect()
}

/// Whether `/apis/{group}` or `/apis/{group}/{version}` (version `None`) exists.
pub fn serves(reg: &Registry, group: &str, version: Option<&str>) -> bool {
    groups(reg)
        .iter()
        .any(|(g, versions)| *g == group && version.is_none_or(|want| versions.contains(&want)))
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

fn api_group(group: &str, versions: &[&str]) -> Value {
    let refs: Vec<Value> = versions
        .iter()
        .map(|v| group_version_ref(group, v))
        .collect();
    let preferred = versions.first().copied().unwrap_or_default();
    json!({
        "name": group,
        "versions": refs,
        "preferredVersion": group_version_ref(group, preferred),
    })
}

/// `/apis` (legacy).
pub fn group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = groups(reg).iter().map(|(g, v)| api_group(g, v)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}` (legacy), if served.
pub fn group(reg: &Registry, group: &str) -> Option<Value> {
    let all = groups(reg);
    let (g, v) = all.iter().find(|(g, _)| *g == group)?;
    let mut doc = api_group(g, v);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// The categories discovery gives a type (`kubectl get all` lists the `all` ones).
fn categories(rt: ResourceType) -> &'static [&'static str] {
    match (rt.custom, rt.group, rt.plural) {
        (Some(c), _, _) => c.categories,
        (None, "", "pods") => &["all"],
        (None, "apiextensions.k8s.io", "customresourcedefinitions") => &["api-extensions"],
        _ => &[],
    }
}

/// `/api/v1` or `/apis/{group}/{version}` (legacy `APIResourceList`).
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for rt in in_group_version(reg, group, version) {
        let mut r = json!({
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": rt.verbs,
            "shortNames": rt.short_names,
        });
        // (fake-kube never listed the categories of built-in types here.)
        if rt.custom.is_some() || rt.plural == "customresourcedefinitions" {
            let c = categories(rt);
            if !c.is_empty() {
                r["categories"] = json!(c);
            }
        }
        resources.push(r);
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

fn version_discovery(reg: &Registry, group: &str, version: &str) -> Value {
    let resources: Vec<Value> = in_group_version(reg, group, version)
        .into_iter()
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
            if !categories(rt).is_empty() {
                r["categories"] = json!(categories(rt));
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
pub fn core_aggregated(reg: &Registry) -> Value {
    discovery_list(vec![json!({
        "metadata": {"creationTimestamp": null},
        "versions": [version_discovery(reg, "", "v1")],
    })])
}

/// `/apis` as aggregated discovery (versions preferred first, as the real one).
pub fn groups_aggregated(reg: &Registry) -> Value {
    let items = groups(reg)
        .into_iter()
        .map(|(g, versions)| {
            let docs: Vec<Value> = versions
                .iter()
                .map(|v| version_discovery(reg, g, v))
                .collect();
            json!({
                "metadata": {"name": g, "creationTimestamp": null},
                "versions": docs,
            })
        })
        .collect();
    discovery_list(items)
}

/// Every served group-version, as `api/v1` or `apis/group/version` (the keys of
/// `/openapi/v3`).
pub fn group_versions(reg: &Registry) -> Vec<(String, String)> {
    let mut out = vec![(String::new(), "v1".to_owned())];
    for (g, versions) in groups(reg) {
        out.extend(versions.into_iter().map(|v| (g.to_owned(), v.to_owned())));
    }
    out
}

/// The served types of one group-version.
pub fn types_in(reg: &Registry, group: &str, version: &str) -> Vec<ResourceType> {
    in_group_version(reg, group, version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_served_type_is_discoverable_with_its_status_subresource() {
        let reg = Registry::default();
        let core = resource_list(&reg, "", "v1");
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"nodes") && names.contains(&"nodes/status"));
        assert!(names.contains(&"pods/status") && !names.contains(&"secrets/status"));
        let storage = resource_list(&reg, "storage.k8s.io", "v1");
        assert_eq!(storage["resources"][1]["name"], "volumeattachments/status");
        let groups = group_list(&reg);
        let gs: Vec<&str> = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            gs,
            [
                "events.k8s.io",
                "coordination.k8s.io",
                "storage.k8s.io",
                "apiextensions.k8s.io",
                "apps",
                "networking.k8s.io",
                "policy",
                "rbac.authorization.k8s.io"
            ]
        );
        assert!(serves(&reg, "coordination.k8s.io", Some("v1")) && serves(&reg, "apps", None));
        assert!(!serves(&reg, "batch", None));
        let agg = groups_aggregated(&reg);
        assert_eq!(agg["items"].as_array().unwrap().len(), 8);
        let core = core_aggregated(&reg);
        let nodes = &core["items"][0]["versions"][0]["resources"][1];
        assert_eq!(nodes["resource"], "nodes");
        assert_eq!(nodes["scope"], "Cluster");
        assert_eq!(nodes["subresources"][0]["subresource"], "status");
    }

    #[test]
    fn versions_sort_by_kubernetes_priority() {
        let mut v = vec![
            "v1alpha1", "foo", "v2beta1", "v1", "v1beta2", "v2", "v1beta1", "bar",
        ];
        v.sort_by(|a, b| version_priority(a, b));
        assert_eq!(
            v,
            [
                "v2", "v1", "v2beta1", "v1beta2", "v1beta1", "v1alpha1", "bar", "foo"
            ]
        );
    }
}
