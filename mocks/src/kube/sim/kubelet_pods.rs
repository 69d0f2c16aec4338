//! The kubelet's pod work: what makes a pod on a live node Running, and what only a
//! live kubelet can finish (a graceful deletion).
//!
//! - A pod bound to this node waits (Pending, `ContainerCreating`) until each of its
//!   CSI volumes is in `node.status.volumesAttached` (the attach/detach controller's
//!   word), its VolumeAttachment reports `attached: true`, and the kubelet's own last
//!   node status listed it in `volumesInUse` (so the attach/detach controller knows
//!   it may be mounted before it is: the guard that keeps a dead node's volume
//!   attached); then the kubelet mounts
//!   them, starts the containers and reports Running/Ready. After 2m3s without that
//!   it records `FailedMount` ("Unable to attach or mount volumes"), and keeps waiting.
//! - Volumes of every pod it runs or prepares are in `volumesInUse`; a volume leaves
//!   it only once unmounted, after the last pod using it on this node is gone.
//! - A pod with a `deletionTimestamp` gets its containers stopped (`Killing`), a
//!   terminal status, its volumes unmounted, and then the kubelet's own zero-grace,
//!   UID-preconditioned delete removes it. Only a running kubelet does this: on a
//!   dead node the pod stays Terminating.
//! - After a reboot, pods still bound here start again (`SandboxChanged`, restart
//!   count up); Terminating ones are finished at once (their containers died with
//!   the machine).

use std::collections::HashSet;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::super::deletion::{DeleteOptions, Preconditions};
use super::super::resources::{PODS, VOLUME_ATTACHMENTS};
use super::super::store::{StoreError, now_rfc3339};
use super::config::{CONTAINER_START, CONTAINER_STOP, MOUNT_TIMEOUT};
use super::events::{EventType, ObjectRef, Source};
use super::kubelet::Kubelet;
use super::names::{random_hex, va_name};
use super::objects;
use super::objects::At;
use super::pod_status::{Report, apply_pod_status};
use super::timeline::SimEventKind;
use super::volumes::VolumeIndex;

/// Where a pod is in the kubelet's hands.
#[derive(Debug, Clone, PartialEq)]
pub enum Stage {
    /// Waiting for its volumes to be attached.
    Waiting {
        since: Instant,
        last_warning: Option<Instant>,
    },
    /// Volumes mounted; containers starting.
    Starting {
        at: Instant,
    },
    Running,
    /// Being deleted: containers stopping until `at`.
    Stopping {
        at: Instant,
    },
}

/// The kubelet's record of one pod.
#[derive(Debug, Clone)]
pub struct PodWork {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Unique names of its CSI volumes.
    pub volumes: Vec<String>,
    pub stage: Stage,
    pub restarts: i64,
    pub ip: String,
    pub container_id: String,
    pub started_at: String,
    pub ran: bool,
}

impl Kubelet {
    /// Works on every pod bound to this node.
    pub(super) fn sync_pods(&mut self, node: Option<&Value>) {
        let me = self.name().to_string();
        let pods: Vec<Value> = self
            .ctx
            .list(PODS)
            .iter()
            .filter(|p| objects::pod_node(p) == Some(me.as_str()))
            .cloned()
            .collect();
        let live: HashSet<String> = pods.iter().map(|p| objects::uid(p).to_string()).collect();
        let gone: Vec<String> = self
            .pods
            .keys()
            .filter(|u| !live.contains(*u))
            .cloned()
            .collect();
        for uid in gone {
            // Deleted behind the kubelet's back (force delete): kill and clean up.
            if let Some(work) = self.pods.remove(&uid) {
                self.unmount_unused(&work);
            }
        }
        let index = VolumeIndex::load(&self.ctx.store);
        let attached: HashSet<String> = node
            .and_then(|n| n.at("/status/volumesAttached"))
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter_map(|v| v.get("name").and_then(Value::as_str))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        for pod in &pods {
            self.sync_pod(pod, &index, &attached);
        }
    }

    fn sync_pod(&mut self, pod: &Value, index: &VolumeIndex, attached: &HashSet<String>) {
        let uid = objects::uid(pod).to_string();
        if uid.is_empty() {
            return;
        }
        let mut work = match self.pods.remove(&uid) {
            Some(w) => w,
            None => {
                if objects::is_terminal(pod) && !objects::is_terminating(pod) {
                    return;
                }
                self.admit(pod, uid.clone())
            }
        };
        let vols = index.pod_volumes(pod);
        work.volumes = vols
            .iter()
            .filter_map(|(_, _, v)| v.as_ref().map(|v| v.unique.clone()))
            .collect();
        let keep = self.advance(pod, &mut work, &vols, attached);
        if keep {
            self.pods.insert(uid, work);
        }
    }

    /// A pod seen for the first time since this kubelet started.
    fn admit(&mut self, pod: &Value, uid: String) -> PodWork {
        let ran_before = pod
            .at("/status/containerStatuses")
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(|c| c.get("containerID").is_some()));
        let restarts = pod
            .at("/status/containerStatuses/0/restartCount")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            + i64::from(ran_before);
        let ip = format!("10.244.{}.{}", self.machine.index % 250, self.next_pod_ip);
        self.next_pod_ip = if self.next_pod_ip >= 250 {
            2
        } else {
            self.next_pod_ip + 1
        };
        let stage = if objects::is_terminating(pod) {
            Stage::Stopping { at: Instant::now() }
        } else {
            Stage::Waiting {
                since: Instant::now(),
                last_warning: None,
            }
        };
        let work = PodWork {
            namespace: objects::namespace(pod).to_string(),
            name: objects::name(pod).to_string(),
            uid,
            volumes: Vec::new(),
            stage,
            restarts,
            ip,
            container_id: random_hex(64),
            started_at: String::new(),
            ran: false,
        };
        if matches!(work.stage, Stage::Waiting { .. }) {
            if ran_before {
                self.pod_event(
                    pod,
                    None,
                    EventType::Normal,
                    "SandboxChanged",
                    "Pod sandbox changed, it will be killed and re-created.",
                );
            }
            self.write_status(&work, Report::Creating);
        }
        work
    }

    /// Moves a pod along; `false` once it is gone.
    fn advance(
        &mut self,
        pod: &Value,
        work: &mut PodWork,
        vols: &[(String, String, Option<super::volumes::CsiVolume>)],
        attached: &HashSet<String>,
    ) -> bool {
        let me = self.name().to_string();
        let clock = self.ctx.clock;
        let deleting = objects::is_terminating(pod);
        match work.stage.clone() {
            Stage::Waiting {
                since,
                last_warning,
            } => {
                if deleting {
                    work.stage = Stage::Stopping { at: Instant::now() };
                    return self.advance(pod, work, vols, attached);
                }
                let ready = vols.iter().all(|(_, _, v)| {
                    v.as_ref().is_some_and(|v| {
                        self.reported_in_use.contains(&v.unique)
                            && attached.contains(&v.unique)
                            && self.va_attached(&v.handle, &v.driver)
                    })
                });
                if ready {
                    for (_, _, v) in vols.iter() {
                        if let Some(v) = v
                            && self.mounted.insert(v.unique.clone())
                        {
                            self.ctx.record(
                                SimEventKind::VolumeMounted,
                                Some(&me),
                                Some(&objects::key(pod)),
                                format!("volume {} mounted", v.pv),
                            );
                        }
                    }
                    work.stage = Stage::Starting {
                        at: clock.after(CONTAINER_START),
                    };
                } else if clock.since(last_warning.unwrap_or(since)) >= MOUNT_TIMEOUT {
                    let names: Vec<&str> = vols.iter().map(|(n, _, _)| n.as_str()).collect();
                    let list = names.join(" ");
                    let message = format!(
                        "Unable to attach or mount volumes: unmounted volumes=[{list}], unattached volumes=[{list}]: timed out waiting for the condition"
                    );
                    self.pod_event(pod, None, EventType::Warning, "FailedMount", &message);
                    self.ctx.record(
                        SimEventKind::FailedMount,
                        Some(&me),
                        Some(&objects::key(pod)),
                        message,
                    );
                    work.stage = Stage::Waiting {
                        since,
                        last_warning: Some(Instant::now()),
                    };
                }
                true
            }
            Stage::Starting { at } => {
                if deleting {
                    work.stage = Stage::Stopping { at: Instant::now() };
                    return true;
                }
                if Instant::now() >= at {
                    work.started_at = now_rfc3339();
                    work.ran = true;
                    // Recorded first: whoever sees the pod Running finds it here.
                    self.ctx.record(
                        SimEventKind::PodRunning,
                        Some(&me),
                        Some(&objects::key(pod)),
                        format!("pod Running and Ready on {me}"),
                    );
                    self.write_status(work, Report::Running);
                    let image = |c: &str| {
                        pod.at("/spec/containers")
                            .and_then(Value::as_array)
                            .and_then(|cs| {
                                cs.iter()
                                    .find(|x| x.get("name").and_then(Value::as_str) == Some(c))
                            })
                            .and_then(|x| x.get("image"))
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string()
                    };
                    for c in objects::container_names(pod) {
                        let img = image(&c);
                        let msgs = [
                            (
                                "Pulled",
                                format!("Container image \"{img}\" already present on machine"),
                            ),
                            ("Created", format!("Created container: {c}")),
                            ("Started", format!("Started container {c}")),
                        ];
                        for (reason, msg) in msgs {
                            self.pod_event(pod, Some(&c), EventType::Normal, reason, &msg);
                        }
                    }
                    work.stage = Stage::Running;
                }
                true
            }
            Stage::Running => {
                if deleting {
                    for c in objects::container_names(pod) {
                        let msg = format!("Stopping container {c}");
                        self.pod_event(pod, Some(&c), EventType::Normal, "Killing", &msg);
                    }
                    let grace = pod
                        .at("/metadata/deletionGracePeriodSeconds")
                        .and_then(Value::as_u64)
                        .unwrap_or(30);
                    let stop = CONTAINER_STOP.min(std::time::Duration::from_secs(grace));
                    work.stage = Stage::Stopping {
                        at: clock.after(stop),
                    };
                } else if !objects::pod_running_ready(pod) {
                    // Someone (the node lifecycle controller) marked it not ready while
                    // this kubelet could not answer: the status manager puts it back.
                    self.write_status(work, Report::Running);
                }
                true
            }
            Stage::Stopping { at } => {
                if Instant::now() < at {
                    return true;
                }
                if work.ran {
                    self.write_status(work, Report::Terminated);
                }
                self.unmount_unused(work);
                let opts = DeleteOptions {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: Some(work.uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteOptions::default()
                };
                let at = nodefence_clock::now();
                match self
                    .ctx
                    .delete(PODS, Some(&work.namespace), &work.name, &opts)
                {
                    Ok(_) => self.ctx.record_at(
                        at,
                        SimEventKind::PodTerminated,
                        Some(&me),
                        Some(&format!("{}/{}", work.namespace, work.name)),
                        "kubelet confirmed termination: pod object deleted",
                    ),
                    Err(StoreError::Conflict { .. }) => {}
                    Err(e) => tracing::debug!("kubelet {me}: deleting {}: {e}", work.name),
                }
                false
            }
        }
    }

    /// Unmounts the volumes of `work` that no other pod on this node still uses.
    fn unmount_unused(&mut self, work: &PodWork) {
        let me = self.name().to_string();
        let still: HashSet<String> = self
            .pods
            .values()
            .filter(|w| w.uid != work.uid)
            .flat_map(|w| w.volumes.iter().cloned())
            .collect();
        for v in &work.volumes {
            if !still.contains(v) && self.mounted.remove(v) {
                self.ctx.record(
                    SimEventKind::VolumeUnmounted,
                    Some(&me),
                    Some(&format!("{}/{}", work.namespace, work.name)),
                    format!("volume {v} unmounted"),
                );
            }
        }
    }

    /// Whether the VolumeAttachment of a volume to this node reports attached.
    fn va_attached(&self, handle: &str, driver: &str) -> bool {
        let name = va_name(handle, driver, self.name());
        self.ctx
            .get(VOLUME_ATTACHMENTS, None, &name)
            .is_some_and(|va| va.at("/status/attached") == Some(&json!(true)))
    }

    fn pod_event(
        &self,
        pod: &Value,
        container: Option<&str>,
        kind: EventType,
        reason: &str,
        message: &str,
    ) {
        let mut about = ObjectRef::to(pod);
        if let Some(c) = container {
            about = about.field(format!("spec.containers{{{c}}}"));
        }
        self.ctx
            .event(&about, &Source::kubelet(self.name()), kind, reason, message);
    }

    /// Writes the kubelet-owned part of a pod's status (only if the pod is still the
    /// one this record is about).
    fn write_status(&self, work: &PodWork, report: Report) {
        let host_ip = self.machine.ip.clone();
        let result = self
            .ctx
            .store
            .modify(PODS, Some(&work.namespace), &work.name, |p| {
                if objects::uid(p) != work.uid {
                    return Ok(());
                }
                apply_pod_status(p, work, &host_ip, report);
                Ok(())
            });
        if let Err(e) = result {
            tracing::debug!("kubelet: pod status of {}: {e}", work.name);
        }
    }
}
