//! Scenario 1, power loss: the machine running db-0 loses power. Nobody tells
//! Kubernetes; its kubelet just falls silent. nodefence notices the stale Lease, asks
//! the BMC, gets `Off` three times in a row, and adds the out-of-service taint; the
//! control plane then force-deletes db-0, detaches its volume, and the replacement
//! starts on another node. No power command is needed: the machine is already off.
//!
//! With `--companions` (real time), a companion beats from every node
//! ([`crate::demo::companions`]) and the victim's dies with its machine: nodefence
//! hears the silence within `heartbeat_timeout` (2 s), well before the Lease is
//! stale, and still releases only on the BMC's Off readings (two independent
//! signals). With `--kill-leader-after`, a standby replica runs too, the companions
//! beat to both, and the leader is killed (no Lease released) that long after the
//! plug: the standby takes the Lease over once it expires and finishes from its own
//! heartbeat table. Checked: no power command, and no watchdog reset a running
//! machine (while no leader answers, the companions feed on the API server's word).

use std::time::Duration;

use super::{Carry, CompanionOutcome, Ctx, Outcome, db_node, make_whole, secs};
use crate::demo::companions::Fleet;

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
    let fleet = if ctx.companions {
        Some(companions(ctx).await?)
    } else {
        None
    };
    let result = lose(ctx, out, carry, &victim, fleet.as_ref()).await;
    if let Some(fleet) = fleet {
        let resets = fleet.fired();
        // The others stop cleanly: each disarms its watchdog, which never fires.
        fleet.stop().await;
        if let Some(c) = out.companions.as_mut() {
            c.watchdog_resets = resets.clone();
        }
        if result.is_ok() && !resets.is_empty() {
            return Err(format!(
                "the watchdog of {resets:?} reset a machine that should have run on"
            ));
        }
    }
    result
}

/// A standby first when the leader is to be killed, then a companion on every
/// worker, each beating (its watchdog unarmed: no watchdog level in this scenario).
async fn companions(ctx: &Ctx<'_>) -> Result<Fleet, String> {
    let world = ctx.world;
    let started = tokio::time::Instant::now();
    if ctx.kill_leader_after.is_some() {
        world
            .start_standby()
            .await
            .map_err(|e| format!("the standby replica could not start: {e:#}"))?;
    }
    let fleet = Fleet::start(world, ctx.story)
        .await
        .map_err(|e| format!("the companions could not start: {e:#}"))?;
    if let Err(e) = ctx
        .wait(
            "companion on every node, its watchdog armed where the level is on",
            Duration::from_secs(60),
            || fleet.all_armed(),
        )
        .await
    {
        fleet.stop().await;
        return Err(e);
    }
    if ctx.kill_leader_after.is_some() {
        // A link to a replica not yet listening says hello again after 2 s: by now
        // every companion beats to both, and the standby keeps the table too.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    ctx.setup_note(&format!(
        "a companion on every node, beating every {} to {} (heartbeat_timeout {}), its \
         watchdog unarmed (no watchdog level here: nothing rests on it) (took {:.1}s)",
        humantime::format_duration(crate::heartbeat::DEFAULT_HEARTBEAT_INTERVAL),
        if ctx.kill_leader_after.is_some() {
            "both replicas of nodefence (a standby runs)"
        } else {
            "nodefence"
        },
        humantime::format_duration(crate::heartbeat::DEFAULT_HEARTBEAT_TIMEOUT),
        started.elapsed().as_secs_f64()
    ));
    Ok(fleet)
}

/// The plug pulled (after the phase asked), the companion killed with its machine,
/// the leader killed when asked; then the release and db-0 elsewhere.
async fn lose(
    ctx: &Ctx<'_>,
    out: &mut Outcome,
    carry: &mut Carry,
    victim: &str,
    fleet: Option<&Fleet>,
) -> Result<(), String> {
    let world = ctx.world;
    if let Some(phase) = ctx.pull_after_renewal {
        // The plug is pulled `phase` after a renewal: right after one is the worst
        // case for the Lease fast path, just before the next the best.
        let before = world.lease_renewed(victim);
        ctx.wait(
            "a Lease renewal of the node",
            Duration::from_secs(30),
            || world.lease_renewed(victim) != before,
        )
        .await?;
        tokio::time::sleep(world.real(phase)).await;
    }
    let what = if fleet.is_some() {
        "pulls the plug: the machine is Off, its companion dies with it (nobody tells Kubernetes)"
    } else {
        "pulls the plug: the machine is Off (nobody tells Kubernetes)"
    };
    let (now_on, (t0, killed)) = ctx
        .lose_power_then(out, carry, victim, what, "machine", |t0| async move {
            if let Some(fleet) = fleet {
                fleet.kill(victim);
            }
            let Some(after) = ctx.kill_leader_after else {
                return Ok((t0, None));
            };
            tokio::time::sleep(after).await;
            let killed = world.kill_leader().map_err(|e| format!("{e:#}"))?;
            let at = ctx.story.you(
                "",
                format!(
                    "kills nodefence's leader ({killed}): its process ends at once, its leader \
                     Lease is not released"
                ),
            );
            Ok((t0, Some(at)))
        })
        .await?;
    if fleet.is_some() {
        let suspect = ctx
            .story
            .find(t0, |s| s.node == victim && s.is_nodefence("NodeSuspect"));
        let new_leader = killed.and_then(|_| world.leader_acquired().filter(|(_, at)| *at >= t0));
        out.companions = Some(CompanionOutcome {
            suspect_after: suspect.as_ref().map(|s| ctx.elapsed(t0, s.at)),
            suspect_by_companion: suspect.is_some_and(|s| s.text.contains("companion")),
            leader_killed_after: killed.map(|at| ctx.elapsed(t0, at)),
            new_leader_after: new_leader.map(|(_, at)| ctx.elapsed(t0, at)),
            released_by_standby: killed.map(|at| {
                out.released_after
                    .is_some_and(|released| released > ctx.elapsed(t0, at))
            }),
            watchdog_resets: Vec::new(),
        });
    }
    out.summary = match killed {
        None => format!(
            "{victim} confirmed Off and released {} after the power loss; db-0 Running on \
             {now_on} after {} (time to recovery). No power command was needed: the machine \
             was already Off.",
            secs(out.released_after.unwrap_or_default()),
            secs(out.running_after.unwrap_or_default()),
        ),
        Some(at) => format!(
            "the leader killed {} after the power loss; the standby led from {}; {victim} \
             confirmed Off and released {} after the loss; db-0 Running on {now_on} after {}. \
             No power command.",
            secs(ctx.elapsed(t0, at)),
            world
                .leader_acquired()
                .filter(|(_, l)| *l >= t0)
                .map_or_else(|| "?".to_string(), |(_, l)| secs(ctx.elapsed(t0, l))),
            secs(out.released_after.unwrap_or_default()),
            secs(out.running_after.unwrap_or_default()),
        ),
    };
    Ok(())
}
