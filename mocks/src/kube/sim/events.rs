//! core/v1 Events, written as client-go's event recorder writes them, so that
//! `kubectl describe pod` and `kubectl get events` tell the story the real
//! controllers would tell ("Multi-Attach error for volume ...", "Marking for
//! deletion Pod ...", "Node worker-1 status is now: NodeNotReady").
//!
//! As the real recorder does, a repeat of the same event (same object, source,
//! type, reason and message) is not a new object: its `count` goes up and its
//! `lastTimestamp` moves, which kubectl shows as "(x7 over 15m)". Events about
//! cluster-scoped objects (Nodes) go to the `default` namespace.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use serde_json::{Value, json};

use super::super::resources::CORE_EVENTS;
use super::super::store::{Store, StoreError, now_rfc3339};
use super::objects;

/// The object an event is about (`involvedObject`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    pub kind: String,
    pub api_version: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub field_path: String,
}

impl ObjectRef {
    /// A reference to a stored object, as `reference.GetReference` builds it.
    pub fn to(object: &Value) -> Self {
        let s = |p: &str| objects::str_at(object, p).unwrap_or_default().to_string();
        Self {
            kind: s("/kind"),
            api_version: s("/apiVersion"),
            namespace: s("/metadata/namespace"),
            name: s("/metadata/name"),
            uid: s("/metadata/uid"),
            resource_version: s("/metadata/resourceVersion"),
            field_path: String::new(),
        }
    }

    /// A Node reference as the node controllers build it (no resourceVersion).
    pub fn node(name: &str, uid: &str) -> Self {
        Self {
            kind: "Node".into(),
            api_version: "v1".into(),
            namespace: String::new(),
            name: name.into(),
            uid: uid.into(),
            resource_version: String::new(),
            field_path: String::new(),
        }
    }

    /// A reference by kind and name only (e.g. a pod the taint manager no longer
    /// has in hand).
    pub fn named(kind: &str, api_version: &str, namespace: &str, name: &str) -> Self {
        Self {
            kind: kind.into(),
            api_version: api_version.into(),
            namespace: namespace.into(),
            name: name.into(),
            uid: String::new(),
            resource_version: String::new(),
            field_path: String::new(),
        }
    }

    /// The same reference, pointing at a field (`spec.containers{db}`).
    pub fn field(mut self, path: impl Into<String>) -> Self {
        self.field_path = path.into();
        self
    }

    fn to_json(&self) -> Value {
        let mut v = json!({"kind": self.kind, "name": self.name});
        for (k, val) in [
            ("apiVersion", &self.api_version),
            ("namespace", &self.namespace),
            ("uid", &self.uid),
            ("resourceVersion", &self.resource_version),
            ("fieldPath", &self.field_path),
        ] {
            if !val.is_empty() {
                v[k] = json!(val);
            }
        }
        v
    }
}

/// Who reports (`source`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Source {
    pub component: String,
    pub host: String,
}

impl Source {
    pub fn controller(component: &str) -> Self {
        Self {
            component: component.into(),
            host: String::new(),
        }
    }

    pub fn kubelet(node: &str) -> Self {
        Self {
            component: "kubelet".into(),
            host: node.into(),
        }
    }
}

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

type Key = (ObjectRef, Source, EventType, String, String);

/// Writes Events to the store; shared by all simulated components.
#[derive(Clone)]
pub struct Recorder {
    store: Store,
    seen: Arc<Mutex<HashMap<Key, (String, String)>>>,
}

impl Recorder {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            seen: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Records an event (or counts a repeat). Failures are logged, never fatal: a
    /// lost event must not stop a controller.
    pub fn event(
        &self,
        about: &ObjectRef,
        source: &Source,
        kind: EventType,
        reason: &str,
        message: &str,
    ) {
        let mut dedup_key = about.clone();
        dedup_key.resource_version.clear();
        let key: Key = (
            dedup_key,
            source.clone(),
            kind,
            reason.to_string(),
            message.to_string(),
        );
        let namespace = if about.namespace.is_empty() {
            "default".to_string()
        } else {
            about.namespace.clone()
        };
        let previous = self
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned();
        if let Some((ns, name)) = previous {
            let bumped = self.store.modify(CORE_EVENTS, Some(&ns), &name, |e| {
                let count = e.get("count").and_then(Value::as_i64).unwrap_or(1);
                e["count"] = json!(count + 1);
                e["lastTimestamp"] = json!(now_rfc3339());
                Ok(())
            });
            match bumped {
                Ok(_) => return,
                Err(StoreError::NotFound { .. }) => {}
                Err(e) => {
                    tracing::debug!("event {reason} not counted: {e}");
                    return;
                }
            }
        }
        let now = now_rfc3339();
        let nanos = nodefence_clock::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let name = format!("{}.{nanos:x}", about.name);
        let body = json!({
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": about.to_json(),
            "reason": reason,
            "message": message,
            "source": if source.host.is_empty() {
                json!({"component": source.component})
            } else {
                json!({"component": source.component, "host": source.host})
            },
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": kind.as_str(),
            "eventTime": null,
            "reportingComponent": source.component,
            "reportingInstance": source.host,
        });
        match self.store.create(CORE_EVENTS, Some(&namespace), body) {
            Ok(_) => {
                self.seen
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, (namespace, name));
            }
            Err(e) => tracing::debug!("event {reason} not recorded: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_counted_and_node_events_go_to_default() {
        let store = Store::default();
        let rec = Recorder::new(store.clone());
        let node = ObjectRef::node("worker-1", "u1");
        let src = Source::controller("node-controller");
        for _ in 0..3 {
            rec.event(
                &node,
                &src,
                EventType::Normal,
                "NodeNotReady",
                "Node worker-1 status is now: NodeNotReady",
            );
        }
        let (events, _) = store.list(CORE_EVENTS, Some("default"));
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["count"], 3);
        assert_eq!(events[0]["involvedObject"]["kind"], "Node");
        assert_eq!(events[0]["source"]["component"], "node-controller");
        assert!(
            events[0]["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("worker-1.")
        );
    }
}
