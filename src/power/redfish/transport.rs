//! HTTP to one Redfish service: headers, authentication, retries, deadlines, caps.
//!
//! Everything a BMC can do wrong at the HTTP level is turned into a [`PowerError`]
//! here, so the driver above only ever sees a status code and parsed JSON:
//! - `Accept: application/json` and `OData-Version: 4.0` on every request (some BMCs
//!   answer 406 without them); no `Authorization` on the session-creation POST.
//! - Redfish sessions (`X-Auth-Token`), re-login once on 401, HTTP Basic as fallback
//!   when the service has no usable SessionService (in `auto` mode).
//! - Connect errors, timeouts and 5xx are retried with jittered exponential backoff,
//!   at most `retries` times and never past the operation deadline.
//! - Bodies are capped at [`MAX_BODY_BYTES`]; HTML pages, wrong content types and
//!   malformed JSON are protocol errors. Redirects are never followed (a redirect
//!   would carry credentials to wherever the BMC points) and URLs the BMC hands back
//!   must stay on the same origin.

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use reqwest::header::{ACCEPT, CONTENT_TYPE, LOCATION, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{Mutex, OnceCell, Semaphore};
use tokio::time::Instant;
use url::Url;

use super::model::{self, ServiceRoot};
use super::reply::{MAX_BODY_BYTES, Reply, expect_json, header_str, parse_body, send_error};
use crate::config::{Credential, RedfishAuth, Timeouts};
use crate::power::PowerError;

const SERVICE_ROOT: &str = "/redfish/v1";
const DEFAULT_SESSIONS: &str = "/redfish/v1/SessionService/Sessions";

/// One failed attempt; `retry` says whether trying again may help.
#[derive(Debug, Clone)]
struct AttemptError {
    error: PowerError,
    retry: bool,
}

impl AttemptError {
    fn fatal(error: PowerError) -> Self {
        Self {
            error,
            retry: false,
        }
    }
    fn transient(error: PowerError) -> Self {
        Self { error, retry: true }
    }
}

#[derive(Debug, Clone)]
enum AuthHeader {
    None,
    Basic,
    Token(SecretString),
}

#[derive(Debug, Default)]
struct AuthState {
    /// Decided once: true = sessions, false = Basic.
    use_sessions: Option<bool>,
    token: Option<SecretString>,
    session_uri: Option<String>,
}

/// HTTP client for one BMC.
pub struct Transport {
    client: reqwest::Client,
    base: Url,
    credential: Credential,
    mode: RedfishAuth,
    timeouts: Timeouts,
    limiter: Arc<Semaphore>,
    root: OnceCell<ServiceRoot>,
    auth: Mutex<AuthState>,
}

impl Transport {
    pub fn new(
        client: reqwest::Client,
        base: Url,
        credential: Credential,
        mode: RedfishAuth,
        timeouts: Timeouts,
        limiter: Arc<Semaphore>,
    ) -> Self {
        Self {
            client,
            base,
            credential,
            mode,
            timeouts,
            limiter,
            root: OnceCell::new(),
            auth: Mutex::new(AuthState::default()),
        }
    }

    pub fn base(&self) -> &Url {
        &self.base
    }

    /// A deadline for one whole operation, from now.
    pub fn deadline(&self) -> Instant {
        Instant::now() + self.timeouts.operation
    }

    /// The service root (fetched once, unauthenticated as the specification requires).
    pub async fn service_root(&self, deadline: Instant) -> Result<&ServiceRoot, PowerError> {
        self.root
            .get_or_try_init(|| async {
                let reply = self
                    .with_retries(deadline, || {
                        self.unauthenticated(Method::GET, SERVICE_ROOT, deadline)
                    })
                    .await?;
                expect_json(&reply, "GET", SERVICE_ROOT)
            })
            .await
    }

    /// GET `path` (authenticated) and parse a 200 JSON body as `T`.
    pub async fn get_json<T: DeserializeOwned>(
        &self,
        path: &str,
        deadline: Instant,
    ) -> Result<T, PowerError> {
        let reply = self.get(path, deadline).await?;
        expect_json(&reply, "GET", path)
    }

    /// GET `path` (authenticated); any 2xx is returned.
    pub async fn get(&self, path: &str, deadline: Instant) -> Result<Reply, PowerError> {
        self.with_retries(deadline, || {
            self.authenticated(Method::GET, path, None, deadline)
        })
        .await
    }

    /// POST a JSON body to `path` (authenticated); any 2xx is returned.
    pub async fn post(
        &self,
        path: &str,
        body: &Value,
        deadline: Instant,
    ) -> Result<Reply, PowerError> {
        self.with_retries(deadline, || {
            self.authenticated(Method::POST, path, Some(body), deadline)
        })
        .await
    }

    /// Deletes the Redfish session, if one was opened. Best effort, short deadline.
    pub async fn close(&self) {
        let (token, uri) = {
            let mut state = self.auth.lock().await;
            (state.token.take(), state.session_uri.take())
        };
        if let (Some(token), Some(uri)) = (token, uri) {
            let deadline = Instant::now() + self.timeouts.request.min(Duration::from_secs(5));
            match self
                .raw(
                    Method::DELETE,
                    &uri,
                    None,
                    &AuthHeader::Token(token),
                    deadline,
                )
                .await
            {
                Ok(reply) if reply.status.is_success() => {
                    tracing::debug!(endpoint = %self.base, "redfish session closed")
                }
                Ok(reply) => {
                    tracing::debug!(endpoint = %self.base, status = %reply.status, "redfish session close refused")
                }
                Err(e) => {
                    tracing::debug!(endpoint = %self.base, error = %e.error, "redfish session close failed")
                }
            }
        }
    }

    async fn with_retries<F, Fut>(&self, deadline: Instant, attempt: F) -> Result<Reply, PowerError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Reply, AttemptError>>,
    {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(200))
            .with_max_delay(Duration::from_secs(3))
            .with_max_times(self.timeouts.retries as usize)
            .with_jitter();
        let last: std::sync::Mutex<Option<PowerError>> = std::sync::Mutex::new(None);
        let remaining = deadline.saturating_duration_since(Instant::now());
        let run = attempt
            .retry(backoff)
            .sleep(tokio::time::sleep)
            .when(|e: &AttemptError| e.retry && Instant::now() < deadline)
            .notify(|e: &AttemptError, _| {
                if let Ok(mut l) = last.lock() {
                    *l = Some(e.error.clone());
                }
                tracing::debug!(endpoint = %self.base, error = %e.error, "redfish request failed, retrying");
            });
        match tokio::time::timeout(remaining, run).await {
            Ok(result) => result.map_err(|e| e.error),
            Err(_) => {
                let last = last.lock().ok().and_then(|mut l| l.take());
                let mut msg = format!(
                    "no answer within the operation deadline ({})",
                    humantime::format_duration(self.timeouts.operation)
                );
                if let Some(e) = last {
                    msg.push_str(&format!("; last error: {}", e.message));
                }
                Err(PowerError::unreachable(msg))
            }
        }
    }

    /// One authenticated request; re-logs in once if the session token was rejected.
    async fn authenticated(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        deadline: Instant,
    ) -> Result<Reply, AttemptError> {
        let auth = self.auth_header(deadline).await?;
        let reply = self
            .raw(method.clone(), path, body, &auth, deadline)
            .await?;
        if reply.status == StatusCode::UNAUTHORIZED && matches!(auth, AuthHeader::Token(_)) {
            tracing::debug!(endpoint = %self.base, "session token rejected, logging in again");
            self.forget_token().await;
            let auth = self.auth_header(deadline).await?;
            let reply = self
                .raw(method.clone(), path, body, &auth, deadline)
                .await?;
            return self.judge(reply, &method, path);
        }
        self.judge(reply, &method, path)
    }

    /// One request without credentials and without retries (the service root).
    async fn unauthenticated(
        &self,
        method: Method,
        path: &str,
        deadline: Instant,
    ) -> Result<Reply, AttemptError> {
        let reply = self
            .raw(method.clone(), path, None, &AuthHeader::None, deadline)
            .await?;
        self.judge(reply, &method, path)
    }

    /// Turns non-2xx answers into errors, marking which are worth retrying.
    fn judge(&self, reply: Reply, method: &Method, path: &str) -> Result<Reply, AttemptError> {
        let status = reply.status;
        if status.is_success() {
            return Ok(reply);
        }
        let detail = match reply.body.as_ref().and_then(model::error_message) {
            Some(m) => format!(" ({})", m.trim_end_matches('.')),
            None if reply.content_type.contains("html") => " (an HTML error page)".to_string(),
            None => String::new(),
        };
        let what = format!("{method} {path} answered HTTP {status}{detail}");
        Err(match status {
            StatusCode::UNAUTHORIZED => AttemptError::fatal(PowerError::auth(format!(
                "{what}; the BMC rejected the credentials of user {:?} (check the password source {})",
                self.credential.username, self.credential.source
            ))),
            StatusCode::FORBIDDEN => AttemptError::fatal(PowerError::auth(format!(
                "{what}; user {:?} lacks the privilege (it needs at least Operator/ConfigureComponents)",
                self.credential.username
            ))),
            s if s.is_redirection() => AttemptError::fatal(PowerError::protocol(format!(
                "{what}, a redirect to {}; nodefence does not follow redirects (credentials would follow them): set the endpoint to the final URL",
                reply.location.as_deref().unwrap_or("nowhere")
            ))),
            s if s.is_server_error() => AttemptError::transient(PowerError::unreachable(what)),
            _ => AttemptError::fatal(PowerError::protocol(what)),
        })
    }

    async fn forget_token(&self) {
        let mut state = self.auth.lock().await;
        state.token = None;
        state.session_uri = None;
    }

    /// The credentials to send, logging in first if sessions are in use and none is open.
    async fn auth_header(&self, deadline: Instant) -> Result<AuthHeader, AttemptError> {
        let mut state = self.auth.lock().await;
        if state.use_sessions == Some(false) || self.mode == RedfishAuth::Basic {
            return Ok(AuthHeader::Basic);
        }
        if let Some(token) = &state.token {
            return Ok(AuthHeader::Token(token.clone()));
        }
        let root = self
            .service_root(deadline)
            .await
            .map_err(AttemptError::transient)?;
        let sessions = root
            .links
            .sessions
            .as_ref()
            .map(|l| l.odata_id.clone())
            .or_else(|| {
                root.session_service
                    .as_ref()
                    .map(|_| DEFAULT_SESSIONS.to_string())
            });
        let Some(sessions) = sessions else {
            if self.mode == RedfishAuth::Session {
                return Err(AttemptError::fatal(PowerError::unsupported(
                    "the BMC advertises no SessionService but auth = \"session\" was configured; use auth = \"auto\" or \"basic\"",
                )));
            }
            state.use_sessions = Some(false);
            return Ok(AuthHeader::Basic);
        };
        let body = serde_json::json!({
            "UserName": self.credential.username,
            "Password": self.credential.password.expose_secret(),
        });
        let reply = self
            .raw(
                Method::POST,
                &sessions,
                Some(&body),
                &AuthHeader::None,
                deadline,
            )
            .await?;
        match reply.status {
            s if s.is_success() => {
                let Some(token) = reply.auth_token.clone() else {
                    return Err(AttemptError::fatal(PowerError::protocol(format!(
                        "POST {sessions} created a session but returned no X-Auth-Token header"
                    ))));
                };
                let uri = reply.location.clone().or_else(|| {
                    reply
                        .body
                        .as_ref()
                        .and_then(|b| b.get("@odata.id"))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                });
                state.use_sessions = Some(true);
                state.token = Some(token.clone());
                state.session_uri = uri;
                Ok(AuthHeader::Token(token))
            }
            StatusCode::NOT_FOUND
            | StatusCode::METHOD_NOT_ALLOWED
            | StatusCode::NOT_IMPLEMENTED
                if self.mode == RedfishAuth::Auto =>
            {
                tracing::info!(endpoint = %self.base, status = %reply.status, "BMC cannot create Redfish sessions; using HTTP Basic");
                state.use_sessions = Some(false);
                Ok(AuthHeader::Basic)
            }
            _ => self
                .judge(reply, &Method::POST, &sessions)
                .map(|_| AuthHeader::None),
        }
    }

    /// Sends one request and reads its body (capped). No status judgement.
    async fn raw(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        auth: &AuthHeader,
        deadline: Instant,
    ) -> Result<Reply, AttemptError> {
        let url = self.resolve(path).map_err(AttemptError::fatal)?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(AttemptError::fatal(PowerError::unreachable(format!(
                "operation deadline ({}) passed before {method} {path}",
                humantime::format_duration(self.timeouts.operation)
            ))));
        }
        let _permit = self
            .limiter
            .acquire()
            .await
            .map_err(|_| AttemptError::fatal(PowerError::unreachable("shutting down")))?;
        let mut request = self
            .client
            .request(method.clone(), url)
            .timeout(self.timeouts.request.min(remaining))
            .header(ACCEPT, "application/json")
            .header("OData-Version", "4.0");
        match auth {
            AuthHeader::None => {}
            AuthHeader::Basic => {
                request = request.basic_auth(
                    &self.credential.username,
                    Some(self.credential.password.expose_secret()),
                );
            }
            AuthHeader::Token(token) => {
                request = request.header("X-Auth-Token", token.expose_secret());
            }
        }
        if let Some(body) = body {
            let bytes = serde_json::to_vec(body).map_err(|e| {
                AttemptError::fatal(PowerError::protocol(format!("cannot encode request: {e}")))
            })?;
            request = request.header(CONTENT_TYPE, "application/json").body(bytes);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| AttemptError::transient(send_error(&e, &method, path, &self.timeouts)))?;
        let status = response.status();
        let headers = response.headers().clone();
        let mut bytes = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if bytes.len() + chunk.len() > MAX_BODY_BYTES {
                        return Err(AttemptError::fatal(PowerError::protocol(format!(
                            "{method} {path}: response body larger than {MAX_BODY_BYTES} bytes; refusing to read it"
                        ))));
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(AttemptError::transient(send_error(
                        &e,
                        &method,
                        path,
                        &self.timeouts,
                    )));
                }
            }
        }
        let body =
            parse_body(&headers, &bytes, status, &method, path).map_err(AttemptError::fatal)?;
        let content_type = header_str(&headers, CONTENT_TYPE)
            .unwrap_or_default()
            .to_ascii_lowercase();
        Ok(Reply {
            status,
            location: header_str(&headers, LOCATION),
            retry_after: header_str(&headers, RETRY_AFTER)
                .and_then(|s| s.trim().parse::<u64>().ok())
                .map(Duration::from_secs),
            body,
            content_type,
            auth_token: headers
                .get("x-auth-token")
                .and_then(|v| v.to_str().ok())
                .map(|t| SecretString::from(t.to_string())),
        })
    }

    /// Joins a path (or URL) from the BMC onto the endpoint; refuses other origins.
    fn resolve(&self, path: &str) -> Result<Url, PowerError> {
        let url = self.base.join(path).map_err(|e| {
            PowerError::protocol(format!("the BMC returned an unusable URI {path:?}: {e}"))
        })?;
        if url.origin() != self.base.origin() {
            return Err(PowerError::protocol(format!(
                "the BMC pointed at {} which is not the configured endpoint {}; refusing to send credentials there",
                url.origin().ascii_serialization(),
                self.base.origin().ascii_serialization()
            )));
        }
        Ok(url)
    }
}
