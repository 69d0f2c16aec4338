//! Scenario `rack-power`: a machine loses power together with its BMC (a rack or PDU
//! feed, both power supplies), so nothing out of band can be read. It plays at real
//! time: the watchdog level's timing (the companions' heartbeat, `isolation_timeout`,
//! the watchdog's own timeout) is not scaled by `--speed`.
//!
//! Act 1, nodefence as it runs by default (no companions, no watchdog level): the
//! machine running db-0 goes Off and the BMC answers every request with an error.
//! nodefence notices the stale Lease, cannot read the power state, says so
//! (`PowerQueryFailed`) and releases nothing: db-0 stays bound to the dead node. After
//! [`HOLD`] the demo checks that nothing moved.
//!
//! Between the acts the cluster is restored (power back, the BMC answering again),
//! nodefence restarted with its companion listener and `watchdog_fencing = true`, and a
//! companion started on every node (see `companions`), each arming a simulated
//! hardware watchdog granting 10 s that really resets its machine when not fed.
//!
//! Act 2, the same outage on the node db-0 runs on, its companion dying with it:
//! nodefence hears the silence within 2 s, cannot read the BMC, marks the node
//! (`WatchdogFencing`), waits the stated time after the mark (isolation 2 s +
//! watchdog 10 s + drift margin + allowance: 12.74 s), releases it on the watchdog's
//! proof (`ResetByWatchdog`, `Released`), and db-0 runs elsewhere.
//!
//! The checks: act 1 released nothing, marked nothing, sent no power command, and
//! db-0 did not move; act 2 released within [`RELEASE_DEADLINE`] and not before the
//! stated wait (the API server's own times of the mark's write and the taint's), the
//! Event's arithmetic is that wait, the machine was off when released (ground truth),
//! no power command went out, no other machine was reset by its watchdog, and db-0
//! runs on another node.

use std::time::Duration;

use nodefence_mocks::redfish::MockPower;

use super::{Carry, Ctx, Outcome, WatchdogOutcome, close_scene, db_node, make_whole, secs};
use crate::demo::companions::{Fleet, WATCHDOG_TIMEOUT};
use crate::demo::config::Profile;
use crate::demo::narrate::span;
use crate::watchdog::timing::Timing;

/// How long act 1 shows that nothing is released, after nodefence said why.
const HOLD: Duration = Duration::from_secs(20);
/// Act 2: the release is due about 15 s after the loss; it must come within this.
const RELEASE_DEADLINE: Duration = Duration::from_secs(60);

pub async fn run(ctx: &Ctx<'_>, out: &mut Outcome, carry: &mut Carry) -> Result<(), String> {
    make_whole(ctx).await?;
    let world = ctx.world;
    let victim = db_node(world)?;
    out.node = Some(victim.clone());
    let mut watchdog = WatchdogOutcome {
        stated_wait: Timing::default().wait(WATCHDOG_TIMEOUT).total(),
        ..Default::default()
    };
    let held = act_one(ctx, out, &victim, &mut watchdog).await;
    out.watchdog = Some(watchdog.clone());
    let held = held?;
    close_scene(ctx, out).await;
    ctx.story.line(
        ctx.style.bold(
            "  Nothing is released without proof: this is where the watchdog level comes in.",
        ),
    );
    ctx.story.line("");

    make_whole(ctx).await?;
    ctx.use_profile(Profile::Watchdog).await?;
    let fleet = Fleet::start(world, ctx.story)
        .await
        .map_err(|e| format!("the companions could not start: {e:#}"))?;
    let result = match arm(ctx, &fleet).await {
        Ok(()) => act_two(ctx, out, carry, &fleet, &mut watchdog).await,
        Err(e) => Err(e),
    };
    // The others stop cleanly: each disarms its watchdog, which never fires.
    fleet.stop().await;
    out.watchdog = Some(watchdog.clone());
    result?;
    let stated = Timing::default().wait(WATCHDOG_TIMEOUT);
    out.summary = format!(
        "Act 1, no watchdog level: {victim} unreadable at +{} (PowerQueryFailed), nothing released \
         for {}. Act 2, companions and watchdog_fencing: {victim} suspect at +{} (its companion \
         silent), marked at +{}, released at +{}, {} after the mark (stated: {} after it), \
         db-0 Running on {} at +{}. No power command; the machine was Off when released.",
        opt_secs(watchdog.unreadable_after),
        secs(held),
        opt_secs(watchdog.suspect_after),
        opt_secs(watchdog.marked_after),
        opt_secs(out.released_after),
        opt_secs(watchdog.mark_to_release),
        stated,
        world.db_running_on().unwrap_or_else(|| "?".into()),
        opt_secs(out.running_after),
    );
    Ok(())
}

fn opt_secs(d: Option<Duration>) -> String {
    d.map_or_else(|| "?".to_string(), secs)
}

/// Act 1: the outage with nodefence as it runs by default. Returns how long nothing
/// was released.
async fn act_one(
    ctx: &Ctx<'_>,
    out: &mut Outcome,
    victim: &str,
    watchdog: &mut WatchdogOutcome,
) -> Result<Duration, String> {
    let world = ctx.world;
    let w = world.wording();
    ctx.intro(&[
        "This scenario plays at real time: the watchdog level's timing is not scaled.".to_string(),
        String::new(),
        format!(
            "Act 1. db-0 runs on {victim}. Its rack loses power: the machine is Off and its BMC"
        ),
        "with it, so nothing out of band can be read. (The demo's three machines share one mock"
            .to_string(),
        format!(
            "BMC: it now answers every request with an error, as {victim}'s own BMC would, dead;"
        ),
        format!(
            "nodefence asks it about {victim} only.) nodefence runs as by default: no companions,"
        ),
        "no watchdog level.".to_string(),
    ]);
    let mark = world.reset_mark();
    let t0 = crate::clock::now();
    ctx.story.begin(t0);
    ctx.story.you(
        victim,
        "the rack's power fails: the machine is Off, its BMC answers only errors (HTTP 500)",
    );
    world.bmc_fails(true);
    world
        .set_power(victim, MockPower::Off)
        .map_err(|e| e.to_string())?;

    let warned = ctx
        .wait_step(
            "warning from nodefence (PowerQueryFailed)",
            w.lease_stale_after.unwrap_or(w.grace_period) + Duration::from_secs(60),
            t0,
            |s| s.node == victim && s.is_nodefence("PowerQueryFailed"),
        )
        .await?;
    watchdog.unreadable_after = Some(ctx.elapsed(t0, warned.at));
    tokio::time::sleep(Duration::from_secs(2)).await;
    ctx.story.line(ctx.style.dim(&format!(
        "  … nodefence keeps asking, the BMC keeps failing; the demo waits {} more",
        span(HOLD)
    )));
    let until = warned.at + world.real(HOLD);
    if let Ok(left) = until.duration_since(crate::clock::now()) {
        tokio::time::sleep(left).await;
    }
    nothing_moved(ctx, victim, mark)?;
    let held = ctx.elapsed(t0, crate::clock::now());
    ctx.story.you(
        victim,
        format!(
            "checks after {}: no taint, no mark, no power command; db-0 still bound to {victim}, \
             its volume attached there",
            secs(held)
        ),
    );
    watchdog.held_for = held;
    out.power_commands = world.resets_since(mark);
    Ok(held)
}

/// Act 1's check: nothing released, marked or sent, db-0 where it was.
fn nothing_moved(ctx: &Ctx<'_>, victim: &str, mark: usize) -> Result<(), String> {
    let world = ctx.world;
    let sent = world.resets_since(mark);
    if world.out_of_service(victim) || !sent.is_empty() {
        return Err(format!(
            "{victim} was released or powered off without a word from its BMC (commands: {sent:?})"
        ));
    }
    if let Some(m) = world.fencing_mark(victim) {
        return Err(format!(
            "{victim} was marked for fencing ({m}) without the watchdog level"
        ));
    }
    if world.db_running_on().is_some_and(|n| n != victim) {
        return Err("db-0 moved although nothing was proven".to_string());
    }
    Ok(())
}

/// Waits until every companion beats, each worker's watchdog armed (the level is on
/// for them; the control-plane node's is not in the inventory), and says so.
async fn arm(ctx: &Ctx<'_>, fleet: &Fleet) -> Result<(), String> {
    let started = tokio::time::Instant::now();
    ctx.wait(
        "companion on every node, its watchdog armed where the level is on",
        Duration::from_secs(60),
        || fleet.all_armed(),
    )
    .await?;
    ctx.setup_note(&format!(
        "a companion on every node: hello with its projected token over TLS, beats every {} \
         over UDP, each worker's watchdog armed as the watchdog level asks ({} granted; \
         simulated, it really resets its machine if not fed) (took {:.1}s)",
        humantime::format_duration(crate::heartbeat::DEFAULT_HEARTBEAT_INTERVAL),
        span(WATCHDOG_TIMEOUT),
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// Act 2: the same outage, with the watchdog level.
async fn act_two(
    ctx: &Ctx<'_>,
    out: &mut Outcome,
    carry: &mut Carry,
    fleet: &Fleet,
    watchdog: &mut WatchdogOutcome,
) -> Result<(), String> {
    let world = ctx.world;
    let victim = db_node(world)?;
    out.node = Some(victim.clone());
    let wait = Timing::default().wait(WATCHDOG_TIMEOUT);
    // Right after a renewal of its Lease: the Lease goes stale only 12 s later, so
    // the companion's silence is what nodefence hears first, as it usually is.
    let renewed = world.lease_renewed(&victim);
    ctx.wait(
        "a Lease renewal of the node",
        Duration::from_secs(30),
        || world.lease_renewed(&victim) != renewed,
    )
    .await?;
    ctx.story.line("");
    ctx.intro(&[
        format!("Act 2. The same outage, again on the node db-0 runs on: {victim}. Its companion dies"),
        "with it. nodefence hears the silence, cannot read the BMC, marks the node, and releases it"
            .to_string(),
        "once its own hardware watchdog has certainly reset it (or it is off): the wait after the"
            .to_string(),
        format!("mark is {wait}."),
    ]);
    let mark = world.reset_mark();
    let writes = world.node_writes(&victim);
    let t0 = crate::clock::now();
    ctx.story.begin(t0);
    ctx.story.you(
        &victim,
        "the rack's power fails again: the machine is Off, its BMC answers only errors, its \
         companion dies with it",
    );
    world.bmc_fails(true);
    fleet.kill(&victim);
    world
        .set_power(&victim, MockPower::Off)
        .map_err(|e| e.to_string())?;
    carry.fenced = Some(victim.clone());

    let suspect = ctx
        .wait_step("suspect node", Duration::from_secs(30), t0, |s| {
            s.node == victim && s.is_nodefence("NodeSuspect")
        })
        .await?;
    watchdog.suspect_after = Some(ctx.elapsed(t0, suspect.at));
    ctx.wait_step(
        "mark for fencing (WatchdogFencing)",
        Duration::from_secs(30),
        t0,
        |s| s.node == victim && s.is_nodefence("WatchdogFencing"),
    )
    .await?;
    let released = ctx
        .wait_step(
            "release on the watchdog's proof",
            RELEASE_DEADLINE,
            t0,
            |s| s.node == victim && s.is_nodefence("Released"),
        )
        .await?;
    out.released_after = Some(ctx.elapsed(t0, released.at));
    let powered = world.power(&victim);
    if powered != Some(MockPower::Off) {
        return Err(format!(
            "{victim} was released while its machine reads {powered:?}, not Off"
        ));
    }
    let proof = ctx
        .story
        .find(t0, |s| {
            s.node == victim && s.is_nodefence("ResetByWatchdog")
        })
        .ok_or_else(|| format!("{victim} was released without a ResetByWatchdog Event"))?;
    if !proof.text.contains(&wait.to_string()) {
        return Err(format!(
            "the release's arithmetic is not the stated wait ({wait}): {}",
            proof.text
        ));
    }
    // The API server's own times: the mark is stored before nodefence counts from its
    // answer, the taint after nodefence decided.
    ctx.wait("the taint stored", Duration::from_secs(10), || {
        writes.taint().is_some()
    })
    .await?;
    let (Some(mark_at), Some(taint_at)) = (writes.mark(), writes.taint()) else {
        return Err(format!(
            "{victim} was released without a fencing mark stored"
        ));
    };
    let kept = taint_at.duration_since(mark_at).unwrap_or_default();
    watchdog.marked_after = Some(ctx.elapsed(t0, mark_at));
    watchdog.mark_to_release = Some(kept);
    if kept < wait.total() {
        return Err(format!(
            "released {} after the mark was stored, before the stated wait of {}",
            secs(kept),
            span_exact(wait.total())
        ));
    }
    let fired = fleet.fired();
    if !fired.is_empty() {
        return Err(format!(
            "the watchdog of {fired:?} reset a machine that should have run on"
        ));
    }
    ctx.wait(
        "db-0 Running on another node",
        Duration::from_secs(120),
        || world.db_running_on().is_some_and(|n| n != victim),
    )
    .await?;
    out.running_after = ctx
        .pod_running_elsewhere(t0, &victim)
        .or_else(|| Some(ctx.elapsed(t0, crate::clock::now())));
    out.power_commands = world.resets_since(mark);
    if !out.power_commands.is_empty() {
        return Err(format!(
            "nodefence sent {:?} to a machine whose BMC was dead",
            out.power_commands
        ));
    }
    Ok(())
}

/// `12.7425s`.
fn span_exact(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
}
