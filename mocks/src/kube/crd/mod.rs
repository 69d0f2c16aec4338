//! CustomResourceDefinitions and the custom resources they add.
//!
//! `apiextensions.k8s.io/v1` CustomResourceDefinitions are a built-in type
//! ([`crate::kube::resources::CUSTOM_RESOURCE_DEFINITIONS`]); what the
//! apiextensions-apiserver and its controllers do around them is done here,
//! synchronously, within the request that causes it:
//! - [`definition`]: a CRD's defaults, validation (422 naming the field), and the
//!   status the naming and establishing controllers would write (`NamesAccepted`,
//!   `Established`, `acceptedNames`, `storedVersions`); deleting a CRD deletes its
//!   objects first (the `customresourcecleanup` finalizer's controller).
//! - [`Registry`]: every served version of every established CRD as a resource type
//!   ([`CustomVersion`]), rebuilt whenever a CRD is written (`Cache`). Routing,
//!   discovery, OpenAPI, tables and the REST verbs ask it.
//! - [`schema`]: a version's `openAPIV3Schema` applied to its objects (pruning,
//!   defaults, validation); [`jsonpath`]: printer columns and selectable fields.
//!
//! Differences from the real server (see also the module docs of [`schema`] and
//! [`jsonpath`]):
//! - Everything happens at once: a CRD is `Established` in the response to its
//!   create (the real server takes a moment, and then makes the first create of a
//!   custom resource wait two seconds); a CRD's deletion is complete in the response
//!   to its DELETE unless one of its objects has finalizers (then it stays
//!   `Terminating` until the last one goes).
//! - A CRD whose names (plural, singular, short names, kind, list kind) are those of
//!   a built-in type of its group does not get `NamesAccepted` (the real server
//!   accepts them and serves its built-in type at those paths).
//! - Conversion: only the `None` strategy (objects are the same in every version,
//!   `apiVersion` aside); a `Webhook` strategy is stored but not called.
//! - `subresources.scale` is accepted but not served (`/scale` is 404 and not in
//!   discovery); no `x-kubernetes-validations` (CEL), no deprecation warnings for
//!   `deprecated` versions, no `KubernetesAPIApprovalPolicyConformant` condition for
//!   `*.k8s.io` groups; `spec.preserveUnknownFields` (a v1beta1 leftover) is
//!   ignored: pruning follows the schema and its `x-kubernetes-preserve-unknown-fields`.
//! - A CRD's own body is not pruned or type-checked beyond the validation in
//!   [`definition`] (`fieldValidation` applies to custom resources only).

pub mod definition;
pub mod jsonpath;
pub mod schema;

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde_json::{Value, json};

use super::field::FieldError;
use super::intern::{intern, intern_list};
use super::resources::{CUSTOM_RESOURCE_DEFINITIONS, Custom, ResourceType};
use super::store::{Store, StoreError};
use super::strategy::{self, Part};
use super::table::age;
use jsonpath::JsonPath;

/// The finalizer the apiserver adds to a CRD being deleted until its objects are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// The verbs discovery lists for a custom resource, in the real server's order.
pub const CR_VERBS: &[&str] = &[
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "create",
    "update",
    "watch",
];

/// `metadata.name`'s description in the real server's Table column definitions.
pub const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

const CREATION_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// One printer column of a served version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    /// integer, number, string, boolean or date.
    pub ty: String,
    pub format: String,
    pub description: String,
    /// 0: always shown; more: only with `-o wide`.
    pub priority: i64,
    pub path: JsonPath,
}

/// One served version of an established CRD: a resource type and what serving it
/// needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomVersion {
    pub rt: ResourceType,
    /// The CRD's name (`plural.group`).
    pub crd_name: String,
    /// `schema.openAPIV3Schema`.
    pub schema: Option<Value>,
    /// The Table columns after `Name`: the version's `additionalPrinterColumns` (up
    /// to the first one whose path cannot be used), or `Age` when it has none.
    pub columns: Vec<Column>,
    /// The CRD is being deleted: no new objects.
    pub terminating: bool,
}

/// Every served version of every established CRD.
#[derive(Debug, Default)]
pub struct Registry {
    versions: Vec<Arc<CustomVersion>>,
}

impl Registry {
    /// The types the CRD objects `crds` define.
    pub fn from_crds(crds: &[Value]) -> Self {
        let mut versions: Vec<Arc<CustomVersion>> = crds
            .iter()
            .filter(|crd| definition::is_established(crd))
            .flat_map(served_versions)
            .map(Arc::new)
            .collect();
        versions.sort_by(|a, b| {
            (a.rt.group, a.rt.plural, a.rt.version).cmp(&(b.rt.group, b.rt.plural, b.rt.version))
        });
        Self { versions }
    }

    /// The version serving `group`/`version`/`plural`, if any.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&Arc<CustomVersion>> {
        self.versions
            .iter()
            .find(|v| v.rt.group == group && v.rt.version == version && v.rt.plural == plural)
    }

    /// The version serving `rt`, if it is a custom resource type.
    pub fn of(&self, rt: ResourceType) -> Option<&Arc<CustomVersion>> {
        self.find(rt.group, rt.version, rt.plural)
    }

    /// Every served custom resource type.
    pub fn types(&self) -> impl Iterator<Item = ResourceType> + '_ {
        self.versions.iter().map(|v| v.rt)
    }

    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }
}

/// The registry of a store, rebuilt when its CRDs change: the store's snapshot of
/// the CRD type is shared until the next CRD write, so an unchanged snapshot means
/// an unchanged registry.
#[derive(Default)]
pub(crate) struct Cache {
    built: Mutex<Option<Built>>,
}

/// A registry and the CRD snapshot it was built from.
type Built = (Arc<[Value]>, Arc<Registry>);

impl Cache {
    /// The registry for the CRDs `store` holds now.
    pub fn get(&self, store: &Store) -> Arc<Registry> {
        let crds = store.snapshot(CUSTOM_RESOURCE_DEFINITIONS);
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((from, registry)) = built.as_ref()
            && Arc::ptr_eq(from, &crds)
        {
            return Arc::clone(registry);
        }
        let registry = Arc::new(Registry::from_crds(&crds));
        *built = Some((crds, Arc::clone(&registry)));
        registry
    }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn strings_at(v: &Value, pointer: &str) -> Vec<String> {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The resource type a CRD's version `version` (an item of `spec.versions`) is
/// served as, named by the CRD's accepted names.
pub(crate) fn resource_type(crd: &Value, version: &Value) -> Option<ResourceType> {
    let group = str_at(crd, "/spec/group");
    let plural = str_at(crd, "/status/acceptedNames/plural");
    let kind = str_at(crd, "/status/acceptedNames/kind");
    let name = version
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if group.is_empty() || plural.is_empty() || kind.is_empty() || name.is_empty() {
        return None;
    }
    let singular = Some(str_at(crd, "/status/acceptedNames/singular"))
        .filter(|s| !s.is_empty())
        .map_or_else(|| kind.to_ascii_lowercase(), str::to_owned);
    let list_kind = Some(str_at(crd, "/status/acceptedNames/listKind"))
        .filter(|s| !s.is_empty())
        .map_or_else(|| format!("{kind}List"), str::to_owned);
    let selectable: Vec<String> = version
        .get("selectableFields")
        .and_then(Value::as_array)
        .map(|fields| {
            fields
                .iter()
                .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                .filter_map(|p| JsonPath::parse(p).ok()?.field_label())
                .collect()
        })
        .unwrap_or_default();
    Some(ResourceType {
        group: intern(group),
        version: intern(name),
        plural: intern(plural),
        singular: intern(&singular),
        kind: intern(kind),
        namespaced: str_at(crd, "/spec/scope") == "Namespaced",
        short_names: intern_list(&strings_at(crd, "/status/acceptedNames/shortNames")),
        verbs: CR_VERBS,
        custom: Some(Custom {
            list_kind: intern(&list_kind),
            status_subresource: version
                .pointer("/subresources/status")
                .is_some_and(Value::is_object),
            categories: intern_list(&strings_at(crd, "/status/acceptedNames/categories")),
            selectable_fields: intern_list(&selectable),
        }),
    })
}

/// The served versions of an established CRD.
fn served_versions(crd: &Value) -> Vec<CustomVersion> {
    let Some(versions) = crd.pointer("/spec/versions").and_then(Value::as_array) else {
        return Vec::new();
    };
    let terminating = definition::is_terminating(crd);
    versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool) == Some(true))
        .filter_map(|v| {
            Some(CustomVersion {
                rt: resource_type(crd, v)?,
                crd_name: str_at(crd, "/metadata/name").to_owned(),
                schema: v.pointer("/schema/openAPIV3Schema").cloned(),
                columns: columns(v),
                terminating,
            })
        })
        .collect()
}

/// The columns of a version's Table after `Name` (`serveDefaultColumnsIfEmpty`,
/// then the table convertor, which stops at a column it cannot parse).
fn columns(version: &Value) -> Vec<Column> {
    let declared = version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty());
    let Some(declared) = declared else {
        return vec![Column {
            name: "Age".into(),
            ty: "date".into(),
            format: String::new(),
            description: CREATION_DESCRIPTION.into(),
            priority: 0,
            path: JsonPath::parse(".metadata.creationTimestamp").unwrap_or(JsonPath::empty()),
        }];
    };
    let mut out = Vec::new();
    for c in declared {
        let path_text = str_at(c, "/jsonPath");
        let Ok(path) = JsonPath::parse(path_text) else {
            break;
        };
        let description = Some(str_at(c, "/description"))
            .filter(|d| !d.is_empty())
            .map_or_else(
                || format!("Custom resource definition column (in JSONPath format): {path_text}"),
                str::to_owned,
            );
        out.push(Column {
            name: str_at(c, "/name").to_owned(),
            ty: str_at(c, "/type").to_owned(),
            format: str_at(c, "/format").to_owned(),
            description,
            priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
            path,
        });
    }
    out
}

/// The Table column definitions of a custom resource version.
pub fn column_definitions(cv: &CustomVersion) -> Vec<Value> {
    let mut defs = vec![json!({"name": "Name", "type": "string", "format": "name",
        "description": NAME_DESCRIPTION, "priority": 0})];
    defs.extend(cv.columns.iter().map(|c| {
        json!({"name": c.name, "type": c.ty, "format": c.format,
            "description": c.description, "priority": c.priority})
    }));
    defs
}

/// The cells of one object's row: its name, then each column's first value, typed
/// as the column says (`null` when missing or of another type; kubectl prints
/// `<none>`).
pub fn cells(cv: &CustomVersion, o: &Value, now: SystemTime) -> Vec<Value> {
    let mut cells = vec![json!(str_at(o, "/metadata/name"))];
    for c in &cv.columns {
        cells.push(match c.path.first(o) {
            Some(v) => cell(&c.ty, v, now),
            None => Value::Null,
        });
    }
    cells
}

fn cell(ty: &str, v: &Value, now: SystemTime) -> Value {
    match (ty, v) {
        (_, Value::Null) => Value::Null,
        // A string column prints whatever is there (lists and maps as JSON).
        ("string", Value::String(s)) => json!(s),
        ("string", Value::Number(n)) => json!(super::field::go_number(n)),
        ("string", other) => json!(other.to_string()),
        ("integer", Value::Number(n)) => n
            .as_i64()
            .map(|i| json!(i))
            .or_else(|| n.as_f64().map(|f| json!(f.trunc() as i64)))
            .unwrap_or(Value::Null),
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, |f| json!(f)),
        ("boolean", Value::Bool(b)) => json!(b),
        ("date", Value::String(s)) => {
            if humantime::parse_rfc3339_weak(s).is_ok() {
                json!(age(Some(s), now))
            } else {
                json!("<invalid>")
            }
        }
        _ => Value::Null,
    }
}

/// How a write treats fields the schema does not know (`fieldValidation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Drop them silently.
    Ignore,
    /// Drop them and say so in `Warning` headers (the server's default).
    #[default]
    Warn,
    /// Refuse the write.
    Strict,
}

impl FieldValidation {
    /// The `fieldValidation` query parameter (400 for an unknown value).
    pub fn parse(v: Option<&str>) -> Result<Self, StoreError> {
        match v.unwrap_or_default() {
            "" | "Warn" => Ok(Self::Warn),
            "Ignore" => Ok(Self::Ignore),
            "Strict" => Ok(Self::Strict),
            other => Err(StoreError::BadRequest(format!(
                "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
            ))),
        }
    }
}

/// The strict decoding error's text: `strict decoding error: unknown field "a", ...`.
pub fn strict_error(unknown: &[String]) -> String {
    let fields: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field {}", super::field::go_quote(f)))
        .collect();
    format!("strict decoding error: {}", fields.join(", "))
}

/// What the request decoder does to a custom resource before anything else: drops
/// fields the schema does not know, `null`s it does not allow, and fills in
/// defaults. Returns the dropped fields' paths.
pub fn decode(cv: &CustomVersion, object: &mut Value) -> Vec<String> {
    let unknown = schema::prune(object, cv.schema.as_ref());
    if let Some(s) = &cv.schema {
        schema::drop_nulls(object, s);
        schema::default(object, s);
    }
    unknown
}

/// Validates a custom resource about to be stored: its name and, for the main
/// resource, the whole object against the schema; for `/status`, `status` against
/// the schema's `status`. `old` is the stored object on updates (ratcheting).
pub fn validate(
    cv: &CustomVersion,
    object: &Value,
    old: Option<&Value>,
    part: Part,
) -> Result<(), StoreError> {
    let name = str_at(object, "/metadata/name");
    let generate = str_at(object, "/metadata/generateName");
    let mut errors: Vec<FieldError> = Vec::new();
    if old.is_none() {
        // The store makes the name from `generateName` (a suffix of letters and
        // digits): only the prefix can be wrong then.
        let (field, value, checked) = if name.is_empty() && !generate.is_empty() {
            ("metadata.generateName", generate, format!("{generate}x"))
        } else {
            ("metadata.name", name, name.to_owned())
        };
        if let Some(detail) = strategy::name_error(&checked) {
            errors.push(FieldError::invalid(
                field,
                super::field::BadValue::Str(value.to_owned()),
                &detail,
            ));
        }
    }
    if let Some(s) = &cv.schema {
        match part {
            Part::Main => errors.extend(schema::validate(object, s, old, "")),
            Part::Status => {
                if let (Some(status), Some(status_schema)) =
                    (object.get("status"), s.pointer("/properties/status"))
                {
                    let old_status = old.and_then(|o| o.get("status"));
                    errors.extend(schema::validate(
                        status,
                        status_schema,
                        old_status,
                        "status",
                    ));
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(StoreError::invalid_fields(cv.rt, name, errors))
    }
}

#[cfg(test)]
mod tests;
