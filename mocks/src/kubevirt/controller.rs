//! virt-controller's VM controller: the run strategies, the VMI it creates and
//! deletes, the state change requests, the VM status.
//!
//! Follows KubeVirt's `pkg/virt-controller/watch/vm/vm.go` (`syncRunStrategy`,
//! `startVMI`/`SetupVMIFromVM`, `stopVMI`, `addStartRequest`, `hasStartRequest`,
//! `hasStopRequestForVMI`, `shouldStartRerunOnFailure`, `updateStatus`,
//! `isTrimFirstChangeRequestNeeded`, `setPrintableStatus` and the
//! `isVirtualMachineStatus*` functions, `removeVMIFinalizer`) and
//! `pkg/virt-controller/watch/vm/firmware.go` (a missing firmware UUID is persisted
//! into `spec.template.spec.domain.firmware.uuid` first, `CalculateLegacyUUID`):
//!
//! - Always: a final VMI, or one with a stop request, is deleted; no VMI → start.
//! - RerunOnFailure: a VMI (not being deleted) with a stop request, `Failed` or
//!   `Succeeded` is deleted, and when it `Failed` a start request is added; no VMI →
//!   start when there is a start request or `status.runStrategy` differs.
//! - Manual: a VMI with a stop request is deleted; no VMI and a start request → start.
//! - Halted: a VMI is deleted; no VMI and a start request → `runStrategy: Always`
//!   (or `running: true`) by an update of the VM.
//! - Once: no VMI → start (once).
//! - Status: `created`, `ready` (the VMI's `Ready` condition), `runStrategy` (once
//!   set or created), the first state change request trimmed when done, the `Ready`
//!   condition, `printableStatus` (Terminating, Stopping, Paused, Running, Starting,
//!   Stopped, Unknown, in KubeVirt's order; CrashLoopBackOff needs start failures,
//!   not modelled); a final VMI loses `kubevirt.io/virtualMachineControllerFinalize`.
//!
//! Left out: start-failure backoff, DataVolumes, instancetypes, revisions, hotplug,
//! migrations, VM finalizers, paused starts.

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::handler::has_stop_request_for;
use super::{
    API_VERSION, RunStrategy, VM_CONTROLLER_FINALIZER, VMI_FINALIZER, is_deleting, is_final,
    legacy_firmware_uuid, printable, run_strategy, vmi_phase,
};

/// The API server, as the controller sees it (one namespace).
#[derive(Clone)]
pub(crate) struct Cluster {
    pub vms: Api<DynamicObject>,
    pub vmis: Api<DynamicObject>,
}

fn object(v: &Value) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(v.clone())?)
}

fn value(o: DynamicObject) -> anyhow::Result<Value> {
    Ok(serde_json::to_value(o)?)
}

fn json_patch(ops: Value) -> anyhow::Result<Patch<()>> {
    Ok(Patch::Json(serde_json::from_value(ops)?))
}

/// `hasStartRequest`.
fn has_start_request(vm: &Value) -> bool {
    vm["status"]["stateChangeRequests"]
        .get(0)
        .is_some_and(|r| r["action"] == "Start")
}

fn name_of(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}

fn uid_of(obj: &Value) -> &str {
    obj["metadata"]["uid"].as_str().unwrap_or_default()
}

/// What a sync did that the status must reflect (the controller's expectations).
#[derive(Debug, Default, Clone, Copy)]
struct Expect {
    start: bool,
    stop: bool,
}

/// One reconcile of `vm` with its VMI (as listed this round).
pub(crate) async fn reconcile(c: &Cluster, vm: &Value, vmi: Option<&Value>) -> anyhow::Result<()> {
    if is_deleting(vm) && vmi.is_none() {
        return Ok(());
    }
    // The firmware controller runs first.
    let firmware = &vm["spec"]["template"]["spec"]["domain"]["firmware"];
    if firmware["uuid"].as_str().is_none_or(str::is_empty) {
        let mut new = if firmware.is_object() {
            firmware.clone()
        } else {
            json!({})
        };
        new["uuid"] = json!(legacy_firmware_uuid(name_of(vm)));
        // (KubeVirt tests the old value; a JSON patch cannot test a missing member.)
        let mut ops = Vec::new();
        if !firmware.is_null() {
            ops.push(json!({"op": "test", "path": "/spec/template/spec/domain/firmware", "value": firmware}));
        }
        ops.push(json!({"op": "add", "path": "/spec/template/spec/domain/firmware", "value": new}));
        let ops = Value::Array(ops);
        c.vms
            .patch(name_of(vm), &PatchParams::default(), &json_patch(ops)?)
            .await?;
        return Ok(());
    }
    let Ok(strategy) = run_strategy(vm) else {
        return Ok(());
    };
    let mut vm = vm.clone();
    let mut expect = Expect::default();
    if !sync_run_strategy(c, &mut vm, vmi, strategy, &mut expect).await? {
        return Ok(());
    }
    update_status(c, &vm, vmi, strategy, expect).await
}

/// `syncRunStrategy`; `false` when the VM itself was updated (the status waits for
/// the next round, as KubeVirt returns a sync error then).
async fn sync_run_strategy(
    c: &Cluster,
    vm: &mut Value,
    vmi: Option<&Value>,
    strategy: RunStrategy,
    expect: &mut Expect,
) -> anyhow::Result<bool> {
    let stop_requested = vmi.is_some_and(|v| has_stop_request_for(vm, uid_of(v)));
    match (strategy, vmi) {
        (RunStrategy::Always, Some(vmi)) => {
            if stop_requested || is_final(vmi) {
                stop_vmi(c, vmi, expect).await?;
            }
        }
        (RunStrategy::Always, None) => start_vmi(c, vm, expect).await?,
        (RunStrategy::RerunOnFailure, Some(vmi)) => {
            let failed = vmi_phase(vmi) == super::phase::FAILED;
            let succeeded = vmi_phase(vmi) == super::phase::SUCCEEDED;
            if !is_deleting(vmi) && (stop_requested || failed || succeeded) {
                stop_vmi(c, vmi, expect).await?;
                if failed {
                    add_start_request(c, vm).await?;
                }
            }
        }
        (RunStrategy::RerunOnFailure, None) => {
            let recorded = vm["status"]["runStrategy"].as_str().unwrap_or_default();
            if has_start_request(vm) || recorded != strategy.as_str() {
                start_vmi(c, vm, expect).await?;
            }
        }
        (RunStrategy::Manual, Some(vmi)) => {
            if stop_requested {
                stop_vmi(c, vmi, expect).await?;
            }
        }
        (RunStrategy::Manual, None) => {
            if has_start_request(vm) {
                start_vmi(c, vm, expect).await?;
            }
        }
        (RunStrategy::Halted, None) => {
            if has_start_request(vm) {
                let mut updated = vm.clone();
                if updated["spec"]
                    .get("runStrategy")
                    .is_some_and(|s| !s.is_null())
                {
                    updated["spec"]["runStrategy"] = json!(RunStrategy::Always.as_str());
                } else {
                    updated["spec"]["running"] = json!(true);
                }
                c.vms
                    .replace(name_of(vm), &PostParams::default(), &object(&updated)?)
                    .await?;
                return Ok(false);
            }
        }
        (RunStrategy::Halted, Some(vmi)) => stop_vmi(c, vmi, expect).await?,
        (RunStrategy::Once, None) => start_vmi(c, vm, expect).await?,
        (RunStrategy::Once, Some(_)) => {}
    }
    Ok(true)
}

/// `stopVMI`: deletes the VMI unless it is being deleted already.
async fn stop_vmi(c: &Cluster, vmi: &Value, expect: &mut Expect) -> anyhow::Result<()> {
    if is_deleting(vmi) {
        return Ok(());
    }
    match c.vmis.delete(name_of(vmi), &DeleteParams::default()).await {
        Ok(_) => {
            expect.stop = true;
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `startVMI` (`SetupVMIFromVM`): the VMI from the template, named after the VM,
/// owned by it, with the template's firmware UUID and both finalizers, `Pending`
/// as virt-api's mutating webhook makes it.
async fn start_vmi(c: &Cluster, vm: &Value, expect: &mut Expect) -> anyhow::Result<()> {
    let template = &vm["spec"]["template"];
    let mut metadata = if template["metadata"].is_object() {
        template["metadata"].clone()
    } else {
        json!({})
    };
    metadata["name"] = json!(name_of(vm));
    metadata["namespace"] = vm["metadata"]["namespace"].clone();
    metadata["ownerReferences"] = json!([{
        "apiVersion": API_VERSION,
        "kind": "VirtualMachine",
        "name": name_of(vm),
        "uid": uid_of(vm),
        "controller": true,
        "blockOwnerDeletion": true,
    }]);
    metadata["finalizers"] = json!([VMI_FINALIZER, VM_CONTROLLER_FINALIZER]);
    let mut spec = template["spec"].clone();
    if spec["domain"]["firmware"]["uuid"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        spec["domain"]["firmware"]["uuid"] = json!(legacy_firmware_uuid(name_of(vm)));
    }
    if spec
        .get("terminationGracePeriodSeconds")
        .is_none_or(Value::is_null)
    {
        spec["terminationGracePeriodSeconds"] =
            json!(super::DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS);
    }
    // virt-api's mutating webhook (`vmi-mutator.go`) creates every VMI `Pending`, with
    // the VMI finalizer: no client ever sees a VMI without a phase.
    let now = crate::remediation::common::rfc3339(crate::remediation::common::now());
    let vmi = json!({
        "apiVersion": API_VERSION,
        "kind": "VirtualMachineInstance",
        "metadata": metadata,
        "spec": spec,
        "status": {
            "phase": super::phase::PENDING,
            "phaseTransitionTimestamps": [
                {"phase": super::phase::PENDING, "phaseTransitionTimestamp": now},
            ],
        },
    });
    match c.vmis.create(&PostParams::default(), &object(&vmi)?).await {
        Ok(_) => {
            expect.start = true;
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `addStartRequest`: appends a start request (JSON patch `add`, replacing the list).
async fn add_start_request(c: &Cluster, vm: &mut Value) -> anyhow::Result<()> {
    let mut requests = vm["status"]["stateChangeRequests"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    requests.push(json!({"action": "Start"}));
    let ops = json!([{"op": "add", "path": "/status/stateChangeRequests", "value": requests}]);
    let patched = c
        .vms
        .patch_status(name_of(vm), &PatchParams::default(), &json_patch(ops)?)
        .await?;
    *vm = value(patched)?;
    Ok(())
}

fn vmi_condition(vmi: &Value, kind: &str) -> bool {
    vmi["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == kind && c["status"] == "True")
    })
}

/// `isTrimFirstChangeRequestNeeded`.
fn trim_first_request(vm: &Value, vmi: Option<&Value>) -> bool {
    let Some(first) = vm["status"]["stateChangeRequests"].get(0) else {
        return false;
    };
    match first["action"].as_str() {
        Some("Stop") => match vmi {
            None => true,
            Some(vmi) => first["uid"].as_str().is_none_or(|uid| uid != uid_of(vmi)),
        },
        Some("Start") => vmi.is_some_and(|v| !is_deleting(v) && !is_final(v)),
        _ => false,
    }
}

/// `setPrintableStatus` for the statuses modelled here.
pub(crate) fn printable_status(
    vm: &Value,
    vmi: Option<&Value>,
    start_expected: bool,
    stop_expected: bool,
) -> &'static str {
    let running = vmi.is_some_and(|v| vmi_phase(v) == super::phase::RUNNING);
    let paused = vmi.is_some_and(|v| vmi_condition(v, "Paused"));
    if is_deleting(vm) {
        printable::TERMINATING
    } else if vmi.is_some_and(|v| !is_final(v) && (is_deleting(v) || stop_expected)) {
        printable::STOPPING
    } else if running && paused {
        printable::PAUSED
    } else if running {
        printable::RUNNING
    } else if match vmi {
        None => start_expected,
        Some(v) => matches!(
            vmi_phase(v),
            super::phase::UNSET
                | super::phase::PENDING
                | super::phase::SCHEDULING
                | super::phase::SCHEDULED
        ),
    } {
        printable::STARTING
    } else if vmi.map_or(!start_expected, is_final) {
        printable::STOPPED
    } else {
        printable::UNKNOWN
    }
}

/// `updateStatus`.
async fn update_status(
    c: &Cluster,
    vm: &Value,
    vmi: Option<&Value>,
    strategy: RunStrategy,
    expect: Expect,
) -> anyhow::Result<()> {
    let mut new = vm.clone();
    if !new["status"].is_object() {
        new["status"] = json!({});
    }
    let created = vmi.is_some();
    let ready = vmi.is_some_and(|v| vmi_condition(v, "Ready"));
    let status = &mut new["status"];
    status["created"] = json!(created);
    status["ready"] = json!(ready);
    if status["runStrategy"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
        || created
    {
        status["runStrategy"] = json!(strategy.as_str());
    }
    if trim_first_request(vm, vmi)
        && let Some(list) = new["status"]["stateChangeRequests"].as_array_mut()
    {
        list.remove(0);
        if list.is_empty()
            && let Some(s) = new["status"].as_object_mut()
        {
            s.remove("stateChangeRequests");
        }
    }
    let ready_status = match vmi {
        None => "False",
        Some(_) if ready => "True",
        Some(_) => "False",
    };
    let old_condition = vm["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned();
    let condition = match old_condition {
        Some(c) if c["status"] == ready_status => c,
        _ => {
            let mut c = json!({
                "type": "Ready",
                "status": ready_status,
                "lastProbeTime": null,
                "lastTransitionTime": crate::remediation::common::rfc3339(crate::remediation::common::now()),
            });
            if vmi.is_none() {
                c["reason"] = json!("VMINotExists");
                c["message"] = json!("VMI does not exist");
            }
            c
        }
    };
    new["status"]["conditions"] = json!([condition]);
    new["status"]["printableStatus"] = json!(printable_status(vm, vmi, expect.start, expect.stop));
    if new["status"] != vm["status"] {
        c.vms
            .replace_status(name_of(vm), &PostParams::default(), &object(&new)?)
            .await?;
    }
    if let Some(vmi) = vmi
        && is_final(vmi)
        && vmi["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == VM_CONTROLLER_FINALIZER))
    {
        let mut updated = vmi.clone();
        super::handler::remove_finalizer(&mut updated, VM_CONTROLLER_FINALIZER);
        let ops = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": vmi["metadata"]["finalizers"]},
            {"op": "replace", "path": "/metadata/finalizers", "value": updated["metadata"]["finalizers"]},
        ]);
        c.vmis
            .patch(name_of(vmi), &PatchParams::default(), &json_patch(ops)?)
            .await?;
    }
    Ok(())
}
