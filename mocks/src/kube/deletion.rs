//! What a DELETE does: graceful pod termination, finalizers, preconditions.
//!
//! This is the heart of the failure nodefence exists for. Deleting a Pod bound to a
//! node does not remove it: the apiserver only marks it (`deletionTimestamp`,
//! `deletionGracePeriodSeconds`) and waits for that node's kubelet to confirm the
//! containers are gone with a second, zero-grace delete. A pod on a dead node
//! therefore stays `Terminating` forever, its volumes stay attached, and its
//! StatefulSet replacement never starts, until something (the out-of-service
//! taint's PodGC, a node deletion, or `--force --grace-period=0`) removes it.
//!
//! The rules, in the real registry's order:
//! 1. `preconditions.uid` / `preconditions.resourceVersion` must match (409).
//! 2. Pods get a grace period: the request's `gracePeriodSeconds`, else
//!    `spec.terminationGracePeriodSeconds`, else 30; it is 0 for a pod not bound
//!    to a node or already `Succeeded`/`Failed`. Other types have none.
//! 3. An object already being deleted: a pod's grace can only be shortened (to 0:
//!    removed now, unless finalizers remain); anything else is returned unchanged.
//! 4. Non-empty `metadata.finalizers`: marked (`deletionTimestamp`), kept until an
//!    update empties them ([`finalize_if_done`]).
//! 5. A pod with grace > 0: marked with `deletionTimestamp = now + grace`, kept.
//! 6. Otherwise removed now.
//!
//! `propagationPolicy` is validated but has no effect: fake-kube has no garbage
//! collector (owners' dependents are not deleted, and `Foreground` adds no
//! `foregroundDeletion` finalizer, which nothing would ever remove).
//!
//! The simulation uses [`delete`] for the kubelet's final delete and PodGC, and
//! must call [`finalize_if_done`] after removing finalizers through the store.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use super::resources::ResourceType;
use super::store::{Store, StoreError, metadata_mut};

/// Default `terminationGracePeriodSeconds` of a pod.
pub const DEFAULT_POD_GRACE_SECONDS: i64 = 30;

/// `DeleteOptions` (body of DELETE, or query parameters).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteOptions {
    #[serde(default)]
    pub grace_period_seconds: Option<i64>,
    #[serde(default)]
    pub preconditions: Option<Preconditions>,
    #[serde(default)]
    pub propagation_policy: Option<String>,
    #[serde(default)]
    pub dry_run: Option<Vec<String>>,
}

/// `DeleteOptions.preconditions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Preconditions {
    #[serde(default)]
    pub uid: Option<String>,
    #[serde(default)]
    pub resource_version: Option<String>,
}

impl DeleteOptions {
    /// Options with only a grace period (the kubelet's final delete uses 0).
    pub fn grace(seconds: i64) -> Self {
        Self {
            grace_period_seconds: Some(seconds),
            ..Self::default()
        }
    }

    fn validate(&self) -> Result<(), StoreError> {
        if let Some(p) = &self.propagation_policy
            && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
        {
            return Err(StoreError::Invalid(format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
            )));
        }
        if self.grace_period_seconds.is_some_and(|g| g < 0) {
            return Err(StoreError::Invalid(
                "DeleteOptions.meta.k8s.io \"\" is invalid: gracePeriodSeconds: Invalid value: must be >= 0".into(),
            ));
        }
        Ok(())
    }
}

/// What a delete did.
#[derive(Debug, Clone, PartialEq)]
pub enum DeleteOutcome {
    /// Removed from the store; the object as it was, with the delete's version.
    Deleted(Value),
    /// Kept with a `deletionTimestamp` (graceful pod, finalizers, or already
    /// being deleted).
    Pending(Value),
}

impl DeleteOutcome {
    pub fn object(&self) -> &Value {
        match self {
            DeleteOutcome::Deleted(o) | DeleteOutcome::Pending(o) => o,
        }
    }
}

/// What [`decide`] chose for the object as read.
enum Action {
    Remove,
    Mark { grace: i64 },
    Unchanged,
}

/// Deletes an object under the real apiserver's rules (see the module docs).
pub fn delete(
    store: &Store,
    rt: ResourceType,
    namespace: Option<&str>,
    name: &str,
    opts: &DeleteOptions,
) -> Result<DeleteOutcome, StoreError> {
    opts.validate()?;
    // The decision reads the object, the write is conditional on the version read:
    // a concurrent write makes it retry from the newer object.
    for _ in 0..16 {
        let current = store.get(rt, namespace, name)?;
        check_preconditions(rt, name, &current, opts)?;
        let rv = resource_version(&current);
        let result = match decide(rt, &current, opts) {
            Action::Unchanged => return Ok(DeleteOutcome::Pending(current)),
            Action::Remove => store
                .delete(rt, namespace, name, rv.as_deref())
                .map(DeleteOutcome::Deleted),
            Action::Mark { grace } => store
                .modify(rt, namespace, name, |o| {
                    if resource_version(o) != rv {
                        return Err(StoreError::Conflict {
                            plural: rt.plural.to_owned(),
                            name: name.to_owned(),
                        });
                    }
                    mark(o, grace);
                    Ok(())
                })
                .map(DeleteOutcome::Pending),
        };
        match result {
            Err(StoreError::Conflict { .. }) => continue,
            other => return other,
        }
    }
    Err(StoreError::Conflict {
        plural: rt.plural.to_owned(),
        name: name.to_owned(),
    })
}

/// Removes an object that is being deleted once nothing holds it any more: a
/// `deletionTimestamp`, no finalizers, and no grace period still running. Returns
/// the removed object, or `None` when it stays. Call after every update.
pub fn finalize_if_done(
    store: &Store,
    rt: ResourceType,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Value>, StoreError> {
    let current = match store.get(rt, namespace, name) {
        Ok(o) => o,
        Err(StoreError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let grace = current
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if !is_terminating(&current) || has_finalizers(&current) || grace > 0 {
        return Ok(None);
    }
    match store.delete(rt, namespace, name, resource_version(&current).as_deref()) {
        Ok(o) => Ok(Some(o)),
        // Changed meanwhile: whoever changed it gets to decide.
        Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether the object has a `deletionTimestamp`.
pub fn is_terminating(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

fn has_finalizers(object: &Value) -> bool {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

fn resource_version(object: &Value) -> Option<String> {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Refuses bad `DeleteOptions` (422), as [`delete`] does first.
pub(crate) fn validate_options(opts: &DeleteOptions) -> Result<(), StoreError> {
    opts.validate()
}

/// `preconditions.uid`/`resourceVersion` against the object (409 when they differ).
pub(crate) fn check_preconditions(
    rt: ResourceType,
    name: &str,
    current: &Value,
    opts: &DeleteOptions,
) -> Result<(), StoreError> {
    let Some(p) = &opts.preconditions else {
        return Ok(());
    };
    let uid = current.pointer("/metadata/uid").and_then(Value::as_str);
    let failed = p.uid.as_deref().is_some_and(|u| Some(u) != uid)
        || p.resource_version
            .as_deref()
            .is_some_and(|rv| Some(rv) != resource_version(current).as_deref());
    if failed {
        return Err(StoreError::Conflict {
            plural: rt.plural.to_owned(),
            name: name.to_owned(),
        });
    }
    Ok(())
}

fn is_pod(rt: ResourceType) -> bool {
    rt.group.is_empty() && rt.plural == "pods"
}

/// The grace period a pod delete gets (always 0 for other types).
fn grace_for(rt: ResourceType, object: &Value, opts: &DeleteOptions) -> i64 {
    if !is_pod(rt) {
        return 0;
    }
    let bound = object
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let phase = object.pointer("/status/phase").and_then(Value::as_str);
    if !bound || matches!(phase, Some("Succeeded" | "Failed")) {
        return 0;
    }
    opts.grace_period_seconds.unwrap_or_else(|| {
        object
            .pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(DEFAULT_POD_GRACE_SECONDS)
    })
}

fn decide(rt: ResourceType, current: &Value, opts: &DeleteOptions) -> Action {
    let grace = grace_for(rt, current, opts).max(0);
    if is_terminating(current) {
        let existing = current
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if !is_pod(rt) || grace >= existing {
            return Action::Unchanged;
        }
        if grace == 0 && !has_finalizers(current) {
            return Action::Remove;
        }
        return Action::Mark { grace };
    }
    if has_finalizers(current) || grace > 0 {
        return Action::Mark { grace };
    }
    Action::Remove
}

/// Sets the deletion fields: now + grace, and the grace itself.
fn mark(object: &mut Value, grace: i64) {
    let when = nodefence_clock::now() + Duration::from_secs(grace.max(0) as u64);
    let meta = metadata_mut(object);
    meta.insert(
        "deletionTimestamp".into(),
        json!(humantime::format_rfc3339_seconds(when).to_string()),
    );
    meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
}

#[cfg(test)]
mod tests {
    use super::super::resources::{NODES, PODS};
    use super::*;

    fn pod(store: &Store, name: &str, node: Option<&str>) {
        let mut p = json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c"}]}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        store.create(PODS, Some("default"), p).unwrap();
    }

    #[test]
    fn a_bound_pod_terminates_until_force_deleted() {
        let s = Store::default();
        pod(&s, "web-0", Some("worker-1"));
        let out = delete(
            &s,
            PODS,
            Some("default"),
            "web-0",
            &DeleteOptions::default(),
        )
        .unwrap();
        let DeleteOutcome::Pending(o) = out else {
            panic!("kept")
        };
        assert!(is_terminating(&o));
        assert_eq!(o["metadata"]["deletionGracePeriodSeconds"], 30);
        // A second graceful delete changes nothing.
        let again = delete(
            &s,
            PODS,
            Some("default"),
            "web-0",
            &DeleteOptions::grace(30),
        )
        .unwrap();
        assert_eq!(
            again.object()["metadata"]["resourceVersion"],
            o["metadata"]["resourceVersion"]
        );
        // The kubelet never confirms; only a zero-grace delete removes it.
        let out = delete(&s, PODS, Some("default"), "web-0", &DeleteOptions::grace(0)).unwrap();
        assert!(matches!(out, DeleteOutcome::Deleted(_)));
        assert_eq!(
            s.get(PODS, Some("default"), "web-0").unwrap_err().code(),
            404
        );
    }

    #[test]
    fn unbound_pods_and_other_types_go_at_once() {
        let s = Store::default();
        pod(&s, "pending", None);
        let out = delete(
            &s,
            PODS,
            Some("default"),
            "pending",
            &DeleteOptions::default(),
        )
        .unwrap();
        assert!(matches!(out, DeleteOutcome::Deleted(_)));
        s.create(NODES, None, json!({"metadata": {"name": "n"}}))
            .unwrap();
        assert!(matches!(
            delete(&s, NODES, None, "n", &DeleteOptions::default()).unwrap(),
            DeleteOutcome::Deleted(_)
        ));
    }

    #[test]
    fn finalizers_hold_the_object_until_emptied() {
        let s = Store::default();
        s.create(
            NODES,
            None,
            json!({"metadata": {"name": "n", "finalizers": ["example.com/hold"]}}),
        )
        .unwrap();
        let out = delete(&s, NODES, None, "n", &DeleteOptions::default()).unwrap();
        assert!(matches!(out, DeleteOutcome::Pending(_)));
        assert_eq!(finalize_if_done(&s, NODES, None, "n").unwrap(), None);
        s.modify(NODES, None, "n", |o| {
            o["metadata"]["finalizers"] = json!([]);
            Ok(())
        })
        .unwrap();
        assert!(finalize_if_done(&s, NODES, None, "n").unwrap().is_some());
        assert_eq!(s.get(NODES, None, "n").unwrap_err().code(), 404);
    }

    #[test]
    fn preconditions_and_bad_options() {
        let s = Store::default();
        s.create(NODES, None, json!({"metadata": {"name": "n"}}))
            .unwrap();
        let wrong_uid = DeleteOptions {
            preconditions: Some(Preconditions {
                uid: Some("nope".into()),
                resource_version: None,
            }),
            ..DeleteOptions::default()
        };
        assert_eq!(
            delete(&s, NODES, None, "n", &wrong_uid).unwrap_err().code(),
            409
        );
        let bad = DeleteOptions {
            propagation_policy: Some("Sideways".into()),
            ..DeleteOptions::default()
        };
        assert_eq!(delete(&s, NODES, None, "n", &bad).unwrap_err().code(), 422);
        assert_eq!(
            delete(&s, NODES, None, "missing", &DeleteOptions::default())
                .unwrap_err()
                .code(),
            404
        );
    }
}
