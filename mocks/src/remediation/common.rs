//! Pure helpers both stand-ins share, each following the Kubernetes library the real
//! components use: label selectors (`metav1.LabelSelectorAsSelector`), int-or-percent
//! scaling (`intstr.GetScaledValueFromIntOrPercent`), Go durations
//! (`time.ParseDuration`, `Duration.String`), status conditions
//! (`meta.SetStatusCondition`), JSON merge patches (controller-runtime's
//! `client.MergeFrom`), and the apimachinery time format.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// Deserializes a document this crate writes itself (a CRD literal): a failure is a
/// bug in that literal, caught by the unit tests.
#[expect(
    clippy::expect_used,
    reason = "static literals of this crate, unit-tested"
)]
pub(crate) fn from_json<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a CRD literal of this crate deserializes")
}

/// The OpenAPI schema of a `[]metav1.Condition`.
pub(crate) fn conditions_schema() -> Value {
    json!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {"type": "string"},
                "status": {"type": "string"},
                "observedGeneration": {"type": "integer", "format": "int64"},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "reason": {"type": "string"},
                "message": {"type": "string"},
            },
        },
    })
}

/// The schema of an int-or-string field.
pub(crate) fn int_or_string_schema() -> Value {
    json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]})
}

/// The schema of a `metav1.LabelSelector`.
pub(crate) fn label_selector_schema() -> Value {
    json!({
        "type": "object",
        "x-kubernetes-map-type": "atomic",
        "properties": {
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            "matchExpressions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": {"type": "string"},
                        "operator": {"type": "string"},
                        "values": {"type": "array", "items": {"type": "string"}},
                    },
                },
            },
        },
    })
}

// ---------------------------------------------------------------------------------
// Time

/// The wall clock (virtual in a simulation, see `nodefence_clock`).
pub(crate) fn now() -> Timestamp {
    Timestamp::try_from(nodefence_clock::now()).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// `t` as apimachinery writes a `metav1.Time` and Go's `time.RFC3339` formats a UTC
/// time: whole seconds, `Z`.
pub(crate) fn rfc3339(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

/// `t` as a `metav1.Time`, truncated to seconds as it is once stored.
pub(crate) fn time(t: Timestamp) -> Time {
    Time(Timestamp::from_second(t.as_second()).unwrap_or(t))
}

/// `t + d` (saturating).
pub(crate) fn add(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// How long from `from` until `to`; zero when `to` is not later.
pub(crate) fn until(from: Timestamp, to: Timestamp) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or(Duration::ZERO)
}

/// Parses an RFC 3339 timestamp.
#[cfg(test)]
pub(crate) fn parse_time(s: &str) -> Option<Timestamp> {
    s.parse().ok()
}

// ---------------------------------------------------------------------------------
// Go durations

/// Parses a Go duration (`time.ParseDuration`): "300s", "1.5h", "2h45m", "300ms".
/// Negative durations are refused (no field the stand-ins read allows them).
pub(crate) fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("time: invalid duration {s:?}");
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.starts_with('-') {
        return Err(format!("negative duration {s:?}"));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("time: missing unit in duration {s:?}"))?;
        let (number, tail) = rest.split_at(number_len);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(bad());
        }
        let value: f64 = number.parse().map_err(|_| bad())?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let nanos_per_unit = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err(format!("time: missing unit in duration {s:?}")),
            other => return Err(format!("time: unknown unit {other:?} in duration {s:?}")),
        };
        total += value * nanos_per_unit;
        rest = tail;
    }
    if !total.is_finite() || total > u64::MAX as f64 {
        return Err(format!("time: invalid duration {s:?}"));
    }
    Ok(Duration::from_nanos(total.round() as u64))
}

/// A duration as a Go duration string that parses back exactly: "2s", "1500ms".
pub(crate) fn go_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}ns", d.as_nanos())
    }
}

/// Go's `time.Duration.String()` for whole seconds: "2s", "5m0s", "1h0m0s".
pub(crate) fn go_duration_string(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

// ---------------------------------------------------------------------------------
// Label selectors

/// A label selector compiled as `metav1.LabelSelectorAsSelector` does: all
/// `matchLabels` and `matchExpressions` must hold; an empty selector matches all.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Selector {
    requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Selector {
    /// Compiles `selector`; refuses what the Go function refuses (unknown operators,
    /// `In`/`NotIn` without values, `Exists`/`DoesNotExist` with values).
    pub(crate) fn new(selector: &LabelSelector) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for (k, v) in selector.match_labels.iter().flatten() {
            requirements.push(Requirement::In(k.clone(), vec![v.clone()]));
        }
        for e in selector.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            let key = e.key.clone();
            let r = match e.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(format!(
                        "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty (key {key:?})"
                    ));
                }
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(format!(
                        "values: Invalid value: {values:?}: values set must be empty for exists and does not exist (key {key:?})"
                    ));
                }
                "In" => Requirement::In(key, values),
                "NotIn" => Requirement::NotIn(key, values),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::DoesNotExist(key),
                other => return Err(format!("{other:?} is not a valid label selector operator")),
            };
            requirements.push(r);
        }
        Ok(Self { requirements })
    }

    /// `selector` plus `key=value` (`metav1.CloneSelectorAndAddLabel`).
    pub(crate) fn with_label(
        selector: &LabelSelector,
        key: &str,
        value: &str,
    ) -> Result<Self, String> {
        let mut s = selector.clone();
        s.match_labels
            .get_or_insert_default()
            .insert(key.to_owned(), value.to_owned());
        Self::new(&s)
    }

    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }

    /// Every label key the selector reads.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        self.requirements.iter().map(|r| match r {
            Requirement::In(k, _)
            | Requirement::NotIn(k, _)
            | Requirement::Exists(k)
            | Requirement::DoesNotExist(k) => k.as_str(),
        })
    }
}

// ---------------------------------------------------------------------------------
// Int or percent

/// `intstr.GetScaledValueFromIntOrPercent`: an int as is, "N%" of `total` rounded up
/// or down.
pub(crate) fn scaled_value(v: &IntOrString, total: i32, round_up: bool) -> Result<i32, String> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let Some(number) = s.strip_suffix('%') else {
                return Err(format!(
                    "invalid value for IntOrString: invalid type: string is not a percentage ({s:?})"
                ));
            };
            let percent: i64 = number
                .parse()
                .map_err(|e| format!("invalid value {s:?}: {e}"))?;
            let scaled = percent as f64 * f64::from(total) / 100.0;
            let scaled = if round_up {
                scaled.ceil()
            } else {
                scaled.floor()
            };
            Ok(scaled as i32)
        }
    }
}

// ---------------------------------------------------------------------------------
// Conditions

/// `meta.SetStatusCondition`: adds `new`, or updates the condition of its type,
/// keeping `lastTransitionTime` unless the status changes. `new` carries the time to
/// use for a transition. Returns whether anything changed.
pub(crate) fn set_condition(conditions: &mut Vec<Condition>, new: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        None => {
            conditions.push(new);
            true
        }
        Some(c) => {
            let mut changed = false;
            if c.status != new.status {
                c.status = new.status;
                c.last_transition_time = new.last_transition_time;
                changed = true;
            }
            if c.reason != new.reason {
                c.reason = new.reason;
                changed = true;
            }
            if c.message != new.message {
                c.message = new.message;
                changed = true;
            }
            if c.observed_generation != new.observed_generation {
                c.observed_generation = new.observed_generation;
                changed = true;
            }
            changed
        }
    }
}

/// A condition stamped `now`.
pub(crate) fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: impl Into<String>,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        last_transition_time: time(now),
        observed_generation: None,
    }
}

/// The status (`"True"`, ...) of the `type_` condition in `status.conditions` of an
/// object read as JSON, if present.
pub(crate) fn condition_status<'a>(object: &'a Value, type_: &str) -> Option<&'a str> {
    object
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))?
        .get("status")?
        .as_str()
}

// ---------------------------------------------------------------------------------
// JSON

/// The JSON merge patch (RFC 7386) that turns `old` into `new`, as controller-runtime's
/// `client.MergeFrom` computes it; `None` when they are equal.
pub(crate) fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    if old == new {
        return None;
    }
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = Map::new();
            for (k, ov) in o {
                match n.get(k) {
                    None => {
                        patch.insert(k.clone(), Value::Null);
                    }
                    Some(nv) => {
                        if let Some(p) = merge_diff(ov, nv) {
                            patch.insert(k.clone(), p);
                        }
                    }
                }
            }
            for (k, nv) in n {
                if !o.contains_key(k) {
                    patch.insert(k.clone(), nv.clone());
                }
            }
            Some(Value::Object(patch))
        }
        _ => Some(new.clone()),
    }
}

/// `apiVersion` → (group, version); the core group is "".
pub(crate) fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    #[test]
    fn go_durations_parse_like_time_parse_duration() {
        assert_eq!(parse_go_duration("300s"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_go_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("2h45m"), Ok(Duration::from_secs(9900)));
        assert_eq!(parse_go_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(
            parse_go_duration("1m30.5s"),
            Ok(Duration::from_millis(90_500))
        );
        assert_eq!(parse_go_duration("10µs"), Ok(Duration::from_micros(10)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "5", "5x", "s", "1..5s", "-5s", ".s"] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?}");
        }
        for d in [
            Duration::from_secs(2),
            Duration::from_millis(1500),
            Duration::from_nanos(7),
        ] {
            assert_eq!(parse_go_duration(&go_duration(d)), Ok(d));
        }
        assert_eq!(go_duration_string(2), "2s");
        assert_eq!(go_duration_string(300), "5m0s");
        assert_eq!(go_duration_string(3600), "1h0m0s");
        assert_eq!(go_duration_string(0), "0s");
    }

    #[test]
    fn selectors_match_like_label_selector_as_selector() {
        let everything = Selector::new(&LabelSelector::default()).unwrap_or_default();
        assert!(everything.matches(&labels(&[])));
        let workers = LabelSelector {
            match_labels: Some(labels(&[("role", "worker")])),
            match_expressions: Some(vec![
                expr("node-role.kubernetes.io/control-plane", "DoesNotExist", &[]),
                expr("zone", "NotIn", &["b"]),
            ]),
        };
        let s = Selector::new(&workers).unwrap_or_default();
        assert!(s.matches(&labels(&[("role", "worker")])));
        assert!(s.matches(&labels(&[("role", "worker"), ("zone", "a")])));
        assert!(!s.matches(&labels(&[("role", "worker"), ("zone", "b")])));
        assert!(!s.matches(&labels(&[
            ("role", "worker"),
            ("node-role.kubernetes.io/control-plane", "")
        ])));
        assert!(!s.matches(&labels(&[("role", "infra")])));
        let cp = LabelSelector {
            match_expressions: Some(vec![expr(
                "node-role.kubernetes.io/control-plane",
                "Exists",
                &[],
            )]),
            ..Default::default()
        };
        assert!(
            Selector::new(&cp)
                .unwrap_or_default()
                .matches(&labels(&[("node-role.kubernetes.io/control-plane", "")]))
        );
        let in_ = LabelSelector {
            match_expressions: Some(vec![expr("zone", "In", &["a", "c"])]),
            ..Default::default()
        };
        let s = Selector::new(&in_).unwrap_or_default();
        assert!(s.matches(&labels(&[("zone", "c")])) && !s.matches(&labels(&[])));
        for bad in [
            expr("k", "In", &[]),
            expr("k", "Exists", &["x"]),
            expr("k", "Gt", &["1"]),
        ] {
            let sel = LabelSelector {
                match_expressions: Some(vec![bad]),
                ..Default::default()
            };
            assert!(Selector::new(&sel).is_err());
        }
        let with =
            Selector::with_label(&LabelSelector::default(), "cluster", "c1").unwrap_or_default();
        assert!(with.matches(&labels(&[("cluster", "c1")])) && !with.matches(&labels(&[])));
        assert_eq!(with.keys().collect::<Vec<_>>(), ["cluster"]);
    }

    #[test]
    fn int_or_percent_scales_like_apimachinery() {
        let p = |s: &str| IntOrString::String(s.into());
        assert_eq!(scaled_value(&IntOrString::Int(2), 10, true), Ok(2));
        assert_eq!(scaled_value(&p("51%"), 3, true), Ok(2));
        assert_eq!(scaled_value(&p("51%"), 3, false), Ok(1));
        assert_eq!(scaled_value(&p("40%"), 6, false), Ok(2));
        assert_eq!(scaled_value(&p("40%"), 25, false), Ok(10));
        assert_eq!(scaled_value(&p("100%"), 7, true), Ok(7));
        assert_eq!(scaled_value(&p("0%"), 7, true), Ok(0));
        assert!(scaled_value(&p("5"), 7, true).is_err());
        assert!(scaled_value(&p("x%"), 7, true).is_err());
    }

    #[test]
    fn set_condition_keeps_the_transition_time_unless_the_status_changes() {
        let t0 = Timestamp::from_second(1_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let t1 = Timestamp::from_second(2_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let mut cs = Vec::new();
        assert!(set_condition(
            &mut cs,
            condition("Disabled", "False", "Enabled", "", t0)
        ));
        assert!(!set_condition(
            &mut cs,
            condition("Disabled", "False", "Enabled", "", t1)
        ));
        assert!(set_condition(
            &mut cs,
            condition("Disabled", "False", "Other", "m", t1)
        ));
        assert_eq!(cs[0].last_transition_time, time(t0));
        assert!(set_condition(
            &mut cs,
            condition("Disabled", "True", "Other", "m", t1)
        ));
        assert_eq!(cs[0].last_transition_time, time(t1));
        assert_eq!(cs.len(), 1);
    }

    #[test]
    fn merge_diff_is_the_merge_patch_between_two_documents() {
        let old = json!({"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2], "gone": true});
        let new = json!({"a": 1, "b": {"c": 2, "d": 4}, "l": [1], "added": "x"});
        assert_eq!(
            merge_diff(&old, &new),
            Some(json!({"b": {"d": 4}, "l": [1], "gone": null, "added": "x"}))
        );
        assert_eq!(merge_diff(&old, &old), None);
        let mut patched = old.clone();
        json_patch::merge(&mut patched, &merge_diff(&old, &new).unwrap_or_default());
        assert_eq!(patched, new);
    }

    #[test]
    fn times_are_written_in_whole_seconds() {
        let t = parse_time("2026-03-01T10:00:00.75Z").unwrap_or(Timestamp::UNIX_EPOCH);
        assert_eq!(rfc3339(t), "2026-03-01T10:00:00Z");
        assert_eq!(
            until(t, add(t, Duration::from_secs(3))),
            Duration::from_secs(3)
        );
        assert_eq!(until(add(t, Duration::from_secs(3)), t), Duration::ZERO);
        let doc = json!({"status": {"conditions": [{"type": "Succeeded", "status": "False"}]}});
        assert_eq!(condition_status(&doc, "Succeeded"), Some("False"));
        assert_eq!(condition_status(&doc, "Processing"), None);
        assert_eq!(split_api_version("v1"), ("", "v1"));
        assert_eq!(
            split_api_version("test.example.com/v1alpha1"),
            ("test.example.com", "v1alpha1")
        );
    }
}
