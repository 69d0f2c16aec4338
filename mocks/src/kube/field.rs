//! Field errors in the apiserver's words (`k8s.io/apimachinery/pkg/util/validation/field`)
//! and the 422 `Invalid` status they add up to (`apierrors.NewInvalid`).
//!
//! A client reads two things from a validation failure: the message
//! (`Widget.example.com "w1" is invalid: spec.replicas: Invalid value: "string":
//! spec.replicas in body must be of type integer: "string"`), which kubectl prints,
//! and `details.causes`, one `{reason, message, field}` per error, which controllers
//! match on. Both are built here exactly as the real server builds them, including
//! how a bad value is printed (`%q` for strings, `%v` for numbers and booleans).
//! Values Go would print with `%#v` (lists, maps) are rendered in the same Go
//! syntax for JSON data (`[]interface {}{"a", 1}`); a bad value that is a Go struct
//! on the real server (a CRD's `spec.versions`) is printed as JSON instead.

use serde_json::{Value, json};

/// `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    NotFound,
    Required,
    Duplicate,
    Invalid,
    NotSupported,
    Forbidden,
    TooLong,
    TooMany,
    TypeInvalid,
}

impl ErrorType {
    /// The `reason` of a `StatusCause`.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorType::NotFound => "FieldValueNotFound",
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    fn words(self) -> &'static str {
        match self {
            ErrorType::NotFound => "Not found",
            ErrorType::Required => "Required value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::Invalid | ErrorType::TypeInvalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
            ErrorType::TooMany => "Too many",
        }
    }
}

/// A bad value as `field.Error.ErrorBody` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadValue {
    /// Not printed (Required, Forbidden, TooLong).
    Omitted,
    Str(String),
    /// Already in Go's `%v`/`%#v` form (numbers, booleans, `null`, lists, maps).
    Printed(String),
}

impl BadValue {
    /// A JSON value as the apiserver's unstructured data prints.
    pub fn of(v: &Value) -> Self {
        match v {
            Value::String(s) => BadValue::Str(s.clone()),
            Value::Null => BadValue::Str("null".to_owned()),
            other => BadValue::Printed(go_value(other, false)),
        }
    }

    /// A value that is a Go struct on the real server, printed as JSON here.
    pub fn json(v: &Value) -> Self {
        BadValue::Printed(v.to_string())
    }
}

/// One field error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub kind: ErrorType,
    /// The field path (`spec.versions[0].name`), "" for the root.
    pub field: String,
    pub value: BadValue,
    pub detail: String,
}

impl FieldError {
    fn new(kind: ErrorType, field: &str, value: BadValue, detail: &str) -> Self {
        Self {
            kind,
            field: field.to_owned(),
            value,
            detail: detail.to_owned(),
        }
    }

    pub fn required(field: &str, detail: &str) -> Self {
        Self::new(ErrorType::Required, field, BadValue::Omitted, detail)
    }

    pub fn invalid(field: &str, value: BadValue, detail: &str) -> Self {
        Self::new(ErrorType::Invalid, field, value, detail)
    }

    pub fn type_invalid(field: &str, value: BadValue, detail: &str) -> Self {
        Self::new(ErrorType::TypeInvalid, field, value, detail)
    }

    pub fn forbidden(field: &str, detail: &str) -> Self {
        Self::new(ErrorType::Forbidden, field, BadValue::Omitted, detail)
    }

    pub fn duplicate(field: &str, value: BadValue) -> Self {
        Self::new(ErrorType::Duplicate, field, value, "")
    }

    /// `field.NotSupported`: the allowed values quoted and joined.
    pub fn not_supported<S: AsRef<str>>(field: &str, value: BadValue, allowed: &[S]) -> Self {
        let detail = if allowed.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = allowed.iter().map(|a| go_quote(a.as_ref())).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(ErrorType::NotSupported, field, value, &detail)
    }

    /// `field.TooLong` (the value is never printed).
    pub fn too_long(field: &str, max: i64) -> Self {
        let detail = if max >= 0 {
            format!("may not be more than {max} bytes")
        } else {
            "value is too long".to_owned()
        };
        Self::new(ErrorType::TooLong, field, BadValue::Omitted, &detail)
    }

    /// `field.TooMany`.
    pub fn too_many(field: &str, actual: i64, max: i64) -> Self {
        let detail = if max >= 0 {
            format!("must have at most {max} items")
        } else {
            "has too many items".to_owned()
        };
        let value = if actual >= 0 {
            BadValue::Printed(actual.to_string())
        } else {
            BadValue::Omitted
        };
        Self::new(ErrorType::TooMany, field, value, &detail)
    }

    /// `ErrorBody()`: the message without the field.
    pub fn body(&self) -> String {
        let mut s = match (&self.kind, &self.value) {
            (ErrorType::Required | ErrorType::Forbidden | ErrorType::TooLong, _)
            | (_, BadValue::Omitted) => self.kind.words().to_owned(),
            (_, BadValue::Str(v)) => format!("{}: {}", self.kind.words(), go_quote(v)),
            (_, BadValue::Printed(v)) => format!("{}: {v}", self.kind.words()),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// The details of a 422 `Invalid` status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// API group of the kind ("" for core).
    pub group: String,
    pub kind: String,
    pub name: String,
    pub causes: Vec<FieldError>,
}

impl Invalid {
    /// `apierrors.NewInvalid`'s message: `Kind.group "name" is invalid: errors`, the
    /// errors aggregated (duplicates dropped, `[a, b]` when more than one).
    pub fn message(&self) -> String {
        let qualified = if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        };
        let mut seen: Vec<String> = Vec::new();
        for c in &self.causes {
            let m = c.to_string();
            if !seen.contains(&m) {
                seen.push(m);
            }
        }
        match seen.len() {
            0 => format!("{qualified} {} is invalid", go_quote(&self.name)),
            1 => format!(
                "{qualified} {} is invalid: {}",
                go_quote(&self.name),
                seen[0]
            ),
            _ => format!(
                "{qualified} {} is invalid: [{}]",
                go_quote(&self.name),
                seen.join(", ")
            ),
        }
    }

    /// `details` of the status.
    pub fn details(&self) -> Value {
        let causes: Vec<Value> = self
            .causes
            .iter()
            .map(|c| json!({"reason": c.kind.reason(), "message": c.body(), "field": c.field}))
            .collect();
        let mut d = json!({"name": self.name, "kind": self.kind, "causes": causes});
        if !self.group.is_empty() {
            d["group"] = json!(self.group);
        }
        d
    }
}

/// Go's `%q` of a string (`strconv.Quote`).
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%v` of a float64 (integral values without a fraction, `1e+21` beyond).
pub fn go_float(f: f64) -> String {
    if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e21 {
        format!("{f:.0}")
    } else if f.is_finite() && (f.abs() >= 1e21 || (f != 0.0 && f.abs() < 1e-4)) {
        let s = format!("{f:e}");
        // Rust writes `1e21`, Go `1e+21`.
        match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e:0>2}"),
            Some((m, e)) => format!("{m}e-{:0>2}", e.trim_start_matches('-')),
            None => s,
        }
    } else {
        format!("{f}")
    }
}

/// A JSON number as Go prints the `int64` or `float64` it decodes to.
pub fn go_number(n: &serde_json::Number) -> String {
    match (n.as_i64(), n.as_u64(), n.as_f64()) {
        (Some(i), _, _) => i.to_string(),
        (None, Some(u), _) => u.to_string(),
        (_, _, Some(f)) => go_float(f),
        _ => n.to_string(),
    }
}

/// A JSON value as Go prints the unstructured data it decodes to: `%v` for scalars
/// (`nested`: `%#v`, strings quoted) and `%#v` for lists and maps.
fn go_value(v: &Value, nested: bool) -> String {
    match v {
        Value::Null if nested => "interface {}(nil)".to_owned(),
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(s) if nested => go_quote(s),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(|i| go_value(i, true)).collect();
            format!("[]interface {{}}{{{}}}", inner.join(", "))
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", go_quote(k), go_value(&map[k], true)))
                .collect();
            format!("map[string]interface {{}}{{{}}}", inner.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_as_the_apiserver_words_them() {
        let e = FieldError::type_invalid(
            "spec.x",
            BadValue::Str("string".into()),
            "spec.x in body must be of type integer: \"string\"",
        );
        assert_eq!(
            e.to_string(),
            "spec.x: Invalid value: \"string\": spec.x in body must be of type integer: \"string\""
        );
        assert_eq!(
            FieldError::required("spec.y", "").to_string(),
            "spec.y: Required value"
        );
        assert_eq!(
            FieldError::not_supported("spec.z", BadValue::Str("foo".into()), &["a", "b"])
                .to_string(),
            "spec.z: Unsupported value: \"foo\": supported values: \"a\", \"b\""
        );
        assert_eq!(
            FieldError::too_long("spec.n", 5).to_string(),
            "spec.n: Too long: may not be more than 5 bytes"
        );
        assert_eq!(
            FieldError::too_many("spec.l", 4, 3).to_string(),
            "spec.l: Too many: 4: must have at most 3 items"
        );
        assert_eq!(
            FieldError::invalid("spec.r", BadValue::of(&json!(0)), "should be >= 1").to_string(),
            "spec.r: Invalid value: 0: should be >= 1"
        );
        assert_eq!(
            BadValue::of(&json!(["a", 1, {"k": null}])),
            BadValue::Printed(
                "[]interface {}{\"a\", 1, map[string]interface {}{\"k\":interface {}(nil)}}".into()
            )
        );
    }

    #[test]
    fn invalid_aggregates_like_apimachinery() {
        let mut inv = Invalid {
            group: "example.com".into(),
            kind: "Widget".into(),
            name: "w1".into(),
            causes: vec![FieldError::required("spec.y", "")],
        };
        assert_eq!(
            inv.message(),
            "Widget.example.com \"w1\" is invalid: spec.y: Required value"
        );
        inv.causes.push(FieldError::required("spec.z", ""));
        inv.causes.push(FieldError::required("spec.z", ""));
        assert_eq!(
            inv.message(),
            "Widget.example.com \"w1\" is invalid: [spec.y: Required value, spec.z: Required value]"
        );
        let d = inv.details();
        assert_eq!(d["causes"][0]["reason"], "FieldValueRequired");
        assert_eq!(d["causes"][0]["field"], "spec.y");
        assert_eq!(d["causes"][0]["message"], "Required value");
        assert_eq!(d["group"], "example.com");
    }

    #[test]
    fn go_number_formats() {
        assert_eq!(go_float(1.0), "1");
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_number(&serde_json::Number::from(-3)), "-3");
    }
}
