//! The telemetry endpoint over real HTTP on loopback: probes follow [`Health`],
//! `/metrics` is OpenMetrics with live values, other paths are 404, and the shutdown
//! future ends the server (even with a client stalled mid-request).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodefence::telemetry::{self, Health, METRICS_CONTENT_TYPE, Metrics};
use reqwest::StatusCode;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

struct Server {
    base: String,
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Health,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
    http: reqwest::Client,
}

impl Server {
    async fn start() -> Self {
        nodefence::tls::install_crypto_provider();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = Arc::new(Metrics::new());
        let health = Health::default();
        let (stop, stopped) = oneshot::channel::<()>();
        // Both route sets on one plain listener (the daemon puts them on two, and
        // guards /metrics: tests/metrics_access.rs).
        let routes = telemetry::health_routes(health.clone())
            .merge(telemetry::metrics_routes(metrics.clone(), None));
        let task = tokio::spawn(telemetry::serve(listener, routes, None, async move {
            let _ = stopped.await;
        }));
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        Self {
            base: format!("http://{addr}"),
            addr,
            metrics,
            health,
            stop: Some(stop),
            task,
            http,
        }
    }

    async fn get(&self, path: &str) -> (StatusCode, String, String) {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        (status, content_type, resp.text().await.unwrap())
    }

    /// Resolves the shutdown future.
    fn fire(&mut self) {
        self.stop.take().unwrap().send(()).unwrap();
    }

    /// Fires the shutdown future and returns how long `serve` took to return.
    async fn shut_down(mut self) -> Duration {
        let started = Instant::now();
        if self.stop.is_some() {
            self.fire();
        }
        tokio::time::timeout(Duration::from_secs(15), self.task)
            .await
            .expect("serve returns after shutdown")
            .expect("serve task did not panic")
            .expect("serve returns Ok");
        started.elapsed()
    }
}

#[tokio::test]
async fn healthz_follows_set_alive() {
    let s = Server::start().await;
    let (status, content_type, body) = s.get("/healthz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    assert!(body.contains("not alive"), "{body}");

    s.health.set_alive(true);
    assert_eq!(s.get("/healthz").await.0, StatusCode::OK);
    assert_eq!(s.get("/healthz").await.2, "ok\n");

    s.health.set_alive(false);
    assert_eq!(s.get("/healthz").await.0, StatusCode::SERVICE_UNAVAILABLE);
    // Liveness does not depend on readiness, nor the other way round.
    s.health.set_ready(true);
    assert_eq!(s.get("/healthz").await.0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(s.get("/readyz").await.0, StatusCode::OK);
    s.shut_down().await;
}

#[tokio::test]
async fn readyz_follows_set_ready_and_says_why() {
    let s = Server::start().await;
    s.health.set_alive(true);
    let (status, _, body) = s.get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.starts_with("not ready"), "{body}");

    s.health.set_not_ready("watches not synced yet");
    let (status, content_type, body) = s.get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    assert_eq!(body, "watches not synced yet\n");

    s.health.set_ready(true);
    assert_eq!(
        s.get("/readyz").await,
        (
            StatusCode::OK,
            "text/plain; charset=utf-8".into(),
            "ok\n".into()
        )
    );

    s.health.set_ready(false);
    let (status, _, body) = s.get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.starts_with("not ready"), "{body}");
    s.shut_down().await;
}

#[tokio::test]
async fn metrics_are_openmetrics_text_with_live_values() {
    let s = Server::start().await;
    let (status, content_type, body) = s.get("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(content_type, METRICS_CONTENT_TYPE);
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");

    s.metrics.set_leader(true);
    s.metrics
        .release_with("out-of-service-taint", "off-readings", "ok");
    s.metrics
        .power_query("redfish", "off", Duration::from_millis(80));
    let (_, _, body) = s.get("/metrics").await;
    let samples = telemetry::parse_samples(&body).unwrap();
    let value = |name: &str, labels: &[(&str, &str)]| {
        samples
            .iter()
            .find(|x| {
                x.name == name
                    && x.labels.len() == labels.len()
                    && labels.iter().all(|(k, v)| x.label(k) == *v)
            })
            .map(|x| x.value)
    };
    assert_eq!(value("nodefence_is_leader", &[]), Some(1.0));
    assert_eq!(
        value(
            "nodefence_releases_total",
            &[
                ("mode", "out-of-service-taint"),
                ("proof", "off-readings"),
                ("result", "ok")
            ]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            "nodefence_power_queries_total",
            &[("driver", "redfish"), ("result", "off")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            "nodefence_power_query_duration_seconds_bucket",
            &[("driver", "redfish"), ("le", "0.1")]
        ),
        Some(1.0)
    );
    assert_eq!(
        body,
        s.metrics.encode(),
        "the endpoint serves encode() as is"
    );

    // HEAD is answered like GET, without a body.
    let head = s
        .http
        .head(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(
        head.headers()[reqwest::header::CONTENT_TYPE],
        METRICS_CONTENT_TYPE
    );
    s.shut_down().await;
}

#[tokio::test]
async fn other_paths_are_404() {
    let s = Server::start().await;
    s.health.set_alive(true);
    s.health.set_ready(true);
    for path in [
        "/",
        "/metrics/",
        "/health",
        "/healthz/x",
        "/favicon.ico",
        "/debug/pprof",
    ] {
        let (status, _, _) = s.get(path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
    // The probes are read-only.
    let post = s
        .http
        .post(format!("{}/readyz", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
    s.shut_down().await;
}

#[tokio::test]
async fn shutdown_ends_the_server_and_frees_the_port() {
    let s = Server::start().await;
    let addr = s.addr;
    // A pooled keep-alive connection stays open across the shutdown.
    assert_eq!(s.get("/metrics").await.0, StatusCode::OK);
    let took = s.shut_down().await;
    assert!(took < Duration::from_secs(3), "shutdown took {took:?}");
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "nothing listens on {addr} any more"
    );
}

#[tokio::test]
async fn shutdown_does_not_wait_for_a_stalled_client() {
    let mut s = Server::start().await;
    // Half a request, never finished.
    let mut stalled = TcpStream::connect(s.addr).await.unwrap();
    stalled
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let addr = s.addr;
    let started = Instant::now();
    s.fire();
    // New connections are refused at once, while the stalled one is given a grace period.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "still accepting on {addr}"
    );
    s.shut_down().await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "shutdown took {took:?}");
    drop(stalled);
}
