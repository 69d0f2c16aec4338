//! Reading a BMC's HTTP answer: the body (capped, JSON only), and what a failure
//! means for an operator. Kept apart from [`super::transport`], which decides when to
//! send, retry and authenticate.

use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName};
use reqwest::{Method, StatusCode};
use secrecy::SecretString;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::config::Timeouts;
use crate::power::{PowerError, PowerErrorKind};

/// Largest response body nodefence reads from a BMC.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// A parsed HTTP answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub location: Option<String>,
    pub retry_after: Option<Duration>,
    pub body: Option<Value>,
    /// The Content-Type, lower-cased ("" when absent).
    pub content_type: String,
    /// `X-Auth-Token` of a session-creation reply.
    pub auth_token: Option<SecretString>,
}

pub(super) fn header_str(headers: &HeaderMap, name: HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Parses a body: JSON when the BMC says JSON; errors for HTML and other types on
/// success replies (error replies keep going so their status can be reported).
pub(super) fn parse_body(
    headers: &HeaderMap,
    bytes: &[u8],
    status: StatusCode,
    method: &Method,
    path: &str,
) -> Result<Option<Value>, PowerError> {
    let content_type = header_str(headers, CONTENT_TYPE)
        .unwrap_or_default()
        .to_ascii_lowercase();
    let body = if bytes.iter().all(u8::is_ascii_whitespace) {
        None
    } else if content_type.contains("json") {
        match serde_json::from_slice::<Value>(bytes) {
            Ok(v) => Some(v),
            Err(e) if status.is_success() => {
                return Err(PowerError::protocol(format!(
                    "{method} {path}: malformed JSON in the reply (HTTP {status}): {e}"
                )));
            }
            Err(_) => None,
        }
    } else if status.is_success() {
        let kind = if content_type.contains("html") {
            "an HTML page"
        } else if content_type.is_empty() {
            "a body without Content-Type"
        } else {
            "a non-JSON body"
        };
        return Err(PowerError::protocol(format!(
            "{method} {path}: the BMC answered {kind} ({}) with HTTP {status} where Redfish JSON was expected; is the endpoint a Redfish service?",
            if content_type.is_empty() {
                "no Content-Type"
            } else {
                content_type.as_str()
            }
        )));
    } else {
        None
    };
    Ok(body)
}

/// Requires a 200-class reply with a JSON body that parses as `T`.
pub(super) fn expect_json<T: DeserializeOwned>(
    reply: &Reply,
    method: &str,
    path: &str,
) -> Result<T, PowerError> {
    let Some(body) = reply.body.clone() else {
        return Err(PowerError::protocol(format!(
            "{method} {path} answered HTTP {} with an empty body where JSON was expected",
            reply.status
        )));
    };
    serde_json::from_value(body)
        .map_err(|e| PowerError::protocol(format!("{method} {path}: unexpected JSON shape: {e}")))
}

/// Describes a transport failure without secrets (URLs never carry credentials: the
/// config loader refuses them). A TLS failure is [`PowerErrorKind::Tls`] with the
/// verifier's own explanation (which check, what was presented, what to set).
pub(super) fn send_error(
    e: &reqwest::Error,
    method: &Method,
    path: &str,
    timeouts: &Timeouts,
) -> PowerError {
    if let Some(failure) = crate::tls::refusal_in(e) {
        return PowerError::tls(failure.message());
    }
    let chain = crate::power::error_sources(e);
    let what = if e.is_timeout() {
        format!(
            "{method} {path} timed out (request_timeout {})",
            humantime::format_duration(timeouts.request)
        )
    } else if e.is_connect() {
        format!("{method} {path}: cannot connect")
    } else {
        format!("{method} {path}: connection failed")
    };
    PowerError::new(PowerErrorKind::Unreachable, format!("{what}{chain}"))
}
