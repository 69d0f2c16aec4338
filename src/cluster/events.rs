//! Kubernetes Events (`events.k8s.io/v1`) for nodefence's notices, kept as series.
//!
//! A notice repeated about the same object (same type, reason, action, and the same
//! series name, or else the same note) within [`SERIES_WINDOW`] updates one Event:
//! `series.count`, `series.lastObservedTime` and the note, which is the latest
//! message (a reminder carries how long the block has lasted). `kubectl describe
//! node` then shows one line, "(x5 over 8m)", with the current text. Two different
//! messages are two Events.
//!
//! kube-runtime's `Recorder` keys a series without the note and patches the first
//! note back: a storm block and then a pause block on the same node within six
//! minutes showed only the storm, counted twice. This recorder is the same size and
//! does not lose the second message.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};

pub use kube::runtime::events::{Event, EventType};

/// How long a repeated notice keeps updating the same Event (Kubernetes' own
/// recorders use six minutes too); after it, a new Event starts.
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    regarding: (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ),
    warning: bool,
    reason: String,
    action: String,
    /// The series name, or the note when the notice has none.
    topic: String,
}

#[derive(Debug, Clone)]
struct Entry {
    name: String,
    count: i32,
    last: SystemTime,
}

/// Publishes Events for one replica (`controller`/`instance` as their reporter).
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    controller: String,
    instance: String,
    series: Arc<Mutex<HashMap<Key, Entry>>>,
}

impl Recorder {
    pub fn new(client: Client, controller: &str, instance: &str) -> Self {
        Self {
            client,
            controller: controller.to_string(),
            instance: instance.to_string(),
            series: Arc::default(),
        }
    }

    /// Publishes `ev` about `regarding`: a new Event, or the next of its series.
    pub async fn publish(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        self.publish_in(ev, None, regarding).await
    }

    /// As [`Recorder::publish`]; notices of one `series` (a block and its reminders)
    /// update one Event whatever their notes.
    pub async fn publish_in(
        &self,
        ev: &Event,
        series: Option<&str>,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let now = crate::clock::now();
        let note = ev.note.clone().unwrap_or_default();
        let key = Key {
            regarding: (
                regarding.kind.clone(),
                regarding.namespace.clone(),
                regarding.name.clone(),
                regarding.uid.clone(),
            ),
            warning: ev.type_ == EventType::Warning,
            reason: ev.reason.clone(),
            action: ev.action.clone(),
            topic: series.map_or_else(|| note.clone(), str::to_string),
        };
        let previous = {
            let mut map = self.series.lock().unwrap_or_else(PoisonError::into_inner);
            map.retain(|_, e| now.duration_since(e.last).unwrap_or_default() < SERIES_WINDOW);
            map.get(&key).cloned()
        };
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        if let Some(prev) = previous {
            let count = prev.count + 1;
            let patch = serde_json::json!({
                "note": ev.note,
                "series": EventSeries { count, last_observed_time: micro(now) },
            });
            match events
                .patch(&prev.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    self.remember(
                        key,
                        Entry {
                            count,
                            last: now,
                            ..prev
                        },
                    );
                    return Ok(());
                }
                // Deleted meanwhile (expired, or removed by hand): start a new one.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(&self.controller),
            now.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
        );
        let event = K8sEvent {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            note: ev.note.clone(),
            event_time: Some(micro(now)),
            regarding: Some(regarding.clone()),
            related: ev.secondary.clone(),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            ..K8sEvent::default()
        };
        events.create(&PostParams::default(), &event).await?;
        self.remember(
            key,
            Entry {
                name,
                count: 1,
                last: now,
            },
        );
        Ok(())
    }

    fn remember(&self, key: Key, entry: Entry) {
        self.series
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, entry);
    }
}

fn micro(t: SystemTime) -> MicroTime {
    let ts = k8s_openapi::jiff::Timestamp::try_from(t)
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    MicroTime(ts)
}
