//! Scenario 1, power loss: the machine running db-0 loses power. Nobody tells
//! Kubernetes; its kubelet just falls silent. nodefence notices the stale Lease, asks
//! the BMC, gets `Off` three times in a row, and adds the out-of-service taint; the
//! control plane then force-deletes db-0, detaches its volume, and the replacement
//! starts on another node. No power command is needed: the machine is already off.

use std::time::Duration;

use super::{Carry, Ctx, Outcome, db_node, make_whole, secs};

pub async fn run(ctx: &Ctx<'_>, out: &mut Outcome, carry: &mut Carry) -> Result<(), String> {
    make_whole(ctx).await?;
    let world = ctx.world;
    let victim = db_node(world)?;
    out.node = Some(victim.clone());
    ctx.intro(&[
        format!(
            "db-0 runs on {victim}, its ReadWriteOnce volume attached there. {victim} loses power."
        ),
        "On its own, Kubernetes cannot tell a dead machine from an unreachable one: it would evict"
            .to_string(),
        "db-0 after 5m and then wait for ever, the volume still attached (Multi-Attach error)."
            .to_string(),
    ]);
    if let Some(phase) = ctx.pull_after_renewal {
        // The plug is pulled `phase` after a renewal: right after one is the worst
        // case for the Lease fast path, just before the next the best.
        let before = world.lease_renewed(&victim);
        ctx.wait(
            "a Lease renewal of the node",
            Duration::from_secs(30),
            || world.lease_renewed(&victim) != before,
        )
        .await?;
        tokio::time::sleep(world.real(phase)).await;
    }
    let now_on = ctx
        .lose_power(
            out,
            carry,
            &victim,
            "pulls the plug: the machine is Off (nobody tells Kubernetes)",
            "machine",
        )
        .await?;
    out.summary = format!(
        "{victim} confirmed Off and released {} after the power loss; db-0 Running on {now_on} after {} \
         (time to recovery). No power command was needed: the machine was already Off.",
        secs(out.released_after.unwrap_or_default()),
        secs(out.running_after.unwrap_or_default()),
    );
    Ok(())
}
