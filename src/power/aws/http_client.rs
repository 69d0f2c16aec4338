//! The HTTP client aws-config's credential providers use (STS for web identity, the
//! EC2 instance metadata service, the ECS/EKS Pod Identity container endpoint): the
//! project's reqwest, so the tree keeps one TLS stack and one rustls crypto provider
//! (ring). aws-config's own client would bring hyper-rustls with aws-lc-rs.

use std::time::Duration;

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;

/// Largest credential-provider reply read (STS and IMDS answers are a few KiB).
const MAX_BODY_BYTES: usize = 256 * 1024;
/// Used when the provider asks for no timeout of its own.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// [`HttpClient`] over a reqwest client.
#[derive(Debug, Clone)]
pub struct ReqwestHttpClient {
    client: reqwest::Client,
}

impl ReqwestHttpClient {
    pub fn new(client: reqwest::Client) -> Self {
        Self { client }
    }
}

impl HttpClient for ReqwestHttpClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        let timeout = match (settings.connect_timeout(), settings.read_timeout()) {
            (None, None) => DEFAULT_TIMEOUT,
            (c, r) => c.unwrap_or_default() + r.unwrap_or(DEFAULT_TIMEOUT),
        };
        SharedHttpConnector::new(Connector {
            client: self.client.clone(),
            timeout,
        })
    }
}

#[derive(Debug)]
struct Connector {
    client: reqwest::Client,
    timeout: Duration,
}

impl HttpConnector for Connector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let client = self.client.clone();
        let timeout = self.timeout;
        HttpConnectorFuture::new(async move { send(&client, request, timeout).await })
    }
}

fn user_error(message: String) -> ConnectorError {
    ConnectorError::user(message.into())
}

async fn send(
    client: &reqwest::Client,
    request: HttpRequest,
    timeout: Duration,
) -> Result<HttpResponse, ConnectorError> {
    let method = reqwest::Method::from_bytes(request.method().as_bytes())
        .map_err(|e| user_error(format!("bad HTTP method: {e}")))?;
    let Some(body) = request.body().bytes().map(<[u8]>::to_vec) else {
        return Err(user_error(
            "streaming request bodies are not supported".into(),
        ));
    };
    let mut builder = client
        .request(method, request.uri())
        .timeout(timeout)
        .body(body);
    for (name, value) in request.headers().iter() {
        builder = builder.header(name, value);
    }
    let transport = |e: reqwest::Error| {
        if e.is_timeout() {
            ConnectorError::timeout(e.into())
        } else {
            ConnectorError::io(e.into())
        }
    };
    let mut response = builder.send().await.map_err(transport)?;
    let status = StatusCode::try_from(response.status().as_u16())
        .map_err(|e| user_error(format!("bad HTTP status: {e}")))?;
    let headers = response.headers().clone();
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport)? {
        if bytes.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(user_error(format!(
                "credential provider reply larger than {MAX_BODY_BYTES} bytes"
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    let mut out = HttpResponse::new(status, SdkBody::from(bytes));
    for (name, value) in &headers {
        if let Ok(value) = value.to_str() {
            // A header smithy refuses is dropped; none of the providers' ones are.
            let _ = out
                .headers_mut()
                .try_append(name.as_str().to_string(), value.to_string());
        }
    }
    Ok(out)
}
