//! Label and field selectors, parsed and matched as the apiserver does.
//!
//! nodefence finds the pods on a dead node with `fieldSelector=spec.nodeName=<node>`
//! and its own objects by label; kube-rs watchers resend the same selectors on every
//! reconnect. A selector the real server would refuse (bad syntax, a field it does
//! not index) must be refused here too, with the same 400 message, or a client bug
//! would pass the tests and fail on a cluster.
//!
//! - Labels (`labels.Parse`): `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
//!   `k notin (a,b)`, `k>n`, `k<n`, comma-separated (commas inside `()` belong to
//!   the set). `!=` and `notin` match objects without the label.
//! - Fields (`fields.ParseSelector`): `f=v`, `f==v`, `f!=v`, comma-separated, `\`
//!   escapes; only the fields the real server indexes for that type are accepted
//!   (see [`field_value`]). Custom resources take `metadata.name`,
//!   `metadata.namespace` (namespaced ones only) and their version's
//!   `selectableFields`, refusing others as the apiextensions-apiserver does.

use serde_json::Value;

use super::resources::ResourceType;
use super::store::StoreError;

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelReq {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Gt(String, i64),
    Lt(String, i64),
}

/// A parsed `labelSelector`; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelReq>);

impl LabelSelector {
    /// Parses a `labelSelector` value; errors are 400 BadRequest.
    pub fn parse(text: &str) -> Result<Self, StoreError> {
        let mut reqs = Vec::new();
        for part in split_top_level(text) {
            let part = part.trim();
            if part.is_empty() {
                if text.trim().is_empty() {
                    continue;
                }
                return Err(bad_label(text, "empty requirement"));
            }
            reqs.push(parse_label_req(part).map_err(|why| bad_label(part, &why))?);
        }
        Ok(Self(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether an object (its `metadata.labels`) satisfies every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::In(k, vs) => get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|v| vs.iter().all(|x| x != v)),
            LabelReq::Gt(k, n) => get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            LabelReq::Lt(k, n) => get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        })
    }
}

fn bad_label(part: &str, why: &str) -> StoreError {
    StoreError::BadRequest(format!(
        "unable to parse requirement: {why}: found {part:?}"
    ))
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn parse_label_req(part: &str) -> Result<LabelReq, String> {
    if let Some(key) = part.strip_prefix('!') {
        let key = key.trim();
        check_key(key)?;
        return Ok(LabelReq::NotExists(key.to_owned()));
    }
    for (op, len) in [("==", 2), ("!=", 2), ("=", 1), (">", 1), ("<", 1)] {
        if let Some(i) = part.find(op) {
            // "!=" contains "=": only take "=" when it is not part of "!=" or "==".
            if op == "=" && (part[..i].ends_with('!') || part[i + 1..].starts_with('=')) {
                continue;
            }
            let key = part[..i].trim();
            let value = part[i + len..].trim();
            check_key(key)?;
            return match op {
                ">" | "<" => {
                    let n = value.parse::<i64>().map_err(|_| {
                        format!(
                            "for 'gt', 'lt' operators, the value must be an integer, not {value:?}"
                        )
                    })?;
                    Ok(if op == ">" {
                        LabelReq::Gt(key.to_owned(), n)
                    } else {
                        LabelReq::Lt(key.to_owned(), n)
                    })
                }
                _ => {
                    check_value(value)?;
                    let vs = vec![value.to_owned()];
                    Ok(if op == "!=" {
                        LabelReq::NotIn(key.to_owned(), vs)
                    } else {
                        LabelReq::In(key.to_owned(), vs)
                    })
                }
            };
        }
    }
    // Set-based: "key in (a,b)" / "key notin (a,b)", or a bare key.
    let mut words = part.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or_default().trim();
    let rest = words.next().unwrap_or_default().trim();
    check_key(key)?;
    if rest.is_empty() {
        return Ok(LabelReq::Exists(key.to_owned()));
    }
    let (negate, set) = if let Some(set) = rest.strip_prefix("notin") {
        (true, set)
    } else if let Some(set) = rest.strip_prefix("in") {
        (false, set)
    } else {
        return Err(format!("unknown operator in {rest:?}"));
    };
    let set = set.trim();
    let inner = set
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| "expected a set of values in parentheses".to_owned())?;
    let mut values = Vec::new();
    for v in inner.split(',') {
        let v = v.trim();
        check_value(v)?;
        values.push(v.to_owned());
    }
    Ok(if negate {
        LabelReq::NotIn(key.to_owned(), values)
    } else {
        LabelReq::In(key.to_owned(), values)
    })
}

/// A label key: optional DNS prefix `/` then a name of at most 63 characters.
fn check_key(key: &str) -> Result<(), String> {
    let name = key.rsplit_once('/').map_or(key, |(prefix, name)| {
        if prefix.is_empty() || prefix.len() > 253 {
            ""
        } else {
            name
        }
    });
    if name.is_empty() || name.len() > 63 || !is_label_token(name) {
        return Err(format!("invalid label key {key:?}"));
    }
    Ok(())
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_`, `.` starting and
/// ending alphanumeric.
fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() || (value.len() <= 63 && is_label_token(value)) {
        Ok(())
    } else {
        Err(format!("invalid label value: {value:?}"))
    }
}

fn is_label_token(s: &str) -> bool {
    let ok_edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    ok_edge(s.chars().next())
        && ok_edge(s.chars().last())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// One field requirement: `field` equals (or not) `value`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldReq {
    field: String,
    value: String,
    equal: bool,
}

/// A parsed `fieldSelector` for one resource type; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<FieldReq>);

impl FieldSelector {
    /// Parses a `fieldSelector` value and checks every field is one the real server
    /// supports for `rt` (400 otherwise, with its message).
    pub fn parse(text: &str, rt: ResourceType) -> Result<Self, StoreError> {
        let mut reqs = Vec::new();
        for part in split_unescaped(text, ',') {
            if part.trim().is_empty() {
                if text.trim().is_empty() {
                    continue;
                }
                return Err(StoreError::BadRequest(format!(
                    "invalid selector: '{text}'; can't understand ''"
                )));
            }
            let (field, value, equal) = if let Some((f, v)) = split_op(&part, "!=") {
                (f, v, false)
            } else if let Some((f, v)) = split_op(&part, "==") {
                (f, v, true)
            } else if let Some((f, v)) = split_op(&part, "=") {
                (f, v, true)
            } else {
                return Err(StoreError::BadRequest(format!(
                    "invalid selector: '{text}'; can't understand '{part}'"
                )));
            };
            let field = field.trim().to_owned();
            if !supports(rt, &field) {
                return Err(StoreError::BadRequest(unsupported_message(rt, &field)));
            }
            reqs.push(FieldReq {
                field,
                value: unescape(&value),
                equal,
            });
        }
        Ok(Self(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value a requirement `field=value` asks for, if the selector has one
    /// (e.g. `metadata.name` for kubectl's single-object watches).
    pub fn required_value(&self, field: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|r| r.equal && r.field == field)
            .map(|r| r.value.as_str())
    }

    pub fn matches(&self, rt: ResourceType, object: &Value) -> bool {
        self.0
            .iter()
            .all(|r| (field_value(rt, object, &r.field) == r.value) == r.equal)
    }
}

/// Splits `text` on `sep` not preceded by a backslash (escapes are kept).
fn split_unescaped(text: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in text.chars() {
        if escaped {
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            cur.push(c);
            escaped = true;
        } else if c == sep {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    parts
}

/// The first unescaped occurrence of `op` splits `part` into field and value.
fn split_op(part: &str, op: &str) -> Option<(String, String)> {
    let bytes = part.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if part[i..].starts_with(op) {
            // "=" must not be the tail of "!=" or the head of "==".
            if op == "=" && (part[i + 1..].starts_with('=')) {
                return None;
            }
            return Some((part[..i].to_owned(), part[i + op.len()..].to_owned()));
        }
        i += 1;
    }
    None
}

fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The type-specific fields the apiserver accepts in a field selector (beyond
/// `metadata.name` and, for namespaced types, `metadata.namespace`).
fn extra_fields(rt: ResourceType) -> &'static [&'static str] {
    match (rt.group, rt.plural) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "namespaces") => &["status.phase"],
        ("", "secrets") => &["type"],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "deprecatedSource",
            "type",
        ],
        _ => &[],
    }
}

/// Whether the core group registers its own field-label conversion for `rt` (it
/// answers "field label not supported"; the generic one names the two it knows).
fn has_conversion(rt: ResourceType) -> bool {
    !extra_fields(rt).is_empty()
}

fn supports(rt: ResourceType, field: &str) -> bool {
    if let Some(custom) = rt.custom {
        return field == "metadata.name"
            || (field == "metadata.namespace" && rt.namespaced)
            || custom.selectable_fields.contains(&field);
    }
    field == "metadata.name"
        || (field == "metadata.namespace" && (rt.namespaced || has_conversion(rt)))
        || extra_fields(rt).contains(&field)
}

fn unsupported_message(rt: ResourceType, field: &str) -> String {
    if has_conversion(rt) || rt.custom.is_some() {
        format!("field label not supported: {field}")
    } else {
        format!(
            "{field:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        )
    }
}

/// The string a field selector compares for `field` on `object` ("" when unset;
/// booleans as "true"/"false").
pub fn field_value(rt: ResourceType, object: &Value, field: &str) -> String {
    let pointer = match (rt.plural, field) {
        ("events", "source") => "/source/component".to_owned(),
        ("events", "deprecatedSource") => "/deprecatedSource/component".to_owned(),
        _ => format!("/{}", field.replace('.', "/")),
    };
    match object.pointer(&pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        _ => match field {
            "spec.hostNetwork" | "spec.unschedulable" => "false".to_owned(),
            _ => String::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::resources::{LEASES, NODES, PODS};
    use super::*;
    use serde_json::json;

    fn labelled(labels: Value) -> Value {
        json!({"metadata": {"name": "x", "labels": labels}})
    }

    #[test]
    fn label_operators() {
        let o = labelled(json!({"app": "web", "tier": "db", "n": "5"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(m(""));
        assert!(m("app=web"));
        assert!(m("app==web"));
        assert!(!m("app!=web"));
        assert!(m("missing!=x"), "!= matches an absent label");
        assert!(m("app in (web, api)"));
        assert!(!m("app notin (web,api)"));
        assert!(m("missing notin (a)"));
        assert!(m("app"));
        assert!(!m("!app"));
        assert!(m("!missing"));
        assert!(m("app=web,tier in (db),!missing"));
        assert!(!m("app=web,tier=cache"));
        assert!(m("n>4") && m("n<6") && !m("n>5"));
        assert!(m("example.com/role notin (x)"));
    }

    #[test]
    fn bad_label_selectors_are_400() {
        for s in ["app in web", "=x", "app=web,", "a b c", "app=@@", "n>x"] {
            let e = LabelSelector::parse(s).unwrap_err();
            assert_eq!(e.code(), 400, "{s}");
        }
    }

    #[test]
    fn field_selectors_for_pods() {
        let bound = json!({"metadata": {"name": "p", "namespace": "default"},
            "spec": {"nodeName": "worker-1"}, "status": {"phase": "Running"}});
        let pending = json!({"metadata": {"name": "q", "namespace": "default"}, "spec": {}});
        let sel = FieldSelector::parse("spec.nodeName=worker-1", PODS).unwrap();
        assert!(sel.matches(PODS, &bound));
        assert!(!sel.matches(PODS, &pending));
        let unbound = FieldSelector::parse("spec.nodeName=", PODS).unwrap();
        assert!(unbound.matches(PODS, &pending));
        let two =
            FieldSelector::parse("status.phase!=Failed,metadata.namespace==default", PODS).unwrap();
        assert!(two.matches(PODS, &bound) && two.matches(PODS, &pending));
        assert_eq!(sel.required_value("spec.nodeName"), Some("worker-1"));
        let escaped = FieldSelector::parse(r"metadata.name=a\,b", PODS).unwrap();
        assert!(escaped.matches(PODS, &json!({"metadata": {"name": "a,b"}})));
    }

    #[test]
    fn unknown_fields_are_refused_like_the_real_server() {
        let e = FieldSelector::parse("spec.foo=bar", PODS).unwrap_err();
        assert_eq!(e.code(), 400);
        assert_eq!(e.to_string(), "field label not supported: spec.foo");
        let e = FieldSelector::parse("spec.holderIdentity=x", LEASES).unwrap_err();
        assert!(e.to_string().contains("is not a known field selector"));
        assert!(FieldSelector::parse("spec.unschedulable=true", NODES).is_ok());
        assert!(FieldSelector::parse("nonsense", NODES).is_err());
        let n = json!({"metadata": {"name": "n"}, "spec": {}});
        assert!(
            FieldSelector::parse("spec.unschedulable=false", NODES)
                .unwrap()
                .matches(NODES, &n)
        );
    }
}
