//! Every Kubernetes API call nodefence makes, in one table: which verb on which
//! resource, where, and which configuration needs it.
//!
//! Three things are derived from it, so they cannot drift apart:
//! - the RBAC in `deploy/` (base and components), compared with it both ways by
//!   `tests/deploy_manifests.rs`;
//! - the start-up check of `nodefence run`: a SelfSubjectAccessReview for each grant
//!   its configuration needs, and a refusal to start that names every one missing and
//!   the component that grants it ([`missing`]), instead of a 403 in the middle of a
//!   fence; with `--companion-listen`, also a SubjectAccessReview of the companions'
//!   one grant ([`COMPANION`]: each reads its own Node when the leader is silent);
//! - `nodefence validate`'s list of the components a configuration needs, and
//!   `explain`'s "cannot read X: needs Y".
//!
//! End-to-end tests run the daemon against fake-kube with exactly the RBAC of
//! `deploy/` enforced (`tests/rbac.rs`): a call the table (and so the manifests) does
//! not grant fails there with 403.

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SubjectAccessReview,
    SubjectAccessReviewSpec,
};
use kube::api::PostParams;

use crate::config::{Config, SecretSource};
use crate::engine::{ForceDeletePods, Policy, ReleaseMode};

use super::pause::PAUSE_CONFIGMAP;
use super::records::STATE_CONFIGMAP;

/// Where a grant applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Cluster-scoped objects, or namespaced ones in every namespace.
    Cluster,
    /// nodefence's own namespace (`--namespace`, `POD_NAMESPACE`).
    Own,
    /// `kube-node-lease`, where the kubelets' Leases are.
    NodeLeases,
    /// Each namespace of `[metal3] namespaces`, where the BareMetalHosts (and their
    /// credentials Secrets, Metal3Machines and Machines) are.
    Metal3Hosts,
}

/// The Kustomize component of `deploy/` that grants an access (`None`: the base).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Component {
    Base,
    /// `release = "delete-node"`.
    DeleteNode,
    /// `delete_volume_attachments = true`.
    DeleteVolumeAttachments,
    /// `power_on_after_fence = true`: a released node's volumes must be gone first.
    PowerOnAfterFence,
    /// `password_secret`: the named Secrets, `get` by name.
    SecretCredentials,
    /// `[remediation] requests = true`: the remediation CRDs, and reading and
    /// answering the requests NodeHealthCheck and Cluster API create.
    Remediation,
    /// `[metal3] hosts = true`: BareMetalHosts as inventory, power through Metal3.
    Metal3,
}

impl Component {
    /// Its directory under `deploy/components/` (`base` is `deploy/` itself).
    pub fn dir(self) -> &'static str {
        match self {
            Component::Base => "base",
            Component::DeleteNode => "delete-node",
            Component::DeleteVolumeAttachments => "delete-volume-attachments",
            Component::PowerOnAfterFence => "power-on-after-fence",
            Component::SecretCredentials => "secret-credentials",
            Component::Remediation => "remediation",
            Component::Metal3 => "metal3",
        }
    }

    pub const ALL: [Component; 7] = [
        Component::Base,
        Component::DeleteNode,
        Component::DeleteVolumeAttachments,
        Component::PowerOnAfterFence,
        Component::SecretCredentials,
        Component::Remediation,
        Component::Metal3,
    ];
}

/// One kind of API call the daemon makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub verb: &'static str,
    /// `""` for the core group.
    pub group: &'static str,
    pub resource: &'static str,
    pub scope: Scope,
    /// The one object it is about, when the call always names it (then the grant
    /// is limited to it with `resourceNames`; Kubernetes cannot limit `create`).
    pub name: Option<&'static str>,
    pub component: Component,
    /// Why, for messages.
    pub why: &'static str,
}

const fn access(
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    scope: Scope,
    name: Option<&'static str>,
    component: Component,
    why: &'static str,
) -> Access {
    Access {
        verb,
        group,
        resource,
        scope,
        name,
        component,
        why,
    }
}

use Component::{
    Base, DeleteNode, DeleteVolumeAttachments, Metal3, PowerOnAfterFence, Remediation,
};
use Scope::{Cluster, Metal3Hosts, NodeLeases, Own};

/// The name of nodefence's leader Lease when `--lease-name` is not given.
pub const DEFAULT_LEASE_NAME: &str = "nodefence";

/// Every call of `nodefence run` (Secrets apart: they are named by the inventory, see
/// [`needed`]). The leader Lease's name is [`DEFAULT_LEASE_NAME`] here; [`needed`]
/// uses the one the daemon runs with.
pub const DAEMON: &[Access] = &[
    access(
        "list",
        "",
        "nodes",
        Cluster,
        None,
        Base,
        "watch Nodes (readiness, taints)",
    ),
    access(
        "watch",
        "",
        "nodes",
        Cluster,
        None,
        Base,
        "watch Nodes (readiness, taints)",
    ),
    access(
        "get",
        "",
        "nodes",
        Cluster,
        None,
        Base,
        "re-read a Node right before releasing it",
    ),
    access(
        "patch",
        "",
        "nodes",
        Cluster,
        None,
        Base,
        "add and remove the out-of-service taint; record a power-off on the Node before sending it",
    ),
    access(
        "delete",
        "",
        "nodes",
        Cluster,
        None,
        DeleteNode,
        "release = \"delete-node\"",
    ),
    access(
        "list",
        "coordination.k8s.io",
        "leases",
        NodeLeases,
        None,
        Base,
        "watch the kubelets' Leases (the fast path)",
    ),
    access(
        "watch",
        "coordination.k8s.io",
        "leases",
        NodeLeases,
        None,
        Base,
        "watch the kubelets' Leases (the fast path)",
    ),
    access(
        "get",
        "coordination.k8s.io",
        "leases",
        NodeLeases,
        None,
        Base,
        "re-read a kubelet's Lease right before releasing its node",
    ),
    access(
        "get",
        "coordination.k8s.io",
        "leases",
        Own,
        Some(DEFAULT_LEASE_NAME),
        Base,
        "leader election",
    ),
    access(
        "update",
        "coordination.k8s.io",
        "leases",
        Own,
        Some(DEFAULT_LEASE_NAME),
        Base,
        "leader election",
    ),
    access(
        "create",
        "coordination.k8s.io",
        "leases",
        Own,
        None,
        Base,
        "leader election (the first replica creates the Lease)",
    ),
    access(
        "list",
        "",
        "configmaps",
        Own,
        Some(PAUSE_CONFIGMAP),
        Base,
        "watch the pause switch",
    ),
    access(
        "watch",
        "",
        "configmaps",
        Own,
        Some(PAUSE_CONFIGMAP),
        Base,
        "watch the pause switch",
    ),
    access(
        "get",
        "",
        "configmaps",
        Own,
        Some(PAUSE_CONFIGMAP),
        Base,
        "read the pause switch right before each power command and release",
    ),
    access(
        "get",
        "",
        "configmaps",
        Own,
        Some(STATE_CONFIGMAP),
        Base,
        "release records that outlive a leader",
    ),
    access(
        "patch",
        "",
        "configmaps",
        Own,
        Some(STATE_CONFIGMAP),
        Base,
        "release records that outlive a leader",
    ),
    access(
        "create",
        "",
        "configmaps",
        Own,
        None,
        Base,
        "release records (created once)",
    ),
    access(
        "list",
        "",
        "pods",
        Cluster,
        None,
        Base,
        "force-delete a released node's pods (force_delete_pods)",
    ),
    access(
        "delete",
        "",
        "pods",
        Cluster,
        None,
        Base,
        "force-delete a released node's pods (force_delete_pods)",
    ),
    access(
        "create",
        "events.k8s.io",
        "events",
        Cluster,
        None,
        Base,
        "explain every decision as an Event",
    ),
    access(
        "patch",
        "events.k8s.io",
        "events",
        Cluster,
        None,
        Base,
        "explain every decision as an Event (repeats)",
    ),
    access(
        "create",
        "authentication.k8s.io",
        "tokenreviews",
        Cluster,
        None,
        Base,
        "authenticate each /metrics scrape's bearer token",
    ),
    access(
        "create",
        "authorization.k8s.io",
        "subjectaccessreviews",
        Cluster,
        None,
        Base,
        "authorize each /metrics scrape (get on /metrics); with --companion-listen, check \
         at start-up that the companions may read their Node",
    ),
    access(
        "list",
        "storage.k8s.io",
        "volumeattachments",
        Cluster,
        None,
        DeleteVolumeAttachments,
        "delete_volume_attachments = true",
    ),
    access(
        "delete",
        "storage.k8s.io",
        "volumeattachments",
        Cluster,
        None,
        DeleteVolumeAttachments,
        "delete_volume_attachments = true",
    ),
    access(
        "list",
        "storage.k8s.io",
        "volumeattachments",
        Cluster,
        None,
        PowerOnAfterFence,
        "power_on_after_fence = true: wait until no VolumeAttachment names the node",
    ),
    access(
        "list",
        "remediation.nodefence.io",
        "nodefenceremediations",
        Cluster,
        None,
        Remediation,
        "watch remediation requests (NodeHealthCheck, Cluster API)",
    ),
    access(
        "watch",
        "remediation.nodefence.io",
        "nodefenceremediations",
        Cluster,
        None,
        Remediation,
        "watch remediation requests (NodeHealthCheck, Cluster API)",
    ),
    access(
        "patch",
        "remediation.nodefence.io",
        "nodefenceremediations",
        Cluster,
        None,
        Remediation,
        "hold a request while nodefence's taint is on its node (finalizer)",
    ),
    access(
        "patch",
        "remediation.nodefence.io",
        "nodefenceremediations/status",
        Cluster,
        None,
        Remediation,
        "report on a request (status.conditions)",
    ),
    access(
        "get",
        "cluster.x-k8s.io",
        "machines",
        Cluster,
        None,
        Remediation,
        "find the node of a Cluster API request (the Machine's status.nodeRef)",
    ),
    access(
        "list",
        "metal3.io",
        "baremetalhosts",
        Metal3Hosts,
        None,
        Metal3,
        "read the BareMetalHosts of [metal3] namespaces (inventory entries)",
    ),
    access(
        "watch",
        "metal3.io",
        "baremetalhosts",
        Metal3Hosts,
        None,
        Metal3,
        "hear a host change, a rotated credentials Secret among them, as it happens",
    ),
    access(
        "get",
        "metal3.io",
        "baremetalhosts",
        Metal3Hosts,
        None,
        Metal3,
        "read a host's status.poweredOn for the Off proof, and its state before a power command",
    ),
    access(
        "patch",
        "metal3.io",
        "baremetalhosts",
        Metal3Hosts,
        None,
        Metal3,
        "power off and on through Metal3 (the reboot.metal3.io/nodefence annotation)",
    ),
    access(
        "get",
        "",
        "secrets",
        Metal3Hosts,
        None,
        Metal3,
        "read the BMC credentials a BareMetalHost names (spec.bmc.credentialsName)",
    ),
    access(
        "get",
        "infrastructure.cluster.x-k8s.io",
        "metal3machines",
        Metal3Hosts,
        None,
        Metal3,
        "find a host's node: its consumerRef's Metal3Machine",
    ),
    access(
        "get",
        "cluster.x-k8s.io",
        "machines",
        Metal3Hosts,
        None,
        Metal3,
        "find a host's node: the Metal3Machine's Machine (status.nodeRef)",
    ),
];

/// The companions' one grant (not nodefence's: their ServiceAccount's, from
/// `deploy/components/companion`): each reads its own Node when the leader is silent.
pub const COMPANION: Access = access(
    "get",
    "",
    "nodes",
    Cluster,
    None,
    Base,
    "each companion reads its own Node's fencing mark when the leader is silent (the \
     feeding rule's second basis)",
);

/// Where the companions' grant comes from.
pub const COMPANION_COMPONENT: &str = "companion";

/// Asks the API server (SubjectAccessReview) whether the companions' ServiceAccount
/// `namespace/service_account` has [`COMPANION`]. An error means the question could
/// not be asked.
pub async fn companion_granted(
    client: &kube::Client,
    namespace: &str,
    service_account: &str,
) -> Result<bool, kube::Error> {
    let api: kube::Api<SubjectAccessReview> = kube::Api::all(client.clone());
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!(
                "system:serviceaccount:{namespace}:{service_account}"
            )),
            // The groups the API server gives every ServiceAccount's token.
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(COMPANION.verb.into()),
                group: Some(COMPANION.group.into()),
                resource: Some(COMPANION.resource.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// The refusal to start when the companions lack their grant.
pub fn explain_companion_missing(namespace: &str, service_account: &str) -> String {
    format!(
        "the companions' ServiceAccount {namespace}/{service_account} lacks get nodes (cluster \
         scope), checked with SubjectAccessReview: {} — granted by the ClusterRole and \
         ClusterRoleBinding nodefence-companion of the Kustomize component \
         deploy/components/{COMPANION_COMPONENT} (apply it again; with another namespace or \
         ServiceAccount, bind that ClusterRole to it)",
        COMPANION.why
    )
}

/// A grant a running daemon needs, made concrete: its namespace and object name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Need {
    pub verb: String,
    pub group: String,
    pub resource: String,
    /// `None`: cluster scope.
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub component: Component,
    pub why: String,
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let resource = if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        };
        write!(f, "{} {resource}", self.verb)?;
        if let Some(name) = &self.name {
            write!(f, " {name:?}")?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " in namespace {ns}"),
            None => write!(f, " (cluster scope)"),
        }
    }
}

impl Need {
    /// A read an operator's command makes (`explain`, `pause --show`), for messages.
    pub fn read(verb: &str, group: &str, resource: &str, namespace: Option<&str>) -> Self {
        Need {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            namespace: namespace.map(str::to_string),
            name: None,
            component: Component::Base,
            why: String::new(),
        }
    }
}

/// Why a read failed, for an operator: `forbidden: this identity needs <need>` for a
/// 403 (the permission to ask for), the error itself otherwise.
pub fn unreadable(error: &kube::Error, need: &Need) -> String {
    match error {
        kube::Error::Api(status) if status.code == 403 => {
            format!(
                "forbidden: this identity needs {need} (ask for it, or run with a kubeconfig that has it)"
            )
        }
        other => crate::untrusted::field(&other.to_string()),
    }
}

/// Whether `policy` (the cluster-wide one or a node's) uses the component.
fn uses(component: Component, policy: &Policy) -> bool {
    match component {
        Component::Base | Component::SecretCredentials => true,
        Component::DeleteNode => policy.release == ReleaseMode::DeleteNode,
        Component::DeleteVolumeAttachments => policy.delete_volume_attachments,
        Component::PowerOnAfterFence => policy.power_on_after_fence,
        // Agent-wide, not a policy's: see [`needed`].
        Component::Remediation | Component::Metal3 => false,
    }
}

/// What `nodefence run` with `config` needs, in `namespace`, with its leader Lease
/// named `lease_name`. A dry run only reads.
pub fn needed(config: &Config, namespace: &str, lease_name: &str, dry_run: bool) -> Vec<Need> {
    let policies: Vec<&Policy> = std::iter::once(&config.agent.policy)
        .chain(config.inventory.nodes.values().map(|t| &t.policy))
        .collect();
    let force_deletes = policies
        .iter()
        .any(|p| p.force_delete_pods != ForceDeletePods::Never);
    let mut out = BTreeSet::new();
    for a in DAEMON {
        let agent_wide = match a.component {
            Component::Remediation => config.agent.remediation.requests,
            Component::Metal3 => config.agent.metal3.hosts,
            _ => false,
        };
        if !agent_wide && !policies.iter().any(|p| uses(a.component, p)) {
            continue;
        }
        if a.resource == "pods" && !force_deletes {
            continue;
        }
        let writes = !matches!(a.verb, "get" | "list" | "watch");
        if dry_run && (writes || (a.scope == Own && a.resource == "leases")) {
            continue;
        }
        let namespaces: Vec<Option<String>> = match a.scope {
            Scope::Cluster => vec![None],
            Scope::Own => vec![Some(namespace.to_string())],
            Scope::NodeLeases => vec![Some("kube-node-lease".into())],
            Scope::Metal3Hosts => config
                .agent
                .metal3
                .namespaces
                .iter()
                .cloned()
                .map(Some)
                .collect(),
        };
        for ns in namespaces {
            out.insert(Need {
                verb: a.verb.into(),
                group: a.group.into(),
                resource: a.resource.into(),
                namespace: ns,
                name: match a.name {
                    Some(DEFAULT_LEASE_NAME) if a.resource == "leases" => {
                        Some(lease_name.to_string())
                    }
                    other => other.map(str::to_string),
                },
                component: a.component,
                why: a.why.into(),
            });
        }
    }
    for secret in secrets(config) {
        let (ns, name) = match secret.split_once('/') {
            Some((ns, name)) => (ns.to_string(), name.to_string()),
            None => (namespace.to_string(), secret.clone()),
        };
        // Read, then watched by name (fieldSelector=metadata.name, which resourceNames
        // grants): a rotated password is picked up (daemon::secret_watch).
        for (verb, why) in [
            ("get", "BMC credentials kept in a Secret (password_secret)"),
            (
                "list",
                "a rotated password_secret picked up (listed by name)",
            ),
            (
                "watch",
                "a rotated password_secret picked up (watched by name)",
            ),
        ] {
            out.insert(Need {
                verb: verb.into(),
                group: String::new(),
                resource: "secrets".into(),
                namespace: Some(ns.clone()),
                name: Some(name.clone()),
                component: Component::SecretCredentials,
                why: why.into(),
            });
        }
    }
    out.into_iter().collect()
}

/// The Secrets the inventory names (`namespace/name`, or a bare name for
/// nodefence's own namespace), each once. Not those of entries built from
/// BareMetalHosts: the `metal3` component grants those.
pub fn secrets(config: &Config) -> BTreeSet<String> {
    config
        .inventory
        .nodes
        .values()
        .filter(|t| !matches!(t.origin, crate::config::Origin::BareMetalHost(_)))
        .flat_map(|t| t.sources())
        .filter_map(|s| match &s.credential()?.source {
            SecretSource::Secret(r) | SecretSource::SecretPending(r) => Some(match &r.namespace {
                Some(ns) => format!("{ns}/{}", r.name),
                None => r.name.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// The components of `deploy/` a configuration needs beyond the base.
pub fn components(config: &Config) -> BTreeSet<Component> {
    needed(config, "nodefence", DEFAULT_LEASE_NAME, false)
        .into_iter()
        .map(|n| n.component)
        .filter(|c| *c != Component::Base)
        .collect()
}

/// Asks the API server (SelfSubjectAccessReview) about every need; returns the ones
/// it does not allow. An error means the question could not be asked.
pub async fn missing(client: &kube::Client, needs: &[Need]) -> Result<Vec<Need>, kube::Error> {
    let api: kube::Api<SelfSubjectAccessReview> = kube::Api::all(client.clone());
    let mut denied = Vec::new();
    for need in needs {
        // `nodefenceremediations/status`: a subresource is its own field here.
        let (resource, subresource) = match need.resource.split_once('/') {
            Some((r, s)) => (r.to_string(), Some(s.to_string())),
            None => (need.resource.clone(), None),
        };
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(need.verb.clone()),
                    group: Some(need.group.clone()),
                    resource: Some(resource),
                    subresource,
                    namespace: need.namespace.clone(),
                    name: need.name.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = api.create(&PostParams::default(), &review).await?;
        if !answer.status.is_some_and(|s| s.allowed) {
            denied.push(need.clone());
        }
    }
    Ok(denied)
}

/// The refusal to start: every missing grant, what needs it, and where to get it.
pub fn explain_missing(denied: &[Need]) -> String {
    let mut text = String::from(
        "this ServiceAccount lacks permissions the configuration needs (checked with \
         SelfSubjectAccessReview); nothing was done. Missing:",
    );
    for n in denied {
        let from = match n.component {
            Component::Base => "deploy/ (the base RBAC)".to_string(),
            c => format!("the Kustomize component deploy/components/{}", c.dir()),
        };
        text.push_str(&format!("\n  - {n}: {} — granted by {from}", n.why));
    }
    if denied
        .iter()
        .any(|n| n.component == Component::SecretCredentials)
    {
        text.push_str(
            "\n  (for Secrets, list their names under resourceNames in the component's Role, \
             in each Secret's namespace)",
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_objects_are_limited_by_name_but_create_never_is() {
        for a in DAEMON {
            if a.verb == "create" {
                assert!(
                    a.name.is_none(),
                    "{a:?}: Kubernetes cannot limit create by name"
                );
            }
            if a.scope == Scope::Own && a.verb != "create" {
                assert!(a.name.is_some(), "{a:?}: own-namespace objects are named");
            }
        }
    }

    #[test]
    fn the_companions_missing_grant_names_itself_and_its_component() {
        let text = explain_companion_missing("nodefence", "nodefence-companion");
        for want in [
            "nodefence/nodefence-companion lacks get nodes (cluster scope)",
            "deploy/components/companion",
            "SubjectAccessReview",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
    }

    #[test]
    fn a_need_reads_as_what_to_grant() {
        let n = Need {
            verb: "delete".into(),
            group: String::new(),
            resource: "nodes".into(),
            namespace: None,
            name: None,
            component: Component::DeleteNode,
            why: "release = \"delete-node\"".into(),
        };
        assert_eq!(n.to_string(), "delete nodes (cluster scope)");
        let text = explain_missing(&[n]);
        assert!(text.contains("deploy/components/delete-node"), "{text}");
    }

    #[test]
    fn remediation_requests_need_their_component_and_only_then() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let load = |extra: &str| {
            std::fs::write(
                dir.path().join("nodefence.toml"),
                format!("inventory = \"inventory.toml\"\n{extra}"),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(
                dir.path().join("inventory.toml"),
                "[nodes.w1]\ndriver = \"exec\"\nagent = \"/bin/true\"\n",
            )
            .unwrap_or_else(|e| panic!("{e}"));
            crate::config::load(&dir.path().join("nodefence.toml"))
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let off = load("");
        assert!(!components(&off).contains(&Component::Remediation));
        let on = load("[remediation]\nrequests = true\n");
        assert!(components(&on).contains(&Component::Remediation));
        let needs = needed(&on, "nodefence", DEFAULT_LEASE_NAME, false);
        let remediation: Vec<String> = needs
            .iter()
            .filter(|n| n.component == Component::Remediation)
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            remediation,
            [
                "get machines.cluster.x-k8s.io (cluster scope)",
                "list nodefenceremediations.remediation.nodefence.io (cluster scope)",
                "patch nodefenceremediations.remediation.nodefence.io (cluster scope)",
                "patch nodefenceremediations/status.remediation.nodefence.io (cluster scope)",
                "watch nodefenceremediations.remediation.nodefence.io (cluster scope)",
            ]
        );
    }

    #[test]
    fn metal3_hosts_need_their_component_in_each_namespace_and_no_secret_credentials() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            dir.path().join("nodefence.toml"),
            "[metal3]\nhosts = true\nnamespaces = [\"metal3\", \"rack-b\"]\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mut config = crate::config::load(&dir.path().join("nodefence.toml"))
            .unwrap_or_else(|e| panic!("{e}"));
        // A node built from a BareMetalHost: its Secret is the metal3 component's.
        let host: crate::metal3::BareMetalHost = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "h1", "namespace": "metal3"},
            "spec": {"bmc": {"address": "ipmi://10.0.0.1", "credentialsName": "h1-bmc"}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let nodes = [crate::metal3::mapping::NodeFacts {
            name: "w1".into(),
            provider_id: Some("metal3://metal3/h1/m".into()),
            annotation: None,
        }];
        let d = crate::metal3::inventory::entries(
            &config.agent.metal3,
            &[host],
            &nodes,
            &Default::default(),
        );
        crate::metal3::inventory::merge(&mut config, &d);
        assert_eq!(config.inventory.nodes.len(), 1);
        assert_eq!(
            components(&config).into_iter().collect::<Vec<_>>(),
            [Component::Metal3]
        );
        let needs: Vec<String> = needed(&config, "nodefence", DEFAULT_LEASE_NAME, false)
            .iter()
            .filter(|n| n.component == Component::Metal3)
            .map(ToString::to_string)
            .collect();
        assert_eq!(needs.len(), 14, "{needs:#?}");
        for ns in ["metal3", "rack-b"] {
            for want in [
                "list baremetalhosts.metal3.io",
                "watch baremetalhosts.metal3.io",
                "get baremetalhosts.metal3.io",
                "patch baremetalhosts.metal3.io",
                "get secrets",
                "get metal3machines.infrastructure.cluster.x-k8s.io",
                "get machines.cluster.x-k8s.io",
            ] {
                let line = format!("{want} in namespace {ns}");
                assert!(needs.contains(&line), "{line} in {needs:#?}");
            }
        }
        // A dry run only reads.
        let dry = needed(&config, "nodefence", DEFAULT_LEASE_NAME, true);
        assert!(
            !dry.iter()
                .any(|n| n.verb == "patch" && n.resource == "baremetalhosts")
        );
    }
}
