//! The fake API server's object store: the part of etcd + the apiserver registry that
//! clients can observe.
//!
//! - One `resourceVersion` counter for the whole store, increasing by one for every
//!   write, as clients may compare versions across types.
//! - `create` fills `metadata` the way the apiserver does (uid, creationTimestamp,
//!   resourceVersion, namespace, `generateName`); `update` refuses a stale
//!   `resourceVersion` with a conflict; `modify` is an atomic read-modify-write for
//!   patches and simulated controllers.
//! - Every write is kept in a bounded history and broadcast, so a watch can start
//!   from any version still in the window and gets `Gone` (410) for older ones.
//!
//! Objects are kept as JSON (`serde_json::Value`): the server must round-trip fields
//! it does not know, exactly as the real one does. They are keyed by the type's group
//! and plural ([`ResourceType::storage_key`]): the versions of a custom resource share
//! their objects, each read answering in the version asked for
//! ([`ResourceType::convert`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::field::{FieldError, Invalid};
pub use super::meta::{metadata_mut, now_rfc3339, now_rfc3339_micros};
use super::meta::{short_suffix, uid};
use super::resources::ResourceType;

/// How many past writes a watch can resume from.
pub const DEFAULT_HISTORY: usize = 10_000;

/// The objects of a type as they were at some version, the writes since (all
/// types), and a receiver for later ones: see [`Store::subscribe_from_with_state`].
pub type StateAndEvents = (Vec<Value>, Vec<StoreEvent>, broadcast::Receiver<StoreEvent>);

/// What a write did, as a watch reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    /// `ADDED`, `MODIFIED`, `DELETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One write, as broadcast to watchers.
#[derive(Debug, Clone)]
pub struct StoreEvent {
    pub resource_version: u64,
    pub resource: ResourceType,
    pub event: EventType,
    /// The object after the write (for Deleted: as it was, with the delete's version).
    pub object: Value,
    /// When the write was made (the simulation's clock when it is virtual): a reader
    /// that tells writes apart in time does not stamp them when it got to them.
    pub at: std::time::SystemTime,
}

impl StoreEvent {
    pub fn namespace(&self) -> Option<&str> {
        self.object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
    }
}

/// Why a store operation failed; each maps to one apiserver `Status`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("{kind} \"{name}\" not found")]
    NotFound { kind: String, name: String },
    #[error("{kind} \"{name}\" already exists")]
    AlreadyExists { kind: String, name: String },
    #[error(
        "Operation cannot be fulfilled on {plural} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
    )]
    Conflict { plural: String, name: String },
    #[error("too old resource version: {requested} ({oldest})")]
    Gone { requested: u64, oldest: u64 },
    #[error("{0}")]
    Invalid(String),
    /// A 422 with `details.causes` naming each field, as `apierrors.NewInvalid`.
    #[error("{}", .0.message())]
    InvalidFields(Box<Invalid>),
    #[error("{0}")]
    BadRequest(String),
    /// 403, e.g. creating a custom resource while its CRD is being deleted.
    #[error("{0}")]
    Forbidden(String),
}

impl StoreError {
    /// HTTP status code of the apiserver's answer.
    pub fn code(&self) -> u16 {
        match self {
            StoreError::NotFound { .. } => 404,
            StoreError::AlreadyExists { .. } | StoreError::Conflict { .. } => 409,
            StoreError::Gone { .. } => 410,
            StoreError::Invalid(_) | StoreError::InvalidFields(_) => 422,
            StoreError::BadRequest(_) => 400,
            StoreError::Forbidden(_) => 403,
        }
    }

    /// `Status.reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            StoreError::NotFound { .. } => "NotFound",
            StoreError::AlreadyExists { .. } => "AlreadyExists",
            StoreError::Conflict { .. } => "Conflict",
            StoreError::Gone { .. } => "Expired",
            StoreError::Invalid(_) | StoreError::InvalidFields(_) => "Invalid",
            StoreError::BadRequest(_) => "BadRequest",
            StoreError::Forbidden(_) => "Forbidden",
        }
    }

    /// The `Status` object the apiserver would send.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        if let StoreError::InvalidFields(invalid) = self {
            status["details"] = invalid.details();
        }
        status
    }

    /// A 422 for `kind` (`Kind`, group) object `name` with these field errors.
    pub fn invalid_fields(rt: ResourceType, name: &str, causes: Vec<FieldError>) -> Self {
        StoreError::InvalidFields(Box::new(Invalid {
            group: rt.group.to_owned(),
            kind: rt.kind.to_owned(),
            name: name.to_owned(),
            causes,
        }))
    }
}

/// Group and plural: where a type's objects are kept, whatever the version.
type StorageKey = (&'static str, &'static str);

type Key = (StorageKey, String, String);

struct Inner {
    resource_version: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<StoreEvent>,
    /// The object before each write in `history` (same order; `None` for creates),
    /// so a watch resuming from an old version can rebuild what matched back then.
    history_prev: VecDeque<Option<Value>>,
    history_limit: usize,
    /// Versions at or below this are no longer in `history`.
    compacted: u64,
    uid_counter: u64,
    /// Every object of a type, shared until the next write of that type: the
    /// simulated controllers read whole types many times a second and change little.
    snapshots: HashMap<ResourceType, Arc<[Value]>>,
}

/// The store; cheap to clone (shared).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Mutex<Inner>>,
    events: broadcast::Sender<StoreEvent>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new(DEFAULT_HISTORY)
    }
}

impl Store {
    /// A store that keeps the last `history` writes for watches to resume from.
    pub fn new(history: usize) -> Self {
        let (events, _) = broadcast::channel(4096);
        Self {
            inner: Arc::new(Mutex::new(Inner {
                resource_version: 1,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                history_prev: VecDeque::new(),
                history_limit: history.max(1),
                compacted: 1,
                uid_counter: 0,
                snapshots: HashMap::new(),
            })),
            events,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every write is one
        // insert); keep serving rather than poisoning the whole server.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The newest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().resource_version
    }

    /// One object.
    pub fn get(
        &self,
        rt: ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, StoreError> {
        self.lock()
            .objects
            .get(&key(rt, namespace, name))
            .map(|o| converted(rt, o))
            .ok_or_else(|| not_found(rt, name))
    }

    /// All objects of a type (in one namespace, or all), sorted by namespace and name,
    /// with the store's resourceVersion at that moment.
    pub fn list(&self, rt: ResourceType, namespace: Option<&str>) -> (Vec<Value>, u64) {
        let inner = self.lock();
        (list_locked(&inner, rt, namespace), inner.resource_version)
    }

    /// Every object of a type (all namespaces), sorted by namespace and name, shared:
    /// reading it again before the type is written copies nothing.
    pub fn snapshot(&self, rt: ResourceType) -> Arc<[Value]> {
        self.snapshot_at(rt).0
    }

    /// [`Store::snapshot`] and the store's resource version it is current at.
    pub fn snapshot_at(&self, rt: ResourceType) -> (Arc<[Value]>, u64) {
        let mut inner = self.lock();
        let version = inner.resource_version;
        if let Some(s) = inner.snapshots.get(&rt) {
            return (Arc::clone(s), version);
        }
        let all: Arc<[Value]> = list_locked(&inner, rt, None).into();
        inner.snapshots.insert(rt, Arc::clone(&all));
        (all, version)
    }

    /// A consistent list plus a receiver for every later write: nothing is missed or
    /// seen twice between the two.
    pub fn list_and_subscribe(
        &self,
        rt: ResourceType,
        namespace: Option<&str>,
    ) -> (Vec<Value>, u64, broadcast::Receiver<StoreEvent>) {
        let inner = self.lock();
        let rx = self.events.subscribe();
        (
            list_locked(&inner, rt, namespace),
            inner.resource_version,
            rx,
        )
    }

    /// The writes after `resource_version` still in history (all types), plus a
    /// receiver for later ones; `Gone` when that version was compacted away.
    pub fn subscribe_from(
        &self,
        resource_version: u64,
    ) -> Result<(Vec<StoreEvent>, broadcast::Receiver<StoreEvent>), StoreError> {
        let inner = self.lock();
        if resource_version < inner.compacted {
            return Err(StoreError::Gone {
                requested: resource_version,
                oldest: inner.compacted,
            });
        }
        let rx = self.events.subscribe();
        let backlog = inner
            .history
            .iter()
            .filter(|e| e.resource_version > resource_version)
            .cloned()
            .collect();
        Ok((backlog, rx))
    }

    /// [`Store::subscribe_from`] plus the objects of `rt` (in `namespace`, or all) as
    /// they were at `resource_version`, rebuilt by undoing the later writes. A watch
    /// with a selector resuming from that version needs them to tell "stopped
    /// matching" (sent as DELETED) from "never matched" (not sent), as the real
    /// watch cache does with its previous objects.
    pub fn subscribe_from_with_state(
        &self,
        rt: ResourceType,
        namespace: Option<&str>,
        resource_version: u64,
    ) -> Result<StateAndEvents, StoreError> {
        let inner = self.lock();
        if resource_version < inner.compacted {
            return Err(StoreError::Gone {
                requested: resource_version,
                oldest: inner.compacted,
            });
        }
        let rx = self.events.subscribe();
        let mut state: BTreeMap<Key, Value> = inner
            .objects
            .iter()
            .filter(|((t, ns, _), _)| *t == rt.storage_key() && namespace.is_none_or(|n| n == ns))
            .map(|(k, v)| (k.clone(), converted(rt, v)))
            .collect();
        let mut backlog = Vec::new();
        for (e, prev) in inner.history.iter().zip(inner.history_prev.iter()).rev() {
            if e.resource_version <= resource_version {
                break;
            }
            backlog.push(e.clone());
            if !e.resource.same_storage(&rt) {
                continue;
            }
            let ns = e.namespace().unwrap_or_default();
            if namespace.is_some_and(|n| n != ns) {
                continue;
            }
            let name = e
                .object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let k = key(rt, Some(ns), name);
            match prev {
                Some(p) => state.insert(k, converted(rt, p)),
                None => state.remove(&k),
            };
        }
        backlog.reverse();
        Ok((state.into_values().collect(), backlog, rx))
    }

    /// Creates an object, filling server-side metadata. `metadata.name` or
    /// `metadata.generateName` is required; a namespaced type needs `namespace`.
    pub fn create(
        &self,
        rt: ResourceType,
        namespace: Option<&str>,
        mut object: Value,
    ) -> Result<Value, StoreError> {
        let mut inner = self.lock();
        let namespace = check_namespace(rt, namespace)?;
        if !object.is_object() {
            return Err(StoreError::BadRequest(
                "the body must be a JSON object".into(),
            ));
        }
        inner.uid_counter += 1;
        let uid_n = inner.uid_counter;
        let meta = metadata_mut(&mut object);
        let name = match meta.get("name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => match meta.get("generateName").and_then(Value::as_str) {
                Some(prefix) if !prefix.is_empty() => format!("{prefix}{}", short_suffix(uid_n)),
                _ => {
                    return Err(StoreError::Invalid(format!(
                        "{} is invalid: metadata.name: Required value: name or generateName is required",
                        rt.kind
                    )));
                }
            },
        };
        if let Some(body_ns) = meta.get("namespace").and_then(Value::as_str)
            && namespace.is_some_and(|ns| ns != body_ns)
        {
            return Err(StoreError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
        let k = key(rt, namespace, &name);
        if inner.objects.contains_key(&k) {
            // The real server names the resource with its group; fake-kube always
            // said only the plural for the built-in types, and still does.
            let kind = if rt.custom.is_some() {
                rt.qualified_resource()
            } else {
                rt.plural.to_string()
            };
            return Err(StoreError::AlreadyExists { kind, name });
        }
        meta.insert("name".into(), Value::String(name));
        if let Some(ns) = namespace {
            meta.insert("namespace".into(), Value::String(ns.to_string()));
        }
        meta.insert("uid".into(), Value::String(uid()));
        meta.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
        meta.remove("deletionTimestamp");
        set_type_meta(&mut object, rt);
        Ok(commit(
            &mut inner,
            &self.events,
            rt,
            k,
            object,
            EventType::Added,
        ))
    }

    /// Replaces an object. A `metadata.resourceVersion` in the body must match the
    /// stored one (409 Conflict otherwise); absent means "unconditional".
    pub fn update(
        &self,
        rt: ResourceType,
        namespace: Option<&str>,
        name: &str,
        object: Value,
    ) -> Result<Value, StoreError> {
        self.modify(rt, namespace, name, |current| {
            let wanted = object.pointer("/metadata/resourceVersion").and_then(Value::as_str);
            let have = current.pointer("/metadata/resourceVersion").and_then(Value::as_str);
            if let Some(wanted) = wanted
                && Some(wanted) != have
            {
                return Err(StoreError::Conflict {
                    plural: rt.plural.to_string(),
                    name: name.to_string(),
                });
            }
            if let Some(body_name) = object.pointer("/metadata/name").and_then(Value::as_str)
                && body_name != name
            {
                return Err(StoreError::BadRequest(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                )));
            }
            let mut next = object.clone();
            carry_server_metadata(current, &mut next);
            *current = next;
            Ok(())
        })
    }

    /// Atomic read-modify-write: `change` edits the stored object; server-owned
    /// metadata (name, namespace, uid, creationTimestamp) cannot be changed by it.
    /// A change that leaves the object equal is not a write (no new version).
    pub fn modify<F>(
        &self,
        rt: ResourceType,
        namespace: Option<&str>,
        name: &str,
        change: F,
    ) -> Result<Value, StoreError>
    where
        F: FnOnce(&mut Value) -> Result<(), StoreError>,
    {
        let mut inner = self.lock();
        let k = key(rt, namespace, name);
        let Some(current) = inner.objects.get(&k).map(|o| converted(rt, o)) else {
            return Err(not_found(rt, name));
        };
        let mut next = current.clone();
        change(&mut next)?;
        carry_server_metadata(&current, &mut next);
        set_type_meta(&mut next, rt);
        if next == current {
            return Ok(current);
        }
        Ok(commit(
            &mut inner,
            &self.events,
            rt,
            k,
            next,
            EventType::Modified,
        ))
    }

    /// Removes an object now. `precondition_rv`: when given, must match (409).
    pub fn delete(
        &self,
        rt: ResourceType,
        namespace: Option<&str>,
        name: &str,
        precondition_rv: Option<&str>,
    ) -> Result<Value, StoreError> {
        let mut inner = self.lock();
        let k = key(rt, namespace, name);
        let Some(current) = inner.objects.get(&k) else {
            return Err(not_found(rt, name));
        };
        if let Some(rv) = precondition_rv
            && current
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                != Some(rv)
        {
            return Err(StoreError::Conflict {
                plural: rt.plural.to_string(),
                name: name.to_string(),
            });
        }
        let Some(mut object) = inner.objects.remove(&k) else {
            return Err(not_found(rt, name));
        };
        rt.convert(&mut object);
        let prev = object.clone();
        inner.resource_version += 1;
        let rv = inner.resource_version;
        metadata_mut(&mut object).insert("resourceVersion".into(), Value::String(rv.to_string()));
        record(
            &mut inner,
            &self.events,
            StoreEvent {
                resource_version: rv,
                resource: rt,
                event: EventType::Deleted,
                object: object.clone(),
                at: nodefence_clock::now(),
            },
            Some(prev),
        );
        Ok(object)
    }
}

/// Keys sort by type, then namespace, then name: one type (in one namespace) is one
/// contiguous range, so a list never walks the other types (Events outnumber Nodes).
fn list_locked(inner: &Inner, rt: ResourceType, namespace: Option<&str>) -> Vec<Value> {
    let ns = namespace.unwrap_or("");
    let storage = rt.storage_key();
    inner
        .objects
        .range((storage, ns.to_string(), String::new())..)
        .take_while(|((t, n, _), _)| *t == storage && (namespace.is_none() || n == ns))
        .map(|(_, v)| converted(rt, v))
        .collect()
}

/// A copy of a stored object as version `rt` of its type serves it.
fn converted(rt: ResourceType, object: &Value) -> Value {
    let mut o = object.clone();
    rt.convert(&mut o);
    o
}

fn commit(
    inner: &mut Inner,
    events: &broadcast::Sender<StoreEvent>,
    rt: ResourceType,
    k: Key,
    mut object: Value,
    event: EventType,
) -> Value {
    inner.resource_version += 1;
    let rv = inner.resource_version;
    metadata_mut(&mut object).insert("resourceVersion".into(), Value::String(rv.to_string()));
    let prev = inner.objects.insert(k, object.clone());
    record(
        inner,
        events,
        StoreEvent {
            resource_version: rv,
            resource: rt,
            event,
            object: object.clone(),
            at: nodefence_clock::now(),
        },
        prev,
    );
    object
}

fn record(
    inner: &mut Inner,
    events: &broadcast::Sender<StoreEvent>,
    e: StoreEvent,
    prev: Option<Value>,
) {
    if e.resource.custom.is_none() {
        // A built-in type has one version: one snapshot to drop.
        inner.snapshots.remove(&e.resource);
    } else {
        inner.snapshots.retain(|t, _| !t.same_storage(&e.resource));
    }
    inner.history.push_back(e.clone());
    inner.history_prev.push_back(prev);
    while inner.history.len() > inner.history_limit {
        inner.history_prev.pop_front();
        if let Some(old) = inner.history.pop_front() {
            inner.compacted = old.resource_version;
        }
    }
    // No receivers is fine: nobody is watching.
    let _ = events.send(e);
}

fn key(rt: ResourceType, namespace: Option<&str>, name: &str) -> Key {
    let ns = if rt.namespaced {
        namespace.unwrap_or("default")
    } else {
        ""
    };
    (rt.storage_key(), ns.to_string(), name.to_string())
}

fn check_namespace(rt: ResourceType, namespace: Option<&str>) -> Result<Option<&str>, StoreError> {
    match (rt.namespaced, namespace) {
        (true, Some(ns)) if !ns.is_empty() => Ok(Some(ns)),
        (true, _) => Err(StoreError::BadRequest(format!(
            "{} is namespaced: a namespace is required",
            rt.kind
        ))),
        (false, _) => Ok(None),
    }
}

fn not_found(rt: ResourceType, name: &str) -> StoreError {
    StoreError::NotFound {
        kind: rt.qualified_resource(),
        name: name.to_string(),
    }
}

fn set_type_meta(object: &mut Value, rt: ResourceType) {
    if let Value::Object(map) = object {
        map.insert("apiVersion".into(), Value::String(rt.api_version()));
        map.insert("kind".into(), Value::String(rt.kind.to_string()));
    }
}

/// Keeps what only the server may set.
fn carry_server_metadata(from: &Value, to: &mut Value) {
    let keep = [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "resourceVersion",
        "deletionTimestamp",
    ];
    let saved: Vec<(&str, Option<Value>)> = keep
        .iter()
        .map(|k| (*k, from.pointer(&format!("/metadata/{k}")).cloned()))
        .collect();
    let meta = metadata_mut(to);
    for (k, v) in saved {
        match v {
            Some(v) => {
                // deletionTimestamp may be set by the server's own delete path via
                // `modify`, never cleared by a client.
                if k != "deletionTimestamp" || !meta.contains_key(k) {
                    meta.insert(k.to_string(), v);
                }
            }
            None if k == "deletionTimestamp" => {}
            None => {
                meta.remove(k);
            }
        }
    }
}

#[cfg(test)]
mod tests;
