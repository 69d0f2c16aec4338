//! Scenario 2, unreachable but On: the network of the node running db-0 is cut. Its
//! kubelet cannot reach the API server, but the machine is On and could still write
//! to the volume. nodefence waits `unhealthy_after` of NotReady (it may only be a
//! short cut), then powers it off with ForceOff, confirms Off, and releases it.

use std::time::Duration;

use super::{Carry, Ctx, Outcome, db_node, make_whole, secs};
use crate::demo::timeline::Fact;

pub async fn run(ctx: &Ctx<'_>, out: &mut Outcome, carry: &mut Carry) -> Result<(), String> {
    make_whole(ctx).await?;
    let world = ctx.world;
    let victim = db_node(world)?;
    out.node = Some(victim.clone());
    ctx.intro(&[
        format!("db-0 runs on {victim}. Its network is cut: the kubelet cannot reach the API server,"),
        "but the machine is On and may still be writing to the volume. Releasing it now could let two"
            .to_string(),
        "nodes write at once: first the machine must be off.".to_string(),
    ]);
    let mark = world.reset_mark();
    let t0 = crate::clock::now();
    ctx.story.begin(t0);
    ctx.story.you(
        &victim,
        "cuts the network: kubelet unreachable, machine still On",
    );
    world.set_network(&victim, false);

    let grace = world.wording().grace_period + world.wording().unhealthy_after;
    ctx.wait_step(
        "ForceOff at the BMC",
        grace + Duration::from_secs(120),
        t0,
        |s| {
            s.node == victim
                && matches!(&s.fact, Fact::Reset { reset_type } if reset_type == "ForceOff")
        },
    )
    .await?;
    let forced = ctx
        .story
        .find(t0, |s| s.node == victim && s.is_nodefence("PoweringOff"))
        .map(|s| ctx.elapsed(t0, s.at));
    carry.fenced = Some(victim.clone());
    let released = ctx
        .wait_step(
            "out-of-service taint from nodefence",
            grace + Duration::from_secs(240),
            t0,
            |s| s.node == victim && s.is_nodefence("Released"),
        )
        .await?;
    out.released_after = Some(ctx.elapsed(t0, released.at));
    ctx.wait(
        "db-0 Running on another node",
        grace + Duration::from_secs(600),
        || world.db_running_on().is_some_and(|n| n != victim),
    )
    .await?;
    let now_on = db_node(world)?;
    out.running_after = ctx
        .pod_running_elsewhere(t0, &victim)
        .or_else(|| Some(ctx.elapsed(t0, crate::clock::now())));
    out.power_commands = world.resets_since(mark);
    let expected = vec![(victim.clone(), "ForceOff".to_string())];
    if out.power_commands != expected {
        return Err(format!(
            "expected exactly one ForceOff to {victim}, the BMC received {:?}",
            out.power_commands
        ));
    }
    out.summary = format!(
        "{victim} forced off at +{} (unhealthy for {} since the first missed renewal), confirmed Off, released at +{}; \
         db-0 Running on {now_on} at +{}.",
        secs(forced.unwrap_or_default()),
        crate::demo::narrate::span(world.wording().unhealthy_after),
        secs(out.released_after.unwrap_or_default()),
        secs(out.running_after.unwrap_or_default()),
    );
    Ok(())
}
