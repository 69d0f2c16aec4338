//! Strategic merge patch (`application/strategic-merge-patch+json`), for the
//! built-in types fake-kube serves.
//!
//! kubectl (`taint`, `cordon`, `label`, `edit`) and kube-rs `Patch::Strategic` send
//! these. They differ from a JSON merge patch only for lists: a list with a patch
//! merge key in the real API schema is merged item by item (a patched condition
//! replaces only the condition of that `type`), every other list is replaced whole.
//! Getting this wrong hides real bugs: `spec.taints` has *no* merge key, so a
//! patch carrying one taint removes all the others; a client that forgets to send
//! the existing taints must see that here too.
//!
//! Supported: recursive map merge, `null` deletes, merge-key lists (see
//! [`list_strategy`]), primitive set lists (`metadata.finalizers`), `$patch:
//! replace|delete|merge` in maps and list items, `$deleteFromPrimitiveList/<field>`.
//! Ignored (accepted, no effect): `$setElementOrder/<field>` and `$retainKeys`.

use serde_json::{Map, Value};

use super::resources::ResourceType;
use super::store::StoreError;

/// How a list field is patched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListStrategy {
    /// Replaced whole (no patch strategy in the schema).
    Replace,
    /// Merged by this key of the items.
    MergeKey(&'static str),
    /// A list of scalars merged as a set (`patchStrategy:"merge"` on `[]string`).
    Set,
}

/// The strategy the real schema gives the list at `path` (field names from the
/// root, list items written `[]`), for type `rt`.
pub fn list_strategy(rt: ResourceType, path: &str) -> ListStrategy {
    use ListStrategy::{MergeKey, Replace, Set};
    match path {
        "metadata.ownerReferences" => return MergeKey("uid"),
        "metadata.finalizers" => return Set,
        _ => {}
    }
    let pod_spec = |p: &str| -> Option<ListStrategy> {
        Some(match p {
            "containers"
            | "initContainers"
            | "ephemeralContainers"
            | "volumes"
            | "imagePullSecrets"
            | "resourceClaims"
            | "schedulingGates" => MergeKey("name"),
            "containers[].env" | "initContainers[].env" => MergeKey("name"),
            "containers[].ports" | "initContainers[].ports" => MergeKey("containerPort"),
            "containers[].volumeMounts" | "initContainers[].volumeMounts" => MergeKey("mountPath"),
            "containers[].volumeDevices" | "initContainers[].volumeDevices" => {
                MergeKey("devicePath")
            }
            "hostAliases" => MergeKey("ip"),
            _ => return None,
        })
    };
    match (rt.group, rt.plural) {
        ("", "nodes") => match path {
            "status.conditions" | "status.addresses" => MergeKey("type"),
            "spec.podCIDRs" => Set,
            _ => Replace,
        },
        ("", "pods") => match path {
            "status.conditions" => MergeKey("type"),
            "status.podIPs" | "status.hostIPs" => MergeKey("ip"),
            p => p
                .strip_prefix("spec.")
                .and_then(pod_spec)
                .unwrap_or(Replace),
        },
        ("", "persistentvolumeclaims" | "namespaces") => match path {
            "status.conditions" => MergeKey("type"),
            _ => Replace,
        },
        _ => Replace,
    }
}

/// Applies a strategic merge patch to `original` (an object of type `rt`).
pub fn apply(rt: ResourceType, original: &mut Value, patch: &Value) -> Result<(), StoreError> {
    let Value::Object(patch) = patch else {
        return Err(StoreError::BadRequest(
            "a strategic merge patch must be a JSON object".into(),
        ));
    };
    if !original.is_object() {
        *original = Value::Object(Map::new());
    }
    let Value::Object(orig) = original else {
        return Ok(());
    };
    if merge_map(rt, orig, patch, "")? == MapOutcome::Delete {
        *orig = Map::new();
    }
    Ok(())
}

#[derive(Debug, PartialEq, Eq)]
enum MapOutcome {
    Keep,
    Delete,
}

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn invalid(msg: String) -> StoreError {
    StoreError::BadRequest(msg)
}

fn merge_map(
    rt: ResourceType,
    orig: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    path: &str,
) -> Result<MapOutcome, StoreError> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("delete") => return Ok(MapOutcome::Delete),
        Some("replace") => {
            *orig = strip_directives(patch);
            return Ok(MapOutcome::Keep);
        }
        Some("merge") | None => {}
        Some(other) => return Err(invalid(format!("unknown patch type: {other:?}"))),
    }
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(gone)) = (orig.get_mut(field), value) {
                list.retain(|v| !gone.contains(v));
            }
            continue;
        }
        if key.starts_with('$') {
            // $setElementOrder/..., $retainKeys, $patch: ordering and pruning hints.
            continue;
        }
        let sub = child_path(path, key);
        match value {
            Value::Null => {
                orig.remove(key);
            }
            Value::Object(pmap) => {
                let entry = orig
                    .entry(key.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !entry.is_object() {
                    *entry = Value::Object(Map::new());
                }
                if let Value::Object(omap) = entry
                    && merge_map(rt, omap, pmap, &sub)? == MapOutcome::Delete
                {
                    orig.remove(key);
                }
            }
            Value::Array(items) => {
                let merged = match (list_strategy(rt, &sub), orig.remove(key)) {
                    (ListStrategy::MergeKey(k), Some(Value::Array(old))) => {
                        merge_keyed(rt, old, items, k, &sub)?
                    }
                    (ListStrategy::MergeKey(k), _) => merge_keyed(rt, Vec::new(), items, k, &sub)?,
                    (ListStrategy::Set, Some(Value::Array(mut old))) => {
                        for v in items {
                            if !old.contains(v) {
                                old.push(v.clone());
                            }
                        }
                        old
                    }
                    _ => items.iter().map(strip_value).collect(),
                };
                orig.insert(key.clone(), Value::Array(merged));
            }
            scalar => {
                orig.insert(key.clone(), scalar.clone());
            }
        }
    }
    Ok(MapOutcome::Keep)
}

/// Merges list items by `merge_key`: patched items update the original item with
/// the same key, new ones are appended; `$patch: delete` items remove it, a
/// `{"$patch": "replace"}` item makes the patch list replace the original.
fn merge_keyed(
    rt: ResourceType,
    mut old: Vec<Value>,
    patch: &[Value],
    merge_key: &str,
    path: &str,
) -> Result<Vec<Value>, StoreError> {
    let item_path = format!("{path}[]");
    let replace = patch
        .iter()
        .any(|p| p.get("$patch").and_then(Value::as_str) == Some("replace"));
    if replace {
        return Ok(patch
            .iter()
            .filter(|p| p.get("$patch").is_none())
            .map(strip_value)
            .collect());
    }
    for p in patch {
        let Value::Object(pmap) = p else {
            return Err(invalid(format!(
                "{path}: items of a list merged by {merge_key:?} must be objects"
            )));
        };
        let Some(k) = pmap.get(merge_key) else {
            return Err(invalid(format!(
                "map: {p} does not contain declared merge key: {merge_key}"
            )));
        };
        let at = old.iter().position(|o| o.get(merge_key) == Some(k));
        if pmap.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(i) = at {
                old.remove(i);
            }
            continue;
        }
        match at {
            Some(i) => {
                if let Value::Object(omap) = &mut old[i]
                    && merge_map(rt, omap, pmap, &item_path)? == MapOutcome::Delete
                {
                    old.remove(i);
                }
            }
            None => {
                let mut fresh = Map::new();
                merge_map(rt, &mut fresh, pmap, &item_path)?;
                old.push(Value::Object(fresh));
            }
        }
    }
    Ok(old)
}

/// A value as it is stored: directives removed, nulls in maps dropped.
fn strip_value(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(strip_directives(m)),
        Value::Array(a) => Value::Array(a.iter().map(strip_value).collect()),
        other => other.clone(),
    }
}

fn strip_directives(m: &Map<String, Value>) -> Map<String, Value> {
    m.iter()
        .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
        .map(|(k, v)| (k.clone(), strip_value(v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::resources::{LEASES, NODES, PODS};
    use super::*;
    use serde_json::json;

    fn patched(rt: ResourceType, orig: Value, patch: Value) -> Value {
        let mut o = orig;
        apply(rt, &mut o, &patch).unwrap();
        o
    }

    #[test]
    fn taints_have_no_merge_key_and_are_replaced() {
        let node = json!({"spec": {"taints": [
            {"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}]}});
        let out = patched(
            NODES,
            node,
            json!({"spec": {"taints": [{"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}]}}),
        );
        assert_eq!(out["spec"]["taints"].as_array().unwrap().len(), 1);
        assert_eq!(
            out["spec"]["taints"][0]["key"],
            "node.kubernetes.io/out-of-service"
        );
    }

    #[test]
    fn conditions_merge_by_type() {
        let node = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            {"type": "MemoryPressure", "status": "False"}]}});
        let out = patched(
            NODES,
            node,
            json!({"status": {
                "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "MemoryPressure"}],
                "conditions": [{"type": "Ready", "status": "Unknown", "reason": null},
                               {"type": "DiskPressure", "status": "False"}]}}),
        );
        let c = out["status"]["conditions"].as_array().unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(c[0], json!({"type": "Ready", "status": "Unknown"}));
        assert_eq!(c[1]["type"], "MemoryPressure");
        assert_eq!(c[2]["type"], "DiskPressure");
    }

    #[test]
    fn directives() {
        let pod = json!({"metadata": {"finalizers": ["a", "b"], "labels": {"x": "1", "y": "2"}},
            "spec": {"containers": [{"name": "c1", "image": "i1"}, {"name": "c2", "image": "i2"}]}});
        let out = patched(
            PODS,
            pod.clone(),
            json!({"metadata": {"finalizers": ["c"], "$deleteFromPrimitiveList/finalizers": ["a"],
                                "labels": {"x": null}},
                   "spec": {"containers": [{"name": "c1", "$patch": "delete"}, {"name": "c2", "image": "new"}]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["b", "c"]));
        assert_eq!(out["metadata"]["labels"], json!({"y": "2"}));
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "c2", "image": "new"}])
        );
        let out = patched(
            PODS,
            pod,
            json!({"metadata": {"labels": {"$patch": "replace", "z": "3"}},
                   "spec": {"containers": [{"$patch": "replace"}, {"name": "only"}]}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({"z": "3"}));
        assert_eq!(out["spec"]["containers"], json!([{"name": "only"}]));
    }

    #[test]
    fn no_schema_means_merge_patch_semantics_for_lists() {
        let lease = json!({"spec": {"holderIdentity": "a", "x": [1, 2]}});
        let out = patched(
            LEASES,
            lease,
            json!({"spec": {"x": [3], "holderIdentity": null}}),
        );
        assert_eq!(out, json!({"spec": {"x": [3]}}));
        let mut o = json!({});
        assert_eq!(apply(NODES, &mut o, &json!([1])).unwrap_err().code(), 400);
        let mut o = json!({"status": {"conditions": []}});
        assert!(
            apply(
                NODES,
                &mut o,
                &json!({"status": {"conditions": [{"status": "x"}]}})
            )
            .is_err()
        );
    }
}
