//! EC2's Query API over the project's reqwest: SigV4-signed form POSTs, retries,
//! deadlines, and what a failure means.
//!
//! - Every request is signed (aws-sigv4) just before it is sent, with credentials from
//!   [`CredentialSource`]; the signature and session token go in headers, the secret
//!   never leaves this process and is in no message; the signer runs with logging
//!   off, since it traces the canonical request (session token included).
//! - Throttling (`RequestLimitExceeded`, `Throttling`, HTTP 503), EC2's internal errors
//!   (HTTP 5xx), connect errors and timeouts are retried with jittered exponential
//!   backoff, at most `timeouts.retries` times and never past `timeouts.operation`.
//! - Refused credentials are [`PowerErrorKind::Auth`]; an expired token is retried once
//!   the credential cache is emptied.
//! - A body is capped at [`MAX_BODY_BYTES`]; anything but a 200 with an XML document is
//!   never passed on as an answer.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use backon::{ExponentialBuilder, Retryable};
use reqwest::StatusCode;
use reqwest::header::CONTENT_TYPE;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use url::Url;

use super::credentials::CredentialSource;
use super::locate::{default_endpoint, host_header};
use super::xml::{self, ApiError};
use crate::config::Timeouts;
use crate::power::{PowerError, PowerErrorKind};

/// The EC2 API version nodefence speaks.
pub const API_VERSION: &str = "2016-11-15";
/// Largest reply read (a tag lookup lists whole instances).
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// Error codes that mean "slow down".
const THROTTLING: [&str; 5] = [
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "RequestThrottledException",
];
/// Error codes that mean the credentials were refused.
const AUTH: [&str; 11] = [
    "AuthFailure",
    "UnauthorizedOperation",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "RequestExpired",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "InvalidAccessKeyId",
    "AccessDenied",
    "Blocked",
];
/// Error codes of EC2's own trouble.
const SERVER: [&str; 4] = [
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
];

/// A failed call: the error, and EC2's error code when it sent one.
#[derive(Debug, Clone)]
pub struct Failure {
    pub code: Option<String>,
    pub error: PowerError,
    retry: bool,
}

impl Failure {
    fn fatal(error: PowerError) -> Self {
        Self {
            code: None,
            error,
            retry: false,
        }
    }
    /// A request that could not be sent or read: retried, unless the endpoint's TLS
    /// certificate was refused (that cannot change by retrying).
    fn sending(error: PowerError) -> Self {
        let retry = error.kind != PowerErrorKind::Tls;
        Self {
            code: None,
            error,
            retry,
        }
    }
    /// The error for a caller that has no use for the code.
    pub fn into_error(self) -> PowerError {
        self.error
    }
}

/// Signed EC2 calls for one driver.
pub struct Ec2 {
    client: reqwest::Client,
    endpoint: Option<Url>,
    credentials: CredentialSource,
    timeouts: Timeouts,
    limiter: Arc<Semaphore>,
}

impl Ec2 {
    pub fn new(
        client: reqwest::Client,
        endpoint: Option<Url>,
        credentials: CredentialSource,
        timeouts: Timeouts,
        limiter: Arc<Semaphore>,
    ) -> Self {
        Self {
            client,
            endpoint,
            credentials,
            timeouts,
            limiter,
        }
    }

    /// A deadline for one whole operation, from now.
    pub fn deadline(&self) -> Instant {
        Instant::now() + self.timeouts.operation
    }

    /// The endpoint override, if any.
    pub fn endpoint_override(&self) -> Option<&Url> {
        self.endpoint.as_ref()
    }

    /// Calls `action` in `region` with `params`; the body of the 200 reply.
    pub async fn call(
        &self,
        region: &str,
        action: &str,
        params: &[(&str, &str)],
        deadline: Instant,
    ) -> Result<String, Failure> {
        let url = match &self.endpoint {
            Some(url) => url.clone(),
            None => default_endpoint(region).map_err(|e| Failure::fatal(PowerError::config(e)))?,
        };
        let body = form_body(action, params);
        let what = format!("{action} at {}", url.as_str().trim_end_matches('/'));
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(200))
            .with_max_delay(Duration::from_secs(5))
            .with_max_times(self.timeouts.retries as usize)
            .with_jitter();
        let last: std::sync::Mutex<Option<PowerError>> = std::sync::Mutex::new(None);
        let remaining = deadline.saturating_duration_since(Instant::now());
        let run = (|| self.attempt(&url, region, &body, &what, deadline))
            .retry(backoff)
            .sleep(tokio::time::sleep)
            .when(|f: &Failure| f.retry && Instant::now() < deadline)
            .notify(|f: &Failure, pause| {
                if let Ok(mut l) = last.lock() {
                    *l = Some(f.error.clone());
                }
                tracing::debug!(%what, error = %f.error, ?pause, "EC2 request failed, retrying");
            });
        match tokio::time::timeout(remaining, run).await {
            Ok(result) => result,
            Err(_) => {
                let mut msg = format!(
                    "{what}: no answer within the operation deadline ({})",
                    humantime::format_duration(self.timeouts.operation)
                );
                if let Some(e) = last.lock().ok().and_then(|mut l| l.take()) {
                    msg.push_str(&format!("; last error: {}", e.message));
                }
                Err(Failure::fatal(PowerError::unreachable(msg)))
            }
        }
    }

    /// One signed request, judged.
    async fn attempt(
        &self,
        url: &Url,
        region: &str,
        body: &str,
        what: &str,
        deadline: Instant,
    ) -> Result<String, Failure> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(Failure::fatal(PowerError::unreachable(format!(
                "{what}: the operation deadline ({}) passed",
                humantime::format_duration(self.timeouts.operation)
            ))));
        }
        let credentials = self.credentials.get(region).await.map_err(|e| {
            Failure::fatal(PowerError::new(e.kind, format!("{what}: {}", e.message)))
        })?;
        let headers = signed_headers(url, region, body, credentials.into(), SystemTime::now())
            .map_err(|e| Failure::fatal(PowerError::config(format!("{what}: {e}"))))?;
        let _permit = self
            .limiter
            .acquire()
            .await
            .map_err(|_| Failure::fatal(PowerError::unreachable("shutting down")))?;
        let mut request = self
            .client
            .post(url.clone())
            .timeout(self.timeouts.request.min(remaining))
            .body(body.to_string());
        for (name, value) in &headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| Failure::sending(send_error(&e, what, &self.timeouts)))?;
        let status = response.status();
        let mut bytes = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if bytes.len() + chunk.len() > MAX_BODY_BYTES {
                        return Err(Failure::fatal(PowerError::protocol(format!(
                            "{what}: reply larger than {MAX_BODY_BYTES} bytes; refusing to read it"
                        ))));
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => return Err(Failure::sending(send_error(&e, what, &self.timeouts))),
            }
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if status == StatusCode::OK {
            return Ok(text);
        }
        let failure = judge(status, xml::api_error(&text), what);
        if matches!(
            failure.code.as_deref(),
            Some("ExpiredToken" | "RequestExpired")
        ) {
            self.credentials.invalidate(region);
        }
        Err(failure)
    }
}

/// The form body of a Query API call.
pub fn form_body(action: &str, params: &[(&str, &str)]) -> String {
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    form.append_pair("Action", action);
    form.append_pair("Version", API_VERSION);
    for (k, v) in params {
        form.append_pair(k, v);
    }
    form.finish()
}

/// The headers to add for a SigV4-signed form POST of `body` to `url`.
pub fn signed_headers(
    url: &Url,
    region: &str,
    body: &str,
    identity: Identity,
    time: SystemTime,
) -> Result<Vec<(String, String)>, String> {
    let host = host_header(url).ok_or_else(|| format!("the endpoint {url} has no host"))?;
    let content_type = "application/x-www-form-urlencoded; charset=utf-8";
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("ec2")
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| format!("cannot sign the request: {e}"))?
        .into();
    let request = SignableRequest::new(
        "POST",
        url.as_str(),
        [("host", host.as_str()), ("content-type", content_type)].into_iter(),
        SignableBody::Bytes(body.as_bytes()),
    )
    .map_err(|e| format!("cannot sign the request: {e}"))?;
    // aws-sigv4 traces the canonical request, session token included: it signs with
    // no subscriber, so no log filter can ever show the token.
    let signed =
        tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
            sign(request, &params)
        });
    let (instructions, _signature) = signed
        .map_err(|e| format!("cannot sign the request: {e}"))?
        .into_parts();
    let mut headers = vec![(CONTENT_TYPE.as_str().to_string(), content_type.to_string())];
    headers.extend(
        instructions
            .headers()
            .map(|(name, value)| (name.to_string(), value.to_string())),
    );
    Ok(headers)
}

/// What a non-200 reply means.
pub fn judge(status: StatusCode, api: Option<ApiError>, what: &str) -> Failure {
    let code = api
        .as_ref()
        .map(|a| a.code.clone())
        .filter(|c| !c.is_empty());
    let detail = match &api {
        Some(a) if a.message.is_empty() => format!(" ({})", a.code),
        Some(a) => format!(" ({}: {})", a.code, a.message.trim_end_matches('.')),
        None => String::new(),
    };
    let message = format!("{what} answered HTTP {status}{detail}");
    let c = code.as_deref().unwrap_or("");
    let (kind, retry, hint) =
        if THROTTLING.contains(&c) || status == StatusCode::SERVICE_UNAVAILABLE {
            (
                PowerErrorKind::Unreachable,
                true,
                "; EC2 throttled the request",
            )
        } else if c == "ExpiredToken" || c == "RequestExpired" {
            (
                PowerErrorKind::Auth,
                true,
                "; the credentials expired (or the clock is off by more than 5 minutes)",
            )
        } else if AUTH.contains(&c)
            || status == StatusCode::UNAUTHORIZED
            || status == StatusCode::FORBIDDEN
        {
            (
                PowerErrorKind::Auth,
                false,
                "; EC2 refused the credentials: check the key or role, and that it may call \
             ec2:DescribeInstances, ec2:StopInstances and ec2:StartInstances",
            )
        } else if SERVER.contains(&c) || status.is_server_error() {
            (PowerErrorKind::Unreachable, true, "")
        } else if c == "InvalidInstanceID.Malformed"
            || c == "OptInRequired"
            || c == "InvalidParameterValue"
        {
            (PowerErrorKind::Config, false, "")
        } else if c == "IncorrectInstanceState" || c == "UnsupportedOperation" {
            (PowerErrorKind::Unsupported, false, "")
        } else {
            (PowerErrorKind::Protocol, false, "")
        };
    Failure {
        code,
        error: PowerError::new(kind, format!("{message}{hint}")),
        retry,
    }
}

/// Describes a transport failure (URLs never carry credentials).
fn send_error(e: &reqwest::Error, what: &str, timeouts: &Timeouts) -> PowerError {
    if let Some(failure) = crate::tls::refusal_in(e) {
        return PowerError::tls(format!("{what}: {}", failure.message()));
    }
    let chain = crate::power::error_sources(e);
    let head = if e.is_timeout() {
        format!(
            "{what} timed out (request_timeout {})",
            humantime::format_duration(timeouts.request)
        )
    } else if e.is_connect() {
        format!("{what}: cannot connect")
    } else {
        format!("{what}: connection failed")
    };
    PowerError::unreachable(format!("{head}{chain}"))
}
