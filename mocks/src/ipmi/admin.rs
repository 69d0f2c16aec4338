//! The admin HTTP API: how CI scripts (and humans with curl) steer running mock BMCs.
//!
//! One router serves every BMC of a process, addressed by name. It needs no
//! credentials and is never affected by injected faults. Times are milliseconds since
//! the BMC started (`at_ms`).
//!
//! | method | path | body | answer |
//! | --- | --- | --- | --- |
//! | GET | `/admin/bmcs` | | `[{"name","addr","power","guid"}]` |
//! | GET | `/admin/{bmc}/power` | | `{"power":"on"}` |
//! | POST | `/admin/{bmc}/power` | `{"power":"off"}` | `{"power":"off"}` |
//! | GET | `/admin/{bmc}/guid` | | `{"guid":"<32 hex digits, wire order>"}` |
//! | POST | `/admin/{bmc}/guid` | `{"guid":"..."}` | `{"guid":"..."}` |
//! | GET | `/admin/{bmc}/log` | | `{"controls":[...],"requests":[...],"sessions":[...]}` |
//! | DELETE | `/admin/{bmc}/log` | | 204 |
//! | GET | `/admin/{bmc}/counters` | | `Counters` |
//! | GET | `/admin/{bmc}/faults` | | `[Fault]` in force |
//! | POST | `/admin/{bmc}/faults` | one `Fault` | `[Fault]` in force |
//! | DELETE | `/admin/{bmc}/faults` | | 204 |
//! | POST | `/admin/{bmc}/sessions/expire` | | `{"expired": n}` |
//!
//! Errors are `{"error": "..."}` with 400 or 404.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::faults::Fault;
use super::model::{Power, control_name, hex, parse_guid};
use super::server::MockIpmiHandle;
use super::state::{SessionEnd, Shared};

/// A BMC as the admin API sees it.
#[derive(Debug, Clone)]
struct Bmc {
    shared: Arc<Shared>,
    addr: SocketAddr,
}

type Bmcs = Arc<BTreeMap<String, Bmc>>;

/// Body of `POST /admin/{bmc}/power`.
#[derive(Debug, Deserialize)]
struct PowerBody {
    power: Power,
}

/// Body of `POST /admin/{bmc}/guid`.
#[derive(Debug, Deserialize)]
struct GuidBody {
    guid: String,
}

/// The admin router for these BMCs, by [`MockIpmiHandle::name`] (a later BMC with
/// the same name hides an earlier one). Serve it with `axum::serve`.
pub fn admin_router<'a>(bmcs: impl IntoIterator<Item = &'a MockIpmiHandle>) -> Router {
    let map: BTreeMap<String, Bmc> = bmcs
        .into_iter()
        .map(|h| {
            let bmc = Bmc {
                shared: h.shared(),
                addr: h.addr(),
            };
            (h.name().to_owned(), bmc)
        })
        .collect();
    Router::new()
        .route("/admin/bmcs", get(list))
        .route("/admin/{bmc}/power", get(power).post(set_power))
        .route("/admin/{bmc}/guid", get(guid).post(set_guid))
        .route("/admin/{bmc}/log", get(log).delete(clear_log))
        .route("/admin/{bmc}/counters", get(counters))
        .route(
            "/admin/{bmc}/faults",
            get(faults).post(set_fault).delete(clear_faults),
        )
        .route("/admin/{bmc}/sessions/expire", post(expire))
        .with_state(Arc::new(map))
}

/// An admin API error: `{"error": "..."}` with its status.
#[derive(Debug)]
struct AdminError(StatusCode, String);

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

type Answer = Result<Response, AdminError>;

fn find(bmcs: &Bmcs, name: &str) -> Result<Bmc, AdminError> {
    bmcs.get(name).cloned().ok_or_else(|| {
        let known: Vec<&String> = bmcs.keys().collect();
        AdminError(
            StatusCode::NOT_FOUND,
            format!("no BMC {name:?}; this process serves {known:?}"),
        )
    })
}

fn body<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, AdminError> {
    body.map(|Json(b)| b)
        .map_err(|e| AdminError(StatusCode::BAD_REQUEST, e.body_text()))
}

fn ms(at: Instant, started: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(started).as_millis()).unwrap_or(u64::MAX)
}

async fn list(State(bmcs): State<Bmcs>) -> Response {
    let now = Instant::now();
    let out: Vec<Value> = bmcs
        .iter()
        .map(|(name, b)| {
            let mut inner = b.shared.lock();
            json!({
                "name": name,
                "addr": b.addr.to_string(),
                "power": inner.machine.power(now),
                "guid": hex(&inner.guid),
            })
        })
        .collect();
    Json(out).into_response()
}

async fn power(State(bmcs): State<Bmcs>, Path(name): Path<String>) -> Answer {
    let b = find(&bmcs, &name)?;
    let power = b.shared.lock().machine.power(Instant::now());
    Ok(Json(json!({ "power": power })).into_response())
}

async fn set_power(
    State(bmcs): State<Bmcs>,
    Path(name): Path<String>,
    req: Result<Json<PowerBody>, JsonRejection>,
) -> Answer {
    let b = find(&bmcs, &name)?;
    let req = body(req)?;
    b.shared.lock().machine.force(req.power);
    tracing::info!(bmc = %name, power = %req.power, "power set by admin API");
    Ok(Json(json!({ "power": req.power })).into_response())
}

async fn guid(State(bmcs): State<Bmcs>, Path(name): Path<String>) -> Answer {
    let b = find(&bmcs, &name)?;
    let guid = hex(&b.shared.lock().guid);
    Ok(Json(json!({ "guid": guid })).into_response())
}

async fn set_guid(
    State(bmcs): State<Bmcs>,
    Path(name): Path<String>,
    req: Result<Json<GuidBody>, JsonRejection>,
) -> Answer {
    let b = find(&bmcs, &name)?;
    let req = body(req)?;
    let guid =
        parse_guid(&req.guid).map_err(|e| AdminError(StatusCode::BAD_REQUEST, e.to_string()))?;
    b.shared.lock().guid = guid;
    Ok(Json(json!({ "guid": hex(&guid) })).into_response())
}

fn end_name(end: SessionEnd) -> Value {
    serde_json::to_value(end).unwrap_or(Value::Null)
}

async fn log(State(bmcs): State<Bmcs>, Path(name): Path<String>) -> Answer {
    let b = find(&bmcs, &name)?;
    let t0 = b.shared.config.started;
    let inner = b.shared.lock_fresh();
    let controls: Vec<Value> = inner
        .controls
        .iter()
        .map(|c| {
            json!({
                "op": control_name(c.op),
                "at_ms": ms(c.at, t0),
                "session_id": c.session_id,
                "username": c.username,
            })
        })
        .collect();
    let requests: Vec<Value> = inner
        .requests
        .iter()
        .map(|r| {
            json!({
                "at_ms": ms(r.at, t0),
                "net_fn": r.net_fn,
                "cmd": r.cmd,
                "rq_seq": r.rq_seq,
                "data": hex(&r.data),
                "session_id": r.session_id,
                "privilege": r.privilege.map(|p| p.name()),
                "completion_code": r.completion_code,
            })
        })
        .collect();
    let sessions: Vec<Value> = inner
        .session_log
        .iter()
        .map(|s| {
            json!({
                "bmc_session_id": s.bmc_session_id,
                "console_session_id": s.console_session_id,
                "username": s.username,
                "suite": s.suite.id(),
                "max_privilege": s.max_privilege.name(),
                "established_ms": ms(s.established, t0),
                "ended_ms": s.ended.map(|(at, _)| ms(at, t0)),
                "ended": s.ended.map(|(_, how)| end_name(how)),
            })
        })
        .collect();
    let log = json!({ "controls": controls, "requests": requests, "sessions": sessions });
    Ok(Json(log).into_response())
}

async fn clear_log(State(bmcs): State<Bmcs>, Path(name): Path<String>) -> Answer {
    find(&bmcs, &name)?.shared.clear_logs();
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn counters(State(bmcs): State<Bmcs>, Path(name): Path<String>) -> Answer {
    let b = find(&bmcs, &name)?;
    let counters = b.shared.lock_fresh().counters();
    Ok(Json(counters).into_response())
}

async fn faults(State(bmcs): State<Bmcs>, Path(name): Path<String>) -> Answer {
    let b = find(&bmcs, &name)?;
    let active = b.shared.lock().faults.active();
    Ok(Json(active).into_response())
}

async fn set_fault(
    State(bmcs): State<Bmcs>,
    Path(name): Path<String>,
    req: Result<Json<Fault>, JsonRejection>,
) -> Answer {
    let b = find(&bmcs, &name)?;
    let fault = body(req)?;
    tracing::info!(bmc = %name, ?fault, "fault injected by admin API");
    let mut inner = b.shared.lock();
    inner.faults.insert(fault);
    Ok(Json(inner.faults.active()).into_response())
}

async fn clear_faults(State(bmcs): State<Bmcs>, Path(name): Path<String>) -> Answer {
    find(&bmcs, &name)?.shared.lock().faults = Default::default();
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn expire(State(bmcs): State<Bmcs>, Path(name): Path<String>) -> Answer {
    let expired = find(&bmcs, &name)?.shared.expire_sessions();
    Ok(Json(json!({ "expired": expired })).into_response())
}
