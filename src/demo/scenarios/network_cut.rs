//! Scenario 2, unreachable but On: the network of the node running db-0 is cut. Its
//! kubelet cannot reach the API server, but the machine is On and could still write
//! to the volume. nodefence waits (it may only be a short cut): `unhealthy_after` from
//! when it found the node unhealthy (its Lease stale), or from NotReady if that came
//! first, and never before NotReady; then it powers it off with ForceOff, confirms
//! Off, and releases it. The scenario checks that the ForceOff came when the
//! narration said.

use std::time::Duration;

use super::{Carry, Ctx, Outcome, db_node, make_whole, secs};
use crate::demo::timeline::Fact;

/// How far (cluster time) the ForceOff may be from the stated deadline: the engine
/// counts from its decision, the story from the Event written just after, and the
/// daemon wakes on its own tick.
const WAIT_TOLERANCE: Duration = Duration::from_secs(3);

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
    let forced_at = ctx
        .story
        .find(t0, |s| s.node == victim && s.is_nodefence("PoweringOff"))
        .map(|s| s.at);
    let forced = forced_at.map(|at| ctx.elapsed(t0, at));
    // What the wait counted from (the engine: the incident's start, or NotReady if
    // earlier), as the narration says it.
    let opened = ctx.story.find(t0, |s| {
        s.node == victim
            && crate::demo::narrate::INCIDENT_OPENERS
                .iter()
                .any(|r| s.is_nodefence(r))
    });
    let unhealthy_after = world.wording().unhealthy_after;
    if let (Some(opened), Some(forced_at)) = (&opened, forced_at) {
        let waited = ctx.elapsed(opened.at, forced_at);
        if waited + WAIT_TOLERANCE < unhealthy_after || waited > unhealthy_after + WAIT_TOLERANCE {
            return Err(format!(
                "ForceOff {} after the incident opened, the narration said {}",
                secs(waited),
                crate::demo::narrate::span(unhealthy_after)
            ));
        }
    }
    carry.fenced = Some(victim.clone());
    let (_released, now_on) = ctx
        .released_and_moved(
            out,
            &victim,
            t0,
            grace + Duration::from_secs(240),
            grace + Duration::from_secs(600),
        )
        .await?;
    out.power_commands = world.resets_since(mark);
    let expected = vec![(victim.clone(), "ForceOff".to_string())];
    if out.power_commands != expected {
        return Err(format!(
            "expected exactly one ForceOff to {victim}, the BMC received {:?}",
            out.power_commands
        ));
    }
    let from = opened.map_or(String::new(), |o| {
        format!(
            ", {} after nodefence found it unhealthy at +{}",
            crate::demo::narrate::span(unhealthy_after),
            secs(ctx.elapsed(t0, o.at))
        )
    });
    out.summary = format!(
        "{victim} forced off at +{}{from}; confirmed Off, released at +{}; \
         db-0 Running on {now_on} at +{}.",
        secs(forced.unwrap_or_default()),
        secs(out.released_after.unwrap_or_default()),
        secs(out.running_after.unwrap_or_default()),
    );
    Ok(())
}
