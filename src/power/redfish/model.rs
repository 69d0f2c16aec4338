//! The few Redfish resources nodefence reads, as lenient serde types.
//!
//! Real BMCs differ in what they include, so every field is optional here and the
//! driver decides what a missing field means (never "off").

use serde::Deserialize;
use serde_json::Value;

use crate::untrusted;

/// `{"@odata.id": "..."}`
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Link {
    #[serde(rename = "@odata.id")]
    pub odata_id: String,
}

/// `/redfish/v1`
#[derive(Debug, Clone, Deserialize, Default)]
pub struct ServiceRoot {
    #[serde(rename = "Systems")]
    pub systems: Option<Link>,
    #[serde(rename = "SessionService")]
    pub session_service: Option<Link>,
    #[serde(rename = "Links", default)]
    pub links: ServiceRootLinks,
}

#[derive(Debug, Clone, Deserialize, Default)]
pub struct ServiceRootLinks {
    #[serde(rename = "Sessions")]
    pub sessions: Option<Link>,
}

/// A resource collection (`/redfish/v1/Systems`).
#[derive(Debug, Clone, Deserialize)]
pub struct Collection {
    #[serde(rename = "Members", default)]
    pub members: Vec<Link>,
}

/// The parts of a ComputerSystem nodefence uses.
#[derive(Debug, Clone, Deserialize)]
pub struct ComputerSystem {
    #[serde(rename = "Id")]
    pub id: Option<String>,
    /// Kept raw: absent, null or a vendor string must stay distinguishable.
    #[serde(rename = "PowerState")]
    pub power_state: Option<Value>,
    /// Kept raw: a null or non-string UUID must not spoil a power reading.
    #[serde(rename = "UUID")]
    pub uuid: Option<Value>,
    #[serde(rename = "Actions")]
    pub actions: Option<SystemActions>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SystemActions {
    #[serde(rename = "#ComputerSystem.Reset")]
    pub reset: Option<ResetAction>,
}

/// `Actions["#ComputerSystem.Reset"]`
#[derive(Debug, Clone, Deserialize)]
pub struct ResetAction {
    pub target: Option<String>,
    #[serde(rename = "ResetType@Redfish.AllowableValues")]
    pub allowable_values: Option<Vec<String>>,
    #[serde(rename = "@Redfish.ActionInfo")]
    pub action_info: Option<String>,
}

/// An ActionInfo resource: the parameters an action accepts.
#[derive(Debug, Clone, Deserialize)]
pub struct ActionInfo {
    #[serde(rename = "Parameters", default)]
    pub parameters: Vec<ActionParameter>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ActionParameter {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "AllowableValues")]
    pub allowable_values: Option<Vec<String>>,
}

/// A Task (what a task monitor finally returns).
#[derive(Debug, Clone, Deserialize)]
pub struct Task {
    #[serde(rename = "TaskState")]
    pub task_state: Option<String>,
    #[serde(rename = "Messages", default)]
    pub messages: Vec<Value>,
}

/// True when a Redfish error body says the account lacks the privilege (the Base
/// registry's `InsufficientPrivilege`, in `error.code` or any `MessageId`).
pub fn is_insufficient_privilege(body: &Value) -> bool {
    let Some(error) = body.get("error") else {
        return false;
    };
    let names = |v: Option<&Value>| {
        v.and_then(Value::as_str).is_some_and(|id| {
            id.ends_with(".InsufficientPrivilege") || id == "InsufficientPrivilege"
        })
    };
    names(error.get("code"))
        || error
            .get("@Message.ExtendedInfo")
            .and_then(Value::as_array)
            .is_some_and(|infos| infos.iter().any(|i| names(i.get("MessageId"))))
}

/// How many `@Message.ExtendedInfo` entries of one error are shown.
const MAX_EXTENDED_INFO: usize = 4;

/// Extracts the human text from a Redfish error body (escaped and capped: it is the
/// BMC's text)
/// (`{"error":{"message":..., "@Message.ExtendedInfo":[{"Message":...}]}}`).
pub fn error_message(body: &Value) -> Option<String> {
    let error = body.get("error")?;
    let mut parts = Vec::new();
    if let Some(m) = error.get("message").and_then(Value::as_str) {
        parts.push(untrusted::field(m));
    }
    if let Some(infos) = error.get("@Message.ExtendedInfo").and_then(Value::as_array) {
        for info in infos.iter().take(MAX_EXTENDED_INFO) {
            if let Some(m) = info
                .get("Message")
                .and_then(Value::as_str)
                .map(untrusted::field)
                && !parts.contains(&m)
            {
                parts.push(m);
            }
        }
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}
