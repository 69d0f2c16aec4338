//! The HTTP endpoint the kubelet probes and Prometheus scrapes.
//!
//! | path | answer |
//! |---|---|
//! | `GET /healthz` | liveness: `200 ok` while the control loop turns, `503` otherwise (the kubelet restarts the pod) |
//! | `GET /readyz` | readiness: `200 ok` once configuration is loaded, the API server reachable and the watches synced; `503` and a one-line reason before that |
//! | `GET /metrics` | the [`Metrics`] in OpenMetrics text ([`METRICS_CONTENT_TYPE`]) |
//! | anything else | `404` |
//!
//! Plain HTTP on purpose: nothing here is secret or changes state, and a
//! `NetworkPolicy` keeps scrapers the only clients. `HEAD` works wherever `GET` does.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::Metrics;

/// The `Content-Type` of `/metrics`.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

const TEXT: &str = "text/plain; charset=utf-8";

/// Why `/readyz` says no when nobody said why.
const NOT_READY: &str = "not ready: configuration, API server or watches not available yet";

/// After `shutdown`, how long open connections get to finish before `serve` returns
/// anyway (a stalled client must not hold up the daemon's exit).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Readiness and liveness, shared between the daemon (which sets them) and the
/// probes (which read them). Clones share state.
///
/// Both start `false`: the daemon calls [`Health::set_alive`] when its control loop
/// starts turning and [`Health::set_ready`] once it is ready. Give the liveness probe
/// an `initialDelaySeconds` (or a startup probe) that covers start-up.
#[derive(Clone, Default, Debug)]
pub struct Health {
    ready: Arc<AtomicBool>,
    alive: Arc<AtomicBool>,
    not_ready_reason: Arc<Mutex<Option<String>>>,
}

impl Health {
    /// Ready = configuration loaded, API server reachable, watches synced.
    pub fn set_ready(&self, ready: bool) {
        if ready {
            *lock(&self.not_ready_reason) = None;
        }
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// Not ready, and why (one short line for `kubectl describe pod`).
    pub fn set_not_ready(&self, reason: impl Into<String>) {
        *lock(&self.not_ready_reason) = Some(reason.into());
        self.ready.store(false, Ordering::SeqCst);
    }

    /// Alive = the control loop is turning; `false` asks the kubelet for a restart.
    pub fn set_alive(&self, alive: bool) {
        self.alive.store(alive, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// The reason given with [`Health::set_not_ready`], or a generic one.
    fn not_ready_reason(&self) -> String {
        lock(&self.not_ready_reason)
            .clone()
            .unwrap_or_else(|| NOT_READY.to_string())
    }
}

/// A poisoned lock only means a panic elsewhere; a reason string is still usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    health: Health,
}

fn text(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, TEXT)], body).into_response()
}

async fn get_healthz(State(s): State<AppState>) -> Response {
    if s.health.is_alive() {
        text(StatusCode::OK, "ok\n".into())
    } else {
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not alive: the control loop has stopped turning\n".into(),
        )
    }
}

async fn get_readyz(State(s): State<AppState>) -> Response {
    if s.health.is_ready() {
        text(StatusCode::OK, "ok\n".into())
    } else {
        let mut reason = s.health.not_ready_reason();
        reason.push('\n');
        text(StatusCode::SERVICE_UNAVAILABLE, reason)
    }
}

async fn get_metrics(State(s): State<AppState>) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, METRICS_CONTENT_TYPE),
            (header::CACHE_CONTROL, "no-store"),
        ],
        s.metrics.encode(),
    )
        .into_response()
}

async fn not_found() -> Response {
    text(StatusCode::NOT_FOUND, "not found\n".into())
}

/// The routes, for [`serve`] and in-process tests.
fn router(metrics: Arc<Metrics>, health: Health) -> Router {
    Router::new()
        .route("/healthz", get(get_healthz))
        .route("/readyz", get(get_readyz))
        .route("/metrics", get(get_metrics))
        .fallback(not_found)
        .with_state(AppState { metrics, health })
}

/// Serves `/healthz`, `/readyz` and `/metrics` on `listener` until `shutdown`
/// resolves; then stops accepting, lets open requests finish (at most a few
/// seconds) and returns.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    health: Health,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    }
    let (fired_tx, mut fired_rx) = watch::channel(false);
    let server =
        axum::serve(listener, router(metrics, health)).with_graceful_shutdown(async move {
            shutdown.await;
            let _ = fired_tx.send(true);
        });
    let grace_over = async move {
        // Err only when the signal future is gone, i.e. the server finished anyway.
        if fired_rx.wait_for(|fired| *fired).await.is_err() {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        result = server => result,
        () = grace_over => {
            tracing::warn!(
                grace = ?SHUTDOWN_GRACE,
                "telemetry server: connections still open after shutdown; leaving them"
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_starts_down_and_clones_share_state() {
        let h = Health::default();
        assert!(!h.is_alive());
        assert!(!h.is_ready());
        let probe = h.clone();
        h.set_alive(true);
        h.set_ready(true);
        assert!(probe.is_alive());
        assert!(probe.is_ready());
        h.set_alive(false);
        assert!(!probe.is_alive());
    }

    #[test]
    fn not_ready_reason_is_kept_until_ready() {
        let h = Health::default();
        assert_eq!(h.not_ready_reason(), NOT_READY);
        h.set_not_ready("watches not synced");
        assert!(!h.is_ready());
        assert_eq!(h.not_ready_reason(), "watches not synced");
        h.set_ready(true);
        h.set_ready(false);
        assert_eq!(h.not_ready_reason(), NOT_READY);
    }
}
