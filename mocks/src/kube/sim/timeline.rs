//! What the simulated control plane did, in order, for `nodefence demo` to narrate
//! and for tests to assert on.
//!
//! Each controller records its notable decisions here as it makes them (a node
//! declared NotReady, a pod evicted, a Multi-Attach refusal, a forced detach...),
//! with the wall-clock time. Changes made by others (nodefence's taint, a Node
//! deletion) appear only as the controllers observe them.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::broadcast;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SimEventKind {
    /// The simulation created a Node (`add_node`).
    NodeAdded,
    /// A kubelet (re)started (`set_kubelet(.., true)` or `add_node`).
    KubeletStarted,
    /// A kubelet went silent (power loss or network cut).
    KubeletStopped,
    /// A kubelet re-created its deleted Node object.
    NodeRegistered,
    /// Node lifecycle controller: Ready went from True to Unknown.
    NodeNotReady,
    /// The kubelet posted Ready=True after the node was not Ready.
    NodeReady,
    /// Node lifecycle controller added a `not-ready`/`unreachable` taint.
    NodeTainted,
    /// Node lifecycle controller removed a `not-ready`/`unreachable` taint.
    NodeUntainted,
    /// Someone (nodefence) added `node.kubernetes.io/out-of-service`.
    OutOfServiceTaintAdded,
    /// Someone removed `node.kubernetes.io/out-of-service`.
    OutOfServiceTaintRemoved,
    /// The Node object disappeared (observed by the node lifecycle controller).
    NodeDeleted,
    /// A Lease whose Node is gone was garbage-collected.
    LeaseDeleted,
    /// StatefulSet controller created a pod.
    PodCreated,
    /// Scheduler bound a pod to a node.
    PodScheduled,
    /// Scheduler found no node for a pod.
    PodUnschedulable,
    /// Node lifecycle controller set a pod's Ready condition False.
    PodNotReady,
    /// Taint eviction controller will delete a pod when its toleration expires.
    PodEvictionScheduled,
    /// Taint eviction controller cancelled a scheduled eviction.
    PodEvictionCancelled,
    /// Taint eviction controller deleted a pod (graceful: it is now Terminating).
    PodEvicted,
    /// The kubelet finished a graceful deletion: the pod object is gone.
    PodTerminated,
    /// PodGC force-deleted a pod (out-of-service node, or orphaned).
    PodForceDeleted,
    /// A controller deleted a pod for another reason (e.g. a Failed StatefulSet pod).
    PodDeleted,
    /// The kubelet started a pod's containers: Running and Ready.
    PodRunning,
    /// Attach/detach controller created a VolumeAttachment.
    VolumeAttaching,
    /// The volume is attached to the node (`SuccessfulAttachVolume`).
    VolumeAttached,
    /// Attach refused: the RWO volume is attached to another node.
    MultiAttachError,
    /// An attach timed out (the external-attacher never confirmed it).
    AttachFailed,
    /// The volume is detached and its VolumeAttachment gone.
    VolumeDetached,
    /// The kubelet mounted a pod's volume.
    VolumeMounted,
    /// The kubelet unmounted a volume no pod on the node uses any more.
    VolumeUnmounted,
    /// The kubelet gave up waiting for attach/mount (`FailedMount`, retried).
    FailedMount,
}

impl fmt::Display for SimEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// One thing the simulated control plane did.
#[derive(Debug, Clone, PartialEq)]
pub struct SimEvent {
    pub at: SystemTime,
    pub kind: SimEventKind,
    /// The node concerned, if any.
    pub node: Option<String>,
    /// The pod concerned (`namespace/name`), if any.
    pub pod: Option<String>,
    /// What happened, in words.
    pub message: String,
}

impl fmt::Display for SimEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = humantime::format_rfc3339_millis(self.at);
        write!(f, "{at} {}", self.kind)?;
        if let Some(n) = &self.node {
            write!(f, " node={n}")?;
        }
        if let Some(p) = &self.pod {
            write!(f, " pod={p}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// The shared, append-only record.
#[derive(Clone)]
pub struct Timeline {
    events: Arc<Mutex<Vec<SimEvent>>>,
    tx: broadcast::Sender<SimEvent>,
}

impl Default for Timeline {
    fn default() -> Self {
        let (tx, _) = broadcast::channel(1024);
        Self {
            events: Arc::new(Mutex::new(Vec::new())),
            tx,
        }
    }
}

impl Timeline {
    /// Appends an event (happening now) and tells subscribers.
    pub fn record(
        &self,
        kind: SimEventKind,
        node: Option<&str>,
        pod: Option<&str>,
        message: impl Into<String>,
    ) {
        self.record_at(nodefence_clock::now(), kind, node, pod, message);
    }

    /// Records an event that happened at `at` (taken just before the store write
    /// that made it happen, so that a reaction another component records first
    /// still sorts after its cause).
    pub fn record_at(
        &self,
        at: SystemTime,
        kind: SimEventKind,
        node: Option<&str>,
        pod: Option<&str>,
        message: impl Into<String>,
    ) {
        let event = SimEvent {
            at,
            kind,
            node: node.map(str::to_string),
            pod: pod.map(str::to_string),
            message: message.into(),
        };
        tracing::info!(target: "fake_kube::sim", "{event}");
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let pos = events.iter().rposition(|e| e.at <= at).map_or(0, |i| i + 1);
        events.insert(pos, event.clone());
        drop(events);
        // Nobody listening is fine.
        let _ = self.tx.send(event);
    }

    /// Everything so far, in order.
    pub fn snapshot(&self) -> Vec<SimEvent> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<SimEvent> {
        self.tx.subscribe()
    }
}
