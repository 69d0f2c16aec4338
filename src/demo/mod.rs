//! `nodefence demo`: the whole story on one machine, no cluster, no root, no set-up.
//!
//! Everything runs in this process, on loopback: fake-kube (the Kubernetes API over
//! plain HTTP) with its simulated control plane and kubelets, a control-plane node and
//! three workers whose machines are the systems of one mock Redfish BMC (power and
//! kubelet linked: pull the plug and the kubelet falls silent), a one-replica
//! StatefulSet with a ReadWriteOnce volume, and the real daemon
//! ([`crate::daemon::run`]) talking to fake-kube and the BMC as it would to a real
//! cluster. Every timing, the simulation's and nodefence's together, is divided by
//! `--speed`; the times shown are cluster time.
//!
//! Then it tells what happens in five scenarios (power loss, a network cut with the
//! machine still On, an unreachable BMC, recovery, and NodeHealthCheck asking
//! nodefence to fence a node), one line per step from the simulation's timeline,
//! nodefence's own Events, the BMC and the remediation requests, and ends with a
//! summary. Others run alone: `vsphere-power-loss` and `vsphere-network-cut`, in a
//! world whose workers are VMs on a mock vCenter (nodefence reads `poweredOff`
//! through its vSphere driver, or sends `PowerOffVM_Task`); and `rack-power`, at real
//! time, where a machine loses power with its BMC: nothing is released by default,
//! then, with a companion on every node and `watchdog_fencing`, the machine is
//! released on its hardware watchdog after the stated wait. `power-loss --companions`
//! plays at real time too, a companion beating from every node (and with
//! `--kill-leader-after`, a standby replica beside the leader, which is killed
//! mid-incident): the benches time it. Each scenario has
//! deadlines: the exit code is 1 when an expected outcome did not happen in time, so
//! the demo doubles as a smoke test.
//!
//! Layout: `cluster` (the world: start, levers, queries, teardown), `config` (the
//! daemon's files and scaled policy), `companions` (`rack-power`'s companions and
//! their simulated watchdogs), `feeds` (where steps come from), `narrate` (their
//! words), `timeline` and `printer` (ordering and printing), `scenarios`, `summary`,
//! `runtime` (a runtime of its own, logging to a file), `style` (colours).

mod cluster;
mod companions;
mod config;
mod feeds;
mod narrate;
mod printer;
mod runtime;
mod scenarios;
mod style;
mod summary;
mod timeline;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

use cluster::{CONTROL_PLANE, POD, WORKERS, Workers, World};
pub use scenarios::Scenario;
use scenarios::{Carry, Ctx, Outcome};
use style::Style;
use timeline::Story;

/// The default time scale: the whole demo (five scenarios) takes about 86 s; 28 s at 20.
pub const DEFAULT_SPEED: f64 = 6.0;

/// Exit codes of `nodefence demo`.
pub mod exit {
    /// Every scenario showed what it should, in time.
    pub const OK: u8 = 0;
    /// A scenario's expected outcome did not happen within its deadline, or the demo
    /// could not start.
    pub const FAILED: u8 = 1;
    /// Interrupted (Ctrl-C); everything was stopped.
    pub const INTERRUPTED: u8 = 130;
}

/// How to run the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Time scale (10.0: ten times faster than a real cluster).
    pub speed: f64,
    /// The scenarios, run in this order.
    pub scenarios: Vec<Scenario>,
    pub no_color: bool,
    /// Print the summary as JSON on standard output (the story goes to standard error).
    pub json: bool,
    /// Where the daemon's and the simulation's logs go (default: in the temp directory).
    pub log_file: Option<PathBuf>,
    /// Power loss: pull the plug this long (cluster time) after a Lease renewal of the
    /// node, instead of at once (the recovery bench sweeps it across the interval).
    pub pull_after_renewal: Option<Duration>,
    /// How long after its Lease renewals each worker's kubelet computes its node
    /// status (zero: together; the recovery bench sweeps it).
    pub status_after_lease: Duration,
    /// Power loss: a companion on every node, nodefence's listener on (plays at
    /// real time: the companions' timing is not scaled).
    pub companions: bool,
    /// Power loss with companions: a standby replica runs too, and the leader is
    /// killed this long after the plug.
    pub kill_leader_after: Option<Duration>,
    /// The leader Lease's duration (`None`: client-go's 15 s, scaled).
    pub leader_lease: Option<Duration>,
}

/// Runs the demo and returns the exit code. Must be called inside a tokio runtime;
/// the demo itself runs on a runtime and thread of its own.
pub async fn run(options: DemoOptions) -> u8 {
    let log_path = options
        .log_file
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("nodefence-demo.log"));
    let log = match runtime::file_logger(&log_path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e:#}");
            return exit::FAILED;
        }
    };
    match runtime::run_isolated(log, move || demo(options, log_path)).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            exit::FAILED
        }
    }
}

async fn demo(options: DemoOptions, log_path: PathBuf) -> u8 {
    let started = Instant::now();
    let (out, terminal): (Box<dyn Write + Send>, bool) = if options.json {
        (Box::new(std::io::stderr()), std::io::stderr().is_terminal())
    } else {
        (Box::new(std::io::stdout()), std::io::stdout().is_terminal())
    };
    let style = Style::detect(options.no_color, terminal);
    // The watchdog level's timing is not scaled: its scenario plays at real time, and
    // so does one with companions.
    let real_time = options.companions || options.scenarios.iter().any(|s| s.real_time());
    let speed = if real_time { 1.0 } else { options.speed };
    let (story, printer) = Story::start(out, style, speed);
    story.line(style.bold(
        "nodefence demo: a simulated cluster, a mock BMC and the real nodefence daemon, in this process",
    ));
    let profile = match options.scenarios.first() {
        Some(Scenario::PowerLoss) if options.companions => config::Profile::Companions,
        Some(s) => s.profile(),
        None => config::Profile::Stock,
    };
    // One world for every scenario: VMs when the first one plays on VMs.
    let workers = options
        .scenarios
        .first()
        .map_or(Workers::BmcSystems, |s| s.workers());
    let standby = options.kill_leader_after.is_some();
    let code = match World::start(
        speed,
        options.status_after_lease,
        &story,
        profile,
        workers,
        standby,
        options.leader_lease,
    )
    .await
    {
        Err(e) => {
            story.line(style.red(&format!("error: the demo could not start: {e:#}")));
            exit::FAILED
        }
        Ok(mut world) => {
            header(&story, style, &world, &log_path, real_time);
            let ran = tokio::select! {
                outcomes = scenarios(&world, &story, style, &options) => Some(outcomes),
                _ = tokio::signal::ctrl_c() => None,
            };
            if let Some(e) = world.daemon_error().await {
                story.line(style.red(&format!("nodefence stopped: {e}")));
            }
            story.line("");
            story
                .line(style.dim("  stopping the daemon, the simulation, the BMC and fake-kube..."));
            world.stop().await;
            let elapsed = started.elapsed();
            match ran {
                None => {
                    story.line(style.yellow("interrupted: everything was stopped"));
                    exit::INTERRUPTED
                }
                Some(Err(e)) => {
                    story.line(style.red(&format!("✗ {e}")));
                    exit::FAILED
                }
                Some(Ok(outcomes)) => {
                    finish(&story, style, &outcomes, speed, real_time, elapsed);
                    if options.json {
                        println!("{}", summary::json(&outcomes, speed, elapsed));
                    }
                    if outcomes.iter().all(|o| o.ok) {
                        exit::OK
                    } else {
                        exit::FAILED
                    }
                }
            }
        }
    };
    drop(story);
    let _ = tokio::time::timeout(Duration::from_secs(5), printer).await;
    code
}

/// The world, nodefence's settings, the time scale (`real_time`: a scenario that
/// does not follow `--speed`) and where the logs go.
fn header(story: &Story, style: Style, world: &World, log: &Path, real_time: bool) {
    let w = &world.wording();
    let row = |name: &str, text: String| {
        story.line(format!("  {}  {text}", style.dim(&format!("{name:<9}"))))
    };
    story.line("");
    row(
        "cluster",
        format!(
            "{CONTROL_PLANE} (control plane, no BMC: nodefence leaves it alone), {}..{}",
            WORKERS[0],
            WORKERS[WORKERS.len() - 1].trim_start_matches("worker-")
        ),
    );
    row(
        "",
        match world.workers() {
            Workers::BmcSystems => {
                "each worker is one system of a Redfish BMC (mock, on 127.0.0.1)".to_string()
            }
            Workers::Vms => "each worker is a VM on a vCenter (mock, on 127.0.0.1), found by its \
                             Node's systemUUID (driver vsphere)"
                .to_string(),
        },
    );
    row(
        "workload",
        format!("StatefulSet db: {POD} with a ReadWriteOnce volume (CSI)"),
    );
    row(
        "nodefence",
        format!(
            "lease_stale_after {}, unhealthy_after {}, {} Off readings {} apart, recovered_after {}",
            w.lease_stale_after.map_or("off".into(), narrate::span),
            narrate::span(w.unhealthy_after),
            config::CONFIRM_READINGS,
            humantime::format_duration(crate::power::confirm::ConfirmPolicy::default().interval),
            narrate::span(w.recovered_after),
        ),
    );
    row(
        "",
        format!(
            "{}; NodeFenceRemediation CRDs and template {}/{} installed",
            if world.profile() == Some(config::Profile::Remediator) {
                "answers remediation requests"
            } else {
                "requests off"
            },
            cluster::REMEDIATION_NAMESPACE,
            cluster::REMEDIATION_TEMPLATE,
        ),
    );
    row(
        "NHC",
        "the NodeHealthCheck operator (stand-in), idle until a NodeHealthCheck names the template"
            .to_string(),
    );
    row(
        "time",
        if real_time {
            "real time: --speed does not apply to this scenario (the watchdog \
                        level's timing, its companions' heartbeat and the watchdog's own \
                        timeout, is not scaled)"
                .to_string()
        } else {
            format!(
                "cluster time, {}x faster than real: +60.0s on screen took {:.1}s",
                world.speed,
                60.0 / world.speed
            )
        },
    );
    row(
        "logs",
        format!("{} (daemon, simulation, servers)", log.display()),
    );
}

/// Waits for the cluster and nodefence, then runs the scenarios.
async fn scenarios(
    world: &World,
    story: &Story,
    style: Style,
    options: &DemoOptions,
) -> anyhow::Result<Vec<Outcome>> {
    let which = &options.scenarios;
    let ctx = Ctx {
        world,
        story,
        style,
        pull_after_renewal: options.pull_after_renewal,
        companions: options.companions,
        kill_leader_after: options.kill_leader_after,
    };
    let started = Instant::now();
    ctx.wait(
        "ready cluster (nodes Ready, db-0 Running, nodefence leading)",
        Duration::from_secs(300),
        || world.whole() && world.nodefence_leads(),
    )
    .await
    .map_err(anyhow::Error::msg)?;
    // Let nodefence's watches list the nodes before the first failure.
    tokio::time::sleep(Duration::from_millis(500)).await;
    story.line("");
    story.line(format!(
        "  cluster ready after {:.1}s: every node Ready, {POD} Running on {}, nodefence leading",
        started.elapsed().as_secs_f64(),
        world.db_running_on().unwrap_or_default()
    ));
    let mut carry = Carry::default();
    let mut outcomes = Vec::new();
    for (i, s) in which.iter().enumerate() {
        outcomes.push(scenarios::run(*s, (i + 1, which.len()), &ctx, &mut carry).await);
    }
    Ok(outcomes)
}

fn finish(
    story: &Story,
    style: Style,
    outcomes: &[Outcome],
    speed: f64,
    real_time: bool,
    elapsed: Duration,
) {
    story.line("");
    story.line(style.bold("Summary"));
    for line in summary::table(outcomes, style).lines() {
        story.line(line.to_string());
    }
    story.line("");
    story.line(if real_time {
        format!(
            "  times are real time since each act's first action; the demo took {:.1}s",
            elapsed.as_secs_f64()
        )
    } else {
        format!(
            "  times are cluster time since each scenario's first action ({speed}x: +60.0s took {:.1}s); \
             the demo took {:.1}s",
            60.0 / speed,
            elapsed.as_secs_f64()
        )
    });
    let failed = outcomes.iter().filter(|o| !o.ok).count();
    if failed == 0 {
        story.line(style.green(&format!(
            "  all {} scenario(s) behaved as expected",
            outcomes.len()
        )));
    } else {
        story.line(style.red(&format!(
            "  {failed} scenario(s) did not behave as expected"
        )));
    }
}
