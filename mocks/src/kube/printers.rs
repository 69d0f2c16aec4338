//! The per-type half of server-side printing: each type's columns and how the real
//! printers compute its cells (node STATUS and ROLES, pod READY/STATUS/RESTARTS,
//! event OBJECT, access modes...). [`super::table`] assembles them into Tables.

use std::time::SystemTime;

use serde_json::{Value, json};

use super::deletion::is_terminating;
use super::resources::ResourceType;
use super::table::age;

/// A column: name, type, priority (1 = only with `-o wide`).
pub(crate) type Column = (&'static str, &'static str, u8);

pub(crate) fn columns(rt: ResourceType) -> &'static [Column] {
    match (rt.group, rt.plural) {
        ("", "nodes") => &[
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Roles", "string", 0),
            ("Age", "string", 0),
            ("Version", "string", 0),
            ("Internal-IP", "string", 1),
            ("External-IP", "string", 1),
            ("OS-Image", "string", 1),
            ("Kernel-Version", "string", 1),
            ("Container-Runtime", "string", 1),
        ],
        ("", "pods") => &[
            ("Name", "string", 0),
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", "string", 0),
            ("Age", "string", 0),
            ("IP", "string", 1),
            ("Node", "string", 1),
            ("Nominated Node", "string", 1),
            ("Readiness Gates", "string", 1),
        ],
        ("storage.k8s.io", "volumeattachments") => &[
            ("Name", "string", 0),
            ("Attacher", "string", 0),
            ("PV", "string", 0),
            ("Node", "string", 0),
            ("Attached", "boolean", 0),
            ("Age", "string", 0),
        ],
        ("", "namespaces") => &[
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Age", "string", 0),
        ],
        ("coordination.k8s.io", "leases") => &[
            ("Name", "string", 0),
            ("Holder", "string", 0),
            ("Age", "string", 0),
        ],
        ("" | "events.k8s.io", "events") => &[
            ("Last Seen", "string", 0),
            ("Type", "string", 0),
            ("Reason", "string", 0),
            ("Object", "string", 0),
            ("Message", "string", 0),
        ],
        ("", "persistentvolumeclaims") => &[
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Volume", "string", 0),
            ("Capacity", "string", 0),
            ("Access Modes", "string", 0),
            ("StorageClass", "string", 0),
            ("Age", "string", 0),
        ],
        ("", "persistentvolumes") => &[
            ("Name", "string", 0),
            ("Capacity", "string", 0),
            ("Access Modes", "string", 0),
            ("Reclaim Policy", "string", 0),
            ("Status", "string", 0),
            ("Claim", "string", 0),
            ("StorageClass", "string", 0),
            ("Age", "string", 0),
        ],
        // The generic convertor the real server (1.33) uses for CRDs.
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            &[("Name", "string", 0), ("Created At", "date", 0)]
        }
        _ => &[("Name", "string", 0), ("Age", "string", 0)],
    }
}

fn str_at<'a>(o: &'a Value, pointer: &str) -> Option<&'a str> {
    o.pointer(pointer).and_then(Value::as_str)
}

fn or_none(s: Option<&str>) -> String {
    match s {
        Some(s) if !s.is_empty() => s.to_owned(),
        _ => "<none>".to_owned(),
    }
}

/// The cells of one row.
pub(crate) fn cells(rt: ResourceType, o: &Value, now: SystemTime) -> Vec<Value> {
    let name = json!(str_at(o, "/metadata/name").unwrap_or_default());
    let age_cell = json!(age(str_at(o, "/metadata/creationTimestamp"), now));
    match (rt.group, rt.plural) {
        ("", "nodes") => {
            let address = |t: &str| {
                o.pointer("/status/addresses")
                    .and_then(Value::as_array)
                    .and_then(|a| a.iter().find(|x| x["type"] == t))
                    .and_then(|x| x["address"].as_str())
                    .map(str::to_owned)
            };
            vec![
                name,
                json!(node_status(o)),
                json!(node_roles(o)),
                age_cell,
                json!(str_at(o, "/status/nodeInfo/kubeletVersion").unwrap_or_default()),
                json!(or_none(address("InternalIP").as_deref())),
                json!(or_none(address("ExternalIP").as_deref())),
                json!(str_at(o, "/status/nodeInfo/osImage").unwrap_or("<unknown>")),
                json!(str_at(o, "/status/nodeInfo/kernelVersion").unwrap_or("<unknown>")),
                json!(str_at(o, "/status/nodeInfo/containerRuntimeVersion").unwrap_or("<unknown>")),
            ]
        }
        ("", "pods") => {
            let statuses = o
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array);
            let total = o
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let ready = statuses.map_or(0, |s| s.iter().filter(|c| c["ready"] == true).count());
            let restarts: i64 = statuses.map_or(0, |s| {
                s.iter().filter_map(|c| c["restartCount"].as_i64()).sum()
            });
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(pod_status(o)),
                json!(restarts.to_string()),
                age_cell,
                json!(or_none(str_at(o, "/status/podIP"))),
                json!(or_none(str_at(o, "/spec/nodeName"))),
                json!(or_none(str_at(o, "/status/nominatedNodeName"))),
                json!("<none>"),
            ]
        }
        ("storage.k8s.io", "volumeattachments") => vec![
            name,
            json!(str_at(o, "/spec/attacher").unwrap_or_default()),
            json!(str_at(o, "/spec/source/persistentVolumeName").unwrap_or_default()),
            json!(str_at(o, "/spec/nodeName").unwrap_or_default()),
            json!(
                o.pointer("/status/attached")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            ),
            age_cell,
        ],
        ("", "namespaces") => vec![
            name,
            json!(str_at(o, "/status/phase").unwrap_or_default()),
            age_cell,
        ],
        ("coordination.k8s.io", "leases") => vec![
            name,
            json!(str_at(o, "/spec/holderIdentity").unwrap_or_default()),
            age_cell,
        ],
        ("", "events") => vec![
            json!(age(
                str_at(o, "/lastTimestamp")
                    .or_else(|| str_at(o, "/eventTime"))
                    .or_else(|| str_at(o, "/metadata/creationTimestamp")),
                now
            )),
            json!(str_at(o, "/type").unwrap_or_default()),
            json!(str_at(o, "/reason").unwrap_or_default()),
            json!(object_ref(o.get("involvedObject"))),
            json!(str_at(o, "/message").unwrap_or_default()),
        ],
        ("events.k8s.io", "events") => vec![
            json!(age(
                str_at(o, "/series/lastObservedTime")
                    .or_else(|| str_at(o, "/eventTime"))
                    .or_else(|| str_at(o, "/metadata/creationTimestamp")),
                now
            )),
            json!(str_at(o, "/type").unwrap_or_default()),
            json!(str_at(o, "/reason").unwrap_or_default()),
            json!(object_ref(o.get("regarding"))),
            json!(str_at(o, "/note").unwrap_or_default()),
        ],
        ("", "persistentvolumeclaims") => vec![
            name,
            json!(str_at(o, "/status/phase").unwrap_or_default()),
            json!(str_at(o, "/spec/volumeName").unwrap_or_default()),
            json!(str_at(o, "/status/capacity/storage").unwrap_or_default()),
            json!(access_modes(o.pointer("/status/accessModes"))),
            json!(or_none(str_at(o, "/spec/storageClassName"))),
            age_cell,
        ],
        ("", "persistentvolumes") => {
            let claim = match (
                str_at(o, "/spec/claimRef/namespace"),
                str_at(o, "/spec/claimRef/name"),
            ) {
                (Some(ns), Some(n)) => format!("{ns}/{n}"),
                _ => String::new(),
            };
            vec![
                name,
                json!(str_at(o, "/spec/capacity/storage").unwrap_or_default()),
                json!(access_modes(o.pointer("/spec/accessModes"))),
                json!(str_at(o, "/spec/persistentVolumeReclaimPolicy").unwrap_or_default()),
                json!(str_at(o, "/status/phase").unwrap_or_default()),
                json!(claim),
                json!(str_at(o, "/spec/storageClassName").unwrap_or_default()),
                age_cell,
            ]
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => vec![
            name,
            json!(str_at(o, "/metadata/creationTimestamp").unwrap_or_default()),
        ],
        _ => vec![name, age_cell],
    }
}

/// `kind/name` of an event's object, kind in lower case (`node/worker-1`).
fn object_ref(r: Option<&Value>) -> String {
    let Some(r) = r else {
        return String::new();
    };
    let kind = r["kind"].as_str().unwrap_or_default().to_ascii_lowercase();
    format!("{kind}/{}", r["name"].as_str().unwrap_or_default())
}

/// `RWO,RWX`-style access modes.
fn access_modes(modes: Option<&Value>) -> String {
    modes
        .and_then(Value::as_array)
        .map(|m| {
            m.iter()
                .filter_map(Value::as_str)
                .map(|m| match m {
                    "ReadWriteOnce" => "RWO",
                    "ReadOnlyMany" => "ROX",
                    "ReadWriteMany" => "RWX",
                    "ReadWriteOncePod" => "RWOP",
                    other => other,
                })
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// `Ready`/`NotReady`/`Unknown` from the Ready condition, `,SchedulingDisabled`
/// when cordoned.
fn node_status(o: &Value) -> String {
    let ready = o
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["status"].as_str());
    let mut s = match ready {
        Some("True") => "Ready".to_owned(),
        Some(_) => "NotReady".to_owned(),
        None => "Unknown".to_owned(),
    };
    if o.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
        s.push_str(",SchedulingDisabled");
    }
    s
}

/// Roles from `node-role.kubernetes.io/<role>` and `kubernetes.io/role` labels.
fn node_roles(o: &Value) -> String {
    let mut roles: Vec<String> = Vec::new();
    if let Some(labels) = o.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, v) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.push(role.to_owned());
                }
            } else if k == "kubernetes.io/role"
                && let Some(v) = v.as_str().filter(|v| !v.is_empty())
            {
                roles.push(v.to_owned());
            }
        }
    }
    roles.sort();
    roles.dedup();
    if roles.is_empty() {
        "<none>".to_owned()
    } else {
        roles.join(",")
    }
}

/// The pod STATUS column: the phase, a reason, a container's waiting/terminated
/// reason, or `Terminating` (`Unknown` when the node was lost).
fn pod_status(o: &Value) -> String {
    let mut reason = str_at(o, "/status/reason")
        .or_else(|| str_at(o, "/status/phase"))
        .unwrap_or("Pending")
        .to_owned();
    if let Some(statuses) = o
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
    {
        for c in statuses {
            if let Some(r) = c.pointer("/state/waiting/reason").and_then(Value::as_str) {
                reason = r.to_owned();
            } else if let Some(r) = c
                .pointer("/state/terminated/reason")
                .and_then(Value::as_str)
            {
                reason = r.to_owned();
            }
        }
    }
    if is_terminating(o) {
        if str_at(o, "/status/reason") == Some("NodeLost") {
            return "Unknown".to_owned();
        }
        return "Terminating".to_owned();
    }
    reason
}
