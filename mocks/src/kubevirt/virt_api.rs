//! virt-api's VM lifecycle subresources: `PUT /apis/subresources.kubevirt.io/v1/
//! namespaces/{ns}/virtualmachines/{name}/{start,stop,restart}`, behind fake-kube's
//! aggregated-API hook ([`crate::kube::FakeKube::aggregated_api`]).
//!
//! Follows KubeVirt's `pkg/virt-api/rest/lifecycle.go` (`StartVMRequestHandler`,
//! `StopVMRequestHandler`, `RestartVMRequestHandler`, `patchVMStatusStopped`,
//! `patchVMITerminationGracePeriod`, `getChangeRequestJson`, `getRunningPatch`),
//! `pkg/virt-api/rest/subresource.go` (`fetchVirtualMachine`, the messages) and
//! `pkg/virt-api/api.go` (the resource list of `/apis/subresources.kubevirt.io/v1`):
//!
//! - **stop** (body `StopOptions`: `gracePeriod`, `dryRun`; an empty body is none):
//!   404 for a missing VM; if a VMI exists that is not final and `gracePeriod` is
//!   given, the VMI's `spec.terminationGracePeriodSeconds` is patched first (JSON
//!   patch with a `test` of the old value). Then by run strategy: Always/Once →
//!   `spec.runStrategy: Halted` (or `spec.running: false`) by a JSON patch with a
//!   `test`; Manual/RerunOnFailure → a `stop` request for the VMI's UID in
//!   `status.stateChangeRequests` (409 `VM is not running` without a running VMI);
//!   Halted → 409 `VM is not running` without a running VMI, 409 `Halted only
//!   supports manual stop requests with a shorter graceperiod` unless the grace
//!   period is shorter than the VMI's was, else a stop request as Manual.
//! - **start**: 409 `VM is already running` while a non-final VMI with a phase
//!   exists; Halted → `runStrategy: Always` (or `running: true`); Manual and
//!   RerunOnFailure → a `start` request (after a `stop` request for a final VMI;
//!   409 `RerunOnFailure does not support starting VM from failed state` for a
//!   Failed one); Always/Once → 409 `Always does not support manual start requests`.
//! - **restart** (`gracePeriodSeconds`: only 0): Halted/Once → 409; no VMI → 409
//!   `VM is not running: Halted`; else (after grace period 1 on the VMI when forced)
//!   `stop` + `start` requests.
//! - A change request while another is pending → 500 `unable to complete request:
//!   stop/start already underway` (unless it is a lone stop, which replaces them); a
//!   failed JSON patch `test` → 409 Conflict. Success is `202 Accepted`, no body.
//! - `dryRun` is passed to the patches, which fake-kube refuses (400).
//!
//! [`VirtApi::set_down`] makes every request a 503 (the APIService unavailable), as
//! the aggregator answers while virt-api has no ready endpoint: Go's `http.Error`, a
//! `text/plain` body `service unavailable`, not a `Status`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use axum::http::StatusCode;
use futures::future::BoxFuture;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

use super::{GROUP, RunStrategy, VERSION, is_final, run_strategy, vmi_phase};
use crate::kube::aggregated::{
    AggregatedApi, AggregatedRequest, AggregatedResponse, ApiResource as Listed,
};

/// The resources virt-api's `/apis/subresources.kubevirt.io/v1` lists (`api.go`).
pub const RESOURCES: &[&str] = &[
    "expand-vm-spec",
    "virtualmachineinstances/vnc",
    "virtualmachineinstances/vnc/screenshot",
    "virtualmachineinstances/console",
    "virtualmachineinstances/portforward",
    "virtualmachineinstances/backup",
    "virtualmachineinstances/redefine-checkpoint",
    "virtualmachineinstances/pause",
    "virtualmachineinstances/unpause",
    "virtualmachineinstances/freeze",
    "virtualmachineinstances/unfreeze",
    "virtualmachineinstances/reset",
    "virtualmachineinstances/softreboot",
    "virtualmachines/start",
    "virtualmachines/stop",
    "virtualmachines/restart",
    "virtualmachines/migrate",
    "virtualmachines/expand-spec",
    "virtualmachines/objectgraph",
    "virtualmachines/evacuate/cancel",
    "virtualmachineinstances/guestosinfo",
    "virtualmachineinstances/userlist",
    "virtualmachineinstances/filesystemlist",
    "virtualmachineinstances/addvolume",
    "virtualmachineinstances/removevolume",
    "virtualmachineinstances/objectgraph",
    "virtualmachineinstances/sev/fetchcertchain",
    "virtualmachineinstances/sev/querylaunchmeasurement",
    "virtualmachineinstances/sev/setupsession",
    "virtualmachineinstances/sev/injectlaunchsecret",
    "virtualmachineinstances/evacuate/cancel",
];

const VM_NOT_RUNNING: &str = "VM is not running";

/// virt-api, for [`crate::kube::FakeKube::aggregated_api`] (group
/// [`super::SUBRESOURCES_GROUP`], version [`super::SUBRESOURCES_VERSION`]). It
/// answers 503 until [`VirtApi::connect`] gives it a client to the API server.
#[derive(Default)]
pub struct VirtApi {
    client: OnceLock<kube::Client>,
    down: AtomicBool,
}

impl std::fmt::Debug for VirtApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtApi")
            .field("connected", &self.client.get().is_some())
            .field("down", &self.down.load(Ordering::Relaxed))
            .finish()
    }
}

impl VirtApi {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The client virt-api reads and patches VMs and VMIs with (its own
    /// ServiceAccount's, in a cluster). Only the first call counts.
    pub fn connect(&self, client: kube::Client) {
        let _ = self.client.set(client);
    }

    /// While `down`, every request is `503 Service Unavailable` (the aggregator's
    /// answer for an APIService without a ready endpoint).
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }
}

impl AggregatedApi for VirtApi {
    fn resources(&self) -> Vec<Listed> {
        RESOURCES
            .iter()
            .map(|name| Listed {
                name: (*name).to_owned(),
                namespaced: true,
                kind: String::new(),
                verbs: Vec::new(),
            })
            .collect()
    }

    fn handle(&self, request: AggregatedRequest) -> BoxFuture<'static, AggregatedResponse> {
        let client = self.client.get().cloned();
        let down = self.down.load(Ordering::SeqCst);
        Box::pin(async move {
            match client {
                Some(client) if !down => serve(client, request).await,
                _ => AggregatedResponse::service_unavailable(),
            }
        })
    }
}

fn not_found() -> AggregatedResponse {
    AggregatedResponse::failure(
        StatusCode::NOT_FOUND,
        "NotFound",
        "the server could not find the requested resource",
        json!({}),
    )
}

/// `errors.NewConflict(v1.Resource("virtualmachine"), name, err)`.
fn conflict(name: &str, message: &str) -> AggregatedResponse {
    AggregatedResponse::failure(
        StatusCode::CONFLICT,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"{name}\": {message}"
        ),
        json!({"name": name, "group": GROUP, "kind": "virtualmachine"}),
    )
}

/// `errors.NewInternalError(err)`.
fn internal(message: &str) -> AggregatedResponse {
    AggregatedResponse::failure(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalError",
        &format!("Internal error occurred: {message}"),
        json!({"causes": [{"message": message}]}),
    )
}

fn bad_request(message: &str) -> AggregatedResponse {
    AggregatedResponse::failure(StatusCode::BAD_REQUEST, "BadRequest", message, json!({}))
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural)
}

/// One request's view of the API server.
struct Ctx {
    vms: Api<DynamicObject>,
    vmis: Api<DynamicObject>,
    name: String,
    dry_run: bool,
}

impl Ctx {
    /// `fetchVirtualMachine`: 404 `virtualmachine.kubevirt.io "NAME" not found`.
    async fn vm(&self) -> Result<Value, AggregatedResponse> {
        match self.vms.get(&self.name).await {
            Ok(vm) => serde_json::to_value(vm).map_err(|e| internal(&e.to_string())),
            Err(kube::Error::Api(s)) if s.code == 404 => Err(AggregatedResponse::failure(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("virtualmachine.kubevirt.io \"{}\" not found", self.name),
                json!({"name": self.name, "group": GROUP, "kind": "virtualmachine"}),
            )),
            Err(e) => Err(internal(&format!(
                "unable to retrieve vm [{}]: {e}",
                self.name
            ))),
        }
    }

    async fn vmi(&self) -> Result<Option<Value>, AggregatedResponse> {
        match self.vmis.get(&self.name).await {
            Ok(vmi) => serde_json::to_value(vmi)
                .map(Some)
                .map_err(|e| internal(&e.to_string())),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(internal(&e.to_string())),
        }
    }

    fn params(&self) -> PatchParams {
        PatchParams {
            dry_run: self.dry_run,
            ..PatchParams::default()
        }
    }

    async fn json_patch(
        &self,
        api: &Api<DynamicObject>,
        ops: Value,
        status: bool,
    ) -> Result<(), kube::Error> {
        let patch: json_patch::Patch =
            serde_json::from_value(ops).map_err(kube::Error::SerdeError)?;
        let patch = Patch::Json::<()>(patch);
        if status {
            api.patch_status(&self.name, &self.params(), &patch).await?;
        } else {
            api.patch(&self.name, &self.params(), &patch).await?;
        }
        Ok(())
    }

    /// `patchVMITerminationGracePeriod`: the old value (0 when unset).
    async fn patch_grace(&self, vmi: &Value, grace: i64) -> Result<i64, AggregatedResponse> {
        let old = vmi["spec"]
            .get("terminationGracePeriodSeconds")
            .cloned()
            .unwrap_or(Value::Null);
        let ops = json!([
            {"op": "test", "path": "/spec/terminationGracePeriodSeconds", "value": old},
            {"op": "replace", "path": "/spec/terminationGracePeriodSeconds", "value": grace},
        ]);
        self.json_patch(&self.vmis, ops, false)
            .await
            .map_err(|e| internal(&e.to_string()))?;
        Ok(old.as_i64().unwrap_or(0))
    }

    /// The outcome of a VM (or VM status) patch, as virt-api reports it.
    fn patched(&self, result: Result<(), kube::Error>) -> AggregatedResponse {
        match result {
            Ok(()) => AggregatedResponse::empty(StatusCode::ACCEPTED),
            Err(kube::Error::Api(s)) if s.code == 422 => conflict(
                &self.name,
                &format!("jsonpatch test operation does not apply: {}", s.message),
            ),
            Err(e) => internal(&e.to_string()),
        }
    }

    /// `getChangeRequestJson` then the status patch.
    async fn change_requests(&self, vm: &Value, changes: Value) -> AggregatedResponse {
        let status = vm
            .get("status")
            .filter(|s| s.as_object().is_some_and(|o| !o.is_empty()));
        let mut ops = Vec::new();
        match status {
            None => ops.push(
                json!({"op": "add", "path": "/status", "value": {"stateChangeRequests": changes}}),
            ),
            Some(status) => {
                let current = status
                    .get("stateChangeRequests")
                    .cloned()
                    .unwrap_or(Value::Null);
                let pending = current.as_array().map_or(0, Vec::len);
                ops.push(
                    json!({"op": "test", "path": "/status/stateChangeRequests", "value": current}),
                );
                let lone_stop = changes
                    .as_array()
                    .is_some_and(|c| c.len() == 1 && c[0]["action"] == "Stop");
                if pending == 0 {
                    ops.push(json!({"op": "add", "path": "/status/stateChangeRequests", "value": changes}));
                } else if lone_stop {
                    ops.push(json!({"op": "replace", "path": "/status/stateChangeRequests", "value": changes}));
                } else {
                    return internal("unable to complete request: stop/start already underway");
                }
                if status.get("startFailure").is_some_and(|f| !f.is_null()) {
                    ops.push(json!({"op": "remove", "path": "/status/startFailure"}));
                }
            }
        }
        let result = self.json_patch(&self.vms, Value::Array(ops), true).await;
        self.patched(result)
    }

    /// `getRunningPatch`.
    async fn set_running(&self, vm: &Value, running: bool) -> AggregatedResponse {
        let spec = &vm["spec"];
        let ops = match spec.get("runStrategy").filter(|v| !v.is_null()) {
            Some(current) => {
                let strategy = if running {
                    RunStrategy::Always
                } else {
                    RunStrategy::Halted
                };
                json!([
                    {"op": "test", "path": "/spec/runStrategy", "value": current},
                    {"op": "replace", "path": "/spec/runStrategy", "value": strategy.as_str()},
                ])
            }
            None => json!([
                {"op": "test", "path": "/spec/running", "value": spec.get("running").cloned().unwrap_or(Value::Null)},
                {"op": "replace", "path": "/spec/running", "value": running},
            ]),
        };
        let result = self.json_patch(&self.vms, ops, false).await;
        self.patched(result)
    }
}

fn stop_request(vmi: &Value) -> Value {
    json!({"action": "Stop", "uid": vmi["metadata"]["uid"]})
}

async fn serve(client: kube::Client, request: AggregatedRequest) -> AggregatedResponse {
    let (Some(ns), Some("virtualmachines"), Some(name), Some(sub)) = (
        request.namespace.as_deref(),
        request.resource.as_deref(),
        request.name.as_deref(),
        request.subresource.as_deref(),
    ) else {
        return not_found();
    };
    if !matches!(sub, "start" | "stop" | "restart") {
        return not_found();
    }
    if request.method != "PUT" {
        return AggregatedResponse::failure(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
            json!({}),
        );
    }
    let body: Value = if request.body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        match serde_json::from_slice(&request.body) {
            Ok(v) => v,
            Err(e) => {
                return bad_request(&format!(
                    "Can not unmarshal Request body to struct, error: {e}"
                ));
            }
        }
    };
    let dry_run = body["dryRun"].as_array().is_some_and(|d| !d.is_empty());
    let ctx = Ctx {
        vms: Api::namespaced_with(
            client.clone(),
            ns,
            &resource("VirtualMachine", "virtualmachines"),
        ),
        vmis: Api::namespaced_with(
            client,
            ns,
            &resource("VirtualMachineInstance", "virtualmachineinstances"),
        ),
        name: name.to_owned(),
        dry_run,
    };
    let result = match sub {
        "stop" => stop(&ctx, &body).await,
        "start" => start(&ctx).await,
        _ => restart(&ctx, &body).await,
    };
    result.unwrap_or_else(|e| e)
}

/// `StopVMRequestHandler`.
async fn stop(ctx: &Ctx, body: &Value) -> Result<AggregatedResponse, AggregatedResponse> {
    let grace = match body.get("gracePeriod").filter(|g| !g.is_null()) {
        None => None,
        Some(g) => Some(
            g.as_i64()
                .ok_or_else(|| bad_request("gracePeriod must be an integer"))?,
        ),
    };
    let vm = ctx.vm().await?;
    let strategy = run_strategy(&vm).map_err(|e| internal(&e))?;
    let vmi = ctx.vmi().await?;
    let running_vmi = vmi.as_ref().filter(|v| !is_final(v));
    let mut old_grace = 0;
    if let (Some(vmi), Some(grace)) = (running_vmi, grace) {
        old_grace = ctx.patch_grace(vmi, grace).await?;
    }
    Ok(match strategy {
        RunStrategy::Halted => {
            let Some(vmi) = running_vmi else {
                return Err(conflict(&ctx.name, VM_NOT_RUNNING));
            };
            let has_grace = vmi["spec"]
                .get("terminationGracePeriodSeconds")
                .is_some_and(|g| !g.is_null());
            if grace.is_none_or(|g| has_grace && g >= old_grace) {
                return Err(conflict(
                    &ctx.name,
                    "Halted only supports manual stop requests with a shorter graceperiod",
                ));
            }
            ctx.change_requests(&vm, json!([stop_request(vmi)])).await
        }
        RunStrategy::Manual | RunStrategy::RerunOnFailure => {
            let Some(vmi) = running_vmi else {
                return Err(conflict(&ctx.name, VM_NOT_RUNNING));
            };
            ctx.change_requests(&vm, json!([stop_request(vmi)])).await
        }
        RunStrategy::Always | RunStrategy::Once => ctx.set_running(&vm, false).await,
    })
}

/// `StartVMRequestHandler` (without `paused` starts).
async fn start(ctx: &Ctx) -> Result<AggregatedResponse, AggregatedResponse> {
    let vm = ctx.vm().await?;
    let vmi = ctx.vmi().await?;
    if let Some(vmi) = &vmi
        && !is_final(vmi)
        && !matches!(vmi_phase(vmi), super::phase::UNKNOWN | super::phase::UNSET)
    {
        return Err(conflict(&ctx.name, "VM is already running"));
    }
    let strategy = run_strategy(&vm).map_err(|e| internal(&e))?;
    Ok(match strategy {
        RunStrategy::Halted => ctx.set_running(&vm, true).await,
        RunStrategy::RerunOnFailure | RunStrategy::Manual => {
            let phase = vmi.as_ref().map(vmi_phase);
            let needs_restart = match strategy {
                RunStrategy::RerunOnFailure => phase == Some(super::phase::SUCCEEDED),
                _ => vmi.as_ref().is_some_and(is_final),
            };
            if strategy == RunStrategy::RerunOnFailure && phase == Some(super::phase::FAILED) {
                return Err(conflict(
                    &ctx.name,
                    "RerunOnFailure does not support starting VM from failed state",
                ));
            }
            let changes = match (&vmi, needs_restart) {
                (Some(vmi), true) => json!([stop_request(vmi), {"action": "Start"}]),
                _ => json!([{"action": "Start"}]),
            };
            ctx.change_requests(&vm, changes).await
        }
        RunStrategy::Always | RunStrategy::Once => {
            return Err(conflict(
                &ctx.name,
                &format!(
                    "{} does not support manual start requests",
                    strategy.as_str()
                ),
            ));
        }
    })
}

/// `RestartVMRequestHandler`.
async fn restart(ctx: &Ctx, body: &Value) -> Result<AggregatedResponse, AggregatedResponse> {
    let grace = body.get("gracePeriodSeconds").and_then(Value::as_i64);
    match grace {
        Some(g) if g > 0 => {
            return Err(bad_request(
                "For force restart, only gracePeriod=0 is supported for now",
            ));
        }
        Some(g) if g < 0 => return Err(bad_request("gracePeriod has to be greater or equal to 0")),
        _ => {}
    }
    let vm = ctx.vm().await?;
    let strategy = run_strategy(&vm).map_err(|e| internal(&e))?;
    if matches!(strategy, RunStrategy::Halted | RunStrategy::Once) {
        return Err(conflict(
            &ctx.name,
            &format!(
                "RunStategy {} does not support manual restart requests",
                strategy.as_str()
            ),
        ));
    }
    let Some(vmi) = ctx.vmi().await? else {
        return Err(conflict(&ctx.name, "VM is not running: Halted"));
    };
    if grace == Some(0) {
        ctx.patch_grace(&vmi, 1).await?;
    }
    Ok(ctx
        .change_requests(&vm, json!([stop_request(&vmi), {"action": "Start"}]))
        .await)
}
