//! The simulation's knobs, with the real components' defaults.
//!
//! Every duration here is in *simulated* time: the simulation divides it by
//! [`SimConfig::speed`] before sleeping, so a test can run a five-minute toleration in
//! a second while objects keep real wall-clock timestamps. The defaults are those of a
//! stock Kubernetes 1.32/1.33 cluster (kubelet, kube-controller-manager, CSI sidecars);
//! the constants below are the values the real components hard-code.

use std::time::Duration;

/// How the simulated control plane behaves. `SimConfig::default()` is a stock cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Time scale: 10.0 runs ten times faster than real time (all durations are
    /// divided by it). Values that are not finite and positive mean 1.0.
    pub speed: f64,
    /// kubelet's node Lease renew interval (`leaseDurationSeconds` 40 × 0.25 = 10s).
    pub lease_renew_interval: Duration,
    /// kubelet's `nodeStatusReportFrequency` (5m): with node leases, the kubelet posts
    /// its status only when it changed or when this much time passed since the last
    /// post, so `lastHeartbeatTime` is usually minutes old while the Lease is fresh.
    pub node_status_interval: Duration,
    /// kubelet's `nodeStatusUpdateFrequency` (10s): how often it computes its status
    /// (and posts it if changed, e.g. `volumesInUse` after an unmount).
    pub node_status_update_frequency: Duration,
    /// Node lifecycle controller's `--node-monitor-period` (5s).
    pub node_monitor_period: Duration,
    /// `--node-monitor-grace-period`: 50s since Kubernetes 1.32 (40s before).
    pub node_monitor_grace_period: Duration,
    /// `--node-startup-grace-period` (60s): grace for a Node that never posted Ready.
    pub node_startup_grace_period: Duration,
    /// DefaultTolerationSeconds admission plugin (300): the `tolerationSeconds` of the
    /// `not-ready`/`unreachable` NoExecute tolerations added to pods that have none.
    pub default_toleration_seconds: u64,
    /// Attach/detach controller force detach after `maxWaitForUnmountDuration` (6m)
    /// on an unhealthy node. `None` models `--disable-force-detach-on-timeout=true`
    /// (the real default is `false`, i.e. `Some(6 min)`; see the module docs of
    /// `attach_detach` for why the simulation defaults to the stuck behaviour).
    pub force_detach_after: Option<Duration>,
    /// `--attach-detach-reconcile-sync-period` (1m): how often the attach/detach
    /// controller checks that the volumes it believes attached still have their
    /// VolumeAttachment (how it notices one deleted behind its back).
    pub attach_detach_sync_period: Duration,
    /// Node lifecycle controller (health, conditions, unreachable taints, disruption
    /// modes) and the Lease garbage collection that follows a Node deletion.
    pub node_lifecycle: bool,
    /// Taint eviction controller (NoExecute taints delete pods).
    pub taint_eviction: bool,
    /// Pod garbage collector (out-of-service force deletion, orphans).
    pub pod_gc: bool,
    /// Attach/detach controller plus the CSI external-attacher.
    pub attach_detach: bool,
    /// StatefulSet controller and the CSI external-provisioner for its claims.
    pub workloads: bool,
    /// kube-scheduler.
    pub scheduler: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            speed: 1.0,
            lease_renew_interval: Duration::from_secs(10),
            node_status_interval: Duration::from_secs(5 * 60),
            node_status_update_frequency: Duration::from_secs(10),
            node_monitor_period: Duration::from_secs(5),
            node_monitor_grace_period: Duration::from_secs(50),
            node_startup_grace_period: Duration::from_secs(60),
            default_toleration_seconds: 300,
            force_detach_after: None,
            attach_detach_sync_period: Duration::from_secs(60),
            node_lifecycle: true,
            taint_eviction: true,
            pod_gc: true,
            attach_detach: true,
            workloads: true,
            scheduler: true,
        }
    }
}

/// `leaseDurationSeconds` the kubelet writes into its Lease.
pub const LEASE_DURATION_SECONDS: i64 = 40;
/// Namespace of the node Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// The maxWaitForUnmountDuration the attach/detach controller uses when force detach
/// is on.
pub const MAX_WAIT_FOR_UNMOUNT: Duration = Duration::from_secs(6 * 60);

/// PodGC's `gcCheckPeriod`.
pub const POD_GC_PERIOD: Duration = Duration::from_secs(20);
/// PodGC's `quarantineTime` before a missing Node's pods are orphans.
pub const POD_GC_QUARANTINE: Duration = Duration::from_secs(40);

/// Attach/detach reconciler loop period.
pub const ADC_LOOP_PERIOD: Duration = Duration::from_millis(100);
/// How long the CSI attacher waits for `status.attached` before failing an attach.
pub const CSI_ATTACH_TIMEOUT: Duration = Duration::from_secs(2 * 60);
/// First retry delay of a failed attach (exponential backoff, doubled each time).
pub const ATTACH_BACKOFF_INITIAL: Duration = Duration::from_millis(500);
/// Cap of the attach backoff (2m2s, as the operation executor's).
pub const ATTACH_BACKOFF_MAX: Duration = Duration::from_secs(122);
/// How long the fake CSI driver's ControllerPublishVolume takes.
pub const CSI_ATTACH_LATENCY: Duration = Duration::from_secs(1);
/// How long the fake CSI driver's ControllerUnpublishVolume takes.
pub const CSI_DETACH_LATENCY: Duration = Duration::from_secs(1);

/// Node lifecycle controller's `NodeEvictionPeriod` (NoExecute tainting pass).
pub const NODE_EVICTION_PERIOD: Duration = Duration::from_millis(100);
/// `--node-eviction-rate`: nodes tainted per second per zone.
pub const EVICTION_QPS: f64 = 0.1;
/// `--secondary-node-eviction-rate` for large partially disrupted zones.
pub const SECONDARY_EVICTION_QPS: f64 = 0.01;
/// `--large-cluster-size-threshold`.
pub const LARGE_CLUSTER_THRESHOLD: usize = 50;
/// `--unhealthy-zone-threshold`.
pub const UNHEALTHY_ZONE_THRESHOLD: f64 = 0.55;

/// How long the kubelet takes from "volumes mounted" to "containers started".
pub const CONTAINER_START: Duration = Duration::from_secs(1);
/// How long containers take to stop after SIGTERM (bounded by the grace period).
pub const CONTAINER_STOP: Duration = Duration::from_secs(1);
/// kubelet's wait for attach+mount before a FailedMount event (2m3s).
pub const MOUNT_TIMEOUT: Duration = Duration::from_secs(123);
/// How often the kubelet's pod workers re-check their pods without a trigger.
pub const KUBELET_SYNC: Duration = Duration::from_secs(1);

/// How often unschedulable pods are retried without a cluster event.
pub const SCHEDULER_RETRY: Duration = Duration::from_secs(10);
/// Resync period of the StatefulSet controller.
pub const WORKLOAD_RESYNC: Duration = Duration::from_secs(10);
/// Period of the Lease garbage collection.
pub const GC_PERIOD: Duration = Duration::from_secs(5);
