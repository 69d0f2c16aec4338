//! The resource types the fake API server serves, with what discovery and the REST
//! paths need to know about each (group, version, plural, kind, namespaced).

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
}

const ALL_VERBS: &[&str] = &[
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

    /// The kind of the list, e.g. "NodeList".
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
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
};

/// Every served type, in discovery order.
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
];

/// The served type at `group`/`version`/`plural`, if any.
pub fn find(group: &str, version: &str, plural: &str) -> Option<ResourceType> {
    ALL.iter()
        .copied()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}
