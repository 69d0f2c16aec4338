//! Scenarios `vsphere-power-loss` and `vsphere-network-cut`.
//!
//! `vsphere-power-loss`: the workers are VMs on a mock vCenter, each found by
//! its Node's systemUUID (`driver = "vsphere"`, nothing naming the VM in the
//! inventory). The host of the VM running db-0 loses power: vCenter reports the VM
//! `poweredOff` (out of band, no task), its kubelet falls silent. nodefence notices
//! the stale Lease, reads `runtime.powerState` through its vSphere driver, gets
//! `poweredOff` three times in a row, checks the VM's `config.uuid` against the
//! Node's systemUUID, and releases the node; db-0 runs elsewhere. No power task is
//! sent: the VM is already off. The checks: the release, db-0 Running on another
//! node, no `PowerOffVM_Task`/`PowerOnVM_Task`, and the VM located with
//! `SearchIndex.FindAllByUuid` and read with `RetrievePropertiesEx`.
//!
//! `vsphere-network-cut`: the network of the VM running db-0 is cut; the VM stays
//! `poweredOn` and could still write. After `unhealthy_after`, nodefence sends
//! `PowerOffVM_Task` (a hard power-off), follows the Task, reads `poweredOff` three
//! times and releases the node. The checks: exactly one `PowerOffVM_Task`, to that
//! VM; the VM `poweredOff`; the release; db-0 Running elsewhere.

use std::time::Duration;

use nodefence_mocks::redfish::MockPower;

use super::{Carry, Ctx, Outcome, Workers, db_node, make_whole, secs};
use crate::demo::timeline::Fact;

pub async fn power_loss(ctx: &Ctx<'_>, out: &mut Outcome, carry: &mut Carry) -> Result<(), String> {
    make_whole(ctx).await?;
    let world = ctx.world;
    if world.workers() != Workers::Vms {
        return Err("this scenario needs the workers to be VMs: run it alone".to_string());
    }
    let victim = db_node(world)?;
    out.node = Some(victim.clone());
    ctx.intro(&[
        format!("db-0 runs on {victim}, a VM on vCenter; nodefence found it by the Node's systemUUID."),
        "The ESXi host under it loses power: vCenter reports the VM poweredOff, nobody tells Kubernetes."
            .to_string(),
    ]);
    let calls_before = world.vcenter_methods().len();
    let now_on = ctx
        .lose_power(
            out,
            carry,
            &victim,
            "the VM's host loses power: the VM is poweredOff (nobody tells Kubernetes)",
            "VM",
        )
        .await?;
    if world.power(&victim) != Some(MockPower::Off) {
        return Err(format!("{victim}'s VM is no longer poweredOff"));
    }
    // Its driver read the VM: found by UUID (once, at start or now) and read since.
    let methods = world.vcenter_methods();
    if !methods.iter().any(|m| m == "FindAllByUuid") {
        return Err("nodefence never looked the VMs up with FindAllByUuid".to_string());
    }
    let reads = methods
        .iter()
        .skip(calls_before)
        .filter(|m| *m == "RetrievePropertiesEx")
        .count();
    if reads < crate::demo::config::CONFIRM_READINGS as usize {
        return Err(format!(
            "nodefence read the VM's power state {reads} time(s) after the power loss, fewer \
             than the {} readings that confirm Off",
            crate::demo::config::CONFIRM_READINGS
        ));
    }
    out.summary = format!(
        "{victim}'s VM read poweredOff through the vsphere driver ({reads} readings) and released {} \
         after its host lost power; db-0 Running on {now_on} after {}. No power task was needed: \
         the VM was already off.",
        secs(out.released_after.unwrap_or_default()),
        secs(out.running_after.unwrap_or_default()),
    );
    Ok(())
}

pub async fn network_cut(
    ctx: &Ctx<'_>,
    out: &mut Outcome,
    carry: &mut Carry,
) -> Result<(), String> {
    make_whole(ctx).await?;
    let world = ctx.world;
    if world.workers() != Workers::Vms {
        return Err("this scenario needs the workers to be VMs: run it alone".to_string());
    }
    let victim = db_node(world)?;
    out.node = Some(victim.clone());
    ctx.intro(&[
        format!("db-0 runs on {victim}, a VM on vCenter. Its network is cut: the kubelet is silent,"),
        "but vCenter says poweredOn and the VM may still write to the volume: first it must be off."
            .to_string(),
    ]);
    let mark = world.reset_mark();
    let t0 = crate::clock::now();
    ctx.story.begin(t0);
    ctx.story.you(
        &victim,
        "cuts the VM's network: kubelet unreachable, the VM still poweredOn",
    );
    world.set_network(&victim, false);

    let grace = world.wording().grace_period + world.wording().unhealthy_after;
    let task = ctx
        .wait_step(
            "PowerOffVM_Task at the vCenter",
            grace + Duration::from_secs(120),
            t0,
            |s| {
                s.node == victim
                    && matches!(&s.fact, Fact::Reset { reset_type } if reset_type == "PowerOffVM_Task")
            },
        )
        .await?;
    let forced = ctx.elapsed(t0, task.at);
    carry.fenced = Some(victim.clone());
    let (released, now_on) = ctx
        .released_and_moved(
            out,
            &victim,
            t0,
            grace + Duration::from_secs(240),
            grace + Duration::from_secs(600),
        )
        .await?;
    if released.at < task.at {
        return Err("released before the VM was powered off".to_string());
    }
    out.power_commands = world.resets_since(mark);
    let expected = vec![(victim.clone(), "PowerOffVM_Task".to_string())];
    if out.power_commands != expected {
        return Err(format!(
            "expected exactly one PowerOffVM_Task to {victim}'s VM, the vCenter received {:?}",
            out.power_commands
        ));
    }
    if world.power(&victim) != Some(MockPower::Off) {
        return Err(format!("{victim}'s VM is not poweredOff"));
    }
    out.summary = format!(
        "{victim}'s VM powered off with PowerOffVM_Task at +{}; confirmed poweredOff, released at +{}; \
         db-0 Running on {now_on} at +{}.",
        secs(forced),
        secs(out.released_after.unwrap_or_default()),
        secs(out.running_after.unwrap_or_default()),
    );
    Ok(())
}
