//! The StatefulSet controller (`OrderedReady` pod management) for the simulated
//! workloads, with the CSI external-provisioner that binds their claims.
//!
//! For replica `i` it makes sure claim `data-<name>-<i>` exists (creating it, then
//! provisioning a PersistentVolume `pvc-<claim uid>` on the CSI driver and binding
//! both, as dynamic provisioning does), then that pod `<name>-<i>` exists. The
//! property that matters here: a pod is re-created only once the old pod object is
//! *completely gone*. A `Terminating` pod blocks its replacement (and, ordered, every
//! later replica) for as long as it exists, which on a dead node is forever. A
//! `Failed`/`Succeeded` pod is deleted so that it can be re-created.
//!
//! The StatefulSet object itself is not stored (fake-kube serves no `apps` group);
//! pods carry its owner reference and its events name it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::super::deletion::{DeleteOptions, Preconditions};
use super::super::resources::{PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, PODS};
use super::super::store::{StoreError, now_rfc3339};
use super::clock::Wake;
use super::config::WORKLOAD_RESYNC;
use super::context::Ctx;
use super::events::{EventType, ObjectRef, Source};
use super::names::random_hex;
use super::objects;
use super::specs::WorkloadSpec;
use super::taints::add_default_tolerations;
use super::timeline::SimEventKind;

const COMPONENT: &str = "statefulset-controller";
/// How long the controller takes to act on a pod that turned Failed/Succeeded.
const TERMINAL_POD_REACTION: Duration = Duration::from_secs(1);

/// A registered workload.
#[derive(Debug, Clone)]
struct Workload {
    spec: WorkloadSpec,
    uid: String,
    revision: String,
}

impl Workload {
    fn owner(&self) -> ObjectRef {
        ObjectRef {
            kind: "StatefulSet".into(),
            api_version: "apps/v1".into(),
            namespace: self.spec.namespace.clone(),
            name: self.spec.name.clone(),
            uid: self.uid.clone(),
            resource_version: String::new(),
            field_path: String::new(),
        }
    }
}

/// The workloads the controller manages, shared with the handle.
#[derive(Clone, Default)]
pub struct Workloads {
    list: Arc<Mutex<Vec<Workload>>>,
    notify: Arc<Notify>,
}

impl Workloads {
    /// Registers a workload (a second one with the same namespace/name is ignored).
    pub fn add(&self, spec: WorkloadSpec) {
        let mut list = self.list.lock().unwrap_or_else(|p| p.into_inner());
        if list
            .iter()
            .any(|w| w.spec.namespace == spec.namespace && w.spec.name == spec.name)
        {
            tracing::warn!("workload {}/{} already added", spec.namespace, spec.name);
            return;
        }
        list.push(Workload {
            spec,
            uid: uuid::Uuid::new_v4().to_string(),
            revision: random_hex(10),
        });
        drop(list);
        self.notify.notify_one();
    }

    fn snapshot(&self) -> Vec<Workload> {
        self.list.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Runs the controller until shutdown.
pub async fn run(mut ctx: Ctx, workloads: Workloads) {
    let mut wake = Wake::new(&ctx.store, &[PODS, PERSISTENT_VOLUME_CLAIMS]);
    let mut terminal_seen: HashMap<String, Instant> = HashMap::new();
    loop {
        let mut next = WORKLOAD_RESYNC;
        let mut seen = HashMap::new();
        for w in workloads.snapshot() {
            if let Some(again) = sync(&ctx, &w, &terminal_seen, &mut seen) {
                next = next.min(again);
            }
        }
        terminal_seen = seen;
        let notify = workloads.notify.clone();
        let go_on = tokio::select! {
            go_on = ctx.pause(Some(&mut wake), next) => go_on,
            _ = notify.notified() => true,
        };
        if !go_on {
            return;
        }
    }
}

/// One pass over a workload; returns when to come back sooner than the resync.
/// `terminal_seen`: when each Failed/Succeeded pod was first seen (the controller
/// reacts to it through its informer and workqueue, not within the microseconds
/// PodGC takes between marking a pod Failed and deleting it).
fn sync(
    ctx: &Ctx,
    w: &Workload,
    terminal_seen: &HashMap<String, Instant>,
    seen: &mut HashMap<String, Instant>,
) -> Option<Duration> {
    let ns = w.spec.namespace.as_str();
    ctx.ensure_namespace(ns);
    let src = Source::controller(COMPONENT);
    for i in 0..w.spec.replicas {
        let pod_name = w.spec.pod_name(i);
        if !ensure_claim(ctx, w, i) {
            return None;
        }
        let Some(pod) = ctx.get(PODS, Some(ns), &pod_name) else {
            let at = nodefence_clock::now();
            match ctx.store.create(PODS, Some(ns), pod_object(ctx, w, i)) {
                Ok(p) => {
                    let msg = format!(
                        "create Pod {pod_name} in StatefulSet {} successful",
                        w.spec.name
                    );
                    ctx.event(
                        &w.owner(),
                        &src,
                        EventType::Normal,
                        "SuccessfulCreate",
                        &msg,
                    );
                    ctx.record_at(
                        at,
                        SimEventKind::PodCreated,
                        None,
                        Some(&objects::key(&p)),
                        format!("StatefulSet {} created pod {pod_name}", w.spec.name),
                    );
                }
                Err(StoreError::AlreadyExists { .. }) => {}
                Err(e) => tracing::warn!("creating pod {ns}/{pod_name}: {e}"),
            }
            return None;
        };
        if objects::is_terminating(&pod) {
            // "StatefulSet is waiting for Pod to Terminate".
            return None;
        }
        if objects::is_terminal(&pod) {
            let uid = objects::uid(&pod).to_string();
            let first = terminal_seen
                .get(&uid)
                .copied()
                .unwrap_or_else(Instant::now);
            seen.insert(uid.clone(), first);
            let waited = ctx.clock.since(first);
            if waited < TERMINAL_POD_REACTION {
                return Some(TERMINAL_POD_REACTION - waited);
            }
            let opts = DeleteOptions {
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteOptions::default()
            };
            if let Ok(Some(_)) = ctx.delete(PODS, Some(ns), &pod_name, &opts) {
                let msg = format!(
                    "delete Pod {pod_name} in StatefulSet {} successful",
                    w.spec.name
                );
                ctx.event(
                    &w.owner(),
                    &src,
                    EventType::Normal,
                    "SuccessfulDelete",
                    &msg,
                );
                ctx.record(
                    SimEventKind::PodDeleted,
                    objects::pod_node(&pod),
                    Some(&objects::key(&pod)),
                    format!(
                        "StatefulSet {} deleted its {} pod",
                        w.spec.name,
                        objects::phase(&pod)
                    ),
                );
            }
            return None;
        }
        if !objects::pod_running_ready(&pod) {
            return None;
        }
    }
    None
}

/// Makes sure claim `i` exists and is bound; `false` if it could not be.
fn ensure_claim(ctx: &Ctx, w: &Workload, i: u32) -> bool {
    let ns = w.spec.namespace.as_str();
    let claim = w.spec.claim_name(i);
    let pvc = match ctx.get(PERSISTENT_VOLUME_CLAIMS, Some(ns), &claim) {
        Some(p) => p,
        None => {
            let body = json!({
                "metadata": {"name": claim, "namespace": ns, "labels": {"app": w.spec.name}},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": w.spec.storage}},
                    "storageClassName": w.spec.storage_class,
                    "volumeMode": "Filesystem",
                },
                "status": {"phase": "Pending"},
            });
            match ctx.store.create(PERSISTENT_VOLUME_CLAIMS, Some(ns), body) {
                Ok(p) => {
                    let msg = format!(
                        "create Claim {claim} Pod {} in StatefulSet {} success",
                        w.spec.pod_name(i),
                        w.spec.name
                    );
                    ctx.event(
                        &w.owner(),
                        &Source::controller(COMPONENT),
                        EventType::Normal,
                        "SuccessfulCreate",
                        &msg,
                    );
                    p
                }
                Err(e) => {
                    tracing::warn!("creating claim {ns}/{claim}: {e}");
                    return false;
                }
            }
        }
    };
    if objects::str_at(&pvc, "/spec/volumeName").is_some_and(|v| !v.is_empty()) {
        return true;
    }
    provision(ctx, w, &pvc)
}

/// The external-provisioner: a PV `pvc-<claim uid>` bound to the claim.
fn provision(ctx: &Ctx, w: &Workload, pvc: &Value) -> bool {
    let ns = objects::namespace(pvc).to_string();
    let claim = objects::name(pvc).to_string();
    let claim_uid = objects::uid(pvc).to_string();
    let pv_name = format!("pvc-{claim_uid}");
    let driver = w.spec.driver.as_str();
    let size = objects::str_at(pvc, "/spec/resources/requests/storage")
        .unwrap_or(&w.spec.storage)
        .to_string();
    let source = Source::controller(&format!(
        "{driver}_csi-provisioner_{}",
        &w.uid[..8.min(w.uid.len())]
    ));
    let about = ObjectRef::to(pvc);
    let msg = format!("External provisioner is provisioning volume for claim \"{ns}/{claim}\"");
    ctx.event(&about, &source, EventType::Normal, "Provisioning", &msg);
    let pv = json!({
        "metadata": {
            "name": pv_name,
            "annotations": {
                "pv.kubernetes.io/provisioned-by": driver,
                "volume.kubernetes.io/provisioner-deletion-secret-name": "",
                "volume.kubernetes.io/provisioner-deletion-secret-namespace": "",
            },
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "capacity": {"storage": size},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "name": claim, "namespace": ns, "uid": claim_uid},
            "csi": {"driver": driver, "volumeHandle": format!("vol-{claim_uid}"), "fsType": "ext4",
                "volumeAttributes": {"storage.kubernetes.io/csiProvisionerIdentity": format!("{}-{driver}", now_rfc3339())}},
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": w.spec.storage_class,
            "volumeMode": "Filesystem",
        },
        "status": {"phase": "Bound"},
    });
    match ctx.store.create(PERSISTENT_VOLUMES, None, pv) {
        Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
        Err(e) => {
            tracing::warn!("provisioning {pv_name}: {e}");
            return false;
        }
    }
    let bound = ctx
        .store
        .modify(PERSISTENT_VOLUME_CLAIMS, Some(&ns), &claim, |c| {
            let ann = objects::obj_mut(c, &["metadata", "annotations"]);
            ann.insert("pv.kubernetes.io/bind-completed".into(), json!("yes"));
            ann.insert("pv.kubernetes.io/bound-by-controller".into(), json!("yes"));
            ann.insert(
                "volume.beta.kubernetes.io/storage-provisioner".into(),
                json!(driver),
            );
            ann.insert(
                "volume.kubernetes.io/storage-provisioner".into(),
                json!(driver),
            );
            objects::obj_mut(c, &["spec"]).insert("volumeName".into(), json!(pv_name));
            let status = objects::obj_mut(c, &["status"]);
            status.insert("phase".into(), json!("Bound"));
            status.insert("accessModes".into(), json!(["ReadWriteOnce"]));
            status.insert("capacity".into(), json!({"storage": size}));
            Ok(())
        });
    if bound.is_err() {
        return false;
    }
    let msg = format!("Successfully provisioned volume {pv_name}");
    ctx.event(
        &about,
        &source,
        EventType::Normal,
        "ProvisioningSucceeded",
        &msg,
    );
    true
}

/// Replica `i` as the StatefulSet controller creates it (after admission: default
/// tolerations added).
fn pod_object(ctx: &Ctx, w: &Workload, i: u32) -> Value {
    let s = &w.spec;
    let name = s.pod_name(i);
    let mut pod = json!({
        "metadata": {
            "name": name,
            "namespace": s.namespace,
            "generateName": format!("{}-", s.name),
            "labels": {
                "app": s.name,
                "apps.kubernetes.io/pod-index": i.to_string(),
                "controller-revision-hash": format!("{}-{}", s.name, w.revision),
                "statefulset.kubernetes.io/pod-name": name,
            },
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": s.name,
                "uid": w.uid, "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "containers": [{
                "name": s.name, "image": s.image, "imagePullPolicy": "IfNotPresent",
                "resources": {}, "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": true,
            "hostname": name,
            "subdomain": s.name,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "serviceAccount": "default",
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": s.grace_seconds,
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": s.claim_name(i)}}],
        },
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    });
    if let Some(tols) = &s.tolerations {
        pod["spec"]["tolerations"] = json!(tols);
    }
    if !s.node_selector.is_empty() {
        pod["spec"]["nodeSelector"] = json!(s.node_selector);
    }
    add_default_tolerations(&mut pod, ctx.config.default_toleration_seconds);
    pod
}
