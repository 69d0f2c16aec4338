//! Responses: JSON bodies with the apiserver's headers, and `Status` objects for
//! every failure.
//!
//! Clients decide what went wrong from the `Status` body, not just the HTTP code:
//! kube-rs turns it into `kube::Error::Api` (code, reason, message) and kubectl prints
//! its message (`Error from server (NotFound): nodes "x" not found`). Every error
//! path of the fake server therefore goes through [`error`] or [`failure`] so the
//! body always has the real shape.

use axum::body::Body;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::resources::ResourceType;
use super::store::StoreError;

/// `application/json`, as the apiserver labels JSON bodies.
pub const JSON: &str = "application/json";

/// A JSON body with a status code.
pub fn json_response(code: StatusCode, body: &Value) -> Response {
    json_with_type(code, body, JSON)
}

/// A JSON body labelled with a specific media type (aggregated discovery needs its
/// `;g=...;v=...;as=...` parameters for client-go to recognise it).
pub fn json_with_type(code: StatusCode, body: &Value, content_type: &str) -> Response {
    let mut text = body.to_string();
    text.push('\n');
    let mut resp = (code, Body::from(text)).into_response();
    if let Ok(v) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(CONTENT_TYPE, v);
    }
    resp
}

/// Adds one `Warning` header per message (`299 - "text"`, as the apiserver sends
/// them; kubectl prints `Warning: text`).
pub fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            resp.headers_mut().append("warning", v);
        }
    }
    resp
}

/// 200 with the object.
pub fn ok(body: &Value) -> Response {
    json_response(StatusCode::OK, body)
}

/// 201 Created with the object.
pub fn created(body: &Value) -> Response {
    json_response(StatusCode::CREATED, body)
}

/// The `Status` response for a store error.
pub fn error(e: &StoreError) -> Response {
    let code = StatusCode::from_u16(e.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(code, &e.to_status())
}

/// A failure `Status` not covered by [`StoreError`] (401, 405, 406, 415, ...).
pub fn failure(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {},
        "code": code.as_u16(),
    });
    json_response(code, &body)
}

/// 401: no or wrong bearer token.
pub fn unauthorized() -> Response {
    failure(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized")
}

/// 404 for a path that names nothing the server serves.
pub fn path_not_found() -> Response {
    failure(
        StatusCode::NOT_FOUND,
        "NotFound",
        "the server could not find the requested resource",
    )
}

/// 405 for a method the path does not support.
pub fn method_not_allowed() -> Response {
    failure(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
    )
}

/// 406 when the client accepts no representation the server can produce.
pub fn not_acceptable() -> Response {
    failure(
        StatusCode::NOT_ACCEPTABLE,
        "NotAcceptable",
        "only the following media types are accepted: application/json (fake-kube serves JSON only)",
    )
}

/// 415 for a request body (or patch) type the server does not take.
pub fn unsupported_media_type(message: &str) -> Response {
    failure(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "UnsupportedMediaType",
        message,
    )
}

/// The `Status` a delete answers with when the store does not return the object
/// (`details.kind` is the resource, as the real server fills it).
pub fn delete_success(rt: ResourceType, object: &Value) -> Value {
    let mut details = json!({
        "name": object.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
        "kind": rt.plural,
        "uid": object.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
    });
    if !rt.group.is_empty() {
        details["group"] = json!(rt.group);
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}
