//! The vSphere Automation REST API, `/rest` flavour (vCenter 6.5 and later; ESXi
//! has none), served next to `/sdk` on the same VMs: a REST power-off is what SOAP
//! reads, and the reverse. The subset ClusterLabs' `fence_vmware_rest` uses, with
//! the paths, status codes and error bodies of VMware's vSphere Automation API
//! reference (`com.vmware.cis.session`, `com.vmware.vcenter.VM`,
//! `com.vmware.vcenter.vm.Power`, and the `com.vmware.vapi.std.errors` types):
//!
//! - `POST /rest/com/vmware/cis/session` with HTTP Basic: `{"value": "<session id>"}`;
//!   later calls carry it in the `vmware-api-session-id` header (or cookie).
//!   `DELETE` on the same path ends the session. Sessions are the SOAP side's:
//!   [`MockVsphereHandle::expire_sessions`](super::MockVsphereHandle::expire_sessions)
//!   ends both kinds.
//! - `GET /rest/vcenter/vm` with `filter.names`, `filter.vms`, `filter.power_states`
//!   (each repeatable, also as `filter.names.1`, ...): `{"value": [{"vm", "name",
//!   "power_state", "cpu_count", "memory_size_MiB"}]}`, in inventory order; more
//!   than 1000 matches is 400 `unable_to_allocate_resource`, as vCenter answers.
//! - `GET /rest/vcenter/vm/{vm}/power`: `{"value": {"state": "POWERED_OFF"}}`.
//! - `POST /rest/vcenter/vm/{vm}/power/stop` and `.../start`: synchronous, as in
//!   vCenter: the answer (200, no body) comes when the power task ends, after the
//!   mock's task delay ([`Fault::SlowTasks`](super::Fault::SlowTasks) included). A VM
//!   already in that state is 400 `already_in_desired_state` (no task);
//!   [`Fault::FailNextTask`](super::Fault::FailNextTask) ends in 500 `error`;
//!   [`Fault::NoPowerPrivilege`](super::Fault::NoPowerPrivilege) is 403
//!   `unauthorized`. Both calls go into the call record (method
//!   `POST /rest/vcenter/vm/{vm}/power/stop`, `this` the VM's id), so
//!   [`MockVsphereHandle::power_calls`](super::MockVsphereHandle::power_calls) lists
//!   them with the SOAP ones.
//!
//! A mock answering as ESXi ([`Product::Esxi`](super::Product::Esxi)) has no `/rest`:
//! every path there is 404. Without a live session every call but the login is 401 `unauthenticated`; an
//! unknown VM is 404 `not_found`; [`Fault::Unavailable`](super::Fault::Unavailable)
//! answers 503 with an HTML page, as for `/sdk`. Errors are
//! `{"type": "com.vmware.vapi.std.errors.<kind>", "value": {"messages":
//! [{"args", "default_message", "id"}]}}`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::model::{Product, VmPower, VmState};
use super::state::{CallRecord, PowerOp, Shared, TaskInfoState};

/// The header (and cookie) carrying the session id.
pub const REST_SESSION_HEADER: &str = "vmware-api-session-id";

/// The most VMs `GET /rest/vcenter/vm` lists.
const LIST_LIMIT: usize = 1000;

pub(super) fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route(
            "/rest/com/vmware/cis/session",
            post(create_session).delete(delete_session),
        )
        .route("/rest/vcenter/vm", get(list_vms))
        .route("/rest/vcenter/vm/{vm}/power", get(power_get))
        .route("/rest/vcenter/vm/{vm}/power/stop", post(power_stop))
        .route("/rest/vcenter/vm/{vm}/power/start", post(power_start))
}

/// A vAPI error: `kind` is the last part of `com.vmware.vapi.std.errors.<kind>`;
/// `messages` are `(id, default_message, args)`.
fn error(status: StatusCode, kind: &str, messages: &[(&str, String, Vec<String>)]) -> Response {
    let messages: Vec<Value> = messages
        .iter()
        .map(|(id, text, args)| json!({ "args": args, "default_message": text, "id": id }))
        .collect();
    (
        status,
        Json(json!({
            "type": format!("com.vmware.vapi.std.errors.{kind}"),
            "value": { "messages": messages },
        })),
    )
        .into_response()
}

fn unauthenticated() -> Response {
    error(
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
        &[(
            "vapi.method.authentication.required",
            "This method requires authentication.".into(),
            vec![],
        )],
    )
}

fn not_found(vm: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        &[(
            "com.vmware.api.vcenter.vm.not_found",
            format!("Virtual machine with identifier '{vm}:VirtualMachine' does not exist."),
            vec![vm.to_string()],
        )],
    )
}

fn session_id(headers: &HeaderMap) -> Option<String> {
    if let Some(v) = headers
        .get(REST_SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
    {
        return Some(v.trim().to_string());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == REST_SESSION_HEADER)
        .map(|(_, value)| value.trim_matches('"').to_string())
}

/// Records the call; `Some` is the answer when the mock is unavailable, answers as
/// ESXi, or the call has no live session (`needs_session`).
fn admit(
    shared: &Shared,
    headers: &HeaderMap,
    method: &str,
    this: &str,
    needs_session: bool,
) -> Option<Response> {
    if shared.config.product == Product::Esxi {
        return Some(StatusCode::NOT_FOUND.into_response());
    }
    let mut inner = shared.lock();
    let live = session_id(headers).is_some_and(|k| inner.sessions.contains_key(&k));
    inner.calls.push(CallRecord {
        method: method.to_string(),
        this: this.to_string(),
        soap_action: String::new(),
        authenticated: live,
    });
    if inner.faults.unavailable {
        return Some(super::soap::unavailable());
    }
    if needs_session && !live {
        return Some(unauthenticated());
    }
    None
}

fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(STANDARD.decode(encoded.trim()).ok()?).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

async fn create_session(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(answer) = admit(
        &shared,
        &headers,
        "POST /rest/com/vmware/cis/session",
        "",
        false,
    ) {
        return answer;
    }
    let config = &shared.config;
    match basic_credentials(&headers) {
        Some((user, password)) if user == config.username && password == config.password => {
            let id = uuid::Uuid::new_v4().simple().to_string();
            shared.lock().sessions.insert(id.clone(), user);
            Json(json!({ "value": id })).into_response()
        }
        _ => {
            let mut answer = error(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                &[(
                    "com.vmware.vapi.endpoint.method.authentication.required",
                    "Authentication required.".into(),
                    vec![],
                )],
            );
            answer.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"VAPI endpoint\""),
            );
            answer
        }
    }
}

async fn delete_session(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(answer) = admit(
        &shared,
        &headers,
        "DELETE /rest/com/vmware/cis/session",
        "",
        true,
    ) {
        return answer;
    }
    if let Some(id) = session_id(&headers) {
        shared.lock().sessions.remove(&id);
    }
    StatusCode::OK.into_response()
}

/// `POWERED_ON`, `POWERED_OFF`, `SUSPENDED`.
fn rest_power(power: VmPower) -> &'static str {
    match power {
        VmPower::PoweredOn => "POWERED_ON",
        VmPower::PoweredOff => "POWERED_OFF",
        VmPower::Suspended => "SUSPENDED",
    }
}

fn summary(vm: &VmState) -> Value {
    json!({
        "vm": vm.moid,
        "name": vm.name,
        "power_state": rest_power(vm.power),
        "cpu_count": 2,
        "memory_size_MiB": 4096,
    })
}

/// The filter a query names: `filter.names=a&filter.names=b` or
/// `filter.names.1=a&filter.names.2=b`.
#[derive(Debug, Default)]
struct Filter {
    names: Vec<String>,
    vms: Vec<String>,
    power_states: Vec<String>,
}

fn parse_filter(query: Option<&str>) -> Result<Filter, String> {
    let mut filter = Filter::default();
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let base = match key.rsplit_once('.') {
            Some((head, tail)) if tail.bytes().all(|b| b.is_ascii_digit()) => head,
            _ => &key,
        };
        match base {
            "filter.names" => filter.names.push(value.into_owned()),
            "filter.vms" => filter.vms.push(value.into_owned()),
            "filter.power_states" => filter.power_states.push(value.into_owned()),
            other => return Err(other.to_string()),
        }
    }
    Ok(filter)
}

async fn list_vms(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    if let Some(answer) = admit(&shared, &headers, "GET /rest/vcenter/vm", "", true) {
        return answer;
    }
    let filter = match parse_filter(query.as_deref()) {
        Ok(f) => f,
        Err(key) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_argument",
                &[(
                    "vapi.bindings.typeconverter.unexpected.field",
                    format!("Unexpected field {key} (not served by this mock)"),
                    vec![key],
                )],
            );
        }
    };
    let inner = shared.lock();
    let found: Vec<Value> = inner
        .vms
        .iter()
        .filter(|vm| filter.names.is_empty() || filter.names.contains(&vm.name))
        .filter(|vm| filter.vms.is_empty() || filter.vms.contains(&vm.moid))
        .filter(|vm| {
            filter.power_states.is_empty()
                || filter
                    .power_states
                    .iter()
                    .any(|s| s == rest_power(vm.power))
        })
        .map(summary)
        .collect();
    if found.len() > LIST_LIMIT {
        return error(
            StatusCode::BAD_REQUEST,
            "unable_to_allocate_resource",
            &[(
                "com.vmware.api.vcenter.vm.max_limit_exceeded",
                "Too many virtual machines. Add more filter criteria to reduce the number.".into(),
                vec![],
            )],
        );
    }
    Json(json!({ "value": found })).into_response()
}

async fn power_get(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(vm): Path<String>,
) -> Response {
    if let Some(answer) = admit(
        &shared,
        &headers,
        "GET /rest/vcenter/vm/{vm}/power",
        &vm,
        true,
    ) {
        return answer;
    }
    match shared.lock().vm(&vm) {
        Some(state) => {
            Json(json!({ "value": { "state": rest_power(state.power) } })).into_response()
        }
        None => not_found(&vm),
    }
}

async fn power_stop(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(vm): Path<String>,
) -> Response {
    power(shared, headers, vm, PowerOp::PowerOff).await
}

async fn power_start(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(vm): Path<String>,
) -> Response {
    power(shared, headers, vm, PowerOp::PowerOn).await
}

async fn power(shared: Arc<Shared>, headers: HeaderMap, vm: String, op: PowerOp) -> Response {
    let (verb, privilege, already) = match op {
        PowerOp::PowerOff => ("stop", "VirtualMachine.Interact.PowerOff", "off"),
        PowerOp::PowerOn => ("start", "VirtualMachine.Interact.PowerOn", "on"),
    };
    let method = format!("POST /rest/vcenter/vm/{{vm}}/power/{verb}");
    if let Some(answer) = admit(&shared, &headers, &method, &vm, true) {
        return answer;
    }
    let (task, delay) = {
        let mut inner = shared.lock();
        let Some(current) = inner.vm(&vm).map(|v| v.power) else {
            return not_found(&vm);
        };
        if inner.faults.no_power_privilege {
            return error(
                StatusCode::FORBIDDEN,
                "unauthorized",
                &[(
                    "vapi.security.authorization.invalid",
                    format!("Unable to authorize user: missing privilege {privilege}"),
                    vec![privilege.to_string()],
                )],
            );
        }
        let in_state = matches!(
            (op, current),
            (PowerOp::PowerOff, VmPower::PoweredOff) | (PowerOp::PowerOn, VmPower::PoweredOn)
        );
        if in_state {
            return error(
                StatusCode::BAD_REQUEST,
                "already_in_desired_state",
                &[
                    (
                        &format!("com.vmware.api.vcenter.vm.power.already_powered_{already}"),
                        format!("Virtual machine is already powered {already}."),
                        vec![],
                    ),
                    (
                        "vmsg.InvalidPowerState.summary",
                        format!(
                            "The attempted operation cannot be performed in the current state ({}).",
                            current.described()
                        ),
                        vec![],
                    ),
                ],
            );
        }
        let task = inner.start_task(&vm, op, shared.config.task_delay);
        let delay = inner.tasks.last().map_or(Duration::ZERO, |t| t.delay);
        (task, delay)
    };
    // The REST call returns when the task has ended.
    tokio::time::sleep(delay).await;
    loop {
        let state = shared.lock().task_state(&task);
        match state {
            Some(TaskInfoState::Queued | TaskInfoState::Running) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Some(TaskInfoState::Success) | None => return StatusCode::OK.into_response(),
            Some(TaskInfoState::Error(fault)) => {
                return error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "error",
                    &[(
                        &format!("vmsg.{}.summary", fault.fault_type),
                        fault.message,
                        vec![],
                    )],
                );
            }
        }
    }
}
