//! A version's `openAPIV3Schema` applied to custom resources the way the apiserver's
//! structural schema code does: pruning, dropping `null`s, defaulting, validation,
//! and the structural checks a CRD's schema itself must pass.
//!
//! Schemas are used as the JSON the CRD was written with (`serde_json::Value`), not
//! parsed into types: an unknown keyword is then simply not enforced.
//!
//! Enforced: `type` (object, array, string, integer, number, boolean; an integral
//! number is an integer, an integer a number), `nullable`, `properties`, `required`,
//! `additionalProperties` (maps), `items`, `enum`, `minimum`/`maximum` (and their
//! `exclusive*`), `multipleOf`, `minLength`/`maxLength` (in characters),
//! `pattern` (the `regex` crate: RE2 syntax, as Go's), `minItems`/`maxItems`,
//! `minProperties`/`maxProperties`, `format: date-time` and `format: date`,
//! `x-kubernetes-int-or-string`, `x-kubernetes-preserve-unknown-fields`,
//! `x-kubernetes-embedded-resource` (its `apiVersion`/`kind`/`metadata` are kept),
//! `x-kubernetes-list-type: set|map` (duplicates are refused), `default`.
//! Validation ratchets as the real server's (`CRDValidationRatcheting`, on since
//! 1.30): a value unchanged from the stored object is not validated again.
//!
//! Not enforced (accepted, no effect): other `format`s, `x-kubernetes-validations`
//! (CEL), `x-kubernetes-map-type`, `allOf`/`anyOf`/`oneOf`/`not`, `uniqueItems`.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use serde_json::{Map, Value};

use crate::kube::field::{BadValue, FieldError, go_float, go_quote};

/// The fields of `ObjectMeta`: anything else under `metadata` is dropped.
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

const META_FIELDS: &[&str] = &["apiVersion", "kind", "metadata"];

fn flag(s: &Value, name: &str) -> bool {
    s.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn properties(s: &Value) -> Option<&Map<String, Value>> {
    s.get("properties").and_then(Value::as_object)
}

fn property<'a>(s: &'a Value, k: &str) -> Option<&'a Value> {
    properties(s).and_then(|p| p.get(k))
}

/// `additionalProperties` as a schema (`true` is a schema without constraints).
fn additional(s: &Value) -> Option<&Value> {
    static EMPTY: OnceLock<Value> = OnceLock::new();
    match s.get("additionalProperties") {
        Some(v @ Value::Object(_)) => Some(v),
        Some(Value::Bool(true)) => Some(EMPTY.get_or_init(|| Value::Object(Map::new()))),
        _ => None,
    }
}

fn items(s: &Value) -> Option<&Value> {
    s.get("items").filter(|i| i.is_object())
}

fn type_of(s: &Value) -> &str {
    s.get("type").and_then(Value::as_str).unwrap_or_default()
}

/// A path as the pruning code records unknown fields: `spec.list[0].name`.
#[derive(Default)]
struct PathBuf(String);

impl PathBuf {
    fn key(&self, k: &str) -> String {
        if self.0.is_empty() {
            k.to_owned()
        } else {
            format!("{}.{k}", self.0)
        }
    }

    fn index(&self, i: usize) -> String {
        format!("{}[{i}]", self.0)
    }
}

/// Removes what the schema does not specify (unless
/// `x-kubernetes-preserve-unknown-fields`), unknown `metadata` fields included, and
/// returns the removed fields' paths, sorted (for `fieldValidation` warnings and
/// errors). `apiVersion`, `kind` and `metadata` at the root belong to the server.
pub fn prune(object: &mut Value, schema: Option<&Value>) -> Vec<String> {
    let mut unknown = Vec::new();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let extra: Vec<String> = meta
            .keys()
            .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
            .cloned()
            .collect();
        for k in extra {
            meta.remove(&k);
            unknown.push(format!("metadata.{k}"));
        }
    }
    prune_node(object, schema, &PathBuf::default(), true, &mut unknown);
    unknown.sort();
    unknown
}

fn prune_node(
    x: &mut Value,
    s: Option<&Value>,
    path: &PathBuf,
    embedded_root: bool,
    unknown: &mut Vec<String>,
) {
    if let Some(s) = s
        && flag(s, "x-kubernetes-preserve-unknown-fields")
    {
        skip_prune(x, s, path, embedded_root, unknown);
        return;
    }
    let embedded = embedded_root || s.is_some_and(|s| flag(s, "x-kubernetes-embedded-resource"));
    match x {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let child = s.and_then(|s| property(s, &k).or_else(|| additional(s)));
                match child {
                    Some(child) => {
                        if let Some(v) = map.get_mut(&k) {
                            prune_node(v, Some(child), &PathBuf(path.key(&k)), false, unknown);
                        }
                    }
                    None => {
                        unknown.push(path.key(&k));
                        map.remove(&k);
                    }
                }
            }
        }
        Value::Array(list) => {
            let item_schema = s.and_then(items);
            for (i, v) in list.iter_mut().enumerate() {
                prune_node(v, item_schema, &PathBuf(path.index(i)), false, unknown);
            }
        }
        _ => {}
    }
}

/// Under `x-kubernetes-preserve-unknown-fields`: unknown fields stay, the specified
/// ones are pruned by their own schemas.
fn skip_prune(
    x: &mut Value,
    s: &Value,
    path: &PathBuf,
    embedded_root: bool,
    unknown: &mut Vec<String>,
) {
    let embedded = embedded_root || flag(s, "x-kubernetes-embedded-resource");
    match x {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(child) = property(s, k).or_else(|| additional(s)) {
                    prune_node(v, Some(child), &PathBuf(path.key(k)), false, unknown);
                }
            }
        }
        Value::Array(list) => {
            if let Some(item_schema) = items(s) {
                for (i, v) in list.iter_mut().enumerate() {
                    skip_prune(v, item_schema, &PathBuf(path.index(i)), false, unknown);
                }
            }
        }
        _ => {}
    }
}

/// Removes `null` object fields whose schema is neither `nullable` nor defaulted
/// (`PruneNonNullableNullsWithoutDefaults`).
pub fn drop_nulls(x: &mut Value, s: &Value) {
    match x {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let Some(child) = property(s, &k).or_else(|| additional(s)) else {
                    continue;
                };
                if map.get(&k).is_some_and(Value::is_null)
                    && !flag(child, "nullable")
                    && child.get("default").is_none()
                {
                    map.remove(&k);
                } else if let Some(v) = map.get_mut(&k) {
                    drop_nulls(v, child);
                }
            }
        }
        Value::Array(list) => {
            if let Some(item_schema) = items(s) {
                for v in list {
                    drop_nulls(v, item_schema);
                }
            }
        }
        _ => {}
    }
}

fn non_nullable_null(v: &Value, s: &Value) -> bool {
    v.is_null() && !flag(s, "nullable")
}

/// Fills in `default`s: missing fields (and non-nullable `null`s) get a copy of
/// their schema's default, then are defaulted inside.
pub fn default(x: &mut Value, s: &Value) {
    match x {
        Value::Object(map) => {
            if let Some(props) = properties(s) {
                for (k, prop) in props {
                    let Some(d) = prop.get("default") else {
                        continue;
                    };
                    if map.get(k).is_none_or(|v| non_nullable_null(v, prop)) {
                        map.insert(k.clone(), d.clone());
                    }
                }
            }
            let add = additional(s);
            for (k, v) in map.iter_mut() {
                if let Some(prop) = property(s, k) {
                    default(v, prop);
                } else if let Some(add) = add {
                    if let Some(d) = add.get("default")
                        && non_nullable_null(v, add)
                    {
                        *v = d.clone();
                    }
                    default(v, add);
                }
            }
        }
        Value::Array(list) => {
            if let Some(item_schema) = items(s) {
                for v in list {
                    if let Some(d) = item_schema.get("default")
                        && non_nullable_null(v, item_schema)
                    {
                        *v = d.clone();
                    }
                    default(v, item_schema);
                }
            }
        }
        _ => {}
    }
}

/// Validates `value` against `schema`. Errors name fields as `prefix` + the path
/// inside `value` (`spec.replicas`), their messages the path inside `value` alone,
/// as kube-openapi and the apiserver word them. `old` (an update's stored value)
/// ratchets: whatever is unchanged is not validated.
pub fn validate(
    value: &Value,
    schema: &Value,
    old: Option<&Value>,
    prefix: &str,
) -> Vec<FieldError> {
    let mut v = Validation {
        prefix,
        errors: Vec::new(),
    };
    v.node(value, schema, old, "", true);
    v.errors
}

struct Validation<'a> {
    prefix: &'a str,
    errors: Vec<FieldError>,
}

fn child_name(name: &str, k: &str) -> String {
    if name.is_empty() {
        k.to_owned()
    } else {
        format!("{name}.{k}")
    }
}

/// The JSON type of a value as kube-openapi names it.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// JSON equality with numbers compared by value (`1` and `1.0` are equal).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn number(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64)
}

fn count(v: Option<&Value>) -> Option<i64> {
    v.and_then(Value::as_i64)
}

fn compiled(pattern: &str) -> Option<regex::Regex> {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<regex::Regex>>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    cache
        .entry(pattern.to_owned())
        .or_insert_with(|| regex::Regex::new(pattern).ok())
        .clone()
}

impl Validation<'_> {
    fn field(&self, name: &str) -> String {
        match (self.prefix.is_empty(), name.is_empty()) {
            (true, _) => name.to_owned(),
            (false, true) => self.prefix.to_owned(),
            (false, false) => format!("{}.{name}", self.prefix),
        }
    }

    fn node(&mut self, d: &Value, s: &Value, old: Option<&Value>, name: &str, root: bool) {
        if old.is_some_and(|o| json_eq(o, d)) {
            return;
        }
        let field = self.field(name);
        let int_or_string = flag(s, "x-kubernetes-int-or-string");
        let types: Vec<&str> = if int_or_string {
            vec!["integer", "string"]
        } else {
            Some(type_of(s))
                .filter(|t| !t.is_empty())
                .into_iter()
                .collect()
        };
        if d.is_null() {
            if !types.is_empty() && !flag(s, "nullable") {
                self.type_error(&field, name, &types, "null");
            }
            return;
        }
        let actual = json_type(d);
        let integral = d.as_f64().is_some_and(|f| f.fract() == 0.0);
        let ok = types.is_empty()
            || types.contains(&actual)
            || (actual == "number" && integral && types.contains(&"integer"))
            || (actual == "integer" && types.contains(&"number"));
        if !ok {
            self.type_error(&field, name, &types, actual);
            return;
        }
        match d {
            Value::String(text) => self.string(text, s, &field, name),
            Value::Number(_) => self.number(d, s, &field, name),
            Value::Array(list) => self.array(list, s, old, &field, name),
            _ => {}
        }
        if let Some(allowed) = s.get("enum").and_then(Value::as_array)
            && !allowed.iter().any(|a| json_eq(a, d))
        {
            let names: Vec<String> = allowed
                .iter()
                .map(|a| match a {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect();
            self.errors
                .push(FieldError::not_supported(&field, BadValue::of(d), &names));
        }
        if let Value::Object(map) = d {
            self.object(map, s, old, &field, name, root);
        }
    }

    fn type_error(&mut self, field: &str, name: &str, types: &[&str], actual: &str) {
        self.errors.push(FieldError::type_invalid(
            field,
            BadValue::Str(actual.to_owned()),
            &format!(
                "{name} in body must be of type {}: {}",
                types.join(","),
                go_quote(actual)
            ),
        ));
    }

    fn string(&mut self, text: &str, s: &Value, field: &str, name: &str) {
        let chars = text.chars().count() as i64;
        if let Some(max) = count(s.get("maxLength"))
            && chars > max
        {
            self.errors.push(FieldError::too_long(field, max));
            return;
        }
        if let Some(min) = count(s.get("minLength"))
            && chars < min
        {
            self.errors.push(FieldError::invalid(
                field,
                BadValue::Str(text.to_owned()),
                &format!("{name} in body should be at least {min} chars long"),
            ));
            return;
        }
        if let Some(pattern) = s.get("pattern").and_then(Value::as_str)
            && compiled(pattern).is_some_and(|re| !re.is_match(text))
        {
            self.errors.push(FieldError::invalid(
                field,
                BadValue::Str(text.to_owned()),
                &format!("{name} in body should match '{pattern}'"),
            ));
            return;
        }
        let format = s.get("format").and_then(Value::as_str).unwrap_or_default();
        let valid = match format {
            "date-time" | "datetime" => is_date_time(text),
            "date" => is_date(text),
            _ => true,
        };
        if !valid {
            self.errors.push(FieldError::type_invalid(
                field,
                BadValue::Str(text.to_owned()),
                &format!(
                    "{name} in body must be of type {format}: {}",
                    go_quote(text)
                ),
            ));
        }
    }

    fn number(&mut self, d: &Value, s: &Value, field: &str, name: &str) {
        let Some(x) = d.as_f64() else {
            return;
        };
        if let Some(factor) = number(s.get("multipleOf"))
            && factor > 0.0
            && (x / factor).fract() != 0.0
        {
            self.errors.push(FieldError::invalid(
                field,
                BadValue::of(d),
                &format!(
                    "{name} in body should be a multiple of {}",
                    go_float(factor)
                ),
            ));
        }
        if let Some(max) = number(s.get("maximum")) {
            let exclusive = flag(s, "exclusiveMaximum");
            if (exclusive && x >= max) || (!exclusive && x > max) {
                let words = if exclusive {
                    "less than"
                } else {
                    "less than or equal to"
                };
                self.errors.push(FieldError::invalid(
                    field,
                    BadValue::of(d),
                    &format!("{name} in body should be {words} {}", go_float(max)),
                ));
            }
        }
        if let Some(min) = number(s.get("minimum")) {
            let exclusive = flag(s, "exclusiveMinimum");
            if (exclusive && x <= min) || (!exclusive && x < min) {
                let words = if exclusive {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                self.errors.push(FieldError::invalid(
                    field,
                    BadValue::of(d),
                    &format!("{name} in body should be {words} {}", go_float(min)),
                ));
            }
        }
    }

    fn array(&mut self, list: &[Value], s: &Value, old: Option<&Value>, field: &str, name: &str) {
        let len = list.len() as i64;
        if let Some(min) = count(s.get("minItems"))
            && len < min
        {
            self.errors.push(FieldError::invalid(
                field,
                BadValue::of(&Value::Array(list.to_vec())),
                &format!("{name} in body should have at least {min} items"),
            ));
        }
        if let Some(max) = count(s.get("maxItems"))
            && len > max
        {
            self.errors.push(FieldError::too_many(field, len, max));
        }
        let list_type = s
            .get("x-kubernetes-list-type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let map_keys: Vec<&str> = s
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|k| k.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(item_schema) = items(s) {
            let old_list = old.and_then(Value::as_array);
            for (i, item) in list.iter().enumerate() {
                // Items are matched to the stored ones (for ratcheting) only where the
                // list says how: by their keys in a map list.
                let old_item = match (list_type, old_list) {
                    ("map", Some(ol)) if !map_keys.is_empty() => ol
                        .iter()
                        .find(|o| map_keys.iter().all(|k| o.get(*k) == item.get(*k))),
                    ("set", Some(ol)) => ol.iter().find(|o| json_eq(o, item)),
                    _ => None,
                };
                let item_name = format!("{name}[{i}]");
                self.node(item, item_schema, old_item, &item_name, false);
            }
        }
        match list_type {
            "set" => {
                for (i, item) in list.iter().enumerate() {
                    if list[..i].iter().any(|p| json_eq(p, item)) {
                        self.errors.push(FieldError::duplicate(
                            &format!("{field}[{i}]"),
                            BadValue::of(item),
                        ));
                    }
                }
            }
            "map" if !map_keys.is_empty() => {
                let key_of = |item: &Value| -> Value {
                    let mut m = Map::new();
                    for k in &map_keys {
                        if let Some(v) = item.get(*k) {
                            m.insert((*k).to_owned(), v.clone());
                        }
                    }
                    Value::Object(m)
                };
                for (i, item) in list.iter().enumerate() {
                    let k = key_of(item);
                    if list[..i].iter().any(|p| json_eq(&key_of(p), &k)) {
                        self.errors.push(FieldError::duplicate(
                            &format!("{field}[{i}]"),
                            BadValue::of(&k),
                        ));
                    }
                }
            }
            _ => {}
        }
    }

    fn object(
        &mut self,
        map: &Map<String, Value>,
        s: &Value,
        old: Option<&Value>,
        field: &str,
        name: &str,
        root: bool,
    ) {
        let skip_meta = root || flag(s, "x-kubernetes-embedded-resource");
        let n = map.len() as i64;
        if let Some(min) = count(s.get("minProperties"))
            && n < min
        {
            self.errors.push(FieldError::invalid(
                field,
                BadValue::of(&Value::Object(map.clone())),
                &format!("{name} in body should have at least {min} properties"),
            ));
        }
        if let Some(max) = count(s.get("maxProperties"))
            && n > max
        {
            self.errors.push(FieldError::too_many(field, n, max));
        }
        for (k, v) in map {
            if skip_meta && META_FIELDS.contains(&k.as_str()) {
                continue;
            }
            let Some(child) = property(s, k).or_else(|| additional(s)) else {
                continue;
            };
            let old_v = old.and_then(|o| o.get(k));
            self.node(v, child, old_v, &child_name(name, k), false);
        }
        if let Some(required) = s.get("required").and_then(Value::as_array) {
            for k in required.iter().filter_map(Value::as_str) {
                if skip_meta && META_FIELDS.contains(&k) {
                    continue;
                }
                if !map.contains_key(k) {
                    let child = child_name(name, k);
                    self.errors
                        .push(FieldError::required(&self.field(&child), ""));
                }
            }
        }
    }
}

fn digits(s: &str, n: usize) -> Option<u32> {
    (s.len() == n && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// `YYYY-MM-DD`, a real date.
fn is_date(s: &str) -> bool {
    let mut parts = s.split('-');
    let (Some(y), Some(m), Some(d), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let (Some(y), Some(m), Some(d)) = (digits(y, 4), digits(m, 2), digits(d, 2)) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

/// RFC 3339 date-time: `2024-01-02T03:04:05(.frac)?(Z|±hh:mm)`, `t`/`z` in any case.
fn is_date_time(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    let Some((date, time)) = lower.split_once('t') else {
        return false;
    };
    if !is_date(date) {
        return false;
    }
    let (clock, zone) = if let Some(c) = time.strip_suffix('z') {
        (c, None)
    } else if let Some(i) = time.rfind(['+', '-']) {
        (&time[..i], Some(&time[i + 1..]))
    } else {
        return false;
    };
    if let Some(zone) = zone {
        let mut z = zone.split(':');
        let (Some(h), Some(m), None) = (z.next(), z.next(), z.next()) else {
            return false;
        };
        if !matches!((digits(h, 2), digits(m, 2)), (Some(h), Some(m)) if h < 24 && m < 60) {
            return false;
        }
    }
    let (hms, frac) = match clock.split_once('.') {
        Some((hms, frac)) => (hms, Some(frac)),
        None => (clock, None),
    };
    if frac.is_some_and(|f| f.is_empty() || !f.bytes().all(|b| b.is_ascii_digit())) {
        return false;
    }
    let mut p = hms.split(':');
    let (Some(h), Some(m), Some(sec), None) = (p.next(), p.next(), p.next(), p.next()) else {
        return false;
    };
    matches!(
        (digits(h, 2), digits(m, 2), digits(sec, 2)),
        (Some(h), Some(m), Some(s)) if h < 24 && m < 60 && s <= 60
    )
}

/// The structural-schema checks a CRD version's schema must pass (a subset of the
/// apiserver's: types set and known, arrays with `items`, `properties` and
/// `additionalProperties` not both, patterns that compile, an object at the root).
/// `path` is where the schema is (`spec.versions[0].schema.openAPIV3Schema`).
pub fn check_structural(schema: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    check_node(schema, path, Level::Root, &mut errors);
    errors.sort_by_key(|e| e.to_string());
    errors
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

const OPENAPI_TYPES: &[&str] = &["array", "boolean", "integer", "number", "object", "string"];

fn check_node(s: &Value, path: &str, level: Level, errors: &mut Vec<FieldError>) {
    let Some(_) = s.as_object() else {
        errors.push(FieldError::invalid(
            path,
            BadValue::json(s),
            "must be a JSON schema object",
        ));
        return;
    };
    let ty = type_of(s);
    let at = |k: &str| format!("{path}.{k}");
    if !ty.is_empty() && !OPENAPI_TYPES.contains(&ty) {
        errors.push(FieldError::not_supported(
            &at("type"),
            BadValue::Str(ty.to_owned()),
            OPENAPI_TYPES,
        ));
    }
    let embedded = flag(s, "x-kubernetes-embedded-resource");
    if embedded && ty != "object" {
        if ty.is_empty() {
            errors.push(FieldError::required(
                &at("type"),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        } else {
            errors.push(FieldError::invalid(
                &at("type"),
                BadValue::Str(ty.to_owned()),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        }
    } else if ty.is_empty()
        && !flag(s, "x-kubernetes-int-or-string")
        && !flag(s, "x-kubernetes-preserve-unknown-fields")
    {
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errors.push(FieldError::required(&at("type"), detail));
    }
    if level == Level::Root && !ty.is_empty() && ty != "object" {
        errors.push(FieldError::invalid(
            &at("type"),
            BadValue::Str(ty.to_owned()),
            "must be object at the root",
        ));
    }
    if ty == "array" && items(s).is_none() {
        errors.push(FieldError::required(&at("items"), "must be specified"));
    }
    if let Some(i) = items(s) {
        check_node(i, &at("items"), Level::Item, errors);
    }
    if let Some(props) = properties(s) {
        for (k, v) in props {
            check_node(v, &format!("{path}.properties[{k}]"), Level::Field, errors);
        }
    }
    if s.get("additionalProperties").is_some_and(Value::is_object) {
        if level == Level::Root {
            errors.push(FieldError::forbidden(
                &at("additionalProperties"),
                "must not be used at the root",
            ));
        }
        if properties(s).is_some_and(|p| !p.is_empty()) {
            errors.push(FieldError::forbidden(
                &at("additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        if let Some(a) = additional(s) {
            check_node(a, &at("additionalProperties"), Level::Field, errors);
        }
    }
    if let Some(p) = s.get("pattern").and_then(Value::as_str)
        && let Err(e) = regex::Regex::new(p)
    {
        errors.push(FieldError::invalid(
            &at("pattern"),
            BadValue::Str(p.to_owned()),
            &format!("must be a valid regular expression, but isn't: {e}"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                "name": {"type": "string", "maxLength": 5, "minLength": 2, "pattern": "^[a-z]+$"},
                "when": {"type": "string", "format": "date-time"},
                "port": {"x-kubernetes-int-or-string": true},
                "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"},
                         "x-kubernetes-list-type": "set"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                         "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}}},
                "maybe": {"type": "string", "nullable": true},
                "notnull": {"type": "string"},
            }},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
        }})
    }

    fn errors(o: &Value) -> Vec<String> {
        validate(o, &schema(), None, "")
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn type_required_enum_in_the_apiservers_words() {
        let e = errors(&json!({"spec": {"size": "big", "color": "green"}}));
        assert_eq!(
            e,
            [
                "spec.color: Unsupported value: \"green\": supported values: \"red\", \"blue\"",
                "spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\"",
            ]
        );
        assert_eq!(errors(&json!({"spec": {}})), ["spec.size: Required value"]);
        assert_eq!(
            errors(&json!({"spec": {"size": 0}})),
            ["spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"]
        );
        assert_eq!(
            errors(&json!({"spec": {"size": 3.0, "name": "toolong"}})),
            ["spec.name: Too long: may not be more than 5 bytes"]
        );
        assert_eq!(
            errors(&json!({"spec": {"size": 3, "name": "AB"}})),
            ["spec.name: Invalid value: \"AB\": spec.name in body should match '^[a-z]+$'"]
        );
        assert_eq!(
            errors(&json!({"spec": {"size": 3, "when": "yesterday"}})),
            [
                "spec.when: Invalid value: \"yesterday\": spec.when in body must be of type date-time: \"yesterday\""
            ]
        );
        assert!(
            errors(&json!({"spec": {"size": 3, "when": "2024-02-29T10:00:00.5+02:00"}})).is_empty()
        );
        assert_eq!(
            errors(&json!({"spec": {"size": 3, "port": true}})),
            [
                "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\""
            ]
        );
        assert_eq!(
            errors(&json!({"spec": {"size": 3, "tags": ["a", "a", "b"]}})),
            [
                "spec.tags: Too many: 3: must have at most 2 items",
                "spec.tags[1]: Duplicate value: \"a\""
            ]
        );
        assert_eq!(
            errors(
                &json!({"spec": {"size": 3, "labels": {"a": 1}, "maybe": null, "notnull": null}})
            ),
            [
                "spec.labels.a: Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\"",
                "spec.notnull: Invalid value: \"null\": spec.notnull in body must be of type string: \"null\"",
            ]
        );
        let status = validate(
            &json!({"ready": "yes"}),
            &schema()["properties"]["status"],
            None,
            "status",
        );
        assert_eq!(
            status[0].to_string(),
            "status.ready: Invalid value: \"string\": ready in body must be of type boolean: \"string\""
        );
    }

    #[test]
    fn unchanged_values_ratchet() {
        let old = json!({"spec": {"size": 99, "name": "ok"}});
        let new = json!({"spec": {"size": 99, "name": "okk"}});
        let e = validate(&new, &schema(), Some(&old), "");
        assert!(e.is_empty(), "{e:?}");
        let new = json!({"spec": {"size": 98, "name": "ok"}});
        assert_eq!(validate(&new, &schema(), Some(&old), "").len(), 1);
    }

    #[test]
    fn pruning_keeps_what_the_schema_allows() {
        let mut o = json!({"apiVersion": "example.com/v1", "kind": "W",
            "metadata": {"name": "w", "bogus": 1},
            "spec": {"size": 1, "extra": true, "labels": {"x": "y"},
                     "free": {"anything": [1], "known": {"a": "b", "drop": 1}}},
            "other": {}});
        let unknown = prune(&mut o, Some(&schema()));
        assert_eq!(
            unknown,
            [
                "metadata.bogus",
                "other",
                "spec.extra",
                "spec.free.known.drop"
            ]
        );
        assert_eq!(o["spec"]["free"]["anything"], json!([1]));
        assert_eq!(o["metadata"], json!({"name": "w"}));
        assert_eq!(o["kind"], "W");
    }

    #[test]
    fn defaults_and_nulls() {
        let s = schema();
        let mut o = json!({"spec": {"size": 1, "color": null, "notnull": null, "maybe": null}});
        drop_nulls(&mut o, &s);
        assert!(o["spec"].get("notnull").is_none());
        assert!(o["spec"]["maybe"].is_null());
        default(&mut o, &s);
        assert_eq!(o["spec"]["color"], "red");
    }

    #[test]
    fn structural_checks() {
        let bad = json!({"type": "object", "properties": {
            "spec": {"properties": {"a": {"type": "array"}, "b": {"type": "strange"}}}}});
        let e: Vec<String> = check_structural(&bad, "s")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            e,
            [
                "s.properties[spec].properties[a].items: Required value: must be specified",
                "s.properties[spec].properties[b].type: Unsupported value: \"strange\": supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\"",
                "s.properties[spec].type: Required value: must not be empty for specified object fields",
            ]
        );
        let e = check_structural(&json!({"type": "string"}), "s");
        assert_eq!(
            e[0].to_string(),
            "s.type: Invalid value: \"string\": must be object at the root"
        );
    }
}
