//! The attach/detach controller (kube-controller-manager), ported from
//! `pkg/controller/volume/attachdetach` for CSI volumes. It is the component that
//! keeps a dead node's ReadWriteOnce volume from moving.
//!
//! Desired state: for every pod bound to a managed node (annotation
//! `volumes.kubernetes.io/controller-managed-attach-detach`) and not terminated
//! (`IsPodTerminated`: a pod being deleted whose containers still show running, as
//! on a dead node, is *not*), its CSI volumes on that node. A deleted Node stays in
//! the desired state while pods there still want volumes. Actual state: what this
//! controller attached (rebuilt from VolumeAttachments at start), each with
//! `mountedByNode` from the node's last `status.volumesInUse` ("assume mounted" until
//! the kubelet says otherwise; a deleted Node keeps its last answer).
//!
//! Every 100ms, detaches first: an attached volume no longer desired is detached only
//! if the node stopped reporting it in use, or the node has the
//! `node.kubernetes.io/out-of-service` taint, or (when `force_detach_after` is set)
//! that much time passed since the detach was first wanted and the node is not Ready
//! (a deleted Node counts as not Ready). The real default is force detach after 6
//! minutes (`--disable-force-detach-on-timeout=false`); the simulation defaults to
//! `None` so the dead node's volume stays stuck as in the seed documents until
//! nodefence acts. Deleting the Node alone does not make a detach safe (exactly as
//! seed 001's logs show); deleting its VolumeAttachment does, once the periodic sync
//! (`attach_detach_sync_period`, 1m) notices it is gone.
//!
//! Then attaches: a ReadWriteOnce volume attached (confirmed) to another node is not
//! attached; the pods get one `FailedAttachVolume` Warning each, `Multi-Attach error
//! for volume "<pv>" Volume is already used by pod(s) ...` or `... Volume is already
//! exclusively attached to one node and can't be attached to another`, and the
//! attach is retried every loop silently. An attach creates the VolumeAttachment
//! `csi-<sha256>` and waits (2 min) for the external-attacher to set
//! `status.attached`; success records `SuccessfulAttachVolume` and lists the volume
//! in `node.status.volumesAttached`, which the kubelet waits for. A detach removes
//! it from `volumesAttached` first, then deletes the VolumeAttachment and waits for it
//! to be gone.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::super::resources::{
    NODES, PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, PODS, VOLUME_ATTACHMENTS,
};
use super::clock::Wake;
use super::config::ADC_LOOP_PERIOD;
use super::context::Ctx;
use super::events::{EventType, ObjectRef, Source};
use super::names::{unique_volume_name, va_name};
use super::objects::At;
use super::objects::{self, str_at};
use super::taints::{self, OUT_OF_SERVICE};
use super::timeline::SimEventKind;
use super::volumes::{CsiVolume, VolumeIndex};

pub(super) const COMPONENT: &str = "attachdetach-controller";
const MANAGED: &str = "volumes.kubernetes.io/controller-managed-attach-detach";

/// `(unique volume name, node)`.
pub(super) type VolNode = (String, String);

/// One attached (or uncertain) volume on one node.
#[derive(Debug, Clone)]
pub(super) struct Attached {
    pub(super) vol: CsiVolume,
    pub(super) confirmed: bool,
    pub(super) mounted: bool,
    pub(super) detach_requested: Option<Instant>,
    pub(super) report: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum OpKind {
    Attach,
    Detach { forced: Option<&'static str> },
}

#[derive(Debug, Clone)]
pub(super) struct Op {
    pub(super) kind: OpKind,
    pub(super) vol: CsiVolume,
    pub(super) started: Instant,
}

/// Pods wanting a volume on a node.
pub(super) struct Wanted {
    pub(super) vol: CsiVolume,
    pub(super) pods: Vec<Value>,
}

pub(super) struct Adc {
    pub(super) ctx: Ctx,
    pub(super) asw: BTreeMap<VolNode, Attached>,
    pub(super) ops: BTreeMap<VolNode, Op>,
    pub(super) backoff: HashMap<VolNode, (Instant, Duration)>,
    pub(super) reported: HashSet<VolNode>,
    pub(super) dsw_nodes: BTreeSet<String>,
    pub(super) status_nodes: BTreeSet<String>,
    pub(super) last_sync: Instant,
}

/// Runs the controller until shutdown.
pub async fn run(mut ctx: Ctx) {
    let kinds = [
        PODS,
        NODES,
        VOLUME_ATTACHMENTS,
        PERSISTENT_VOLUME_CLAIMS,
        PERSISTENT_VOLUMES,
    ];
    let mut wake = Wake::new(&ctx.store, &kinds);
    let mut adc = Adc {
        ctx: ctx.clone(),
        asw: BTreeMap::new(),
        ops: BTreeMap::new(),
        backoff: HashMap::new(),
        reported: HashSet::new(),
        dsw_nodes: BTreeSet::new(),
        status_nodes: BTreeSet::new(),
        last_sync: Instant::now(),
    };
    adc.populate();
    loop {
        adc.reconcile();
        if !ctx.pause(Some(&mut wake), ADC_LOOP_PERIOD).await {
            return;
        }
    }
}

fn volumes_in_use(node: &Value) -> HashSet<String> {
    node.at("/status/volumesInUse")
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

impl Adc {
    /// `populateActualStateOfWorld`: volumes already attached when it starts.
    fn populate(&mut self) {
        let node_list = self.ctx.list(NODES);
        let nodes = Self::nodes(&node_list);
        for va in self.ctx.list(VOLUME_ATTACHMENTS).iter() {
            if va.at("/status/attached") != Some(&json!(true)) || objects::is_terminating(va) {
                continue;
            }
            let (Some(node), Some(pv)) = (
                str_at(va, "/spec/nodeName"),
                str_at(va, "/spec/source/persistentVolumeName"),
            ) else {
                continue;
            };
            let Some(pv_obj) = self.ctx.get(PERSISTENT_VOLUMES, None, pv) else {
                continue;
            };
            let (Some(driver), Some(handle)) = (
                str_at(&pv_obj, "/spec/csi/driver"),
                str_at(&pv_obj, "/spec/csi/volumeHandle"),
            ) else {
                continue;
            };
            let vol = CsiVolume {
                pv: pv.to_string(),
                driver: driver.to_string(),
                handle: handle.to_string(),
                unique: unique_volume_name(driver, handle),
                multi_attach: false,
            };
            let mounted = nodes
                .get(node)
                .is_none_or(|n| volumes_in_use(n).contains(&vol.unique));
            self.status_nodes.insert(node.to_string());
            self.asw.insert(
                (vol.unique.clone(), node.to_string()),
                Attached {
                    vol,
                    confirmed: true,
                    mounted,
                    detach_requested: None,
                    report: true,
                },
            );
        }
    }

    fn nodes(list: &[Value]) -> HashMap<String, &Value> {
        list.iter()
            .map(|n| (objects::name(n).to_string(), n))
            .collect()
    }

    fn reconcile(&mut self) {
        let node_list = self.ctx.list(NODES);
        let nodes = Self::nodes(&node_list);
        let dsw = self.desired(&nodes);
        self.drive_ops(&dsw);
        for ((unique, node), a) in self.asw.iter_mut() {
            if let Some(n) = nodes.get(node) {
                a.mounted = volumes_in_use(n).contains(unique);
            }
        }
        self.detach_unwanted(&dsw, &nodes);
        self.attach_wanted(&dsw);
        self.reported.retain(|vn| dsw.contains_key(vn));
        self.update_node_statuses(&nodes);
        if self.ctx.clock.since(self.last_sync) > self.ctx.config.attach_detach_sync_period {
            self.last_sync = Instant::now();
            self.sync_states();
        }
    }

    /// The desired state of the world.
    fn desired(&mut self, nodes: &HashMap<String, &Value>) -> BTreeMap<VolNode, Wanted> {
        let managed: BTreeSet<String> = nodes
            .iter()
            .filter(|(_, n)| objects::annotation(n, MANAGED) == Some("true"))
            .map(|(name, _)| name.clone())
            .collect();
        let index = VolumeIndex::load(&self.ctx.store);
        let mut dsw: BTreeMap<VolNode, Wanted> = BTreeMap::new();
        for pod in self.ctx.list(PODS).iter() {
            let Some(node) = objects::pod_node(pod) else {
                continue;
            };
            if !(managed.contains(node) || self.dsw_nodes.contains(node))
                || objects::is_pod_terminated(pod)
            {
                continue;
            }
            for (_, _, vol) in index.pod_volumes(pod) {
                let Some(vol) = vol else { continue };
                dsw.entry((vol.unique.clone(), node.to_string()))
                    .or_insert_with(|| Wanted {
                        vol,
                        pods: Vec::new(),
                    })
                    .pods
                    .push(pod.clone());
            }
        }
        let mut dsw_nodes = managed;
        dsw_nodes.extend(dsw.keys().map(|(_, n)| n.clone()));
        self.dsw_nodes = dsw_nodes;
        dsw
    }

    fn pending(&self, vn: &VolNode, multi_attach: bool) -> bool {
        if multi_attach {
            self.ops.contains_key(vn)
        } else {
            self.ops.keys().any(|(u, _)| *u == vn.0)
        }
    }

    pub(super) fn pods_event(&self, pods: &[Value], kind: EventType, reason: &str, message: &str) {
        for pod in pods {
            self.ctx.event(
                &ObjectRef::to(pod),
                &Source::controller(COMPONENT),
                kind,
                reason,
                message,
            );
        }
    }

    /// The detach half of the reconciler.
    fn detach_unwanted(
        &mut self,
        dsw: &BTreeMap<VolNode, Wanted>,
        nodes: &HashMap<String, &Value>,
    ) {
        let keys: Vec<VolNode> = self.asw.keys().cloned().collect();
        for vn in keys {
            if dsw.contains_key(&vn) {
                continue;
            }
            let Some(a) = self.asw.get(&vn).cloned() else {
                continue;
            };
            if self.pending(&vn, a.vol.multi_attach) {
                continue;
            }
            let requested = *self
                .asw
                .get_mut(&vn)
                .map(|a| a.detach_requested.get_or_insert_with(Instant::now))
                .unwrap_or(&mut Instant::now());
            let elapsed = self.ctx.clock.since(requested);
            let node = nodes.get(&vn.1);
            let healthy = node.is_some_and(|n| objects::node_ready(n));
            let timeout = self
                .ctx
                .config
                .force_detach_after
                .is_some_and(|d| elapsed > d);
            let force = !healthy && timeout;
            let out_of_service = node.is_some_and(|n| taints::has_key(n, OUT_OF_SERVICE));
            if a.mounted && !force && !out_of_service {
                continue;
            }
            let forced = if out_of_service && a.mounted {
                Some("node has the node.kubernetes.io/out-of-service taint")
            } else if force && a.mounted {
                Some(
                    "not safe to detach, but maxWaitForUnmountDuration expired on an unhealthy node",
                )
            } else {
                None
            };
            if let Some(a) = self.asw.get_mut(&vn) {
                a.report = false;
            }
            self.update_node_status(&vn.1);
            self.ops.insert(
                vn.clone(),
                Op {
                    kind: OpKind::Detach { forced },
                    vol: a.vol.clone(),
                    started: Instant::now(),
                },
            );
        }
    }

    /// The attach half of the reconciler.
    fn attach_wanted(&mut self, dsw: &BTreeMap<VolNode, Wanted>) {
        for (vn, wanted) in dsw {
            if let Some(a) = self.asw.get_mut(vn)
                && a.confirmed
            {
                a.detach_requested = None;
                continue;
            }
            if self.pending(vn, wanted.vol.multi_attach) {
                continue;
            }
            if self
                .backoff
                .get(vn)
                .is_some_and(|(at, _)| Instant::now() < *at)
            {
                continue;
            }
            if !wanted.vol.multi_attach {
                let elsewhere: Vec<String> = self
                    .asw
                    .iter()
                    .filter(|((u, n), a)| *u == vn.0 && *n != vn.1 && a.confirmed)
                    .map(|((_, n), _)| n.clone())
                    .collect();
                if !elsewhere.is_empty() {
                    if self.reported.insert(vn.clone()) {
                        self.report_multi_attach(vn, wanted, &elsewhere, dsw);
                    }
                    continue;
                }
            }
            let name = va_name(&wanted.vol.handle, &wanted.vol.driver, &vn.1);
            self.create_va(&name, &wanted.vol, &vn.1);
            self.ops.insert(
                vn.clone(),
                Op {
                    kind: OpKind::Attach,
                    vol: wanted.vol.clone(),
                    started: Instant::now(),
                },
            );
            self.ctx.record(
                SimEventKind::VolumeAttaching,
                Some(&vn.1),
                wanted.pods.first().map(objects::key).as_deref(),
                format!(
                    "VolumeAttachment {name} created for volume {}",
                    wanted.vol.pv
                ),
            );
        }
    }

    /// `reportMultiAttachError`.
    fn report_multi_attach(
        &self,
        vn: &VolNode,
        wanted: &Wanted,
        elsewhere: &[String],
        dsw: &BTreeMap<VolNode, Wanted>,
    ) {
        let users: Vec<&Value> = elsewhere
            .iter()
            .filter_map(|n| dsw.get(&(vn.0.clone(), n.clone())))
            .flat_map(|w| w.pods.iter())
            .collect();
        for pod in &wanted.pods {
            let detail = if users.is_empty() {
                "Volume is already exclusively attached to one node and can't be attached to another"
                    .to_string()
            } else {
                let ns = objects::namespace(pod);
                let local: Vec<&str> = users
                    .iter()
                    .filter(|u| objects::namespace(u) == ns)
                    .map(|u| objects::name(u))
                    .collect();
                let others = users.len() - local.len();
                match (local.is_empty(), others) {
                    (false, 0) => format!("Volume is already used by pod(s) {}", local.join(", ")),
                    (false, n) => format!(
                        "Volume is already used by pod(s) {} and {n} pod(s) in different namespaces",
                        local.join(", ")
                    ),
                    (true, n) => {
                        format!("Volume is already used by {n} pod(s) in different namespaces")
                    }
                }
            };
            let msg = format!(
                "Multi-Attach error for volume \"{}\" {detail}",
                wanted.vol.pv
            );
            self.pods_event(
                std::slice::from_ref(pod),
                EventType::Warning,
                "FailedAttachVolume",
                &msg,
            );
            self.ctx.record(
                SimEventKind::MultiAttachError,
                Some(&vn.1),
                Some(&objects::key(pod)),
                format!("{msg} (attached to {})", elsewhere.join(", ")),
            );
        }
    }
}
