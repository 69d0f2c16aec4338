//! Scenario 3, BMC unreachable: the BMC stops answering (every request hangs), then
//! the network of the node running db-0 is cut. Without an answer nothing is proven,
//! so nothing is released, however long the node has been NotReady: nodefence says
//! why in a Warning Event and keeps asking. Well past `unhealthy_after` the demo
//! checks that nothing moved, then lets the BMC answer again: nodefence proceeds on
//! its own (reads On, ForceOff, confirms Off, releases).

use std::time::Duration;

use super::{Carry, Ctx, Outcome, db_node, make_whole, secs};
use crate::demo::narrate::span;
use crate::demo::timeline::Fact;
use nodefence_mocks::kube::sim::SimEventKind;

pub async fn run(ctx: &Ctx<'_>, out: &mut Outcome, carry: &mut Carry) -> Result<(), String> {
    make_whole(ctx).await?;
    let world = ctx.world;
    let w = &world.wording();
    let victim = db_node(world)?;
    out.node = Some(victim.clone());
    ctx.intro(&[
        format!(
            "The BMC stops answering: every request hangs. Then {victim}, which runs db-0, loses"
        ),
        "its network; the machine stays On. With no answer from the BMC nothing is proven, so"
            .to_string(),
        format!(
            "nothing may be released. Well past unhealthy_after ({}) the demo checks that nothing",
            span(w.unhealthy_after)
        ),
        "moved, then lets the BMC answer again: nodefence carries on by itself.".to_string(),
    ]);
    let mark = world.reset_mark();
    let t0 = crate::clock::now();
    ctx.story.begin(t0);
    ctx.story
        .you("", "the BMC stops answering (every request hangs)");
    world.bmc_hangs(true);
    ctx.story.you(
        &victim,
        "cuts the network: kubelet unreachable, machine still On",
    );
    world.set_network(&victim, false);

    let warned = ctx
        .wait_step(
            "warning from nodefence (PowerQueryFailed)",
            w.lease_stale_after.unwrap_or(w.grace_period) + Duration::from_secs(180),
            t0,
            |s| {
                s.node == victim
                    && (s.is_nodefence("PowerQueryFailed") || s.is_nodefence("FenceBlocked"))
            },
        )
        .await?;
    let not_ready = ctx
        .wait_step(
            "NotReady",
            w.grace_period + Duration::from_secs(120),
            t0,
            |s| s.node == victim && s.is_sim(SimEventKind::NodeNotReady),
        )
        .await?;
    tokio::time::sleep(world.real(Duration::from_secs(10))).await;
    ctx.story.line(ctx.style.dim(
        "  … nodefence keeps asking, the BMC keeps silent: waiting well past unhealthy_after",
    ));
    let hold = w.unhealthy_after + Duration::from_secs(20);
    let until = not_ready.at + world.real(hold);
    if let Ok(left) = until.duration_since(crate::clock::now()) {
        tokio::time::sleep(left).await;
    }
    let sent = world.resets_since(mark);
    if world.out_of_service(&victim) || !sent.is_empty() {
        return Err(format!(
            "{victim} was released or powered off without a word from its BMC (commands: {sent:?})"
        ));
    }
    if world.db_running_on().is_some_and(|n| n != victim) {
        return Err("db-0 moved although nothing was proven".to_string());
    }
    ctx.story.you(
        &victim,
        format!(
            "checks after {} NotReady: no power command, no taint; db-0 still waits",
            span(hold)
        ),
    );
    let held = ctx.elapsed(t0, crate::clock::now());
    let cleared = ctx.story.you("", "the BMC answers again (fault cleared)");
    world.bmc_hangs(false);

    ctx.wait_step(
        "ForceOff at the BMC once it answered",
        Duration::from_secs(180),
        cleared,
        |s| {
            s.node == victim
                && matches!(&s.fact, Fact::Reset { reset_type } if reset_type == "ForceOff")
        },
    )
    .await?;
    carry.fenced = Some(victim.clone());
    let released = ctx
        .wait_step(
            "out-of-service taint from nodefence",
            Duration::from_secs(300),
            cleared,
            |s| s.node == victim && s.is_nodefence("Released"),
        )
        .await?;
    out.released_after = Some(ctx.elapsed(t0, released.at));
    ctx.wait(
        "db-0 Running on another node",
        Duration::from_secs(600),
        || world.db_running_on().is_some_and(|n| n != victim),
    )
    .await?;
    let now_on = db_node(world)?;
    out.running_after = ctx
        .pod_running_elsewhere(t0, &victim)
        .or_else(|| Some(ctx.elapsed(t0, crate::clock::now())));
    out.power_commands = world.resets_since(mark);
    out.summary = format!(
        "nothing released for {} while the BMC was silent (warning at +{}); once it answered: \
         forced off, released at +{}, db-0 Running on {now_on} at +{}.",
        secs(held),
        secs(ctx.elapsed(t0, warned.at)),
        secs(out.released_after.unwrap_or_default()),
        secs(out.running_after.unwrap_or_default()),
    );
    Ok(())
}
