//! The attach/detach controller's operations, split from its reconciler
//! ([`attach_detach`]): what the operation executor and the in-tree CSI attacher do.
//!
//! - Attach: create the VolumeAttachment `csi-<sha256>` and wait for the
//!   external-attacher's `status.attached`; success marks the volume attached
//!   (mounted assumed until the kubelet says otherwise), lists it in
//!   `node.status.volumesAttached` and records `SuccessfulAttachVolume` on the pods;
//!   no answer within 2 minutes records `FailedAttachVolume`, leaves the attachment
//!   "uncertain" and backs off exponentially.
//! - Detach: delete the VolumeAttachment (its finalizer keeps it until the
//!   external-attacher unpublished) and wait until it is gone.
//! - Node status updater: `status.volumesAttached` of the nodes it touched.
//! - Periodic sync (`VerifyVolumesAreAttached`): an attachment whose
//!   VolumeAttachment disappeared (deleted by someone else) is marked detached.
//!
//! [`attach_detach`]: super::attach_detach

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

use super::super::deletion::DeleteOptions;
use super::super::resources::{NODES, VOLUME_ATTACHMENTS};
use super::super::store::StoreError;
use super::attach_detach::{Adc, Attached, Op, OpKind, VolNode, Wanted};
use super::config::{ATTACH_BACKOFF_INITIAL, ATTACH_BACKOFF_MAX, CSI_ATTACH_TIMEOUT};
use super::events::EventType;
use super::names::va_name;
use super::objects::At;
use super::objects::{self, str_at};
use super::timeline::SimEventKind;
use super::volumes::CsiVolume;

impl Adc {
    /// Moves attach and detach operations along.
    pub(super) fn drive_ops(&mut self, dsw: &BTreeMap<VolNode, Wanted>) {
        let ops: Vec<(VolNode, Op)> = self
            .ops
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (vn, op) in ops {
            let name = va_name(&op.vol.handle, &op.vol.driver, &vn.1);
            let va = self.ctx.get(VOLUME_ATTACHMENTS, None, &name);
            let pods = dsw.get(&vn).map(|w| w.pods.as_slice()).unwrap_or_default();
            match op.kind {
                OpKind::Attach => {
                    let attached = va.as_ref().is_some_and(|v| {
                        v.at("/status/attached") == Some(&json!(true))
                            && !objects::is_terminating(v)
                    });
                    if va.is_none() {
                        self.create_va(&name, &op.vol, &vn.1);
                    } else if attached {
                        self.ops.remove(&vn);
                        self.backoff.remove(&vn);
                        self.status_nodes.insert(vn.1.clone());
                        self.asw.insert(
                            vn.clone(),
                            Attached {
                                vol: op.vol.clone(),
                                confirmed: true,
                                mounted: true,
                                detach_requested: None,
                                report: true,
                            },
                        );
                        let msg =
                            format!("AttachVolume.Attach succeeded for volume \"{}\"", op.vol.pv);
                        self.pods_event(pods, EventType::Normal, "SuccessfulAttachVolume", &msg);
                        self.ctx.record(
                            SimEventKind::VolumeAttached,
                            Some(&vn.1),
                            pods.first().map(objects::key).as_deref(),
                            format!("volume {} attached to {}", op.vol.pv, vn.1),
                        );
                    } else if self.ctx.clock.since(op.started) > CSI_ATTACH_TIMEOUT {
                        self.ops.remove(&vn);
                        let delay = self
                            .backoff
                            .get(&vn)
                            .map_or(ATTACH_BACKOFF_INITIAL, |(_, d)| {
                                (*d * 2).min(ATTACH_BACKOFF_MAX)
                            });
                        self.backoff
                            .insert(vn.clone(), (self.ctx.clock.after(delay), delay));
                        self.asw.entry(vn.clone()).or_insert(Attached {
                            vol: op.vol.clone(),
                            confirmed: false,
                            mounted: true,
                            detach_requested: None,
                            report: false,
                        });
                        let msg = format!(
                            "AttachVolume.Attach failed for volume \"{}\" : timed out waiting for external-attacher of {} CSI driver to attach volume {}",
                            op.vol.pv, op.vol.driver, op.vol.handle
                        );
                        self.pods_event(pods, EventType::Warning, "FailedAttachVolume", &msg);
                        self.ctx
                            .record(SimEventKind::AttachFailed, Some(&vn.1), None, msg);
                    }
                }
                OpKind::Detach { forced } => match va {
                    None => {
                        self.ops.remove(&vn);
                        self.asw.remove(&vn);
                        let how = forced.map_or("kubelet unmounted it".to_string(), |why| {
                            format!("forced: {why}")
                        });
                        self.ctx.record(
                            SimEventKind::VolumeDetached,
                            Some(&vn.1),
                            None,
                            format!("volume {} detached from {} ({how})", op.vol.pv, vn.1),
                        );
                    }
                    Some(v) if !objects::is_terminating(&v) => {
                        if let Err(e) = self.ctx.delete(
                            VOLUME_ATTACHMENTS,
                            None,
                            &name,
                            &DeleteOptions::default(),
                        ) {
                            tracing::debug!("deleting {name}: {e}");
                        }
                    }
                    Some(_) => {}
                },
            }
        }
    }

    pub(super) fn create_va(&self, name: &str, vol: &CsiVolume, node: &str) {
        let va = json!({
            "metadata": {"name": name},
            "spec": {
                "attacher": vol.driver,
                "nodeName": node,
                "source": {"persistentVolumeName": vol.pv},
            },
            "status": {"attached": false},
        });
        match self.ctx.store.create(VOLUME_ATTACHMENTS, None, va) {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => tracing::warn!("creating VolumeAttachment {name}: {e}"),
        }
    }

    /// The node status updater: `status.volumesAttached` of one node.
    pub(super) fn update_node_status(&mut self, node: &str) {
        let want: Vec<Value> = self
            .asw
            .iter()
            .filter(|((_, n), a)| n == node && a.confirmed && a.report)
            .map(|((u, _), _)| json!({"name": u, "devicePath": ""}))
            .collect();
        let result = self.ctx.store.modify(NODES, None, node, |n| {
            if want.is_empty() {
                objects::remove_at(n, &["status"], "volumesAttached");
            } else {
                objects::obj_mut(n, &["status"]).insert("volumesAttached".into(), json!(want));
            }
            Ok(())
        });
        match result {
            // A deleted Node has no status to update; that does not block a detach.
            Ok(_) | Err(StoreError::NotFound { .. }) => {}
            Err(e) => tracing::debug!("volumesAttached of {node}: {e}"),
        }
    }

    pub(super) fn update_node_statuses(&mut self, nodes: &HashMap<String, &Value>) {
        let touched: Vec<String> = self.status_nodes.iter().cloned().collect();
        for node in touched {
            let Some(n) = nodes.get(&node) else {
                continue;
            };
            let have: Vec<&str> = n
                .at("/status/volumesAttached")
                .and_then(Value::as_array)
                .map(|l| l.iter().filter_map(|v| str_at(v, "/name")).collect())
                .unwrap_or_default();
            let want: Vec<&str> = self
                .asw
                .iter()
                .filter(|((_, nn), a)| *nn == node && a.confirmed && a.report)
                .map(|((u, _), _)| u.as_str())
                .collect();
            if have != want {
                self.update_node_status(&node);
            }
        }
        self.status_nodes
            .retain(|n| nodes.contains_key(n) || self.asw.keys().any(|(_, an)| an == n));
    }

    /// `VerifyVolumesAreAttached`: a volume whose VolumeAttachment is gone (or not
    /// attached) is marked detached.
    pub(super) fn sync_states(&mut self) {
        let keys: Vec<VolNode> = self.asw.keys().cloned().collect();
        for vn in keys {
            if self.ops.contains_key(&vn) {
                continue;
            }
            let Some(a) = self.asw.get(&vn) else { continue };
            if !a.confirmed {
                continue;
            }
            let name = va_name(&a.vol.handle, &a.vol.driver, &vn.1);
            let attached = self
                .ctx
                .get(VOLUME_ATTACHMENTS, None, &name)
                .is_some_and(|v| v.at("/status/attached") == Some(&json!(true)));
            if !attached {
                let pv = a.vol.pv.clone();
                self.asw.remove(&vn);
                self.ctx.record(
                    SimEventKind::VolumeDetached,
                    Some(&vn.1),
                    None,
                    format!(
                        "volume {pv} marked detached from {}: VolumeAttachment {name} no longer attached (periodic sync)",
                        vn.1
                    ),
                );
            }
        }
    }
}
