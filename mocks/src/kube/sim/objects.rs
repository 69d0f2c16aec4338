//! Reading and editing Kubernetes objects kept as JSON, defensively.
//!
//! The store holds whatever clients wrote: nodefence patches Nodes, tests create
//! Pods by hand, kubectl edits anything. Every accessor here tolerates missing or
//! mistyped fields (a controller must never panic on someone else's object), and every
//! editor changes only the field it names, creating parents as needed.

use serde_json::{Map, Value, json};

use super::super::store::now_rfc3339;

/// `Value::pointer` without its allocations: serde_json un-escapes every token into a
/// new String, and the simulated controllers read thousands of fields a second.
/// Same answers (RFC 6901; escaped pointers go to serde_json).
pub trait At {
    fn at(&self, pointer: &str) -> Option<&Value>;
}

impl At for Value {
    fn at(&self, pointer: &str) -> Option<&Value> {
        if pointer.is_empty() {
            return Some(self);
        }
        if pointer.contains('~') {
            return self.pointer(pointer);
        }
        pointer
            .strip_prefix('/')?
            .split('/')
            .try_fold(self, |v, token| match v {
                Value::Object(map) => map.get(token),
                Value::Array(list) => array_index(token).and_then(|i| list.get(i)),
                _ => None,
            })
    }
}

/// An array index token as RFC 6901 allows it (no sign, no leading zero).
fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// A string field at a JSON pointer.
pub fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.at(ptr).and_then(Value::as_str)
}

/// `metadata.name` ("" when missing).
pub fn name(v: &Value) -> &str {
    str_at(v, "/metadata/name").unwrap_or_default()
}

/// `metadata.namespace` ("" when missing).
pub fn namespace(v: &Value) -> &str {
    str_at(v, "/metadata/namespace").unwrap_or_default()
}

/// `metadata.uid` ("" when missing).
pub fn uid(v: &Value) -> &str {
    str_at(v, "/metadata/uid").unwrap_or_default()
}

/// `namespace/name`, the key controllers use for namespaced objects.
pub fn key(v: &Value) -> String {
    format!("{}/{}", namespace(v), name(v))
}

/// A label value.
pub fn label<'a>(v: &'a Value, label: &str) -> Option<&'a str> {
    v.at("/metadata/labels")
        .and_then(|l| l.get(label))
        .and_then(Value::as_str)
}

/// An annotation value.
pub fn annotation<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.at("/metadata/annotations")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

/// Whether the object has a `deletionTimestamp`.
pub fn is_terminating(v: &Value) -> bool {
    v.at("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// A pod's `spec.nodeName`, when bound.
pub fn pod_node(pod: &Value) -> Option<&str> {
    str_at(pod, "/spec/nodeName").filter(|n| !n.is_empty())
}

/// A pod's `status.phase` ("" when missing).
pub fn phase(pod: &Value) -> &str {
    str_at(pod, "/status/phase").unwrap_or_default()
}

/// Whether the pod reached `Succeeded` or `Failed`.
pub fn is_terminal(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// A condition of `status.conditions` by type.
pub fn condition<'a>(v: &'a Value, kind: &str) -> Option<&'a Value> {
    v.at("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

/// The status ("True", "False", "Unknown") of a condition.
pub fn condition_status<'a>(v: &'a Value, kind: &str) -> Option<&'a str> {
    condition(v, kind)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
}

/// Whether a Node's Ready condition is True.
pub fn node_ready(node: &Value) -> bool {
    condition_status(node, "Ready") == Some("True")
}

/// Whether a pod is Running with its Ready condition True.
pub fn pod_running_ready(pod: &Value) -> bool {
    phase(pod) == "Running" && condition_status(pod, "Ready") == Some("True")
}

/// The `(volume name, claim name)` of each PVC volume of a pod.
pub fn pod_claims(pod: &Value) -> Vec<(String, String)> {
    pod.at("/spec/volumes")
        .and_then(Value::as_array)
        .map(|vols| {
            vols.iter()
                .filter_map(|v| {
                    let claim = str_at(v, "/persistentVolumeClaim/claimName")?;
                    let name = v.get("name").and_then(Value::as_str).unwrap_or(claim);
                    Some((name.to_string(), claim.to_string()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The container names of a pod.
pub fn container_names(pod: &Value) -> Vec<String> {
    pod.at("/spec/containers")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.get("name").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The attach/detach controller's `IsPodTerminated`: a terminal phase, or being
/// deleted with no container running. A pod on a dead node that still shows running
/// containers is *not* terminated, so its volumes stay wanted on that node.
pub fn is_pod_terminated(pod: &Value) -> bool {
    if is_terminal(pod) {
        return true;
    }
    if !is_terminating(pod) {
        return false;
    }
    let running = |field: &str| {
        pod.pointer(&format!("/status/{field}"))
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.at("/state/running").is_some_and(|r| !r.is_null()))
            })
    };
    !(running("containerStatuses")
        || running("initContainerStatuses")
        || running("ephemeralContainerStatuses"))
}

/// The map at `path` under `v`, created (replacing non-objects) as needed.
pub fn obj_mut<'a>(v: &'a mut Value, path: &[&str]) -> &'a mut Map<String, Value> {
    let mut cur = v;
    for seg in path {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let Value::Object(map) = cur else {
            unreachable!("made an object above")
        };
        cur = map
            .entry(seg.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !cur.is_object() {
        *cur = Value::Object(Map::new());
    }
    match cur {
        Value::Object(m) => m,
        _ => unreachable!("made an object above"),
    }
}

/// The array at `path` under `v`, created (replacing non-arrays) as needed.
pub fn arr_mut<'a>(v: &'a mut Value, path: &[&str]) -> &'a mut Vec<Value> {
    let Some((last, parents)) = path.split_last() else {
        if !v.is_array() {
            *v = Value::Array(Vec::new());
        }
        return match v {
            Value::Array(a) => a,
            _ => unreachable!("made an array above"),
        };
    };
    let parent = obj_mut(v, parents);
    let slot = parent
        .entry(last.to_string())
        .or_insert_with(|| Value::Array(Vec::new()));
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    match slot {
        Value::Array(a) => a,
        _ => unreachable!("made an array above"),
    }
}

/// Sets a `status.conditions` entry the way `UpdatePodCondition` does: a new
/// status moves `lastTransitionTime`, the same status keeps it. Other fields of
/// `cond` (reason, message, lastHeartbeatTime, ...) are written as given. Returns
/// whether anything but heartbeat/probe times changed.
pub fn set_condition(obj: &mut Value, cond: Value) -> bool {
    let Some(kind) = cond.get("type").and_then(Value::as_str).map(str::to_string) else {
        return false;
    };
    let conditions = arr_mut(obj, &["status", "conditions"]);
    let now = now_rfc3339();
    let existing = conditions
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind.as_str()));
    match existing {
        Some(old) => {
            let mut next = cond.clone();
            let same_status = old.get("status") == next.get("status");
            if let Value::Object(m) = &mut next {
                let transition = if same_status {
                    old.get("lastTransitionTime").cloned()
                } else {
                    None
                };
                m.insert(
                    "lastTransitionTime".into(),
                    transition.unwrap_or_else(|| json!(now)),
                );
            }
            let significant = |c: &Value| {
                let mut c = c.clone();
                if let Value::Object(m) = &mut c {
                    m.remove("lastHeartbeatTime");
                    m.remove("lastProbeTime");
                }
                c
            };
            let changed = significant(old) != significant(&next);
            *old = next;
            changed
        }
        None => {
            let mut next = cond;
            if let Value::Object(m) = &mut next {
                m.entry("lastTransitionTime").or_insert_with(|| json!(now));
            }
            conditions.push(next);
            true
        }
    }
}

/// Removes a key (e.g. an empty list) from the map at `path`, if present.
pub fn remove_at(v: &mut Value, path: &[&str], key: &str) {
    let mut cur = v;
    for seg in path {
        match cur.get_mut(*seg) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Value::Object(m) = cur {
        m.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_answers_as_json_pointer_does() {
        let doc = json!({
            "a": {"b": [10, {"c": "d"}], "": 1, "0": "zero", "a/b": 2, "m~n": 3},
            "": {"": "empty"},
            "list": [[1, 2], {"x": null}],
        });
        let tokens = [
            "", "a", "b", "c", "0", "1", "01", "+1", "2", "list", "x", "a~1b", "m~0n", "~",
        ];
        let mut pointers = vec![String::new(), "a".to_string(), "/".to_string()];
        let mut level = vec![String::new()];
        for _ in 0..4 {
            let next: Vec<String> = level
                .iter()
                .flat_map(|p| tokens.iter().map(move |t| format!("{p}/{t}")))
                .collect();
            pointers.extend(next.iter().cloned());
            level = next;
        }
        for p in &pointers {
            assert_eq!(doc.at(p), doc.pointer(p), "pointer {p:?}");
        }
        assert_eq!(doc.at("/a/b/1/c"), Some(&json!("d")));
    }

    #[test]
    fn accessors_tolerate_garbage() {
        let v = json!({"metadata": "oops", "spec": {"volumes": [1, {"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]}});
        assert_eq!(name(&v), "");
        assert!(!is_terminating(&v));
        assert_eq!(pod_claims(&v), vec![("d".to_string(), "c".to_string())]);
        assert_eq!(
            condition_status(&json!({"status": {"conditions": 3}}), "Ready"),
            None
        );
    }

    #[test]
    fn editors_create_parents_and_keep_transition_times() {
        let mut v = json!({"status": "bad"});
        assert!(set_condition(
            &mut v,
            json!({"type": "Ready", "status": "True", "lastHeartbeatTime": "a"})
        ));
        let t0 = v["status"]["conditions"][0]["lastTransitionTime"].clone();
        v["status"]["conditions"][0]["lastTransitionTime"] = json!("2000-01-01T00:00:00Z");
        assert!(!set_condition(
            &mut v,
            json!({"type": "Ready", "status": "True", "lastHeartbeatTime": "b"})
        ));
        assert_eq!(
            v["status"]["conditions"][0]["lastTransitionTime"],
            "2000-01-01T00:00:00Z"
        );
        assert!(t0.is_string());
        assert!(set_condition(
            &mut v,
            json!({"type": "Ready", "status": "Unknown"})
        ));
        assert_ne!(
            v["status"]["conditions"][0]["lastTransitionTime"],
            "2000-01-01T00:00:00Z"
        );
        obj_mut(&mut v, &["spec", "x"]).insert("y".into(), json!(1));
        assert_eq!(v["spec"]["x"]["y"], 1);
    }

    #[test]
    fn terminated_means_no_running_container() {
        let mut p = json!({"metadata": {"deletionTimestamp": "t"}, "status": {"phase": "Running",
            "containerStatuses": [{"state": {"running": {"startedAt": "t"}}}]}});
        assert!(!is_pod_terminated(&p));
        p["status"]["containerStatuses"][0]["state"] = json!({"terminated": {"exitCode": 0}});
        assert!(is_pod_terminated(&p));
        p["status"]["phase"] = json!("Failed");
        p["metadata"] = json!({});
        assert!(is_pod_terminated(&p));
    }
}
