//! Every HTTP request nodefence sends names it: `User-Agent: nodefence/VERSION`, so an
//! API server's audit log (or a BMC's access log) can pick nodefence's requests out.
//! The Kubernetes client is the one `nodefence run`, `explain` and `pause` build
//! (`nodefence::cluster::client`), against a bare HTTP server that records what it
//! receives; the Redfish side is checked through the mock BMC's request log in
//! `tests/redfish_field.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use k8s_openapi::api::core::v1::Node;
use kube::Api;

type Seen = Arc<Mutex<Vec<Option<String>>>>;

async fn not_found(State(seen): State<Seen>, headers: HeaderMap) -> impl IntoResponse {
    seen.lock().unwrap().push(
        headers
            .get("user-agent")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
    );
    (
        StatusCode::NOT_FOUND,
        [("content-type", "application/json")],
        r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"nodes \"ghost\" not found"}"#,
    )
}

#[tokio::test]
async fn kubernetes_requests_carry_nodefences_user_agent() {
    nodefence::tls::install_crypto_provider();
    let seen: Seen = Arc::default();
    let app = Router::new().fallback(not_found).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    let client = nodefence::cluster::client(config).unwrap();
    let node = Api::<Node>::all(client).get_opt("ghost").await.unwrap();
    assert!(node.is_none());

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        seen[0].as_deref(),
        Some(concat!("nodefence/", env!("CARGO_PKG_VERSION"))),
        "exactly one User-Agent, nodefence's"
    );
    server.abort();
}
