//! The REST verbs on resources: get, list, watch, create, replace, patch, delete.
//!
//! Each handler reads the request the way the apiserver's generic registry does
//! (query, negotiated representation, body), applies the per-type rules of
//! [`super::strategy`] and [`super::deletion`] to the shared [`Store`], and answers
//! with the object, a list, a Table, a watch stream or a `Status`.
//!
//! Refused: `dryRun` (400: fake-kube cannot evaluate a write without doing it)
//! and server-side apply (415, see [`super::patch`]).
//!
//! Custom resources (a [`Target`] with `custom`) also go through their CRD version:
//! the decoder's pruning and defaulting ([`crd::decode`], with `fieldValidation`:
//! unknown fields are dropped silently (`Ignore`), dropped with a `Warning` header
//! each (`Warn`, the default) or refused (`Strict`: 400 on create and update, 422
//! naming `patch` on patch)), schema validation ([`crd::validate`], 422 naming the
//! fields), no strategic merge patch (415 in the apiextensions-apiserver's words),
//! no creates while the CRD is being deleted (403). CustomResourceDefinitions get
//! their own strategy and deletion ([`crd::definition`]).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::crd::{self, FieldValidation, definition};
use super::deletion::{self, DeleteOptions, DeleteOutcome};
use super::field::{BadValue, FieldError, go_quote};
use super::negotiate::{self, Representation};
use super::patch::{self, PatchKind, Unsupported};
use super::query::{Query, paginate};
use super::resources::{CUSTOM_RESOURCE_DEFINITIONS as CRDS, NAMESPACES};
use super::routes::Target;
use super::server::Shared;
use super::status;
use super::store::{Store, StoreError, metadata_mut};
use super::strategy::{self, Part};
use super::table;
use super::watch::{self, WatchRequest};

/// Largest request body accepted (the real server's limit is about 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

fn query_of(target: &Target, request: &Request) -> Result<Query, StoreError> {
    Query::parse(request.uri().query(), Some(target.rt))
}

fn header(request: &Request, name: axum::http::HeaderName) -> Option<String> {
    request
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

async fn body_of(request: Request) -> Result<Bytes, Response> {
    axum::body::to_bytes(request.into_body(), MAX_BODY)
        .await
        .map_err(|_| {
            status::failure(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                "the request body is too large or could not be read",
            )
        })
}

/// Reads a JSON object body of a create or replace.
fn json_body(
    target: &Target,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Value, Box<Response>> {
    let essence = content_type
        .and_then(|c| c.split(';').next())
        .map(|c| c.trim().to_ascii_lowercase());
    if essence.as_deref().is_some_and(|c| c != "application/json") {
        return Err(Box::new(status::unsupported_media_type(&format!(
            "the body of the request was in an unknown format - accepted media types include: application/json (fake-kube serves JSON only; got {:?})",
            content_type.unwrap_or_default()
        ))));
    }
    let mut value: Value = serde_json::from_slice(body).map_err(|e| {
        Box::new(status::error(&StoreError::BadRequest(format!(
            "couldn't get version/kind; json parse error: {e}"
        ))))
    })?;
    if !value.is_object() {
        return Err(Box::new(status::error(&StoreError::BadRequest(
            "the body must be a JSON object".into(),
        ))));
    }
    if target.custom.is_some() {
        check_custom_type_meta(target, &mut value, body)?;
        return Ok(value);
    }
    strategy::check_type_meta(target.rt, &value).map_err(|e| Box::new(status::error(&e)))?;
    Ok(value)
}

/// A custom resource body must say its kind (the unstructured decoder needs it);
/// any version of the group is converted to the one on the URL.
fn check_custom_type_meta(
    target: &Target,
    value: &mut Value,
    body: &[u8],
) -> Result<(), Box<Response>> {
    let rt = target.rt;
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind.is_empty() {
        return Err(Box::new(status::error(&StoreError::BadRequest(format!(
            "Object 'Kind' is missing in '{}'",
            String::from_utf8_lossy(body).trim()
        )))));
    }
    if let Err(e) = custom_type_meta(rt, value) {
        return Err(Box::new(status::error(&e)));
    }
    rt.convert(value);
    Ok(())
}

/// `ValidateTypeMeta` of a custom resource: its kind, and an `apiVersion` of its
/// group (any version: they convert).
fn custom_type_meta(rt: super::resources::ResourceType, value: &Value) -> Result<(), StoreError> {
    let mut causes = Vec::new();
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !kind.is_empty() && kind != rt.kind {
        causes.push(FieldError::invalid(
            "kind",
            BadValue::Str(kind.to_owned()),
            &format!("must be {}", rt.kind),
        ));
    }
    if let Some(av) = value.get("apiVersion").and_then(Value::as_str)
        && av.rsplit_once('/').map_or("", |(g, _)| g) != rt.group
    {
        causes.push(FieldError::invalid(
            "apiVersion",
            BadValue::Str(av.to_owned()),
            &format!("must be {}", rt.api_version()),
        ));
    }
    if causes.is_empty() {
        return Ok(());
    }
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Err(StoreError::invalid_fields(rt, name, causes))
}

fn field_validation(q: &Query) -> Result<FieldValidation, StoreError> {
    FieldValidation::parse(q.field_validation.as_deref())
}

/// What to do with the fields a custom resource's schema dropped: nothing, a
/// warning each, or refusing the write (`patched`: the patched object, for a
/// PATCH's 422; a create or update gets a 400).
fn unknown_fields(
    rt: super::resources::ResourceType,
    validation: FieldValidation,
    unknown: &[String],
    patched: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<(), StoreError> {
    if unknown.is_empty() {
        return Ok(());
    }
    match validation {
        FieldValidation::Ignore => Ok(()),
        FieldValidation::Warn => {
            warnings.extend(
                unknown
                    .iter()
                    .map(|f| format!("unknown field {}", go_quote(f))),
            );
            Ok(())
        }
        FieldValidation::Strict => {
            let strict = crd::strict_error(unknown);
            Err(match patched {
                Some(json) => StoreError::InvalidFields(Box::new(super::field::Invalid {
                    group: String::new(),
                    kind: String::new(),
                    name: String::new(),
                    causes: vec![FieldError::invalid(
                        "patch",
                        BadValue::Str(json.to_owned()),
                        &strict,
                    )],
                })),
                None => StoreError::BadRequest(format!(
                    "{kind} in version {version} cannot be handled as a {kind}: {strict}",
                    kind = rt.kind,
                    version = go_quote(rt.version),
                )),
            })
        }
    }
}

fn refuse_dry_run(q: &Query) -> Result<(), StoreError> {
    if q.dry_run {
        return Err(StoreError::BadRequest(
            "dryRun is not supported by fake-kube".into(),
        ));
    }
    Ok(())
}

fn respond(result: Result<Response, StoreError>) -> Response {
    result.unwrap_or_else(|e| status::error(&e))
}

/// GET: one object, a list, or a watch.
pub(crate) async fn get(shared: &Arc<Shared>, target: Target, request: Request) -> Response {
    let q = match query_of(&target, &request) {
        Ok(q) => q,
        Err(e) => return status::error(&e),
    };
    let Some(repr) = negotiate::choose(header(&request, ACCEPT).as_deref(), false) else {
        return status::not_acceptable();
    };
    if q.watch || target.legacy_watch {
        let req = WatchRequest {
            rt: target.rt,
            namespace: target.namespace.clone(),
            name: target.name.clone(),
            query: q,
            representation: repr,
            custom: target.custom.clone(),
        };
        return match watch::start(&shared.watch, req) {
            Ok(body) => {
                let mut r = (StatusCode::OK, body).into_response();
                r.headers_mut().insert(
                    CONTENT_TYPE,
                    axum::http::HeaderValue::from_static(status::JSON),
                );
                r
            }
            Err(e) => status::error(&e),
        };
    }
    let store = &shared.store;
    let ns = target.namespace.as_deref();
    let Some(name) = target.name.as_deref() else {
        let (all, rv) = store.snapshot_at(target.rt);
        let in_namespace = all.iter().filter(|o| {
            ns.is_none_or(|ns| o.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns))
        });
        return respond(paginate(target.rt, in_namespace, rv, &q).map(|page| {
            let mut meta = json!({"resourceVersion": page.resource_version.to_string()});
            if let Some(c) = &page.continue_token {
                meta["continue"] = json!(c);
            }
            if let Some(n) = page.remaining_item_count {
                meta["remainingItemCount"] = json!(n);
            }
            status::ok(&match repr {
                Representation::Table(v) => table::table(
                    target.rt,
                    target.custom.as_deref(),
                    v,
                    &page.items,
                    meta,
                    q.include_object.as_deref(),
                    true,
                ),
                Representation::Metadata => json!({
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": meta,
                    "items": page.items.iter().map(table::partial_metadata).collect::<Vec<_>>(),
                }),
                _ => json!({
                    "kind": target.rt.list_kind(),
                    "apiVersion": target.rt.api_version(),
                    "metadata": meta,
                    "items": page.items,
                }),
            })
        }));
    };
    respond(store.get(target.rt, ns, name).map(|o| {
        status::ok(&match repr {
            Representation::Table(v) => table::table(
                target.rt,
                target.custom.as_deref(),
                v,
                std::slice::from_ref(&o),
                json!({"resourceVersion": o.pointer("/metadata/resourceVersion")}),
                q.include_object.as_deref(),
                true,
            ),
            Representation::Metadata => table::partial_metadata(&o),
            _ => o,
        })
    }))
}

/// POST on a collection.
pub(crate) async fn create(shared: &Arc<Shared>, target: Target, request: Request) -> Response {
    let validation = match query_of(&target, &request)
        .and_then(|q| refuse_dry_run(&q).map(|()| q))
        .and_then(|q| field_validation(&q))
    {
        Ok(v) => v,
        Err(e) => return status::error(&e),
    };
    let content_type = header(&request, CONTENT_TYPE);
    let body = match body_of(request).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let mut object = match json_body(&target, content_type.as_deref(), &body) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let store = &shared.store;
    let ns = target.namespace.as_deref();
    if let Some(ns) = ns
        && let Err(e) = store.get(NAMESPACES, None, ns)
    {
        return status::error(&e);
    }
    if object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .is_some_and(|rv| !rv.is_empty())
    {
        // What etcd3's store answers (a 500, which clients do hit).
        return status::failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "Internal error occurred: resourceVersion should not be set on objects to be created",
        );
    }
    let mut warnings = Vec::new();
    if let Some(cv) = &target.custom {
        if cv.terminating {
            let name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            return status::error(&StoreError::Forbidden(format!(
                "{} {} is forbidden: create not allowed while custom resource definition is terminating",
                target.rt.qualified_resource(),
                go_quote(name)
            )));
        }
        let unknown = crd::decode(cv, &mut object);
        if let Err(e) = unknown_fields(target.rt, validation, &unknown, None, &mut warnings) {
            return status::error(&e);
        }
    }
    strategy::prepare_for_create(target.rt, &mut object);
    let checked = match &target.custom {
        Some(cv) => crd::validate(cv, &object, None, Part::Main),
        None => strategy::validate_name(target.rt, &object),
    };
    if let Err(e) = checked {
        return status::with_warnings(status::error(&e), &warnings);
    }
    if target.rt == CRDS {
        let (all, _) = store.list(CRDS, None);
        if let Err(e) = definition::prepare_create(&all, &mut object) {
            return status::error(&e);
        }
    }
    let answer = match store.create(target.rt, ns, object) {
        Ok(o) => status::created(&o),
        Err(e) => status::error(&e),
    };
    status::with_warnings(answer, &warnings)
}

/// PUT on an object or its status.
pub(crate) async fn replace(shared: &Arc<Shared>, target: Target, request: Request) -> Response {
    let validation = match query_of(&target, &request)
        .and_then(|q| refuse_dry_run(&q).map(|()| q))
        .and_then(|q| field_validation(&q))
    {
        Ok(v) => v,
        Err(e) => return status::error(&e),
    };
    let content_type = header(&request, CONTENT_TYPE);
    let body = match body_of(request).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let object = match json_body(&target, content_type.as_deref(), &body) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    respond(write(
        &shared.store,
        &target,
        validation,
        false,
        |_current| Ok(object.clone()),
    ))
}

/// The 415 a custom resource answers a patch type other than JSON and merge patch
/// (and server-side apply) with.
const CUSTOM_PATCH_TYPES: &str = "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml";

/// PATCH on an object or its status.
pub(crate) async fn patch(shared: &Arc<Shared>, target: Target, request: Request) -> Response {
    let validation = match query_of(&target, &request)
        .and_then(|q| refuse_dry_run(&q).map(|()| q))
        .and_then(|q| field_validation(&q))
    {
        Ok(v) => v,
        Err(e) => return status::error(&e),
    };
    let kind = match PatchKind::from_content_type(header(&request, CONTENT_TYPE).as_deref()) {
        Ok(PatchKind::Strategic) if target.custom.is_some() => {
            // Custom resources have no patch strategies: no strategic merge patch.
            return status::unsupported_media_type(CUSTOM_PATCH_TYPES);
        }
        Ok(k) => k,
        Err(Unsupported::Unknown(_)) if target.custom.is_some() => {
            return status::unsupported_media_type(CUSTOM_PATCH_TYPES);
        }
        Err(u @ (Unsupported::Apply | Unsupported::Unknown(_))) => {
            return status::unsupported_media_type(&u.message());
        }
    };
    let body = match body_of(request).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let patch_doc = match patch::parse_body(&body) {
        Ok(p) => p,
        Err(e) => return status::error(&e),
    };
    let rt = target.rt;
    respond(write(&shared.store, &target, validation, true, |current| {
        patch::apply(rt, kind, current, &patch_doc)
    }))
}

/// The common path of PUT and PATCH: `change` computes the client's version of the
/// object from the stored one; the result is checked (name, namespace, and the
/// `resourceVersion` and `uid` preconditions: 409), decoded and validated for a
/// custom resource (`is_patch`: how strict decoding fails), split by subresource,
/// stored, and finalized if its deletion is complete.
fn write<F>(
    store: &Store,
    target: &Target,
    validation: FieldValidation,
    is_patch: bool,
    change: F,
) -> Result<Response, StoreError>
where
    F: FnOnce(&Value) -> Result<Value, StoreError>,
{
    let Some(name) = target.name.as_deref() else {
        return Err(StoreError::BadRequest("a name is required".into()));
    };
    let rt = target.rt;
    let ns = target.namespace.as_deref();
    let part = if target.subresource.is_some() {
        Part::Status
    } else {
        Part::Main
    };
    let custom = target.custom.as_deref();
    let all_crds = if rt == CRDS {
        store.list(CRDS, None).0
    } else {
        Vec::new()
    };
    let mut warnings = Vec::new();
    let result = store.modify(rt, ns, name, |current| {
        let mut next = change(current)?;
        if !next.is_object() {
            return Err(StoreError::BadRequest(
                "the result must be a JSON object".into(),
            ));
        }
        let wanted = next
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .filter(|rv| !rv.is_empty());
        let have = current
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str);
        if let Some(wanted) = wanted
            && Some(wanted) != have
        {
            return Err(StoreError::Conflict {
                plural: rt.plural.to_owned(),
                name: name.to_owned(),
            });
        }
        if wanted.is_none() && !is_patch && (custom.is_some() || rt == CRDS) {
            // Custom resources and CRDs do not allow unconditional updates.
            return Err(StoreError::InvalidFields(Box::new(super::field::Invalid {
                group: rt.group.to_owned(),
                kind: rt.plural.to_owned(),
                name: name.to_owned(),
                causes: vec![FieldError::invalid(
                    "metadata.resourceVersion",
                    BadValue::Printed("0x0".to_owned()),
                    "must be specified for an update",
                )],
            })));
        }
        // A uid in the body is a precondition too: it catches writes meant for an
        // object that was deleted and re-created under the same name.
        let body_uid = next
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty());
        if let Some(uid) = body_uid
            && Some(uid) != current.pointer("/metadata/uid").and_then(Value::as_str)
        {
            return Err(StoreError::Conflict {
                plural: rt.plural.to_owned(),
                name: name.to_owned(),
            });
        }
        if let Some(body_name) = next.pointer("/metadata/name").and_then(Value::as_str)
            && body_name != name
        {
            return Err(StoreError::BadRequest(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if let (Some(body_ns), Some(ns)) = (
            next.pointer("/metadata/namespace").and_then(Value::as_str),
            ns,
        ) && body_ns != ns
        {
            return Err(StoreError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
        if let Some(cv) = custom {
            custom_type_meta(rt, &next)?;
            let patched = (is_patch && validation == FieldValidation::Strict)
                .then(|| next.to_string());
            let unknown = crd::decode(cv, &mut next);
            unknown_fields(rt, validation, &unknown, patched.as_deref(), &mut warnings)?;
            rt.convert(&mut next);
        } else {
            strategy::check_type_meta(rt, &next)?;
        }
        if rt == CRDS && part == Part::Main {
            definition::set_defaults(&mut next);
        }
        strategy::prepare_for_update(rt, part, current, &mut next);
        if let Some(cv) = custom {
            crd::validate(cv, &next, Some(current), part)?;
        }
        if rt == CRDS && part == Part::Main {
            definition::finish_update(&all_crds, current, &mut next)?;
        }
        metadata_mut(&mut next).remove("resourceVersion");
        *current = next;
        Ok(())
    });
    // Warnings go out with the answer, whatever it is, as the real server's do.
    let updated =
        match result.and_then(|u| deletion::finalize_if_done(store, rt, ns, name).map(|_| u)) {
            Ok(u) => u,
            Err(e) => return Ok(status::with_warnings(status::error(&e), &warnings)),
        };
    after_write(store, target);
    Ok(status::with_warnings(status::ok(&updated), &warnings))
}

/// What the CRD controllers do after a write or delete: a CRD being deleted may
/// have lost its last object; a CRD's names may have changed.
fn after_write(store: &Store, target: &Target) {
    if let Some(cv) = &target.custom
        && cv.terminating
        && let Err(e) = definition::cleanup(store, &cv.crd_name)
    {
        tracing::debug!("CRD {}: cleanup: {e}", cv.crd_name);
    }
    if target.rt == CRDS {
        let group = target
            .name
            .as_deref()
            .and_then(|n| n.split_once('.'))
            .map(|(_, g)| g)
            .unwrap_or_default();
        definition::reconcile_group(store, group);
    }
}

fn delete_options(q: &Query, body: &[u8]) -> Result<DeleteOptions, StoreError> {
    let opts = if body.iter().any(|b| !b.is_ascii_whitespace()) {
        serde_json::from_slice::<DeleteOptions>(body)
            .map_err(|e| StoreError::BadRequest(format!("invalid DeleteOptions: {e}")))?
    } else {
        DeleteOptions {
            grace_period_seconds: q.grace_period_seconds,
            propagation_policy: q.propagation_policy.clone(),
            ..DeleteOptions::default()
        }
    };
    if q.dry_run || opts.dry_run.as_ref().is_some_and(|d| !d.is_empty()) {
        return Err(StoreError::BadRequest(
            "dryRun is not supported by fake-kube".into(),
        ));
    }
    Ok(opts)
}

/// The answer to a delete of one object.
fn delete_response(target: &Target, outcome: &DeleteOutcome) -> Response {
    match outcome {
        DeleteOutcome::Deleted(o) if !strategy::returns_deleted_object(target.rt) => {
            status::ok(&status::delete_success(target.rt, o))
        }
        other => status::ok(other.object()),
    }
}

/// DELETE on an object.
pub(crate) async fn delete(shared: &Arc<Shared>, target: Target, request: Request) -> Response {
    let q = match query_of(&target, &request) {
        Ok(q) => q,
        Err(e) => return status::error(&e),
    };
    let body = match body_of(request).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let opts = match delete_options(&q, &body) {
        Ok(o) => o,
        Err(e) => return status::error(&e),
    };
    let Some(name) = target.name.as_deref() else {
        return status::method_not_allowed();
    };
    let outcome = if target.rt == CRDS {
        definition::delete(&shared.store, name, &opts)
    } else {
        deletion::delete(
            &shared.store,
            target.rt,
            target.namespace.as_deref(),
            name,
            &opts,
        )
    };
    after_write(&shared.store, &target);
    respond(outcome.map(|outcome| delete_response(&target, &outcome)))
}

/// DELETE on a collection (`deletecollection`): every object matching the
/// selectors, each under the rules of a single delete; answers with the list of
/// deleted (or now terminating) objects.
pub(crate) async fn delete_collection(
    shared: &Arc<Shared>,
    target: Target,
    request: Request,
) -> Response {
    let q = match query_of(&target, &request) {
        Ok(q) => q,
        Err(e) => return status::error(&e),
    };
    let body = match body_of(request).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let opts = match delete_options(&q, &body) {
        Ok(o) => o,
        Err(e) => return status::error(&e),
    };
    let store = &shared.store;
    let ns = target.namespace.as_deref();
    let (items, _) = store.list(target.rt, ns);
    let mut done = Vec::new();
    for o in items
        .iter()
        .filter(|o| q.label_selector.matches(o) && q.field_selector.matches(target.rt, o))
    {
        let name = o
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let ons = o.pointer("/metadata/namespace").and_then(Value::as_str);
        let outcome = if target.rt == CRDS {
            definition::delete(store, name, &opts)
        } else {
            deletion::delete(store, target.rt, ons.or(ns), name, &opts)
        };
        match outcome {
            Ok(outcome) => done.push(outcome.object().clone()),
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return status::error(&e),
        }
    }
    after_write(store, &target);
    status::ok(&json!({
        "kind": target.rt.list_kind(),
        "apiVersion": target.rt.api_version(),
        "metadata": {"resourceVersion": store.resource_version().to_string()},
        "items": done,
    }))
}
