//! Helpers shared by the fake-kube integration tests: starting a server, a kube-rs
//! client built from the server's own kubeconfig (as nodefence builds one), raw
//! HTTP for what kube-rs hides, object builders, and bounded polling.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::config::{KubeConfigOptions, Kubeconfig};
use nodefence_mocks::kube::{FakeKube, FakeKubeHandle};
use serde_json::{Value, json};
use tokio::time::Instant;

/// ring as the rustls provider (the only one in the tree).
pub fn provider() {
    nodefence_mocks::tls::install_crypto_provider();
}

/// A server with default settings (HTTPS when `tls`).
pub async fn start(tls: bool) -> FakeKubeHandle {
    provider();
    FakeKube::builder()
        .tls(tls)
        .start()
        .await
        .expect("fake-kube starts")
}

/// A kube-rs client configured only from the server's kubeconfig.
pub async fn client(kube: &FakeKubeHandle) -> kube::Client {
    client_from_yaml(&kube.kubeconfig_yaml()).await
}

/// A kube-rs client from kubeconfig text.
pub async fn client_from_yaml(yaml: &str) -> kube::Client {
    provider();
    let kubeconfig = Kubeconfig::from_yaml(yaml).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig loads");
    kube::Client::try_from(config).expect("client builds")
}

/// A reqwest client that trusts only the server's CA.
pub fn http(kube: &FakeKubeHandle) -> reqwest::Client {
    provider();
    let mut b = reqwest::Client::builder().timeout(Duration::from_secs(10));
    if let Some(ca) = kube.ca_pem() {
        b = b.tls_certs_only([reqwest::Certificate::from_pem(ca.as_bytes()).unwrap()]);
    }
    b.build().unwrap()
}

/// A GET with the token (and an `Accept`, if given): status and JSON body.
pub async fn get_json(kube: &FakeKubeHandle, path: &str, accept: Option<&str>) -> (u16, Value) {
    let mut req = http(kube)
        .get(format!("{}{path}", kube.base_url()))
        .bearer_auth(kube.token());
    if let Some(a) = accept {
        req = req.header("Accept", a);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| json!(text)),
    )
}

/// Any request with the token: status and JSON body.
pub async fn send(
    kube: &FakeKubeHandle,
    method: reqwest::Method,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, Value) {
    let resp = http(kube)
        .request(method, format!("{}{path}", kube.base_url()))
        .bearer_auth(kube.token())
        .header("Content-Type", content_type)
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| json!(text)),
    )
}

/// A watch stream opened with raw HTTP; read it with [`next_event`].
pub async fn open_watch(kube: &FakeKubeHandle, path: &str) -> reqwest::Response {
    let resp = http(kube)
        .get(format!("{}{path}", kube.base_url()))
        .bearer_auth(kube.token())
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "watch opened");
    resp
}

/// Reads watch lines; keeps partial lines in `buf`.
pub struct Lines {
    pub resp: reqwest::Response,
    buf: String,
}

impl Lines {
    pub fn new(resp: reqwest::Response) -> Self {
        Self {
            resp,
            buf: String::new(),
        }
    }

    /// The next event, or `None` when the stream ended; panics after 10 s.
    pub async fn next_event(&mut self) -> Option<Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(i) = self.buf.find('\n') {
                let line: String = self.buf.drain(..=i).collect();
                return Some(serde_json::from_str(line.trim()).expect("a JSON line"));
            }
            let chunk = tokio::time::timeout_at(deadline, self.resp.chunk())
                .await
                .expect("watch event in time")
                .expect("reading the watch");
            match chunk {
                Some(bytes) => self.buf.push_str(std::str::from_utf8(&bytes).unwrap()),
                None => return None,
            }
        }
    }

    /// `(type, metadata.name)` of the next event.
    pub async fn next_pair(&mut self) -> Option<(String, String)> {
        self.next_event().await.map(|e| {
            (
                e["type"].as_str().unwrap_or_default().to_owned(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
    }
}

/// Polls `check` until it returns `Some`, at most `within`.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A Ready node with a kubelet version and the given labels.
pub fn node(name: &str, labels: Value) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                {"type": "MemoryPressure", "status": "False"},
            ],
            "nodeInfo": {"kubeletVersion": "v1.33.4", "machineID": "", "systemUUID": "", "bootID": "",
                "kernelVersion": "", "osImage": "", "containerRuntimeVersion": "", "kubeProxyVersion": "",
                "operatingSystem": "linux", "architecture": "amd64"},
        },
    }))
    .unwrap()
}

/// A pod (bound to `node_name` when given) with one container.
pub fn pod(name: &str, node_name: Option<&str>, labels: Value) -> Pod {
    let mut p = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
    });
    if let Some(n) = node_name {
        p["spec"]["nodeName"] = json!(n);
    }
    serde_json::from_value(p).unwrap()
}
