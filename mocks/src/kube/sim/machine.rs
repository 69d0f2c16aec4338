//! One simulated machine and the objects its kubelet writes about it: the Node
//! (labels, annotation `volumes.kubernetes.io/controller-managed-attach-detach`,
//! addresses, capacity, `nodeInfo` with the SMBIOS `systemUUID` a BMC also reports,
//! the four kubelet-owned conditions) and the node Lease.

use serde_json::{Value, json};

use super::super::store::{now_rfc3339, now_rfc3339_micros};
use super::config::{LEASE_DURATION_SECONDS, NODE_LEASE_NAMESPACE};
use super::names::random_hex;
use super::objects::{self, set_condition};
use super::specs::NodeSpec;
use super::taints;

/// The conditions the kubelet owns, in the order it reports them.
const CONDITIONS: [(&str, &str, &str, &str); 4] = [
    (
        "MemoryPressure",
        "False",
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
    ),
    (
        "DiskPressure",
        "False",
        "KubeletHasNoDiskPressure",
        "kubelet has no disk pressure",
    ),
    (
        "PIDPressure",
        "False",
        "KubeletHasSufficientPID",
        "kubelet has sufficient PID available",
    ),
    (
        "Ready",
        "True",
        "KubeletReady",
        "kubelet is posting ready status",
    ),
];

/// Fixed facts about one machine.
#[derive(Debug, Clone)]
pub struct Machine {
    pub spec: NodeSpec,
    pub ip: String,
    pub index: u32,
    pub system_uuid: String,
    pub machine_id: String,
}

impl Machine {
    /// Its `boot`-th boot's ID: unique among the machines of a simulation and the same
    /// in every run of it (a seed replays to the byte, logs included).
    pub fn boot_id(&self, boot: u64) -> String {
        let id = (0xb007_u128 << 112) | (u128::from(self.index) << 64) | u128::from(boot);
        uuid::Uuid::from_u128(id).to_string()
    }

    pub fn new(spec: NodeSpec, index: u32) -> Self {
        let ip = spec
            .internal_ip
            .clone()
            .unwrap_or_else(|| format!("10.0.0.{}", 10 + index % 240));
        let system_uuid = spec
            .system_uuid
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string().to_uppercase());
        Self {
            spec,
            ip,
            index,
            system_uuid,
            machine_id: random_hex(32),
        }
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The Node object the kubelet registers.
    pub fn node_object(&self, boot_id: &str) -> Value {
        let name = self.name();
        let mut labels = json!({
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
        });
        if self.spec.control_plane {
            labels[taints::CONTROL_PLANE] = json!("");
            labels["node.kubernetes.io/exclude-from-external-load-balancers"] = json!("");
        }
        if let Some(zone) = &self.spec.zone {
            labels["topology.kubernetes.io/zone"] = json!(zone);
        }
        for (k, v) in &self.spec.labels {
            labels[k.as_str()] = json!(v);
        }
        let cidr = format!("10.244.{}.0/24", self.index % 250);
        let mut node = json!({
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                },
            },
            "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
            "status": {},
        });
        if let Some(id) = &self.spec.provider_id {
            node["spec"]["providerID"] = json!(id);
        }
        if self.spec.control_plane {
            node["spec"]["taints"] =
                json!([{"key": taints::CONTROL_PLANE, "effect": taints::NO_SCHEDULE}]);
        }
        self.apply_status(&mut node, boot_id, &[], &now_rfc3339());
        node
    }

    /// Writes everything the kubelet owns in `status`, heartbeats set to `heartbeat`
    /// (or kept, when `heartbeat` is empty and the condition exists).
    pub fn apply_status(
        &self,
        node: &mut Value,
        boot_id: &str,
        in_use: &[String],
        heartbeat: &str,
    ) {
        let now = now_rfc3339();
        for (kind, status, reason, message) in CONDITIONS {
            let hb = if heartbeat.is_empty() {
                objects::condition(node, kind)
                    .and_then(|c| c.get("lastHeartbeatTime"))
                    .cloned()
                    .unwrap_or_else(|| json!(now))
            } else {
                json!(heartbeat)
            };
            set_condition(
                node,
                json!({"type": kind, "status": status, "reason": reason, "message": message,
                    "lastHeartbeatTime": hb}),
            );
        }
        let capacity = json!({"cpu": "4", "ephemeral-storage": "101430960Ki",
            "hugepages-2Mi": "0", "memory": "16369152Ki", "pods": "110"});
        let allocatable = json!({"cpu": "4", "ephemeral-storage": "93478772582",
            "hugepages-2Mi": "0", "memory": "16266752Ki", "pods": "110"});
        let status = objects::obj_mut(node, &["status"]);
        status.insert(
            "addresses".into(),
            json!([{"type": "InternalIP", "address": self.ip}, {"type": "Hostname", "address": self.name()}]),
        );
        status.insert("capacity".into(), capacity);
        status.insert("allocatable".into(), allocatable);
        status.insert(
            "daemonEndpoints".into(),
            json!({"kubeletEndpoint": {"Port": 10250}}),
        );
        status.insert(
            "nodeInfo".into(),
            json!({
                "architecture": "amd64",
                "bootID": boot_id,
                "containerRuntimeVersion": "containerd://1.7.27",
                "kernelVersion": "6.8.0-60-generic",
                "kubeProxyVersion": self.spec.kubelet_version,
                "kubeletVersion": self.spec.kubelet_version,
                "machineID": self.machine_id,
                "operatingSystem": "linux",
                "osImage": "Ubuntu 24.04.2 LTS",
                "systemUUID": self.system_uuid,
            }),
        );
        if in_use.is_empty() {
            status.remove("volumesInUse");
        } else {
            status.insert("volumesInUse".into(), json!(in_use));
        }
    }
}

/// The Lease object of a node.
pub fn lease_object(node: &str, node_uid: Option<&str>) -> Value {
    let mut lease = json!({
        "metadata": {"name": node, "namespace": NODE_LEASE_NAMESPACE},
        "spec": {
            "holderIdentity": node,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": now_rfc3339_micros(),
        },
    });
    if let Some(uid) = node_uid {
        lease["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}]);
    }
    lease
}
