//! The Redfish JSON documents the mock serves, shaped after real BMC output.
//!
//! Property names, `@odata` annotations and message registry ids follow the DMTF
//! schemas (ServiceRoot, ComputerSystemCollection, ComputerSystem, ActionInfo,
//! SessionService, Session, TaskService, Task, the Base message registry) and what
//! bmcweb, iDRAC and iLO actually emit; profiles differ only where real BMCs differ.

use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::model::MockPower;
use super::profile::{AllowableStyle, Profile};
use super::sessions::Session;
use super::state::Config;
use super::tasks::Task;

/// The Base message registry version used in message ids.
pub(crate) const BASE_REGISTRY: &str = "Base.1.16";

pub(crate) const ROOT: &str = "/redfish/v1";
pub(crate) const SYSTEMS: &str = "/redfish/v1/Systems";
pub(crate) const SESSION_SERVICE: &str = "/redfish/v1/SessionService";
pub(crate) const SESSIONS: &str = "/redfish/v1/SessionService/Sessions";
pub(crate) const TASK_SERVICE: &str = "/redfish/v1/TaskService";
pub(crate) const TASKS: &str = "/redfish/v1/TaskService/Tasks";

pub(crate) fn system_path(id: &str) -> String {
    format!("{SYSTEMS}/{id}")
}
pub(crate) fn reset_target(id: &str) -> String {
    format!("{SYSTEMS}/{id}/Actions/ComputerSystem.Reset")
}
pub(crate) fn action_info_path(id: &str) -> String {
    format!("{SYSTEMS}/{id}/ResetActionInfo")
}
pub(crate) fn session_path(id: &str) -> String {
    format!("{SESSIONS}/{id}")
}
pub(crate) fn task_path(id: u64) -> String {
    format!("{TASKS}/{id}")
}
pub(crate) fn monitor_path(id: u64) -> String {
    format!("{TASKS}/{id}/Monitor")
}

fn link(profile: Profile, path: &str) -> Value {
    json!({ "@odata.id": profile.uri(path) })
}

/// `@odata.id`, `@odata.type` and (for profiles that emit it) `@odata.context`.
fn resource(profile: Profile, path: &str, odata_type: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("@odata.id".into(), Value::String(profile.uri(path)));
    m.insert("@odata.type".into(), Value::String(odata_type.into()));
    if profile.identity().odata_context {
        // "#Namespace.vX_Y_Z.Type" -> "/redfish/v1/$metadata#Type.Type"
        let short = odata_type.rsplit('.').next().unwrap_or(odata_type);
        m.insert(
            "@odata.context".into(),
            Value::String(format!("/redfish/v1/$metadata#{short}.{short}")),
        );
    }
    m
}

/// `GET /redfish`: the protocol version document.
pub(crate) fn versions() -> Value {
    json!({ "v1": "/redfish/v1/" })
}

/// `GET /redfish/v1`.
pub(crate) fn service_root(config: &Config, with_tasks: bool) -> Value {
    let p = config.profile;
    let id = p.identity();
    let mut m = resource(p, ROOT, id.root_type);
    m.insert("Id".into(), json!("RootService"));
    m.insert("Name".into(), json!("Root Service"));
    m.insert("RedfishVersion".into(), json!(id.redfish_version));
    m.insert("UUID".into(), json!(config.service_uuid));
    if let Some(vendor) = id.vendor {
        m.insert("Vendor".into(), json!(vendor));
    }
    if let Some(product) = id.product {
        m.insert("Product".into(), json!(product));
    }
    m.insert("Systems".into(), link(p, SYSTEMS));
    let mut links = Map::new();
    if p.has_sessions() {
        m.insert("SessionService".into(), link(p, SESSION_SERVICE));
        links.insert("Sessions".into(), link(p, SESSIONS));
    }
    if with_tasks {
        m.insert("TaskService".into(), link(p, TASK_SERVICE));
    }
    m.insert("Links".into(), Value::Object(links));
    Value::Object(m)
}

fn collection(
    profile: Profile,
    path: &str,
    odata_type: &str,
    name: &str,
    members: &[String],
) -> Value {
    let mut m = resource(profile, path, odata_type);
    m.insert("Name".into(), json!(name));
    let members: Vec<Value> = members.iter().map(|p| link(profile, p)).collect();
    m.insert("Members@odata.count".into(), json!(members.len()));
    m.insert("Members".into(), Value::Array(members));
    Value::Object(m)
}

/// `GET /redfish/v1/Systems`.
pub(crate) fn systems_collection(profile: Profile, ids: &[String]) -> Value {
    let paths: Vec<String> = ids.iter().map(|id| system_path(id)).collect();
    collection(
        profile,
        SYSTEMS,
        "#ComputerSystemCollection.ComputerSystemCollection",
        "Computer System Collection",
        &paths,
    )
}

/// What a ComputerSystem GET shows.
pub(crate) struct SystemView<'a> {
    pub(crate) id: &'a str,
    pub(crate) name: &'a str,
    pub(crate) uuid: &'a str,
    pub(crate) reset_types: &'a [String],
    /// The `PowerState` to report; `None` leaves the property out.
    pub(crate) reported: Option<String>,
    /// The real state (for vendor extras that follow it).
    pub(crate) real: MockPower,
}

/// `GET /redfish/v1/Systems/{id}`.
pub(crate) fn computer_system(profile: Profile, s: &SystemView<'_>) -> Value {
    let identity = profile.identity();
    let mut m = resource(profile, &system_path(s.id), identity.system_type);
    m.insert("Id".into(), json!(s.id));
    m.insert("Name".into(), json!(s.name));
    m.insert("UUID".into(), json!(s.uuid));
    if let Some(reported) = &s.reported {
        m.insert("PowerState".into(), json!(reported));
    }
    if profile != Profile::Minimal {
        m.insert("SystemType".into(), json!("Physical"));
        m.insert(
            "Status".into(),
            json!({ "State": "Enabled", "Health": "OK" }),
        );
    }
    if let Some(manufacturer) = identity.manufacturer {
        m.insert("Manufacturer".into(), json!(manufacturer));
    }
    if let Some(model) = identity.model {
        m.insert("Model".into(), json!(model));
    }
    let mut reset = Map::new();
    reset.insert("target".into(), json!(profile.uri(&reset_target(s.id))));
    match profile.allowable_style() {
        AllowableStyle::Inline => {
            reset.insert(
                "ResetType@Redfish.AllowableValues".into(),
                json!(s.reset_types),
            );
        }
        AllowableStyle::ActionInfo => {
            reset.insert("@Redfish.ActionInfo".into(), json!(action_info_path(s.id)));
        }
        AllowableStyle::Unpublished => {}
    }
    m.insert("Actions".into(), json!({ "#ComputerSystem.Reset": reset }));
    if profile == Profile::Ilo {
        let post_state = if s.real == MockPower::Off {
            "PowerOff"
        } else {
            "FinishedPost"
        };
        m.insert("Oem".into(), json!({ "Hpe": { "PostState": post_state } }));
    }
    Value::Object(m)
}

/// `GET /redfish/v1/Systems/{id}/ResetActionInfo` (iDRAC style).
pub(crate) fn reset_action_info(profile: Profile, id: &str, reset_types: &[String]) -> Value {
    let mut m = resource(
        profile,
        &action_info_path(id),
        "#ActionInfo.v1_1_2.ActionInfo",
    );
    m.insert("Id".into(), json!("ResetActionInfo"));
    m.insert("Name".into(), json!("Reset Action Info"));
    m.insert(
        "Parameters".into(),
        json!([{
            "Name": "ResetType",
            "Required": true,
            "DataType": "String",
            "AllowableValues": reset_types,
        }]),
    );
    Value::Object(m)
}

/// `GET /redfish/v1/SessionService`.
pub(crate) fn session_service(profile: Profile, enabled: bool) -> Value {
    let mut m = resource(
        profile,
        SESSION_SERVICE,
        "#SessionService.v1_1_8.SessionService",
    );
    m.insert("Id".into(), json!("SessionService"));
    m.insert("Name".into(), json!("Session Service"));
    m.insert("ServiceEnabled".into(), json!(enabled));
    m.insert("SessionTimeout".into(), json!(1800));
    m.insert("Sessions".into(), link(profile, SESSIONS));
    Value::Object(m)
}

/// `GET /redfish/v1/SessionService/Sessions`.
pub(crate) fn sessions_collection(profile: Profile, ids: &[String]) -> Value {
    let paths: Vec<String> = ids.iter().map(|id| session_path(id)).collect();
    collection(
        profile,
        SESSIONS,
        "#SessionCollection.SessionCollection",
        "Session Collection",
        &paths,
    )
}

/// A Session resource (also the body of a successful login).
pub(crate) fn session(profile: Profile, s: &Session) -> Value {
    let mut m = resource(profile, &session_path(&s.id), "#Session.v1_5_0.Session");
    m.insert("Id".into(), json!(s.id));
    m.insert("Name".into(), json!("User Session"));
    m.insert("UserName".into(), json!(s.user));
    m.insert(
        "CreatedTime".into(),
        json!(humantime::format_rfc3339_seconds(s.created).to_string()),
    );
    Value::Object(m)
}

/// `GET /redfish/v1/TaskService`.
pub(crate) fn task_service(profile: Profile) -> Value {
    let mut m = resource(profile, TASK_SERVICE, "#TaskService.v1_2_0.TaskService");
    m.insert("Id".into(), json!("TaskService"));
    m.insert("Name".into(), json!("Task Service"));
    m.insert("ServiceEnabled".into(), json!(true));
    m.insert("Tasks".into(), link(profile, TASKS));
    Value::Object(m)
}

/// `GET /redfish/v1/TaskService/Tasks`.
pub(crate) fn tasks_collection(profile: Profile, ids: &[u64]) -> Value {
    let paths: Vec<String> = ids.iter().map(|id| task_path(*id)).collect();
    collection(
        profile,
        TASKS,
        "#TaskCollection.TaskCollection",
        "Task Collection",
        &paths,
    )
}

/// A Task resource, as of `now`.
pub(crate) fn task(profile: Profile, t: &Task, now: Instant) -> Value {
    let done = t.is_done(now);
    let mut m = resource(profile, &task_path(t.id), "#Task.v1_4_3.Task");
    m.insert("Id".into(), json!(t.id.to_string()));
    m.insert("Name".into(), json!(format!("Task {}", t.id)));
    m.insert(
        "TaskState".into(),
        json!(if done { "Completed" } else { "Running" }),
    );
    m.insert("TaskStatus".into(), json!("OK"));
    m.insert("PercentComplete".into(), json!(t.percent(now)));
    m.insert(
        "TaskMonitor".into(),
        json!(profile.uri(&monitor_path(t.id))),
    );
    m.insert(
        "StartTime".into(),
        json!(humantime::format_rfc3339_seconds(t.started).to_string()),
    );
    if done {
        m.insert(
            "EndTime".into(),
            json!(humantime::format_rfc3339_seconds(t.ended()).to_string()),
        );
    }
    let messages = if done {
        vec![message(
            "Success",
            "The request completed successfully.",
            &[],
            "OK",
        )]
    } else {
        vec![message(
            "TaskStarted",
            &format!("The task with Id '{}' has started.", t.id),
            &[&t.id.to_string()],
            "OK",
        )]
    };
    m.insert("Messages".into(), Value::Array(messages));
    m.insert(
        "Payload".into(),
        json!({
            "HttpOperation": "POST",
            "TargetUri": t.target,
            "JsonBody": json!({ "ResetType": t.reset_type }).to_string(),
            "HttpHeaders": [],
        }),
    );
    m.insert("Oem".into(), json!({ "Mock": { "SystemId": t.system } }));
    Value::Object(m)
}

/// A Base registry message (`@Message.ExtendedInfo` entry).
pub(crate) fn message(id: &str, text: &str, args: &[&str], severity: &str) -> Value {
    json!({
        "@odata.type": "#Message.v1_1_1.Message",
        "MessageId": format!("{BASE_REGISTRY}.{id}"),
        "Message": text,
        "MessageArgs": args,
        "MessageSeverity": severity,
        "Severity": severity,
        "Resolution": "None",
    })
}

/// A Redfish error body: `{"error": {"code", "message", "@Message.ExtendedInfo"}}`.
pub(crate) fn error(id: &str, text: &str, args: &[&str]) -> Value {
    json!({
        "error": {
            "code": format!("{BASE_REGISTRY}.GeneralError"),
            "message": text,
            "@Message.ExtendedInfo": [message(id, text, args, "Critical")],
        }
    })
}

/// The body of a Reset answered `200 OK` (iDRAC).
pub(crate) fn success() -> Value {
    json!({
        "@Message.ExtendedInfo": [message(
            "Success",
            "The request completed successfully.",
            &[],
            "OK",
        )]
    })
}
