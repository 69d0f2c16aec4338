//! Fencing policy: when to power a machine off, when to release, how to recover.
//!
//! Two clocks guard different risks. A machine confirmed Off cannot write, so its
//! node is released as soon as it is unhealthy (`release_off_after`, default 0 s):
//! waiting only delays recovery. Powering off a machine that is still On is the risky
//! act (the node may only be partitioned from the control plane), so it waits for
//! `unhealthy_after` and is subject to storm protection and rate limits.

use std::time::Duration;

/// What to do when the BMC says the machine of an unreachable node is On.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnPoweredOn {
    /// Fence: ForceOff, then confirm Off, then release.
    PowerOff,
    /// Only alert and keep checking; a person decides.
    Wait,
}

/// When a node whose kubelet stopped renewing its Lease becomes suspect (its power is
/// read; a machine proven Off is released; nothing is ever powered off on this alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStaleAfter {
    /// At the first missed renewal, from the Lease's own timing: the kubelet renews
    /// every `leaseDurationSeconds / 4` (10 s of 40 s by default, with up to 4 %
    /// jitter); a renewal this much late, plus a fifth of it (at least 2 s) for jitter
    /// and API latency, was missed: 12 s by default.
    MissedRenewal,
    /// A fixed time since the last renewal (`lease_stale_after = "25s"`).
    Fixed(Duration),
}

/// `leaseDurationSeconds` when a Lease does not say (the kubelet's default).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(40);

impl LeaseStaleAfter {
    /// The threshold for a Lease of `lease_duration` (`None`: not written).
    pub fn for_lease(self, lease_duration: Option<Duration>) -> Duration {
        match self {
            LeaseStaleAfter::Fixed(d) => d,
            LeaseStaleAfter::MissedRenewal => {
                let duration = lease_duration
                    .filter(|d| !d.is_zero())
                    .unwrap_or(DEFAULT_LEASE_DURATION);
                let renew_every = duration / 4;
                renew_every + (renew_every / 5).max(Duration::from_secs(2))
            }
        }
    }
}

/// How a confirmed-off node's volumes are released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseMode {
    /// `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute` (non-graceful node
    /// shutdown): the control plane force-deletes pods and detaches volumes.
    OutOfServiceTaint,
    /// Delete the Node object (and, when asked, its VolumeAttachments).
    DeleteNode,
}

/// When nodefence force-deletes (grace period 0) the pods of a released node itself.
///
/// With the out-of-service taint, PodGC force-deletes the pods of a node that is
/// NotReady. A node released on the Lease fast path is still Ready in the API, so
/// PodGC leaves its pods alone: nodefence deletes them, or the replacement pods
/// would wait for NotReady. After nodefence's own power-off it deletes them too:
/// PodGC would only on its next pass (every 20 s). On clusters without non-graceful node shutdown, `Always`
/// (with `delete_volume_attachments`) is the forced-deletion fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForceDeletePods {
    Never,
    /// When released before the node turned NotReady (the Lease fast path), or after
    /// nodefence powered the machine off itself.
    FastPath,
    Always,
}

impl ForceDeletePods {
    pub fn as_str(self) -> &'static str {
        match self {
            ForceDeletePods::Never => "never",
            ForceDeletePods::FastPath => "fast-path",
            ForceDeletePods::Always => "always",
        }
    }
}

/// Upper bound of nodes unhealthy at once before storm protection engages.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MaxUnhealthy {
    Count(usize),
    Percent(f64),
}

impl MaxUnhealthy {
    /// True when `unhealthy` of `total` nodes exceeds the bound. One unhealthy node is
    /// never a storm: a single failure says nothing about a partition, and small
    /// clusters would otherwise never fence at all.
    pub fn exceeded(self, unhealthy: usize, total: usize) -> bool {
        if unhealthy < 2 {
            return false;
        }
        match self {
            MaxUnhealthy::Count(n) => unhealthy > n,
            MaxUnhealthy::Percent(p) => total > 0 && (unhealthy as f64) * 100.0 > p * total as f64,
        }
    }
}

/// The whole policy. Defaults are the documented ones.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Release a node confirmed Off once it has been NotReady this long.
    pub release_off_after: Duration,
    /// Power off a machine still On only once its node is NotReady and has been
    /// unhealthy this long: counted from when nodefence saw the failure (the first
    /// missed Lease renewal: the incident's start) or from NotReady, whichever came first.
    pub unhealthy_after: Duration,
    pub on_powered_on: OnPoweredOn,
    pub release: ReleaseMode,
    /// Also delete the node's VolumeAttachments once it is released (with
    /// `DeleteNode`, so CSI volumes need not wait for the 6-minute force detach; with
    /// the taint, as part of the forced-deletion fallback for older clusters).
    pub delete_volume_attachments: bool,
    /// Force-delete the released node's pods (grace period 0).
    pub force_delete_pods: ForceDeletePods,
    /// Consecutive Off readings (all newer than the node's last sign of life) that
    /// prove the machine is off.
    pub confirm_readings: u32,
    /// Pause between readings while building that proof.
    pub confirm_interval: Duration,
    /// A node whose kubelet Lease has not been renewed for this long is suspect: its
    /// power is checked, and a confirmed-Off machine is released before NotReady.
    /// `None` disables the Lease fast path.
    pub lease_stale_after: Option<LeaseStaleAfter>,
    /// Re-send ForceOff if the machine still reads On this long after the last one.
    pub power_off_retry_after: Duration,
    /// While an incident stays blocked for one reason that is a Warning (a BMC that
    /// cannot be read, storm protection, an unproven identity, ...), its Event is
    /// repeated this often; zero: announced once.
    pub remind_every: Duration,
    /// Give up powering off after this many commands (then alert and wait).
    pub max_power_off_attempts: u32,
    /// How often the power of an unhealthy node's machine is read while it reads On
    /// and no power command is pending (the Off proof uses `confirm_interval`).
    pub on_poll_interval: Duration,
    /// Backoff between failed power queries: starts at `confirm_interval`, doubles, capped here.
    pub max_query_backoff: Duration,
    pub max_unhealthy: MaxUnhealthy,
    /// Power-offs in flight at once.
    pub max_concurrent_fences: usize,
    /// Minimum time between two power-off commands (any nodes).
    pub min_power_off_interval: Duration,
    pub fence_control_plane: bool,
    /// Skip cordoned (unschedulable) nodes.
    pub skip_cordoned: bool,
    /// Power the machine back on once its release is done (reboot-style remediation).
    pub power_on_after_fence: bool,
    /// With `power_on_after_fence`: how long after the release the machine stays off,
    /// so Kubernetes can delete its pods and detach its volumes first.
    pub release_timeout: Duration,
    /// Remove our taint once the node has been Ready again this long (counted from
    /// when it is seen back with a new boot: [`super::returned`]).
    pub recovered_after: Duration,
    /// A node that reports no `status.nodeInfo.bootID` (some test kubelets, nodes in
    /// containers) cannot show that its machine went down: its taint is removed on
    /// its return only with this set.
    pub unfence_without_boot_id: bool,
    /// Release or power off only when the BMC is proven to control this node's own
    /// machine (identity cross-check).
    pub require_identity: bool,
    /// The watchdog level, the last of the node's fencing topology (opt-in): when no
    /// power method can be read at all, the node is marked for fencing and released
    /// once its own hardware watchdog has certainly reset it
    /// ([`crate::watchdog::release`]). Needs the node's companion with an armed watchdog.
    pub watchdog_fencing: bool,
    /// The watchdog level for a virtual machine, and the operator's reason (`None`:
    /// refused for one). A hypervisor that pauses the guest pauses its virtual
    /// watchdog too: the wait would end while the guest sleeps, and it would resume
    /// with its volumes released. Only the operator can say its hypervisor never does
    /// (no live migration, no snapshot, no overcommit) and opt the node in.
    pub watchdog_fencing_on_vm: Option<String>,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            release_off_after: Duration::ZERO,
            unhealthy_after: Duration::from_secs(60),
            on_powered_on: OnPoweredOn::PowerOff,
            release: ReleaseMode::OutOfServiceTaint,
            delete_volume_attachments: false,
            force_delete_pods: ForceDeletePods::FastPath,
            confirm_readings: 3,
            confirm_interval: Duration::from_millis(500),
            lease_stale_after: Some(LeaseStaleAfter::MissedRenewal),
            power_off_retry_after: Duration::from_secs(60),
            remind_every: Duration::from_secs(120),
            max_power_off_attempts: 3,
            on_poll_interval: Duration::from_secs(5),
            max_query_backoff: Duration::from_secs(60),
            max_unhealthy: MaxUnhealthy::Percent(40.0),
            max_concurrent_fences: 2,
            min_power_off_interval: Duration::from_secs(10),
            fence_control_plane: false,
            skip_cordoned: false,
            power_on_after_fence: false,
            release_timeout: Duration::from_secs(300),
            recovered_after: Duration::from_secs(30),
            unfence_without_boot_id: false,
            require_identity: true,
            watchdog_fencing: false,
            watchdog_fencing_on_vm: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storm_bounds() {
        assert!(!MaxUnhealthy::Count(2).exceeded(2, 10));
        assert!(MaxUnhealthy::Count(2).exceeded(3, 10));
        assert!(!MaxUnhealthy::Percent(40.0).exceeded(4, 10));
        assert!(MaxUnhealthy::Percent(40.0).exceeded(5, 10));
        assert!(!MaxUnhealthy::Percent(40.0).exceeded(0, 0));
        assert!(
            !MaxUnhealthy::Percent(40.0).exceeded(1, 2),
            "one failure is never a storm"
        );
        assert!(MaxUnhealthy::Percent(40.0).exceeded(2, 3));
    }
}
