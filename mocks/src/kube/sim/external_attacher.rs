//! The CSI external-attacher sidecar with a fake driver behind it: it turns
//! VolumeAttachments into (simulated) ControllerPublish/Unpublish calls.
//!
//! - A new VolumeAttachment: the finalizer `external-attacher/<driver>` goes on the
//!   PersistentVolume and on the VolumeAttachment, then after the driver's publish
//!   latency `status.attached: true` and the annotation
//!   `csi.alpha.kubernetes.io/node-id`. A Node that does not exist (no CSINode) gets
//!   `status.attachError` instead and is retried.
//! - A VolumeAttachment being deleted (by the attach/detach controller, or by
//!   nodefence): after the unpublish latency `status.attached: false` and its
//!   finalizer removed, which completes the deletion. The storage backend does not
//!   know whether the node is alive: unpublishing from a dead node succeeds, which is
//!   exactly why the out-of-service taint must only be set on a node proven off.
//! - A PersistentVolume being deleted loses the attacher's finalizer once no
//!   VolumeAttachment refers to it.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::super::resources::{NODES, PERSISTENT_VOLUMES, VOLUME_ATTACHMENTS};
use super::super::store::now_rfc3339;
use super::clock::Wake;
use super::config::{CSI_ATTACH_LATENCY, CSI_DETACH_LATENCY};
use super::context::Ctx;
use super::names::attacher_finalizer;
use super::objects::At;
use super::objects::{self, str_at};

/// Runs the sidecar until shutdown.
pub async fn run(mut ctx: Ctx) {
    let mut wake = Wake::new(&ctx.store, &[VOLUME_ATTACHMENTS, NODES, PERSISTENT_VOLUMES]);
    let mut pending: HashMap<String, Instant> = HashMap::new();
    loop {
        let next = pass(&ctx, &mut pending);
        if !ctx.pause(Some(&mut wake), next).await {
            return;
        }
    }
}

fn has_finalizer(o: &Value, f: &str) -> bool {
    o.at("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|l| l.iter().any(|x| x.as_str() == Some(f)))
}

fn add_finalizer(o: &mut Value, f: &str) {
    if !has_finalizer(o, f) {
        objects::arr_mut(o, &["metadata", "finalizers"]).push(json!(f));
    }
}

/// One pass; returns the simulated time until the next due operation.
fn pass(ctx: &Ctx, pending: &mut HashMap<String, Instant>) -> Duration {
    let vas = ctx.list(VOLUME_ATTACHMENTS);
    let mut next = Duration::from_secs(3600);
    let mut live = Vec::new();
    for va in vas.iter() {
        let name = objects::name(va).to_string();
        let driver = str_at(va, "/spec/attacher").unwrap_or_default();
        let finalizer = attacher_finalizer(driver);
        let node = str_at(va, "/spec/nodeName").unwrap_or_default();
        let pv = str_at(va, "/spec/source/persistentVolumeName").unwrap_or_default();
        if objects::is_terminating(va) {
            if !has_finalizer(va, &finalizer) {
                continue;
            }
            let key = format!("detach/{name}");
            live.push(key.clone());
            let since = *pending.entry(key.clone()).or_insert_with(Instant::now);
            let elapsed = ctx.clock.since(since);
            if elapsed < CSI_DETACH_LATENCY {
                next = next.min(CSI_DETACH_LATENCY - elapsed);
                continue;
            }
            let _ = ctx.store.modify(VOLUME_ATTACHMENTS, None, &name, |v| {
                objects::obj_mut(v, &["status"]).insert("attached".into(), json!(false));
                objects::remove_at(v, &["status"], "detachError");
                Ok(())
            });
            if let Err(e) = ctx.remove_finalizer(VOLUME_ATTACHMENTS, None, &name, &finalizer) {
                tracing::debug!("external-attacher: finalizer of {name}: {e}");
            }
            pending.remove(&key);
            continue;
        }
        if va.at("/status/attached") == Some(&json!(true)) {
            continue;
        }
        let key = format!("attach/{name}");
        live.push(key.clone());
        if ctx.get(NODES, None, node).is_none() {
            let _ = ctx.store.modify(VOLUME_ATTACHMENTS, None, &name, |v| {
                if v.at("/status/attachError").is_none() {
                    objects::obj_mut(v, &["status"]).insert(
                        "attachError".into(),
                        json!({"time": now_rfc3339(),
                            "message": format!("CSINode {node} does not contain driver {driver}")}),
                    );
                }
                Ok(())
            });
            pending.remove(&key);
            continue;
        }
        if !pv.is_empty() {
            let _ = ctx.store.modify(PERSISTENT_VOLUMES, None, pv, |p| {
                add_finalizer(p, &finalizer);
                Ok(())
            });
        }
        let _ = ctx.store.modify(VOLUME_ATTACHMENTS, None, &name, |v| {
            add_finalizer(v, &finalizer);
            Ok(())
        });
        let since = *pending.entry(key.clone()).or_insert_with(Instant::now);
        let elapsed = ctx.clock.since(since);
        if elapsed < CSI_ATTACH_LATENCY {
            next = next.min(CSI_ATTACH_LATENCY - elapsed);
            continue;
        }
        let _ = ctx.store.modify(VOLUME_ATTACHMENTS, None, &name, |v| {
            if objects::is_terminating(v) {
                return Ok(());
            }
            objects::obj_mut(v, &["metadata", "annotations"])
                .insert("csi.alpha.kubernetes.io/node-id".into(), json!(node));
            let status = objects::obj_mut(v, &["status"]);
            status.insert("attached".into(), json!(true));
            status.remove("attachError");
            Ok(())
        });
        pending.remove(&key);
    }
    pending.retain(|k, _| live.contains(k));
    release_pvs(ctx, &vas);
    next
}

/// Drops the attacher finalizer of PersistentVolumes being deleted that no
/// VolumeAttachment uses any more.
fn release_pvs(ctx: &Ctx, vas: &[Value]) {
    for pv in ctx.list(PERSISTENT_VOLUMES).iter() {
        if !objects::is_terminating(pv) {
            continue;
        }
        let name = objects::name(pv);
        let Some(driver) = str_at(pv, "/spec/csi/driver") else {
            continue;
        };
        let finalizer = attacher_finalizer(driver);
        let used = vas
            .iter()
            .any(|va| str_at(va, "/spec/source/persistentVolumeName") == Some(name));
        if !used
            && has_finalizer(pv, &finalizer)
            && let Err(e) = ctx.remove_finalizer(PERSISTENT_VOLUMES, None, name, &finalizer)
        {
            tracing::debug!("external-attacher: finalizer of {name}: {e}");
        }
    }
}
