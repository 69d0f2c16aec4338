//! The garbage collector, for the one dependent a node failure leaves behind: the
//! node Lease, owned by its Node. When the Node is deleted (nodefence's "delete the
//! Node" path), the Lease goes too, as the real garbage collector deletes dependents
//! whose owner no longer exists (by UID). A kubelet that comes back re-creates both.

use std::collections::HashSet;

use serde_json::Value;

use super::super::deletion::DeleteOptions;
use super::super::resources::{LEASES, NODES};
use super::clock::Wake;
use super::config::GC_PERIOD;
use super::context::Ctx;
use super::objects;
use super::objects::At;
use super::timeline::SimEventKind;

/// Runs the collector until shutdown.
pub async fn run(mut ctx: Ctx) {
    let mut wake = Wake::new(&ctx.store, &[NODES]);
    loop {
        collect(&ctx);
        if !ctx.pause(Some(&mut wake), GC_PERIOD).await {
            return;
        }
    }
}

fn collect(ctx: &Ctx) {
    let node_uids: HashSet<String> = ctx
        .list(NODES)
        .iter()
        .map(|n| objects::uid(n).to_string())
        .collect();
    for lease in ctx.list(LEASES).iter() {
        let owners: Vec<&Value> = lease
            .at("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .map(|o| {
                o.iter()
                    .filter(|r| r.get("kind").and_then(Value::as_str) == Some("Node"))
                    .collect()
            })
            .unwrap_or_default();
        if owners.is_empty() {
            continue;
        }
        let orphaned = owners.iter().all(|r| {
            r.get("uid")
                .and_then(Value::as_str)
                .is_none_or(|u| !node_uids.contains(u))
        });
        if !orphaned {
            continue;
        }
        let ns = objects::namespace(lease).to_string();
        let name = objects::name(lease).to_string();
        let uid = objects::uid(lease).to_string();
        let opts = DeleteOptions {
            preconditions: Some(super::super::deletion::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteOptions::default()
        };
        if let Ok(Some(_)) = ctx.delete(LEASES, Some(&ns), &name, &opts) {
            ctx.record(
                SimEventKind::LeaseDeleted,
                Some(&name),
                None,
                format!("Lease {ns}/{name} garbage-collected: its Node is gone"),
            );
        }
    }
}
