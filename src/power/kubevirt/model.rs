//! What the driver reads from a VirtualMachine and its VirtualMachineInstance, and
//! the decisions taken from it, as pure functions (unit-tested without a cluster).
//!
//! Followed from KubeVirt (`staging/src/kubevirt.io/api/core/v1/types.go` for the
//! fields and phases, `pkg/virt-controller/watch/vm/vm.go` for what the controller
//! does under each run strategy and how it computes `status.printableStatus`,
//! `pkg/virt-api/rest/lifecycle.go` for the `stop` and `start` subresources).
//!
//! # Off
//! A VM is Off only when its VMI is gone or in a final phase (`Succeeded`,
//! `Failed`) *and* the controller says `printableStatus: Stopped`: the domain is down
//! and the controller agrees, read back after the command. Everything else is never
//! Off: a VMI being deleted keeps its domain for its grace period (PoweringOff), a
//! final VMI the controller has not caught up with (`Starting`, `CrashLoopBackOff`:
//! a restart is coming) is Unknown, phase `Unknown` (its infrastructure node stopped
//! reporting) is Unknown.
//!
//! # Making the stop stick
//! Under `Always` a stopped VMI is started again at once, under `RerunOnFailure` a
//! VMI that ends `Failed` (a forced kill can) is too, `Once` starts one whenever none
//! exists. So off first sets `spec.runStrategy: Halted` (legacy `spec.running:
//! false`), recording what the VM had in the annotation [`SAVED_RUN_STRATEGY`], and
//! only then asks for a stop with no grace period. Power-on restores what was
//! recorded.

use serde_json::Value;

/// The annotation that records a VM's run strategy while nodefence holds it Halted.
pub const SAVED_RUN_STRATEGY: &str = "nodefence.io/run-strategy";

/// `spec.runStrategy` (or the legacy `spec.running`, as `vm.RunStrategy()` reads it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStrategy {
    Always,
    RerunOnFailure,
    Manual,
    Halted,
    Once,
    /// Any other value (`WaitAsReceiver`, a future one), as written.
    Other(String),
}

impl RunStrategy {
    pub fn parse(s: &str) -> Self {
        match s {
            "Always" => RunStrategy::Always,
            "RerunOnFailure" => RunStrategy::RerunOnFailure,
            "Manual" => RunStrategy::Manual,
            "Halted" => RunStrategy::Halted,
            "Once" => RunStrategy::Once,
            other => RunStrategy::Other(crate::untrusted::field(other)),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            RunStrategy::Always => "Always",
            RunStrategy::RerunOnFailure => "RerunOnFailure",
            RunStrategy::Manual => "Manual",
            RunStrategy::Halted => "Halted",
            RunStrategy::Once => "Once",
            RunStrategy::Other(s) => s,
        }
    }
}

/// Which field holds the run strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrategyField {
    /// `spec.runStrategy`.
    RunStrategy,
    /// The deprecated `spec.running` (true: Always, false: Halted).
    Running,
}

/// The parts of a VirtualMachine the driver uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmView {
    pub resource_version: String,
    pub deleting: bool,
    pub run_strategy: RunStrategy,
    pub field: StrategyField,
    /// `spec.template.spec.domain.firmware.uuid` (persisted by KubeVirt's firmware
    /// controller since v1.5: every VMI of the VM gets it).
    pub template_uuid: Option<String>,
    /// `status.printableStatus` (`None`: the controller has not written it).
    pub printable_status: Option<String>,
    /// [`SAVED_RUN_STRATEGY`]: what the VM had before nodefence halted it.
    pub saved: Option<String>,
}

impl VmView {
    pub fn from_json(v: &Value) -> Result<Self, String> {
        let text = |ptr: &str| v.pointer(ptr).and_then(Value::as_str).map(str::to_string);
        let resource_version = text("/metadata/resourceVersion")
            .ok_or("the VirtualMachine has no metadata.resourceVersion")?;
        let (run_strategy, field) = match (
            v.pointer("/spec/runStrategy"),
            v.pointer("/spec/running").and_then(Value::as_bool),
        ) {
            (Some(Value::String(s)), _) => (RunStrategy::parse(s), StrategyField::RunStrategy),
            (Some(other), _) if !other.is_null() => {
                return Err("the VirtualMachine's spec.runStrategy is not a string".into());
            }
            (_, Some(true)) => (RunStrategy::Always, StrategyField::Running),
            (_, Some(false)) => (RunStrategy::Halted, StrategyField::Running),
            // KubeVirt: neither field means Halted.
            (_, None) => (RunStrategy::Halted, StrategyField::RunStrategy),
        };
        Ok(Self {
            resource_version,
            deleting: v
                .pointer("/metadata/deletionTimestamp")
                .is_some_and(|d| !d.is_null()),
            run_strategy,
            field,
            template_uuid: text("/spec/template/spec/domain/firmware/uuid")
                .filter(|u| !u.is_empty()),
            printable_status: text("/status/printableStatus"),
            saved: v
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(SAVED_RUN_STRATEGY))
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    }

    fn printable(&self) -> &str {
        self.printable_status.as_deref().unwrap_or("")
    }
}

/// The parts of a VirtualMachineInstance the driver uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmiView {
    /// `status.phase` (empty: not yet set, as for a VMI just created).
    pub phase: String,
    pub deleting: bool,
    /// `spec.domain.firmware.uuid`: the SMBIOS system UUID the guest reads.
    pub firmware_uuid: Option<String>,
    /// The `Paused` condition is True.
    pub paused: bool,
}

impl VmiView {
    pub fn from_json(v: &Value) -> Self {
        let paused = v
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some("Paused")
                        && c.get("status").and_then(Value::as_str) == Some("True")
                })
            });
        Self {
            phase: v
                .pointer("/status/phase")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            deleting: v
                .pointer("/metadata/deletionTimestamp")
                .is_some_and(|d| !d.is_null()),
            firmware_uuid: v
                .pointer("/spec/domain/firmware/uuid")
                .and_then(Value::as_str)
                .filter(|u| !u.is_empty())
                .map(str::to_string),
            paused,
        }
    }

    /// `vmi.IsFinal()`.
    pub fn is_final(&self) -> bool {
        matches!(self.phase.as_str(), "Succeeded" | "Failed")
    }
}

use crate::power::PowerState;

/// The power state of a VM from its VMI (`None`: there is none) and itself.
pub fn power_state(vm: &VmView, vmi: Option<&VmiView>) -> PowerState {
    let printable = vm.printable();
    match vmi {
        None if printable == "Stopped" && !vm.deleting => PowerState::Off,
        None if matches!(
            printable,
            "Starting" | "Provisioning" | "WaitingForVolumeBinding"
        ) =>
        {
            PowerState::PoweringOn
        }
        None => PowerState::Unknown(format!(
            "no VirtualMachineInstance, VM printableStatus {}",
            shown(printable)
        )),
        Some(vmi) if vmi.is_final() => {
            if printable == "Stopped" && !vm.deleting {
                PowerState::Off
            } else {
                PowerState::Unknown(format!(
                    "VirtualMachineInstance {}, VM printableStatus {}",
                    vmi.phase,
                    shown(printable)
                ))
            }
        }
        Some(vmi) if vmi.deleting || matches!(printable, "Stopping" | "Terminating") => {
            PowerState::PoweringOff
        }
        Some(vmi) => match vmi.phase.as_str() {
            "Running" if vmi.paused => PowerState::Paused,
            "Running" => PowerState::On,
            "" | "Pending" | "Scheduling" | "Scheduled" => PowerState::PoweringOn,
            other => PowerState::Unknown(format!(
                "VirtualMachineInstance phase {}",
                crate::untrusted::field(other)
            )),
        },
    }
}

fn shown(printable: &str) -> String {
    if printable.is_empty() {
        "unset".to_string()
    } else {
        crate::untrusted::field(printable)
    }
}

/// The merge patch that holds a VM Halted, recording its run strategy; `None` when
/// it already is. The `resourceVersion` makes it a compare-and-swap: a VM changed
/// since it was read answers 409 and is read again.
pub fn halt_patch(vm: &VmView) -> Option<Value> {
    if vm.run_strategy == RunStrategy::Halted {
        return None;
    }
    let mut patch = serde_json::json!({
        "metadata": {
            "resourceVersion": vm.resource_version,
        },
    });
    if vm.saved.is_none() {
        patch["metadata"]["annotations"] =
            serde_json::json!({ SAVED_RUN_STRATEGY: vm.run_strategy.as_str() });
    }
    patch["spec"] = match vm.field {
        StrategyField::RunStrategy => serde_json::json!({ "runStrategy": "Halted" }),
        StrategyField::Running => serde_json::json!({ "running": false }),
    };
    Some(patch)
}

/// What power-on does to a VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartPlan {
    /// A merge patch restoring the run strategy (and dropping the record).
    pub patch: Option<Value>,
    /// Whether to ask the `start` subresource too (`Manual` starts only on request;
    /// a VM whose strategy someone else changed back is started the KubeVirt way).
    pub start_request: bool,
}

/// Power-on: a VM nodefence halted gets back what it had (`Always` when the record is
/// missing, as `virtctl start` does for a Halted VM); `Manual` also needs a start
/// request. A VM that is not Halted only loses the record (and gets a start request
/// when it is `Manual`).
pub fn start_plan(vm: &VmView) -> StartPlan {
    let drop_record = vm
        .saved
        .as_ref()
        .map(|_| serde_json::json!({ SAVED_RUN_STRATEGY: null }));
    let with_meta = |spec: Option<Value>| {
        let mut patch = serde_json::json!({
            "metadata": { "resourceVersion": vm.resource_version },
        });
        if let Some(annotations) = &drop_record {
            patch["metadata"]["annotations"] = annotations.clone();
        }
        if let Some(spec) = spec {
            patch["spec"] = spec;
        }
        patch
    };
    if vm.run_strategy != RunStrategy::Halted {
        // virt-api's `start` only makes sense for Manual (Always, RerunOnFailure and
        // Once start by themselves; it refuses them).
        return StartPlan {
            patch: drop_record.as_ref().map(|_| with_meta(None)),
            start_request: vm.run_strategy == RunStrategy::Manual,
        };
    }
    let target = vm
        .saved
        .as_deref()
        .map_or(RunStrategy::Always, RunStrategy::parse);
    let target = match target {
        // Never restore into Halted: power-on means on.
        RunStrategy::Halted => RunStrategy::Always,
        t => t,
    };
    let spec = match vm.field {
        StrategyField::RunStrategy => serde_json::json!({ "runStrategy": target.as_str() }),
        StrategyField::Running => serde_json::json!({ "running": true }),
    };
    let start_request = vm.field == StrategyField::RunStrategy && target == RunStrategy::Manual;
    StartPlan {
        patch: Some(with_meta(Some(spec))),
        start_request,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vm(strategy: Option<&str>, printable: Option<&str>) -> VmView {
        let mut v = json!({
            "metadata": {"name": "w1", "resourceVersion": "7"},
            "spec": {"template": {"spec": {"domain": {"firmware": {"uuid": "u-1"}}}}},
            "status": {},
        });
        if let Some(s) = strategy {
            v["spec"]["runStrategy"] = json!(s);
        }
        if let Some(p) = printable {
            v["status"]["printableStatus"] = json!(p);
        }
        VmView::from_json(&v).expect("valid")
    }

    fn vmi(phase: &str) -> VmiView {
        VmiView::from_json(&json!({
            "metadata": {"name": "w1"},
            "spec": {"domain": {"firmware": {"uuid": "u-1"}}},
            "status": {"phase": phase},
        }))
    }

    #[test]
    fn off_needs_no_live_vmi_and_the_controller_saying_stopped() {
        let stopped = vm(Some("Halted"), Some("Stopped"));
        assert_eq!(power_state(&stopped, None), PowerState::Off);
        assert_eq!(
            power_state(&stopped, Some(&vmi("Succeeded"))),
            PowerState::Off
        );
        assert_eq!(power_state(&stopped, Some(&vmi("Failed"))), PowerState::Off);
        // A final VMI the controller is about to restart is not off.
        let restarting = vm(Some("Always"), Some("Starting"));
        assert!(!power_state(&restarting, Some(&vmi("Failed"))).is_off());
        assert!(!power_state(&vm(Some("Always"), Some("CrashLoopBackOff")), None).is_off());
        // No status yet, or a VM being deleted: never off.
        assert!(!power_state(&vm(Some("Halted"), None), None).is_off());
        let mut deleting = stopped.clone();
        deleting.deleting = true;
        assert!(!power_state(&deleting, None).is_off());
    }

    #[test]
    fn a_live_or_unknown_vmi_is_never_off_whatever_the_status_says() {
        let stale = vm(Some("Halted"), Some("Stopped"));
        for phase in [
            "Running",
            "Pending",
            "Scheduling",
            "Scheduled",
            "Unknown",
            "",
        ] {
            assert!(
                !power_state(&stale, Some(&vmi(phase))).is_off(),
                "phase {phase:?}"
            );
        }
        assert_eq!(
            power_state(&vm(Some("Always"), Some("Running")), Some(&vmi("Running"))),
            PowerState::On
        );
        let mut deleting = vmi("Running");
        deleting.deleting = true;
        assert_eq!(
            power_state(&vm(Some("Halted"), Some("Stopping")), Some(&deleting)),
            PowerState::PoweringOff
        );
        let mut paused = vmi("Running");
        paused.paused = true;
        assert_eq!(
            power_state(&vm(Some("Always"), Some("Paused")), Some(&paused)),
            PowerState::Paused
        );
        assert!(matches!(
            power_state(&vm(Some("Always"), Some("Running")), Some(&vmi("Unknown"))),
            PowerState::Unknown(_)
        ));
    }

    #[test]
    fn halting_records_the_strategy_once_and_is_a_compare_and_swap() {
        let patch = halt_patch(&vm(Some("RerunOnFailure"), Some("Running"))).expect("a patch");
        assert_eq!(patch["spec"]["runStrategy"], "Halted");
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        assert_eq!(
            patch["metadata"]["annotations"][SAVED_RUN_STRATEGY],
            "RerunOnFailure"
        );
        assert!(halt_patch(&vm(Some("Halted"), Some("Stopped"))).is_none());
        // Someone restarted a VM nodefence halted: the first record is kept.
        let mut again = vm(Some("Always"), Some("Running"));
        again.saved = Some("Manual".into());
        let patch = halt_patch(&again).expect("a patch");
        assert!(patch["metadata"].get("annotations").is_none());
        // The legacy field is written as it was.
        let legacy = VmView::from_json(&json!({
            "metadata": {"resourceVersion": "3"}, "spec": {"running": true}
        }))
        .expect("valid");
        assert_eq!(legacy.run_strategy, RunStrategy::Always);
        let patch = halt_patch(&legacy).expect("a patch");
        assert_eq!(patch["spec"], json!({"running": false}));
    }

    #[test]
    fn power_on_restores_what_the_vm_had() {
        for (saved, want, start) in [
            (Some("Always"), "Always", false),
            (Some("RerunOnFailure"), "RerunOnFailure", false),
            (Some("Manual"), "Manual", true),
            (Some("Halted"), "Always", false),
            (None, "Always", false),
        ] {
            let mut halted = vm(Some("Halted"), Some("Stopped"));
            halted.saved = saved.map(str::to_string);
            let plan = start_plan(&halted);
            let patch = plan.patch.expect("a patch");
            assert_eq!(patch["spec"]["runStrategy"], want, "{saved:?}");
            assert_eq!(plan.start_request, start, "{saved:?}");
            if saved.is_some() {
                assert!(patch["metadata"]["annotations"][SAVED_RUN_STRATEGY].is_null());
                assert!(
                    patch["metadata"]["annotations"]
                        .as_object()
                        .is_some_and(|a| a.contains_key(SAVED_RUN_STRATEGY))
                );
            }
        }
        // Not Halted: only a start request (and the record dropped).
        let mut manual = vm(Some("Manual"), Some("Stopped"));
        manual.saved = Some("Always".into());
        let plan = start_plan(&manual);
        assert!(plan.start_request);
        assert!(plan.patch.expect("drops the record").get("spec").is_none());
        assert!(!start_plan(&vm(Some("Always"), Some("Stopped"))).start_request);
    }

    #[test]
    fn bad_documents_are_errors_not_states() {
        assert!(VmView::from_json(&json!({"metadata": {}})).is_err());
        assert!(
            VmView::from_json(
                &json!({"metadata": {"resourceVersion": "1"}, "spec": {"runStrategy": 3}})
            )
            .is_err()
        );
        let none = VmView::from_json(&json!({"metadata": {"resourceVersion": "1"}, "spec": {}}))
            .expect("valid");
        assert_eq!(none.run_strategy, RunStrategy::Halted);
    }
}
