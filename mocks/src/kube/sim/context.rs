//! What every simulated component shares: the store it acts on, the configuration,
//! the clock, the timeline, the event recorder and the stop signal, plus the few
//! store operations they all need done the apiserver's way (deletes through the
//! registry rules of [`deletion`], finalizer removal that completes a deletion).
//!
//! Controllers act on the store directly, in process, like informers plus a client
//! with no latency; they re-read every object right before changing it (the store's
//! `modify` is an atomic read-modify-write), so concurrent writers (nodefence, tests,
//! other controllers) are never overwritten wholesale.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::super::deletion::{self, DeleteOptions, DeleteOutcome};
use super::super::resources::{NAMESPACES, ResourceType};
use super::super::store::{Store, StoreError};
use super::clock::{Clock, Shutdown, Wake, pause};
use super::config::SimConfig;
use super::events::{EventType, ObjectRef, Recorder, Source};
use super::timeline::{SimEventKind, Timeline};

/// The shared context of one running simulation.
#[derive(Clone)]
pub struct Ctx {
    pub store: Store,
    pub config: Arc<SimConfig>,
    pub clock: Clock,
    pub timeline: Timeline,
    pub recorder: Recorder,
    pub shutdown: Shutdown,
}

impl Ctx {
    /// All objects of a type (shared until the type is next written).
    pub fn list(&self, rt: ResourceType) -> Arc<[Value]> {
        self.store.snapshot(rt)
    }

    /// One object, or `None` when it does not exist.
    pub fn get(&self, rt: ResourceType, namespace: Option<&str>, name: &str) -> Option<Value> {
        self.store.get(rt, namespace, name).ok()
    }

    /// Records a core/v1 Event.
    pub fn event(
        &self,
        about: &ObjectRef,
        source: &Source,
        kind: EventType,
        reason: &str,
        message: &str,
    ) {
        self.recorder.event(about, source, kind, reason, message);
    }

    /// Appends to the timeline.
    pub fn record(
        &self,
        kind: SimEventKind,
        node: Option<&str>,
        pod: Option<&str>,
        message: impl Into<String>,
    ) {
        self.timeline.record(kind, node, pod, message);
    }

    /// Appends to the timeline an event caused by a write started at `at`.
    pub fn record_at(
        &self,
        at: std::time::SystemTime,
        kind: SimEventKind,
        node: Option<&str>,
        pod: Option<&str>,
        message: impl Into<String>,
    ) {
        self.timeline.record_at(at, kind, node, pod, message);
    }

    /// Sleeps `sim` simulated time (at least a short real tick), waking early on a
    /// watched write; `false` when shutting down.
    pub async fn pause(&mut self, wake: Option<&mut Wake>, sim: Duration) -> bool {
        let real = self.clock.tick(sim);
        pause(&mut self.shutdown, wake, real).await
    }

    /// Deletes through the apiserver's rules; `Ok(None)` when already gone.
    pub fn delete(
        &self,
        rt: ResourceType,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Option<DeleteOutcome>, StoreError> {
        match deletion::delete(&self.store, rt, namespace, name, opts) {
            Ok(o) => Ok(Some(o)),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Removes `finalizer` from an object and, when that was the last thing holding
    /// a deleted object, removes the object (as the apiserver does on that update).
    pub fn remove_finalizer(
        &self,
        rt: ResourceType,
        namespace: Option<&str>,
        name: &str,
        finalizer: &str,
    ) -> Result<(), StoreError> {
        let changed = self.store.modify(rt, namespace, name, |o| {
            if let Some(list) = o
                .pointer_mut("/metadata/finalizers")
                .and_then(Value::as_array_mut)
            {
                list.retain(|f| f.as_str() != Some(finalizer));
            }
            Ok(())
        });
        match changed {
            Ok(_) | Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        deletion::finalize_if_done(&self.store, rt, namespace, name).map(|_| ())
    }

    /// Creates a namespace if missing, as the apiserver's bootstrap does for the
    /// system ones.
    pub fn ensure_namespace(&self, name: &str) {
        if self.store.get(NAMESPACES, None, name).is_ok() {
            return;
        }
        let ns = json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        });
        match self.store.create(NAMESPACES, None, ns) {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => tracing::warn!("creating namespace {name}: {e}"),
        }
    }
}
