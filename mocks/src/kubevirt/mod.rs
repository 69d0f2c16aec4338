//! A stand-in for KubeVirt: the `kubevirt.io/v1` VirtualMachine and
//! VirtualMachineInstance CRDs ([`crds()`]), virt-api's VM lifecycle subresources
//! (`subresources.kubevirt.io/v1` `start`, `stop`, `restart`, served through
//! fake-kube's aggregated-API hook: [`virt_api`]), and virt-controller with the part of
//! virt-handler that moves a VMI through its phases ([`KubevirtStandIn`]:
//! [`controller`], [`handler`]), with the failure modes seen in the field
//! ([`Faults`], [`KubevirtStandIn::lose_host`]).
//!
//! Everything acts through the API server, as the real components do: virt-api reads
//! the VM and VMI and writes JSON patches (with their `test` operations) through a
//! kube-rs client, the controller writes VMIs and the VM status subresource.
//!
//! Followed from KubeVirt (`staging/src/kubevirt.io/api/core/v1/types.go`: phases,
//! run strategies, printable statuses, `VirtualMachine.RunStrategy()`, finalizer
//! names). Each module cites the files it follows.

pub mod controller;
pub mod crds;
pub mod handler;
mod standin;
pub mod virt_api;

use std::time::Duration;

use serde_json::Value;

pub use crds::{DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS, VmBuilder, crds, vm_crd, vmi_crd};
pub use standin::KubevirtStandIn;
pub use virt_api::VirtApi;

/// KubeVirt's API group and version.
pub const GROUP: &str = "kubevirt.io";
pub const VERSION: &str = "v1";
pub const API_VERSION: &str = "kubevirt.io/v1";
/// virt-api's group (the APIService `v1.subresources.kubevirt.io`).
pub const SUBRESOURCES_GROUP: &str = "subresources.kubevirt.io";
pub const SUBRESOURCES_VERSION: &str = "v1";

/// The VMI finalizer virt-api's mutating webhook adds and the VMI controller removes
/// once the VMI is final (`VirtualMachineInstanceFinalizer`).
pub const VMI_FINALIZER: &str = "kubevirt.io/foregroundDeleteVirtualMachine";
/// The finalizer the VM controller puts on the VMIs it creates
/// (`VirtualMachineControllerFinalizer`), removed once the VMI is final.
pub const VM_CONTROLLER_FINALIZER: &str = "kubevirt.io/virtualMachineControllerFinalize";

/// The namespace of KubeVirt's legacy firmware UUIDs (`firmware.go`, `magicUUID`).
pub const FIRMWARE_UUID_NAMESPACE: &str = "6a1a24a1-4061-4607-8bf4-a3963d0c5895";

/// VMI phases (`VirtualMachineInstancePhase`).
pub mod phase {
    pub const UNSET: &str = "";
    pub const PENDING: &str = "Pending";
    pub const SCHEDULING: &str = "Scheduling";
    pub const SCHEDULED: &str = "Scheduled";
    pub const RUNNING: &str = "Running";
    pub const SUCCEEDED: &str = "Succeeded";
    pub const FAILED: &str = "Failed";
    pub const UNKNOWN: &str = "Unknown";
}

/// VM `status.printableStatus` values (`VirtualMachinePrintableStatus`); this
/// stand-in writes all but `CrashLoopBackOff` (start failures are not modelled).
pub mod printable {
    pub const STOPPED: &str = "Stopped";
    pub const STARTING: &str = "Starting";
    pub const RUNNING: &str = "Running";
    pub const PAUSED: &str = "Paused";
    pub const STOPPING: &str = "Stopping";
    pub const TERMINATING: &str = "Terminating";
    pub const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";
    pub const UNKNOWN: &str = "Unknown";
}

/// `spec.runStrategy` (`VirtualMachineRunStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunStrategy {
    Always,
    Halted,
    Manual,
    RerunOnFailure,
    Once,
}

impl RunStrategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "Always",
            Self::Halted => "Halted",
            Self::Manual => "Manual",
            Self::RerunOnFailure => "RerunOnFailure",
            Self::Once => "Once",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "Always" => Self::Always,
            "Halted" => Self::Halted,
            "Manual" => Self::Manual,
            "RerunOnFailure" => Self::RerunOnFailure,
            "Once" => Self::Once,
            _ => return None,
        })
    }
}

/// `VirtualMachine.RunStrategy()`: `spec.running` (true: Always, false: Halted) or
/// `spec.runStrategy`, Halted when neither; both set is an error, as is a strategy
/// this stand-in does not know (`WaitAsReceiver`).
pub fn run_strategy(vm: &Value) -> Result<RunStrategy, String> {
    let spec = &vm["spec"];
    let running = spec.get("running").filter(|v| !v.is_null());
    let strategy = spec.get("runStrategy").filter(|v| !v.is_null());
    match (running, strategy) {
        (Some(_), Some(_)) => Err("running and runstrategy are mutually exclusive".to_owned()),
        (Some(r), None) => Ok(if r.as_bool() == Some(true) {
            RunStrategy::Always
        } else {
            RunStrategy::Halted
        }),
        (None, Some(s)) => {
            let s = s.as_str().unwrap_or_default();
            RunStrategy::parse(s).ok_or_else(|| format!("unknown runstrategy: {s}"))
        }
        (None, None) => Ok(RunStrategy::Halted),
    }
}

/// A VMI's `status.phase` (`""` when unset).
pub fn vmi_phase(vmi: &Value) -> &str {
    vmi["status"]["phase"].as_str().unwrap_or_default()
}

/// `VirtualMachineInstance.IsFinal()`: Succeeded or Failed.
pub fn is_final(vmi: &Value) -> bool {
    matches!(vmi_phase(vmi), phase::SUCCEEDED | phase::FAILED)
}

/// Whether `metadata.deletionTimestamp` is set.
pub fn is_deleting(obj: &Value) -> bool {
    obj["metadata"]
        .get("deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// `CalculateLegacyUUID`: the UUIDv5 (SHA-1) of `name` in
/// [`FIRMWARE_UUID_NAMESPACE`], the firmware UUID KubeVirt gives a VM without one.
pub fn legacy_firmware_uuid(name: &str) -> String {
    use sha1::Digest as _;
    let namespace = uuid::Uuid::parse_str(FIRMWARE_UUID_NAMESPACE).unwrap_or_default();
    let mut hasher = sha1::Sha1::new();
    hasher.update(namespace.as_bytes());
    hasher.update(name.as_bytes());
    let digest = hasher.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_sha1_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}

/// How long things take. The defaults are KubeVirt's (or a real cluster's); tests
/// scale them down with [`Timing::scaled`].
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// The stand-in's resync: how often everything is reconciled without a watch
    /// event (virt-controller re-queues; 1 s here).
    pub resync: Duration,
    /// How long the controllers wait before every round (0: at once; set it to model
    /// a slow or overloaded virt-controller; [`Faults::controller_delay`] adds to it
    /// at runtime).
    pub controller_delay: Duration,
    /// Pending → Scheduling (the launcher pod created).
    pub pending: Duration,
    /// Scheduling → Scheduled (the pod scheduled and started).
    pub scheduling: Duration,
    /// Scheduled → Running (virt-handler starts the domain).
    pub scheduled: Duration,
    /// A forced stop (grace period 0): how long the domain takes to die.
    pub kill: Duration,
    /// What a second of `terminationGracePeriodSeconds` lasts (1 s; `scaled` divides
    /// it too).
    pub grace_second: Duration,
    /// A lost host: how long until its VMIs are `Failed` (virt-controller's node
    /// controller, `heartBeatTimeout` 5 min).
    pub host_lost_to_failed: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            resync: Duration::from_secs(1),
            controller_delay: Duration::ZERO,
            pending: Duration::from_secs(1),
            scheduling: Duration::from_secs(3),
            scheduled: Duration::from_secs(2),
            kill: Duration::from_secs(1),
            grace_second: Duration::from_secs(1),
            host_lost_to_failed: Duration::from_secs(300),
        }
    }
}

impl Timing {
    /// Every duration divided by `speed` (a world running `speed` times faster).
    pub fn scaled(self, speed: f64) -> Self {
        Self {
            resync: self.resync.div_f64(speed),
            controller_delay: self.controller_delay.div_f64(speed),
            pending: self.pending.div_f64(speed),
            scheduling: self.scheduling.div_f64(speed),
            scheduled: self.scheduled.div_f64(speed),
            kill: self.kill.div_f64(speed),
            grace_second: self.grace_second.div_f64(speed),
            host_lost_to_failed: self.host_lost_to_failed.div_f64(speed),
        }
    }
}

/// Failure modes, settable at runtime ([`KubevirtStandIn::set_faults`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// A VMI whose `terminationGracePeriodSeconds` was set to 0 (the stop
    /// subresource's `gracePeriod: 0`) while a stop request for it is pending has its
    /// domain killed and goes `Failed` before the controller deletes it: under
    /// RerunOnFailure the controller then deletes it *and* adds a start request
    /// (`syncRunStrategy`'s `vmiFailed` branch), so the VM is started again. A client
    /// that set `runStrategy: Halted` first is not affected.
    pub forced_kill_fails: bool,
    /// A VMI that reaches `Failed` never loses its
    /// `kubevirt.io/foregroundDeleteVirtualMachine` finalizer: its deletion never
    /// completes, the VM keeps a final VMI (printableStatus `Stopped`) and is never
    /// started again.
    pub failed_vmi_stuck: bool,
    /// A slow virt-controller (and virt-handler): every reaction to a change waits
    /// this long (on top of [`Timing::controller_delay`]).
    pub controller_delay: Duration,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_legacy_firmware_uuid_is_uuid5_of_the_name() {
        // Python: uuid.uuid5(uuid.UUID(FIRMWARE_UUID_NAMESPACE), "vm1").
        assert_eq!(
            legacy_firmware_uuid("vm1"),
            "133bf63e-9459-5126-9b21-b56e9b3d17b3"
        );
        assert_eq!(
            legacy_firmware_uuid("testvmi"),
            "f8918e71-270a-598e-a2a4-1afac39e1394"
        );
    }

    #[test]
    fn run_strategy_follows_virtual_machine_run_strategy() {
        let vm = |spec| json!({ "spec": spec });
        assert_eq!(run_strategy(&vm(json!({}))), Ok(RunStrategy::Halted));
        assert_eq!(
            run_strategy(&vm(json!({"running": true}))),
            Ok(RunStrategy::Always)
        );
        assert_eq!(
            run_strategy(&vm(json!({"running": false}))),
            Ok(RunStrategy::Halted)
        );
        assert_eq!(
            run_strategy(&vm(json!({"runStrategy": "RerunOnFailure"}))),
            Ok(RunStrategy::RerunOnFailure)
        );
        assert!(run_strategy(&vm(json!({"running": true, "runStrategy": "Always"}))).is_err());
    }
}
