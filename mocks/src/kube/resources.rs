//! The resource types the fake API server serves, with what discovery and the REST
//! paths need to know about each (group, version, plural, kind, namespaced).
//!
//! The built-in types are the constants below ([`ALL`]). Every served version of an
//! established CustomResourceDefinition is a type too, made at run time by
//! [`super::crd`] with its names interned (see [`super::intern`]) and
//! [`ResourceType::custom`] set. Objects are stored by group and plural
//! ([`ResourceType::storage_key`]), so every version of a custom resource reads and
//! writes the same objects, as the real server's single storage version does.

/// One served resource type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceType {
    /// API group; "" for the core group (`/api/v1`).
    pub group: &'static str,
    pub version: &'static str,
    /// URL path segment, e.g. "nodes".
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    /// Verbs advertised in discovery.
    pub verbs: &'static [&'static str],
    /// `None` for a built-in type; what a CustomResourceDefinition's served version
    /// adds otherwise.
    pub custom: Option<Custom>,
}

/// What a custom resource type (one served version of a CustomResourceDefinition)
/// has beyond a built-in one's names. The rest of the definition (schema, printer
/// columns) stays with the CRD: see [`super::crd::CustomVersion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Custom {
    /// `status.acceptedNames.listKind`.
    pub list_kind: &'static str,
    /// Whether the version declares `subresources.status`.
    pub status_subresource: bool,
    /// `status.acceptedNames.categories` (`all` makes `kubectl get all` list it).
    pub categories: &'static [&'static str],
    /// The version's `selectableFields`, as field selector labels (`spec.color`).
    pub selectable_fields: &'static [&'static str],
}

pub(crate) const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

impl ResourceType {
    /// `v1` or `group/v1`, as in `apiVersion`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `/api/v1` or `/apis/group/v1`.
    pub fn base_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    /// The kind of the list, e.g. "NodeList" (a CRD's `listKind`).
    pub fn list_kind(&self) -> String {
        match self.custom {
            Some(c) => c.list_kind.to_owned(),
            None => format!("{}List", self.kind),
        }
    }

    /// What the store keys this type's objects by: group and plural, the same for
    /// every version of a custom resource.
    pub fn storage_key(&self) -> (&'static str, &'static str) {
        (self.group, self.plural)
    }

    /// Whether `other` names the same stored objects (another version of it).
    pub fn same_storage(&self, other: &ResourceType) -> bool {
        self.storage_key() == other.storage_key()
    }

    /// `plural` or `plural.group`, as NotFound and Forbidden messages name it.
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_owned()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `Kind` or `Kind.group`, as `Invalid` (422) messages name it.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_owned()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    /// Sets `apiVersion` to this type's version when the object was written through
    /// another version of the same resource (the real server converts; with the
    /// `None` conversion strategy that is all conversion does).
    pub fn convert(&self, object: &mut serde_json::Value) {
        let Some(map) = object.as_object_mut() else {
            return;
        };
        let want = self.api_version();
        if map.get("apiVersion").and_then(serde_json::Value::as_str) != Some(want.as_str()) {
            map.insert("apiVersion".into(), serde_json::Value::String(want));
        }
    }
}

pub const NODES: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "nodes",
    singular: "node",
    kind: "Node",
    namespaced: false,
    short_names: &["no"],
    verbs: ALL_VERBS,
    custom: None,
};

pub const PODS: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "pods",
    singular: "pod",
    kind: "Pod",
    namespaced: true,
    short_names: &["po"],
    verbs: ALL_VERBS,
    custom: None,
};

pub const SECRETS: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "secrets",
    singular: "secret",
    kind: "Secret",
    namespaced: true,
    short_names: &[],
    verbs: ALL_VERBS,
    custom: None,
};

pub const NAMESPACES: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "namespaces",
    singular: "namespace",
    kind: "Namespace",
    namespaced: false,
    short_names: &["ns"],
    verbs: &[
        "create", "delete", "get", "list", "patch", "update", "watch",
    ],
    custom: None,
};

pub const CONFIG_MAPS: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "configmaps",
    singular: "configmap",
    kind: "ConfigMap",
    namespaced: true,
    short_names: &["cm"],
    verbs: ALL_VERBS,
    custom: None,
};

pub const CORE_EVENTS: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "events",
    singular: "event",
    kind: "Event",
    namespaced: true,
    short_names: &["ev"],
    verbs: ALL_VERBS,
    custom: None,
};

pub const PERSISTENT_VOLUME_CLAIMS: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "persistentvolumeclaims",
    singular: "persistentvolumeclaim",
    kind: "PersistentVolumeClaim",
    namespaced: true,
    short_names: &["pvc"],
    verbs: ALL_VERBS,
    custom: None,
};

pub const PERSISTENT_VOLUMES: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "persistentvolumes",
    singular: "persistentvolume",
    kind: "PersistentVolume",
    namespaced: false,
    short_names: &["pv"],
    verbs: ALL_VERBS,
    custom: None,
};

pub const EVENTS_V1: ResourceType = ResourceType {
    group: "events.k8s.io",
    version: "v1",
    plural: "events",
    singular: "event",
    kind: "Event",
    namespaced: true,
    short_names: &["ev"],
    verbs: ALL_VERBS,
    custom: None,
};

pub const LEASES: ResourceType = ResourceType {
    group: "coordination.k8s.io",
    version: "v1",
    plural: "leases",
    singular: "lease",
    kind: "Lease",
    namespaced: true,
    short_names: &[],
    verbs: ALL_VERBS,
    custom: None,
};

pub const VOLUME_ATTACHMENTS: ResourceType = ResourceType {
    group: "storage.k8s.io",
    version: "v1",
    plural: "volumeattachments",
    singular: "volumeattachment",
    kind: "VolumeAttachment",
    namespaced: false,
    short_names: &[],
    verbs: ALL_VERBS,
    custom: None,
};

pub const CUSTOM_RESOURCE_DEFINITIONS: ResourceType = ResourceType {
    group: "apiextensions.k8s.io",
    version: "v1",
    plural: "customresourcedefinitions",
    singular: "customresourcedefinition",
    kind: "CustomResourceDefinition",
    namespaced: false,
    short_names: &["crd", "crds"],
    verbs: ALL_VERBS,
    custom: None,
};

// What `kubectl apply` of deploy/ creates: stored and served, nothing more (no
// controller acts on them; fake-kube's RBAC comes from `authz::Policy`, not these).

pub const SERVICE_ACCOUNTS: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "serviceaccounts",
    singular: "serviceaccount",
    kind: "ServiceAccount",
    namespaced: true,
    short_names: &["sa"],
    verbs: ALL_VERBS,
    custom: None,
};

pub const SERVICES: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "services",
    singular: "service",
    kind: "Service",
    namespaced: true,
    short_names: &["svc"],
    verbs: ALL_VERBS,
    custom: None,
};

pub const DEPLOYMENTS: ResourceType = ResourceType {
    group: "apps",
    version: "v1",
    plural: "deployments",
    singular: "deployment",
    kind: "Deployment",
    namespaced: true,
    short_names: &["deploy"],
    verbs: ALL_VERBS,
    custom: None,
};

pub const DAEMON_SETS: ResourceType = ResourceType {
    group: "apps",
    version: "v1",
    plural: "daemonsets",
    singular: "daemonset",
    kind: "DaemonSet",
    namespaced: true,
    short_names: &["ds"],
    verbs: ALL_VERBS,
    custom: None,
};

pub const NETWORK_POLICIES: ResourceType = ResourceType {
    group: "networking.k8s.io",
    version: "v1",
    plural: "networkpolicies",
    singular: "networkpolicy",
    kind: "NetworkPolicy",
    namespaced: true,
    short_names: &["netpol"],
    verbs: ALL_VERBS,
    custom: None,
};

pub const POD_DISRUPTION_BUDGETS: ResourceType = ResourceType {
    group: "policy",
    version: "v1",
    plural: "poddisruptionbudgets",
    singular: "poddisruptionbudget",
    kind: "PodDisruptionBudget",
    namespaced: true,
    short_names: &["pdb"],
    verbs: ALL_VERBS,
    custom: None,
};

pub const CLUSTER_ROLES: ResourceType = ResourceType {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    plural: "clusterroles",
    singular: "clusterrole",
    kind: "ClusterRole",
    namespaced: false,
    short_names: &[],
    verbs: ALL_VERBS,
    custom: None,
};

pub const CLUSTER_ROLE_BINDINGS: ResourceType = ResourceType {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    plural: "clusterrolebindings",
    singular: "clusterrolebinding",
    kind: "ClusterRoleBinding",
    namespaced: false,
    short_names: &[],
    verbs: ALL_VERBS,
    custom: None,
};

pub const ROLES: ResourceType = ResourceType {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    plural: "roles",
    singular: "role",
    kind: "Role",
    namespaced: true,
    short_names: &[],
    verbs: ALL_VERBS,
    custom: None,
};

pub const ROLE_BINDINGS: ResourceType = ResourceType {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    plural: "rolebindings",
    singular: "rolebinding",
    kind: "RoleBinding",
    namespaced: true,
    short_names: &[],
    verbs: ALL_VERBS,
    custom: None,
};

/// Every built-in type, in discovery order.
pub const ALL: &[ResourceType] = &[
    NAMESPACES,
    NODES,
    PODS,
    SECRETS,
    CONFIG_MAPS,
    CORE_EVENTS,
    PERSISTENT_VOLUMES,
    PERSISTENT_VOLUME_CLAIMS,
    EVENTS_V1,
    LEASES,
    VOLUME_ATTACHMENTS,
    CUSTOM_RESOURCE_DEFINITIONS,
    SERVICE_ACCOUNTS,
    SERVICES,
    DEPLOYMENTS,
    DAEMON_SETS,
    NETWORK_POLICIES,
    POD_DISRUPTION_BUDGETS,
    CLUSTER_ROLES,
    CLUSTER_ROLE_BINDINGS,
    ROLES,
    ROLE_BINDINGS,
];

/// The built-in type at `group`/`version`/`plural`, if any.
pub fn find(group: &str, version: &str, plural: &str) -> Option<ResourceType> {
    ALL.iter()
        .copied()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}
