//! PATCH bodies: which kind of patch a `Content-Type` names, and applying it.
//!
//! - `application/merge-patch+json`: RFC 7386 (kube-rs `Patch::Merge`).
//! - `application/json-patch+json`: RFC 6902 (kube-rs `Patch::Json`); a failing
//!   `test` or a missing path is a 422, a malformed patch a 400, as on the real
//!   server (whose `test` of `null` passes against a missing member).
//! - `application/strategic-merge-patch+json`: see [`super::smp`].
//! - `application/apply-patch+yaml` (server-side apply): refused with 415 and a
//!   `Status` saying fake-kube does not implement it. Field management is a large
//!   machine of its own and nodefence does not use it; a test that needs it should
//!   fail loudly rather than get a half-right merge.

use serde_json::Value;

use super::resources::ResourceType;
use super::smp;
use super::store::StoreError;

/// The patch kinds the real server takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply,
}

/// Why a PATCH cannot even be attempted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsupported {
    /// Server-side apply, known but not implemented here.
    Apply,
    /// Not a patch media type at all.
    Unknown(String),
}

impl Unsupported {
    /// The 415 `Status` message.
    pub fn message(&self) -> String {
        match self {
            Unsupported::Apply => "the server does not support the patch type \"application/apply-patch+yaml\": server-side apply is not implemented by fake-kube (use a merge, JSON or strategic merge patch)".to_owned(),
            Unsupported::Unknown(t) => format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {t:?})"
            ),
        }
    }
}

impl PatchKind {
    /// The kind a `Content-Type` value names (parameters such as `charset` ignored).
    pub fn from_content_type(content_type: Option<&str>) -> Result<Self, Unsupported> {
        let raw = content_type.unwrap_or_default();
        let essence = raw.split(';').next().unwrap_or_default().trim();
        match essence.to_ascii_lowercase().as_str() {
            "application/merge-patch+json" => Ok(PatchKind::Merge),
            "application/json-patch+json" => Ok(PatchKind::Json),
            "application/strategic-merge-patch+json" => Ok(PatchKind::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                Err(Unsupported::Apply)
            }
            _ => Err(Unsupported::Unknown(raw.to_owned())),
        }
    }
}

/// Parses a patch body (400 when it is not JSON).
pub fn parse_body(body: &[u8]) -> Result<Value, StoreError> {
    serde_json::from_slice(body)
        .map_err(|e| StoreError::BadRequest(format!("error decoding patch: {e}")))
}

/// Applies `patch` of `kind` to a copy of `original`.
pub fn apply(
    rt: ResourceType,
    kind: PatchKind,
    original: &Value,
    patch: &Value,
) -> Result<Value, StoreError> {
    let mut doc = original.clone();
    match kind {
        PatchKind::Merge => {
            if !patch.is_object() {
                return Err(StoreError::BadRequest(
                    "a merge patch must be a JSON object".into(),
                ));
            }
            json_patch::merge(&mut doc, patch);
        }
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| StoreError::BadRequest(format!("invalid JSON patch: {e}")))?;
            // The apiserver's json-patch (evanphx) passes a `test` of `null` against a
            // missing member; KubeVirt's patches rely on it.
            for op in ops.0 {
                if let json_patch::PatchOperation::Test(t) = &op
                    && t.value.is_null()
                    && doc.pointer(t.path.as_str()).is_none()
                {
                    continue;
                }
                json_patch::patch(&mut doc, &[op])
                    .map_err(|e| StoreError::Invalid(e.to_string()))?;
            }
        }
        PatchKind::Strategic => smp::apply(rt, &mut doc, patch)?,
        PatchKind::Apply => {
            return Err(StoreError::BadRequest(Unsupported::Apply.message()));
        }
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::super::resources::NODES;
    use super::*;
    use serde_json::json;

    #[test]
    fn content_types() {
        assert_eq!(
            PatchKind::from_content_type(Some("application/merge-patch+json; charset=utf-8")),
            Ok(PatchKind::Merge)
        );
        assert_eq!(
            PatchKind::from_content_type(Some("application/apply-patch+yaml")),
            Err(Unsupported::Apply)
        );
        assert!(matches!(
            PatchKind::from_content_type(Some("application/json")),
            Err(Unsupported::Unknown(_))
        ));
        assert!(Unsupported::Apply.message().contains("fake-kube"));
    }

    #[test]
    fn json_patch_test_failure_is_422_and_garbage_is_400() {
        let node = json!({"metadata": {"name": "n"}, "spec": {"unschedulable": false}});
        let ok = apply(
            NODES,
            PatchKind::Json,
            &node,
            &json!([{"op": "test", "path": "/spec/unschedulable", "value": false},
                    {"op": "replace", "path": "/spec/unschedulable", "value": true}]),
        )
        .unwrap();
        assert_eq!(ok["spec"]["unschedulable"], true);
        let failed = apply(
            NODES,
            PatchKind::Json,
            &node,
            &json!([{"op": "test", "path": "/spec/unschedulable", "value": true}]),
        );
        assert_eq!(failed.unwrap_err().code(), 422);
        let garbage = apply(NODES, PatchKind::Json, &node, &json!({"op": "x"}));
        assert_eq!(garbage.unwrap_err().code(), 400);
    }

    #[test]
    fn merge_patch_nulls_delete() {
        let node = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        let out = apply(
            NODES,
            PatchKind::Merge,
            &node,
            &json!({"metadata": {"labels": {"a": null}}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"b": "2"}));
    }
}
