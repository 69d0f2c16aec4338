//! RBAC, as the API server applies it to one identity: request attributes (verb,
//! group, resource, namespace, name) from the URL, an allow decision from a set of
//! rules, `403 Forbidden` in the real server's words, and SelfSubjectAccessReview.
//!
//! A test gives [`super::FakeKube`] a second bearer token bound to a [`Policy`]
//! (built from the ClusterRoles, Roles and bindings a deploy manifest holds): requests
//! with that token are authorized like a ServiceAccount's, while the main token
//! stays all-powerful for the test itself. What is authorized follows the API
//! server's RequestInfo and RBAC rules:
//! - verbs: GET of an object `get`, of a collection `list`, with `watch=true` (or a
//!   `/watch/` path) `watch`; POST `create`, PUT `update`, PATCH `patch`, DELETE of an
//!   object `delete`, of a collection `deletecollection`;
//! - a subresource is `resource/subresource` (`nodes/status`);
//! - a list or watch whose field selector is `metadata.name=NAME` is for that name
//!   (so `resourceNames` can authorize it), as the API server does;
//! - a rule matches on `*` or the exact group, resource and verb, and its
//!   `resourceNames`, when any, must hold the name (an unnamed request never matches
//!   a named rule);
//! - non-resource URLs (`/version`, discovery) and creating a
//!   SelfSubjectAccessReview are allowed to every authenticated identity, as the
//!   default `system:discovery`, `system:public-info-viewer` and `system:basic-user`
//!   bindings do;
//! - a rule's `nonResourceURLs` (`/metrics`, or a prefix ending in `*`) counts only
//!   through a ClusterRoleBinding, as in RBAC: that is what a SubjectAccessReview
//!   with `nonResourceAttributes` is answered from ([`Policy::allows_non_resource`]).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What a request asks to do, in RBAC's terms.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Attributes {
    pub verb: String,
    /// `""` for the core group.
    pub group: String,
    /// Plural, with `/subresource` when there is one.
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// One RBAC rule, as in a Role or ClusterRole (`rules[]`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    #[serde(default)]
    pub api_groups: Vec<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
    /// `nonResourceURLs`: paths (`/metrics`), or prefixes ending in `*`.
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

/// A rule and where it applies: everywhere (a ClusterRole through a
/// ClusterRoleBinding) or in one namespace (a Role, or a ClusterRole through a
/// RoleBinding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub namespace: Option<String>,
    pub rule: Rule,
}

/// Everything one identity may do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub grants: Vec<Grant>,
}

impl Policy {
    /// The grants of `subject` (`system:serviceaccount:NS:NAME`) in a set of RBAC
    /// objects as JSON (ClusterRole, Role, ClusterRoleBinding, RoleBinding; others
    /// are ignored).
    pub fn for_service_account(objects: &[Value], namespace: &str, name: &str) -> Self {
        let bound = |binding: &Value| {
            binding["subjects"].as_array().is_some_and(|subjects| {
                subjects.iter().any(|s| {
                    s["kind"] == "ServiceAccount"
                        && s["name"] == name
                        && s["namespace"].as_str().unwrap_or(namespace) == namespace
                })
            })
        };
        let rules_of = |kind: &str, role: &str, ns: Option<&str>| -> Vec<Rule> {
            objects
                .iter()
                .filter(|o| o["kind"] == kind && o["metadata"]["name"] == role)
                .filter(|o| ns.is_none() || o["metadata"]["namespace"].as_str() == ns)
                .flat_map(|o| o["rules"].as_array().cloned().unwrap_or_default())
                .filter_map(|r| serde_json::from_value(r).ok())
                .collect()
        };
        let mut grants = Vec::new();
        for binding in objects.iter().filter(|o| bound(o)) {
            let role_kind = binding["roleRef"]["kind"].as_str().unwrap_or_default();
            let role = binding["roleRef"]["name"].as_str().unwrap_or_default();
            let (scope, rules) = match binding["kind"].as_str() {
                Some("ClusterRoleBinding") => (None, rules_of("ClusterRole", role, None)),
                Some("RoleBinding") => {
                    let ns = binding["metadata"]["namespace"].as_str().map(str::to_owned);
                    let rules = if role_kind == "ClusterRole" {
                        rules_of("ClusterRole", role, None)
                    } else {
                        rules_of("Role", role, ns.as_deref())
                    };
                    (ns, rules)
                }
                _ => continue,
            };
            grants.extend(rules.into_iter().map(|rule| Grant {
                namespace: scope.clone(),
                rule,
            }));
        }
        Self { grants }
    }

    /// Whether these attributes are allowed.
    pub fn allows(&self, a: &Attributes) -> bool {
        self.grants.iter().any(|g| {
            let in_scope = match (&g.namespace, &a.namespace) {
                (None, _) => true,
                (Some(ns), Some(asked)) => ns == asked,
                (Some(_), None) => false,
            };
            in_scope && rule_allows(&g.rule, a)
        })
    }
}

impl Policy {
    /// Whether `verb` on the non-resource URL `path` is allowed: only cluster-wide
    /// grants count (a RoleBinding cannot grant a URL).
    pub fn allows_non_resource(&self, path: &str, verb: &str) -> bool {
        self.grants.iter().any(|g| {
            g.namespace.is_none()
                && matches(&g.rule.verbs, verb)
                && g.rule.non_resource_urls.iter().any(|u| {
                    u == "*"
                        || u == path
                        || u.strip_suffix('*')
                            .is_some_and(|prefix| path.starts_with(prefix))
                })
        })
    }
}

fn matches(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

fn rule_allows(rule: &Rule, a: &Attributes) -> bool {
    let resource_ok = rule.resources.iter().any(|r| {
        r == "*"
            || *r == a.resource
            || (r.ends_with("/*") && a.resource.starts_with(&r[..r.len() - 1]))
    });
    matches(&rule.verbs, &a.verb)
        && matches(&rule.api_groups, &a.group)
        && resource_ok
        && (rule.resource_names.is_empty()
            || a.name
                .as_deref()
                .is_some_and(|n| rule.resource_names.iter().any(|r| r == n)))
}

/// The attributes of a resource request; `None` for non-resource URLs.
pub fn attributes(method: &str, path_and_query: &str) -> Option<Attributes> {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, rest) = match segs.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let (legacy_watch, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, tail @ ..] => (Some((*ns).to_owned()), {
            let mut v = vec![*plural];
            v.extend_from_slice(tail);
            v
        }),
        // The Namespace object itself.
        ["namespaces", name, tail @ ..] => (None, {
            let mut v = vec!["namespaces", *name];
            v.extend_from_slice(tail);
            v
        }),
        other => (None, other.to_vec()),
    };
    let (resource, mut name, sub) = match rest.as_slice() {
        [plural] => ((*plural).to_owned(), None, None),
        [plural, name] => ((*plural).to_owned(), Some((*name).to_owned()), None),
        [plural, name, sub] => ((*plural).to_owned(), Some((*name).to_owned()), Some(*sub)),
        _ => return None,
    };
    let param = |key: &str| {
        url::form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    };
    let watch = legacy_watch || param("watch").is_some_and(|v| v == "true" || v == "1");
    let verb = match (method, name.is_some()) {
        ("GET" | "HEAD", _) if watch => "watch",
        ("GET" | "HEAD", true) => "get",
        ("GET" | "HEAD", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return None,
    };
    if name.is_none() && matches!(verb, "list" | "watch") {
        name = param("fieldSelector")
            .and_then(|s| s.strip_prefix("metadata.name=").map(str::to_owned))
            .filter(|n| !n.contains(','));
    }
    Some(Attributes {
        verb: verb.to_owned(),
        group: group.to_owned(),
        resource: match sub {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource,
        },
        namespace,
        name,
    })
}

/// The `403` the API server sends, naming the user and what it lacks.
pub fn forbidden_status(a: &Attributes, user: &str) -> Value {
    let scope = match &a.namespace {
        Some(ns) => format!("in the namespace \"{ns}\""),
        None => "at the cluster scope".to_owned(),
    };
    let object = match &a.name {
        Some(n) => format!("{} \"{n}\" is forbidden", a.resource),
        None => format!("{} is forbidden", a.resource),
    };
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "{object}: User \"{user}\" cannot {} resource \"{}\" in API group \"{}\" {scope}",
            a.verb, a.resource, a.group
        ),
        "reason": "Forbidden",
        "details": { "name": a.name, "group": a.group, "kind": a.resource },
        "code": 403
    })
}

/// Answers a SelfSubjectAccessReview body for `policy` (`None`: everything allowed).
pub fn review(policy: Option<&Policy>, body: &Value) -> Value {
    review_as("SelfSubjectAccessReview", policy, body)
}

/// Answers an access review (`kind`: SelfSubjectAccessReview or SubjectAccessReview)
/// for `policy` (`None`: everything allowed): its `resourceAttributes`, or its
/// `nonResourceAttributes` (`path`, `verb`).
pub fn review_as(kind: &str, policy: Option<&Policy>, body: &Value) -> Value {
    let spec = &body["spec"];
    let allowed = if let Some(url) = spec["nonResourceAttributes"].as_object() {
        let text = |k: &str| url.get(k).and_then(Value::as_str).unwrap_or_default();
        policy.is_none_or(|p| p.allows_non_resource(text("path"), text("verb")))
    } else {
        let attrs = &spec["resourceAttributes"];
        let text = |k: &str| attrs[k].as_str().unwrap_or_default().to_owned();
        let opt = |k: &str| {
            attrs[k]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let resource = match attrs["subresource"].as_str().filter(|s| !s.is_empty()) {
            Some(sub) => format!("{}/{sub}", text("resource")),
            None => text("resource"),
        };
        let asked = Attributes {
            verb: text("verb"),
            group: text("group"),
            resource,
            namespace: opt("namespace"),
            name: opt("name"),
        };
        !attrs.is_null() && policy.is_none_or(|p| p.allows(&asked))
    };
    let mut status = json!({ "allowed": allowed });
    if !allowed {
        status["reason"] = json!("no RBAC rule allows it");
    }
    json!({
        "kind": kind,
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": { "creationTimestamp": null },
        "spec": spec.clone(),
        "status": status
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(m: &str, p: &str) -> Attributes {
        attributes(m, p).unwrap()
    }

    #[test]
    fn attributes_follow_the_api_servers_request_info() {
        let a = attrs("GET", "/api/v1/nodes?watch=true&resourceVersion=1");
        assert_eq!(
            (a.verb.as_str(), a.resource.as_str(), a.name),
            ("watch", "nodes", None)
        );
        let a = attrs("GET", "/api/v1/nodes/worker-1");
        assert_eq!(
            (a.verb.as_str(), a.name.as_deref()),
            ("get", Some("worker-1"))
        );
        let a = attrs("PATCH", "/api/v1/nodes/worker-1/status");
        assert_eq!(a.resource, "nodes/status");
        let a = attrs("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dworker-1");
        assert_eq!((a.verb.as_str(), a.namespace, a.name), ("list", None, None));
        let a = attrs(
            "GET",
            "/api/v1/namespaces/nodefence/configmaps?fieldSelector=metadata.name%3Dnodefence-pause&watch=true",
        );
        assert_eq!(
            (a.verb.as_str(), a.namespace.as_deref(), a.name.as_deref()),
            ("watch", Some("nodefence"), Some("nodefence-pause"))
        );
        let a = attrs("DELETE", "/api/v1/namespaces/db/pods/db-0");
        assert_eq!(
            (a.verb.as_str(), a.namespace.as_deref()),
            ("delete", Some("db"))
        );
        let a = attrs("POST", "/apis/events.k8s.io/v1/namespaces/default/events");
        assert_eq!(
            (a.verb.as_str(), a.group.as_str()),
            ("create", "events.k8s.io")
        );
        assert_eq!(attributes("GET", "/version"), None);
        assert_eq!(attributes("GET", "/apis"), None);
    }

    #[test]
    fn rbac_objects_become_a_policy_that_allows_exactly_what_they_grant() {
        let objects: Vec<Value> = serde_json::from_value(json!([
            {"kind": "ClusterRole", "metadata": {"name": "c"},
             "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]},
            {"kind": "ClusterRoleBinding", "metadata": {"name": "c"},
             "roleRef": {"kind": "ClusterRole", "name": "c"},
             "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}]},
            {"kind": "Role", "metadata": {"name": "r", "namespace": "ns"},
             "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                        "resourceNames": ["lock"], "verbs": ["get", "update"]}]},
            {"kind": "RoleBinding", "metadata": {"name": "r", "namespace": "ns"},
             "roleRef": {"kind": "Role", "name": "r"},
             "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}]},
            {"kind": "ClusterRoleBinding", "metadata": {"name": "other"},
             "roleRef": {"kind": "ClusterRole", "name": "c"},
             "subjects": [{"kind": "ServiceAccount", "name": "someone-else", "namespace": "ns"}]}
        ]))
        .unwrap();
        let p = Policy::for_service_account(&objects, "ns", "sa");
        assert!(p.allows(&attrs("GET", "/api/v1/nodes/w1")));
        assert!(!p.allows(&attrs("DELETE", "/api/v1/nodes/w1")));
        let lease = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/lock";
        assert!(p.allows(&attrs("PUT", lease)));
        assert!(!p.allows(&attrs(
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/other"
        )));
        assert!(!p.allows(&attrs(
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/x/leases/lock"
        )));
        assert!(!p.allows(&attrs(
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
        )));
        assert!(
            Policy::for_service_account(&objects, "ns", "nobody")
                .grants
                .is_empty()
        );

        let review_of = |verb: &str, resource: &str| {
            review(
                Some(&p),
                &json!({"spec": {"resourceAttributes": {"verb": verb, "resource": resource, "group": ""}}}),
            )["status"]["allowed"]
                .as_bool()
                .unwrap()
        };
        assert!(review_of("list", "nodes"));
        assert!(!review_of("delete", "nodes"));
        let status = forbidden_status(
            &attrs("DELETE", "/api/v1/nodes/w1"),
            "system:serviceaccount:ns:sa",
        );
        assert_eq!(status["code"], 403);
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .contains("cannot delete resource \"nodes\"")
        );
    }

    #[test]
    fn non_resource_urls_are_granted_only_cluster_wide_and_answered_in_reviews() {
        let objects = vec![
            json!({"kind": "ClusterRole", "metadata": {"name": "reader"},
                   "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
                             {"nonResourceURLs": ["/debug/*"], "verbs": ["get"]}]}),
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "reader"},
                   "roleRef": {"kind": "ClusterRole", "name": "reader"},
                   "subjects": [{"kind": "ServiceAccount", "name": "prom", "namespace": "monitoring"}]}),
            json!({"kind": "RoleBinding", "metadata": {"name": "reader", "namespace": "apps"},
                   "roleRef": {"kind": "ClusterRole", "name": "reader"},
                   "subjects": [{"kind": "ServiceAccount", "name": "app", "namespace": "apps"}]}),
        ];
        let prom = Policy::for_service_account(&objects, "monitoring", "prom");
        assert!(prom.allows_non_resource("/metrics", "get"));
        assert!(prom.allows_non_resource("/debug/pprof", "get"));
        assert!(!prom.allows_non_resource("/metrics", "post"));
        assert!(!prom.allows_non_resource("/metricsx", "get"));
        assert!(!prom.allows(&attrs("GET", "/api/v1/nodes")));
        // Through a RoleBinding a URL is not granted, as in RBAC.
        let app = Policy::for_service_account(&objects, "apps", "app");
        assert!(!app.allows_non_resource("/metrics", "get"));

        let body = json!({"spec": {"user": "system:serviceaccount:monitoring:prom",
                                   "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}});
        let answer = review_as("SubjectAccessReview", Some(&prom), &body);
        assert_eq!(answer["status"]["allowed"], true);
        assert_eq!(answer["kind"], "SubjectAccessReview");
        let answer = review_as("SubjectAccessReview", Some(&app), &body);
        assert_eq!(answer["status"]["allowed"], false);
    }
}
