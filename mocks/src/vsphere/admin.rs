//! The admin API: how scripts (and humans with curl) steer a running mock vSphere.
//! Outside `/sdk`, no credentials, never affected by injected faults.
//!
//! | method | path | body | answer |
//! | --- | --- | --- | --- |
//! | GET | `/admin/vms` | | `[VmState]` |
//! | POST | `/admin/vms/{moid}/power` | `{"state":"poweredOff"}` | `VmState` |
//! | POST | `/admin/vms/{moid}/rename` | `{"name":"worker-1-old"}` | `VmState` |
//! | POST | `/admin/vms/{moid}/move` | `{"folder":"k8s/retired"}` | `VmState` |
//! | POST | `/admin/faults` | `{"slow_tasks_ms":30000}`, `{"fail_next_task":"GenericVmConfigFault"}`, `"no_power_privilege"`, `"unavailable"` or `"no_find_all_by_uuid"` | 204 |
//! | DELETE | `/admin/faults` | | 204 |
//! | POST | `/admin/sessions/expire` | | `{"expired": n}` |
//! | GET | `/admin/calls` | | `[CallRecord]` |
//!
//! Errors are `{"error": "..."}` with 400 or 404.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::faults::Fault;
use super::model::{VmPower, split_path};
use super::state::Shared;

/// A fault as the admin API takes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdminFault {
    SlowTasksMs(u64),
    FailNextTask(String),
    NoPowerPrivilege,
    Unavailable,
    NoFindAllByUuid,
}

impl From<AdminFault> for Fault {
    fn from(f: AdminFault) -> Self {
        match f {
            AdminFault::SlowTasksMs(ms) => Fault::SlowTasks(Duration::from_millis(ms)),
            AdminFault::FailNextTask(name) => Fault::FailNextTask(name),
            AdminFault::NoPowerPrivilege => Fault::NoPowerPrivilege,
            AdminFault::Unavailable => Fault::Unavailable,
            AdminFault::NoFindAllByUuid => Fault::NoFindAllByUuid,
        }
    }
}

#[derive(Debug, Deserialize)]
struct PowerBody {
    state: String,
}

#[derive(Debug, Deserialize)]
struct RenameBody {
    name: String,
}

#[derive(Debug, Deserialize)]
struct MoveBody {
    folder: String,
}

pub(super) fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route("/admin/vms", get(list_vms))
        .route("/admin/vms/{moid}/power", post(set_power))
        .route("/admin/vms/{moid}/rename", post(rename))
        .route("/admin/vms/{moid}/move", post(move_vm))
        .route("/admin/faults", post(inject).delete(clear_faults))
        .route("/admin/sessions/expire", post(expire_sessions))
        .route("/admin/calls", get(calls))
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

fn vm_json(shared: &Shared, moid: &str) -> Response {
    match shared.lock().vm(moid) {
        Some(vm) => Json(vm.to_json()).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no VM {moid}")),
    }
}

async fn list_vms(State(shared): State<Arc<Shared>>) -> Response {
    let vms: Vec<serde_json::Value> = shared.lock().vms.iter().map(|v| v.to_json()).collect();
    Json(vms).into_response()
}

async fn set_power(
    State(shared): State<Arc<Shared>>,
    Path(moid): Path<String>,
    body: Result<Json<PowerBody>, JsonRejection>,
) -> Response {
    let Ok(Json(body)) = body else {
        return error(
            StatusCode::BAD_REQUEST,
            "expected {\"state\": \"poweredOff\"}",
        );
    };
    let power: VmPower = match body.state.parse() {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    if let Some(vm) = shared.lock().vm_mut(&moid) {
        vm.power = power;
    }
    vm_json(&shared, &moid)
}

async fn rename(
    State(shared): State<Arc<Shared>>,
    Path(moid): Path<String>,
    body: Result<Json<RenameBody>, JsonRejection>,
) -> Response {
    let Ok(Json(body)) = body else {
        return error(StatusCode::BAD_REQUEST, "expected {\"name\": \"...\"}");
    };
    if let Some(vm) = shared.lock().vm_mut(&moid) {
        vm.name = body.name;
    }
    vm_json(&shared, &moid)
}

async fn move_vm(
    State(shared): State<Arc<Shared>>,
    Path(moid): Path<String>,
    body: Result<Json<MoveBody>, JsonRejection>,
) -> Response {
    let Ok(Json(body)) = body else {
        return error(StatusCode::BAD_REQUEST, "expected {\"folder\": \"...\"}");
    };
    if let Some(vm) = shared.lock().vm_mut(&moid) {
        vm.folders = split_path(&body.folder);
    }
    vm_json(&shared, &moid)
}

async fn inject(
    State(shared): State<Arc<Shared>>,
    body: Result<Json<AdminFault>, JsonRejection>,
) -> Response {
    match body {
        Ok(Json(fault)) => {
            shared.lock().faults.apply(fault.into());
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => error(StatusCode::BAD_REQUEST, format!("not a fault: {e}")),
    }
}

async fn clear_faults(State(shared): State<Arc<Shared>>) -> Response {
    shared.lock().faults = Default::default();
    StatusCode::NO_CONTENT.into_response()
}

async fn expire_sessions(State(shared): State<Arc<Shared>>) -> Response {
    let mut inner = shared.lock();
    let expired = inner.sessions.len();
    inner.sessions.clear();
    Json(json!({ "expired": expired })).into_response()
}

async fn calls(State(shared): State<Arc<Shared>>) -> Response {
    let calls: Vec<serde_json::Value> = shared
        .lock()
        .calls
        .iter()
        .map(|c| {
            json!({
                "method": c.method,
                "this": c.this,
                "soap_action": c.soap_action,
                "authenticated": c.authenticated,
            })
        })
        .collect();
    Json(calls).into_response()
}
