//! The admin API: how CI scripts (and humans with curl) steer a running mock.
//!
//! It lives outside `/redfish`, needs no credentials and is never affected by
//! injected faults, so a test can always pull the plug, inject or clear a fault, and
//! read what clients did, even while the Redfish side hangs or lies.
//!
//! | method | path | body | answer |
//! | --- | --- | --- | --- |
//! | GET | `/admin/systems` | | `[SystemInfo]` |
//! | GET | `/admin/systems/{id}` | | `SystemInfo` or 404 |
//! | POST | `/admin/systems/{id}/power` | `{"state":"Off"}` | `SystemInfo` |
//! | GET | `/admin/faults` | | `[Fault]` in force |
//! | POST | `/admin/faults` | one `Fault` | `[Fault]` in force |
//! | DELETE | `/admin/faults` | | 204 |
//! | GET | `/admin/resets` | | `[{"system","reset_type"}]` |
//! | GET | `/admin/requests` | | `[{"method","path","auth","status","user_agent"}]` |
//! | DELETE | `/admin/logs` | | 204 (clears resets and requests) |
//! | GET | `/admin/sessions` | | `{"active": n}` |
//! | POST | `/admin/sessions/expire` | | `{"expired": n}` |
//!
//! Errors are `{"error": "..."}` with 400 or 404.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::faults::Fault;
use super::model::MockPower;
use super::state::Shared;

/// Body of `POST /admin/systems/{id}/power`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PowerRequest {
    pub state: MockPower,
}

pub(crate) fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route("/admin/systems", get(list_systems))
        .route("/admin/systems/{id}", get(get_system))
        .route("/admin/systems/{id}/power", post(set_power))
        .route(
            "/admin/faults",
            get(list_faults).post(inject).delete(clear_faults),
        )
        .route("/admin/resets", get(resets))
        .route("/admin/requests", get(requests))
        .route("/admin/logs", axum::routing::delete(clear_logs))
        .route("/admin/sessions", get(sessions))
        .route("/admin/sessions/expire", post(expire_sessions))
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

async fn list_systems(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.systems()).into_response()
}

async fn get_system(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    match shared.system(&id) {
        Some(info) => Json(info).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no system {id:?}")),
    }
}

async fn set_power(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    body: Result<Json<PowerRequest>, JsonRejection>,
) -> Response {
    let Json(request) = match body {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    match shared.set_power(&id, request.state) {
        Ok(info) => {
            tracing::info!(system = %id, power = %request.state, "power set by admin API");
            Json(info).into_response()
        }
        Err(e) => error(StatusCode::NOT_FOUND, e.to_string()),
    }
}

async fn list_faults(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.faults()).into_response()
}

async fn inject(
    State(shared): State<Arc<Shared>>,
    body: Result<Json<Fault>, JsonRejection>,
) -> Response {
    match body {
        Ok(Json(fault)) => {
            tracing::info!(?fault, "fault injected by admin API");
            shared.inject(fault);
            Json(shared.faults()).into_response()
        }
        Err(e) => error(StatusCode::BAD_REQUEST, e.body_text()),
    }
}

async fn clear_faults(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.clear_faults();
    StatusCode::NO_CONTENT
}

async fn resets(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.resets()).into_response()
}

async fn requests(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.requests()).into_response()
}

async fn clear_logs(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.clear_logs();
    StatusCode::NO_CONTENT
}

async fn sessions(State(shared): State<Arc<Shared>>) -> Response {
    Json(json!({ "active": shared.active_sessions() })).into_response()
}

async fn expire_sessions(State(shared): State<Arc<Shared>>) -> Response {
    Json(json!({ "expired": shared.expire_sessions() })).into_response()
}
