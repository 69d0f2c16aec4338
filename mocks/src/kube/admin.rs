//! `/admin`: how scripts steer what runs behind the fake API server.
//!
//! Shell-driven tests (and `nodefence demo`) need to "kill" a node while nodefence
//! watches: stop its simulated kubelet, so its Lease stops being renewed and the
//! node lifecycle controller marks it `NotReady`. The server itself knows nothing
//! of the simulation; whoever starts both passes an [`AdminHook`]. The endpoints
//! live outside `/api` (no client mistakes them for resources) and need the same
//! bearer token as the API.
//!
//! | method | path | body | answer |
//! | --- | --- | --- | --- |
//! | GET | `/admin/requests` | | `[{"method","path","status"}]` |
//! | GET | `/admin/sim` | | `{"speed", "nodes": [{"name", "kubeletRunning"}], "timeline": [..]}` |
//! | POST | `/admin/kubelets/{node}` | `{"running": false}` | `{"node","running"}` |
//!
//! Errors are `{"error": "..."}` with 400, 401 or 404.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use super::resources::NODES;
use super::server::Shared;
use super::sim::SimHandle;

/// The controls a simulation offers to `/admin`.
pub trait AdminHook: Send + Sync + 'static {
    /// Stops (`false`) or restarts (`true`) the kubelet of `node`.
    fn set_kubelet(&self, node: &str, running: bool) -> Result<(), String>;
    /// A JSON description of the simulation (nodes, kubelets, settings).
    fn describe(&self) -> Value;
}

/// The simulated control plane behind the server.
impl AdminHook for SimHandle {
    fn set_kubelet(&self, node: &str, running: bool) -> Result<(), String> {
        if self.kubelet_running(node).is_none() {
            return Err(format!("no simulated kubelet for node {node:?}"));
        }
        SimHandle::set_kubelet(self, node, running);
        Ok(())
    }

    fn describe(&self) -> Value {
        let (nodes, _) = self.store().list(NODES, None);
        let nodes: Vec<Value> = nodes
            .iter()
            .filter_map(|n| n.pointer("/metadata/name").and_then(Value::as_str))
            .map(|name| json!({"name": name, "kubeletRunning": self.kubelet_running(name)}))
            .collect();
        let timeline: Vec<String> = self.timeline().iter().map(ToString::to_string).collect();
        json!({"speed": self.config().speed, "nodes": nodes, "timeline": timeline})
    }
}

/// Body of `POST /admin/kubelets/{node}`.
#[derive(Debug, Clone, Deserialize)]
pub struct KubeletRequest {
    pub running: bool,
}

pub(crate) fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route("/admin/requests", get(requests))
        .route("/admin/sim", get(describe))
        .route("/admin/kubelets/{node}", post(set_kubelet))
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

fn authorized(shared: &Shared, headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .is_some_and(|(scheme, token)| {
            scheme.eq_ignore_ascii_case("bearer") && token.trim() == shared.token
        })
}

async fn requests(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if !authorized(&shared, &headers) {
        return error(StatusCode::UNAUTHORIZED, "a bearer token is required");
    }
    let log: Vec<Value> = shared
        .requests()
        .into_iter()
        .map(|r| json!({"method": r.method, "path": r.path_and_query, "status": r.status}))
        .collect();
    Json(log).into_response()
}

async fn describe(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if !authorized(&shared, &headers) {
        return error(StatusCode::UNAUTHORIZED, "a bearer token is required");
    }
    match &shared.admin {
        Some(hook) => Json(hook.describe()).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "no simulation runs behind this server",
        ),
    }
}

async fn set_kubelet(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(node): Path<String>,
    body: Result<Json<KubeletRequest>, JsonRejection>,
) -> Response {
    if !authorized(&shared, &headers) {
        return error(StatusCode::UNAUTHORIZED, "a bearer token is required");
    }
    let Json(request) = match body {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    let Some(hook) = &shared.admin else {
        return error(
            StatusCode::NOT_FOUND,
            "no simulation runs behind this server",
        );
    };
    match hook.set_kubelet(&node, request.running) {
        Ok(()) => Json(json!({"node": node, "running": request.running})).into_response(),
        Err(e) => error(StatusCode::NOT_FOUND, e),
    }
}
