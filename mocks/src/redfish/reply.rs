//! Turning an answer into HTTP, and the faults that corrupt answers on the way out.
//!
//! Handlers build a [`Reply`] (status, extra headers, JSON/HTML/empty body); it is
//! rendered in one place so every Redfish answer carries the same headers
//! (`Content-Type: application/json; charset=utf-8`, `OData-Version: 4.0`) and the
//! body faults (wrong content type, truncated JSON, oversized body) hit every JSON
//! answer alike.

use axum::body::{Body, Bytes};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::Value;

use super::payloads;

const JSON: &str = "application/json; charset=utf-8";
const HTML: &str = "text/html; charset=utf-8";

#[derive(Debug)]
pub(crate) enum ReplyBody {
    Empty,
    Json(Value),
    Html(String),
}

/// An answer to a Redfish request, before rendering.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    headers: Vec<(HeaderName, String)>,
    body: ReplyBody,
}

impl Reply {
    pub(crate) fn json(status: StatusCode, body: Value) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: ReplyBody::Json(body),
        }
    }

    pub(crate) fn ok(body: Value) -> Self {
        Self::json(StatusCode::OK, body)
    }

    pub(crate) fn empty(status: StatusCode) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: ReplyBody::Empty,
        }
    }

    pub(crate) fn html(status: StatusCode, page: String) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: ReplyBody::Html(page),
        }
    }

    /// A Redfish error with one Base registry message (`id` without the prefix).
    pub(crate) fn error(status: StatusCode, id: &str, text: &str, args: &[&str]) -> Self {
        Self::json(status, payloads::error(id, text, args))
    }

    pub(crate) fn header(mut self, name: HeaderName, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// Renders the reply, applying the body faults in force.
    pub(crate) fn render(self, faults: &BodyFaults) -> Response {
        let (content_type, bytes) = match self.body {
            ReplyBody::Empty => (None, Vec::new()),
            ReplyBody::Html(page) => (Some(HTML), page.into_bytes()),
            ReplyBody::Json(mut value) => {
                if faults.hostile_strings {
                    super::hostile::taint(&mut value);
                }
                let value = match faults.oversized_body {
                    Some(bytes) => pad(value, bytes),
                    None => value,
                };
                let mut text = value.to_string().into_bytes();
                if faults.malformed_json {
                    text.truncate(text.len() / 2);
                }
                let ct = if faults.wrong_content_type {
                    "text/plain; charset=utf-8"
                } else {
                    JSON
                };
                (Some(ct), text)
            }
        };
        let mut response = Response::new(Body::from(bytes));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        if let Some(ct) = content_type {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(ct));
        }
        headers.insert("odata-version", HeaderValue::from_static("4.0"));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        for (name, value) in self.headers {
            if let Ok(v) = HeaderValue::from_str(&value) {
                headers.append(name, v);
            }
        }
        response
    }
}

/// The faults that corrupt JSON bodies.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct BodyFaults {
    pub(crate) wrong_content_type: bool,
    pub(crate) malformed_json: bool,
    pub(crate) oversized_body: Option<usize>,
    pub(crate) hostile_strings: bool,
}

/// Adds a `"Padding"` string so the document is at least `bytes` bytes long.
fn pad(value: Value, bytes: usize) -> Value {
    match value {
        Value::Object(mut m) => {
            let current = serde_json::to_vec(&m).map_or(0, |v| v.len());
            let fill = bytes.saturating_sub(current);
            m.insert("Padding".into(), Value::String(" ".repeat(fill)));
            Value::Object(m)
        }
        other => other,
    }
}

/// A response whose body fails before anything is written: hyper abandons the
/// connection without sending a status line (the DropConnection fault).
pub(crate) fn dropped_connection() -> Response {
    let failing = futures::stream::iter([Err::<Bytes, std::io::Error>(std::io::Error::other(
        "mock-redfish: connection dropped on purpose",
    ))]);
    Response::new(Body::from_stream(failing))
}

/// The page a BMC's embedded web server shows when its API is down.
pub(crate) fn html_error_page() -> String {
    "<!DOCTYPE html>\n<html><head><title>503 Service Unavailable</title></head>\
     <body><h1>Service Unavailable</h1><p>The management controller is busy. \
     Please try again later.</p></body></html>\n"
        .to_owned()
}

/// The web UI login page some proxies serve in place of the API.
pub(crate) fn html_login_page() -> String {
    "<!DOCTYPE html>\n<html><head><title>Login</title></head><body>\
     <form method=\"post\" action=\"/login\"><input name=\"user\">\
     <input name=\"password\" type=\"password\"><button>Log in</button></form>\
     </body></html>\n"
        .to_owned()
}
