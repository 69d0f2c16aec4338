//! Taints and tolerations, with the exact matching rules of `k8s.io/api`
//! (`Toleration.ToleratesTaint`) and of the taint eviction controller
//! (`GetMatchingTolerations`, `getMinTolerationTime`), plus the
//! DefaultTolerationSeconds admission plugin.
//!
//! Editing helpers touch only the taint they name, so someone else's taints (the
//! control-plane taint, nodefence's `node.kubernetes.io/out-of-service`) survive every
//! controller write.

use std::time::Duration;

use serde_json::{Value, json};

use super::objects::At;
use super::objects::arr_mut;

pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
pub const CONTROL_PLANE: &str = "node-role.kubernetes.io/control-plane";
pub const NO_EXECUTE: &str = "NoExecute";
pub const NO_SCHEDULE: &str = "NoSchedule";

/// One `spec.taints` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
    pub time_added: Option<String>,
}

impl Taint {
    /// `{key: value}` as the scheduler prints it.
    pub fn display(&self) -> String {
        format!("{{{}: {}}}", self.key, self.value)
    }
}

/// A Node's taints (malformed entries skipped).
pub fn taints(node: &Value) -> Vec<Taint> {
    node.at("/spec/taints")
        .and_then(Value::as_array)
        .map(|ts| {
            ts.iter()
                .filter_map(|t| {
                    Some(Taint {
                        key: t.get("key")?.as_str()?.to_string(),
                        value: t
                            .get("value")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                        effect: t.get("effect")?.as_str()?.to_string(),
                        time_added: t
                            .get("timeAdded")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The NoExecute taints of a Node.
pub fn no_execute(node: &Value) -> Vec<Taint> {
    taints(node)
        .into_iter()
        .filter(|t| t.effect == NO_EXECUTE)
        .collect()
}

/// Whether a Node has a taint with `key` (any effect), like `TaintKeyExists`.
pub fn has_key(node: &Value, key: &str) -> bool {
    taints(node).iter().any(|t| t.key == key)
}

/// Whether a Node has the taint `key:effect`.
pub fn has(node: &Value, key: &str, effect: &str) -> bool {
    taints(node)
        .iter()
        .any(|t| t.key == key && t.effect == effect)
}

/// Adds `key:effect` with `timeAdded` unless a taint with that key and effect exists.
/// Returns whether it was added.
pub fn add(node: &mut Value, key: &str, effect: &str, time_added: &str) -> bool {
    if has(node, key, effect) {
        return false;
    }
    arr_mut(node, &["spec", "taints"])
        .push(json!({"key": key, "effect": effect, "timeAdded": time_added}));
    true
}

/// Removes every `key:effect` taint. Returns whether one was removed. An emptied
/// list is dropped, as the API serialises it.
pub fn remove(node: &mut Value, key: &str, effect: &str) -> bool {
    let list = arr_mut(node, &["spec", "taints"]);
    let before = list.len();
    list.retain(|t| {
        !(t.get("key").and_then(Value::as_str) == Some(key)
            && t.get("effect").and_then(Value::as_str) == Some(effect))
    });
    let removed = list.len() != before;
    if list.is_empty()
        && let Some(spec) = node.get_mut("spec").and_then(Value::as_object_mut)
    {
        spec.remove("taints");
    }
    removed
}

/// One `spec.tolerations` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toleration {
    pub key: String,
    pub operator: String,
    pub value: String,
    pub effect: String,
    pub seconds: Option<i64>,
}

impl Toleration {
    /// `ToleratesTaint`: an empty effect or key matches any; `Exists` ignores the
    /// value; `Equal` (or empty) needs the same value.
    pub fn tolerates(&self, t: &Taint) -> bool {
        if !self.effect.is_empty() && self.effect != t.effect {
            return false;
        }
        if !self.key.is_empty() && self.key != t.key {
            return false;
        }
        match self.operator.as_str() {
            "" | "Equal" => self.value == t.value,
            "Exists" => true,
            _ => false,
        }
    }
}

/// A pod's tolerations (malformed entries skipped).
pub fn tolerations(pod: &Value) -> Vec<Toleration> {
    let s = |t: &Value, k: &str| {
        t.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    pod.at("/spec/tolerations")
        .and_then(Value::as_array)
        .map(|ts| {
            ts.iter()
                .filter(|t| t.is_object())
                .map(|t| Toleration {
                    key: s(t, "key"),
                    operator: s(t, "operator"),
                    value: s(t, "value"),
                    effect: s(t, "effect"),
                    seconds: t.get("tolerationSeconds").and_then(Value::as_i64),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `GetMatchingTolerations`: whether all taints are tolerated, and the first
/// toleration matching each.
pub fn matching(taints: &[Taint], tols: &[Toleration]) -> (bool, Vec<Toleration>) {
    let mut used = Vec::new();
    for t in taints {
        match tols.iter().find(|tol| tol.tolerates(t)) {
            Some(tol) => used.push(tol.clone()),
            None => return (false, Vec::new()),
        }
    }
    (true, used)
}

/// How long NoExecute taints are tolerated (`getMinTolerationTime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tolerated {
    /// No used toleration has `tolerationSeconds`: never evicted.
    Forever,
    /// The smallest `tolerationSeconds` (0 or less: evict now).
    For(Duration),
}

/// `getMinTolerationTime` of the tolerations used.
pub fn min_toleration(used: &[Toleration]) -> Tolerated {
    if used.is_empty() {
        return Tolerated::For(Duration::ZERO);
    }
    let mut min: Option<i64> = None;
    for s in used.iter().filter_map(|t| t.seconds) {
        if s <= 0 {
            return Tolerated::For(Duration::ZERO);
        }
        min = Some(min.map_or(s, |m: i64| m.min(s)));
    }
    match min {
        Some(s) => Tolerated::For(Duration::from_secs(s.unsigned_abs())),
        None => Tolerated::Forever,
    }
}

/// The DefaultTolerationSeconds admission plugin: adds the `not-ready` and
/// `unreachable` NoExecute tolerations (`Exists`, `tolerationSeconds`) a pod lacks.
pub fn add_default_tolerations(pod: &mut Value, seconds: u64) {
    let existing = tolerations(pod);
    let covers = |key: &str| {
        existing.iter().any(|t| {
            (t.key == key || t.key.is_empty()) && (t.effect == NO_EXECUTE || t.effect.is_empty())
        })
    };
    let missing: Vec<&str> = [NOT_READY, UNREACHABLE]
        .into_iter()
        .filter(|k| !covers(k))
        .collect();
    let list = arr_mut(pod, &["spec", "tolerations"]);
    for key in missing {
        list.push(json!({
            "key": key, "operator": "Exists", "effect": NO_EXECUTE, "tolerationSeconds": seconds,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: String::new(),
            effect: effect.into(),
            time_added: None,
        }
    }

    #[test]
    fn default_tolerations_delay_unreachable_but_not_out_of_service() {
        let mut pod = json!({"spec": {}});
        add_default_tolerations(&mut pod, 300);
        add_default_tolerations(&mut pod, 300);
        let tols = tolerations(&pod);
        assert_eq!(tols.len(), 2, "added once");
        let (ok, used) = matching(&[taint(UNREACHABLE, NO_EXECUTE)], &tols);
        assert!(ok);
        assert_eq!(
            min_toleration(&used),
            Tolerated::For(Duration::from_secs(300))
        );
        let (ok, _) = matching(
            &[
                taint(UNREACHABLE, NO_EXECUTE),
                taint(OUT_OF_SERVICE, NO_EXECUTE),
            ],
            &tols,
        );
        assert!(!ok, "nothing tolerates out-of-service");
    }

    #[test]
    fn toleration_rules() {
        let all = Toleration {
            key: String::new(),
            operator: "Exists".into(),
            value: String::new(),
            effect: String::new(),
            seconds: None,
        };
        assert!(all.tolerates(&taint(OUT_OF_SERVICE, NO_EXECUTE)));
        assert_eq!(
            min_toleration(std::slice::from_ref(&all)),
            Tolerated::Forever
        );
        let equal = Toleration {
            key: "k".into(),
            operator: "Equal".into(),
            value: "v".into(),
            effect: NO_SCHEDULE.into(),
            seconds: None,
        };
        let mut t = taint("k", NO_SCHEDULE);
        assert!(!equal.tolerates(&t));
        t.value = "v".into();
        assert!(equal.tolerates(&t));
        t.effect = NO_EXECUTE.into();
        assert!(!equal.tolerates(&t));
        // A pod that already tolerates everything gets no default tolerations.
        let mut pod = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        add_default_tolerations(&mut pod, 300);
        assert_eq!(tolerations(&pod).len(), 1);
    }

    #[test]
    fn editing_keeps_other_taints() {
        let mut node = json!({"spec": {"taints": [{"key": OUT_OF_SERVICE, "value": "nodeshutdown", "effect": NO_EXECUTE}]}});
        assert!(add(&mut node, UNREACHABLE, NO_EXECUTE, "t"));
        assert!(!add(&mut node, UNREACHABLE, NO_EXECUTE, "t"));
        assert!(remove(&mut node, UNREACHABLE, NO_EXECUTE));
        assert!(has_key(&node, OUT_OF_SERVICE));
        assert!(remove(&mut node, OUT_OF_SERVICE, NO_EXECUTE));
        assert!(node["spec"].get("taints").is_none());
    }
}
