//! The `/redfish` front door: logging, transport-level faults, authentication, routing.
//!
//! Every request under `/redfish` passes through [`handle`] in the same order a real
//! BMC's web server would: it is logged, may hang, be slowed, dropped or answered
//! with an error page (faults), then authentication is checked before the path is
//! even looked up (bmcweb answers 401, not 404, to an anonymous request for an
//! unknown URI), and finally the resource answers. Paths are accepted with or
//! without a trailing slash, as real services do.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{ALLOW, LOCATION, WWW_AUTHENTICATE};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};

use super::accounts::{Role, role_named, role_of};
use super::profile::{AllowableStyle, ResetResponse};
use super::reply::{self, BodyFaults, Reply};
use super::resources;
use super::sessions::Presented;
use super::state::{Inner, Shared};

/// Largest request body accepted.
const MAX_BODY: usize = 64 * 1024;

/// A Redfish resource the mock can serve, by URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resource {
    Versions,
    Root,
    SessionService,
    Sessions,
    Session(String),
    Systems,
    System(String),
    ResetAction(String),
    ResetActionInfo(String),
    TaskService,
    Tasks,
    Task(String),
    TaskMonitor(String),
}

impl Resource {
    fn allows(&self, method: &Method) -> bool {
        let allowed = self.methods();
        allowed.contains(method)
    }

    fn methods(&self) -> Vec<Method> {
        match self {
            Resource::Sessions => vec![Method::GET, Method::POST],
            Resource::Session(_) => vec![Method::GET, Method::DELETE],
            Resource::ResetAction(_) => vec![Method::POST],
            _ => vec![Method::GET],
        }
    }

    /// Served without authentication.
    fn is_public(&self, method: &Method) -> bool {
        match self {
            Resource::Versions | Resource::Root => true,
            Resource::Sessions => method == Method::POST,
            _ => false,
        }
    }
}

/// Maps a path to a resource this service offers (profile-dependent).
fn parse(shared: &Shared, path: &str) -> Option<Resource> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let config = &shared.config;
    let sessions = config.profile.has_sessions();
    let tasks = config.reset_response == ResetResponse::AcceptedTask;
    let action_info = config.profile.allowable_style() == AllowableStyle::ActionInfo;
    let resource = match segs.as_slice() {
        ["redfish"] => Resource::Versions,
        ["redfish", "v1"] => Resource::Root,
        ["redfish", "v1", "SessionService"] if sessions => Resource::SessionService,
        ["redfish", "v1", "SessionService", "Sessions"] if sessions => Resource::Sessions,
        ["redfish", "v1", "SessionService", "Sessions", id] if sessions => {
            Resource::Session((*id).to_owned())
        }
        ["redfish", "v1", "Systems"] => Resource::Systems,
        ["redfish", "v1", "Systems", id] => Resource::System((*id).to_owned()),
        [
            "redfish",
            "v1",
            "Systems",
            id,
            "Actions",
            "ComputerSystem.Reset",
        ] => Resource::ResetAction((*id).to_owned()),
        ["redfish", "v1", "Systems", id, "ResetActionInfo"] if action_info => {
            Resource::ResetActionInfo((*id).to_owned())
        }
        ["redfish", "v1", "TaskService"] if tasks => Resource::TaskService,
        ["redfish", "v1", "TaskService", "Tasks"] if tasks => Resource::Tasks,
        ["redfish", "v1", "TaskService", "Tasks", id] if tasks => Resource::Task((*id).to_owned()),
        ["redfish", "v1", "TaskService", "Tasks", id, "Monitor"] if tasks => {
            Resource::TaskMonitor((*id).to_owned())
        }
        _ => return None,
    };
    Some(resource)
}

fn is_redfish(path: &str) -> bool {
    path == "/redfish" || path.starts_with("/redfish/")
}

/// What the transport-level faults decided, before the request is looked at.
enum Early {
    Drop,
    Reply(Reply),
    Proceed,
}

fn early_fault(inner: &mut Inner, method: &Method, path: &str) -> Early {
    let f = &mut inner.faults;
    if let Some((status, location)) = &f.redirect_service_root
        && *method == Method::GET
        && path == "/redfish/v1"
    {
        let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::MOVED_PERMANENTLY);
        return Early::Reply(Reply::empty(status).header(LOCATION, location.clone()));
    }
    if let Some(status) = f.trailing_slash_redirect
        && !path.ends_with('/')
    {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::MOVED_PERMANENTLY);
        return Early::Reply(Reply::empty(status).header(LOCATION, format!("{path}/")));
    }
    if f.drop_connection > 0 {
        f.drop_connection -= 1;
        return Early::Drop;
    }
    if f.fail500 > 0 {
        f.fail500 -= 1;
        return Early::Reply(Reply::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "The request failed due to an internal service error. The service is still operational.",
            &[],
        ));
    }
    if f.redirect_loop {
        return Early::Reply(Reply::empty(StatusCode::FOUND).header(LOCATION, path));
    }
    if f.html_error_page {
        return Early::Reply(Reply::html(
            StatusCode::SERVICE_UNAVAILABLE,
            reply::html_error_page(),
        ));
    }
    if f.html_login_page {
        return Early::Reply(Reply::html(StatusCode::OK, reply::html_login_page()));
    }
    Early::Proceed
}

/// Waits while the Hang fault is in force.
async fn wait_while_hanging(shared: &Shared) {
    let mut changes = shared.watch_faults();
    while shared.lock().faults.hang {
        if changes.changed().await.is_err() {
            // The mock is shutting down; the connection will be closed.
            std::future::pending::<()>().await;
        }
    }
}

/// Answers every request the admin routes do not claim.
pub(crate) async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    if !is_redfish(&path) {
        let body = serde_json::json!({ "error": format!("no such path: {path}") });
        return (StatusCode::NOT_FOUND, axum::Json(body)).into_response();
    }
    let presented = Presented::from_headers(request.headers());
    let user_agent = request
        .headers()
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let key = shared.begin_request(method.as_str(), &path, presented.kind(), user_agent);
    tracing::debug!(%method, %path, auth = ?presented.kind(), "redfish request");

    wait_while_hanging(&shared).await;
    let slow = shared.lock().faults.slow;
    if let Some(delay) = slow {
        tokio::time::sleep(delay).await;
    }
    let body = axum::body::to_bytes(request.into_body(), MAX_BODY).await;

    let (reply, body_faults) = {
        let mut inner = shared.lock();
        let reply = match early_fault(&mut inner, &method, &path) {
            Early::Drop => return reply::dropped_connection(),
            Early::Reply(reply) => reply,
            Early::Proceed => match body {
                Ok(body) => answer(&shared, &mut inner, &method, &path, &presented, &body),
                Err(_) => Reply::error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "GeneralError",
                    "The request body is too large or could not be read.",
                    &[],
                ),
            },
        };
        let f = &inner.faults;
        let body_faults = BodyFaults {
            wrong_content_type: f.wrong_content_type,
            malformed_json: f.malformed_json,
            oversized_body: f.oversized_body,
            hostile_strings: f.hostile_strings,
        };
        (reply, body_faults)
    };
    shared.finish_request(key, reply.status.as_u16());
    reply.render(&body_faults)
}

/// Authentication, routing and the resource's answer.
fn answer(
    shared: &Shared,
    inner: &mut Inner,
    method: &Method,
    path: &str,
    presented: &Presented,
    body: &[u8],
) -> Reply {
    let resource = parse(shared, path);
    let public = resource.as_ref().is_some_and(|r| r.is_public(method));
    // Without a SessionService, its whole tree is plainly absent, even to anonymous
    // login attempts: 404, not 401, so a client knows to fall back to Basic.
    let no_sessions = !shared.config.profile.has_sessions()
        && (path == "/redfish/v1/SessionService"
            || path.starts_with("/redfish/v1/SessionService/"));
    if !public && !no_sessions {
        match authenticate(shared, inner, presented, path) {
            Err(reply) => return reply,
            Ok(role) => {
                // Reading needs Login; changing anything needs ConfigureComponents.
                // A session's owner may still log itself out.
                let own_logout =
                    matches!(resource, Some(Resource::Session(_))) && *method == Method::DELETE;
                if *method != Method::GET && !own_logout && !role.may_configure() {
                    return insufficient_privilege(shared);
                }
            }
        }
    }
    let Some(resource) = resource else {
        return Reply::error(
            StatusCode::NOT_FOUND,
            "ResourceMissingAtURI",
            &format!("The resource at the URI '{path}' was not found."),
            &[path],
        );
    };
    if !resource.allows(method) {
        let methods = resource.methods();
        let allow: Vec<&str> = methods.iter().map(Method::as_str).collect();
        return Reply::error(
            StatusCode::METHOD_NOT_ALLOWED,
            "OperationNotAllowed",
            &format!("The HTTP method {method} is not allowed on '{path}'."),
            &[],
        )
        .header(ALLOW, allow.join(", "));
    }
    resources::serve(shared, inner, method, &resource, presented, body)
}

/// Checks the presented credentials; the account's role, or the 401 to send.
pub(crate) fn authenticate(
    shared: &Shared,
    inner: &Inner,
    presented: &Presented,
    path: &str,
) -> Result<Role, Reply> {
    let accounts = &shared.config.accounts;
    let rejecting = inner.faults.reject_credentials;
    let no_session = || {
        Reply::error(
            StatusCode::UNAUTHORIZED,
            "NoValidSession",
            "There is no valid session established with the implementation.",
            &[],
        )
    };
    match presented {
        Presented::Token(token) if !rejecting => inner
            .sessions
            .by_token(token)
            .and_then(|s| role_named(accounts, &s.user))
            .ok_or_else(no_session),
        Presented::Token(_) => Err(no_session()),
        Presented::Basic { user, password } if !rejecting => {
            role_of(accounts, user, password).ok_or_else(|| unauthorized(path))
        }
        Presented::Basic { .. } | Presented::BadBasic | Presented::None => Err(unauthorized(path)),
    }
}

/// A write by a user without `ConfigureComponents`: the Base registry's
/// `InsufficientPrivilege`, with the status this service uses (401 or 403).
fn insufficient_privilege(shared: &Shared) -> Reply {
    let status =
        StatusCode::from_u16(shared.config.privilege_status).unwrap_or(StatusCode::FORBIDDEN);
    Reply::error(
        status,
        "InsufficientPrivilege",
        "There are insufficient privileges for the account or credentials associated with the current session to perform the requested operation.",
        &[],
    )
}

/// A 401 for missing or wrong credentials, inviting Basic authentication.
pub(crate) fn unauthorized(path: &str) -> Reply {
    Reply::error(
        StatusCode::UNAUTHORIZED,
        "ResourceAtUriUnauthorized",
        &format!("While accessing the resource at '{path}', the service received an authorization error 'Unauthorized'."),
        &[path, "Unauthorized"],
    )
    .header(WWW_AUTHENTICATE, "Basic realm=\"mock-redfish\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redfish_paths() {
        assert!(is_redfish("/redfish"));
        assert!(is_redfish("/redfish/v1/"));
        assert!(!is_redfish("/redfishy"));
        assert!(!is_redfish("/admin/systems"));
    }

    #[test]
    fn methods_per_resource() {
        assert!(Resource::Sessions.allows(&Method::POST));
        assert!(Resource::Sessions.is_public(&Method::POST));
        assert!(!Resource::Sessions.is_public(&Method::GET));
        assert!(!Resource::System("1".into()).allows(&Method::PATCH));
        assert!(Resource::ResetAction("1".into()).allows(&Method::POST));
        assert!(!Resource::ResetAction("1".into()).allows(&Method::GET));
    }
}
