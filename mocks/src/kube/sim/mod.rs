//! fake-kube's simulated control plane: the Kubernetes components whose behaviour
//! decides whether a dead node's ReadWriteOnce volume can move, acting directly on
//! the fake API server's store while nodefence (over HTTP) and tests watch.
//!
//! The failure being reproduced (see `shared/seeds/000_*` and `001_*`): a node
//! loses power; its kubelet stops renewing its Lease; the node lifecycle controller
//! marks it `Ready=Unknown` and taints it `unreachable`; after the pods' 300s
//! toleration the taint eviction controller deletes them, but only a kubelet can
//! finish a graceful deletion, so they stay `Terminating`; the StatefulSet
//! controller will not create a replacement while the old pod exists, and the
//! attach/detach controller will not detach a volume the dead node last reported as
//! mounted. Nothing moves until someone who *knows* the machine is off says so: the
//! `node.kubernetes.io/out-of-service` taint (PodGC force-deletes the pods, the
//! attach/detach controller detaches at once) or deleting the Node and its
//! VolumeAttachments.
//!
//! Components, one per file (the controllers switchable in [`SimConfig`]):
//! - `kubelet` (+ `kubelet_pods`, `machine`, `pod_status`): Lease heartbeat, node
//!   status and `volumesInUse`, pods started once their volumes are attached,
//!   graceful deletions finished; silent while "powered off".
//! - `node_lifecycle` (+ `condition_taints`, `zones`): Ready=Unknown after the grace
//!   period, `unreachable` taints, pods marked not ready, disruption modes.
//! - `taint_eviction`: NoExecute taints delete pods once their toleration expires.
//! - `pod_gc`: force-deletes Terminating pods on out-of-service nodes, and orphans.
//! - `attach_detach` (+ `adc_operations`, `external_attacher`): VolumeAttachments,
//!   the safe-to-detach rules, Multi-Attach refusals, forced detach.
//! - `workload` (StatefulSet controller + CSI provisioner) and `scheduler`.
//! - `garbage_collector`: a deleted Node's Lease.
//!
//! Their notable decisions go to the timeline ([`SimEvent`], for `nodefence demo`)
//! and, as core/v1 Events, to the store (for `kubectl get events`). Objects carry
//! real wall-clock timestamps; only the components' waits are scaled by
//! [`SimConfig::speed`].

mod adc_operations;
mod attach_detach;
mod clock;
mod condition_taints;
mod config;
mod context;
mod events;
mod external_attacher;
mod garbage_collector;
mod handle;
mod kubelet;
mod kubelet_pods;
mod machine;
mod names;
mod node_lifecycle;
mod objects;
mod pod_gc;
mod pod_status;
mod scheduler;
mod specs;
mod taint_eviction;
mod taints;
mod timeline;
mod volumes;
mod workload;
mod zones;

pub use config::{LEASE_DURATION_SECONDS, MAX_WAIT_FOR_UNMOUNT, SimConfig};
pub use handle::{SimHandle, Simulation};
pub use specs::{
    DEFAULT_DRIVER, DEFAULT_KUBELET_VERSION, DEFAULT_STORAGE_CLASS, NodeSpec, WorkloadSpec,
};
pub use taints::add_default_tolerations;
pub use timeline::{SimEvent, SimEventKind};
