//! The HTTP endpoints the kubelet probes and Prometheus scrapes, on two listeners.
//!
//! | listener | path | answer |
//! |---|---|---|
//! | health (`--health-listen`, plain HTTP, open) | `GET /healthz` | liveness: `200 ok` while the control loop turns, `503` otherwise (the kubelet restarts the pod) |
//! | | `GET /readyz` | readiness: `200 ok` once configuration is loaded, the API server reachable and the watches synced; `503` and a one-line reason before that |
//! | metrics (`--metrics-listen`, HTTPS) | `GET /metrics` | the [`Metrics`] in OpenMetrics text ([`METRICS_CONTENT_TYPE`]) to a bearer token the API server authenticates and authorizes ([`super::access`]); `401`, `403` or `503` and why otherwise |
//! | both | anything else | `404` |
//!
//! The probes carry nothing but "ok" and stay open (the kubelet sends no token). The
//! metrics name nodes and BMC endpoints, so they are guarded; `--metrics-secure=false`
//! serves them in plain HTTP to anyone, for a daemon run by hand. `HEAD` works
//! wherever `GET` does.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum_server::tls_rustls::RustlsConfig;
use tokio::net::TcpListener;

use super::Metrics;
use super::access::{READER_CLUSTER_ROLE, ScrapeAccess, Verdict};

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

fn text(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, TEXT)], body).into_response()
}

async fn get_healthz(State(health): State<Health>) -> Response {
    if health.is_alive() {
        text(StatusCode::OK, "ok\n".into())
    } else {
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not alive: the control loop has stopped turning\n".into(),
        )
    }
}

async fn get_readyz(State(health): State<Health>) -> Response {
    if health.is_ready() {
        text(StatusCode::OK, "ok\n".into())
    } else {
        let mut reason = health.not_ready_reason();
        reason.push('\n');
        text(StatusCode::SERVICE_UNAVAILABLE, reason)
    }
}

#[derive(Clone)]
struct MetricsState {
    metrics: Arc<Metrics>,
    /// `None`: anyone may read (`--metrics-secure=false`).
    access: Option<Arc<ScrapeAccess>>,
}

async fn get_metrics(State(s): State<MetricsState>, headers: HeaderMap) -> Response {
    if let Some(access) = &s.access {
        let authorization = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let verdict = access.check(authorization).await;
        if let Some(reason) = verdict.refusal_reason() {
            s.metrics.scrape_refused(reason);
            return refusal(verdict);
        }
    }
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

/// The answer to a refused scrape: what was wrong and what to do, never the token.
fn refusal(verdict: Verdict) -> Response {
    let role = READER_CLUSTER_ROLE;
    match verdict {
        Verdict::Allowed { .. } => text(StatusCode::OK, String::new()),
        Verdict::NoToken => {
            let mut r = text(
                StatusCode::UNAUTHORIZED,
                format!(
                    "Unauthorized: /metrics needs a bearer token (a ServiceAccount token bound to the ClusterRole {role})\n"
                ),
            );
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            r
        }
        Verdict::Unauthenticated => {
            tracing::debug!("refused a /metrics scrape: the API server does not accept its token");
            let mut r = text(
                StatusCode::UNAUTHORIZED,
                "Unauthorized: the API server does not accept this token (TokenReview)\n".into(),
            );
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            r
        }
        Verdict::Forbidden { user } => {
            tracing::debug!(%user, "refused a /metrics scrape: not authorized");
            text(
                StatusCode::FORBIDDEN,
                format!(
                    "Forbidden: user \"{user}\" may not get /metrics (bind it to the ClusterRole {role})\n"
                ),
            )
        }
        Verdict::Unavailable { error } => {
            tracing::warn!(%error, "cannot check a /metrics scrape's token: the API server did not answer the review");
            text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot check this token now: {error}\n"),
            )
        }
    }
}

async fn not_found() -> Response {
    text(StatusCode::NOT_FOUND, "not found\n".into())
}

/// `/healthz` and `/readyz` ([`serve`] answers `404` to anything else).
pub fn health_routes(health: Health) -> Router {
    Router::new()
        .route("/healthz", get(get_healthz))
        .route("/readyz", get(get_readyz))
        .with_state(health)
}

/// `/metrics`, for the callers `access` allows (`None`: for anyone).
pub fn metrics_routes(metrics: Arc<Metrics>, access: Option<Arc<ScrapeAccess>>) -> Router {
    Router::new()
        .route("/metrics", get(get_metrics))
        .with_state(MetricsState { metrics, access })
}

/// Serves `routes` on `listener` (HTTPS when `tls` is given) until `shutdown`
/// resolves; then stops accepting, lets open requests finish (at most a few
/// seconds) and returns.
pub async fn serve(
    listener: TcpListener,
    routes: Router,
    tls: Option<RustlsConfig>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = listener.into_std()?;
    let handle = axum_server::Handle::new();
    let stopper = handle.clone();
    let stop = tokio::spawn(async move {
        shutdown.await;
        stopper.graceful_shutdown(Some(SHUTDOWN_GRACE));
    });
    let service = routes.fallback(not_found).into_make_service();
    let result = match tls {
        Some(tls) => {
            axum_server::tls_rustls::from_tcp_rustls(listener, tls)?
                .handle(handle)
                .serve(service)
                .await
        }
        None => {
            axum_server::from_tcp(listener)?
                .handle(handle)
                .serve(service)
                .await
        }
    };
    stop.abort();
    result
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
