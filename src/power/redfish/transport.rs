//! HTTP to one Redfish service: headers, authentication, retries, deadlines, caps.
//!
//! Everything a BMC can do wrong at the HTTP level is turned into a [`PowerError`]
//! here, so the driver above only ever sees a status code and parsed JSON:
//! - `Accept: application/json` and `OData-Version: 4.0` on every request (some BMCs
//!   answer 406 without them); no `Authorization` on the session-creation POST.
//! - Redfish sessions (`X-Auth-Token`), re-login once on 401, HTTP Basic when the
//!   service will not give a session (in `auto` mode; see `super::auth`).
//! - Connect errors, timeouts and 5xx are retried with jittered exponential backoff,
//!   at most `retries` times and never past the operation deadline. A refused TLS
//!   certificate is not: it is reported once.
//! - Bodies are capped at [`MAX_BODY_BYTES`]; HTML pages, wrong content types and
//!   malformed JSON are protocol errors. Redirects are followed only on the
//!   endpoint's own origin, at most a few hops, never changing a POST into a GET
//!   ([`super::redirect`]); permanent ones are remembered. URLs the BMC hands back
//!   must stay on the same origin too: credentials never leave the BMC.

use std::collections::HashMap;
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

use super::auth::{AuthState, detail};
use super::model::ServiceRoot;
use super::redirect::{self, MAX_REDIRECTS};
use super::reply::{MAX_BODY_BYTES, Reply, expect_json, header_str, parse_body, send_error};
use crate::config::{Credential, RedfishAuth, Timeouts};
use crate::power::{PowerError, PowerErrorKind};

const SERVICE_ROOT: &str = "/redfish/v1";

/// One failed attempt; `retry` says whether trying again may help.
#[derive(Debug, Clone)]
pub(super) struct AttemptError {
    pub(super) error: PowerError,
    pub(super) retry: bool,
}

impl AttemptError {
    pub(super) fn fatal(error: PowerError) -> Self {
        Self {
            error,
            retry: false,
        }
    }
    pub(super) fn transient(error: PowerError) -> Self {
        Self { error, retry: true }
    }
    /// A request that could not be sent or read: retried, unless the TLS certificate
    /// was refused (retrying cannot change the certificate: report it once).
    fn sending(error: PowerError) -> Self {
        let retry = error.kind != PowerErrorKind::Tls;
        Self { error, retry }
    }
}

/// The credentials one request carries.
#[derive(Debug, Clone)]
pub(super) enum AuthHeader {
    None,
    Basic,
    Token(SecretString),
}

/// HTTP client for one BMC.
pub struct Transport {
    client: reqwest::Client,
    base: Url,
    pub(super) credential: Credential,
    pub(super) mode: RedfishAuth,
    timeouts: Timeouts,
    limiter: Arc<Semaphore>,
    root: OnceCell<ServiceRoot>,
    pub(super) auth: Mutex<AuthState>,
    /// Permanent redirects seen (path → path), followed directly next time.
    moved: std::sync::Mutex<HashMap<String, String>>,
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
            moved: std::sync::Mutex::new(HashMap::new()),
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

    /// One authenticated request. A rejected session token is replaced once (it may
    /// have expired); a refusal that remains is judged by [`Transport::refused`]:
    /// privilege or credentials.
    async fn authenticated(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        deadline: Instant,
    ) -> Result<Reply, AttemptError> {
        let mut auth = self.auth_header(deadline).await?;
        let mut reply = self
            .raw(method.clone(), path, body, &auth, deadline)
            .await?;
        let privilege_said = reply
            .body
            .as_ref()
            .is_some_and(super::model::is_insufficient_privilege);
        if reply.status == StatusCode::UNAUTHORIZED
            && matches!(auth, AuthHeader::Token(_))
            && !privilege_said
            && self.uses_sessions().await
        {
            tracing::debug!(endpoint = %self.base, "session token rejected, logging in again");
            self.drop_session(deadline).await;
            auth = self.auth_header(deadline).await?;
            reply = self
                .raw(method.clone(), path, body, &auth, deadline)
                .await?;
        }
        if matches!(
            reply.status,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
        ) {
            return Err(self.refused(&reply, &method, path, &auth, deadline).await);
        }
        if reply.status.is_success() {
            self.accepted().await;
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
    pub(super) fn judge(
        &self,
        reply: Reply,
        method: &Method,
        path: &str,
    ) -> Result<Reply, AttemptError> {
        let status = reply.status;
        if status.is_success() {
            return Ok(reply);
        }
        let what = format!("{method} {path} answered HTTP {status}{}", detail(&reply));
        Err(match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                AttemptError::fatal(PowerError::auth(format!(
                    "{what}; the BMC wants credentials for a resource the Redfish specification \
                     says is open (the service root)"
                )))
            }
            s if s.is_redirection() => AttemptError::fatal(PowerError::protocol(format!(
                "{what}, a redirect nodefence did not follow"
            ))),
            s if s.is_server_error() => AttemptError::transient(PowerError::unreachable(what)),
            _ => AttemptError::fatal(PowerError::protocol(what)),
        })
    }

    /// Sends one request, following the redirects [`redirect::next_hop`] allows, and
    /// reads the final body (capped). No status judgement.
    pub(super) async fn raw(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        auth: &AuthHeader,
        deadline: Instant,
    ) -> Result<Reply, AttemptError> {
        let mut url = self
            .resolve(&self.moved_to(path))
            .map_err(AttemptError::fatal)?;
        for _ in 0..=MAX_REDIRECTS {
            let reply = self.send(&method, &url, body, auth, deadline).await?;
            if !reply.status.is_redirection() || reply.status == StatusCode::NOT_MODIFIED {
                return Ok(reply);
            }
            let next = redirect::next_hop(
                &self.base,
                &url,
                &method,
                reply.status,
                reply.location.as_deref(),
            )
            .map_err(AttemptError::fatal)?;
            tracing::debug!(endpoint = %self.base, from = %redirect::path_of(&url), to = %redirect::path_of(&next), status = %reply.status, "following a redirect");
            if redirect::is_permanent(reply.status) {
                self.remember_move(&url, &next);
            }
            url = next;
        }
        Err(AttemptError::fatal(PowerError::protocol(format!(
            "{method} {path}: more than {MAX_REDIRECTS} redirects (a redirect loop at {}); is \
             the endpoint a Redfish service?",
            redirect::path_of(&url)
        ))))
    }

    /// Where a permanent redirect seen earlier sends `path` (or `path` itself).
    fn moved_to(&self, path: &str) -> String {
        let moved = self.moved.lock().unwrap_or_else(|e| e.into_inner());
        moved.get(path).cloned().unwrap_or_else(|| path.to_string())
    }

    fn remember_move(&self, from: &Url, to: &Url) {
        let mut moved = self.moved.lock().unwrap_or_else(|e| e.into_inner());
        if moved.len() < 64 {
            moved.insert(redirect::path_of(from), redirect::path_of(to));
        }
    }

    /// One HTTP exchange: send, read the body (capped). No redirects, no judgement.
    async fn send(
        &self,
        method: &Method,
        url: &Url,
        body: Option<&Value>,
        auth: &AuthHeader,
        deadline: Instant,
    ) -> Result<Reply, AttemptError> {
        let path = redirect::path_of(url);
        let path = path.as_str();
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
            .request(method.clone(), url.clone())
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
            .map_err(|e| AttemptError::sending(send_error(&e, method, path, &self.timeouts)))?;
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
                    return Err(AttemptError::sending(send_error(
                        &e,
                        method,
                        path,
                        &self.timeouts,
                    )));
                }
            }
        }
        let body =
            parse_body(&headers, &bytes, status, method, path).map_err(AttemptError::fatal)?;
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
