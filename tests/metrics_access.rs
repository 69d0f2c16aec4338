//! `/metrics` is served only to whom the API server says may read it, and the probes
//! stay open. The daemon runs under exactly the RBAC `deploy/` installs (base plus
//! `components/prometheus`): fake-kube answers its TokenReviews and
//! SubjectAccessReviews from the manifests' own ClusterRoles and bindings, and knows
//! three callers: kube-prometheus' `monitoring/prometheus-k8s` (bound to
//! `nodefence-metrics-reader` by the component), a workload's ServiceAccount with no
//! grant, and a token nobody issued.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::deploy_common::deploy_rbac;
use common::world::*;
use nodefence::daemon::MetricsEndpoint;
use reqwest::StatusCode;

const PROMETHEUS_TOKEN: &str = "prometheus-k8s-service-account-token";
const WORKLOAD_TOKEN: &str = "some-app-service-account-token";

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

async fn guarded_world() -> (World, SocketAddr, SocketAddr) {
    let everything = deploy_rbac(&["prometheus"]);
    let mut w = WorldBuilder::new()
        .workers(2)
        .no_workloads()
        .replicas(&[])
        .rbac(deploy_rbac(&[]))
        .service_account(
            PROMETHEUS_TOKEN,
            "monitoring",
            "prometheus-k8s",
            everything.clone(),
        )
        .service_account(WORKLOAD_TOKEN, "default", "some-app", everything)
        .start()
        .await;
    let (health, metrics) = (free_addr(), free_addr());
    w.options.health_listen = health;
    w.options.metrics = MetricsEndpoint::secure(metrics);
    w.start_replica("test-replica");
    (w, health, metrics)
}

/// A client that accepts the daemon's self-signed certificate (made at start-up;
/// `tests/prometheus.rs` verifies a real one).
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn scrape(addr: SocketAddr, token: Option<&str>) -> (StatusCode, String, Option<String>) {
    let mut request = client().get(format!("https://{addr}/metrics"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let challenge = response
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .map(|v| v.to_str().unwrap().to_owned());
    (status, response.text().await.unwrap(), challenge)
}

fn reviews(w: &World, path: &str) -> usize {
    w.kube
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path_and_query.starts_with(path))
        .inspect(|r| {
            assert_eq!(r.status, 201, "{r:?}");
            assert_eq!(
                r.user.as_deref(),
                Some("system:serviceaccount:nodefence:nodefence"),
                "nodefence reviews as its own ServiceAccount, under deploy/'s RBAC"
            );
        })
        .count()
}

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_token_bound_to_the_reader_role_gets_the_metrics() {
    let (w, health, metrics) = guarded_world().await;
    eventually("the daemon is ready", Duration::from_secs(30), || async {
        reqwest::get(format!("http://{health}/readyz"))
            .await
            .is_ok_and(|r| r.status() == StatusCode::OK)
    })
    .await;

    // No token: 401, with the challenge and what to do; not one metric.
    let (status, body, challenge) = scrape(metrics, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(challenge.as_deref(), Some("Bearer"));
    assert!(body.contains("nodefence-metrics-reader"), "{body}");
    assert!(!body.contains("nodefence_"), "{body}");
    assert_eq!(reviews(&w, TOKEN_REVIEWS), 0, "no token, no review");

    // A token the API server never issued: 401.
    let (status, body, _) = scrape(metrics, Some("forged-token")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(!body.contains("nodefence_"), "{body}");

    // A real ServiceAccount without the grant: 403, naming it.
    let (status, body, _) = scrape(metrics, Some(WORKLOAD_TOKEN)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body.contains("system:serviceaccount:default:some-app"),
        "{body}"
    );
    assert!(!body.contains("nodefence_"), "{body}");

    // Prometheus' ServiceAccount, bound by components/prometheus: the metrics, with
    // the refusals counted.
    let (status, body, _) = scrape(metrics, Some(PROMETHEUS_TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let samples = nodefence::telemetry::parse_samples(&body).unwrap();
    let refused = |reason: &str| {
        samples
            .iter()
            .find(|s| {
                s.name == "nodefence_metrics_scrapes_refused_total"
                    && s.labels.get("reason").map(String::as_str) == Some(reason)
            })
            .map(|s| s.value)
    };
    assert_eq!(refused("unauthenticated"), Some(2.0), "{body}");
    assert_eq!(refused("forbidden"), Some(1.0), "{body}");
    assert_eq!(refused("review_failed"), Some(0.0), "{body}");
    assert!(body.contains("nodefence_build_info"), "{body}");

    // Each token was reviewed once; the second scrape of each is answered from the
    // cache, with the same verdict.
    let (token_reviews, access_reviews) = (reviews(&w, TOKEN_REVIEWS), reviews(&w, ACCESS_REVIEWS));
    assert_eq!((token_reviews, access_reviews), (3, 2));
    assert_eq!(
        scrape(metrics, Some(PROMETHEUS_TOKEN)).await.0,
        StatusCode::OK
    );
    assert_eq!(
        scrape(metrics, Some(WORKLOAD_TOKEN)).await.0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        (reviews(&w, TOKEN_REVIEWS), reviews(&w, ACCESS_REVIEWS)),
        (token_reviews, access_reviews)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probes_stay_open_and_the_metrics_are_not_served_in_clear() {
    let (_w, health, metrics) = guarded_world().await;
    let plain = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    eventually("the daemon is ready", Duration::from_secs(30), || async {
        plain
            .get(format!("http://{health}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == StatusCode::OK)
    })
    .await;
    let alive = plain
        .get(format!("http://{health}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(alive.status(), StatusCode::OK);
    // The probes' listener has no /metrics.
    let there = plain
        .get(format!("http://{health}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(there.status(), StatusCode::NOT_FOUND);
    // The metrics' listener speaks TLS only: plain HTTP gets no answer at all, even
    // with a valid token.
    let clear = plain
        .get(format!("http://{metrics}/metrics"))
        .bearer_auth(PROMETHEUS_TOKEN)
        .send()
        .await;
    match clear {
        Err(_) => {}
        Ok(r) => assert_ne!(r.status(), StatusCode::OK, "metrics served in clear"),
    }
}
