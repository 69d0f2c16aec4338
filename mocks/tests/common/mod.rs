//! Helpers shared by the integration tests: an HTTP client that trusts only the
//! mock's CA, request shortcuts, and bounded polling instead of sleeps.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use nodefence_mocks::redfish::MockRedfishHandle;
use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::Value;
use tokio::time::Instant;

/// ring as the rustls provider (the only one in the tree).
pub fn provider() {
    nodefence_mocks::tls::install_crypto_provider();
}

/// A client that follows no redirects and, for HTTPS, trusts only the mock's CA.
pub fn client(bmc: &MockRedfishHandle) -> reqwest::Client {
    client_with(bmc, |b| b)
}

/// [`client`] with extra builder settings.
pub fn client_with(
    bmc: &MockRedfishHandle,
    tweak: impl FnOnce(reqwest::ClientBuilder) -> reqwest::ClientBuilder,
) -> reqwest::Client {
    provider();
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10));
    if let Some(ca) = bmc.ca_pem() {
        let cert = reqwest::Certificate::from_pem(ca.as_bytes()).expect("mock CA is valid PEM");
        builder = builder.tls_certs_only([cert]);
    }
    tweak(builder).build().expect("building the test client")
}

/// Credentials to present.
#[derive(Debug, Clone, Copy)]
pub enum Auth<'a> {
    None,
    Basic(&'a str, &'a str),
    Token(&'a str),
}

/// The mock's own credentials, as Basic.
pub fn basic(bmc: &MockRedfishHandle) -> Auth<'_> {
    Auth::Basic(bmc.username(), bmc.password())
}

/// A received response, fully read.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text))
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    /// The `MessageId` of the first extended info entry of a Redfish error body.
    pub fn message_id(&self) -> String {
        self.json()["error"]["@Message.ExtendedInfo"][0]["MessageId"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// `path` (or an absolute URL, as iLO's `Location`) resolved against the mock.
pub fn url(bmc: &MockRedfishHandle, path_or_url: &str) -> String {
    if path_or_url.starts_with("http://") || path_or_url.starts_with("https://") {
        path_or_url.to_owned()
    } else {
        format!("{}{path_or_url}", bmc.base_url())
    }
}

pub async fn try_send(
    client: &reqwest::Client,
    method: Method,
    url: &str,
    auth: Auth<'_>,
    body: Option<Value>,
) -> Result<Resp, reqwest::Error> {
    let mut req = client
        .request(method, url)
        .header("Accept", "application/json")
        .header("OData-Version", "4.0");
    req = match auth {
        Auth::None => req,
        Auth::Basic(u, p) => req.basic_auth(u, Some(p)),
        Auth::Token(t) => req.header("X-Auth-Token", t),
    };
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await?;
    Ok(Resp {
        status,
        headers,
        text,
    })
}

pub async fn send(
    client: &reqwest::Client,
    method: Method,
    url: &str,
    auth: Auth<'_>,
    body: Option<Value>,
) -> Resp {
    try_send(client, method.clone(), url, auth, body)
        .await
        .unwrap_or_else(|e| panic!("{method} {url}: {e:?}"))
}

pub async fn get(c: &reqwest::Client, bmc: &MockRedfishHandle, path: &str, auth: Auth<'_>) -> Resp {
    send(c, Method::GET, &url(bmc, path), auth, None).await
}

pub async fn post(
    c: &reqwest::Client,
    bmc: &MockRedfishHandle,
    path: &str,
    auth: Auth<'_>,
    body: Value,
) -> Resp {
    send(c, Method::POST, &url(bmc, path), auth, Some(body)).await
}

/// Polls `check` every 10 ms until it holds; panics after `timeout`.
pub async fn eventually(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The `PowerState` a GET of the system reports (`None` if absent).
pub async fn reported_power(
    c: &reqwest::Client,
    bmc: &MockRedfishHandle,
    system_id: &str,
) -> Option<String> {
    let resp = get(c, bmc, &bmc.system_path(system_id), basic(bmc)).await;
    assert_eq!(resp.status, 200, "{}", resp.text);
    resp.json()["PowerState"].as_str().map(str::to_owned)
}

/// Posts a Reset to a system's target and returns the answer.
pub async fn reset(
    c: &reqwest::Client,
    bmc: &MockRedfishHandle,
    system_id: &str,
    reset_type: &str,
) -> Resp {
    let target = format!("/redfish/v1/Systems/{system_id}/Actions/ComputerSystem.Reset");
    post(
        c,
        bmc,
        &target,
        basic(bmc),
        serde_json::json!({ "ResetType": reset_type }),
    )
    .await
}
