//! The `fake-kube` binary as CI scripts use it: the ready line, the kubeconfig
//! written before it, a working API behind it, the simulated nodes and the
//! `/admin` switch that "pulls the plug" on one, and a clean stop on SIGTERM/SIGINT.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, ListParams};
use serde_json::json;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fake-kube");

#[tokio::test]
async fn starts_writes_a_kubeconfig_serves_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut command = Command::new(BIN);
    command
        .args([
            "--tls",
            "--token",
            "s3cret",
            "--nodes",
            "0",
            "--kubeconfig-out",
        ])
        .arg(&kubeconfig);
    let crate::mock_binary::Started {
        mut child,
        url,
        log,
    } = crate::mock_binary::start(command, "fake-kube").await;
    assert!(url.starts_with("https://localhost:"), "{url}");

    let yaml = std::fs::read_to_string(&kubeconfig).expect("kubeconfig written before the line");
    assert!(yaml.contains(&format!("server: \"{url}\"")));
    assert!(yaml.contains("token: \"s3cret\""));
    let namespaces: Api<Namespace> = Api::all(kube_common::client_from_yaml(&yaml).await);
    let mut names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );

    let pid = child.id().expect("running").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap_or_else(|_| panic!("fake-kube did not stop within 10 s; its log: {log}"))
        .unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM is a clean stop; its log: {log}"
    );
}

#[tokio::test]
async fn simulated_nodes_go_not_ready_when_their_kubelet_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut command = Command::new(BIN);
    command
        .args([
            "--plain-http",
            "--nodes",
            "2",
            "--speed",
            "50",
            "--token",
            "t",
            "--kubeconfig-out",
        ])
        .arg(&kubeconfig);
    let crate::mock_binary::Started {
        mut child,
        url,
        log,
    } = crate::mock_binary::start(command, "fake-kube").await;
    let yaml = std::fs::read_to_string(&kubeconfig).unwrap();
    let nodes: Api<Node> = Api::all(kube_common::client_from_yaml(&yaml).await);
    let ready = |n: &Node| {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone())
    };
    assert_eq!(
        ready(&nodes.get("worker-1").await.unwrap()).as_deref(),
        Some("True")
    );

    let http = reqwest::Client::new();
    let admin = format!("{url}/admin/kubelets/worker-1");
    let anonymous = http
        .post(&admin)
        .json(&json!({"running": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let unknown = http
        .post(format!("{url}/admin/kubelets/nope"))
        .bearer_auth("t")
        .json(&json!({"running": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status().as_u16(), 404);
    let stopped = http
        .post(&admin)
        .bearer_auth("t")
        .json(&json!({"running": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(stopped.status().as_u16(), 200);

    // 50 s of node monitor grace at 50x: about a second.
    kube_common::eventually(Duration::from_secs(15), "worker-1 NotReady", || async {
        let n = nodes.get("worker-1").await.ok()?;
        (ready(&n).as_deref() == Some("Unknown")).then_some(())
    })
    .await;
    assert_eq!(
        ready(&nodes.get("worker-2").await.unwrap()).as_deref(),
        Some("True")
    );
    let sim: serde_json::Value = http
        .get(format!("{url}/admin/sim"))
        .bearer_auth("t")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        sim["nodes"][0],
        json!({"name": "worker-1", "kubeletRunning": false})
    );

    let pid = child.id().expect("running").to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .unwrap_or_else(|_| panic!("fake-kube did not stop within 15 s; its log: {log}"))
        .unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "SIGINT is a clean stop; its log: {log}"
    );
}
