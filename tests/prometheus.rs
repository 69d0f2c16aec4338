//! The alert rules and the dashboard against a live daemon, through the real
//! Prometheus (Debian's `prometheus`; `NODEFENCE_PROMETHEUS` or `PATH`): it scrapes
//! the daemon under fake-kube every second, as deployed (HTTPS, verified here, with
//! the bearer token of a ServiceAccount bound to `nodefence-metrics-reader`; the API
//! server reviews it, so the scrape working is that ServiceAccount authorized), while one node loses power (released)
//! and another is cut off behind a BMC that answers for another machine (blocked),
//! loads `deploy/monitoring/nodefence-alerts.yaml`, and every alert expression
//! (without its `for:`) and every dashboard query is evaluated through its HTTP API:
//! each must be valid PromQL over the series the daemon really exports, and the ones
//! that describe what was driven must return it. Missing Prometheus: skipped, or a
//! failure under `NODEFENCE_REQUIRE_PEERS=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::world::*;
use serde_json::Value;

/// kube-prometheus' Prometheus ServiceAccount token, bound to
/// `nodefence-metrics-reader` by deploy/components/prometheus.
const PROMETHEUS_TOKEN: &str = "prometheus-k8s-service-account-token";

fn monitoring() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/monitoring")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Every `expr` of the alerting rules, by alert name.
fn alert_exprs() -> Vec<(String, String)> {
    let rules: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(monitoring().join("nodefence-alerts.yaml")).unwrap(),
    )
    .unwrap();
    let mut out = Vec::new();
    for group in rules["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let name = rule["alert"]
                .as_str()
                .or(rule["record"].as_str())
                .unwrap()
                .to_string();
            out.push((name, rule["expr"].as_str().unwrap().to_string()));
        }
    }
    out
}

/// Every query of the dashboard.
fn dashboard_exprs() -> Vec<String> {
    let dash: Value = serde_json::from_str(
        &std::fs::read_to_string(monitoring().join("nodefence-dashboard.json")).unwrap(),
    )
    .unwrap();
    dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect()
}

struct Prometheus {
    child: tokio::process::Child,
    url: String,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Scrapes `target` as deploy/components/prometheus does: HTTPS with its
    /// ServiceAccount token (from a file), here verifying the certificate with `ca`.
    async fn start(binary: &Path, target: &str, ca_pem: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        let token = dir.path().join("token");
        std::fs::write(&token, PROMETHEUS_TOKEN).unwrap();
        let ca = dir.path().join("ca.crt");
        std::fs::write(&ca, ca_pem).unwrap();
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
                 scrape_configs:\n  - job_name: nodefence\n    scheme: https\n\
                 \x20   authorization:\n      credentials_file: {}\n\
                 \x20   tls_config:\n      ca_file: {}\n      server_name: localhost\n\
                 \x20   static_configs:\n      - targets: ['{target}']\n",
                monitoring().join("nodefence-alerts.yaml").display(),
                token.display(),
                ca.display(),
            ),
        )
        .unwrap();
        let port = free_port();
        let child = tokio::process::Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let prometheus = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
            _dir: dir,
        };
        eventually("Prometheus ready", Duration::from_secs(30), || async {
            prometheus
                .http
                .get(format!("{}/-/ready", prometheus.url))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        })
        .await;
        prometheus
    }

    /// The result vector of an instant query; panics on a PromQL error.
    async fn query(&self, expr: &str) -> Vec<Value> {
        let answer: Value = self
            .http
            .get(
                url::Url::parse_with_params(
                    &format!("{}/api/v1/query", self.url),
                    &[("query", expr)],
                )
                .unwrap(),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["status"], "success", "{expr}: {answer}");
        answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The values of `label` in the result of `expr`.
    async fn labels(&self, expr: &str, label: &str) -> Vec<String> {
        self.query(expr)
            .await
            .iter()
            .filter_map(|s| s["metric"][label].as_str().map(str::to_string))
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_alert_and_dashboard_query_runs_against_the_live_daemon() {
    let Some(binary) = nodefence_mocks::peers::prometheus() else {
        return;
    };
    // Five workers (two unhealthy stay within storm protection, 40%); worker-3's BMC
    // answers for another machine.
    let mut w = WorldBuilder::new()
        .workers(5)
        .node("worker-3", |n| {
            n.bmc_uuid = Some("4c4c4544-0000-4000-8000-0000deadbeef".into())
        })
        .replicas(&[])
        .service_account(
            PROMETHEUS_TOKEN,
            "monitoring",
            "prometheus-k8s",
            common::deploy_common::deploy_rbac(&["prometheus"]),
        )
        .start()
        .await;
    // /metrics as deployed: HTTPS (here with a certificate from files, which
    // Prometheus verifies), each scrape's token reviewed by the API server.
    let tls = nodefence_mocks::tls::TlsMaterial::generate().unwrap();
    let cert = w._dir.path().join("metrics.crt");
    let key = w._dir.path().join("metrics.key");
    std::fs::write(&cert, tls.cert_pem()).unwrap();
    std::fs::write(&key, tls.key_pem()).unwrap();
    let metrics_port = free_port();
    w.options.metrics = nodefence::daemon::MetricsEndpoint {
        listen: format!("127.0.0.1:{metrics_port}").parse().unwrap(),
        secure: Some(nodefence::telemetry::certificate::CertificateSource::Files { cert, key }),
    };
    w.start_replica("test-replica");
    let prometheus =
        Prometheus::start(&binary, &format!("127.0.0.1:{metrics_port}"), tls.ca_pem()).await;
    // Target discovery takes a few seconds: scraping must have begun before anything
    // happens, or a counter's first sample is already its final value.
    eventually(
        "Prometheus scrapes the daemon",
        Duration::from_secs(30),
        || async { !prometheus.query("up == 1").await.is_empty() },
    )
    .await;

    let victim = w.db_placed().await;
    let victim = if victim == "worker-3" {
        // The workload must be on a node whose BMC is its own.
        "worker-1".to_string()
    } else {
        victim
    };
    w.pull_plug(&victim);
    eventually(
        "the powered-off node released",
        Duration::from_secs(45),
        || async { w.has_out_of_service_taint(&victim) },
    )
    .await;
    w.cut_network("worker-3");

    // What was driven, as Prometheus sees it.
    eventually("the release counted", Duration::from_secs(30), || async {
        !prometheus
            .query(r#"sum by (mode) (increase(nodefence_releases_total{result="ok"}[15m])) > 0"#)
            .await
            .is_empty()
    })
    .await;
    eventually(
        "worker-3 blocked by its identity",
        Duration::from_secs(60),
        || async {
            prometheus
                .labels(
                    "max by (node, reason) (nodefence_incident_blocked) == 1",
                    "node",
                )
                .await
                .contains(&"worker-3".to_string())
        },
    )
    .await;
    let reasons = prometheus
        .labels(
            r#"max by (node, reason) (nodefence_incident_blocked{node="worker-3"})"#,
            "reason",
        )
        .await;
    assert_eq!(reasons, ["identity_unproven"]);
    // The recording rule, evaluated every second.
    let age_of_worker_3 = || async {
        prometheus
            .query("nodefence:incident_age_seconds")
            .await
            .iter()
            .find(|s| s["metric"]["node"] == "worker-3")
            .and_then(|s| s["value"][1].as_str())
            .and_then(|v| v.parse::<f64>().ok())
    };
    eventually(
        "worker-3's incident age recorded",
        Duration::from_secs(30),
        || async { age_of_worker_3().await.is_some() },
    )
    .await;
    let age = age_of_worker_3().await.unwrap();
    assert!(age > 0.0 && age < 600.0, "{age}");
    assert_eq!(
        prometheus
            .labels(
                r#"max by (node) (nodefence_bmc_identity{result="mismatch"}) == 1"#,
                "node"
            )
            .await,
        ["worker-3"]
    );

    // Every alert expression (its `for:` aside) and every dashboard query is valid
    // PromQL over what the daemon exports; the ones about what was driven answer it.
    let alerts = alert_exprs();
    assert!(alerts.len() >= 10, "{alerts:?}");
    for (name, expr) in &alerts {
        let result = prometheus.query(expr).await;
        match name.as_str() {
            "NodefenceIdentityMismatch" => assert_eq!(result.len(), 1, "{name}: {result:?}"),
            "nodefence:incident_age_seconds" => assert!(!result.is_empty(), "{name}"),
            "NodefenceNoLeader" | "NodefenceStormProtection" | "NodefenceConfigRejected" => {
                assert!(result.is_empty(), "{name} must not fire now: {result:?}")
            }
            _ => {}
        }
    }
    let dashboard = dashboard_exprs();
    assert!(dashboard.len() >= 12, "{dashboard:?}");
    for expr in &dashboard {
        prometheus.query(expr).await;
    }
    let leader = prometheus
        .query("max by (instance) (nodefence_is_leader)")
        .await;
    assert_eq!(leader.len(), 1);
    assert_eq!(leader[0]["value"][1], "1");
    let mut child = prometheus.child;
    let _ = child.kill().await;
    w.stop().await;
}
