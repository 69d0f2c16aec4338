//! The scenarios, and what they share: the starting point (a whole cluster), waits
//! with deadlines, and the outcome each one reports.
//!
//! Every scenario starts from a whole cluster (every node Ready, no out-of-service
//! taint, db-0 Running), restoring it first when an earlier scenario left a machine
//! off: one unhealthy node at a time keeps nodefence's storm protection (more than 40%
//! of the nodes unhealthy at once) out of the story. `recovery` is the exception: it
//! needs a fenced node, and takes the one the previous scenario left, or fences one
//! itself.
//!
//! nodefence runs with the configuration each scenario needs ([`Profile`]): `nhc`
//! has it answer NodeHealthCheck's requests with a long `unhealthy_after` of its own,
//! and the daemon is restarted with it first when an earlier scenario ran with the
//! stock one.
//!
//! `vsphere-power-loss` and `vsphere-network-cut` play on a world of their own, whose
//! workers are VMs on a mock vCenter ([`Workers::Vms`]); they are not part of `all`
//! (the other scenarios' BMC is Redfish) and run alone or together (`vsphere`).
//!
//! `rack-power` runs alone too, at real time ([`Scenario::real_time`]): the watchdog
//! level's timing (the companions' heartbeat, `isolation_timeout`, the watchdog's own
//! timeout) is not scaled by `--speed`, so neither is its world. So does `power-loss`
//! with `--companions` (a companion on every node; [`Profile::Companions`]), and
//! with `--kill-leader-after` (a standby replica too, the leader killed mid-incident).

mod bmc_down;
mod network_cut;
pub mod nhc;
mod power_loss;
mod rack_power;
mod recovery;
mod vsphere;

use std::time::{Duration, SystemTime};

use nodefence_mocks::redfish::MockPower;
use serde::Serialize;
use tokio::time::Instant;

use super::cluster::{POD, Workers, World};
use super::config::Profile;
use super::narrate::span;
use super::style::Style;
use super::timeline::{Fact, Step, Story};

/// The scenarios, in the order `all` runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    PowerLoss,
    NetworkCut,
    BmcDown,
    Recovery,
    Nhc,
    /// Power loss of a worker that is a VM on vCenter (not in [`Scenario::ALL`]).
    VspherePowerLoss,
    /// A network cut of a worker that is a VM on vCenter: PowerOffVM_Task.
    VsphereNetworkCut,
    /// A machine loses power with its BMC: nothing released without the watchdog
    /// level, released on its hardware watchdog with it (not in [`Scenario::ALL`];
    /// real time).
    RackPower,
}

impl Scenario {
    pub const ALL: [Scenario; 5] = [
        Scenario::PowerLoss,
        Scenario::NetworkCut,
        Scenario::BmcDown,
        Scenario::Recovery,
        Scenario::Nhc,
    ];

    /// The scenarios whose workers are VMs, in the order `vsphere` runs them.
    pub const VSPHERE: [Scenario; 2] = [Scenario::VspherePowerLoss, Scenario::VsphereNetworkCut];

    /// The name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::PowerLoss => "power-loss",
            Scenario::NetworkCut => "network-cut",
            Scenario::BmcDown => "bmc-down",
            Scenario::Recovery => "recovery",
            Scenario::Nhc => "nhc",
            Scenario::VspherePowerLoss => "vsphere-power-loss",
            Scenario::VsphereNetworkCut => "vsphere-network-cut",
            Scenario::RackPower => "rack-power",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Scenario::PowerLoss => "power loss",
            Scenario::NetworkCut => "unreachable but On (network cut)",
            Scenario::BmcDown => "BMC unreachable",
            Scenario::Recovery => "recovery",
            Scenario::Nhc => "NodeHealthCheck asks, nodefence proves",
            Scenario::VspherePowerLoss => "a VM's host loses power (vSphere)",
            Scenario::VsphereNetworkCut => "a VM cut off but poweredOn (vSphere)",
            Scenario::RackPower => "a machine loses power with its BMC (the watchdog level)",
        }
    }

    /// Whether it plays at real time, whatever `--speed` says: the watchdog level's
    /// timing is not scaled.
    pub fn real_time(self) -> bool {
        self == Scenario::RackPower
    }

    /// What the workers' machines are in the world it plays in.
    pub fn workers(self) -> Workers {
        match self {
            Scenario::VspherePowerLoss | Scenario::VsphereNetworkCut => Workers::Vms,
            _ => Workers::BmcSystems,
        }
    }

    /// How nodefence is configured for it.
    pub fn profile(self) -> Profile {
        match self {
            Scenario::Nhc => Profile::Remediator,
            _ => Profile::Stock,
        }
    }
}

/// What a scenario showed. Durations are cluster time since its first action.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub scenario: Scenario,
    pub ok: bool,
    /// The node the scenario happened to.
    pub node: Option<String>,
    /// One line: what happened, or what did not happen in time.
    pub summary: String,
    pub released_after: Option<Duration>,
    pub running_after: Option<Duration>,
    pub untainted_after: Option<Duration>,
    /// `(node, ResetType)` the BMC received during the scenario.
    pub power_commands: Vec<(String, String)>,
    /// The remediation request the scenario was about (`nhc`).
    pub request: Option<RequestOutcome>,
    /// Whether the node still carried the out-of-service taint at the end (`nhc`).
    pub taint_left: Option<bool>,
    /// What the watchdog level did (`rack-power`).
    pub watchdog: Option<WatchdogOutcome>,
    /// What the companions (and a standby) showed (`power-loss --companions`).
    pub companions: Option<CompanionOutcome>,
    /// The scenario's story, from its first action on (each act's from its own first
    /// action, one after the other).
    pub steps: Vec<StepRecord>,
}

/// What `rack-power` showed, act by act. Durations are cluster time (here real time)
/// since each act's power loss.
#[derive(Debug, Clone, Default)]
pub struct WatchdogOutcome {
    /// Act 1 (no watchdog level): when nodefence said it could not read the machine.
    pub unreadable_after: Option<Duration>,
    /// Act 1: how long nothing was released before the act ended.
    pub held_for: Duration,
    /// Act 2: when the node turned suspect (its companion silent).
    pub suspect_after: Option<Duration>,
    /// Act 2: when the API server stored the fencing mark.
    pub marked_after: Option<Duration>,
    /// Act 2: the wait the Events stated (isolation + watchdog + drift + allowance).
    pub stated_wait: Duration,
    /// Act 2: from the mark stored to the taint stored.
    pub mark_to_release: Option<Duration>,
}

/// What `power-loss --companions` showed. Durations are real time since the power
/// loss.
#[derive(Debug, Clone, Default)]
pub struct CompanionOutcome {
    /// When the node turned suspect (`NodeSuspect`).
    pub suspect_after: Option<Duration>,
    /// Whether that was for its companion's silence (not its Lease).
    pub suspect_by_companion: bool,
    /// When the leader was killed (`--kill-leader-after`).
    pub leader_killed_after: Option<Duration>,
    /// When the standby acquired the leader Lease (its `acquireTime`).
    pub new_leader_after: Option<Duration>,
    /// Whether the release came after the leader was killed (the standby's).
    pub released_by_standby: Option<bool>,
    /// The nodes whose simulated watchdog reset a powered machine (none expected).
    pub watchdog_resets: Vec<String>,
}

/// One step of a scenario's story, as the JSON summary lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    /// Cluster time since the scenario's first action.
    pub after: Duration,
    /// The node concerned ("" when none).
    pub node: String,
    pub actor: &'static str,
    /// What happened, as one word ([`Fact::key`]).
    pub what: String,
    /// The line as printed, its times on the scenario's clock.
    pub text: String,
}

impl StepRecord {
    fn new(step: &Step, t0: SystemTime, speed: f64) -> Self {
        Self {
            after: step
                .at
                .duration_since(t0)
                .unwrap_or_default()
                .mul_f64(speed),
            node: step.node.clone(),
            actor: step.actor.label(),
            what: step.fact.key(),
            text: step.text_since(t0, speed),
        }
    }
}

/// What became of a remediation request. Durations are cluster time since the
/// scenario's first action.
#[derive(Debug, Clone, Default)]
pub struct RequestOutcome {
    /// `namespace/name`.
    pub name: String,
    pub created_after: Option<Duration>,
    /// Each change of its conditions, as narrated (`Processing=True (PoweringOff)`).
    pub conditions: Vec<String>,
    pub succeeded_after: Option<Duration>,
    /// When its requester asked for its deletion.
    pub deleted_after: Option<Duration>,
    /// When it was gone (nodefence's finalizer removed).
    pub gone_after: Option<Duration>,
}

/// What a scenario leaves for the next one.
#[derive(Debug, Default)]
pub struct Carry {
    /// A node nodefence released whose machine is still off.
    pub fenced: Option<String>,
}

/// What the scenarios work with.
pub struct Ctx<'a> {
    pub world: &'a World,
    pub story: &'a Story,
    pub style: Style,
    /// Power loss: when to pull the plug after a Lease renewal (`None`: at once).
    pub pull_after_renewal: Option<Duration>,
    /// Power loss: a companion on every node, nodefence's listener on.
    pub companions: bool,
    /// Power loss with companions: kill the leader this long after the plug (a
    /// standby runs).
    pub kill_leader_after: Option<Duration>,
}

impl Ctx<'_> {
    /// How nodefence runs for `scenario`: its own profile, or the companions' for
    /// `power-loss --companions`.
    pub fn profile_for(&self, scenario: Scenario) -> Profile {
        if self.companions && scenario == Scenario::PowerLoss {
            Profile::Companions
        } else {
            scenario.profile()
        }
    }

    /// Waits until `check` holds, for at most `cluster` (cluster time) plus some slack.
    pub async fn wait(
        &self,
        what: &str,
        cluster: Duration,
        mut check: impl FnMut() -> bool,
    ) -> Result<(), String> {
        let end = Instant::now() + self.world.within(cluster);
        loop {
            if check() {
                return Ok(());
            }
            if !self.world.daemon_alive() {
                return Err(format!("nodefence stopped while waiting for {what}"));
            }
            if Instant::now() >= end {
                return Err(format!("no {what} within {} (cluster time)", span(cluster)));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for the first step since `since` that matches.
    pub async fn wait_step(
        &self,
        what: &str,
        cluster: Duration,
        since: SystemTime,
        matches: impl Fn(&Step) -> bool,
    ) -> Result<Step, String> {
        let mut found = None;
        self.wait(what, cluster, || {
            found = self.story.find(since, &matches);
            found.is_some()
        })
        .await?;
        found.ok_or_else(|| format!("no {what}"))
    }

    /// Cluster time from `t0` to `at`.
    pub fn elapsed(&self, t0: SystemTime, at: SystemTime) -> Duration {
        at.duration_since(t0)
            .unwrap_or_default()
            .mul_f64(self.world.speed)
    }

    /// Waits (from `t0`) for nodefence to release `victim` (within `release`) and
    /// then for db-0 to run on another node (within `run`), records both in `out`,
    /// and returns the release step and where db-0 runs now.
    pub async fn released_and_moved(
        &self,
        out: &mut Outcome,
        victim: &str,
        t0: SystemTime,
        release: Duration,
        run: Duration,
    ) -> Result<(Step, String), String> {
        let released = self
            .wait_step("out-of-service taint from nodefence", release, t0, |s| {
                s.node == victim && s.is_nodefence("Released")
            })
            .await?;
        out.released_after = Some(self.elapsed(t0, released.at));
        let world = self.world;
        self.wait("db-0 Running on another node", run, || {
            world.db_running_on().is_some_and(|n| n != victim)
        })
        .await?;
        let now_on = db_node(world)?;
        out.running_after = self
            .pod_running_elsewhere(t0, victim)
            .or_else(|| Some(self.elapsed(t0, crate::clock::now())));
        Ok((released, now_on))
    }

    /// Cuts `victim`'s power (`what` is the story's line for it), waits for its
    /// release and db-0 elsewhere ([`Self::released_and_moved`]), and checks that no
    /// power command went out: the `machine` (as the summary calls it) was already off.
    /// Returns where db-0 runs now.
    pub async fn lose_power(
        &self,
        out: &mut Outcome,
        carry: &mut Carry,
        victim: &str,
        what: &str,
        machine: &str,
    ) -> Result<String, String> {
        self.lose_power_then(out, carry, victim, what, machine, |_| async { Ok(()) })
            .await
            .map(|(now_on, ())| now_on)
    }

    /// [`Self::lose_power`], running `then` (given the moment of the loss) right
    /// after the power is cut and before waiting for the release; returns what it
    /// returned too.
    pub async fn lose_power_then<T, F, Fut>(
        &self,
        out: &mut Outcome,
        carry: &mut Carry,
        victim: &str,
        what: &str,
        machine: &str,
        then: F,
    ) -> Result<(String, T), String>
    where
        F: FnOnce(SystemTime) -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        let world = self.world;
        let mark = world.reset_mark();
        let t0 = crate::clock::now();
        self.story.begin(t0);
        self.story.you(victim, what);
        world
            .set_power(victim, MockPower::Off)
            .map_err(|e| e.to_string())?;
        carry.fenced = Some(victim.to_string());
        let then = then(t0).await?;
        let (_released, now_on) = self
            .released_and_moved(
                out,
                victim,
                t0,
                Duration::from_secs(300),
                Duration::from_secs(600),
            )
            .await?;
        out.power_commands = world.resets_since(mark);
        if !out.power_commands.is_empty() {
            return Err(format!(
                "nodefence sent {:?} to a {machine} that was already off",
                out.power_commands
            ));
        }
        Ok((now_on, then))
    }

    /// When db-0 was reported Running on a node other than `not_on`, since `t0`.
    pub fn pod_running_elsewhere(&self, t0: SystemTime, not_on: &str) -> Option<Duration> {
        let wanted = format!("{}/{POD}", super::cluster::NAMESPACE);
        self.story
            .find(t0, |s| {
                s.node != not_on
                    && matches!(&s.fact, Fact::Sim { kind, pod: Some(p) }
                        if *kind == nodefence_mocks::kube::sim::SimEventKind::PodRunning && *p == wanted)
            })
            .map(|s| self.elapsed(t0, s.at))
    }

    /// Prints the scenario's introduction.
    pub fn intro(&self, lines: &[String]) {
        for line in lines {
            self.story.line(format!("  {line}"));
        }
        self.story.line("");
    }

    /// Prints a set-up note (work done so the scenario starts where it should).
    pub fn setup_note(&self, text: &str) {
        self.story
            .line(self.style.dim(&format!("  (setup) {text}")));
    }

    /// Restarts nodefence with `profile`'s configuration unless it runs with it, and
    /// waits until it leads again.
    pub async fn use_profile(&self, profile: Profile) -> Result<(), String> {
        let world = self.world;
        if world.profile() == Some(profile) {
            return Ok(());
        }
        let started = Instant::now();
        world
            .restart_daemon(profile)
            .await
            .map_err(|e| format!("nodefence could not be restarted: {e:#}"))?;
        self.wait("nodefence leading again", Duration::from_secs(120), || {
            world.nodefence_leads()
        })
        .await?;
        // Let its watches list the nodes (and the requests) before the first failure.
        tokio::time::sleep(Duration::from_millis(500)).await;
        self.setup_note(&format!(
            "nodefence restarted with {} (took {:.1}s)",
            profile.describe(&world.wording()),
            started.elapsed().as_secs_f64()
        ));
        Ok(())
    }
}

/// Runs one scenario and prints its header and result line.
pub async fn run(
    scenario: Scenario,
    number: (usize, usize),
    ctx: &Ctx<'_>,
    carry: &mut Carry,
) -> Outcome {
    let style = ctx.style;
    let title = format!("── {}/{}  {} ", number.0, number.1, scenario.title());
    let rule = "─".repeat(78usize.saturating_sub(title.chars().count()));
    ctx.story.line("");
    ctx.story.line(style.bold(&format!("{title}{rule}")));
    let mut out = Outcome {
        scenario,
        ok: false,
        node: None,
        summary: String::new(),
        released_after: None,
        running_after: None,
        untainted_after: None,
        power_commands: Vec::new(),
        request: None,
        taint_left: None,
        watchdog: None,
        companions: None,
        steps: Vec::new(),
    };
    let result = match switch_profile(ctx, scenario).await {
        Err(e) => Err(e),
        Ok(()) => match scenario {
            Scenario::PowerLoss => power_loss::run(ctx, &mut out, carry).await,
            Scenario::NetworkCut => network_cut::run(ctx, &mut out, carry).await,
            Scenario::BmcDown => bmc_down::run(ctx, &mut out, carry).await,
            Scenario::Recovery => recovery::run(ctx, &mut out, carry).await,
            Scenario::Nhc => nhc::run(ctx, &mut out, carry).await,
            Scenario::VspherePowerLoss => vsphere::power_loss(ctx, &mut out, carry).await,
            Scenario::VsphereNetworkCut => vsphere::network_cut(ctx, &mut out, carry).await,
            Scenario::RackPower => rack_power::run(ctx, &mut out, carry).await,
        },
    };
    close_scene(ctx, &mut out).await;
    match result {
        Ok(()) => {
            out.ok = true;
            for (i, line) in wrap(&out.summary, 96).iter().enumerate() {
                let mark = if i == 0 {
                    style.green("✓")
                } else {
                    " ".into()
                };
                ctx.story.line(format!("  {mark} {line}"));
            }
        }
        Err(why) => {
            out.ok = false;
            out.summary = why;
            for (i, line) in wrap(&out.summary, 96).iter().enumerate() {
                let mark = if i == 0 { style.red("✗") } else { " ".into() };
                ctx.story.line(format!("  {mark} {}", style.red(line)));
            }
        }
    }
    out
}

/// Lets the last steps of the scene arrive, ends it, and keeps its steps in `out`
/// (after those of an earlier scene of the same scenario).
pub async fn close_scene(ctx: &Ctx<'_>, out: &mut Outcome) {
    tokio::time::sleep(super::timeline::REORDER_WINDOW + Duration::from_millis(100)).await;
    ctx.story.end().await;
    if let Some((t0, steps)) = ctx.story.take_scene() {
        let speed = ctx.world.speed;
        out.steps
            .extend(steps.iter().map(|s| StepRecord::new(s, t0, speed)));
    }
}

/// Restarts nodefence with the configuration `scenario` needs, from a whole cluster,
/// when it runs with another one.
async fn switch_profile(ctx: &Ctx<'_>, scenario: Scenario) -> Result<(), String> {
    let profile = ctx.profile_for(scenario);
    if ctx.world.profile() == Some(profile) {
        return Ok(());
    }
    make_whole(ctx).await?;
    ctx.use_profile(profile).await
}

/// Restores the cluster when an earlier scenario left it broken, and waits until it
/// is whole: every machine On with its kubelet running, every node Ready, no
/// out-of-service taint left (nodefence removes its own), db-0 Running.
pub async fn make_whole(ctx: &Ctx<'_>) -> Result<(), String> {
    let world = ctx.world;
    let tainted = super::cluster::WORKERS
        .iter()
        .any(|w| world.out_of_service(w));
    world.bmc_hangs(false);
    let mut done = Vec::new();
    for w in super::cluster::WORKERS {
        if world.power(w) != Some(nodefence_mocks::redfish::MockPower::On) {
            world
                .set_power(w, nodefence_mocks::redfish::MockPower::On)
                .map_err(|e| e.to_string())?;
            done.push(format!("{w} powered back on"));
        } else if !world.kubelet_running(w) {
            world.set_network(w, true);
            done.push(format!("{w} reconnected"));
        }
    }
    if done.is_empty() && world.whole() {
        return Ok(());
    }
    let started = Instant::now();
    ctx.wait(
        "whole cluster (nodes Ready, taints removed, db-0 Running)",
        Duration::from_secs(300),
        || world.whole(),
    )
    .await?;
    ctx.setup_note(&format!(
        "{}: Ready again{} ({} cluster time)",
        done.join(", "),
        if tainted {
            ", and nodefence removed its taint"
        } else {
            ""
        },
        secs(started.elapsed().mul_f64(world.speed))
    ));
    Ok(())
}

/// Splits `text` into lines of at most `width` characters, at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// `12.3s` (cluster time).
pub fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// The node db-0 runs on now, or an error saying it does not run.
pub fn db_node(world: &World) -> Result<String, String> {
    world
        .db_running_on()
        .ok_or_else(|| format!("{POD} is not Running"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn wrapping() {
        assert_eq!(super::wrap("a bb ccc dd", 6), vec!["a bb", "ccc dd"]);
        assert_eq!(super::wrap("", 6), vec![""]);
    }
}
