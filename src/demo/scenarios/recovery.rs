//! Scenario 4, recovery: a fenced node's machine gets its power back. The kubelet
//! starts, the node turns Ready, and once it has stayed Ready for `recovered_after`
//! nodefence removes the out-of-service taint it added, so the node takes pods again.
//! Run alone, the scenario first fences a node itself (a power loss, as in scenario 1).

use std::time::Duration;

use nodefence_mocks::kube::sim::SimEventKind;
use nodefence_mocks::redfish::MockPower;
use tokio::time::Instant;

use super::{Carry, Ctx, Outcome, db_node, make_whole, secs};
use crate::demo::narrate::span;

pub async fn run(ctx: &Ctx<'_>, out: &mut Outcome, carry: &mut Carry) -> Result<(), String> {
    let world = ctx.world;
    let w = &world.wording();
    let fenced = carry
        .fenced
        .take()
        .filter(|n| world.power(n) == Some(MockPower::Off) && world.out_of_service(n));
    let victim = match fenced {
        Some(node) => node,
        None => fence_one(ctx).await?,
    };
    out.node = Some(victim.clone());
    ctx.intro(&[
        format!("{victim} was fenced: its machine is Off and it carries the out-of-service taint,"),
        "so no pod may run there. Its power comes back.".to_string(),
    ]);
    // Released on the Lease fast path, the Node never turned NotReady: it is "Ready
    // again" as soon as its kubelet runs.
    let still_ready = world.node_ready(&victim);
    let mark = world.reset_mark();
    let t0 = crate::clock::now();
    ctx.story.begin(t0);
    ctx.story.you(&victim, "restores power (BMC: On)");
    world
        .set_power(&victim, MockPower::On)
        .map_err(|e| e.to_string())?;

    let ready = ctx
        .wait_step("Ready node", Duration::from_secs(120), t0, |s| {
            s.node == victim
                && (s.is_sim(SimEventKind::NodeReady)
                    || (still_ready && s.is_sim(SimEventKind::KubeletStarted)))
        })
        .await?;
    let removed = ctx
        .wait_step(
            "taint removal by nodefence",
            w.recovered_after + Duration::from_secs(120),
            t0,
            |s| s.node == victim && s.is_nodefence("TaintRemoved"),
        )
        .await?;
    out.untainted_after = Some(ctx.elapsed(t0, removed.at));
    ctx.wait("node without the taint", Duration::from_secs(60), || {
        !world.out_of_service(&victim)
    })
    .await?;
    out.power_commands = world.resets_since(mark);
    if !out.power_commands.is_empty() {
        return Err(format!(
            "unexpected power commands during recovery: {:?}",
            out.power_commands
        ));
    }
    out.summary = format!(
        "{victim} Ready again at +{}; nodefence removed its taint at +{}, once it had been Ready for {}.",
        secs(ctx.elapsed(t0, ready.at)),
        secs(out.untainted_after.unwrap_or_default()),
        span(w.recovered_after),
    );
    Ok(())
}

/// Set-up when run alone: a power loss on db-0's node, until nodefence released it.
async fn fence_one(ctx: &Ctx<'_>) -> Result<String, String> {
    make_whole(ctx).await?;
    let world = ctx.world;
    let node = db_node(world)?;
    let started = Instant::now();
    world
        .set_power(&node, MockPower::Off)
        .map_err(|e| e.to_string())?;
    ctx.wait(
        "release of the node (set-up)",
        Duration::from_secs(300),
        || world.out_of_service(&node),
    )
    .await?;
    ctx.wait(
        "db-0 Running on another node (set-up)",
        Duration::from_secs(600),
        || world.db_running_on().is_some_and(|n| n != node),
    )
    .await?;
    ctx.setup_note(&format!(
        "{node} lost power and nodefence released it, as in scenario 1 ({:.1}s)",
        started.elapsed().as_secs_f64()
    ));
    Ok(node)
}
