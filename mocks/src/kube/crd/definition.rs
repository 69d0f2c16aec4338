//! The CustomResourceDefinition type's own rules: defaults, validation, the status
//! its controllers write, and deletion.
//!
//! - Defaults (`SetDefaults_CustomResourceDefinition`): `names.singular` is the kind
//!   in lower case, `names.listKind` is `<Kind>List`, `conversion.strategy` is
//!   `None`, a version's missing `served`/`storage` are `false`.
//! - Validation (a subset of `ValidateCustomResourceDefinition`, in its words): the
//!   name is `<plural>.<group>`, the group a domain with a dot, the scope
//!   `Namespaced` or `Cluster`, at least one version and exactly one `storage`
//!   version, unique DNS-1035 version names, every version with a structural
//!   `schema.openAPIV3Schema` (see [`super::schema::check_structural`]), names set
//!   and DNS-1035, printer columns with a name, a known type and format, and a
//!   `.`-path; on update, the group and plural (and, once established, the scope and
//!   kind) cannot change and every stored version must still be listed.
//! - Status, as the naming and establishing controllers leave it:
//!   `acceptedNames` (the names no other CRD of the group, nor a built-in type,
//!   already uses), `NamesAccepted` (`NoConflicts`, or `PluralConflict`,
//!   `SingularConflict`, `ShortNamesConflict`, `KindConflict`, `ListKindConflict`
//!   with `"x" is already in use`) and `Established` (`InitialNamesAccepted`, or
//!   `NotAccepted` while names conflict), and `storedVersions`.
//! - Deletion: the first DELETE marks the CRD (`deletionTimestamp`, the
//!   `customresourcecleanup.apiextensions.k8s.io` finalizer, `Terminating`), then
//!   deletes its objects as `deletecollection` would; once none is left the finalizer
//!   goes and the CRD with it, and CRDs of the group whose names it held get them.

use serde_json::{Map, Value, json};

use super::super::deletion::{self, DeleteOptions, DeleteOutcome};
use super::super::field::{BadValue, FieldError, go_quote};
use super::super::meta::{metadata_mut, now_rfc3339};
use super::super::resources::{ALL, CUSTOM_RESOURCE_DEFINITIONS as CRDS, ResourceType};
use super::super::store::{Store, StoreError};
use super::super::strategy;
use super::{CLEANUP_FINALIZER, resource_type, schema, str_at, strings_at};

const SCOPES: &[&str] = &["Cluster", "Namespaced"];
const COLUMN_TYPES: &[&str] = &["boolean", "date", "integer", "number", "string"];
const COLUMN_FORMATS: &[&str] = &[
    "byte",
    "date",
    "date-time",
    "double",
    "float",
    "int32",
    "int64",
    "password",
];

fn condition<'a>(crd: &'a Value, ty: &str) -> Option<&'a Value> {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == ty))
}

fn condition_true(crd: &Value, ty: &str) -> bool {
    condition(crd, ty).is_some_and(|c| c["status"] == "True")
}

/// Whether the CRD is `Established` (its versions are served).
pub fn is_established(crd: &Value) -> bool {
    condition_true(crd, "Established")
}

/// Whether the CRD is being deleted.
pub fn is_terminating(crd: &Value) -> bool {
    deletion::is_terminating(crd) || condition_true(crd, "Terminating")
}

fn new_condition(ty: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": ty, "status": status, "lastTransitionTime": now_rfc3339(),
        "reason": reason, "message": message})
}

/// `SetCRDCondition`: replaces the condition of that type (keeping its
/// `lastTransitionTime` when the status did not change) or appends it.
fn set_condition(crd: &mut Value, mut cond: Value) {
    let Some(map) = crd.as_object_mut() else {
        return;
    };
    let status = map.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    let conditions = &mut status["conditions"];
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let Some(list) = conditions.as_array_mut() else {
        return;
    };
    match list.iter_mut().find(|c| c["type"] == cond["type"]) {
        Some(existing) => {
            if existing["status"] == cond["status"] {
                cond["lastTransitionTime"] = existing["lastTransitionTime"].clone();
            }
            *existing = cond;
        }
        None => list.push(cond),
    }
}

fn spec_mut(crd: &mut Value) -> Option<&mut Map<String, Value>> {
    crd.get_mut("spec").and_then(Value::as_object_mut)
}

/// `SetDefaults_CustomResourceDefinitionSpec`, and `false` for a version's missing
/// `served`/`storage` (as decoding into the typed object gives).
pub fn set_defaults(crd: &mut Value) {
    let Some(spec) = spec_mut(crd) else {
        return;
    };
    if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) {
        let kind = names
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if names
            .get("singular")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            names.insert("singular".into(), json!(kind.to_lowercase()));
        }
        if names
            .get("listKind")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
            && !kind.is_empty()
        {
            names.insert("listKind".into(), json!(format!("{kind}List")));
        }
    }
    if spec.get("conversion").is_none_or(Value::is_null) {
        spec.insert("conversion".into(), json!({"strategy": "None"}));
    }
    if let Some(versions) = spec.get_mut("versions").and_then(Value::as_array_mut) {
        for v in versions.iter_mut().filter_map(Value::as_object_mut) {
            for k in ["served", "storage"] {
                v.entry(k).or_insert(json!(false));
            }
        }
    }
}

const DNS1123_SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1035_LABEL: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push("must be no more than 253 characters".to_owned());
    }
    if strategy::name_error(s).is_some() {
        errs.push(DNS1123_SUBDOMAIN.to_owned());
    }
    errs
}

fn dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    let ok = s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok {
        errs.push(DNS1035_LABEL.to_owned());
    }
    errs
}

fn name_checks(errors: &mut Vec<FieldError>, names: &Value, path: &str) {
    let label =
        |errors: &mut Vec<FieldError>, field: &str, value: &str, prefix: &str, lower: bool| {
            if value.is_empty() {
                return;
            }
            let checked = if lower {
                value.to_lowercase()
            } else {
                value.to_owned()
            };
            let errs = dns1035_label(&checked);
            if !errs.is_empty() {
                errors.push(FieldError::invalid(
                    &format!("{path}.{field}"),
                    BadValue::Str(value.to_owned()),
                    &format!("{prefix}{}", errs.join(",")),
                ));
            }
        };
    label(errors, "plural", str_at(names, "/plural"), "", false);
    label(errors, "singular", str_at(names, "/singular"), "", false);
    let mixed = "may have mixed case, but should otherwise match: ";
    label(errors, "kind", str_at(names, "/kind"), mixed, true);
    label(errors, "listKind", str_at(names, "/listKind"), mixed, true);
    for (i, s) in strings_at(names, "/shortNames").iter().enumerate() {
        label(errors, &format!("shortNames[{i}]"), s, "", false);
    }
    let (kind, list_kind) = (str_at(names, "/kind"), str_at(names, "/listKind"));
    if !kind.is_empty() && kind == list_kind {
        errors.push(FieldError::invalid(
            &format!("{path}.listKind"),
            BadValue::Str(list_kind.to_owned()),
            "kind and listKind may not be the same",
        ));
    }
    for (i, s) in strings_at(names, "/categories").iter().enumerate() {
        label(errors, &format!("categories[{i}]"), s, "", false);
    }
}

fn column_checks(errors: &mut Vec<FieldError>, column: &Value, path: &str) {
    if str_at(column, "/name").is_empty() {
        errors.push(FieldError::required(&format!("{path}.name"), ""));
    }
    let ty = str_at(column, "/type");
    let types = format!("must be one of {}", COLUMN_TYPES.join(","));
    if ty.is_empty() {
        errors.push(FieldError::required(&format!("{path}.type"), &types));
    } else if !COLUMN_TYPES.contains(&ty) {
        errors.push(FieldError::invalid(
            &format!("{path}.type"),
            BadValue::Str(ty.to_owned()),
            &types,
        ));
    }
    let format = str_at(column, "/format");
    if !format.is_empty() && !COLUMN_FORMATS.contains(&format) {
        errors.push(FieldError::invalid(
            &format!("{path}.format"),
            BadValue::Str(format.to_owned()),
            &format!("must be one of {}", COLUMN_FORMATS.join(",")),
        ));
    }
    // The internal type's field name, as the real server's errors say it.
    let json_path = str_at(column, "/jsonPath");
    if json_path.is_empty() {
        errors.push(FieldError::required(&format!("{path}.JSONPath"), ""));
    } else if !json_path.starts_with('.') {
        errors.push(FieldError::invalid(
            &format!("{path}.JSONPath"),
            BadValue::Str(json_path.to_owned()),
            "must be a simple json path starting with .",
        ));
    }
}

/// `ValidateCustomResourceDefinition` (and `...Update` with `old`), the checks
/// listed in the module docs.
pub fn validate(crd: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let name = str_at(crd, "/metadata/name");
    let group = str_at(crd, "/spec/group");
    let plural = str_at(crd, "/spec/names/plural");
    for e in dns1123_subdomain(name) {
        errors.push(FieldError::invalid(
            "metadata.name",
            BadValue::Str(name.to_owned()),
            &e,
        ));
    }
    if name != format!("{plural}.{group}") {
        errors.push(FieldError::invalid(
            "metadata.name",
            BadValue::Str(name.to_owned()),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if group.is_empty() {
        errors.push(FieldError::required("spec.group", ""));
    } else if let errs @ [_, ..] = dns1123_subdomain(group).as_slice() {
        errors.push(FieldError::invalid(
            "spec.group",
            BadValue::Str(group.to_owned()),
            &errs.join(","),
        ));
    } else if !group.contains('.') {
        errors.push(FieldError::invalid(
            "spec.group",
            BadValue::Str(group.to_owned()),
            "should be a domain with at least one dot",
        ));
    }
    let scope = str_at(crd, "/spec/scope");
    if scope.is_empty() {
        errors.push(FieldError::required("spec.scope", ""));
    } else if !SCOPES.contains(&scope) {
        errors.push(FieldError::not_supported(
            "spec.scope",
            BadValue::Str(scope.to_owned()),
            SCOPES,
        ));
    }
    let empty = Vec::new();
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    for (i, v) in versions.iter().enumerate() {
        if v.pointer("/schema/openAPIV3Schema")
            .is_none_or(Value::is_null)
        {
            errors.push(FieldError::required(
                &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                "",
            ));
        }
    }
    let mut storage = 0;
    let mut seen: Vec<&str> = Vec::new();
    let mut unique = true;
    for (i, v) in versions.iter().enumerate() {
        let vname = str_at(v, "/name");
        if v.get("storage").and_then(Value::as_bool) == Some(true) {
            storage += 1;
        }
        if seen.contains(&vname) {
            unique = false;
        }
        seen.push(vname);
        let errs = dns1035_label(vname);
        if !errs.is_empty() {
            errors.push(FieldError::invalid(
                &format!("spec.versions[{i}].name"),
                BadValue::Str(vname.to_owned()),
                &errs.join(","),
            ));
        }
        if let Some(s) = v
            .pointer("/schema/openAPIV3Schema")
            .filter(|s| !s.is_null())
        {
            errors.extend(schema::check_structural(
                s,
                &format!("spec.versions[{i}].schema.openAPIV3Schema"),
            ));
        }
        if let Some(columns) = v.get("additionalPrinterColumns").and_then(Value::as_array) {
            for (j, c) in columns.iter().enumerate() {
                column_checks(
                    &mut errors,
                    c,
                    &format!("spec.versions[{i}].additionalPrinterColumns[{j}]"),
                );
            }
        }
    }
    let versions_value = crd
        .pointer("/spec/versions")
        .cloned()
        .unwrap_or(Value::Null);
    if !unique {
        errors.push(FieldError::invalid(
            "spec.versions",
            BadValue::json(&versions_value),
            "must contain unique version names",
        ));
    }
    if storage != 1 {
        errors.push(FieldError::invalid(
            "spec.versions",
            BadValue::json(&versions_value),
            "must have exactly one version marked as storage version",
        ));
    }
    let names = crd.pointer("/spec/names").cloned().unwrap_or(Value::Null);
    for (field, value) in [
        ("plural", str_at(&names, "/plural")),
        ("singular", str_at(&names, "/singular")),
        ("kind", str_at(&names, "/kind")),
        ("listKind", str_at(&names, "/listKind")),
    ] {
        if value.is_empty() {
            errors.push(FieldError::required(&format!("spec.names.{field}"), ""));
        }
    }
    name_checks(&mut errors, &names, "spec.names");
    if let Some(old) = old {
        let immutable = |errors: &mut Vec<FieldError>, field: &str, pointer: &str| {
            let (now, was) = (str_at(crd, pointer), str_at(old, pointer));
            if now != was {
                errors.push(FieldError::invalid(
                    field,
                    BadValue::Str(now.to_owned()),
                    "field is immutable",
                ));
            }
        };
        if is_established(old) {
            immutable(&mut errors, "spec.scope", "/spec/scope");
            immutable(&mut errors, "spec.names.kind", "/spec/names/kind");
        }
        immutable(&mut errors, "spec.group", "/spec/group");
        immutable(&mut errors, "spec.names.plural", "/spec/names/plural");
        for (i, stored) in strings_at(old, "/status/storedVersions").iter().enumerate() {
            if !seen.contains(&stored.as_str()) {
                errors.push(FieldError::invalid(
                    &format!("status.storedVersions[{i}]"),
                    BadValue::Str(stored.clone()),
                    &format!(
                        "missing from spec.versions; {stored} was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in {stored} and removes {stored} from status.storedVersions"
                    ),
                ));
            }
        }
    }
    errors
}

fn invalid(crd: &Value, errors: Vec<FieldError>) -> StoreError {
    StoreError::invalid_fields(CRDS, str_at(crd, "/metadata/name"), errors)
}

/// The names in use in a group, by other CRDs (their accepted names) and by the
/// built-in types.
struct Used {
    resources: Vec<String>,
    kinds: Vec<String>,
}

fn used_names(all: &[Value], group: &str, except: &str) -> Used {
    let mut used = Used {
        resources: Vec::new(),
        kinds: Vec::new(),
    };
    for crd in all {
        if str_at(crd, "/spec/group") != group || str_at(crd, "/metadata/name") == except {
            continue;
        }
        let accepted = crd
            .pointer("/status/acceptedNames")
            .cloned()
            .unwrap_or(Value::Null);
        used.resources.push(str_at(&accepted, "/plural").to_owned());
        used.resources
            .push(str_at(&accepted, "/singular").to_owned());
        used.resources.extend(strings_at(&accepted, "/shortNames"));
        used.kinds.push(str_at(&accepted, "/kind").to_owned());
        used.kinds.push(str_at(&accepted, "/listKind").to_owned());
    }
    for rt in ALL.iter().filter(|r| r.group == group) {
        used.resources.push(rt.plural.to_owned());
        used.resources.push(rt.singular.to_owned());
        used.resources
            .extend(rt.short_names.iter().map(|s| (*s).to_owned()));
        used.kinds.push(rt.kind.to_owned());
        used.kinds.push(rt.list_kind());
    }
    used.resources.retain(|s| !s.is_empty());
    used.kinds.retain(|s| !s.is_empty());
    used
}

/// `equalToAcceptedOrFresh`.
fn conflict(requested: &str, accepted: &str, used: &[String]) -> Option<String> {
    (requested != accepted && used.iter().any(|u| u == requested))
        .then(|| format!("{} is already in use", go_quote(requested)))
}

/// The naming controller's `calculateNamesAndConditions` (and the establishing
/// controller's step): the accepted names and the `NamesAccepted` and `Established`
/// conditions for `crd`, given the names `used` elsewhere in its group.
fn names_and_conditions(crd: &Value, used: &Used) -> (Value, Value, Value) {
    let requested = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let accepted = crd
        .pointer("/status/acceptedNames")
        .cloned()
        .unwrap_or(json!({}));
    let mut names = accepted.as_object().cloned().unwrap_or_default();
    for k in ["plural", "kind"] {
        names.entry(k).or_insert(json!(""));
    }
    let mut failure: Option<(&str, String)> = None;
    let mut take = |field: &str, reason: &'static str, pool: &[String]| {
        let (r, a) = (str_at(&requested, field), str_at(&accepted, field));
        match conflict(r, a, pool) {
            Some(msg) => failure = Some((reason, msg)),
            None => {
                names.insert(field.trim_start_matches('/').to_owned(), json!(r));
            }
        }
    };
    take("/plural", "PluralConflict", &used.resources);
    take("/singular", "SingularConflict", &used.resources);
    let requested_short = strings_at(&requested, "/shortNames");
    let accepted_short = strings_at(&accepted, "/shortNames");
    if requested_short != accepted_short {
        let errs: Vec<String> = requested_short
            .iter()
            .filter(|s| !accepted_short.contains(s))
            .filter_map(|s| conflict(s, "", &used.resources))
            .collect();
        match errs.len() {
            0 => {
                names.insert("shortNames".into(), json!(requested_short));
            }
            1 => failure = Some(("ShortNamesConflict", errs[0].clone())),
            _ => failure = Some(("ShortNamesConflict", format!("[{}]", errs.join(", ")))),
        }
    }
    let mut take_kind = |field: &str, reason: &'static str| {
        let (r, a) = (str_at(&requested, field), str_at(&accepted, field));
        match conflict(r, a, &used.kinds) {
            Some(msg) => failure = Some((reason, msg)),
            None => {
                names.insert(field.trim_start_matches('/').to_owned(), json!(r));
            }
        }
    };
    take_kind("/kind", "KindConflict");
    take_kind("/listKind", "ListKindConflict");
    match requested.get("categories") {
        Some(c) => names.insert("categories".into(), c.clone()),
        None => names.remove("categories"),
    };
    if names
        .get("shortNames")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
    {
        names.remove("shortNames");
    }
    let names_cond = match &failure {
        Some((reason, msg)) => new_condition("NamesAccepted", "False", reason, msg),
        None => new_condition("NamesAccepted", "True", "NoConflicts", "no conflicts found"),
    };
    let mut established = condition(crd, "Established").cloned().unwrap_or_else(|| {
        new_condition(
            "Established",
            "False",
            "NotAccepted",
            "not all names are accepted",
        )
    });
    if established["status"] != "True" && failure.is_none() {
        established = new_condition(
            "Established",
            "True",
            "InitialNamesAccepted",
            "the initial names have been accepted",
        );
    }
    (Value::Object(names), names_cond, established)
}

fn apply_names(crd: &mut Value, used: &Used) {
    let (names, names_cond, established) = names_and_conditions(crd, used);
    if let Some(map) = crd.as_object_mut() {
        let status = map.entry("status").or_insert_with(|| json!({}));
        if !status.is_object() {
            *status = json!({});
        }
        status["acceptedNames"] = names;
    }
    set_condition(crd, names_cond);
    set_condition(crd, established);
}

fn storage_version(crd: &Value) -> Option<String> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)?
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .and_then(|v| v.get("name").and_then(Value::as_str))
        .map(str::to_owned)
}

fn add_stored_version(crd: &mut Value) {
    let Some(storage) = storage_version(crd) else {
        return;
    };
    let Some(map) = crd.as_object_mut() else {
        return;
    };
    let status = map.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    let stored = &mut status["storedVersions"];
    if !stored.is_array() {
        *stored = json!([]);
    }
    if let Some(list) = stored.as_array_mut()
        && !list.iter().any(|v| v == storage.as_str())
    {
        list.push(json!(storage));
    }
}

/// A create: defaults, validation, then the status the controllers would write.
/// `all` are the CRDs that exist (for name conflicts).
pub fn prepare_create(all: &[Value], crd: &mut Value) -> Result<(), StoreError> {
    set_defaults(crd);
    let errors = validate(crd, None);
    if !errors.is_empty() {
        return Err(invalid(crd, errors));
    }
    metadata_mut(crd).insert("generation".into(), json!(1));
    if let Some(map) = crd.as_object_mut() {
        map.insert("status".into(), json!({}));
    }
    add_stored_version(crd);
    let used = used_names(
        all,
        str_at(crd, "/spec/group"),
        str_at(crd, "/metadata/name"),
    );
    apply_names(crd, &used);
    Ok(())
}

/// An update of the main resource, after the generic rules kept the status:
/// validation against the stored CRD, `storedVersions`, and the names again when
/// they changed.
pub fn finish_update(all: &[Value], current: &Value, next: &mut Value) -> Result<(), StoreError> {
    let errors = validate(next, Some(current));
    if !errors.is_empty() {
        return Err(invalid(next, errors));
    }
    add_stored_version(next);
    if next.pointer("/spec/names") != next.pointer("/status/acceptedNames") || !is_established(next)
    {
        let used = used_names(
            all,
            str_at(next, "/spec/group"),
            str_at(next, "/metadata/name"),
        );
        apply_names(next, &used);
    }
    Ok(())
}

/// Gives the CRDs of `group` whose names were refused another chance (after a CRD
/// freed its names).
pub fn reconcile_group(store: &Store, group: &str) {
    let (all, _) = store.list(CRDS, None);
    for crd in all.iter().filter(|c| str_at(c, "/spec/group") == group) {
        if is_terminating(crd)
            || (is_established(crd) && condition_true(crd, "NamesAccepted"))
            || crd.pointer("/spec/names") == crd.pointer("/status/acceptedNames")
        {
            continue;
        }
        let name = str_at(crd, "/metadata/name").to_owned();
        let used = used_names(&all, group, &name);
        let result = store.modify(CRDS, None, &name, |o| {
            apply_names(o, &used);
            Ok(())
        });
        if let Err(e) = result {
            tracing::debug!("CRD {name}: names not reconsidered: {e}");
        }
    }
}

/// DELETE of a CRD: marks it and starts deleting its objects (see the module docs).
pub fn delete(
    store: &Store,
    name: &str,
    opts: &DeleteOptions,
) -> Result<DeleteOutcome, StoreError> {
    let current = store.get(CRDS, None, name)?;
    if deletion::is_terminating(&current) {
        // Marked already: the finalizer holds it, as for any object.
        return deletion::delete(store, CRDS, None, name, opts);
    }
    deletion::validate_options(opts)?;
    deletion::check_preconditions(CRDS, name, &current, opts)?;
    let rv = current.pointer("/metadata/resourceVersion").cloned();
    let marked = store.modify(CRDS, None, name, |o| {
        if o.pointer("/metadata/resourceVersion").cloned() != rv {
            return Err(StoreError::Conflict {
                plural: CRDS.plural.to_owned(),
                name: name.to_owned(),
            });
        }
        let meta = metadata_mut(o);
        meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
        let finalizers = meta.entry("finalizers").or_insert_with(|| json!([]));
        if !finalizers.is_array() {
            *finalizers = json!([]);
        }
        if let Some(list) = finalizers.as_array_mut()
            && !list.iter().any(|f| f == CLEANUP_FINALIZER)
        {
            list.push(json!(CLEANUP_FINALIZER));
        }
        set_condition(
            o,
            new_condition(
                "Terminating",
                "True",
                "InstanceDeletionPending",
                "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
            ),
        );
        Ok(())
    })?;
    cleanup(store, name)?;
    Ok(DeleteOutcome::Pending(marked))
}

fn has_cleanup_finalizer(crd: &Value) -> bool {
    crd.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x == CLEANUP_FINALIZER))
}

/// Some type to reach a CRD's objects through (they are stored by group and
/// plural, whatever the version).
fn any_version_type(crd: &Value) -> Option<ResourceType> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)?
        .iter()
        .find_map(|v| resource_type(crd, v))
}

/// The CRD finalizer's controller: for a CRD being deleted, deletes its objects
/// and, once none is left, removes the finalizer (and so the CRD). Called after the
/// CRD's DELETE and after every write or delete of one of its objects.
pub fn cleanup(store: &Store, name: &str) -> Result<(), StoreError> {
    let crd = match store.get(CRDS, None, name) {
        Ok(c) => c,
        Err(StoreError::NotFound { .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    if !deletion::is_terminating(&crd) || !has_cleanup_finalizer(&crd) {
        return Ok(());
    }
    let done = match any_version_type(&crd).filter(|_| is_established(&crd)) {
        Some(rt) => {
            let (objects, _) = store.list(rt, None);
            for o in &objects {
                let ns = o.pointer("/metadata/namespace").and_then(Value::as_str);
                let oname = str_at(o, "/metadata/name");
                match deletion::delete(store, rt, ns, oname, &DeleteOptions::default()) {
                    Ok(_) | Err(StoreError::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            if !store.list(rt, None).0.is_empty() {
                store.modify(CRDS, None, name, |o| {
                    set_condition(
                        o,
                        new_condition(
                            "Terminating",
                            "True",
                            "InstanceDeletionInProgress",
                            "CustomResource deletion is in progress",
                        ),
                    );
                    Ok(())
                })?;
                return Ok(());
            }
            new_condition(
                "Terminating",
                "False",
                "InstanceDeletionCompleted",
                "removed all instances",
            )
        }
        None => new_condition(
            "Terminating",
            "False",
            "NeverEstablished",
            "resource was never established",
        ),
    };
    store.modify(CRDS, None, name, |o| {
        set_condition(o, done);
        if let Some(list) = o
            .pointer_mut("/metadata/finalizers")
            .and_then(Value::as_array_mut)
        {
            list.retain(|f| f != CLEANUP_FINALIZER);
        }
        Ok(())
    })?;
    deletion::finalize_if_done(store, CRDS, None, name)?;
    reconcile_group(store, str_at(&crd, "/spec/group"));
    Ok(())
}
