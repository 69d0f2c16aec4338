//! What each Redfish resource answers once a request is authenticated and routed.
//!
//! The rule throughout: a GET reports the system's real current state, unless a
//! fault that lies is in force; a Reset is validated against the system's allowable
//! values, logged, and then changes the state the way the machine would (through
//! `PoweringOff`/`PoweringOn` when a transition delay is set).

use axum::http::header::{LOCATION, RETRY_AFTER, WWW_AUTHENTICATE};
use axum::http::{HeaderName, Method, StatusCode};
use serde_json::Value;
use tokio::time::Instant;

use super::accounts::{BASIC_REQUIRED_MESSAGE, SessionLogin, role_of};
use super::faults::PowerStateOverride;
use super::model::{MockPower, ResetKind};
use super::payloads::{self, SystemView};
use super::profile::ResetResponse;
use super::reply::Reply;
use super::service::{Resource, unauthorized};
use super::sessions::Presented;
use super::state::{Inner, ResetRecord, Shared};

/// Answers an authenticated (or public) request for `resource`.
pub(crate) fn serve(
    shared: &Shared,
    inner: &mut Inner,
    method: &Method,
    resource: &Resource,
    presented: &Presented,
    body: &[u8],
) -> Reply {
    let profile = shared.config.profile;
    let with_tasks = shared.config.reset_response == ResetResponse::AcceptedTask;
    match resource {
        Resource::Versions => Reply::ok(payloads::versions()),
        Resource::Root => Reply::ok(payloads::service_root(&shared.config, with_tasks)),
        Resource::SessionService => Reply::ok(payloads::session_service(
            profile,
            shared.config.session_login != SessionLogin::Refused,
        )),
        Resource::Sessions if method == Method::POST => login(shared, inner, presented, body),
        Resource::Sessions => Reply::ok(payloads::sessions_collection(
            profile,
            &inner.sessions.ids(),
        )),
        Resource::Session(id) if method == Method::DELETE => {
            if inner.sessions.delete(id) {
                Reply::empty(StatusCode::NO_CONTENT)
            } else {
                not_found(&payloads::session_path(id))
            }
        }
        Resource::Session(id) => match inner.sessions.by_id(id) {
            Some(session) => Reply::ok(payloads::session(profile, session)),
            None => not_found(&payloads::session_path(id)),
        },
        Resource::Systems => {
            let ids: Vec<String> = inner.systems.iter().map(|s| s.id.clone()).collect();
            Reply::ok(payloads::systems_collection(profile, &ids))
        }
        Resource::System(id) => get_system(shared, inner, id),
        Resource::ResetActionInfo(id) => match inner.system_mut(id) {
            Some(s) => Reply::ok(payloads::reset_action_info(profile, id, &s.reset_types)),
            None => not_found(&payloads::action_info_path(id)),
        },
        Resource::ResetAction(id) => reset(shared, inner, id, body),
        Resource::TaskService => Reply::ok(payloads::task_service(profile)),
        Resource::Tasks => Reply::ok(payloads::tasks_collection(profile, &inner.tasks.ids())),
        Resource::Task(id) => match inner.tasks.get(id) {
            Some(task) => Reply::ok(payloads::task(profile, task, Instant::now())),
            None => not_found(&format!("{}/{id}", payloads::TASKS)),
        },
        Resource::TaskMonitor(id) => match inner.tasks.get(id) {
            Some(task) => {
                let now = Instant::now();
                let body = payloads::task(profile, task, now);
                if task.is_done(now) {
                    Reply::ok(body)
                } else {
                    let monitor = location(shared, &payloads::monitor_path(task.id));
                    Reply::json(StatusCode::ACCEPTED, body)
                        .header(LOCATION, monitor)
                        .header(RETRY_AFTER, "1")
                }
            }
            None => not_found(&format!("{}/{id}/Monitor", payloads::TASKS)),
        },
    }
}

fn not_found(path: &str) -> Reply {
    Reply::error(
        StatusCode::NOT_FOUND,
        "ResourceNotFound",
        &format!("The requested resource '{path}' was not found."),
        &[path],
    )
}

/// A `Location` value: iLO sends absolute URLs with a trailing slash, others paths.
fn location(shared: &Shared, path: &str) -> String {
    let profile = shared.config.profile;
    if profile.ilo_style_uris() {
        format!("{}{}", shared.config.base_url, profile.uri(path))
    } else {
        path.to_owned()
    }
}

fn bad_request(id: &str, text: &str, args: &[&str]) -> Reply {
    Reply::error(StatusCode::BAD_REQUEST, id, text, args)
}

/// Parses a JSON object body.
fn json_object(body: &[u8]) -> Result<serde_json::Map<String, Value>, Reply> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(bad_request(
            "MalformedJSON",
            "The request body submitted was malformed JSON and could not be parsed by the receiving service.",
            &[],
        )),
    }
}

/// `POST /redfish/v1/SessionService/Sessions`, as [`SessionLogin`] says.
fn login(shared: &Shared, inner: &mut Inner, presented: &Presented, body: &[u8]) -> Reply {
    let config = &shared.config;
    let basic_missing = || {
        Reply::error(
            StatusCode::UNAUTHORIZED,
            "ResourceAtUriUnauthorized",
            BASIC_REQUIRED_MESSAGE,
            &[payloads::SESSIONS, "Unauthorized"],
        )
        .header(WWW_AUTHENTICATE, "Basic realm=\"mock-redfish\"")
    };
    match config.session_login {
        SessionLogin::Refused => return basic_missing(),
        SessionLogin::BasicRequired => {
            let valid = matches!(presented, Presented::Basic { user, password }
                if !inner.faults.reject_credentials
                    && role_of(&config.accounts, user, password).is_some());
            if !valid {
                return basic_missing();
            }
        }
        SessionLogin::Open => {}
    }
    let body = match json_object(body) {
        Ok(b) => b,
        Err(reply) => return reply,
    };
    let field = |name: &str| body.get(name).and_then(Value::as_str).map(str::to_owned);
    let (Some(user), Some(password)) = (field("UserName"), field("Password")) else {
        let missing = if field("UserName").is_none() {
            "UserName"
        } else {
            "Password"
        };
        return bad_request(
            "PropertyMissing",
            &format!(
                "The property {missing} is a required property and must be included in the request."
            ),
            &[missing],
        );
    };
    if inner.faults.reject_credentials || role_of(&config.accounts, &user, &password).is_none() {
        return unauthorized(payloads::SESSIONS);
    }
    let session = inner.sessions.create(&user, config.profile);
    let uri = location(shared, &payloads::session_path(&session.id));
    Reply::json(
        StatusCode::CREATED,
        payloads::session(config.profile, &session),
    )
    .header(
        HeaderName::from_static("x-auth-token"),
        session.token.clone(),
    )
    .header(LOCATION, uri)
}

/// `GET /redfish/v1/Systems/{id}`: the real state, unless a lying fault says otherwise.
fn get_system(shared: &Shared, inner: &mut Inner, id: &str) -> Reply {
    let now = Instant::now();
    let override_ = inner.faults.power_state.clone();
    let flap = inner.faults.flap;
    let Some(system) = inner.system_mut(id) else {
        return not_found(&payloads::system_path(id));
    };
    let real = system.power(now);
    let reported = match override_ {
        Some(PowerStateOverride::Absent) => None,
        Some(PowerStateOverride::Value(v)) => Some(v),
        None if flap && real == MockPower::Off => {
            let shown = if system.flap_reads % 2 == 0 {
                MockPower::Off
            } else {
                MockPower::On
            };
            system.flap_reads += 1;
            Some(shown.as_str().to_owned())
        }
        None => Some(real.as_str().to_owned()),
    };
    let view = SystemView {
        id: &system.id,
        name: &system.name,
        uuid: &system.uuid,
        reset_types: &system.reset_types,
        reported,
        real,
    };
    Reply::ok(payloads::computer_system(shared.config.profile, &view))
}

/// `POST /redfish/v1/Systems/{id}/Actions/ComputerSystem.Reset`.
fn reset(shared: &Shared, inner: &mut Inner, id: &str, body: &[u8]) -> Reply {
    let now = Instant::now();
    let config = &shared.config;
    if inner.system_mut(id).is_none() {
        return not_found(&payloads::reset_target(id));
    }
    let body = match json_object(body) {
        Ok(b) => b,
        Err(reply) => return reply,
    };
    let reset_type = match body.get("ResetType") {
        None => {
            return bad_request(
                "ActionParameterMissing",
                "The action ComputerSystem.Reset requires the parameter ResetType to be present in the request body.",
                &["ComputerSystem.Reset", "ResetType"],
            );
        }
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            let shown = other.to_string();
            return bad_request(
                "ActionParameterValueTypeError",
                &format!(
                    "The value '{shown}' for the parameter ResetType in the action ComputerSystem.Reset is of a different type than the parameter can accept."
                ),
                &[&shown, "ResetType", "ComputerSystem.Reset"],
            );
        }
    };
    inner.resets.push(ResetRecord {
        system: id.to_owned(),
        reset_type: reset_type.clone(),
    });
    inner.reset_times.push(Instant::now());
    let lie = inner.faults.lie_on_after_off;
    let refuse_when_off = inner.faults.reject_reset_when_off;
    let Some(system) = inner.system_mut(id) else {
        return not_found(&payloads::reset_target(id));
    };
    if !system.reset_types.contains(&reset_type) {
        return bad_request(
            "ActionParameterValueNotInList",
            &format!(
                "The value '{reset_type}' for the parameter ResetType in the action ComputerSystem.Reset is not in the list of acceptable values."
            ),
            &[&reset_type, "ResetType", "ComputerSystem.Reset"],
        );
    }
    let kind = ResetKind::parse(&reset_type);
    let current = system.power(now);
    if refuse_when_off && current == MockPower::Off && kind.needs_power() {
        return bad_request(
            "OperationNotAllowed",
            &format!(
                "The operation was not successful because the resource is in a state that does not allow this operation: the system is already powered off ({reset_type} refused)."
            ),
            &[],
        );
    }
    let done_at = if lie && kind.powers_off(current) {
        tracing::debug!(system = id, %reset_type, "LieOnAfterOff: accepting and ignoring");
        now
    } else {
        system.apply_reset(kind, now, config.delay)
    };
    match config.reset_response {
        ResetResponse::NoContent => Reply::empty(StatusCode::NO_CONTENT),
        ResetResponse::OkWithBody => Reply::ok(payloads::success()),
        ResetResponse::AcceptedTask => {
            let target = config.profile.uri(&payloads::reset_target(id));
            let task = inner.tasks.create(id, &reset_type, &target, now, done_at);
            let monitor = location(shared, &payloads::monitor_path(task.id));
            Reply::json(
                StatusCode::ACCEPTED,
                payloads::task(config.profile, &task, now),
            )
            .header(LOCATION, monitor)
        }
    }
}
